//! The host's services, as plain functions. Each is enforced by the node:
//! the store is namespaced to this plugin, tools may need a human's approval,
//! outbound calls reach only hosts allowed in the node's config.

use crate::Transport;
use crate::bindings::agora::node::host as raw;
pub use raw::{Level, OutboundRequest};

pub fn log(level: Level, message: &str) {
    raw::log(level, message)
}
pub fn info(message: &str) {
    raw::log(Level::Info, message)
}
pub fn warn(message: &str) {
    raw::log(Level::Warn, message)
}

/// Read a value from this plugin's key-value store.
pub fn kv_get(key: &str) -> Option<Vec<u8>> {
    raw::kv_get(key)
}
pub fn kv_set(key: &str, value: &[u8]) -> Result<(), String> {
    raw::kv_set(key, value)
}
pub fn kv_delete(key: &str) -> Result<(), String> {
    raw::kv_delete(key)
}
pub fn kv_keys(prefix: &str, limit: u32) -> Vec<String> {
    raw::kv_keys(prefix, limit)
}

/// Read a JSON value from the store; `None` when absent or not valid JSON.
pub fn kv_get_json<T: serde::de::DeserializeOwned>(key: &str) -> Option<T> {
    kv_get(key).and_then(|bytes| serde_json::from_slice(&bytes).ok())
}
pub fn kv_set_json<T: serde::Serialize>(key: &str, value: &T) -> Result<(), String> {
    let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    kv_set(key, &bytes)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    raw::now_ms()
}

/// Emit an event (`kind`, JSON `data`) to the current exchange.
pub fn emit(kind: &str, data: &serde_json::Value) -> Result<(), String> {
    raw::emit(kind, &data.to_string())
}

/// Call a tool by name with JSON arguments; the result is the tool's JSON text.
pub fn call_tool(name: &str, arguments: &serde_json::Value) -> Result<String, String> {
    raw::call_tool(name, &arguments.to_string())
}

/// One entry of a conversation's or session's history.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct HistoryEntry {
    pub role: String,
    pub body: serde_json::Value,
    #[serde(default)]
    pub at: u64,
}

/// The current conversation's or session's history, oldest first: its most
/// recent entries, as many as the node's `store.history_page_entries` and
/// `store.history_page_bytes` allow (never necessarily the whole history).
pub fn history() -> Vec<HistoryEntry> {
    serde_json::from_str(&raw::history()).unwrap_or_default()
}

/// Call another agent over `transport` (only hosts the node allows).
pub fn outbound(transport: Transport, url: &str, body: &serde_json::Value) -> Result<String, String> {
    raw::outbound(&OutboundRequest {
        transport,
        url: url.to_string(),
        body: body.to_string(),
    })
}
