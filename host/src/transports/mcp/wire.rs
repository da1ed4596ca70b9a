//! What travels on `POST {mcp.path}`: one JSON-RPC 2.0 message per body
//! (§"Base Protocol"; batches were removed in 2025-06-18), classified by
//! [`crate::jsonrpc`] in MCP's [`DIALECT`] before any method is looked at, and
//! the few parameter shapes the node reads.

use serde_json::{Map, Value};

use super::error::McpError;
use crate::jsonrpc::{Dialect, Faults};

/// The handshake-era revisions the node serves, oldest first; the last is
/// offered to a client asking for one the node does not know (§"Lifecycle",
/// "Version Negotiation"). The stateless 2026 era is served beside them
/// ([`super::envelope`]), never through `initialize`.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";
/// The header a client repeats its negotiated revision in after initialize.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
pub const SESSION_HEADER: &str = "mcp-session-id";

/// MCP as JSON-RPC since 2025-06-18: notifications, the client's answers to
/// the node's requests (elicitation), named params only, no batches.
pub const DIALECT: Dialect = Dialect {
    name: "MCP since protocol 2025-06-18",
    notifications: true,
    responses: true,
    positional_params: false,
};

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
    params.get("capabilities").is_some_and(capabilities_allow_forms)
}

/// The one rule for both eras' client capabilities (`initialize`'s, or a
/// 2026 request's `_meta`): `elicitation` declared, with `form` or without `url`.
pub fn capabilities_allow_forms(capabilities: &Value) -> bool {
    match capabilities.get("elicitation") {
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
        return Err(McpError::invalid_params("tools/call needs a string 'name'"));
    };
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(arguments)) => Value::Object(arguments.clone()),
        Some(_) => {
            return Err(McpError::invalid_params(
                "tools/call 'arguments' must be an object",
            ));
        }
    };
    Ok(ToolCallParams {
        name: name.to_string(),
        arguments,
    })
}

/// One page of a list (`tools`, `resources`, `prompts`) whose `entries` come
/// sorted by key: those after `cursor`, at most `page_size`, each described
/// only if it is on the page, and `nextCursor` (the page's last key) when
/// more follow. One paging rule for every list, in both eras (§"Pagination").
pub fn page<'a, T>(
    list: &str,
    entries: impl IntoIterator<Item = (&'a str, T)>,
    cursor: Option<&str>,
    page_size: usize,
    describe: impl Fn(T) -> Value,
) -> Value {
    let mut rest = entries
        .into_iter()
        .filter(|(key, _)| cursor.is_none_or(|after| *key > after))
        .peekable();
    let mut described = Vec::new();
    let mut last = None;
    while described.len() < page_size {
        let Some((key, entry)) = rest.next() else { break };
        described.push(describe(entry));
        last = Some(key);
    }
    let mut page = serde_json::json!({ list: described });
    if rest.peek().is_some()
        && let Some(last) = last
    {
        page["nextCursor"] = Value::from(last);
    }
    page
}

/// `tools/list`'s cursor: an opaque string the node made (the last name of the previous page).
pub fn cursor(params: &Value) -> Result<Option<String>, McpError> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(cursor)) if cursor.len() <= 512 => Ok(Some(cursor.clone())),
        Some(_) => Err(McpError::invalid_params(
            "cursor must be a cursor this server returned",
        )),
    }
}

/// `resources/read`'s `uri`: a string of at most 2 KiB (a document's URI is
/// under a hundred bytes; the bound keeps an error message short).
pub fn resource_uri(params: &Value) -> Result<String, McpError> {
    match params.get("uri") {
        Some(Value::String(uri)) if !uri.is_empty() && uri.len() <= 2048 => Ok(uri.clone()),
        _ => Err(McpError::invalid_params(
            "resources/read needs 'uri', a resource URI of at most 2048 bytes",
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
