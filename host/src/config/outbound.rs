//! `[outbound]`: where plugins and the node may call out, and how long and how much.

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, all_positive};

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

impl OutboundConfig {
    /// An empty allow-list is valid (the node calls nowhere); a call that may
    /// take no time or read no byte is not.
    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        all_positive(&[
            ("outbound.timeout_ms", self.timeout_ms),
            ("outbound.max_response_bytes", self.max_response_bytes as u64),
        ])
    }
}
