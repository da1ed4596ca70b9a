//! The HAI protocol (`hai-protocol.md`): human chat over a WebSocket at
//! `hai.path` (§"Connection"), with streaming answers, tool lifecycle frames and
//! human approval of risky tools, plus the browser client (§"Implementation
//! Guide") served at `/`.
//!
//! - [`wire`]: the frames and the validation of what a client sends.
//! - [`session`]: live sessions: broadcast to every connection, approvals, rate window.
//! - [`turn`]: one answer, from `thinking` to `completed`.
//! - this module: the connection (bounded buffers, keep-alive, frame size), the
//!   moderation hook, sessions in sled, and [`HaiError`], the one place node
//!   errors become `error` frames.
//!
//! A connection belongs to one session: the one named in `?session_id=` when it
//! connects, or else in its first `user_message`. It then receives every frame
//! of that session, also those caused by other connections on it.

mod session;
mod turn;
pub mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::NodeState;
use crate::runtime::{ApprovalOutcome, FailureKind, InvokeError};
use crate::store::{Collection, StoreError, now_ms};
use session::{Hub, Session};
use wire::{ApprovalResponse, Inbound, Outbound, UserMessage};

/// How long one write to a client may take before the client counts as gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Initial read buffer of a connection (see `upgrade`).
const READ_BUFFER_BYTES: usize = 4 << 10;
/// Close codes (RFC 6455 §7.4.1).
const CLOSE_POLICY: u16 = 1008;
const CLOSE_TOO_BIG: u16 = 1009;
const CLOSE_GOING_AWAY: u16 = 1001;

const CLIENT_HTML: &str = include_str!("../../../web/index.html");
const CLIENT_JS: &str = include_str!("../../../web/hai-client.js");
const CLIENT_CSS: &str = include_str!("../../../web/hai-client.css");

/// What every handler of this transport shares.
#[derive(Clone)]
pub struct Shared {
    node: NodeState,
    hub: Arc<Hub>,
    page: Arc<str>,
}

pub fn router(state: NodeState) -> Router {
    let config = &state.config.hai;
    let path = config.path.trim_end_matches('/');
    let path = if path.is_empty() { "/ws" } else { path }.to_string();
    let page = CLIENT_HTML.replace("{{WS_PATH}}", &path);
    let shared = Shared {
        hub: Hub::new(config.send_buffer_frames),
        node: state,
        page: Arc::from(page),
    };
    Router::new()
        .route(&path, get(upgrade))
        .route(&format!("{path}/sessions/{{id}}/history"), get(history))
        .route("/", get(client_page))
        .route("/hai-client.js", get(script))
        .route("/hai-client.css", get(style))
        .with_state(shared)
}

/// Every way a client request fails, each with its §8 `error_code`.
#[derive(Debug, thiserror::Error)]
pub enum HaiError {
    #[error("Malformed message: {0}")]
    InvalidJson(String),
    #[error("Invalid message: {0}")]
    InvalidMessage(String),
    #[error("Invalid session: {0}")]
    InvalidSession(String),
    #[error("Too many messages: at most {per_minute} per minute in a session")]
    RateLimited { per_minute: u32, retry_after_ms: u64 },
    #[error("Too many messages are already waiting for an answer in this session")]
    Busy,
    #[error("Your message contains prohibited content")]
    Moderation { word: String },
    #[error("No approval {0:?} is pending in this session")]
    UnknownApproval(String),
    #[error("Tool {tool} failed: {message}")]
    ToolFailed {
        tool: String,
        tool_call_id: String,
        message: String,
    },
    #[error("No assistant plugin is loaded")]
    NoAssistant,
    #[error("The assistant failed: {0}")]
    AssistantFailed(String),
    #[error("The node is overloaded; try again shortly")]
    Overloaded,
    #[error("This session's history is full; start a new session")]
    SessionFull,
    #[error("Internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for HaiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Limit(_) => HaiError::SessionFull,
            other => HaiError::Internal(format!("storage failed: {other}")),
        }
    }
}

impl From<InvokeError> for HaiError {
    fn from(error: InvokeError) -> Self {
        match error {
            InvokeError::Overloaded => HaiError::Overloaded,
            InvokeError::Failure {
                kind: FailureKind::BadRequest,
                message,
            } => HaiError::InvalidMessage(message),
            other => HaiError::AssistantFailed(other.to_string()),
        }
    }
}

impl HaiError {
    pub fn code(&self) -> &'static str {
        match self {
            HaiError::InvalidJson(_) => "invalid_json",
            HaiError::InvalidMessage(_) => "invalid_message",
            HaiError::InvalidSession(_) => "invalid_session",
            HaiError::RateLimited { .. } | HaiError::Busy => "rate_limit_exceeded",
            HaiError::Moderation { .. } => "moderation_violation",
            HaiError::UnknownApproval(_) => "unknown_approval",
            HaiError::ToolFailed { .. } => "tool_execution_failed",
            HaiError::NoAssistant => "assistant_unavailable",
            HaiError::AssistantFailed(_) => "assistant_failed",
            HaiError::Overloaded => "overloaded",
            HaiError::SessionFull => "session_full",
            HaiError::Internal(_) => "internal_error",
        }
    }

    /// The one place node errors become the §8 `error` frame.
    pub fn to_frame(&self) -> Outbound {
        let details = match self {
            HaiError::RateLimited {
                per_minute,
                retry_after_ms,
            } => Some(json!({"limit_per_minute": per_minute, "retry_after_ms": retry_after_ms})),
            HaiError::Moderation { word } => Some(json!({"blocked_pattern": word, "severity": "medium"})),
            HaiError::ToolFailed {
                tool, tool_call_id, ..
            } => Some(json!({"tool_name": tool, "tool_call_id": tool_call_id})),
            HaiError::UnknownApproval(id) => Some(json!({"approval_id": id})),
            _ => None,
        };
        Outbound::Error {
            error_code: self.code(),
            message: self.to_string(),
            details,
        }
    }

    fn log(&self, context: &str) {
        match self {
            HaiError::AssistantFailed(_) | HaiError::Internal(_) | HaiError::Overloaded => {
                tracing::warn!(transport = "hai", context, code = self.code(), error = %self, "request failed")
            }
            _ => {
                tracing::debug!(transport = "hai", context, code = self.code(), error = %self, "request refused")
            }
        }
    }
}

fn history_id(session_id: &str) -> String {
    format!("hai:{session_id}")
}

impl Shared {
    /// Keep the session's record alive for another `session_ttl_secs`; the
    /// sweeper removes the record and its history once it lapses.
    fn record_session(&self, session_id: &str) -> Result<(), HaiError> {
        let key = history_id(session_id);
        let store = &self.node.store;
        let now = now_ms();
        let created = store
            .get::<Value>(Collection::Sessions, key.as_bytes())?
            .and_then(|record| record["created_at_ms"].as_u64())
            .unwrap_or(now);
        let expires = now.saturating_add(self.node.config.hai.session_ttl_secs * 1000);
        store.put(
            Collection::Sessions,
            key.as_bytes(),
            &json!({"created_at_ms": created, "last_used_ms": now}),
            Some(expires),
        )?;
        Ok(())
    }

    /// Append to the session's history (what `host::history()` returns to the plugin).
    fn append(&self, session_id: &str, role: &str, body: Value) -> Result<(), HaiError> {
        let entry = json!({"role": role, "body": body, "at": now_ms()});
        self.node.store.append_history(
            &history_id(session_id),
            &entry,
            self.node.config.hai.max_history_entries,
        )?;
        Ok(())
    }

    /// One page of the session's history (`store.history_page_*` bounds it;
    /// `limit` may only lower the entry bound).
    fn session_history(
        &self,
        session_id: &str,
        after: Option<u64>,
        limit: Option<usize>,
    ) -> Result<crate::store::HistoryPage<Value>, HaiError> {
        let key = history_id(session_id);
        if self
            .node
            .store
            .get::<Value>(Collection::Sessions, key.as_bytes())?
            .is_none()
        {
            return Ok(crate::store::HistoryPage {
                entries: Vec::new(),
                next_after: None,
            });
        }
        let bounds = &self.node.config.store;
        let limit = limit.map_or(bounds.history_page_entries, |l| {
            l.min(bounds.history_page_entries)
        });
        Ok(self
            .node
            .store
            .history_page(&key, after, limit, bounds.history_page_bytes)?)
    }

    /// The moderation hook: refuse a message naming a blocked word or phrase
    /// (case-insensitive, whole words) before the assistant sees it.
    fn moderate(&self, content: &str) -> Result<(), HaiError> {
        let words = |text: &str| -> String {
            text.split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let normalised = format!(" {} ", words(content));
        for blocked in &self.node.config.hai.blocked_words {
            let pattern = words(blocked);
            if !pattern.is_empty() && normalised.contains(&format!(" {pattern} ")) {
                return Err(HaiError::Moderation {
                    word: blocked.clone(),
                });
            }
        }
        Ok(())
    }
}

// --- HTTP: the browser client and history ---

async fn client_page(State(shared): State<Shared>) -> Response {
    static_file("text/html; charset=utf-8", shared.page.to_string())
}

async fn script() -> Response {
    static_file("text/javascript; charset=utf-8", CLIENT_JS.to_string())
}

async fn style() -> Response {
    static_file("text/css; charset=utf-8", CLIENT_CSS.to_string())
}

fn static_file(content_type: &'static str, body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// `GET {path}/sessions/{id}/history[?after=N&limit=M]`: the session's
/// messages, tool results and approvals, oldest first, one bounded page at a
/// time, so a reloaded page can show the conversation. `next_after`, when not
/// null, is the `after` of the next page.
async fn history(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let number = |name: &str| -> Result<Option<u64>, HaiError> {
        query
            .get(name)
            .map(|text| {
                text.parse::<u64>()
                    .map_err(|_| HaiError::InvalidMessage(format!("{name} must be a whole number")))
            })
            .transpose()
    };
    let result = wire::check_session_id(&id).and_then(|()| {
        let after = number("after")?;
        let limit = number("limit")?.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        shared.session_history(&id, after, limit)
    });
    match result {
        Ok(page) => {
            axum::Json(json!({"session_id": id, "entries": page.entries, "next_after": page.next_after}))
                .into_response()
        }
        Err(error) => {
            let status = match error {
                HaiError::InvalidSession(_) | HaiError::InvalidMessage(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (
                status,
                axum::Json(json!({"error_code": error.code(), "message": error.to_string()})),
            )
                .into_response()
        }
    }
}

// --- The WebSocket connection ---

async fn upgrade(
    State(shared): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let initial = query.get("session_id").cloned();
    if let Some(id) = &initial
        && let Err(error) = wire::check_session_id(id)
    {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error_code": error.code(), "message": error.to_string()})),
        )
            .into_response();
    }
    let max_frame = shared.node.config.hai.max_frame_bytes;
    ws.max_message_size(max_frame)
        .max_frame_size(max_frame)
        // tungstenite allocates its read buffer up front (128 KiB by default), per
        // connection; client frames are small and the buffer grows for a big one.
        .read_buffer_size(READ_BUFFER_BYTES)
        // Outbound frames are bounded (chunks by the plugin event limit, replies by the turn);
        // the write buffer never needs to hold more than a few of them.
        .max_write_buffer_size(8 << 20)
        .on_upgrade(move |socket| connection(socket, shared, initial))
}

/// What the reader hands the writer.
enum Out {
    Frame(String),
    /// Start forwarding a session's frames.
    Subscribe(mpsc::Receiver<Arc<str>>),
    Close(u16, &'static str),
}

struct Connection {
    shared: Shared,
    direct: mpsc::Sender<Out>,
    session: Option<Arc<Session>>,
}

impl Connection {
    /// Queue a frame for this connection only. A client that let its queue fill
    /// is not reading: it is disconnected rather than buffered for.
    fn send_direct(&self, out: Out) -> bool {
        self.direct.try_send(out).is_ok()
    }

    fn reply_error(&self, error: &HaiError) -> bool {
        error.log("message");
        self.send_direct(Out::Frame(error.to_frame().to_text()))
    }

    fn bind(&mut self, session_id: &str) -> Result<Arc<Session>, HaiError> {
        if let Some(session) = &self.session {
            if session.id != session_id {
                return Err(HaiError::InvalidSession(format!(
                    "this connection belongs to session {:?}; open another connection for another session",
                    session.id
                )));
            }
            return Ok(session.clone());
        }
        let session = self.shared.hub.session(session_id)?;
        if !self.send_direct(Out::Subscribe(session.subscribe())) {
            return Err(HaiError::Overloaded);
        }
        self.session = Some(session.clone());
        Ok(session)
    }

    /// Handle one text frame. `false` when the connection must close.
    fn on_text(&mut self, text: &str) -> bool {
        let outcome = match wire::parse(text) {
            Ok(Inbound::UserMessage(message)) => self.on_user_message(message),
            Ok(Inbound::ApprovalResponse(response)) => self.on_approval(response),
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => true,
            Err(error) => self.reply_error(&error),
        }
    }

    fn on_user_message(&mut self, message: UserMessage) -> Result<(), HaiError> {
        let session = self.bind(&message.session_id)?;
        let config = &self.shared.node.config.hai;
        session.admit(config.messages_per_minute)?;
        self.shared.moderate(&message.content)?;
        let queued = session.enqueue()?;
        tokio::spawn(turn::run(self.shared.clone(), session, message, queued));
        Ok(())
    }

    fn on_approval(&mut self, response: ApprovalResponse) -> Result<(), HaiError> {
        let Some(session) = &self.session else {
            return Err(HaiError::UnknownApproval(response.approval_id));
        };
        let outcome = if response.approved {
            ApprovalOutcome::Approved
        } else {
            ApprovalOutcome::Rejected {
                feedback: response.feedback.clone(),
            }
        };
        let tool_name = session.resolve(&response.approval_id, outcome)?;
        let entry = json!({
            "approval_id": response.approval_id,
            "tool_name": tool_name,
            "approved": response.approved,
            "feedback": response.feedback,
        });
        if let Err(error) = self.shared.append(&session.id, "approval", entry) {
            tracing::warn!(session = %session.id, %error, "hai: approval not recorded");
        }
        Ok(())
    }
}

async fn connection(socket: WebSocket, shared: Shared, initial_session: Option<String>) {
    let config = shared.node.config.hai.clone();
    let (sink, mut stream) = socket.split();
    let (direct, outbox) = mpsc::channel(config.send_buffer_frames);
    let last_heard = Arc::new(AtomicU64::new(now_ms()));
    let mut writer = tokio::spawn(write_loop(
        sink,
        outbox,
        last_heard.clone(),
        Duration::from_secs(config.ping_interval_secs),
    ));
    let mut connection = Connection {
        shared,
        direct,
        session: None,
    };
    if let Some(id) = initial_session
        && let Err(error) = connection.bind(&id)
    {
        connection.reply_error(&error);
    }
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            _ = &mut writer => return,
        };
        last_heard.store(now_ms(), Ordering::Relaxed);
        let keep_open = match message {
            Some(Ok(Message::Text(text))) => connection.on_text(text.as_str()),
            Some(Ok(Message::Binary(_))) => connection.reply_error(&HaiError::InvalidMessage(
                "frames are JSON text; binary frames are not part of the protocol".into(),
            )),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => true,
            Some(Ok(Message::Close(_))) | None => break,
            Some(Err(error)) => {
                let text = error.to_string();
                let too_big = text.contains("too long") || text.contains("too big");
                tracing::debug!(transport = "hai", %text, "connection read failed");
                if too_big {
                    connection.send_direct(Out::Close(CLOSE_TOO_BIG, "message too big"));
                }
                break;
            }
        };
        if !keep_open {
            // Its queue is full: the writer is stuck on this client; dropping the sender ends it.
            tracing::info!(
                transport = "hai",
                "closing a connection that does not read its frames"
            );
            break;
        }
    }
    drop(connection);
    let _ = tokio::time::timeout(WRITE_TIMEOUT, writer).await;
}

async fn write_loop(
    mut sink: futures::stream::SplitSink<WebSocket, Message>,
    mut outbox: mpsc::Receiver<Out>,
    last_heard: Arc<AtomicU64>,
    ping_every: Duration,
) {
    let mut frames: Option<mpsc::Receiver<Arc<str>>> = None;
    let mut ping = tokio::time::interval(ping_every);
    ping.tick().await;
    let close = |code: u16, reason: &'static str| {
        Message::Close(Some(CloseFrame {
            code,
            reason: Utf8Bytes::from_static(reason),
        }))
    };
    loop {
        let message = tokio::select! {
            out = outbox.recv() => match out {
                Some(Out::Frame(text)) => Message::Text(text.into()),
                Some(Out::Subscribe(receiver)) => {
                    frames = Some(receiver);
                    continue;
                }
                Some(Out::Close(code, reason)) => {
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.send(close(code, reason))).await;
                    return;
                }
                None => {
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.close()).await;
                    return;
                }
            },
            frame = next_frame(&mut frames) => match frame {
                Some(text) => Message::Text(text.as_ref().into()),
                // The session let go of this connection's queue: it fell too far behind.
                None => {
                    tracing::info!(transport = "hai", "client too slow for its session's frames; disconnecting");
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.send(close(CLOSE_POLICY, "too slow: reconnect and read the history"))).await;
                    return;
                }
            },
            _ = ping.tick() => {
                let silent_ms = now_ms().saturating_sub(last_heard.load(Ordering::Relaxed));
                if silent_ms > 2 * ping_every.as_millis() as u64 {
                    tracing::debug!(transport = "hai", silent_ms, "peer stopped answering pings");
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.send(close(CLOSE_GOING_AWAY, "keep-alive timed out"))).await;
                    return;
                }
                Message::Ping(Default::default())
            }
        };
        match tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return,
            Err(_) => {
                tracing::info!(
                    transport = "hai",
                    "closing a connection that does not read its frames (write timed out)"
                );
                return;
            }
        }
    }
}

async fn next_frame(frames: &mut Option<mpsc::Receiver<Arc<str>>>) -> Option<Arc<str>> {
    match frames {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_a_code_and_a_frame() {
        let frame = HaiError::RateLimited {
            per_minute: 3,
            retry_after_ms: 10,
        }
        .to_frame();
        let value: Value = serde_json::from_str(&frame.to_text()).unwrap();
        assert_eq!(value["type"], "error");
        assert_eq!(value["error_code"], "rate_limit_exceeded");
        assert_eq!(value["details"]["limit_per_minute"], 3);
        assert_eq!(HaiError::InvalidJson("x".into()).code(), "invalid_json");
    }
}
