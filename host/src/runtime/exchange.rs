//! What a plugin call is part of: where its events ([`CallEvent`]) go, whose history it may
//! read, who approves its risky tool calls and which caller it serves (the
//! node's fair-share policies count by caller). Transports build one per
//! request; the host functions in [`super::host_api`] consult it.
//!
//! A tool called from a plugin runs in its own exchange ([`Exchange::nested`]):
//! no history, no event channel of its own (its `emit`s go nowhere), only the
//! host's lifecycle events of the tools it calls in turn reach the caller's
//! consumer, and the caller's approver still decides its risky calls.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::approval::{Approver, Caller, Redeemed};
use super::events::{CallEvent, PluginEvent};
use crate::vocab::ToolLifecycle;

#[derive(Clone, Default)]
pub struct Exchange {
    /// Where the plugin's `emit`s go; bounded.
    pub events: Option<mpsc::Sender<CallEvent>>,
    /// Where the host's tool lifecycle events go (the same channel as `events`
    /// for a transport's exchange; a nested tool keeps only this one).
    pub lifecycle: Option<mpsc::Sender<CallEvent>>,
    /// The store id whose history `history()` returns.
    pub history_id: Option<String>,
    pub approver: Option<Arc<dyn Approver>>,
    /// A decision already taken by the caller's human (a stateless protocol's
    /// approval round): the tool path uses it only for the call it binds.
    pub redeemed: Option<Arc<Redeemed>>,
    /// The caller it serves; `None` for the node's own calls (schedules, loading).
    pub caller: Option<Caller>,
    /// The protocol of the client it serves, as `caller-transport` names it to
    /// plugins: the caller's, else the message's ([`super::Runtime::invoke`]).
    pub caller_transport: Option<&'static str>,
    /// How long `emit` waits for a slow consumer before failing the emit.
    pub emit_timeout: Option<Duration>,
    /// The request's writes, when its transport commits them as one unit: the
    /// plugin's key-value writes join them ([`super::host_api`]).
    pub unit: Option<crate::store::UnitOfWork>,
    pub(crate) tool_depth: u32,
}

impl Exchange {
    pub fn new() -> Exchange {
        Exchange::default()
    }

    pub fn with_events(mut self, events: mpsc::Sender<CallEvent>) -> Exchange {
        self.lifecycle = Some(events.clone());
        self.events = Some(events);
        self
    }

    pub fn with_history(mut self, id: impl Into<String>) -> Exchange {
        self.history_id = Some(id.into());
        self
    }

    pub fn with_unit(mut self, unit: crate::store::UnitOfWork) -> Exchange {
        self.unit = Some(unit);
        self
    }

    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Exchange {
        self.approver = Some(approver);
        self
    }

    pub fn with_redeemed(mut self, redeemed: Redeemed) -> Exchange {
        self.redeemed = Some(Arc::new(redeemed));
        self
    }

    pub fn with_caller(mut self, transport: &'static str, client: impl Into<String>) -> Exchange {
        self.caller_transport = Some(transport);
        self.caller = Some(Caller {
            transport,
            client: client.into(),
        });
        self
    }

    /// Send a plugin's event; a full buffer waits up to the emit timeout, then reports the drop.
    pub async fn send(&self, event: PluginEvent) -> Result<(), String> {
        self.deliver(self.events.as_ref(), CallEvent::Plugin(event)).await
    }

    /// Send one of the host's tool lifecycle events.
    pub(crate) async fn send_lifecycle(&self, lifecycle: ToolLifecycle) -> Result<(), String> {
        self.deliver(self.lifecycle.as_ref(), CallEvent::ToolCall(lifecycle))
            .await
    }

    async fn deliver(
        &self,
        channel: Option<&mpsc::Sender<CallEvent>>,
        event: CallEvent,
    ) -> Result<(), String> {
        let Some(events) = channel else {
            return Ok(());
        };
        let timeout = self.emit_timeout.unwrap_or(Duration::from_secs(5));
        match tokio::time::timeout(timeout, events.send(event)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err("the exchange has ended".into()),
            Err(_) => Err("the event consumer is not keeping up".into()),
        }
    }

    /// The exchange a tool called from this one runs in: see the module docs.
    pub(crate) fn nested(&self) -> Exchange {
        Exchange {
            events: None,
            lifecycle: self.lifecycle.clone(),
            history_id: None,
            approver: self.approver.clone(),
            // A human's decision covers the call it was asked about, never the calls that one makes.
            redeemed: None,
            caller: self.caller.clone(),
            caller_transport: self.caller_transport,
            emit_timeout: self.emit_timeout,
            // Committed before the tool runs (`host_api`); the tool writes on its own.
            unit: None,
            tool_depth: self.tool_depth + 1,
        }
    }
}
