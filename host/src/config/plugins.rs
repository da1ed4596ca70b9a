//! `[plugins]`: the runtime's bounds, and each plugin's own settings and secrets.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{Config, ConfigError, all_positive, invalid};

/// `[plugins]`: the runtime's bounds, and each plugin's own settings as
/// `[plugins.NAME.config]` and `[plugins.NAME.secrets]`. Unknown keys are not
/// denied by serde here (they are plugin names); [`PluginsConfig::read_settings`]
/// refuses one that is not a plugin's tables, naming it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PluginsConfig {
    /// Folder of `.wasm` plugins to serve; empty means `{data_dir}/plugins`.
    pub dir: PathBuf,
    /// Compiled-artifact cache; empty means `{data_dir}/cache`.
    pub cache_dir: PathBuf,
    /// Size the compile cache is trimmed to, least recently used first; entries
    /// of loaded plugins are never evicted.
    pub cache_max_mb: u64,
    /// Largest `.wasm` file accepted.
    pub max_file_mb: u64,
    /// Linear memory one instance may grow to.
    pub max_memory_mb: u64,
    /// Wasm execution time one call may use (host waits, like approvals, do not count).
    pub call_timeout_ms: u64,
    /// Largest reply a plugin may return.
    pub max_output_bytes: usize,
    /// Events one call may emit, and the largest one.
    pub max_events_per_call: u32,
    pub max_event_bytes: usize,
    /// Plugin instances alive at once across the node (the pooling allocator's size).
    pub max_instances: u32,
    /// Plugin calls in flight; callers beyond wait at most `queue_timeout_ms`, then get "overloaded".
    pub max_concurrent_calls: usize,
    pub queue_timeout_ms: u64,
    /// Quiet period after a file change before it is reloaded.
    pub reload_debounce_ms: u64,
    /// On a shared store: serve the fleet's plugin set and publish this folder's changes to it.
    pub fleet: bool,
    /// How deep tool calls may nest (a tool calling a tool…).
    pub max_tool_depth: u32,
    /// Key-value store bounds per plugin.
    pub max_kv_key_bytes: usize,
    pub max_kv_value_bytes: usize,
    /// Bytes of a plugin's stdout/stderr copied to the log per call.
    pub max_stdio_bytes: usize,
    /// Calls whose instance may be parked, waiting without a call slot for a
    /// human's approval (or an outbound call), across the node; a tool call that
    /// needs an approval beyond it fails. Held to half of `max_instances`, so
    /// parked calls cannot take every pooled instance.
    pub max_parked_calls: usize,
    /// `host.log` lines, and bytes over all of them, one call may write; the rest is dropped and counted.
    pub max_log_lines_per_call: u32,
    pub max_log_bytes_per_call: usize,
    /// Plugin source crates `agora-node dev` rebuilds on save.
    pub sources_dir: PathBuf,
    /// Each plugin's settings, by plugin name (`host.config-get`), read from `raw_settings`.
    #[serde(skip)]
    pub settings: BTreeMap<String, PluginSettings>,
    /// Every `[plugins]` key that is none of the above: a plugin's name and its tables,
    /// read into `settings` by [`Config::load`] with errors that name the key.
    #[serde(flatten)]
    pub raw_settings: BTreeMap<String, serde_json::Value>,
}

/// One plugin's settings: plain values, and secrets named by where they are read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSettings {
    /// Values the plugin reads with `config-get`; numbers and booleans as their JSON text.
    #[serde(default)]
    pub config: BTreeMap<String, serde_json::Value>,
    /// Secrets, read when the plugin asks (so a rotated file is seen at once) and
    /// redacted from whatever the plugin logs.
    #[serde(default)]
    pub secrets: BTreeMap<String, SecretSource>,
}

/// Where a secret is read: `{ env = "NAME" }` or `{ file = "/path" }`. The value
/// itself never appears in the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
pub enum SecretSource {
    Env(String),
    File(PathBuf),
}

impl PluginsConfig {
    /// Read each plugin's tables; a key that is no bound and no plugin's tables
    /// (a misspelt bound, say) is refused by its name.
    pub(super) fn read_settings(&mut self) -> Result<(), ConfigError> {
        for (name, value) in &self.raw_settings {
            if !value.is_object() {
                return Err(invalid(
                    "plugins",
                    format!(
                        "unknown key `plugins.{name}` (a plugin's settings are the tables \
                         [plugins.{name}.config] and [plugins.{name}.secrets])"
                    ),
                ));
            }
            let settings: PluginSettings = serde_json::from_value(value.clone())
                .map_err(|e| invalid("plugins", format!("`plugins.{name}`: {e}")))?;
            self.settings.insert(name.clone(), settings);
        }
        Ok(())
    }

    fn validate_settings(&self) -> Result<(), ConfigError> {
        for (plugin, settings) in &self.settings {
            for (key, source) in &settings.secrets {
                let empty = match source {
                    SecretSource::Env(name) => name.is_empty(),
                    SecretSource::File(path) => path.as_os_str().is_empty(),
                };
                if empty || settings.config.contains_key(key) {
                    return Err(invalid(
                        "plugins.NAME.secrets",
                        format!(
                            "plugins.{plugin}.secrets.{key} must name an env variable or a file, \
                             and not also be in plugins.{plugin}.config"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The runtime's bounds that cannot work as given, and each plugin's secrets.
    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        all_positive(&[
            ("plugins.max_memory_mb", self.max_memory_mb),
            ("plugins.call_timeout_ms", self.call_timeout_ms),
            ("plugins.max_instances", u64::from(self.max_instances)),
            ("plugins.max_concurrent_calls", self.max_concurrent_calls as u64),
            ("plugins.max_parked_calls", self.max_parked_calls as u64),
        ])?;
        if self.max_memory_mb > 4096 {
            return Err(invalid(
                "plugins.max_memory_mb",
                "at most 4096 (a 32-bit linear memory)",
            ));
        }
        self.validate_settings()
    }
}
