//! `[mcp]`: the Model Context Protocol, served (`transports::mcp`) and called
//! (`peers::mcp`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::endpoint::endpoint_of;
use super::{Config, ConfigError, Endpoint, all_positive, check_origins, invalid, parse_listen};

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
    /// The largest prompt a plugin may render for `prompts/get`, in bytes.
    pub max_prompt_bytes: usize,
    /// 2026-07-28: `subscriptions/listen` streams open node-wide and per client address.
    pub max_listen_streams: usize,
    pub max_listen_streams_per_ip: usize,
    /// 2026-07-28: a listen stream ends gracefully after this long (the client listens again).
    pub listen_max_ms: u64,
    /// 2026-07-28: `tools/call`s running at once per client address (no session to count them by).
    pub max_calls_per_ip: usize,
    /// 2026-07-28: the `ttlMs` of a `resources/read` answer (documents are content-addressed).
    pub resource_ttl_ms: u64,
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

impl McpConfig {
    /// Where this transport is served.
    pub fn endpoint(&self) -> Endpoint<'_> {
        endpoint_of!("mcp", self)
    }

    /// `node.listen` counts: MCP shares it when it has a listener of none of its own.
    pub(super) fn validate(&self, node: &Config) -> Result<(), ConfigError> {
        let mcp = self;
        self.endpoint().validate()?;
        check_origins("mcp.allowed_origins", &self.allowed_origins)?;
        all_positive(&[
            ("mcp.max_body_bytes", mcp.max_body_bytes as u64),
            ("mcp.max_sessions", mcp.max_sessions as u64),
            ("mcp.max_sessions_per_ip", mcp.max_sessions_per_ip as u64),
            ("mcp.session_idle_timeout_ms", mcp.session_idle_timeout_ms),
            ("mcp.max_calls_per_session", mcp.max_calls_per_session as u64),
            ("mcp.page_size", mcp.page_size as u64),
            ("mcp.max_prompt_bytes", mcp.max_prompt_bytes as u64),
            ("mcp.max_listen_streams", mcp.max_listen_streams as u64),
            (
                "mcp.max_listen_streams_per_ip",
                mcp.max_listen_streams_per_ip as u64,
            ),
            ("mcp.listen_max_ms", mcp.listen_max_ms),
            ("mcp.max_calls_per_ip", mcp.max_calls_per_ip as u64),
        ])?;
        if mcp.max_listen_streams_per_ip > mcp.max_listen_streams {
            return Err(invalid(
                "mcp.max_listen_streams_per_ip",
                "is larger than mcp.max_listen_streams, which bounds every address together",
            ));
        }
        if mcp.enabled && mcp.token.is_empty() && !mcp.allow_anonymous {
            let (key, listen) = if mcp.listen.is_empty() {
                ("listen", node.listen.as_str())
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
