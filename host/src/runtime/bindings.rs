//! Host-side bindings for the `agora:node/plugin` world (`plugin-sdk/wit`),
//! and the conversions between their types and the node's own [`crate::vocab`].
//!
//! Imports and exports are async: a plugin blocked in a host call (waiting for
//! a human's approval, an outbound request) parks its fiber and frees the
//! runtime thread.

use crate::vocab;

wasmtime::component::bindgen!({
    path: "../plugin-sdk/wit",
    world: "plugin",
    imports: { default: async },
    exports: { default: async },
    with: { "agora:node/llm.chat-stream": super::llm::LlmStream },
});

/// The optional `agora:node/extensions` export (world `agent`): looked up per
/// component at load ([`agent::exports::agora::node::extensions::GuestIndices`]),
/// so plugins without it load as before. Everything it shares with `plugin`
/// is the types above.
pub mod agent {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "agent",
        imports: { default: async },
        exports: { default: async },
        with: {
            "agora:node/types": super::agora::node::types,
            "agora:node/host": super::agora::node::host,
            "agora:node/llm": super::agora::node::llm,
        },
    });
}

pub use agora::node::types::{FailureKind, InstancePolicy, Phase, Risk as WitRisk, Transport};

impl From<Transport> for vocab::TransportKind {
    fn from(transport: Transport) -> Self {
        match transport {
            Transport::Agora => vocab::TransportKind::Agora,
            Transport::Envelope => vocab::TransportKind::Envelope,
            Transport::Uagents => vocab::TransportKind::Uagents,
            Transport::Arena => vocab::TransportKind::Arena,
            Transport::Hai => vocab::TransportKind::Hai,
        }
    }
}

impl From<vocab::TransportKind> for Transport {
    fn from(transport: vocab::TransportKind) -> Self {
        match transport {
            vocab::TransportKind::Agora => Transport::Agora,
            vocab::TransportKind::Envelope => Transport::Envelope,
            vocab::TransportKind::Uagents => Transport::Uagents,
            vocab::TransportKind::Arena => Transport::Arena,
            vocab::TransportKind::Hai => Transport::Hai,
        }
    }
}

impl From<vocab::Phase> for Phase {
    fn from(phase: vocab::Phase) -> Self {
        match phase {
            vocab::Phase::Handle => Phase::Handle,
            vocab::Phase::Quote => Phase::Quote,
            vocab::Phase::Execute => Phase::Execute,
        }
    }
}

impl From<FailureKind> for vocab::FailureKind {
    fn from(kind: FailureKind) -> Self {
        match kind {
            FailureKind::BadRequest => vocab::FailureKind::BadRequest,
            FailureKind::Unsupported => vocab::FailureKind::Unsupported,
            FailureKind::NotFound => vocab::FailureKind::NotFound,
            FailureKind::PaymentRequired => vocab::FailureKind::PaymentRequired,
            FailureKind::Internal => vocab::FailureKind::Internal,
        }
    }
}

impl From<WitRisk> for vocab::Risk {
    fn from(risk: WitRisk) -> Self {
        match risk {
            WitRisk::Low => vocab::Risk::Low,
            WitRisk::Medium => vocab::Risk::Medium,
            WitRisk::High => vocab::Risk::High,
            WitRisk::Critical => vocab::Risk::Critical,
        }
    }
}
