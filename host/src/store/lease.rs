//! Leases on fleet work: a running A2A task or HAI turn lives in the process
//! of the node that runs it, so when that node dies nothing else would ever
//! end it. On a shared store each piece of such work holds a lease — a
//! [`Collection::Leases`] entry naming its holder (this process,
//! [`node_id`]) and the time it runs until — which the runner moves forward
//! every third of the lease while the work runs ([`Lease::hold`]) and removes
//! when the work ends ([`Lease::release`]). Every node runs a small sweeper
//! ([`Leases::sweep`]) that finds leases whose time has passed and takes each
//! with one compare-and-swap on the record as it read it, so of all the nodes
//! sweeping at once exactly one takes it, and a runner's renewal racing the
//! take either lands first (the take finds the record changed) or finds the
//! record taken (the work is lost to it). The taker fails the work through its
//! transport's [`Reclaim`] and removes the lease; a taker that dies half-way
//! leaves a taken lease that expires in turn, so another node finishes the job.
//!
//! Why the time is in the record and not the entry's own expiry: the store's
//! sweep deletes expired entries, and a lease deleted before a node took it
//! would leave its work running forever. The entry never expires; the record's
//! `until_ms` is compared with the sweeping node's clock, the one rule the
//! store uses for every expiry, so the nodes' clocks must agree to well within
//! two thirds of a lease (the least a live lease has left).
//!
//! A node that stops gracefully hands its leases over ([`hand_over`]): their
//! time is set to the past, so another node fails the work it cut at its
//! next sweep, within a third of a lease instead of a whole one.
//!
//! A renewal that fails (the database away for a moment) changes nothing:
//! the lease is only taken once its time has passed, so healthy work survives
//! an outage shorter than the lease's remaining time, and a renewal that
//! finds the lease still its own after a longer one goes on. On a store no
//! other node shares there are no leases: the process that runs the work is
//! the only one that could end it.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Collection, Result, Store, now_ms};
use crate::background::Background;

/// Leases one sweep reads at most (per kind of work, per node).
const MAX_PER_SWEEP: usize = 1_024;

/// The shortest pause between renewals and between sweeps, whatever the lease.
const MIN_TICK: Duration = Duration::from_millis(50);

/// This process among the nodes of a fleet: a node that restarts is a new
/// holder, so a lease of its previous run is taken like any dead node's.
pub fn node_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| uuid::Uuid::new_v4().to_string())
}

/// What the store holds of a lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Record {
    holder: String,
    until_ms: u64,
    /// What the transport needs to fail the work (a HAI turn's session).
    work: Value,
}

/// One transport's leases on this node (`None` on a store of its own).
#[derive(Clone)]
pub struct Leases {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// The kind of work (`a2a`, `hai`): the keys' prefix, and what one sweeper looks at.
    kind: &'static str,
    length: Duration,
    /// Keys of work running in this process: its own sweeper leaves them to
    /// their renewals, however late those are.
    running_here: Mutex<HashSet<String>>,
}

/// A lease whose holder stopped renewing it, taken by this node to fail its work.
#[derive(Debug)]
pub struct Expired {
    /// The work's id (an A2A task id, a HAI turn id).
    pub id: String,
    /// The process that held it.
    pub holder: String,
    pub work: Value,
}

/// How a transport fails the work of an expired lease. Called once per
/// lease taken; an error leaves the lease to expire again and be retried, so
/// it must be safe to run twice (a task already ended is left alone).
#[async_trait::async_trait]
pub trait Reclaim: Send + Sync + 'static {
    async fn reclaim(
        &self,
        expired: &Expired,
    ) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// How work held under a lease ended.
pub enum Held<T> {
    Done(T),
    /// Another node took the lease (this one's renewals stopped reaching the
    /// store for longer than the lease): that node failed the work, and its
    /// end is no longer this process's to write.
    Lost,
}

impl Leases {
    /// Leases of `kind` lasting `length`, when other nodes share `store`.
    pub fn new(store: &Store, kind: &'static str, length: Duration) -> Option<Leases> {
        if !store.is_shared() {
            return None;
        }
        Some(Leases {
            inner: Arc::new(Inner {
                store: store.clone(),
                kind,
                length,
                running_here: Mutex::new(HashSet::new()),
            }),
        })
    }

    fn prefix(&self) -> String {
        format!("{}\0", self.inner.kind)
    }

    fn key(&self, id: &str) -> String {
        format!("{}{id}", self.prefix())
    }

    /// A third of the lease: how often a runner renews and a node sweeps.
    fn tick(&self) -> Duration {
        (self.inner.length / 3).max(MIN_TICK)
    }

    /// Hold work `id` (new: its id is unique) from now on; `work` is what the
    /// transport's [`Reclaim`] will read should this node die.
    pub async fn acquire(&self, id: &str, work: Value) -> Result<Lease> {
        let key = self.key(id);
        let record = Record {
            holder: node_id().to_string(),
            until_ms: now_ms().saturating_add(self.inner.length.as_millis() as u64),
            work,
        };
        self.inner.running_here.lock().insert(key.clone());
        let lease = Lease {
            leases: self.clone(),
            key,
            record: Mutex::new(record.clone()),
        };
        // Dropped on failure, which forgets the key again.
        self.inner
            .store
            .put(Collection::Leases, lease.key.as_bytes(), &record, None)
            .await?;
        Ok(lease)
    }

    /// Run this node's sweeper of this kind's leases until the node stops.
    pub fn sweep(&self, background: &Background, reclaim: Arc<dyn Reclaim>) {
        let leases = self.clone();
        background.spawn("lease.sweep", async move {
            let mut ticker = tokio::time::interval(leases.tick());
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if let Err(error) = leases.sweep_once(reclaim.as_ref()).await {
                    tracing::warn!(kind = leases.inner.kind, %error, "leases: a sweep failed; the next one tries again");
                }
            }
        });
    }

    /// Take and fail every expired lease of this kind (at most
    /// [`MAX_PER_SWEEP`] read); how many were taken.
    async fn sweep_once(&self, reclaim: &dyn Reclaim) -> Result<usize> {
        let store = &self.inner.store;
        let prefix = self.prefix();
        let records = store
            .records::<Record>(Collection::Leases, prefix.as_bytes(), MAX_PER_SWEEP)
            .await?;
        let mut taken = 0;
        for (key, record) in records {
            if record.until_ms > now_ms() || self.inner.running_here.lock().contains(&key) {
                continue;
            }
            let Some(expired) = self.take(&key, record).await? else {
                continue;
            };
            taken += 1;
            tracing::info!(kind = self.inner.kind, id = %expired.id, holder = %expired.holder, "leases: a dead node's work is failed here");
            match reclaim.reclaim(&expired).await {
                Ok(()) => {
                    store.remove(Collection::Leases, key.as_bytes()).await?;
                }
                Err(error) => {
                    tracing::warn!(kind = self.inner.kind, id = %expired.id, %error, "leases: the work was not failed; its lease expires again and is retried")
                }
            }
        }
        Ok(taken)
    }

    /// Take an expired lease as read: `None` when another node took it or
    /// its holder renewed it since.
    async fn take(&self, key: &str, expired: Record) -> Result<Option<Expired>> {
        let taken = Record {
            holder: node_id().to_string(),
            until_ms: now_ms().saturating_add(self.inner.length.as_millis() as u64),
            work: expired.work.clone(),
        };
        let store = &self.inner.store;
        if !store
            .update(Collection::Leases, key.as_bytes(), &expired, &taken, None)
            .await?
        {
            return Ok(None);
        }
        Ok(Some(Expired {
            id: key[self.prefix().len()..].to_string(),
            holder: expired.holder,
            work: expired.work,
        }))
    }
}

/// At a graceful stop, once this process's work is cut: mark every lease it
/// still holds as lapsed, so the next sweep of any node (or of this node's
/// next run) fails that work now rather than when the lease would have run
/// out. How many were handed over; nothing on a store no other node shares.
/// Like a sweep it reads at most [`MAX_PER_SWEEP`] leases; one it does not
/// reach is taken when it runs out, as a killed node's would be.
pub async fn hand_over(store: &Store) -> Result<usize> {
    if !store.is_shared() {
        return Ok(0);
    }
    let records = store
        .records::<Record>(Collection::Leases, b"", MAX_PER_SWEEP)
        .await?;
    let mut handed = 0;
    for (key, record) in records {
        if record.holder != node_id() {
            continue;
        }
        let lapsed = Record {
            until_ms: 0,
            ..record.clone()
        };
        // A record changed since it was read is no longer this process's.
        if store
            .update(Collection::Leases, key.as_bytes(), &record, &lapsed, None)
            .await?
        {
            handed += 1;
        }
    }
    Ok(handed)
}

/// One piece of work's lease, held by this process.
pub struct Lease {
    leases: Leases,
    key: String,
    /// The record as this process last wrote it (what its next renewal expects).
    record: Mutex<Record>,
}

impl Lease {
    /// Run `work`, renewing the lease while it runs: its output, or
    /// [`Held::Lost`] (and `work` dropped) when another node took the lease.
    pub async fn hold<T>(&self, work: impl Future<Output = T>) -> Held<T> {
        tokio::select! {
            biased;
            output = work => Held::Done(output),
            () = self.renew_until_lost() => Held::Lost,
        }
    }

    async fn renew_until_lost(&self) {
        let mut ticker = tokio::time::interval(self.leases.tick());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is now, and the lease was just written.
        ticker.tick().await;
        loop {
            ticker.tick().await;
            match self.renew().await {
                Ok(true) => {}
                Ok(false) => return,
                // Not lost: nobody takes it before its time has passed.
                Err(error) => {
                    tracing::warn!(kind = self.leases.inner.kind, %error, "leases: a renewal failed; the next one tries again")
                }
            }
        }
    }

    /// Move the lease's time forward; `false` when another node took it.
    async fn renew(&self) -> Result<bool> {
        let store = &self.leases.inner.store;
        let length = self.leases.inner.length.as_millis() as u64;
        // Twice at most: once as last written, once as found (a renewal whose
        // answer was lost may have landed).
        for _ in 0..2 {
            let current = self.record.lock().clone();
            let next = Record {
                until_ms: now_ms().saturating_add(length),
                ..current.clone()
            };
            if store
                .update(Collection::Leases, self.key.as_bytes(), &current, &next, None)
                .await?
            {
                *self.record.lock() = next;
                return Ok(true);
            }
            match store
                .get::<Record>(Collection::Leases, self.key.as_bytes())
                .await?
            {
                Some(found) if found.holder == current.holder && found.work == current.work => {
                    *self.record.lock() = found;
                }
                _ => return Ok(false),
            }
        }
        Ok(false)
    }

    /// Renew once more before the work's end is written, so no other node
    /// takes the lease while it is: `false` when another node took it
    /// already (the end is that node's). A store that does not answer now is
    /// not a loss: the end is written as it would have been.
    pub async fn confirm(&self) -> bool {
        match self.renew().await {
            Ok(held) => held,
            Err(error) => {
                tracing::warn!(kind = self.leases.inner.kind, %error, "leases: the lease could not be renewed before the work's end");
                true
            }
        }
    }

    /// The work ended (its end stored): give the lease up.
    pub async fn release(self) {
        let store = &self.leases.inner.store;
        if let Err(error) = store.remove(Collection::Leases, self.key.as_bytes()).await {
            // Left behind, it expires, and a sweeper finds the work ended.
            tracing::warn!(kind = self.leases.inner.kind, %error, "leases: an ended work's lease was not removed");
        }
    }
}

impl Drop for Lease {
    /// Released or not (a node shutting down cuts its work), the work no longer
    /// runs here: a lease left behind is this node's sweeper's to take too.
    fn drop(&mut self) {
        self.leases.inner.running_here.lock().remove(&self.key);
    }
}
