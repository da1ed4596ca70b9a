//! `[uagents]`: the Fetch.ai uAgents exchange and the Almanac (`transports::uagents`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::endpoint::endpoint_of;
use super::{Config, ConfigError, Endpoint, all_positive, invalid, is_http_url};

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

impl UagentsConfig {
    /// Where this transport is served.
    pub fn endpoint(&self) -> Endpoint<'_> {
        endpoint_of!("uagents", self, fixed_paths)
    }

    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        self.endpoint().validate()?;
        for (address, url) in &self.peers {
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
            ("uagents.public_endpoint", &self.public_endpoint),
            ("uagents.almanac_api", &self.almanac_api),
        ] {
            if !url.is_empty() && !is_http_url(url) {
                return Err(invalid(key, format!("{url:?} must be an http(s) URL")));
            }
        }
        all_positive(&[
            ("uagents.replay_window_secs", self.replay_window_secs),
            ("uagents.max_expiry_secs", self.max_expiry_secs),
            ("uagents.max_pending_replies", self.max_pending_replies as u64),
        ])
    }
}
