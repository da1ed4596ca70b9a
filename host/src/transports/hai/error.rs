//! [`HaiError`]: every way a HAI request fails, and the one place it becomes
//! an `error` frame (§8, its `error_code`) or an HTTP answer.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::wire::Outbound;
use crate::policy::browser::BrowserRefusal;
use crate::policy::quota::QuotaError;
use crate::runtime::{FailureKind, InvokeError};
use crate::store::StoreError;

/// Every way a client request fails, each with its §8 `error_code`.
#[derive(Debug, thiserror::Error)]
pub enum HaiError {
    #[error("Malformed message: {0}")]
    InvalidJson(String),
    #[error("Invalid message: {0}")]
    InvalidMessage(String),
    #[error("Invalid session: {0}")]
    InvalidSession(String),
    #[error(
        "Invalid session: this session exists; resume it with its session_secret, or start a new session"
    )]
    SessionSecret,
    #[error("Too many sessions ({limit} = {value}); try again later")]
    TooManySessions {
        limit: &'static str,
        value: usize,
        retry_after_ms: u64,
    },
    #[error("Too many tool approvals are waiting for a human ({limit} = {value}); answer those first")]
    TooManyApprovals { limit: &'static str, value: usize },
    /// A new session would pass this client's (or the node's) stored-session bounds.
    #[error("No new session can be stored: {message}")]
    TooManyStored { limit: &'static str, message: String },
    /// The browser policy refused the request (`Host` or `Origin`).
    #[error(transparent)]
    Browser(#[from] BrowserRefusal),
    #[error("This node's chat needs its operator token (?token= or Authorization: Bearer)")]
    Unauthorized,
    #[error("Too many messages: at most {per_minute} per minute in a session")]
    RateLimited { per_minute: u32, retry_after_ms: u64 },
    #[error("Too many messages are already waiting for an answer in this session")]
    Busy,
    #[error("Your message contains prohibited content")]
    Moderation { word: String },
    #[error("No approval {0:?} is pending in this session")]
    UnknownApproval(String),
    #[error("Tool {tool} failed: {message}")]
    ToolFailed {
        tool: String,
        tool_call_id: String,
        message: String,
    },
    #[error("No assistant plugin is loaded")]
    NoAssistant,
    #[error("The assistant failed: {0}")]
    AssistantFailed(String),
    #[error("The node is overloaded; try again shortly")]
    Overloaded,
    #[error("The node is still loading its plugins; try again shortly")]
    Starting,
    #[error("This session's history is full; start a new session")]
    SessionFull,
    /// The store cannot answer now (its database is down or unreachable):
    /// nothing was recorded, and the same message may be sent again.
    #[error("The node's storage is unavailable; try again shortly")]
    StorageUnavailable,
    /// The node running a turn stopped before the turn ended (its lease
    /// lapsed, `store::lease`): another node of the fleet says so.
    #[error("The node answering this message stopped before it finished; send the message again")]
    NodeStopped,
    #[error("Internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for HaiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Limit(_) => HaiError::SessionFull,
            StoreError::Unavailable(detail) => {
                tracing::warn!(transport = "hai", %detail, "storage unavailable");
                HaiError::StorageUnavailable
            }
            other => HaiError::Internal(format!("storage failed: {other}")),
        }
    }
}

impl From<InvokeError> for HaiError {
    fn from(error: InvokeError) -> Self {
        match error {
            InvokeError::Overloaded => HaiError::Overloaded,
            InvokeError::Starting => HaiError::Starting,
            InvokeError::Failure {
                kind: FailureKind::BadRequest,
                message,
            } => HaiError::InvalidMessage(message),
            other => HaiError::AssistantFailed(other.to_string()),
        }
    }
}

impl HaiError {
    pub fn code(&self) -> &'static str {
        match self {
            HaiError::InvalidJson(_) => "invalid_json",
            HaiError::InvalidMessage(_) => "invalid_message",
            HaiError::InvalidSession(_) | HaiError::SessionSecret => "invalid_session",
            HaiError::RateLimited { .. }
            | HaiError::Busy
            | HaiError::TooManySessions { .. }
            | HaiError::TooManyApprovals { .. }
            | HaiError::TooManyStored { .. } => "rate_limit_exceeded",
            HaiError::Browser(_) => "origin_refused",
            HaiError::Unauthorized => "unauthorized",
            HaiError::Moderation { .. } => "moderation_violation",
            HaiError::UnknownApproval(_) => "unknown_approval",
            HaiError::ToolFailed { .. } => "tool_execution_failed",
            HaiError::NoAssistant => "assistant_unavailable",
            HaiError::AssistantFailed(_) => "assistant_failed",
            // The same retryable code: a client needs only to try again.
            HaiError::Overloaded | HaiError::Starting => "overloaded",
            HaiError::SessionFull => "session_full",
            HaiError::StorageUnavailable => "storage_unavailable",
            HaiError::NodeStopped => "node_stopped",
            HaiError::Internal(_) => "internal_error",
        }
    }

    /// The one place node errors become the §8 `error` frame.
    pub fn to_frame(&self) -> Outbound {
        let details = match self {
            HaiError::RateLimited {
                per_minute,
                retry_after_ms,
            } => Some(json!({"limit_per_minute": per_minute, "retry_after_ms": retry_after_ms})),
            HaiError::Moderation { word } => Some(json!({"blocked_pattern": word, "severity": "medium"})),
            HaiError::ToolFailed {
                tool, tool_call_id, ..
            } => Some(json!({"tool_name": tool, "tool_call_id": tool_call_id})),
            HaiError::UnknownApproval(id) => Some(json!({"approval_id": id})),
            HaiError::TooManySessions {
                limit,
                value,
                retry_after_ms,
            } => Some(json!({"limit": limit, "value": value, "retry_after_ms": retry_after_ms})),
            HaiError::TooManyApprovals { limit, value } => Some(json!({"limit": limit, "value": value})),
            HaiError::TooManyStored { limit, .. } => Some(json!({"limit": limit})),
            HaiError::StorageUnavailable => Some(json!({"retry_after_ms": 1000})),
            _ => None,
        };
        Outbound::Error {
            error_code: self.code(),
            message: self.to_string(),
            details,
        }
    }

    /// The same refusal for the HTTP side (the upgrade and the history endpoint).
    pub fn to_http(&self) -> Response {
        let status = match self {
            HaiError::InvalidSession(_) | HaiError::InvalidMessage(_) => StatusCode::BAD_REQUEST,
            HaiError::Unauthorized => StatusCode::UNAUTHORIZED,
            HaiError::Browser(refusal) => refusal.status(),
            HaiError::SessionSecret => StatusCode::FORBIDDEN,
            HaiError::TooManySessions { .. } | HaiError::RateLimited { .. } | HaiError::Busy => {
                StatusCode::TOO_MANY_REQUESTS
            }
            HaiError::StorageUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut response = (
            status,
            axum::Json(json!({"error_code": self.code(), "message": self.to_string()})),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }

    pub(super) fn log(&self, context: &str) {
        match self {
            HaiError::AssistantFailed(_) | HaiError::Internal(_) | HaiError::Overloaded => {
                tracing::warn!(transport = "hai", context, code = self.code(), error = %self, "request failed")
            }
            _ => {
                tracing::debug!(transport = "hai", context, code = self.code(), error = %self, "request refused")
            }
        }
    }
}

/// A stored-session bound as the client hears it, naming the key that refused;
/// the store's own failures as themselves, and a count too busy to read as
/// "try again" (no bound refused it).
pub(super) fn stored_refusal(error: QuotaError) -> HaiError {
    match error {
        QuotaError::PerClient { key, .. } | QuotaError::Total { key, .. } => HaiError::TooManyStored {
            limit: key,
            message: error.to_string(),
        },
        QuotaError::Store(error) => error.into(),
        QuotaError::Contended | QuotaError::TooManyRecords => HaiError::Overloaded,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn every_error_has_a_code_and_a_frame() {
        let frame = HaiError::RateLimited {
            per_minute: 3,
            retry_after_ms: 10,
        }
        .to_frame();
        let value: Value = serde_json::from_str(&frame.to_text()).unwrap();
        assert_eq!(value["type"], "error");
        assert_eq!(value["error_code"], "rate_limit_exceeded");
        assert_eq!(value["details"]["limit_per_minute"], 3);
        assert_eq!(HaiError::InvalidJson("x".into()).code(), "invalid_json");
    }
}
