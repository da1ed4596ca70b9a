//! Agora two-party JSON exchanges (`specs/agora-two-party-json.txt`).
//!
//! - §5–6: `POST {base}` carries `body`, optional `protocolHash`,
//!   `protocolSources` and `multiround`; replies are `{"status":"success","body":…}`
//!   or `{"status":"failure","error":…}`.
//! - §7: multi-round conversations live in sled under unguessable ids;
//!   follow-ups go to `{base}/conversations/{id}`; `DELETE` ends one.
//! - §8: documents are routed by the SHA1 of their exact bytes.
//! - §9: `GET {base}/wellknown` lists every fully supported document.
//! - §10: transport errors are HTTP statuses, Agora errors are 200 + failure,
//!   protocol errors are the plugin's business inside `body`. [`AgoraError`]
//!   is the one place that mapping is written.

pub mod client;
pub mod document;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use bytes::Bytes;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::NodeState;
use crate::runtime::{
    Call, Exchange, FailureKind, InvokeError, LoadedPlugin, Phase, TransportKind,
};
use crate::store::{Collection, StoreError, now_ms};

pub fn router(state: NodeState) -> Router {
    let base = state.config.agora.path.trim_end_matches('/').to_string();
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
    if state.config.agora.reference_dialect && !base.is_empty() {
        router = router
            .route("/", post(start))
            .route(
                "/conversations/{id}",
                post(follow_up).delete(end_conversation),
            )
            .route("/wellknown", get(wellknown));
    }
    router.with_state(state)
}

/// Everything that can go wrong, by the layer of §10 it belongs to.
#[derive(Debug, thiserror::Error)]
pub enum AgoraError {
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
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
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for AgoraError {
    fn from(error: StoreError) -> Self {
        AgoraError::Internal(format!("storage failed: {error}"))
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
            AgoraError::Malformed(_) => StatusCode::BAD_REQUEST,
            AgoraError::NotFound(_) => StatusCode::NOT_FOUND,
            AgoraError::UnsupportedProtocol
            | AgoraError::ConversationExpired
            | AgoraError::Rejected(_) => StatusCode::OK,
            AgoraError::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            AgoraError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The one place node errors become Agora's wire shape.
    fn into_response(self, reference_dialect: bool) -> Response {
        let status = self.status();
        let message = self.to_string();
        if status.is_server_error() {
            tracing::warn!(transport = "agora", %message, "request failed");
        }
        let body = if reference_dialect {
            json!({"status": "error", "message": message})
        } else {
            json!({"status": "failure", "error": message})
        };
        (status, axum::Json(body)).into_response()
    }
}

/// A validated request (§6.1). Unknown fields are ignored.
struct AgoraRequest {
    body: Value,
    protocol_hash: Option<String>,
    sources: Vec<String>,
    multiround: bool,
}

#[derive(Serialize, Deserialize, Clone, PartialEq)]
struct Conversation {
    plugin: String,
    protocol_hash: Option<String>,
    created_at_ms: u64,
    /// Unix seconds, as `conversationExpires` says.
    expires_at: u64,
}

fn parse_request(headers: &HeaderMap, raw: &Bytes) -> Result<AgoraRequest, AgoraError> {
    if !super::is_json_content_type(headers) {
        return Err(AgoraError::UnsupportedMediaType);
    }
    let value: Value = serde_json::from_slice(raw)
        .map_err(|e| AgoraError::Malformed(format!("malformed JSON: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(AgoraError::Malformed(
            "the request must be a JSON object".into(),
        ));
    };
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
            AgoraError::Malformed(
                "`protocolHash` must be a SHA1 in hex (40 digits) or base64".into(),
            )
        })?),
        Some(_) => {
            return Err(AgoraError::Malformed(
                "field `protocolHash` must be a string or null".into(),
            ));
        }
    };
    let sources = match fields.remove("protocolSources") {
        None | Some(Value::Null) => Vec::new(),
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
async fn start(State(state): State<NodeState>, headers: HeaderMap, raw: Bytes) -> Response {
    let dialect = state.config.agora.reference_dialect;
    match handle_start(&state, &headers, &raw).await {
        Ok(reply) => reply,
        Err(error) => error.into_response(dialect),
    }
}

async fn handle_start(
    state: &NodeState,
    headers: &HeaderMap,
    raw: &Bytes,
) -> Result<Response, AgoraError> {
    let request = parse_request(headers, raw)?;
    let registry = state.runtime.registry();
    let (plugin, route, body) = match &request.protocol_hash {
        None => {
            let configured = &state.config.agora.default_plugin;
            let plugin = if configured.is_empty() {
                registry.agora_default()
            } else {
                registry.by_name(configured)
            };
            let plugin = plugin.cloned().ok_or_else(|| {
                AgoraError::Rejected("No handler for requests without a protocol".into())
            })?;
            (plugin, String::new(), request.body.clone())
        }
        Some(hash) => match registry.agora_protocol(hash) {
            Some(plugin) => (plugin.clone(), hash.clone(), request.body.clone()),
            None => resolve_unknown_document(state, &registry, hash, &request).await?,
        },
    };
    let conversation = if request.multiround {
        Some(create_conversation(
            state,
            &plugin,
            request.protocol_hash.clone(),
        )?)
    } else {
        None
    };
    let reply = run(
        state,
        &plugin,
        route,
        conversation.as_ref().map(|(id, _)| id.as_str()),
        &body,
    )
    .await?;
    match conversation {
        Some((id, record)) => {
            let history_id = history_id(&id);
            append(state, &history_id, "user", &request.body)?;
            append(state, &history_id, "agent", &reply)?;
            state.store.commit().await?;
            Ok(success(reply, Some((&id, record.expires_at))))
        }
        None => Ok(success(reply, None)),
    }
}

/// An unknown hash: the request's own sources may carry the document (§8.3).
async fn resolve_unknown_document(
    state: &NodeState,
    registry: &crate::runtime::Registry,
    hash: &str,
    request: &AgoraRequest,
) -> Result<(Arc<LoadedPlugin>, String, Value), AgoraError> {
    if request.sources.is_empty() {
        return Err(AgoraError::UnsupportedProtocol);
    }
    let limits = &state.config.agora;
    if request.sources.len() > limits.max_sources {
        return Err(AgoraError::Malformed(format!(
            "at most {} protocolSources",
            limits.max_sources
        )));
    }
    let mut verified = None;
    for source in &request.sources {
        let text = match document::inline_source(source) {
            Some(decoded) => decoded.map_err(AgoraError::Malformed)?,
            None => match fetch_source(state, source).await? {
                Some(text) => text,
                None => continue,
            },
        };
        if text.len() > limits.max_document_bytes {
            return Err(AgoraError::Malformed(format!(
                "a protocol source is over {} bytes",
                limits.max_document_bytes
            )));
        }
        if crate::crypto::protocol_hash(text.as_bytes()) == hash {
            verified = Some(text);
            break;
        }
    }
    let Some(document) = verified else {
        return Err(AgoraError::Rejected(
            "protocolSources do not match protocolHash".into(),
        ));
    };
    let plugin = registry
        .agora_any_document()
        .cloned()
        .ok_or(AgoraError::UnsupportedProtocol)?;
    let body = json!({"protocolDocument": document, "body": request.body});
    Ok((plugin, hash.to_string(), body))
}

/// Fetch a source URL only from hosts `agora.source_hosts` allows; others are skipped.
async fn fetch_source(state: &NodeState, url: &str) -> Result<Option<String>, AgoraError> {
    if super::http_client::check_allowed(url, &state.config.agora.source_hosts).is_err() {
        return Ok(None);
    }
    let timeout = std::time::Duration::from_millis(state.config.outbound.timeout_ms);
    let response = super::http_client::request(
        "GET",
        url,
        &[],
        Vec::new(),
        timeout,
        state.config.agora.max_document_bytes,
    )
    .await
    .map_err(|e| AgoraError::Rejected(format!("cannot fetch protocol source: {e}")))?;
    Ok(String::from_utf8(response.body.to_vec()).ok())
}

fn create_conversation(
    state: &NodeState,
    plugin: &LoadedPlugin,
    protocol_hash: Option<String>,
) -> Result<(String, Conversation), AgoraError> {
    let mut id_bytes = [0u8; 24];
    rand::rngs::OsRng.fill_bytes(&mut id_bytes);
    let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id_bytes);
    let now = now_ms();
    let record = Conversation {
        plugin: plugin.manifest.name.clone(),
        protocol_hash,
        created_at_ms: now,
        expires_at: now / 1000 + state.config.agora.conversation_ttl_secs,
    };
    state.store.put(
        Collection::Conversations,
        id.as_bytes(),
        &record,
        Some(record.expires_at * 1000),
    )?;
    Ok((id, record))
}

/// `POST {base}/conversations/{id}`: a follow-up in a conversation (§7.2).
async fn follow_up(
    State(state): State<NodeState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let dialect = state.config.agora.reference_dialect;
    match handle_follow_up(&state, &id, &headers, &raw).await {
        Ok(reply) => reply,
        Err(error) => error.into_response(dialect),
    }
}

async fn handle_follow_up(
    state: &NodeState,
    id: &str,
    headers: &HeaderMap,
    raw: &Bytes,
) -> Result<Response, AgoraError> {
    let conversation = load_conversation(state, id)?;
    let request = parse_request(headers, raw)?;
    if let Some(hash) = &request.protocol_hash {
        if conversation.protocol_hash.as_ref() != Some(hash) {
            return Err(AgoraError::Malformed(
                "the protocol cannot change mid-conversation".into(),
            ));
        }
    }
    let registry = state.runtime.registry();
    let plugin = registry
        .by_name(&conversation.plugin)
        .cloned()
        .ok_or(AgoraError::UnsupportedProtocol)?;
    let route = conversation.protocol_hash.clone().unwrap_or_default();
    let reply = run(state, &plugin, route, Some(id), &request.body).await?;
    let history_id = history_id(id);
    append(state, &history_id, "user", &request.body)?;
    append(state, &history_id, "agent", &reply)?;
    state.store.commit().await?;
    Ok(success(reply, Some((id, conversation.expires_at))))
}

/// `DELETE {base}/conversations/{id}`: end a conversation.
async fn end_conversation(State(state): State<NodeState>, Path(id): Path<String>) -> Response {
    let dialect = state.config.agora.reference_dialect;
    let result = async {
        load_conversation(&state, &id)?;
        state
            .store
            .remove(Collection::Conversations, id.as_bytes())?;
        state.store.remove_history(&history_id(&id))?;
        state.store.commit().await?;
        Ok::<_, AgoraError>(success(Value::String("Conversation ended".into()), None))
    }
    .await;
    result.unwrap_or_else(|error| error.into_response(dialect))
}

fn load_conversation(state: &NodeState, id: &str) -> Result<Conversation, AgoraError> {
    if id.len() > 128 {
        return Err(AgoraError::NotFound("Unknown conversation".into()));
    }
    match state
        .store
        .get::<Conversation>(Collection::Conversations, id.as_bytes())?
    {
        Some(conversation) => Ok(conversation),
        None if state
            .store
            .expired(Collection::Conversations, id.as_bytes())? =>
        {
            Err(AgoraError::ConversationExpired)
        }
        None => Err(AgoraError::NotFound("Unknown conversation".into())),
    }
}

/// `GET {base}/wellknown` (§9): every fully supported document by hex hash.
async fn wellknown(State(state): State<NodeState>) -> Response {
    let registry = state.runtime.registry();
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
        exchange = exchange.with_history(history_id(id));
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

fn history_id(conversation: &str) -> String {
    format!("agora:{conversation}")
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
