//! The requests and replies of AAP (the AAP specification, numbered as in
//! its English reading): the §1 task, read here before anything else looks
//! at it (the plugin gets the whole body); the §4 bearer token's place in the
//! headers; and the §1 reply, built from the plugin's answer and what the host
//! observed itself.

use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use super::error::ArenaError;

/// The AAP version this node speaks (the `version` of §1 and §3).
pub const AAP_VERSION: &str = "1.0";
/// Longest `match_id` or `league` accepted.
const MAX_ID_BYTES: usize = 256;
/// The fields of a §1 task the host itself needs; the plugin gets the whole body.
pub(super) struct Task {
    pub(super) body: Value,
    pub(super) league: String,
    pub(super) match_id: String,
    pub(super) round: Value,
    pub(super) time_limit: Option<Duration>,
}

pub(super) fn bearer(headers: &HeaderMap) -> Result<&str, ArenaError> {
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

pub(super) fn parse_task(headers: &HeaderMap, raw: &[u8]) -> Result<Task, ArenaError> {
    if !crate::policy::is_json_content_type(headers) {
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

/// The §1 reply from the plugin's answer and what the host observed itself.
pub(super) fn build_reply(
    raw: &str,
    tools: &[String],
    used_subagents: &[String],
    started: Instant,
) -> Result<(Value, u64), ArenaError> {
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
    for name in used_subagents {
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
            "tools_used": tools,
            "tokens": tokens,
            "latency_ms": latency_ms,
        }),
        latency_ms,
    ))
}
