//! The ledger of live items that expire by themselves: how many one client and
//! the whole node hold, and how many bytes they keep, written once for every
//! transport (signed-envelope offers, Agora conversations).
//!
//! Unlike an [`crate::policy::admission`] slot, such an item outlives the
//! request that made it and ends either by its expiry or when its id is
//! released (an offer accepted, a conversation ended); unlike
//! [`crate::policy::quota`] the count lives in this process's memory, cheap
//! enough to ask on every request. A transport that keeps the items in its store
//! [`Ledger::restore`]s them at start-up, so a restart neither frees room an
//! attacker filled nor forgets honest clients' places.
//!
//! Each bound is optional and names its configuration key, so a refusal says
//! which key refused and how long until the first item counted against that
//! bound expires (the earliest a retry can succeed without anyone releasing).
//! Times are Unix milliseconds, passed in by the caller (its clock, or a test's);
//! an item counts while `now < expires_at_ms`.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::Duration;

/// One bound and the configuration key that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub limit: u64,
    pub key: &'static str,
}

/// A bound of `limit` set by `key`, for a [`LedgerBounds`] field.
pub fn bounded(limit: usize, key: &'static str) -> Option<Bound> {
    Some(Bound {
        limit: u64::try_from(limit).unwrap_or(u64::MAX),
        key,
    })
}

/// What a ledger bounds; `None` leaves that measure unbounded.
#[derive(Debug, Clone, Default)]
pub struct LedgerBounds {
    pub per_client_items: Option<Bound>,
    pub per_client_bytes: Option<Bound>,
    pub total_items: Option<Bound>,
    pub total_bytes: Option<Bound>,
}

/// Which bound refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    PerClientItems,
    PerClientBytes,
    TotalItems,
    TotalBytes,
}

impl Measure {
    fn what(self) -> &'static str {
        match self {
            Measure::PerClientItems => "this client holds its most live items",
            Measure::PerClientBytes => "this client's live items hold their most bytes",
            Measure::TotalItems => "the node holds its most live items",
            Measure::TotalBytes => "the node's live items hold their most bytes",
        }
    }

    fn per_client(self) -> bool {
        matches!(self, Measure::PerClientItems | Measure::PerClientBytes)
    }
}

/// An item that would pass a bound: which, its key, and when to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}, {limit} ({key}); try again in {} s", measure.what(), self.retry_after_secs())]
pub struct LedgerRefusal {
    pub measure: Measure,
    pub limit: u64,
    pub key: &'static str,
    /// Until the earliest item counted against this bound expires; zero when
    /// none does (nothing held, the item alone is over a bytes bound).
    pub wait: Duration,
}

impl LedgerRefusal {
    /// The wait as HTTP's `Retry-After`.
    pub fn retry_after_secs(&self) -> u64 {
        super::retry_after_secs(self.wait)
    }
}

struct Item<K> {
    /// `None` for items restored from records that never named a client: they
    /// count in the total only.
    client: Option<K>,
    expires_at_ms: u64,
    bytes: u64,
}

/// One client's live items, earliest expiry first, and their bytes.
#[derive(Default)]
struct Holding {
    by_expiry: BTreeSet<(u64, String)>,
    bytes: u64,
}

/// Live expiring items by id, counted per client `K` and in total.
pub struct Ledger<K> {
    bounds: LedgerBounds,
    items: HashMap<String, Item<K>>,
    by_expiry: BTreeSet<(u64, String)>,
    clients: HashMap<K, Holding>,
    total_bytes: u64,
}

impl<K: Eq + Hash + Clone> Ledger<K> {
    pub fn new(bounds: LedgerBounds) -> Ledger<K> {
        Ledger {
            bounds,
            items: HashMap::new(),
            by_expiry: BTreeSet::new(),
            clients: HashMap::new(),
            total_bytes: 0,
        }
    }

    /// Whether one more item of `bytes` from `client` fits every bound now,
    /// without taking the room. The client's own bounds are asked first: a
    /// client at its own bound is told so, not that the node is full.
    pub fn check(&mut self, client: &K, bytes: u64, now_ms: u64) -> Result<(), LedgerRefusal> {
        self.prune(now_ms);
        let (mine, my_bytes) = self.held(client);
        let (total, total_bytes) = self.total();
        let checks = [
            (Measure::PerClientItems, self.bounds.per_client_items, mine, 1),
            (
                Measure::PerClientBytes,
                self.bounds.per_client_bytes,
                my_bytes,
                bytes,
            ),
            (Measure::TotalItems, self.bounds.total_items, total, 1),
            (Measure::TotalBytes, self.bounds.total_bytes, total_bytes, bytes),
        ];
        for (measure, bound, held, adds) in checks {
            if let Some(bound) = bound
                && held.saturating_add(adds) > bound.limit
            {
                return Err(self.refusal(measure, bound, client, now_ms));
            }
        }
        Ok(())
    }

    /// Take room for item `id` of `client` until `expires_at_ms`, or refuse it.
    pub fn admit(
        &mut self,
        client: K,
        id: &str,
        expires_at_ms: u64,
        bytes: u64,
        now_ms: u64,
    ) -> Result<(), LedgerRefusal> {
        self.check(&client, bytes, now_ms)?;
        self.record(Some(client), id, expires_at_ms, bytes);
        Ok(())
    }

    /// Count item `id` without checking a bound: one the caller [`check`]ed
    /// under the same borrow (and then asked something else, such as a rate).
    /// An id already counted is replaced.
    ///
    /// [`check`]: Ledger::check
    pub fn record(&mut self, client: Option<K>, id: &str, expires_at_ms: u64, bytes: u64) {
        self.release(id);
        if let Some(client) = &client {
            let holding = self.clients.entry(client.clone()).or_default();
            holding.by_expiry.insert((expires_at_ms, id.to_string()));
            holding.bytes = holding.bytes.saturating_add(bytes);
        }
        self.total_bytes = self.total_bytes.saturating_add(bytes);
        self.by_expiry.insert((expires_at_ms, id.to_string()));
        self.items.insert(
            id.to_string(),
            Item {
                client,
                expires_at_ms,
                bytes,
            },
        );
    }

    /// Count an item that already exists (the start-up rebuild): never
    /// refused, since refusing would not make it go away; an expired one is skipped.
    pub fn restore(&mut self, client: Option<K>, id: &str, expires_at_ms: u64, bytes: u64, now_ms: u64) {
        if expires_at_ms > now_ms {
            self.record(client, id, expires_at_ms, bytes);
        }
    }

    /// Stop counting item `id` (ended early, or never made after all).
    pub fn release(&mut self, id: &str) -> bool {
        let Some(item) = self.items.remove(id) else {
            return false;
        };
        let entry = (item.expires_at_ms, id.to_string());
        self.by_expiry.remove(&entry);
        self.total_bytes = self.total_bytes.saturating_sub(item.bytes);
        if let Some(client) = item.client
            && let Some(holding) = self.clients.get_mut(&client)
        {
            holding.by_expiry.remove(&entry);
            holding.bytes = holding.bytes.saturating_sub(item.bytes);
            if holding.by_expiry.is_empty() {
                self.clients.remove(&client);
            }
        }
        true
    }

    /// Live items and their bytes held by `client` (as of the last check).
    pub fn held(&self, client: &K) -> (u64, u64) {
        self.clients
            .get(client)
            .map_or((0, 0), |holding| (holding.by_expiry.len() as u64, holding.bytes))
    }

    /// Live items and their bytes in total (as of the last check).
    pub fn total(&self) -> (u64, u64) {
        (self.items.len() as u64, self.total_bytes)
    }

    fn prune(&mut self, now_ms: u64) {
        while let Some((expires_at_ms, id)) = self.by_expiry.first().cloned() {
            if expires_at_ms > now_ms {
                break;
            }
            self.release(&id);
        }
    }

    fn refusal(&self, measure: Measure, bound: Bound, client: &K, now_ms: u64) -> LedgerRefusal {
        let counted = if measure.per_client() {
            self.clients.get(client).map(|holding| &holding.by_expiry)
        } else {
            Some(&self.by_expiry)
        };
        let earliest = counted.and_then(BTreeSet::first).map(|(at, _)| *at);
        LedgerRefusal {
            measure,
            limit: bound.limit,
            key: bound.key,
            wait: Duration::from_millis(earliest.map_or(0, |at| at.saturating_sub(now_ms))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(bounds: LedgerBounds) -> Ledger<&'static str> {
        Ledger::new(bounds)
    }

    fn refused(result: Result<(), LedgerRefusal>) -> (Measure, &'static str, Duration) {
        let refusal = result.expect_err("refused");
        (refusal.measure, refusal.key, refusal.wait)
    }

    #[test]
    fn the_per_client_bound_refuses_only_that_client_until_its_earliest_item_expires() {
        let mut ledger = ledger(LedgerBounds {
            per_client_items: bounded(2, "test.per_client"),
            ..LedgerBounds::default()
        });
        ledger.admit("a", "a1", 100_000, 0, 10_000).unwrap();
        ledger.admit("a", "a2", 50_000, 0, 10_000).unwrap();
        assert_eq!(
            refused(ledger.admit("a", "a3", 100_000, 0, 10_000)),
            (
                Measure::PerClientItems,
                "test.per_client",
                Duration::from_secs(40)
            )
        );
        ledger.admit("b", "b1", 100_000, 0, 10_000).unwrap();
        assert_eq!(ledger.held(&"a"), (2, 0));
        assert_eq!(ledger.total(), (3, 0));
    }

    #[test]
    fn the_total_count_bound_refuses_everyone_until_the_earliest_item_expires() {
        let mut ledger = ledger(LedgerBounds {
            per_client_items: bounded(10, "test.per_client"),
            total_items: bounded(2, "test.total"),
            ..LedgerBounds::default()
        });
        ledger.admit("a", "a1", 30_000, 0, 0).unwrap();
        ledger.admit("b", "b1", 20_000, 0, 0).unwrap();
        assert_eq!(
            refused(ledger.admit("c", "c1", 100_000, 0, 5_000)),
            (Measure::TotalItems, "test.total", Duration::from_secs(15))
        );
    }

    #[test]
    fn byte_bounds_count_what_items_hold_per_client_and_in_total() {
        let mut ledger = ledger(LedgerBounds {
            per_client_bytes: bounded(25, "test.client_bytes"),
            total_bytes: bounded(35, "test.total_bytes"),
            ..LedgerBounds::default()
        });
        ledger.admit("a", "a1", 100, 10, 0).unwrap();
        ledger.admit("a", "a2", 100, 10, 0).unwrap();
        assert_eq!(
            refused(ledger.check(&"a", 10, 0)).0,
            Measure::PerClientBytes,
            "20 + 10 is over a client's 25"
        );
        ledger.admit("b", "b1", 50, 10, 0).unwrap();
        assert_eq!(
            refused(ledger.check(&"b", 10, 0)),
            (Measure::TotalBytes, "test.total_bytes", Duration::from_millis(50))
        );
        assert_eq!(ledger.total(), (3, 30));
        assert_eq!(
            refused(ledger.check(&"c", 6, 0)),
            (Measure::TotalBytes, "test.total_bytes", Duration::from_millis(50)),
            "another client is told when the first item frees"
        );
        assert_eq!(
            refused(ledger.check(&"c", 26, 0)),
            (Measure::PerClientBytes, "test.client_bytes", Duration::ZERO),
            "too big alone: nothing that expires makes room"
        );
    }

    #[test]
    fn expiry_and_release_free_room_and_check_takes_none() {
        let mut ledger = ledger(LedgerBounds {
            per_client_items: bounded(2, "test.per_client"),
            total_bytes: bounded(35, "test.total_bytes"),
            ..LedgerBounds::default()
        });
        for n in 0..3 {
            ledger.check(&"a", 10, 0).unwrap();
            assert_eq!(ledger.total(), (0, 0), "check {n} took no room");
        }
        ledger.admit("a", "a0", 100, 10, 0).unwrap();
        ledger.admit("a", "a1", 100, 10, 0).unwrap();
        ledger.admit("b", "b0", 50, 10, 0).unwrap();
        assert_eq!(refused(ledger.check(&"a", 10, 0)).0, Measure::PerClientItems);
        assert_eq!(refused(ledger.check(&"b", 10, 0)).0, Measure::TotalBytes);
        // Releasing frees its share.
        assert!(ledger.release("a0"));
        assert!(!ledger.release("a0"), "released once");
        assert_eq!(ledger.total(), (2, 20));
        ledger.check(&"a", 10, 0).unwrap();
        // Expiry frees the rest, the item counting until its expiry.
        assert_eq!(refused(ledger.check(&"b", 25, 49)).0, Measure::TotalBytes);
        ledger.check(&"b", 25, 50).unwrap();
        assert_eq!(ledger.total(), (1, 10));
        ledger.check(&"a", 10, 100).unwrap();
        assert_eq!(ledger.total(), (0, 0));
        assert_eq!(ledger.held(&"a"), (0, 0));
    }

    #[test]
    fn restored_items_count_without_being_refused_and_expired_ones_do_not() {
        let mut ledger = ledger(LedgerBounds {
            total_items: bounded(2, "test.total"),
            ..LedgerBounds::default()
        });
        ledger.restore(Some("a"), "old", 5_000, 0, 10_000);
        ledger.restore(Some("a"), "x", 100_000, 0, 10_000);
        ledger.restore(None, "y", 100_000, 0, 10_000);
        ledger.restore(Some("b"), "z", 100_000, 0, 10_000);
        assert_eq!(ledger.total(), (3, 0), "over the bound, yet counted");
        assert_eq!(ledger.held(&"a"), (1, 0));
        assert_eq!(refused(ledger.check(&"c", 0, 10_000)).0, Measure::TotalItems);
        assert!(ledger.release("y"), "a restored item without a client releases");
    }

    #[test]
    fn a_refusal_names_its_key_and_when_to_retry() {
        let mut ledger = ledger(LedgerBounds {
            per_client_items: bounded(1, "envelopes.max_offers_per_sender"),
            ..LedgerBounds::default()
        });
        ledger.admit("a", "a1", 61_500, 0, 1_000).unwrap();
        let refusal = ledger.check(&"a", 0, 1_000).unwrap_err();
        assert_eq!(refusal.retry_after_secs(), 61, "rounded up");
        let text = refusal.to_string();
        assert!(text.contains("envelopes.max_offers_per_sender"), "{text}");
        assert!(text.contains("61 s"), "{text}");
    }

    #[test]
    fn recording_an_id_again_replaces_it() {
        let mut ledger = ledger(LedgerBounds::default());
        ledger.record(Some("a"), "x", 100, 10);
        ledger.record(Some("b"), "x", 200, 20);
        assert_eq!(ledger.total(), (1, 20));
        assert_eq!(ledger.held(&"a"), (0, 0));
        assert_eq!(ledger.held(&"b"), (1, 20));
    }
}
