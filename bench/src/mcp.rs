//! Row 12 (issue 19): the MCP tool path, one `tools/call` of `convert_units` (a
//! warm Rust tool, low risk: no approval) at a time per keep-alive connection —
//! session lookup, JSON-RPC parse, argument validation against the tool's
//! schema, the plugin call, and the result sent back as the SSE stream a client
//! that accepts both shapes gets (or JSON, when the node answers so).
//!
//! One session, initialized once as a client does, carries every call. There is
//! no comparison process: the row keeps the MCP path in every smoke run and puts
//! its cost on record beside the other transports.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::fixture::temp_dir;
use crate::load::{self, Target};
use crate::procs::{self, NodeSpec};
use crate::report::{Row, fmt_rate, untargeted_status};
use crate::rounds::closed_rounds;
use crate::settings::Settings;

const PATH: &str = "/mcp";
/// A client that takes either answer shape, as the spec asks of MCP clients.
const ACCEPT: &str = "application/json, text/event-stream";

fn call(_conn: usize, seq: u64) -> Bytes {
    let request = json!({
        "jsonrpc": "2.0",
        "id": seq,
        "method": "tools/call",
        "params": {"name": "convert_units", "arguments": {"value": seq % 1000, "from": "km", "to": "m"}},
    });
    Bytes::from(request.to_string())
}

/// The JSON-RPC message of an answer: the JSON body, or the last `data:` of an SSE stream.
fn message(body: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(body).ok()?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        return serde_json::from_str(trimmed).ok();
    }
    let data = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|data| !data.is_empty())?;
    serde_json::from_str(data).ok()
}

/// A correct answer: a tool result that is not an error, converted to metres.
fn converted(status: u16, body: &[u8]) -> bool {
    status == 200
        && message(body).is_some_and(|answer| {
            let result = &answer["result"];
            result["isError"] == false && result["structuredContent"]["unit"] == "m"
        })
}

/// `initialize` on a fresh connection: the session id the node gave.
async fn initialize(addr: SocketAddr) -> Result<String> {
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let body = json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "agora-bench", "version": "0"},
        },
    });
    let request = hyper::Request::post(PATH)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .body(Full::new(Bytes::from(body.to_string())))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    let reply = response.into_body().collect().await?.to_bytes();
    let answered = message(&reply).is_some_and(|answer| answer["result"]["protocolVersion"].is_string());
    match session {
        Some(session) if status == 200 && answered => Ok(session),
        _ => bail!(
            "the node did not initialize an MCP session: HTTP {status} {}",
            String::from_utf8_lossy(&reply)
        ),
    }
}

pub async fn row12(settings: &Settings) -> Result<Row> {
    let data = temp_dir()?;
    let (node, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: data.path(),
        plugins: &["unit-converter"],
        // Every connection shares the one session, each with one call running.
        env: &[(
            "AGORA_MCP__MAX_CALLS_PER_SESSION",
            (settings.connections * 2).to_string(),
        )],
    })?;
    let session = initialize(node.addr).await?;
    let headers = vec![
        ("accept".to_string(), ACCEPT.to_string()),
        ("mcp-session-id".to_string(), session),
    ];
    let notification = Target {
        addr: node.addr,
        transport: Default::default(),
        path: PATH.into(),
        headers: headers.clone(),
        body: Arc::new(|_, _| Bytes::new()),
        check: Arc::new(|status, _| status == 202),
    };
    let initialized = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let (status, reply) = load::one(&notification, initialized)
        .await
        .context("notifications/initialized")?;
    if status != 202 {
        bail!(
            "notifications/initialized: HTTP {status} {}",
            String::from_utf8_lossy(&reply)
        );
    }
    let target = Target {
        addr: node.addr,
        transport: Default::default(),
        path: PATH.into(),
        headers,
        body: Arc::new(call),
        check: Arc::new(converted),
    };
    let (status, reply) = load::one(&target, call(0, 1)).await?;
    if !converted(status, &reply) {
        bail!(
            "the node did not answer tools/call: HTTP {status} {}",
            String::from_utf8_lossy(&reply)
        );
    }
    let side = closed_rounds(settings, &target, &node).await;
    Ok(Row {
        id: 12,
        measure: "MCP tools/call of a warm Rust tool (convert_units), one session, closed loop".into(),
        node: format!(
            "{} req/s, p50 {:.2} ms, p99 {:.2} ms",
            fmt_rate(side.rate()),
            side.total.p(0.5),
            side.total.p(0.99)
        ),
        comparison: "—".into(),
        ratio: format!("{} req per CPU-second", fmt_rate(side.per_cpu())),
        target: "— (no target; keeps the MCP path in the smoke run)".into(),
        status: untargeted_status(settings, side.total.failed),
        raw: json!({"connections": settings.connections, "node": side.json()}),
    })
}
