//! The fleet's plugin set: the plugin files every node of a fleet serves,
//! stored once in the shared database, each content once by its SHA-256.
//!
//! Only a shared store has one ([`super::Store::plugin_set`]); a node on its
//! own store serves its own folder. The set is keyed by the file's name in the
//! plugins folder, since that is what a node mirrors and what an operator
//! drops in; the plugin's own name is known only once a node has loaded it.
//! Each method is one transaction, so two nodes publishing the same file at
//! once leave one of the two contents, whole, and no content without a file.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::Result;

/// One published file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedPlugin {
    /// Its name in the plugins folder, e.g. `trivia.wasm`.
    pub file: String,
    /// SHA-256 of its content, lowercase hex (as `/health`'s `content_sha256`).
    pub sha256: String,
    pub size: u64,
    pub published_at_ms: u64,
    /// Who published it: a node's id, or `cli` for `agora-node plugin publish`.
    pub published_by: String,
}

#[async_trait]
pub trait PluginSet: Send + Sync {
    /// Every published file, by name.
    async fn published(&self) -> Result<Vec<PublishedPlugin>>;

    /// The content with this SHA-256, if a published file still names it.
    async fn content(&self, sha256: &str) -> Result<Option<Vec<u8>>>;

    /// Make `bytes` (whose SHA-256 is `sha256`) the content of `file`; whether
    /// the set changed (`false`: it held that content already). A content no
    /// file names any more goes in the same transaction.
    async fn publish(&self, file: &str, sha256: &str, bytes: &[u8], by: &str) -> Result<bool>;

    /// Take `file` out of the set; whether it was there.
    async fn unpublish(&self, file: &str) -> Result<bool>;

    /// Seed an empty set, once per database: when no set was ever made, the
    /// files given (a node's folder) become it and this returns `true`;
    /// otherwise nothing changes and it returns `false`. Any publish also
    /// counts as the set being made.
    async fn seed(&self, files: &[(String, String, Vec<u8>)], by: &str) -> Result<bool>;
}
