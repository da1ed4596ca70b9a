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
use tokio::sync::{mpsc, oneshot};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage: {0}")]
    Sled(#[from] sled::Error),
    #[error("stored record is corrupt: {0}")]
    Corrupt(#[from] serde_json::Error),
    #[error("{0}")]
    Limit(String),
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
        })
    }

    /// A throw-away store (tests, tools).
    pub fn temporary() -> Result<Store> {
        Ok(Store {
            db: sled::Config::new().temporary(true).open()?,
            flusher: Arc::default(),
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
            .map_err(|_| StoreError::Limit("the store is shutting down".into()))?;
        match flushed.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(StoreError::Limit(format!("flushing to disk failed: {message}"))),
            Err(_) => Err(StoreError::Limit("the store flusher stopped".into())),
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
                if !entry.expires_at_ms.is_some_and(|at| at <= now_ms()) {
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

    /// Append to the history of `id` (a conversation or session).
    pub fn append_history<T: Serialize>(&self, id: &str, entry: &T, max_entries: usize) -> Result<()> {
        let tree = self.tree(Collection::History)?;
        let prefix = history_prefix(id);
        let next = match tree.scan_prefix(&prefix).next_back() {
            Some(last) => {
                let (key, _) = last?;
                sequence_of(&key[prefix.len()..]) + 1
            }
            None => 0,
        };
        if next as usize >= max_entries {
            return Err(StoreError::Limit(format!(
                "history of {id} is full ({max_entries} entries)"
            )));
        }
        let mut key = prefix;
        key.extend_from_slice(&next.to_be_bytes());
        tree.insert(key, serde_json::to_vec(entry)?)?;
        Ok(())
    }

    /// History of `id`, oldest first.
    pub fn history<T: DeserializeOwned>(&self, id: &str) -> Result<Vec<T>> {
        let tree = self.tree(Collection::History)?;
        tree.scan_prefix(history_prefix(id))
            .map(|item| Ok(serde_json::from_slice(&item?.1)?))
            .collect()
    }

    pub fn remove_history(&self, id: &str) -> Result<()> {
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

    #[test]
    fn history_appends_in_order_and_is_bounded() {
        let store = Store::temporary().unwrap();
        for i in 0..3 {
            store.append_history("c1", &i, 3).unwrap();
        }
        store.append_history("c2", &9, 3).unwrap();
        assert_eq!(store.history::<i32>("c1").unwrap(), vec![0, 1, 2]);
        assert!(store.append_history("c1", &3, 3).is_err());
        assert_eq!(store.history::<i32>("c2").unwrap(), vec![9]);
    }
}
