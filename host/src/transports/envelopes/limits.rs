//! Per-sender bookkeeping that must stay bounded whatever senders do.
//!
//! - [`SenderTable`]: the per-minute rate windows, keyed by the sender's public
//!   key (so its did:key and raw forms share one), at most `capacity` of them.
//!   It is a segmented LRU: a key seen once waits in a probation segment and is
//!   promoted on its second envelope. When the table is full the least recently
//!   seen probation key is forgotten first, so a flood of fresh keys (each used
//!   once) only pushes out other fresh keys, never an established sender's
//!   window. Nobody is ever refused for want of room: forgetting a window only
//!   resets that sender's count.
//! - [`OfferLedger`]: live offers per sender and the params bytes all live
//!   offers hold, so stored negotiation state is capped per sender and in total.

use std::collections::{BTreeMap, HashMap};

/// An Ed25519 public key: what a sender is, whichever id form it writes.
pub type SenderKey = [u8; 32];

struct Window {
    /// When this key was last seen (the table's logical clock).
    seen: u64,
    established: bool,
    minute: u64,
    count: u32,
}

pub struct SenderTable {
    capacity: usize,
    clock: u64,
    windows: HashMap<SenderKey, Window>,
    /// Least recently seen first, per segment: `seen` → key.
    probation: BTreeMap<u64, SenderKey>,
    established: BTreeMap<u64, SenderKey>,
}

impl SenderTable {
    pub fn new(capacity: usize) -> SenderTable {
        SenderTable {
            capacity: capacity.max(1),
            clock: 0,
            windows: HashMap::new(),
            probation: BTreeMap::new(),
            established: BTreeMap::new(),
        }
    }

    /// Count one envelope from `key` in `minute`; `false` when it is over `limit`.
    pub fn admit(&mut self, key: SenderKey, minute: u64, limit: u32) -> bool {
        self.clock += 1;
        let seen = self.clock;
        if !self.windows.contains_key(&key) && self.windows.len() >= self.capacity {
            self.evict_one();
        }
        let window = self.windows.entry(key).or_insert(Window {
            seen,
            established: false,
            minute,
            count: 0,
        });
        if window.seen == seen {
            self.probation.insert(seen, key);
        } else {
            // Seen before: move to the most recent end of the established segment.
            let segment = if window.established {
                &mut self.established
            } else {
                &mut self.probation
            };
            segment.remove(&window.seen);
            window.established = true;
            window.seen = seen;
            self.established.insert(seen, key);
        }
        if window.minute != minute {
            window.minute = minute;
            window.count = 0;
        }
        if window.count >= limit {
            return false;
        }
        window.count += 1;
        true
    }

    fn evict_one(&mut self) {
        let victim = self
            .probation
            .pop_first()
            .or_else(|| self.established.pop_first());
        if let Some((_, key)) = victim {
            self.windows.remove(&key);
        }
    }

    /// How many senders are tracked (the bound the tests check).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.windows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    pub fn contains(&self, key: &SenderKey) -> bool {
        self.windows.contains_key(key)
    }
}

/// Why an offer could not be recorded.
#[derive(Debug, PartialEq, Eq)]
pub enum LedgerRefusal {
    /// The sender already holds `max_offers_per_sender` live offers.
    SenderFull(usize),
    /// All live offers together hold `max_offer_bytes_total` bytes of params.
    TotalFull,
}

struct LiveOffer {
    offer_id: String,
    expires_at_ms: u64,
    bytes: usize,
}

/// Live offers (quoted, not accepted, not expired) and the bytes they hold.
#[derive(Default)]
pub struct OfferLedger {
    by_sender: HashMap<SenderKey, Vec<LiveOffer>>,
    total_bytes: usize,
}

impl OfferLedger {
    fn prune_sender(&mut self, key: &SenderKey, now_ms: u64) {
        if let Some(offers) = self.by_sender.get_mut(key) {
            let mut freed = 0;
            offers.retain(|offer| {
                let live = offer.expires_at_ms >= now_ms;
                if !live {
                    freed += offer.bytes;
                }
                live
            });
            self.total_bytes -= freed;
            if offers.is_empty() {
                self.by_sender.remove(key);
            }
        }
    }

    fn prune_all(&mut self, now_ms: u64) {
        let keys: Vec<SenderKey> = self.by_sender.keys().copied().collect();
        for key in keys {
            self.prune_sender(&key, now_ms);
        }
    }

    /// Check there is room for one more offer of `bytes` from `key`, without taking it.
    pub fn check(
        &mut self,
        key: &SenderKey,
        bytes: usize,
        now_ms: u64,
        per_sender: usize,
        total: usize,
    ) -> Result<(), LedgerRefusal> {
        self.prune_sender(key, now_ms);
        if self.by_sender.get(key).map_or(0, Vec::len) >= per_sender {
            return Err(LedgerRefusal::SenderFull(per_sender));
        }
        if self.total_bytes.saturating_add(bytes) > total {
            self.prune_all(now_ms);
            if self.total_bytes.saturating_add(bytes) > total {
                return Err(LedgerRefusal::TotalFull);
            }
        }
        Ok(())
    }

    /// Record an offer once it is stored.
    pub fn record(&mut self, key: SenderKey, offer_id: String, expires_at_ms: u64, bytes: usize) {
        self.total_bytes += bytes;
        self.by_sender.entry(key).or_default().push(LiveOffer {
            offer_id,
            expires_at_ms,
            bytes,
        });
    }

    /// An offer was accepted: it no longer holds its params.
    pub fn release(&mut self, key: &SenderKey, offer_id: &str) {
        if let Some(offers) = self.by_sender.get_mut(key) {
            if let Some(at) = offers.iter().position(|o| o.offer_id == offer_id) {
                let offer = offers.swap_remove(at);
                self.total_bytes -= offer.bytes;
            }
            if offers.is_empty() {
                self.by_sender.remove(key);
            }
        }
    }

    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> SenderKey {
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(&n.to_be_bytes());
        key
    }

    #[test]
    fn fresh_keys_push_out_each_other_not_established_senders() {
        let mut table = SenderTable::new(10);
        let established = key(0);
        assert!(table.admit(established, 7, 3));
        assert!(table.admit(established, 7, 3));
        for n in 1..10_000 {
            assert!(table.admit(key(n), 7, 3), "a fresh key is never refused for room");
            assert!(table.len() <= 10);
        }
        assert!(table.contains(&established));
        // Its count survived the flood: one more fits, the next does not.
        assert!(table.admit(established, 7, 3));
        assert!(!table.admit(established, 7, 3));
        // A new minute starts a new window.
        assert!(table.admit(established, 8, 3));
    }

    #[test]
    fn a_full_table_of_established_senders_forgets_the_least_recent() {
        let mut table = SenderTable::new(3);
        for n in 0..3 {
            table.admit(key(n), 1, 100);
            table.admit(key(n), 1, 100);
        }
        table.admit(key(0), 1, 100);
        table.admit(key(9), 1, 100);
        assert!(!table.contains(&key(1)), "the least recently seen goes");
        assert!(table.contains(&key(0)) && table.contains(&key(2)) && table.contains(&key(9)));
    }

    #[test]
    fn the_ledger_caps_offers_per_sender_and_bytes_in_total() {
        let mut ledger = OfferLedger::default();
        let (a, b) = (key(1), key(2));
        for n in 0..2 {
            ledger.check(&a, 10, 0, 2, 35).unwrap();
            ledger.record(a, format!("a{n}"), 100, 10);
        }
        assert_eq!(ledger.check(&a, 10, 0, 2, 35), Err(LedgerRefusal::SenderFull(2)));
        ledger.check(&b, 10, 0, 2, 35).unwrap();
        ledger.record(b, "b0".into(), 50, 10);
        assert_eq!(ledger.check(&b, 10, 0, 2, 35), Err(LedgerRefusal::TotalFull));
        // Accepting frees its share; expiry frees the rest.
        ledger.release(&a, "a0");
        assert_eq!(ledger.total_bytes(), 20);
        ledger.check(&a, 10, 0, 2, 35).unwrap();
        assert_eq!(ledger.check(&b, 25, 60, 2, 35), Ok(()));
        assert_eq!(ledger.total_bytes(), 10);
        ledger.check(&a, 10, 101, 2, 35).unwrap();
        assert_eq!(ledger.total_bytes(), 0);
    }
}
