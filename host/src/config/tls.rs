//! `[tls]`: HTTPS/WSS on every listener, and extra roots for outbound calls.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use super::{Config, ConfigError, invalid};

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

    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        if self.cert_file.as_os_str().is_empty() != self.key_file.as_os_str().is_empty() {
            return Err(invalid(
                "tls.cert_file",
                "set both tls.cert_file and tls.key_file, or neither",
            ));
        }
        Ok(())
    }
}
