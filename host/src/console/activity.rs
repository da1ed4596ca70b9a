//! `GET {path}/api/activity`: what the node's clients have been using. So far
//! today's model use: the tokens of each plugin and each caller, as the
//! runtime counts them against `llm.tokens_per_day` and
//! `llm.tokens_per_day_per_caller` (the same counters, read from the store, so
//! a fleet's nodes agree). The lists of recent sessions, tasks and
//! conversations are not built yet (docs/console.md).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::ConsoleError;
use crate::node::state::NodeState;

pub async fn activity(State(node): State<NodeState>) -> Result<Json<Value>, ConsoleError> {
    Ok(Json(activity_of(&node).await?))
}

pub async fn activity_of(node: &NodeState) -> Result<Value, ConsoleError> {
    let usage = node
        .runtime
        .model_usage_today()
        .await
        .map_err(|error| ConsoleError::Failed(format!("cannot read today's model use: {error}")))?;
    Ok(json!({ "model_usage": usage }))
}
