//! What the node is and does: `GET {path}/api/overview`, and the charts'
//! `GET {path}/api/series`.
//!
//! The overview reads what `/health` reads — the runtime's plugin status (its content
//! hashes included), the store's own ping, the node's start — and the
//! transports' endpoints from [`TRANSPORTS`], the table the node mounts them
//! from; nothing is counted a second way. Unlike `/health`, which is public,
//! this is the operator's: errors keep their whole text. The series are
//! [`crate::metrics::recent`]'s, one per transport.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::config::Config;
use crate::metrics::recent::{SLOT_MS, SLOTS};
use crate::node::state::NodeState;
use crate::runtime::LoadState;
use crate::store::now_ms;
use crate::transports::TRANSPORTS;

pub async fn overview(State(node): State<NodeState>) -> Json<Value> {
    Json(overview_of(&node).await)
}

pub async fn overview_of(node: &NodeState) -> Value {
    let store_error = node.store.unavailable().await;
    let plugins = node.runtime.status();
    let count = |state: LoadState| plugins.iter().filter(|plugin| plugin.state == state).count();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_ms": node.started.elapsed().as_millis() as u64,
        "store": {
            "backend": node.store.backend_name(),
            "answers": store_error.is_none(),
            "error": store_error,
        },
        "transports": transports(&node.config),
        "plugins": {
            "loaded": count(LoadState::Loaded),
            "failed": count(LoadState::Failed),
            "pending": count(LoadState::Pending),
            "compiling": count(LoadState::Compiling),
            "starting": node.runtime.is_starting(),
        },
        "approvals_waiting": node.runtime.approvals().waiting().len(),
    })
}

/// Every transport the node speaks: served or not, where, and at which path
/// (none where the protocol fixes its paths).
fn transports(config: &Config) -> Vec<Value> {
    TRANSPORTS
        .iter()
        .map(|transport| {
            let endpoint = (transport.endpoint)(config);
            let (_, own_listen) = endpoint.listen;
            let listen = if own_listen.is_empty() {
                config.listen.as_str()
            } else {
                own_listen
            };
            json!({
                "name": endpoint.protocol,
                "enabled": endpoint.enabled,
                "listen": listen,
                "own_listener": !own_listen.is_empty(),
                "path": endpoint.path.map(|(_, path)| path),
            })
        })
        .collect()
}

/// Every transport's last fifteen minutes: requests, errors, p50 and p99 per five seconds.
pub async fn series(State(node): State<NodeState>) -> Json<Value> {
    Json(series_of(&node))
}

pub fn series_of(node: &NodeState) -> Value {
    let now = now_ms();
    let recent = &node.runtime.metrics().recent;
    let transports: Vec<Value> = TRANSPORTS
        .iter()
        .map(|transport| {
            let name = (transport.endpoint)(&node.config).protocol;
            json!({"name": name, "points": recent.series(name, now)})
        })
        .collect();
    json!({
        "interval_ms": SLOT_MS,
        "window_ms": SLOT_MS * SLOTS,
        "transports": transports,
    })
}
