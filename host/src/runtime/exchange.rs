//! What a plugin call is part of: where its events go, whose history it may
//! read, and who approves its risky tool calls. Transports build one per
//! request; the host functions in [`super::host_api`] consult it.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;

use super::Risk;

/// An event a plugin (or the host on its behalf) emits to the current exchange.
#[derive(Debug, Clone, Serialize)]
pub struct PluginEvent {
    pub kind: String,
    pub data: serde_json::Value,
}

/// A tool call waiting for a human.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRequest {
    pub call_id: String,
    pub tool_name: String,
    pub arguments: serde_json::Value,
    pub risk: Risk,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalOutcome {
    Approved,
    Rejected { feedback: Option<String> },
    TimedOut,
}

/// Asks a human to approve a tool call (the HAI transport implements it).
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalOutcome;
}

#[derive(Clone, Default)]
pub struct Exchange {
    /// Where `emit` and the host's tool lifecycle events go; bounded.
    pub events: Option<mpsc::Sender<PluginEvent>>,
    /// The store id whose history `history()` returns.
    pub history_id: Option<String>,
    pub approver: Option<Arc<dyn Approver>>,
    /// How long `emit` waits for a slow consumer before failing the emit.
    pub emit_timeout: Option<Duration>,
    pub(crate) tool_depth: u32,
}

impl Exchange {
    pub fn new() -> Exchange {
        Exchange::default()
    }

    pub fn with_events(mut self, events: mpsc::Sender<PluginEvent>) -> Exchange {
        self.events = Some(events);
        self
    }

    pub fn with_history(mut self, id: impl Into<String>) -> Exchange {
        self.history_id = Some(id.into());
        self
    }

    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Exchange {
        self.approver = Some(approver);
        self
    }

    /// Send an event; a full buffer waits up to the emit timeout, then reports the drop.
    pub async fn send(&self, event: PluginEvent) -> Result<(), String> {
        let Some(events) = &self.events else {
            return Ok(());
        };
        let timeout = self.emit_timeout.unwrap_or(Duration::from_secs(5));
        match tokio::time::timeout(timeout, events.send(event)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err("the exchange has ended".into()),
            Err(_) => Err("the event consumer is not keeping up".into()),
        }
    }

    /// The exchange a nested tool call runs in.
    pub(crate) fn nested(&self) -> Exchange {
        let mut nested = self.clone();
        nested.tool_depth += 1;
        nested
    }
}
