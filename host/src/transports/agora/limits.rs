//! Caps on the state strangers can make an Agora node keep: live multi-round
//! conversations in total (`agora.max_conversations`) and per client address
//! (`agora.max_conversations_per_client`), and how fast one client may open
//! them (`agora.conversations_per_client_per_minute`): the node's shared
//! [`Ledger`] and [`RateTable`], answered in Agora's terms.
//!
//! A client is its IP address as the listener saw it (IPv6 by /64, since one
//! host commonly holds a whole /64); `X-Forwarded-For` is not trusted. The
//! ledger lives in memory and is rebuilt from the store at start-up, so a
//! restart neither frees nor leaks capacity. The rate table forgets a client
//! seen once before one it knows, and never refuses anyone for want of room,
//! so a spread of addresses cannot lock new clients out.

use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::AgoraConfig;
use crate::policy::ledger::{Ledger, LedgerBounds, LedgerRefusal, Measure, bounded};
use crate::policy::rate::{RateRefusal, RateTable};

/// Longest `Retry-After` the caps ever suggest; a conversation can live an
/// hour, but a client should look again well before that.
const MAX_RETRY_AFTER_SECS: u64 = 300;

/// Clients whose creation rate is remembered at least; more when the total
/// cap allows more live conversations (each has a client).
const MIN_TRACKED_CLIENTS: usize = 1024;

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

/// Live conversations and each client's creation rate, under one lock so a
/// place is checked, charged to the rate and taken at once.
struct Caps {
    live: Ledger<String>,
    rate: RateTable<String>,
}

/// The conversation caps of one node, shared by its Agora handlers.
pub struct ConversationLimits {
    per_minute: u32,
    caps: Mutex<Caps>,
}

impl ConversationLimits {
    pub fn new(config: &AgoraConfig) -> Arc<ConversationLimits> {
        let live = Ledger::new(LedgerBounds {
            per_client_items: bounded(
                config.max_conversations_per_client,
                "agora.max_conversations_per_client",
            ),
            total_items: bounded(config.max_conversations, "agora.max_conversations"),
            ..LedgerBounds::default()
        });
        let tracked = config.max_conversations.max(MIN_TRACKED_CLIENTS);
        Arc::new(ConversationLimits {
            per_minute: config.conversations_per_client_per_minute,
            caps: Mutex::new(Caps {
                live,
                rate: RateTable::new(tracked, config.conversations_per_client_per_minute),
            }),
        })
    }

    /// Count a conversation that already exists (start-up rebuild); never refused.
    pub fn restore(&self, id: &str, client: Option<String>, expires_at: u64, now_secs: u64) {
        let now_ms = to_ms(now_secs);
        self.caps
            .lock()
            .live
            .restore(client, id, to_ms(expires_at), 0, now_ms);
    }

    /// Reserve a place for conversation `id` of `client`, live until `expires_at`
    /// (Unix seconds). The caller releases it if the conversation is never created.
    pub fn acquire(&self, id: &str, client: &str, expires_at: u64, now_secs: u64) -> Result<(), Refusal> {
        let client = client.to_string();
        let mut caps = self.caps.lock();
        caps.live
            .check(&client, 0, to_ms(now_secs))
            .map_err(held_refusal)?;
        // Only a conversation the caps allow spends a token.
        caps.rate
            .admit(client.clone())
            .map_err(|refusal| self.rate_refusal(refusal))?;
        caps.live.record(Some(client), id, to_ms(expires_at), 0);
        Ok(())
    }

    /// Forget conversation `id` (ended, or never created).
    pub fn release(&self, id: &str) {
        self.caps.lock().live.release(id);
    }

    /// Live conversations counted now (tests and metrics).
    pub fn live(&self) -> usize {
        self.caps.lock().live.total().0 as usize
    }

    fn rate_refusal(&self, refusal: RateRefusal) -> Refusal {
        Refusal::RateLimited {
            per_minute: self.per_minute,
            retry_after: clamp_retry(refusal.retry_after_secs()),
        }
    }
}

fn held_refusal(refusal: LedgerRefusal) -> Refusal {
    let limit = usize::try_from(refusal.limit).unwrap_or(usize::MAX);
    let retry_after = clamp_retry(refusal.retry_after_secs());
    match refusal.measure {
        Measure::PerClientItems | Measure::PerClientBytes => Refusal::ClientFull { limit, retry_after },
        Measure::TotalItems | Measure::TotalBytes => Refusal::Full { limit, retry_after },
    }
}

fn to_ms(secs: u64) -> u64 {
    secs.saturating_mul(1000)
}

fn clamp_retry(secs: u64) -> u64 {
    secs.clamp(1, MAX_RETRY_AFTER_SECS)
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
