//! The Model Context Protocol over Streamable HTTP, as the `mcp` 2.3.0 Python
//! client speaks it, in both its eras on the same path: revision 2025-11-25
//! (and the three handshake-era revisions before it) with sessions, and the
//! stateless 2026-07-28 ([`modern`]). Every plugin tool for any MCP client,
//! with the host's approvals. The era is chosen per request
//! ([`envelope::is_modern`]): a client gets the newest it asks for.
//!
//! - this module: `POST/GET/DELETE {mcp.path}` (§"Transports" → "Streamable
//!   HTTP": sending messages, listening for messages, session management),
//!   `initialize` with version negotiation (§"Lifecycle"), `ping`
//!   (§"Utilities"), and the stream of `tools/list_changed` and
//!   `resources/list_changed` notifications.
//! - [`tools`]: `tools/list` (§"Pagination"), `tools/call`, and the approval
//!   asked by `elicitation/create` (§"Elicitation").
//! - [`resources`]: the plugins' protocol documents as resources
//!   (`resources/list`, `resources/read`, `resources/templates/list`).
//! - [`prompts`]: the prompts plugins declare (`prompts/list`, `prompts/get`).
//! - [`wire`]: JSON-RPC messages and the parameters the node reads.
//! - [`state`]: sessions and their bounds.
//! - [`fleet`]: sessions and approval forms as fleet state, on a shared store.
//! - [`error`]: [`McpError`], the one place errors become HTTP statuses and JSON-RPC errors.
//!
//! Written on axum rather than with `rmcp`'s server: the node's own bounds
//! (sessions per address, body limit answered as 413 with a JSON-RPC body,
//! idle expiry, one stream per session, the token) and the approval form on the
//! call's own stream sit in the request path, where a framework's session
//! manager would hide them.
//!
//! Choices the issue left open, documented in `docs/protocols/mcp.md`: in a
//! session, `tools/call` answers on an SSE stream whenever the client accepts
//! one (other requests answer JSON); at 2026-07-28 every request but
//! `subscriptions/listen` answers JSON; on a fleet, a session is served by
//! any node (see [`fleet`]), and a stateless request by any node at all.

pub mod activity;
pub mod envelope;
pub mod error;
mod fleet;
mod modern;
mod prompts;
mod resources;
mod state;
mod tools;
pub mod wire;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use self::error::McpError;
use self::state::{InUse, McpSession, McpState, Shared};
use self::wire::{PROTOCOL_VERSION_HEADER, PROTOCOL_VERSIONS, SESSION_HEADER};
use crate::jsonrpc::{self, Fault, Faults, Inbound, Refused};
use crate::node::state::NodeState;

/// Messages an SSE answer buffers for a slow client before the call waits.
const STREAM_BUFFER: usize = 16;
/// A comment on idle streams, so proxies and clients keep them open while a human decides.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub fn router(node: NodeState) -> Router {
    let path = node.config.mcp.path.clone();
    let limit = body_limit(&node);
    let browser = crate::policy::browser::Endpoint {
        allowed_origins: node.config.mcp.allowed_origins.clone(),
        origins_key: "mcp.allowed_origins",
        json_posts: crate::policy::browser::JsonPosts::All,
        refuse: |refusal| McpError::from(refusal).into_response(),
    };
    let policy = node.browser.clone();
    let shared = McpState::new(node);
    shared.sweep_idle();
    fleet::listen(&shared);
    // The console answers this transport's approvals while its routes are served.
    let answering = shared
        .node
        .runtime
        .approvals()
        .answer_with("mcp", std::sync::Arc::new(tools::ConsoleAnswers(shared.clone())));
    let router = Router::new()
        .route(
            &path,
            post(receive)
                .get(listen)
                .delete(end_session)
                .layer(DefaultBodyLimit::max(limit)),
        )
        .with_state(shared)
        .layer(axum::Extension(answering));
    crate::policy::browser::guard(router, policy, browser)
}

/// The MCP body limit: `mcp.max_body_bytes`, within the listener's own `http.max_body_bytes`.
fn body_limit(node: &NodeState) -> usize {
    node.config.body_limit(node.config.mcp.max_body_bytes)
}

/// `POST`: one JSON-RPC message from the client.
async fn receive(
    State(shared): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    if let Err(error) = authorize(&shared, &headers) {
        return error.into_response();
    }
    let raw = match raw {
        Ok(raw) => raw,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return McpError::TooLarge(body_limit(&shared.node)).into_response();
        }
        Err(rejection) => {
            return McpError::invalid_request(format!("unreadable body: {rejection}")).into_response();
        }
    };
    let message = match jsonrpc::parse(&raw, wire::DIALECT) {
        Ok(message) => message,
        Err(Refused { id, fault }) => return McpError::from(fault).into_response_for(&id),
    };
    let params = match &message {
        Inbound::Request { params, .. } | Inbound::Notification { params, .. } => Some(params),
        Inbound::Response { .. } => None,
    };
    if envelope::is_modern(&headers, params) {
        return modern::receive(&shared, peer, &headers, message).await;
    }
    if let Inbound::Request { id, method, params } = &message
        && method == "initialize"
    {
        return initialize(&shared, peer, id, params).await;
    }
    let id = match &message {
        Inbound::Request { id, .. } => id.clone(),
        _ => Value::Null,
    };
    let session = match session_of(&shared, &headers).await {
        Ok(session) => session,
        Err(error) => return error.into_response_for(&id),
    };
    match message {
        Inbound::Notification { .. } => StatusCode::ACCEPTED.into_response(),
        Inbound::Response { id, outcome } => {
            tools::answer(&shared, &session, &id, outcome).await;
            StatusCode::ACCEPTED.into_response()
        }
        Inbound::Request { id, method, params } => {
            request(&shared, &session, &headers, id, &method, params).await
        }
    }
}

async fn request(
    shared: &Shared,
    session: &std::sync::Arc<McpSession>,
    headers: &HeaderMap,
    id: Value,
    method: &str,
    params: Value,
) -> Response {
    let answer = match method {
        "ping" => Ok(json!({})),
        "tools/list" => wire::cursor(&params).map(|cursor| tools::list_page(shared, cursor.as_deref())),
        "resources/list" => {
            wire::cursor(&params).map(|cursor| resources::list_page(shared, cursor.as_deref()))
        }
        "resources/templates/list" => Ok(resources::templates()),
        "resources/read" => wire::resource_uri(&params).and_then(|uri| resources::read(shared, &uri)),
        "prompts/list" => wire::cursor(&params).map(|cursor| prompts::list_page(shared, cursor.as_deref())),
        "prompts/get" => prompts::get(shared, &params).await,
        "tools/call" => match wire::tool_call_params(&params) {
            Ok(call) if accepts(headers, "text/event-stream") => {
                return call_on_stream(shared, session, id, call);
            }
            Ok(call) => Ok(tools::call(shared, session, call, None).await),
            Err(error) => Err(error),
        },
        other => Err(Fault::MethodNotFound(other.to_string()).into()),
    };
    match answer {
        Ok(result) => axum::Json(jsonrpc::result(&id, result)).into_response(),
        Err(error) => error.into_response_for(&id),
    }
}

/// `tools/call` answered on an SSE stream: any approval form first, then the
/// response, then the stream ends. A client that goes away stops the call.
fn call_on_stream(
    shared: &Shared,
    session: &std::sync::Arc<McpSession>,
    id: Value,
    call: wire::ToolCallParams,
) -> Response {
    let (sender, receiver) = mpsc::channel::<Value>(STREAM_BUFFER);
    let in_use = session.in_use();
    let work = {
        let shared = shared.clone();
        let session = session.clone();
        let sender = sender.clone();
        tokio::spawn(async move {
            let result = tools::call(&shared, &session, call, Some(sender.clone())).await;
            let _ = sender.send(jsonrpc::result(&id, result)).await;
            drop(in_use);
        })
    };
    drop(sender);
    stream_of(receiver, work)
}

/// An SSE response of `receiver`'s messages; `work`, which feeds it, belongs to
/// the response: a client that goes away stops it.
fn stream_of(mut receiver: mpsc::Receiver<Value>, work: tokio::task::JoinHandle<()>) -> Response {
    let abort = AbortOnDrop(work);
    let events = futures::stream::poll_fn(move |context| {
        let _owned = &abort;
        receiver.poll_recv(context).map(|message| {
            message.map(|message| Ok(Event::default().event("message").data(message.to_string())))
        })
    });
    sse(events)
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn initialize(shared: &Shared, peer: SocketAddr, id: &Value, params: &Value) -> Response {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = wire::negotiate(requested);
    let elicitation = wire::accepts_form_elicitation(params);
    let session = match shared.open(peer.ip(), version, elicitation, params).await {
        Ok(session) => session,
        Err(error) => return error.into_response_for(id),
    };
    tracing::debug!(session = %session.id, version, elicitation, "mcp: session opened");
    let config = &shared.node.config.mcp;
    let result = json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": {"listChanged": true},
            "resources": {"listChanged": true},
            "prompts": {"listChanged": true},
        },
        "serverInfo": {"name": config.name, "version": env!("CARGO_PKG_VERSION")},
        "instructions": "The tools of this Agora node's plugins. Tools at or above the node's approval \
                         threshold run only after you approve them in a form the node sends.",
    });
    let mut response = axum::Json(jsonrpc::result(id, result)).into_response();
    if let Ok(value) = HeaderValue::from_str(&session.id) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

/// `GET`: the session's stream of server notifications (`tools/list_changed`,
/// `resources/list_changed`).
async fn listen(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(error) = authorize(&shared, &headers) {
        return error.into_response();
    }
    if envelope::is_modern(&headers, None) {
        return McpError::MethodNotAllowed.into_response();
    }
    if !accepts(&headers, "text/event-stream") {
        return McpError::NotAcceptable("the notification stream is text/event-stream".into())
            .into_response();
    }
    let session = match session_of(&shared, &headers).await {
        Ok(session) => session,
        Err(error) => return error.into_response(),
    };
    let Some(listening) = session.listen() else {
        return McpError::StreamOpen.into_response();
    };
    let in_use = session.in_use();
    let (sender, receiver) = mpsc::channel::<Value>(STREAM_BUFFER);
    let mut listings = ListingWatch::new(shared.node.runtime.clone());
    let mut ended = session.ended();
    let work = tokio::spawn(async move {
        let _held = (listening, in_use);
        if *ended.borrow_and_update() {
            return;
        }
        loop {
            tokio::select! {
                changed = listings.next() => {
                    let Some(methods) = changed else { return };
                    for method in methods {
                        let note = jsonrpc::notification(method, None);
                        if sender.send(note).await.is_err() {
                            return;
                        }
                    }
                }
                _ = ended.changed() => return,
                () = sender.closed() => return,
            }
        }
    });
    stream_of(receiver, work)
}

/// What a stream's client was last shown of the lists a hot reload can
/// change, and the registry's changes: one watcher for a session's `GET`
/// stream and a 2026 listen stream, so both eras announce the same changes.
struct ListingWatch {
    runtime: crate::runtime::Runtime,
    changes: tokio::sync::watch::Receiver<u64>,
    shown: Listings,
}

impl ListingWatch {
    fn new(runtime: crate::runtime::Runtime) -> ListingWatch {
        // Subscribed before the first look, so a reload in between is still seen.
        let changes = runtime.registry_changes();
        let shown = Listings::of(&runtime.registry());
        ListingWatch {
            runtime,
            changes,
            shown,
        }
    }

    /// The `notifications/*/list_changed` methods the next registry change
    /// calls for (none when it changed nothing listed); `None` once the
    /// runtime is gone.
    async fn next(&mut self) -> Option<Vec<&'static str>> {
        self.changes.changed().await.ok()?;
        let now = Listings::of(&self.runtime.registry());
        let methods = now.changed_since(&self.shown);
        self.shown = now;
        Some(methods)
    }
}

/// A fingerprint of each list a hot reload can change.
#[derive(PartialEq)]
struct Listings {
    tools: String,
    resources: String,
    prompts: String,
}

impl Listings {
    fn of(registry: &crate::runtime::Registry) -> Listings {
        Listings {
            tools: tools::listing_fingerprint(registry),
            resources: resources::listing_fingerprint(registry),
            prompts: prompts::listing_fingerprint(registry),
        }
    }

    /// The notifications that tell a client what changed since `shown`.
    fn changed_since(&self, shown: &Listings) -> Vec<&'static str> {
        let mut methods = Vec::new();
        if self.tools != shown.tools {
            methods.push("notifications/tools/list_changed");
        }
        if self.resources != shown.resources {
            methods.push("notifications/resources/list_changed");
        }
        if self.prompts != shown.prompts {
            methods.push("notifications/prompts/list_changed");
        }
        methods
    }
}

/// `DELETE`: the client ends its session.
async fn end_session(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(error) = authorize(&shared, &headers) {
        return error.into_response();
    }
    if envelope::is_modern(&headers, None) {
        return McpError::MethodNotAllowed.into_response();
    }
    let Some(id) = headers.get(SESSION_HEADER).and_then(|value| value.to_str().ok()) else {
        return McpError::MissingSession.into_response();
    };
    match shared.end(id).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => error.into_response(),
    }
}

/// The session a request names, held in use for the request's life, and a
/// revision header it may repeat.
async fn session_of(shared: &Shared, headers: &HeaderMap) -> Result<InUse, McpError> {
    let id = headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .ok_or(McpError::MissingSession)?;
    if let Some(version) = headers.get(PROTOCOL_VERSION_HEADER) {
        let version = version.to_str().unwrap_or_default();
        if !PROTOCOL_VERSIONS.contains(&version) {
            return Err(McpError::invalid_request(format!(
                "MCP-Protocol-Version {:?} is not served; this node speaks {}",
                version.chars().take(32).collect::<String>(),
                PROTOCOL_VERSIONS.join(", ")
            )));
        }
    }
    shared.session(id).await
}

/// Who may call, once the browser policy has passed the request (§"Security
/// Warning" of the transport: the `Host` and `Origin` checks that stop a page
/// the user visits, DNS rebinding included): with `mcp.token` set, only a
/// bearer of it (compared in constant time).
fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), McpError> {
    let config = &shared.node.config.mcp;
    if super::bearer_authorized(&config.token, headers) {
        Ok(())
    } else {
        Err(McpError::Unauthorized)
    }
}

/// Whether the request's `Accept` allows `media` (no header allows anything).
fn accepts(headers: &HeaderMap, media: &str) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|value| value.to_str().ok()) else {
        return true;
    };
    accept.split(',').any(|item| {
        let item = item.split(';').next().unwrap_or_default().trim();
        item.eq_ignore_ascii_case(media)
            || item == "*/*"
            || item.eq_ignore_ascii_case("text/*") && media.starts_with("text/")
    })
}

fn sse(events: impl futures::Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    // Proxies must not buffer the stream.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
