//! The host's services, as plain functions. Each is enforced by the node:
//! the store is namespaced to this plugin, tools may need a human's approval,
//! outbound calls reach only hosts allowed in the node's config.
//!
//! Every call that can fail returns a [`HostError`], which `?` turns into the
//! failure of `handle` or `run_tool`; nothing here swallows an error.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::agora::node::host as raw;
use crate::{HostError, Transport};
pub use raw::{Level, OutboundRequest};

/// Write a log line at `level`, attributed to this plugin (bounded per call by the node).
pub fn log(level: Level, message: &str) {
    raw::log(level, message)
}

/// Write an `info` log line.
pub fn info(message: &str) {
    raw::log(Level::Info, message)
}

/// Write a `warn` log line.
pub fn warn(message: &str) {
    raw::log(Level::Warn, message)
}

/// Read a value from this plugin's key-value store; `None` when absent.
pub fn kv_get(key: &str) -> Option<Vec<u8>> {
    raw::kv_get(key)
}

/// Store `value` under `key` in this plugin's key-value store.
pub fn kv_set(key: &str, value: &[u8]) -> Result<(), HostError> {
    raw::kv_set(key, value).map_err(HostError::from_kv)
}

/// Remove `key` from this plugin's key-value store (absent keys are no error).
pub fn kv_delete(key: &str) -> Result<(), HostError> {
    raw::kv_delete(key).map_err(HostError::from_kv)
}

/// This plugin's keys starting with `prefix`, at most `limit` (the node caps it at 1000).
pub fn kv_keys(prefix: &str, limit: u32) -> Vec<String> {
    raw::kv_keys(prefix, limit)
}

/// Read a JSON value from the store: `None` when absent, [`HostError::InvalidData`]
/// when what is stored is not JSON of type `T`.
pub fn kv_get_json<T: DeserializeOwned>(key: &str) -> Result<Option<T>, HostError> {
    kv_get(key).map(|bytes| decode_stored(key, &bytes)).transpose()
}

/// Store `value` as JSON under `key`.
pub fn kv_set_json<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<(), HostError> {
    kv_set(key, &encode(value)?)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    raw::now_ms()
}

/// Emit an event (`kind`, `data` as JSON) to the current exchange: a stream
/// chunk, a status, an arena event.
pub fn emit<T: Serialize + ?Sized>(kind: &str, data: &T) -> Result<(), HostError> {
    let data = encode_text(data)?;
    raw::emit(kind, &data).map_err(HostError::from_emit)
}

/// Call a tool by name with `arguments` (sent as JSON); the result is the tool's JSON text.
/// The host asks a human first when the tool's risk requires it.
pub fn call_tool<T: Serialize + ?Sized>(name: &str, arguments: &T) -> Result<String, HostError> {
    let arguments = encode_text(arguments)?;
    raw::call_tool(name, &arguments).map_err(|message| HostError::from_tool(name, message))
}

/// One entry of a conversation's or session's history.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct HistoryEntry {
    /// Who said it: `user`, `assistant`, `tool`, … as the transport records it.
    pub role: String,
    /// What was said, as JSON.
    pub body: serde_json::Value,
    /// When, in milliseconds since the Unix epoch (0 when the record has no time).
    #[serde(default)]
    pub at: u64,
}

/// The current conversation's or session's history, oldest first: its most
/// recent entries, as many as the node's `store.history_page_entries` and
/// `store.history_page_bytes` allow (never necessarily the whole history).
/// Empty when the exchange keeps none.
pub fn history() -> Result<Vec<HistoryEntry>, HostError> {
    parse_history(&raw::history())
}

/// Call another agent over `transport` (only hosts the node allows); the
/// answer is the peer's JSON text. What `body` holds per transport is in the
/// WIT (`outbound-request`): for [`Transport::Uagents`],
/// `{"target": "agent1…", "schema": <the model's JSON schema>, "message": {…}}`
/// sends a message the node signs as its own uAgents address. For
/// [`Transport::Uagents`] `url` may be `""`: the node then resolves `target`
/// as it does for its own replies (`uagents.peers`, else the Almanac).
pub fn outbound<T: Serialize + ?Sized>(
    transport: Transport,
    url: &str,
    body: &T,
) -> Result<String, HostError> {
    let request = OutboundRequest {
        transport,
        url: url.to_string(),
        body: encode_text(body)?,
    };
    raw::outbound(&request).map_err(HostError::from_outbound)
}

/// Call the A2A 1.0 agent at its base URL `url` (its card, endpoint and any
/// redirect must be hosts the node allows) with `body`
/// `{"text"?, "data"?, "context_id"?, "task_id"?}`; the answer is the final
/// Task JSON text (or the agent's Message JSON text).
pub fn outbound_a2a<T: Serialize + ?Sized>(url: &str, body: &T) -> Result<String, HostError> {
    raw::outbound_a2a(url, &encode_text(body)?).map_err(HostError::from_outbound)
}

/// The protocol of the client this call serves: `"agora"`, `"envelope"`,
/// `"uagents"`, `"arena"`, `"hai"`, `"a2a"` (an A2A 1.0 client, whose
/// messages arrive as [`Transport::Hai`]) or `"mcp"` (a tool an MCP client
/// called); `None` for the node's own calls (the manifest, schedules).
pub fn caller_transport() -> Option<String> {
    raw::caller_transport()
}

/// This plugin's setting `key`: `[plugins.NAME.config]` in the node's
/// configuration, else a secret of `[plugins.NAME.secrets]`; `None` when
/// neither has it. The node redacts any secret read here from what it prints
/// of this plugin (log lines, stdout, failure messages).
pub fn config_get(key: &str) -> Result<Option<String>, HostError> {
    raw::config_get(key).map_err(HostError::Settings)
}

/// A tool `call_tool` can reach, as a language model is offered it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct ToolInfo {
    /// The name `call_tool` takes.
    pub name: String,
    /// What it does, in its author's words.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: serde_json::Value,
    /// `low`, `medium`, `high` or `critical`: at or above the node's threshold a human approves each call.
    pub risk: String,
}

/// Every tool of the loaded plugins, sorted by name.
pub fn list_tools() -> Result<Vec<ToolInfo>, HostError> {
    serde_json::from_str(&raw::list_tools())
        .map_err(|e| HostError::InvalidData(format!("the tool list is not what it should be: {e}")))
}

fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, HostError> {
    serde_json::to_vec(value).map_err(|e| HostError::InvalidData(format!("cannot encode as JSON: {e}")))
}

fn encode_text<T: Serialize + ?Sized>(value: &T) -> Result<String, HostError> {
    serde_json::to_string(value).map_err(|e| HostError::InvalidData(format!("cannot encode as JSON: {e}")))
}

fn decode_stored<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, HostError> {
    serde_json::from_slice(bytes).map_err(|e| {
        HostError::InvalidData(format!(
            "the stored value of {key:?} is not the JSON expected: {e}"
        ))
    })
}

fn parse_history(text: &str) -> Result<Vec<HistoryEntry>, HostError> {
    serde_json::from_str(text)
        .map_err(|e| HostError::InvalidData(format!("the history is not a list of entries: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Game {
        secret: i64,
    }

    #[test]
    fn a_stored_value_of_another_shape_is_invalid_data_not_absent() {
        assert_eq!(
            decode_stored::<Game>("g", br#"{"secret": 7}"#),
            Ok(Game { secret: 7 })
        );
        for stored in [&b"not json"[..], br#"{"secret": "seven"}"#, b""] {
            let error = decode_stored::<Game>("game:1", stored).unwrap_err();
            assert!(
                matches!(&error, HostError::InvalidData(m) if m.contains("\"game:1\"")),
                "{error:?}"
            );
        }
    }

    #[test]
    fn history_entries_are_read_and_a_malformed_history_is_an_error() {
        let entries =
            parse_history(r#"[{"role":"user","body":{"guess":5},"at":12},{"role":"agent","body":"hi"}]"#)
                .unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].body["guess"], 5);
        assert_eq!((entries[0].at, entries[1].at), (12, 0));
        assert_eq!(parse_history("[]"), Ok(Vec::new()));
        for malformed in ["", "{}", r#"[{"body": 1}]"#] {
            assert!(
                matches!(parse_history(malformed), Err(HostError::InvalidData(_))),
                "{malformed}"
            );
        }
    }

    #[test]
    fn values_that_json_cannot_hold_are_invalid_data() {
        let keyed_by_pairs = std::collections::HashMap::from([((1, 2), 3)]);
        assert!(matches!(encode(&keyed_by_pairs), Err(HostError::InvalidData(_))));
        assert_eq!(
            encode_text(&serde_json::json!({"a": 1})),
            Ok(r#"{"a":1}"#.to_string())
        );
    }
}
