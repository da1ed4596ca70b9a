//! `[arena]`: Agora Arena tasks, their JWT keys and the live event stream (`transports::arena`).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use super::endpoint::endpoint_of;
use super::{Config, ConfigError, Endpoint, all_positive, invalid};

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
    /// Where this transport is served.
    pub fn endpoint(&self) -> Endpoint<'_> {
        endpoint_of!("arena", self)
    }

    /// The arena keys that cannot work as given.
    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        self.endpoint().validate()?;
        all_positive(&[
            ("arena.max_concurrent", self.max_concurrent as u64),
            ("arena.stream_buffer", self.stream_buffer as u64),
            ("arena.jwks_refresh_secs", self.jwks_refresh_secs),
        ])?;
        if !self.jwks_url.is_empty() && !self.jwks_file.as_os_str().is_empty() {
            return Err(invalid(
                "arena.jwks_url",
                "set either arena.jwks_url or arena.jwks_file, not both",
            ));
        }
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
