//! `GET {path}/api/activity`: what the node's clients have been doing — the
//! most recent HAI sessions, A2A tasks, MCP sessions and Agora conversations
//! the store holds, and today's model use per plugin and per caller against
//! `llm.tokens_per_day` and `llm.tokens_per_day_per_caller` (the runtime's own
//! counters, read from the store, so a fleet's nodes agree).
//! `GET {path}/api/activity/{kind}/{id}` answers one of them with its history.
//!
//! Each transport says what it keeps and where its histories are (its
//! `activity` module); this reads at most [`SCAN`] records of each and lists
//! the [`LISTED`] most recent. A history is its newest entries within the
//! store's page bounds (`store.history_page_entries`, `store.history_page_bytes`).

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::ConsoleError;
use crate::node::state::NodeState;
use crate::store::StoreError;
use crate::transports::{a2a, agora, hai, mcp};
use crate::vocab::Thread;

/// The most records read of each kind.
pub const SCAN: usize = 1_000;
/// The most listed of each kind, the most recent first.
pub const LISTED: usize = 50;

pub async fn activity(State(node): State<NodeState>) -> Result<Json<Value>, ConsoleError> {
    Ok(Json(activity_of(&node).await?))
}

pub async fn activity_of(node: &NodeState) -> Result<Value, ConsoleError> {
    let unreadable = |error: StoreError| ConsoleError::Failed(format!("cannot read the store: {error}"));
    let usage = node
        .runtime
        .model_usage_today()
        .await
        .map_err(|error| ConsoleError::Failed(format!("cannot read today's model use: {error}")))?;
    Ok(json!({
        "hai_sessions": newest(hai::activity::recent(node, SCAN).await.map_err(unreadable)?),
        "a2a_tasks": newest(a2a::activity::recent(node, SCAN).await.map_err(unreadable)?),
        "mcp_sessions": newest(mcp::activity::recent(node, SCAN).await.map_err(unreadable)?),
        "agora_conversations": newest(agora::activity::recent(node, SCAN).await.map_err(unreadable)?),
        "model_usage": usage,
    }))
}

/// The [`LISTED`] most recent, by their last activity, else their start.
fn newest(mut threads: Vec<Thread>) -> Vec<Thread> {
    threads.sort_by_key(|thread| std::cmp::Reverse(thread.last_at_ms.or(thread.started_at_ms)));
    threads.truncate(LISTED);
    threads
}

/// `GET {path}/api/activity/{kind}/{id}`: `kind` is `hai`, `a2a`, `mcp` or `agora`.
pub async fn history(
    State(node): State<NodeState>,
    Path((kind, id)): Path<(String, String)>,
) -> Result<Json<Value>, ConsoleError> {
    let key = match kind.as_str() {
        "hai" => hai::activity::history_key(&node, &id).await,
        "a2a" => a2a::activity::history_key(&node, &id).await,
        "mcp" => mcp::activity::history_key(&node, &id).await,
        "agora" => agora::activity::history_key(&node, &id).await,
        _ => {
            return Err(ConsoleError::NotFound(format!(
                "no activity of kind {kind:?}; the kinds are hai, a2a, mcp and agora"
            )));
        }
    }
    .map_err(|error| ConsoleError::Failed(format!("cannot read the store: {error}")))?
    .ok_or_else(|| ConsoleError::NotFound(format!("no {kind} activity {id:?} is stored")))?;
    let bounds = &node.config.store;
    let entries: Vec<Value> = node
        .store
        .history_tail(&key, bounds.history_page_entries, bounds.history_page_bytes)
        .await
        .map_err(|error| ConsoleError::Failed(format!("cannot read the history: {error}")))?;
    Ok(Json(json!({"kind": kind, "id": id, "history": entries})))
}
