//! [`McpError`]: every way an MCP request fails before a tool runs, and the one
//! place it becomes an HTTP status with a JSON-RPC error body.
//!
//! Streamable HTTP (§"Transports") puts some failures in the HTTP status, with
//! the JSON-RPC error in the body so a client that reads either understands:
//! a missing session id is 400, an unknown or ended session 404, an oversized
//! body 413, a missing token 401. Failures of a tool itself are not errors at
//! all: they are results with `isError: true` (§"Tools", "Error Handling"), made
//! in [`super::tools`].

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::jsonrpc::{self, Fault, code};
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
    #[error(
        "Method not found: server/discover (this node speaks the initialize handshake, protocol {})",
        super::wire::LATEST_PROTOCOL_VERSION
    )]
    UnservedEra,
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
            | McpError::StreamOpen => code::INVALID_REQUEST,
            McpError::UnservedEra => code::METHOD_NOT_FOUND,
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
            McpError::Rpc(Fault::Parse(_) | Fault::InvalidRequest(_))
            | McpError::UnservedEra
            | McpError::MissingSession => StatusCode::BAD_REQUEST,
            McpError::StreamOpen => StatusCode::CONFLICT,
            McpError::UnknownSession => StatusCode::NOT_FOUND,
            McpError::Unauthorized => StatusCode::UNAUTHORIZED,
            McpError::Browser(refusal) => refusal.status(),
            McpError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            McpError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            McpError::Busy(_) | McpError::StorageUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The JSON-RPC error object for request `id`.
    pub fn body(&self, id: &Value) -> Value {
        jsonrpc::error(id, self.code(), &self.to_string(), None)
    }

    /// The HTTP answer: the status Streamable HTTP asks for, the JSON-RPC error as its body.
    pub fn into_response_for(self, id: &Value) -> Response {
        let mut response = (self.status(), axum::Json(self.body(id))).into_response();
        if matches!(self, McpError::Unauthorized) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl IntoResponse for McpError {
    fn into_response(self) -> Response {
        self.into_response_for(&Value::Null)
    }
}
