//! Live sessions (the HAI specification §"Session Management"): one fan-out
//! group per `session_id`, so every connection on a session sees its frames;
//! how the session asks its humans to approve a tool (§5–6; the wait itself is
//! [`crate::runtime::approval`]'s); the rate of messages per session; and the
//! turn lock that answers a session's messages one at a time.
//!
//! What outlives a connection (history, the session record) is in the store; this
//! is only the in-memory meeting point, dropped a while after its last user.
//!
//! The [`Hub`] is also where an open port is bounded: a session opens only with
//! its secret or by a bearer id ([`access::is_bearer_session_id`]), or is
//! created, within the creation rate of the client address (both rates are
//! token buckets of the node's one rate table, [`crate::policy::rate`]);
//! live sessions are capped per address and in total, an address over its cap
//! making room only among its own idle sessions, so churn from one address cannot
//! push out another's. Pending approvals are bounded where every transport's
//! are, per client address and per transport ([`crate::runtime::approval`]).
//!
//! The fan-out is one bounded queue per subscribed connection, not a tokio
//! `broadcast` channel: a broadcast ring is allocated in full when the session
//! starts (256 slots, ~12 KiB), which idle sessions would pay for nothing,
//! while a queue grows only with the frames actually waiting in it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use super::HaiError;
use super::access::{self, SecretHash};
use super::fleet::{ApprovalRecord, FleetOut, approval_key};
use super::wire::Outbound;
use crate::background::Background;
use crate::policy::admission::{Admission, Bounds, Refusal, Slot};
use crate::policy::rate::RateTable;
use crate::runtime::{ApprovalAsked, ApprovalOutcome, Approvals, Approver, CallEvent};
use crate::store::{Collection, Store};

/// How long an unused session stays in memory (keeps its rate window across reconnects)
/// unless the table is full and it is the least recently used.
const IDLE_KEEP: Duration = Duration::from_secs(120);
/// How long an approval's record outlives its deadline (a crashed node's is then swept).
const RECORD_MARGIN: Duration = Duration::from_secs(60);
/// Turns of one session waiting behind the running one.
const MAX_QUEUED_TURNS: usize = 4;

/// The `hai.*` bounds the hub enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    pub buffer_frames: usize,
    pub max_live: usize,
    pub max_live_per_ip: usize,
    pub new_per_ip_per_minute: u32,
    pub messages_per_minute: u32,
}

impl Limits {
    pub fn from_config(config: &crate::config::HaiConfig) -> Limits {
        Limits {
            buffer_frames: config.send_buffer_frames,
            max_live: config.max_live_sessions,
            max_live_per_ip: config.max_live_sessions_per_ip,
            new_per_ip_per_minute: config.new_sessions_per_ip_per_minute,
            messages_per_minute: config.messages_per_minute,
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
}

impl Table {
    fn remove(&mut self, id: &str) {
        if let Some(session) = self.sessions.remove(id) {
            session.place.lock().take();
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
}

/// How often a client address may create sessions, and a session take messages
/// (the node's one rate table, [`crate::policy::rate`]).
struct Rates {
    created: RateTable<IpAddr>,
    messages: RateTable<String>,
}

pub struct Hub {
    table: Mutex<Table>,
    /// Live sessions per client address and in total ([`crate::policy::admission`]).
    places: Admission<IpAddr>,
    rates: Mutex<Rates>,
    limits: Limits,
    fleet: Option<FleetOut>,
    /// The node's waiting approvals, where decisions from other nodes are delivered.
    approvals: Approvals,
}

impl Hub {
    /// The session table; with `fleet`, its sessions' frames also go to the
    /// other nodes, and theirs come to this node's connections.
    pub fn new(
        limits: Limits,
        fleet: Option<FleetOut>,
        approvals: Approvals,
        background: &Background,
    ) -> Arc<Hub> {
        // As many addresses and sessions as the live table holds, and room for churn.
        let tracked = limits.max_live.saturating_mul(4).max(1_024);
        let rates = Rates {
            created: RateTable::new(tracked, limits.new_per_ip_per_minute),
            messages: RateTable::new(tracked, limits.messages_per_minute),
        };
        // The keys are named as the refusal frames have always named them.
        let places = Admission::new(Bounds {
            total: limits.max_live,
            total_key: "max_live_sessions",
            per_client: limits.max_live_per_ip,
            per_client_key: "max_live_sessions_per_ip",
            wait: Duration::ZERO,
        });
        let hub = Arc::new(Hub {
            table: Mutex::new(Table::default()),
            places,
            rates: Mutex::new(rates),
            limits,
            fleet,
            approvals,
        });
        spawn_idle_sweeper(Arc::downgrade(&hub), background);
        if let Some(fleet) = &hub.fleet {
            fleet.listen(Arc::downgrade(&hub));
        }
        hub
    }

    /// The other nodes of the fleet, if the store is shared.
    pub fn fleet(&self) -> Option<&FleetOut> {
        self.fleet.as_ref()
    }

    /// The node's waiting approvals.
    pub fn approvals(&self) -> &Approvals {
        &self.approvals
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
                self.admit_creation(ip)?;
                let (secret, hash) = access::new_secret();
                (hash, Some(secret))
            }
        };
        let place = self.place_for(&mut table, ip)?;
        let session = Arc::new(Session::new(
            id,
            place,
            hash,
            self.limits.buffer_frames,
            self.fleet.clone(),
        ));
        table.sessions.insert(id.to_string(), session.clone());
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

    /// Count a creation against the address's rate.
    fn admit_creation(&self, ip: IpAddr) -> Result<(), HaiError> {
        self.rates
            .lock()
            .created
            .admit(ip)
            .map_err(|refusal| HaiError::TooManySessions {
                limit: "new_sessions_per_ip_per_minute",
                value: self.limits.new_per_ip_per_minute as usize,
                retry_after_ms: refusal.wait.as_millis() as u64,
            })
    }

    /// Count one message of `session` against its rate.
    pub fn admit_message(&self, session: &Session) -> Result<(), HaiError> {
        self.rates
            .lock()
            .messages
            .admit(session.id.clone())
            .map_err(|refusal| HaiError::RateLimited {
                per_minute: self.limits.messages_per_minute,
                retry_after_ms: refusal.wait.as_millis() as u64,
            })?;
        session.touch();
        Ok(())
    }

    /// A live place for one more session of `ip`: over its own bound its idle
    /// sessions go first, so churn from one address never evicts another's; at
    /// the node's bound, the least recently used idle session of any address.
    fn place_for(&self, table: &mut Table, ip: IpAddr) -> Result<Slot<IpAddr>, HaiError> {
        let made_room = match self.places.try_admit(&ip) {
            Ok(place) => return Ok(place),
            Err(Refusal::PerClient { .. }) => table.evict_idle(Some(ip)),
            Err(Refusal::Total { .. }) => table.evict_idle(None),
        };
        let refused = match self.places.try_admit(&ip) {
            Ok(place) => return Ok(place),
            Err(refusal) => refusal,
        };
        debug_assert!(!made_room || matches!(refused, Refusal::Total { .. }));
        let (limit, value) = match refused {
            Refusal::PerClient { limit, key } | Refusal::Total { limit, key } => (key, limit),
        };
        Err(HaiError::TooManySessions {
            limit,
            value,
            retry_after_ms: IDLE_KEEP.as_millis() as u64,
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
    }
}

/// Who started a turn: its client address, as the node's bounds count it.
#[derive(Clone)]
pub struct Origin {
    pub ip: IpAddr,
}

impl Origin {
    pub fn new(ip: IpAddr) -> Origin {
        Origin {
            ip: access::client_key(ip),
        }
    }
}

fn spawn_idle_sweeper(hub: Weak<Hub>, background: &Background) {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    background.spawn("hai.sweep_idle", async move {
        let mut ticker = tokio::time::interval(Duration::from_secs(30));
        loop {
            ticker.tick().await;
            let Some(hub) = hub.upgrade() else { return };
            hub.sweep_idle();
        }
    });
}

pub struct Session {
    pub id: String,
    /// The client address that opened it into memory (what its live place counts against).
    owner: IpAddr,
    /// Its live place, given back when it leaves the table.
    place: Mutex<Option<Slot<IpAddr>>>,
    /// SHA-256 of the session's secret.
    pub secret: SecretHash,
    /// The frame queue of every connection on this session.
    subscribers: Mutex<Vec<mpsc::Sender<Arc<str>>>>,
    /// Frames one connection may have waiting before it counts as too slow.
    buffer_frames: usize,
    /// Held while a turn runs, so a session's messages are answered in order.
    pub turn: tokio::sync::Mutex<()>,
    queued: Mutex<usize>,
    /// Connections bound to it (see [`Session::attach`]).
    connections: AtomicUsize,
    last_used: Mutex<Instant>,
    /// The other nodes of the fleet, which get its frames too (`None`: one node).
    fleet: Option<FleetOut>,
    /// History bytes appended since the session's record last charged them.
    appended: AtomicU64,
}

impl Session {
    fn new(
        id: &str,
        place: Slot<IpAddr>,
        secret: SecretHash,
        buffer_frames: usize,
        fleet: Option<FleetOut>,
    ) -> Session {
        Session {
            id: id.to_string(),
            owner: *place.client(),
            place: Mutex::new(Some(place)),
            secret,
            subscribers: Mutex::new(Vec::new()),
            buffer_frames,
            turn: tokio::sync::Mutex::new(()),
            queued: Mutex::new(0),
            connections: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
            fleet,
            appended: AtomicU64::new(0),
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

    /// Count `bytes` appended to the history, to be charged with the record.
    pub fn appended(&self, bytes: u64) {
        self.appended.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Whether anything was appended since the record last charged it.
    pub fn has_appended(&self) -> bool {
        self.appended.load(Ordering::Relaxed) > 0
    }

    /// The bytes appended since the last call.
    pub fn take_appended(&self) -> u64 {
        self.appended.swap(0, Ordering::Relaxed)
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

    /// Who may answer this session's approvals ([`crate::runtime::approval`]).
    pub fn approval_scope(&self) -> String {
        approval_scope(&self.id)
    }
}

/// The approval scope of session `id`: any connection bound to it, on any node.
pub fn approval_scope(id: &str) -> String {
    format!("hai:{id}")
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

/// The host's [`Approver`] for one turn: asks every connection of the session,
/// through the turn's event stream, so the request reaches clients after what
/// the plugin emitted before it.
///
/// The approval is also a record in the store, so a connection of the session
/// on any node can decide it; whoever takes the record decides (see [`super::fleet`]).
/// The deadline takes it too, so a timeout and a human's answer never both count.
pub struct SessionApprover {
    pub session: Arc<Session>,
    /// The turn that asks: should its node die, its approvals go with it.
    pub turn_id: String,
    pub events: mpsc::Sender<CallEvent>,
    pub calls: HostCalls,
    pub store: Store,
}

impl SessionApprover {
    fn mark(&self, call_id: &str, mark: CallMark) {
        self.calls.lock().insert(call_id.to_string(), mark);
    }
}

#[async_trait::async_trait]
impl Approver for SessionApprover {
    fn scope(&self) -> String {
        self.session.approval_scope()
    }

    async fn ask(&self, question: &ApprovalAsked) -> Result<(), String> {
        let key = approval_key(&self.session.id, &question.approval_id);
        let record = ApprovalRecord {
            session_id: self.session.id.clone(),
            tool_name: question.tool_name.clone(),
            call_id: question.call_id.clone(),
            turn_id: self.turn_id.clone(),
        };
        // It outlives the deadline, which must find it to claim it; then it is taken.
        let expires = question
            .deadline_ms
            .saturating_add(RECORD_MARGIN.as_millis() as u64);
        self.store
            .put(Collection::Approvals, &key, &record, Some(expires))
            .await
            .map_err(|error| error.to_string())?;
        self.mark(
            &question.call_id,
            CallMark {
                approval_id: Some(question.approval_id.clone()),
                approved: false,
                refusal: None,
            },
        );
        self.events
            .send(CallEvent::ApprovalAsked(question.clone()))
            .await
            .map_err(|_| "the session ended before anyone could approve".to_string())
    }

    /// Take the approval's record: if nobody had, it times out and no answer can
    /// count any more; if someone had, their decision is on its way.
    async fn claim_deadline(&self, question: &ApprovalAsked) -> bool {
        let key = approval_key(&self.session.id, &question.approval_id);
        match self
            .store
            .take::<ApprovalRecord>(Collection::Approvals, &key)
            .await
        {
            Ok(taken) => taken.is_some(),
            Err(error) => {
                tracing::warn!(transport = "hai", session = %access::session_tag(&self.session.id), %error, "hai: an approval's deadline could not claim it; it times out here");
                true
            }
        }
    }

    fn settled(&self, question: &ApprovalAsked, outcome: &ApprovalOutcome) {
        if *outcome == ApprovalOutcome::Approved
            && let Some(mark) = self.calls.lock().get_mut(&question.call_id)
        {
            mark.approved = true;
        }
    }

    fn refused(&self, call_id: &str, refusal: &Refusal) {
        let (key, limit) = match refusal {
            Refusal::PerClient { limit, key } | Refusal::Total { limit, key } => (*key, *limit),
        };
        self.mark(
            call_id,
            CallMark {
                approval_id: None,
                approved: false,
                refusal: Some(HaiError::TooManyApprovals {
                    limit: key,
                    value: limit,
                }),
            },
        );
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
            messages_per_minute: 2,
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
        let hub = Hub::new(limits(), None, approvals(60_000), &Background::new());
        let (session, _) = create(&hub, "s", "10.0.0.1").unwrap();
        assert!(hub.admit_message(&session).is_ok());
        assert!(hub.admit_message(&session).is_ok());
        assert!(matches!(
            hub.admit_message(&session),
            Err(HaiError::RateLimited { per_minute: 2, .. })
        ));
        // Another session has its own rate.
        assert!(
            hub.admit_message(&create(&hub, "t", "10.0.0.1").unwrap().0)
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_session_opens_again_only_with_its_secret() {
        let hub = Hub::new(limits(), None, approvals(60_000), &Background::new());
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
        let hub = Hub::new(limits(), None, approvals(60_000), &Background::new());
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
        let hub = Hub::new(limits(), None, approvals(60_000), &Background::new());
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

    fn approvals(timeout_ms: u64) -> Approvals {
        let tools = crate::config::ToolsConfig {
            approval_threshold: "high".into(),
            approval_timeout_ms: timeout_ms,
            max_waiting_approvals_per_client: 4,
            max_waiting_approvals_per_transport: 16,
        };
        Approvals::new(&tools, 32)
    }

    /// An approver for session `session`'s turns, its event stream and its call marks.
    fn approver(
        session: &Arc<Session>,
        store: &Store,
    ) -> (SessionApprover, mpsc::Receiver<CallEvent>, HostCalls) {
        let (events, stream) = mpsc::channel(4);
        let calls = HostCalls::default();
        let approver = SessionApprover {
            session: session.clone(),
            turn_id: "turn".into(),
            events,
            calls: calls.clone(),
            store: store.clone(),
        };
        (approver, stream, calls)
    }

    fn risky_call() -> crate::runtime::ApprovalRequest {
        crate::runtime::ApprovalRequest {
            call_id: "c".into(),
            tool_name: "t".into(),
            arguments: serde_json::json!({}),
            risk: crate::runtime::Risk::High,
            description: "d".into(),
        }
    }

    #[tokio::test]
    async fn the_deadline_claims_an_unanswered_approval_so_no_later_answer_counts() {
        let approvals = approvals(300);
        let hub = Hub::new(limits(), None, approvals.clone(), &Background::new());
        let (a, _) = create(&hub, "a", "10.0.0.1").unwrap();
        let store = Store::temporary().unwrap();
        let (approver, mut stream, calls) = approver(&a, &store);
        let waiting = {
            let approvals = approvals.clone();
            tokio::spawn(async move { approvals.ask(&approver, None, risky_call()).await })
        };
        let Some(CallEvent::ApprovalAsked(asked)) = stream.recv().await else {
            panic!("the question first")
        };
        assert_eq!(
            calls.lock()["c"].approval_id.as_deref(),
            Some(asked.approval_id.as_str())
        );
        let key = approval_key("a", &asked.approval_id);
        let record: Option<ApprovalRecord> = store.get(Collection::Approvals, &key).await.unwrap();
        assert_eq!(record.map(|r| r.tool_name).as_deref(), Some("t"));
        assert_eq!(waiting.await.unwrap(), Ok(ApprovalOutcome::TimedOut));
        // The wait took the record: an answer now finds nothing to decide.
        let late: Option<ApprovalRecord> = store.take(Collection::Approvals, &key).await.unwrap();
        assert!(late.is_none());
        assert!(!calls.lock()["c"].approved);
    }

    #[tokio::test]
    async fn a_decision_taken_on_another_node_is_awaited_past_the_deadline() {
        let approvals = approvals(100);
        let hub = Hub::new(limits(), None, approvals.clone(), &Background::new());
        let (a, _) = create(&hub, "a", "10.0.0.1").unwrap();
        let store = Store::temporary().unwrap();
        let (approver, mut stream, calls) = approver(&a, &store);
        let waiting = {
            let approvals = approvals.clone();
            tokio::spawn(async move { approvals.ask(&approver, None, risky_call()).await })
        };
        let Some(CallEvent::ApprovalAsked(asked)) = stream.recv().await else {
            panic!("the question first")
        };
        // Another node's connection took the record: its decision comes over the bus, late.
        let key = approval_key("a", &asked.approval_id);
        let taken: Option<ApprovalRecord> = store.take(Collection::Approvals, &key).await.unwrap();
        assert!(taken.is_some());
        // Well past the deadline (90 ms): the wait found the record taken and goes on.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let decision = approvals
            .take(&a.approval_scope(), &asked.approval_id)
            .expect("still waiting");
        assert!(decision.deliver(ApprovalOutcome::Approved));
        assert_eq!(waiting.await.unwrap(), Ok(ApprovalOutcome::Approved));
        assert!(calls.lock()["c"].approved);
    }
}
