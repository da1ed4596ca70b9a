//! What a plugin asks of the node beyond answering messages: a language model,
//! schedules, and the origins its outgoing HTTP may reach; and what MCP clients
//! are shown of it: its prompts and the media type of its protocol documents. The node reads this once, with the manifest, and refuses
//! what is not declared (a model call) or cannot be given (a key it does not know).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::prompt::Prompt;

/// Declared with [`crate::Plugin::capabilities`]; start with [`Capabilities::new`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct Capabilities {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    llm: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    schedules: Vec<Schedule>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed_hosts: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    prompts: Vec<Prompt>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    documents: BTreeMap<String, DocumentType>,
}

#[derive(Debug, Clone, Serialize)]
struct DocumentType {
    mime_type: String,
}

#[derive(Debug, Clone, Serialize)]
struct Schedule {
    name: String,
    every: String,
}

impl Capabilities {
    /// Nothing beyond answering messages.
    pub fn new() -> Self {
        Self::default()
    }

    /// Use the language model `provider`: `"default"` for the node's `[llm]`,
    /// or a name of its `[llm.providers]`.
    pub fn llm(mut self, provider: &str) -> Self {
        self.llm.push(provider.to_string());
        self
    }

    /// Have the node call [`crate::Plugin::tick`] with `name` on a schedule:
    /// `every` is an interval (`"30s"`, `"5m"`, `"1h 30m"`; at least a second)
    /// or a cron pattern in UTC (`"*/5 * * * *"`). One run at a time: a tick due
    /// while the previous run still goes is skipped.
    pub fn every(mut self, name: &str, every: &str) -> Self {
        self.schedules.push(Schedule {
            name: name.to_string(),
            every: every.to_string(),
        });
        self
    }

    /// Let the plugin's outgoing HTTP (`wasi:http`, e.g. `wstd::http::Client`) reach
    /// `origin`: `"https://api.example.org"` or `"http://127.0.0.1:9000"` (scheme, host,
    /// port; no path, no wildcard). The node's operator must list the host in
    /// `outbound.allowed_hosts` too; anything else is refused with an error naming it.
    /// Settings may be read here (`host::config_get`), so the origin can be configured.
    pub fn allow_host(mut self, origin: &str) -> Self {
        self.allowed_hosts.push(origin.to_string());
        self
    }

    /// Offer `prompt` to MCP clients (`prompts/list`); the node renders it with
    /// [`crate::Plugin::get_prompt`]. Names are unique across the node's plugins.
    pub fn prompt(mut self, prompt: Prompt) -> Self {
        self.prompts.push(prompt);
        self
    }

    /// The media type MCP clients are shown for the protocol document whose SHA1
    /// (lower-case hex) is `document`, or for every document with `"default"`:
    /// `"text/plain"`, say. Documents are `text/markdown` unless declared.
    pub fn document_type(mut self, document: &str, mime_type: &str) -> Self {
        self.documents.insert(
            document.to_string(),
            DocumentType {
                mime_type: mime_type.to_string(),
            },
        );
        self
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}
