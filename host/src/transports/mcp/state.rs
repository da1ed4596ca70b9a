//! MCP sessions (§"Transports", "Session Management"): made by `initialize`,
//! named by `Mcp-Session-Id`, ended by `DELETE` or by idling past
//! `mcp.session_idle_timeout_ms`. A session lives in this node's memory only:
//! what it holds (the client's capabilities, its open approval forms) is tied
//! to the client's connections to this node.
//!
//! Bounds: `mcp.max_sessions` in total and `mcp.max_sessions_per_ip` per client
//! address ([`client_key`]); `mcp.max_calls_per_session` calls running; one
//! notification stream; one approval form per running call.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};

use super::error::McpError;
use super::tools::Validators;
use crate::listener::caps::client_key;
use crate::node::state::NodeState;
use crate::store::now_ms;

pub type Shared = Arc<Mcp>;

/// History entries kept per session (tool calls and approvals).
const MAX_HISTORY_ENTRIES: usize = 1_000;

pub struct Mcp {
    pub node: NodeState,
    sessions: Mutex<Sessions>,
    pub validators: Validators,
}

#[derive(Default)]
struct Sessions {
    by_id: HashMap<String, Arc<McpSession>>,
    per_client: HashMap<IpAddr, usize>,
}

/// One client's session.
pub struct McpSession {
    pub id: String,
    client: IpAddr,
    /// The revision `initialize` settled on.
    pub protocol_version: &'static str,
    /// Whether the client declared form elicitation: without it no approval can be asked.
    pub elicitation: bool,
    last_seen: Mutex<Instant>,
    /// Streams open and calls running: a session in use does not idle out.
    in_use: AtomicUsize,
    calls: Arc<Semaphore>,
    /// The notification stream (`GET`): one at a time.
    listening: Mutex<bool>,
    /// Approval forms sent and not yet answered, by request id.
    pending: Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>,
    ended: watch::Sender<bool>,
}

impl Mcp {
    pub fn new(node: NodeState) -> Shared {
        Arc::new(Mcp {
            node,
            sessions: Mutex::default(),
            validators: Validators::default(),
        })
    }

    /// A new session for a client, within the bounds.
    pub fn open(
        &self,
        peer: IpAddr,
        protocol_version: &'static str,
        elicitation: bool,
    ) -> Result<Arc<McpSession>, McpError> {
        let config = &self.node.config.mcp;
        let client = client_key(peer);
        let mut sessions = self.sessions.lock();
        if sessions.by_id.len() >= config.max_sessions {
            return Err(McpError::Busy(format!(
                "the node has {} MCP sessions open, its limit; end one (DELETE) or try later",
                config.max_sessions
            )));
        }
        let count = sessions.per_client.entry(client).or_default();
        if *count >= config.max_sessions_per_ip {
            return Err(McpError::Busy(format!(
                "this address has {} MCP sessions open, its limit; end one (DELETE) first",
                config.max_sessions_per_ip
            )));
        }
        *count += 1;
        let session = Arc::new(McpSession {
            id: uuid::Uuid::new_v4().simple().to_string(),
            client,
            protocol_version,
            elicitation,
            last_seen: Mutex::new(Instant::now()),
            in_use: AtomicUsize::new(0),
            calls: Arc::new(Semaphore::new(config.max_calls_per_session)),
            listening: Mutex::new(false),
            pending: Mutex::default(),
            ended: watch::Sender::new(false),
        });
        sessions.by_id.insert(session.id.clone(), session.clone());
        Ok(session)
    }

    /// The session a request names, marked as seen.
    pub fn session(&self, id: &str) -> Result<Arc<McpSession>, McpError> {
        let session = self
            .sessions
            .lock()
            .by_id
            .get(id)
            .cloned()
            .ok_or(McpError::UnknownSession)?;
        *session.last_seen.lock() = Instant::now();
        Ok(session)
    }

    /// End a session: its streams close, its open approval forms fail, its history goes.
    pub async fn end(&self, id: &str) -> Result<(), McpError> {
        let session = {
            let mut sessions = self.sessions.lock();
            let session = sessions.by_id.remove(id).ok_or(McpError::UnknownSession)?;
            if let Some(count) = sessions.per_client.get_mut(&session.client) {
                *count -= 1;
                if *count == 0 {
                    sessions.per_client.remove(&session.client);
                }
            }
            session
        };
        session.ended.send_replace(true);
        session.pending.lock().clear();
        if let Err(error) = self.node.store.remove_history(&session.history_id()).await {
            tracing::warn!(session = %session.id, %error, "mcp: session history not removed");
        }
        tracing::debug!(session = %session.id, "mcp: session ended");
        Ok(())
    }

    /// End every session idle past `mcp.session_idle_timeout_ms`, now and then, for the node's life.
    pub fn sweep_idle(self: &Shared) {
        let idle = Duration::from_millis(self.node.config.mcp.session_idle_timeout_ms);
        let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        let shared = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                let Some(shared) = shared.upgrade() else { return };
                let expired: Vec<String> = shared
                    .sessions
                    .lock()
                    .by_id
                    .values()
                    .filter(|session| session.idle_for() >= idle)
                    .map(|session| session.id.clone())
                    .collect();
                for id in expired {
                    let _ = shared.end(&id).await;
                }
            }
        });
    }

    /// Record a tool call or an approval in the session's history; best effort.
    pub async fn record(&self, session: &McpSession, role: &str, body: Value) {
        let entry = json!({"role": role, "body": body, "at": now_ms()});
        let store = &self.node.store;
        if let Err(error) = store
            .append_history(&session.history_id(), &entry, MAX_HISTORY_ENTRIES)
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

    pub fn history_id(&self) -> String {
        format!("mcp:{}", self.id)
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

    /// Wait for the answer to request `id`, which is about to be sent.
    pub fn expect_answer(&self, id: &str) -> oneshot::Receiver<Result<Value, Value>> {
        let (answer, receiver) = oneshot::channel();
        self.pending.lock().insert(id.to_string(), answer);
        receiver
    }

    pub fn forget_answer(&self, id: &str) {
        self.pending.lock().remove(id);
    }

    /// Hand a client's answer to whoever waits for it; `false` if nobody does.
    pub fn answer(&self, id: &Value, outcome: Result<Value, Value>) -> bool {
        let Some(id) = id.as_str() else { return false };
        match self.pending.lock().remove(id) {
            Some(waiter) => waiter.send(outcome).is_ok(),
            None => false,
        }
    }
}

pub struct InUse(Arc<McpSession>);

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
