//! The requests and replies of the two-party specification §6, and their
//! checks: a request is read here (§6.1, unknown fields ignored) before
//! anything else looks at it, and every success reply (§6.2, with
//! `conversationId` and `conversationExpires` once a conversation exists, §7.1)
//! is written here.

use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

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
    if !crate::policy::is_json_content_type(headers) {
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

/// The JSON text the plugin receives: the body itself, or for an
/// any-document plugin the verified document beside it.
pub(super) fn plugin_body(body: &Value, document: Option<&str>) -> String {
    match document {
        // Serializing a `Value` and a string cannot fail.
        Some(text) => serde_json::to_string(&PluginBody {
            body,
            protocol_document: text,
        })
        .unwrap_or_default(),
        None => body.to_string(),
    }
}

#[derive(Serialize)]
struct PluginBody<'a> {
    body: &'a Value,
    #[serde(rename = "protocolDocument")]
    protocol_document: &'a str,
}

/// A success reply (§6.2), serialized straight from the plugin's parsed
/// answer: `json!` would copy the answer into a new tree first. Members in
/// sorted order, as a `serde_json` object writes them.
#[derive(Serialize)]
struct Success<'a> {
    body: &'a Value,
    #[serde(rename = "conversationExpires", skip_serializing_if = "Option::is_none")]
    conversation_expires: Option<u64>,
    #[serde(rename = "conversationId", skip_serializing_if = "Option::is_none")]
    conversation_id: Option<&'a str>,
    status: &'static str,
}

pub(super) fn success(body: &Value, conversation: Option<(&str, u64)>) -> Response {
    axum::Json(Success {
        body,
        conversation_expires: conversation.map(|(_, expires)| expires),
        conversation_id: conversation.map(|(id, _)| id),
        status: "success",
    })
    .into_response()
}
