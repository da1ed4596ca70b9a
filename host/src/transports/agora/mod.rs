//! Agora two-party JSON exchanges (`specs/agora-two-party-json.txt`).
//!
//! - §5–6: `POST {base}` carries `body`, optional `protocolHash`,
//!   `protocolSources` and `multiround`; replies are `{"status":"success","body":…}`
//!   or `{"status":"failure","error":…}`.
//! - §7: multi-round conversations live in sled under unguessable ids;
//!   follow-ups go to `{base}/conversations/{id}`; `DELETE` ends one.
//! - §8: documents are routed by the SHA1 of their exact bytes; a hash may be
//!   written in hex (the spec) or base64 (agora-protocol 0.2.0).
//! - §9: `GET {base}/wellknown` lists every fully supported document.
//! - §10: transport errors are HTTP statuses, Agora errors are 200 + failure,
//!   protocol errors are the plugin's business inside `body`. [`AgoraError`]
//!   is the one place that mapping is written.
//! - Our limits ([`limits`]): live conversations in total and per client
//!   address, and each client's creation rate; refusals are 429/503 with
//!   `Retry-After` in the failure shape above.

pub mod document;
pub mod limits;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use bytes::Bytes;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use self::limits::{ConversationLimits, Refusal};
use crate::node::state::NodeState;
use crate::runtime::{
    Call, Exchange, FailureKind, InvokeError, LoadedPlugin, Phase, Registry, TransportKind,
};
use crate::store::{Collection, StoreError, now_ms};

/// How long an expired conversation id keeps answering "Conversation expired"
/// (instead of 404) before the sweeper forgets it.
const EXPIRED_ID_RETENTION_SECS: u64 = 24 * 3600;

/// Longest conversation id the node ever issues is 32 characters; anything
/// longer is unknown without touching the store.
const MAX_CONVERSATION_ID_LEN: usize = 64;

/// What the Agora handlers share: the node, and the conversation caps.
#[derive(Clone)]
struct Agora {
    node: NodeState,
    limits: Arc<ConversationLimits>,
}

pub fn router(node: NodeState) -> Router {
    let limits = ConversationLimits::new(&node.config.agora);
    restore_limits(&node, &limits);
    let state = Agora { node, limits };
    let base = state.node.config.agora.path.trim_end_matches('/').to_string();
    let mut router = Router::new()
        .route(
            &format!("{base}/conversations/{{id}}"),
            post(follow_up).delete(end_conversation),
        )
        .route(&format!("{base}/wellknown"), get(wellknown));
    router = if base.is_empty() {
        router.route("/", post(start))
    } else {
        router
            .route(&base, post(start))
            .route(&format!("{base}/"), post(start))
    };
    // The reference library's dialect also serves the root path.
    if state.node.config.agora.reference_dialect && !base.is_empty() {
        router = router
            .route("/", post(start))
            .route("/conversations/{id}", post(follow_up).delete(end_conversation))
            .route("/wellknown", get(wellknown));
    }
    router.with_state(state)
}

/// Count the conversations the store already holds, so a restart neither
/// frees capacity an attacker filled nor forgets honest clients' places.
fn restore_limits(node: &NodeState, limits: &ConversationLimits) {
    let now = now_ms() / 1000;
    let ids = match node.store.keys(Collection::Conversations, b"", usize::MAX) {
        Ok(ids) => ids,
        Err(error) => {
            tracing::warn!(%error, "cannot count the stored Agora conversations");
            return;
        }
    };
    for id in ids {
        let Ok(id) = String::from_utf8(id) else { continue };
        if let Ok(Some(record)) = node
            .store
            .get::<Conversation>(Collection::Conversations, id.as_bytes())
        {
            limits.restore(&id, record.client, record.expires_at, now);
        }
    }
}

/// Everything that can go wrong, by the layer of §10 it belongs to.
#[derive(Debug, thiserror::Error)]
pub enum AgoraError {
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("the request body is over the {0}-byte limit")]
    TooLarge(usize),
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    NotFound(String),
    #[error("Unsupported protocol")]
    UnsupportedProtocol,
    #[error("Conversation expired")]
    ConversationExpired,
    /// Any other Agora-level rejection (HTTP 200 + failure).
    #[error("{0}")]
    Rejected(String),
    #[error("The node is overloaded, try again shortly")]
    Overloaded,
    /// A conversation cap or the creation rate (429 per client, 503 in total).
    #[error("{message}")]
    Busy {
        status: StatusCode,
        message: String,
        retry_after: u64,
    },
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for AgoraError {
    fn from(error: StoreError) -> Self {
        AgoraError::Internal(format!("storage failed: {error}"))
    }
}

impl From<Refusal> for AgoraError {
    fn from(refusal: Refusal) -> Self {
        let (status, message, retry_after) = match refusal {
            Refusal::Full { limit, retry_after } => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("The node holds its maximum of {limit} conversations, try again later"),
                retry_after,
            ),
            Refusal::ClientFull { limit, retry_after } => (
                StatusCode::TOO_MANY_REQUESTS,
                format!("Too many open conversations: at most {limit} per client, end one first"),
                retry_after,
            ),
            Refusal::RateLimited {
                per_minute,
                retry_after,
            } => (
                StatusCode::TOO_MANY_REQUESTS,
                format!("Too many new conversations: at most {per_minute} per minute per client"),
                retry_after,
            ),
        };
        AgoraError::Busy {
            status,
            message,
            retry_after,
        }
    }
}

impl From<InvokeError> for AgoraError {
    fn from(error: InvokeError) -> Self {
        match error {
            InvokeError::Overloaded => AgoraError::Overloaded,
            InvokeError::Failure {
                kind: FailureKind::Unsupported,
                message,
            } => AgoraError::Rejected(format!("Unsupported: {message}")),
            InvokeError::Failure {
                kind: FailureKind::NotFound,
                message,
            } => AgoraError::Rejected(message),
            InvokeError::Failure {
                kind: FailureKind::PaymentRequired,
                message,
            } => AgoraError::Rejected(format!("Payment required: {message}")),
            other => AgoraError::Internal(other.to_string()),
        }
    }
}

impl AgoraError {
    fn status(&self) -> StatusCode {
        match self {
            AgoraError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AgoraError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AgoraError::Malformed(_) => StatusCode::BAD_REQUEST,
            AgoraError::NotFound(_) => StatusCode::NOT_FOUND,
            AgoraError::UnsupportedProtocol | AgoraError::ConversationExpired | AgoraError::Rejected(_) => {
                StatusCode::OK
            }
            AgoraError::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            AgoraError::Busy { status, .. } => *status,
            AgoraError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The one place node errors become Agora's wire shape.
    fn into_response(self, reference_dialect: bool) -> Response {
        let status = self.status();
        let message = self.to_string();
        let retry_after = match &self {
            AgoraError::Busy { retry_after, .. } => Some(*retry_after),
            AgoraError::Overloaded => Some(1),
            _ => None,
        };
        if matches!(self, AgoraError::Busy { .. }) {
            tracing::debug!(transport = "agora", %message, "request refused");
        } else if status.is_server_error() {
            tracing::warn!(transport = "agora", %message, "request failed");
        }
        let body = if reference_dialect {
            json!({"status": "error", "message": message})
        } else {
            json!({"status": "failure", "error": message})
        };
        let mut response = (status, axum::Json(body)).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }

    /// A body the HTTP layer refused before it reached us (size limit, broken stream).
    fn from_rejection(rejection: BytesRejection, limit: usize) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            AgoraError::TooLarge(limit)
        } else {
            AgoraError::Malformed(format!("cannot read the request body: {}", rejection.body_text()))
        }
    }
}

/// A validated request (§6.1). Unknown fields are ignored.
pub struct AgoraRequest {
    body: Value,
    protocol_hash: Option<String>,
    sources: Vec<String>,
    multiround: bool,
}

#[derive(Serialize, Deserialize, Clone, PartialEq)]
struct Conversation {
    plugin: String,
    protocol_hash: Option<String>,
    /// The verified document, for conversations served by an any-document plugin
    /// (that plugin has no copy of its own to read on follow-ups).
    #[serde(default)]
    document: Option<String>,
    created_at_ms: u64,
    /// Unix seconds, as `conversationExpires` says.
    expires_at: u64,
    /// Rounds started, the first included; bounds the stored history.
    #[serde(default)]
    rounds: u64,
    /// The client address charged for it ([`limits::client_key`]), so the caps
    /// survive a restart.
    #[serde(default)]
    client: Option<String>,
}

fn parse_request(
    state: &NodeState,
    headers: &HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<AgoraRequest, AgoraError> {
    // A refused body is answered first: nothing else about the request matters.
    let raw = raw.map_err(|r| AgoraError::from_rejection(r, state.config.http.max_body_bytes))?;
    if !super::is_json_content_type(headers) {
        return Err(AgoraError::UnsupportedMediaType);
    }
    let value: Value =
        serde_json::from_slice(&raw).map_err(|e| AgoraError::Malformed(format!("malformed JSON: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(AgoraError::Malformed("the request must be a JSON object".into()));
    };
    request_fields(&mut fields, state.config.agora.max_sources)
}

/// The field checks of §6.1 on a request object (public for the fuzz targets in `fuzz/`).
pub fn request_fields(
    fields: &mut Map<String, Value>,
    max_sources: usize,
) -> Result<AgoraRequest, AgoraError> {
    let body = match fields.remove("body") {
        Some(body @ (Value::String(_) | Value::Object(_))) => body,
        Some(_) => {
            return Err(AgoraError::Malformed(
                "field `body` must be a string or an object".into(),
            ));
        }
        None => return Err(AgoraError::Malformed("missing field `body`".into())),
    };
    let protocol_hash = match fields.remove("protocolHash") {
        None | Some(Value::Null) => None,
        Some(Value::String(hash)) => Some(document::normalise_hash(&hash).ok_or_else(|| {
            AgoraError::Malformed("`protocolHash` must be a SHA1 in hex (40 digits) or base64".into())
        })?),
        Some(_) => {
            return Err(AgoraError::Malformed(
                "field `protocolHash` must be a string or null".into(),
            ));
        }
    };
    let sources = match fields.remove("protocolSources") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.len() > max_sources => {
            return Err(AgoraError::Malformed(format!(
                "`protocolSources` has {} entries, at most {max_sources} are accepted",
                items.len()
            )));
        }
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(source) => Ok(source),
                _ => Err(AgoraError::Malformed(
                    "`protocolSources` must be an array of strings".into(),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(AgoraError::Malformed(
                "field `protocolSources` must be an array of strings".into(),
            ));
        }
    };
    let multiround = match fields.remove("multiround") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(flag)) => flag,
        Some(_) => {
            return Err(AgoraError::Malformed(
                "field `multiround` must be a boolean".into(),
            ));
        }
    };
    Ok(AgoraRequest {
        body,
        protocol_hash,
        sources,
        multiround,
    })
}

/// `POST {base}`: a single-round request or the start of a conversation.
async fn start(
    State(state): State<Agora>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let dialect = state.node.config.agora.reference_dialect;
    match handle_start(&state, peer, &headers, raw).await {
        Ok(reply) => reply,
        Err(error) => error.into_response(dialect),
    }
}

/// Where a request goes, once its protocol is settled.
struct Route {
    plugin: Arc<LoadedPlugin>,
    /// The hex hash the plugin sees as `route` (empty without a protocol).
    key: String,
    /// Set when an any-document plugin serves a document the request brought along.
    document: Option<String>,
}

async fn handle_start(
    agora: &Agora,
    peer: SocketAddr,
    headers: &HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, AgoraError> {
    let state = &agora.node;
    let request = parse_request(state, headers, raw)?;
    // Charged before any work (source fetches, the plugin) is done for it.
    let reservation = if request.multiround {
        Some(Reservation::new(agora, peer)?)
    } else {
        None
    };
    let registry = state.runtime.registry();
    let route = match &request.protocol_hash {
        None => Route {
            plugin: default_plugin(state, &registry)?,
            key: String::new(),
            document: None,
        },
        Some(hash) => resolve_protocol(state, &registry, hash, &request.sources).await?,
    };
    let body = plugin_body(&request.body, route.document.as_deref());
    let Some(reservation) = reservation else {
        let reply = run(state, &route.plugin, route.key, None, &body).await?;
        return Ok(success(reply, None));
    };
    let record = create_conversation(state, &route, request.protocol_hash.clone(), &reservation)?;
    let id = reservation.id.clone();
    let reply = match run(state, &route.plugin, route.key, Some(&id), &body).await {
        Ok(reply) => reply,
        Err(error) => {
            // Nobody learns the id of a conversation whose first round failed.
            state.store.remove(Collection::Conversations, id.as_bytes())?;
            return Err(error);
        }
    };
    append(state, &id, "user", &request.body)?;
    append(state, &id, "agent", &reply)?;
    state.store.commit().await?;
    reservation.keep();
    Ok(success(reply, Some((&id, record.expires_at))))
}

/// A place under the conversation caps, held for a conversation being
/// created; released when dropped unless the conversation was created.
struct Reservation {
    limits: Arc<ConversationLimits>,
    id: String,
    client: String,
    expires_at: u64,
    kept: bool,
}

impl Reservation {
    fn new(agora: &Agora, peer: SocketAddr) -> Result<Reservation, AgoraError> {
        // 192 random bits (§11: hard to guess).
        let mut id_bytes = [0u8; 24];
        rand::rngs::OsRng.fill_bytes(&mut id_bytes);
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id_bytes);
        let now = now_ms();
        let ttl_ms = agora.node.config.agora.conversation_ttl_secs.saturating_mul(1000);
        // Rounded up, so a conversation lives at least the configured time.
        let expires_at = now.saturating_add(ttl_ms).div_ceil(1000);
        let client = limits::client_key(peer.ip());
        agora.limits.acquire(&id, &client, expires_at, now / 1000)?;
        Ok(Reservation {
            limits: agora.limits.clone(),
            id,
            client,
            expires_at,
            kept: false,
        })
    }

    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.kept {
            self.limits.release(&self.id);
        }
    }
}

fn default_plugin(state: &NodeState, registry: &Registry) -> Result<Arc<LoadedPlugin>, AgoraError> {
    let configured = &state.config.agora.default_plugin;
    let plugin = if configured.is_empty() {
        registry.agora_default()
    } else {
        registry.by_name(configured)
    };
    plugin
        .cloned()
        .ok_or_else(|| AgoraError::Rejected("No handler for requests without a protocol".into()))
}

/// What the request's `protocolSources` say about its hash.
enum SourceCheck {
    /// A source holds the document: its exact text hashes to `protocolHash`.
    Verified(String),
    /// Inline sources were given and none of them hashes to `protocolHash`.
    Mismatch,
    /// Nothing to check: no sources, or only URLs the node may not fetch.
    Unverifiable,
}

/// Route a request that names a protocol (§8.3). A known hash goes to its
/// plugin; an unknown one is served only when a source proves the document
/// and a plugin accepts any verified document.
async fn resolve_protocol(
    state: &NodeState,
    registry: &Registry,
    hash: &str,
    sources: &[String],
) -> Result<Route, AgoraError> {
    let known = registry.agora_protocol(hash).cloned();
    // Inline sources are always checked: a request whose own sources contradict
    // its hash is broken, whether or not this node knows the hash.
    let check = check_sources(state, hash, sources, known.is_none()).await?;
    if matches!(check, SourceCheck::Mismatch) {
        return Err(AgoraError::Rejected(
            "protocolSources do not match protocolHash".into(),
        ));
    }
    if let Some(plugin) = known {
        return Ok(Route {
            plugin,
            key: hash.to_string(),
            document: None,
        });
    }
    let SourceCheck::Verified(text) = check else {
        return Err(AgoraError::UnsupportedProtocol);
    };
    let Some(plugin) = registry.agora_any_document().cloned() else {
        return Err(AgoraError::UnsupportedProtocol);
    };
    document::parse(&text)
        .map_err(|problem| AgoraError::Rejected(format!("Invalid protocol document: {problem}")))?;
    Ok(Route {
        plugin,
        key: hash.to_string(),
        document: Some(text),
    })
}

async fn check_sources(
    state: &NodeState,
    hash: &str,
    sources: &[String],
    may_fetch: bool,
) -> Result<SourceCheck, AgoraError> {
    let limit = state.config.agora.max_document_bytes;
    let mut mismatch = false;
    for source in sources {
        let text = match document::inline_source(source, limit) {
            Some(decoded) => decoded.map_err(AgoraError::Malformed)?,
            None if may_fetch => match fetch_source(state, source).await? {
                Some(text) => text,
                None => continue,
            },
            None => continue,
        };
        if crate::crypto::protocol_hash(text.as_bytes()) == hash {
            return Ok(SourceCheck::Verified(text));
        }
        mismatch = true;
    }
    Ok(if mismatch {
        SourceCheck::Mismatch
    } else {
        SourceCheck::Unverifiable
    })
}

/// Fetch a source URL only from hosts `agora.source_hosts` allows; others are skipped.
async fn fetch_source(state: &NodeState, url: &str) -> Result<Option<String>, AgoraError> {
    if crate::peers::http_client::check_allowed(url, &state.config.agora.source_hosts).is_err() {
        return Ok(None);
    }
    let timeout = std::time::Duration::from_millis(state.config.outbound.timeout_ms);
    let response = crate::peers::http_client::request(
        "GET",
        url,
        &[],
        Vec::new(),
        timeout,
        state.config.agora.max_document_bytes,
    )
    .await
    .map_err(|e| AgoraError::Rejected(format!("cannot fetch protocol source: {e}")))?;
    if response.status != 200 {
        return Ok(None);
    }
    Ok(String::from_utf8(response.body.to_vec()).ok())
}

/// What the plugin receives: the body itself, or for an any-document plugin the
/// verified document beside it.
fn plugin_body(body: &Value, document: Option<&str>) -> Value {
    match document {
        Some(text) => json!({"protocolDocument": text, "body": body}),
        None => body.clone(),
    }
}

fn create_conversation(
    state: &NodeState,
    route: &Route,
    protocol_hash: Option<String>,
    reservation: &Reservation,
) -> Result<Conversation, AgoraError> {
    let record = Conversation {
        plugin: route.plugin.manifest.name.clone(),
        protocol_hash,
        document: route.document.clone(),
        created_at_ms: now_ms(),
        expires_at: reservation.expires_at,
        rounds: 1,
        client: Some(reservation.client.clone()),
    };
    store_conversation(state, &reservation.id, &record)?;
    Ok(record)
}

fn store_conversation(state: &NodeState, id: &str, record: &Conversation) -> Result<(), AgoraError> {
    state.store.put(
        Collection::Conversations,
        id.as_bytes(),
        record,
        Some(store_expiry_ms(record)),
    )?;
    Ok(())
}

/// The store keeps a record past `conversationExpires` so the id can still be
/// answered "Conversation expired"; the sweeper drops it (and its history) later.
fn store_expiry_ms(record: &Conversation) -> u64 {
    record
        .expires_at
        .saturating_add(EXPIRED_ID_RETENTION_SECS)
        .saturating_mul(1000)
}

/// `POST {base}/conversations/{id}`: a follow-up in a conversation (§7.2).
async fn follow_up(
    State(state): State<Agora>,
    Path(id): Path<String>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let dialect = state.node.config.agora.reference_dialect;
    match handle_follow_up(&state.node, &id, &headers, raw).await {
        Ok(reply) => reply,
        Err(error) => error.into_response(dialect),
    }
}

async fn handle_follow_up(
    state: &NodeState,
    id: &str,
    headers: &HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, AgoraError> {
    let request = parse_request(state, headers, raw)?;
    let conversation = load_conversation(state, id)?;
    // §7.2: the protocol cannot change mid-conversation. agora-protocol 0.2.0
    // repeats the original hash on every follow-up, which changes nothing.
    if let Some(hash) = &request.protocol_hash
        && conversation.protocol_hash.as_ref() != Some(hash)
    {
        return Err(AgoraError::Malformed(
            "the protocol cannot change mid-conversation".into(),
        ));
    }
    let conversation = reserve_round(state, id, conversation)?;
    let registry = state.runtime.registry();
    let plugin = registry
        .by_name(&conversation.plugin)
        .cloned()
        .ok_or(AgoraError::UnsupportedProtocol)?;
    let route = conversation.protocol_hash.clone().unwrap_or_default();
    let body = plugin_body(&request.body, conversation.document.as_deref());
    let reply = run(state, &plugin, route, Some(id), &body).await?;
    append(state, id, "user", &request.body)?;
    append(state, id, "agent", &reply)?;
    state.store.commit().await?;
    Ok(success(reply, Some((id, conversation.expires_at))))
}

/// Count a round before it runs, so a conversation's history stays within
/// `max_history_entries` (two entries a round) even under concurrent follow-ups.
fn reserve_round(state: &NodeState, id: &str, mut current: Conversation) -> Result<Conversation, AgoraError> {
    let max_rounds = (state.config.agora.max_history_entries / 2) as u64;
    for _ in 0..16 {
        if current.rounds >= max_rounds {
            return Err(AgoraError::Rejected(format!(
                "This conversation has reached its limit of {max_rounds} rounds"
            )));
        }
        let next = Conversation {
            rounds: current.rounds + 1,
            ..current.clone()
        };
        if state.store.update(
            Collection::Conversations,
            id.as_bytes(),
            &current,
            &next,
            Some(store_expiry_ms(&next)),
        )? {
            return Ok(next);
        }
        current = load_conversation(state, id)?;
    }
    Err(AgoraError::Overloaded)
}

/// `DELETE {base}/conversations/{id}`: end a conversation.
async fn end_conversation(State(agora): State<Agora>, Path(id): Path<String>) -> Response {
    let state = &agora.node;
    let dialect = state.config.agora.reference_dialect;
    let result = async {
        load_conversation(state, &id)?;
        state.store.remove(Collection::Conversations, id.as_bytes())?;
        state.store.remove_history(&id)?;
        state.store.commit().await?;
        agora.limits.release(&id);
        Ok::<_, AgoraError>(success(Value::String("Conversation ended".into()), None))
    }
    .await;
    result.unwrap_or_else(|error| error.into_response(dialect))
}

/// A live conversation, or why there is none (§7.3: an expired id is never usable).
fn load_conversation(state: &NodeState, id: &str) -> Result<Conversation, AgoraError> {
    let unknown = || AgoraError::NotFound("Unknown conversation".into());
    if id.is_empty() || id.len() > MAX_CONVERSATION_ID_LEN {
        return Err(unknown());
    }
    let Some(mut conversation) = state
        .store
        .get::<Conversation>(Collection::Conversations, id.as_bytes())?
    else {
        return Err(
            if state.store.expired(Collection::Conversations, id.as_bytes())? {
                AgoraError::ConversationExpired
            } else {
                unknown()
            },
        );
    };
    if now_ms() >= conversation.expires_at.saturating_mul(1000) {
        // Keep only what answering "expired" needs.
        if conversation.document.is_some() || conversation.rounds > 0 {
            state.store.remove_history(id)?;
            conversation.document = None;
            conversation.rounds = 0;
            store_conversation(state, id, &conversation)?;
        }
        return Err(AgoraError::ConversationExpired);
    }
    Ok(conversation)
}

/// `GET {base}/wellknown` (§9): every fully supported document by hex hash.
async fn wellknown(State(state): State<Agora>) -> Response {
    let registry = state.node.runtime.registry();
    let mut documents = Map::new();
    for plugin in registry.plugins() {
        for protocol in &plugin.manifest.protocols {
            if registry
                .agora_protocol(&protocol.hash)
                .is_some_and(|p| Arc::ptr_eq(p, plugin))
            {
                documents.insert(protocol.hash.clone(), json!([protocol.text]));
            }
        }
    }
    axum::Json(Value::Object(documents)).into_response()
}

async fn run(
    state: &NodeState,
    plugin: &Arc<LoadedPlugin>,
    route: String,
    conversation: Option<&str>,
    body: &Value,
) -> Result<Value, AgoraError> {
    let call = Call {
        transport: TransportKind::Agora,
        phase: Phase::Handle,
        route,
        sender: None,
        conversation: conversation.map(str::to_string),
        body: body.to_string(),
    };
    let mut exchange = Exchange::new();
    if let Some(id) = conversation {
        // The history id is the conversation id, so the store's sweeper drops
        // both together.
        exchange = exchange.with_history(id);
    }
    match state.runtime.invoke(plugin, call, exchange).await {
        Ok(reply) => Ok(serde_json::from_str(&reply).unwrap_or(Value::String(reply))),
        // A body the protocol rejects is a protocol-level error, reported inside `body` (§10.3).
        Err(InvokeError::Failure {
            kind: FailureKind::BadRequest,
            message,
        }) => Ok(json!({"error": message})),
        Err(error) => Err(error.into()),
    }
}

fn append(state: &NodeState, history_id: &str, role: &str, body: &Value) -> Result<(), AgoraError> {
    let entry = json!({"role": role, "body": body, "at": now_ms()});
    state
        .store
        .append_history(history_id, &entry, state.config.agora.max_history_entries)
        .map_err(|error| match error {
            StoreError::Limit(message) => AgoraError::Rejected(message),
            other => other.into(),
        })
}

fn success(body: Value, conversation: Option<(&str, u64)>) -> Response {
    let mut reply = json!({"status": "success", "body": body});
    if let Some((id, expires)) = conversation {
        reply["conversationId"] = json!(id);
        reply["conversationExpires"] = json!(expires);
    }
    axum::Json(reply).into_response()
}
