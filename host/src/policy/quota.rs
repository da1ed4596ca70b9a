//! Stored quotas: how many items, and how many bytes of them, one client may
//! have stored, and how many bytes every client together, written once for
//! every transport that stores what a client sends (A2A tasks, HAI sessions).
//!
//! [`crate::policy::admission`] bounds what is live in this process; this
//! bounds what outlives the request, on disk and across restarts. So the
//! accounting lives in the store itself, where every node of a fleet sharing a
//! PostgreSQL store sees it, and is changed only by the store's
//! compare-and-swap (`update` / `insert_new`), never by a read-then-write.
//!
//! **Usage records.** A client's usage is a few records (`Collection::Meta`,
//! key `quota \0 kind \0 account \0 window`), one per time window in which it
//! created items, each holding the items and bytes charged to it; the client's
//! usage is the sum of its live records, and the node's total is the same
//! under the account [`TOTAL_ACCOUNT`]. A window is an eighth of the items'
//! TTL (at least a second), so a client has about nine records at most. An
//! item created in a window is charged to that window for its whole life (its
//! [`Charge`] names the window and is stored with the item), including what it
//! grows by later.
//!
//! **Expiry.** Items expire their TTL after their last change. Every change of
//! an item (its creation, each later save, see [`StoredQuota::grow`]) sets its
//! window's record to expire no sooner than the item itself: the record
//! outlives every item counted in it, and goes (with all it counted) when its
//! last item does. Usage therefore comes down as items expire, at worst a
//! window's worth late: over-counting, never under-counting.
//!
//! **Bytes** are the stored item's JSON size, charged at creation and again by
//! what it grows (an A2A task's answer): a client meets its bound by what it
//! really stored, not by a worst case that would let an honest client store
//! only a few tasks. The bounds are checked when an item is created; growth is
//! counted but never refused (the item was already accepted), so a client can
//! pass its byte bound by the growth of the items it has running, which the
//! transport bounds (an A2A answer is at most 1 MiB per running task).
//!
//! Within one window the per-client check and the charge are one
//! compare-and-swap, so concurrent creations cannot pass a bound together; two
//! creations straddling a window's end can each pass on a stale read of the
//! other window, by at most one item each.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::store::{Collection, Store, StoreError, now_ms};

/// The account of every client together.
pub const TOTAL_ACCOUNT: &str = "*";
/// Windows per TTL: the records one account has live, about.
const WINDOWS_PER_TTL: u64 = 8;
/// Records of one account read at most; more (unswept expired ones, a TTL
/// shortened across a restart) refuses, rather than under-count.
const MAX_RECORDS: usize = 256;
/// Compare-and-swap tries before a change gives up as contended.
const CHANGE_TRIES: usize = 16;

/// The bounds of one kind of stored item, with the configuration keys that set them.
#[derive(Debug, Clone)]
pub struct QuotaBounds {
    pub per_client_items: u64,
    pub per_client_items_key: &'static str,
    pub per_client_bytes: u64,
    pub per_client_bytes_key: &'static str,
    pub total_bytes: u64,
    pub total_bytes_key: &'static str,
}

/// Why an item was not admitted (or its growth not counted).
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    #[error(
        "this client has {held} stored, its limit ({key}); they expire {ttl_secs} s after their last change"
    )]
    PerClient {
        held: String,
        key: &'static str,
        ttl_secs: u64,
    },
    #[error("the node has {held} stored, its limit ({key}); try again later")]
    Total { held: String, key: &'static str },
    #[error("stored usage is being changed by many requests at once; try again")]
    Contended,
    #[error("this client's stored usage is in more records than are read ({MAX_RECORDS}); try again later")]
    TooManyRecords,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one item was charged and where: stored with the item, so whoever saves
/// it next (this process, after a restart) charges its growth to the same record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    pub account: String,
    pub window: u64,
    pub bytes: u64,
}

/// One window's usage of one account, and when the record expires (kept in the
/// value so a change can only push it later).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Usage {
    items: u64,
    bytes: u64,
    expires_at_ms: u64,
}

/// How much an item adds to (or, refunded, takes from) a record.
#[derive(Debug, Clone, Copy)]
enum Delta {
    Add { items: u64, bytes: u64 },
    Refund { items: u64, bytes: u64 },
}

impl Usage {
    fn apply(self, delta: Delta, expires_at_ms: u64) -> Usage {
        let (items, bytes) = match delta {
            Delta::Add { items, bytes } => {
                (self.items.saturating_add(items), self.bytes.saturating_add(bytes))
            }
            Delta::Refund { items, bytes } => {
                (self.items.saturating_sub(items), self.bytes.saturating_sub(bytes))
            }
        };
        Usage {
            items,
            bytes,
            expires_at_ms: self.expires_at_ms.max(expires_at_ms),
        }
    }
}

/// An account's usage in other windows than the one being changed.
#[derive(Default)]
struct Others {
    items: u64,
    bytes: u64,
}

/// The stored quota of one kind of item (`kind` keeps kinds apart in the store).
pub struct StoredQuota {
    store: Store,
    kind: &'static str,
    bounds: QuotaBounds,
    ttl: Duration,
}

impl StoredQuota {
    pub fn new(store: Store, kind: &'static str, bounds: QuotaBounds, ttl: Duration) -> StoredQuota {
        StoredQuota {
            store,
            kind,
            bounds,
            ttl,
        }
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn window_of(&self, at_ms: u64) -> u64 {
        at_ms / (self.ttl_ms() / WINDOWS_PER_TTL).max(1000)
    }

    fn prefix(&self, account: &str) -> Vec<u8> {
        format!("quota\0{}\0{account}\0", self.kind).into_bytes()
    }

    fn key(&self, account: &str, window: u64) -> Vec<u8> {
        let mut key = self.prefix(account);
        // Fixed width: the records list in window order.
        key.extend_from_slice(format!("{window:016x}").as_bytes());
        key
    }

    /// Charge a new item of `bytes` to `client` (and to the node's total), or
    /// refuse it naming the bound it would pass. Nothing is charged on refusal.
    pub async fn admit(&self, client: &str, bytes: u64) -> Result<Charge, QuotaError> {
        let now = now_ms();
        let window = self.window_of(now);
        let expires = now.saturating_add(self.ttl_ms());
        let delta = Delta::Add { items: 1, bytes };
        self.change(client, window, delta, expires, |others, current| {
            self.check_client(others, current, bytes)
        })
        .await?;
        let total = self
            .change(TOTAL_ACCOUNT, window, delta, expires, |others, current| {
                self.check_total(others, current, bytes)
            })
            .await;
        if let Err(refused) = total {
            let refund = Delta::Refund { items: 1, bytes };
            self.change(client, window, refund, expires, |_, _| Ok(()))
                .await?;
            return Err(refused);
        }
        Ok(Charge {
            account: client.to_string(),
            window,
            bytes,
        })
    }

    /// An admitted item that was not stored after all: its charge taken back.
    pub async fn refund(&self, charge: &Charge) -> Result<(), QuotaError> {
        let refund = Delta::Refund {
            items: 1,
            bytes: charge.bytes,
        };
        // The records keep their expiry: other items may still count in them.
        for account in [charge.account.as_str(), TOTAL_ACCOUNT] {
            self.change(account, charge.window, refund, 0, |_, _| Ok(()))
                .await?;
        }
        Ok(())
    }

    /// The item charged `charge` was saved again, now `bytes` long: charge what
    /// it grew by, and keep its window's records at least as long as the item
    /// (saved now, it expires its TTL from now). Never refused.
    pub async fn grow(&self, charge: &mut Charge, bytes: u64) -> Result<(), QuotaError> {
        let grown = bytes.saturating_sub(charge.bytes);
        let expires = now_ms().saturating_add(self.ttl_ms());
        let delta = Delta::Add {
            items: 0,
            bytes: grown,
        };
        for account in [charge.account.as_str(), TOTAL_ACCOUNT] {
            self.change(account, charge.window, delta, expires, |_, _| Ok(()))
                .await?;
        }
        charge.bytes = charge.bytes.saturating_add(grown);
        Ok(())
    }

    fn check_client(&self, others: &Others, current: Usage, bytes: u64) -> Result<(), QuotaError> {
        let bounds = &self.bounds;
        let items = others.items.saturating_add(current.items);
        if items.saturating_add(1) > bounds.per_client_items {
            return Err(QuotaError::PerClient {
                held: format!("{items} items"),
                key: bounds.per_client_items_key,
                ttl_secs: self.ttl.as_secs(),
            });
        }
        let held = others.bytes.saturating_add(current.bytes);
        if held.saturating_add(bytes) > bounds.per_client_bytes {
            return Err(QuotaError::PerClient {
                held: format!("{held} bytes (this one adds {bytes})"),
                key: bounds.per_client_bytes_key,
                ttl_secs: self.ttl.as_secs(),
            });
        }
        Ok(())
    }

    fn check_total(&self, others: &Others, current: Usage, bytes: u64) -> Result<(), QuotaError> {
        let held = others.bytes.saturating_add(current.bytes);
        if held.saturating_add(bytes) > self.bounds.total_bytes {
            return Err(QuotaError::Total {
                held: format!("{held} bytes"),
                key: self.bounds.total_bytes_key,
            });
        }
        Ok(())
    }

    /// Apply `delta` to `account`'s record of `window` if `check` allows it
    /// (given the account's other live records and this one as they stand),
    /// by compare-and-swap.
    async fn change(
        &self,
        account: &str,
        window: u64,
        delta: Delta,
        expires_at_ms: u64,
        check: impl Fn(&Others, Usage) -> Result<(), QuotaError>,
    ) -> Result<(), QuotaError> {
        let key = self.key(account, window);
        for _ in 0..CHANGE_TRIES {
            let (others, current) = self.read(account, &key).await?;
            check(&others, current.unwrap_or_default())?;
            let next = current.unwrap_or_default().apply(delta, expires_at_ms);
            let expiry = Some(next.expires_at_ms);
            let done = match &current {
                Some(current) => {
                    self.store
                        .update(Collection::Meta, &key, current, &next, expiry)
                        .await?
                }
                None => {
                    self.store
                        .insert_new(Collection::Meta, &key, &next, expiry)
                        .await?
                }
            };
            if done {
                return Ok(());
            }
        }
        Err(QuotaError::Contended)
    }

    /// `account`'s live records: the sum of all but `key`'s, and `key`'s own.
    async fn read(&self, account: &str, key: &[u8]) -> Result<(Others, Option<Usage>), QuotaError> {
        let keys = self
            .store
            .keys(Collection::Meta, &self.prefix(account), MAX_RECORDS)
            .await?;
        if keys.len() >= MAX_RECORDS {
            return Err(QuotaError::TooManyRecords);
        }
        let mut others = Others::default();
        let mut current = None;
        for record_key in keys.iter().filter(|record_key| record_key.as_slice() != key) {
            if let Some(usage) = self.store.get::<Usage>(Collection::Meta, record_key).await? {
                others.items = others.items.saturating_add(usage.items);
                others.bytes = others.bytes.saturating_add(usage.bytes);
            }
        }
        if let Some(usage) = self.store.get::<Usage>(Collection::Meta, key).await? {
            current = Some(usage);
        }
        Ok((others, current))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(store: Store, ttl: Duration) -> StoredQuota {
        StoredQuota::new(
            store,
            "test",
            QuotaBounds {
                per_client_items: 3,
                per_client_items_key: "test.items",
                per_client_bytes: 100,
                per_client_bytes_key: "test.bytes",
                total_bytes: 150,
                total_bytes_key: "test.total",
            },
            ttl,
        )
    }

    fn refused_key(error: QuotaError) -> &'static str {
        match error {
            QuotaError::PerClient { key, .. } | QuotaError::Total { key, .. } => key,
            other => panic!("not a refusal: {other}"),
        }
    }

    #[tokio::test]
    async fn each_bound_refuses_and_a_refusal_charges_nothing() {
        let quota = quota(Store::temporary().unwrap(), Duration::from_secs(3600));
        for _ in 0..3 {
            quota.admit("a", 1).await.unwrap();
        }
        assert_eq!(refused_key(quota.admit("a", 1).await.unwrap_err()), "test.items");
        assert_eq!(
            refused_key(quota.admit("b", 101).await.unwrap_err()),
            "test.bytes"
        );
        let mut charge = quota.admit("b", 90).await.unwrap();
        // The total (3 + 90) leaves 57: "c" fits 50, not 60; and the refused 60
        // was taken back from "c"'s own account, or 50 more would pass its 100.
        assert_eq!(refused_key(quota.admit("c", 60).await.unwrap_err()), "test.total");
        quota.admit("c", 50).await.unwrap();
        // Growth counts against the next admission, never refuses itself.
        quota.grow(&mut charge, 200).await.unwrap();
        assert_eq!(charge.bytes, 200);
        assert_eq!(refused_key(quota.admit("b", 1).await.unwrap_err()), "test.bytes");
    }

    #[tokio::test]
    async fn a_refund_gives_back_what_an_admission_took() {
        let quota = quota(Store::temporary().unwrap(), Duration::from_secs(3600));
        let charges = [
            quota.admit("a", 40).await.unwrap(),
            quota.admit("a", 40).await.unwrap(),
        ];
        assert_eq!(refused_key(quota.admit("a", 40).await.unwrap_err()), "test.bytes");
        quota.refund(&charges[0]).await.unwrap();
        quota.admit("a", 40).await.unwrap();
    }

    #[tokio::test]
    async fn usage_comes_down_when_its_items_expire() {
        let quota = quota(Store::temporary().unwrap(), Duration::from_millis(1));
        for _ in 0..3 {
            quota.admit("a", 1).await.unwrap();
        }
        // Past the TTL the window's record has expired with its items.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match quota.admit("a", 1).await {
                Ok(_) => break,
                Err(error) => {
                    assert_eq!(refused_key(error), "test.items");
                    assert!(std::time::Instant::now() < deadline, "usage never came down");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}
