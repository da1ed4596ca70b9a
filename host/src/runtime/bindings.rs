//! Host-side bindings for the `agora:node/plugin` world (`plugin-sdk/wit`).
//!
//! Imports and exports are async: a plugin blocked in a host call (waiting for
//! a human's approval, an outbound request) parks its fiber and frees the
//! runtime thread.

wasmtime::component::bindgen!({
    path: "../plugin-sdk/wit",
    world: "plugin",
    imports: { default: async },
    exports: { default: async },
});

pub use agora::node::types::{FailureKind, InstancePolicy, Phase, Risk as WitRisk, Transport};
