//! What the node is and runs: `GET {path}/api/overview` and
//! `GET {path}/api/plugins`.
//!
//! Both read what `/health` reads — the runtime's plugin status (its content
//! hashes included), the store's own ping, the node's start — and the
//! transports' endpoints from [`TRANSPORTS`], the table the node mounts them
//! from; nothing is counted a second way. Unlike `/health`, which is public,
//! this is the operator's: plugin files keep their full paths, errors their
//! whole text.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::config::Config;
use crate::node::state::NodeState;
use crate::runtime::{LoadState, PluginStatus, Registry};
use crate::transports::TRANSPORTS;

pub async fn overview(State(node): State<NodeState>) -> Json<Value> {
    let store_error = node.store.unavailable().await;
    let plugins = node.runtime.status();
    let count = |state: LoadState| plugins.iter().filter(|plugin| plugin.state == state).count();
    Json(json!({
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
    }))
}

/// Every transport the node speaks: served or not, where, and at which path
/// (none where the protocol fixes its paths).
fn transports(config: &Config) -> Vec<Value> {
    TRANSPORTS
        .iter()
        .map(|transport| {
            let endpoint = (transport.endpoint)(config);
            let (listen_key, own_listen) = endpoint.listen;
            let name = listen_key.split('.').next().unwrap_or(listen_key);
            let listen = if own_listen.is_empty() {
                config.listen.as_str()
            } else {
                own_listen
            };
            json!({
                "name": name,
                "enabled": endpoint.enabled,
                "listen": listen,
                "own_listener": !own_listen.is_empty(),
                "path": endpoint.path.map(|(_, path)| path),
            })
        })
        .collect()
}

pub async fn plugins(State(node): State<NodeState>) -> Json<Value> {
    let registry = node.runtime.registry();
    let mut rows = Vec::new();
    for status in node.runtime.status() {
        // The file as it is on disk now; a failed or removed file may have none.
        let size = tokio::fs::metadata(&status.file)
            .await
            .ok()
            .map(|meta| meta.len());
        rows.push(plugin_row(&registry, status, size));
    }
    Json(json!({ "plugins": rows }))
}

/// One plugin file: its status as `/health` has it, its size, and the tools
/// of the version serving with their risk.
fn plugin_row(registry: &Registry, status: PluginStatus, size: Option<u64>) -> Value {
    let tools: Vec<Value> = registry
        .by_file(std::path::Path::new(&status.file))
        .map(|plugin| {
            plugin
                .manifest
                .tools
                .iter()
                .map(|tool| json!({"name": tool.name, "risk": tool.risk.as_str(), "description": tool.description}))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "name": status.name,
        "version": status.version,
        "file": status.file,
        "size": size,
        "sha256": status.content_sha256,
        "state": status.state,
        "error": status.error,
        "routes": status.routes,
        "tools": tools,
    })
}
