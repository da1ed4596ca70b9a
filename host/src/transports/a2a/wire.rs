//! What only the A2A server reads and writes, on top of the shared A2A 1.0
//! model ([`crate::models::a2a`]): the methods' params, the `ListTasks`
//! answer, and the strict read of a client's message.
//!
//! Inbound, members the node does not know are ignored (as the SDK's server
//! does, for forward compatibility); what it does read is validated here,
//! before any task or plugin work, and a violation is `-32602` with the reason.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::A2aError;
use crate::jsonrpc::Faults;
use crate::models::a2a::{Message, Role, Task, TaskState, known_state};

/// `SendMessage` / `SendStreamingMessage` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    pub message: Message,
    #[serde(default)]
    pub configuration: Option<SendMessageConfiguration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    #[serde(default)]
    pub history_length: Option<u32>,
    #[serde(default)]
    pub return_immediately: bool,
    /// A webhook stored for the task before it starts ([`super::push`]).
    #[serde(default)]
    pub task_push_notification_config: Option<super::push::PushConfig>,
}

/// `GetTask` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskRequest {
    pub id: String,
    #[serde(default)]
    pub history_length: Option<u32>,
}

/// `CancelTask` and `SubscribeToTask` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdRequest {
    pub id: String,
}

/// `ListTasks` params; every member may be left out.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListTasksRequest {
    pub context_id: String,
    #[serde(deserialize_with = "known_state")]
    pub status: Option<TaskState>,
    pub page_size: Option<u32>,
    pub page_token: String,
    pub history_length: Option<u32>,
    pub include_artifacts: Option<bool>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    pub tasks: Vec<Task>,
    pub next_page_token: String,
    pub page_size: u32,
    pub total_size: u32,
}

/// Read one method's params, `-32602` with serde's reason when they do not fit.
pub fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, A2aError> {
    let params = if params.is_null() {
        Value::Object(Map::new())
    } else {
        params
    };
    serde_json::from_value(params).map_err(|error| A2aError::invalid_params(error.to_string()))
}

/// What the node accepts in one inbound message.
pub struct MessageLimits {
    pub max_parts: usize,
    pub max_id_chars: usize,
}

/// Check a client's message: its role, at least one part and at most the
/// configured number, each with exactly one content, and ids of a sane size.
pub fn validate_message(message: &Message, limits: &MessageLimits) -> Result<(), A2aError> {
    if message.role != Some(Role::User) {
        return Err(A2aError::invalid_params("message.role must be ROLE_USER"));
    }
    if message.message_id.is_empty() {
        return Err(A2aError::invalid_params("message.messageId is required"));
    }
    if message.parts.is_empty() {
        return Err(A2aError::invalid_params("message.parts must not be empty"));
    }
    if message.parts.len() > limits.max_parts {
        return Err(A2aError::invalid_params(format!(
            "message has {} parts; at most {} are accepted",
            message.parts.len(),
            limits.max_parts
        )));
    }
    message.check_parts()?;
    for (name, id) in [
        ("messageId", Some(&message.message_id)),
        ("contextId", message.context_id.as_ref()),
        ("taskId", message.task_id.as_ref()),
    ] {
        if let Some(id) = id
            && (id.chars().count() > limits.max_id_chars || id.chars().any(char::is_control))
        {
            return Err(A2aError::invalid_params(format!(
                "message.{name} must be at most {} printable characters",
                limits.max_id_chars
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> MessageLimits {
        MessageLimits {
            max_parts: 2,
            max_id_chars: 16,
        }
    }

    fn message(value: Value) -> Message {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_message_needs_a_user_role_parts_within_bounds_and_one_content_each() {
        let good =
            json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}, {"data": {"a": 1}}]});
        assert!(validate_message(&message(good), &limits()).is_ok());
        for (bad, why) in [
            (
                json!({"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}),
                "role",
            ),
            (
                json!({"messageId": "m", "role": "ROLE_USER", "parts": []}),
                "empty",
            ),
            (
                json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a"}, {"text": "b"}, {"text": "c"}]}),
                "at most 2",
            ),
            (
                json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a", "url": "u"}]}),
                "exactly one",
            ),
            (
                json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"metadata": {}}]}),
                "exactly one",
            ),
            (
                json!({"messageId": "m", "contextId": "x".repeat(17), "role": "ROLE_USER", "parts": [{"text": "a"}]}),
                "contextId",
            ),
        ] {
            let error = validate_message(&message(bad), &limits()).unwrap_err();
            assert!(error.to_string().contains(why), "{error} lacks {why}");
        }
    }
}
