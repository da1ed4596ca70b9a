//! Per-sender bookkeeping that must stay bounded whatever senders do.
//!
//! - [`SenderTable`]: the per-sender rate limit, keyed by the sender's public
//!   key (so its did:key and raw forms share one), at most `capacity` of them.
//!   Each sender has a token bucket (GCRA, [`governor`]): `per_minute` tokens
//!   refilled evenly over a minute, and a full bucket holds as many, so a quiet
//!   sender may burst `per_minute` envelopes and then sustains `per_minute` a
//!   minute. A refusal says how long until the next token ([`Refused`]).
//!   The table is a segmented LRU: a key seen once waits in a probation segment
//!   and is promoted on its second envelope. When the table is full the least
//!   recently seen probation key is forgotten first, so a flood of fresh keys
//!   (each used once) only pushes out other fresh keys, never an established
//!   sender's bucket. Nobody is ever refused for want of room: forgetting a
//!   bucket only refills that sender's tokens.
//! - [`OfferLedger`]: live offers per sender and the params bytes all live
//!   offers hold, so stored negotiation state is capped per sender and in total.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

/// An Ed25519 public key: what a sender is, whichever id form it writes.
pub type SenderKey = [u8; 32];

type Bucket<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

struct Sender<C: Clock> {
    /// When this key was last seen (the table's logical clock).
    seen: u64,
    established: bool,
    bucket: Bucket<C>,
}

/// An envelope over its sender's rate: the next token comes after `wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub wait: Duration,
}

impl Refused {
    /// The wait as HTTP's `Retry-After`: whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        self.wait.as_nanos().div_ceil(1_000_000_000).max(1) as u64
    }
}

pub struct SenderTable<C: Clock = DefaultClock> {
    capacity: usize,
    quota: Quota,
    clock: C,
    tick: u64,
    senders: HashMap<SenderKey, Sender<C>>,
    /// Least recently seen first, per segment: `seen` → key.
    probation: BTreeMap<u64, SenderKey>,
    established: BTreeMap<u64, SenderKey>,
}

impl SenderTable {
    /// A table of at most `capacity` senders, each allowed `per_minute` envelopes a minute.
    pub fn new(capacity: usize, per_minute: u32) -> SenderTable {
        SenderTable::with_clock(capacity, per_minute, DefaultClock::default())
    }
}

impl<C: Clock + Clone> SenderTable<C> {
    pub fn with_clock(capacity: usize, per_minute: u32, clock: C) -> SenderTable<C> {
        SenderTable {
            capacity: capacity.max(1),
            quota: Quota::per_minute(NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN)),
            clock,
            tick: 0,
            senders: HashMap::new(),
            probation: BTreeMap::new(),
            established: BTreeMap::new(),
        }
    }

    /// Take one token from `key`'s bucket, or say how long until there is one.
    pub fn admit(&mut self, key: SenderKey) -> Result<(), Refused> {
        self.tick += 1;
        let seen = self.tick;
        if !self.senders.contains_key(&key) && self.senders.len() >= self.capacity {
            self.evict_one();
        }
        let (quota, clock) = (self.quota, &self.clock);
        let sender = self.senders.entry(key).or_insert_with(|| Sender {
            seen,
            established: false,
            bucket: RateLimiter::direct_with_clock(quota, clock.clone()),
        });
        if sender.seen == seen {
            self.probation.insert(seen, key);
        } else {
            // Seen before: move to the most recent end of the established segment.
            let segment = if sender.established {
                &mut self.established
            } else {
                &mut self.probation
            };
            segment.remove(&sender.seen);
            sender.established = true;
            sender.seen = seen;
            self.established.insert(seen, key);
        }
        sender.bucket.check().map_err(|not_until| Refused {
            wait: not_until.wait_time_from(self.clock.now()),
        })
    }

    fn evict_one(&mut self) {
        let victim = self
            .probation
            .pop_first()
            .or_else(|| self.established.pop_first());
        if let Some((_, key)) = victim {
            self.senders.remove(&key);
        }
    }

    /// How many senders are tracked (the bound the tests check).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.senders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
    }

    pub fn contains(&self, key: &SenderKey) -> bool {
        self.senders.contains_key(key)
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
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn key(n: u32) -> SenderKey {
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(&n.to_be_bytes());
        key
    }

    fn table(capacity: usize, per_minute: u32) -> (SenderTable<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        (
            SenderTable::with_clock(capacity, per_minute, clock.clone()),
            clock,
        )
    }

    #[test]
    fn fresh_keys_push_out_each_other_not_established_senders() {
        let (mut table, _clock) = table(10, 3);
        let established = key(0);
        assert!(table.admit(established).is_ok());
        assert!(table.admit(established).is_ok());
        for n in 1..10_000 {
            assert!(
                table.admit(key(n)).is_ok(),
                "a fresh key is never refused for room"
            );
            assert!(table.len() <= 10);
        }
        assert!(table.contains(&established));
        // Its bucket survived the flood: one more token, then none.
        assert!(table.admit(established).is_ok());
        assert!(table.admit(established).is_err());
    }

    #[test]
    fn a_burst_of_the_rate_then_refusal_then_one_token_per_interval() {
        let (mut table, clock) = table(10, 60);
        let sender = key(1);
        for _ in 0..60 {
            assert_eq!(table.admit(sender), Ok(()));
        }
        // 60 a minute: one token a second, and the bucket has just been emptied.
        let refused = table.admit(sender).unwrap_err();
        assert_eq!(refused.wait, Duration::from_secs(1));
        assert_eq!(refused.retry_after_secs(), 1);
        clock.advance(Duration::from_millis(400));
        let refused = table.admit(sender).unwrap_err();
        assert_eq!(refused.wait, Duration::from_millis(600));
        assert_eq!(refused.retry_after_secs(), 1, "rounded up, never 0");
        clock.advance(refused.wait);
        assert_eq!(table.admit(sender), Ok(()), "refilled after the wait it was told");
        assert!(table.admit(sender).is_err(), "one token, not two");
        // A minute of quiet refills the whole burst, no more.
        clock.advance(Duration::from_secs(120));
        for _ in 0..60 {
            assert_eq!(table.admit(sender), Ok(()));
        }
        assert!(table.admit(sender).is_err());
    }

    #[test]
    fn a_slow_rate_says_a_long_wait_in_whole_seconds() {
        let (mut table, clock) = table(10, 7);
        for _ in 0..7 {
            table.admit(key(1)).unwrap();
        }
        let refused = table.admit(key(1)).unwrap_err();
        // 60 s / 7 = 8.571… s per token: Retry-After 9.
        assert_eq!(refused.wait, Duration::from_nanos(60_000_000_000 / 7));
        assert_eq!(refused.retry_after_secs(), 9);
        clock.advance(Duration::from_secs(8));
        assert_eq!(table.admit(key(1)).unwrap_err().retry_after_secs(), 1);
        assert!(table.admit(key(2)).is_ok(), "buckets are per sender");
    }

    #[test]
    fn a_full_table_of_established_senders_forgets_the_least_recent() {
        let (mut table, _clock) = table(3, 100);
        for n in 0..3 {
            table.admit(key(n)).unwrap();
            table.admit(key(n)).unwrap();
        }
        table.admit(key(0)).unwrap();
        table.admit(key(9)).unwrap();
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
