//! The Fetch.ai uAgents exchange protocol ("uAgents Exchange protocol",
//! "Envelopes" and "Endpoints"), matched to what uagents 0.26.1 does:
//!
//! - `POST /submit` takes a JSON envelope; `200 {}` on success, `400
//!   {"error": …}` with uagents' own wording for a missing or wrong content
//!   type, invalid JSON, a non-envelope, a missing/undecodable/invalid
//!   signature and an unknown target. [`SubmitError`] is the one place node
//!   errors become that shape.
//! - A body over `http.max_body_bytes` is refused (413, same shape) before
//!   anything else is done with the request.
//! - The digest is the library's exactly: sender ‖ target ‖ session ‖
//!   schema_digest ‖ payload? ‖ expires? ‖ nonce?, no separators. So that no two
//!   accepted envelopes can share one signature, the node takes only what the
//!   library produces: `schema_digest` is `model:` + 64 hex digits, `payload`
//!   canonical base64 (ASCII), and `expires` present and within
//!   [now, now + `uagents.max_expiry_secs`] (`uagents.require_expires`). An
//!   `expires` then starts with a zero byte no payload has, and eight payload
//!   characters read as an expiry lie centuries ahead, so the split of the
//!   digest's tail is unique: an `expires` cannot be moved into `nonce` (or into
//!   the payload) under the same signature.
//! - Replays: the same (sender, digest) is accepted once; its claim
//!   (`Store::claim_once`) is kept until the envelope's `expires` plus
//!   `uagents.replay_window_secs`, so it
//!   outlives every moment the envelope could pass the expiry check.
//! - The envelope's `schema_digest` selects the plugin (`Registry::uagents_model`);
//!   the plugin gets the decoded message JSON, the sender's verified address
//!   and the session. Its JSON reply goes back in the same session as the
//!   same model, or as the declared model named by a top-level `"@model"` key
//!   (removed before sending); an empty or `null` reply sends nothing. A
//!   plugin failure is answered with uagents' `ErrorMessage{error}`, as a
//!   uAgent answers a message that does not fit its model.
//! - `x-uagents-connection: sync`: the HTTP body is the signed reply envelope
//!   (sender and target swapped, same session). Otherwise the reply is a new
//!   signed envelope POSTed to the sender's endpoint from `uagents.peers`, or
//!   resolved through `uagents.almanac_api` (and then to a public address, or an
//!   internal one only as `outbound.allowed_hosts` or `outbound.allowed_private`
//!   allow; `uagents.almanac_replies_allowed_hosts_only` keeps it to the allow-list),
//!   with `uagents.delivery_retries` bounded retries. That choice is
//!   [`crate::peers::uagents::endpoint_for`], with the node's one resolver: a
//!   plugin's `host.outbound` message to a bare address goes the same way. A reply's
//!   delivery slot (`uagents.max_pending_replies`) is taken before the replay
//!   entry is recorded: when none is free the envelope is refused (503) and may
//!   be sent again, rather than accepted and its reply dropped.
//! - A generated seed is kept in `{data_dir}/uagents.seed`, mode 0600.
//! - With `uagents.almanac_api` set, the node keeps itself registered there
//!   ([`crate::peers::almanac`]): address, `uagents.public_endpoint`, and the
//!   protocol digests of its plugins, again when those change.
//! - `HEAD /submit` answers uagents' readiness probe headers; `GET /agent_info`
//!   describes the node like a uAgent (address, endpoints, protocol digests).
//!
//! This module holds the routes; [`wire`] the envelope policy, replies and
//! reply envelopes; [`error`] [`SubmitError`] and its one mapping; [`state`]
//! the identity, replay entries and delivery slots. The envelope format and
//! its digest and signature are [`crate::crypto::uagents`].

/// The sending side lives in [`crate::peers`]; kept here for the CLI.
pub use crate::peers::uagents as client;

pub mod error;
mod state;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use self::error::SubmitError;
pub use self::state::fleet_seed;
use self::state::{UagentsState, claim_once, node_identity};
use self::wire::{
    check_policy, empty_ok, error_message, invoke_error_text, now_secs, plugin_reply, sign_reply,
};
use crate::config::Config;
use crate::crypto::uagents::Envelope;
use crate::node::state::NodeState;
use crate::peers::almanac;
use crate::runtime::{Call, Exchange, InvokeError, Phase, TransportKind};

/// uagents' `RESPONSE_TIME_HINT_SECONDS`, sent with a ready probe.
const RESPONSE_TIME_HINT_SECONDS: u64 = 5;

pub fn router(state: NodeState) -> Router {
    let identity = match node_identity(&state.config, &state.store) {
        Ok(identity) => {
            tracing::info!(transport = "uagents", address = %identity.address(), "uAgents identity");
            Some(Arc::new(identity))
        }
        Err(error) => {
            tracing::error!(transport = "uagents", %error, "no uAgents identity; /submit will refuse envelopes");
            None
        }
    };
    let deliveries = Arc::new(Semaphore::new(state.config.uagents.max_pending_replies));
    let api = &state.config.uagents.almanac_api;
    // The node's one resolver, shared with plugins' messages to bare addresses.
    let almanac = state.runtime.almanac();
    if let (false, Some(identity)) = (api.is_empty(), &identity) {
        let node = state.clone();
        let registration = almanac::keep_registered(
            api.clone(),
            identity.clone(),
            advertised_endpoint(&state.config),
            move || (!node.runtime.is_starting()).then(|| protocol_digests(&node)),
        );
        state.background.spawn("almanac.register", registration);
    }
    Router::new()
        .route("/submit", post(submit).head(readiness).get(running))
        .route("/agent_info", get(agent_info))
        .with_state(UagentsState {
            node: state,
            identity,
            deliveries,
            almanac,
            sender_keys: Arc::default(),
        })
}

async fn submit(
    State(state): State<UagentsState>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, SubmitError> {
    // First of all, so an oversized body costs no parsing or signature work.
    let raw = raw.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            SubmitError::TooLarge(state.node.config.http.max_body_bytes)
        } else {
            SubmitError::UnreadableBody
        }
    })?;
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .ok_or(SubmitError::MissingContentType)?;
    if !content_type
        .to_str()
        .is_ok_and(|v| v.to_ascii_lowercase().contains("application/json"))
    {
        return Err(SubmitError::InvalidContentType);
    }
    let value: Value = serde_json::from_slice(&raw).map_err(|_| SubmitError::InvalidJson)?;
    let envelope = Envelope::from_value(value).map_err(|_| SubmitError::NotAnEnvelope)?;
    let sync = headers
        .get("x-uagents-connection")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"sync"));

    // Verify before anything else looks at the contents.
    state.sender_keys.verify(&envelope)?;
    let identity = state
        .identity
        .clone()
        .ok_or_else(|| SubmitError::Internal("the node has no uAgents identity".into()))?;
    if envelope.target != identity.address() {
        return Err(SubmitError::UnknownTarget);
    }
    let now = now_secs();
    check_policy(&state.node.config, &envelope, now)?;
    let message = envelope.decode_payload().map_err(SubmitError::BadPayload)?;
    // An asynchronous reply's slot is taken before the replay entry: an envelope
    // refused for want of one was never recorded and can be sent again.
    let reachable = state.almanac.is_some() || state.node.config.uagents.peers.contains_key(&envelope.sender);
    let delivery = if sync || !reachable {
        None
    } else {
        Some(
            state
                .deliveries
                .clone()
                .try_acquire_owned()
                .map_err(|_| SubmitError::Overloaded)?,
        )
    };
    // While the start-up load runs, a model nobody handles yet may just not be compiled:
    // "try again" (503) with nothing recorded, rather than an answer that it is unknown.
    if state
        .node
        .runtime
        .registry()
        .uagents_model(&envelope.schema_digest)
        .is_none()
    {
        state
            .node
            .runtime
            .not_found_yet()
            .map_err(|_| SubmitError::Starting)?;
    }
    let replay_key = claim_once(&state, &envelope, now).await?;

    let registry = state.node.runtime.registry();
    let reply = match registry.uagents_model(&envelope.schema_digest).cloned() {
        Some(plugin) => {
            let call = Call {
                transport: TransportKind::Uagents,
                phase: Phase::Handle,
                route: envelope.schema_digest.clone(),
                sender: Some(envelope.sender.clone()),
                conversation: Some(envelope.session.clone()),
                body: message,
            };
            match state.node.runtime.invoke(&plugin, call, Exchange::new()).await {
                Ok(text) => plugin_reply(&plugin.manifest, &envelope.schema_digest, &text),
                Err(InvokeError::Overloaded) => {
                    // Nothing happened: let the sender try the same envelope again.
                    let _ = state.node.store.release_claim(&replay_key).await;
                    return Err(SubmitError::Overloaded);
                }
                Err(error) => {
                    tracing::info!(transport = "uagents", plugin = %plugin.manifest.name, %error, "handler failed");
                    Some(error_message(&invoke_error_text(&error)))
                }
            }
        }
        None => {
            tracing::info!(transport = "uagents", digest = %envelope.schema_digest, sender = %envelope.sender, "no plugin handles this model");
            Some(error_message(&format!(
                "unrecognized schema digest: {}",
                envelope.schema_digest
            )))
        }
    };
    state.node.store.commit().await?;

    let Some(reply) = reply else {
        return Ok(empty_ok());
    };
    let reply_envelope = sign_reply(&identity, &envelope, reply);
    if sync {
        return Ok((
            StatusCode::OK,
            [(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            reply_envelope.to_json(),
        )
            .into_response());
    }
    spawn_delivery(&state, reply_envelope, delivery);
    Ok(empty_ok())
}

/// Deliver an asynchronous reply in the background, holding the delivery slot taken
/// when the envelope was accepted, to the endpoint [`client::endpoint_for`] finds
/// for the sender (`uagents.peers`, else the Almanac under its endpoint policy).
fn spawn_delivery(state: &UagentsState, envelope: Envelope, permit: Option<OwnedSemaphorePermit>) {
    let config = state.node.config.clone();
    let almanac = state.almanac.clone();
    let reachable = almanac.is_some() || config.uagents.peers.contains_key(&envelope.target);
    let Some(permit) = permit.filter(|_| reachable) else {
        tracing::warn!(transport = "uagents", target = %envelope.target, "no endpoint for this sender in uagents.peers; reply dropped");
        return;
    };
    let retries = config.uagents.delivery_retries;
    let timeout = Duration::from_millis(config.outbound.timeout_ms);
    state.node.background.spawn("uagents.delivery", async move {
        let _permit = permit;
        let url = match client::endpoint_for(&envelope.target, &config, almanac.as_deref()).await {
            Ok(url) => url,
            Err(reason) => {
                tracing::warn!(transport = "uagents", target = %envelope.target, %reason, "reply dropped");
                return;
            }
        };
        match client::deliver_with_retries(&url, &envelope, retries, timeout).await {
            Ok(()) => {
                tracing::info!(transport = "uagents", target = %envelope.target, %url, session = %envelope.session, "reply delivered")
            }
            Err(error) => {
                tracing::warn!(transport = "uagents", target = %envelope.target, %url, %error, "reply not delivered")
            }
        }
    });
}

/// uagents' readiness probe: `x-uagents-status` for the address asked about.
async fn readiness(State(state): State<UagentsState>, headers: HeaderMap) -> Response {
    let status = match (headers.get("x-uagents-address"), &state.identity) {
        (None, _) => "indeterminate",
        (Some(asked), Some(identity)) if asked.as_bytes() == identity.address().as_bytes() => "ready",
        _ => "not-ready",
    };
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    headers.insert("x-uagents-status", HeaderValue::from_static(status));
    if status == "ready" {
        headers.insert(
            "x-uagents-response-time-hint",
            HeaderValue::from(RESPONSE_TIME_HINT_SECONDS),
        );
    }
    response
}

/// A browser visiting `/submit` sees that the agent runs, as with uagents.
async fn running() -> Response {
    axum::Json(json!({"status": "OK - Agent is running"})).into_response()
}

/// The endpoint the node advertises: `uagents.public_endpoint`, else its own listener.
fn advertised_endpoint(config: &Config) -> String {
    if !config.uagents.public_endpoint.is_empty() {
        return config.uagents.public_endpoint.clone();
    }
    let listen = if config.uagents.listen.is_empty() {
        &config.listen
    } else {
        &config.uagents.listen
    };
    format!("http://{listen}/submit")
}

/// The protocol digests of the loaded plugins that declare uAgents models, sorted.
fn protocol_digests(node: &NodeState) -> Vec<String> {
    let registry = node.runtime.registry();
    let mut protocols: Vec<String> = registry
        .plugins()
        .filter_map(|p| p.manifest.uagents_protocol.clone())
        .collect();
    protocols.sort();
    protocols.dedup();
    protocols
}

async fn agent_info(State(state): State<UagentsState>) -> Response {
    let Some(identity) = &state.identity else {
        return SubmitError::Internal("the node has no uAgents identity".into()).into_response();
    };
    let config = &state.node.config;
    let protocols = protocol_digests(&state.node);
    let listen = if config.uagents.listen.is_empty() {
        &config.listen
    } else {
        &config.uagents.listen
    };
    let port = listen
        .parse::<std::net::SocketAddr>()
        .ok()
        .map(|addr| addr.port());
    axum::Json(json!({
        "address": identity.address(),
        "prefix": "agent",
        "endpoints": [{"url": advertised_endpoint(config), "weight": 1}],
        "protocols": protocols,
        "metadata": null,
        "agent_type": "uagent",
        "port": port,
    }))
    .into_response()
}
