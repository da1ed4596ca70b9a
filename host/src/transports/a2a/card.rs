//! The agent card (`GET /.well-known/agent-card.json`, A2A 1.0 §"Agent
//! Discovery"), built per request from the node's config and the plugins
//! loaded now, so a hot reload that adds, removes or changes a tool changes the
//! card at once.
//!
//! The shape is what `a2a-sdk` 1.3.0's card resolver and client factory read:
//! no top-level `url`; one `supportedInterfaces` entry with `protocolBinding:
//! "JSONRPC"` and `protocolVersion: "1.0"`; non-empty default modes; every
//! skill with non-empty `tags`.

use serde_json::{Value, json};

use crate::node::state::NodeState;
use crate::peers::a2a::VERSION as PROTOCOL_VERSION;
use crate::runtime::Risk;

/// Media types the agent reads and writes: text, and JSON data parts (approvals).
pub const MODES: [&str; 2] = ["text/plain", "application/json"];

pub fn agent_card(node: &NodeState, host_header: Option<&str>) -> Value {
    let config = &node.config;
    let registry = node.runtime.registry();
    let threshold = Risk::parse(&config.tools.approval_threshold).unwrap_or(Risk::High);
    let mut skills = Vec::new();
    if let Some(agent) = super::run::agent_plugin(node) {
        let manifest = &agent.manifest;
        skills.push(json!({
            "id": "assistant",
            "name": manifest.name,
            "description": if manifest.description.is_empty() { "The node's assistant" } else { manifest.description.as_str() },
            "tags": ["assistant", "chat"],
            "inputModes": MODES,
            "outputModes": MODES,
        }));
    }
    for plugin in registry.plugins() {
        for tool in &plugin.manifest.tools {
            let mut tags = vec![
                "tool".to_string(),
                format!("risk:{}", tool.risk.as_str()),
                plugin.manifest.name.clone(),
            ];
            if tool.risk >= threshold {
                tags.push("requires-approval".into());
            }
            skills.push(json!({
                "id": tool.name,
                "name": tool.name,
                "description": tool.description,
                "tags": tags,
            }));
        }
    }
    let mut card = json!({
        "name": config.a2a.name,
        "description": config.a2a.description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [{
            "url": endpoint(node, host_header),
            "protocolBinding": "JSONRPC",
            "protocolVersion": PROTOCOL_VERSION,
        }],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": MODES,
        "defaultOutputModes": MODES,
        "skills": skills,
    });
    if !config.a2a.auth_token.is_empty() {
        card["securitySchemes"] = json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}});
        card["securityRequirements"] = json!([{"schemes": {"bearer": {}}}]);
    }
    card
}

/// The JSON-RPC URL: `a2a.public_url` + `a2a.path`, or else the address the
/// client used (its `Host`, when it reads as a host and port) or the listener's.
fn endpoint(node: &NodeState, host_header: Option<&str>) -> String {
    let config = &node.config;
    let path = config.a2a.path.trim_end_matches('/');
    if !config.a2a.public_url.is_empty() {
        return format!("{}{path}", config.a2a.public_url.trim_end_matches('/'));
    }
    let scheme = if config.tls.serves_tls() { "https" } else { "http" };
    let host = host_header
        .filter(|host| is_authority(host))
        .map(str::to_string)
        .unwrap_or_else(|| {
            let listen = if config.a2a.listen.is_empty() {
                &config.listen
            } else {
                &config.a2a.listen
            };
            listen.replace("0.0.0.0", "127.0.0.1")
        });
    format!("{scheme}://{host}{path}")
}

/// A `Host` value that is only a host name or address and an optional port, so a
/// hostile header cannot put a path, credentials or markup into the card.
fn is_authority(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_authorities_become_the_cards_host() {
        assert!(is_authority("127.0.0.1:8080"));
        assert!(is_authority("[::1]:80"));
        assert!(is_authority("agent.example.org"));
        for hostile in ["evil.org/path", "user@host", "a b", "<script>", ""] {
            assert!(!is_authority(hostile), "{hostile}");
        }
    }
}
