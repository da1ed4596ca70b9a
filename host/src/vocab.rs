//! The words every layer shares: which protocol a message came on, what a
//! plugin is asked to do, how risky a tool is, and why a call produced no
//! reply.
//!
//! This is the bottom layer: it uses no other module of the crate, so
//! configuration, metrics, the runtime and the transports can all speak of a
//! [`TransportKind`] or an [`InvokeError`] without depending on each other.
//! The WIT bindings mirror some of these types; the runtime converts between
//! the two at its edge.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Now, in Unix milliseconds: the one clock of stored records, deadlines and the console's charts.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The wire protocol a message arrived on (mirrors `types.transport`, which
/// has no `a2a` case: see [`crate::runtime::bindings`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    Agora,
    Envelope,
    Uagents,
    Arena,
    Hai,
    A2a,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Agora => "agora",
            TransportKind::Envelope => "envelope",
            TransportKind::Uagents => "uagents",
            TransportKind::Arena => "arena",
            TransportKind::Hai => "hai",
            TransportKind::A2a => "a2a",
        }
    }
}

/// What the host asks of a plugin's `handle` (mirrors `types.phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Handle,
    Quote,
    Execute,
}

/// A tool's risk level; tools at or above the configured threshold need approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    Low,
    Medium,
    High,
    Critical,
}

impl Risk {
    pub fn parse(text: &str) -> Option<Risk> {
        match text {
            "low" => Some(Risk::Low),
            "medium" => Some(Risk::Medium),
            "high" => Some(Risk::High),
            "critical" => Some(Risk::Critical),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
            Risk::Critical => "critical",
        }
    }
}

/// One step of a tool call's lifecycle, as its `tool_call` event says it.
///
/// The runtime writes these and the consumers (HAI) read them back as this
/// type, so the wire form of the lifecycle is defined once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ToolStage {
    Started { arguments: Value },
    Completed { result: Value },
    Failed { error: String },
}

impl ToolStage {
    /// A human (or the lack of one) refused the call: nothing ran, so it is not a fault.
    pub const REJECTED: &'static str = "rejected";
    pub const APPROVAL_TIMED_OUT: &'static str = "approval timed out";
    pub const NO_APPROVER: &'static str = "no approver";
    /// No place was free to wait for the approval (a fair-share or parking bound).
    pub const NO_APPROVAL_PLACE: &'static str = "too many calls wait for an approval";

    /// Whether this is a refusal by the approval step rather than a tool that ran and failed.
    pub fn is_refusal(&self) -> bool {
        matches!(self, ToolStage::Failed { error }
            if [Self::REJECTED, Self::APPROVAL_TIMED_OUT, Self::NO_APPROVER, Self::NO_APPROVAL_PLACE].contains(&error.as_str()))
    }
}

/// A `tool_call` event: which call, and the step it reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolLifecycle {
    pub call_id: String,
    pub tool_name: String,
    pub risk: Risk,
    #[serde(flatten)]
    pub stage: ToolStage,
}

/// One inbound message for a plugin, as a transport hands it over.
#[derive(Debug, Clone)]
pub struct Call {
    pub transport: TransportKind,
    pub phase: Phase,
    pub route: String,
    pub sender: Option<String>,
    pub conversation: Option<String>,
    pub body: String,
}

/// How a plugin says it refused a message (mirrors `types.failure-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The body is not valid for the protocol.
    BadRequest,
    /// The plugin does not support what was asked.
    Unsupported,
    /// The thing asked for does not exist.
    NotFound,
    /// The request needs payment or a larger budget.
    PaymentRequired,
    /// The plugin failed for its own reasons.
    Internal,
}

/// Why a plugin call produced no reply. Transports map this to their wire shape.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("{message}")]
    Failure { kind: FailureKind, message: String },
    #[error("the plugin exceeded its execution time")]
    Timeout,
    #[error("the plugin exceeded its memory limit")]
    MemoryExceeded,
    #[error("the plugin failed: {0}")]
    Trapped(String),
    #[error("the plugin's reply is {size} bytes, over the {limit}-byte limit")]
    OutputTooLarge { size: usize, limit: usize },
    #[error("the node is overloaded; try again shortly")]
    Overloaded,
    /// No plugin serves the request yet while the start-up load runs: the one
    /// that does may still be compiling. Retryable, like [`InvokeError::Overloaded`].
    #[error("the node is still loading its plugins; try again shortly")]
    Starting,
}

impl InvokeError {
    /// The `outcome` label of this error in `/metrics`.
    pub fn outcome(&self) -> &'static str {
        match self {
            InvokeError::Failure { .. } => "failure",
            InvokeError::Timeout => "timeout",
            InvokeError::MemoryExceeded => "memory",
            InvokeError::Trapped(_) => "trap",
            InvokeError::OutputTooLarge { .. } => "output_too_large",
            InvokeError::Overloaded => "overloaded",
            InvokeError::Starting => "starting",
        }
    }
}

/// One of a protocol's conversations (a HAI session, an A2A task, an MCP
/// session, an Agora conversation), as the operator's console lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thread {
    pub id: String,
    pub started_at_ms: Option<u64>,
    pub last_at_ms: Option<u64>,
    /// Where it stands, in the protocol's own words (an A2A task's state).
    pub state: Option<String>,
    /// The plugin serving it, where the protocol has one per conversation.
    pub plugin: Option<String>,
}
