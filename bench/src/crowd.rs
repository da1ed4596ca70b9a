//! Rows 13 and 14 (issue 21): the node with a crowd of clients at once.
//!
//! - Row 13: HAI with 1,000 sessions streaming at the same time (plugin
//!   `bench-hai`, one chunk per answer as its first act): every session sends
//!   its messages back to back, all sessions at once; p99 time to first chunk
//!   and the node's peak RSS (`VmHWM`) while they stream.
//! - Row 14: row 1's Agora exchange (16 busy keep-alive connections) while
//!   1,000 and then 10,000 more keep-alive connections sit open and idle, each
//!   having made one request: the throughput must hold within 20 % of the same
//!   node with none. An open port gathers idle connections (browsers, pools,
//!   slow clients); what they cost must not be paid by the busy ones.
//!
//! Every session and connection comes from one loopback address, so the
//! per-address caps are lifted ([`one_client_stands_for_many`]), and the
//! header timeout (which also bounds an idle keep-alive wait) is raised past
//! the row's length so the idle connections stay for the whole measurement;
//! the row checks afterwards that every one is still open.

use std::net::SocketAddr;

use anyhow::{Result, anyhow, bail};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fixture::{
    agora_success, agora_target, bench_hai_node, converter_node, one_client_stands_for_many, temp_dir,
};
use crate::hai;
use crate::report::{Row, fmt_rate, untargeted_status, verdict};
use crate::rounds::{Side, closed_rounds};
use crate::settings::Settings;

fn check_fd_limit(needed: usize) -> Result<()> {
    let limit = hai::raise_fd_limit();
    if limit < needed as u64 + 1_024 {
        bail!("{needed} connections need more open files than the limit of {limit} (raise `ulimit -Hn`)");
    }
    Ok(())
}

// ---------------------------------------------------------------- row 13

pub(crate) async fn row13(settings: &Settings) -> Result<Row> {
    let (sessions, answers_each) = if settings.smoke { (50, 3) } else { (1_000, 10) };
    check_fd_limit(sessions)?;
    let data = temp_dir()?;
    let node = bench_hai_node(settings, data.path())?;
    let idle_mb = node.rss_mb();
    let cpu_before = node.cpu_seconds();
    let streams = hai::concurrent_streams(node.addr, sessions, answers_each, 64, "ok").await?;
    let cpu = node.cpu_seconds() - cpu_before;
    let peak_mb = node.peak_rss_mb();
    let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let (p50, p99) = (ms(&streams.first_chunk, 0.5), ms(&streams.first_chunk, 0.99));
    let rate = streams.answers as f64 / streams.seconds.max(1e-9);
    Ok(Row {
        id: 13,
        measure: format!(
            "HAI: {sessions} sessions streaming at once (bench-hai), time to first chunk and RSS"
        ),
        node: format!(
            "{} answers in {:.1} s ({} answers/s, {} per CPU-s); first chunk p50 {p50:.2} ms, p99 {p99:.2} ms; \
             whole answer p99 {:.2} ms; RSS {idle_mb:.0} MB idle, peak {peak_mb:.0} MB",
            streams.answers,
            streams.seconds,
            fmt_rate(rate),
            fmt_rate(streams.answers as f64 / cpu.max(1e-9)),
            ms(&streams.whole_answer, 0.99),
        ),
        comparison: "—".into(),
        ratio: "—".into(),
        target: "measured (p99 first chunk and RSS on record)".into(),
        status: untargeted_status(settings, 0),
        raw: json!({
            "sessions": sessions, "answers_each": answers_each, "answers": streams.answers,
            "seconds": streams.seconds, "node_cpu_seconds": cpu,
            "first_chunk_ms": {"p50": p50, "p99": p99, "max": ms(&streams.first_chunk, 1.0)},
            "whole_answer_ms": {"p50": ms(&streams.whole_answer, 0.5), "p99": ms(&streams.whole_answer, 0.99)},
            "rss_idle_mb": idle_mb, "rss_peak_mb": peak_mb,
        }),
    })
}

// ---------------------------------------------------------------- row 14

/// Idle keep-alive connections: each made one `GET /health` and waits for its next request.
struct IdleConnections {
    streams: Vec<TcpStream>,
}

impl IdleConnections {
    async fn grow_to(&mut self, addr: SocketAddr, total: usize) -> Result<()> {
        while self.streams.len() < total {
            self.streams.push(one_request(addr).await?);
        }
        Ok(())
    }

    /// How many the node has closed (a read that ends instead of waiting).
    fn closed(&self) -> usize {
        let mut buffer = [0u8; 1];
        self.streams
            .iter()
            .filter(|stream| !matches!(stream.try_read(&mut buffer), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock))
            .count()
    }
}

/// A connection that made one request, read its whole answer and stays open.
async fn one_request(addr: SocketAddr) -> Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: bench\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            bail!("the node closed a keep-alive connection after one request");
        }
        answer.extend_from_slice(&buffer[..read]);
        let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            bail!("GET /health answered {}", head.lines().next().unwrap_or(""));
        }
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .ok_or_else(|| anyhow!("GET /health answered without a content-length"))?;
        if answer.len() >= end + 4 + length {
            return Ok(stream);
        }
    }
}

pub(crate) async fn row14(settings: &Settings) -> Result<Row> {
    let (few, many) = if settings.smoke {
        (100, 500)
    } else {
        (1_000, 10_000)
    };
    check_fd_limit(many + settings.connections)?;
    let data = temp_dir()?;
    let env = one_client_stands_for_many(&[("AGORA_HTTP__HEADER_TIMEOUT_MS", "3600000".into())]);
    let (node, request, _) = converter_node(settings, data.path(), &env).await?;
    let target = agora_target(&node, "/agora", request, agora_success());

    let alone = closed_rounds(settings, &target, &node).await;
    let mut idle = IdleConnections { streams: Vec::new() };
    idle.grow_to(node.addr, few).await?;
    let beside_few = closed_rounds(settings, &target, &node).await;
    let closed_few = idle.closed();
    idle.grow_to(node.addr, many).await?;
    let rss_many = node.rss_mb();
    let beside_many = closed_rounds(settings, &target, &node).await;
    let closed_many = idle.closed();
    if closed_few + closed_many > 0 {
        bail!(
            "the node closed idle keep-alive connections: {closed_few} of {few}, then {closed_many} of {many}"
        );
    }
    let held = |side: &Side| side.rate() / alone.rate().max(1e-9);
    let held_cpu = |side: &Side| side.per_cpu() / alone.per_cpu().max(1e-9);
    let failed = alone.total.failed + beside_few.total.failed + beside_many.total.failed;
    let met = [&beside_few, &beside_many]
        .iter()
        .all(|side| held(side) >= 0.8 && held_cpu(side) >= 0.8)
        && failed == 0;
    Ok(Row {
        id: 14,
        measure: format!("Agora row 1 beside {few} / {many} idle keep-alive connections vs none (same node)"),
        node: format!(
            "{few} idle: {} req/s ({} req/CPU-s); {many} idle: {} req/s ({} req/CPU-s), RSS {rss_many:.0} MB",
            fmt_rate(beside_few.rate()),
            fmt_rate(beside_few.per_cpu()),
            fmt_rate(beside_many.rate()),
            fmt_rate(beside_many.per_cpu()),
        ),
        comparison: format!(
            "none idle: {} req/s ({} req/CPU-s)",
            fmt_rate(alone.rate()),
            fmt_rate(alone.per_cpu())
        ),
        ratio: format!(
            "{:.0} % / {:.0} % of the throughput with none ({:.0} % / {:.0} % per CPU-s)",
            held(&beside_few) * 100.0,
            held(&beside_many) * 100.0,
            held_cpu(&beside_few) * 100.0,
            held_cpu(&beside_many) * 100.0,
        ),
        target: "throughput within 20 % (≥ 80 %), per second and per CPU-s, with 1,000 and 10,000 open"
            .into(),
        status: verdict(settings, met),
        raw: json!({
            "alone": alone.json(), "beside_few": beside_few.json(), "beside_many": beside_many.json(),
            "few": few, "many": many, "rss_with_many_mb": rss_many,
        }),
    })
}
