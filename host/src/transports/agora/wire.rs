//! The requests and replies of `agora-two-party-json.txt` §6, and their
//! checks: a request is read here (§6.1, unknown fields ignored) before
//! anything else looks at it, and every success reply (§6.2, with
//! `conversationId` and `conversationExpires` once a conversation exists, §7.1)
//! is written here.

use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::document;
use super::error::AgoraError;
use crate::node::state::NodeState;

/// A validated request (§6.1). Unknown fields are ignored.
pub struct AgoraRequest {
    pub(super) body: Value,
    pub(super) protocol_hash: Option<String>,
    pub(super) sources: Vec<String>,
    pub(super) multiround: bool,
}

pub(super) fn parse_request(
    state: &NodeState,
    headers: &HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<AgoraRequest, AgoraError> {
    // A refused body is answered first: nothing else about the request matters.
    let raw = raw.map_err(|r| AgoraError::from_rejection(r, state.config.http.max_body_bytes))?;
    if !crate::transports::is_json_content_type(headers) {
        return Err(AgoraError::UnsupportedMediaType);
    }
    let value: Value =
        serde_json::from_slice(&raw).map_err(|e| AgoraError::Malformed(format!("malformed JSON: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(AgoraError::Malformed("the request must be a JSON object".into()));
    };
    request_fields(&mut fields, state.config.agora.max_sources)
}

/// The field checks of §6.1 on a request object (public for the fuzz targets in `fuzz/`).
pub fn request_fields(
    fields: &mut Map<String, Value>,
    max_sources: usize,
) -> Result<AgoraRequest, AgoraError> {
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
            AgoraError::Malformed("`protocolHash` must be a SHA1 in hex (40 digits) or base64".into())
        })?),
        Some(_) => {
            return Err(AgoraError::Malformed(
                "field `protocolHash` must be a string or null".into(),
            ));
        }
    };
    let sources = match fields.remove("protocolSources") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.len() > max_sources => {
            return Err(AgoraError::Malformed(format!(
                "`protocolSources` has {} entries, at most {max_sources} are accepted",
                items.len()
            )));
        }
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

/// What the plugin receives: the body itself, or for an any-document plugin the
/// verified document beside it.
pub(super) fn plugin_body(body: &Value, document: Option<&str>) -> Value {
    match document {
        Some(text) => json!({"protocolDocument": text, "body": body}),
        None => body.clone(),
    }
}

pub(super) fn success(body: Value, conversation: Option<(&str, u64)>) -> Response {
    let mut reply = json!({"status": "success", "body": body});
    if let Some((id, expires)) = conversation {
        reply["conversationId"] = json!(id);
        reply["conversationExpires"] = json!(expires);
    }
    axum::Json(reply).into_response()
}
