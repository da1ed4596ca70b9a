//! Benchmark plugin for row 6 (HAI time to first chunk): an assistant that
//! streams one chunk as its first act and returns, so the time a client waits
//! for its first `assistant_message_chunk` is the host's overhead plus this
//! plugin's call (measured on its own in process, like row 8).

use agora_plugin_sdk::prelude::*;

struct BenchHai;

/// What every answer says; the harness checks the first chunk carries it.
const ANSWER: &str = "ok";

impl Plugin for BenchHai {
    fn manifest() -> Manifest {
        Manifest::new("bench-hai", env!("CARGO_PKG_VERSION"))
            .description("Answers every chat message at once; measures the HAI host overhead")
            .assistant()
    }

    fn handle(_message: Message) -> Result<String, Failure> {
        host::emit("chunk", &json!({"content": ANSWER}))
            .map_err(|e| Failure::internal(format!("cannot stream: {e}")))?;
        reply(json!({"content": ANSWER}))
    }
}

export_plugin!(BenchHai);
