//! MCP 2026-07-28 on the same `{mcp.path}`: single-exchange, stateless
//! requests, as the `mcp` 2.3.0 client speaks them in its `auto` and pinned
//! modes (`server/_streamable_http_modern.py` is the reference server).
//!
//! No session: every request carries what the node must know of its client
//! ([`super::envelope`]), so any node of a fleet answers any request, and
//! nothing is kept between two of them but what the store holds for all
//! (the approval rounds' key and their replay claims). The node's policies
//! apply as in 2025: the token, the browser guard and the body limit before
//! this module runs; per-address bounds on calls and listen streams here.
//!
//! - `server/discover`: the revisions and capabilities, with the serverInfo stamp.
//! - `tools/*`, `resources/*`, `prompts/*`: the same pages and reads as in a
//!   session, each result with `resultType` and, for the cacheable ones,
//!   `ttlMs`/`cacheScope` (the client validates both strictly).
//! - `tools/call`: approvals as `InputRequiredResult` rounds
//!   ([`super::tools::call_stateless`]); answered as JSON.
//! - `subscriptions/listen`: an SSE stream of list changes ([`listen`]).
//!
//! Errors use the 2026 status table ([`McpError::into_modern_response`]).
//! Anything else of 2025 (`ping`, `initialize`, `resources/subscribe`, …) is
//! `-32601`: a 2026 client never sends it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::envelope::{self, Envelope, MODERN_VERSIONS, SERVER_INFO_META, SUBSCRIPTION_ID_META};
use super::error::McpError;
use super::state::Shared;
use super::{ListingWatch, STREAM_BUFFER, accepts, prompts, resources, stream_of, tools, wire};
use crate::jsonrpc::{self, Fault, Faults, Inbound};

/// One message of the stateless era (the caller has checked the token and read the body).
pub async fn receive(shared: &Shared, peer: SocketAddr, headers: &HeaderMap, message: Inbound) -> Response {
    match message {
        Inbound::Notification { .. } => match envelope::check_notification_version(headers) {
            Ok(()) => StatusCode::ACCEPTED.into_response(),
            Err(error) => error.into_modern_response(&Value::Null),
        },
        // At 2026 the node asks the client nothing, so there is nothing to answer.
        Inbound::Response { .. } => McpError::invalid_request(
            "a response: at protocol 2026-07-28 this server sends no requests to answer",
        )
        .into_modern_response(&Value::Null),
        Inbound::Request { id, method, params } => {
            if method == "subscriptions/listen" && !accepts(headers, "text/event-stream") {
                return McpError::NotAcceptable("subscriptions/listen answers text/event-stream".into())
                    .into_modern_response(&id);
            }
            let envelope = match envelope::classify(headers, &method, &params) {
                Ok(envelope) => envelope,
                Err(error) => return error.into_modern_response(&id),
            };
            if method == "subscriptions/listen" {
                return listen(shared, peer, id.clone(), &params)
                    .unwrap_or_else(|error| error.into_modern_response(&id));
            }
            match dispatch(shared, peer, &envelope, &method, &params).await {
                Ok(result) => axum::Json(jsonrpc::result(&id, result)).into_response(),
                Err(error) => error.into_modern_response(&id),
            }
        }
    }
}

async fn dispatch(
    shared: &Shared,
    peer: SocketAddr,
    envelope: &Envelope,
    method: &str,
    params: &Value,
) -> Result<Value, McpError> {
    // Lists may change with any hot reload: a client keeps none of them.
    let listed = Some(0);
    let (result, ttl_ms) = match method {
        "server/discover" => (discover(), listed),
        "tools/list" => (tools::list_page(shared, wire::cursor(params)?.as_deref()), listed),
        "tools/call" => (
            tools::call_stateless(shared, peer.ip(), envelope, params).await?,
            None,
        ),
        "resources/list" => (
            resources::list_page(shared, wire::cursor(params)?.as_deref()),
            listed,
        ),
        "resources/templates/list" => (resources::templates(), listed),
        "resources/read" => (
            resources::read(shared, &wire::resource_uri(params)?)?,
            Some(shared.node.config.mcp.resource_ttl_ms),
        ),
        "prompts/list" => (
            prompts::list_page(shared, wire::cursor(params)?.as_deref()),
            listed,
        ),
        "prompts/get" => (prompts::get(shared, params).await?, None),
        other => return Err(Fault::MethodNotFound(other.chars().take(64).collect()).into()),
    };
    Ok(finish(shared, result, ttl_ms))
}

/// What every 2026 result carries: `resultType` (unless the result is of
/// another type, as an `InputRequiredResult` is), the server's identity, and
/// for the cacheable methods how long the answer may be kept. Lists are
/// `ttlMs: 0` (a hot reload may change them any moment); `cacheScope` is
/// private, as the token may tell one caller's view from another's.
fn finish(shared: &Shared, mut result: Value, ttl_ms: Option<u64>) -> Value {
    let Some(fields) = result.as_object_mut() else {
        return result;
    };
    fields.entry("resultType").or_insert_with(|| json!("complete"));
    if let Some(ttl_ms) = ttl_ms {
        fields.insert("ttlMs".into(), json!(ttl_ms));
        fields.insert("cacheScope".into(), json!("private"));
    }
    let meta = fields.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(SERVER_INFO_META.into(), server_info(shared));
    }
    result
}

fn server_info(shared: &Shared) -> Value {
    json!({"name": shared.node.config.mcp.name, "version": env!("CARGO_PKG_VERSION")})
}

/// `server/discover`: only the stateless revisions (a 2025 client never
/// asks), the same capabilities as `initialize` gives. Resource subscriptions
/// are not offered: a document's URI names its bytes, so a changed document is
/// a new resource, announced by `resources/list_changed`.
fn discover() -> Value {
    json!({
        "supportedVersions": MODERN_VERSIONS,
        "capabilities": {
            "tools": {"listChanged": true},
            "resources": {"listChanged": true},
            "prompts": {"listChanged": true},
        },
        "instructions": "The tools of this Agora node's plugins. A tool at or above the node's approval \
                         threshold answers first with an approval form (InputRequiredResult); it runs \
                         only when the call comes back with a human's approval.",
    })
}

/// The kinds of change a listen may ask for, with the notification of each.
const LISTENED: [(&str, &str); 3] = [
    ("toolsListChanged", "notifications/tools/list_changed"),
    ("resourcesListChanged", "notifications/resources/list_changed"),
    ("promptsListChanged", "notifications/prompts/list_changed"),
];

/// `subscriptions/listen`: the acknowledgement with the kinds honored (the
/// requested list changes; resource subscriptions are not served), then a
/// notification whenever a hot reload changes a listed kind (the same
/// comparison as a session's `GET` stream, [`ListingWatch`]), each stamped with
/// the listen's id. After `mcp.listen_max_ms`, and when the node begins to
/// stop, the stream ends gracefully with the listen's result, and the client
/// listens again (elsewhere, on a fleet). Bounded per
/// address and node-wide; over a bound the listen is refused (503) before
/// any event.
fn listen(shared: &Shared, peer: SocketAddr, id: Value, params: &Value) -> Result<Response, McpError> {
    let place = shared
        .listens
        .try_admit(&peer.ip())
        .map_err(|refusal| McpError::Busy(refusal.to_string()))?;
    let requested = params.get("notifications").cloned().unwrap_or_default();
    let honored: Map<String, Value> = LISTENED
        .iter()
        .filter(|(flag, _)| requested.get(*flag) == Some(&Value::Bool(true)))
        .map(|(flag, _)| ((*flag).to_string(), Value::Bool(true)))
        .collect();
    let stamp = json!({SUBSCRIPTION_ID_META: id});
    let ack = jsonrpc::notification(
        "notifications/subscriptions/acknowledged",
        Some(json!({"notifications": honored, "_meta": stamp})),
    );
    let (sender, receiver) = mpsc::channel::<Value>(STREAM_BUFFER);
    let mut listings = ListingWatch::new(shared.node.runtime.clone());
    let lasting = Duration::from_millis(shared.node.config.mcp.listen_max_ms);
    let mut stopping = shared.node.stopping.clone();
    let work = tokio::spawn(async move {
        if sender.send(ack).await.is_err() {
            return;
        }
        let until = tokio::time::sleep(lasting);
        tokio::pin!(until);
        loop {
            tokio::select! {
                changed = listings.next() => {
                    let Some(methods) = changed else { break };
                    for method in methods {
                        let wanted = LISTENED
                            .iter()
                            .any(|(flag, listed)| *listed == method && honored.contains_key(*flag));
                        let note = jsonrpc::notification(method, Some(json!({"_meta": stamp})));
                        if wanted && sender.send(note).await.is_err() {
                            return;
                        }
                    }
                }
                () = &mut until => break,
                _ = async { stopping.wait_for(|stopping| *stopping).await.map(drop) } => break,
                () = sender.closed() => return,
            }
        }
        // The place is free before the client reads the end, so it may listen again at once.
        drop(place);
        let end = json!({"resultType": "complete", "_meta": stamp});
        let _ = sender.send(jsonrpc::result(&id, end)).await;
    });
    Ok(stream_of(receiver, work))
}
