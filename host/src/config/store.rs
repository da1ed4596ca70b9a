//! `[store]` and `[identity]`: where the node's state lives (sled, or PostgreSQL
//! for a fleet), its memory and history bounds, and the node's key.
//!
//! The PostgreSQL URL's `sslmode` is read here, not by tokio-postgres, whose
//! parser knows only `disable`/`prefer`/`require` and has no certificate
//! checks: the URL handed to it has no `sslmode`, and [`SslMode`] says how the
//! store's TLS connector verifies the server.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use super::{Config, ConfigError, all_positive, invalid};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sled` (embedded, one node; the default) or `postgres` (one database
    /// shared by a fleet of nodes, `postgres_url`).
    pub backend: StoreBackend,
    /// `postgres://user:password@host:port/database[?sslmode=…]` (also as
    /// `AGORA_STORE__POSTGRES_URL`); used when `backend = "postgres"`.
    pub postgres_url: String,
    /// PEM bundle of the CAs that sign the database server's certificate; empty:
    /// the node's outbound trust (the system's roots plus `tls.ca_file`).
    pub postgres_ca_file: PathBuf,
    /// PEM certificate chain (and its key) this node presents to the database,
    /// for servers that ask for client certificates; set both or neither.
    pub postgres_client_cert_file: PathBuf,
    pub postgres_client_key_file: PathBuf,
    /// Connections this node keeps to the database.
    pub postgres_pool_size: usize,
    /// Longest wait for a connection or a statement; past it the request is
    /// answered 503 (try again) rather than held.
    pub postgres_timeout_ms: u64,
    /// How often expired entries are swept.
    pub sweep_interval_secs: u64,
    /// Live replay claims (one per signed envelope or uAgents message within
    /// its window) the embedded store holds in memory, about 40 bytes each;
    /// beyond them claims go to disk, slower. PostgreSQL keeps them in the database.
    pub max_claims_in_memory: usize,
    /// Bytes of keyed entries (a signed request's state, read back only by
    /// STATUS) the embedded store holds in memory behind its journal, each
    /// its value plus 64; beyond them entries go to disk, slower. 0 keeps them
    /// all on disk. PostgreSQL keeps them in the database.
    pub max_keyed_bytes_in_memory: usize,
    /// Serialized bytes one conversation's or session's history may hold; an
    /// append beyond it is refused with the transport's "full" error.
    pub max_history_bytes: u64,
    /// One read of a history (a plugin's `history()`, a page of the HAI history
    /// endpoint): at most this many entries and bytes.
    pub history_page_entries: usize,
    pub history_page_bytes: usize,
    /// On a shared store: how long a running A2A task or HAI turn stays its
    /// node's without a renewal (renewed every third of it); a node that
    /// stopped has its work failed by another node this long after its last
    /// renewal, plus a third for the sweep (`store::lease`).
    pub lease_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    Sled,
    Postgres,
}

/// How the connection to PostgreSQL is protected (libpq's `sslmode` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext.
    Disable,
    /// Encrypted; the server's certificate is not checked (as libpq, unless
    /// `store.postgres_ca_file` is set: then the chain is, as for `VerifyCa`).
    Require,
    /// Encrypted; the certificate must chain to a trusted CA, any host name.
    VerifyCa,
    /// Encrypted; the certificate must chain to a trusted CA and name the host.
    VerifyFull,
}

impl SslMode {
    /// The mode of a URL without `sslmode`: nothing leaves the machine on a
    /// loopback (or Unix socket) connection, anything else is verified in full.
    pub fn default_for(every_host_is_local: bool) -> SslMode {
        if every_host_is_local {
            SslMode::Disable
        } else {
            SslMode::VerifyFull
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// `store.postgres_url` split for the store: the URL without `sslmode`, and the mode it gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    pub url: String,
    /// `None`: the URL has no `sslmode` ([`SslMode::default_for`] its hosts).
    pub ssl_mode: Option<SslMode>,
}

/// URL parameters for certificate files, which have keys of their own here.
const FILE_PARAMETERS: [(&str, &str); 3] = [
    ("sslrootcert", "store.postgres_ca_file"),
    ("sslcert", "store.postgres_client_cert_file"),
    ("sslkey", "store.postgres_client_key_file"),
];

/// Take `sslmode` out of a `postgres://` URL's query. `prefer` and `allow` are
/// refused: they fall back to plaintext without a word when the server (or
/// someone between) declines TLS, so they protect against nobody.
pub fn split_ssl_mode(url: &str) -> Result<PostgresUrl, String> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => (url, ""),
    };
    let mut ssl_mode = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if let Some((_, setting)) = FILE_PARAMETERS.iter().find(|(name, _)| *name == key) {
            return Err(format!("{key} in the URL is not read: set {setting} instead"));
        }
        if key != "sslmode" {
            kept.push(pair);
            continue;
        }
        ssl_mode = Some(match value {
            "disable" => SslMode::Disable,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "prefer" | "allow" => {
                return Err(format!(
                    "sslmode={value} falls back to plaintext without a word when TLS is declined: \
                     use disable, require, verify-ca or verify-full"
                ));
            }
            other => {
                return Err(format!(
                    "unknown sslmode {other:?}: use disable, require, verify-ca or verify-full"
                ));
            }
        });
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(PostgresUrl { url, ssl_mode })
}

/// A host that is this machine: `localhost`, 127.0.0.0/8 or `::1` (bracketed or not).
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl StoreConfig {
    /// `store.postgres_url` without its `sslmode`, and that mode.
    pub fn postgres_url(&self) -> Result<PostgresUrl, ConfigError> {
        split_ssl_mode(&self.postgres_url).map_err(|message| invalid("store.postgres_url", message))
    }

    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        all_positive(&[
            ("store.max_history_bytes", self.max_history_bytes),
            ("store.max_claims_in_memory", self.max_claims_in_memory as u64),
            ("store.history_page_entries", self.history_page_entries as u64),
            ("store.history_page_bytes", self.history_page_bytes as u64),
            ("store.lease_ms", self.lease_ms),
        ])?;
        if self.backend == StoreBackend::Postgres {
            let url = &self.postgres_url;
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(invalid(
                    "store.postgres_url",
                    "must be a postgres:// URL when store.backend = \"postgres\"",
                ));
            }
            all_positive(&[
                ("store.postgres_pool_size", self.postgres_pool_size as u64),
                ("store.postgres_timeout_ms", self.postgres_timeout_ms),
            ])?;
            self.postgres_url()?;
            if self.postgres_client_cert_file.as_os_str().is_empty()
                != self.postgres_client_key_file.as_os_str().is_empty()
            {
                return Err(invalid(
                    "store.postgres_client_cert_file",
                    "set both store.postgres_client_cert_file and store.postgres_client_key_file, or neither",
                ));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// Ed25519 key file (`agora-node keygen`); empty means `{data_dir}/node.key`, created on first start.
    pub key_file: PathBuf,
}

impl IdentityConfig {
    /// Any path: a missing file is created on first start, an unreadable one stops it there.
    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> Option<SslMode> {
        split_ssl_mode(url).unwrap().ssl_mode
    }

    #[test]
    fn each_sslmode_is_read_and_taken_out_of_the_url() {
        assert_eq!(mode("postgres://a@db/x"), None);
        assert_eq!(mode("postgres://a@db/x?sslmode=disable"), Some(SslMode::Disable));
        assert_eq!(mode("postgres://a@db/x?sslmode=require"), Some(SslMode::Require));
        assert_eq!(
            mode("postgres://a@db/x?sslmode=verify-ca"),
            Some(SslMode::VerifyCa)
        );
        assert_eq!(
            mode("postgres://a@db/x?sslmode=verify-full"),
            Some(SslMode::VerifyFull)
        );
        let split =
            split_ssl_mode("postgres://a@db/x?application_name=n&sslmode=require&connect_timeout=3").unwrap();
        assert_eq!(
            split.url,
            "postgres://a@db/x?application_name=n&connect_timeout=3"
        );
        assert_eq!(
            split_ssl_mode("postgres://a@db/x?sslmode=verify-full")
                .unwrap()
                .url,
            "postgres://a@db/x"
        );
    }

    #[test]
    fn a_mode_that_falls_back_to_plaintext_or_is_unknown_is_refused() {
        for value in ["prefer", "allow"] {
            let error = split_ssl_mode(&format!("postgres://a@db/x?sslmode={value}")).unwrap_err();
            assert!(error.contains("plaintext"), "{error}");
        }
        let error = split_ssl_mode("postgres://a@db/x?sslmode=verify_full").unwrap_err();
        assert!(error.contains("unknown sslmode"), "{error}");
        let error = split_ssl_mode("postgres://a@db/x?sslrootcert=/ca.pem").unwrap_err();
        assert!(error.contains("store.postgres_ca_file"), "{error}");
    }

    #[test]
    fn without_sslmode_only_a_loopback_host_goes_unencrypted() {
        for host in [
            "localhost",
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "[::1]",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "db.internal",
            "10.0.0.5",
            "[2001:db8::1]",
            "localhost.example.com",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
        assert_eq!(SslMode::default_for(true), SslMode::Disable);
        assert_eq!(SslMode::default_for(false), SslMode::VerifyFull);
    }

    #[test]
    fn a_bad_sslmode_stops_validation_naming_the_url_key() {
        let mut config = Config::defaults();
        config.store.backend = StoreBackend::Postgres;
        config.store.postgres_url = "postgres://a@db/x?sslmode=prefer".into();
        let error = config.store.validate(&config).unwrap_err().to_string();
        assert!(error.contains("`store.postgres_url`"), "{error}");
        config.store.postgres_url = "postgres://a@db/x?sslmode=verify-full".into();
        config.store.postgres_client_cert_file = "client.pem".into();
        let error = config.store.validate(&config).unwrap_err().to_string();
        assert!(error.contains("store.postgres_client_key_file"), "{error}");
    }
}
