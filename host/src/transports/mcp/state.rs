//! MCP sessions (§"Transports", "Session Management"): made by `initialize`,
//! named by `Mcp-Session-Id`, ended by `DELETE` or by idling past
//! `mcp.session_idle_timeout_ms`. On the embedded store a session lives in this
//! node's memory only, and the table here is the whole truth. On a shared store
//! (a fleet) the session's row in the store is the truth and this table is the
//! node's cache of it, for what only a process can hold (its streams, its
//! running calls); see [`super::fleet`]. The row is read on every request, as
//! a fleet request already pays database round trips, while the single node
//! pays none: a write-through cache would still need that read to see a
//! `DELETE` made on another node.
//!
//! Bounds: `mcp.max_sessions` in total and `mcp.max_sessions_per_ip` per client
//! address ([`client_key`]), counted by the node's shared
//! [`crate::policy::admission`] (each session holds its [`Slot`] until it ends);
//! `mcp.max_calls_per_session` calls running; one notification stream; one
//! approval form per running call.
//!
//! A session lasts up to `mcp.session_idle_timeout_ms` (30 minutes) after its
//! last request, so a few addresses opening sessions up to their per-address
//! bound could hold every place for that long and shut every other client out.
//! Hence one eviction rule, at the node-wide bound only: a new session from a
//! client that holds at least two sessions fewer than another client ends the
//! least recently used *idle* session (no stream open, no request or call
//! running) of the client holding the most. The newcomer never takes more than
//! it leaves the other client, so sessions converge on equal shares and an
//! honest client holding few always gets one while a greedy one holds idle
//! ones; a session in use is never ended. The per-address bound never evicts,
//! and `initialize` is not held for a place as A2A's tasks are: a session lasts
//! minutes, so a wait of seconds would rarely free one.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::error::McpError;
use super::fleet::{self, SessionRecord};
use super::tools::Validators;
use crate::listener::caps::client_key;
use crate::node::state::NodeState;
use crate::policy::admission::{Admission, Bounds, Refusal, Slot};
use crate::runtime::ApprovalOutcome;
use crate::runtime::approval::ApprovalRounds;

pub type Shared = Arc<McpState>;

/// History entries kept per session (tool calls and approvals).
const MAX_HISTORY_ENTRIES: usize = 1_000;

pub struct McpState {
    pub node: NodeState,
    /// Live sessions by id. Every session is opened and evicted under this lock,
    /// so a place an eviction frees goes to the session that asked for it.
    sessions: Mutex<HashMap<String, Arc<McpSession>>>,
    places: Admission<IpAddr>,
    pub validators: Validators,
    /// Whether sessions are fleet state (the store is shared).
    fleet: bool,
    /// 2026-07-28: approvals asked as `InputRequiredResult` rounds.
    pub rounds: ApprovalRounds,
    /// 2026-07-28: calls running per client address (`mcp.max_calls_per_ip`;
    /// node-wide, the plugin pool bounds them).
    pub modern_calls: Admission<IpAddr>,
    /// 2026-07-28: `subscriptions/listen` streams open.
    pub listens: Admission<IpAddr>,
}

/// One client's session.
pub struct McpSession {
    pub id: String,
    /// The address that opened it, as the listener counts addresses.
    pub client: IpAddr,
    /// The revision `initialize` settled on.
    pub protocol_version: &'static str,
    /// Whether the client declared form elicitation: without it no approval can be asked.
    pub elicitation: bool,
    /// Its place in the session bounds, given back when the session ends; none
    /// for a fleet session another node opened (that node holds its place).
    place: Mutex<Option<Slot<IpAddr>>>,
    last_seen: Mutex<Instant>,
    /// Streams open and calls running: a session in use does not idle out.
    in_use: AtomicUsize,
    calls: Arc<Semaphore>,
    /// The notification stream (`GET`): one at a time.
    listening: Mutex<bool>,
    ended: watch::Sender<bool>,
    /// Approvals the operator's console decided while the client's form was
    /// open: the form is withdrawn when the call has its answer. At most the
    /// session's waiting approvals, each removed as its wait ends.
    pub(super) answered_in_console: Mutex<HashSet<String>>,
}

impl McpState {
    pub fn new(node: NodeState) -> Shared {
        let config = &node.config.mcp;
        let places = Admission::new(Bounds {
            total: config.max_sessions,
            total_key: "mcp.max_sessions",
            per_client: config.max_sessions_per_ip,
            per_client_key: "mcp.max_sessions_per_ip",
            wait: Duration::ZERO,
        });
        let fleet = node.store.is_shared();
        let modern_calls = Admission::new(Bounds {
            total: usize::MAX,
            total_key: "mcp.max_calls_per_ip",
            per_client: config.max_calls_per_ip,
            per_client_key: "mcp.max_calls_per_ip",
            wait: Duration::ZERO,
        });
        let listens = Admission::new(Bounds {
            total: config.max_listen_streams,
            total_key: "mcp.max_listen_streams",
            per_client: config.max_listen_streams_per_ip,
            per_client_key: "mcp.max_listen_streams_per_ip",
            wait: Duration::ZERO,
        });
        let rounds = ApprovalRounds::new(node.store.clone(), &node.config.tools);
        Arc::new(McpState {
            node,
            sessions: Mutex::default(),
            places,
            validators: Validators::default(),
            fleet,
            rounds,
            modern_calls,
            listens,
        })
    }

    /// Whether sessions are fleet state, kept in the shared store.
    pub fn fleet(&self) -> bool {
        self.fleet
    }

    /// A new session for a client, within the bounds; at the node-wide bound it
    /// may end another client's idle session (the module docs give the rule).
    /// `params` are `initialize`'s, kept with a fleet session.
    pub async fn open(
        &self,
        peer: IpAddr,
        protocol_version: &'static str,
        elicitation: bool,
        params: &Value,
    ) -> Result<Arc<McpSession>, McpError> {
        let client = client_key(peer);
        let (place, evicted) = {
            let mut sessions = self.sessions.lock();
            let (place, evicted) = self.place_for(&mut sessions, client);
            let place = place.map(|place| {
                let session = self.new_session(
                    uuid::Uuid::new_v4().simple().to_string(),
                    client,
                    Some(place),
                    protocol_version,
                    elicitation,
                );
                sessions.insert(session.id.clone(), session.clone());
                session
            });
            (place, evicted)
        };
        if let Some(evicted) = evicted {
            tracing::info!(
                session = %evicted.id,
                client = %evicted.client,
                "mcp: least recently used idle session ended for a client holding fewer (mcp.max_sessions)"
            );
            if self.fleet {
                self.end_in_store(&evicted.id).await;
            }
            self.close(evicted).await;
        }
        let session =
            place.map_err(|refusal| McpError::Busy(format!("MCP sessions: {refusal} (DELETE ends one)")))?;
        if self.fleet {
            let record = SessionRecord::new(client, protocol_version, elicitation, params);
            if let Err(error) = fleet::store_session(self, &session.id, &record).await {
                self.sessions.lock().remove(&session.id);
                session.give_back_place();
                return Err(error.into());
            }
        }
        Ok(session)
    }

    /// Remove a fleet session's row and tell the other nodes; best effort, for
    /// an end this node decided (an eviction).
    async fn end_in_store(&self, id: &str) {
        match fleet::remove_session(&self.node.store, id).await {
            Ok(_) => fleet::announce_end(&self.node.store, id).await,
            Err(error) => {
                tracing::warn!(session = %id, %error, "mcp: an ended session's row stays until it expires")
            }
        }
    }

    /// A place for `client`, and the session evicted to make it, if one was.
    fn place_for(
        &self,
        sessions: &mut HashMap<String, Arc<McpSession>>,
        client: IpAddr,
    ) -> (Result<Slot<IpAddr>, Refusal>, Option<Arc<McpSession>>) {
        let refusal = match self.places.try_admit(&client) {
            Err(refusal @ Refusal::Total { .. }) => refusal,
            admitted_or_over_its_own_bound => return (admitted_or_over_its_own_bound, None),
        };
        let Some(victim) = self.eviction_victim(sessions.values(), client) else {
            return (Err(refusal), None);
        };
        let victim = sessions.remove(&victim).expect("the victim is a live session");
        victim.give_back_place();
        (self.places.try_admit(&client), Some(victim))
    }

    /// The least recently used idle session of the client holding the most
    /// sessions, among clients holding at least two more than `newcomer`.
    fn eviction_victim<'a>(
        &self,
        sessions: impl Iterator<Item = &'a Arc<McpSession>>,
        newcomer: IpAddr,
    ) -> Option<String> {
        let (_, newcomers) = self.places.held(&newcomer);
        sessions
            .filter(|session| session.holds_place() && session.in_use.load(Ordering::Acquire) == 0)
            .map(|session| (self.places.held(&session.client).1, session))
            .filter(|(held, _)| *held > newcomers + 1)
            .max_by_key(|(held, session)| (*held, std::cmp::Reverse(*session.last_seen.lock())))
            .map(|(_, session)| session.id.clone())
    }

    fn new_session(
        &self,
        id: String,
        client: IpAddr,
        place: Option<Slot<IpAddr>>,
        protocol_version: &'static str,
        elicitation: bool,
    ) -> Arc<McpSession> {
        Arc::new(McpSession {
            id,
            client,
            protocol_version,
            elicitation,
            place: Mutex::new(place),
            last_seen: Mutex::new(Instant::now()),
            in_use: AtomicUsize::new(0),
            calls: Arc::new(Semaphore::new(self.node.config.mcp.max_calls_per_session)),
            listening: Mutex::new(false),
            ended: watch::Sender::new(false),
            answered_in_console: Mutex::new(HashSet::new()),
        })
    }

    /// The session a request names, held in use (so it neither idles out nor is
    /// evicted) until the returned guard drops.
    pub async fn session(&self, id: &str) -> Result<InUse, McpError> {
        // Taken under the table's lock, so an eviction sees the session in use.
        let cached = self.sessions.lock().get(id).map(McpSession::in_use);
        if !self.fleet {
            return cached.ok_or(McpError::UnknownSession);
        }
        let Some((record, expires_at_ms)) = fleet::load_session(&self.node.store, id).await? else {
            if let Some(cached) = cached {
                // Ended elsewhere, or expired, before this node heard of it.
                drop(cached);
                self.ended_elsewhere(id).await;
            }
            return Err(McpError::UnknownSession);
        };
        let session = match cached {
            Some(session) => session,
            None => self.adopt(id, &record),
        };
        fleet::refresh_if_due(self, id, &record, expires_at_ms).await?;
        Ok(session)
    }

    /// Serve a fleet session another node opened, from its row.
    fn adopt(&self, id: &str, record: &SessionRecord) -> InUse {
        let version = super::wire::negotiate(Some(&record.protocol_version));
        let mut sessions = self.sessions.lock();
        sessions
            .entry(id.to_string())
            .or_insert_with(|| {
                self.new_session(id.to_string(), record.client, None, version, record.elicitation)
            })
            .in_use()
    }

    /// End a session: its streams close, its open approval forms fail, its
    /// history goes; on a fleet, on every node.
    pub async fn end(&self, id: &str) -> Result<(), McpError> {
        let stored = self.fleet && fleet::remove_session(&self.node.store, id).await?;
        let session = self.sessions.lock().remove(id);
        if stored {
            fleet::announce_end(&self.node.store, id).await;
        }
        let Some(session) = session else {
            if stored {
                // Its history is another node's to remove, or the sweeper's.
                self.remove_history(id).await;
                return Ok(());
            }
            return Err(McpError::UnknownSession);
        };
        session.give_back_place();
        self.close(session).await;
        Ok(())
    }

    /// Another node ended session `id`, or its row expired: close what this node holds of it.
    pub async fn ended_elsewhere(&self, id: &str) {
        let Some(session) = self.sessions.lock().remove(id) else {
            return;
        };
        session.give_back_place();
        self.close_here(&session);
    }

    /// What ending a session, already out of the table, does.
    async fn close(&self, session: Arc<McpSession>) {
        self.close_here(&session);
        self.remove_history(&session.id).await;
    }

    /// Its streams end and its waiting approvals fail, on this node.
    fn close_here(&self, session: &McpSession) {
        session.ended.send_replace(true);
        self.node.runtime.approvals().settle_scope(
            &session.approval_scope(),
            ApprovalOutcome::Rejected {
                feedback: Some("the MCP session ended".into()),
            },
        );
        tracing::debug!(session = %session.id, "mcp: session ended");
    }

    async fn remove_history(&self, id: &str) {
        if let Err(error) = self.node.store.remove_history(&history_id(id)).await {
            tracing::warn!(session = %id, %error, "mcp: session history not removed");
        }
    }

    /// End every session idle past `mcp.session_idle_timeout_ms`, now and then, for the node's life.
    pub fn sweep_idle(self: &Shared) {
        let idle = Duration::from_millis(self.node.config.mcp.session_idle_timeout_ms);
        let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        let shared = Arc::downgrade(self);
        self.node.background.spawn("mcp.sweep_idle", async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                let Some(shared) = shared.upgrade() else { return };
                if shared.fleet {
                    shared.sweep_fleet(idle).await;
                    continue;
                }
                // Judged and taken out under the table's lock, so a request that
                // has just taken its session in use keeps it.
                let expired: Vec<Arc<McpSession>> = shared
                    .sessions
                    .lock()
                    .extract_if(|_, session| session.idle_for() >= idle)
                    .map(|(_, session)| session)
                    .collect();
                for session in expired {
                    session.give_back_place();
                    shared.close(session).await;
                }
            }
        });
    }

    /// On a fleet, a session idle on this node may be in use on another: its
    /// row says. A row gone ends it here (the store's sweeper takes its
    /// history); a live one keeps a session this node holds a place for until
    /// the row's expiry, and drops one it only adopted from the cache.
    async fn sweep_fleet(&self, idle: Duration) {
        let idle_here: Vec<Arc<McpSession>> = self
            .sessions
            .lock()
            .values()
            .filter(|session| session.idle_for() >= idle)
            .cloned()
            .collect();
        for session in idle_here {
            let row = match fleet::load_session(&self.node.store, &session.id).await {
                Ok(row) => row,
                Err(error) => {
                    tracing::debug!(%error, "mcp: idle sessions are judged again at the next sweep");
                    return;
                }
            };
            match row {
                Some((_, expires_at_ms)) if session.holds_place() => session.recheck_at(expires_at_ms, idle),
                _ => {
                    // Still idle and still this very session: a request may have taken it meanwhile.
                    let taken = self
                        .sessions
                        .lock()
                        .extract_if(|id, cached| {
                            *id == session.id && Arc::ptr_eq(cached, &session) && cached.idle_for() >= idle
                        })
                        .next()
                        .is_some();
                    if taken && row.is_none() {
                        session.give_back_place();
                        self.close_here(&session);
                    }
                }
            }
        }
    }

    /// Record a tool call or an approval in the session's history; best effort.
    pub async fn record(&self, session: &McpSession, role: &str, body: Value) {
        let store = &self.node.store;
        if let Err(error) = store
            .append_entry(&session.history_id(), role, &body, MAX_HISTORY_ENTRIES)
            .await
        {
            tracing::warn!(session = %session.id, %error, "mcp: history not recorded");
        }
    }
}

impl McpSession {
    fn idle_for(&self) -> Duration {
        if self.in_use.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        self.last_seen.lock().elapsed()
    }

    fn holds_place(&self) -> bool {
        self.place.lock().is_some()
    }

    /// Judge this idle session again when its fleet row is due to expire.
    fn recheck_at(&self, expires_at_ms: u64, idle: Duration) {
        let left = Duration::from_millis(expires_at_ms.saturating_sub(crate::store::now_ms()));
        if let Some(seen) = Instant::now().checked_sub(idle.saturating_sub(left)) {
            *self.last_seen.lock() = seen;
        }
    }

    /// Free the session's place in the bounds; once, when it leaves the table.
    fn give_back_place(&self) {
        drop(self.place.lock().take());
    }

    pub fn history_id(&self) -> String {
        history_id(&self.id)
    }

    /// Hold the session in use (a stream or a call) until the guard drops.
    pub fn in_use(self: &Arc<Self>) -> InUse {
        self.in_use.fetch_add(1, Ordering::AcqRel);
        InUse(self.clone())
    }

    /// A place for one more running call, if the session has one.
    pub fn call_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.calls.clone().try_acquire_owned().ok()
    }

    /// Claim the notification stream; `None` when one is open already.
    pub fn listen(self: &Arc<Self>) -> Option<Listening> {
        let mut listening = self.listening.lock();
        if *listening {
            return None;
        }
        *listening = true;
        Some(Listening(self.clone()))
    }

    /// Tells when the session has ended.
    pub fn ended(&self) -> watch::Receiver<bool> {
        self.ended.subscribe()
    }

    /// Who may answer this session's approval forms: a response in this session.
    pub fn approval_scope(&self) -> String {
        approval_scope(&self.id)
    }
}

/// A session held in use: a request, a stream or a call running in it.
pub struct InUse(Arc<McpSession>);

impl std::ops::Deref for InUse {
    type Target = Arc<McpSession>;

    fn deref(&self) -> &Arc<McpSession> {
        &self.0
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        *self.0.last_seen.lock() = Instant::now();
        self.0.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

pub struct Listening(Arc<McpSession>);

impl Drop for Listening {
    fn drop(&mut self) {
        *self.0.listening.lock() = false;
    }
}

/// The approval scope of session `session_id`'s forms.
pub(super) fn approval_scope(session_id: &str) -> String {
    format!("mcp:{session_id}")
}

/// Where session `session_id`'s history is stored (and, on a fleet, its row).
pub(super) fn history_id(session_id: &str) -> String {
    format!("mcp:{session_id}")
}
