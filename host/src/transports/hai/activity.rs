//! HAI's part of the operator's console activity: the sessions the store
//! holds (their records, which the sweeper expires with their histories) and
//! where each one's history is.

use serde_json::Value;

use super::history::history_id;
use crate::node::state::NodeState;
use crate::store::{Collection, StoreError};
use crate::vocab::Thread;

/// Up to `scan` stored sessions, in no particular order.
pub async fn recent(node: &NodeState, scan: usize) -> Result<Vec<Thread>, StoreError> {
    let prefix = history_id("");
    let records = node
        .store
        .records::<Value>(Collection::Sessions, prefix.as_bytes(), scan)
        .await?;
    Ok(records
        .into_iter()
        .map(|(key, record)| Thread {
            id: key.strip_prefix(&prefix).unwrap_or(&key).to_string(),
            started_at_ms: record["created_at_ms"].as_u64(),
            last_at_ms: record["last_used_ms"].as_u64(),
            state: None,
            plugin: None,
        })
        .collect())
}

/// The history of session `id`, when the session is stored.
pub async fn history_key(node: &NodeState, id: &str) -> Result<Option<String>, StoreError> {
    let key = history_id(id);
    let stored = node
        .store
        .get::<Value>(Collection::Sessions, key.as_bytes())
        .await?;
    Ok(stored.map(|_| key))
}
