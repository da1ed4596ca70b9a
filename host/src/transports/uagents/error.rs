//! [`SubmitError`]: why an envelope was not accepted, and the one place it
//! becomes the uagents 0.26.1 reply to `POST /submit` (the uAgents Exchange protocol,
//! "Endpoints"): `{"error": …}` with uagents' own wording and its status.
//! A plugin's failure is not one of these: the envelope was accepted, and the
//! sender hears of it as an `ErrorMessage` ([`super::wire::error_message`]).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::crypto::uagents::UagentsCryptoError;
use crate::store::StoreError;

/// Why an envelope was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("envelope too large: the limit is {0} bytes")]
    TooLarge(usize),
    #[error("unable to read the request body")]
    UnreadableBody,
    #[error("missing header: content-type")]
    MissingContentType,
    #[error("invalid content-type")]
    InvalidContentType,
    #[error("empty or invalid payload")]
    InvalidJson,
    #[error("contents do not match envelope schema")]
    NotAnEnvelope,
    #[error("{0}")]
    Signature(#[from] UagentsCryptoError),
    #[error("unable to route envelope")]
    UnknownTarget,
    #[error("envelope expired")]
    Expired,
    #[error("envelope has no expiry")]
    NoExpiry,
    #[error("envelope expiry is more than {0} seconds ahead")]
    ExpiresTooLate(u64),
    #[error("invalid schema digest")]
    BadSchemaDigest,
    #[error("envelope already received")]
    Replayed,
    #[error("unable to decode payload: {0}")]
    BadPayload(String),
    #[error("the node is overloaded; try again shortly")]
    Overloaded,
    #[error("the node is still loading its plugins; try again shortly")]
    Starting,
    /// The store cannot answer now (its database is down or unreachable):
    /// nothing was done, and the same request may simply be sent again.
    #[error("the node's storage is unavailable; try again shortly")]
    StorageUnavailable,
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for SubmitError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(detail) => {
                tracing::warn!(transport = "uagents", %detail, "storage unavailable");
                SubmitError::StorageUnavailable
            }
            other => SubmitError::Internal(format!("storage failed: {other}")),
        }
    }
}

impl IntoResponse for SubmitError {
    /// The one place node errors become uagents' `{"error": …}` shape.
    fn into_response(self) -> Response {
        let status = match self {
            SubmitError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            SubmitError::Overloaded | SubmitError::Starting | SubmitError::StorageUnavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            SubmitError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        let message = self.to_string();
        if status.is_server_error() {
            tracing::warn!(transport = "uagents", %message, "envelope not handled");
        } else {
            tracing::info!(transport = "uagents", %message, "envelope refused");
        }
        (status, axum::Json(json!({ "error": message }))).into_response()
    }
}
