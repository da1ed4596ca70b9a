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

use wasmtime::Store;
use wasmtime::component::{ComponentExportIndex, Instance, InstancePre, TypedFunc};

/// Where the two exports a call runs are, found once per plugin version.
///
/// [`PluginPre::instantiate_async`] type-checks every export of the world for
/// every instance, the manifest's large record among them, though a call runs
/// one export and the load already checked them all (it reads the manifest
/// after `PluginIndices::load`, which checks every export). A fresh instance
/// per call is the hot path, so it looks up and checks only the export it calls.
pub struct CallExports {
    handle: ComponentExportIndex,
    run_tool: ComponentExportIndex,
    /// `agora:node/prompts`' `get`: absent from components built without the
    /// export (world `plugin`, or `agent` before it had prompts).
    get_prompt: Option<ComponentExportIndex>,
}

/// The optional interface a plugin renders its prompts with (world `agent`).
const PROMPTS_INTERFACE: &str = "agora:node/prompts@0.1.0";

impl CallExports {
    pub fn new<T>(pre: &InstancePre<T>) -> wasmtime::Result<CallExports> {
        let component = pre.component();
        let index = |name: &str| {
            component
                .get_export_index(None, name)
                .ok_or_else(|| wasmtime::format_err!("the component exports no `{name}`"))
        };
        let get_prompt = component
            .get_export_index(None, PROMPTS_INTERFACE)
            .and_then(|interface| component.get_export_index(Some(&interface), "get"));
        Ok(CallExports {
            handle: index("handle")?,
            run_tool: index("run-tool")?,
            get_prompt,
        })
    }

    /// Whether the component renders prompts at all.
    pub fn renders_prompts(&self) -> bool {
        self.get_prompt.is_some()
    }

    /// `prompts.get` of `instance` (fresh or warm): `None` when the component has no such export.
    pub async fn call_get_prompt<T: Send>(
        &self,
        store: &mut Store<T>,
        instance: &Instance,
        name: &str,
        arguments: &str,
    ) -> wasmtime::Result<Option<Result<String, String>>> {
        let Some(get_prompt) = self.get_prompt else {
            return Ok(None);
        };
        let func: TypedFunc<(&str, &str), (Result<String, String>,)> =
            instance.get_typed_func(&mut *store, get_prompt)?;
        Ok(Some(func.call_async(store, (name, arguments)).await?.0))
    }

    /// `handle` of a fresh `instance`.
    pub async fn call_handle<T: Send>(
        &self,
        store: &mut Store<T>,
        instance: &Instance,
        message: &Message,
    ) -> wasmtime::Result<Result<String, Failure>> {
        let func: TypedFunc<(&Message,), (Result<String, Failure>,)> =
            instance.get_typed_func(&mut *store, self.handle)?;
        Ok(func.call_async(store, (message,)).await?.0)
    }

    /// `run-tool` of a fresh `instance`.
    pub async fn call_run_tool<T: Send>(
        &self,
        store: &mut Store<T>,
        instance: &Instance,
        name: &str,
        arguments: &str,
    ) -> wasmtime::Result<Result<String, String>> {
        let func: TypedFunc<(&str, &str), (Result<String, String>,)> =
            instance.get_typed_func(&mut *store, self.run_tool)?;
        Ok(func.call_async(store, (name, arguments)).await?.0)
    }
}

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
            // The WIT enum has no `a2a` case, and adding one would stop every plugin
            // built before it from loading (a component's enum must match the host's
            // case for case). An A2A client talks to the assistant as HAI's person does;
            // a plugin that must tell them apart asks `caller-transport`, which says `a2a`.
            vocab::TransportKind::A2a => Transport::Hai,
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
