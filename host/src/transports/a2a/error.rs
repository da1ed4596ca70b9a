//! [`A2aError`]: every way an A2A request fails, and the one place it becomes
//! a JSON-RPC 2.0 error object with the A2A 1.0 code (the table of
//! `a2a.utils.errors.JSON_RPC_ERROR_CODE_MAP` in `a2a-sdk` 1.3.0) and, as the
//! SDK writes it, a `google.rpc.ErrorInfo` detail naming the reason.
//!
//! JSON-RPC errors travel in HTTP 200 answers (the SDK's client reads the body
//! of nothing else); the exceptions are the refusals that come before any
//! JSON-RPC is read: a body over the limit is HTTP 413, and the browser
//! policy's 421 (a name not the node's), 403 (a foreign page) and 415 (not JSON).

use serde_json::{Value, json};

use crate::jsonrpc::{self, Fault, Faults, code};
use crate::models::a2a::Invalid;
use crate::policy::browser::BrowserRefusal;
use crate::runtime::InvokeError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum A2aError {
    /// Refused by JSON-RPC itself (parse, envelope, method, params).
    #[error(transparent)]
    Rpc(#[from] Fault),
    #[error("Task not found: {0}")]
    TaskNotFound(String),
    #[error("Task cannot be canceled: it is already {0}")]
    TaskNotCancelable(String),
    #[error("This operation is not supported: {0}")]
    Unsupported(String),
    #[error("Push Notification is not supported")]
    PushNotSupported,
    /// `GetExtendedAgentCard` on a node without `a2a.auth_token`, whose card offers none.
    #[error("Authenticated Extended Card is not configured: this node sets no a2a.auth_token")]
    ExtendedCardNotConfigured,
    #[error(
        "A2A version '{0}' is not supported by this node. Expected version '{version}'.",
        version = crate::peers::a2a::VERSION
    )]
    VersionNotSupported(String),
    /// A bound of the node (running tasks, tasks per context): nothing was done.
    #[error("{0}")]
    Busy(String),
    #[error("the node's storage is unavailable; try again shortly")]
    StorageUnavailable,
    #[error("Internal error: {0}")]
    Internal(String),
    /// Refused by the node's browser policy before the body was read.
    #[error("Invalid Request: {0}")]
    Browser(#[from] BrowserRefusal),
}

impl A2aError {
    pub fn code(&self) -> i64 {
        match self {
            A2aError::Rpc(fault) => fault.code(),
            A2aError::Browser(_) => code::INVALID_REQUEST,
            A2aError::TaskNotFound(_) => -32001,
            A2aError::TaskNotCancelable(_) => -32002,
            A2aError::PushNotSupported => -32003,
            A2aError::Unsupported(_) => -32004,
            A2aError::ExtendedCardNotConfigured => -32007,
            A2aError::VersionNotSupported(_) => -32009,
            A2aError::Busy(_) | A2aError::StorageUnavailable | A2aError::Internal(_) => code::INTERNAL_ERROR,
        }
    }

    /// The `ErrorInfo.reason` the SDK attaches to the same error.
    fn reason(&self) -> &'static str {
        match self {
            A2aError::Rpc(Fault::Parse(_)) | A2aError::Internal(_) => "INTERNAL_ERROR",
            A2aError::Rpc(Fault::InvalidRequest(_)) | A2aError::Browser(_) => "INVALID_REQUEST",
            A2aError::Rpc(Fault::MethodNotFound(_)) => "METHOD_NOT_FOUND",
            A2aError::Rpc(Fault::InvalidParams(_)) => "INVALID_PARAMS",
            A2aError::TaskNotFound(_) => "TASK_NOT_FOUND",
            A2aError::TaskNotCancelable(_) => "TASK_NOT_CANCELABLE",
            A2aError::PushNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            A2aError::Unsupported(_) => "UNSUPPORTED_OPERATION",
            A2aError::ExtendedCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            A2aError::VersionNotSupported(_) => "VERSION_NOT_SUPPORTED",
            A2aError::Busy(_) | A2aError::StorageUnavailable => "RESOURCE_EXHAUSTED",
        }
    }

    /// The whole JSON-RPC response for request `id`: the one place node errors
    /// take the protocol's shape.
    pub fn response(&self, id: &Value) -> Value {
        let message = self.to_string();
        if self.code() == code::INTERNAL_ERROR {
            tracing::warn!(transport = "a2a", %message, "request failed");
        } else {
            tracing::debug!(transport = "a2a", %message, "request refused");
        }
        let detail = json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.reason(),
            "domain": "a2a-protocol.org",
            "metadata": {},
        }]);
        jsonrpc::error(id, self.code(), &message, Some(detail))
    }
}

/// A browser policy refusal as an HTTP answer: its own status, the JSON-RPC error as the body.
pub fn browser_refused(refusal: BrowserRefusal) -> axum::response::Response {
    use axum::response::IntoResponse;
    let status = refusal.status();
    (
        status,
        axum::Json(A2aError::Browser(refusal).response(&Value::Null)),
    )
        .into_response()
}

impl From<StoreError> for A2aError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(detail) => {
                tracing::warn!(transport = "a2a", %detail, "storage unavailable");
                A2aError::StorageUnavailable
            }
            StoreError::Limit(detail) => A2aError::Busy(detail),
            other => A2aError::Internal(format!("storage failed: {other}")),
        }
    }
}

/// What the strict read of the A2A model refuses is the client's params: `-32602`.
impl From<Invalid> for A2aError {
    fn from(error: Invalid) -> Self {
        A2aError::invalid_params(error.to_string())
    }
}

impl From<InvokeError> for A2aError {
    fn from(error: InvokeError) -> Self {
        A2aError::Internal(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_the_sdks_codes_and_reasons() {
        let response = A2aError::TaskNotFound("t1".into()).response(&json!("req-1"));
        assert_eq!(response["jsonrpc"], "2.0");
        assert_eq!(response["id"], "req-1");
        assert_eq!(response["error"]["code"], -32001);
        assert_eq!(response["error"]["data"][0]["reason"], "TASK_NOT_FOUND");
        assert!(response.get("result").is_none());
        assert_eq!(A2aError::VersionNotSupported("99.0".into()).code(), -32009);
        assert_eq!(
            A2aError::Rpc(Fault::Parse("x".into())).response(&Value::Null)["id"],
            Value::Null
        );
    }
}
