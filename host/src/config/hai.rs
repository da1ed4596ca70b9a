//! `[hai]`: human chat over WebSocket and the browser client (`transports::hai`).

use serde::{Deserialize, Serialize};

use super::endpoint::endpoint_of;
use super::{Config, ConfigError, Endpoint, all_positive, check_origins};

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

impl HaiConfig {
    /// Where this transport is served.
    pub fn endpoint(&self) -> Endpoint<'_> {
        endpoint_of!("hai", self)
    }

    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        self.endpoint().validate()?;
        check_origins("hai.allowed_origins", &self.allowed_origins)?;
        all_positive(&[
            ("hai.max_frame_bytes", self.max_frame_bytes as u64),
            ("hai.messages_per_minute", u64::from(self.messages_per_minute)),
            ("hai.ping_interval_secs", self.ping_interval_secs),
            ("hai.send_buffer_frames", self.send_buffer_frames as u64),
            ("hai.session_ttl_secs", self.session_ttl_secs),
            ("hai.max_history_entries", self.max_history_entries as u64),
            (
                "hai.max_stored_sessions_per_client",
                self.max_stored_sessions_per_client,
            ),
            (
                "hai.max_stored_session_bytes_per_client",
                self.max_stored_session_bytes_per_client,
            ),
            ("hai.max_stored_session_bytes", self.max_stored_session_bytes),
            ("hai.max_live_sessions", self.max_live_sessions as u64),
            (
                "hai.max_live_sessions_per_ip",
                self.max_live_sessions_per_ip as u64,
            ),
            (
                "hai.new_sessions_per_ip_per_minute",
                u64::from(self.new_sessions_per_ip_per_minute),
            ),
        ])
    }
}
