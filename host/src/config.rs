//! Node configuration: built-in defaults ← `config/agora.toml` (or `--config`)
//! ← `AGORA_…` environment variables (nested keys as `AGORA_SECTION__KEY`) ←
//! command-line flags. Every key and its default is documented in
//! `config/agora.toml`; a bad value stops start-up with the key named.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// The default configuration, embedded so a fresh checkout runs with no files.
pub const DEFAULT_TOML: &str = include_str!("../../config/agora.toml");

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}", describe_figment(.0))]
    Figment(#[from] Box<figment::Error>),
    #[error("configuration key `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

/// Every problem figment found, each naming its key as `section.key` and where the value came from.
fn describe_figment(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|error| {
            let key = error.path.join(".").to_lowercase();
            let source = error
                .metadata
                .as_ref()
                .map(|m| format!(" (from {})", m.name))
                .unwrap_or_default();
            if key.is_empty() {
                format!("configuration: {}{source}", error.kind)
            } else {
                format!("configuration key `{key}`: {}{source}", error.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The shared HTTP listener for every transport without its own.
    pub listen: String,
    /// Folder for sled state, the compile cache and (by default) plugins.
    pub data_dir: PathBuf,
    pub log_format: LogFormat,
    pub log_level: String,
    pub plugins: PluginsConfig,
    pub http: HttpConfig,
    pub tools: ToolsConfig,
    pub outbound: OutboundConfig,
    pub store: StoreConfig,
    pub identity: IdentityConfig,
    pub agora: AgoraConfig,
    pub envelopes: EnvelopesConfig,
    pub uagents: UagentsConfig,
    pub arena: ArenaConfig,
    pub hai: HaiConfig,
    pub a2a: A2aConfig,
    pub mcp: McpConfig,
    pub llm: LlmConfig,
    pub tls: TlsConfig,
}

/// TLS for every listener (inbound) and extra trust roots for every outbound call.
///
/// There is deliberately no key that turns certificate or host-name verification off:
/// a private deployment adds its CA with `ca_file` instead.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain served by every listener; empty: plain HTTP.
    pub cert_file: PathBuf,
    /// PEM private key of `cert_file`; set both or neither.
    pub key_file: PathBuf,
    /// PEM bundle of CA certificates trusted for outbound https/wss in addition to
    /// the system's roots; empty: the system's roots only.
    pub ca_file: PathBuf,
}

impl TlsConfig {
    /// Whether the listeners serve TLS.
    pub fn serves_tls(&self) -> bool {
        !self.cert_file.as_os_str().is_empty()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.cert_file.as_os_str().is_empty() != self.key_file.as_os_str().is_empty() {
            return Err(invalid(
                "tls.cert_file",
                "set both tls.cert_file and tls.key_file, or neither",
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

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

    fn validate(&self) -> Result<(), ConfigError> {
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
        positive("llm.idle_timeout_ms", self.idle_timeout_ms)?;
        positive("llm.timeout_ms", self.timeout_ms)?;
        positive("llm.calls_per_minute", u64::from(self.calls_per_minute))?;
        positive("llm.tokens_per_day", self.tokens_per_day)?;
        positive("llm.tokens_per_day_per_caller", self.tokens_per_day_per_caller)?;
        positive("llm.max_request_bytes", self.max_request_bytes as u64)?;
        positive("llm.max_answer_bytes", self.max_answer_bytes as u64)?;
        positive(
            "llm.max_tool_calls_per_answer",
            self.max_tool_calls_per_answer as u64,
        )?;
        positive("llm.max_concurrent_calls", self.max_concurrent_calls as u64)
    }
}

/// The name a plugin's capabilities give the `[llm]` provider itself.
pub const DEFAULT_PROVIDER: &str = "default";

impl PluginsConfig {
    /// Read each plugin's tables; a key that is no bound and no plugin's tables
    /// (a misspelt bound, say) is refused by its name.
    fn read_settings(&mut self) -> Result<(), ConfigError> {
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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// The names browsers reach the node by (`host` or `host:port`), for the
    /// browser policy's `Host` check; `config/agora.toml` says which others count.
    pub public_hosts: Vec<String>,
    /// How long a caller over an admission bound waits for a place before it is refused.
    pub admission_wait_ms: u64,
    pub max_body_bytes: usize,
    pub request_timeout_ms: u64,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace_ms: u64,
    /// The request line and headers must arrive within this; it also bounds how
    /// long an idle keep-alive connection waits for its next request.
    pub header_timeout_ms: u64,
    /// Largest request line plus headers; beyond it 431.
    pub max_header_bytes: usize,
    /// Open connections across every listener (WebSockets included); more are closed at once.
    pub max_connections: usize,
    /// Open connections from one IP address; more are closed at once.
    pub max_connections_per_ip: usize,
    /// How much of a refused (over-limit or unread) body is read and thrown away so the
    /// client, still writing, gets to read the refusal instead of a broken pipe.
    pub discard_body_bytes: u64,
    pub discard_timeout_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Tools at or above this risk need a human's approval: low, medium, high, critical.
    pub approval_threshold: String,
    pub approval_timeout_ms: u64,
    /// Calls one caller (client address or token) may park waiting for approvals.
    pub max_waiting_approvals_per_client: usize,
    /// Calls one transport's callers may park waiting for approvals, together.
    pub max_waiting_approvals_per_transport: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundConfig {
    /// Hosts (`host` or `host:port`) plugins and the node may call.
    pub allowed_hosts: Vec<String>,
    /// Internal address ranges (CIDRs, `10.0.0.0/8`) the node may reach through
    /// a name or an unlisted IP; otherwise only an IP literal in `allowed_hosts`
    /// (or a configured endpoint) reaches an internal address.
    #[serde(default)]
    pub allowed_private: Vec<String>,
    pub timeout_ms: u64,
    pub max_response_bytes: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sled` (embedded, one node; the default) or `postgres` (one database
    /// shared by a fleet of nodes, `postgres_url`).
    pub backend: StoreBackend,
    /// `postgres://user:password@host:port/database` (also as
    /// `AGORA_STORE__POSTGRES_URL`); used when `backend = "postgres"`.
    pub postgres_url: String,
    /// Connections this node keeps to the database.
    pub postgres_pool_size: usize,
    /// Longest wait for a connection or a statement; past it the request is
    /// answered 503 (try again) rather than held.
    pub postgres_timeout_ms: u64,
    /// How often expired entries are swept.
    pub sweep_interval_secs: u64,
    /// Live replay claims (one per signed envelope or uAgents message within
    /// its window) the embedded store holds in memory, about 40 bytes each;
    /// beyond them claims go to disk, slower. PostgreSQL keeps them in the database.
    pub max_claims_in_memory: usize,
    /// Bytes of keyed entries (a signed request's state, read back only by
    /// STATUS) the embedded store holds in memory behind its journal, each
    /// its value plus 64; beyond them entries go to disk, slower. 0 keeps them
    /// all on disk. PostgreSQL keeps them in the database.
    pub max_keyed_bytes_in_memory: usize,
    /// Serialized bytes one conversation's or session's history may hold; an
    /// append beyond it is refused with the transport's "full" error.
    pub max_history_bytes: u64,
    /// One read of a history (a plugin's `history()`, a page of the HAI history
    /// endpoint): at most this many entries and bytes.
    pub history_page_entries: usize,
    pub history_page_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    Sled,
    Postgres,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// Ed25519 key file (`agora-node keygen`); empty means `{data_dir}/node.key`, created on first start.
    pub key_file: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgoraConfig {
    pub enabled: bool,
    /// Own listener for this transport; empty shares `listen`.
    pub listen: String,
    pub path: String,
    pub conversation_ttl_secs: u64,
    /// Plugin (by name) serving requests without a protocol; empty picks the one whose manifest says `default-agora`.
    pub default_plugin: String,
    /// Speak the reference library's dialect (`{"status":"error","message":…}`, root path `/`).
    pub reference_dialect: bool,
    /// Hosts `protocolSources` URLs may be fetched from; none by default.
    pub source_hosts: Vec<String>,
    /// Most `protocolSources` entries one request may carry.
    pub max_sources: usize,
    /// Largest protocol document (decoded) the node reads from a source.
    pub max_document_bytes: usize,
    /// History entries kept per conversation (two per round); a conversation
    /// that reaches it must be ended and a new one started.
    pub max_history_entries: usize,
    /// Live multi-round conversations across every client; beyond it 503 + Retry-After.
    pub max_conversations: usize,
    /// Live conversations one client address (IPv6: its /64) may hold; beyond it 429.
    pub max_conversations_per_client: usize,
    /// Conversations one client address may open per minute (a token bucket); beyond it 429.
    pub conversations_per_client_per_minute: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopesConfig {
    pub enabled: bool,
    pub listen: String,
    /// `POST {path}` takes one envelope; `GET {path}/ws` is the WebSocket binding.
    pub path: String,
    /// Accepted clock difference for envelope timestamps, both directions; also the replay window.
    pub max_skew_secs: u64,
    /// Sender ids allowed to talk to the node; empty allows everyone.
    pub allowed_senders: Vec<String>,
    /// Envelopes one sender may send per minute before getting 429.
    pub rate_limit_per_minute: u32,
    /// Cap on a resource's run (and on a REQUEST's own `timeout`); beyond it the node answers 408.
    pub request_timeout_ms: u64,
    /// Plugin-running envelopes (REQUEST, ACCEPT) in flight at once; beyond it the node answers 503.
    pub max_in_flight: usize,
    /// Longest offer lifetime; a plugin's quoted `ttl` is clamped to it.
    pub max_offer_ttl_ms: u64,
    /// How long a request's STATUS is kept after its last change.
    pub status_ttl_secs: u64,
    /// Envelopes one WebSocket connection may have in progress at once.
    pub ws_max_pending: usize,
    /// A WebSocket that sends no frame for this long while nothing is in progress is closed;
    /// also the longest a reply frame may wait for a client that does not read.
    pub ws_idle_timeout_secs: u64,
    /// Senders (public keys) the rate limiter tracks; beyond it the least recently seen
    /// one-shot sender is forgotten first, established ones last.
    pub max_tracked_senders: usize,
    /// Largest REQUEST `params` (serialized bytes); larger is ERROR 400.
    pub max_params_bytes: usize,
    /// Live (unexpired, unaccepted) offers one sender may hold; beyond it ERROR 429.
    pub max_offers_per_sender: usize,
    /// Bytes of offer params held by all live offers together; beyond it ERROR 503.
    pub max_offer_bytes_total: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UagentsConfig {
    pub enabled: bool,
    pub listen: String,
    /// Seed phrase of the node's uAgents identity; empty means a key file under data_dir.
    pub seed: String,
    /// The URL peers should POST envelopes to (`…/submit`), advertised in `/agent_info`
    /// and registered in the Almanac; empty: `http://{listen}/submit`. `endpoint` is its
    /// older name, still read. Not in the embedded defaults, so that either name can be
    /// set by a file or the environment without the other clashing with a default.
    #[serde(default, alias = "endpoint")]
    pub public_endpoint: String,
    /// Base URL of an Almanac API (uagents' `almanac_api`, e.g.
    /// `https://agentverse.ai/v1/almanac`); empty: no registration, no lookups.
    pub almanac_api: String,
    /// agent1… address → `http://…/submit` for asynchronous replies.
    pub peers: BTreeMap<String, String>,
    /// Least time a replay entry is kept; an envelope's entry is kept until its `expires` plus this.
    pub replay_window_secs: u64,
    pub delivery_retries: u32,
    /// Refuse envelopes without `expires` (uagents always sets it when sending).
    pub require_expires: bool,
    /// Furthest in the future an envelope's `expires` may be.
    pub max_expiry_secs: u64,
    /// Asynchronous replies queued or in flight at once; beyond it envelopes asking for
    /// one are refused with 503 before anything is recorded.
    pub max_pending_replies: usize,
    /// Send a reply to an Almanac-resolved endpoint only when `outbound.allowed_hosts`
    /// lists it; otherwise any public address (or one `outbound.allowed_private` allows).
    #[serde(default)]
    pub almanac_replies_allowed_hosts_only: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArenaConfig {
    pub enabled: bool,
    pub listen: String,
    pub path: String,
    pub agent_id: String,
    pub jwks_url: String,
    pub jwks_file: PathBuf,
    pub stream_url: String,
    pub max_concurrent: usize,
    pub audience: String,
    /// Sent as `Authorization: Bearer …` when the event stream connects; empty: none.
    pub stream_token: String,
    /// Live events buffered for the stream; beyond it the oldest are dropped.
    pub stream_buffer: usize,
    /// Shortest interval between two JWKS fetches caused by unknown `kid`s.
    pub jwks_min_refetch_ms: u64,
    /// The JWKS (URL or file) is reloaded this often, whatever tokens arrive.
    pub jwks_refresh_secs: u64,
    /// Required `iss` of every token; empty: `iss` is not checked.
    pub issuer: String,
}

impl ArenaConfig {
    /// The arena keys that cannot work as given.
    fn validate(&self) -> Result<(), ConfigError> {
        positive("arena.max_concurrent", self.max_concurrent as u64)?;
        positive("arena.stream_buffer", self.stream_buffer as u64)?;
        if !self.jwks_url.is_empty() && !self.jwks_file.as_os_str().is_empty() {
            return Err(invalid(
                "arena.jwks_url",
                "set either arena.jwks_url or arena.jwks_file, not both",
            ));
        }
        positive("arena.jwks_refresh_secs", self.jwks_refresh_secs)?;
        if !self.jwks_url.is_empty() {
            check_jwks_url(&self.jwks_url)?;
        }
        let stream_scheme_ok = self.stream_url.starts_with("ws://") || self.stream_url.starts_with("wss://");
        if !self.stream_url.is_empty() && !stream_scheme_ok {
            return Err(invalid("arena.stream_url", "must be a ws:// or wss:// URL"));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaiConfig {
    pub enabled: bool,
    pub listen: String,
    /// The WebSocket path; the browser client is served at `/`.
    pub path: String,
    /// Largest inbound WebSocket message; a bigger one closes the connection (1009).
    pub max_frame_bytes: usize,
    /// `user_message`s one session may send per minute.
    pub messages_per_minute: u32,
    /// Messages containing any of these words (case-insensitive, whole words) are refused.
    pub blocked_words: Vec<String>,
    /// Keep-alive ping period; a peer silent for two periods is disconnected.
    pub ping_interval_secs: u64,
    /// Frames queued for one connection; a client that falls further behind is disconnected.
    pub send_buffer_frames: usize,
    /// A session unused this long is forgotten with its history.
    pub session_ttl_secs: u64,
    /// History entries kept per session (messages, tool results, approvals).
    pub max_history_entries: usize,
    /// Web origins (`scheme://host[:port]`) allowed to open the WebSocket and read
    /// history besides the node's own; empty = same origin only. No `Origin` = allowed.
    pub allowed_origins: Vec<String>,
    /// When not empty, the WebSocket and the history endpoint require this token
    /// (`?token=` or `Authorization: Bearer`).
    pub auth_token: String,
    /// Sessions one client address may have stored (with their histories) until they lapse.
    pub max_stored_sessions_per_client: u64,
    /// History bytes one client address's stored sessions may hold before it may create no more.
    pub max_stored_session_bytes_per_client: u64,
    /// History bytes every client's stored sessions may hold together.
    pub max_stored_session_bytes: u64,
    /// Sessions kept in memory at once; when full, the least recently used idle one is dropped.
    pub max_live_sessions: usize,
    /// Live sessions one client address (an IPv4 address or an IPv6 /64) may hold.
    pub max_live_sessions_per_ip: usize,
    /// New sessions one client address may create per minute.
    pub new_sessions_per_ip_per_minute: u32,
}

/// Agent2Agent 1.0 (JSON-RPC binding); `config/agora.toml` explains each key.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aConfig {
    pub enabled: bool,
    pub listen: String,
    /// The JSON-RPC endpoint.
    pub path: String,
    /// Base URL clients reach the node at; empty: the first public host, else the listen address.
    pub public_url: String,
    /// Browser origins allowed to call besides the node's own.
    pub allowed_origins: Vec<String>,
    pub name: String,
    pub description: String,
    /// Plugin answering A2A messages; empty: the HAI assistant.
    pub default_plugin: String,
    /// When not empty, `POST {path}` requires `Authorization: Bearer <this>`.
    pub auth_token: String,
    pub max_body_bytes: usize,
    pub max_parts_per_message: usize,
    pub max_tasks_per_context: usize,
    /// Bytes of tasks one `ListTasks` page holds (past its first task).
    pub max_list_bytes: usize,
    pub max_running_tasks: usize,
    pub max_running_tasks_per_ip: usize,
    pub new_tasks_per_ip_per_minute: u32,
    pub stream_idle_timeout_ms: u64,
    pub task_ttl_secs: u64,
    pub max_history_entries: usize,
    /// Tasks one client address may have stored (live within `task_ttl_secs`).
    pub max_stored_tasks_per_client: u64,
    /// Bytes of stored tasks one client address may have.
    pub max_stored_task_bytes_per_client: u64,
    /// Bytes of stored tasks of every client together.
    pub max_stored_task_bytes: u64,
}

/// The Model Context Protocol: the node's tools served over Streamable HTTP, and
/// the MCP servers plugins may call; `config/agora.toml` explains each key.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    pub enabled: bool,
    pub listen: String,
    pub path: String,
    /// The `serverInfo.name` clients see.
    pub name: String,
    /// When not empty, every request needs `Authorization: Bearer <this>`.
    pub token: String,
    /// Serve a listener that is not loopback without a token.
    pub allow_anonymous: bool,
    /// Browser origins allowed to call; a request with any other `Origin` is refused.
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    /// At this bound a client holding fewer sessions evicts the busiest client's
    /// least recently used idle one (`transports::mcp::state`).
    pub max_sessions: usize,
    pub max_sessions_per_ip: usize,
    pub session_idle_timeout_ms: u64,
    pub max_calls_per_session: usize,
    pub page_size: usize,
    /// MCP servers plugins may call through `call-tool`, by name.
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// One MCP server plugins may call: `call-tool("<name>/<tool>", …)`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Its Streamable HTTP endpoint (http:// or https://).
    pub url: String,
    /// Sent as `Authorization: Bearer <token>` when not empty.
    #[serde(default)]
    pub token: String,
    /// The remote tools plugins may call; `["*"]` allows every tool the server lists.
    #[serde(default)]
    pub tools: Vec<String>,
}

/// `AGORA_*` variables as configuration keys (`__` nests). `AGORA_CLI_*` are
/// the client commands' own settings (`AGORA_CLI_UAGENTS_SEED`): with unknown
/// keys denied they would stop the node from starting, so they are skipped.
fn env_layer() -> Env {
    Env::prefixed("AGORA_")
        .filter(|key| !key.as_str().to_ascii_lowercase().starts_with("cli_"))
        .split("__")
}

/// Values given on the command line; only those set override the layers below.
#[derive(Debug, Default, Clone)]
pub struct CliOverrides {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub plugins_dir: Option<PathBuf>,
}

impl Config {
    /// Load the layered configuration. `file` replaces `config/agora.toml`.
    pub fn load(file: Option<&Path>, overrides: &CliOverrides) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        match file {
            Some(path) => {
                if !path.exists() {
                    return Err(invalid("--config", format!("{} does not exist", path.display())));
                }
                figment = figment.merge(Toml::file(path));
            }
            None => figment = figment.merge(Toml::file("config/agora.toml")),
        }
        figment = figment.merge(env_layer());
        if let Some(listen) = &overrides.listen {
            figment = figment.merge(Serialized::default("listen", listen));
        }
        if let Some(data_dir) = &overrides.data_dir {
            figment = figment.merge(Serialized::default("data_dir", data_dir));
        }
        if let Some(plugins_dir) = &overrides.plugins_dir {
            figment = figment.merge(Serialized::default("plugins.dir", plugins_dir));
        }
        Self::from_figment(figment)
    }

    /// The embedded defaults only (tests and tools).
    pub fn defaults() -> Config {
        Self::from_figment(Figment::from(Toml::string(DEFAULT_TOML)))
            .expect("the embedded default configuration is valid")
    }

    fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let mut config: Config = figment.extract().map_err(Box::new)?;
        config.plugins.read_settings()?;
        config.resolve_paths();
        config.validate()?;
        Ok(config)
    }

    fn resolve_paths(&mut self) {
        if self.plugins.dir.as_os_str().is_empty() {
            self.plugins.dir = self.data_dir.join("plugins");
        }
        if self.plugins.cache_dir.as_os_str().is_empty() {
            self.plugins.cache_dir = self.data_dir.join("cache");
        }
        if self.identity.key_file.as_os_str().is_empty() {
            self.identity.key_file = self.data_dir.join("node.key");
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        parse_listen("listen", &self.listen)?;
        for (key, listen) in [
            ("agora.listen", &self.agora.listen),
            ("envelopes.listen", &self.envelopes.listen),
            ("uagents.listen", &self.uagents.listen),
            ("arena.listen", &self.arena.listen),
            ("hai.listen", &self.hai.listen),
            ("a2a.listen", &self.a2a.listen),
            ("mcp.listen", &self.mcp.listen),
        ] {
            if !listen.is_empty() {
                parse_listen(key, listen)?;
            }
        }
        for (key, path) in [
            ("agora.path", &self.agora.path),
            ("envelopes.path", &self.envelopes.path),
            ("arena.path", &self.arena.path),
            ("hai.path", &self.hai.path),
            ("a2a.path", &self.a2a.path),
            ("mcp.path", &self.mcp.path),
        ] {
            if !path.starts_with('/') || path.contains(char::is_whitespace) {
                return Err(invalid(key, format!("{path:?} must be an absolute URL path")));
            }
        }
        if self.arena.path == self.agora.path && self.arena.listen == self.agora.listen {
            return Err(invalid(
                "arena.path",
                "clashes with agora.path on the same listener",
            ));
        }
        self.arena.validate()?;
        self.tls.validate()?;
        self.llm.validate()?;
        self.plugins.validate_settings()?;
        for (address, url) in &self.uagents.peers {
            if !crate::crypto::uagents::looks_like_agent_address(address) {
                return Err(invalid(
                    "uagents.peers",
                    format!("{address:?} is not an agent1… address"),
                ));
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    "uagents.peers",
                    format!("the endpoint of {address} must be an http(s) URL"),
                ));
            }
        }
        for (key, url) in [
            ("uagents.public_endpoint", &self.uagents.public_endpoint),
            ("uagents.almanac_api", &self.uagents.almanac_api),
        ] {
            if !url.is_empty() && !is_http_url(url) {
                return Err(invalid(key, format!("{url:?} must be an http(s) URL")));
            }
        }
        positive("uagents.replay_window_secs", self.uagents.replay_window_secs)?;
        positive(
            "tools.max_waiting_approvals_per_client",
            self.tools.max_waiting_approvals_per_client as u64,
        )?;
        positive(
            "tools.max_waiting_approvals_per_transport",
            self.tools.max_waiting_approvals_per_transport as u64,
        )?;
        if crate::vocab::Risk::parse(&self.tools.approval_threshold).is_none() {
            return Err(invalid(
                "tools.approval_threshold",
                "must be one of low, medium, high, critical",
            ));
        }
        positive("plugins.max_memory_mb", self.plugins.max_memory_mb)?;
        positive("plugins.call_timeout_ms", self.plugins.call_timeout_ms)?;
        positive("plugins.max_instances", u64::from(self.plugins.max_instances))?;
        positive(
            "plugins.max_concurrent_calls",
            self.plugins.max_concurrent_calls as u64,
        )?;
        positive("plugins.max_parked_calls", self.plugins.max_parked_calls as u64)?;
        positive("store.max_history_bytes", self.store.max_history_bytes)?;
        positive(
            "store.max_claims_in_memory",
            self.store.max_claims_in_memory as u64,
        )?;
        if self.store.backend == StoreBackend::Postgres {
            let url = &self.store.postgres_url;
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(invalid(
                    "store.postgres_url",
                    "must be a postgres:// URL when store.backend = \"postgres\"",
                ));
            }
            positive("store.postgres_pool_size", self.store.postgres_pool_size as u64)?;
            positive("store.postgres_timeout_ms", self.store.postgres_timeout_ms)?;
        }
        positive(
            "store.history_page_entries",
            self.store.history_page_entries as u64,
        )?;
        positive("store.history_page_bytes", self.store.history_page_bytes as u64)?;
        positive("http.max_body_bytes", self.http.max_body_bytes as u64)?;
        positive("http.header_timeout_ms", self.http.header_timeout_ms)?;
        positive("http.max_header_bytes", self.http.max_header_bytes as u64)?;
        positive("http.max_connections", self.http.max_connections as u64)?;
        positive(
            "http.max_connections_per_ip",
            self.http.max_connections_per_ip as u64,
        )?;
        positive("http.discard_timeout_ms", self.http.discard_timeout_ms)?;
        if self.http.max_header_bytes < 1024 {
            return Err(invalid("http.max_header_bytes", "must be at least 1024"));
        }
        positive("envelopes.max_skew_secs", self.envelopes.max_skew_secs)?;
        positive(
            "envelopes.rate_limit_per_minute",
            u64::from(self.envelopes.rate_limit_per_minute),
        )?;
        positive("envelopes.request_timeout_ms", self.envelopes.request_timeout_ms)?;
        positive("envelopes.max_in_flight", self.envelopes.max_in_flight as u64)?;
        positive("envelopes.max_offer_ttl_ms", self.envelopes.max_offer_ttl_ms)?;
        positive("envelopes.status_ttl_secs", self.envelopes.status_ttl_secs)?;
        positive("envelopes.ws_max_pending", self.envelopes.ws_max_pending as u64)?;
        positive(
            "envelopes.ws_idle_timeout_secs",
            self.envelopes.ws_idle_timeout_secs,
        )?;
        positive(
            "envelopes.max_tracked_senders",
            self.envelopes.max_tracked_senders as u64,
        )?;
        positive(
            "envelopes.max_params_bytes",
            self.envelopes.max_params_bytes as u64,
        )?;
        positive(
            "envelopes.max_offers_per_sender",
            self.envelopes.max_offers_per_sender as u64,
        )?;
        positive(
            "envelopes.max_offer_bytes_total",
            self.envelopes.max_offer_bytes_total as u64,
        )?;
        positive("uagents.max_expiry_secs", self.uagents.max_expiry_secs)?;
        positive(
            "uagents.max_pending_replies",
            self.uagents.max_pending_replies as u64,
        )?;
        positive("a2a.max_body_bytes", self.a2a.max_body_bytes as u64)?;
        positive("a2a.max_parts_per_message", self.a2a.max_parts_per_message as u64)?;
        positive("a2a.max_tasks_per_context", self.a2a.max_tasks_per_context as u64)?;
        positive("a2a.max_list_bytes", self.a2a.max_list_bytes as u64)?;
        positive("a2a.max_running_tasks", self.a2a.max_running_tasks as u64)?;
        positive(
            "a2a.max_running_tasks_per_ip",
            self.a2a.max_running_tasks_per_ip as u64,
        )?;
        positive(
            "a2a.new_tasks_per_ip_per_minute",
            u64::from(self.a2a.new_tasks_per_ip_per_minute),
        )?;
        positive("a2a.stream_idle_timeout_ms", self.a2a.stream_idle_timeout_ms)?;
        positive("a2a.task_ttl_secs", self.a2a.task_ttl_secs)?;
        positive("a2a.max_history_entries", self.a2a.max_history_entries as u64)?;
        positive(
            "a2a.max_stored_tasks_per_client",
            self.a2a.max_stored_tasks_per_client,
        )?;
        positive(
            "a2a.max_stored_task_bytes_per_client",
            self.a2a.max_stored_task_bytes_per_client,
        )?;
        positive("a2a.max_stored_task_bytes", self.a2a.max_stored_task_bytes)?;
        if !self.a2a.public_url.is_empty() {
            let parsed = url::Url::parse(&self.a2a.public_url)
                .map_err(|e| invalid("a2a.public_url", e.to_string()))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(invalid("a2a.public_url", "must be an http:// or https:// URL"));
            }
        }
        self.validate_mcp()?;
        positive("hai.max_frame_bytes", self.hai.max_frame_bytes as u64)?;
        positive("hai.messages_per_minute", u64::from(self.hai.messages_per_minute))?;
        positive("hai.ping_interval_secs", self.hai.ping_interval_secs)?;
        positive("hai.send_buffer_frames", self.hai.send_buffer_frames as u64)?;
        positive("hai.session_ttl_secs", self.hai.session_ttl_secs)?;
        positive("hai.max_history_entries", self.hai.max_history_entries as u64)?;
        positive(
            "hai.max_stored_sessions_per_client",
            self.hai.max_stored_sessions_per_client,
        )?;
        positive(
            "hai.max_stored_session_bytes_per_client",
            self.hai.max_stored_session_bytes_per_client,
        )?;
        positive("hai.max_stored_session_bytes", self.hai.max_stored_session_bytes)?;
        positive("hai.max_live_sessions", self.hai.max_live_sessions as u64)?;
        positive(
            "hai.max_live_sessions_per_ip",
            self.hai.max_live_sessions_per_ip as u64,
        )?;
        positive(
            "hai.new_sessions_per_ip_per_minute",
            u64::from(self.hai.new_sessions_per_ip_per_minute),
        )?;
        for (key, origins) in [
            ("hai.allowed_origins", &self.hai.allowed_origins),
            ("a2a.allowed_origins", &self.a2a.allowed_origins),
            ("mcp.allowed_origins", &self.mcp.allowed_origins),
        ] {
            if let Some(origin) = origins.iter().find(|origin| normalise_origin(origin).is_none()) {
                return Err(invalid(
                    key,
                    format!("{origin:?} is not an origin like https://app.example.org"),
                ));
            }
        }
        if self.http.admission_wait_ms >= self.http.request_timeout_ms {
            return Err(invalid(
                "http.admission_wait_ms",
                "must be below http.request_timeout_ms, so a waiting caller is refused rather than timed out",
            ));
        }
        for host in &self.http.public_hosts {
            let plain = !host.is_empty()
                && host.len() <= 255
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
            if !plain {
                return Err(invalid(
                    "http.public_hosts",
                    format!("{host:?} is not a host name like agent.example.org (no scheme or path)"),
                ));
            }
        }
        positive("agora.conversation_ttl_secs", self.agora.conversation_ttl_secs)?;
        positive("agora.max_conversations", self.agora.max_conversations as u64)?;
        positive(
            "agora.max_conversations_per_client",
            self.agora.max_conversations_per_client as u64,
        )?;
        positive(
            "agora.conversations_per_client_per_minute",
            u64::from(self.agora.conversations_per_client_per_minute),
        )?;
        if self.plugins.max_memory_mb > 4096 {
            return Err(invalid(
                "plugins.max_memory_mb",
                "at most 4096 (a 32-bit linear memory)",
            ));
        }
        if !matches!(
            self.log_level.as_str(),
            "trace" | "debug" | "info" | "warn" | "error"
        ) {
            return Err(invalid(
                "log_level",
                "must be one of trace, debug, info, warn, error",
            ));
        }
        Ok(())
    }
}

/// The arena's keys decide who may run tasks, so they are fetched over TLS;
/// plain http is only for a loopback host (tests, a local TLS-terminating proxy).
fn check_jwks_url(value: &str) -> Result<(), ConfigError> {
    let url = url::Url::parse(value)
        .map_err(|e| invalid("arena.jwks_url", format!("{value:?} is not a URL: {e}")))?;
    match url.scheme() {
        "https" => Ok(()),
        "http" => {
            let loopback = match url.host() {
                Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                None => false,
            };
            if loopback {
                Ok(())
            } else {
                Err(invalid(
                    "arena.jwks_url",
                    format!(
                        "{value:?} uses plain http:// to a non-loopback host; the arena's keys \
                         must come over https:// (keys fetched in the clear can be swapped in \
                         transit). http:// is accepted only for loopback hosts (127.0.0.0/8, ::1, \
                         localhost), e.g. a local test server"
                    ),
                ))
            }
        }
        _ => Err(invalid("arena.jwks_url", "must be an https:// URL")),
    }
}

/// An absolute http(s) URL with a host.
fn is_http_url(text: &str) -> bool {
    url::Url::parse(text).is_ok_and(|url| {
        matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(|h| !h.is_empty())
    })
}

fn positive(key: &'static str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        Err(invalid(key, "must be greater than 0"))
    } else {
        Ok(())
    }
}

/// A browser origin as `hai.allowed_origins` and the HAI `Origin` check compare it:
/// `scheme://host[:port]`, lower case, the scheme's default port dropped; `None`
/// when it is not an http(s) origin (`null`, paths, user info…).
pub fn normalise_origin(origin: &str) -> Option<String> {
    let origin = origin.trim().to_ascii_lowercase();
    let (scheme, authority) = origin.split_once("://")?;
    if !matches!(scheme, "http" | "https") || authority.is_empty() {
        return None;
    }
    if authority.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    Some(format!("{scheme}://{}", strip_default_port(scheme, authority)))
}

/// `authority` without the scheme's default port (`:443` for https, `:80` otherwise).
pub(crate) fn strip_default_port<'a>(scheme: &str, authority: &'a str) -> &'a str {
    let default = if scheme == "https" { ":443" } else { ":80" };
    authority.strip_suffix(default).unwrap_or(authority)
}

/// Parse a listen address, naming the key when it is wrong.
impl Config {
    /// A section's own body limit, within the listener's `http.max_body_bytes`
    /// (which applies first, so the smaller one counts).
    pub fn body_limit(&self, section_limit: usize) -> usize {
        section_limit.min(self.http.max_body_bytes)
    }

    fn validate_mcp(&self) -> Result<(), ConfigError> {
        let mcp = &self.mcp;
        positive("mcp.max_body_bytes", mcp.max_body_bytes as u64)?;
        positive("mcp.max_sessions", mcp.max_sessions as u64)?;
        positive("mcp.max_sessions_per_ip", mcp.max_sessions_per_ip as u64)?;
        positive("mcp.session_idle_timeout_ms", mcp.session_idle_timeout_ms)?;
        positive("mcp.max_calls_per_session", mcp.max_calls_per_session as u64)?;
        positive("mcp.page_size", mcp.page_size as u64)?;
        if mcp.enabled && mcp.token.is_empty() && !mcp.allow_anonymous {
            let (key, listen) = if mcp.listen.is_empty() {
                ("listen", self.listen.as_str())
            } else {
                ("mcp.listen", mcp.listen.as_str())
            };
            if !parse_listen(key, listen)?.ip().is_loopback() {
                return Err(invalid(
                    "mcp.token",
                    format!(
                        "MCP would be served on {listen}, which is not loopback, to anyone: set mcp.token, \
                         or mcp.allow_anonymous = true, or mcp.enabled = false"
                    ),
                ));
            }
        }
        for (name, server) in &mcp.servers {
            let key = "mcp.servers";
            if name.is_empty() || name.contains('/') || name.contains(char::is_whitespace) {
                return Err(invalid(
                    key,
                    format!("{name:?}: a server name has no '/' or spaces"),
                ));
            }
            let url = url::Url::parse(&server.url).map_err(|e| invalid(key, format!("{name}.url: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(invalid(key, format!("{name}.url must be http:// or https://")));
            }
            if server.tools.is_empty() {
                return Err(invalid(
                    key,
                    format!("{name}.tools is empty: list the tools plugins may call, or [\"*\"]"),
                ));
            }
        }
        Ok(())
    }
}

pub fn parse_listen(key: &'static str, value: &str) -> Result<SocketAddr, ConfigError> {
    value
        .parse()
        .map_err(|_| invalid(key, format!("{value:?} is not an address like 127.0.0.1:8080")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(toml: &str) -> Result<Config, ConfigError> {
        Config::from_figment(Figment::from(Toml::string(DEFAULT_TOML)).merge(Toml::string(toml)))
    }

    #[test]
    fn mcp_on_an_open_listener_needs_a_token_or_a_deliberate_anonymous() {
        let refused = with("listen = \"0.0.0.0:8080\"").unwrap_err().to_string();
        assert!(refused.contains("mcp.token"), "{refused}");
        with("listen = \"0.0.0.0:8080\"\n[mcp]\ntoken = \"t\"").unwrap();
        with("listen = \"0.0.0.0:8080\"\n[mcp]\nallow_anonymous = true").unwrap();
        with("listen = \"0.0.0.0:8080\"\n[mcp]\nenabled = false").unwrap();
        with("listen = \"0.0.0.0:8080\"\n[mcp]\nlisten = \"127.0.0.1:8081\"").unwrap();
        let refused = with("[mcp]\nlisten = \"[::]:8081\"").unwrap_err().to_string();
        assert!(refused.contains("mcp.token"), "{refused}");
    }

    #[test]
    fn mcp_servers_name_their_allowed_tools() {
        let server = |tools: &str| {
            format!("[mcp.servers.docs]\nurl = \"https://mcp.example.org/mcp\"\ntools = {tools}")
        };
        with(&server("[\"search\"]")).unwrap();
        assert!(with(&server("[]")).is_err());
        assert!(with("[mcp.servers.docs]\nurl = \"ftp://x\"\ntools = [\"*\"]").is_err());
        assert!(with("[mcp.servers.\"a/b\"]\nurl = \"https://x\"\ntools = [\"*\"]").is_err());
    }

    #[test]
    fn public_endpoint_is_read_under_its_name_and_its_older_one() {
        assert_eq!(Config::defaults().uagents.public_endpoint, "");
        let url = "https://agent.example.org/submit";
        let named = with(&format!("[uagents]\npublic_endpoint = {url:?}")).unwrap();
        assert_eq!(named.uagents.public_endpoint, url);
        let older = with(&format!("[uagents]\nendpoint = {url:?}")).unwrap();
        assert_eq!(older.uagents.public_endpoint, url);
    }

    #[test]
    fn almanac_api_and_public_endpoint_must_be_http_urls() {
        for (key, value) in [
            ("almanac_api", "ftp://almanac.example.org"),
            ("almanac_api", "agentverse.ai/v1/almanac"),
            ("public_endpoint", "127.0.0.1:8000/submit"),
            ("endpoint", "file:///submit"),
        ] {
            let error = with(&format!("[uagents]\n{key} = {value:?}"))
                .unwrap_err()
                .to_string();
            assert!(error.contains("must be an http(s) URL"), "{key}: {error}");
        }
        let ok = with("[uagents]\nalmanac_api = \"https://agentverse.ai/v1/almanac\"").unwrap();
        assert_eq!(ok.uagents.almanac_api, "https://agentverse.ai/v1/almanac");
    }
}
