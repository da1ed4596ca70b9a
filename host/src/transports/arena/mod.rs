//! Agora Arena Protocol (`specs/agora-arena-aap.es.txt`, read with
//! `agora-arena-aap.en.md`); our reading and the ambiguities we settled are
//! in `docs/arena.md`.
//!
//! - §1: `POST {arena.path}` carries a task; the plugin serving its `league`
//!   answers, the host measures `latency_ms`, fills `tools_used` from the tool
//!   calls it ran, and answers 408 before `time_limit_seconds` runs out.
//! - §2: live events go to `arena.stream_url` ([`stream`]); every event also
//!   carries `match_id` and `round` (our extension).
//! - §3: `GET {arena.path}/health`.
//! - §4: bearer JWTs verified against the arena's JWKS ([`keys`],
//!   [`crate::crypto::jwt`]) and bound to this agent and the body's match.
//! - §5: status codes. [`ArenaError`] is the one place errors become the
//!   wire shape: every error reply is `{"error": …}` with its status.

pub mod keys;
pub mod stream;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, mpsc};

use self::keys::{KeyCache, KeyError};
use self::stream::EventStream;
use crate::crypto::jwt::{self, JwtError};
use crate::node::state::NodeState;
use crate::runtime::{Call, Exchange, FailureKind, InvokeError, Phase, PluginEvent, TransportKind};

/// The AAP version this node speaks (the `version` of §1 and §3).
pub const AAP_VERSION: &str = "1.0";
/// Served tasks the health average covers.
const LATENCY_WINDOW: usize = 50;
/// Plugin events one task may have in flight to the stream buffer.
const EVENT_CHANNEL: usize = 256;
/// Longest `match_id` or `league` accepted.
const MAX_ID_BYTES: usize = 256;
/// What `Retry-After` says when every slot is busy.
const RETRY_AFTER_SECS: &str = "1";

/// Everything the arena endpoints share.
struct Arena {
    node: NodeState,
    keys: KeyCache,
    stream: Option<Arc<EventStream>>,
    slots: Arc<Semaphore>,
    latencies: Mutex<VecDeque<u64>>,
}

type Shared = Arc<Arena>;

pub fn router(state: NodeState) -> Router {
    let config = &state.config.arena;
    let base = config.path.trim_end_matches('/').to_string();
    let arena = Arc::new(Arena {
        keys: KeyCache::new(config),
        stream: EventStream::new(
            &config.stream_url,
            &config.stream_token,
            config.stream_buffer,
            state.runtime.metrics().clone(),
        ),
        slots: Arc::new(Semaphore::new(config.max_concurrent)),
        latencies: Mutex::new(VecDeque::with_capacity(LATENCY_WINDOW)),
        node: state,
    });
    let preload = arena.clone();
    tokio::spawn(async move { preload.keys.preload().await });
    // The arena may rotate without ever sending a token with an unknown kid
    // (a withdrawn key must stop verifying too): reload on a schedule as well.
    let refresh = Arc::downgrade(&arena);
    let every = Duration::from_secs(arena.node.config.arena.jwks_refresh_secs);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Some(arena) = refresh.upgrade() else { break };
            arena.keys.refresh().await;
        }
    });
    let task_path = if base.is_empty() { "/" } else { base.as_str() };
    Router::new()
        .route(task_path, post(task).fallback(method_not_allowed))
        .route(
            &format!("{base}/health"),
            get(health).fallback(method_not_allowed),
        )
        .with_state(arena)
}

/// Every way a request fails, by the status AAP §5 gives it.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("{0}")]
    BadRequest(String),
    #[error("the request body is too large")]
    TooLarge,
    #[error("{0}")]
    NotFound(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("the time limit ran out before the plugin answered")]
    Timeout,
    #[error("this agent is serving its maximum of {0} tasks; retry shortly")]
    Busy(usize),
    #[error("the node is overloaded; retry shortly")]
    Overloaded,
    #[error("no plugin serves any league")]
    NoLeagues,
    #[error("{0}")]
    PluginFailed(String),
}

impl ArenaError {
    fn status(&self) -> StatusCode {
        match self {
            ArenaError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ArenaError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ArenaError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ArenaError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ArenaError::NotFound(_) => StatusCode::NOT_FOUND,
            ArenaError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ArenaError::Timeout => StatusCode::REQUEST_TIMEOUT,
            // 503 rather than 429: the arena skips the match without penalty,
            // where 429 would pause this agent for five minutes (§5).
            ArenaError::Busy(_) | ArenaError::Overloaded | ArenaError::NoLeagues => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ArenaError::PluginFailed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ArenaError {
    /// The one place node errors become the arena's wire shape.
    fn into_response(self) -> Response {
        let status = self.status();
        let message = self.to_string();
        if status.is_server_error() {
            tracing::warn!(transport = "arena", %message, "task failed");
        } else {
            tracing::debug!(transport = "arena", %message, "task refused");
        }
        let mut response = (status, axum::Json(json!({ "error": message }))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        }
        response
    }
}

impl From<JwtError> for ArenaError {
    fn from(error: JwtError) -> Self {
        ArenaError::Unauthorized(error.to_string())
    }
}

impl From<KeyError> for ArenaError {
    fn from(error: KeyError) -> Self {
        ArenaError::Unauthorized(error.to_string())
    }
}

impl From<InvokeError> for ArenaError {
    fn from(error: InvokeError) -> Self {
        match error {
            InvokeError::Timeout => ArenaError::Timeout,
            InvokeError::Overloaded => ArenaError::Overloaded,
            InvokeError::Failure {
                kind: FailureKind::BadRequest | FailureKind::Unsupported,
                message,
            } => ArenaError::BadRequest(message),
            InvokeError::Failure {
                kind: FailureKind::NotFound,
                message,
            } => ArenaError::NotFound(message),
            other => ArenaError::PluginFailed(other.to_string()),
        }
    }
}

impl From<BytesRejection> for ArenaError {
    fn from(rejection: BytesRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ArenaError::TooLarge
        } else {
            ArenaError::BadRequest(rejection.body_text())
        }
    }
}

async fn method_not_allowed() -> ArenaError {
    ArenaError::MethodNotAllowed
}

/// The fields of a §1 task the host itself needs; the plugin gets the whole body.
struct Task {
    body: Value,
    league: String,
    match_id: String,
    round: Value,
    time_limit: Option<Duration>,
}

fn bearer(headers: &HeaderMap) -> Result<&str, ArenaError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ArenaError::Unauthorized("missing Authorization header".into()))?
        .to_str()
        .map_err(|_| ArenaError::Unauthorized("malformed Authorization header".into()))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| ArenaError::Unauthorized("expected `Bearer <token>`".into()))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ArenaError::Unauthorized("expected `Bearer <token>`".into()));
    }
    // The spec's example quotes the token; tolerate that.
    Ok(token.trim().trim_matches('"'))
}

fn parse_task(headers: &HeaderMap, raw: &[u8]) -> Result<Task, ArenaError> {
    if !super::is_json_content_type(headers) {
        return Err(ArenaError::UnsupportedMediaType);
    }
    let body: Value =
        serde_json::from_slice(raw).map_err(|e| ArenaError::BadRequest(format!("malformed JSON: {e}")))?;
    let Value::Object(fields) = &body else {
        return Err(ArenaError::BadRequest("the task must be a JSON object".into()));
    };
    let text = |name: &str| -> Result<String, ArenaError> {
        match fields.get(name) {
            Some(Value::String(value)) if !value.is_empty() && value.len() <= MAX_ID_BYTES => {
                Ok(value.clone())
            }
            Some(_) => Err(ArenaError::BadRequest(format!(
                "`{name}` must be a string of 1-{MAX_ID_BYTES} bytes"
            ))),
            None => Err(ArenaError::BadRequest(format!("missing field `{name}`"))),
        }
    };
    if let Some(version) = fields.get("version") {
        let major = version.as_str().and_then(|v| v.split('.').next());
        if major != Some("1") {
            return Err(ArenaError::BadRequest(format!(
                "unsupported AAP version {version}; this agent speaks {AAP_VERSION}"
            )));
        }
    }
    let league = text("league")?;
    let match_id = text("match_id")?;
    let round = match fields.get("round") {
        None | Some(Value::Null) => Value::Null,
        Some(round @ Value::Number(n)) if n.is_u64() => round.clone(),
        Some(_) => {
            return Err(ArenaError::BadRequest(
                "`round` must be a non-negative integer".into(),
            ));
        }
    };
    if !fields.get("task").is_some_and(Value::is_object) {
        return Err(ArenaError::BadRequest("`task` must be a JSON object".into()));
    }
    let time_limit = match fields.get("time_limit_seconds") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_f64() {
            Some(secs) if secs > 0.0 && secs.is_finite() => Some(Duration::from_secs_f64(secs.min(86_400.0))),
            _ => {
                return Err(ArenaError::BadRequest(
                    "`time_limit_seconds` must be a positive number".into(),
                ));
            }
        },
    };
    Ok(Task {
        league,
        match_id,
        round,
        time_limit,
        body,
    })
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
        return Err(ArenaError::NotFound(format!(
            "no plugin here plays league {:?}",
            task.league
        )));
    };
    let Ok(_slot) = arena.slots.clone().try_acquire_owned() else {
        return Err(ArenaError::Busy(config.max_concurrent));
    };

    let events = Events::new(&arena, &task);
    let (sender, mut receiver) = mpsc::channel(EVENT_CHANNEL);
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
    let mut invoke = Box::pin(runtime.invoke(&plugin, call, exchange));
    let mut events = events;
    // Dropping `invoke` at the deadline drops the plugin's store: the wasm call
    // stops at its next epoch tick.
    let outcome = loop {
        tokio::select! {
            result = &mut invoke => break Some(result),
            Some(event) = receiver.recv() => events.forward(event),
            _ = tokio::time::sleep_until(deadline) => break None,
        }
    };
    drop(invoke);
    while let Ok(event) = receiver.try_recv() {
        events.forward(event);
    }
    let result = match outcome {
        None => Err(ArenaError::Timeout),
        Some(Ok(reply)) => build_reply(&reply, &events, started),
        Some(Err(error)) => Err(ArenaError::from(error)),
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

/// The §1 reply from the plugin's answer and what the host observed itself.
fn build_reply(raw: &str, events: &Events, started: Instant) -> Result<(Value, u64), ArenaError> {
    let invalid = |why: &str| ArenaError::PluginFailed(format!("the plugin's reply {why}"));
    let reply: Value = serde_json::from_str(raw).map_err(|_| invalid("is not JSON"))?;
    let Value::Object(reply) = reply else {
        return Err(invalid("is not a JSON object"));
    };
    let answer = match reply.get("answer") {
        None | Some(Value::Null) => return Err(invalid("has no `answer`")),
        Some(answer) => answer.clone(),
    };
    let confidence = reply
        .get("confidence")
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
        .clamp(0.0, 1.0);
    let reasoning = reply.get("reasoning").and_then(Value::as_str).unwrap_or_default();
    let mut subagents: Vec<String> = reply
        .get("subagents_used")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default();
    for name in &events.subagents {
        if !subagents.contains(name) {
            subagents.push(name.clone());
        }
    }
    let tokens = reply.get("tokens").and_then(Value::as_u64).unwrap_or(0);
    let latency_ms = started.elapsed().as_millis() as u64;
    Ok((
        json!({
            "answer": answer,
            "confidence": confidence,
            "reasoning": reasoning,
            "subagents_used": subagents,
            // Only the host runs tools, so its record is the truth.
            "tools_used": events.tools,
            "tokens": tokens,
            "latency_ms": latency_ms,
        }),
        latency_ms,
    ))
}

/// One task's events on their way to the stream, and what the host learns from them.
struct Events {
    stream: Option<Arc<EventStream>>,
    match_id: String,
    round: Value,
    max_event_bytes: usize,
    tools: Vec<String>,
    subagents: Vec<String>,
    tool_started: HashMap<String, Instant>,
}

impl Events {
    fn new(arena: &Arena, task: &Task) -> Events {
        Events {
            stream: arena.stream.clone(),
            match_id: task.match_id.clone(),
            round: task.round.clone(),
            max_event_bytes: arena.node.config.plugins.max_event_bytes,
            tools: Vec::new(),
            subagents: Vec::new(),
            tool_started: HashMap::new(),
        }
    }

    /// Translate a plugin or tool-lifecycle event into a §2 event.
    fn forward(&mut self, event: PluginEvent) {
        let PluginEvent { kind, data } = event;
        let translated = match kind.as_str() {
            "tool_call" => self.tool_event(data),
            "thinking" | "error" => Some(merge(&kind, data, "message")),
            "spawn_subagent" | "subagent_done" => {
                let event = merge(&kind, data, "name");
                if kind == "spawn_subagent"
                    && let Some(name) = event.get("name").and_then(Value::as_str)
                    && !self.subagents.iter().any(|n| n == name)
                    && self.subagents.len() < 64
                {
                    self.subagents.push(name.chars().take(128).collect());
                }
                Some(event)
            }
            "intermediate_result" => Some(match data {
                Value::Object(fields) if fields.contains_key("data") => {
                    merge(&kind, Value::Object(fields), "data")
                }
                other => merge(&kind, json!({ "data": other }), "data"),
            }),
            // `answer`, `tool_response` and anything unknown are the host's to say.
            _ => {
                tracing::debug!(kind = %kind, "arena: dropping a plugin event of a reserved or unknown type");
                None
            }
        };
        if let Some(mut event) = translated {
            if kind == "error" {
                // Only the host decides whether a task failed.
                event.insert("fatal".into(), Value::Bool(false));
            }
            self.emit(Value::Object(event));
        }
    }

    /// The host's tool lifecycle (`kind: tool_call`, `status`) as §2's
    /// `tool_call` / `tool_response`, with the duration measured here.
    fn tool_event(&mut self, data: Value) -> Option<Map<String, Value>> {
        let call_id = data["call_id"].as_str().unwrap_or_default().to_string();
        let tool = data["tool_name"].clone();
        match data["status"].as_str()? {
            "started" => {
                if let Some(name) = tool.as_str()
                    && !self.tools.iter().any(|t| t == name)
                {
                    self.tools.push(name.to_string());
                }
                if self.tool_started.len() < 1024 {
                    self.tool_started.insert(call_id.clone(), Instant::now());
                }
                Some(object(json!({
                    "type": "tool_call", "tool": tool, "args": data["arguments"], "call_id": call_id,
                })))
            }
            status @ ("completed" | "failed") => {
                let duration_ms = self
                    .tool_started
                    .remove(&call_id)
                    .map_or(0, |at| at.elapsed().as_millis() as u64);
                let mut event = object(json!({
                    "type": "tool_response", "tool": tool, "call_id": call_id,
                    "duration_ms": duration_ms,
                }));
                if status == "completed" {
                    event.insert("result".into(), data["result"].clone());
                } else {
                    event.insert("error".into(), data["error"].clone());
                }
                Some(event)
            }
            _ => None,
        }
    }

    /// Stamp the event with its match and round and queue it; never waits.
    fn emit(&self, event: Value) {
        let Some(stream) = &self.stream else {
            return;
        };
        let mut event = object(event);
        event.insert("match_id".into(), Value::String(self.match_id.clone()));
        event.insert("round".into(), self.round.clone());
        let mut event = Value::Object(event);
        if event.to_string().len() > self.max_event_bytes {
            // Keep the event, lose its bulk: spectators still see that it happened.
            for field in ["result", "args", "data", "value", "message"] {
                if let Some(value) = event.get_mut(field) {
                    *value = Value::String("(truncated)".into());
                }
            }
        }
        stream.push(event);
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(fields) => fields,
        _ => Map::new(),
    }
}

/// `{"type": kind, …fields}`: an object's fields are kept, any other value goes under `key`.
fn merge(kind: &str, data: Value, key: &str) -> Map<String, Value> {
    let mut event = Map::new();
    event.insert("type".into(), Value::String(kind.to_string()));
    match data {
        Value::Object(fields) => {
            for (name, value) in fields {
                if !matches!(name.as_str(), "type" | "match_id" | "round") {
                    event.insert(name, value);
                }
            }
        }
        other => {
            event.insert(key.into(), other);
        }
    }
    event
}

impl Arena {
    fn record_latency(&self, latency_ms: u64) {
        let mut latencies = self.latencies.lock();
        if latencies.len() == LATENCY_WINDOW {
            latencies.pop_front();
        }
        latencies.push_back(latency_ms);
    }

    fn average_latency_ms(&self) -> u64 {
        let latencies = self.latencies.lock();
        if latencies.is_empty() {
            return 0;
        }
        let total: u64 = latencies.iter().sum();
        (total as f64 / latencies.len() as f64).round() as u64
    }
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

    #[test]
    fn plugin_events_are_translated_and_host_types_are_reserved() {
        let mut events = Events {
            stream: None,
            match_id: "m".into(),
            round: json!(1),
            max_event_bytes: 65536,
            tools: Vec::new(),
            subagents: Vec::new(),
            tool_started: HashMap::new(),
        };
        events.forward(PluginEvent {
            kind: "spawn_subagent".into(),
            data: json!({"name": "Analyzer", "role": "analysis"}),
        });
        events.forward(PluginEvent {
            kind: "tool_call".into(),
            data: json!({"call_id": "c", "tool_name": "t", "status": "started", "arguments": {}}),
        });
        assert_eq!(events.subagents, ["Analyzer"]);
        assert_eq!(events.tools, ["t"]);
        let response = events
            .tool_event(json!({"call_id": "c", "tool_name": "t", "status": "completed", "result": 4}))
            .unwrap();
        assert_eq!(response["type"], "tool_response");
        assert_eq!(response["result"], 4);
        assert_eq!(merge("thinking", json!("hm"), "message")["message"], "hm");
    }
}
