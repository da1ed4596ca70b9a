//! The wire protocols, one module each. A newcomer finds every wire rule of a
//! protocol in its module; each maps the node's errors to that protocol's own
//! error shape in exactly one place.
//!
//! - [`agora`]: Agora two-party JSON exchanges ("Agora Protocol for Two-Party JSON Exchanges").
//! - [`envelopes`]: signed Agora envelopes ("Agora Protocol Specification v1.0").
//! - [`uagents`]: Fetch.ai uAgents exchange ("uAgents Exchange protocol").
//! - [`arena`]: Agora Arena tasks, health and live events ("Agora Arena Protocol (AAP)").
//! - [`hai`]: human chat over WebSocket and the browser client ("AGORA HAI Protocol Specification").
//! - [`a2a`]: Agent2Agent 1.0 over JSON-RPC, answered by the HAI assistant plugin.
//! - [`mcp`]: the Model Context Protocol: plugin tools for MCP clients, with the host's approvals.
//!
//! What every transport must enforce lives once, in [`crate::policy`]: who may
//! connect from a browser (each router is wrapped in the browser guard), how
//! many live things and how much stored data one client may hold. A transport
//! decides only how to ask and how to refuse in its own protocol's shape.
//!
//! [`TRANSPORTS`] is the table the node mounts them from; every transport
//! folder has the same shape (`docs/architecture.md`).
//!
//! The clients of these protocols (what the CLI and plugins' outbound calls
//! use) live below, in [`crate::peers`], so the runtime can call out without
//! depending on the transports.

pub mod a2a;
pub mod agora;
pub mod arena;
pub mod chunks;
pub mod envelopes;
pub mod hai;
pub mod mcp;
pub mod uagents;

use axum::Router;

use crate::config::{Config, Endpoint};
use crate::node::state::NodeState;

/// A transport as the node mounts it: where its section says it is served,
/// and its routes.
pub struct Transport {
    pub endpoint: fn(&Config) -> Endpoint<'_>,
    pub router: fn(NodeState) -> Router,
}

impl Transport {
    const fn new(endpoint: fn(&Config) -> Endpoint<'_>, router: fn(NodeState) -> Router) -> Transport {
        Transport { endpoint, router }
    }
}

/// Every transport the node speaks. Adding a protocol is its folder here, one
/// line in this table and its section in `crate::config` (`docs/architecture.md`).
pub const TRANSPORTS: [Transport; 7] = [
    Transport::new(|config| config.agora.endpoint(), agora::router),
    Transport::new(|config| config.envelopes.endpoint(), envelopes::router),
    Transport::new(|config| config.uagents.endpoint(), uagents::router),
    Transport::new(|config| config.arena.endpoint(), arena::router),
    Transport::new(|config| config.hai.endpoint(), hai::router),
    Transport::new(|config| config.a2a.endpoint(), a2a::router),
    Transport::new(|config| config.mcp.endpoint(), mcp::router),
];

/// An operator's bearer token, when one is set (`""`: no token needed);
/// compared as SHA-256 digests in constant time, so neither its bytes nor its
/// length leak.
pub fn bearer_authorized(token: &str, headers: &axum::http::HeaderMap) -> bool {
    if token.is_empty() {
        return true;
    }
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or("");
    crate::crypto::constant_time_eq(
        crate::crypto::sha256_hex(presented.as_bytes()).as_bytes(),
        crate::crypto::sha256_hex(token.as_bytes()).as_bytes(),
    )
}
