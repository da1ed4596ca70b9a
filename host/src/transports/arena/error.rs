//! [`ArenaError`]: every way an arena request fails, by the status AAP §5
//! (the AAP specification, "Status codes") gives it, and the one
//! place it becomes the wire shape: `{"error": …}` with that status, and
//! `Retry-After` on every 503.

use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::keys::KeyError;
use crate::crypto::jwt::JwtError;
use crate::runtime::{FailureKind, InvokeError};

/// What `Retry-After` says when every slot is busy.
pub(super) const RETRY_AFTER_SECS: &str = "1";

/// Every way a request fails, by the status AAP §5 gives it.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("{0}")]
    BadRequest(String),
    #[error("the request body is too large")]
    TooLarge,
    #[error("{0}")]
    NotFound(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("the time limit ran out before the plugin answered")]
    Timeout,
    #[error("this agent is serving its maximum of {0} tasks; retry shortly")]
    Busy(usize),
    #[error("the node is overloaded; retry shortly")]
    Overloaded,
    #[error("the node is still loading its plugins; retry shortly")]
    Starting,
    #[error("no plugin serves any league")]
    NoLeagues,
    #[error("{0}")]
    PluginFailed(String),
}

impl ArenaError {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            ArenaError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ArenaError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ArenaError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ArenaError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ArenaError::NotFound(_) => StatusCode::NOT_FOUND,
            ArenaError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ArenaError::Timeout => StatusCode::REQUEST_TIMEOUT,
            // 503 rather than 429: the arena skips the match without penalty,
            // where 429 would pause this agent for five minutes (§5).
            ArenaError::Busy(_) | ArenaError::Overloaded | ArenaError::Starting | ArenaError::NoLeagues => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ArenaError::PluginFailed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ArenaError {
    /// The one place node errors become the arena's wire shape.
    fn into_response(self) -> Response {
        let status = self.status();
        let message = self.to_string();
        if status.is_server_error() {
            tracing::warn!(transport = "arena", %message, "task failed");
        } else {
            tracing::debug!(transport = "arena", %message, "task refused");
        }
        let mut response = (status, axum::Json(json!({ "error": message }))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        }
        response
    }
}

impl From<JwtError> for ArenaError {
    fn from(error: JwtError) -> Self {
        ArenaError::Unauthorized(error.to_string())
    }
}

impl From<KeyError> for ArenaError {
    fn from(error: KeyError) -> Self {
        ArenaError::Unauthorized(error.to_string())
    }
}

impl From<InvokeError> for ArenaError {
    fn from(error: InvokeError) -> Self {
        match error {
            InvokeError::Timeout => ArenaError::Timeout,
            InvokeError::Overloaded => ArenaError::Overloaded,
            InvokeError::Starting => ArenaError::Starting,
            InvokeError::Failure {
                kind: FailureKind::BadRequest | FailureKind::Unsupported,
                message,
            } => ArenaError::BadRequest(message),
            InvokeError::Failure {
                kind: FailureKind::NotFound,
                message,
            } => ArenaError::NotFound(message),
            other => ArenaError::PluginFailed(other.to_string()),
        }
    }
}

impl From<BytesRejection> for ArenaError {
    fn from(rejection: BytesRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ArenaError::TooLarge
        } else {
            ArenaError::BadRequest(rejection.body_text())
        }
    }
}
