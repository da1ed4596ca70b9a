//! One request's writes, committed together: the [`UnitOfWork`] a transport
//! takes from [`Store::unit`] at the start of a request and commits once,
//! before its reply.
//!
//! **Why.** On a shared store every write was its own committed statement, so
//! a request paid a commit (a WAL flush, a round trip) per write. In a unit,
//! on a backend that offers a [`Transaction`] (PostgreSQL), the writes whose
//! answer nobody waits for — puts, removes, history appends — are queued and
//! sent together with the commit, and the one step that must answer at once,
//! a replay claim, runs inside the same transaction: one commit per request.
//! The embedded store has no such transaction: there a unit applies each
//! write at once, as before, and its commit is the store's group commit.
//!
//! **Reads see the unit's own writes.** [`UnitOfWork::get`] and
//! [`UnitOfWork::keys`] answer from the queued writes first, so a plugin that
//! sets a key and reads it back in one call finds its value.
//!
//! **A listing carries its values.** On a shared store a short
//! [`UnitOfWork::keys`] listing reads each key's value in the same statement
//! ([`super::backend::Backend::entries`]) and keeps it, so a plugin that lists
//! its entries and reads each (pruning old games) pays one round trip, not
//! one per key. What is kept is what the store held at the listing, as a read
//! made then would have seen; it is forgotten at every commit, and so before
//! anything leaves the request ([`UnitOfWork::commit_pending`]): a request
//! that waited on the outside world reads afresh.
//!
//! **What stays atomic.** A claim holds its row until the commit, so a copy
//! of the message at another node waits and is then refused (see
//! `postgres::transaction`); a history append refused by its quota fails
//! the commit, and nothing of the unit is written. Steps whose answer must
//! be seen by the fleet before the request goes on (an offer accepted, a
//! round reserved) are not the unit's: they stay one committed statement of
//! the store. Queued writes go in one order — entries by collection and key,
//! then appends — so two units never lock the same rows in opposite orders.
//!
//! **Durability.** Nothing queued is durable before [`UnitOfWork::commit`]
//! returns; a caller that is about to let anything leave the request (a
//! reply, an outbound call of the plugin) commits first
//! ([`UnitOfWork::commit_pending`]). A unit dropped without a commit writes
//! nothing of what it queued, and its claims are rolled back.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::backend::{ListedEntry, Transaction, Write};
use super::{Collection, Result, Store, encode};

/// See the module docs. Cloned, it is the same unit (the transport's and the
/// plugin's host calls share it).
#[derive(Clone)]
pub struct UnitOfWork {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// `None` on a backend that makes each write as it comes (the embedded store).
    transaction: Option<tokio::sync::Mutex<Box<dyn Transaction>>>,
    pending: Mutex<Pending>,
}

/// An entry's place in the queue and the overlay: its collection's name and key.
type EntryKey = (&'static str, Vec<u8>);

#[derive(Default)]
struct Pending {
    writes: Vec<Write>,
    /// What the queued writes leave under a key: its value, or `None` once removed.
    overlay: HashMap<EntryKey, Option<Vec<u8>>>,
    /// What the last listing read under each key: its value, or `None` when
    /// it had expired. Behind `overlay`, which holds what the unit wrote since.
    listed: HashMap<EntryKey, Option<Vec<u8>>>,
    /// A write (or claim) was made since the last commit.
    dirty: bool,
}

/// The longest [`UnitOfWork::keys`] listing that carries its values: a
/// plugin's scan of its own entries, not a bulk export, which lists keys alone.
const LISTING_WITH_VALUES_MAX: usize = 128;

impl Pending {
    /// Queue a put or a remove; an earlier one of the same key is replaced
    /// (only the last is seen, by the overlay and after the commit).
    fn queue_entry(&mut self, write: Write) {
        let key = entry_key(&write).expect("an entry write");
        self.writes
            .retain(|queued| entry_key(queued).as_ref() != Some(&key));
        let value = match &write {
            Write::Put { value, .. } => Some(value.clone()),
            _ => None,
        };
        self.overlay.insert(key, value);
        self.writes.push(write);
        self.dirty = true;
    }

    /// The queue in the order every unit locks rows in: entries by
    /// collection and key, then appends (in their order for each history).
    fn take_in_lock_order(&mut self) -> Vec<Write> {
        self.overlay.clear();
        self.listed.clear();
        self.dirty = false;
        let mut writes = std::mem::take(&mut self.writes);
        writes.sort_by(|a, b| match (entry_key(a), entry_key(b)) {
            (Some(a), Some(b)) => a.cmp(&b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => history_id(a).cmp(history_id(b)),
        });
        writes
    }
}

fn entry_key(write: &Write) -> Option<EntryKey> {
    match write {
        Write::Put { collection, key, .. } | Write::Remove { collection, key } => {
            Some((collection.table_name(), key.clone()))
        }
        Write::Append { .. } => None,
    }
}

fn history_id(write: &Write) -> &str {
    match write {
        Write::Append { id, .. } => id,
        _ => "",
    }
}

impl Store {
    /// A unit of work for one request's writes (see [`UnitOfWork`]).
    pub fn unit(&self) -> UnitOfWork {
        UnitOfWork {
            inner: Arc::new(Inner {
                store: self.clone(),
                transaction: self.backend.transaction().map(tokio::sync::Mutex::new),
                pending: Mutex::default(),
            }),
        }
    }
}

impl UnitOfWork {
    fn queues(&self) -> bool {
        self.inner.transaction.is_some()
    }

    fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The transaction, when a claim began it and holds its connection: a
    /// read then goes through it (a second connection could be a wait on a
    /// pool that claims like this one hold).
    async fn open_transaction(&self) -> Option<tokio::sync::MutexGuard<'_, Box<dyn Transaction>>> {
        let transaction = self.inner.transaction.as_ref()?.lock().await;
        transaction.is_open().then_some(transaction)
    }

    fn touched(&self) {
        self.inner.pending.lock().dirty = true;
    }

    /// [`Store::put`], committed with the unit.
    pub async fn put<T: Serialize + ?Sized>(
        &self,
        collection: Collection,
        key: &[u8],
        value: &T,
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        if !self.queues() {
            self.store().put(collection, key, value, expires_at_ms).await?;
            self.touched();
            return Ok(());
        }
        let value = encode(value)?;
        self.inner.pending.lock().queue_entry(Write::Put {
            collection,
            key: key.to_vec(),
            value,
            expires_at_ms,
        });
        Ok(())
    }

    /// [`Store::put_keyed`], committed with the unit.
    pub async fn put_keyed<T: Serialize + ?Sized>(
        &self,
        collection: Collection,
        key: &[u8],
        value: &T,
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        if !self.queues() {
            self.store()
                .put_keyed(collection, key, value, expires_at_ms)
                .await?;
            self.touched();
            return Ok(());
        }
        self.put(collection, key, value, expires_at_ms).await
    }

    /// [`Store::remove`], committed with the unit.
    pub async fn remove(&self, collection: Collection, key: &[u8]) -> Result<()> {
        if !self.queues() {
            self.store().remove(collection, key).await?;
            self.touched();
            return Ok(());
        }
        self.inner.pending.lock().queue_entry(Write::Remove {
            collection,
            key: key.to_vec(),
        });
        Ok(())
    }

    /// [`Store::append_entry`], committed with the unit: a refusal by the
    /// history's quota is the commit's error (and then nothing is written).
    /// The answer is the entry's stored size.
    pub async fn append_entry(
        &self,
        id: &str,
        role: &str,
        body: &serde_json::Value,
        max_entries: usize,
    ) -> Result<usize> {
        if !self.queues() {
            let size = self.store().append_entry(id, role, body, max_entries).await?;
            self.touched();
            return Ok(size);
        }
        let entry = super::history_entry(role, body)?;
        let size = entry.len();
        let mut pending = self.inner.pending.lock();
        pending.writes.push(Write::Append {
            id: id.to_string(),
            entry,
            max_entries: max_entries as u64,
            max_bytes: self.store().max_history_bytes,
        });
        pending.dirty = true;
        Ok(size)
    }

    /// [`Store::claim_once`] in the unit's transaction: the claim holds until
    /// the commit (or the rollback of a unit dropped without one).
    pub async fn claim_once(&self, key: &[u8], expires_at_ms: u64) -> Result<bool> {
        let claimed = match &self.inner.transaction {
            Some(transaction) => transaction.lock().await.claim_once(key, expires_at_ms).await?,
            None => self.store().claim_once(key, expires_at_ms).await?,
        };
        self.touched();
        Ok(claimed)
    }

    /// [`Store::get`], seeing the unit's own writes (and what its last
    /// listing read).
    pub async fn get<T: DeserializeOwned>(&self, collection: Collection, key: &[u8]) -> Result<Option<T>> {
        let known = {
            let pending = self.inner.pending.lock();
            let key = (collection.table_name(), key.to_vec());
            pending
                .overlay
                .get(&key)
                .or_else(|| pending.listed.get(&key))
                .cloned()
        };
        match known {
            Some(Some(value)) => Ok(Some(serde_json::from_slice(&value)?)),
            Some(None) => Ok(None),
            None => match self.open_transaction().await {
                Some(mut transaction) => super::value_of(transaction.get(collection, key).await?),
                None => self.store().get(collection, key).await,
            },
        }
    }

    /// [`Store::keys`], seeing the unit's own writes.
    pub async fn keys(&self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<Vec<u8>>> {
        let (added, removed): (Vec<Vec<u8>>, Vec<Vec<u8>>) = {
            let pending = self.inner.pending.lock();
            let mine = pending
                .overlay
                .iter()
                .filter(|((table, key), _)| *table == collection.table_name() && key.starts_with(prefix));
            let (added, removed): (Vec<_>, Vec<_>) = mine.partition(|(_, value)| value.is_some());
            (
                added.into_iter().map(|((_, key), _)| key.clone()).collect(),
                removed.into_iter().map(|((_, key), _)| key.clone()).collect(),
            )
        };
        // Enough stored keys that the ones this unit removed leave `limit`.
        let wanted = limit.saturating_add(removed.len());
        let stored = if self.queues() && wanted <= LISTING_WITH_VALUES_MAX {
            let listed = match self.open_transaction().await {
                Some(mut transaction) => transaction.entries(collection, prefix, wanted).await?,
                None => self.store().backend.entries(collection, prefix, wanted).await?,
            };
            self.keep_listed(collection, listed)
        } else {
            match self.open_transaction().await {
                Some(mut transaction) => transaction.keys(collection, prefix, wanted).await?,
                None => self.store().keys(collection, prefix, wanted).await?,
            }
        };
        let mut keys: Vec<Vec<u8>> = stored
            .into_iter()
            .filter(|key| !removed.contains(key))
            .chain(added)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys.truncate(limit);
        Ok(keys)
    }

    /// Keep the values a listing carried (see the module docs); its keys.
    fn keep_listed(&self, collection: Collection, listed: Vec<ListedEntry>) -> Vec<Vec<u8>> {
        let now = super::now_ms();
        let mut pending = self.inner.pending.lock();
        listed
            .into_iter()
            .map(|ListedEntry { key, entry }| {
                if let Some(entry) = entry {
                    let live = entry.expires_at_ms.is_none_or(|at| at > now);
                    pending.listed.insert(
                        (collection.table_name(), key.clone()),
                        live.then_some(entry.value),
                    );
                }
                key
            })
            .collect()
    }

    /// Commit everything the unit wrote: on a shared store, its queued writes
    /// and claims in one transaction; on the embedded store, the group commit
    /// (which also covers what the request wrote through the [`Store`]).
    pub async fn commit(&self) -> Result<()> {
        let Some(transaction) = &self.inner.transaction else {
            self.inner.pending.lock().dirty = false;
            return self.store().commit().await;
        };
        let mut transaction = transaction.lock().await;
        let writes = self.inner.pending.lock().take_in_lock_order();
        transaction.commit(writes).await
    }

    /// [`UnitOfWork::commit`] when a claim began a transaction that holds a
    /// connection (a shared store), so that steps the caller takes next on
    /// the store's own connections do not wait for a second one while this
    /// one is held. Nothing, on the embedded store.
    pub async fn commit_open_transaction(&self) -> Result<()> {
        if self.open_transaction().await.is_some() {
            self.commit().await?;
        }
        Ok(())
    }

    /// [`UnitOfWork::commit`] when the unit holds anything not committed yet:
    /// before something leaves the request that a reader could act on. What
    /// a listing read is forgotten either way: the request may now wait, and
    /// the store may change meanwhile.
    pub async fn commit_pending(&self) -> Result<()> {
        let dirty = {
            let mut pending = self.inner.pending.lock();
            pending.listed.clear();
            pending.dirty
        };
        if dirty {
            self.commit().await?;
        }
        Ok(())
    }
}
