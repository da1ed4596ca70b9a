//! The node as a client of other agents: the bounded HTTP client, one client
//! per protocol the node can call out on, and [`outbound`], which plugins'
//! `host.outbound` calls go through.
//!
//! These sit below both the runtime (which calls out for plugins) and the
//! transports (which answer inbound traffic and send uAgents replies), so
//! neither depends on the other to reach a peer.
//!
//! - [`tls`]: the one trust policy (system roots + `tls.ca_file`) and the pooled client.
//! - [`http_client`]: timeouts, response-size caps, the allowed-hosts check, redirects.
//! - [`agora`]: Agora two-party JSON exchanges (`agora-node agora`).
//! - [`envelopes`]: signed Agora envelopes (`agora-node envelope`).
//! - [`uagents`]: uAgents envelopes to a peer's `/submit`.
//! - [`almanac`]: registering in and resolving through a uAgents Almanac API.
//! - [`a2a`]: A2A 1.0 agents over JSON-RPC (`agora-node a2a`).
//! - [`mcp`]: MCP servers' tools over Streamable HTTP, for plugins' `call-tool`.
//! - [`llm`]: a language model over OpenAI-compatible chat completions, for plugins' `llm`.
//! - [`sse`]: the server-sent events reader the A2A, MCP and model clients share.
//! - [`outbound`]: a plugin's outbound call, checked against `outbound.allowed_hosts`.

pub mod a2a;
pub mod agora;
pub mod almanac;
pub mod envelopes;
pub mod http_client;
pub mod llm;
pub mod mcp;
pub mod outbound;
pub mod sse;
pub mod tls;
pub mod uagents;
