//! The agent card (`GET /.well-known/agent-card.json`, A2A 1.0 §"Agent
//! Discovery"), built per request from the node's config and the plugins
//! loaded now, so a hot reload that adds, removes or changes a tool changes the
//! card at once.
//!
//! The shape is what `a2a-sdk` 1.3.0's card resolver and client factory read:
//! no top-level `url`; one `supportedInterfaces` entry with `protocolBinding:
//! "JSONRPC"` and `protocolVersion: "1.0"`; non-empty default modes; every
//! skill with non-empty `tags`.

use serde_json::json;

use crate::models::a2a::{AgentCard, AgentInterface, AgentSkill};
use crate::node::state::NodeState;
use crate::peers::a2a::VERSION as PROTOCOL_VERSION;
use crate::runtime::Risk;

/// Media types the agent reads and writes: text, and JSON data parts (approvals).
pub const MODES: [&str; 2] = ["text/plain", "application/json"];

pub fn agent_card(node: &NodeState) -> AgentCard {
    let config = &node.config;
    let registry = node.runtime.registry();
    let threshold = Risk::parse(&config.tools.approval_threshold).unwrap_or(Risk::High);
    let modes = || MODES.map(str::to_string).to_vec();
    let mut skills = Vec::new();
    if let Some(agent) = super::run::agent_plugin(node) {
        let manifest = &agent.manifest;
        let description = if manifest.description.is_empty() {
            "The node's assistant"
        } else {
            manifest.description.as_str()
        };
        skills.push(AgentSkill {
            id: "assistant".into(),
            name: manifest.name.clone(),
            description: description.into(),
            tags: vec!["assistant".into(), "chat".into()],
            input_modes: modes(),
            output_modes: modes(),
        });
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
            skills.push(AgentSkill {
                id: tool.name.clone(),
                name: tool.name.clone(),
                description: tool.description.clone(),
                tags,
                ..AgentSkill::default()
            });
        }
    }
    let mut card = AgentCard {
        name: config.a2a.name.clone(),
        description: config.a2a.description.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        supported_interfaces: vec![AgentInterface {
            url: endpoint(node),
            protocol_binding: "JSONRPC".into(),
            protocol_version: PROTOCOL_VERSION.into(),
        }],
        capabilities: json!({"streaming": true, "pushNotifications": false}),
        default_input_modes: modes(),
        default_output_modes: modes(),
        skills,
        ..AgentCard::default()
    };
    if !config.a2a.auth_token.is_empty() {
        card.security_schemes = Some(json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}));
        card.security_requirements = Some(json!([{"schemes": {"bearer": {}}}]));
    }
    card
}

/// The JSON-RPC URL: `a2a.public_url` + `a2a.path`, else the first of
/// `http.public_hosts`, else the listen address (an unspecified address read as
/// loopback). Never the request's `Host`: a rebinding page would name itself.
fn endpoint(node: &NodeState) -> String {
    endpoint_of(&node.config)
}

fn endpoint_of(config: &crate::config::Config) -> String {
    let path = config.a2a.path.trim_end_matches('/');
    if !config.a2a.public_url.is_empty() {
        return format!("{}{path}", config.a2a.public_url.trim_end_matches('/'));
    }
    let scheme = if config.tls.serves_tls() { "https" } else { "http" };
    let listen = if config.a2a.listen.is_empty() {
        &config.listen
    } else {
        &config.a2a.listen
    };
    let host = match config.http.public_hosts.first() {
        Some(host) if crate::policy::browser::split_authority(host).1.is_some() => host.clone(),
        Some(host) => {
            let port = listen.rsplit_once(':').map_or("", |(_, port)| port);
            format!("{host}:{port}")
        }
        None => listen.replace("0.0.0.0", "127.0.0.1").replace("[::]", "[::1]"),
    };
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cards_url_comes_from_the_settings_not_the_request() {
        let mut config = crate::config::Config::defaults();
        config.listen = "0.0.0.0:8080".into();
        assert_eq!(endpoint_of(&config), "http://127.0.0.1:8080/a2a");
        config.http.public_hosts = vec!["agent.example.org".into()];
        assert_eq!(endpoint_of(&config), "http://agent.example.org:8080/a2a");
        config.http.public_hosts = vec!["agent.example.org:443".into()];
        assert_eq!(endpoint_of(&config), "http://agent.example.org:443/a2a");
        config.http.public_hosts = vec!["[::1]".into()];
        assert_eq!(endpoint_of(&config), "http://[::1]:8080/a2a");
        config.a2a.public_url = "https://a2a.example.org/".into();
        assert_eq!(endpoint_of(&config), "https://a2a.example.org/a2a");
    }
}
