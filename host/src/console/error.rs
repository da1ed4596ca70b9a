//! [`ConsoleError`]: every way a console request fails, and the one place it
//! becomes an HTTP status with a JSON body `{"error": "…"}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::policy::browser::BrowserRefusal;
use crate::runtime::approval::AnswerError;

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("Unauthorized: the console requires Authorization: Bearer <console.token>")]
    Unauthorized,
    #[error(transparent)]
    Browser(#[from] BrowserRefusal),
    #[error("Bad request: {0}")]
    BadRequest(String),
    #[error("Not found: {0}")]
    NotFound(String),
    /// The node could not do what was asked (a file it could not write, say).
    #[error("Failed: {0}")]
    Failed(String),
    #[error("Service Unavailable: {0}")]
    Unavailable(String),
    /// The body could not be read as the route's JSON (axum's rejection, with its status).
    #[error("{message}")]
    Body { status: StatusCode, message: String },
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

impl ConsoleError {
    pub fn status(&self) -> StatusCode {
        match self {
            ConsoleError::Unauthorized => StatusCode::UNAUTHORIZED,
            ConsoleError::Browser(BrowserRefusal::UnknownHost(_)) => StatusCode::MISDIRECTED_REQUEST,
            ConsoleError::Browser(BrowserRefusal::Origin { .. }) => StatusCode::FORBIDDEN,
            ConsoleError::Browser(BrowserRefusal::NotJson) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::NotFound(_) => StatusCode::NOT_FOUND,
            ConsoleError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ConsoleError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ConsoleError::Body { status, .. } => *status,
            ConsoleError::Answer(AnswerError::Unknown(_)) => StatusCode::NOT_FOUND,
            ConsoleError::Answer(AnswerError::Lost { .. }) => StatusCode::CONFLICT,
            ConsoleError::Answer(AnswerError::Unsupported { .. }) => StatusCode::NOT_IMPLEMENTED,
            ConsoleError::Answer(AnswerError::Failed(_)) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn message(&self) -> String {
        match self {
            // The browser policy's texts name a transport's keys; the console has none to list.
            ConsoleError::Browser(BrowserRefusal::NotJson) => {
                "Unsupported Media Type: the console's POSTs must be sent as Content-Type: application/json"
                    .to_string()
            }
            ConsoleError::Browser(BrowserRefusal::Origin { origin, .. }) => {
                format!("Forbidden: the console answers pages of the node's own origin only, not {origin:?}")
            }
            other => other.to_string(),
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(json!({"error": self.message()}))).into_response();
        if matches!(self, ConsoleError::Unauthorized) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_error_has_its_status() {
        let lost = AnswerError::Lost {
            approval_id: "appr_1".into(),
            why: "taken".into(),
        };
        let unsupported = AnswerError::Unsupported {
            transport: "mcp".into(),
            why: "no".into(),
        };
        for (error, status) in [
            (AnswerError::Unknown("appr_1".into()), StatusCode::NOT_FOUND),
            (lost, StatusCode::CONFLICT),
            (unsupported, StatusCode::NOT_IMPLEMENTED),
            (
                AnswerError::Failed("disk".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ] {
            assert_eq!(ConsoleError::from(error).status(), status);
        }
        let unauthorized = ConsoleError::Unauthorized.into_response();
        assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(unauthorized.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }
}
