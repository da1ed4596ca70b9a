//! The fleet as the console shows it: `GET {path}/api/fleet`.
//!
//! Every node of a shared store is in the roll call ([`roll_call`]) with its
//! last heartbeat, which carries its `/health` report; the fleet's plugin set
//! is read from the store. Each node's row says what sets it apart, so a
//! node missing a plugin, serving another content, failing to load one or on
//! another version stands out without comparing hashes by eye. On a node's
//! own store the answer says so and lists nothing.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::ConsoleError;
use crate::node::state::NodeState;
use crate::store::plugin_set::PublishedPlugin;
use crate::store::roll_call::{self, Heartbeat};

pub async fn fleet(State(node): State<NodeState>) -> Result<Json<Value>, ConsoleError> {
    fleet_of(&node).await.map(Json)
}

pub async fn fleet_of(node: &NodeState) -> Result<Value, ConsoleError> {
    let unavailable = |error: crate::store::StoreError| ConsoleError::Unavailable(error.to_string());
    let Some(set) = node.store.plugin_set() else {
        return Ok(json!({ "shared": false, "set": [], "nodes": [] }));
    };
    let published = set.published().await.map_err(unavailable)?;
    let mut nodes = roll_call::read(&node.store).await.map_err(unavailable)?;
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let rows: Vec<Value> = nodes
        .iter()
        .map(|heartbeat| node_row(heartbeat, &published))
        .collect();
    Ok(json!({
        "shared": true,
        "version": env!("CARGO_PKG_VERSION"),
        "plugins_follow_fleet": node.config.plugins.fleet,
        "set": published,
        "nodes": rows,
    }))
}

/// One node, and how it differs from the set and from this node's version.
fn node_row(heartbeat: &Heartbeat, published: &[PublishedPlugin]) -> Value {
    let health = &heartbeat.health;
    let serving: Vec<&Value> = health["plugins"].as_array().into_iter().flatten().collect();
    let entry = |file: &str| serving.iter().find(|plugin| plugin["file"] == file);
    let missing: Vec<&str> = published
        .iter()
        .filter(|plugin| entry(&plugin.file).is_none_or(|e| e["content_sha256"].is_null()))
        .map(|plugin| plugin.file.as_str())
        .collect();
    let other_content: Vec<&str> = published
        .iter()
        .filter(|plugin| {
            entry(&plugin.file)
                .is_some_and(|e| e["content_sha256"].is_string() && e["content_sha256"] != plugin.sha256)
        })
        .map(|plugin| plugin.file.as_str())
        .collect();
    let extra: Vec<&str> = serving
        .iter()
        .filter_map(|plugin| plugin["file"].as_str())
        .filter(|file| !published.iter().any(|p| p.file == *file))
        .collect();
    let failing: Vec<Value> = serving
        .iter()
        .filter(|plugin| plugin["error"].is_string())
        .map(|plugin| json!({ "file": plugin["file"], "error": plugin["error"] }))
        .collect();
    let version = health["version"].as_str().unwrap_or_default();
    let in_step = missing.is_empty() && other_content.is_empty() && extra.is_empty() && failing.is_empty();
    json!({
        "node": heartbeat.node,
        "seen_at_ms": heartbeat.seen_at_ms,
        "status": health["status"],
        "version": version,
        "other_version": version != env!("CARGO_PKG_VERSION"),
        "uptime_secs": health["uptime_secs"],
        "store": health["store"]["status"],
        "plugins": serving.len(),
        "in_step": in_step,
        "missing": missing,
        "other_content": other_content,
        "extra": extra,
        "failing": failing,
    })
}
