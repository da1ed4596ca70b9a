//! [`AgoraError`]: everything that can go wrong, sorted by the layer of
//! the two-party specification §10 it belongs to, and the one place it becomes
//! Agora's wire shape. Transport errors are HTTP statuses (§10.1); Agora errors
//! are 200 with `{"status":"failure","error":…}` (§10.2); the conversation caps
//! ([`super::limits`]) are 429/503 with `Retry-After` in that same shape.
//! Protocol errors (§10.3) never get here: they are the plugin's `body`.

use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::limits::Refusal;
use crate::runtime::{FailureKind, InvokeError};
use crate::store::StoreError;

/// Everything that can go wrong, by the layer of §10 it belongs to.
#[derive(Debug, thiserror::Error)]
pub enum AgoraError {
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("the request body is over the {0}-byte limit")]
    TooLarge(usize),
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    NotFound(String),
    #[error("Unsupported protocol")]
    UnsupportedProtocol,
    #[error("Conversation expired")]
    ConversationExpired,
    /// Any other Agora-level rejection (HTTP 200 + failure).
    #[error("{0}")]
    Rejected(String),
    #[error("The node is overloaded, try again shortly")]
    Overloaded,
    #[error("The node is still loading its plugins, try again shortly")]
    Starting,
    /// A conversation cap or the creation rate (429 per client, 503 in total).
    #[error("{message}")]
    Busy {
        status: StatusCode,
        message: String,
        retry_after: u64,
    },
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for AgoraError {
    fn from(error: StoreError) -> Self {
        match error {
            // A passing outage: 503 in the caps' shape, so a client retries.
            StoreError::Unavailable(detail) => {
                tracing::warn!(transport = "agora", %detail, "storage unavailable");
                AgoraError::Busy {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    message: "The node's storage is unavailable, try again shortly".into(),
                    retry_after: 1,
                }
            }
            other => AgoraError::Internal(format!("storage failed: {other}")),
        }
    }
}

impl From<Refusal> for AgoraError {
    fn from(refusal: Refusal) -> Self {
        let (status, message, retry_after) = match refusal {
            Refusal::Full { limit, retry_after } => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("The node holds its maximum of {limit} conversations, try again later"),
                retry_after,
            ),
            Refusal::ClientFull { limit, retry_after } => (
                StatusCode::TOO_MANY_REQUESTS,
                format!("Too many open conversations: at most {limit} per client, end one first"),
                retry_after,
            ),
            Refusal::RateLimited {
                per_minute,
                retry_after,
            } => (
                StatusCode::TOO_MANY_REQUESTS,
                format!("Too many new conversations: at most {per_minute} per minute per client"),
                retry_after,
            ),
        };
        AgoraError::Busy {
            status,
            message,
            retry_after,
        }
    }
}

impl From<InvokeError> for AgoraError {
    fn from(error: InvokeError) -> Self {
        match error {
            InvokeError::Overloaded => AgoraError::Overloaded,
            InvokeError::Starting => AgoraError::Starting,
            InvokeError::Failure {
                kind: FailureKind::Unsupported,
                message,
            } => AgoraError::Rejected(format!("Unsupported: {message}")),
            InvokeError::Failure {
                kind: FailureKind::NotFound,
                message,
            } => AgoraError::Rejected(message),
            InvokeError::Failure {
                kind: FailureKind::PaymentRequired,
                message,
            } => AgoraError::Rejected(format!("Payment required: {message}")),
            other => AgoraError::Internal(other.to_string()),
        }
    }
}

impl AgoraError {
    fn status(&self) -> StatusCode {
        match self {
            AgoraError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AgoraError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AgoraError::Malformed(_) => StatusCode::BAD_REQUEST,
            AgoraError::NotFound(_) => StatusCode::NOT_FOUND,
            AgoraError::UnsupportedProtocol | AgoraError::ConversationExpired | AgoraError::Rejected(_) => {
                StatusCode::OK
            }
            AgoraError::Overloaded | AgoraError::Starting => StatusCode::SERVICE_UNAVAILABLE,
            AgoraError::Busy { status, .. } => *status,
            AgoraError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The one place node errors become Agora's wire shape.
    pub(super) fn into_response(self, reference_dialect: bool) -> Response {
        let status = self.status();
        let message = self.to_string();
        let retry_after = match &self {
            AgoraError::Busy { retry_after, .. } => Some(*retry_after),
            AgoraError::Overloaded | AgoraError::Starting => Some(1),
            _ => None,
        };
        if matches!(self, AgoraError::Busy { .. }) {
            tracing::debug!(transport = "agora", %message, "request refused");
        } else if status.is_server_error() {
            tracing::warn!(transport = "agora", %message, "request failed");
        }
        let body = if reference_dialect {
            json!({"status": "error", "message": message})
        } else {
            json!({"status": "failure", "error": message})
        };
        let mut response = (status, axum::Json(body)).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }

    /// A body the HTTP layer refused before it reached us (size limit, broken stream).
    pub(super) fn from_rejection(rejection: BytesRejection, limit: usize) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            AgoraError::TooLarge(limit)
        } else {
            AgoraError::Malformed(format!("cannot read the request body: {}", rejection.body_text()))
        }
    }
}
