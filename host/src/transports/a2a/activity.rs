//! A2A's part of the operator's console activity: the tasks the store holds,
//! read for their heads only, and the history of each task's context.

use serde::Deserialize;

use super::state::context_key;
use crate::models::a2a::TaskState;
use crate::node::state::NodeState;
use crate::store::{Collection, StoreError};
use crate::vocab::Thread;

/// A stored task read for what the console lists; serde skips the rest.
#[derive(Deserialize)]
struct Stored {
    task: Head,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    #[serde(default)]
    context_id: String,
    status: Status,
}

#[derive(Deserialize)]
struct Status {
    state: TaskState,
    #[serde(default)]
    timestamp: String,
}

/// Up to `scan` stored tasks, in no particular order.
pub async fn recent(node: &NodeState, scan: usize) -> Result<Vec<Thread>, StoreError> {
    let records = node
        .store
        .records::<Stored>(Collection::A2aTasks, b"", scan)
        .await?;
    Ok(records
        .into_iter()
        .map(|(id, stored)| Thread {
            id,
            started_at_ms: None,
            last_at_ms: unix_ms(&stored.task.status.timestamp),
            state: Some(stored.task.status.state.as_str().to_string()),
            plugin: None,
        })
        .collect())
}

/// The history of task `id`'s context, when the task is stored.
pub async fn history_key(node: &NodeState, id: &str) -> Result<Option<String>, StoreError> {
    let stored = node
        .store
        .get::<Stored>(Collection::A2aTasks, id.as_bytes())
        .await?;
    Ok(stored.map(|stored| context_key(&stored.task.context_id)))
}

/// An RFC 3339 timestamp as Unix milliseconds.
fn unix_ms(timestamp: &str) -> Option<u64> {
    let parsed =
        time::OffsetDateTime::parse(timestamp, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(parsed.unix_timestamp_nanos() / 1_000_000).ok()
}
