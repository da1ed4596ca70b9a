//! MCP sessions (§"Transports", "Session Management"): made by `initialize`,
//! named by `Mcp-Session-Id`, ended by `DELETE` or by idling past
//! `mcp.session_idle_timeout_ms`. A session lives in this node's memory only:
//! what it holds (the client's capabilities, its open approval forms) is tied
//! to the client's connections to this node.
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
use super::tools::Validators;
use crate::listener::caps::client_key;
use crate::node::state::NodeState;
use crate::policy::admission::{Admission, Bounds, Refusal, Slot};
use crate::runtime::ApprovalOutcome;

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
    /// Its place in the session bounds, given back when the session ends.
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
        Arc::new(McpState {
            node,
            sessions: Mutex::default(),
            places,
            validators: Validators::default(),
        })
    }

    /// A new session for a client, within the bounds; at the node-wide bound it
    /// may end another client's idle session (the module docs give the rule).
    pub async fn open(
        &self,
        peer: IpAddr,
        protocol_version: &'static str,
        elicitation: bool,
    ) -> Result<Arc<McpSession>, McpError> {
        let client = client_key(peer);
        let (place, evicted) = {
            let mut sessions = self.sessions.lock();
            let (place, evicted) = self.place_for(&mut sessions, client);
            let place = place.map(|place| {
                let session = self.new_session(client, place, protocol_version, elicitation);
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
            self.close(evicted).await;
        }
        place.map_err(|refusal| McpError::Busy(format!("MCP sessions: {refusal} (DELETE ends one)")))
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
            .filter(|session| session.in_use.load(Ordering::Acquire) == 0)
            .map(|session| (self.places.held(&session.client).1, session))
            .filter(|(held, _)| *held > newcomers + 1)
            .max_by_key(|(held, session)| (*held, std::cmp::Reverse(*session.last_seen.lock())))
            .map(|(_, session)| session.id.clone())
    }

    fn new_session(
        &self,
        client: IpAddr,
        place: Slot<IpAddr>,
        protocol_version: &'static str,
        elicitation: bool,
    ) -> Arc<McpSession> {
        Arc::new(McpSession {
            id: uuid::Uuid::new_v4().simple().to_string(),
            client,
            protocol_version,
            elicitation,
            place: Mutex::new(Some(place)),
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
    pub fn session(&self, id: &str) -> Result<InUse, McpError> {
        // Taken under the table's lock, so an eviction sees the session in use.
        let sessions = self.sessions.lock();
        let session = sessions.get(id).ok_or(McpError::UnknownSession)?;
        Ok(session.in_use())
    }

    /// End a session: its streams close, its open approval forms fail, its history goes.
    pub async fn end(&self, id: &str) -> Result<(), McpError> {
        let session = self.sessions.lock().remove(id).ok_or(McpError::UnknownSession)?;
        session.give_back_place();
        self.close(session).await;
        Ok(())
    }

    /// What ending a session, already out of the table, does.
    async fn close(&self, session: Arc<McpSession>) {
        session.ended.send_replace(true);
        self.node.runtime.approvals().settle_scope(
            &session.approval_scope(),
            ApprovalOutcome::Rejected {
                feedback: Some("the MCP session ended".into()),
            },
        );
        if let Err(error) = self.node.store.remove_history(&session.history_id()).await {
            tracing::warn!(session = %session.id, %error, "mcp: session history not removed");
        }
        tracing::debug!(session = %session.id, "mcp: session ended");
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
        format!("mcp:{}", self.id)
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

/// Where session `session_id`'s history is stored.
pub(super) fn history_id(session_id: &str) -> String {
    format!("mcp:{session_id}")
}
