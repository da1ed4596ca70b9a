//! Rates: how often one client may do one thing, written once for every
//! transport (signed envelopes per sender key, Agora conversations per client
//! address).
//!
//! Each client has a token bucket (GCRA, [`governor`]): `per_minute` tokens
//! refilled evenly over a minute, and a full bucket holds as many, so a quiet
//! client may burst `per_minute` and then sustains `per_minute` a minute. A
//! refusal says how long until the next token ([`RateRefusal`]), so every
//! protocol can answer with a truthful `Retry-After`.
//!
//! The buckets live in a [`RateTable`] of at most `capacity` clients, because
//! clients are whatever a stranger says it is (a fresh key per envelope, a new
//! address): the table is a segmented LRU. A client seen once waits in a
//! probation segment and is promoted on its second request. When the table is
//! full the least recently seen probation client is forgotten first, so a flood
//! of fresh clients (each used once) only pushes out other fresh clients, never
//! an established client's bucket. Nobody is ever refused for want of room:
//! forgetting a bucket only refills that client's tokens.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

type Bucket<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// A request over its client's rate: the next token comes after `wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("over the rate; the next one is allowed in {wait:?}")]
pub struct RateRefusal {
    pub wait: Duration,
}

impl RateRefusal {
    /// The wait as HTTP's `Retry-After`.
    pub fn retry_after_secs(&self) -> u64 {
        super::retry_after_secs(self.wait)
    }
}

struct Client<C: Clock> {
    /// When this client was last seen (the table's logical clock).
    seen: u64,
    established: bool,
    bucket: Bucket<C>,
}

/// One token bucket per client, for at most `capacity` clients.
pub struct RateTable<K, C: Clock = DefaultClock> {
    capacity: usize,
    quota: Quota,
    clock: C,
    tick: u64,
    clients: HashMap<K, Client<C>>,
    /// Least recently seen first, per segment: `seen` → client.
    probation: BTreeMap<u64, K>,
    established: BTreeMap<u64, K>,
}

impl<K: Eq + Hash + Clone> RateTable<K> {
    /// A table of at most `capacity` clients, each allowed `per_minute` a minute.
    pub fn new(capacity: usize, per_minute: u32) -> RateTable<K> {
        RateTable::with_clock(capacity, per_minute, DefaultClock::default())
    }
}

impl<K: Eq + Hash + Clone, C: Clock + Clone> RateTable<K, C> {
    /// As [`RateTable::new`], on `clock` (a fake one in tests).
    pub fn with_clock(capacity: usize, per_minute: u32, clock: C) -> RateTable<K, C> {
        RateTable {
            capacity: capacity.max(1),
            quota: Quota::per_minute(NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN)),
            clock,
            tick: 0,
            clients: HashMap::new(),
            probation: BTreeMap::new(),
            established: BTreeMap::new(),
        }
    }

    /// Take one token from `key`'s bucket, or say how long until there is one.
    pub fn admit(&mut self, key: K) -> Result<(), RateRefusal> {
        self.tick += 1;
        let seen = self.tick;
        if !self.clients.contains_key(&key) && self.clients.len() >= self.capacity {
            self.evict_one();
        }
        let (quota, clock) = (self.quota, &self.clock);
        let client = self.clients.entry(key.clone()).or_insert_with(|| Client {
            seen,
            established: false,
            bucket: RateLimiter::direct_with_clock(quota, clock.clone()),
        });
        if client.seen == seen {
            self.probation.insert(seen, key);
        } else {
            // Seen before: move to the most recent end of the established segment.
            let segment = if client.established {
                &mut self.established
            } else {
                &mut self.probation
            };
            segment.remove(&client.seen);
            client.established = true;
            client.seen = seen;
            self.established.insert(seen, key);
        }
        client.bucket.check().map_err(|not_until| RateRefusal {
            wait: not_until.wait_time_from(self.clock.now()),
        })
    }

    fn evict_one(&mut self) {
        let victim = self
            .probation
            .pop_first()
            .or_else(|| self.established.pop_first());
        if let Some((_, key)) = victim {
            self.clients.remove(&key);
        }
    }

    /// How many clients are tracked (the bound the tests check).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    pub fn contains(&self, key: &K) -> bool {
        self.clients.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn table(capacity: usize, per_minute: u32) -> (RateTable<u32, FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        (RateTable::with_clock(capacity, per_minute, clock.clone()), clock)
    }

    #[test]
    fn fresh_keys_push_out_each_other_not_established_clients() {
        let (mut table, _clock) = table(10, 3);
        let established = 0;
        assert!(table.admit(established).is_ok());
        assert!(table.admit(established).is_ok());
        for n in 1..10_000 {
            assert!(table.admit(n).is_ok(), "a fresh key is never refused for room");
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
        let client = 1;
        for _ in 0..60 {
            assert_eq!(table.admit(client), Ok(()));
        }
        // 60 a minute: one token a second, and the bucket has just been emptied.
        let refused = table.admit(client).unwrap_err();
        assert_eq!(refused.wait, Duration::from_secs(1));
        assert_eq!(refused.retry_after_secs(), 1);
        clock.advance(Duration::from_millis(400));
        let refused = table.admit(client).unwrap_err();
        assert_eq!(refused.wait, Duration::from_millis(600));
        assert_eq!(refused.retry_after_secs(), 1, "rounded up, never 0");
        clock.advance(refused.wait);
        assert_eq!(table.admit(client), Ok(()), "refilled after the wait it was told");
        assert!(table.admit(client).is_err(), "one token, not two");
        // A minute of quiet refills the whole burst, no more.
        clock.advance(Duration::from_secs(120));
        for _ in 0..60 {
            assert_eq!(table.admit(client), Ok(()));
        }
        assert!(table.admit(client).is_err());
    }

    #[test]
    fn a_slow_rate_says_a_long_wait_in_whole_seconds() {
        let (mut table, clock) = table(10, 7);
        for _ in 0..7 {
            table.admit(1).unwrap();
        }
        let refused = table.admit(1).unwrap_err();
        // 60 s / 7 = 8.571… s per token: Retry-After 9.
        assert_eq!(refused.wait, Duration::from_nanos(60_000_000_000 / 7));
        assert_eq!(refused.retry_after_secs(), 9);
        clock.advance(Duration::from_secs(8));
        assert_eq!(table.admit(1).unwrap_err().retry_after_secs(), 1);
        assert!(table.admit(2).is_ok(), "buckets are per client");
    }

    #[test]
    fn a_full_table_of_established_clients_forgets_the_least_recent() {
        let (mut table, _clock) = table(3, 100);
        for n in 0..3 {
            table.admit(n).unwrap();
            table.admit(n).unwrap();
        }
        table.admit(0).unwrap();
        table.admit(9).unwrap();
        assert!(!table.contains(&1), "the least recently seen goes");
        assert!(table.contains(&0) && table.contains(&2) && table.contains(&9));
    }
}
