//! Signed Agora envelopes ("Agora Protocol Specification v1.0", signed envelopes) over HTTP and WebSocket.
//!
//! Our binding of the transport-agnostic spec:
//! - `POST {path}`: one envelope per request; the response body is the node's
//!   signed reply envelope, with HTTP status 200 or, for an ERROR, the error's code.
//! - `GET {path}/ws`: one envelope per text frame, replies as frames. Envelopes
//!   on one socket run concurrently; after an ACCEPT the node answers STATUS
//!   PROCESSING at once and pushes the RESULT when it is ready.
//!
//! Every inbound envelope goes through the same checks, in this order (§2, §5):
//! body size (413, before any other work), strict parse (I-JSON numbers only)
//! and signature (before anything else is read), envelope fields, sender
//! allow-list, timestamp freshness, replay window (`UnitOfWork::claim_once`: durable
//! before the reply, so restarts do not reopen it; on a shared store it is
//! one transaction with the envelope's other writes, committed once before
//! the reply), then the per-sender rate limit (a token bucket; a refusal's `Retry-After` says when the next token comes) — last, so an envelope someone
//! else replays never spends its signer's quota — keyed by the public key (one
//! bucket for its did:key and raw forms) in a bounded table ([`limits`]); then
//! the message flow of §3–4 in [`flow`]. [`EnvelopesError`] ([`error`]) is
//! mapped to the signed ERROR envelope and its HTTP status in exactly one
//! place, [`Service::refuse`]. What the transport holds is in [`state`]. The
//! envelope itself (§1–2: fields, JCS, signing, verification) is
//! [`crate::crypto::envelope`], shared with the client in [`crate::peers`], so
//! this folder has no `wire.rs` of its own.
//!
//! An HTTP envelope is handled in its own task, so a client that hangs up
//! cannot stop an ACCEPT half way; the reply is sent only after everything it
//! reports (replay entry, consumed offer, STATUS and RESULT state) is flushed.
//! A WebSocket silent for `envelopes.ws_idle_timeout_secs` with nothing in
//! progress is closed, as is one that does not read its replies for as long.

pub mod error;
mod flow;
pub mod limits;
mod state;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};

use self::error::{AnswersRequest, EnvelopesError, Refusal};
use self::state::EnvelopesState;
use crate::crypto::envelope as signed;
use crate::crypto::identity::NodeIdentity;
use crate::node::state::NodeState;
use crate::store::{UnitOfWork, now_ms};

pub fn router(state: NodeState) -> Router {
    let identity = match NodeIdentity::load_or_create(&state.config.identity.key_file) {
        Ok(identity) => identity,
        Err(error) => {
            tracing::error!(%error, "signed envelopes are disabled: the node has no usable key");
            return Router::new();
        }
    };
    let base = state.config.envelopes.path.trim_end_matches('/').to_string();
    let post_path = if base.is_empty() {
        "/".to_string()
    } else {
        base.clone()
    };
    let service = Arc::new(EnvelopesState::new(state, identity.signing_key));
    Router::new()
        .route(&post_path, post(http_envelope))
        .route(&format!("{base}/ws"), get(ws_upgrade))
        .with_state(service)
}

/// A signed reply and the HTTP status it travels with.
pub(crate) struct Reply {
    status: u16,
    /// HTTP's `Retry-After`, when the refusal knows the wait.
    retry_after_secs: Option<u64>,
    envelope: Value,
}

/// Pushes on a WebSocket before the final reply (STATUS PROCESSING after ACCEPT).
pub(crate) type Early = mpsc::Sender<Value>;

impl EnvelopesState {
    /// Answer one inbound envelope (raw bytes as received). Never fails: errors become ERROR envelopes.
    async fn handle(&self, raw: &[u8], early: Option<&Early>) -> Reply {
        // The envelope's writes — its replay claim, the request's state, an
        // offer — commit together (one transaction on a shared store).
        let unit = self.node.store.unit();
        let outcome = self.process(raw, early, &unit).await;
        // Replay entries, offers and states must survive a crash once a reply says they exist.
        let committed = unit.commit().await;
        match (outcome, committed) {
            (Ok(envelope), Ok(())) => Reply {
                status: 200,
                retry_after_secs: None,
                envelope,
            },
            (Err(refusal), _) => self.refuse(refusal),
            (Ok(_), Err(error)) => self.refuse(error.into()),
        }
    }

    /// The checks every envelope passes before its type is looked at.
    async fn process(&self, raw: &[u8], early: Option<&Early>, unit: &UnitOfWork) -> Result<Value, Refusal> {
        let verified = signed::verify_bytes(raw)?;
        let header = signed::header(&verified.value)?;
        let answers = flow::answers_request(&header);
        let answers = answers.as_deref();
        let sender = verified.sender_id.as_str();
        let key = verified.key.to_bytes();
        self.check_allowed(sender).answering(answers)?;
        self.check_fresh(header.timestamp_ms).answering(answers)?;
        self.remember(sender, &header, unit).await.answering(answers)?;
        self.check_rate(&key).answering(answers)?;
        flow::dispatch(self, sender, &key, header, early, unit).await
    }

    fn check_allowed(&self, sender: &str) -> Result<(), EnvelopesError> {
        let allowed = &self.node.config.envelopes.allowed_senders;
        if allowed.is_empty() || allowed.iter().any(|id| id == sender) {
            Ok(())
        } else {
            Err(EnvelopesError::Unauthorized(
                "untrusted sender: not in envelopes.allowed_senders".into(),
            ))
        }
    }

    fn skew_ms(&self) -> i64 {
        i64::try_from(self.node.config.envelopes.max_skew_secs.saturating_mul(1000)).unwrap_or(i64::MAX)
    }

    fn check_fresh(&self, timestamp_ms: i64) -> Result<(), EnvelopesError> {
        let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
        let skew = self.skew_ms();
        if timestamp_ms < now.saturating_sub(skew) {
            Err(EnvelopesError::Unauthorized(format!(
                "stale envelope: its timestamp is more than {} s old",
                skew / 1000
            )))
        } else if timestamp_ms > now.saturating_add(skew) {
            Err(EnvelopesError::Unauthorized(format!(
                "envelope from the future: its timestamp is more than {} s ahead",
                skew / 1000
            )))
        } else {
            Ok(())
        }
    }

    fn check_rate(&self, key: &limits::SenderKey) -> Result<(), EnvelopesError> {
        self.rate
            .lock()
            .admit(*key)
            .map_err(|refused| EnvelopesError::RateLimited {
                per_minute: self.node.config.envelopes.rate_limit_per_minute,
                retry_after_secs: refused.retry_after_secs(),
            })
    }

    /// Record `(sender, id)` for as long as the envelope could pass the freshness check.
    async fn remember(
        &self,
        sender: &str,
        header: &signed::Header,
        unit: &UnitOfWork,
    ) -> Result<(), EnvelopesError> {
        let fresh_until = header.timestamp_ms.saturating_add(self.skew_ms()) + 1000;
        let expires = u64::try_from(fresh_until).unwrap_or(0).max(now_ms() + 1000);
        let mut key = sender.as_bytes().to_vec();
        key.push(0);
        key.extend_from_slice(header.id.as_bytes());
        let first = unit.claim_once(&key, expires).await?;
        if first {
            Ok(())
        } else {
            Err(EnvelopesError::Unauthorized(format!(
                "replayed envelope: id {:?} was already received from this sender",
                header.id
            )))
        }
    }
}

async fn http_envelope(
    State(service): State<Arc<EnvelopesState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let reply =
        match body {
            // First of all, so an oversized body costs no parsing or signature work.
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                service.refuse(EnvelopesError::TooLarge(service.node.config.http.max_body_bytes).into())
            }
            Err(rejection) => service
                .refuse(EnvelopesError::BadRequest(format!("cannot read the envelope: {rejection}")).into()),
            Ok(_) if !crate::policy::is_json_content_type(&headers) => service
                .refuse(EnvelopesError::BadRequest("Content-Type must be application/json".into()).into()),
            Ok(raw) => {
                // Its own task: a client hanging up must not cancel an ACCEPT between
                // consuming the offer and recording the outcome.
                let worker = service.clone();
                let task = async move { worker.handle(&raw, None).await };
                match tokio::spawn(tracing::Instrument::in_current_span(task)).await {
                    Ok(reply) => reply,
                    Err(error) => service
                        .refuse(EnvelopesError::Internal(format!("the handler failed: {error}")).into()),
                }
            }
        };
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(reply.envelope)).into_response();
    if let Some(secs) = reply.retry_after_secs {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    response
}

async fn ws_upgrade(State(service): State<Arc<EnvelopesState>>, upgrade: WebSocketUpgrade) -> Response {
    let limit = service.node.config.http.max_body_bytes;
    upgrade
        .max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| ws_session(service, socket))
}

async fn ws_session(service: Arc<EnvelopesState>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (outgoing, mut queue) = mpsc::channel::<Value>(64);
    let idle = Duration::from_secs(service.node.config.envelopes.ws_idle_timeout_secs);
    let writer = tokio::spawn(async move {
        while let Some(envelope) = queue.recv().await {
            let frame = Message::Text(envelope.to_string().into());
            // A client that stops reading is let go rather than held open forever.
            if !matches!(tokio::time::timeout(idle, sink.send(frame)).await, Ok(Ok(()))) {
                return;
            }
        }
        let close = Message::Close(Some(CloseFrame {
            code: axum::extract::ws::close_code::AWAY,
            reason: "idle".into(),
        }));
        let _ = tokio::time::timeout(idle, sink.send(close)).await;
    });
    let max_pending = service.node.config.envelopes.ws_max_pending;
    let pending = Arc::new(Semaphore::new(max_pending));
    loop {
        let frame = match tokio::time::timeout(idle, stream.next()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(_) => break,
            // Silent, but an envelope is still running: its reply is still owed.
            Err(_) if pending.available_permits() < max_pending => continue,
            Err(_) => {
                tracing::debug!(transport = "envelopes", "idle WebSocket closed");
                break;
            }
        };
        let text = match frame {
            Message::Text(text) => text,
            Message::Binary(_) => {
                let reply = service
                    .refuse(EnvelopesError::BadRequest("envelopes travel as text frames".into()).into());
                if outgoing.send(reply.envelope).await.is_err() {
                    break;
                }
                continue;
            }
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
        };
        let Ok(permit) = pending.clone().try_acquire_owned() else {
            let reply = service.refuse(EnvelopesError::Overloaded.into());
            if outgoing.send(reply.envelope).await.is_err() {
                break;
            }
            continue;
        };
        let service = service.clone();
        let outgoing = outgoing.clone();
        tokio::spawn(async move {
            let reply = service.handle(text.as_bytes(), Some(&outgoing)).await;
            let _ = outgoing.send(reply.envelope).await;
            drop(permit);
        });
    }
    drop(outgoing);
    let _ = writer.await;
}
