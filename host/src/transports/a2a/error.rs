//! [`A2aError`]: every way an A2A request fails, and the one place it becomes
//! a JSON-RPC 2.0 error object with the A2A 1.0 code (the table of
//! `a2a.utils.errors.JSON_RPC_ERROR_CODE_MAP` in `a2a-sdk` 1.3.0) and, as the
//! SDK writes it, a `google.rpc.ErrorInfo` detail naming the reason.
//!
//! JSON-RPC errors travel in HTTP 200 answers (the SDK's client reads the body
//! of nothing else); the exceptions are the refusals that come before any
//! JSON-RPC is read: a missing token is HTTP 401, a body over the limit 413,
//! and the browser policy's 421 (a name not the node's), 403 (a foreign page)
//! and 415 (not JSON).
//!
//! The HTTP+JSON binding ([`super::rest`]) answers the same errors as the SDK's
//! REST server does: the HTTP status, and a `google.rpc.Status` body whose
//! `ErrorInfo.reason` is what the SDK's client turns back into its exception.
//! Both shapes read one table, [`A2aError::mapping`], so a reason is written once.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
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
    /// No `Authorization: Bearer <a2a.auth_token>`; read as JSON-RPC's invalid request.
    #[error("Invalid Request: Unauthorized: this node requires Authorization: Bearer <a2a.auth_token>")]
    Unauthorized,
    /// A body over `a2a.max_body_bytes` (or the listener's limit), this many bytes.
    #[error("Invalid Request: Payload too large: the limit is {0} bytes")]
    PayloadTooLarge(usize),
    /// An HTTP+JSON path asked with a method it does not take.
    #[error("Method not allowed: {0}")]
    MethodNotAllowed(String),
    /// Refused by the node's browser policy before the body was read.
    #[error("Invalid Request: {0}")]
    Browser(#[from] BrowserRefusal),
}

/// One error in both bindings' terms: JSON-RPC's code, and the HTTP status,
/// `google.rpc.Code` name and `ErrorInfo.reason` of the HTTP+JSON answer (the
/// reason is in the JSON-RPC error's data too, as the SDK writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub rpc_code: i64,
    pub http: StatusCode,
    pub status: &'static str,
    pub reason: &'static str,
}

const fn row(rpc_code: i64, http: StatusCode, status: &'static str, reason: &'static str) -> Mapping {
    Mapping {
        rpc_code,
        http,
        status,
        reason,
    }
}

impl A2aError {
    /// The table (`a2a.utils.errors.A2A_ERROR_MAPPING` in `a2a-sdk` 1.3.0, plus
    /// the node's own refusals, whose reasons the SDK does not know, so its
    /// client reads only their status).
    pub fn mapping(&self) -> Mapping {
        const BAD: StatusCode = StatusCode::BAD_REQUEST;
        const PRECONDITION: &str = "FAILED_PRECONDITION";
        match self {
            // JSON-RPC's parse errors have always said INTERNAL_ERROR here; the
            // HTTP+JSON binding reads a body that is not JSON as an invalid request.
            A2aError::Rpc(Fault::Parse(_)) => {
                row(code::PARSE_ERROR, BAD, "INVALID_ARGUMENT", "INTERNAL_ERROR")
            }
            A2aError::Rpc(Fault::InvalidRequest(_)) => {
                row(code::INVALID_REQUEST, BAD, "INVALID_ARGUMENT", "INVALID_REQUEST")
            }
            A2aError::Rpc(Fault::MethodNotFound(_)) => row(
                code::METHOD_NOT_FOUND,
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                "METHOD_NOT_FOUND",
            ),
            A2aError::Rpc(Fault::InvalidParams(_)) => {
                row(code::INVALID_PARAMS, BAD, "INVALID_ARGUMENT", "INVALID_PARAMS")
            }
            A2aError::TaskNotFound(_) => row(-32001, StatusCode::NOT_FOUND, "NOT_FOUND", "TASK_NOT_FOUND"),
            A2aError::TaskNotCancelable(_) => row(-32002, BAD, PRECONDITION, "TASK_NOT_CANCELABLE"),
            A2aError::PushNotSupported => row(-32003, BAD, PRECONDITION, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
            A2aError::Unsupported(_) => row(-32004, BAD, PRECONDITION, "UNSUPPORTED_OPERATION"),
            A2aError::ExtendedCardNotConfigured => {
                row(-32007, BAD, PRECONDITION, "EXTENDED_AGENT_CARD_NOT_CONFIGURED")
            }
            A2aError::VersionNotSupported(_) => row(-32009, BAD, PRECONDITION, "VERSION_NOT_SUPPORTED"),
            A2aError::Busy(_) => row(
                code::INTERNAL_ERROR,
                StatusCode::TOO_MANY_REQUESTS,
                "RESOURCE_EXHAUSTED",
                "RESOURCE_EXHAUSTED",
            ),
            A2aError::StorageUnavailable => row(
                code::INTERNAL_ERROR,
                StatusCode::SERVICE_UNAVAILABLE,
                "UNAVAILABLE",
                "RESOURCE_EXHAUSTED",
            ),
            A2aError::Internal(_) => row(
                code::INTERNAL_ERROR,
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL",
                "INTERNAL_ERROR",
            ),
            A2aError::Unauthorized => row(
                code::INVALID_REQUEST,
                StatusCode::UNAUTHORIZED,
                "UNAUTHENTICATED",
                "INVALID_REQUEST",
            ),
            A2aError::PayloadTooLarge(_) => row(
                code::INVALID_REQUEST,
                StatusCode::PAYLOAD_TOO_LARGE,
                "INVALID_ARGUMENT",
                "INVALID_REQUEST",
            ),
            A2aError::MethodNotAllowed(_) => row(
                code::METHOD_NOT_FOUND,
                StatusCode::METHOD_NOT_ALLOWED,
                "UNIMPLEMENTED",
                "METHOD_NOT_FOUND",
            ),
            A2aError::Browser(refusal) => row(
                code::INVALID_REQUEST,
                refusal.status(),
                "INVALID_ARGUMENT",
                "INVALID_REQUEST",
            ),
        }
    }

    pub fn code(&self) -> i64 {
        self.mapping().rpc_code
    }

    fn log(&self) {
        let message = self.to_string();
        if self.code() == code::INTERNAL_ERROR {
            tracing::warn!(transport = "a2a", %message, "request failed");
        } else {
            tracing::debug!(transport = "a2a", %message, "request refused");
        }
    }

    fn error_info(&self) -> Value {
        json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.mapping().reason,
            "domain": "a2a-protocol.org",
            "metadata": {},
        })
    }

    /// The HTTP+JSON binding's error body, as the SDK's REST server writes it.
    pub fn rest_body(&self) -> Value {
        self.log();
        let mapping = self.mapping();
        json!({"error": {
            "code": mapping.http.as_u16(),
            "status": mapping.status,
            "message": self.to_string(),
            "details": [self.error_info()],
        }})
    }

    /// The HTTP+JSON binding's whole error answer.
    pub fn rest_response(&self) -> Response {
        let mut response = (self.mapping().http, axum::Json(self.rest_body())).into_response();
        self.add_headers(&mut response);
        response
    }

    /// What a client needs besides the body: how to authenticate, when to retry.
    pub fn add_headers(&self, response: &mut Response) {
        let headers = response.headers_mut();
        match self {
            A2aError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            A2aError::Busy(_) | A2aError::StorageUnavailable => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
    }

    /// The whole JSON-RPC response for request `id`: the one place node errors
    /// take the protocol's shape.
    pub fn response(&self, id: &Value) -> Value {
        self.log();
        jsonrpc::error(
            id,
            self.code(),
            &self.to_string(),
            Some(json!([self.error_info()])),
        )
    }
}

/// A browser policy refusal as an HTTP+JSON answer: its own status, the REST error body.
pub fn browser_refused_rest(refusal: BrowserRefusal) -> Response {
    A2aError::Browser(refusal).rest_response()
}

/// A browser policy refusal as an HTTP answer: its own status, the JSON-RPC error as the body.
pub fn browser_refused(refusal: BrowserRefusal) -> Response {
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

    #[test]
    fn the_rest_shape_reads_the_same_table() {
        let error = A2aError::TaskNotFound("t1".into());
        let body = error.rest_body();
        assert_eq!(body["error"]["code"], 404);
        assert_eq!(body["error"]["status"], "NOT_FOUND");
        assert_eq!(body["error"]["message"], "Task not found: t1");
        assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(
            body["error"]["details"][0]["reason"],
            error.response(&Value::Null)["error"]["data"][0]["reason"]
        );
        let unauthorized = A2aError::Unauthorized.rest_response();
        assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(unauthorized.headers()[header::WWW_AUTHENTICATE], "Bearer");
        assert_eq!(A2aError::Unauthorized.code(), code::INVALID_REQUEST);
        assert_eq!(
            A2aError::Busy("full".into()).mapping().http,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
}
