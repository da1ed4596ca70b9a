//! The Fetch.ai uAgents exchange protocol (`specs/uagents-exchange.txt`,
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
//! - Replays: the same (sender, digest) is accepted once; its entry is kept in
//!   sled until the envelope's `expires` plus `uagents.replay_window_secs`, so it
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
//!   signed envelope POSTed to the sender's endpoint from `uagents.peers`,
//!   with `uagents.delivery_retries` bounded retries (no Almanac lookups). Its
//!   delivery slot (`uagents.max_pending_replies`) is taken before the replay
//!   entry is recorded: when none is free the envelope is refused (503) and may
//!   be sent again, rather than accepted and its reply dropped.
//! - A generated seed is kept in `{data_dir}/uagents.seed`, mode 0600.
//! - `HEAD /submit` answers uagents' readiness probe headers; `GET /agent_info`
//!   describes the node like a uAgent (address, endpoints, protocol digests).

/// The sending side lives in [`crate::peers`]; kept here for the CLI.
pub use crate::peers::uagents as client;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use rand::RngCore;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Config;
use crate::crypto::identity::{create_secret_file, read_secret_file};
use crate::crypto::uagents::{self as ucrypto, AgentIdentity, Envelope, ProtocolModel, UagentsCryptoError};
use crate::node::state::NodeState;
use crate::runtime::manifest::PluginManifest;
use crate::runtime::{Call, Exchange, InvokeError, Phase, TransportKind};
use crate::store::{Collection, Store, StoreError, now_ms};

/// pydantic's schema of uagents-core's `ErrorMessage`, and its digest.
pub const ERROR_MESSAGE_SCHEMA: &str = r#"{"description": "Error message model", "properties": {"error": {"title": "Error", "type": "string"}}, "required": ["error"], "title": "ErrorMessage", "type": "object"}"#;
pub const ERROR_MESSAGE_DIGEST: &str =
    "model:94cb082f79871c5e80a20637f935d233f0ce11a135d5a3a3c6071e81102a84d5";
/// Lifetime of the envelopes the node sends.
pub const REPLY_TTL_SECS: u64 = 60;
/// uagents' `RESPONSE_TIME_HINT_SECONDS`, sent with a ready probe.
const RESPONSE_TIME_HINT_SECONDS: u64 = 5;
/// Where older versions kept a generated seed (in the store); moved to [`SEED_FILE`].
const SEED_KEY: &[u8] = b"uagents.seed";
/// The generated identity seed's file under data_dir, when `uagents.seed` is empty.
pub const SEED_FILE: &str = "uagents.seed";

#[derive(Clone)]
struct UagentsState {
    node: NodeState,
    identity: Option<Arc<AgentIdentity>>,
    deliveries: Arc<Semaphore>,
}

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
    Router::new()
        .route("/submit", post(submit).head(readiness).get(running))
        .route("/agent_info", get(agent_info))
        .with_state(UagentsState {
            node: state,
            identity,
            deliveries,
        })
}

/// The node's uAgents identity: from `uagents.seed`, else from a random seed
/// generated once and kept in `{data_dir}/uagents.seed` (owner-only).
pub fn node_identity(config: &Config, store: &Store) -> Result<AgentIdentity, String> {
    if !config.uagents.seed.is_empty() {
        return AgentIdentity::from_seed(&config.uagents.seed).map_err(|e| e.to_string());
    }
    let path = config.data_dir.join(SEED_FILE);
    let shown = path.display().to_string();
    if !path.exists() {
        // A seed an older version kept in the store moves to the file, so the address stays.
        let stored: Option<String> = store.get(Collection::Meta, SEED_KEY).map_err(|e| e.to_string())?;
        let seed = stored.unwrap_or_else(|| {
            let mut fresh = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut fresh);
            hex::encode(fresh)
        });
        match create_secret_file(&path, seed.as_bytes()) {
            Ok(()) => {}
            // Another start got there first: its seed is the one.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(format!("cannot write {shown}: {error}")),
        }
        store
            .remove(Collection::Meta, SEED_KEY)
            .map_err(|e| e.to_string())?;
    }
    let bytes = read_secret_file(&path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let seed = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8"))?;
    AgentIdentity::from_seed(seed.trim()).map_err(|e| e.to_string())
}

/// Why an envelope was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("envelope too large: the limit is {0} bytes")]
    TooLarge(usize),
    #[error("unable to read the request body")]
    UnreadableBody,
    #[error("missing header: content-type")]
    MissingContentType,
    #[error("invalid content-type")]
    InvalidContentType,
    #[error("empty or invalid payload")]
    InvalidJson,
    #[error("contents do not match envelope schema")]
    NotAnEnvelope,
    #[error("{0}")]
    Signature(#[from] UagentsCryptoError),
    #[error("unable to route envelope")]
    UnknownTarget,
    #[error("envelope expired")]
    Expired,
    #[error("envelope has no expiry")]
    NoExpiry,
    #[error("envelope expiry is more than {0} seconds ahead")]
    ExpiresTooLate(u64),
    #[error("invalid schema digest")]
    BadSchemaDigest,
    #[error("envelope already received")]
    Replayed,
    #[error("unable to decode payload: {0}")]
    BadPayload(String),
    #[error("the node is overloaded; try again shortly")]
    Overloaded,
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for SubmitError {
    fn from(error: StoreError) -> Self {
        SubmitError::Internal(format!("storage failed: {error}"))
    }
}

impl IntoResponse for SubmitError {
    /// The one place node errors become uagents' `{"error": …}` shape.
    fn into_response(self) -> Response {
        let status = match self {
            SubmitError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            SubmitError::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            SubmitError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        let message = self.to_string();
        if status.is_server_error() {
            tracing::warn!(transport = "uagents", %message, "envelope not handled");
        } else {
            tracing::info!(transport = "uagents", %message, "envelope refused");
        }
        (status, axum::Json(json!({ "error": message }))).into_response()
    }
}

fn now_secs() -> u64 {
    now_ms() / 1000
}

/// A reply to send: model digest and message JSON.
struct ReplyMessage {
    schema_digest: String,
    json: String,
    protocol_digest: Option<String>,
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
    envelope.verify()?;
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
    let delivery = if sync || !state.node.config.uagents.peers.contains_key(&envelope.sender) {
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
    let replay_key = claim_once(&state, &envelope, now)?;

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
                    let _ = state.node.store.remove(Collection::Replay, &replay_key);
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

/// Refuse what uagents never sends and what would make the digest ambiguous (module doc).
fn check_policy(config: &Config, envelope: &Envelope, now: u64) -> Result<(), SubmitError> {
    if !ucrypto::is_model_digest(&envelope.schema_digest) {
        return Err(SubmitError::BadSchemaDigest);
    }
    match envelope.expires {
        Some(expires) if expires < now => Err(SubmitError::Expired),
        Some(expires) if expires - now > config.uagents.max_expiry_secs => {
            Err(SubmitError::ExpiresTooLate(config.uagents.max_expiry_secs))
        }
        Some(_) => Ok(()),
        None if config.uagents.require_expires => Err(SubmitError::NoExpiry),
        None => Ok(()),
    }
}

fn empty_ok() -> Response {
    (StatusCode::OK, axum::Json(json!({}))).into_response()
}

/// Accept a (sender, digest) once for as long as the envelope could be valid; returns
/// the key it holds. `expires` is at most `max_expiry_secs` ahead (checked before), so
/// the entry's life is bounded.
fn claim_once(state: &UagentsState, envelope: &Envelope, now: u64) -> Result<Vec<u8>, SubmitError> {
    let key = format!("uagents\0{}\0{}", envelope.sender, hex::encode(envelope.digest())).into_bytes();
    let window = state.node.config.uagents.replay_window_secs;
    let until_secs = envelope.expires.unwrap_or(now).max(now).saturating_add(window);
    let first = state.node.store.insert_new(
        Collection::Replay,
        &key,
        &now,
        Some(until_secs.saturating_mul(1000)),
    )?;
    if first {
        Ok(key)
    } else {
        Err(SubmitError::Replayed)
    }
}

/// What a plugin failure tells the sender (internal details stay in the log).
fn invoke_error_text(error: &InvokeError) -> String {
    match error {
        InvokeError::Failure { message, .. } => message.clone(),
        InvokeError::Timeout => "the handler took too long".into(),
        _ => "the handler failed".into(),
    }
}

fn error_message(text: &str) -> ReplyMessage {
    ReplyMessage {
        schema_digest: ERROR_MESSAGE_DIGEST.to_string(),
        json: json!({ "error": text }).to_string(),
        protocol_digest: None,
    }
}

/// Turn a plugin's JSON text into the reply message (see the module doc).
fn plugin_reply(manifest: &PluginManifest, request_digest: &str, text: &str) -> Option<ReplyMessage> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return None;
    }
    let fail = |why: &str| {
        tracing::warn!(transport = "uagents", plugin = %manifest.name, why, "unusable plugin reply");
        Some(error_message("the handler failed"))
    };
    let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(trimmed) else {
        return fail("the reply is not a JSON object");
    };
    let schema_digest = match fields.remove("@model") {
        None => request_digest.to_string(),
        Some(Value::String(name)) => match manifest.models.iter().find(|m| m.name == name) {
            Some(model) => model.digest.clone(),
            None => return fail("the reply names a model the plugin did not declare"),
        },
        Some(_) => return fail("\"@model\" must be a model name"),
    };
    Some(ReplyMessage {
        schema_digest,
        json: Value::Object(fields).to_string(),
        protocol_digest: Some(plugin_protocol_digest(manifest)),
    })
}

/// The protocol a plugin speaks: its models, each answered by any of them.
pub fn plugin_protocol_digest(manifest: &PluginManifest) -> String {
    let models: Vec<ProtocolModel<'_>> = manifest
        .models
        .iter()
        .map(|m| ProtocolModel {
            digest: &m.digest,
            schema: &m.schema,
        })
        .collect();
    let all: Vec<&str> = manifest.models.iter().map(|m| m.digest.as_str()).collect();
    let interactions: Vec<(&str, Vec<&str>)> = all.iter().map(|digest| (*digest, all.clone())).collect();
    ucrypto::protocol_digest(&ucrypto::protocol_manifest(&models, &interactions))
}

/// A new envelope from the node to the request's sender, same session, signed.
fn sign_reply(identity: &AgentIdentity, request: &Envelope, reply: ReplyMessage) -> Envelope {
    let mut envelope = Envelope {
        version: 1,
        sender: identity.address().to_string(),
        target: request.sender.clone(),
        session: request.session.clone(),
        schema_digest: reply.schema_digest,
        protocol_digest: reply.protocol_digest,
        payload: None,
        expires: Some(now_secs() + REPLY_TTL_SECS),
        nonce: Some(rand::rngs::OsRng.next_u64()),
        signature: None,
    };
    envelope.encode_payload(&reply.json);
    envelope.sign(identity);
    envelope
}

/// Deliver an asynchronous reply in the background to the sender's configured endpoint,
/// holding the delivery slot taken when the envelope was accepted.
fn spawn_delivery(state: &UagentsState, envelope: Envelope, permit: Option<OwnedSemaphorePermit>) {
    let config = &state.node.config;
    let (Some(url), Some(permit)) = (config.uagents.peers.get(&envelope.target).cloned(), permit) else {
        tracing::warn!(transport = "uagents", target = %envelope.target, "no endpoint for this sender in uagents.peers; reply dropped");
        return;
    };
    let retries = config.uagents.delivery_retries;
    let timeout = Duration::from_millis(config.outbound.timeout_ms);
    tokio::spawn(async move {
        let _permit = permit;
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

/// The endpoint the node advertises: `uagents.endpoint`, else its own listener.
fn advertised_endpoint(config: &Config) -> String {
    if !config.uagents.endpoint.is_empty() {
        return config.uagents.endpoint.clone();
    }
    let listen = if config.uagents.listen.is_empty() {
        &config.listen
    } else {
        &config.uagents.listen
    };
    format!("http://{listen}/submit")
}

async fn agent_info(State(state): State<UagentsState>) -> Response {
    let Some(identity) = &state.identity else {
        return SubmitError::Internal("the node has no uAgents identity".into()).into_response();
    };
    let config = &state.node.config;
    let registry = state.node.runtime.registry();
    let mut protocols: Vec<String> = registry
        .plugins()
        .filter(|p| !p.manifest.models.is_empty())
        .map(|p| plugin_protocol_digest(&p.manifest))
        .collect();
    protocols.sort();
    protocols.dedup();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_with(models: &[(&str, &str)]) -> PluginManifest {
        PluginManifest {
            name: "test".into(),
            version: "1".into(),
            description: String::new(),
            protocols: Vec::new(),
            default_agora: false,
            accepts_any_document: false,
            resources: Vec::new(),
            models: models
                .iter()
                .map(|(name, schema)| {
                    let schema: Value = serde_json::from_str(schema).unwrap();
                    crate::runtime::manifest::Model {
                        name: name.to_string(),
                        digest: ucrypto::schema_digest(&schema),
                        schema,
                    }
                })
                .collect(),
            leagues: Vec::new(),
            assistant: false,
            tools: Vec::new(),
            instance: crate::runtime::manifest::InstancePolicy::Fresh,
        }
    }

    const MESSAGE_SCHEMA: &str = r#"{"properties": {"text": {"title": "Text", "type": "string"}}, "required": ["text"], "title": "Message", "type": "object"}"#;

    #[test]
    fn plugin_replies_use_the_request_model_or_the_named_one() {
        let manifest = manifest_with(&[
            ("Message", MESSAGE_SCHEMA),
            ("ErrorMessage", ERROR_MESSAGE_SCHEMA),
        ]);
        let request = manifest.models[0].digest.clone();
        assert!(plugin_reply(&manifest, &request, "").is_none());
        assert!(plugin_reply(&manifest, &request, " null ").is_none());

        let same = plugin_reply(&manifest, &request, r#"{"text": "a"}"#).unwrap();
        assert_eq!(same.schema_digest, request);
        assert_eq!(same.json, r#"{"text":"a"}"#);
        assert_eq!(same.protocol_digest, Some(plugin_protocol_digest(&manifest)));

        let named = plugin_reply(
            &manifest,
            &request,
            r#"{"@model": "ErrorMessage", "error": "no"}"#,
        )
        .unwrap();
        assert_eq!(named.schema_digest, ERROR_MESSAGE_DIGEST);
        assert_eq!(named.json, r#"{"error":"no"}"#);

        for bad in [
            r#"{"@model": "Nope", "x": 1}"#,
            r#"{"@model": 3}"#,
            "[1]",
            "\"text\"",
            "not json",
        ] {
            let reply = plugin_reply(&manifest, &request, bad).unwrap();
            assert_eq!(reply.schema_digest, ERROR_MESSAGE_DIGEST, "{bad}");
            assert_eq!(reply.json, r#"{"error":"the handler failed"}"#);
        }
    }

    #[test]
    fn the_echo_plugins_protocol_digest_is_the_librarys() {
        // The digest uagents computes for Protocol(interactions={Message: {Message}}).
        assert_eq!(
            plugin_protocol_digest(&manifest_with(&[("Message", MESSAGE_SCHEMA)])),
            "proto:7053d1150aeb4ab2321419183c1d414acf35781830eaed0d6ce54bde8dc9ddc3"
        );
    }

    #[test]
    fn error_message_digest_is_the_models_schema_digest() {
        let schema: Value = serde_json::from_str(ERROR_MESSAGE_SCHEMA).unwrap();
        assert_eq!(ucrypto::schema_digest(&schema), ERROR_MESSAGE_DIGEST);
    }
}
