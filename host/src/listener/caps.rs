//! Connection caps: in total and per client address.
//!
//! Each connection holds a [`ConnectionPermit`] for as long as its socket is
//! open; the permit lives inside the socket ([`super::socket::Counted`]) so that a connection
//! upgraded to a WebSocket keeps counting. IPv6 clients are counted by their /64,
//! the block one subscriber usually gets, so one host cannot dodge the per-address
//! cap by walking through its own addresses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::metrics::{Metrics, ReasonLabels};

#[derive(Clone)]
pub struct ConnectionCaps {
    inner: Arc<Inner>,
}

struct Inner {
    max_total: usize,
    max_per_client: usize,
    /// Open connections by client; an entry exists only while it has one, so the
    /// map never holds more than `max_total` entries.
    open: Mutex<Open>,
    metrics: Metrics,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

impl ConnectionCaps {
    pub fn new(max_total: usize, max_per_client: usize, metrics: Metrics) -> ConnectionCaps {
        ConnectionCaps {
            inner: Arc::new(Inner {
                max_total,
                max_per_client,
                open: Mutex::new(Open::default()),
                metrics,
            }),
        }
    }

    /// A permit for one more connection from `ip`, or None (counted) when a cap is full.
    pub fn admit(&self, ip: IpAddr) -> Option<ConnectionPermit> {
        let client = client_key(ip);
        let refused = {
            let mut open = self.inner.open.lock();
            if open.total >= self.inner.max_total {
                Some("total")
            } else {
                let count = open.by_client.entry(client).or_insert(0);
                if *count >= self.inner.max_per_client {
                    Some("per_ip")
                } else {
                    *count += 1;
                    open.total += 1;
                    None
                }
            }
        };
        if let Some(reason) = refused {
            self.inner
                .metrics
                .connections_refused
                .get_or_create(&ReasonLabels { reason })
                .inc();
            tracing::debug!(%ip, reason, "connection refused: cap reached");
            return None;
        }
        self.inner.metrics.connections_open.inc();
        Some(ConnectionPermit {
            caps: self.inner.clone(),
            client,
        })
    }

    /// Connections open now (for tests and `/health`).
    pub fn open(&self) -> usize {
        self.inner.open.lock().total
    }
}

/// The client every per-address limit of the node counts by: IPv4 addresses
/// (and IPv4-mapped IPv6) as they are; IPv6 by its /64.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

pub struct ConnectionPermit {
    caps: Arc<Inner>,
    client: IpAddr,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut open = self.caps.open.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(count) = open.by_client.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.by_client.remove(&self.client);
            }
        }
        drop(open);
        self.caps.metrics.connections_open.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(total: usize, per_client: usize) -> ConnectionCaps {
        ConnectionCaps::new(total, per_client, Metrics::new())
    }

    #[test]
    fn one_client_cannot_take_more_than_its_share_and_a_closed_connection_frees_its_place() {
        let caps = caps(10, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let first = caps.admit(a).expect("first");
        let _second = caps.admit(a).expect("second");
        assert!(caps.admit(a).is_none(), "third from the same address");
        assert!(caps.admit(b).is_some(), "another address is still served");
        drop(first);
        assert!(caps.admit(a).is_some(), "a closed connection frees its place");
    }

    #[test]
    fn the_total_cap_holds_across_clients() {
        let caps = caps(3, 3);
        let permits: Vec<_> = (1..=3)
            .map(|i| caps.admit(IpAddr::from([192, 0, 2, i])).expect("under the cap"))
            .collect();
        assert!(caps.admit(IpAddr::from([192, 0, 2, 9])).is_none());
        assert_eq!(caps.open(), 3);
        drop(permits);
        assert_eq!(caps.open(), 0);
        assert!(
            caps.inner.open.lock().by_client.is_empty(),
            "no entry outlives its connections"
        );
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        let caps = caps(10, 1);
        let _one = caps.admit("2001:db8:1:2::1".parse().unwrap()).expect("first");
        assert!(caps.admit("2001:db8:1:2::ffff".parse().unwrap()).is_none());
        assert!(caps.admit("2001:db8:1:3::1".parse().unwrap()).is_some());
    }
}
