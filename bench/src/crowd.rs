//! Rows 13 and 14 (issue 21): the node with a crowd of clients at once.
//!
//! - Row 13: HAI with 1,000 sessions streaming at the same time (plugin
//!   `bench-hai`, one chunk per answer as its first act): every session sends
//!   its messages back to back, all sessions at once; p99 time to first chunk
//!   and the node's peak RSS (`VmHWM`) while they stream, and where the wait
//!   is (the queue behind the node's rate, the durable commits, the plugin's
//!   call, the driver's thread), which sets the row's target (issue 42).
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
use std::sync::Arc;

use anyhow::{Result, anyhow, bail};
use bytes::Bytes;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fixture::{
    agora_success, agora_target, bench_hai_node, converter_node, one_client_stands_for_many, temp_dir,
};
use crate::hai;
use crate::load;
use crate::procs::{self, Server};
use crate::report::{Row, fmt_rate, verdict};
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

/// Row 13's target (issue 42), set from where its waiting was measured to be.
/// Every session always has one message outstanding, so by Little's law the
/// mean wait is `sessions ÷ answer rate`. The node is not short of CPU here
/// (about one core of two): some 80 % of a first chunk's wait is its answer's
/// two durable commits (the user's message before `thinking`, the reply before
/// its final chunk, which for a one-chunk answer is its first), queued on the
/// embedded store's group commit, whose rounds wait for sled's log: every
/// sled batch seals and syncs its log buffer, four small synchronous writes
/// per answer. What the node controls is how evenly it serves that queue:
/// the slowest 1 % may wait at most half again the queue's mean.
const FAIR_QUEUE_FACTOR: f64 = 1.5;

/// A count and a sum the node keeps in `/metrics`: its HAI plugin calls and
/// the seconds spent in them, and its durable commits and the seconds they
/// waited.
#[derive(Clone, Copy, Default)]
struct Waits {
    calls: f64,
    call_seconds: f64,
    commits: f64,
    commit_seconds: f64,
}

impl std::ops::Sub for Waits {
    type Output = Waits;
    fn sub(self, before: Waits) -> Waits {
        Waits {
            calls: self.calls - before.calls,
            call_seconds: self.call_seconds - before.call_seconds,
            commits: self.commits - before.commits,
            commit_seconds: self.commit_seconds - before.commit_seconds,
        }
    }
}

/// The node's [`Waits`] now (`agora_plugin_call_seconds` of transport `hai`,
/// `agora_store_commit_wait_seconds`).
async fn node_waits(node: &Server) -> Result<Waits> {
    let target = agora_target(
        node,
        "/metrics",
        Bytes::new(),
        Arc::new(|status, _| status == 200),
    );
    let (status, body) = load::one(&target, Bytes::new()).await?;
    if status != 200 {
        bail!("GET /metrics answered {status}");
    }
    let text = String::from_utf8_lossy(&body);
    let sample = |name: &str, labelled: &str| {
        text.lines()
            .filter(|line| line.starts_with(name) && line.contains(labelled))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    Ok(Waits {
        calls: sample("agora_plugin_call_seconds_count{", "transport=\"hai\""),
        call_seconds: sample("agora_plugin_call_seconds_sum{", "transport=\"hai\""),
        commits: sample("agora_store_commit_wait_seconds_count ", ""),
        commit_seconds: sample("agora_store_commit_wait_seconds_sum ", ""),
    })
}

pub(crate) async fn row13(settings: &Settings) -> Result<Row> {
    let (sessions, answers_each) = if settings.smoke { (50, 3) } else { (1_000, 10) };
    check_fd_limit(sessions)?;
    let data = temp_dir()?;
    let node = bench_hai_node(settings, data.path())?;
    let idle_mb = node.rss_mb();
    let cpu_before = node.cpu_seconds();
    let driver_before = procs::cpu_seconds(std::process::id()).unwrap_or(0.0);
    let waits_before = node_waits(&node).await?;
    let streams = hai::concurrent_streams(node.addr, sessions, answers_each, 64, "ok").await?;
    let cpu = node.cpu_seconds() - cpu_before;
    let driver_cpu = procs::cpu_seconds(std::process::id()).unwrap_or(0.0) - driver_before;
    let waits = node_waits(&node).await? - waits_before;
    let peak_mb = node.peak_rss_mb();
    let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let (p50, p99) = (ms(&streams.first_chunk, 0.5), ms(&streams.first_chunk, 0.99));
    let mean_first_chunk = streams.first_chunk.mean() / 1000.0;
    let rate = streams.answers as f64 / streams.seconds.max(1e-9);
    // Where the waiting is: the queue the node's rate implies, the answer's
    // durable commits, the plugin's own call, the node's CPU per answer, and
    // how busy the driver's one thread was.
    let queue_mean_ms = sessions as f64 / rate.max(1e-9) * 1000.0;
    let plugin_call_ms = waits.call_seconds / waits.calls.max(1.0) * 1000.0;
    let commits_per_answer = waits.commits / (streams.answers as f64).max(1.0);
    let commit_wait_ms = waits.commit_seconds / waits.commits.max(1.0) * 1000.0;
    // A one-chunk answer's chunk is also its last, sent after the reply's
    // commit: every commit of the answer comes before its first chunk.
    let commit_share = commits_per_answer * commit_wait_ms / mean_first_chunk.max(1e-9);
    let node_us_per_answer = cpu / (streams.answers as f64).max(1.0) * 1e6;
    let node_cores = cpu / streams.seconds.max(1e-9);
    // The driver's CPU includes opening the sessions, which comes before the timed part.
    let driver_busy = driver_cpu / streams.seconds.max(1e-9);
    let bound_ms = FAIR_QUEUE_FACTOR * queue_mean_ms;
    let met = p99 <= bound_ms;
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
        comparison: format!(
            "where the wait is: the queue behind the node's rate {queue_mean_ms:.0} ms \
             ({sessions} sessions ÷ {} answers/s; node {node_cores:.2} cores, {node_us_per_answer:.0} µs of CPU \
             per answer); durable commits {commits_per_answer:.1} per answer, {commit_wait_ms:.0} ms each, \
             {:.0} % of the mean first chunk; the plugin's call {plugin_call_ms:.3} ms; the driver's thread {:.0} % busy",
            fmt_rate(rate),
            commit_share * 100.0,
            driver_busy * 100.0,
        ),
        ratio: format!(
            "mean first chunk {mean_first_chunk:.0} ms = {:.2}× the queue's mean; p99 = {:.2}×",
            mean_first_chunk / queue_mean_ms.max(1e-9),
            p99 / queue_mean_ms.max(1e-9)
        ),
        target: format!(
            "p99 first chunk ≤ {FAIR_QUEUE_FACTOR}× the queue's mean (sessions ÷ answer rate): {bound_ms:.0} ms here"
        ),
        status: verdict(settings, met),
        raw: json!({
            "sessions": sessions, "answers_each": answers_each, "answers": streams.answers,
            "seconds": streams.seconds, "node_cpu_seconds": cpu, "driver_cpu_seconds": driver_cpu,
            "first_chunk_ms": {"p50": p50, "p99": p99, "mean": mean_first_chunk, "max": ms(&streams.first_chunk, 1.0)},
            "whole_answer_ms": {"p50": ms(&streams.whole_answer, 0.5), "p99": ms(&streams.whole_answer, 0.99)},
            "queue_mean_ms": queue_mean_ms, "plugin_call_ms": plugin_call_ms,
            "commits_per_answer": commits_per_answer, "commit_wait_ms": commit_wait_ms, "commit_share": commit_share,
            "node_us_per_answer": node_us_per_answer, "node_cores": node_cores, "driver_busy": driver_busy,
            "p99_bound_ms": bound_ms,
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
