//! Durable node state in sled: conversations, sessions, replay windows,
//! negotiations and the plugins' key-value data.
//!
//! Flush policy: a write a client is about to be told succeeded goes through
//! [`Store::commit`], which waits for sled to flush to disk before the reply is
//! sent. Commits are grouped: one flusher task runs sled's blocking `flush` for
//! every commit that arrived before it started, so concurrent requests share an
//! fsync. (sled 0.34's `flush_async` deadlocks when several are in flight at
//! once — spacejam/sled#1308 — so it is never used.) Entries may carry an expiry; expired entries read as absent at once
//! and are removed by [`Store::sweep`], which the node runs periodically.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use tokio::sync::{mpsc, oneshot};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage: {0}")]
    Sled(#[from] sled::Error),
    #[error("stored record is corrupt: {0}")]
    Corrupt(#[from] serde_json::Error),
    /// A quota the client's own requests reached (a history full in entries or
    /// bytes): the client's fault, answered with the transport's "limit" error.
    #[error("{0}")]
    Limit(String),
    /// The store cannot take writes (its flusher stopped, a flush failed): the
    /// node's fault, answered as an internal error.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

impl StoreError {
    /// Whether the client caused this (a quota), rather than the node (a failure).
    pub fn is_quota(&self) -> bool {
        matches!(self, StoreError::Limit(_))
    }
}

/// Default of `store.max_history_bytes`: what one conversation's or session's
/// history may hold, in serialized bytes.
pub const DEFAULT_MAX_HISTORY_BYTES: u64 = 8 << 20;

/// Where a history's counters live: `id` → [`HistoryMeta`]. Kept apart from the
/// entries so that a prefix scan of a history never meets them.
const HISTORY_META_TREE: &str = "history_meta";

/// What an append checks and updates in one transaction with the entry itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct HistoryMeta {
    /// Sequence number of the next entry.
    next: u64,
    entries: u64,
    bytes: u64,
}

impl HistoryMeta {
    fn encode(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..8].copy_from_slice(&self.next.to_be_bytes());
        out[8..16].copy_from_slice(&self.entries.to_be_bytes());
        out[16..].copy_from_slice(&self.bytes.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> HistoryMeta {
        HistoryMeta {
            next: sequence_of(bytes.get(..8).unwrap_or_default()),
            entries: sequence_of(bytes.get(8..16).unwrap_or_default()),
            bytes: sequence_of(bytes.get(16..24).unwrap_or_default()),
        }
    }
}

/// Why an append was refused inside its transaction.
#[derive(Debug, Clone, Copy)]
enum HistoryFull {
    Entries,
    Bytes,
}

/// One bounded read of a history.
#[derive(Debug)]
pub struct HistoryPage<T> {
    /// Oldest first.
    pub entries: Vec<T>,
    /// Pass as `after` to read on; `None` when nothing follows.
    pub next_after: Option<u64>,
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Named collections. Each is its own sled tree.
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
    /// Node-level facts (identity seeds and such).
    Meta,
}

impl Collection {
    const ALL: [Collection; 7] = [
        Collection::PluginKv,
        Collection::Conversations,
        Collection::History,
        Collection::Sessions,
        Collection::Replay,
        Collection::Negotiations,
        Collection::Meta,
    ];

    fn tree_name(self) -> &'static str {
        match self {
            Collection::PluginKv => "plugin_kv",
            Collection::Conversations => "conversations",
            Collection::History => "history",
            Collection::Sessions => "sessions",
            Collection::Replay => "replay",
            Collection::Negotiations => "negotiations",
            Collection::Meta => "meta",
        }
    }
}

/// A stored value with an optional expiry (Unix milliseconds).
#[derive(Serialize, serde::Deserialize)]
struct Entry<T> {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    expires_at_ms: Option<u64>,
    value: T,
}

#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    flusher: Arc<OnceLock<mpsc::UnboundedSender<FlushWaiter>>>,
    max_history_bytes: u64,
}

type FlushWaiter = oneshot::Sender<std::result::Result<(), String>>;

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Store {
    pub fn open(dir: &Path) -> Result<Store> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .open()?;
        Ok(Store {
            db,
            flusher: Arc::default(),
            max_history_bytes: DEFAULT_MAX_HISTORY_BYTES,
        })
    }

    /// The byte quota of every history (`store.max_history_bytes`).
    pub fn with_history_quota(mut self, max_bytes: u64) -> Store {
        self.max_history_bytes = max_bytes;
        self
    }

    /// A throw-away store (tests, tools).
    pub fn temporary() -> Result<Store> {
        Ok(Store {
            db: sled::Config::new().temporary(true).open()?,
            flusher: Arc::default(),
            max_history_bytes: DEFAULT_MAX_HISTORY_BYTES,
        })
    }

    fn tree(&self, collection: Collection) -> Result<sled::Tree> {
        Ok(self.db.open_tree(collection.tree_name())?)
    }

    /// Wait until every write so far is on disk.
    pub async fn commit(&self) -> Result<()> {
        let flusher = self.flusher.get_or_init(|| spawn_flusher(self.db.clone()));
        let (done, flushed) = oneshot::channel();
        flusher
            .send(done)
            .map_err(|_| StoreError::Unavailable("the store is shutting down".into()))?;
        match flushed.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(StoreError::Unavailable(format!(
                "flushing to disk failed: {message}"
            ))),
            Err(_) => Err(StoreError::Unavailable("the store flusher stopped".into())),
        }
    }

    pub fn put<T: Serialize>(
        &self,
        collection: Collection,
        key: &[u8],
        value: &T,
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        let bytes = serde_json::to_vec(&Entry { expires_at_ms, value })?;
        self.tree(collection)?.insert(key, bytes)?;
        Ok(())
    }

    pub fn get<T: DeserializeOwned>(&self, collection: Collection, key: &[u8]) -> Result<Option<T>> {
        Ok(self.get_with_expiry(collection, key)?.map(|(value, _)| value))
    }

    /// The value and its expiry, or `None` when absent or expired.
    pub fn get_with_expiry<T: DeserializeOwned>(
        &self,
        collection: Collection,
        key: &[u8],
    ) -> Result<Option<(T, Option<u64>)>> {
        let Some(bytes) = self.tree(collection)?.get(key)? else {
            return Ok(None);
        };
        let entry: Entry<T> = serde_json::from_slice(&bytes)?;
        if entry.expires_at_ms.is_some_and(|at| at <= now_ms()) {
            return Ok(None);
        }
        Ok(Some((entry.value, entry.expires_at_ms)))
    }

    /// Whether a key exists even if it has expired (so an expired id can be told from an unknown one).
    pub fn expired(&self, collection: Collection, key: &[u8]) -> Result<bool> {
        let Some(bytes) = self.tree(collection)?.get(key)? else {
            return Ok(false);
        };
        let entry: Entry<serde_json::Value> = serde_json::from_slice(&bytes)?;
        Ok(entry.expires_at_ms.is_some_and(|at| at <= now_ms()))
    }

    pub fn remove(&self, collection: Collection, key: &[u8]) -> Result<bool> {
        Ok(self.tree(collection)?.remove(key)?.is_some())
    }

    /// Insert only if the key is absent (or expired). Returns false when a live entry exists:
    /// the primitive behind replay windows and one-time offers.
    pub fn insert_new<T: Serialize>(
        &self,
        collection: Collection,
        key: &[u8],
        value: &T,
        expires_at_ms: Option<u64>,
    ) -> Result<bool> {
        let tree = self.tree(collection)?;
        let bytes = serde_json::to_vec(&Entry { expires_at_ms, value })?;
        loop {
            let current = tree.get(key)?;
            if let Some(existing) = &current {
                let entry: Entry<serde_json::Value> = serde_json::from_slice(existing)?;
                if entry.expires_at_ms.is_none_or(|at| at > now_ms()) {
                    return Ok(false);
                }
            }
            match tree.compare_and_swap(key, current, Some(bytes.clone()))? {
                Ok(()) => return Ok(true),
                Err(_) => continue,
            }
        }
    }

    /// Replace a value only if it still equals `expected` (JSON equality); false if it changed.
    pub fn update<T: Serialize + DeserializeOwned + PartialEq>(
        &self,
        collection: Collection,
        key: &[u8],
        expected: &T,
        new: &T,
        expires_at_ms: Option<u64>,
    ) -> Result<bool> {
        let tree = self.tree(collection)?;
        let Some(current) = tree.get(key)? else {
            return Ok(false);
        };
        let entry: Entry<T> = serde_json::from_slice(&current)?;
        if &entry.value != expected {
            return Ok(false);
        }
        let bytes = serde_json::to_vec(&Entry {
            expires_at_ms,
            value: new,
        })?;
        Ok(tree.compare_and_swap(key, Some(current), Some(bytes))?.is_ok())
    }

    /// Append to the history of `id` (a conversation or session), refused with
    /// [`StoreError::Limit`] when the history holds `max_entries` entries or the
    /// entry would take it past the byte quota.
    ///
    /// The sequence number, the counters and the entry are written in one sled
    /// transaction, so concurrent appenders each get their own slot and the
    /// quota holds under concurrency (a read-then-insert lost entries).
    pub fn append_history<T: Serialize>(&self, id: &str, entry: &T, max_entries: usize) -> Result<()> {
        let bytes = serde_json::to_vec(entry)?;
        let history = self.tree(Collection::History)?;
        let meta = self.db.open_tree(HISTORY_META_TREE)?;
        let prefix = history_prefix(id);
        // A history written before the counters existed gets them from a scan,
        // once; the transaction below prefers counters another appender stored.
        let initial = if meta.get(id.as_bytes())?.is_none() {
            scan_meta(&history, &prefix)?
        } else {
            HistoryMeta::default()
        };
        let quota = self.max_history_bytes;
        let size = bytes.len() as u64;
        let outcome = (&history, &meta).transaction(|(history, meta)| {
            let current = match meta.get(id.as_bytes())? {
                Some(raw) => HistoryMeta::decode(&raw),
                None => initial,
            };
            if current.entries >= max_entries as u64 {
                return Err(ConflictableTransactionError::Abort(HistoryFull::Entries));
            }
            if current.bytes.saturating_add(size) > quota {
                return Err(ConflictableTransactionError::Abort(HistoryFull::Bytes));
            }
            let mut key = prefix.clone();
            key.extend_from_slice(&current.next.to_be_bytes());
            history.insert(key, bytes.as_slice())?;
            let next = HistoryMeta {
                next: current.next + 1,
                entries: current.entries + 1,
                bytes: current.bytes + size,
            };
            meta.insert(id.as_bytes(), &next.encode()[..])?;
            Ok(())
        });
        match outcome {
            Ok(()) => Ok(()),
            Err(TransactionError::Abort(HistoryFull::Entries)) => Err(StoreError::Limit(format!(
                "history of {id} is full ({max_entries} entries)"
            ))),
            Err(TransactionError::Abort(HistoryFull::Bytes)) => Err(StoreError::Limit(format!(
                "history of {id} is full (its quota is {quota} bytes)"
            ))),
            Err(TransactionError::Storage(error)) => Err(error.into()),
        }
    }

    /// Entries of `id` after sequence number `after` (from the start when
    /// `None`), oldest first: at most `max_entries`, and at most `max_bytes` of
    /// stored JSON unless the first entry alone is larger (then it is the page,
    /// so a reader always moves on; the history's quota bounds it).
    pub fn history_page<T: DeserializeOwned>(
        &self,
        id: &str,
        after: Option<u64>,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<HistoryPage<T>> {
        let tree = self.tree(Collection::History)?;
        let prefix = history_prefix(id);
        let mut start = prefix.clone();
        if let Some(after) = after {
            let Some(first) = after.checked_add(1) else {
                return Ok(HistoryPage {
                    entries: Vec::new(),
                    next_after: None,
                });
            };
            start.extend_from_slice(&first.to_be_bytes());
        }
        let max_entries = max_entries.max(1);
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        let mut last = None;
        for item in tree.range(start..history_end(id)) {
            let (key, value) = item?;
            let full = entries.len() >= max_entries
                || (!entries.is_empty() && bytes.saturating_add(value.len()) > max_bytes);
            if full {
                return Ok(HistoryPage {
                    entries,
                    next_after: last,
                });
            }
            bytes += value.len();
            last = Some(sequence_of(&key[prefix.len()..]));
            entries.push(serde_json::from_slice(&value)?);
        }
        Ok(HistoryPage {
            entries,
            next_after: None,
        })
    }

    /// The most recent entries of `id`, oldest first, within the same bounds as
    /// [`Store::history_page`] (what a plugin's `history()` gets).
    pub fn history_tail<T: DeserializeOwned>(
        &self,
        id: &str,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<Vec<T>> {
        let tree = self.tree(Collection::History)?;
        let max_entries = max_entries.max(1);
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        for item in tree.range(history_prefix(id)..history_end(id)).rev() {
            let (_, value) = item?;
            if entries.len() >= max_entries
                || (!entries.is_empty() && bytes.saturating_add(value.len()) > max_bytes)
            {
                break;
            }
            bytes += value.len();
            entries.push(serde_json::from_slice(&value)?);
        }
        entries.reverse();
        Ok(entries)
    }

    pub fn remove_history(&self, id: &str) -> Result<()> {
        // Counters first: a crash after this leaves entries that the next
        // append recounts, never counters that overstate an emptied history.
        self.db.open_tree(HISTORY_META_TREE)?.remove(id.as_bytes())?;
        let tree = self.tree(Collection::History)?;
        for item in tree.scan_prefix(history_prefix(id)) {
            tree.remove(item?.0)?;
        }
        Ok(())
    }

    /// Keys of `collection` starting with `prefix`, at most `limit`.
    pub fn keys(&self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<Vec<u8>>> {
        self.tree(collection)?
            .scan_prefix(prefix)
            .keys()
            .take(limit)
            .map(|key| Ok(key?.to_vec()))
            .collect()
    }

    /// Remove every expired entry. Returns how many were removed.
    pub fn sweep(&self) -> Result<usize> {
        let now = now_ms();
        let mut removed = 0;
        for collection in Collection::ALL {
            if collection == Collection::History {
                continue;
            }
            let tree = self.tree(collection)?;
            for item in tree.iter() {
                let (key, bytes) = item?;
                let Ok(entry) = serde_json::from_slice::<Entry<serde_json::Value>>(&bytes) else {
                    continue;
                };
                if entry.expires_at_ms.is_some_and(|at| at <= now) {
                    if collection == Collection::Conversations || collection == Collection::Sessions {
                        self.remove_history(&String::from_utf8_lossy(&key))?;
                    }
                    tree.remove(key)?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

/// The group-commit loop: each round flushes once for every waiter queued before it began.
fn spawn_flusher(db: sled::Db) -> mpsc::UnboundedSender<FlushWaiter> {
    let (queue, mut waiting) = mpsc::unbounded_channel::<FlushWaiter>();
    tokio::spawn(async move {
        while let Some(first) = waiting.recv().await {
            let mut batch = vec![first];
            while let Ok(next) = waiting.try_recv() {
                batch.push(next);
            }
            let db = db.clone();
            let result = match tokio::task::spawn_blocking(move || db.flush()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(error) => Err(error.to_string()),
            };
            for waiter in batch {
                let _ = waiter.send(result.clone());
            }
        }
    });
    queue
}

fn history_prefix(id: &str) -> Vec<u8> {
    let mut prefix = id.as_bytes().to_vec();
    prefix.push(0);
    prefix
}

/// The first key past every entry of `id` (its prefix ends in 0, so 1 follows all of them).
fn history_end(id: &str) -> Vec<u8> {
    let mut end = id.as_bytes().to_vec();
    end.push(1);
    end
}

/// Counters of a history that has none stored yet, from its entries.
fn scan_meta(tree: &sled::Tree, prefix: &[u8]) -> Result<HistoryMeta> {
    let mut meta = HistoryMeta::default();
    for item in tree.scan_prefix(prefix) {
        let (key, value) = item?;
        meta.next = sequence_of(&key[prefix.len()..]) + 1;
        meta.entries += 1;
        meta.bytes += value.len() as u64;
    }
    Ok(meta)
}

fn sequence_of(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    if bytes.len() == 8 {
        buf.copy_from_slice(bytes);
    }
    u64::from_be_bytes(buf)
}

/// Plugin key-value keys: `plugin \0 key`, so namespaces cannot overlap.
pub fn plugin_key(plugin: &str, key: &str) -> Vec<u8> {
    let mut full = plugin.as_bytes().to_vec();
    full.push(0);
    full.extend_from_slice(key.as_bytes());
    full
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_concurrent_commits_all_complete() {
        let store = Store::temporary().unwrap();
        let tasks: Vec<_> = (0..64u32)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    store.put(Collection::Meta, &i.to_be_bytes(), &i, None).unwrap();
                    store.commit().await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(
            store.get::<u32>(Collection::Meta, &7u32.to_be_bytes()).unwrap(),
            Some(7)
        );
    }

    #[test]
    fn expired_entries_read_as_absent_and_are_swept() {
        let store = Store::temporary().unwrap();
        store
            .put(Collection::Replay, b"old", &1, Some(now_ms() - 1))
            .unwrap();
        store
            .put(Collection::Replay, b"live", &2, Some(now_ms() + 60_000))
            .unwrap();
        assert_eq!(store.get::<i32>(Collection::Replay, b"old").unwrap(), None);
        assert!(store.expired(Collection::Replay, b"old").unwrap());
        assert_eq!(store.sweep().unwrap(), 1);
        assert_eq!(store.get::<i32>(Collection::Replay, b"live").unwrap(), Some(2));
    }

    #[test]
    fn insert_new_refuses_a_live_duplicate_but_reuses_an_expired_one() {
        let store = Store::temporary().unwrap();
        assert!(
            store
                .insert_new(Collection::Replay, b"k", &1, Some(now_ms() + 60_000))
                .unwrap()
        );
        assert!(
            !store
                .insert_new(Collection::Replay, b"k", &1, Some(now_ms() + 60_000))
                .unwrap()
        );
        store
            .put(Collection::Replay, b"e", &1, Some(now_ms() - 1))
            .unwrap();
        assert!(store.insert_new(Collection::Replay, b"e", &1, None).unwrap());
    }

    fn whole<T: DeserializeOwned>(store: &Store, id: &str) -> Vec<T> {
        store
            .history_page(id, None, usize::MAX, usize::MAX)
            .unwrap()
            .entries
    }

    #[test]
    fn history_appends_in_order_and_is_bounded() {
        let store = Store::temporary().unwrap();
        for i in 0..3 {
            store.append_history("c1", &i, 3).unwrap();
        }
        store.append_history("c2", &9, 3).unwrap();
        assert_eq!(whole::<i32>(&store, "c1"), vec![0, 1, 2]);
        let refused = store.append_history("c1", &3, 3).unwrap_err();
        assert!(refused.is_quota(), "{refused}");
        assert_eq!(whole::<i32>(&store, "c2"), vec![9]);
        // An id that is a prefix of another ("c" of "c1") reads only its own entries.
        store.append_history("c", &7, 3).unwrap();
        assert_eq!(whole::<i32>(&store, "c"), vec![7]);
    }

    #[test]
    fn history_pages_follow_the_cursor_within_entry_and_byte_caps() {
        let store = Store::temporary().unwrap();
        for i in 0..10u32 {
            store.append_history("h", &i, 100).unwrap();
        }
        let mut read = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = store.history_page::<u32>("h", after, 3, usize::MAX).unwrap();
            assert!(page.entries.len() <= 3);
            read.extend(page.entries);
            pages += 1;
            match page.next_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(read, (0..10).collect::<Vec<_>>());
        assert_eq!(pages, 4);
        // Each entry is one byte of JSON: a 4-byte cap gives four entries.
        let page = store.history_page::<u32>("h", Some(1), 100, 4).unwrap();
        assert_eq!(page.entries, vec![2, 3, 4, 5]);
        assert_eq!(page.next_after, Some(5));
        assert!(
            store
                .history_page::<u32>("h", Some(9), 100, 100)
                .unwrap()
                .entries
                .is_empty()
        );
        assert!(
            store
                .history_page::<u32>("h", Some(u64::MAX), 100, 100)
                .unwrap()
                .entries
                .is_empty()
        );
        // The tail is the most recent entries that fit, oldest first.
        assert_eq!(
            store.history_tail::<u32>("h", 3, usize::MAX).unwrap(),
            vec![7, 8, 9]
        );
        assert_eq!(store.history_tail::<u32>("h", 100, 2).unwrap(), vec![8, 9]);
    }

    #[test]
    fn an_entry_larger_than_the_byte_cap_is_a_page_of_its_own() {
        let store = Store::temporary().unwrap();
        let big = "x".repeat(1000);
        store.append_history("h", &"a", 10).unwrap();
        store.append_history("h", &big, 10).unwrap();
        store.append_history("h", &"b", 10).unwrap();
        let first = store.history_page::<String>("h", None, 10, 100).unwrap();
        assert_eq!(first.entries, vec!["a".to_string()]);
        let second = store
            .history_page::<String>("h", first.next_after, 10, 100)
            .unwrap();
        assert_eq!(second.entries, vec![big]);
        let third = store
            .history_page::<String>("h", second.next_after, 10, 100)
            .unwrap();
        assert_eq!(third.entries, vec!["b".to_string()]);
        assert_eq!(third.next_after, None);
    }

    #[test]
    fn the_byte_quota_refuses_an_append_and_ending_the_history_frees_it() {
        let store = Store::temporary().unwrap().with_history_quota(100);
        let entry = "y".repeat(38); // 40 bytes of JSON
        store.append_history("q", &entry, 1000).unwrap();
        store.append_history("q", &entry, 1000).unwrap();
        let refused = store.append_history("q", &entry, 1000).unwrap_err();
        assert!(refused.is_quota(), "{refused}");
        assert!(refused.to_string().contains("100 bytes"), "{refused}");
        // A smaller entry that still fits is taken; another history is unaffected.
        store.append_history("q", &"z", 1000).unwrap();
        store.append_history("other", &entry, 1000).unwrap();
        assert_eq!(whole::<String>(&store, "q").len(), 3);
        store.remove_history("q").unwrap();
        assert!(whole::<String>(&store, "q").is_empty());
        store.append_history("q", &entry, 1000).unwrap();
        store.append_history("q", &entry, 1000).unwrap();
    }

    #[test]
    fn concurrent_appenders_lose_nothing() {
        let store = Store::temporary().unwrap();
        let threads: Vec<_> = (0..8u32)
            .map(|writer| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for i in 0..50u32 {
                        store
                            .append_history("shared", &(writer * 1000 + i), 10_000)
                            .unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let mut all = whole::<u32>(&store, "shared");
        assert_eq!(all.len(), 400);
        all.sort_unstable();
        let expected: Vec<u32> = (0..8).flat_map(|w| (0..50).map(move |i| w * 1000 + i)).collect();
        assert_eq!(all, expected);
        // Each writer's own entries stay in the order it appended them.
        let ordered = whole::<u32>(&store, "shared");
        for writer in 0..8 {
            let mine: Vec<u32> = ordered.iter().copied().filter(|v| v / 1000 == writer).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn concurrent_appenders_cannot_overrun_the_entry_limit() {
        let store = Store::temporary().unwrap();
        let threads: Vec<_> = (0..8u32)
            .map(|writer| {
                let store = store.clone();
                std::thread::spawn(move || {
                    (0..50u32)
                        .filter(|i| store.append_history("capped", &(writer * 1000 + i), 100).is_ok())
                        .count()
                })
            })
            .collect();
        let accepted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(accepted, 100);
        assert_eq!(whole::<u32>(&store, "capped").len(), 100);
    }

    #[test]
    fn a_history_without_counters_is_counted_once_and_continued() {
        let store = Store::temporary().unwrap();
        let tree = store.tree(Collection::History).unwrap();
        for i in 0..3u64 {
            let mut key = history_prefix("old");
            key.extend_from_slice(&i.to_be_bytes());
            tree.insert(key, serde_json::to_vec(&i).unwrap()).unwrap();
        }
        store.append_history("old", &3u64, 4).unwrap();
        assert_eq!(whole::<u64>(&store, "old"), vec![0, 1, 2, 3]);
        assert!(store.append_history("old", &4u64, 4).unwrap_err().is_quota());
    }
}
