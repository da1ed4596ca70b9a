//! [`McpError`]: every way an MCP request fails before a tool runs, and the one
//! place it becomes an HTTP status with a JSON-RPC error body.
//!
//! Streamable HTTP (§"Transports") puts some failures in the HTTP status, with
//! the JSON-RPC error in the body so a client that reads either understands:
//! a missing session id is 400, an unknown or ended session 404, an oversized
//! body 413, a missing token 401. Failures of a tool itself are not errors at
//! all: they are results with `isError: true` (§"Tools", "Error Handling"), made
//! in [`super::tools`].
//!
//! One error enum for both eras, with one mapping per era: in a 2025 session
//! an unknown method or bad parameters are JSON-RPC errors in a 200 answer; at
//! 2026-07-28 the status carries the class (400, or 404 for an unknown
//! method), with the revision's own codes `-32020` and `-32022`
//! ([`McpError::into_modern_response`]).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::jsonrpc::{self, Fault, code};

/// 2026-07-28's codes (`mcp_types/jsonrpc.py`): a routing header that
/// disagrees with the body, and a revision the server does not serve.
pub const HEADER_MISMATCH: i64 = -32020;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
use crate::policy::browser::BrowserRefusal;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// Refused by JSON-RPC itself (parse, envelope, method, params).
    #[error(transparent)]
    Rpc(#[from] Fault),
    #[error("Bad Request: Mcp-Session-Id header is required after initialize")]
    MissingSession,
    #[error("Session not found: it ended or never existed; initialize a new one")]
    UnknownSession,
    #[error("Unauthorized: this node requires Authorization: Bearer <mcp.token>")]
    Unauthorized,
    /// Refused by the node's browser policy before the body was read.
    #[error(transparent)]
    Browser(#[from] BrowserRefusal),
    #[error("Payload too large: the limit is {0} bytes")]
    TooLarge(usize),
    #[error("Not Acceptable: {0}")]
    NotAcceptable(String),
    /// 2026-07-28: a routing header disagrees with the body, or is repeated (-32020).
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    /// 2026-07-28: a protocol revision the node does not serve (-32022).
    #[error("Unsupported protocol version: {requested:?}")]
    UnsupportedVersion { requested: String },
    /// 2026-07-28: an approval round's answer that cannot count (wrong key,
    /// tampered, bound to another call, expired or replayed); the real reason is
    /// logged, the client learns only that its state is not valid, as the `mcp`
    /// package's own server answers it.
    #[error("Invalid or expired requestState")]
    InvalidRequestState,
    /// 2026-07-28 is POST only: a GET or DELETE carrying its header (HTTP 405).
    #[error("Method Not Allowed: protocol 2026-07-28 takes POST only")]
    MethodNotAllowed,
    /// A plugin failed what it was asked (a prompt's render): -32603 in a 200 answer.
    #[error("Internal error: {0}")]
    PluginFailed(String),
    #[error("Conflict: this session's notification stream is open already")]
    StreamOpen,
    /// A bound of the node (sessions, calls in flight): nothing was done.
    #[error("{0}")]
    Busy(String),
    /// The shared store, which holds a fleet's sessions, did not answer: try again.
    #[error("Service unavailable: the session store does not answer; try again")]
    StorageUnavailable,
}

impl From<StoreError> for McpError {
    fn from(error: StoreError) -> Self {
        tracing::warn!(transport = "mcp", %error, "mcp: session store failed");
        McpError::StorageUnavailable
    }
}

impl McpError {
    pub fn code(&self) -> i64 {
        match self {
            McpError::Rpc(fault) => fault.code(),
            McpError::MissingSession
            | McpError::Unauthorized
            | McpError::Browser(_)
            | McpError::TooLarge(_)
            | McpError::NotAcceptable(_)
            | McpError::StreamOpen
            | McpError::MethodNotAllowed => code::INVALID_REQUEST,
            McpError::HeaderMismatch(_) => HEADER_MISMATCH,
            McpError::UnsupportedVersion { .. } => UNSUPPORTED_PROTOCOL_VERSION,
            McpError::InvalidRequestState => code::INVALID_PARAMS,
            McpError::PluginFailed(_) => code::INTERNAL_ERROR,
            // A server error of the node's; clients act on the HTTP 404 beside it.
            McpError::UnknownSession => -32001,
            McpError::Busy(_) | McpError::StorageUnavailable => code::SERVER_ERROR,
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            // Within a session, a method or parameters the node does not take are
            // JSON-RPC errors in a 200 answer, as for any JSON-RPC server.
            McpError::Rpc(Fault::MethodNotFound(_) | Fault::InvalidParams(_)) => StatusCode::OK,
            McpError::PluginFailed(_) => StatusCode::OK,
            McpError::Rpc(Fault::Parse(_) | Fault::InvalidRequest(_))
            | McpError::HeaderMismatch(_)
            | McpError::UnsupportedVersion { .. }
            | McpError::InvalidRequestState
            | McpError::MissingSession => StatusCode::BAD_REQUEST,
            McpError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            McpError::StreamOpen => StatusCode::CONFLICT,
            McpError::UnknownSession => StatusCode::NOT_FOUND,
            McpError::Unauthorized => StatusCode::UNAUTHORIZED,
            McpError::Browser(refusal) => refusal.status(),
            McpError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            McpError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            McpError::Busy(_) | McpError::StorageUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The status of this error at 2026-07-28, where the HTTP status carries
    /// the JSON-RPC class (`ERROR_CODE_HTTP_STATUS` of the `mcp` package):
    /// 400 for a malformed request, 404 for an unknown method, 200 for the
    /// rest; the node's own refusals (token, origin, size, bounds) as in 2025.
    fn modern_status(&self) -> StatusCode {
        match self {
            McpError::Rpc(Fault::MethodNotFound(_)) => StatusCode::NOT_FOUND,
            McpError::Rpc(Fault::InvalidParams(_)) => StatusCode::BAD_REQUEST,
            other => other.status(),
        }
    }

    fn data(&self) -> Option<Value> {
        match self {
            McpError::UnsupportedVersion { requested } => {
                let supported: Vec<&str> = super::envelope::MODERN_VERSIONS
                    .iter()
                    .chain(super::wire::PROTOCOL_VERSIONS.iter().rev())
                    .copied()
                    .collect();
                Some(json!({"supported": supported, "requested": requested}))
            }
            McpError::InvalidRequestState => Some(json!({"reason": "invalid_request_state"})),
            _ => None,
        }
    }

    /// The JSON-RPC error object for request `id`.
    pub fn body(&self, id: &Value) -> Value {
        jsonrpc::error(id, self.code(), &self.to_string(), self.data())
    }

    /// The HTTP answer: the status Streamable HTTP asks for, the JSON-RPC error as its body.
    pub fn into_response_for(self, id: &Value) -> Response {
        let status = self.status();
        self.respond(status, id)
    }

    /// The HTTP answer at 2026-07-28 (see [`McpError::modern_status`]).
    pub fn into_modern_response(self, id: &Value) -> Response {
        let status = self.modern_status();
        self.respond(status, id)
    }

    fn respond(self, status: StatusCode, id: &Value) -> Response {
        let mut response = (status, axum::Json(self.body(id))).into_response();
        match self {
            McpError::Unauthorized => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            McpError::MethodNotAllowed => {
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            _ => {}
        }
        response
    }
}

impl IntoResponse for McpError {
    fn into_response(self) -> Response {
        self.into_response_for(&Value::Null)
    }
}
