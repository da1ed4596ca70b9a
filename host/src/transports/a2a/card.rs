//! The agent card (`GET /.well-known/agent-card.json`, A2A 1.0 §"Agent
//! Discovery"), built per request from the node's config and the plugins
//! loaded now, so a hot reload that adds, removes or changes a tool changes the
//! card at once.
//!
//! The shape is what `a2a-sdk` 1.3.0's card resolver and client factory read:
//! no top-level `url`; a `supportedInterfaces` entry with `protocolBinding:
//! "JSONRPC"` and `protocolVersion: "1.0"`, then (unless `a2a.rest_path` is
//! empty) one with `"HTTP+JSON"`: the SDK's client takes the first the card
//! lists among those it accepts, and accepts only JSON-RPC unless told, so
//! existing clients keep JSON-RPC; non-empty default modes; every skill with
//! non-empty `tags`.
//!
//! With `a2a.auth_token` set the card comes in two audiences ([`Audience`]):
//! the public card leaves out the skills of the tools that need a human's
//! approval, and says `capabilities.extendedAgentCard: true`; the operator's
//! card (`GetExtendedAgentCard`, behind the same token as every call) lists
//! every skill. One builder makes both, and only the skills differ: the SDK's
//! client replaces its card with the extended one and then reads its
//! interfaces, capabilities and security schemes, so a difference there would
//! silently change how it talks to the node (or drop its credentials).

use serde_json::{Value, json};

use crate::models::a2a::{AgentCard, AgentInterface, AgentSkill};
use crate::node::state::NodeState;
use crate::peers::a2a::VERSION as PROTOCOL_VERSION;

/// Media types the agent reads and writes: text, and JSON data parts (approvals).
pub const MODES: [&str; 2] = ["text/plain", "application/json"];

/// Who a card is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Anyone: `GET /.well-known/agent-card.json`.
    Public,
    /// A caller holding `a2a.auth_token`: `GetExtendedAgentCard`.
    Operator,
}

/// Whether the node offers an extended card: only behind an operator token,
/// since without one the "authenticated" card would be anyone's.
pub fn offers_extended_card(config: &crate::config::Config) -> bool {
    !config.a2a.auth_token.is_empty()
}

pub fn agent_card(node: &NodeState, audience: Audience) -> AgentCard {
    let config = &node.config;
    let modes = || MODES.map(str::to_string).to_vec();
    let extended = offers_extended_card(config);
    // Without an extended card there is nowhere else to name the gated tools.
    let gated_skills_listed = audience == Audience::Operator || !extended;
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
    skills.extend(tool_skills(node, gated_skills_listed));
    let mut card = AgentCard {
        name: config.a2a.name.clone(),
        description: config.a2a.description.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        supported_interfaces: interfaces(node),
        capabilities: capabilities(extended, config.a2a.push_enabled),
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

/// One entry per binding the node serves, the same for both audiences.
fn interfaces(node: &NodeState) -> Vec<AgentInterface> {
    let config = &node.config;
    let interface = |path: &str, binding: &str| AgentInterface {
        url: endpoint_of(config, path),
        protocol_binding: binding.into(),
        protocol_version: PROTOCOL_VERSION.into(),
    };
    let mut interfaces = vec![interface(&config.a2a.path, "JSONRPC")];
    if config.a2a.serves_rest() {
        interfaces.push(interface(&config.a2a.rest_path, "HTTP+JSON"));
    }
    interfaces
}

/// The same for both audiences (the SDK's client swaps one card for the other).
fn capabilities(extended_card: bool, push: bool) -> Value {
    json!({"streaming": true, "pushNotifications": push, "extendedAgentCard": extended_card})
}

/// One skill per plugin tool; a tool needing approval (the runtime's own
/// rule, [`crate::runtime::Runtime::needs_approval`]) is tagged so, and left
/// out unless `gated_listed`.
fn tool_skills(node: &NodeState, gated_listed: bool) -> Vec<AgentSkill> {
    let registry = node.runtime.registry();
    let mut skills = Vec::new();
    for plugin in registry.plugins() {
        for tool in &plugin.manifest.tools {
            let gated = node.runtime.needs_approval(tool.risk);
            if gated && !gated_listed {
                continue;
            }
            let mut tags = vec![
                "tool".to_string(),
                format!("risk:{}", tool.risk.as_str()),
                plugin.manifest.name.clone(),
            ];
            if gated {
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
    skills
}

/// A binding's URL, `path` being its key's (`a2a.path`, `a2a.rest_path`):
/// `a2a.public_url` + `path`, else the first of `http.public_hosts`, else the
/// listen address (an unspecified address read as loopback). Never the
/// request's `Host`: a rebinding page would name itself.
fn endpoint_of(config: &crate::config::Config, path: &str) -> String {
    let path = path.trim_end_matches('/');
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
        assert_eq!(
            endpoint_of(&config, &config.a2a.path),
            "http://127.0.0.1:8080/a2a"
        );
        config.http.public_hosts = vec!["agent.example.org".into()];
        assert_eq!(
            endpoint_of(&config, &config.a2a.path),
            "http://agent.example.org:8080/a2a"
        );
        config.http.public_hosts = vec!["agent.example.org:443".into()];
        assert_eq!(
            endpoint_of(&config, &config.a2a.path),
            "http://agent.example.org:443/a2a"
        );
        config.http.public_hosts = vec!["[::1]".into()];
        assert_eq!(endpoint_of(&config, &config.a2a.path), "http://[::1]:8080/a2a");
        config.a2a.public_url = "https://a2a.example.org/".into();
        assert_eq!(
            endpoint_of(&config, &config.a2a.path),
            "https://a2a.example.org/a2a"
        );
        assert_eq!(
            endpoint_of(&config, &config.a2a.rest_path),
            "https://a2a.example.org/a2a/rest"
        );
    }
}
