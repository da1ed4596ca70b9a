//! Rendering the prompts plugins declare (their `capabilities`' `prompts`)
//! through their optional `agora:node/prompts` export, for MCP's `prompts/get`.
//!
//! **Why here, not in the MCP transport.** A render is a call into a plugin:
//! it takes a call slot, an instance under the plugin's instance policy (fresh,
//! or leased from its warm pool) and the same time, memory and output limits
//! as `run-tool`, through the one call path ([`Runtime::call_instance`]). The
//! transport only maps the outcome to its wire shape.
//!
//! **What is checked.** Before the plugin runs: the prompt is declared, every
//! required argument is given and none that is not declared. After: the
//! answer is at most the caller's byte bound and is exactly
//! `{"description"?, "messages": [{"role": "user"|"assistant", "text"}]}` —
//! a plugin's answer is untrusted input like its manifest, so a malformed one
//! is the plugin's failure, never passed on half-read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Deserialize;

use super::exchange::Exchange;
use super::{InvokeError, LoadedPlugin, Runtime, instance};

/// A rendered prompt, as the plugin answered it and the host checked it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenderedPrompt {
    #[serde(default)]
    pub description: Option<String>,
    pub messages: Vec<PromptMessage>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptMessage {
    pub role: PromptRole,
    pub text: String,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptRole {
    User,
    Assistant,
}

impl PromptRole {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptRole::User => "user",
            PromptRole::Assistant => "assistant",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("Unknown prompt: {0:?} (prompts/list lists this node's)")]
    Unknown(String),
    #[error("prompt {prompt:?} needs the argument {argument:?}")]
    MissingArgument { prompt: String, argument: String },
    #[error("prompt {prompt:?} has no argument {argument:?}")]
    UnknownArgument { prompt: String, argument: String },
    #[error("prompt {prompt:?} failed: {message}")]
    Failed { prompt: String, message: String },
    #[error("prompt {prompt:?} was not rendered as a prompt: {reason}")]
    Malformed { prompt: String, reason: String },
    #[error("prompt {prompt:?} rendered {size} bytes, over the node's {limit}-byte limit")]
    TooLarge {
        prompt: String,
        size: usize,
        limit: usize,
    },
    #[error("prompt {prompt:?} could not run: {source}")]
    Invoke { prompt: String, source: InvokeError },
}

impl PromptError {
    /// The caller asked for what is not there: nothing ran.
    pub fn is_callers(&self) -> bool {
        matches!(
            self,
            PromptError::Unknown(_)
                | PromptError::MissingArgument { .. }
                | PromptError::UnknownArgument { .. }
        )
    }
}

impl Runtime {
    /// Render the prompt `name` with `arguments` by the plugin declaring it:
    /// at most `max_bytes` of answer.
    pub async fn render_prompt(
        &self,
        name: &str,
        arguments: &BTreeMap<String, String>,
        max_bytes: usize,
        exchange: Exchange,
    ) -> Result<RenderedPrompt, PromptError> {
        let registry = self.registry();
        let plugin = registry
            .prompt(name)
            .ok_or_else(|| PromptError::Unknown(name.to_string()))?
            .clone();
        check_arguments(&plugin, name, arguments)?;
        let started = Instant::now();
        let result = self
            .run_get_prompt(&plugin, name, arguments, max_bytes, exchange)
            .await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(PromptError::Invoke { source, .. }) => source.outcome(),
            Err(_) => "failure",
        };
        self.inner
            .metrics
            .observe_outcome("prompt", &plugin.manifest.name, outcome, started.elapsed());
        result
    }

    async fn run_get_prompt(
        &self,
        plugin: &Arc<LoadedPlugin>,
        name: &str,
        arguments: &BTreeMap<String, String>,
        max_bytes: usize,
        exchange: Exchange,
    ) -> Result<RenderedPrompt, PromptError> {
        let invoke = |source| PromptError::Invoke {
            prompt: name.to_string(),
            source,
        };
        let arguments = serde_json::to_string(arguments).unwrap_or_else(|_| "{}".into());
        let mut call_instance = self.call_instance(plugin, exchange).await.map_err(invoke)?;
        let outcome = call_instance
            .call_get_prompt(&plugin.exports, name, &arguments)
            .await;
        let store = call_instance.store();
        instance::drain_stdio(store);
        let (result, clean) = match outcome {
            Ok(Some(Ok(text))) => (parse_rendered(name, &text, max_bytes), true),
            Ok(Some(Err(message))) => (
                Err(PromptError::Failed {
                    prompt: name.to_string(),
                    // Reaches the client: never with a secret the call read.
                    message: super::settings::redact(&message, &store.data().secrets_read).into_owned(),
                }),
                true,
            ),
            Ok(None) => (
                Err(PromptError::Failed {
                    prompt: name.to_string(),
                    message: "the plugin does not export agora:node/prompts".into(),
                }),
                true,
            ),
            Err(error) => (Err(invoke(instance::classify(store, error))), false),
        };
        self.release(plugin, call_instance, clean);
        result
    }
}

fn check_arguments(
    plugin: &LoadedPlugin,
    name: &str,
    arguments: &BTreeMap<String, String>,
) -> Result<(), PromptError> {
    let declared = plugin
        .capabilities
        .prompt(name)
        .ok_or_else(|| PromptError::Unknown(name.to_string()))?;
    if let Some(missing) = declared
        .arguments
        .iter()
        .find(|argument| argument.required && !arguments.contains_key(&argument.name))
    {
        return Err(PromptError::MissingArgument {
            prompt: name.to_string(),
            argument: missing.name.clone(),
        });
    }
    if let Some(unknown) = arguments
        .keys()
        .find(|given| !declared.arguments.iter().any(|argument| &argument.name == *given))
    {
        return Err(PromptError::UnknownArgument {
            prompt: name.to_string(),
            argument: unknown.chars().take(64).collect(),
        });
    }
    Ok(())
}

fn parse_rendered(name: &str, text: &str, max_bytes: usize) -> Result<RenderedPrompt, PromptError> {
    if text.len() > max_bytes {
        return Err(PromptError::TooLarge {
            prompt: name.to_string(),
            size: text.len(),
            limit: max_bytes,
        });
    }
    let malformed = |reason: String| PromptError::Malformed {
        prompt: name.to_string(),
        reason,
    };
    let rendered: RenderedPrompt = serde_json::from_str(text).map_err(|error| {
        malformed(format!(
            "expected {{\"description\"?, \"messages\": [{{\"role\": \"user\"|\"assistant\", \"text\"}}]}}: {error}"
        ))
    })?;
    if rendered.messages.is_empty() {
        return Err(malformed("it has no messages".into()));
    }
    Ok(rendered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_render_is_exactly_the_documented_shape_within_its_bound() {
        let good = r#"{"description": "d", "messages": [{"role": "user", "text": "3 km"},
            {"role": "assistant", "text": "ok"}]}"#;
        let rendered = parse_rendered("p", good, 1024).unwrap();
        assert_eq!(rendered.messages[1].role.as_str(), "assistant");
        assert_eq!(rendered.description.as_deref(), Some("d"));
        for bad in [
            r#"{"messages": []}"#,
            r#"{"messages": [{"role": "system", "text": "x"}]}"#,
            r#"{"messages": [{"role": "user"}]}"#,
            r#"{"messages": [{"role": "user", "text": "x", "image": "y"}]}"#,
            "not json",
        ] {
            assert!(
                matches!(parse_rendered("p", bad, 1024), Err(PromptError::Malformed { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_rendered("p", good, 16),
            Err(PromptError::TooLarge { .. })
        ));
    }
}
