//! MCP's part of the operator's console activity: the sessions with a stored
//! history (their tool calls and approvals). A session lives in memory (on a
//! fleet, also as a row of the shared store); its history is what the store
//! keeps of it, and what is listed.

use serde_json::Value;

use super::state::history_id;
use crate::node::state::NodeState;
use crate::store::{Collection, StoreError};
use crate::vocab::Thread;

/// Sessions with a history among the first `scan` stored history entries, in no particular order.
pub async fn recent(node: &NodeState, scan: usize) -> Result<Vec<Thread>, StoreError> {
    let prefix = history_id("");
    let mut threads: Vec<Thread> = Vec::new();
    // History keys are `id \0 sequence`: one session's entries are next to each other.
    for key in node
        .store
        .keys(Collection::History, prefix.as_bytes(), scan)
        .await?
    {
        let Some(end) = key.iter().position(|byte| *byte == 0) else {
            continue;
        };
        let id = String::from_utf8_lossy(&key[prefix.len()..end]).into_owned();
        if threads.last().is_some_and(|last| last.id == id) {
            continue;
        }
        threads.push(Thread {
            id,
            started_at_ms: None,
            last_at_ms: None,
            state: None,
            plugin: None,
        });
    }
    for thread in &mut threads {
        let last = node
            .store
            .history_tail::<Value>(&history_id(&thread.id), 1, 1 << 20)
            .await?;
        thread.last_at_ms = last.first().and_then(|entry| entry["at"].as_u64());
    }
    Ok(threads)
}

/// The history of session `id`.
pub async fn history_key(_node: &NodeState, id: &str) -> Result<Option<String>, StoreError> {
    Ok(Some(history_id(id)))
}
