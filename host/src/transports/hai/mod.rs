//! The HAI protocol (`hai-protocol.md`): human chat over a WebSocket at
//! `hai.path` (§"Connection"), with streaming answers, tool lifecycle frames and
//! human approval of risky tools, plus the browser client (§"Implementation
//! Guide") served at `/`.
//!
//! - [`wire`]: the frames and the validation of what a client sends.
//! - [`session`]: live sessions: broadcast to every connection, approvals, rate window.
//! - [`turn`]: one answer, from `thinking` to `completed`.
//! - [`fleet`]: several nodes on one shared store: frames of a session reach
//!   its connections on every node, and an approval is decided once, on any node.
//! - this module: the connection (bounded buffers, keep-alive, frame size), the
//!   moderation hook, sessions in the store, and [`HaiError`], the one place node
//!   errors become `error` frames.
//!
//! A connection belongs to one session: the one named in `?session_id=` when it
//! connects, or else in its first `user_message`. It then receives every frame
//! of that session, also those caused by other connections on it.
//!
//! Open-port rules ([`access`], the `hai.*` limits in `config/agora.toml`): the
//! node's browser policy ([`crate::policy::browser`]) guards every route here
//! (`Host` one of the node's names, a browser's `Origin` the node's own or in
//! `hai.allowed_origins`); `hai.auth_token`, when
//! set, is required; the connection that creates a session gets its secret in a
//! `{"type":"session","session_id":…,"session_secret":…}` frame (a type the spec's
//! clients ignore), and any other connection needs that secret to use the session
//! (`?session_secret=`, the `X-HAI-Session-Secret` header, or `session_secret` in
//! its first `user_message`), as does the history endpoint — unless the session's
//! id is a canonical UUIDv4, as the spec's clients make it: such an id is its own
//! bearer secret, so the spec's returning client resumes with its id alone (see
//! [`access`]). The log names sessions by [`access::session_tag`]. Sessions created per
//! client address, live sessions, stored sessions and their history bytes
//! ([`crate::policy::quota`]) and pending approvals are capped, each refusal a
//! `rate_limit_exceeded` frame naming its limit. What a client is told about (its
//! message taken, an approval decided, the reply) is committed to disk first.

pub mod access;
mod fleet;
mod session;
mod turn;
pub mod wire;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::node::state::NodeState;
use crate::policy::browser::{self, BrowserRefusal, Endpoint};
use crate::policy::quota::{Charge, QuotaBounds, QuotaError, StoredQuota};
use crate::runtime::{FailureKind, InvokeError};
use crate::store::{Collection, StoreError, now_ms};
use session::{Attached, Hub, Limits, Opened, Origin, Session, Stored};
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
const CLIENT_MARKDOWN: &str = include_str!("../../../web/hai-markdown.js");
const CLIENT_CARDS: &str = include_str!("../../../web/hai-cards.js");
/// The client's markdown parser and sanitiser, vendored verbatim (see `web/vendor/`).
const VENDOR_MARKED: &str = include_str!("../../../web/vendor/marked.esm.js");
const VENDOR_PURIFY: &str = include_str!("../../../web/vendor/purify.min.js");

/// What every handler of this transport shares.
#[derive(Clone)]
pub struct Shared {
    node: NodeState,
    hub: Arc<Hub>,
    page: Arc<str>,
    /// Stored sessions and their history bytes per client address and in total.
    stored: Arc<StoredQuota>,
}

pub fn router(state: NodeState) -> Router {
    let config = &state.config.hai;
    let path = config.path.trim_end_matches('/');
    let path = if path.is_empty() { "/ws" } else { path }.to_string();
    let page = CLIENT_HTML.replace("{{WS_PATH}}", &path);
    let shared = Shared {
        hub: Hub::new(
            Limits::from_config(config),
            fleet::FleetOut::start(&state.store, state.runtime.metrics(), &state.background),
            state.runtime.approvals().clone(),
            &state.background,
        ),
        stored: Arc::new(StoredQuota::new(
            state.store.clone(),
            "hai.session",
            QuotaBounds {
                per_client_items: config.max_stored_sessions_per_client,
                per_client_items_key: "hai.max_stored_sessions_per_client",
                per_client_bytes: config.max_stored_session_bytes_per_client,
                per_client_bytes_key: "hai.max_stored_session_bytes_per_client",
                total_bytes: config.max_stored_session_bytes,
                total_bytes_key: "hai.max_stored_session_bytes",
            },
            Duration::from_secs(config.session_ttl_secs),
        )),
        node: state,
        page: Arc::from(page),
    };
    let browser = Endpoint {
        allowed_origins: shared.node.config.hai.allowed_origins.clone(),
        origins_key: "hai.allowed_origins",
        json_rpc: false,
        refuse: |refusal| HaiError::from(refusal).to_http(),
    };
    let policy = shared.node.browser.clone();
    let router = Router::new()
        .route(&path, get(upgrade))
        .route(&format!("{path}/sessions/{{id}}/history"), get(history))
        .route("/", get(client_page))
        .route("/hai-client.js", get(|| javascript(CLIENT_JS)))
        .route("/hai-client.css", get(style))
        .route("/hai-markdown.js", get(|| javascript(CLIENT_MARKDOWN)))
        .route("/hai-cards.js", get(|| javascript(CLIENT_CARDS)))
        .route("/vendor/marked.esm.js", get(|| javascript(VENDOR_MARKED)))
        .route("/vendor/purify.min.js", get(|| javascript(VENDOR_PURIFY)))
        .with_state(shared);
    browser::guard(router, policy, browser)
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
    #[error(
        "Invalid session: this session exists; resume it with its session_secret, or start a new session"
    )]
    SessionSecret,
    #[error("Too many sessions ({limit} = {value}); try again later")]
    TooManySessions {
        limit: &'static str,
        value: usize,
        retry_after_ms: u64,
    },
    #[error("Too many tool approvals are waiting for a human ({limit} = {value}); answer those first")]
    TooManyApprovals { limit: &'static str, value: usize },
    /// A new session would pass this client's (or the node's) stored-session bounds.
    #[error("No new session can be stored: {message}")]
    TooManyStored { limit: &'static str, message: String },
    /// The browser policy refused the request (`Host` or `Origin`).
    #[error(transparent)]
    Browser(#[from] BrowserRefusal),
    #[error("This node's chat needs its operator token (?token= or Authorization: Bearer)")]
    Unauthorized,
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
    #[error("The node is still loading its plugins; try again shortly")]
    Starting,
    #[error("This session's history is full; start a new session")]
    SessionFull,
    /// The store cannot answer now (its database is down or unreachable):
    /// nothing was recorded, and the same message may be sent again.
    #[error("The node's storage is unavailable; try again shortly")]
    StorageUnavailable,
    #[error("Internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for HaiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Limit(_) => HaiError::SessionFull,
            StoreError::Unavailable(detail) => {
                tracing::warn!(transport = "hai", %detail, "storage unavailable");
                HaiError::StorageUnavailable
            }
            other => HaiError::Internal(format!("storage failed: {other}")),
        }
    }
}

impl From<InvokeError> for HaiError {
    fn from(error: InvokeError) -> Self {
        match error {
            InvokeError::Overloaded => HaiError::Overloaded,
            InvokeError::Starting => HaiError::Starting,
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
            HaiError::InvalidSession(_) | HaiError::SessionSecret => "invalid_session",
            HaiError::RateLimited { .. }
            | HaiError::Busy
            | HaiError::TooManySessions { .. }
            | HaiError::TooManyApprovals { .. }
            | HaiError::TooManyStored { .. } => "rate_limit_exceeded",
            HaiError::Browser(_) => "origin_refused",
            HaiError::Unauthorized => "unauthorized",
            HaiError::Moderation { .. } => "moderation_violation",
            HaiError::UnknownApproval(_) => "unknown_approval",
            HaiError::ToolFailed { .. } => "tool_execution_failed",
            HaiError::NoAssistant => "assistant_unavailable",
            HaiError::AssistantFailed(_) => "assistant_failed",
            // The same retryable code: a client needs only to try again.
            HaiError::Overloaded | HaiError::Starting => "overloaded",
            HaiError::SessionFull => "session_full",
            HaiError::StorageUnavailable => "storage_unavailable",
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
            HaiError::TooManySessions {
                limit,
                value,
                retry_after_ms,
            } => Some(json!({"limit": limit, "value": value, "retry_after_ms": retry_after_ms})),
            HaiError::TooManyApprovals { limit, value } => Some(json!({"limit": limit, "value": value})),
            HaiError::TooManyStored { limit, .. } => Some(json!({"limit": limit})),
            HaiError::StorageUnavailable => Some(json!({"retry_after_ms": 1000})),
            _ => None,
        };
        Outbound::Error {
            error_code: self.code(),
            message: self.to_string(),
            details,
        }
    }

    /// The same refusal for the HTTP side (the upgrade and the history endpoint).
    pub fn to_http(&self) -> Response {
        let status = match self {
            HaiError::InvalidSession(_) | HaiError::InvalidMessage(_) => StatusCode::BAD_REQUEST,
            HaiError::Unauthorized => StatusCode::UNAUTHORIZED,
            HaiError::Browser(refusal) => refusal.status(),
            HaiError::SessionSecret => StatusCode::FORBIDDEN,
            HaiError::TooManySessions { .. } | HaiError::RateLimited { .. } | HaiError::Busy => {
                StatusCode::TOO_MANY_REQUESTS
            }
            HaiError::StorageUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut response = (
            status,
            axum::Json(json!({"error_code": self.code(), "message": self.to_string()})),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
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

/// A stored-session bound as the client hears it, naming the key that refused;
/// the store's own failures as themselves, and a count too busy to read as
/// "try again" (no bound refused it).
fn stored_refusal(error: QuotaError) -> HaiError {
    match error {
        QuotaError::PerClient { key, .. } | QuotaError::Total { key, .. } => HaiError::TooManyStored {
            limit: key,
            message: error.to_string(),
        },
        QuotaError::Store(error) => error.into(),
        QuotaError::Contended | QuotaError::TooManyRecords => HaiError::Overloaded,
    }
}

impl Shared {
    /// Keep the session's record alive for another `session_ttl_secs`; the
    /// sweeper removes the record and its history once it lapses.
    ///
    /// The first record claims the id for the whole fleet: a session created
    /// on two nodes at once (each found no record) is kept by the node that
    /// records it first, and the other's turn is refused as another's session,
    /// so neither can replace the other's secret.
    ///
    /// A new record is charged to `client`'s stored sessions ([`StoredQuota`]),
    /// or refused naming the bound; every later one charges what the session's
    /// history grew by since, and keeps the charge alive as long as the session.
    async fn record_session(&self, session: &Session, client: IpAddr) -> Result<(), HaiError> {
        let key = history_id(&session.id);
        let store = &self.node.store;
        let now = now_ms();
        let secret = hex::encode(session.secret);
        let existing = store.get::<Value>(Collection::Sessions, key.as_bytes()).await?;
        if existing
            .as_ref()
            .is_some_and(|record| record["secret_sha256"].as_str() != Some(secret.as_str()))
        {
            return Err(HaiError::SessionSecret);
        }
        let created = existing
            .as_ref()
            .and_then(|record| record["created_at_ms"].as_u64())
            .unwrap_or(now);
        let expires = now.saturating_add(self.node.config.hai.session_ttl_secs * 1000);
        let grown = session.take_appended();
        let mut record = json!({"created_at_ms": created, "last_used_ms": now, "secret_sha256": secret});
        let Some(existing) = existing else {
            let charge = self
                .stored
                .admit(&access::client_key(client).to_string(), grown)
                .await
                .map_err(stored_refusal)?;
            record["quota"] = json!(charge);
            if !store
                .insert_new(Collection::Sessions, key.as_bytes(), &record, Some(expires))
                .await?
            {
                let _ = self.stored.refund(&charge).await;
                return Err(HaiError::SessionSecret);
            }
            return Ok(());
        };
        // Records from before the bound carry no charge: nothing to grow.
        if let Ok(mut charge) = serde_json::from_value::<Charge>(existing["quota"].clone()) {
            let bytes = charge.bytes.saturating_add(grown);
            if let Err(error) = self.stored.grow(&mut charge, bytes).await {
                tracing::warn!(transport = "hai", session = %access::session_tag(&session.id), %error, "hai: a session's growth was not counted");
            }
            record["quota"] = json!(charge);
        }
        store
            .put(Collection::Sessions, key.as_bytes(), &record, Some(expires))
            .await?;
        Ok(())
    }

    /// Append to the session's history (what `host::history()` returns to the
    /// plugin); its size is charged when the session is next recorded.
    async fn append(&self, session: &Session, role: &str, body: Value) -> Result<(), HaiError> {
        let max_entries = self.node.config.hai.max_history_entries;
        let store = &self.node.store;
        let size = store
            .append_entry(&history_id(&session.id), role, &body, max_entries)
            .await?;
        session.appended(size as u64);
        Ok(())
    }

    /// Make what was appended durable before a client is told about it.
    async fn commit(&self) -> Result<(), HaiError> {
        self.node
            .store
            .commit()
            .await
            .map_err(|error| HaiError::Internal(format!("committing to disk failed: {error}")))
    }

    /// What the store knows of a session that is not in memory. An expired record
    /// not yet swept is removed with its history now: the id is free again, and a
    /// new owner must not see what the old one said.
    async fn stored_session(&self, session_id: &str) -> Result<Stored, HaiError> {
        let key = history_id(session_id);
        let store = &self.node.store;
        match store.get::<Value>(Collection::Sessions, key.as_bytes()).await? {
            Some(record) => {
                let hash = record["secret_sha256"]
                    .as_str()
                    .and_then(|text| hex::decode(text).ok())
                    .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok());
                Ok(Stored::Known(hash))
            }
            None => {
                if store.expired(Collection::Sessions, key.as_bytes()).await? {
                    store.remove_history(&key).await?;
                    store.remove(Collection::Sessions, key.as_bytes()).await?;
                }
                Ok(Stored::Unknown)
            }
        }
    }

    /// The history endpoint's checks: the operator token, then the session's secret
    /// (its live copy, else its record) unless the id is a bearer id. An unknown
    /// session has nothing to show.
    async fn authorize_history(
        &self,
        id: &str,
        query: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Result<(), HaiError> {
        let config = &self.node.config.hai;
        access::check_token(
            &config.auth_token,
            query.get(access::TOKEN_PARAM).map(String::as_str),
            headers,
        )?;
        wire::check_session_id(id)?;
        let presented =
            access::presented_secret(query.get(access::SECRET_PARAM).map(String::as_str), headers);
        let expected = match self.hub.live(id) {
            Some(session) => Some(session.secret),
            None => match self.stored_session(id).await? {
                Stored::Known(hash) => Some(hash.ok_or(HaiError::SessionSecret)?),
                Stored::Unknown => None,
            },
        };
        match expected {
            Some(hash) if !access::session_opens(id, presented, &hash) => Err(HaiError::SessionSecret),
            _ => Ok(()),
        }
    }

    /// One page of the session's history (`store.history_page_*` bounds it;
    /// `limit` may only lower the entry bound).
    async fn session_history(
        &self,
        session_id: &str,
        after: Option<u64>,
        limit: Option<usize>,
    ) -> Result<crate::store::HistoryPage<Value>, HaiError> {
        let key = history_id(session_id);
        if self
            .node
            .store
            .get::<Value>(Collection::Sessions, key.as_bytes())
            .await?
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
            .history_page(&key, after, limit, bounds.history_page_bytes)
            .await?)
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

async fn style() -> Response {
    static_file("text/css; charset=utf-8", CLIENT_CSS.to_string())
}

async fn javascript(source: &'static str) -> Response {
    static_file("text/javascript; charset=utf-8", source.to_string())
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
    headers: HeaderMap,
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
    let result = async {
        shared.authorize_history(&id, &query, &headers).await?;
        let after = number("after")?;
        let limit = number("limit")?.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        shared.session_history(&id, after, limit).await
    }
    .await;
    match result {
        Ok(page) => {
            axum::Json(json!({"session_id": id, "entries": page.entries, "next_after": page.next_after}))
                .into_response()
        }
        Err(error) => error.to_http(),
    }
}

// --- The WebSocket connection ---

async fn upgrade(
    State(shared): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let config = &shared.node.config.hai;
    // Before the upgrade (the browser policy has run): a missing token never gets a socket.
    let checked = access::check_token(
        &config.auth_token,
        query.get(access::TOKEN_PARAM).map(String::as_str),
        &headers,
    );
    if let Err(error) = checked {
        error.log("upgrade");
        return error.to_http();
    }
    let initial = query.get("session_id").cloned();
    if let Some(id) = &initial
        && let Err(error) = wire::check_session_id(id)
    {
        return error.to_http();
    }
    let secret = access::presented_secret(query.get(access::SECRET_PARAM).map(String::as_str), &headers)
        .map(str::to_string);
    let max_frame = shared.node.config.hai.max_frame_bytes;
    ws.max_message_size(max_frame)
        .max_frame_size(max_frame)
        // tungstenite allocates its read buffer up front (128 KiB by default), per
        // connection; client frames are small and the buffer grows for a big one.
        .read_buffer_size(READ_BUFFER_BYTES)
        // Outbound frames are bounded (chunks by the plugin event limit, replies by the turn);
        // the write buffer never needs to hold more than a few of them.
        .max_write_buffer_size(8 << 20)
        .on_upgrade(move |socket| connection(socket, shared, peer, initial, secret))
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
    session: Option<Attached>,
    /// Its client address and pending approvals, for the per-address and per-connection bounds.
    origin: Origin,
    /// The session secret presented when it connected.
    secret: Option<String>,
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

    async fn bind(&mut self, session_id: &str, secret: Option<&str>) -> Result<Arc<Session>, HaiError> {
        if let Some(session) = &self.session {
            if session.id != session_id {
                // Not naming it: the message is also logged, and an id may be a bearer secret.
                return Err(HaiError::InvalidSession(
                    "this connection belongs to another session; open another connection for another session"
                        .into(),
                ));
            }
            return Ok(Arc::clone(session));
        }
        let secret = secret.or(self.secret.as_deref());
        let shared = &self.shared;
        // Read before the hub's lock is taken (a store may wait on the network);
        // if the session came alive meanwhile, the hub uses the live one instead.
        let stored = match shared.hub.live(session_id) {
            Some(_) => None,
            None => Some(shared.stored_session(session_id).await?),
        };
        let opened = shared.hub.open(session_id, secret, self.origin.ip, || {
            stored.ok_or_else(|| HaiError::Internal("the session ended while it was being opened".into()))
        })?;
        let session = match opened {
            Opened::Existing(session) => session,
            Opened::Created(session, secret) => {
                // In a fleet the id is claimed for every node before its secret is
                // handed out, so another node opens it with this secret only (on one
                // node the hub's table is the claim, and the record waits for a message).
                if shared.hub.fleet().is_some() {
                    shared.record_session(&session, self.origin.ip).await?;
                }
                // Queued before the subscription, so it is this connection's first frame of the session.
                let frame = Outbound::Session {
                    session_id: session.id.clone(),
                    session_secret: secret,
                };
                if !self.send_direct(Out::Frame(frame.to_text())) {
                    return Err(HaiError::Overloaded);
                }
                session
            }
        };
        if !self.send_direct(Out::Subscribe(session.subscribe())) {
            return Err(HaiError::Overloaded);
        }
        self.session = Some(session.attach());
        Ok(session)
    }

    /// Handle one text frame. `false` when the connection must close.
    async fn on_text(&mut self, text: &str) -> bool {
        let outcome = match wire::parse(text) {
            Ok(Inbound::UserMessage(message)) => self.on_user_message(message).await,
            Ok(Inbound::ApprovalResponse(response)) => self.on_approval(response).await,
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => true,
            Err(error) => self.reply_error(&error),
        }
    }

    async fn on_user_message(&mut self, message: UserMessage) -> Result<(), HaiError> {
        let session = self
            .bind(&message.session_id, message.session_secret.as_deref())
            .await?;
        self.shared.hub.admit_message(&session)?;
        self.shared.moderate(&message.content)?;
        let queued = session.enqueue()?;
        tokio::spawn(turn::run(
            self.shared.clone(),
            session,
            self.origin.clone(),
            message,
            queued,
        ));
        Ok(())
    }

    /// Only a connection bound to the session (its creator, or one that showed the
    /// secret or the session's bearer id) can answer its approvals, on whichever
    /// node it is connected. The answer that takes the approval's record decides
    /// it; any other (a second
    /// answer, one racing it on another node, one after the tool's deadline) is
    /// told it is unknown. The decision is on disk before the tool may run, since
    /// the frames that follow tell every client it was taken.
    async fn on_approval(&mut self, response: ApprovalResponse) -> Result<(), HaiError> {
        let Some(session) = self.session.as_deref().cloned() else {
            return Err(HaiError::UnknownApproval(response.approval_id));
        };
        let key = fleet::approval_key(&session.id, &response.approval_id);
        let Some(record) = self
            .shared
            .node
            .store
            .take::<fleet::ApprovalRecord>(Collection::Approvals, &key)
            .await?
        else {
            return Err(HaiError::UnknownApproval(response.approval_id));
        };
        // The waiting tool, when it waits on this node. Held until the decision is
        // recorded: not recorded, not acted on, and dropping it ends the wait as unanswered.
        let local = self
            .shared
            .node
            .runtime
            .approvals()
            .take(&session.approval_scope(), &response.approval_id);
        let entry = json!({
            "approval_id": response.approval_id,
            "tool_name": record.tool_name,
            "approved": response.approved,
            "feedback": response.feedback,
        });
        self.shared.append(&session, "approval", entry).await?;
        self.shared.commit().await?;
        let decided = fleet::Decided {
            session_id: session.id.clone(),
            approval_id: response.approval_id,
            approved: response.approved,
            feedback: response.feedback,
        };
        let delivered = match (local, self.shared.hub.fleet()) {
            (Some(decision), _) => decision.deliver(decided.outcome()),
            // It waits on another node, which takes it from here.
            (None, Some(fleet)) => {
                fleet.send_decision(&decided).await?;
                true
            }
            (None, None) => false,
        };
        if !delivered {
            // The tool stopped waiting meanwhile (its turn ended).
            return Err(HaiError::UnknownApproval(decided.approval_id));
        }
        Ok(())
    }
}

async fn connection(
    socket: WebSocket,
    shared: Shared,
    peer: SocketAddr,
    initial_session: Option<String>,
    secret: Option<String>,
) {
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
        origin: Origin::new(peer.ip()),
        secret,
    };
    if let Some(id) = initial_session
        && let Err(error) = connection.bind(&id, None).await
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
            Some(Ok(Message::Text(text))) => connection.on_text(text.as_str()).await,
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
