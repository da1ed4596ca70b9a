//! Agora Node: one host process that speaks seven agent protocols, with the
//! agent logic in hot-reloaded WebAssembly plugins.
//!
//! The host owns everything a plugin must not be trusted with: transports,
//! signatures, limits, approvals and persistent state. Plugins (see
//! `plugin-sdk/wit/agora-node.wit`) only answer routed, verified messages.
//!
//! # Layers
//!
//! Dependencies run one way, so each module can be read, tested and changed
//! knowing only what lies below it. A module may use only modules in lower
//! layers; modules in one layer do not use each other. `tests/layers.rs`
//! checks every `crate::` path and `super::` escape against this table, and
//! the table against its own copy.
//!
//! | layer | modules | may use | what |
//! |---|---|---|---|
//! | 0 | `vocab`, `jsonrpc`, `background`, `models` | — | the shared words: transport kind, phase, risk, call, invoke errors, the clock; JSON-RPC 2.0 for every protocol on it; the node's background tasks; one model of each protocol's objects for its servers and clients |
//! | 1 | `crypto`, `logging` | 0 | hashes, JCS, Ed25519/did:key envelopes, uAgents keys, JWT, the TLS client trust policy; one-line human log fields and the console's ring of recent warnings |
//! | 2 | `config` | 0–1 | layered configuration and its validation |
//! | 3 | `store`, `metrics` | 0–2 | durable state in sled; Prometheus metrics |
//! | 4 | `peers`, `policy` | 0–3 | the node as a client: bounded HTTP, per-protocol clients, plugins' outbound calls; the policies every transport shares (admission, quotas, browsers) |
//! | 5 | `runtime` | 0–4 | the Wasm component runtime, plugin registry and hot reload |
//! | 6 | `listener` | 0–5 | the hardened HTTP accept loop |
//! | 7 | `node::state` | 0–6 | what every request handler can reach |
//! | 8 | `transports` | 0–7 | one module per wire protocol |
//! | 9 | `health`, `console` | 0–8 | `/health` and `/metrics`; the operator's console |
//! | 10 | `node` | 0–9 | wiring it all into listeners with graceful shutdown |
//! | 11 | `cli`, `dev`, `scaffold` | 0–10 | the client commands, `agora-node dev`, plugin scaffolding |
//!
//! `main.rs` (the binary) sits above them all.

pub mod background;
pub mod cli;
pub mod config;
pub mod console;
pub mod crypto;
pub mod dev;
pub mod health;
pub mod jsonrpc;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod models;
pub mod node;
pub mod peers;
pub mod policy;
pub mod runtime;
pub mod scaffold;
pub mod store;
pub mod transports;
pub mod vocab;

pub use config::Config;
pub use node::Node;
