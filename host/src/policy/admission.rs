//! Admission: how many live things (running tasks, sessions, conversations)
//! one client and the whole node may hold at once, written once for every
//! transport.
//!
//! A place is a [`Slot`] that gives itself back when dropped, so no error path
//! can leak one. A caller over a bound is held for a short, bounded wait
//! (`wait`) before it is refused: an orchestrating agent that fans out twenty
//! requests at once is honest, and its later requests get the places its earlier
//! ones free within moments, instead of failing. A refusal says which bound it
//! met and its key, so every protocol can answer "busy, try again", never an
//! internal error.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// The bounds of one kind of live thing, with the configuration keys that set them.
#[derive(Debug, Clone)]
pub struct Bounds {
    pub total: usize,
    pub total_key: &'static str,
    pub per_client: usize,
    pub per_client_key: &'static str,
    /// How long a caller over a bound waits for a place before it is refused.
    pub wait: Duration,
}

/// Which bound refused a caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this client already holds {limit}, its limit ({key}); wait for one to end")]
    PerClient { limit: usize, key: &'static str },
    #[error("the node holds {limit}, its limit ({key}); try again shortly")]
    Total { limit: usize, key: &'static str },
}

struct Counts<K> {
    total: usize,
    per_client: HashMap<K, usize>,
}

struct Inner<K> {
    bounds: Bounds,
    counts: Mutex<Counts<K>>,
    freed: Notify,
}

/// The live places of one kind, shared by every request that takes one.
pub struct Admission<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Admission<K> {
    fn clone(&self) -> Self {
        Admission {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Eq + Hash + Clone> Admission<K> {
    pub fn new(bounds: Bounds) -> Admission<K> {
        Admission {
            inner: Arc::new(Inner {
                bounds,
                counts: Mutex::new(Counts {
                    total: 0,
                    per_client: HashMap::new(),
                }),
                freed: Notify::new(),
            }),
        }
    }

    /// A place now, or the bound that refuses one.
    pub fn try_admit(&self, client: &K) -> Result<Slot<K>, Refusal> {
        let bounds = &self.inner.bounds;
        let mut counts = self.inner.counts.lock();
        let mine = counts.per_client.get(client).copied().unwrap_or(0);
        if mine >= bounds.per_client {
            return Err(Refusal::PerClient {
                limit: bounds.per_client,
                key: bounds.per_client_key,
            });
        }
        if counts.total >= bounds.total {
            return Err(Refusal::Total {
                limit: bounds.total,
                key: bounds.total_key,
            });
        }
        counts.total += 1;
        counts.per_client.insert(client.clone(), mine + 1);
        Ok(Slot {
            inner: self.inner.clone(),
            client: Some(client.clone()),
        })
    }

    /// A place, waiting up to the bounds' `wait` for one to be given back.
    pub async fn admit(&self, client: &K) -> Result<Slot<K>, Refusal> {
        let deadline = tokio::time::Instant::now() + self.inner.bounds.wait;
        loop {
            // Register for the next release before trying, so one between the
            // try and the wait is not missed.
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.try_admit(client) {
                Ok(slot) => return Ok(slot),
                Err(refusal) => {
                    if tokio::time::timeout_at(deadline, freed).await.is_err() {
                        return Err(refusal);
                    }
                }
            }
        }
    }

    /// Places held now: in total, and by `client`.
    pub fn held(&self, client: &K) -> (usize, usize) {
        let counts = self.inner.counts.lock();
        (counts.total, counts.per_client.get(client).copied().unwrap_or(0))
    }
}

/// One live place; given back when dropped.
pub struct Slot<K: Eq + Hash> {
    inner: Arc<Inner<K>>,
    client: Option<K>,
}

impl<K: Eq + Hash> Slot<K> {
    /// The client holding it.
    pub fn client(&self) -> &K {
        self.client
            .as_ref()
            .expect("a slot holds its client until dropped")
    }
}

impl<K: Eq + Hash> Drop for Slot<K> {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        {
            let mut counts = self.inner.counts.lock();
            counts.total = counts.total.saturating_sub(1);
            if let Some(count) = counts.per_client.get_mut(&client) {
                *count -= 1;
                if *count == 0 {
                    counts.per_client.remove(&client);
                }
            }
        }
        self.inner.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(total: usize, per_client: usize, wait_ms: u64) -> Bounds {
        Bounds {
            total,
            total_key: "test.total",
            per_client,
            per_client_key: "test.per_client",
            wait: Duration::from_millis(wait_ms),
        }
    }

    #[test]
    fn per_client_and_total_bounds_hold_and_a_dropped_slot_frees_its_place() {
        let admission = Admission::new(bounds(3, 2, 0));
        let a1 = admission.try_admit(&"a").unwrap();
        let _a2 = admission.try_admit(&"a").unwrap();
        assert_eq!(
            admission.try_admit(&"a").err(),
            Some(Refusal::PerClient {
                limit: 2,
                key: "test.per_client"
            })
        );
        let _b1 = admission.try_admit(&"b").unwrap();
        assert_eq!(
            admission.try_admit(&"c").err(),
            Some(Refusal::Total {
                limit: 3,
                key: "test.total"
            })
        );
        drop(a1);
        assert_eq!(admission.held(&"a"), (2, 1));
        assert!(admission.try_admit(&"c").is_ok());
        assert_eq!(admission.held(&"c"), (2, 0), "the temporary slot was dropped");
    }

    #[tokio::test]
    async fn a_caller_over_the_bound_waits_for_a_place_then_is_refused() {
        let admission = Admission::new(bounds(10, 1, 5_000));
        let first = admission.try_admit(&"a").unwrap();
        let waiting = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.admit(&"a").await.map(|_| ()) })
        };
        tokio::task::yield_now().await;
        drop(first);
        assert_eq!(
            waiting.await.unwrap(),
            Ok(()),
            "the freed place went to the waiter"
        );

        let short = Admission::new(bounds(10, 1, 20));
        let _held = short.try_admit(&"a").unwrap();
        assert!(matches!(short.admit(&"a").await, Err(Refusal::PerClient { .. })));
    }
}
