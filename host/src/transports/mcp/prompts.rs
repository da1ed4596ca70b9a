//! The prompts the node's plugins declare, as MCP prompts (§"Server Features"
//! → "Prompts"): `prompts/list`, `prompts/get`, and what
//! `notifications/prompts/list_changed` compares after a hot reload.
//!
//! (Interface fixed first so that both eras' dispatch call it; the
//! declaration and rendering are being written.)

use serde_json::{Value, json};

use super::error::McpError;
use crate::jsonrpc::Faults;
use super::state::Shared;
use crate::runtime::Registry;

/// One page of `prompts/list`: prompts whose name sorts after `cursor`.
pub fn list_page(_shared: &Shared, _cursor: Option<&str>) -> Value {
    json!({"prompts": []})
}

/// `prompts/get`: the prompt named in `params`, rendered by its plugin.
pub async fn get(_shared: &Shared, params: &Value) -> Result<Value, McpError> {
    let name = params.get("name").and_then(Value::as_str).unwrap_or_default();
    Err(McpError::invalid_params(format!(
        "Unknown prompt: {:?}",
        name.chars().take(160).collect::<String>()
    )))
}

/// A hash of what `prompts/list` shows, to tell whether a hot reload changed it.
pub fn listing_fingerprint(_registry: &Registry) -> String {
    String::new()
}
