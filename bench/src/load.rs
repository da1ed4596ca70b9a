//! The load driver: a fixed number of HTTP/1.1 keep-alive connections over
//! loopback, each a tokio task with its own hyper client connection, recording
//! every request's latency in an HDR histogram.
//!
//! Two shapes: closed loop (each connection sends its next request as soon as
//! the previous reply is read: peak throughput) and fixed rate (requests are
//! scheduled at a constant rate spread over the connections and latency is
//! counted from the scheduled time, so a stall is not hidden by the client
//! waiting: no coordinated omission).
//!
//! A target's [`Transport`] says how its connections are made: plain TCP or
//! TLS (row 17), kept alive or one new connection per request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A request without a reply by then counts as failed (and its connection is replaced).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Builds request number `seq` of connection `conn`.
pub type BodyFn = Arc<dyn Fn(usize, u64) -> Bytes + Send + Sync>;
/// Says whether a reply (status, body) is a correct answer.
pub type CheckFn = Arc<dyn Fn(u16, &[u8]) -> bool + Send + Sync>;

/// One kind of request against one server.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: BodyFn,
    pub check: CheckFn,
    pub transport: Transport,
}

/// How a target's connections are made; the default is plain TCP kept alive.
#[derive(Clone, Default)]
pub struct Transport {
    /// TLS to the target's address (its IP as the server name), else plain TCP.
    pub tls: Option<TlsConnector>,
    /// Connect (and handshake) for every request, sent with `connection: close`:
    /// a client that keeps nothing between requests.
    pub connection_per_request: bool,
}

impl Target {
    pub fn over_tls(mut self, connector: TlsConnector) -> Target {
        self.transport.tls = Some(connector);
        self
    }

    pub fn connection_per_request(mut self) -> Target {
        self.transport.connection_per_request = true;
        self
    }
}

/// What one segment of load measured.
#[derive(Debug, Clone)]
pub struct Segment {
    pub ok: u64,
    pub failed: u64,
    pub elapsed: Duration,
    /// Latencies in microseconds.
    pub hist: Histogram<u64>,
    /// First failure seen, for the report.
    pub first_failure: Option<String>,
}

impl Segment {
    pub fn empty() -> Segment {
        Segment {
            ok: 0,
            failed: 0,
            elapsed: Duration::ZERO,
            hist: new_hist(),
            first_failure: None,
        }
    }

    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn merge(&mut self, other: &Segment) {
        self.ok += other.ok;
        self.failed += other.failed;
        self.elapsed += other.elapsed;
        let _ = self.hist.add(&other.hist);
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure.clone();
        }
    }

    pub fn p(&self, quantile: f64) -> f64 {
        self.hist.value_at_quantile(quantile) as f64 / 1000.0
    }
}

pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

/// One client connection that reconnects when the server closes it (HTTP/1.0
/// peers, or a [`Transport`] of one connection per request).
struct Connection {
    addr: SocketAddr,
    transport: Transport,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Connection {
    fn new(target: &Target) -> Connection {
        Connection {
            addr: target.addr,
            transport: target.transport.clone(),
            sender: None,
        }
    }

    async fn ready(&mut self) -> Result<&mut SendRequest<Full<Bytes>>> {
        if let Some(sender) = &mut self.sender
            && !sender.is_closed()
            && sender.ready().await.is_ok()
        {
            return Ok(self.sender.as_mut().expect("present"));
        }
        let stream = TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        stream.set_nodelay(true)?;
        let sender = match &self.transport.tls {
            None => http_handshake(stream).await?,
            Some(connector) => {
                let handshake = connector.connect(self.addr.ip().into(), stream);
                let stream = tokio::time::timeout(REQUEST_TIMEOUT, handshake)
                    .await
                    .map_err(|_| anyhow::anyhow!("no TLS handshake within {} s", REQUEST_TIMEOUT.as_secs()))?
                    .context("TLS handshake")?;
                http_handshake(stream).await?
            }
        };
        self.sender = Some(sender);
        Ok(self.sender.as_mut().expect("just set"))
    }

    /// Send one request; Ok((status, body)) or the error text.
    async fn exchange(&mut self, target: &Target, body: Bytes) -> Result<(u16, Bytes)> {
        let method = if body.is_empty() { "GET" } else { "POST" };
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(&target.path)
            .header("host", self.addr.to_string());
        if !body.is_empty() {
            request = request.header("content-type", "application/json");
        }
        if self.transport.connection_per_request {
            request = request.header("connection", "close");
        }
        for (name, value) in &target.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = request.body(Full::new(body))?;
        let sender = self.ready().await?;
        let response = match tokio::time::timeout(REQUEST_TIMEOUT, sender.send_request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                self.sender = None;
                return Err(error.into());
            }
            Err(_) => {
                // The connection may still deliver the late reply: never reuse it.
                self.sender = None;
                anyhow::bail!("no reply within {} s", REQUEST_TIMEOUT.as_secs());
            }
        };
        let status = response.status().as_u16();
        let close = response
            .headers()
            .get("connection")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        let bytes = response.into_body().collect().await?.to_bytes();
        if close || self.transport.connection_per_request {
            self.sender = None;
        }
        Ok((status, bytes))
    }
}

/// An HTTP/1.1 client connection on `io`, its driver spawned.
async fn http_handshake<IO>(io: IO) -> Result<SendRequest<Full<Bytes>>>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .context("HTTP handshake")?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Send one request on a fresh connection (probes, version checks).
pub async fn one(target: &Target, body: Bytes) -> Result<(u16, Bytes)> {
    Connection::new(target).exchange(target, body).await
}

/// A reusable single connection (pollers).
pub struct Client {
    connection: Connection,
    target: Target,
}

impl Client {
    pub fn new(target: Target) -> Client {
        Client {
            connection: Connection::new(&target),
            target,
        }
    }
    pub async fn send(&mut self, body: Bytes) -> Result<(u16, Bytes)> {
        self.connection.exchange(&self.target, body).await
    }
}

fn record(segment: &mut Segment, target: &Target, outcome: Result<(u16, Bytes)>, micros: u64) {
    match outcome {
        Ok((status, body)) if (target.check)(status, &body) => {
            segment.ok += 1;
            let _ = segment.hist.record(micros.max(1));
        }
        Ok((status, body)) => {
            segment.failed += 1;
            if segment.first_failure.is_none() {
                let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
                segment.first_failure = Some(format!("HTTP {status}: {text}"));
            }
        }
        Err(error) => {
            segment.failed += 1;
            if segment.first_failure.is_none() {
                segment.first_failure = Some(format!("{error:#}"));
            }
        }
    }
}

/// Closed loop: `connections` connections for `duration`, after `warmup` of unrecorded load.
/// `seq_base` keeps request numbers unique across segments (replay-protected protocols).
pub async fn closed_loop(
    target: &Target,
    connections: usize,
    warmup: Duration,
    duration: Duration,
    seq_base: u64,
) -> Segment {
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + duration;
    let tasks: Vec<_> = (0..connections)
        .map(|conn| {
            let target = target.clone();
            tokio::spawn(async move {
                let mut connection = Connection::new(&target);
                let mut segment = Segment::empty();
                let mut seq = seq_base;
                loop {
                    let body = (target.body)(conn, seq);
                    seq += 1;
                    let sent = Instant::now();
                    if sent >= end {
                        break;
                    }
                    let outcome = connection.exchange(&target, body).await;
                    if sent >= measure_from {
                        record(&mut segment, &target, outcome, sent.elapsed().as_micros() as u64);
                    } else if outcome.is_err() {
                        // Warm-up errors (e.g. a server still starting) back off a little.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                segment
            })
        })
        .collect();
    merge_segments(tasks, duration).await
}

/// Fixed rate: `rate` requests per second in total, spread over `connections`,
/// latency counted from each request's scheduled send time.
pub async fn fixed_rate(
    target: &Target,
    connections: usize,
    rate: f64,
    warmup: Duration,
    duration: Duration,
    seq_base: u64,
) -> Segment {
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + duration;
    let interval = Duration::from_secs_f64(connections as f64 / rate.max(1.0));
    let tasks: Vec<_> = (0..connections)
        .map(|conn| {
            let target = target.clone();
            tokio::spawn(async move {
                let mut connection = Connection::new(&target);
                let mut segment = Segment::empty();
                // Stagger the connections over one interval.
                let mut scheduled = start + interval.mul_f64(conn as f64 / connections as f64);
                let mut seq = seq_base;
                while scheduled < end {
                    tokio::time::sleep_until(scheduled.into()).await;
                    let body = (target.body)(conn, seq);
                    seq += 1;
                    let outcome = connection.exchange(&target, body).await;
                    if scheduled >= measure_from {
                        record(
                            &mut segment,
                            &target,
                            outcome,
                            scheduled.elapsed().as_micros() as u64,
                        );
                    }
                    scheduled += interval;
                }
                segment
            })
        })
        .collect();
    merge_segments(tasks, duration).await
}

/// One segment from every connection's, over the measured `duration`.
async fn merge_segments(tasks: Vec<tokio::task::JoinHandle<Segment>>, duration: Duration) -> Segment {
    let mut total = Segment::empty();
    for task in tasks {
        if let Ok(segment) = task.await {
            total.merge(&segment);
        }
    }
    total.elapsed = duration;
    total
}
