//! The Agora two-party client: what `agora-node agora …` and plugins'
//! outbound calls use. It sends the spec's shape, includes the protocol
//! document as a `data:` URI source so a peer that does not know the hash can
//! still verify it, and reads both the spec's and agora-protocol 0.2.0's replies.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::transports::http_client::{self, ClientError};

/// One request to send.
#[derive(Debug, Clone, Default)]
pub struct ClientRequest {
    pub body: Value,
    /// Full text of the protocol document, if the exchange uses one.
    pub protocol_document: Option<String>,
    pub multiround: bool,
    /// Continue this conversation instead of starting a new exchange.
    pub conversation_id: Option<String>,
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
/// `{"body": …, "protocol": "<document>"?, "multiround": bool?, "conversationId": "…"?}`.
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
        Ok(OutboundAgora(ClientRequest {
            body,
            protocol_document,
            multiround,
            conversation_id,
        }))
    }

    pub fn into_request(self) -> ClientRequest {
        self.0
    }
}

fn request_json(request: &ClientRequest) -> Value {
    let mut json = json!({"body": request.body});
    if request.conversation_id.is_none() {
        if let Some(document) = &request.protocol_document {
            json["protocolHash"] = json!(crate::crypto::protocol_hash(document.as_bytes()));
            let encoded = base64::engine::general_purpose::STANDARD.encode(document.as_bytes());
            json["protocolSources"] =
                json!([format!("data:text/plain;charset=utf-8;base64,{encoded}")]);
        } else {
            json["protocolHash"] = Value::Null;
        }
        if request.multiround {
            json["multiround"] = json!(true);
        }
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
