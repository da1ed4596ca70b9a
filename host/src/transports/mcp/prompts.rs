//! The prompts the node's plugins declare, as MCP prompts (§"Server Features"
//! → "Prompts"): `prompts/list`, `prompts/get`, and what
//! `notifications/prompts/list_changed` compares after a hot reload.
//!
//! **Where they come from.** A plugin declares its prompts (name, description,
//! arguments) in its `capabilities` and renders them with its optional
//! `agora:node/prompts` export; names are unique across plugins (a duplicate
//! is refused at load, as a tool's is). The render runs through the runtime
//! ([`crate::runtime::prompts`]): the same call path, instance policy and
//! limits as a tool, its answer checked and bounded by `mcp.max_prompt_bytes`.
//!
//! **Errors.** An unknown prompt, a missing required argument, an argument
//! the prompt does not declare or one that is not a string is `-32602`
//! (nothing ran); a plugin that fails, answers what is not a prompt or too
//! much of one is `-32603`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::error::McpError;
use super::state::Shared;
use super::wire;
use crate::jsonrpc::Faults;
use crate::runtime::Registry;
use crate::runtime::capabilities::Prompt;
use crate::runtime::exchange::Exchange;
use crate::runtime::prompts::PromptError;

/// Every declared prompt, by name (the order pages follow).
fn listed_prompts(registry: &Registry) -> BTreeMap<&str, &Prompt> {
    registry
        .plugins()
        .flat_map(|plugin| plugin.capabilities.prompts.iter())
        .map(|prompt| (prompt.name.as_str(), prompt))
        .collect()
}

fn describe(prompt: &Prompt) -> Value {
    let arguments: Vec<Value> = prompt
        .arguments
        .iter()
        .map(|argument| {
            let mut described = json!({"name": argument.name, "required": argument.required});
            if !argument.description.is_empty() {
                described["description"] = json!(argument.description);
            }
            described
        })
        .collect();
    let mut described = json!({"name": prompt.name, "arguments": arguments});
    if !prompt.description.is_empty() {
        described["description"] = json!(prompt.description);
    }
    described
}

/// One page of `prompts/list`: prompts whose name sorts after `cursor`,
/// and the cursor of the next page (the last name of this one).
pub fn list_page(shared: &Shared, cursor: Option<&str>) -> Value {
    let registry = shared.node.runtime.registry();
    let prompts = listed_prompts(&registry);
    wire::page(
        "prompts",
        prompts,
        cursor,
        shared.node.config.mcp.page_size,
        describe,
    )
}

/// `prompts/get`: the prompt named in `params`, rendered by its plugin.
pub async fn get(shared: &Shared, params: &Value) -> Result<Value, McpError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("prompts/get needs a string \"name\""))?;
    let arguments = string_arguments(params.get("arguments"))?;
    let mut exchange = Exchange::new();
    exchange.caller_transport = Some("mcp");
    let max_bytes = shared.node.config.mcp.max_prompt_bytes;
    let rendered = shared
        .node
        .runtime
        .render_prompt(name, &arguments, max_bytes, exchange)
        .await
        .map_err(|error| {
            let message: String = error.to_string().chars().take(1024).collect();
            if error.is_callers() {
                McpError::invalid_params(message)
            } else {
                log_failure(name, &error);
                McpError::PluginFailed(message)
            }
        })?;
    let messages: Vec<Value> = rendered
        .messages
        .iter()
        .map(|message| {
            json!({"role": message.role.as_str(), "content": {"type": "text", "text": message.text}})
        })
        .collect();
    let mut result = json!({"messages": messages});
    if let Some(description) = rendered.description {
        result["description"] = json!(description);
    }
    Ok(result)
}

fn log_failure(name: &str, error: &PromptError) {
    tracing::info!(transport = "mcp", prompt = name, %error, "prompt not rendered");
}

/// `arguments`: absent, or an object of strings (MCP's `dict[str, str]`).
fn string_arguments(arguments: Option<&Value>) -> Result<BTreeMap<String, String>, McpError> {
    let object = match arguments {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(object)) => object,
        Some(_) => {
            return Err(McpError::invalid_params(
                "prompts/get \"arguments\" must be an object",
            ));
        }
    };
    object
        .iter()
        .map(|(key, value)| match value {
            Value::String(text) => Ok((key.clone(), text.clone())),
            _ => Err(McpError::invalid_params(format!(
                "prompt argument {:?} must be a string",
                key.chars().take(64).collect::<String>()
            ))),
        })
        .collect()
}

/// A hash of what `prompts/list` shows, to tell whether a hot reload changed it.
pub fn listing_fingerprint(registry: &Registry) -> String {
    let listing: Vec<Value> = listed_prompts(registry)
        .values()
        .map(|prompt| describe(prompt))
        .collect();
    crate::crypto::sha256_hex(Value::Array(listing).to_string().as_bytes())
}
