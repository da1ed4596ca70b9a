//! [`EnvelopesError`]: everything that can refuse an envelope, by its code in
//! the Agora envelope specification §5, and [`Service::refuse`], the one place it
//! becomes the wire's signed ERROR envelope (§4's `code`, `message` and,
//! when it answers a REQUEST, `request_id`) and that code as HTTP status.

use serde_json::{Value, json};

use super::{EnvelopesState, Reply};
use crate::crypto::envelope::EnvelopeError;
use crate::runtime::{FailureKind, InvokeError};
use crate::store::StoreError;

/// Everything that can refuse an envelope, by its spec §5 code.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopesError {
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    #[error("the envelope is larger than {0} bytes")]
    TooLarge(usize),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    PaymentRequired(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Timeout(String),
    #[error(
        "rate limit exceeded: at most {per_minute} envelopes per minute; try again in {retry_after_secs} s"
    )]
    RateLimited { per_minute: u32, retry_after_secs: u64 },
    #[error("you hold {0} open offers, the most allowed; accept one or let them expire")]
    TooManyOffers(usize),
    #[error("{0}")]
    Internal(String),
    #[error("the node is busy; try again shortly")]
    Overloaded,
    #[error("the node is still loading its plugins; try again shortly")]
    Starting,
    /// The store cannot answer now (its database is down or unreachable):
    /// nothing was done, and the same request may simply be sent again.
    #[error("the node's storage is unavailable; try again shortly")]
    StorageUnavailable,
}

impl EnvelopesError {
    fn code(&self) -> u16 {
        match self {
            EnvelopesError::Envelope(error) => error.code(),
            EnvelopesError::BadRequest(_) => 400,
            // Not in §5's table; the HTTP status every other transport gives an oversized body.
            EnvelopesError::TooLarge(_) => 413,
            EnvelopesError::Unauthorized(_) => 401,
            EnvelopesError::PaymentRequired(_) => 402,
            EnvelopesError::NotFound(_) => 404,
            EnvelopesError::Timeout(_) => 408,
            EnvelopesError::RateLimited { .. } | EnvelopesError::TooManyOffers(_) => 429,
            EnvelopesError::Internal(_) => 500,
            EnvelopesError::Overloaded | EnvelopesError::Starting | EnvelopesError::StorageUnavailable => 503,
        }
    }

    /// HTTP's `Retry-After` (whole seconds) for a refusal worth retrying: the
    /// rate limiter's wait, or a second when the node is busy or still loading
    /// its plugins. §4's ERROR has no field for it, so over a WebSocket only
    /// the message says it.
    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            EnvelopesError::RateLimited { retry_after_secs, .. } => Some(*retry_after_secs),
            EnvelopesError::Overloaded | EnvelopesError::Starting | EnvelopesError::StorageUnavailable => {
                Some(1)
            }
            _ => None,
        }
    }
}

impl From<StoreError> for EnvelopesError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(detail) => {
                tracing::warn!(transport = "envelopes", %detail, "storage unavailable");
                EnvelopesError::StorageUnavailable
            }
            other => EnvelopesError::Internal(format!("storage failed: {other}")),
        }
    }
}

impl From<InvokeError> for EnvelopesError {
    fn from(error: InvokeError) -> Self {
        match error {
            InvokeError::Failure { kind, message } => match kind {
                FailureKind::BadRequest => EnvelopesError::BadRequest(message),
                FailureKind::Unsupported | FailureKind::NotFound => EnvelopesError::NotFound(message),
                FailureKind::PaymentRequired => EnvelopesError::PaymentRequired(message),
                FailureKind::Internal => EnvelopesError::Internal(message),
            },
            InvokeError::Timeout => EnvelopesError::Timeout(error.to_string()),
            InvokeError::Overloaded => EnvelopesError::Overloaded,
            InvokeError::Starting => EnvelopesError::Starting,
            other => EnvelopesError::Internal(other.to_string()),
        }
    }
}

/// An error together with the request it answers, when there is one.
#[derive(Debug)]
pub(crate) struct Refusal {
    error: EnvelopesError,
    request_id: Option<String>,
}

impl<E: Into<EnvelopesError>> From<E> for Refusal {
    fn from(error: E) -> Self {
        Refusal {
            error: error.into(),
            request_id: None,
        }
    }
}

pub(crate) trait AnswersRequest<T> {
    /// Tie an error to the REQUEST it answers (ERROR's `request_id`).
    fn answering(self, request_id: Option<&str>) -> Result<T, Refusal>;
}

impl<T, E: Into<EnvelopesError>> AnswersRequest<T> for Result<T, E> {
    fn answering(self, request_id: Option<&str>) -> Result<T, Refusal> {
        self.map_err(|error| Refusal {
            error: error.into(),
            request_id: request_id.map(str::to_string),
        })
    }
}

impl EnvelopesState {
    /// The one place node errors become the wire's signed ERROR envelope and HTTP status.
    pub(super) fn refuse(&self, refusal: Refusal) -> Reply {
        let code = refusal.error.code();
        let retry_after_secs = refusal.error.retry_after_secs();
        let message = refusal.error.to_string();
        if code >= 500 {
            tracing::warn!(transport = "envelopes", code, %message, "envelope failed");
        } else {
            tracing::debug!(transport = "envelopes", code, %message, "envelope refused");
        }
        let mut payload = json!({"code": code, "message": message});
        if let Some(request_id) = refusal.request_id {
            payload["request_id"] = Value::String(request_id);
        }
        match self.envelope("ERROR", payload.clone()) {
            Ok(envelope) => Reply {
                status: code,
                retry_after_secs,
                envelope,
            },
            // Signing a fixed-shape JSON value cannot fail short of a bug; say so unsigned.
            Err(error) => Reply {
                status: 500,
                retry_after_secs: None,
                envelope: json!({"error": error.to_string(), "payload": payload}),
            },
        }
    }
}
