//! The live event stream (AAP §2, "Eventos en vivo"): the node is a WebSocket
//! client of `arena.stream_url` and sends each event as one JSON text frame.
//!
//! The stream must never slow or fail a task, so tasks only ever push into a
//! bounded buffer (never waiting); a single background task owns the socket.
//! When the buffer is full the oldest event is dropped and counted in the
//! `events_dropped{stream="arena"}` metric. A lost connection is retried with
//! exponential backoff and jitter, capped at 10 s; events pushed meanwhile
//! wait in the buffer. The connection is opened with the first event, so a
//! node that serves no match never dials the arena. `wss://` uses the node's
//! shared outbound trust roots (`peers::tls`), with the same backoff.

use crate::background::Background;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use rand::Rng;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::metrics::{Metrics, StreamLabels};

const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a connection attempt failed; TLS failures are logged louder.
enum ConnectError {
    Tls(String),
    Other(String),
}

pub struct EventStream {
    url: String,
    token: String,
    capacity: usize,
    buffer: Mutex<VecDeque<Value>>,
    wake: Notify,
    started: std::sync::Once,
    metrics: Metrics,
    background: Background,
}

impl EventStream {
    /// `None` when no stream URL is configured.
    pub fn new(
        url: &str,
        token: &str,
        capacity: usize,
        metrics: Metrics,
        background: &Background,
    ) -> Option<Arc<Self>> {
        if url.is_empty() {
            return None;
        }
        Some(Arc::new(EventStream {
            url: url.to_string(),
            token: token.to_string(),
            capacity: capacity.max(1),
            buffer: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            started: std::sync::Once::new(),
            metrics,
            background: background.clone(),
        }))
    }

    /// Queue an event without waiting; a full buffer loses its oldest event.
    pub fn push(self: &Arc<Self>, event: Value) {
        let dropped = {
            let mut buffer = self.buffer.lock();
            let dropped = if buffer.len() >= self.capacity {
                buffer.pop_front().is_some()
            } else {
                false
            };
            buffer.push_back(event);
            dropped
        };
        if dropped {
            self.count_drop();
        }
        self.wake.notify_one();
        let stream = self.clone();
        self.started.call_once(move || {
            let background = stream.background.clone();
            background.spawn("arena.event_stream", stream.run());
        });
    }

    fn count_drop(&self) {
        self.metrics
            .events_dropped
            .get_or_create(&StreamLabels {
                stream: "arena".into(),
            })
            .inc();
    }

    /// Put back an event the socket failed to take, unless newer ones filled its place.
    fn requeue(&self, event: Value) {
        let mut buffer = self.buffer.lock();
        if buffer.len() < self.capacity {
            buffer.push_front(event);
        } else {
            drop(buffer);
            self.count_drop();
        }
    }

    fn pop(&self) -> Option<Value> {
        self.buffer.lock().pop_front()
    }

    async fn run(self: Arc<Self>) {
        let mut backoff = BACKOFF_START;
        loop {
            match self.connect().await {
                Ok(socket) => {
                    tracing::info!(url = %self.url, "arena event stream connected");
                    backoff = BACKOFF_START;
                    let reason = self.pump(socket).await;
                    tracing::warn!(url = %self.url, %reason, "arena event stream lost; reconnecting");
                }
                // A certificate problem will not fix itself between retries: say so loudly.
                Err(ConnectError::Tls(reason)) => {
                    tracing::warn!(url = %self.url, %reason, "arena event stream: TLS failed");
                }
                Err(ConnectError::Other(error)) => {
                    tracing::debug!(url = %self.url, %error, "arena event stream unreachable");
                }
            }
            // Full jitter in [backoff/2, backoff] keeps many nodes from reconnecting in step.
            let wait = {
                let half = backoff.as_millis() as u64 / 2;
                Duration::from_millis(half + rand::thread_rng().gen_range(0..=half))
            };
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(BACKOFF_CAP);
        }
    }

    async fn connect(
        &self,
    ) -> Result<
        tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
        ConnectError,
    > {
        let mut request = self
            .url
            .as_str()
            .into_client_request()
            .map_err(|e| ConnectError::Other(e.to_string()))?;
        if !self.token.is_empty() {
            let value = format!("Bearer {}", self.token)
                .parse()
                .map_err(|_| ConnectError::Other("arena.stream_token is not a valid header value".into()))?;
            request
                .headers_mut()
                .insert(axum::http::header::AUTHORIZATION, value);
        }
        let tls = crate::peers::tls::shared().map_err(|e| ConnectError::Other(e.to_string()))?;
        let connector = tokio_tungstenite::Connector::Rustls(tls.tls.clone());
        // Dialled through the node's checked resolver, as every outbound HTTP call is.
        let connect = async {
            let socket = crate::peers::http_client::connect_tcp(request.uri())
                .await
                .map_err(|e| tokio_tungstenite::tungstenite::Error::Io(std::io::Error::other(e)))?;
            tokio_tungstenite::client_async_tls_with_config(request, socket, None, Some(connector)).await
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok((socket, _))) => Ok(socket),
            Ok(Err(error)) => Err(match crate::peers::tls::failure_reason(&error) {
                Some(reason) => ConnectError::Tls(reason),
                None => ConnectError::Other(error.to_string()),
            }),
            Err(_) if self.url.starts_with("wss://") => Err(ConnectError::Tls(
                "handshake timeout: no TLS session (TCP connect included) in time".into(),
            )),
            Err(_) => Err(ConnectError::Other("connect timed out".into())),
        }
    }

    /// Send buffered events until the connection fails; returns why it ended.
    async fn pump(
        &self,
        socket: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    ) -> String {
        let (mut sink, mut incoming) = socket.split();
        loop {
            while let Some(event) = self.pop() {
                let frame = Message::text(event.to_string());
                match tokio::time::timeout(SEND_TIMEOUT, sink.send(frame)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        self.requeue(event);
                        return error.to_string();
                    }
                    Err(_) => {
                        self.requeue(event);
                        return "send timed out".into();
                    }
                }
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                message = incoming.next() => match message {
                    // Pings are answered by tungstenite; the arena sends us nothing else we use.
                    Some(Ok(Message::Close(_))) | None => return "closed by the arena".into(),
                    Some(Err(error)) => return error.to_string(),
                    Some(Ok(_)) => {}
                },
            }
        }
    }
}
