//! Agora Arena Protocol (AAP) 1.0 (the Spanish original, read with its
//! English reading, whose numbering the § marks here follow); our
//! reading and the ambiguities we settled are in `docs/protocols/arena.md`. This module
//! holds the routes, read as the spec reads.
//!
//! - §1: `POST {arena.path}` carries a task ([`wire`]); the plugin serving its
//!   `league` answers, the host measures `latency_ms`, fills `tools_used` from
//!   the tool calls it ran, and answers 408 before `time_limit_seconds` runs out.
//! - §2: live events ([`events`]) go to `arena.stream_url` ([`stream`]); every
//!   event also carries `match_id` and `round` (our extension).
//! - §3: `GET {arena.path}/health`, averaging the latencies [`state`] keeps.
//! - §4: bearer JWTs verified against the arena's JWKS ([`keys`],
//!   [`crate::crypto::jwt`]) and bound to this agent and the body's match.
//! - §5: status codes. [`ArenaError`] ([`error`]) is the one place errors
//!   become the wire shape: every error reply is `{"error": …}` with its status.

pub mod error;
mod events;
pub mod keys;
mod state;
pub mod stream;
pub mod wire;

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};

use self::error::{ArenaError, RETRY_AFTER_SECS};
use self::events::Events;
use self::state::{ArenaState, Shared};
use self::wire::{AAP_VERSION, bearer, build_reply, parse_task};
use crate::crypto::jwt;
use crate::node::state::NodeState;
use crate::runtime::{Call, Exchange, Phase, TransportKind, event_channel};

/// Plugin events one task may have in flight to the stream buffer.
const EVENT_CHANNEL: usize = 256;

pub fn router(state: NodeState) -> Router {
    let arena = ArenaState::start(state);
    let base = arena.node.config.arena.path.trim_end_matches('/').to_string();
    let task_path = if base.is_empty() { "/" } else { base.as_str() };
    Router::new()
        .route(task_path, post(task).fallback(method_not_allowed))
        .route(
            &format!("{base}/health"),
            get(health).fallback(method_not_allowed),
        )
        .with_state(arena)
}

async fn method_not_allowed() -> ArenaError {
    ArenaError::MethodNotAllowed
}

/// How long the plugin may run: the task's limit (or, without one, the
/// listener's request timeout) less a margin, so the 408 reaches the arena
/// before its own clock runs out.
fn budget(limit: Option<Duration>, request_timeout: Duration) -> Duration {
    let limit = limit.map_or(request_timeout, |l| l.min(request_timeout));
    let margin = (limit / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    limit.saturating_sub(margin)
}

async fn task(
    State(arena): State<Shared>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ArenaError> {
    let started = Instant::now();
    // A body the listener refused (too large, broken) is answered before any
    // token work: checking a signature for a request that cannot be served
    // would only give a flood of big bodies a CPU lever.
    let raw = raw?;
    // Verify before parsing: the token is checked before the body is read as JSON.
    let token = bearer(&headers)?;
    let kid = jwt::token_kid(token)?;
    let key = arena.keys.key(&kid).await?;
    let config = &arena.node.config.arena;
    let claims = jwt::verify(
        token,
        &key,
        &jwt::Policy {
            audience: &config.audience,
            issuer: &config.issuer,
        },
    )?;
    let task = parse_task(&headers, &raw)?;
    claims.check_binding(&config.agent_id, &task.match_id)?;

    let registry = arena.node.runtime.registry();
    let Some(plugin) = registry.arena_league(&task.league).cloned() else {
        arena.node.runtime.not_found_yet()?;
        return Err(ArenaError::NotFound(format!(
            "no plugin here plays league {:?}",
            task.league
        )));
    };
    let Ok(_slot) = arena.slots.clone().try_acquire_owned() else {
        return Err(ArenaError::Busy(config.max_concurrent));
    };

    let events = Events::new(&arena, &task);
    let (sender, stream) = event_channel(EVENT_CHANNEL);
    let mut exchange = Exchange::new().with_events(sender);
    // The forwarding below never waits, so a full channel means a runaway plugin.
    exchange.emit_timeout = Some(Duration::from_millis(100));
    let call = Call {
        transport: TransportKind::Arena,
        phase: Phase::Handle,
        route: task.league.clone(),
        sender: Some(claims.iss.clone().unwrap_or_else(|| "arena".into())),
        conversation: Some(task.match_id.clone()),
        body: task.body.to_string(),
    };
    let request_timeout = Duration::from_millis(arena.node.config.http.request_timeout_ms);
    let deadline = tokio::time::Instant::from_std(started) + budget(task.time_limit, request_timeout);
    let runtime = arena.node.runtime.clone();
    let mut events = events;
    let outcome = runtime
        .invoke_streaming(&plugin, call, exchange, stream, &mut events, Some(deadline))
        .await;
    let result = match outcome {
        Ok(reply) => build_reply(&reply, &events.tools, &events.subagents, started),
        Err(error) => Err(ArenaError::from(error)),
    };
    match &result {
        Ok((reply, latency_ms)) => {
            events.emit(json!({"type": "answer", "final": true, "value": reply["answer"]}));
            arena.record_latency(*latency_ms);
        }
        Err(error) => events.emit(json!({
            "type": "error", "message": error.to_string(), "fatal": true,
        })),
    }
    result.map(|(reply, _)| axum::Json(reply).into_response())
}

/// §3. Not "ok" (and 503, so the arena counts a failed check) while no
/// plugin plays any league.
async fn health(State(arena): State<Shared>) -> Response {
    let mut leagues: Vec<String> = arena
        .node
        .runtime
        .registry()
        .plugins()
        .flat_map(|plugin| plugin.manifest.leagues.iter().cloned())
        .collect();
    leagues.sort();
    leagues.dedup();
    let config = &arena.node.config.arena;
    let max_concurrent = config.max_concurrent;
    let mut body = json!({
        "status": "ok",
        "version": AAP_VERSION,
        "node_version": env!("CARGO_PKG_VERSION"),
        "agent_id": config.agent_id,
        "capabilities": leagues,
        "avg_latency_ms": arena.average_latency_ms(),
        "max_concurrent": max_concurrent,
        "in_flight": max_concurrent.saturating_sub(arena.slots.available_permits()),
    });
    if leagues_empty(&body) {
        let error = ArenaError::NoLeagues;
        body["status"] = Value::String("unavailable".into());
        body["error"] = Value::String(error.to_string());
        let mut response = (error.status(), axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        return response;
    }
    axum::Json(body).into_response()
}

fn leagues_empty(body: &Value) -> bool {
    body["capabilities"].as_array().is_none_or(Vec::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_ends_before_the_limit() {
        let request = Duration::from_secs(30);
        assert_eq!(
            budget(Some(Duration::from_secs(1)), request),
            Duration::from_millis(900)
        );
        assert_eq!(
            budget(Some(Duration::from_secs(60)), request),
            Duration::from_secs(29)
        );
        assert_eq!(budget(None, request), Duration::from_secs(29));
        assert!(budget(Some(Duration::from_millis(20)), request).is_zero());
    }
}
