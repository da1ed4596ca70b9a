//! Durable node state: conversations, sessions, replay windows, negotiations,
//! pending approvals and the plugins' key-value data.
//!
//! [`Store`] is the typed API the transports use; it serializes with serde and
//! calls one [`Backend`]: [`sled::SledBackend`] (`store.backend = "sled"`, the
//! embedded default, one node) or [`postgres::PostgresBackend`]
//! (`store.backend = "postgres"`, one database shared by a fleet of nodes).
//! The transports never know which one runs; every guarantee they give across
//! a fleet (a replay accepted once, an offer accepted once, a conversation
//! continuing on another node) rests on the backend's atomic steps
//! ([`backend`] lists them), never on a read-then-write in a handler.
//!
//! A write a client is about to be told succeeded is followed by
//! [`Store::commit`] before the reply: sled flushes (grouped across concurrent
//! requests); PostgreSQL has committed already. A transport whose request
//! makes several writes takes a [`UnitOfWork`] ([`unit`]) and commits it
//! once instead: on PostgreSQL one transaction, one WAL flush per request. Entries may carry an expiry;
//! expired entries read as absent at once and are removed by [`Store::sweep`],
//! which the node runs periodically. Replay protection has its own call,
//! [`Store::claim_once`], because its volume (one claim per signed message)
//! deserves its own path on the embedded store (`journal`), and so does an
//! entry written per request and read back only by its key
//! ([`Store::put_keyed`], a signed request's state).

pub mod backend;
pub mod depth;
mod journal;
pub mod lease;
pub mod plugin_set;
pub mod postgres;
pub mod roll_call;
pub mod sled;
#[cfg(test)]
mod tests;
pub mod unit;

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

pub use backend::{Backend, FleetMessage};
pub use unit::UnitOfWork;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage: {0}")]
    Sled(#[from] ::sled::Error),
    #[error("stored record is corrupt: {0}")]
    Corrupt(#[from] serde_json::Error),
    /// A quota the client's own requests reached (a history full in entries or
    /// bytes): the client's fault, answered with the transport's "limit" error.
    #[error("{0}")]
    Limit(String),
    /// The store cannot take writes or answer now (the database is down or
    /// unreachable, a flush failed): answered as the protocol's "try again
    /// later" (503 with `Retry-After`), and the node recovers by itself.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The database refused a statement for a reason other than an outage (a
    /// bug, or a schema this node does not know): an internal error.
    #[error("database: {0}")]
    Database(String),
}

/// A value as the store writes it: JSON, refused when it nests deeper than
/// the store can read back ([`depth::MAX_STORED_DEPTH`]), so nothing written
/// is unreadable.
fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let bytes = serde_json::to_vec(value)?;
    let nesting = depth::depth(&bytes);
    if nesting > depth::MAX_STORED_DEPTH {
        return Err(StoreError::Limit(format!(
            "a value nesting {nesting} levels deep cannot be stored; at most {} can be read back",
            depth::MAX_STORED_DEPTH
        )));
    }
    Ok(bytes)
}

impl StoreError {
    /// Whether the client caused this (a quota), rather than the node (a failure).
    pub fn is_quota(&self) -> bool {
        matches!(self, StoreError::Limit(_))
    }

    /// Whether this is a passing outage (answer 503, try again) rather than a bug.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    fn history_full_entries(id: &str, max_entries: u64) -> StoreError {
        StoreError::Limit(format!("history of {id} is full ({max_entries} entries)"))
    }

    fn history_full_bytes(id: &str, max_bytes: u64) -> StoreError {
        StoreError::Limit(format!(
            "history of {id} is full (its quota is {max_bytes} bytes)"
        ))
    }
}

/// Default of `store.max_history_bytes`: what one conversation's or session's
/// history may hold, in serialized bytes.
pub const DEFAULT_MAX_HISTORY_BYTES: u64 = 8 << 20;

/// Default of `store.max_claims_in_memory`.
pub const DEFAULT_MAX_CLAIMS_IN_MEMORY: usize = 2_000_000;

/// Default of `store.max_keyed_bytes_in_memory`.
pub const DEFAULT_MAX_KEYED_BYTES_IN_MEMORY: usize = 64 << 20;

/// What the embedded store holds in memory behind its journal before it
/// spills to its trees (`store.max_claims_in_memory`,
/// `store.max_keyed_bytes_in_memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBounds {
    /// Live replay claims, about 40 bytes each.
    pub max_claims: usize,
    /// Keyed entries ([`Store::put_keyed`]): their values' bytes plus 64 each.
    pub max_keyed_bytes: usize,
}

impl Default for MemoryBounds {
    fn default() -> MemoryBounds {
        MemoryBounds {
            max_claims: DEFAULT_MAX_CLAIMS_IN_MEMORY,
            max_keyed_bytes: DEFAULT_MAX_KEYED_BYTES_IN_MEMORY,
        }
    }
}

/// One bounded read of a history.
#[derive(Debug)]
pub struct HistoryPage<T> {
    /// Oldest first.
    pub entries: Vec<T>,
    /// Pass as `after` to read on; `None` when nothing follows.
    pub next_after: Option<u64>,
}

impl<T> HistoryPage<T> {
    fn empty() -> HistoryPage<T> {
        HistoryPage {
            entries: Vec::new(),
            next_after: None,
        }
    }
}

/// The page bounds both backends apply the same way: at most `max_entries`,
/// at most `max_bytes` unless the first entry alone is larger (so a reader
/// always moves on; the history's quota bounds that entry).
struct PageBuilder {
    max_entries: usize,
    max_bytes: usize,
    bytes: usize,
    last: Option<u64>,
    entries: Vec<Vec<u8>>,
}

impl PageBuilder {
    fn new(max_entries: usize, max_bytes: usize) -> PageBuilder {
        PageBuilder {
            max_entries: max_entries.max(1),
            max_bytes,
            bytes: 0,
            last: None,
            entries: Vec::new(),
        }
    }

    /// Take one entry; `false` (and nothing taken) when the page is full.
    fn push(&mut self, sequence: u64, value: Vec<u8>) -> bool {
        let full = self.entries.len() >= self.max_entries
            || (!self.entries.is_empty() && self.bytes.saturating_add(value.len()) > self.max_bytes);
        if full {
            return false;
        }
        self.bytes += value.len();
        self.last = Some(sequence);
        self.entries.push(value);
        true
    }

    /// The page; `more` says an entry was left for the next one.
    fn finish(self, more: bool) -> HistoryPage<Vec<u8>> {
        HistoryPage {
            entries: self.entries,
            next_after: if more { self.last } else { None },
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Named collections: a sled tree each, or the `collection` column of the
/// PostgreSQL `entries` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collection {
    /// Plugin key-value data; keys are `plugin \0 key`.
    PluginKv,
    Conversations,
    /// Append-only history entries; keys are `id \0 sequence`.
    History,
    Sessions,
    Replay,
    Negotiations,
    /// HAI approvals waiting for a human, so any node of a fleet can answer them.
    Approvals,
    /// Node-level facts (identity seeds and such).
    Meta,
    /// A2A tasks by id.
    A2aTasks,
    /// A2A contexts: their tasks, in order; the key is also the context's history id.
    A2aContexts,
    /// Who runs each A2A task and HAI turn of a fleet, and until when ([`lease`]).
    Leases,
    /// A2A push notification configs; keys are `task \0 config`.
    A2aPushConfigs,
    /// A2A push deliveries owed, written with the task state that owes them;
    /// keys are `task \0 config \0 sequence`, so they list in delivery order.
    A2aPushOutbox,
}

impl Collection {
    pub const ALL: [Collection; 13] = [
        Collection::PluginKv,
        Collection::Conversations,
        Collection::History,
        Collection::Sessions,
        Collection::Replay,
        Collection::Negotiations,
        Collection::Approvals,
        Collection::Meta,
        Collection::A2aTasks,
        Collection::A2aContexts,
        Collection::Leases,
        Collection::A2aPushConfigs,
        Collection::A2aPushOutbox,
    ];

    /// The sled tree's name, and the PostgreSQL `collection` value.
    pub fn table_name(self) -> &'static str {
        match self {
            Collection::PluginKv => "plugin_kv",
            Collection::Conversations => "conversations",
            Collection::History => "history",
            Collection::Sessions => "sessions",
            Collection::Replay => "replay",
            Collection::Negotiations => "negotiations",
            Collection::Approvals => "approvals",
            Collection::Meta => "meta",
            Collection::A2aTasks => "a2a_tasks",
            Collection::A2aContexts => "a2a_contexts",
            Collection::Leases => "leases",
            Collection::A2aPushConfigs => "a2a_push_configs",
            Collection::A2aPushOutbox => "a2a_push_outbox",
        }
    }

    /// Whether an entry's key is also the id of a history that ends with it.
    pub fn owns_history(self) -> bool {
        matches!(
            self,
            Collection::Conversations | Collection::Sessions | Collection::A2aContexts
        )
    }
}

#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    max_history_bytes: u64,
    commit_observer: Option<CommitObserver>,
}

/// Told how long each [`Store::commit`] waited. The store sits below the
/// node's metrics, so the node hands it this instead of the metrics.
pub type CommitObserver = Arc<dyn Fn(std::time::Duration) + Send + Sync>;

/// The typed value of an entry a backend returned.
fn value_of<T: DeserializeOwned>(entry: Option<backend::RawEntry>) -> Result<Option<T>> {
    match entry {
        Some(entry) => Ok(Some(serde_json::from_slice(&entry.value)?)),
        None => Ok(None),
    }
}

/// Kept at its old path for the store's callers; it lives in [`crate::vocab`].
pub use crate::vocab::now_ms;

impl Store {
    pub fn new(backend: Arc<dyn Backend>) -> Store {
        Store {
            backend,
            max_history_bytes: DEFAULT_MAX_HISTORY_BYTES,
            commit_observer: None,
        }
    }

    /// The embedded store in `dir`, with the default memory bounds.
    pub fn open(dir: &std::path::Path) -> Result<Store> {
        Store::open_bounded(dir, MemoryBounds::default())
    }

    /// The embedded store in `dir`, holding in memory at most what `bounds` allow.
    pub fn open_bounded(dir: &std::path::Path, bounds: MemoryBounds) -> Result<Store> {
        Ok(Store::new(Arc::new(sled::SledBackend::open(dir, bounds)?)))
    }

    /// The byte quota of every history (`store.max_history_bytes`).
    pub fn with_history_quota(mut self, max_bytes: u64) -> Store {
        self.max_history_bytes = max_bytes;
        self
    }

    /// A throw-away embedded store (tests, tools).
    pub fn temporary() -> Result<Store> {
        Ok(Store::new(Arc::new(sled::SledBackend::temporary()?)))
    }

    /// `"sled"` or `"postgres"`.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Whether other nodes may share this store (a fleet), so that what one
    /// node sees of its own plugins folder is not the whole story.
    pub fn is_shared(&self) -> bool {
        self.backend.name() != "sled"
    }

    /// Tell `observer` how long every commit waited: the durable-write wait
    /// a turn, a task or a claim spends on the disk, which `/metrics` shows.
    pub fn observing_commits(mut self, observer: CommitObserver) -> Store {
        self.commit_observer = Some(observer);
        self
    }

    /// Wait until every write so far is durable.
    pub async fn commit(&self) -> Result<()> {
        let Some(observer) = &self.commit_observer else {
            return self.backend.commit().await;
        };
        let started = std::time::Instant::now();
        let committed = self.backend.commit().await;
        observer(started.elapsed());
        committed
    }

    /// Whether the backend answers now.
    pub async fn ping(&self) -> Result<()> {
        self.backend.ping().await
    }

    /// Why the store does not answer within a second, as `/health` and the
    /// console report it; `None` when it answers.
    pub async fn unavailable(&self) -> Option<String> {
        match tokio::time::timeout(std::time::Duration::from_secs(1), self.ping()).await {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(_) => Some("the store did not answer within a second".to_string()),
        }
    }

    pub async fn put<T: Serialize + ?Sized>(
        &self,
        collection: Collection,
        key: &[u8],
        value: &T,
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        let bytes = encode(value)?;
        self.backend.put(collection, key, &bytes, expires_at_ms).await
    }

    /// [`Store::put`] for an entry written on a hot path and read back only
    /// by its key with [`Store::get_keyed`], never listed, scanned or taken
    /// (see [`Backend::put_keyed`]).
    pub async fn put_keyed<T: Serialize + ?Sized>(
        &self,
        collection: Collection,
        key: &[u8],
        value: &T,
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        let bytes = encode(value)?;
        self.backend
            .put_keyed(collection, key, &bytes, expires_at_ms)
            .await
    }

    /// The live value [`Store::put_keyed`] wrote, or `None`.
    pub async fn get_keyed<T: DeserializeOwned>(
        &self,
        collection: Collection,
        key: &[u8],
    ) -> Result<Option<T>> {
        value_of(self.backend.get_keyed(collection, key).await?)
    }

    pub async fn get<T: DeserializeOwned>(&self, collection: Collection, key: &[u8]) -> Result<Option<T>> {
        Ok(self
            .get_with_expiry(collection, key)
            .await?
            .map(|(value, _)| value))
    }

    /// The value and its expiry, or `None` when absent or expired.
    pub async fn get_with_expiry<T: DeserializeOwned>(
        &self,
        collection: Collection,
        key: &[u8],
    ) -> Result<Option<(T, Option<u64>)>> {
        match self.backend.get(collection, key).await? {
            Some(entry) => Ok(Some((serde_json::from_slice(&entry.value)?, entry.expires_at_ms))),
            None => Ok(None),
        }
    }

    /// Whether a key exists even if it has expired (so an expired id can be told from an unknown one).
    pub async fn expired(&self, collection: Collection, key: &[u8]) -> Result<bool> {
        self.backend.is_expired(collection, key).await
    }

    pub async fn remove(&self, collection: Collection, key: &[u8]) -> Result<bool> {
        self.backend.remove(collection, key).await
    }

    /// Remove and return a live entry; of several takers at once (on any node
    /// sharing the store), exactly one gets it.
    pub async fn take<T: DeserializeOwned>(&self, collection: Collection, key: &[u8]) -> Result<Option<T>> {
        value_of(self.backend.take(collection, key).await?)
    }

    /// Write every entry of `puts` (`(collection, key, value, expiry)`) in one
    /// atomic step: after a crash, all of them or none ([`Backend::put_all`]).
    pub async fn put_all<T: Serialize>(&self, puts: &[(Collection, Vec<u8>, T, Option<u64>)]) -> Result<()> {
        let writes = puts
            .iter()
            .map(|(collection, key, value, expires_at_ms)| {
                Ok(backend::Write::Put {
                    collection: *collection,
                    key: key.clone(),
                    value: encode(value)?,
                    expires_at_ms: *expires_at_ms,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.backend.put_all(writes).await
    }

    /// Insert only if the key is absent (or expired). Returns false when a live entry exists:
    /// the primitive behind replay windows and one-time offers.
    pub async fn insert_new<T: Serialize + ?Sized>(
        &self,
        collection: Collection,
        key: &[u8],
        value: &T,
        expires_at_ms: Option<u64>,
    ) -> Result<bool> {
        let bytes = encode(value)?;
        self.backend
            .insert_new(collection, key, &bytes, expires_at_ms)
            .await
    }

    /// The secret every node sharing this store holds under `key` in
    /// [`Collection::Meta`]: 32 random bytes, hex-encoded, made by whichever
    /// node asks first (`insert_new`, so two first askers agree) and read by
    /// every other, now and after restarts.
    pub async fn shared_secret(&self, key: &[u8]) -> Result<String> {
        use rand::RngCore;
        let mut fresh = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut fresh);
        self.insert_new(Collection::Meta, key, &hex::encode(fresh), None)
            .await?;
        self.get::<String>(Collection::Meta, key).await?.ok_or_else(|| {
            StoreError::Database(format!(
                "the shared secret {:?} vanished from the store",
                String::from_utf8_lossy(key)
            ))
        })
    }

    /// Accept `key` once until `expires_at_ms` (replay protection): `true` for
    /// the first claim, `false` while a claim is live, on any node sharing the store.
    pub async fn claim_once(&self, key: &[u8], expires_at_ms: u64) -> Result<bool> {
        self.backend.claim_once(key, expires_at_ms).await
    }

    /// Give back a claim whose message was refused before any work.
    pub async fn release_claim(&self, key: &[u8]) -> Result<()> {
        self.backend.release_claim(key).await
    }

    /// Replace a value only if it still equals `expected` (JSON equality); false if it changed.
    pub async fn update<T: Serialize>(
        &self,
        collection: Collection,
        key: &[u8],
        expected: &T,
        new: &T,
        expires_at_ms: Option<u64>,
    ) -> Result<bool> {
        let expected = serde_json::to_vec(expected)?;
        let new = encode(new)?;
        self.backend
            .compare_and_swap(collection, key, &expected, &new, expires_at_ms)
            .await
    }

    /// Append to the history of `id` (a conversation or session), refused with
    /// [`StoreError::Limit`] when the history holds `max_entries` entries or the
    /// entry would take it past the byte quota. The answer is the entry's
    /// stored size, for a transport that charges it to a quota.
    pub async fn append_history<T: Serialize + ?Sized>(
        &self,
        id: &str,
        entry: &T,
        max_entries: usize,
    ) -> Result<usize> {
        let bytes = encode(entry)?;
        self.backend
            .append_history(id, &bytes, max_entries as u64, self.max_history_bytes)
            .await?;
        Ok(bytes.len())
    }

    /// Append one entry in the shape plugins read back from `host::history()`
    /// (`{"role", "body", "at"}`, `at` in ms): every transport's history is
    /// this one shape. Bounded and answered as [`Store::append_history`].
    pub async fn append_entry(
        &self,
        id: &str,
        role: &str,
        body: &serde_json::Value,
        max_entries: usize,
    ) -> Result<usize> {
        let entry = history_entry(role, body)?;
        self.backend
            .append_history(id, &entry, max_entries as u64, self.max_history_bytes)
            .await?;
        Ok(entry.len())
    }

    /// Entries of `id` after sequence number `after` (from the start when
    /// `None`), oldest first: at most `max_entries`, and at most `max_bytes` of
    /// stored JSON unless the first entry alone is larger (then it is the page,
    /// so a reader always moves on; the history's quota bounds it).
    pub async fn history_page<T: DeserializeOwned>(
        &self,
        id: &str,
        after: Option<u64>,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<HistoryPage<T>> {
        let page = self
            .backend
            .history_page(id, after, max_entries, max_bytes)
            .await?;
        Ok(HistoryPage {
            entries: decode_all(page.entries)?,
            next_after: page.next_after,
        })
    }

    /// The most recent entries of `id`, oldest first, within the same bounds as
    /// [`Store::history_page`] (what a plugin's `history()` gets).
    pub async fn history_tail<T: DeserializeOwned>(
        &self,
        id: &str,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<Vec<T>> {
        decode_all(self.backend.history_tail(id, max_entries, max_bytes).await?)
    }

    pub async fn remove_history(&self, id: &str) -> Result<()> {
        self.backend.remove_history(id).await
    }

    /// The records of `collection` under `prefix`, at most `limit`, with their
    /// keys; a record that does not read as `T` (another shape under the same
    /// prefix) is skipped, a store that fails is an error.
    pub async fn records<T: DeserializeOwned>(
        &self,
        collection: Collection,
        prefix: &[u8],
        limit: usize,
    ) -> Result<Vec<(String, T)>> {
        let mut records = Vec::new();
        for key in self.keys(collection, prefix, limit).await? {
            let record = match self.get::<T>(collection, &key).await {
                Err(StoreError::Corrupt(_)) => continue,
                other => other?,
            };
            if let Some(record) = record {
                records.push((String::from_utf8_lossy(&key).into_owned(), record));
            }
        }
        Ok(records)
    }

    /// Keys of `collection` starting with `prefix`, at most `limit`.
    pub async fn keys(&self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<Vec<u8>>> {
        self.backend.keys(collection, prefix, limit).await
    }

    /// Remove every expired entry. Returns how many were removed.
    pub async fn sweep(&self) -> Result<usize> {
        self.backend.sweep().await
    }

    /// Tell every other node of the fleet (nobody, on the embedded store).
    pub async fn publish<T: Serialize + ?Sized>(&self, topic: &str, message: &T) -> Result<()> {
        let bytes = serde_json::to_vec(message)?;
        self.backend.publish(topic, &bytes).await
    }

    /// What other nodes of the fleet publish from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<FleetMessage> {
        self.backend.subscribe()
    }

    /// The next message other nodes published on `topic`, the bus's other
    /// topics passed over; `None` once the bus is closed. A reader that fell
    /// behind loses the oldest messages: that is logged as `reader`'s, and it
    /// reads on from the next one.
    pub async fn next_on_topic(
        inbox: &mut broadcast::Receiver<FleetMessage>,
        topic: &str,
        reader: &'static str,
    ) -> Option<FleetMessage> {
        loop {
            match inbox.recv().await {
                Ok(message) if message.topic == topic => return Some(message),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        transport = reader,
                        missed,
                        "{reader}: fleet messages read too slowly; some were missed"
                    );
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The fleet's plugin set, when the store is shared.
    pub fn plugin_set(&self) -> Option<&dyn plugin_set::PluginSet> {
        self.backend.plugin_set()
    }
}

/// One history entry as every transport stores it (see [`Store::append_entry`]).
fn history_entry(role: &str, body: &serde_json::Value) -> Result<Vec<u8>> {
    #[derive(Serialize)]
    struct HistoryEntry<'a> {
        role: &'a str,
        body: &'a serde_json::Value,
        at: u64,
    }
    encode(&HistoryEntry {
        role,
        body,
        at: now_ms(),
    })
}

fn decode_all<T: DeserializeOwned>(raw: Vec<Vec<u8>>) -> Result<Vec<T>> {
    raw.iter()
        .map(|bytes| serde_json::from_slice(bytes).map_err(StoreError::from))
        .collect()
}

/// Plugin key-value keys: `plugin \0 key`, so namespaces cannot overlap.
pub fn plugin_key(plugin: &str, key: &str) -> Vec<u8> {
    let mut full = plugin.as_bytes().to_vec();
    full.push(0);
    full.extend_from_slice(key.as_bytes());
    full
}
