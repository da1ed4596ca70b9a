//! The A2A 1.0 objects as ProtoJSON (the JSON form of the 1.0 proto, which the
//! `a2a-sdk` 1.3.0 client parses): camelCase members, enum values by *name*
//! (`TASK_STATE_WORKING`, `ROLE_AGENT`), RFC 3339 `Z` timestamps, and a Part
//! that is exactly one of `text`, `data`, `url` or `raw` (no `kind`).
//!
//! Inbound, members the node does not know are ignored (as the SDK's server
//! does, for forward compatibility); what it does read is validated here,
//! before any task or plugin work, and a violation is `-32602` with the reason.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::A2aError;
use crate::jsonrpc::Faults;

/// Task states, by their proto names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    /// A state no message can change any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// Where `SendMessage` returns and a stream closes: the end, or the client's turn.
    pub fn is_interrupted(self) -> bool {
        self.is_terminal() || matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    #[serde(rename = "ROLE_USER")]
    User,
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

/// One piece of content. Validated to carry exactly one of the four contents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Bytes, base64 as ProtoJSON writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl Part {
    pub fn text(text: impl Into<String>) -> Part {
        Part {
            text: Some(text.into()),
            ..Part::default()
        }
    }

    pub fn data(data: Value) -> Part {
        Part {
            data: Some(data),
            ..Part::default()
        }
    }

    fn contents(&self) -> usize {
        [
            self.text.is_some(),
            self.data.is_some(),
            self.url.is_some(),
            self.raw.is_some(),
        ]
        .into_iter()
        .filter(|present| *present)
        .count()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub role: Role,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

impl Message {
    /// An agent's message of one task.
    pub fn agent(task: &Task, parts: Vec<Part>) -> Message {
        Message {
            message_id: new_id(),
            context_id: Some(task.context_id.clone()),
            task_id: Some(task.id.clone()),
            role: Role::Agent,
            parts,
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        }
    }

    /// The message's text parts, joined: what the assistant plugin reads as `content`.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .parts
            .iter()
            .filter_map(|part| part.text.as_deref())
            .collect();
        texts.join("\n")
    }

    /// The first data part's object, if any.
    pub fn data(&self) -> Option<&Map<String, Value>> {
        self.parts.iter().find_map(|part| part.data.as_ref()?.as_object())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    pub timestamp: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Task {
    /// The task as a reader asked for it: the last `history_length` messages
    /// (all when not given), artifacts only when wanted.
    pub fn view(&self, history_length: Option<u32>, artifacts: bool) -> Task {
        self.clone().into_view(history_length, artifacts)
    }

    /// [`Task::view`] of a task the caller no longer needs, without a copy.
    pub fn into_view(self, history_length: Option<u32>, artifacts: bool) -> Task {
        let mut view = self;
        if let Some(length) = history_length {
            let keep = (length as usize).min(view.history.len());
            view.history.drain(..view.history.len() - keep);
        }
        if !artifacts {
            view.artifacts.clear();
        }
        view
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    pub append: bool,
    pub last_chunk: bool,
}

/// One event of a stream (`StreamResponse`): exactly one member.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

impl StreamResponse {
    /// The state this event leaves its task in, if it says.
    pub fn state(&self) -> Option<TaskState> {
        match self {
            StreamResponse::Task(task) => Some(task.status.state),
            StreamResponse::StatusUpdate(update) => Some(update.status.state),
            StreamResponse::ArtifactUpdate(_) => None,
        }
    }
}

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

/// `ListTasks` params.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    #[serde(default)]
    pub context_id: String,
    #[serde(default)]
    pub status: Option<TaskState>,
    #[serde(default)]
    pub page_size: Option<u32>,
    #[serde(default)]
    pub page_token: String,
    #[serde(default)]
    pub history_length: Option<u32>,
    #[serde(default)]
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
    if message.role != Role::User {
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
    if let Some(index) = message.parts.iter().position(|part| part.contents() != 1) {
        return Err(A2aError::invalid_params(format!(
            "message.parts[{index}] must have exactly one of text, data, url or raw"
        )));
    }
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

/// Now, as the RFC 3339 `Z` timestamp ProtoJSON writes.
pub fn timestamp_now() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
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
    fn a_task_is_written_with_enum_names_camel_case_and_one_content_per_part() {
        let task = Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: None,
                timestamp: "2026-11-25T03:00:00Z".into(),
            },
            artifacts: vec![Artifact {
                artifact_id: "a".into(),
                name: Some("answer".into()),
                parts: vec![Part::text("hi")],
            }],
            history: Vec::new(),
            metadata: None,
        };
        assert_eq!(
            serde_json::to_value(StreamResponse::Task(task)).unwrap(),
            json!({"task": {"id": "t", "contextId": "c",
                "status": {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": "2026-11-25T03:00:00Z"},
                "artifacts": [{"artifactId": "a", "name": "answer", "parts": [{"text": "hi"}]}]}})
        );
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

    #[test]
    fn a_view_keeps_the_last_messages_asked_for() {
        let mut task: Task = serde_json::from_value(json!({"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "x"}}))
        .unwrap();
        for n in 0..3 {
            task.history.push(message(
                json!({"messageId": format!("m{n}"), "role": "ROLE_USER", "parts": [{"text": "a"}]}),
            ));
        }
        let view = task.view(Some(2), true);
        assert_eq!(view.history.len(), 2);
        assert_eq!(view.history[0].message_id, "m1");
        assert_eq!(task.view(None, true).history.len(), 3);
        assert!(task.view(Some(0), true).history.is_empty());
    }
}
