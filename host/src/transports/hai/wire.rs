//! The frames of the HAI specification §"Message Types", exactly as the spec names
//! their fields, and the validation of the two a client may send (§1, §6).
//! Everything a client sends is checked here before anything else looks at it.

use serde::Serialize;
use serde_json::{Map, Value};

use super::HaiError;

/// §1: `content` is 1–10,000 characters.
pub const MAX_CONTENT_CHARS: usize = 10_000;
/// Session ids are client-made (UUIDs recommended): 1-128 characters of `A-Za-z0-9._:-`.
/// A canonical UUIDv4 is also its session's bearer secret (see [`super::access`]).
pub const MAX_SESSION_ID_BYTES: usize = 128;
/// A session secret is 64 hex digits; anything much longer cannot be one.
pub const MAX_SECRET_BYTES: usize = 256;
pub const MAX_APPROVAL_ID_BYTES: usize = 128;
pub const MAX_FEEDBACK_CHARS: usize = 2_000;

/// §1 `UserMessage`, validated.
#[derive(Debug, Clone)]
pub struct UserMessage {
    pub content: String,
    pub session_id: String,
    pub metadata: Map<String, Value>,
    /// Our extension: the session's secret, for a connection that resumes an
    /// existing session by its first message (the spec's clients never send it;
    /// a session whose id is a UUIDv4 needs none).
    pub session_secret: Option<String>,
}

impl UserMessage {
    /// Whether the client asked for the non-streaming `assistant_message` form
    /// (`metadata.stream == false`).
    pub fn wants_complete_message(&self) -> bool {
        self.metadata.get("stream") == Some(&Value::Bool(false))
    }
}

/// §6 `ToolApprovalResponse`, validated.
#[derive(Debug, Clone)]
pub struct ApprovalResponse {
    pub approval_id: String,
    pub approved: bool,
    pub feedback: Option<String>,
}

#[derive(Debug, Clone)]
pub enum Inbound {
    UserMessage(UserMessage),
    ApprovalResponse(ApprovalResponse),
}

/// Parse one text frame: `invalid_json` when it is not JSON, `invalid_message`
/// when it is JSON but not a client message of the schema, `invalid_session`
/// when the session id cannot be one.
pub fn parse(text: &str) -> Result<Inbound, HaiError> {
    let value: Value = serde_json::from_str(text).map_err(|e| HaiError::InvalidJson(e.to_string()))?;
    let Value::Object(mut fields) = value else {
        return Err(HaiError::InvalidMessage("a message must be a JSON object".into()));
    };
    let kind = match fields.remove("type") {
        Some(Value::String(kind)) => kind,
        Some(_) => return Err(HaiError::InvalidMessage("`type` must be a string".into())),
        None => return Err(HaiError::InvalidMessage("missing field `type`".into())),
    };
    match kind.as_str() {
        "user_message" => parse_user_message(fields).map(Inbound::UserMessage),
        "tool_approval_response" => parse_approval_response(fields).map(Inbound::ApprovalResponse),
        other => Err(HaiError::InvalidMessage(format!(
            "a client may send `user_message` or `tool_approval_response`, not {:?}",
            truncate_chars(other, 64)
        ))),
    }
}

fn parse_user_message(mut fields: Map<String, Value>) -> Result<UserMessage, HaiError> {
    let content = match fields.remove("content") {
        Some(Value::String(content)) => content,
        Some(_) => {
            return Err(HaiError::InvalidMessage("`content` must be a string".into()));
        }
        None => return Err(HaiError::InvalidMessage("missing field `content`".into())),
    };
    let chars = content.chars().count();
    if content.trim().is_empty() || chars > MAX_CONTENT_CHARS {
        return Err(HaiError::InvalidMessage(format!(
            "`content` must be 1-{MAX_CONTENT_CHARS} characters and not blank (got {chars})"
        )));
    }
    let session_id = match fields.remove("session_id") {
        Some(Value::String(id)) => id,
        Some(_) => {
            return Err(HaiError::InvalidMessage("`session_id` must be a string".into()));
        }
        None => {
            return Err(HaiError::InvalidMessage("missing field `session_id`".into()));
        }
    };
    check_session_id(&session_id)?;
    let session_secret = match fields.remove("session_secret") {
        None | Some(Value::Null) => None,
        Some(Value::String(secret)) if secret.len() <= MAX_SECRET_BYTES => Some(secret),
        Some(_) => {
            return Err(HaiError::InvalidMessage(format!(
                "`session_secret` must be a string of at most {MAX_SECRET_BYTES} bytes"
            )));
        }
    };
    let metadata = match fields.remove("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(metadata)) => metadata,
        Some(_) => {
            return Err(HaiError::InvalidMessage("`metadata` must be an object".into()));
        }
    };
    Ok(UserMessage {
        content,
        session_id,
        metadata,
        session_secret,
    })
}

fn parse_approval_response(mut fields: Map<String, Value>) -> Result<ApprovalResponse, HaiError> {
    let approval_id = match fields.remove("approval_id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_APPROVAL_ID_BYTES => id,
        Some(_) => {
            return Err(HaiError::InvalidMessage(format!(
                "`approval_id` must be a string of 1-{MAX_APPROVAL_ID_BYTES} bytes"
            )));
        }
        None => {
            return Err(HaiError::InvalidMessage("missing field `approval_id`".into()));
        }
    };
    let approved = match fields.remove("approved") {
        Some(Value::Bool(approved)) => approved,
        Some(_) => {
            return Err(HaiError::InvalidMessage(
                "`approved` must be true or false".into(),
            ));
        }
        None => {
            return Err(HaiError::InvalidMessage("missing field `approved`".into()));
        }
    };
    let feedback = match fields.remove("feedback") {
        None | Some(Value::Null) => None,
        Some(Value::String(feedback)) if feedback.chars().count() <= MAX_FEEDBACK_CHARS => {
            given_feedback(Some(feedback))
        }
        Some(_) => {
            return Err(HaiError::InvalidMessage(format!(
                "`feedback` must be a string of at most {MAX_FEEDBACK_CHARS} characters"
            )));
        }
    };
    Ok(ApprovalResponse {
        approval_id,
        approved,
        feedback,
    })
}

/// Session ids key storage and broadcast groups: short, printable, no separators.
pub fn check_session_id(id: &str) -> Result<(), HaiError> {
    let valid = !id.is_empty()
        && id.len() <= MAX_SESSION_ID_BYTES
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if valid {
        Ok(())
    } else {
        Err(HaiError::InvalidSession(format!(
            "session_id must be 1-{MAX_SESSION_ID_BYTES} characters of A-Z a-z 0-9 - _ . :"
        )))
    }
}

pub fn truncate_chars(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// The server's frames (§2–§5, §7, §8). Serialised once, broadcast as text.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Outbound {
    AssistantMessage {
        content: String,
        session_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
        metadata: Value,
    },
    AssistantMessageChunk {
        content: String,
        session_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
        message_id: String,
        is_final: bool,
    },
    ToolCall {
        tool_call_id: String,
        tool_name: String,
        parameters: Value,
        session_id: String,
        status: ToolStatus,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
        metadata: Value,
    },
    ToolApprovalRequest {
        tool_name: String,
        tool_description: String,
        parameters: Value,
        reasoning: String,
        risk_level: crate::runtime::Risk,
        session_id: String,
        approval_id: String,
    },
    Status {
        status: Status,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        session_id: String,
    },
    Error {
        error_code: &'static str,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    /// Our extension, sent only to the connection that created a session: the
    /// secret that resumes it elsewhere (`?session_secret=` on the WebSocket, or
    /// the header `X-HAI-Session-Secret`) and reads its history. Clients of the
    /// spec route frames by `type` and ignore this one.
    Session {
        session_id: String,
        session_secret: String,
    },
}

impl Outbound {
    pub fn to_text(&self) -> String {
        // Serialising these plain structures cannot fail; an empty frame would be dropped by clients.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Started,
    Completed,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Thinking,
    Routing,
    ExecutingTools,
    Completed,
}

impl Status {
    /// The statuses a plugin may report; `completed` is the host's to say.
    pub fn from_plugin(text: &str) -> Option<Status> {
        match text {
            "thinking" => Some(Status::Thinking),
            "routing" => Some(Status::Routing),
            "executing_tools" => Some(Status::ExecutingTools),
            _ => None,
        }
    }
}

/// Feedback as an approval records it: blank feedback is none.
pub(super) fn given_feedback(feedback: Option<String>) -> Option<String> {
    feedback.filter(|feedback| !feedback.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_message_bounds_and_required_fields() {
        let ok = parse(r#"{"type":"user_message","content":"hi","session_id":"s-1"}"#);
        assert!(matches!(ok, Ok(Inbound::UserMessage(m)) if m.content == "hi"));
        let long = "x".repeat(MAX_CONTENT_CHARS + 1);
        let frame = serde_json::json!({"type":"user_message","content":long,"session_id":"s"});
        assert!(matches!(
            parse(&frame.to_string()),
            Err(HaiError::InvalidMessage(_))
        ));
        // 10,000 multi-byte characters are within the limit: it counts characters.
        let wide = "é".repeat(MAX_CONTENT_CHARS);
        let frame = serde_json::json!({"type":"user_message","content":wide,"session_id":"s"});
        assert!(parse(&frame.to_string()).is_ok());
        assert!(matches!(
            parse(r#"{"type":"user_message","content":"","session_id":"s"}"#),
            Err(HaiError::InvalidMessage(_))
        ));
        assert!(matches!(
            parse(r#"{"type":"user_message","content":"hi"}"#),
            Err(HaiError::InvalidMessage(_))
        ));
        assert!(matches!(
            parse(r#"{"type":"user_message","content":"hi","session_id":"a/b"}"#),
            Err(HaiError::InvalidSession(_))
        ));
        assert!(matches!(parse("{nope"), Err(HaiError::InvalidJson(_))));
        assert!(matches!(
            parse(r#"{"type":"status","status":"thinking"}"#),
            Err(HaiError::InvalidMessage(_))
        ));
    }

    #[test]
    fn approval_response_fields() {
        let ok = parse(
            r#"{"type":"tool_approval_response","approval_id":"a1","approved":false,"feedback":"later"}"#,
        );
        assert!(
            matches!(ok, Ok(Inbound::ApprovalResponse(r)) if !r.approved && r.feedback.as_deref() == Some("later"))
        );
        assert!(matches!(
            parse(r#"{"type":"tool_approval_response","approval_id":"a1","approved":"yes"}"#),
            Err(HaiError::InvalidMessage(_))
        ));
    }

    #[test]
    fn frames_carry_the_spec_field_names() {
        let frame = Outbound::AssistantMessageChunk {
            content: "Hi ".into(),
            session_id: "s".into(),
            agent_id: None,
            message_id: "msg_1".into(),
            is_final: false,
        };
        let value: Value = serde_json::from_str(&frame.to_text()).unwrap();
        assert_eq!(value["type"], "assistant_message_chunk");
        assert_eq!(value["message_id"], "msg_1");
        assert_eq!(value["is_final"], false);
        let status = Outbound::Status {
            status: Status::ExecutingTools,
            message: None,
            session_id: "s".into(),
        };
        assert!(status.to_text().contains(r#""status":"executing_tools""#));
    }
}
