//! The one storage trait: what every backend must provide, on raw JSON bytes.
//!
//! The typed API the transports use is [`super::Store`]; it serializes with
//! serde and calls this trait, so a backend never sees a Rust type and the
//! transports never see a backend. Each method is one atomic step in the
//! backend (a sled transaction or compare-and-swap, one SQL statement or
//! transaction): the fleet guarantees — a replay accepted once, an offer
//! accepted once, a history that never overruns its quota — rest on that, not
//! on any read-then-write in the caller.
//!
//! A backend may also hand out a [`Transaction`]: one request's writes
//! committed together ([`super::UnitOfWork`]), each step inside it as atomic
//! as the method it stands for, its claims holding their rows until the commit.
//!
//! Values are the JSON text of one value. Expiry is Unix milliseconds by the
//! node's clock; an entry whose expiry has passed reads as absent at once, and
//! [`Backend::sweep`] removes it later.

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::{Collection, HistoryPage, Result};

/// A stored value and its expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// JSON text.
    pub value: Vec<u8>,
    pub expires_at_ms: Option<u64>,
}

/// A key [`Backend::entries`] listed, with its entry when the listing carried it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    pub key: Vec<u8>,
    /// `None` when the listing did not carry the value (a backend whose reads
    /// are local, or a value over [`LISTED_VALUE_MAX_BYTES`]): read it with `get`.
    /// Its expiry may have passed: the caller reads that as absent.
    pub entry: Option<RawEntry>,
}

/// The largest value [`Backend::entries`] carries with its key, so a listing
/// of `limit` keys moves at most `limit` times this much.
pub const LISTED_VALUE_MAX_BYTES: usize = 16 * 1024;

/// One message between the nodes of a fleet (see [`Backend::publish`]).
#[derive(Debug, Clone)]
pub struct FleetMessage {
    pub topic: String,
    pub payload: std::sync::Arc<[u8]>,
}

/// A write whose answer the request does not wait for, held by a
/// [`Transaction`] until its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Put {
        collection: Collection,
        key: Vec<u8>,
        /// JSON text.
        value: Vec<u8>,
        expires_at_ms: Option<u64>,
    },
    Remove {
        collection: Collection,
        key: Vec<u8>,
    },
    /// [`Backend::append_history`]: a refusal fails the whole commit with
    /// [`super::StoreError::Limit`], and nothing of the transaction is kept.
    Append {
        id: String,
        entry: Vec<u8>,
        max_entries: u64,
        max_bytes: u64,
    },
}

/// One database transaction for one request's writes: the steps that must
/// answer before the request goes on run in it at once (a replay claim) and
/// hold their rows until the commit, so every other node still sees one
/// winner; the other writes wait and go with the commit. Dropped without a
/// commit, it rolls back.
#[async_trait]
pub trait Transaction: Send + Sync {
    /// [`Backend::claim_once`] inside the transaction (begun here if it is not
    /// yet). Another node claiming the same key waits for this transaction's
    /// end, then finds the claim (committed) or takes it (rolled back).
    async fn claim_once(&mut self, key: &[u8], expires_at_ms: u64) -> Result<bool>;

    /// Whether a claim began the transaction and it holds a connection: the
    /// request's reads then go through it ([`Transaction::get`],
    /// [`Transaction::keys`]) rather than wait for a second connection.
    fn is_open(&self) -> bool;

    /// [`Backend::get`] inside the open transaction.
    async fn get(&mut self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>>;

    /// [`Backend::keys`] inside the open transaction.
    async fn keys(&mut self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<Vec<u8>>>;

    /// [`Backend::entries`] inside the open transaction.
    async fn entries(
        &mut self,
        collection: Collection,
        prefix: &[u8],
        limit: usize,
    ) -> Result<Vec<ListedEntry>> {
        Ok(unlisted(self.keys(collection, prefix, limit).await?))
    }

    /// Apply `writes` in order and commit, the claims made before with them:
    /// one commit, so one WAL flush. After it (committed or failed) the
    /// transaction is over and the next claim begins a new one.
    async fn commit(&mut self, writes: Vec<Write>) -> Result<()>;
}

#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// `"sled"` or `"postgres"`, for `/health` and logs.
    fn name(&self) -> &'static str;

    /// The live entry under `key`, or `None` (absent or expired).
    async fn get(&self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>>;

    /// Whether `key` holds an entry whose expiry has passed (not swept yet), so
    /// an expired id can be told from an unknown one.
    async fn is_expired(&self, collection: Collection, key: &[u8]) -> Result<bool>;

    async fn put(
        &self,
        collection: Collection,
        key: &[u8],
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<()>;

    /// [`Backend::put`] for an entry that is read back only by its key with
    /// [`Backend::get_keyed`], never listed, scanned or taken: a signed
    /// request's state, written once per request. The embedded store holds
    /// such entries in memory behind its journal (`store::journal`), so their
    /// commit costs no tree flush; every other backend, by default, just puts.
    async fn put_keyed(
        &self,
        collection: Collection,
        key: &[u8],
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        self.put(collection, key, value, expires_at_ms).await
    }

    /// The live entry [`Backend::put_keyed`] wrote under `key`, or `None`.
    async fn get_keyed(&self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>> {
        self.get(collection, key).await
    }

    /// Apply `writes` (puts and removes) as one atomic step: after a crash,
    /// all of them or none, so a record and another that must go with it (an
    /// A2A task's state and the deliveries it owes) are never split. By
    /// default one [`Transaction`] (PostgreSQL), entries in the lock order
    /// every unit uses; the embedded store overrides it with one sled
    /// transaction over the trees involved.
    async fn put_all(&self, mut writes: Vec<Write>) -> Result<()> {
        writes.sort_by(|a, b| write_key(a).cmp(&write_key(b)));
        match self.transaction() {
            Some(mut transaction) => transaction.commit(writes).await,
            None => Err(super::StoreError::Database(format!(
                "the {} store has no atomic multi-entry write",
                self.name()
            ))),
        }
    }

    /// Remove `key`; whether any entry (live or expired) was there.
    async fn remove(&self, collection: Collection, key: &[u8]) -> Result<bool>;

    /// Remove `key` and return its entry if it was live: of several callers
    /// taking the same key at once, exactly one gets it.
    async fn take(&self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>>;

    /// Insert only if `key` is absent or expired; `false` when a live entry is
    /// there. Of several callers inserting the same key at once, exactly one
    /// gets `true`.
    async fn insert_new(
        &self,
        collection: Collection,
        key: &[u8],
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<bool>;

    /// Claim `key` until `expires_at_ms`: `true` for the first live claim,
    /// `false` while one is live. Replay protection on every transport; of
    /// several claimants of one key at once, on any node, exactly one wins.
    /// By default a [`Collection::Replay`] entry (PostgreSQL: one row); the
    /// embedded store keeps claims in memory with a journal (`store::journal`).
    async fn claim_once(&self, key: &[u8], expires_at_ms: u64) -> Result<bool> {
        self.insert_new(Collection::Replay, key, b"1", Some(expires_at_ms))
            .await
    }

    /// Give a claim back (its message was refused before any work), so the
    /// same message may come again.
    async fn release_claim(&self, key: &[u8]) -> Result<()> {
        self.remove(Collection::Replay, key).await.map(|_| ())
    }

    /// Replace the live entry under `key` only if its value equals `expected`
    /// as JSON (key order and spacing aside); `false` when absent, expired or changed.
    async fn compare_and_swap(
        &self,
        collection: Collection,
        key: &[u8],
        expected: &[u8],
        new: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<bool>;

    /// Append one entry to the history `id`, refused with
    /// [`super::StoreError::Limit`] when it holds `max_entries` entries or the
    /// entry would take it past `max_bytes` of stored JSON.
    async fn append_history(&self, id: &str, entry: &[u8], max_entries: u64, max_bytes: u64) -> Result<()>;

    /// Entries of `id` after sequence number `after` (from the start when
    /// `None`), oldest first: at most `max_entries`, and at most `max_bytes`
    /// unless the first entry alone is larger (then it is the page).
    async fn history_page(
        &self,
        id: &str,
        after: Option<u64>,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<HistoryPage<Vec<u8>>>;

    /// The most recent entries of `id` within the same bounds, oldest first.
    async fn history_tail(&self, id: &str, max_entries: usize, max_bytes: usize) -> Result<Vec<Vec<u8>>>;

    async fn remove_history(&self, id: &str) -> Result<()>;

    /// Keys of `collection` starting with `prefix`, in byte order, at most `limit`.
    async fn keys(&self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<Vec<u8>>>;

    /// [`Backend::keys`], each with its entry where this backend can carry it
    /// in the same step: a reader about to read every listed key (a plugin
    /// pruning its old entries) then pays one round trip, not one per key.
    /// By default the keys alone: a backend whose reads are local gains nothing.
    async fn entries(&self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<ListedEntry>> {
        Ok(unlisted(self.keys(collection, prefix, limit).await?))
    }

    /// Remove expired entries (and the histories of expired conversations and
    /// sessions); how many entries went.
    async fn sweep(&self) -> Result<usize>;

    /// Wait until every write so far is durable. A backend whose writes are
    /// committed when they return (PostgreSQL) returns at once.
    async fn commit(&self) -> Result<()>;

    /// Whether the backend answers now (`/health`).
    async fn ping(&self) -> Result<()>;

    /// A transaction for one request's writes ([`super::unit::UnitOfWork`]),
    /// or `None` when this backend makes each write durable at the next
    /// [`Backend::commit`] anyway and gains nothing from one (the embedded
    /// store: its group commit already flushes a request's writes together).
    fn transaction(&self) -> Option<Box<dyn Transaction>> {
        None
    }

    /// Send `payload` to every *other* node sharing this store, under `topic`.
    /// A single-node backend has nobody to tell and returns at once.
    async fn publish(&self, topic: &str, payload: &[u8]) -> Result<()>;

    /// Messages other nodes published, from now on. A receiver that falls
    /// behind loses the oldest (`RecvError::Lagged`), never blocks the sender.
    fn subscribe(&self) -> broadcast::Receiver<FleetMessage>;

    /// The fleet's plugin set; `None` for a backend no other node shares.
    fn plugin_set(&self) -> Option<&dyn super::plugin_set::PluginSet> {
        None
    }
}

/// The order [`Backend::put_all`] applies entries in: collection, then key.
fn write_key(write: &Write) -> (&'static str, &[u8]) {
    match write {
        Write::Put { collection, key, .. } | Write::Remove { collection, key } => {
            (collection.table_name(), key.as_slice())
        }
        Write::Append { id, .. } => ("", id.as_bytes()),
    }
}

/// Keys listed without their entries.
fn unlisted(keys: Vec<Vec<u8>>) -> Vec<ListedEntry> {
    keys.into_iter()
        .map(|key| ListedEntry { key, entry: None })
        .collect()
}
