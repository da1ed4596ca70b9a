//! A builder for the manifest a plugin declares (`types.manifest` in the WIT).

use crate::bindings::agora::node::types as wit;
use crate::{EnvelopeResource, InstancePolicy, MessageModel, Risk, Tool, WarmPool};

/// What a plugin serves. Start with [`Manifest::new`] and chain what applies.
pub struct Manifest {
    inner: wit::Manifest,
}

impl Manifest {
    /// A manifest for plugin `name` at `version` that serves nothing yet.
    pub fn new(name: &str, version: &str) -> Self {
        Manifest {
            inner: wit::Manifest {
                name: name.to_string(),
                version: version.to_string(),
                description: String::new(),
                protocols: Vec::new(),
                default_agora: false,
                accepts_any_document: false,
                resources: Vec::new(),
                models: Vec::new(),
                leagues: Vec::new(),
                assistant: false,
                tools: Vec::new(),
                instance: InstancePolicy::Fresh,
            },
        }
    }

    /// What the plugin does, in a sentence.
    pub fn description(mut self, text: &str) -> Self {
        self.inner.description = text.to_string();
        self
    }

    /// Serve an Agora protocol document (its full text; the host hashes it).
    pub fn protocol(mut self, document: &str) -> Self {
        self.inner.protocols.push(document.to_string());
        self
    }

    /// Serve Agora requests that name no protocol.
    pub fn default_agora(mut self) -> Self {
        self.inner.default_agora = true;
        self
    }

    /// Serve any protocol document a request brings along (after the host verified its hash).
    pub fn accepts_any_document(mut self) -> Self {
        self.inner.accepts_any_document = true;
        self
    }

    /// Offer a signed-envelope resource; `negotiated` ones are quoted before they run.
    pub fn resource(mut self, name: &str, description: &str, negotiated: bool) -> Self {
        self.inner.resources.push(EnvelopeResource {
            name: name.to_string(),
            description: description.to_string(),
            negotiated,
        });
        self
    }

    /// Handle a uAgents message model given by its JSON schema.
    pub fn model(mut self, name: &str, schema: &str) -> Self {
        self.inner.models.push(MessageModel {
            name: name.to_string(),
            schema: schema.to_string(),
        });
        self
    }

    /// Play in an arena league.
    pub fn league(mut self, league: &str) -> Self {
        self.inner.leagues.push(league.to_string());
        self
    }

    /// Serve HAI chat sessions.
    pub fn assistant(mut self) -> Self {
        self.inner.assistant = true;
        self
    }

    /// Offer a tool; `parameters` is its JSON Schema as text (an object schema:
    /// the host checks MCP clients' arguments against it before the tool runs).
    /// A low-risk tool that only reads says so with `"x-read-only": true` at the
    /// top of that schema; MCP clients then see it as `readOnlyHint`.
    pub fn tool(mut self, name: &str, description: &str, parameters: &str, risk: Risk) -> Self {
        self.inner.tools.push(Tool {
            name: name.to_string(),
            description: description.to_string(),
            parameters: parameters.to_string(),
            risk,
        });
        self
    }

    /// Reuse instances between requests instead of a fresh one per request.
    pub fn warm(mut self, max_invocations: u32, max_concurrency: u32, idle_timeout_ms: u32) -> Self {
        self.inner.instance = InstancePolicy::Warm(WarmPool {
            max_invocations,
            max_concurrency,
            idle_timeout_ms,
        });
        self
    }

    #[doc(hidden)]
    pub fn into_wit(self) -> wit::Manifest {
        self.inner
    }
}
