//! Live sessions (`hai-protocol.md` §"Session Management"): one fan-out
//! group per `session_id`, so every connection on a session sees its frames;
//! the approvals waiting for a human (§5–6); the per-session rate window; and
//! the turn lock that answers a session's messages one at a time.
//!
//! What outlives a connection (history, the session record) is in sled; this
//! is only the in-memory meeting point, dropped a while after its last user.
//!
//! The fan-out is one bounded queue per subscribed connection, not a tokio
//! `broadcast` channel: a broadcast ring is allocated in full when the session
//! starts (256 slots, ~12 KiB), which idle sessions would pay for nothing,
//! while a queue grows only with the frames actually waiting in it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

use super::HaiError;
use super::wire::Outbound;
use crate::runtime::{ApprovalOutcome, ApprovalRequest, Approver, PluginEvent};

/// Sessions kept in memory at once; beyond it new sessions are refused as overloaded.
const MAX_LIVE_SESSIONS: usize = 10_000;
/// How long an unused session stays in memory (keeps its rate window across reconnects).
const IDLE_KEEP: Duration = Duration::from_secs(120);
/// Turns of one session waiting behind the running one.
const MAX_QUEUED_TURNS: usize = 4;
/// Approvals one session may have open at once.
const MAX_PENDING_APPROVALS: usize = 16;
/// The event kind the approver puts in the turn's event stream, in order with the plugin's emits.
pub const APPROVAL_EVENT: &str = "hai.approval_request";

pub struct Hub {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    buffer_frames: usize,
}

impl Hub {
    pub fn new(buffer_frames: usize) -> Arc<Hub> {
        let hub = Arc::new(Hub {
            sessions: Mutex::new(HashMap::new()),
            buffer_frames,
        });
        spawn_idle_sweeper(Arc::downgrade(&hub));
        hub
    }

    /// The live session `id`, created on first use.
    pub fn session(&self, id: &str) -> Result<Arc<Session>, HaiError> {
        let mut sessions = self.sessions.lock();
        if let Some(session) = sessions.get(id) {
            session.touch();
            return Ok(session.clone());
        }
        if sessions.len() >= MAX_LIVE_SESSIONS {
            return Err(HaiError::Overloaded);
        }
        let session = Arc::new(Session {
            id: id.to_string(),
            subscribers: Mutex::new(Vec::new()),
            buffer_frames: self.buffer_frames,
            pending: Mutex::new(HashMap::new()),
            recent: Mutex::new(VecDeque::new()),
            turn: tokio::sync::Mutex::new(()),
            queued: Mutex::new(0),
            last_used: Mutex::new(Instant::now()),
        });
        sessions.insert(id.to_string(), session.clone());
        Ok(session)
    }

    fn sweep_idle(&self) {
        self.sessions.lock().retain(|_, session| {
            // Someone (a connection, a running turn) still holds it, or it was used lately.
            Arc::strong_count(session) > 1 || session.last_used.lock().elapsed() < IDLE_KEEP
        });
    }
}

fn spawn_idle_sweeper(hub: Weak<Hub>) {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_secs(30));
        loop {
            ticker.tick().await;
            let Some(hub) = hub.upgrade() else { return };
            hub.sweep_idle();
        }
    });
}

struct Pending {
    reply: oneshot::Sender<ApprovalOutcome>,
    tool_name: String,
}

pub struct Session {
    pub id: String,
    /// The frame queue of every connection on this session.
    subscribers: Mutex<Vec<mpsc::Sender<Arc<str>>>>,
    /// Frames one connection may have waiting before it counts as too slow.
    buffer_frames: usize,
    pending: Mutex<HashMap<String, Pending>>,
    recent: Mutex<VecDeque<Instant>>,
    /// Held while a turn runs, so a session's messages are answered in order.
    pub turn: tokio::sync::Mutex<()>,
    queued: Mutex<usize>,
    last_used: Mutex<Instant>,
}

impl Session {
    fn touch(&self) {
        *self.last_used.lock() = Instant::now();
    }

    /// A queue of this session's frames from now on. The session drops its end
    /// when the connection falls `buffer_frames` behind, so the receiver ending
    /// (`None`) while the connection is open means "too slow".
    pub fn subscribe(&self) -> mpsc::Receiver<Arc<str>> {
        let (sender, receiver) = mpsc::channel(self.buffer_frames);
        let mut subscribers = self.subscribers.lock();
        subscribers.retain(|queue| !queue.is_closed());
        subscribers.push(sender);
        receiver
    }

    /// Send a frame to every connection on this session.
    pub fn publish(&self, frame: &Outbound) {
        // No subscribers is fine: the frames are also in the history where it matters.
        let text: Arc<str> = Arc::from(frame.to_text());
        self.subscribers
            .lock()
            .retain(|queue| match queue.try_send(text.clone()) {
                Ok(()) => true,
                // Full: that connection is cut off (see `subscribe`); closed: it is gone.
                Err(TrySendError::Full(_) | TrySendError::Closed(_)) => false,
            });
    }

    /// Count one message against the sliding one-minute window.
    pub fn admit(&self, per_minute: u32) -> Result<(), HaiError> {
        let now = Instant::now();
        let window = Duration::from_secs(60);
        let mut recent = self.recent.lock();
        while recent.front().is_some_and(|at| now.duration_since(*at) >= window) {
            recent.pop_front();
        }
        if recent.len() >= per_minute as usize {
            let retry_after = recent
                .front()
                .map(|oldest| window.saturating_sub(now.duration_since(*oldest)))
                .unwrap_or(window);
            return Err(HaiError::RateLimited {
                per_minute,
                retry_after_ms: retry_after.as_millis() as u64,
            });
        }
        recent.push_back(now);
        self.touch();
        Ok(())
    }

    /// Reserve a place in the turn queue; the guard frees it when the turn ends.
    pub fn enqueue(self: &Arc<Self>) -> Result<QueuedTurn, HaiError> {
        let mut queued = self.queued.lock();
        if *queued > MAX_QUEUED_TURNS {
            return Err(HaiError::Busy);
        }
        *queued += 1;
        Ok(QueuedTurn {
            session: self.clone(),
        })
    }

    fn register(&self, approval_id: &str, tool_name: &str) -> Option<oneshot::Receiver<ApprovalOutcome>> {
        let mut pending = self.pending.lock();
        if pending.len() >= MAX_PENDING_APPROVALS {
            return None;
        }
        let (reply, receiver) = oneshot::channel();
        pending.insert(
            approval_id.to_string(),
            Pending {
                reply,
                tool_name: tool_name.to_string(),
            },
        );
        Some(receiver)
    }

    pub fn is_pending(&self, approval_id: &str) -> bool {
        self.pending.lock().contains_key(approval_id)
    }

    /// Deliver a human's decision. `Err` when nothing with that id is waiting in this session.
    pub fn resolve(&self, approval_id: &str, outcome: ApprovalOutcome) -> Result<String, HaiError> {
        let Some(pending) = self.pending.lock().remove(approval_id) else {
            return Err(HaiError::UnknownApproval(approval_id.to_string()));
        };
        let tool_name = pending.tool_name;
        pending
            .reply
            .send(outcome)
            .map_err(|_| HaiError::UnknownApproval(approval_id.to_string()))?;
        Ok(tool_name)
    }
}

pub struct QueuedTurn {
    session: Arc<Session>,
}

impl Drop for QueuedTurn {
    fn drop(&mut self) {
        let mut queued = self.session.queued.lock();
        *queued = queued.saturating_sub(1);
    }
}

/// Removes an approval from the pending set when its wait ends for any reason
/// (answered, timed out, the turn dropped): a late answer then gets an error frame.
struct PendingGuard<'a> {
    session: &'a Session,
    approval_id: String,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.session.pending.lock().remove(&self.approval_id);
    }
}

/// The host's [`Approver`] for one turn: asks every connection of the session
/// and holds the plugin's tool call (a parked future, no thread) until one answers.
pub struct SessionApprover {
    pub session: Arc<Session>,
    /// The turn's event stream, so the request reaches clients after what the plugin emitted before it.
    pub events: mpsc::Sender<PluginEvent>,
}

#[async_trait::async_trait]
impl Approver for SessionApprover {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalOutcome {
        let approval_id = format!("appr_{}", uuid::Uuid::new_v4().simple());
        let Some(decision) = self.session.register(&approval_id, &request.tool_name) else {
            return ApprovalOutcome::Rejected {
                feedback: Some("too many approvals are already open in this session".into()),
            };
        };
        let _guard = PendingGuard {
            session: &self.session,
            approval_id: approval_id.clone(),
        };
        let event = PluginEvent {
            kind: APPROVAL_EVENT.into(),
            data: json!({
                "approval_id": approval_id,
                "call_id": request.call_id,
                "tool_name": request.tool_name,
                "arguments": request.arguments,
                "risk": request.risk,
                "description": request.description,
            }),
        };
        if self.events.send(event).await.is_err() {
            return ApprovalOutcome::Rejected {
                feedback: Some("the session ended before anyone could approve".into()),
            };
        }
        decision.await.unwrap_or(ApprovalOutcome::TimedOut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rate_window_refuses_beyond_the_limit() {
        let hub = Hub::new(8);
        let session = hub.session("s").unwrap();
        assert!(session.admit(2).is_ok());
        assert!(session.admit(2).is_ok());
        assert!(matches!(
            session.admit(2),
            Err(HaiError::RateLimited { per_minute: 2, .. })
        ));
        // Another session has its own window.
        assert!(hub.session("t").unwrap().admit(2).is_ok());
    }

    #[tokio::test]
    async fn approvals_resolve_once_and_only_in_their_session() {
        let hub = Hub::new(8);
        let a = hub.session("a").unwrap();
        let b = hub.session("b").unwrap();
        let (events, mut stream) = mpsc::channel(4);
        let approver = SessionApprover {
            session: a.clone(),
            events,
        };
        let request = ApprovalRequest {
            call_id: "c".into(),
            tool_name: "t".into(),
            arguments: json!({}),
            risk: crate::runtime::Risk::High,
            description: "d".into(),
        };
        let waiting = tokio::spawn(async move { approver.approve(request).await });
        let event = stream.recv().await.unwrap();
        let id = event.data["approval_id"].as_str().unwrap().to_string();
        assert!(b.resolve(&id, ApprovalOutcome::Approved).is_err());
        assert!(
            a.resolve(
                &id,
                ApprovalOutcome::Rejected {
                    feedback: Some("no".into())
                }
            )
            .is_ok()
        );
        assert_eq!(
            waiting.await.unwrap(),
            ApprovalOutcome::Rejected {
                feedback: Some("no".into())
            }
        );
        assert!(a.resolve(&id, ApprovalOutcome::Approved).is_err());
    }
}
