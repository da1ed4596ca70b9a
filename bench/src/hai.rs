//! Row 6's HAI client: real WebSocket clients (tokio-tungstenite) against the
//! node's `GET /ws`, speaking the HAI specification as the browser client does:
//! connect with `?session_id=…` (which starts the session), send
//! `user_message`s, read `assistant_message_chunk`s up to `status: completed`.
//! The node's `session` frame (the new session's secret) is read and ignored:
//! each driver session lives on one connection and never needs its secret.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long one answer, or one connection's handshake, may take before the row fails.
const PATIENCE: Duration = Duration::from_secs(10);

async fn connect(addr: SocketAddr, session_id: &str) -> Result<Socket> {
    let url = format!("ws://{addr}/ws?session_id={session_id}");
    let (socket, _) = tokio::time::timeout(PATIENCE, connect_async(url.as_str()))
        .await
        .map_err(|_| anyhow!("connecting to {url} timed out"))?
        .with_context(|| format!("connecting to {url}"))?;
    Ok(socket)
}

async fn next_frame(socket: &mut Socket) -> Result<Value> {
    loop {
        let message = tokio::time::timeout(PATIENCE, socket.next())
            .await
            .map_err(|_| anyhow!("no frame from the node within {PATIENCE:?}"))?
            .ok_or_else(|| anyhow!("the node closed the connection"))??;
        match message {
            Message::Text(text) => return Ok(serde_json::from_str(text.as_str())?),
            Message::Close(frame) => bail!("the node closed the connection: {frame:?}"),
            _ => continue,
        }
    }
}

/// The frame that hands a new session's id and secret to the connection that created it.
fn is_session_frame(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|frame| frame["type"] == "session")
}

/// Time to first chunk, one message at a time (low load): from sending a
/// `user_message` to reading the first `assistant_message_chunk`; each answer
/// is read to its `status: completed` before the next message goes out.
pub struct FirstChunk {
    /// Microseconds.
    pub hist: Histogram<u64>,
    pub answers: u64,
}

/// Messages per session before the driver moves to a new one (a session's
/// history is bounded; two entries per answer).
const MESSAGES_PER_SESSION: usize = 200;

pub async fn first_chunk(
    addr: SocketAddr,
    warmup: usize,
    samples: usize,
    expected: &str,
) -> Result<FirstChunk> {
    let mut hist = Histogram::new_with_bounds(1, 60_000_000, 3)?;
    let mut answers = 0;
    let mut socket = None;
    for index in 0..warmup + samples {
        if index % MESSAGES_PER_SESSION == 0 {
            if let Some((mut old, _)) = socket.take() {
                let _ = SinkExt::<Message>::close(&mut old).await;
            }
            let session = format!("bench-{}", uuid::Uuid::new_v4().simple());
            socket = Some((connect(addr, &session).await?, session));
        }
        let Some((socket, session)) = socket.as_mut() else {
            unreachable!("a session was opened above");
        };
        let message =
            json!({"type": "user_message", "content": format!("message {index}"), "session_id": session});
        let sent = Instant::now();
        socket.send(Message::text(message.to_string())).await?;
        let mut first = None;
        loop {
            let frame = next_frame(socket).await?;
            match frame["type"].as_str() {
                Some("assistant_message_chunk") if first.is_none() => {
                    first = Some(sent.elapsed());
                    if frame["content"] != expected {
                        bail!("unexpected first chunk: {frame}");
                    }
                }
                Some("status") if frame["status"] == "completed" => break,
                Some("error") => bail!("the node answered with an error: {frame}"),
                _ => {}
            }
        }
        let first = first.ok_or_else(|| anyhow!("an answer completed without a chunk"))?;
        if index >= warmup {
            hist.record((first.as_micros() as u64).max(1))?;
            answers += 1;
        }
    }
    Ok(FirstChunk { hist, answers })
}

/// Idle sessions held open: each connection's task reads (so it answers the
/// node's keep-alive pings, as a browser does) and counts any error frame.
pub struct IdleSessions {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pub errors: Arc<AtomicU64>,
    pub closed: Arc<AtomicU64>,
}

impl IdleSessions {
    pub fn new() -> IdleSessions {
        IdleSessions {
            tasks: Vec::new(),
            errors: Arc::new(AtomicU64::new(0)),
            closed: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Open sessions until `total` are connected, `parallel` handshakes at a
    /// time. A session counts once the node answered a ping on it, i.e. its
    /// connection task runs and the session is bound.
    pub async fn grow_to(&mut self, addr: SocketAddr, total: usize, parallel: usize) -> Result<()> {
        let start = self.tasks.len();
        let opened = futures::stream::iter(start..total)
            .map(|index| async move {
                let session = format!("idle-{index:06}-{}", uuid::Uuid::new_v4().simple());
                let mut socket = connect(addr, &session).await?;
                socket.send(Message::Ping(b"ready?".to_vec().into())).await?;
                loop {
                    let message = tokio::time::timeout(PATIENCE, socket.next())
                        .await
                        .map_err(|_| anyhow!("session {index}: no pong within {PATIENCE:?}"))?
                        .ok_or_else(|| anyhow!("session {index}: closed by the node"))??;
                    match message {
                        Message::Pong(_) => return Ok::<_, anyhow::Error>(socket),
                        Message::Text(text) if is_session_frame(text.as_str()) => {}
                        Message::Text(text) => bail!("session {index}: {text}"),
                        Message::Close(frame) => bail!("session {index}: closed: {frame:?}"),
                        _ => {}
                    }
                }
            })
            .buffer_unordered(parallel.max(1));
        tokio::pin!(opened);
        while let Some(socket) = opened.next().await {
            let mut socket = socket?;
            let errors = self.errors.clone();
            let closed = self.closed.clone();
            self.tasks.push(tokio::spawn(async move {
                while let Some(message) = socket.next().await {
                    match message {
                        Ok(Message::Text(text)) if !is_session_frame(text.as_str()) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Message::Close(_)) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                closed.fetch_add(1, Ordering::Relaxed);
            }));
        }
        Ok(())
    }
}

impl Drop for IdleSessions {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Raise this process's open-file limit to its hard limit (children inherit
/// it): 10,000 sockets need more than the usual 1,024. Returns the new soft limit.
#[allow(unsafe_code)]
pub fn raise_fd_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}

/// Row 13: `sessions` sessions connected at once, every one streaming
/// `answers_each` answers back to back, all at the same time.
pub struct ConcurrentStreams {
    /// Time to first chunk of every answer, microseconds.
    pub first_chunk: Histogram<u64>,
    /// Time from sending a message to its `status: completed`, microseconds.
    pub whole_answer: Histogram<u64>,
    pub answers: u64,
    pub seconds: f64,
}

/// Open `sessions` sessions (`parallel` handshakes at a time), then let every
/// one send its `answers_each` messages at once, each read to its completion
/// before the next goes out, as a browser tab does.
pub async fn concurrent_streams(
    addr: SocketAddr,
    sessions: usize,
    answers_each: usize,
    parallel: usize,
    expected: &str,
) -> Result<ConcurrentStreams> {
    let opened: Vec<(Socket, String)> = futures::stream::iter(0..sessions)
        .map(|index| async move {
            let session = format!("crowd-{index:06}-{}", uuid::Uuid::new_v4().simple());
            connect(addr, &session).await.map(|socket| (socket, session))
        })
        .buffer_unordered(parallel.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let started = Instant::now();
    let streams = opened.into_iter().map(|(mut socket, session)| {
        let expected = expected.to_string();
        async move {
            let mut first_chunk = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut whole_answer = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            for index in 0..answers_each {
                let message = json!({"type": "user_message", "content": format!("message {index}"), "session_id": session});
                let sent = Instant::now();
                socket.send(Message::text(message.to_string())).await?;
                let mut first = None;
                loop {
                    let frame = next_frame(&mut socket).await?;
                    match frame["type"].as_str() {
                        Some("assistant_message_chunk") if first.is_none() => {
                            first = Some(sent.elapsed());
                            if frame["content"] != expected.as_str() {
                                bail!("unexpected first chunk: {frame}");
                            }
                        }
                        Some("status") if frame["status"] == "completed" => break,
                        Some("error") => bail!("the node answered with an error: {frame}"),
                        _ => {}
                    }
                }
                let first = first.ok_or_else(|| anyhow!("an answer completed without a chunk"))?;
                first_chunk.record((first.as_micros() as u64).max(1))?;
                whole_answer.record((sent.elapsed().as_micros() as u64).max(1))?;
            }
            let _ = SinkExt::<Message>::close(&mut socket).await;
            Ok::<_, anyhow::Error>((first_chunk, whole_answer))
        }
    });
    let mut outcome = ConcurrentStreams {
        first_chunk: Histogram::new_with_bounds(1, 60_000_000, 3)?,
        whole_answer: Histogram::new_with_bounds(1, 60_000_000, 3)?,
        answers: 0,
        seconds: 0.0,
    };
    // A task per session: polled from one task, a session whose frames had
    // arrived waited behind the others' (p99 first chunk 1.1–1.4 s against
    // 0.26–0.29 s, the node the same; bench/README.md, tenth step).
    let tasks: Vec<_> = streams.map(tokio::spawn).collect();
    for result in futures::future::join_all(tasks).await {
        let (first_chunk, whole_answer) = result??;
        outcome.answers += first_chunk.len();
        outcome.first_chunk.add(&first_chunk)?;
        outcome.whole_answer.add(&whole_answer)?;
    }
    outcome.seconds = started.elapsed().as_secs_f64();
    Ok(outcome)
}
