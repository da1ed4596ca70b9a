//! `[agora]`: Agora two-party JSON exchanges (`transports::agora`).

use serde::{Deserialize, Serialize};

use super::endpoint::endpoint_of;
use super::{Config, ConfigError, Endpoint, all_positive};

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

impl AgoraConfig {
    /// Where this transport is served.
    pub fn endpoint(&self) -> Endpoint<'_> {
        endpoint_of!("agora", self)
    }

    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        self.endpoint().validate()?;
        all_positive(&[
            ("agora.conversation_ttl_secs", self.conversation_ttl_secs),
            ("agora.max_conversations", self.max_conversations as u64),
            (
                "agora.max_conversations_per_client",
                self.max_conversations_per_client as u64,
            ),
            (
                "agora.conversations_per_client_per_minute",
                u64::from(self.conversations_per_client_per_minute),
            ),
        ])
    }
}
