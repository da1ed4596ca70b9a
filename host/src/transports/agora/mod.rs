//! Agora two-party JSON exchanges ("Agora Protocol for Two-Party JSON Exchanges"): the
//! routes, read in the order the spec reads.
//!
//! - §5–6: `POST {base}` carries `body`, optional `protocolHash`,
//!   `protocolSources` and `multiround`; replies are `{"status":"success","body":…}`
//!   or `{"status":"failure","error":…}` ([`wire`]).
//! - §7: multi-round conversations live in sled under unguessable ids
//!   ([`state`]); follow-ups go to `{base}/conversations/{id}`; `DELETE` ends one.
//! - §8: documents are routed by the SHA1 of their exact bytes; a hash may be
//!   written in hex (the spec) or base64 (agora-protocol 0.2.0) ([`document`]).
//! - §9: `GET {base}/wellknown` lists every fully supported document.
//! - §10: transport errors are HTTP statuses, Agora errors are 200 + failure,
//!   protocol errors are the plugin's business inside `body`. [`AgoraError`]
//!   ([`error`]) is the one place that mapping is written.
//! - Our limits ([`limits`]): live conversations in total and per client
//!   address, and each client's creation rate; refusals are 429/503 with
//!   `Retry-After` in the failure shape above.

pub mod activity;
pub mod document;
pub mod error;
pub mod limits;
mod state;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use self::error::AgoraError;
use self::state::{
    AgoraState, Reservation, append, commit, create_conversation, load_conversation, reserve_round,
};
use self::wire::{parse_request, plugin_body, success};
use crate::node::state::NodeState;
use crate::runtime::{
    Call, Exchange, FailureKind, InvokeError, LoadedPlugin, Phase, Registry, TransportKind,
};
use crate::store::{Collection, UnitOfWork};

pub fn router(node: NodeState) -> Router {
    let state = AgoraState::new(node);
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

/// `POST {base}`: a single-round request or the start of a conversation.
async fn start(
    State(state): State<AgoraState>,
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
    agora: &AgoraState,
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
    let unit = state.store.unit();
    let Some(reservation) = reservation else {
        let reply = run(state, peer, &route.plugin, route.key, None, &unit, body).await?;
        // Only what the plugin wrote, if anything: a request that wrote
        // nothing waits for no one's commit.
        unit.commit_pending().await?;
        return Ok(success(&reply, None));
    };
    let record = create_conversation(
        &unit,
        &route.plugin.manifest.name,
        request.protocol_hash.clone(),
        route.document.clone(),
        &reservation,
    )
    .await?;
    let id = reservation.id.clone();
    let reply = match run(state, peer, &route.plugin, route.key, Some(&id), &unit, body).await {
        Ok(reply) => reply,
        Err(error) => {
            // Nobody learns the id of a conversation whose first round failed
            // (what the plugin wrote before it failed is kept, as it would be
            // had the call written it alone).
            unit.remove(Collection::Conversations, id.as_bytes()).await?;
            unit.commit().await?;
            return Err(error);
        }
    };
    append(state, &unit, &id, "user", &request.body).await?;
    append(state, &unit, &id, "agent", &reply).await?;
    commit(&unit).await?;
    reservation.keep();
    Ok(success(&reply, Some((&id, record.expires_at))))
}

fn default_plugin(state: &NodeState, registry: &Registry) -> Result<Arc<LoadedPlugin>, AgoraError> {
    let configured = &state.config.agora.default_plugin;
    let plugin = if configured.is_empty() {
        registry.agora_default()
    } else {
        registry.by_name(configured)
    };
    match plugin {
        Some(plugin) => Ok(plugin.clone()),
        None => {
            state.runtime.not_found_yet()?;
            Err(AgoraError::Rejected(
                "No handler for requests without a protocol".into(),
            ))
        }
    }
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
    let (SourceCheck::Verified(text), Some(plugin)) = (check, registry.agora_any_document().cloned()) else {
        state.runtime.not_found_yet()?;
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
    use crate::peers::http_client;
    let allowed = &state.config.agora.source_hosts;
    if http_client::check_allowed(url, allowed).is_err() {
        return Ok(None);
    }
    let timeout = std::time::Duration::from_millis(state.config.outbound.timeout_ms);
    let response = http_client::request_within(
        allowed,
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

/// `POST {base}/conversations/{id}`: a follow-up in a conversation (§7.2).
async fn follow_up(
    State(state): State<AgoraState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let dialect = state.node.config.agora.reference_dialect;
    match handle_follow_up(&state.node, peer, &id, &headers, raw).await {
        Ok(reply) => reply,
        Err(error) => error.into_response(dialect),
    }
}

async fn handle_follow_up(
    state: &NodeState,
    peer: SocketAddr,
    id: &str,
    headers: &HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, AgoraError> {
    let request = parse_request(state, headers, raw)?;
    let conversation = load_conversation(state, id).await?;
    // §7.2: the protocol cannot change mid-conversation. agora-protocol 0.2.0
    // repeats the original hash on every follow-up, which changes nothing.
    if let Some(hash) = &request.protocol_hash
        && conversation.protocol_hash.as_ref() != Some(hash)
    {
        return Err(AgoraError::Malformed(
            "the protocol cannot change mid-conversation".into(),
        ));
    }
    let conversation = reserve_round(state, id, conversation).await?;
    let registry = state.runtime.registry();
    let plugin = registry
        .by_name(&conversation.plugin)
        .cloned()
        .ok_or(AgoraError::UnsupportedProtocol)?;
    let route = conversation.protocol_hash.clone().unwrap_or_default();
    let body = plugin_body(&request.body, conversation.document.as_deref());
    // The round's reservation above is committed at once, for the other
    // nodes' follow-ups to count; the round's own writes go together.
    let unit = state.store.unit();
    let reply = run(state, peer, &plugin, route, Some(id), &unit, body).await?;
    append(state, &unit, id, "user", &request.body).await?;
    append(state, &unit, id, "agent", &reply).await?;
    commit(&unit).await?;
    Ok(success(&reply, Some((id, conversation.expires_at))))
}

/// `DELETE {base}/conversations/{id}`: end a conversation.
async fn end_conversation(State(agora): State<AgoraState>, Path(id): Path<String>) -> Response {
    let state = &agora.node;
    let dialect = state.config.agora.reference_dialect;
    let result = async {
        load_conversation(state, &id).await?;
        // Of two ends at once, on this node or another sharing the store, one
        // takes the record and the other finds the conversation gone.
        let taken = state
            .store
            .take::<Value>(Collection::Conversations, id.as_bytes())
            .await?;
        if taken.is_none() {
            return Err(AgoraError::NotFound("Unknown conversation".into()));
        }
        state.store.remove_history(&id).await?;
        state.store.commit().await?;
        agora.limits.release(&id);
        Ok::<_, AgoraError>(success(&Value::String("Conversation ended".into()), None))
    }
    .await;
    result.unwrap_or_else(|error| error.into_response(dialect))
}

/// `GET {base}/wellknown` (§9): every fully supported document by hex hash.
async fn wellknown(State(state): State<AgoraState>) -> Response {
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
    peer: SocketAddr,
    plugin: &Arc<LoadedPlugin>,
    route: String,
    conversation: Option<&str>,
    unit: &UnitOfWork,
    body: String,
) -> Result<Value, AgoraError> {
    let call = Call {
        transport: TransportKind::Agora,
        phase: Phase::Handle,
        route,
        sender: None,
        conversation: conversation.map(str::to_string),
        body,
    };
    let client = crate::listener::caps::client_key(peer.ip());
    let mut exchange = Exchange::new()
        .with_caller("agora", client.to_string())
        .with_unit(unit.clone());
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
