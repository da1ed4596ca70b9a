//! What every HAI handler shares: the node, the live sessions, the
//! browser client page, the stored sessions' quota and, on a shared store,
//! the running turns' leases.

use std::sync::Arc;
use std::time::Duration;

use super::fleet::FleetOut;
use super::session::{Hub, Limits};
use crate::node::state::NodeState;
use crate::policy::quota::{QuotaBounds, StoredQuota};
use crate::store::lease::Leases;

/// What every handler of this transport shares.
#[derive(Clone)]
pub struct HaiState {
    pub(super) node: NodeState,
    pub(super) hub: Arc<Hub>,
    pub(super) page: Arc<str>,
    /// Stored sessions and their history bytes per client address and in total.
    pub(super) stored: Arc<StoredQuota>,
    /// The leases of the turns running here (`None` on a store of its own).
    pub(super) leases: Option<Leases>,
}

impl HaiState {
    /// The state for `node`, serving `page` as the browser client.
    pub(super) fn new(node: NodeState, page: String) -> HaiState {
        let config = &node.config.hai;
        let hub = Hub::new(
            Limits::from_config(config),
            FleetOut::start(&node.store, node.runtime.metrics(), &node.background),
            node.runtime.approvals().clone(),
            &node.background,
        );
        let stored = StoredQuota::new(
            node.store.clone(),
            "hai.session",
            QuotaBounds {
                per_client_items: config.max_stored_sessions_per_client,
                per_client_items_key: "hai.max_stored_sessions_per_client",
                per_client_bytes: config.max_stored_session_bytes_per_client,
                per_client_bytes_key: "hai.max_stored_session_bytes_per_client",
                total_bytes: config.max_stored_session_bytes,
                total_bytes_key: "hai.max_stored_session_bytes",
            },
            Duration::from_secs(config.session_ttl_secs),
        );
        let lease_length = Duration::from_millis(node.config.store.lease_ms);
        HaiState {
            hub,
            stored: Arc::new(stored),
            leases: Leases::new(&node.store, "hai", lease_length),
            node,
            page: Arc::from(page),
        }
    }
}
