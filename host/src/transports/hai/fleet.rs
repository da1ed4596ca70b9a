//! HAI across a fleet of nodes sharing one store (`store.backend = "postgres"`):
//! a browser on node B sees the frames of a turn running on node A, and a
//! `tool_approval_response` sent to B releases the tool waiting on A, once.
//!
//! - Frames: [`super::session::Session::publish`] hands every frame to this
//!   node's [`FleetOut`] as well as to its own connections. One task per node
//!   sends them, in the order they were published, in batches, through
//!   [`Store::publish`] (topic [`FRAMES_TOPIC`]); one task per node reads
//!   [`Store::subscribe`] and gives each frame to the connections of that
//!   session on this node, without publishing it again. A node sends its frames
//!   one batch after another, and the store delivers one node's messages in the
//!   order they were sent, so a turn's frames arrive in order on every node.
//! - Approvals: a pending approval is also a record in
//!   [`Collection::Approvals`] (see [`approval_key`]) that lives as long as the
//!   wait may. Whoever decides it first [`Store::take`]s the record: a human's
//!   answer on any node, or the waiting tool's own deadline. The loser of that
//!   race is told `unknown_approval` (or times out), so an approval is decided
//!   once across the fleet. A decision taken on a node that is not the one the
//!   tool waits on is sent on [`APPROVAL_TOPIC`] after its history entry is
//!   committed; the waiting node delivers it to its local wait.
//! - A dead node's turns: a running turn holds a lease ([`crate::store::lease`]);
//!   when its node stops renewing it, the node that takes it withdraws the
//!   turn's waiting approvals (their records taken, so an answer finds
//!   nothing to decide: `unknown_approval`), records the failed turn in the
//!   history (an `error` entry naming the turn and the approvals withdrawn),
//!   and sends the session's connections, on every node, a `node_stopped`
//!   error frame and `status: completed` ([`HaiState::fail_stopped_turn`]).
//! - Per node, not per fleet: the live-session table and its caps, the pending
//!   approval caps (per connection, per address, in total), the per-session rate
//!   window, the turn queue and the turn lock. Two turns of one session sent to
//!   two nodes run at the same time, each node answering its own in order; the
//!   history (one sequence in the store) interleaves their entries.
//!
//! The embedded store (sled) has nobody to tell: no [`FleetOut`] exists and a
//! frame costs nothing more than before. Frames are bounded on the way out
//! ([`OUTBOX_FRAMES`]); a node that cannot publish them (the database is away)
//! drops them for the other nodes and counts it, and a node that reads too
//! slowly loses the oldest messages (`Lagged`), counted and logged; the history
//! has what matters, and a client reloads it.
//!
//! Frames take a few milliseconds through the database, so a connection that
//! joins a session on another node just as a turn ends may still get that
//! turn's last frames. A decision sent to another node while the database is
//! away does not arrive (the decider gets `storage_unavailable` after its
//! history entry was committed) and the waiting tool times out. A node whose
//! new session lost the claim to its id (see `Shared::record_session`) keeps it
//! in memory until it is idle; its turns are refused as another's session.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc};

use serde_json::json;

use super::session::{Hub, approval_scope};
use super::wire::{Outbound, Status};
use super::{HaiError, HaiState, history_id};
use crate::background::Background;
use crate::metrics::{Metrics, ReasonLabels};
use crate::runtime::ApprovalOutcome;
use crate::store::lease::{Expired, Reclaim};
use crate::store::{Collection, FleetMessage, Store, StoreError};

/// A batch of session frames ([`FrameBatch`]).
pub const FRAMES_TOPIC: &str = "hai.frames";
/// A decided approval for the node whose tool waits ([`Decided`]).
pub const APPROVAL_TOPIC: &str = "hai.approval";
/// Frames waiting to be published; beyond it they are dropped for the other nodes.
const OUTBOX_FRAMES: usize = 4096;
/// At most this many frames, and about this many bytes, in one published message.
const BATCH_FRAMES: usize = 256;
const BATCH_BYTES: usize = 256 << 10;
/// A session's waiting approvals one dead turn's reclaim reads at most.
const MAX_SESSION_APPROVALS: usize = 1_024;

/// The store key of a pending approval: its session and id, so only a
/// connection of that session can take it.
pub fn approval_key(session_id: &str, approval_id: &str) -> Vec<u8> {
    format!("hai:{session_id}\0{approval_id}").into_bytes()
}

/// What the store holds of a pending approval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ApprovalRecord {
    pub session_id: String,
    pub tool_name: String,
    pub call_id: String,
    /// The turn that asked (its lease's id), so a dead turn's approvals can be
    /// told from another turn's of the same session.
    #[serde(default)]
    pub turn_id: String,
}

/// A human's decision, for the node whose tool waits for it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Decided {
    pub session_id: String,
    pub approval_id: String,
    pub approved: bool,
    #[serde(default)]
    pub feedback: Option<String>,
}

impl Decided {
    pub fn outcome(&self) -> ApprovalOutcome {
        if self.approved {
            ApprovalOutcome::Approved
        } else {
            ApprovalOutcome::Rejected {
                feedback: self.feedback.clone(),
            }
        }
    }
}

/// Run this node's share of failing the turns of nodes that died (a shared store only).
pub fn fail_dead_nodes_turns(shared: &HaiState) {
    if let Some(leases) = &shared.leases {
        let reclaim = Arc::new(FailStoppedTurns(shared.clone()));
        leases.sweep(&shared.node.background, reclaim);
    }
}

/// Fails the turn of an expired lease: its node stopped.
struct FailStoppedTurns(HaiState);

#[async_trait::async_trait]
impl Reclaim for FailStoppedTurns {
    async fn reclaim(&self, expired: &Expired) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some(session_id) = expired.work["session_id"].as_str() else {
            return Ok(());
        };
        Ok(self.0.fail_stopped_turn(session_id, &expired.id).await?)
    }
}

impl HaiState {
    /// End turn `turn_id` of `session_id`, whose node stopped while it ran
    /// (see the module docs). The history entry is committed before any
    /// connection hears of it.
    pub(super) async fn fail_stopped_turn(&self, session_id: &str, turn_id: &str) -> Result<(), HaiError> {
        let withdrawn = self.withdraw_approvals(session_id, turn_id).await?;
        let error = HaiError::NodeStopped;
        let details = json!({"turn_id": turn_id, "approval_ids": withdrawn});
        let body = json!({"error_code": error.code(), "message": error.to_string(),
            "turn_id": turn_id, "approval_ids": withdrawn});
        let store = &self.node.store;
        let max_entries = self.node.config.hai.max_history_entries;
        match store
            .append_entry(&history_id(session_id), "error", &body, max_entries)
            .await
        {
            Ok(size) => {
                if let Some(session) = self.hub.live(session_id) {
                    session.appended(size as u64);
                }
            }
            // A full history keeps what it has; the session's clients still hear of the end.
            Err(StoreError::Limit(detail)) => {
                tracing::info!(transport = "hai", %detail, "hai: a dead node's turn was not recorded: the history is full")
            }
            Err(error) => return Err(error.into()),
        }
        store.commit().await?;
        let frames = [
            Outbound::Error {
                error_code: error.code(),
                message: error.to_string(),
                details: Some(details),
            },
            Outbound::Status {
                status: Status::Completed,
                message: None,
                session_id: session_id.to_string(),
            },
        ];
        for frame in &frames {
            self.publish_everywhere(session_id, frame);
        }
        Ok(())
    }

    /// Take the records of the approvals turn `turn_id` waits for, so no
    /// answer can count any more; their ids.
    async fn withdraw_approvals(&self, session_id: &str, turn_id: &str) -> Result<Vec<String>, HaiError> {
        let store = &self.node.store;
        let prefix = approval_key(session_id, "");
        let records = store
            .records::<ApprovalRecord>(Collection::Approvals, &prefix, MAX_SESSION_APPROVALS)
            .await?;
        let mut withdrawn = Vec::new();
        for (key, record) in records {
            if record.turn_id != turn_id {
                continue;
            }
            let taken = store
                .take::<ApprovalRecord>(Collection::Approvals, key.as_bytes())
                .await?;
            if taken.is_some() {
                withdrawn.push(key[prefix.len()..].to_string());
            }
        }
        Ok(withdrawn)
    }

    /// Send a frame to the session's connections on this node and every other.
    fn publish_everywhere(&self, session_id: &str, frame: &Outbound) {
        match self.hub.live(session_id) {
            Some(session) => session.publish(frame),
            None => {
                if let Some(fleet) = self.hub.fleet() {
                    fleet.send_frame(session_id, &frame.to_text());
                }
            }
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct SessionFrame {
    session_id: String,
    /// The frame's JSON text as this node's connections got it.
    frame: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct FrameBatch {
    frames: Vec<SessionFrame>,
}

/// How much of the fan-out was lost: running totals for the logs, and
/// `agora_fleet_frames_lost_total{reason}` for a monitor.
#[derive(Debug)]
struct FleetCounts {
    /// Frames not sent to the other nodes (outbox full, or publishing failed).
    frames_not_sent: AtomicU64,
    /// Messages of other nodes this node read too late to get (`Lagged`).
    messages_missed: AtomicU64,
    lost: Family<ReasonLabels, Counter>,
}

impl FleetCounts {
    fn lost(&self, reason: &'static str, count: u64) {
        self.lost.get_or_create(&ReasonLabels { reason }).inc_by(count);
    }
}

/// This node's way to the other nodes of the fleet: cheap to clone, never blocks.
#[derive(Clone)]
pub struct FleetOut {
    outbox: mpsc::Sender<SessionFrame>,
    store: Store,
    background: Background,
    counts: Arc<FleetCounts>,
}

impl FleetOut {
    /// The fan-out of a store shared by several nodes, or `None` on the
    /// embedded store. Starts the node's sending task (and needs a runtime).
    pub fn start(store: &Store, metrics: &Metrics, background: &Background) -> Option<FleetOut> {
        if !store.is_shared() || tokio::runtime::Handle::try_current().is_err() {
            return None;
        }
        let (outbox, queued) = mpsc::channel(OUTBOX_FRAMES);
        let fleet = FleetOut {
            outbox,
            store: store.clone(),
            background: background.clone(),
            counts: Arc::new(FleetCounts {
                frames_not_sent: AtomicU64::new(0),
                messages_missed: AtomicU64::new(0),
                lost: metrics.fleet_frames_lost.clone(),
            }),
        };
        let sender = send_frames(store.clone(), queued, fleet.counts.clone());
        background.spawn("hai.fleet_send", sender);
        Some(fleet)
    }

    /// Start delivering what other nodes publish to `hub`'s sessions.
    pub fn listen(&self, hub: Weak<Hub>) {
        let receiver = receive(hub, self.store.subscribe(), self.counts.clone());
        self.background.spawn("hai.fleet_receive", receiver);
    }

    /// Queue a session's frame for the other nodes.
    pub fn send_frame(&self, session_id: &str, frame: &str) {
        let queued = self.outbox.try_send(SessionFrame {
            session_id: session_id.to_string(),
            frame: frame.to_string(),
        });
        if queued.is_err() {
            self.counts.lost("outbox_full", 1);
            let lost = self.counts.frames_not_sent.fetch_add(1, Ordering::Relaxed) + 1;
            // Once per power of two, not once per frame, while it lasts.
            if lost.is_power_of_two() {
                tracing::warn!(
                    transport = "hai",
                    lost,
                    "hai: frames for the other nodes dropped (outbox full)"
                );
            }
        }
    }

    /// Tell the node whose tool waits for this approval.
    pub async fn send_decision(&self, decided: &Decided) -> crate::store::Result<()> {
        self.store.publish(APPROVAL_TOPIC, decided).await
    }
}

/// Publish queued frames in order, as many at once as are waiting (one
/// database round trip for a burst of chunks).
async fn send_frames(store: Store, mut queued: mpsc::Receiver<SessionFrame>, counts: Arc<FleetCounts>) {
    while let Some(first) = queued.recv().await {
        let mut bytes = first.frame.len();
        let mut frames = vec![first];
        while frames.len() < BATCH_FRAMES && bytes < BATCH_BYTES {
            match queued.try_recv() {
                Ok(next) => {
                    bytes += next.frame.len();
                    frames.push(next);
                }
                Err(_) => break,
            }
        }
        let batch = FrameBatch { frames };
        if let Err(error) = store.publish(FRAMES_TOPIC, &batch).await {
            let lost = batch.frames.len() as u64;
            counts.lost("publish_failed", lost);
            let total = counts.frames_not_sent.fetch_add(lost, Ordering::Relaxed) + lost;
            tracing::warn!(transport = "hai", lost, total, %error, "hai: frames not sent to the other nodes");
        }
    }
}

/// Hand what other nodes published to this node's sessions.
async fn receive(hub: Weak<Hub>, mut inbox: broadcast::Receiver<FleetMessage>, counts: Arc<FleetCounts>) {
    loop {
        let message = match inbox.recv().await {
            Ok(message) => message,
            Err(RecvError::Lagged(missed)) => {
                counts.lost("read_too_slowly", missed);
                let total = counts.messages_missed.fetch_add(missed, Ordering::Relaxed) + missed;
                tracing::warn!(
                    transport = "hai",
                    missed,
                    total,
                    "hai: this node read the fleet's messages too slowly; some frames were lost"
                );
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let Some(hub) = hub.upgrade() else { return };
        deliver(&hub, &message);
    }
}

fn deliver(hub: &Hub, message: &FleetMessage) {
    match message.topic.as_str() {
        FRAMES_TOPIC => match serde_json::from_slice::<FrameBatch>(&message.payload) {
            Ok(batch) => {
                for SessionFrame { session_id, frame } in batch.frames {
                    if let Some(session) = hub.live(&session_id) {
                        session.publish_text(Arc::from(frame));
                    }
                }
            }
            Err(error) => {
                tracing::warn!(transport = "hai", %error, "hai: unreadable frames from another node")
            }
        },
        APPROVAL_TOPIC => match serde_json::from_slice::<Decided>(&message.payload) {
            // Every other node gets it; only the one whose tool waits has it pending.
            Ok(decided) => {
                if let Some(decision) = hub
                    .approvals()
                    .take(&approval_scope(&decided.session_id), &decided.approval_id)
                {
                    decision.deliver(decided.outcome());
                }
            }
            Err(error) => {
                tracing::warn!(transport = "hai", %error, "hai: unreadable approval from another node")
            }
        },
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_keys_name_their_session() {
        assert_ne!(approval_key("a", "appr_1"), approval_key("b", "appr_1"));
        // A session id cannot reach into another's key space: ids have no NUL.
        assert!(approval_key("a", "x").starts_with(b"hai:a\0"));
    }

    #[test]
    fn a_decision_reads_back_as_its_outcome() {
        let decided = Decided {
            session_id: "s".into(),
            approval_id: "appr_1".into(),
            approved: false,
            feedback: Some("no".into()),
        };
        let wire = serde_json::to_vec(&decided).unwrap();
        let back: Decided = serde_json::from_slice(&wire).unwrap();
        assert_eq!(back, decided);
        assert_eq!(
            back.outcome(),
            ApprovalOutcome::Rejected {
                feedback: Some("no".into())
            }
        );
    }
}
