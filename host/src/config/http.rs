//! `[http]`: what every listener bounds (bodies, headers, time, connections),
//! the names browsers reach the node by, and the drain at shutdown.

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, all_positive, invalid};

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

impl HttpConfig {
    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        all_positive(&[
            ("http.max_body_bytes", self.max_body_bytes as u64),
            ("http.header_timeout_ms", self.header_timeout_ms),
            ("http.max_header_bytes", self.max_header_bytes as u64),
            ("http.max_connections", self.max_connections as u64),
            ("http.max_connections_per_ip", self.max_connections_per_ip as u64),
            ("http.discard_timeout_ms", self.discard_timeout_ms),
        ])?;
        if self.max_header_bytes < 1024 {
            return Err(invalid("http.max_header_bytes", "must be at least 1024"));
        }
        if self.admission_wait_ms >= self.request_timeout_ms {
            return Err(invalid(
                "http.admission_wait_ms",
                "must be below http.request_timeout_ms, so a waiting caller is refused rather than timed out",
            ));
        }
        for host in &self.public_hosts {
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
        Ok(())
    }
}
