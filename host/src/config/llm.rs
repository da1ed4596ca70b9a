//! `[llm]`: the language model providers plugins may call, and their limits.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::{Config, ConfigError, all_positive, invalid, is_http_url};

/// `[llm]`: an OpenAI-compatible chat-completions provider (`/v1/chat/completions`
/// with SSE streaming and tools), and any named ones in `[llm.providers.NAME]`.
/// Limits hold per plugin across every provider.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// The provider's API base, e.g. `http://127.0.0.1:8000/v1`; empty: no default model.
    pub base_url: String,
    pub model: String,
    /// The name of the environment variable holding the API key; empty: no key sent.
    pub api_key_env: String,
    /// Longest wait for the first byte of an answer, and between two of its chunks.
    pub idle_timeout_ms: u64,
    /// Longest one whole answer may take.
    pub timeout_ms: u64,
    /// Calls one plugin may start per minute, and tokens (in + out) it may use per day.
    pub calls_per_minute: u32,
    pub tokens_per_day: u64,
    /// Tokens one caller (a client address, across plugins) may spend per UTC day.
    pub tokens_per_day_per_caller: u64,
    /// Largest request the host sends (the conversation and tools), and the largest
    /// answer it keeps (text and tool calls: ids, names, arguments and each call's record).
    pub max_request_bytes: usize,
    pub max_answer_bytes: usize,
    /// Tool calls one answer may hold; one more ends the answer as failed.
    pub max_tool_calls_per_answer: usize,
    /// Answers being streamed at once across the node; more are refused as limited.
    pub max_concurrent_calls: usize,
    pub providers: BTreeMap<String, LlmProviderConfig>,
}

/// A named provider; limits and timeouts are `[llm]`'s.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmProviderConfig {
    pub base_url: String,
    pub model: String,
    #[serde(default)]
    pub api_key_env: String,
}

impl LlmConfig {
    /// The provider a plugin names (`None`: the default), when configured.
    pub fn provider(&self, name: Option<&str>) -> Option<LlmProviderConfig> {
        match name {
            None | Some(DEFAULT_PROVIDER) if !self.base_url.is_empty() => Some(LlmProviderConfig {
                base_url: self.base_url.clone(),
                model: self.model.clone(),
                api_key_env: self.api_key_env.clone(),
            }),
            None | Some(DEFAULT_PROVIDER) => None,
            Some(name) => self.providers.get(name).cloned(),
        }
    }

    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        let defaults = std::iter::once((
            "llm.base_url",
            "llm.model",
            "llm.api_key_env",
            self.provider(None),
        ));
        let named = self
            .providers
            .values()
            .map(|p| ("llm.providers", "llm.providers", "llm.providers", Some(p.clone())));
        for name in self.providers.keys() {
            if name == DEFAULT_PROVIDER || name.is_empty() || name.len() > 64 {
                return Err(invalid(
                    "llm.providers",
                    format!("{name:?} cannot name a provider (1-64 bytes, not \"{DEFAULT_PROVIDER}\")"),
                ));
            }
        }
        for (url_key, model_key, key_env_key, provider) in defaults.chain(named) {
            let Some(provider) = provider else { continue };
            if !is_http_url(&provider.base_url) {
                return Err(invalid(
                    url_key,
                    format!("{:?} must be an http(s) URL", provider.base_url),
                ));
            }
            if provider.model.is_empty() {
                return Err(invalid(model_key, "name the model the provider serves"));
            }
            if !provider.api_key_env.is_empty() && std::env::var_os(&provider.api_key_env).is_none() {
                return Err(invalid(
                    key_env_key,
                    format!("the environment variable {} is not set", provider.api_key_env),
                ));
            }
        }
        all_positive(&[
            ("llm.idle_timeout_ms", self.idle_timeout_ms),
            ("llm.timeout_ms", self.timeout_ms),
            ("llm.calls_per_minute", u64::from(self.calls_per_minute)),
            ("llm.tokens_per_day", self.tokens_per_day),
            ("llm.tokens_per_day_per_caller", self.tokens_per_day_per_caller),
            ("llm.max_request_bytes", self.max_request_bytes as u64),
            ("llm.max_answer_bytes", self.max_answer_bytes as u64),
            (
                "llm.max_tool_calls_per_answer",
                self.max_tool_calls_per_answer as u64,
            ),
            ("llm.max_concurrent_calls", self.max_concurrent_calls as u64),
        ])
    }
}

/// The name a plugin's capabilities give the `[llm]` provider itself.
pub const DEFAULT_PROVIDER: &str = "default";
