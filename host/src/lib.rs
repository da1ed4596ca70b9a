//! Agora Node: one host process that speaks five agent protocols, with the
//! agent logic in hot-reloaded WebAssembly plugins.
//!
//! The host owns everything a plugin must not be trusted with: transports,
//! signatures, limits, approvals and persistent state. Plugins (see
//! `plugin-sdk/wit/agora-node.wit`) only answer routed, verified messages.
//!
//! - [`config`]: layered configuration (defaults ← file ← environment ← flags).
//! - [`runtime`]: the Wasm component runtime, plugin registry and hot reload.
//! - [`store`]: durable state in sled.
//! - [`transports`]: one module per wire protocol.
//! - [`listener`]: the hardened HTTP accept loop (connection caps, header
//!   timeouts, bodies refused without breaking the client's pipe).
//! - [`node`]: wiring it all into listeners with graceful shutdown.

pub mod cli;
pub mod config;
pub mod crypto;
pub mod dev;
pub mod health;
pub mod listener;
pub mod metrics;
pub mod node;
pub mod runtime;
pub mod scaffold;
pub mod store;
pub mod transports;

pub use config::Config;
pub use node::Node;
