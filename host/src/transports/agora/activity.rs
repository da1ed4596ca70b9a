//! Agora's part of the operator's console activity: the multi-round
//! conversations the store holds, and their histories (stored under the
//! conversation's own id).

use super::state::Conversation;
use crate::node::state::NodeState;
use crate::store::{Collection, StoreError};
use crate::vocab::Thread;

/// Up to `scan` stored conversations, in no particular order.
pub async fn recent(node: &NodeState, scan: usize) -> Result<Vec<Thread>, StoreError> {
    let records = node
        .store
        .records::<Conversation>(Collection::Conversations, b"", scan)
        .await?;
    Ok(records
        .into_iter()
        .map(|(id, conversation)| conversation.thread(id))
        .collect())
}

/// The history of conversation `id`, when it is stored.
pub async fn history_key(node: &NodeState, id: &str) -> Result<Option<String>, StoreError> {
    let stored = node
        .store
        .get::<Conversation>(Collection::Conversations, id.as_bytes())
        .await?;
    Ok(stored.map(|_| id.to_string()))
}
