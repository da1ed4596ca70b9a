//! `[envelopes]`: signed Agora envelopes over HTTP and WebSocket (`transports::envelopes`).

use serde::{Deserialize, Serialize};

use super::endpoint::endpoint_of;
use super::{Config, ConfigError, Endpoint, all_positive};

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

impl EnvelopesConfig {
    /// Where this transport is served.
    pub fn endpoint(&self) -> Endpoint<'_> {
        endpoint_of!("envelopes", self)
    }

    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        self.endpoint().validate()?;
        all_positive(&[
            ("envelopes.max_skew_secs", self.max_skew_secs),
            (
                "envelopes.rate_limit_per_minute",
                u64::from(self.rate_limit_per_minute),
            ),
            ("envelopes.request_timeout_ms", self.request_timeout_ms),
            ("envelopes.max_in_flight", self.max_in_flight as u64),
            ("envelopes.max_offer_ttl_ms", self.max_offer_ttl_ms),
            ("envelopes.status_ttl_secs", self.status_ttl_secs),
            ("envelopes.ws_max_pending", self.ws_max_pending as u64),
            ("envelopes.ws_idle_timeout_secs", self.ws_idle_timeout_secs),
            ("envelopes.max_tracked_senders", self.max_tracked_senders as u64),
            ("envelopes.max_params_bytes", self.max_params_bytes as u64),
            (
                "envelopes.max_offers_per_sender",
                self.max_offers_per_sender as u64,
            ),
            (
                "envelopes.max_offer_bytes_total",
                self.max_offer_bytes_total as u64,
            ),
        ])
    }
}
