//! The A2A 1.0 objects as ProtoJSON (the JSON form of the 1.0 proto, which
//! `a2a-sdk` 1.3.0 writes and parses): camelCase members, enum values by
//! *name* (`TASK_STATE_WORKING`, `ROLE_AGENT`), RFC 3339 `Z` timestamps, and a
//! Part that is one of `text`, `data`, `url` or `raw` (no `kind`). The node's
//! A2A server (`transports::a2a`) and its A2A client (`peers::a2a`) both use
//! these types.
//!
//! Reading is lenient, as the client needs it: a peer newer than this node
//! may send states, roles and members it does not know, and the client hands
//! a peer's task on to a plugin as the peer wrote it. So an unknown enum name
//! reads as `Other(name)` and writes back as itself, and an object's unknown
//! members are kept in its `rest` and written back. Members a peer leaves out
//! read as their ProtoJSON defaults, and empty ones are not written.
//!
//! The strict reading a server needs is on top of that: [`known_state`] for
//! a state a client names, [`Message::check_parts`] for the one-content rule,
//! and [`Message::forget_unknown`] for a server that ignores what it does not
//! know rather than storing it. The server maps their errors to its protocol.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A proto enum read and written by its value names; a name this node does
/// not know is kept as `Other(name)`, so it round-trips.
macro_rules! proto_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $wire:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A name this node does not know, as the peer wrote it.
            Other(String),
        }

        impl $name {
            /// The names this node knows, in the proto's order.
            pub const KNOWN: &'static [&'static str] = &[$($wire),+];

            pub fn from_name(name: &str) -> $name {
                match name {
                    $($wire => $name::$variant,)+
                    other => $name::Other(other.to_string()),
                }
            }

            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $wire,)+
                    $name::Other(name) => name,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<$name, D::Error> {
                let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
                Ok($name::from_name(&name))
            }
        }
    };
}

proto_enum! {
    /// Task states, by their proto names.
    TaskState {
        Submitted = "TASK_STATE_SUBMITTED",
        Working = "TASK_STATE_WORKING",
        InputRequired = "TASK_STATE_INPUT_REQUIRED",
        Completed = "TASK_STATE_COMPLETED",
        Failed = "TASK_STATE_FAILED",
        Canceled = "TASK_STATE_CANCELED",
        Rejected = "TASK_STATE_REJECTED",
        AuthRequired = "TASK_STATE_AUTH_REQUIRED",
    }
}

proto_enum! {
    /// Who wrote a message.
    Role {
        User = "ROLE_USER",
        Agent = "ROLE_AGENT",
    }
}

impl TaskState {
    /// A state no message can change any more.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// Where `SendMessage` returns and a stream closes: the end, or the client's turn.
    pub fn is_interrupted(&self) -> bool {
        self.is_terminal() || matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

/// The state of a status a peer sent without one: the empty name, which is
/// no known state, and which the client has always written back as `""`.
impl Default for TaskState {
    fn default() -> TaskState {
        TaskState::Other(String::new())
    }
}

/// The strict read of a state a client names (e.g. `ListTasks`' filter), for
/// `#[serde(deserialize_with)]`: a name this node does not know is refused
/// as serde refuses an unknown variant, naming the known ones.
pub fn known_state<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<TaskState>, D::Error> {
    match Option::<TaskState>::deserialize(deserializer)? {
        Some(TaskState::Other(name)) => Err(serde::de::Error::unknown_variant(&name, TaskState::KNOWN)),
        state => Ok(state),
    }
}

/// What the strict read of a message refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("message.parts[{index}] must have exactly one of text, data, url or raw")]
    PartContents { index: usize },
}

/// One piece of content: one of text, data, url or raw (checked where read strictly).
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
    /// Members this node does not know.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
    /// Members this node does not know.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Message {
    /// An agent's message of one task.
    pub fn agent(task: &Task, parts: Vec<Part>) -> Message {
        Message {
            message_id: new_id(),
            context_id: Some(task.context_id.clone()),
            task_id: Some(task.id.clone()),
            role: Some(Role::Agent),
            parts,
            ..Message::default()
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

    /// The strict read of the parts: each has exactly one content.
    pub fn check_parts(&self) -> Result<(), Invalid> {
        match self.parts.iter().position(|part| part.contents() != 1) {
            Some(index) => Err(Invalid::PartContents { index }),
            None => Ok(()),
        }
    }

    /// Drop the members this node does not know, of the message and its
    /// parts: a server ignores them rather than keeping what a client made up.
    pub fn forget_unknown(&mut self) {
        self.rest.clear();
        for part in &mut self.parts {
            part.rest.clear();
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    #[serde(default)]
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timestamp: String,
    /// Members this node does not know.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    #[serde(default)]
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Members this node does not know.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Members this node does not know.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    #[serde(default)]
    pub task_id: String,
    #[serde(default)]
    pub context_id: String,
    pub status: TaskStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    #[serde(default)]
    pub task_id: String,
    #[serde(default)]
    pub context_id: String,
    pub artifact: Artifact,
    #[serde(default)]
    pub append: bool,
    #[serde(default)]
    pub last_chunk: bool,
}

/// One event of a stream (`StreamResponse`): exactly one member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    /// A bare message: an agent that answers at once, without a task.
    Message(Message),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

impl StreamResponse {
    /// The state this event leaves its task in, if it says.
    pub fn state(&self) -> Option<&TaskState> {
        match self {
            StreamResponse::Task(task) => Some(&task.status.state),
            StreamResponse::StatusUpdate(update) => Some(&update.status.state),
            StreamResponse::Message(_) | StreamResponse::ArtifactUpdate(_) => None,
        }
    }
}

/// An agent's card (A2A 1.0 §"Agent Discovery"): what the node serves about
/// itself and reads about a peer. Members left out read as empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub supported_interfaces: Vec<AgentInterface>,
    #[serde(default)]
    pub capabilities: Value,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_input_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_output_modes: Vec<String>,
    #[serde(default)]
    pub skills: Vec<AgentSkill>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_schemes: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_requirements: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    pub url: String,
    #[serde(default)]
    pub protocol_binding: String,
    #[serde(default)]
    pub protocol_version: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_modes: Vec<String>,
}

impl AgentCard {
    /// The first JSON-RPC interface speaking protocol 1.x.
    pub fn jsonrpc_interface(&self) -> Option<&AgentInterface> {
        self.supported_interfaces.iter().find(|interface| {
            interface.protocol_binding.eq_ignore_ascii_case("JSONRPC")
                && interface.protocol_version.split('.').next() == Some("1")
        })
    }
}

/// Now, as the RFC 3339 `Z` timestamp ProtoJSON writes.
pub fn timestamp_now() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// A fresh message, task, artifact or request id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    struct Filter {
        #[serde(default, deserialize_with = "known_state")]
        status: Option<TaskState>,
    }

    #[test]
    fn an_unknown_state_round_trips_through_the_lenient_read_and_the_strict_read_refuses_it() {
        let wire = json!({"state": "TASK_STATE_DREAMING", "timestamp": "2026-11-25T03:00:00Z"});
        let status: TaskStatus = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(status.state, TaskState::Other("TASK_STATE_DREAMING".into()));
        assert!(!status.state.is_interrupted());
        assert_eq!(serde_json::to_value(&status).unwrap(), wire);

        let refused = serde_json::from_value::<Filter>(json!({"status": "TASK_STATE_DREAMING"})).unwrap_err();
        assert!(
            refused
                .to_string()
                .starts_with("unknown variant `TASK_STATE_DREAMING`, expected one of `TASK_STATE_SUBMITTED`"),
            "{refused}"
        );
        let known = serde_json::from_value::<Filter>(json!({"status": "TASK_STATE_WORKING"})).unwrap();
        assert_eq!(known.status, Some(TaskState::Working));
        assert!(
            serde_json::from_value::<Filter>(json!({}))
                .unwrap()
                .status
                .is_none()
        );
    }

    #[test]
    fn a_part_with_two_contents_or_none_is_refused_by_the_strict_read_with_its_index() {
        let message: Message = serde_json::from_value(json!({"messageId": "m", "role": "ROLE_USER",
            "parts": [{"text": "a"}, {"text": "b", "url": "u"}]}))
        .unwrap();
        let refused = message.check_parts().unwrap_err();
        assert_eq!(refused, Invalid::PartContents { index: 1 });
        assert_eq!(
            refused.to_string(),
            "message.parts[1] must have exactly one of text, data, url or raw"
        );
        let empty: Message = serde_json::from_value(json!({"parts": [{"metadata": {}}]})).unwrap();
        assert_eq!(empty.check_parts(), Err(Invalid::PartContents { index: 0 }));
        let good: Message =
            serde_json::from_value(json!({"parts": [{"text": "a"}, {"raw": "AA=="}]})).unwrap();
        assert!(good.check_parts().is_ok());
    }

    #[test]
    fn unknown_members_of_a_task_are_kept_by_the_read_and_forgotten_on_request() {
        let wire = json!({"id": "t", "contextId": "c", "kind": "task", "future": {"x": 1},
            "status": {"state": "TASK_STATE_COMPLETED", "since": 3,
                "message": {"messageId": "m", "role": "ROLE_AGENT", "mood": "calm",
                    "parts": [{"text": "hi", "mediaType": "text/plain", "lang": "en"}]}},
            "history": [{"role": "ROLE_USER"}],
            "artifacts": [{"artifactId": "a", "parts": [{"data": {"k": 1}}], "extra": true}]});
        let task: Task = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(task.rest["future"], json!({"x": 1}));
        assert_eq!(serde_json::to_value(&task).unwrap(), wire);

        let mut message = task.status.message.clone().unwrap();
        message.forget_unknown();
        assert_eq!(
            serde_json::to_value(&message).unwrap(),
            json!({"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi", "mediaType": "text/plain"}]})
        );
    }

    #[test]
    fn an_unknown_role_round_trips_and_a_known_one_reads_as_itself() {
        let message: Message = serde_json::from_value(json!({"role": "ROLE_OBSERVER"})).unwrap();
        assert_eq!(message.role, Some(Role::Other("ROLE_OBSERVER".into())));
        assert_eq!(
            serde_json::to_value(&message).unwrap(),
            json!({"role": "ROLE_OBSERVER"})
        );
        assert_eq!(Role::from_name("ROLE_AGENT"), Role::Agent);
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
                rest: Map::new(),
            },
            artifacts: vec![Artifact {
                artifact_id: "a".into(),
                name: Some("answer".into()),
                parts: vec![Part::text("hi")],
                rest: Map::new(),
            }],
            history: Vec::new(),
            metadata: None,
            rest: Map::new(),
        };
        assert_eq!(
            serde_json::to_value(StreamResponse::Task(task)).unwrap(),
            json!({"task": {"id": "t", "contextId": "c",
                "status": {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": "2026-11-25T03:00:00Z"},
                "artifacts": [{"artifactId": "a", "name": "answer", "parts": [{"text": "hi"}]}]}})
        );
    }

    #[test]
    fn a_view_keeps_the_last_messages_asked_for() {
        let mut task: Task = serde_json::from_value(json!({"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "x"}}))
        .unwrap();
        for n in 0..3 {
            task.history.push(
                serde_json::from_value::<Message>(
                    json!({"messageId": format!("m{n}"), "role": "ROLE_USER", "parts": [{"text": "a"}]}),
                )
                .unwrap(),
            );
        }
        let view = task.view(Some(2), true);
        assert_eq!(view.history.len(), 2);
        assert_eq!(view.history[0].message_id, "m1");
        assert_eq!(task.view(None, true).history.len(), 3);
        assert!(task.view(Some(0), true).history.is_empty());
    }
}
