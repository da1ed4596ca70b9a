//! Row 11 (issue 18): the A2A request path, one `SendMessage` round trip at a
//! time per connection over real sockets — JSON-RPC parse, task creation and
//! persistence, the `hai-assistant` plugin call with its streamed chunks
//! collected into the answer artifact, and the finished task serialised back.
//!
//! There is no comparison process: the row exists so that the A2A path is in
//! every smoke run and its cost is on record beside the other transports.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::fixture::temp_dir;
use crate::load::{self, Segment, Target};
use crate::procs::{self, NodeSpec};
use crate::report::{Row, fmt_rate};
use crate::settings::Settings;

/// One new task per request (no `contextId`: each is its own conversation, so
/// no context's task cap is reached however long the row runs).
fn send_message(conn: usize, seq: u64) -> Bytes {
    let request = json!({
        "jsonrpc": "2.0",
        "id": seq,
        "method": "SendMessage",
        "params": {"message": {
            "messageId": format!("bench-{conn}-{seq}"),
            "role": "ROLE_USER",
            "parts": [{"text": format!("bench message {seq}")}],
        }},
    });
    Bytes::from(request.to_string())
}

/// A correct answer: the task completed with its answer artifact.
fn completed(status: u16, body: &[u8]) -> bool {
    status == 200
        && serde_json::from_slice::<Value>(body).is_ok_and(|answer| {
            let task = &answer["result"]["task"];
            task["status"]["state"] == "TASK_STATE_COMPLETED"
                && task["artifacts"][0]["parts"][0]["text"]
                    .as_str()
                    .is_some_and(|text| text.starts_with("You said"))
        })
}

pub async fn row11(settings: &Settings) -> Result<Row> {
    let data = temp_dir()?;
    let (node, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: data.path(),
        plugins: &["hai-assistant", "inspection-tools"],
        // Every connection of the driver comes from one address, which the node's
        // per-address bounds are for. Each connection runs one task at a time; twice
        // that leaves room for a task's slot, freed just after its answer.
        env: &[
            (
                "AGORA_A2A__MAX_RUNNING_TASKS_PER_IP",
                (settings.connections * 2).to_string(),
            ),
            ("AGORA_A2A__NEW_TASKS_PER_IP_PER_MINUTE", u32::MAX.to_string()),
            // One address stores every task of the run: the per-client quotas are
            // for many clients, not for the load driver.
            ("AGORA_A2A__MAX_STORED_TASKS_PER_CLIENT", u64::MAX.to_string()),
            (
                "AGORA_A2A__MAX_STORED_TASK_BYTES_PER_CLIENT",
                u64::MAX.to_string(),
            ),
            ("AGORA_A2A__MAX_STORED_TASK_BYTES", u64::MAX.to_string()),
        ],
    })?;
    let target = Target {
        addr: node.addr,
        transport: Default::default(),
        path: "/a2a".into(),
        headers: vec![("A2A-Version".into(), "1.0".into())],
        body: Arc::new(send_message),
        check: Arc::new(completed),
    };
    let (status, reply) = load::one(&target, send_message(0, u64::MAX)).await?;
    if !completed(status, &reply) {
        bail!(
            "the node did not answer SendMessage: HTTP {status} {}",
            String::from_utf8_lossy(&reply)
        );
    }
    let mut total = Segment::empty();
    let mut cpu_seconds = 0.0;
    let mut round_rates = Vec::new();
    for round in 0..settings.rounds as u64 {
        let base = (round * 2 + 1) << 32;
        load::closed_loop(
            &target,
            settings.connections,
            Duration::ZERO,
            settings.warmup,
            base,
        )
        .await;
        let cpu_before = node.cpu_seconds();
        let measured = load::closed_loop(
            &target,
            settings.connections,
            Duration::ZERO,
            settings.duration,
            base + (1 << 32),
        )
        .await;
        cpu_seconds += node.cpu_seconds() - cpu_before;
        round_rates.push(measured.rate());
        total.merge(&measured);
    }
    let status = if total.failed > 0 {
        "failed".to_string()
    } else if settings.smoke {
        "smoke run (not a result)".to_string()
    } else {
        "measured".to_string()
    };
    Ok(Row {
        id: 11,
        measure: "A2A SendMessage round trip (hai-assistant), closed loop".into(),
        node: format!(
            "{} req/s, p50 {:.2} ms, p99 {:.2} ms",
            fmt_rate(total.rate()),
            total.p(0.5),
            total.p(0.99)
        ),
        comparison: "—".into(),
        ratio: format!(
            "{} req per CPU-second",
            fmt_rate(total.ok as f64 / f64::max(cpu_seconds, 1e-9))
        ),
        target: "— (no target; keeps the A2A path in the smoke run)".into(),
        status,
        raw: json!({
            "connections": settings.connections,
            "ok": total.ok, "failed": total.failed, "first_failure": total.first_failure,
            "seconds": total.elapsed.as_secs_f64(), "rate_per_s": total.rate(),
            "round_rates": round_rates, "server_cpu_seconds": cpu_seconds,
            "p50_ms": total.p(0.5), "p99_ms": total.p(0.99), "max_ms": total.p(1.0),
        }),
    })
}
