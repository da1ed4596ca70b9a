//! What travels on `POST {mcp.path}`: one JSON-RPC 2.0 message per body
//! (§"Base Protocol"; batches were removed in 2025-06-18), classified before any
//! method is looked at, and the few parameter shapes the node reads.

use serde_json::{Map, Value};

use super::error::McpError;

/// The handshake-era revisions the node serves, oldest first; the last is
/// offered to a client asking for one the node does not know (§"Lifecycle",
/// "Version Negotiation"). The stateless 2026 era (`server/discover`) is not
/// served, and not advertised.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";
/// The header a client repeats its negotiated revision in after initialize.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
pub const SESSION_HEADER: &str = "mcp-session-id";

const MAX_METHOD_CHARS: usize = 128;

/// One inbound message.
#[derive(Debug)]
pub enum Inbound {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
    },
    /// The client's answer to a request of the node's (an elicitation).
    Response {
        id: Value,
        outcome: Result<Value, Value>,
    },
}

/// Classify a body; a failure carries the request id when one could be read.
pub fn parse(raw: &[u8]) -> Result<Inbound, (Value, McpError)> {
    let body: Value =
        serde_json::from_slice(raw).map_err(|error| (Value::Null, McpError::Parse(error.to_string())))?;
    let Value::Object(mut message) = body else {
        let why = if body.is_array() {
            "batches are not supported (removed in protocol 2025-06-18)"
        } else {
            "a message must be a JSON object"
        };
        return Err((Value::Null, McpError::InvalidRequest(why.into())));
    };
    let id = message.remove("id");
    if let Some(id) = &id
        && !valid_id(id)
    {
        return Err((
            Value::Null,
            McpError::InvalidRequest("id must be a string or an integer".into()),
        ));
    }
    let reply_id = id.clone().unwrap_or(Value::Null);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((
            reply_id,
            McpError::InvalidRequest("'jsonrpc' must be \"2.0\"".into()),
        ));
    }
    if let Some(method) = message.get("method") {
        let Some(method) = method.as_str() else {
            return Err((
                reply_id,
                McpError::InvalidRequest("method must be a string".into()),
            ));
        };
        if method.chars().count() > MAX_METHOD_CHARS {
            return Err((reply_id, McpError::MethodNotFound("(a name that long)".into())));
        }
        let method = method.to_string();
        let params = message.remove("params").unwrap_or(Value::Null);
        if !(params.is_null() || params.is_object()) {
            return Err((
                reply_id,
                McpError::InvalidParams("params must be an object".into()),
            ));
        }
        return Ok(match id {
            Some(id) => Inbound::Request { id, method, params },
            None => Inbound::Notification { method },
        });
    }
    let Some(id) = id else {
        return Err((
            Value::Null,
            McpError::InvalidRequest("a message needs a method, or an id with a result or error".into()),
        ));
    };
    let outcome = match (message.remove("result"), message.remove("error")) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(error),
        _ => {
            return Err((
                id,
                McpError::InvalidRequest("a response has exactly one of result and error".into()),
            ));
        }
    };
    Ok(Inbound::Response { id, outcome })
}

fn valid_id(id: &Value) -> bool {
    match id {
        Value::String(text) => text.len() <= 256,
        Value::Number(number) => number.is_i64() || number.is_u64(),
        _ => false,
    }
}

/// The revision to answer an `initialize` asking for `requested` with.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    PROTOCOL_VERSIONS
        .iter()
        .find(|version| Some(**version) == requested)
        .copied()
        .unwrap_or(LATEST_PROTOCOL_VERSION)
}

/// Whether `initialize`'s client capabilities let the node ask for a form:
/// `elicitation: {}` (2025-06-18) or `elicitation: {form: {}}` (2025-11-25).
pub fn accepts_form_elicitation(params: &Value) -> bool {
    match params.pointer("/capabilities/elicitation") {
        Some(Value::Object(modes)) => modes.contains_key("form") || !modes.contains_key("url"),
        _ => false,
    }
}

/// `tools/call`'s parameters.
pub struct ToolCallParams {
    pub name: String,
    pub arguments: Value,
}

pub fn tool_call_params(params: &Value) -> Result<ToolCallParams, McpError> {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err(McpError::InvalidParams("tools/call needs a string 'name'".into()));
    };
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(arguments)) => Value::Object(arguments.clone()),
        Some(_) => {
            return Err(McpError::InvalidParams(
                "tools/call 'arguments' must be an object".into(),
            ));
        }
    };
    Ok(ToolCallParams {
        name: name.to_string(),
        arguments,
    })
}

/// `tools/list`'s cursor: an opaque string the node made (the last name of the previous page).
pub fn cursor(params: &Value) -> Result<Option<String>, McpError> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(cursor)) if cursor.len() <= 512 => Ok(Some(cursor.clone())),
        Some(_) => Err(McpError::InvalidParams(
            "cursor must be a cursor this server returned".into(),
        )),
    }
}

/// What a human answered to an approval form.
#[derive(Debug, PartialEq, Eq)]
pub enum ElicitAnswer {
    Approved,
    Rejected {
        feedback: Option<String>,
    },
    Declined,
    Cancelled,
    /// The client could not ask (it answered the request with an error, or nonsense).
    Failed(String),
}

const MAX_FEEDBACK_CHARS: usize = 2_000;

/// Read the client's answer to `elicitation/create` (§"Elicitation", "Response Actions").
pub fn elicit_answer(outcome: Result<Value, Value>) -> ElicitAnswer {
    let result = match outcome {
        Ok(result) => result,
        Err(error) => {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("an error");
            return ElicitAnswer::Failed(message.chars().take(MAX_FEEDBACK_CHARS).collect());
        }
    };
    match result.get("action").and_then(Value::as_str) {
        Some("accept") => {
            let content = result.get("content");
            let feedback = content
                .and_then(|content| content.get("feedback"))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|text| !text.is_empty())
                .map(|text| text.chars().take(MAX_FEEDBACK_CHARS).collect());
            match content.and_then(|content| content.get("approve")) {
                Some(Value::Bool(true)) => ElicitAnswer::Approved,
                Some(Value::Bool(false)) => ElicitAnswer::Rejected { feedback },
                _ => ElicitAnswer::Failed("the form came back without a boolean 'approve'".into()),
            }
        }
        Some("decline") => ElicitAnswer::Declined,
        Some("cancel") => ElicitAnswer::Cancelled,
        _ => ElicitAnswer::Failed("the answer has no action of accept, decline or cancel".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_are_told_apart_by_method_and_id() {
        let request = parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        assert!(matches!(request, Inbound::Request { method, .. } if method == "ping"));
        let note = parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(note, Inbound::Notification { .. }));
        let answer = parse(br#"{"jsonrpc":"2.0","id":"e1","result":{"action":"cancel"}}"#).unwrap();
        assert!(matches!(answer, Inbound::Response { outcome: Ok(_), .. }));
    }

    #[test]
    fn bad_messages_are_refused_with_their_code() {
        let code = |raw: &[u8]| parse(raw).unwrap_err().1.code();
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1,"method":"#), -32700);
        assert_eq!(code(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#), -32600);
        assert_eq!(code(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#), -32600);
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#), -32600);
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#),
            -32602
        );
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1}"#), -32600);
        let (id, _) = parse(br#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#).unwrap_err();
        assert_eq!(id, json!(7));
    }

    #[test]
    fn a_known_revision_is_echoed_and_any_other_gets_the_latest() {
        assert_eq!(negotiate(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate(Some("2025-11-25")), "2025-11-25");
        assert_eq!(negotiate(Some("2026-07-28")), "2025-11-25");
        assert_eq!(negotiate(None), "2025-11-25");
    }

    #[test]
    fn form_elicitation_is_what_the_client_declared() {
        let caps = |c: Value| json!({"capabilities": c});
        assert!(accepts_form_elicitation(&caps(json!({"elicitation": {}}))));
        assert!(accepts_form_elicitation(&caps(
            json!({"elicitation": {"form": {}, "url": {}}})
        )));
        assert!(!accepts_form_elicitation(&caps(
            json!({"elicitation": {"url": {}}})
        )));
        assert!(!accepts_form_elicitation(&caps(json!({"sampling": {}}))));
    }

    #[test]
    fn the_approval_form_reads_as_the_human_answered() {
        let accept = |content: Value| elicit_answer(Ok(json!({"action": "accept", "content": content})));
        assert_eq!(accept(json!({"approve": true})), ElicitAnswer::Approved);
        assert_eq!(
            accept(json!({"approve": false, "feedback": " not today "})),
            ElicitAnswer::Rejected {
                feedback: Some("not today".into())
            }
        );
        assert!(matches!(
            accept(json!({"approve": "yes"})),
            ElicitAnswer::Failed(_)
        ));
        assert_eq!(
            elicit_answer(Ok(json!({"action": "decline"}))),
            ElicitAnswer::Declined
        );
        assert_eq!(
            elicit_answer(Ok(json!({"action": "cancel"}))),
            ElicitAnswer::Cancelled
        );
        assert!(matches!(
            elicit_answer(Err(json!({"code": -32601, "message": "Elicitation not supported"}))),
            ElicitAnswer::Failed(message) if message == "Elicitation not supported"
        ));
    }
}
