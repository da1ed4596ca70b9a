//! MCP on a fleet (`store.backend = "postgres"`, several nodes behind a load
//! balancer without stickiness): a session is a row of the shared store, so
//! any node serves any request of it.
//!
//! - Sessions: `initialize` writes the session's row ([`SessionRecord`]: what
//!   the handshake settled, in [`Collection::Sessions`] under the session's
//!   history id, so the store's sweeper removes its history with it). Every
//!   later request reads the row first: a node that does not hold the session
//!   adopts it from the row, and a row that is gone (ended on another node, or
//!   expired) is a 404 on every node at once, whatever the bus has said yet.
//!   The row expires [`EXPIRY_SLACK`] past `mcp.session_idle_timeout_ms` after
//!   the last refresh; a request refreshes it when less than the idle timeout
//!   is left, so a session in use writes its row at most once a quarter of the
//!   idle timeout and lives at least the idle timeout after its last request.
//!   `DELETE`, and an eviction at the node-wide bound, remove the row and say
//!   [`Note::Ended`] on the fleet bus, so other nodes close the session's
//!   streams and fail its waiting approvals.
//! - Approval forms: a tool waits on the node that runs it, and the client's
//!   answer may reach any node. A pending form is also a record in
//!   [`Collection::Approvals`] ([`approval_key`]); whoever takes it decides,
//!   once across the fleet: the client's answer on any node, the operator's
//!   console, or the waiting tool's own deadline. A decision taken on a node
//!   where the tool does not wait is recorded in the session's history there,
//!   then sent as [`Note::Decided`]; the runner hands it to the waiting call.
//!
//! Per node, as every transport's caps are: the session places (a row is
//! written only by a node holding a place for it, until the row ends, so the
//! rows number at most nodes × `mcp.max_sessions`, and per client nodes ×
//! `mcp.max_sessions_per_ip`), the running calls of a session, and the one
//! notification stream (a stream on a node that died must not lock the client
//! out of opening one elsewhere). The eviction at `mcp.max_sessions` judges
//! "idle" by what the node holding the place saw, so it can end a session
//! whose requests all went to other nodes since.
//!
//! The notification stream carries `tools/list_changed` and
//! `resources/list_changed` only, with no event ids and no event log: a client
//! reconnects to any node of the session and gets the changes from then on; one
//! that happened while no stream was open is not replayed (a client re-lists
//! after reconnecting to be sure).

use std::sync::Weak;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::state::{McpState, Shared, approval_scope, history_id};
use crate::runtime::ApprovalOutcome;
use crate::store::{Collection, FleetMessage, Store, StoreError, now_ms};

const TOPIC: &str = "mcp.session";
/// A row outlives the idle timeout by this share of it, so a refresh need not
/// be written on every request.
const EXPIRY_SLACK: u32 = 4;
/// A pending approval's record outlives the wait's deadline, which must find
/// it to claim it.
const RECORD_MARGIN: Duration = Duration::from_secs(60);
/// What of a client's `initialize` is kept beyond what the node acts on: at most this much JSON each.
const MAX_KEPT_CLIENT_JSON: usize = 4_096;

/// What `initialize` established, as the store keeps it for every node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRecord {
    pub client: std::net::IpAddr,
    pub protocol_version: String,
    pub elicitation: bool,
    #[serde(default)]
    pub capabilities: Value,
    #[serde(default)]
    pub client_info: Value,
    pub created_at_ms: u64,
}

impl SessionRecord {
    /// The record of a new session; the client's own declarations are kept only
    /// while small (the node acts on none but the elicitation it read).
    pub fn new(client: std::net::IpAddr, protocol_version: &str, elicitation: bool, params: &Value) -> Self {
        let kept = |value: Option<&Value>| {
            value
                .filter(|value| value.to_string().len() <= MAX_KEPT_CLIENT_JSON)
                .cloned()
                .unwrap_or(Value::Null)
        };
        SessionRecord {
            client,
            protocol_version: protocol_version.to_string(),
            elicitation,
            capabilities: kept(params.get("capabilities")),
            client_info: kept(params.get("clientInfo")),
            created_at_ms: now_ms(),
        }
    }
}

/// What crosses the fleet bus.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Note {
    /// The session's row is gone: close what this node holds of it.
    Ended { session_id: String },
    /// A waiting approval was decided on another node.
    Decided {
        session_id: String,
        approval_id: String,
        approved: bool,
        #[serde(default)]
        feedback: Option<String>,
    },
}

/// A pending approval form, as any node can take it.
#[derive(Debug, Serialize, Deserialize)]
pub struct PendingApproval {
    pub tool_name: String,
}

fn row_expiry(shared: &McpState) -> u64 {
    let idle = shared.node.config.mcp.session_idle_timeout_ms;
    now_ms().saturating_add(idle.saturating_add(idle / u64::from(EXPIRY_SLACK)))
}

/// Write a new session's row.
pub async fn store_session(shared: &McpState, id: &str, record: &SessionRecord) -> Result<(), StoreError> {
    let key = history_id(id);
    shared
        .node
        .store
        .put(
            Collection::Sessions,
            key.as_bytes(),
            record,
            Some(row_expiry(shared)),
        )
        .await
}

/// The live row of session `id`, and when it expires.
pub async fn load_session(store: &Store, id: &str) -> Result<Option<(SessionRecord, u64)>, StoreError> {
    let key = history_id(id);
    Ok(store
        .get_with_expiry::<SessionRecord>(Collection::Sessions, key.as_bytes())
        .await?
        .map(|(record, expires)| (record, expires.unwrap_or(u64::MAX))))
}

/// Push the row's expiry out when less than the idle timeout is left. Only a
/// row still as read is refreshed, so a session ended meanwhile stays ended.
pub async fn refresh_if_due(
    shared: &McpState,
    id: &str,
    record: &SessionRecord,
    expires_at_ms: u64,
) -> Result<(), StoreError> {
    let idle = shared.node.config.mcp.session_idle_timeout_ms;
    if expires_at_ms.saturating_sub(now_ms()) >= idle {
        return Ok(());
    }
    let key = history_id(id);
    shared
        .node
        .store
        .update(
            Collection::Sessions,
            key.as_bytes(),
            record,
            record,
            Some(row_expiry(shared)),
        )
        .await?;
    Ok(())
}

/// Remove session `id`'s row: whether it was there.
pub async fn remove_session(store: &Store, id: &str) -> Result<bool, StoreError> {
    let key = history_id(id);
    store.remove(Collection::Sessions, key.as_bytes()).await
}

/// Tell the other nodes that session `id` ended; best effort, as each finds
/// the row gone at its next request anyway.
pub async fn announce_end(store: &Store, id: &str) {
    let note = Note::Ended {
        session_id: id.to_string(),
    };
    if let Err(error) = store.publish(TOPIC, &note).await {
        tracing::warn!(transport = "mcp", session = %id, %error, "mcp: a session's end was not told to the fleet");
    }
}

/// The store key of a pending approval: its session and id, so only a
/// response in that session can take it (HAI's records are `hai:`…).
fn approval_key(session_id: &str, approval_id: &str) -> Vec<u8> {
    format!("{}\0{approval_id}", approval_scope(session_id)).into_bytes()
}

/// Record a form about to be asked, before the client can answer it anywhere.
pub async fn put_pending(
    store: &Store,
    session_id: &str,
    approval_id: &str,
    tool_name: &str,
    deadline_ms: u64,
) -> Result<(), StoreError> {
    let record = PendingApproval {
        tool_name: tool_name.to_string(),
    };
    let expires = deadline_ms.saturating_add(RECORD_MARGIN.as_millis() as u64);
    store
        .put(
            Collection::Approvals,
            &approval_key(session_id, approval_id),
            &record,
            Some(expires),
        )
        .await
}

/// Take a pending form's record: `Some` for the one taker of the fleet.
pub async fn take_pending(
    store: &Store,
    session_id: &str,
    approval_id: &str,
) -> Result<Option<PendingApproval>, StoreError> {
    store
        .take(Collection::Approvals, &approval_key(session_id, approval_id))
        .await
}

/// Send a decision taken here to the node whose tool waits for it.
pub async fn send_decision(store: &Store, session_id: &str, approval_id: &str, outcome: &ApprovalOutcome) {
    let (approved, feedback) = approved_and_feedback(outcome);
    let note = Note::Decided {
        session_id: session_id.to_string(),
        approval_id: approval_id.to_string(),
        approved,
        feedback,
    };
    if let Err(error) = store.publish(TOPIC, &note).await {
        // Recorded, not delivered: the waiting tool times out.
        tracing::warn!(transport = "mcp", session = %session_id, %error, "mcp: a decision was not sent to the waiting node");
    }
}

/// A decision as the history and the bus write it.
pub fn approved_and_feedback(outcome: &ApprovalOutcome) -> (bool, Option<String>) {
    match outcome {
        ApprovalOutcome::Approved => (true, None),
        ApprovalOutcome::Rejected { feedback } => (false, feedback.clone()),
        ApprovalOutcome::TimedOut => (false, None),
    }
}

/// Apply what other nodes say to the sessions and calls of this node, for the node's life.
pub fn listen(shared: &Shared) {
    if !shared.node.store.is_shared() {
        return;
    }
    let inbox = shared.node.store.subscribe();
    let receiver = receive(std::sync::Arc::downgrade(shared), inbox);
    shared.node.background.spawn("mcp.fleet_receive", receiver);
}

async fn receive(shared: Weak<McpState>, mut inbox: tokio::sync::broadcast::Receiver<FleetMessage>) {
    // An end missed is found at the next request (the row is gone); a
    // decision missed leaves its tool to time out.
    while let Some(message) = Store::next_on_topic(&mut inbox, TOPIC, "mcp").await {
        let Some(shared) = shared.upgrade() else { return };
        match serde_json::from_slice::<Note>(&message.payload) {
            Ok(Note::Ended { session_id }) => shared.ended_elsewhere(&session_id).await,
            Ok(Note::Decided {
                session_id,
                approval_id,
                approved,
                feedback,
            }) => {
                // Every node gets it; only the runner has the call waiting.
                let waiting = shared
                    .node
                    .runtime
                    .approvals()
                    .take(&approval_scope(&session_id), &approval_id);
                if let Some(decision) = waiting {
                    let outcome = if approved {
                        ApprovalOutcome::Approved
                    } else {
                        ApprovalOutcome::Rejected { feedback }
                    };
                    decision.deliver(outcome);
                }
            }
            Err(error) => {
                tracing::warn!(transport = "mcp", %error, "mcp: unreadable message from another node")
            }
        }
    }
}
