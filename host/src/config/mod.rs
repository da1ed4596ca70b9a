//! Node configuration: built-in defaults ← `config/agora.toml` (or `--config`)
//! ← `AGORA_…` environment variables (nested keys as `AGORA_SECTION__KEY`) ←
//! command-line flags. Every key and its default is documented in
//! `config/agora.toml`; a bad value stops start-up with the key named.
//!
//! One file per section, each with its own `validate()`, listed once in
//! `sections!`; this module holds the layering, the rules that span sections,
//! and the checks every section shares. A transport's section also gives its [`Endpoint`] (enabled,
//! listen, path), which `crate::transports::TRANSPORTS` mounts.

mod a2a;
mod agora;
mod arena;
mod console;
mod endpoint;
mod envelopes;
mod hai;
mod http;
mod llm;
mod mcp;
mod outbound;
mod plugins;
mod store;
mod tls;
mod tools;
mod uagents;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use self::a2a::A2aConfig;
pub use self::agora::AgoraConfig;
pub use self::arena::ArenaConfig;
pub use self::console::ConsoleConfig;
pub use self::endpoint::Endpoint;
pub use self::envelopes::EnvelopesConfig;
pub use self::hai::HaiConfig;
pub use self::http::HttpConfig;
pub use self::llm::{DEFAULT_PROVIDER, LlmConfig, LlmProviderConfig};
pub use self::mcp::{McpConfig, McpServerConfig};
pub use self::outbound::OutboundConfig;
pub use self::plugins::{PluginSettings, PluginsConfig, SecretSource};
pub use self::store::{IdentityConfig, PostgresUrl, SslMode, StoreBackend, StoreConfig, is_loopback_host};
pub use self::tls::TlsConfig;
pub use self::tools::ToolsConfig;
pub use self::uagents::UagentsConfig;

/// The default configuration, embedded so a fresh checkout runs with no files.
pub const DEFAULT_TOML: &str = include_str!("../../../config/agora.toml");

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

/// The sections of the configuration, one `[name]` table each: one line here
/// makes the field, and has [`Config::validate`] run the section's own
/// `validate(&self, node: &Config)` (in its file), in this order. A
/// transport's line ends `=> endpoint`, which lists its [`Endpoint`] in
/// [`Config::endpoints`].
macro_rules! sections {
    ($($name:ident: $section:ty $(=> $endpoint:ident)?,)*) => {
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Config {
            /// The shared HTTP listener for every transport without its own.
            pub listen: String,
            /// Folder for sled state, the compile cache and (by default) plugins.
            pub data_dir: PathBuf,
            pub log_format: LogFormat,
            pub log_level: String,
            $(pub $name: $section,)*
        }

        impl Config {
            fn validate_sections(&self) -> Result<(), ConfigError> {
                $(self.$name.validate(self)?;)*
                Ok(())
            }

            /// Where every transport is served (`crate::transports::TRANSPORTS`
            /// mounts them), served or not.
            pub fn endpoints(&self) -> Vec<Endpoint<'_>> {
                vec![$($(self.$name.$endpoint(),)?)*]
            }
        }
    };
}

sections! {
    plugins: PluginsConfig,
    http: HttpConfig,
    tools: ToolsConfig,
    outbound: OutboundConfig,
    store: StoreConfig,
    identity: IdentityConfig,
    agora: AgoraConfig => endpoint,
    envelopes: EnvelopesConfig => endpoint,
    uagents: UagentsConfig => endpoint,
    arena: ArenaConfig => endpoint,
    hai: HaiConfig => endpoint,
    a2a: A2aConfig => endpoint,
    mcp: McpConfig => endpoint,
    llm: LlmConfig,
    tls: TlsConfig,
    console: ConsoleConfig,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

/// `AGORA_*` variables as configuration keys (`__` nests). `AGORA_CLI_*` are
/// the client commands' own settings (`AGORA_CLI_UAGENTS_SEED`): with unknown
/// keys denied they would stop the node from starting, so they are skipped.
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

    /// Every section's own rules, then those that span sections.
    fn validate(&self) -> Result<(), ConfigError> {
        parse_listen("listen", &self.listen)?;
        self.validate_sections()?;
        if self.arena.path == self.agora.path && self.arena.listen == self.agora.listen {
            return Err(invalid(
                "arena.path",
                "clashes with agora.path on the same listener",
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

    /// A section's own body limit, within the listener's `http.max_body_bytes`
    /// (which applies first, so the smaller one counts).
    pub fn body_limit(&self, section_limit: usize) -> usize {
        section_limit.min(self.http.max_body_bytes)
    }
}

/// An absolute http(s) URL with a host.
fn is_http_url(text: &str) -> bool {
    url::Url::parse(text).is_ok_and(|url| {
        matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(|h| !h.is_empty())
    })
}

/// Bounds that must be above zero (a zero would refuse everything, or divide by it).
fn all_positive(bounds: &[(&'static str, u64)]) -> Result<(), ConfigError> {
    match bounds.iter().find(|(_, value)| *value == 0) {
        Some((key, _)) => Err(invalid(key, "must be greater than 0")),
        None => Ok(()),
    }
}

/// Browser origins as an `allowed_origins` key lists them: each one an origin.
fn check_origins(key: &'static str, origins: &[String]) -> Result<(), ConfigError> {
    match origins.iter().find(|origin| normalise_origin(origin).is_none()) {
        Some(origin) => Err(invalid(
            key,
            format!("{origin:?} is not an origin like https://app.example.org"),
        )),
        None => Ok(()),
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
pub fn parse_listen(key: &'static str, value: &str) -> Result<SocketAddr, ConfigError> {
    value
        .parse()
        .map_err(|_| invalid(key, format!("{value:?} is not an address like 127.0.0.1:8080")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration of the defaults with `toml` over them (the section files' tests use it too).
    pub(super) fn with(toml: &str) -> Result<Config, ConfigError> {
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
    fn every_section_is_validated_including_outbound() {
        for key in ["timeout_ms", "max_response_bytes"] {
            let refused = with(&format!("[outbound]\n{key} = 0")).unwrap_err().to_string();
            assert!(refused.contains(&format!("`outbound.{key}`")), "{refused}");
        }
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
