//! `[store]` and `[identity]`: where the node's state lives (sled, or PostgreSQL
//! for a fleet), its memory and history bounds, and the node's key.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use super::{Config, ConfigError, all_positive, invalid};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sled` (embedded, one node; the default) or `postgres` (one database
    /// shared by a fleet of nodes, `postgres_url`).
    pub backend: StoreBackend,
    /// `postgres://user:password@host:port/database` (also as
    /// `AGORA_STORE__POSTGRES_URL`); used when `backend = "postgres"`.
    pub postgres_url: String,
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    Sled,
    Postgres,
}

impl StoreConfig {
    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        all_positive(&[
            ("store.max_history_bytes", self.max_history_bytes),
            ("store.max_claims_in_memory", self.max_claims_in_memory as u64),
            ("store.history_page_entries", self.history_page_entries as u64),
            ("store.history_page_bytes", self.history_page_bytes as u64),
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
