//! Benchmark plugin for row 8 (plugin call overhead): `bench:empty:v1` answers
//! nothing whatever it is given, so a call measures only what the host pays to
//! instantiate, pass the message in, call and take the reply out.

use agora_plugin_sdk::prelude::*;

struct BenchEmpty;

impl Plugin for BenchEmpty {
    fn manifest() -> Manifest {
        Manifest::new("bench-empty", env!("CARGO_PKG_VERSION"))
            .description("Does nothing; measures the host's per-call overhead")
            .resource("bench:empty:v1", "Answers an empty string", false)
    }

    fn handle(_message: Message) -> Result<String, Failure> {
        Ok(String::new())
    }
}

export_plugin!(BenchEmpty);
