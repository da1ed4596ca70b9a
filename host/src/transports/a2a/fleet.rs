//! A2A on a fleet (several nodes on one PostgreSQL store): a task runs on the
//! node that started it, since its plugin call lives in that process, but a
//! client behind a load balancer may send the approval or the cancel to any
//! node. That node checks the message against the stored task and hands it to
//! the runner over the store's fleet bus; the runner applies it exactly as if
//! it had arrived there, and the forwarding node answers from the store, where
//! the runner writes every state a client waits for (input required, the end).
//!
//! A forwarded message that no node runs (the runner stopped) changes
//! nothing; the client sees the task as it stands when its wait runs out.
//!
//! A runner that dies leaves its task's lease to lapse ([`crate::store::lease`]);
//! the node that takes it stores the task `TASK_STATE_FAILED`, saying its node
//! stopped ([`fail_dead_nodes_tasks`]). Every other node's readers follow
//! the task through the store ([`wait_for`]), so a stream or a wait on any
//! surviving node ends with that state.
//!
//! What one client can push through the bus is bounded: an approval answer
//! crosses it once per pending approval, fleet-wide (a claim in the shared
//! store; a repeat is refused), and only as its decision — the ids and the
//! `{approval_id, approved, feedback}` data, whose feedback the decision check
//! bounds — never the rest of a message of up to `a2a.max_body_bytes`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::A2aError;
use super::run;
use super::state::{A2aState, Shared};
use crate::models::a2a::{Message, Part, Task, TaskState};
use crate::store::lease::{Expired, Reclaim};
use crate::store::{FleetMessage, Store};

const TOPIC: &str = "a2a.task";
/// How often a forwarding node reads the task back while it waits.
const POLL: Duration = Duration::from_millis(25);

/// What crosses the fleet bus, one at a time: a box for the larger variant
/// would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Forwarded {
    /// A client's answer to the task's pending approval.
    Decide {
        task_id: String,
        message: Message,
    },
    Cancel {
        task_id: String,
    },
}

/// Apply what other nodes forward to the tasks this node runs.
pub fn listen(shared: &Shared) {
    if !shared.node.store.is_shared() {
        return;
    }
    let inbox = shared.node.store.subscribe();
    let receiver = receive(std::sync::Arc::downgrade(shared), inbox);
    shared.node.background.spawn("a2a.fleet_receive", receiver);
}

/// Run this node's share of failing the tasks of nodes that died (a shared store only).
pub fn fail_dead_nodes_tasks(shared: &Shared) {
    if let Some(leases) = shared.leases() {
        let reclaim = Arc::new(FailStopped(Arc::downgrade(shared)));
        leases.sweep(&shared.node.background, reclaim);
    }
}

/// Fails the task of an expired lease: its node stopped.
struct FailStopped(Weak<A2aState>);

#[async_trait::async_trait]
impl Reclaim for FailStopped {
    async fn reclaim(&self, expired: &Expired) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match self.0.upgrade() {
            Some(shared) => Ok(shared.fail_stopped(&expired.id).await?),
            None => Ok(()),
        }
    }
}

pub async fn forward(shared: &Shared, message: &Forwarded) -> Result<(), A2aError> {
    shared.node.store.publish(TOPIC, message).await?;
    Ok(())
}

async fn receive(shared: Weak<A2aState>, mut inbox: tokio::sync::broadcast::Receiver<FleetMessage>) {
    while let Some(message) = Store::next_on_topic(&mut inbox, TOPIC, "a2a").await {
        let Some(shared) = shared.upgrade() else { return };
        match serde_json::from_slice::<Forwarded>(&message.payload) {
            // Every node gets it; only the runner has the task live.
            Ok(Forwarded::Decide { task_id, message }) => {
                let Some(live) = shared.live(&task_id) else {
                    continue;
                };
                let decided = message.data().cloned();
                // Not stored as working: the runner stores the next state a client
                // waits for, and a later write of this one could overwrite it.
                match live.resume(message, shared.node.runtime.approvals(), |approval_id| {
                    run::decision_of(approval_id, decided.as_ref())
                }) {
                    Ok(_) => {}
                    Err(error) => {
                        tracing::info!(transport = "a2a", task = %task_id, %error, "a forwarded approval did not apply")
                    }
                }
            }
            Ok(Forwarded::Cancel { task_id }) => {
                if let Some(live) = shared.live(&task_id) {
                    let _ = live.cancel();
                }
            }
            Err(error) => {
                tracing::warn!(transport = "a2a", %error, "a2a: unreadable message from another node")
            }
        }
    }
}

/// Read the task back until `done` holds or `budget` runs out; the task as it stands then.
pub async fn wait_for(
    shared: &Shared,
    task_id: &str,
    budget: Duration,
    done: impl Fn(&Task) -> bool,
) -> Result<Task, A2aError> {
    let deadline = tokio::time::Instant::now() + budget;
    loop {
        let task = shared
            .load(task_id)
            .await?
            .ok_or_else(|| A2aError::TaskNotFound(task_id.to_string()))?;
        if done(&task) || tokio::time::Instant::now() >= deadline {
            return Ok(task);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether this is the first answer to `approval_id` of `task_id` on any node:
/// only the first crosses the bus.
pub async fn first_answer(shared: &Shared, task_id: &str, approval_id: &str) -> Result<bool, A2aError> {
    let key = answer_key(task_id, approval_id);
    let ttl_ms = shared.node.config.a2a.task_ttl_secs.saturating_mul(1000);
    let expires = crate::store::now_ms().saturating_add(ttl_ms);
    Ok(shared.node.store.claim_once(&key, expires).await?)
}

/// Give back the claim of an answer that could not be forwarded.
pub async fn forget_answer(shared: &Shared, task_id: &str, approval_id: &str) {
    let key = answer_key(task_id, approval_id);
    if let Err(error) = shared.node.store.release_claim(&key).await {
        tracing::warn!(transport = "a2a", task = %task_id, %error, "an unsent answer's claim was not released");
    }
}

fn answer_key(task_id: &str, approval_id: &str) -> Vec<u8> {
    format!("a2a.answer\0{task_id}\0{approval_id}").into_bytes()
}

/// The part of a client's approval answer that travels: its ids and role, and
/// the decision's own fields as its one data part.
pub fn decision_only(message: &Message) -> Message {
    let decision: serde_json::Map<String, serde_json::Value> = message
        .data()
        .map(|data| {
            ["approval_id", "approved", "feedback"]
                .into_iter()
                .filter_map(|key| Some((key.to_string(), data.get(key)?.clone())))
                .collect()
        })
        .unwrap_or_default();
    Message {
        message_id: message.message_id.clone(),
        context_id: message.context_id.clone(),
        task_id: message.task_id.clone(),
        role: message.role.clone(),
        parts: vec![Part::data(serde_json::Value::Object(decision))],
        ..Message::default()
    }
}

/// The approval id a stored task waits for, if it waits for one.
pub fn pending_approval(task: &Task) -> Option<String> {
    if task.status.state != TaskState::InputRequired {
        return None;
    }
    let message = task.status.message.as_ref()?;
    let data = message.data()?;
    data.get("approval_id")?.as_str().map(str::to_string)
}
