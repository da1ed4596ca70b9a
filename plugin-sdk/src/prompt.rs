//! Prompts a plugin offers MCP clients: declared with
//! [`crate::Capabilities::prompt`], rendered by [`crate::Plugin::get_prompt`].
//!
//! The node checks a render's arguments before the plugin runs (every required
//! one is given, none undeclared), so `get_prompt` reads them without checking
//! again; what it answers is checked and bounded by the node too.

use std::collections::BTreeMap;

use serde::Serialize;

/// A prompt template (MCP's `Prompt`): `Prompt::new("convert", "…").argument(…)`.
#[derive(Debug, Clone, Serialize)]
pub struct Prompt {
    name: String,
    description: String,
    arguments: Vec<PromptArgument>,
}

#[derive(Debug, Clone, Serialize)]
struct PromptArgument {
    name: String,
    description: String,
    required: bool,
}

impl Prompt {
    /// The prompt `name` (like a tool's name: a-z, 0-9, `-_.:/`), described for people.
    pub fn new(name: &str, description: &str) -> Self {
        Prompt {
            name: name.to_string(),
            description: description.to_string(),
            arguments: Vec::new(),
        }
    }

    /// An argument the client fills in (a string); a `required` one is never missing
    /// from [`PromptArguments`].
    pub fn argument(mut self, name: &str, description: &str, required: bool) -> Self {
        self.arguments.push(PromptArgument {
            name: name.to_string(),
            description: description.to_string(),
            required,
        });
        self
    }
}

/// The arguments of one render, by name.
pub type PromptArguments = BTreeMap<String, String>;

/// What [`crate::Plugin::get_prompt`] answers: messages for a model, in order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RenderedPrompt {
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    messages: Vec<PromptMessage>,
}

#[derive(Debug, Clone, Serialize)]
struct PromptMessage {
    role: &'static str,
    text: String,
}

impl RenderedPrompt {
    /// No messages yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// What this render is, for people.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// A message from the user.
    pub fn user(mut self, text: impl Into<String>) -> Self {
        self.messages.push(PromptMessage {
            role: "user",
            text: text.into(),
        });
        self
    }

    /// A message from the assistant (an example answer, say).
    pub fn assistant(mut self, text: impl Into<String>) -> Self {
        self.messages.push(PromptMessage {
            role: "assistant",
            text: text.into(),
        });
        self
    }

    pub(crate) fn to_json(&self) -> Result<String, String> {
        serde_json::to_string(self).map_err(|e| format!("cannot encode the prompt: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_and_its_render_are_the_json_the_node_reads() {
        let declared = crate::Capabilities::new()
            .prompt(Prompt::new("convert", "Convert a quantity.").argument("quantity", "e.g. 3 km", true))
            .document_type("default", "text/plain");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&declared.to_json()).unwrap(),
            serde_json::json!({
                "prompts": [{"name": "convert", "description": "Convert a quantity.",
                    "arguments": [{"name": "quantity", "description": "e.g. 3 km", "required": true}]}],
                "documents": {"default": {"mime_type": "text/plain"}},
            })
        );
        let rendered = RenderedPrompt::new()
            .description("d")
            .user("3 km")
            .assistant("ok");
        assert_eq!(
            rendered.to_json().unwrap(),
            r#"{"description":"d","messages":[{"role":"user","text":"3 km"},{"role":"assistant","text":"ok"}]}"#
        );
    }
}
