//! The fleet's roll call: every node of a shared store writes a heartbeat,
//! its `/health` report under its name, and any node reads them all, so one
//! node's console shows the whole fleet.
//!
//! A heartbeat is a [`Collection::Meta`] entry that expires [`MISSED`] beats
//! after it was written: a node that stopped (or lost the database) drops out
//! of the roll call on its own, with nothing to clean up. On a store no other
//! node shares there is nobody to tell, and nothing is written.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Collection, Result, Store, now_ms};

/// How often a node writes its heartbeat.
pub const BEAT: Duration = Duration::from_secs(5);

/// Beats a node may miss before it leaves the roll call.
pub const MISSED: u32 = 3;

/// The fleet's size this roll call reads at most (a node per entry).
pub const MAX_NODES: usize = 256;

const PREFIX: &str = "fleet-node:";

/// One node's last heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The node's name in the fleet (host name and port).
    pub node: String,
    pub seen_at_ms: u64,
    /// Its `/health` report, as `/health` answered when it beat.
    pub health: serde_json::Value,
}

/// Write this node's heartbeat (a shared store only).
pub async fn beat(store: &Store, node: &str, health: serde_json::Value) -> Result<()> {
    if !store.is_shared() {
        return Ok(());
    }
    let now = now_ms();
    let heartbeat = Heartbeat {
        node: node.to_owned(),
        seen_at_ms: now,
        health,
    };
    let expires = now + (BEAT * MISSED).as_millis() as u64;
    store
        .put(Collection::Meta, &key(node), &heartbeat, Some(expires))
        .await
}

/// Every node whose heartbeat is live, by name.
pub async fn read(store: &Store) -> Result<Vec<Heartbeat>> {
    if !store.is_shared() {
        return Ok(Vec::new());
    }
    let records = store
        .records::<Heartbeat>(Collection::Meta, PREFIX.as_bytes(), MAX_NODES)
        .await?;
    Ok(records.into_iter().map(|(_, heartbeat)| heartbeat).collect())
}

fn key(node: &str) -> Vec<u8> {
    format!("{PREFIX}{node}").into_bytes()
}
