//! The Agora two-party client ("Agora Protocol for Two-Party JSON Exchanges" §5–7): what
//! `agora-node agora …` and plugins' outbound calls use. It sends the spec's
//! shape, includes the protocol document as a `data:` URI source so a peer that
//! does not know the hash can still verify it, and reads both the spec's and
//! agora-protocol 0.2.0's replies. [`Dialect::Reference`] writes the hash the
//! way that library's `ReceiverServer` checks it (base64 of the digest).

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use super::http_client::{self, ClientError};

/// How a request names its protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Dialect {
    /// The spec: `protocolHash` is 40 hex digits.
    #[default]
    Spec,
    /// agora-protocol 0.2.0: `protocolHash` is the base64 of the SHA1 digest.
    Reference,
}

/// One request to send.
#[derive(Debug, Clone, Default)]
pub struct ClientRequest {
    pub body: Value,
    /// Full text of the protocol document, if the exchange uses one.
    pub protocol_document: Option<String>,
    pub multiround: bool,
    /// Continue this conversation instead of starting a new exchange.
    pub conversation_id: Option<String>,
    pub dialect: Dialect,
}

/// A peer's reply in either dialect.
#[derive(Debug, Clone)]
pub struct ClientReply {
    pub http_status: u16,
    pub success: bool,
    pub body: Option<Value>,
    pub error: Option<String>,
    pub conversation_id: Option<String>,
    pub conversation_expires: Option<Value>,
}

impl ClientReply {
    pub fn into_value(self) -> Value {
        let mut value = if self.success {
            json!({"status": "success", "body": self.body})
        } else {
            json!({"status": "failure", "error": self.error})
        };
        if let Some(id) = self.conversation_id {
            value["conversationId"] = json!(id);
            value["conversationExpires"] = self.conversation_expires.unwrap_or(Value::Null);
        }
        value
    }
}

/// The JSON a plugin passes to `host.outbound` for Agora:
/// `{"body": …, "protocol": "<document>"?, "multiround": bool?, "conversationId": "…"?,
/// "dialect": "spec" | "reference"?}`.
pub struct OutboundAgora(ClientRequest);

impl OutboundAgora {
    pub fn from_value(value: Value) -> Result<Self, String> {
        let Value::Object(mut fields) = value else {
            return Err("expected an object".into());
        };
        let body = fields.remove("body").ok_or("missing `body`")?;
        let protocol_document = match fields.remove("protocol") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text),
            Some(_) => return Err("`protocol` must be the document text".into()),
        };
        let multiround = fields
            .remove("multiround")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let conversation_id = fields
            .remove("conversationId")
            .and_then(|v| v.as_str().map(str::to_string));
        let dialect = match fields.remove("dialect") {
            None | Some(Value::Null) => Dialect::Spec,
            Some(Value::String(name)) if name == "spec" => Dialect::Spec,
            Some(Value::String(name)) if name == "reference" => Dialect::Reference,
            Some(_) => return Err("`dialect` must be \"spec\" or \"reference\"".into()),
        };
        Ok(OutboundAgora(ClientRequest {
            body,
            protocol_document,
            multiround,
            conversation_id,
            dialect,
        }))
    }

    pub fn into_request(self) -> ClientRequest {
        self.0
    }
}

/// The request body. Follow-ups carry only `body` (§7.2: no `protocolHash`).
/// `protocolSources` is always present on a first request, empty without a
/// protocol, because agora-protocol 0.2.0's server reads it unconditionally.
fn request_json(request: &ClientRequest) -> Value {
    let mut json = json!({"body": request.body});
    if request.conversation_id.is_some() {
        return json;
    }
    match &request.protocol_document {
        Some(document) => {
            let hex_hash = crate::crypto::protocol_hash(document.as_bytes());
            json["protocolHash"] = match request.dialect {
                Dialect::Spec => json!(hex_hash),
                Dialect::Reference => json!(crate::crypto::hash_as_base64(&hex_hash)),
            };
            let encoded = base64::engine::general_purpose::STANDARD.encode(document.as_bytes());
            json["protocolSources"] = json!([format!("data:text/plain;charset=utf-8;base64,{encoded}")]);
        }
        None => {
            json["protocolHash"] = Value::Null;
            json["protocolSources"] = json!([]);
        }
    }
    if request.multiround {
        json["multiround"] = json!(true);
    }
    json
}

fn endpoint(base: &str, conversation: Option<&str>) -> String {
    let base = base.trim_end_matches('/');
    match conversation {
        Some(id) => format!("{base}/conversations/{id}"),
        None => base.to_string(),
    }
}

pub async fn send(
    base: &str,
    request: &ClientRequest,
    timeout: Duration,
    limit: usize,
) -> Result<ClientReply, ClientError> {
    let url = endpoint(base, request.conversation_id.as_deref());
    let payload = serde_json::to_vec(&request_json(request)).unwrap_or_default();
    let response = http_client::post(
        &url,
        &[("content-type", "application/json")],
        payload,
        timeout,
        limit,
    )
    .await?;
    Ok(parse_reply(response.status, &response.body))
}

/// End a conversation (`DELETE {base}/conversations/{id}`).
pub async fn close(
    base: &str,
    conversation: &str,
    timeout: Duration,
    limit: usize,
) -> Result<ClientReply, ClientError> {
    let url = endpoint(base, Some(conversation));
    let response = http_client::request("DELETE", &url, &[], Vec::new(), timeout, limit).await?;
    Ok(parse_reply(response.status, &response.body))
}

/// A reply in the spec's shape (`failure` + `error`) or the library's
/// (`error` + `message`); anything else is reported with its HTTP status.
fn parse_reply(http_status: u16, bytes: &[u8]) -> ClientReply {
    let value: Value = serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
    let status = value.get("status").and_then(Value::as_str).unwrap_or("");
    let success = status == "success" && (200..300).contains(&http_status);
    let error = if success {
        None
    } else {
        Some(
            value
                .get("error")
                .or_else(|| value.get("message"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("HTTP {http_status}: {value}")),
        )
    };
    ClientReply {
        http_status,
        success,
        body: value.get("body").cloned(),
        error,
        conversation_id: value
            .get("conversationId")
            .and_then(Value::as_str)
            .map(str::to_string),
        conversation_expires: value.get("conversationExpires").cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_requests_carry_hash_and_sources_in_either_dialect() {
        let mut request = ClientRequest {
            body: json!("hi"),
            protocol_document: Some("name: a\n---\nx".into()),
            ..Default::default()
        };
        let spec = request_json(&request);
        let hex_hash = crate::crypto::protocol_hash(b"name: a\n---\nx");
        assert_eq!(spec["protocolHash"], json!(hex_hash));
        request.dialect = Dialect::Reference;
        let reference = request_json(&request);
        assert_eq!(
            reference["protocolHash"],
            json!(crate::crypto::hash_as_base64(&hex_hash))
        );
        assert_eq!(spec["protocolSources"], reference["protocolSources"]);
        request.conversation_id = Some("c".into());
        assert_eq!(request_json(&request), json!({"body": "hi"}));
    }

    #[test]
    fn reads_both_failure_shapes() {
        let spec = parse_reply(200, br#"{"status":"failure","error":"Unsupported protocol"}"#);
        let library = parse_reply(200, br#"{"status":"error","message":"Conversation not found."}"#);
        assert!(!spec.success && !library.success);
        assert_eq!(spec.error.as_deref(), Some("Unsupported protocol"));
        assert_eq!(library.error.as_deref(), Some("Conversation not found."));
        let http = parse_reply(404, b"nope");
        assert!(http.error.unwrap().starts_with("HTTP 404"));
    }
}
