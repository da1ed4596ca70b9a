//! Live sessions (`hai-protocol.md` §"Session Management"): one fan-out
//! group per `session_id`, so every connection on a session sees its frames;
//! the approvals waiting for a human (§5–6); the per-session rate window; and
//! the turn lock that answers a session's messages one at a time.
//!
//! What outlives a connection (history, the session record) is in the store; this
//! is only the in-memory meeting point, dropped a while after its last user.
//!
//! The [`Hub`] is also where an open port is bounded: a session opens only with
//! its secret or by a bearer id ([`access::is_bearer_session_id`]), or is
//! created, within the creation rate of the client address;
//! live sessions are capped per address and in total, an address over its cap
//! making room only among its own idle sessions, so churn from one address cannot
//! push out another's; and pending approvals are capped per connection, per
//! address and in total, each reservation a ticket that frees itself when the
//! wait ends however it ends.
//!
//! The fan-out is one bounded queue per subscribed connection, not a tokio
//! `broadcast` channel: a broadcast ring is allocated in full when the session
//! starts (256 slots, ~12 KiB), which idle sessions would pay for nothing,
//! while a queue grows only with the frames actually waiting in it.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

use super::HaiError;
use super::access::{self, SecretHash};
use super::fleet::{ApprovalRecord, FleetOut, approval_key};
use super::wire::Outbound;
use crate::runtime::{ApprovalOutcome, ApprovalRequest, Approver, PluginEvent};
use crate::store::{Collection, Store, now_ms};

/// How long an unused session stays in memory (keeps its rate window across reconnects)
/// unless the table is full and it is the least recently used.
const IDLE_KEEP: Duration = Duration::from_secs(120);
/// Turns of one session waiting behind the running one.
const MAX_QUEUED_TURNS: usize = 4;
/// Approvals one session may have open at once.
const MAX_PENDING_APPROVALS: usize = 16;
/// How much before the tool path's approval timeout the approver claims the
/// approval for itself (a tenth of the timeout, at most this).
const MAX_DEADLINE_GRACE: Duration = Duration::from_secs(2);
/// The event kind the approver puts in the turn's event stream, in order with the plugin's emits.
pub const APPROVAL_EVENT: &str = "hai.approval_request";
const MINUTE: Duration = Duration::from_secs(60);

/// The `hai.*` bounds the hub enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    pub buffer_frames: usize,
    pub max_live: usize,
    pub max_live_per_ip: usize,
    pub new_per_ip_per_minute: u32,
    pub max_pending: usize,
    pub max_pending_per_ip: usize,
    pub max_pending_per_connection: usize,
}

impl Limits {
    pub fn from_config(config: &crate::config::HaiConfig) -> Limits {
        Limits {
            buffer_frames: config.send_buffer_frames,
            max_live: config.max_live_sessions,
            max_live_per_ip: config.max_live_sessions_per_ip,
            new_per_ip_per_minute: config.new_sessions_per_ip_per_minute,
            max_pending: config.max_pending_approvals,
            max_pending_per_ip: config.max_pending_approvals_per_ip,
            max_pending_per_connection: config.max_pending_approvals_per_connection,
        }
    }
}

/// A session a connection may now use; `Created` carries the secret to hand its creator.
pub enum Opened {
    Existing(Arc<Session>),
    Created(Arc<Session>, String),
}

/// What is known of a session that is not in memory.
pub enum Stored {
    /// No record: the id is free.
    Unknown,
    /// A record with this secret hash (`None`: a record without one, which nobody can resume).
    Known(Option<SecretHash>),
}

#[derive(Default)]
struct Table {
    sessions: HashMap<String, Arc<Session>>,
    live_per_ip: HashMap<IpAddr, usize>,
    /// When each client address created its sessions in the last minute.
    created: HashMap<IpAddr, VecDeque<Instant>>,
}

impl Table {
    fn remove(&mut self, id: &str) {
        if let Some(session) = self.sessions.remove(id)
            && let Some(count) = self.live_per_ip.get_mut(&session.owner)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.live_per_ip.remove(&session.owner);
            }
        }
    }

    /// Drop the least recently used idle session (no connection, no turn),
    /// of one address or of any; `false` when every candidate is in use.
    fn evict_idle(&mut self, of: Option<IpAddr>) -> bool {
        let victim = self
            .sessions
            .values()
            .filter(|s| of.is_none_or(|ip| s.owner == ip) && s.is_idle())
            .min_by_key(|s| *s.last_used.lock())
            .map(|s| s.id.clone());
        match victim {
            Some(id) => {
                self.remove(&id);
                true
            }
            None => false,
        }
    }

    fn prune_created(&mut self, now: Instant) {
        self.created.retain(|_, times| {
            while times.front().is_some_and(|at| now.duration_since(*at) >= MINUTE) {
                times.pop_front();
            }
            !times.is_empty()
        });
    }
}

#[derive(Default)]
struct ApprovalCounts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

pub struct Hub {
    table: Mutex<Table>,
    approvals: Mutex<ApprovalCounts>,
    limits: Limits,
    fleet: Option<FleetOut>,
}

impl Hub {
    /// The session table; with `fleet`, its sessions' frames also go to the
    /// other nodes, and theirs come to this node's connections.
    pub fn new(limits: Limits, fleet: Option<FleetOut>) -> Arc<Hub> {
        let hub = Arc::new(Hub {
            table: Mutex::new(Table::default()),
            approvals: Mutex::new(ApprovalCounts::default()),
            limits,
            fleet,
        });
        spawn_idle_sweeper(Arc::downgrade(&hub));
        if let Some(fleet) = &hub.fleet {
            fleet.listen(Arc::downgrade(&hub));
        }
        hub
    }

    /// The other nodes of the fleet, if the store is shared.
    pub fn fleet(&self) -> Option<&FleetOut> {
        self.fleet.as_ref()
    }

    /// The live session `id`, if it is in memory.
    pub fn live(&self, id: &str) -> Option<Arc<Session>> {
        self.table.lock().sessions.get(id).cloned()
    }

    /// Open session `id` for a connection from `ip` presenting `secret`: a live or
    /// stored session needs its secret unless `id` is a bearer id (a stored record
    /// without a secret opens for nobody); an unknown id becomes a new session
    /// (within the creation rate and live caps) whose secret is returned once.
    pub fn open(
        &self,
        id: &str,
        secret: Option<&str>,
        ip: IpAddr,
        stored: impl FnOnce() -> Result<Stored, HaiError>,
    ) -> Result<Opened, HaiError> {
        if let Some(session) = self.live(id) {
            return self.admit_existing(session, secret);
        }
        // The store is read outside the lock; the table is checked again under it.
        let stored = stored()?;
        let ip = access::client_key(ip);
        let mut table = self.table.lock();
        if let Some(session) = table.sessions.get(id).cloned() {
            drop(table);
            return self.admit_existing(session, secret);
        }
        let (hash, issued) = match stored {
            Stored::Known(Some(hash)) => {
                if !access::session_opens(id, secret, &hash) {
                    return Err(HaiError::SessionSecret);
                }
                (hash, None)
            }
            Stored::Known(None) => return Err(HaiError::SessionSecret),
            Stored::Unknown => {
                self.admit_creation(&mut table, ip)?;
                let (secret, hash) = access::new_secret();
                (hash, Some(secret))
            }
        };
        self.make_room(&mut table, ip)?;
        let session = Arc::new(Session::new(
            id,
            ip,
            hash,
            self.limits.buffer_frames,
            self.fleet.clone(),
        ));
        table.sessions.insert(id.to_string(), session.clone());
        *table.live_per_ip.entry(ip).or_default() += 1;
        Ok(match issued {
            Some(secret) => Opened::Created(session, secret),
            None => Opened::Existing(session),
        })
    }

    fn admit_existing(&self, session: Arc<Session>, secret: Option<&str>) -> Result<Opened, HaiError> {
        if !access::session_opens(&session.id, secret, &session.secret) {
            return Err(HaiError::SessionSecret);
        }
        session.touch();
        Ok(Opened::Existing(session))
    }

    /// Count a creation against the address's one-minute window.
    fn admit_creation(&self, table: &mut Table, ip: IpAddr) -> Result<(), HaiError> {
        let now = Instant::now();
        let per_minute = self.limits.new_per_ip_per_minute;
        if !table.created.contains_key(&ip) && table.created.len() >= self.limits.max_live.saturating_mul(4) {
            table.prune_created(now);
            if table.created.len() >= self.limits.max_live.saturating_mul(4) {
                return Err(HaiError::TooManySessions {
                    limit: "max_live_sessions",
                    value: self.limits.max_live,
                    retry_after_ms: MINUTE.as_millis() as u64,
                });
            }
        }
        let times = table.created.entry(ip).or_default();
        while times.front().is_some_and(|at| now.duration_since(*at) >= MINUTE) {
            times.pop_front();
        }
        if times.len() >= per_minute as usize {
            let retry_after = times
                .front()
                .map(|oldest| MINUTE.saturating_sub(now.duration_since(*oldest)))
                .unwrap_or(MINUTE);
            return Err(HaiError::TooManySessions {
                limit: "new_sessions_per_ip_per_minute",
                value: per_minute as usize,
                retry_after_ms: retry_after.as_millis() as u64,
            });
        }
        times.push_back(now);
        Ok(())
    }

    /// Room for one more live session of `ip`: over its own cap its idle sessions
    /// go first, so churn from one address never evicts another's.
    fn make_room(&self, table: &mut Table, ip: IpAddr) -> Result<(), HaiError> {
        let busy = |limit, value| HaiError::TooManySessions {
            limit,
            value,
            retry_after_ms: IDLE_KEEP.as_millis() as u64,
        };
        if table.live_per_ip.get(&ip).copied().unwrap_or(0) >= self.limits.max_live_per_ip
            && !table.evict_idle(Some(ip))
        {
            return Err(busy("max_live_sessions_per_ip", self.limits.max_live_per_ip));
        }
        if table.sessions.len() >= self.limits.max_live && !table.evict_idle(None) {
            return Err(busy("max_live_sessions", self.limits.max_live));
        }
        Ok(())
    }

    /// Reserve a pending approval for a turn started by `origin`; the ticket frees it.
    fn reserve_approval(self: &Arc<Self>, origin: &Origin) -> Result<ApprovalTicket, HaiError> {
        let limits = &self.limits;
        let mut counts = self.approvals.lock();
        let per_ip = counts.per_ip.get(&origin.ip).copied().unwrap_or(0);
        let refused = |limit, value| Err(HaiError::TooManyApprovals { limit, value });
        if origin.pending.load(Ordering::Relaxed) >= limits.max_pending_per_connection {
            return refused(
                "max_pending_approvals_per_connection",
                limits.max_pending_per_connection,
            );
        }
        if per_ip >= limits.max_pending_per_ip {
            return refused("max_pending_approvals_per_ip", limits.max_pending_per_ip);
        }
        if counts.total >= limits.max_pending {
            return refused("max_pending_approvals", limits.max_pending);
        }
        counts.total += 1;
        *counts.per_ip.entry(origin.ip).or_default() += 1;
        origin.pending.fetch_add(1, Ordering::Relaxed);
        Ok(ApprovalTicket {
            hub: self.clone(),
            ip: origin.ip,
            connection: origin.pending.clone(),
        })
    }

    fn sweep_idle(&self) {
        let mut table = self.table.lock();
        let idle: Vec<String> = table
            .sessions
            .values()
            // Kept while a connection or a turn uses it, or it was used lately.
            .filter(|s| s.is_idle() && s.last_used.lock().elapsed() >= IDLE_KEEP)
            .map(|s| s.id.clone())
            .collect();
        for id in idle {
            table.remove(&id);
        }
        table.prune_created(Instant::now());
    }
}

/// Who started a turn: the connection's pending-approval count and its client address.
#[derive(Clone)]
pub struct Origin {
    pub ip: IpAddr,
    pub pending: Arc<AtomicUsize>,
}

impl Origin {
    pub fn new(ip: IpAddr) -> Origin {
        Origin {
            ip: access::client_key(ip),
            pending: Arc::default(),
        }
    }
}

struct ApprovalTicket {
    hub: Arc<Hub>,
    ip: IpAddr,
    connection: Arc<AtomicUsize>,
}

impl Drop for ApprovalTicket {
    fn drop(&mut self) {
        let mut counts = self.hub.approvals.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(count) = counts.per_ip.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.per_ip.remove(&self.ip);
            }
        }
        self.connection.fetch_sub(1, Ordering::Relaxed);
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
    _ticket: ApprovalTicket,
}

pub struct Session {
    pub id: String,
    /// The client address that opened it into memory (what its live slot counts against).
    owner: IpAddr,
    /// SHA-256 of the session's secret.
    pub secret: SecretHash,
    /// The frame queue of every connection on this session.
    subscribers: Mutex<Vec<mpsc::Sender<Arc<str>>>>,
    /// Frames one connection may have waiting before it counts as too slow.
    buffer_frames: usize,
    pending: Mutex<HashMap<String, Pending>>,
    recent: Mutex<VecDeque<Instant>>,
    /// Held while a turn runs, so a session's messages are answered in order.
    pub turn: tokio::sync::Mutex<()>,
    queued: Mutex<usize>,
    /// Connections bound to it (see [`Session::attach`]).
    connections: AtomicUsize,
    last_used: Mutex<Instant>,
    /// The other nodes of the fleet, which get its frames too (`None`: one node).
    fleet: Option<FleetOut>,
}

impl Session {
    fn new(
        id: &str,
        owner: IpAddr,
        secret: SecretHash,
        buffer_frames: usize,
        fleet: Option<FleetOut>,
    ) -> Session {
        Session {
            id: id.to_string(),
            owner,
            secret,
            subscribers: Mutex::new(Vec::new()),
            buffer_frames,
            pending: Mutex::new(HashMap::new()),
            recent: Mutex::new(VecDeque::new()),
            turn: tokio::sync::Mutex::new(()),
            queued: Mutex::new(0),
            connections: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
            fleet,
        }
    }

    /// Counted, rather than read from the `Arc`'s count, so a session is idle
    /// exactly when its last connection has gone and its last turn has ended,
    /// whatever task still holds a handle to it.
    fn is_idle(&self) -> bool {
        self.connections.load(Ordering::Relaxed) == 0 && *self.queued.lock() == 0
    }

    /// Count a connection on this session until the handle is dropped.
    pub fn attach(self: &Arc<Self>) -> Attached {
        self.connections.fetch_add(1, Ordering::Relaxed);
        Attached(self.clone())
    }

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

    /// Send a frame to every connection on this session, on every node.
    pub fn publish(&self, frame: &Outbound) {
        let text: Arc<str> = Arc::from(frame.to_text());
        if let Some(fleet) = &self.fleet {
            fleet.send_frame(&self.id, &text);
        }
        self.publish_text(text);
    }

    /// Send a frame's text to this node's connections on this session.
    pub fn publish_text(&self, text: Arc<str>) {
        // No subscribers is fine: the frames are also in the history where it matters.
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
        let mut recent = self.recent.lock();
        while recent.front().is_some_and(|at| now.duration_since(*at) >= MINUTE) {
            recent.pop_front();
        }
        if recent.len() >= per_minute as usize {
            let retry_after = recent
                .front()
                .map(|oldest| MINUTE.saturating_sub(now.duration_since(*oldest)))
                .unwrap_or(MINUTE);
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

    fn register(
        &self,
        approval_id: &str,
        ticket: ApprovalTicket,
    ) -> Result<oneshot::Receiver<ApprovalOutcome>, HaiError> {
        let mut pending = self.pending.lock();
        if pending.len() >= MAX_PENDING_APPROVALS {
            return Err(HaiError::TooManyApprovals {
                limit: "pending approvals per session",
                value: MAX_PENDING_APPROVALS,
            });
        }
        let (reply, receiver) = oneshot::channel();
        pending.insert(
            approval_id.to_string(),
            Pending {
                reply,
                _ticket: ticket,
            },
        );
        Ok(receiver)
    }

    pub fn is_pending(&self, approval_id: &str) -> bool {
        self.pending.lock().contains_key(approval_id)
    }

    /// Take a waiting approval out of this node's waits: the way to deliver the
    /// decision. `Err` when nothing with that id waits here. (Who may decide is
    /// settled before, by taking the approval's record from the store.)
    pub fn take(&self, approval_id: &str) -> Result<Decision, HaiError> {
        match self.pending.lock().remove(approval_id) {
            Some(pending) => Ok(Decision(pending)),
            None => Err(HaiError::UnknownApproval(approval_id.to_string())),
        }
    }
}

/// A taken approval, to be decided once its record is durable.
pub struct Decision(Pending);

impl Decision {
    /// `false` when the tool call stopped waiting meanwhile (timed out, turn ended).
    pub fn deliver(self, outcome: ApprovalOutcome) -> bool {
        self.0.reply.send(outcome).is_ok()
    }
}

/// A connection's hold on its session.
pub struct Attached(Arc<Session>);

impl std::ops::Deref for Attached {
    type Target = Arc<Session>;
    fn deref(&self) -> &Arc<Session> {
        &self.0
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
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

/// What the host's approver saw of one tool call: the turn trusts tool frames of
/// risky tools, and approval requests, only when they match one of these (a
/// plugin can emit events of any kind, but cannot reach this table).
pub struct CallMark {
    pub approval_id: Option<String>,
    pub approved: bool,
    /// Why the approval was refused before a human was asked.
    pub refusal: Option<HaiError>,
}

pub type HostCalls = Arc<Mutex<HashMap<String, CallMark>>>;

/// The host's [`Approver`] for one turn: asks every connection of the session
/// and holds the plugin's tool call (a parked future, no thread) until one answers.
///
/// The approval is also a record in the store, so a connection of the session
/// on any node can decide it; whoever takes the record decides (see [`super::fleet`]).
/// The wait's own deadline takes it too, a little before the tool path gives
/// up, so a timeout and a human's answer never both count.
pub struct SessionApprover {
    pub hub: Arc<Hub>,
    pub session: Arc<Session>,
    /// The connection and address that started the turn, for the pending-approval bounds.
    pub origin: Origin,
    /// The turn's event stream, so the request reaches clients after what the plugin emitted before it.
    pub events: mpsc::Sender<PluginEvent>,
    pub calls: HostCalls,
    pub store: Store,
    /// `tools.approval_timeout_ms`: how long the tool path waits for this approver.
    pub timeout: Duration,
}

impl SessionApprover {
    /// Wait for the decision until a little before the tool path's timeout, then
    /// take the approval's record: if nobody had, it timed out and no answer can
    /// count any more; if someone had, their decision is on its way.
    async fn wait(&self, mut decision: oneshot::Receiver<ApprovalOutcome>, key: &[u8]) -> ApprovalOutcome {
        let grace = (self.timeout / 10).min(MAX_DEADLINE_GRACE);
        if let Ok(outcome) = tokio::time::timeout(self.timeout.saturating_sub(grace), &mut decision).await {
            return outcome.unwrap_or(ApprovalOutcome::TimedOut);
        }
        match self
            .store
            .take::<ApprovalRecord>(Collection::Approvals, key)
            .await
        {
            Ok(Some(_)) => ApprovalOutcome::TimedOut,
            // The tool path's own timeout still bounds this wait.
            Ok(None) => decision.await.unwrap_or(ApprovalOutcome::TimedOut),
            Err(error) => {
                tracing::warn!(transport = "hai", session = %access::session_tag(&self.session.id), %error, "hai: an approval's deadline could not claim it; it times out here");
                ApprovalOutcome::TimedOut
            }
        }
    }

    fn refuse(&self, call_id: &str, error: HaiError) -> ApprovalOutcome {
        let feedback = error.to_string();
        self.calls.lock().insert(
            call_id.to_string(),
            CallMark {
                approval_id: None,
                approved: false,
                refusal: Some(error),
            },
        );
        ApprovalOutcome::Rejected {
            feedback: Some(feedback),
        }
    }
}

#[async_trait::async_trait]
impl Approver for SessionApprover {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalOutcome {
        let approval_id = format!("appr_{}", uuid::Uuid::new_v4().simple());
        let ticket = match self.hub.reserve_approval(&self.origin) {
            Ok(ticket) => ticket,
            Err(error) => return self.refuse(&request.call_id, error),
        };
        let decision = match self.session.register(&approval_id, ticket) {
            Ok(decision) => decision,
            Err(error) => return self.refuse(&request.call_id, error),
        };
        let _guard = PendingGuard {
            session: &self.session,
            approval_id: approval_id.clone(),
        };
        let key = approval_key(&self.session.id, &approval_id);
        let record = ApprovalRecord {
            session_id: self.session.id.clone(),
            tool_name: request.tool_name.clone(),
            call_id: request.call_id.clone(),
        };
        let expires = now_ms().saturating_add(self.timeout.as_millis() as u64);
        if let Err(error) = self
            .store
            .put(Collection::Approvals, &key, &record, Some(expires))
            .await
        {
            return self.refuse(&request.call_id, error.into());
        }
        self.calls.lock().insert(
            request.call_id.clone(),
            CallMark {
                approval_id: Some(approval_id.clone()),
                approved: false,
                refusal: None,
            },
        );
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
        let outcome = self.wait(decision, &key).await;
        if outcome == ApprovalOutcome::Approved
            && let Some(mark) = self.calls.lock().get_mut(&request.call_id)
        {
            mark.approved = true;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            buffer_frames: 8,
            max_live: 4,
            max_live_per_ip: 2,
            new_per_ip_per_minute: 3,
            max_pending: 3,
            max_pending_per_ip: 2,
            max_pending_per_connection: 1,
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// A new session with one connection attached (dropping it leaves the session idle).
    fn create(hub: &Hub, id: &str, from: &str) -> Result<(Attached, String), HaiError> {
        match hub.open(id, None, ip(from), || Ok(Stored::Unknown))? {
            Opened::Created(session, secret) => Ok((session.attach(), secret)),
            Opened::Existing(_) => panic!("{id} existed"),
        }
    }

    #[tokio::test]
    async fn rate_window_refuses_beyond_the_limit() {
        let hub = Hub::new(limits(), None);
        let (session, _) = create(&hub, "s", "10.0.0.1").unwrap();
        assert!(session.admit(2).is_ok());
        assert!(session.admit(2).is_ok());
        assert!(matches!(
            session.admit(2),
            Err(HaiError::RateLimited { per_minute: 2, .. })
        ));
        // Another session has its own window.
        assert!(create(&hub, "t", "10.0.0.1").unwrap().0.admit(2).is_ok());
    }

    #[tokio::test]
    async fn a_session_opens_again_only_with_its_secret() {
        let hub = Hub::new(limits(), None);
        let (_held, secret) = create(&hub, "s", "10.0.0.1").unwrap();
        let open = |secret: Option<&str>| hub.open("s", secret, ip("10.0.0.9"), || Ok(Stored::Unknown));
        assert!(matches!(open(None), Err(HaiError::SessionSecret)));
        assert!(matches!(open(Some("guess")), Err(HaiError::SessionSecret)));
        assert!(matches!(open(Some(&secret)), Ok(Opened::Existing(_))));
        // A stored session (not in memory) checks the stored hash.
        let (stored_secret, hash) = access::new_secret();
        let from_store =
            |secret: Option<&str>| hub.open("old", secret, ip("10.0.0.9"), || Ok(Stored::Known(Some(hash))));
        assert!(matches!(from_store(Some(&secret)), Err(HaiError::SessionSecret)));
        assert!(matches!(
            from_store(Some(&stored_secret)),
            Ok(Opened::Existing(_))
        ));
        let legacy = hub.open("legacy", None, ip("10.0.0.9"), || Ok(Stored::Known(None)));
        assert!(matches!(legacy, Err(HaiError::SessionSecret)));
    }

    #[tokio::test]
    async fn a_bearer_id_opens_its_session_alone_live_or_stored() {
        let hub = Hub::new(limits(), None);
        let live = uuid::Uuid::new_v4().to_string();
        let (_held, _) = create(&hub, &live, "10.0.0.1").unwrap();
        let opened = hub.open(&live, None, ip("10.0.0.9"), || Ok(Stored::Unknown));
        assert!(matches!(opened, Ok(Opened::Existing(_))));
        // From the store, it keeps the stored secret's hash (a fleet's claim on the id).
        let stored = uuid::Uuid::new_v4().to_string();
        let (_, hash) = access::new_secret();
        match hub.open(&stored, None, ip("10.0.0.9"), || Ok(Stored::Known(Some(hash)))) {
            Ok(Opened::Existing(session)) => assert_eq!(session.secret, hash),
            _ => panic!("{stored} did not open by its id"),
        }
        let legacy = uuid::Uuid::new_v4().to_string();
        let opened = hub.open(&legacy, None, ip("10.0.0.9"), || Ok(Stored::Known(None)));
        assert!(matches!(opened, Err(HaiError::SessionSecret)));
    }

    #[tokio::test]
    async fn creation_is_capped_per_address_and_idle_sessions_make_room() {
        let hub = Hub::new(limits(), None);
        // Two live per address: a third evicts the address's own idle session.
        let (held, _) = create(&hub, "a1", "10.0.0.1").unwrap();
        drop(create(&hub, "a2", "10.0.0.1").unwrap());
        drop(create(&hub, "a3", "10.0.0.1").unwrap());
        assert!(hub.live("a1").is_some() && hub.live("a2").is_none() && hub.live("a3").is_some());
        // The fourth creation in a minute is refused, whatever room there is.
        assert!(matches!(
            create(&hub, "a4", "10.0.0.1"),
            Err(HaiError::TooManySessions {
                limit: "new_sessions_per_ip_per_minute",
                ..
            })
        ));
        // Both of an address's sessions in use: refused, not evicted.
        let (other, _) = create(&hub, "b1", "10.0.0.2").unwrap();
        let (other2, _) = create(&hub, "b2", "10.0.0.2").unwrap();
        assert!(matches!(
            create(&hub, "b3", "10.0.0.2"),
            Err(HaiError::TooManySessions {
                limit: "max_live_sessions_per_ip",
                ..
            })
        ));
        // The table is full (4): a new address evicts the least recently used idle session (a3).
        let (_c, _) = create(&hub, "c1", "10.0.0.3").unwrap();
        assert!(hub.live("a3").is_none());
        // Nothing idle left: refused.
        assert!(matches!(
            create(&hub, "d1", "10.0.0.4"),
            Err(HaiError::TooManySessions {
                limit: "max_live_sessions",
                ..
            })
        ));
        drop((held, other, other2));
    }

    #[tokio::test]
    async fn pending_approvals_are_bounded_per_connection_address_and_in_total() {
        let hub = Hub::new(limits(), None);
        let a = Origin::new(ip("10.0.0.1"));
        let a_other = Origin::new(ip("10.0.0.1"));
        let b = Origin::new(ip("10.0.0.2"));
        let first = hub.reserve_approval(&a).unwrap();
        assert!(matches!(
            hub.reserve_approval(&a),
            Err(HaiError::TooManyApprovals {
                limit: "max_pending_approvals_per_connection",
                ..
            })
        ));
        let _second = hub.reserve_approval(&a_other).unwrap();
        assert!(matches!(
            hub.reserve_approval(&Origin::new(ip("10.0.0.1"))),
            Err(HaiError::TooManyApprovals {
                limit: "max_pending_approvals_per_ip",
                ..
            })
        ));
        let _third = hub.reserve_approval(&b).unwrap();
        assert!(matches!(
            hub.reserve_approval(&Origin::new(ip("10.0.0.3"))),
            Err(HaiError::TooManyApprovals {
                limit: "max_pending_approvals",
                ..
            })
        ));
        // A ticket dropped frees its place on every count.
        drop(first);
        assert!(hub.reserve_approval(&a).is_ok());
    }

    /// An approver for session `session`'s turns, its event stream and its call marks.
    fn approver(
        hub: &Arc<Hub>,
        session: &Arc<Session>,
        store: &Store,
        timeout: Duration,
    ) -> (SessionApprover, mpsc::Receiver<PluginEvent>, HostCalls) {
        let (events, stream) = mpsc::channel(4);
        let calls = HostCalls::default();
        let approver = SessionApprover {
            hub: hub.clone(),
            session: session.clone(),
            origin: Origin::new(ip("10.0.0.1")),
            events,
            calls: calls.clone(),
            store: store.clone(),
            timeout,
        };
        (approver, stream, calls)
    }

    fn risky_call() -> ApprovalRequest {
        ApprovalRequest {
            call_id: "c".into(),
            tool_name: "t".into(),
            arguments: json!({}),
            risk: crate::runtime::Risk::High,
            description: "d".into(),
        }
    }

    #[tokio::test]
    async fn the_deadline_claims_an_unanswered_approval_so_no_later_answer_counts() {
        let hub = Hub::new(limits(), None);
        let (a, _) = create(&hub, "a", "10.0.0.1").unwrap();
        let store = Store::temporary().unwrap();
        let (approver, mut stream, _) = approver(&hub, &a, &store, Duration::from_millis(300));
        let waiting = tokio::spawn(async move { approver.approve(risky_call()).await });
        let id = stream.recv().await.unwrap().data["approval_id"]
            .as_str()
            .unwrap()
            .to_string();
        let key = approval_key("a", &id);
        let record: Option<ApprovalRecord> = store.get(Collection::Approvals, &key).await.unwrap();
        assert_eq!(record.map(|r| r.tool_name).as_deref(), Some("t"));
        assert_eq!(waiting.await.unwrap(), ApprovalOutcome::TimedOut);
        // The wait took the record: an answer now finds nothing to decide.
        let late: Option<ApprovalRecord> = store.take(Collection::Approvals, &key).await.unwrap();
        assert!(late.is_none());
    }

    #[tokio::test]
    async fn approvals_resolve_once_and_only_in_their_session() {
        let hub = Hub::new(limits(), None);
        let (a, _) = create(&hub, "a", "10.0.0.1").unwrap();
        let (b, _) = create(&hub, "b", "10.0.0.2").unwrap();
        let store = Store::temporary().unwrap();
        let (approver, mut stream, calls) = approver(&hub, &a, &store, Duration::from_secs(60));
        let request = risky_call();
        let waiting = tokio::spawn(async move { approver.approve(request).await });
        let event = stream.recv().await.unwrap();
        let id = event.data["approval_id"].as_str().unwrap().to_string();
        assert_eq!(calls.lock()["c"].approval_id.as_deref(), Some(id.as_str()));
        assert!(b.take(&id).is_err());
        let decision = a.take(&id).unwrap();
        assert!(a.take(&id).is_err(), "taken once");
        assert!(decision.deliver(ApprovalOutcome::Rejected {
            feedback: Some("no".into())
        }));
        assert_eq!(
            waiting.await.unwrap(),
            ApprovalOutcome::Rejected {
                feedback: Some("no".into())
            }
        );
        assert!(!calls.lock()["c"].approved);
    }
}
