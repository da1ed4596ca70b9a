//! Why a host call failed, as a type a plugin can match on.
//!
//! The WIT world reports the host's refusals as text (`result<_, string>`),
//! and changing the world would break every built plugin. So the SDK reads
//! that text here, in one place, and hands plugins a [`HostError`]: a human
//! rejecting a tool, a value over the store's limit and an unreachable peer
//! are different cases, not different substrings. Text this module does not
//! recognise keeps its words in the broadest case of the call that produced
//! it, so a change of wording in the host degrades a match, never a message.
//!
//! Tests of this module use the host's messages as `host/src/runtime/host_api.rs`,
//! `host/src/runtime/mod.rs` (`ToolError`) and `host/src/transports/` write them.

use crate::{Failure, FailureKind};

/// A host call the node refused or could not complete.
///
/// Its text is the host's own message (`to_string()` gives it back as the node
/// wrote it), so a plugin may pass it on as is; `?` in [`crate::Plugin::handle`]
/// turns it into an `internal` [`Failure`] and in [`crate::Plugin::run_tool`]
/// into a [`crate::ToolFailure`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A size or count limit of the node: a key-value key or value too large,
    /// more events than one call may emit, an event too large.
    #[error("{0}")]
    Limit(String),
    /// Not allowed where the plugin called it: the key-value store while the
    /// manifest is read, a host-reserved event kind, events from a nested tool.
    #[error("{0}")]
    NotAllowed(String),
    /// The node could not read or write its store.
    #[error("{0}")]
    Storage(String),
    /// An emitted event did not reach the exchange: it has ended, or its
    /// consumer is not keeping up.
    #[error("{0}")]
    EventNotDelivered(String),
    /// The host did not run the tool: no such tool, calls nested too deep, an
    /// approval needed and no human (or no room) to ask.
    #[error("{0}")]
    ToolRefused(String),
    /// The human asked to approve the tool call said no.
    #[error("tool {tool} was rejected{}", feedback.as_ref().map(|f| format!(": {f}")).unwrap_or_default())]
    ToolRejected {
        /// The tool's name.
        tool: String,
        /// What the human said along with the rejection, if anything.
        feedback: Option<String>,
    },
    /// Nobody approved the tool call in time.
    #[error("approval of tool {tool} timed out")]
    ToolTimedOut {
        /// The tool's name.
        tool: String,
    },
    /// The tool ran and failed.
    #[error("tool {tool} failed: {reason}")]
    ToolFailed {
        /// The tool's name.
        tool: String,
        /// The tool's own error, or how its instance failed (a trap, a limit).
        reason: String,
    },
    /// The outbound call never left the node: the peer's host is not allowed,
    /// the URL or request is invalid, or the transport has no outbound calls.
    #[error("{0}")]
    OutboundRefused(String),
    /// The outbound call left the node and failed: unreachable, timed out,
    /// too large an answer, or the peer answered with a failure.
    #[error("{0}")]
    OutboundFailed(String),
    /// Data crossing the boundary is not what it should be: a stored value
    /// that is not the JSON asked for, a history that is not a JSON list, a
    /// value that cannot be encoded as JSON.
    #[error("{0}")]
    InvalidData(String),
    /// A setting could not be read: a secret's environment variable is unset
    /// or its file unreadable (the node's message names which, never a value).
    #[error("{0}")]
    Settings(String),
    /// The language model was not reached or failed; `kind` says how.
    #[error("{message}")]
    Model {
        /// Not configured, not declared, a limit, a bad request, a failure, a timeout.
        kind: crate::llm::ErrorKind,
        /// The node's words.
        message: String,
    },
}

impl From<HostError> for Failure {
    /// A host error is the plugin's (or the node's) problem, never the sender's.
    fn from(error: HostError) -> Self {
        Failure::new(FailureKind::Internal, error.to_string())
    }
}

impl HostError {
    /// An error of `kv-set` or `kv-delete`.
    pub(crate) fn from_kv(message: String) -> Self {
        if message.starts_with("keys must be ") || message.starts_with("values are limited to ") {
            HostError::Limit(message)
        } else if message.starts_with("the key-value store is not available") {
            HostError::NotAllowed(message)
        } else {
            HostError::Storage(message)
        }
    }

    /// An error of `emit`.
    pub(crate) fn from_emit(message: String) -> Self {
        let limit = ["at most ", "event kind must be ", "events are limited to "];
        if limit.iter().any(|prefix| message.starts_with(prefix)) {
            HostError::Limit(message)
        } else if message.starts_with("a tool called by a plugin has no event channel")
            || message.ends_with(" is reserved for the host")
        {
            HostError::NotAllowed(message)
        } else if message.starts_with("event data is not JSON") {
            HostError::InvalidData(message)
        } else {
            HostError::EventNotDelivered(message)
        }
    }

    /// An error of `call-tool` for the tool named `tool`.
    pub(crate) fn from_tool(tool: &str, message: String) -> Self {
        if let Some(rest) = message.strip_prefix(&format!("tool {tool} failed: ")) {
            return HostError::ToolFailed {
                tool: tool.to_string(),
                reason: rest.to_string(),
            };
        }
        if let Some(rest) = message.strip_prefix(&format!("tool {tool} was rejected")) {
            let feedback = match rest.strip_prefix(": ") {
                Some(feedback) => Some(feedback.to_string()),
                None if rest.is_empty() => None,
                None => return HostError::ToolRefused(message),
            };
            return HostError::ToolRejected {
                tool: tool.to_string(),
                feedback,
            };
        }
        if message == format!("approval of tool {tool} timed out") {
            return HostError::ToolTimedOut {
                tool: tool.to_string(),
            };
        }
        if message.starts_with("tool arguments are not JSON") {
            return HostError::InvalidData(message);
        }
        HostError::ToolRefused(message)
    }

    /// An error of `outbound`.
    pub(crate) fn from_outbound(message: String) -> Self {
        let refused = message.starts_with("invalid URL ")
            || (message.starts_with("host ") && message.ends_with(" is not in outbound.allowed_hosts"))
            || message.starts_with("invalid outbound request")
            || message.starts_with("outbound body is not JSON")
            || (message.starts_with("outbound calls over ") && message.ends_with(" are not available"));
        if refused {
            HostError::OutboundRefused(message)
        } else {
            HostError::OutboundFailed(message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> String {
        s.to_string()
    }

    #[test]
    fn store_refusals_are_limits_or_not_allowed_and_anything_else_is_storage() {
        for message in ["keys must be 1-256 bytes", "values are limited to 65536 bytes"] {
            assert_eq!(HostError::from_kv(text(message)), HostError::Limit(text(message)));
        }
        let manifest = "the key-value store is not available while the manifest is read";
        assert_eq!(
            HostError::from_kv(text(manifest)),
            HostError::NotAllowed(text(manifest))
        );
        assert_eq!(
            HostError::from_kv(text("IO error: disk full")),
            HostError::Storage(text("IO error: disk full"))
        );
    }

    #[test]
    fn emit_refusals_are_told_apart() {
        let cases = [
            ("at most 256 events per call", "Limit"),
            ("event kind must be 1-64 bytes", "Limit"),
            ("events are limited to 65536 bytes", "Limit"),
            (
                "a tool called by a plugin has no event channel of its own",
                "NotAllowed",
            ),
            ("event kind \"tool_call\" is reserved for the host", "NotAllowed"),
            ("event data is not JSON: EOF while parsing", "InvalidData"),
            ("the exchange has ended", "EventNotDelivered"),
            ("the event consumer is not keeping up", "EventNotDelivered"),
        ];
        for (message, case) in cases {
            let error = HostError::from_emit(text(message));
            assert!(format!("{error:?}").starts_with(case), "{message}: {error:?}");
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn a_rejection_keeps_the_humans_feedback_and_the_hosts_words() {
        let error = HostError::from_tool("report", text("tool report was rejected: not today"));
        assert_eq!(
            error,
            HostError::ToolRejected {
                tool: text("report"),
                feedback: Some(text("not today")),
            }
        );
        assert_eq!(error.to_string(), "tool report was rejected: not today");
        let bare = HostError::from_tool("report", text("tool report was rejected"));
        assert_eq!(
            bare,
            HostError::ToolRejected {
                tool: text("report"),
                feedback: None,
            }
        );
        assert_eq!(bare.to_string(), "tool report was rejected");
    }

    #[test]
    fn a_failed_tool_gives_its_own_message_and_a_timeout_is_its_own_case() {
        let failed = HostError::from_tool("t", text("tool t failed: bad arguments: missing field"));
        assert_eq!(
            failed,
            HostError::ToolFailed {
                tool: text("t"),
                reason: text("bad arguments: missing field"),
            }
        );
        assert_eq!(failed.to_string(), "tool t failed: bad arguments: missing field");
        let timed_out = HostError::from_tool("t", text("approval of tool t timed out"));
        assert_eq!(timed_out, HostError::ToolTimedOut { tool: text("t") });
        assert_eq!(timed_out.to_string(), "approval of tool t timed out");
    }

    #[test]
    fn tools_the_host_would_not_run_are_refused_in_the_hosts_words() {
        for message in [
            "no tool named \"t\" is loaded",
            "tool calls nest deeper than 4",
            "tool t needs a human's approval and this exchange has no human to ask",
            "tool t needs a human's approval and 64 calls already wait on the node; try again later",
            // Another tool's name in the text is not this call's failure.
            "tool u failed: boom",
            "tool t was rejectedly odd",
        ] {
            let error = HostError::from_tool("t", text(message));
            assert_eq!(error, HostError::ToolRefused(text(message)));
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn outbound_calls_that_never_left_are_refused_and_the_rest_failed() {
        let refused: fn(String) -> HostError = HostError::OutboundRefused;
        let failed: fn(String) -> HostError = HostError::OutboundFailed;
        for (message, case) in [
            ("host evil.example is not in outbound.allowed_hosts", refused),
            ("invalid URL \"nope\"", refused),
            ("invalid outbound request: no body", refused),
            ("outbound body is not JSON: EOF", refused),
            ("outbound calls over uagents are not available", refused),
            ("http://peer/agora did not answer within 5000 ms", failed),
            ("request to http://peer/agora failed: connection refused", failed),
            ("the peer answered with a failure: Unsupported protocol", failed),
        ] {
            assert_eq!(HostError::from_outbound(text(message)), case(text(message)));
        }
    }

    #[test]
    fn a_host_error_becomes_an_internal_failure_with_the_hosts_message() {
        let failure = Failure::from(HostError::Limit(text("values are limited to 10 bytes")));
        assert_eq!(failure.kind, FailureKind::Internal);
        assert_eq!(failure.message, "values are limited to 10 bytes");
    }
}
