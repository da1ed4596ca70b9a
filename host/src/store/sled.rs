//! The embedded default backend: one sled database under `data_dir/state`.
//!
//! Flush policy: [`Backend::commit`] waits for sled to flush to disk before
//! the reply is sent. Commits are grouped: one flusher task runs sled's
//! blocking `flush` (and syncs the journal of replay claims and keyed
//! entries, [`super::journal`])
//! for every commit that arrived before it started, so concurrent requests
//! share an fsync, and a commit with no write of its own pending returns at
//! once. (sled 0.34's `flush_async` deadlocks when several are in flight at
//! once — spacejam/sled#1308 — so it is never used.)
//!
//! On disk each value is `{"expires_at_ms": …, "value": …}`, the format the
//! node has always written, so an existing data folder opens unchanged.
//! sled's calls are short and in memory until the flush, so they run on the
//! async caller's thread as they always did; only the flush is blocking work.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::backend::{Backend, FleetMessage, RawEntry, Write};
use super::journal::{Journal, Lookup, Progress};
use super::{Collection, HistoryPage, MemoryBounds, Result, StoreError, now_ms};

/// Where a history's counters live: `id` → [`HistoryMeta`]. Kept apart from the
/// entries so that a prefix scan of a history never meets them.
const HISTORY_META_TREE: &str = "history_meta";

pub struct SledBackend {
    db: sled::Db,
    journal: Arc<Journal>,
    /// Writes to sled's trees against those flushed.
    tree_progress: Arc<Progress>,
    flusher: OnceLock<mpsc::UnboundedSender<FlushWaiter>>,
    /// Nothing is ever sent: one node has no peers. Kept so `subscribe` can hand out receivers.
    fleet: broadcast::Sender<FleetMessage>,
}

type FlushWaiter = oneshot::Sender<std::result::Result<(), String>>;

#[derive(Serialize)]
struct EntryOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<u64>,
    value: &'a RawValue,
}

#[derive(Deserialize)]
struct EntryIn<'a> {
    #[serde(default)]
    expires_at_ms: Option<u64>,
    #[serde(borrow)]
    value: &'a RawValue,
}

impl EntryIn<'_> {
    fn is_live(&self) -> bool {
        self.expires_at_ms.is_none_or(|at| at > now_ms())
    }

    fn raw(&self) -> RawEntry {
        RawEntry {
            value: self.value.get().as_bytes().to_vec(),
            expires_at_ms: self.expires_at_ms,
        }
    }
}

fn encode(value: &[u8], expires_at_ms: Option<u64>) -> Result<Vec<u8>> {
    let text = std::str::from_utf8(value)
        .map_err(|e| StoreError::Unavailable(format!("value is not UTF-8: {e}")))?;
    let value: &RawValue = serde_json::from_str(text)?;
    Ok(serde_json::to_vec(&EntryOut { expires_at_ms, value })?)
}

fn decode(bytes: &[u8]) -> Result<EntryIn<'_>> {
    Ok(serde_json::from_slice(bytes)?)
}

/// What a temporary store holds in memory before spilling.
const TEMPORARY_BOUNDS: MemoryBounds = MemoryBounds {
    max_claims: 1 << 20,
    max_keyed_bytes: super::DEFAULT_MAX_KEYED_BYTES_IN_MEMORY,
};

impl SledBackend {
    /// The database in `dir`, and its journal of replay claims and keyed
    /// entries beside it (`dir` + `.claims`, named for what it first held).
    pub fn open(dir: &Path, bounds: MemoryBounds) -> Result<SledBackend> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .open()?;
        let journal = Journal::open(&dir.with_extension("claims"), bounds)?;
        Ok(SledBackend::with_db(db, journal))
    }

    pub fn temporary() -> Result<SledBackend> {
        Ok(SledBackend::with_db(
            sled::Config::new().temporary(true).open()?,
            Journal::in_memory(TEMPORARY_BOUNDS),
        ))
    }

    fn with_db(db: sled::Db, journal: Journal) -> SledBackend {
        SledBackend {
            db,
            journal: Arc::new(journal),
            tree_progress: Arc::new(Progress::default()),
            // Started by the first commit, inside the runtime.
            flusher: OnceLock::new(),
            fleet: broadcast::channel(1).0,
        }
    }

    fn reading(&self, collection: Collection) -> Result<Reading> {
        Ok(Reading(self.db.open_tree(collection.table_name())?))
    }

    fn writing(&self, collection: Collection) -> Result<Writing<'_>> {
        self.writing_named(collection.table_name())
    }

    fn writing_named(&self, name: &str) -> Result<Writing<'_>> {
        Ok(Writing {
            tree: self.db.open_tree(name)?,
            progress: &self.tree_progress,
        })
    }

    /// Whether a commit now would have sled writes to flush.
    #[cfg(test)]
    pub(super) fn has_unflushed_writes(&self) -> bool {
        !self.tree_progress.all_durable()
    }

    /// The raw history tree, for tests that write a legacy history by hand.
    #[cfg(test)]
    pub(super) fn history_tree(&self) -> sled::Tree {
        self.writing(Collection::History)
            .expect("history tree")
            .tree
            .clone()
    }
}

/// A tree opened to read: only sled's reading methods, so no write can
/// bypass the bookkeeping of [`Writing`].
struct Reading(sled::Tree);

impl Reading {
    fn get(&self, key: &[u8]) -> sled::Result<Option<sled::IVec>> {
        self.0.get(key)
    }

    fn range(&self, range: std::ops::Range<Vec<u8>>) -> sled::Iter {
        self.0.range(range)
    }

    fn scan_prefix(&self, prefix: &[u8]) -> sled::Iter {
        self.0.scan_prefix(prefix)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A tree opened to write. Dropping it counts a write in `tree_progress`,
/// after whatever was done through it, so the next flush round's mark covers
/// that write and a commit cannot return before it is on disk: a commit with
/// nothing pending skips the flush, and no write path has to remember to
/// count itself. (A write that failed is counted too; that costs at most one
/// flush.)
struct Writing<'a> {
    tree: sled::Tree,
    progress: &'a Progress,
}

impl std::ops::Deref for Writing<'_> {
    type Target = sled::Tree;
    fn deref(&self) -> &sled::Tree {
        &self.tree
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.progress.wrote();
    }
}

/// Insert unless a live entry is there (the body of [`Backend::insert_new`]).
fn insert_if_absent(tree: &Writing<'_>, key: &[u8], bytes: Vec<u8>) -> Result<bool> {
    loop {
        let current = tree.get(key)?;
        if let Some(existing) = &current
            && decode(existing)?.is_live()
        {
            return Ok(false);
        }
        if tree.compare_and_swap(key, current, Some(bytes.clone()))?.is_ok() {
            return Ok(true);
        }
    }
}

#[async_trait]
impl Backend for SledBackend {
    fn name(&self) -> &'static str {
        "sled"
    }

    async fn get(&self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>> {
        let Some(bytes) = self.reading(collection)?.get(key)? else {
            return Ok(None);
        };
        let entry = decode(&bytes)?;
        Ok(entry.is_live().then(|| entry.raw()))
    }

    async fn is_expired(&self, collection: Collection, key: &[u8]) -> Result<bool> {
        let Some(bytes) = self.reading(collection)?.get(key)? else {
            return Ok(false);
        };
        Ok(!decode(&bytes)?.is_live())
    }

    async fn put(
        &self,
        collection: Collection,
        key: &[u8],
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        self.writing(collection)?
            .insert(key, encode(value, expires_at_ms)?)?;
        Ok(())
    }

    /// One sled transaction over every tree the writes touch: sled recovers
    /// it whole or not at all, so a kill -9 never keeps half of it.
    async fn put_all(&self, writes: Vec<Write>) -> Result<()> {
        let mut names: Vec<&'static str> = Vec::new();
        let mut steps = Vec::with_capacity(writes.len());
        for write in writes {
            let (collection, key, value) = match write {
                Write::Put {
                    collection,
                    key,
                    value,
                    expires_at_ms,
                } => (collection, key, Some(encode(&value, expires_at_ms)?)),
                Write::Remove { collection, key } => (collection, key, None),
                Write::Append { .. } => {
                    return Err(StoreError::Database(
                        "a history append cannot join an atomic multi-entry write".into(),
                    ));
                }
            };
            let name = collection.table_name();
            let tree = match names.iter().position(|known| *known == name) {
                Some(index) => index,
                None => {
                    names.push(name);
                    names.len() - 1
                }
            };
            steps.push((tree, key, value));
        }
        // Held to the end: each counts its write for the next commit's flush.
        let writing = names
            .iter()
            .map(|name| self.writing_named(name))
            .collect::<Result<Vec<_>>>()?;
        let trees: Vec<sled::Tree> = writing.iter().map(|tree| tree.tree.clone()).collect();
        let outcome = trees[..].transaction(|views| {
            for (tree, key, value) in &steps {
                match value {
                    Some(value) => views[*tree].insert(key.as_slice(), value.as_slice())?,
                    None => views[*tree].remove(key.as_slice())?,
                };
            }
            Ok::<(), ConflictableTransactionError<()>>(())
        });
        match outcome {
            Ok(()) => Ok(()),
            Err(TransactionError::Abort(())) => {
                Err(StoreError::Database("an atomic write was aborted".into()))
            }
            Err(TransactionError::Storage(error)) => Err(error.into()),
        }
    }

    async fn remove(&self, collection: Collection, key: &[u8]) -> Result<bool> {
        Ok(self.writing(collection)?.remove(key)?.is_some())
    }

    async fn take(&self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>> {
        let Some(bytes) = self.writing(collection)?.remove(key)? else {
            return Ok(None);
        };
        let entry = decode(&bytes)?;
        Ok(entry.is_live().then(|| entry.raw()))
    }

    async fn insert_new(
        &self,
        collection: Collection,
        key: &[u8],
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<bool> {
        insert_if_absent(&self.writing(collection)?, key, encode(value, expires_at_ms)?)
    }

    /// In memory with a journal; past `store.max_claims_in_memory`, in the
    /// `replay` tree (see [`super::journal`]).
    async fn claim_once(&self, key: &[u8], expires_at_ms: u64) -> Result<bool> {
        // The tree is opened only when memory is full or something spilled.
        self.journal.claim(
            key,
            expires_at_ms,
            || match self.reading(Collection::Replay)?.get(key)? {
                Some(bytes) => Ok(decode(&bytes)?.is_live()),
                None => Ok(false),
            },
            || {
                let spill = self.writing(Collection::Replay)?;
                insert_if_absent(&spill, key, encode(b"1", Some(expires_at_ms))?)
            },
        )
    }

    async fn release_claim(&self, key: &[u8]) -> Result<()> {
        self.journal.release(key);
        if self.journal.has_spilled() {
            self.writing(Collection::Replay)?.remove(key)?;
        }
        Ok(())
    }

    /// In memory with a journal; past `store.max_keyed_bytes_in_memory`, in
    /// the collection's tree (see [`super::journal`]).
    async fn put_keyed(
        &self,
        collection: Collection,
        key: &[u8],
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        self.journal.put(collection, key, value, expires_at_ms, || {
            self.writing(collection)?
                .insert(key, encode(value, expires_at_ms)?)?;
            Ok(())
        })
    }

    async fn get_keyed(&self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>> {
        match self.journal.get(collection, key) {
            Lookup::Live(entry) => Ok(Some(RawEntry {
                value: entry.value.into_vec(),
                expires_at_ms: (entry.expires_at_ms != u64::MAX).then_some(entry.expires_at_ms),
            })),
            Lookup::Expired => Ok(None),
            Lookup::Absent => self.get(collection, key).await,
        }
    }

    async fn compare_and_swap(
        &self,
        collection: Collection,
        key: &[u8],
        expected: &[u8],
        new: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<bool> {
        let tree = self.writing(collection)?;
        let Some(current) = tree.get(key)? else {
            return Ok(false);
        };
        let entry = decode(&current)?;
        if !entry.is_live() {
            return Ok(false);
        }
        let stored: serde_json::Value = serde_json::from_str(entry.value.get())?;
        let expected: serde_json::Value = serde_json::from_slice(expected)?;
        if stored != expected {
            return Ok(false);
        }
        let bytes = encode(new, expires_at_ms)?;
        Ok(tree.compare_and_swap(key, Some(current), Some(bytes))?.is_ok())
    }

    /// The sequence number, the counters and the entry are written in one sled
    /// transaction, so concurrent appenders each get their own slot and the
    /// quota holds under concurrency (a read-then-insert lost entries).
    async fn append_history(&self, id: &str, entry: &[u8], max_entries: u64, max_bytes: u64) -> Result<()> {
        let history = self.writing(Collection::History)?;
        let meta = self.writing_named(HISTORY_META_TREE)?;
        let prefix = history_prefix(id);
        // A history written before the counters existed gets them from a scan,
        // once; the transaction below prefers counters another appender stored.
        let initial = if meta.get(id.as_bytes())?.is_none() {
            scan_meta(&history, &prefix)?
        } else {
            HistoryMeta::default()
        };
        let size = entry.len() as u64;
        let outcome = (&*history, &*meta).transaction(|(history, meta)| {
            let current = match meta.get(id.as_bytes())? {
                Some(raw) => HistoryMeta::decode(&raw),
                None => initial,
            };
            if current.entries >= max_entries {
                return Err(ConflictableTransactionError::Abort(HistoryFull::Entries));
            }
            if current.bytes.saturating_add(size) > max_bytes {
                return Err(ConflictableTransactionError::Abort(HistoryFull::Bytes));
            }
            let mut key = prefix.clone();
            key.extend_from_slice(&current.next.to_be_bytes());
            history.insert(key, entry)?;
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
            Err(TransactionError::Abort(HistoryFull::Entries)) => {
                Err(StoreError::history_full_entries(id, max_entries))
            }
            Err(TransactionError::Abort(HistoryFull::Bytes)) => {
                Err(StoreError::history_full_bytes(id, max_bytes))
            }
            Err(TransactionError::Storage(error)) => Err(error.into()),
        }
    }

    async fn history_page(
        &self,
        id: &str,
        after: Option<u64>,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<HistoryPage<Vec<u8>>> {
        let tree = self.reading(Collection::History)?;
        let prefix = history_prefix(id);
        let mut start = prefix.clone();
        if let Some(after) = after {
            let Some(first) = after.checked_add(1) else {
                return Ok(HistoryPage::empty());
            };
            start.extend_from_slice(&first.to_be_bytes());
        }
        let mut page = super::PageBuilder::new(max_entries, max_bytes);
        for item in tree.range(start..history_end(id)) {
            let (key, value) = item?;
            if !page.push(sequence_of(&key[prefix.len()..]), value.to_vec()) {
                return Ok(page.finish(true));
            }
        }
        Ok(page.finish(false))
    }

    async fn history_tail(&self, id: &str, max_entries: usize, max_bytes: usize) -> Result<Vec<Vec<u8>>> {
        let tree = self.reading(Collection::History)?;
        let mut page = super::PageBuilder::new(max_entries, max_bytes);
        for item in tree.range(history_prefix(id)..history_end(id)).rev() {
            let (key, value) = item?;
            if !page.push(sequence_of(&key[id.len() + 1..]), value.to_vec()) {
                break;
            }
        }
        let mut entries = page.finish(false).entries;
        entries.reverse();
        Ok(entries)
    }

    async fn remove_history(&self, id: &str) -> Result<()> {
        // Counters first: a crash after this leaves entries that the next
        // append recounts, never counters that overstate an emptied history.
        self.writing_named(HISTORY_META_TREE)?.remove(id.as_bytes())?;
        let tree = self.writing(Collection::History)?;
        for item in tree.scan_prefix(history_prefix(id)) {
            tree.remove(item?.0)?;
        }
        Ok(())
    }

    async fn keys(&self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<Vec<u8>>> {
        self.reading(collection)?
            .scan_prefix(prefix)
            .keys()
            .take(limit)
            .map(|key| Ok(key?.to_vec()))
            .collect()
    }

    async fn sweep(&self) -> Result<usize> {
        let now = now_ms();
        let mut removed = 0;
        for collection in Collection::ALL {
            if collection == Collection::History {
                continue;
            }
            let tree = self.writing(collection)?;
            let mut expired = Vec::new();
            for item in tree.iter() {
                let (key, bytes) = item?;
                if decode(&bytes).is_ok_and(|entry| entry.expires_at_ms.is_some_and(|at| at <= now)) {
                    expired.push((key, bytes));
                }
            }
            for (key, bytes) in expired {
                // Only if unchanged since the scan: an expired key taken anew
                // meanwhile (a replay id reused after its window) stays.
                if tree.compare_and_swap(&key, Some(bytes), None::<&[u8]>)?.is_err() {
                    continue;
                }
                if collection.owns_history() {
                    self.remove_history(&String::from_utf8_lossy(&key)).await?;
                }
                removed += 1;
            }
        }
        removed += self.journal.sweep();
        if self.journal.has_spilled() {
            let spill = self.reading(Collection::Replay)?;
            self.journal.end_spill_if(|| spill.is_empty());
        }
        Ok(removed)
    }

    async fn commit(&self) -> Result<()> {
        if self.tree_progress.all_durable() && self.journal.progress.all_durable() {
            return Ok(());
        }
        let flusher = self
            .flusher
            .get_or_init(|| spawn_flusher(self.db.clone(), self.journal.clone(), self.tree_progress.clone()));
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

    async fn ping(&self) -> Result<()> {
        Ok(())
    }

    async fn publish(&self, _topic: &str, _payload: &[u8]) -> Result<()> {
        Ok(())
    }

    fn subscribe(&self) -> broadcast::Receiver<FleetMessage> {
        self.fleet.subscribe()
    }
}

/// The group-commit loop: each round makes durable every write made before
/// it began, for every waiter queued by then. (A dedicated thread instead of
/// this task and `spawn_blocking` was measured: it saves a hand-off per
/// round, but waking hundreds of waiters from outside the runtime cost more:
/// bench row 13 lost ~20 % of its answers per CPU-second.)
fn spawn_flusher(
    db: sled::Db,
    journal: Arc<Journal>,
    tree_progress: Arc<Progress>,
) -> mpsc::UnboundedSender<FlushWaiter> {
    let (queue, mut waiting) = mpsc::unbounded_channel::<FlushWaiter>();
    tokio::spawn(async move {
        while let Some(first) = waiting.recv().await {
            let mut batch = vec![first];
            while let Ok(next) = waiting.try_recv() {
                batch.push(next);
            }
            let (db, journal, tree_progress) = (db.clone(), journal.clone(), tree_progress.clone());
            let result = tokio::task::spawn_blocking(move || {
                let result = flush_round(&db, &journal, &tree_progress);
                if journal.wants_rewrite()
                    && let Err(error) = journal.rewrite()
                {
                    tracing::warn!(%error, "rewriting the store journal failed; it keeps growing until a rewrite succeeds");
                }
                result
            })
            .await
            .unwrap_or_else(|error| Err(error.to_string()));
            for waiter in batch {
                let _ = waiter.send(result.clone());
            }
        }
    });
    queue
}

/// One group commit: the journal, then sled if any tree changed.
fn flush_round(
    db: &sled::Db,
    journal: &Journal,
    tree_progress: &Progress,
) -> std::result::Result<(), String> {
    let journal_mark = journal.progress.mark();
    let tree_mark = tree_progress.mark();
    journal.flush().map_err(|error| error.to_string())?;
    journal.progress.made_durable(journal_mark);
    if tree_progress.behind(tree_mark) {
        db.flush().map_err(|error| error.to_string())?;
        tree_progress.made_durable(tree_mark);
    }
    Ok(())
}

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

pub(super) fn history_prefix(id: &str) -> Vec<u8> {
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
