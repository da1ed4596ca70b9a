//! What one plugin call reports to its transport while it runs.
//!
//! A call's events share one ordered channel, so a client sees them in the
//! order they happened: the plugin's own (`emit`), the host's tool lifecycle,
//! and the approvals it asks. The host's are their own variants of
//! [`CallEvent`], not kinds of [`PluginEvent`]: a transport tells them apart
//! by type, so nothing a plugin emits can be taken for one. What a plugin may
//! not name its events ([`is_reserved_kind`]) is then only about the wire:
//! the names the host's events travel under to a transport's clients.

use serde::Serialize;
use serde_json::Value;

use super::approval::ApprovalAsked;
use crate::vocab::ToolLifecycle;

/// An event a plugin emits to the current exchange (`host.emit(kind, data)`).
#[derive(Debug, Clone, Serialize)]
pub struct PluginEvent {
    pub kind: String,
    pub data: Value,
}

/// One event of a call, as its transport receives it.
#[derive(Debug, Clone)]
pub enum CallEvent {
    /// The plugin's own, in its own words ("chunk", "status", …).
    Plugin(PluginEvent),
    /// A step of a tool call's lifecycle, from the host's tool path.
    ToolCall(ToolLifecycle),
    /// A tool call waits for a human: the question to put to them.
    ApprovalAsked(ApprovalAsked),
    /// The question went unanswered and was withdrawn: the tool did not run.
    ApprovalWithdrawn { approval_id: String },
}

/// Event kinds a plugin's `emit` may not use: the names the host's tool
/// lifecycle travels under to clients (HAI's `tool_call`, the arena's
/// `tool_call`/`tool_response`) and the `hai.`/`host.` namespaces, so a client
/// reading a transport's frames cannot mistake a plugin's event for the host's.
pub fn is_reserved_kind(kind: &str) -> bool {
    matches!(kind, "tool_call" | "tool_response") || kind.starts_with("hai.") || kind.starts_with("host.")
}
