//! Caps on the state strangers can make an Agora node keep: live multi-round
//! conversations in total (`agora.max_conversations`) and per client address
//! (`agora.max_conversations_per_client`), and how fast one client may open
//! them (`agora.conversations_per_client_per_minute`).
//!
//! A client is its IP address as the listener saw it (IPv6 by /64, since one
//! host commonly holds a whole /64); `X-Forwarded-For` is not trusted. The
//! table lives in memory and is rebuilt from the store at start-up, so a
//! restart neither frees nor leaks capacity.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::config::AgoraConfig;

/// Longest `Retry-After` the caps ever suggest; a conversation can live an
/// hour, but a client should look again well before that.
const MAX_RETRY_AFTER_SECS: u64 = 300;

/// Why a conversation may not be opened now, with when to try again (seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The node holds `agora.max_conversations` live conversations.
    Full { limit: usize, retry_after: u64 },
    /// This client holds `agora.max_conversations_per_client`.
    ClientFull { limit: usize, retry_after: u64 },
    /// This client opened conversations faster than its per-minute rate.
    RateLimited { per_minute: u32, retry_after: u64 },
}

/// The address a client's quota is charged to (the listener's rule, as text for the store).
pub fn client_key(ip: IpAddr) -> String {
    crate::listener::caps::client_key(ip).to_string()
}

struct Live {
    client: Option<String>,
    expires_at: u64,
}

/// A token bucket: `per_minute` tokens, refilled continuously.
struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Default)]
struct Table {
    live: HashMap<String, Live>,
    /// `(expires_at, id)`, so expired conversations are dropped oldest first.
    by_expiry: BTreeSet<(u64, String)>,
    per_client: HashMap<String, usize>,
    buckets: HashMap<String, Bucket>,
}

pub struct ConversationLimits {
    max_total: usize,
    max_per_client: usize,
    per_minute: u32,
    table: Mutex<Table>,
}

impl ConversationLimits {
    pub fn new(config: &AgoraConfig) -> Arc<ConversationLimits> {
        Arc::new(ConversationLimits {
            max_total: config.max_conversations,
            max_per_client: config.max_conversations_per_client,
            per_minute: config.conversations_per_client_per_minute,
            table: Mutex::new(Table::default()),
        })
    }

    /// Count a conversation that already exists (start-up rebuild); never refused.
    pub fn restore(&self, id: &str, client: Option<String>, expires_at: u64, now_secs: u64) {
        if expires_at <= now_secs {
            return;
        }
        let mut table = self.table.lock();
        table.insert(id, client, expires_at);
    }

    /// Reserve a place for conversation `id` of `client`, live until `expires_at`
    /// (Unix seconds). The caller releases it if the conversation is never created.
    pub fn acquire(&self, id: &str, client: &str, expires_at: u64, now_secs: u64) -> Result<(), Refusal> {
        let mut table = self.table.lock();
        table.prune(now_secs);
        if table.live.len() >= self.max_total {
            let retry_after = table
                .by_expiry
                .first()
                .map_or(1, |(at, _)| at.saturating_sub(now_secs));
            return Err(Refusal::Full {
                limit: self.max_total,
                retry_after: clamp_retry(retry_after),
            });
        }
        if table.per_client.get(client).copied().unwrap_or(0) >= self.max_per_client {
            // The scan is bounded by `max_total` and only runs for a client at its cap.
            let retry_after = table
                .by_expiry
                .iter()
                .find(|(_, other)| table.live.get(other).and_then(|l| l.client.as_deref()) == Some(client))
                .map_or(1, |(at, _)| at.saturating_sub(now_secs));
            return Err(Refusal::ClientFull {
                limit: self.max_per_client,
                retry_after: clamp_retry(retry_after),
            });
        }
        self.take_token(&mut table, client)?;
        table.insert(id, Some(client.to_string()), expires_at);
        Ok(())
    }

    /// Forget conversation `id` (ended, or never created).
    pub fn release(&self, id: &str) {
        self.table.lock().remove(id);
    }

    /// Live conversations counted now (tests and metrics).
    pub fn live(&self) -> usize {
        self.table.lock().live.len()
    }

    fn take_token(&self, table: &mut Table, client: &str) -> Result<(), Refusal> {
        let capacity = f64::from(self.per_minute);
        let per_sec = capacity / 60.0;
        let now = Instant::now();
        // A bucket that has refilled completely carries no information: drop
        // those before the table grows past what the live caps allow, so a
        // spread of addresses cannot grow it without bound.
        if table.buckets.len() >= self.max_total.max(1024) {
            table
                .buckets
                .retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * per_sec < capacity);
            if table.buckets.len() >= self.max_total.max(1024) {
                return Err(Refusal::RateLimited {
                    per_minute: self.per_minute,
                    retry_after: 1,
                });
            }
        }
        let bucket = table.buckets.entry(client.to_string()).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        bucket.tokens = (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * per_sec).min(capacity);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            let retry_after = ((1.0 - bucket.tokens) / per_sec).ceil() as u64;
            return Err(Refusal::RateLimited {
                per_minute: self.per_minute,
                retry_after: clamp_retry(retry_after),
            });
        }
        bucket.tokens -= 1.0;
        Ok(())
    }
}

fn clamp_retry(secs: u64) -> u64 {
    secs.clamp(1, MAX_RETRY_AFTER_SECS)
}

impl Table {
    fn insert(&mut self, id: &str, client: Option<String>, expires_at: u64) {
        self.remove(id);
        if let Some(client) = &client {
            *self.per_client.entry(client.clone()).or_insert(0) += 1;
        }
        self.by_expiry.insert((expires_at, id.to_string()));
        self.live.insert(id.to_string(), Live { client, expires_at });
    }

    fn remove(&mut self, id: &str) {
        let Some(live) = self.live.remove(id) else {
            return;
        };
        self.by_expiry.remove(&(live.expires_at, id.to_string()));
        if let Some(client) = live.client
            && let Some(count) = self.per_client.get_mut(&client)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_client.remove(&client);
            }
        }
    }

    fn prune(&mut self, now_secs: u64) {
        while let Some((at, id)) = self.by_expiry.first().cloned() {
            if at > now_secs {
                break;
            }
            self.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_client: usize, per_minute: u32) -> Arc<ConversationLimits> {
        let mut config = crate::config::Config::defaults().agora;
        config.max_conversations = total;
        config.max_conversations_per_client = per_client;
        config.conversations_per_client_per_minute = per_minute;
        ConversationLimits::new(&config)
    }

    #[test]
    fn per_client_and_total_caps_hold_and_release_frees_a_place() {
        let limits = limits(3, 2, 100);
        assert_eq!(limits.acquire("a1", "a", 100, 10), Ok(()));
        assert_eq!(limits.acquire("a2", "a", 50, 10), Ok(()));
        assert_eq!(
            limits.acquire("a3", "a", 100, 10),
            Err(Refusal::ClientFull {
                limit: 2,
                retry_after: 40
            })
        );
        assert_eq!(limits.acquire("b1", "b", 100, 10), Ok(()));
        assert!(matches!(
            limits.acquire("c1", "c", 100, 10),
            Err(Refusal::Full { limit: 3, .. })
        ));
        limits.release("b1");
        assert_eq!(limits.acquire("c1", "c", 100, 10), Ok(()));
        // Expiry frees places without any release.
        assert_eq!(limits.acquire("a3", "a", 100, 60), Ok(()));
        assert_eq!(limits.live(), 3);
    }

    #[test]
    fn the_creation_rate_is_per_client() {
        let limits = limits(100, 100, 3);
        for n in 0..3 {
            assert_eq!(limits.acquire(&format!("a{n}"), "a", 100, 10), Ok(()));
        }
        assert!(matches!(
            limits.acquire("a3", "a", 100, 10),
            Err(Refusal::RateLimited {
                per_minute: 3,
                retry_after: 20..
            })
        ));
        assert_eq!(limits.acquire("b0", "b", 100, 10), Ok(()));
    }

    #[test]
    fn restored_conversations_count_and_expired_ones_do_not() {
        let limits = limits(2, 2, 10);
        limits.restore("old", Some("a".into()), 5, 10);
        limits.restore("x", Some("a".into()), 100, 10);
        limits.restore("y", None, 100, 10);
        assert!(matches!(
            limits.acquire("z", "b", 100, 10),
            Err(Refusal::Full { .. })
        ));
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_64() {
        let a: IpAddr = "2001:db8:1:2::5".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_eq!(client_key("::ffff:10.0.0.1".parse().unwrap()), "10.0.0.1");
    }
}
