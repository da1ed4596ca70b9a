//! The Agora Node plugin SDK.
//!
//! A plugin is a WebAssembly component for the `agent` world of `agora:node`
//! (`wit/agora-node.wit`: everything of `plugin`, and the optional
//! capabilities a plugin declares: a language model, schedules, prompts). This crate hides the component plumbing: a plugin
//! author implements [`Plugin`] on a struct and names it once with
//! [`export_plugin!`]. Everything the host offers (logging, the key-value store,
//! events, tools, history, outbound calls) is a safe function in [`host`]
//! whose failure is a [`HostError`]; `?` turns it into the plugin's answer.
//!
//! ```ignore
//! use agora_plugin_sdk::prelude::*;
//!
//! struct Hello;
//! impl Plugin for Hello {
//!     fn manifest() -> Manifest {
//!         Manifest::new("hello", "0.1.0").protocol(include_str!("../hello.md"))
//!     }
//!     fn handle(message: Message) -> Result<String, Failure> {
//!         Ok(json!({"greeting": "hello"}).to_string())
//!     }
//! }
//! export_plugin!(Hello);
//! ```
//!
//! A plugin that offers tools reads each tool's arguments into a struct of its
//! own with [`ToolArguments::parse`]; what cannot be read is answered
//! `bad arguments: …` without the tool running.

#![warn(missing_docs)]

#[doc(hidden)]
// Generated code: the WIT records' constructors take one argument per field.
#[allow(clippy::too_many_arguments)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "agent",
        pub_export_macro: true,
        export_macro_name: "__export_agora_plugin_world",
        default_bindings_module: "agora_plugin_sdk::bindings",
        generate_all,
    });
}

mod capabilities;
mod error;
pub mod host;
pub mod llm;
mod manifest;
mod prompt;
#[cfg(test)]
mod script_tests;
mod tool;

pub use bindings::agora::node::types::{
    EnvelopeResource, Failure, FailureKind, InstancePolicy, Message, MessageModel, Phase, Risk, Tool,
    Transport, WarmPool,
};
pub use capabilities::Capabilities;
pub use error::HostError;
pub use manifest::Manifest;
pub use prompt::{Prompt, PromptArguments, RenderedPrompt};
pub use serde_json::{self, Value, json};
pub use tool::{ToolArguments, ToolFailure};

/// What a plugin implements. Only `manifest` and `handle` are required.
pub trait Plugin {
    /// What this plugin serves; read once when the node loads it.
    fn manifest() -> Manifest;

    /// Answer one verified, routed message with JSON text.
    fn handle(message: Message) -> Result<String, Failure>;

    /// Run one of the tools named in the manifest: its JSON text, or why it failed.
    ///
    /// ```ignore
    /// fn run_tool(name: String, arguments: ToolArguments) -> Result<String, ToolFailure> {
    ///     match name.as_str() {
    ///         "search" => search(arguments.parse()?), // fn search(args: SearchArguments) -> …
    ///         other => Err(ToolFailure::unknown_tool(other)),
    ///     }
    /// }
    /// ```
    fn run_tool(name: String, arguments: ToolArguments) -> Result<String, ToolFailure> {
        let _ = arguments;
        Err(ToolFailure::unknown_tool(&name))
    }

    /// What the plugin asks of the node beyond answering messages (a language
    /// model, schedules); read once with the manifest. None by default.
    fn capabilities() -> Capabilities {
        Capabilities::new()
    }

    /// Run the schedule `name` declared in [`Plugin::capabilities`]. Its
    /// error is logged and counted by the node.
    fn tick(name: String) -> Result<(), String> {
        Err(format!("no schedule named {name:?}"))
    }

    /// Render the prompt `name` declared in [`Plugin::capabilities`] for an MCP
    /// client: the node has checked `arguments` (every required one is there).
    ///
    /// ```ignore
    /// fn get_prompt(name: String, arguments: PromptArguments) -> Result<RenderedPrompt, String> {
    ///     match name.as_str() {
    ///         "convert" => Ok(RenderedPrompt::new().user(format!("Convert {}.", arguments["quantity"]))),
    ///         other => Err(format!("no prompt named {other:?}")),
    ///     }
    /// }
    /// ```
    fn get_prompt(name: String, arguments: PromptArguments) -> Result<RenderedPrompt, String> {
        let _ = arguments;
        Err(format!("no prompt named {name:?}"))
    }
}

impl Message {
    /// The body parsed as JSON, or a `bad-request` failure naming the problem.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Failure> {
        serde_json::from_str(&self.body).map_err(|e| Failure::bad_request(format!("invalid body: {e}")))
    }
}

impl Failure {
    /// A failure of `kind` saying `message`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
        }
    }
    /// The body is not valid for the protocol.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(FailureKind::BadRequest, message)
    }
    /// The plugin does not support what was asked.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Unsupported, message)
    }
    /// The thing asked for does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(FailureKind::NotFound, message)
    }
    /// The plugin failed for its own reasons (or the host's: see [`HostError`]).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Internal, message)
    }
}

/// Serialize a reply value to the JSON text `handle` returns.
pub fn reply(value: impl serde::Serialize) -> Result<String, Failure> {
    serde_json::to_string(&value).map_err(|e| Failure::internal(format!("cannot encode reply: {e}")))
}

#[doc(hidden)]
pub struct Adapter<P>(core::marker::PhantomData<P>);

impl<P: Plugin> bindings::Guest for Adapter<P> {
    fn manifest() -> bindings::agora::node::types::Manifest {
        P::manifest().into_wit()
    }
    fn handle(message: Message) -> Result<String, Failure> {
        P::handle(message)
    }
    fn run_tool(name: String, arguments: String) -> Result<String, String> {
        P::run_tool(name, ToolArguments::new(arguments)).map_err(ToolFailure::into_message)
    }
}

impl<P: Plugin> bindings::exports::agora::node::extensions::Guest for Adapter<P> {
    fn capabilities() -> String {
        P::capabilities().to_json()
    }
    fn tick(name: String) -> Result<(), String> {
        P::tick(name)
    }
}

impl<P: Plugin> bindings::exports::agora::node::prompts::Guest for Adapter<P> {
    fn get(name: String, arguments: String) -> Result<String, String> {
        let arguments: PromptArguments = serde_json::from_str(&arguments)
            .map_err(|e| format!("prompt arguments are not an object of strings: {e}"))?;
        P::get_prompt(name, arguments)?.to_json()
    }
}

/// Export a [`Plugin`] implementation as this component's entry points.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        type __AgoraPluginExport = $crate::Adapter<$plugin>;
        $crate::bindings::__export_agora_plugin_world!(__AgoraPluginExport with_types_in $crate::bindings);
    };
}

/// Everything a plugin usually needs in one `use`.
pub mod prelude {
    pub use crate::host;
    pub use crate::{
        Capabilities, Failure, FailureKind, HostError, Manifest, Message, Phase, Plugin, Prompt,
        PromptArguments, RenderedPrompt, Risk, ToolArguments, ToolFailure, Transport, export_plugin, llm,
        reply,
    };
    pub use serde::{Deserialize, Serialize};
    pub use serde_json::{self, Value, json};
}
