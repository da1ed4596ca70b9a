//! The node as an A2A 1.0 client (JSON-RPC binding, as a2a-sdk 1.3.0 speaks
//! it): what `agora-node a2a …` and plugins' outbound calls use.
//!
//! An agent is found through its card (`/.well-known/agent-card.json` under
//! the URL given); the card's JSON-RPC interface for protocol 1.x is the
//! endpoint. A card without one is an error rather than a guess at a path:
//! a guessed endpoint would send 1.0 requests to whatever answers there.
//! Every request carries `A2A-Version: 1.0`, since a 1.0 server reads a
//! request without it as 0.3. A JSON-RPC error (in a body or an SSE `error`
//! event) becomes [`A2aClientError::Rpc`] with its code, so a caller can tell
//! TaskNotFound (-32001) from the rest. Streams are read event by event, each
//! line and event bounded, with an idle limit between events instead of a
//! total one: an agent may work long, but not silently forever.
//!
//! The objects are the node's one A2A model ([`crate::models::a2a`]), read
//! leniently: states, roles and members the node does not know are kept and
//! written back out unchanged, so a plugin gets a peer's task as it was sent.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::http_client::{self, ClientError, StreamingResponse};
use super::sse::{self, SseParser};
use crate::jsonrpc::{self, ErrorObject};
pub use crate::models::a2a::StreamResponse as StreamEvent;
use crate::models::a2a::new_id;
pub use crate::models::a2a::{AgentCard, AgentInterface, AgentSkill, Message, Part, Task, TaskState};

pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// The protocol version this client speaks (sent as `A2A-Version`) and the node serves.
pub const VERSION: &str = "1.0";
pub const VERSION_HEADER: &str = "a2a-version";

pub const STATE_COMPLETED: &str = "TASK_STATE_COMPLETED";
pub const STATE_INPUT_REQUIRED: &str = "TASK_STATE_INPUT_REQUIRED";
pub const STATE_AUTH_REQUIRED: &str = "TASK_STATE_AUTH_REQUIRED";

#[derive(Debug, thiserror::Error)]
pub enum A2aClientError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{url} answered HTTP {status}: {body}")]
    Http { url: String, status: u16, body: String },
    #[error("{url} did not answer in A2A: {message}")]
    BadReply { url: String, message: String },
    #[error("JSON-RPC error {code}: {message}")]
    Rpc {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    #[error("the agent card at {url} offers no JSON-RPC interface for A2A 1.x (it offers: {offered})")]
    NoJsonRpcInterface { url: String, offered: String },
    #[error("the event stream from {url} broke: {reason}")]
    Stream { url: String, reason: String },
    #[error("{url} sent no event for {idle_ms} ms")]
    Idle { url: String, idle_ms: u64 },
}

/// How long and how much: `timeout` bounds a card fetch or a non-streaming
/// call as a whole, and a stream's wait for its headers and between events;
/// `max_response_bytes` bounds a body, and a stream's lines and events each.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub timeout: Duration,
    pub max_response_bytes: usize,
}

/// What `SendMessage` returns: a task, or, from an agent that answers at
/// once, a bare message. One per call, moved on at once: a box for the
/// larger task would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SendResult {
    Task(Task),
    Message(Message),
}

/// An approval the agent waits on (the data part Agora Node's A2A server
/// puts in an input-required status).
#[derive(Debug, Clone)]
pub struct PendingApproval {
    pub approval_id: String,
    pub question: String,
    /// `{approval_id, tool_name, parameters, risk_level, description}` as sent.
    pub details: Value,
}

impl Task {
    pub fn is_final(&self) -> bool {
        self.status.state.is_interrupted()
    }

    /// The artifacts' text, in order.
    pub fn artifact_text(&self) -> String {
        self.artifacts.iter().map(|a| parts_text(&a.parts)).collect()
    }

    pub fn pending_approval(&self) -> Option<PendingApproval> {
        if self.status.state != TaskState::InputRequired {
            return None;
        }
        let message = self.status.message.as_ref()?;
        let details = message
            .parts
            .iter()
            .filter_map(|part| part.data.as_ref())
            .find(|data| data.get("approval_id").is_some_and(Value::is_string))?;
        Some(PendingApproval {
            approval_id: details["approval_id"].as_str().unwrap_or_default().to_string(),
            question: parts_text(&message.parts),
            details: details.clone(),
        })
    }

    /// Fold a streamed event of this task into it.
    fn apply(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::Task(task) => *self = task.clone(),
            StreamEvent::Message(_) => {}
            StreamEvent::StatusUpdate(update) => {
                self.adopt_ids(&update.task_id, &update.context_id);
                self.status = update.status.clone();
            }
            StreamEvent::ArtifactUpdate(update) => {
                self.adopt_ids(&update.task_id, &update.context_id);
                let known = self
                    .artifacts
                    .iter_mut()
                    .find(|a| a.artifact_id == update.artifact.artifact_id);
                match known {
                    Some(artifact) if update.append => {
                        artifact.parts.extend(update.artifact.parts.iter().cloned())
                    }
                    Some(artifact) => *artifact = update.artifact.clone(),
                    None => self.artifacts.push(update.artifact.clone()),
                }
            }
        }
    }

    fn adopt_ids(&mut self, task_id: &str, context_id: &str) {
        if self.id.is_empty() {
            self.id = task_id.to_string();
        }
        if self.context_id.is_empty() {
            self.context_id = context_id.to_string();
        }
    }
}

fn parts_text(parts: &[Part]) -> String {
    parts.iter().filter_map(|p| p.text.as_deref()).collect()
}

/// A user message with `parts`, continuing `task_id` / `context_id` when given.
pub fn user_message(parts: Vec<Value>, task_id: Option<&str>, context_id: Option<&str>) -> Value {
    let mut message = json!({
        "messageId": new_id(),
        "role": "ROLE_USER",
        "parts": parts,
    });
    if let Some(id) = task_id {
        message["taskId"] = json!(id);
    }
    if let Some(id) = context_id {
        message["contextId"] = json!(id);
    }
    message
}

pub fn text_part(text: &str) -> Value {
    json!({ "text": text })
}

/// The data part that answers a pending approval.
pub fn approval_answer(approval_id: &str, approved: bool, feedback: Option<&str>) -> Value {
    let mut answer = json!({ "approval_id": approval_id, "approved": approved });
    if let Some(feedback) = feedback {
        answer["feedback"] = json!(feedback);
    }
    json!({ "data": answer })
}

/// The message a plugin's `host.outbound` call over A2A sends: its body is
/// `{"text": …, "data": …?, "context_id": …?, "task_id": …?}` (text or data
/// or both; the ids continue a context or a task, e.g. to answer an approval).
pub fn outbound_message(body: Value) -> Result<Value, String> {
    let Value::Object(mut fields) = body else {
        return Err("expected an object".into());
    };
    let mut string = |name: &str| match fields.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(format!("`{name}` must be a string")),
    };
    let text = string("text")?;
    let context_id = string("context_id")?;
    let task_id = string("task_id")?;
    let mut parts: Vec<Value> = text.as_deref().map(text_part).into_iter().collect();
    if let Some(data) = fields.remove("data").filter(|data| !data.is_null()) {
        parts.push(json!({ "data": data }));
    }
    if parts.is_empty() {
        return Err("give `text`, `data` or both".into());
    }
    Ok(user_message(parts, task_id.as_deref(), context_id.as_deref()))
}

/// Where an agent's card is: `base` plus [`CARD_PATH`], unless `base` names the card.
pub fn card_url(base: &str) -> String {
    if base.ends_with(CARD_PATH) {
        base.to_string()
    } else {
        format!("{}{CARD_PATH}", base.trim_end_matches('/'))
    }
}

/// One agent's JSON-RPC endpoint, reached within `allowed` when given
/// (plugins' calls) or anywhere (the operator's CLI).
pub struct Agent {
    pub card: AgentCard,
    pub endpoint: String,
    limits: Limits,
    allowed: Option<Vec<String>>,
}

impl Agent {
    /// Fetch the card under `base` and take its JSON-RPC 1.x interface.
    pub async fn resolve(
        base: &str,
        limits: Limits,
        allowed: Option<Vec<String>>,
    ) -> Result<Agent, A2aClientError> {
        let url = card_url(base);
        let card = fetch_card(&url, limits, allowed.as_deref()).await?;
        let endpoint = match card.jsonrpc_interface() {
            Some(interface) => interface.url.clone(),
            None => {
                let offered: Vec<String> = card
                    .supported_interfaces
                    .iter()
                    .map(|i| format!("{} {} at {}", i.protocol_binding, i.protocol_version, i.url))
                    .collect();
                let offered = if offered.is_empty() {
                    "none".to_string()
                } else {
                    offered.join(", ")
                };
                return Err(A2aClientError::NoJsonRpcInterface { url, offered });
            }
        };
        if let Some(allowed) = &allowed {
            http_client::check_allowed(&endpoint, allowed)?;
        }
        Ok(Agent {
            card,
            endpoint,
            limits,
            allowed,
        })
    }

    /// `SendMessage`: returns when the task is final or waits on input.
    pub async fn send(&self, message: Value) -> Result<SendResult, A2aClientError> {
        let result = self.call("SendMessage", json!({ "message": message })).await?;
        decode(&self.endpoint, "result", result)
    }

    /// `GetTask`.
    pub async fn get_task(&self, id: &str) -> Result<Task, A2aClientError> {
        let result = self.call("GetTask", json!({ "id": id })).await?;
        decode(&self.endpoint, "result", result)
    }

    /// `SendStreamingMessage`: the events as they come.
    pub async fn stream(&self, message: Value) -> Result<EventStream, A2aClientError> {
        let body = rpc_body("SendStreamingMessage", json!({ "message": message }));
        if let Some(allowed) = &self.allowed {
            http_client::check_allowed(&self.endpoint, allowed)?;
        }
        let mut response = http_client::open_stream(
            "POST",
            &self.endpoint,
            &headers("text/event-stream"),
            body,
            self.limits.timeout,
        )
        .await?;
        let mut stream = EventStream {
            url: self.endpoint.clone(),
            response: None,
            parser: SseParser::new(self.limits.max_response_bytes, self.limits.max_response_bytes),
            queued: VecDeque::new(),
            idle: self.limits.timeout,
            task: None,
            finished: false,
        };
        let is_sse = response
            .headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if is_sse && response.status == 200 {
            stream.response = Some(response);
        } else {
            // An error before the stream began comes as one JSON-RPC response.
            let body = read_all(&mut response, &self.endpoint, self.limits).await?;
            let result = read_rpc(&self.endpoint, response.status, &body)?;
            stream.queued.push_back(decode(&self.endpoint, "result", result)?);
        }
        Ok(stream)
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, A2aClientError> {
        let body = rpc_body(method, params);
        let response = exchange(
            "POST",
            &self.endpoint,
            &headers("application/json"),
            body,
            self.limits,
            self.allowed.as_deref(),
        )
        .await?;
        read_rpc(&self.endpoint, response.status, &response.body)
    }
}

/// `value` as the `T` it should be; `what` names it in the error.
fn decode<T: serde::de::DeserializeOwned>(url: &str, what: &str, value: Value) -> Result<T, A2aClientError> {
    serde_json::from_value(value).map_err(|e| A2aClientError::BadReply {
        url: url.to_string(),
        message: format!("unexpected {what}: {e}"),
    })
}

/// Fetch and read an agent card.
pub async fn fetch_card(
    url: &str,
    limits: Limits,
    allowed: Option<&[String]>,
) -> Result<AgentCard, A2aClientError> {
    let card = fetch_card_json(url, limits, allowed).await?;
    decode(url, "agent card", card)
}

/// Fetch an agent card as the agent wrote it.
pub async fn fetch_card_json(
    url: &str,
    limits: Limits,
    allowed: Option<&[String]>,
) -> Result<Value, A2aClientError> {
    let response = exchange(
        "GET",
        url,
        &[("accept", "application/json")],
        Vec::new(),
        limits,
        allowed,
    )
    .await?;
    if response.status != 200 {
        return Err(A2aClientError::Http {
            url: url.to_string(),
            status: response.status,
            body: excerpt(&response.body),
        });
    }
    match serde_json::from_slice(&response.body) {
        Ok(card @ Value::Object(_)) => Ok(card),
        _ => Err(A2aClientError::BadReply {
            url: url.to_string(),
            message: "the agent card is not a JSON object".into(),
        }),
    }
}

async fn exchange(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    limits: Limits,
    allowed: Option<&[String]>,
) -> Result<http_client::HttpResponse, ClientError> {
    let Limits {
        timeout,
        max_response_bytes: limit,
    } = limits;
    match allowed {
        Some(allowed) => {
            http_client::request_within(allowed, method, url, headers, body, timeout, limit).await
        }
        None => http_client::request(method, url, headers, body, timeout, limit).await,
    }
}

fn headers(accept: &'static str) -> [(&'static str, &'static str); 3] {
    [
        ("content-type", "application/json"),
        ("accept", accept),
        (VERSION_HEADER, VERSION),
    ]
}

fn rpc_body(method: &str, params: Value) -> Vec<u8> {
    jsonrpc::request(new_id(), method, Some(params))
        .to_string()
        .into_bytes()
}

/// The `result` of a JSON-RPC response, or its error. A JSON-RPC error is read
/// whatever the HTTP status; any other non-2xx answer is an HTTP error.
fn read_rpc(url: &str, status: u16, body: &[u8]) -> Result<Value, A2aClientError> {
    let bad = |message: &str| A2aClientError::BadReply {
        url: url.to_string(),
        message: message.to_string(),
    };
    let parsed = serde_json::from_slice::<Value>(body).ok();
    if let Some(error) = parsed.as_ref().and_then(|v| v.get("error")) {
        return Err(rpc_error(error).unwrap_or_else(|| bad("a JSON-RPC error without an integer code")));
    }
    if !(200..300).contains(&status) {
        return Err(A2aClientError::Http {
            url: url.to_string(),
            status,
            body: excerpt(body),
        });
    }
    match parsed {
        Some(Value::Object(mut response)) => response
            .remove("result")
            .ok_or_else(|| bad("a JSON-RPC response with neither result nor error")),
        _ => Err(bad("not a JSON-RPC response object")),
    }
}

/// A JSON-RPC error object as [`A2aClientError::Rpc`]; `None` unless it has an integer code.
fn rpc_error(error: &Value) -> Option<A2aClientError> {
    let ErrorObject { code, message, data } = ErrorObject::read(error)?;
    Some(A2aClientError::Rpc { code, message, data })
}

fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(512).collect()
}

async fn read_all(
    response: &mut StreamingResponse,
    url: &str,
    limits: Limits,
) -> Result<Vec<u8>, A2aClientError> {
    let mut body = Vec::new();
    while let Some(chunk) = next_chunk(response, url, limits.timeout).await? {
        if body.len() + chunk.len() > limits.max_response_bytes {
            return Err(ClientError::TooLarge {
                url: url.to_string(),
                limit: limits.max_response_bytes,
            }
            .into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

async fn next_chunk(
    response: &mut StreamingResponse,
    url: &str,
    idle: Duration,
) -> Result<Option<bytes::Bytes>, A2aClientError> {
    tokio::time::timeout(idle, response.chunk())
        .await
        .map_err(|_| A2aClientError::Idle {
            url: url.to_string(),
            idle_ms: idle.as_millis() as u64,
        })?
        .map_err(A2aClientError::from)
}

/// The events of one `SendStreamingMessage`, and the task they build up. It
/// ends when the server closes the stream or after the event that makes the
/// task final (or a bare message): nothing after that belongs to this call.
pub struct EventStream {
    url: String,
    response: Option<StreamingResponse>,
    parser: SseParser,
    queued: VecDeque<StreamEvent>,
    idle: Duration,
    task: Option<Task>,
    finished: bool,
}

impl EventStream {
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, A2aClientError> {
        loop {
            if self.finished {
                return Ok(None);
            }
            if let Some(event) = self.queued.pop_front() {
                self.observe(&event);
                return Ok(Some(event));
            }
            let Some(response) = self.response.as_mut() else {
                return Ok(None);
            };
            match next_chunk(response, &self.url, self.idle).await? {
                None => self.response = None,
                Some(bytes) => {
                    let events = self.parser.feed(&bytes).map_err(|e| A2aClientError::Stream {
                        url: self.url.clone(),
                        reason: e.to_string(),
                    })?;
                    for event in events {
                        let event = self.read_event(&event)?;
                        self.queued.push_back(event);
                    }
                }
            }
        }
    }

    /// The task as the events so far describe it.
    pub fn task(&self) -> Option<&Task> {
        self.task.as_ref()
    }

    fn observe(&mut self, event: &StreamEvent) {
        if let StreamEvent::Message(_) = event {
            self.finished = true;
        } else {
            let task = self.task.get_or_insert_with(Task::default);
            task.apply(event);
            self.finished = matches!(event, StreamEvent::StatusUpdate(_)) && task.is_final();
        }
        if self.finished {
            // Closes the connection: the server has nothing more for this call.
            self.response = None;
            self.queued.clear();
        }
    }

    fn read_event(&self, event: &sse::SseEvent) -> Result<StreamEvent, A2aClientError> {
        let bad = |message: String| A2aClientError::BadReply {
            url: self.url.clone(),
            message,
        };
        let value: Value =
            serde_json::from_str(&event.data).map_err(|e| bad(format!("an event that is not JSON: {e}")))?;
        if event.name == "error" {
            let error = value.get("error").unwrap_or(&value);
            return Err(rpc_error(error).unwrap_or_else(|| bad(format!("an error event: {}", event.data))));
        }
        let result = read_rpc(&self.url, 200, event.data.as_bytes())?;
        decode(&self.url, "event", result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_url_is_under_the_base_unless_given() {
        assert_eq!(card_url("http://h:1"), "http://h:1/.well-known/agent-card.json");
        assert_eq!(
            card_url("http://h:1/agents/x/"),
            "http://h:1/agents/x/.well-known/agent-card.json"
        );
        let card = "http://h:1/.well-known/agent-card.json";
        assert_eq!(card_url(card), card);
    }

    #[test]
    fn only_a_jsonrpc_1x_interface_is_picked() {
        let card: AgentCard = serde_json::from_value(json!({
            "name": "x",
            "supportedInterfaces": [
                {"url": "http://h/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
                {"url": "http://h/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3.0"},
                {"url": "http://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.2"},
            ]
        }))
        .unwrap();
        assert_eq!(card.jsonrpc_interface().unwrap().url, "http://h/a2a");
        let legacy: AgentCard = serde_json::from_value(json!({"name": "x", "url": "http://h/"})).unwrap();
        assert!(legacy.jsonrpc_interface().is_none());
    }

    #[test]
    fn json_rpc_errors_keep_their_code_whatever_the_http_status() {
        let body = br#"{"jsonrpc":"2.0","id":"1","error":{"code":-32001,"message":"Task not found"}}"#;
        for status in [200, 400, 500] {
            match read_rpc("u", status, body) {
                Err(A2aClientError::Rpc { code, message, .. }) => {
                    assert_eq!((code, message.as_str()), (-32001, "Task not found"))
                }
                other => panic!("expected a JSON-RPC error, got {other:?}"),
            }
        }
        assert!(matches!(
            read_rpc("u", 413, b"too big"),
            Err(A2aClientError::Http { status: 413, .. })
        ));
        assert!(matches!(
            read_rpc("u", 200, b"[]"),
            Err(A2aClientError::BadReply { .. })
        ));
        assert!(matches!(
            read_rpc("u", 200, br#"{"id":1}"#),
            Err(A2aClientError::BadReply { .. })
        ));
        assert_eq!(
            read_rpc("u", 200, br#"{"result":{"a":1}}"#).unwrap(),
            json!({"a": 1})
        );
    }

    fn task_event(value: Value) -> StreamEvent {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn streamed_events_build_the_task_and_its_pending_approval() {
        // A continued task's stream starts with a status update, not a task.
        let mut task = Task::default();
        task.apply(&task_event(
            json!({"statusUpdate": {"taskId": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_WORKING"}}}),
        ));
        for (text, append) in [("a", false), ("b", true), ("c", true)] {
            task.apply(&task_event(
                json!({"artifactUpdate": {"taskId": "t", "contextId": "c",
                "artifact": {"artifactId": "x", "parts": [{"text": text}]}, "append": append}}),
            ));
        }
        assert_eq!((task.id.as_str(), task.context_id.as_str()), ("t", "c"));
        assert_eq!(task.artifact_text(), "abc");
        assert!(!task.is_final() && task.pending_approval().is_none());
        task.apply(&task_event(
            json!({"statusUpdate": {"taskId": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"role": "ROLE_AGENT",
                "parts": [{"text": "May I?"}, {"data": {"approval_id": "ap", "tool_name": "x"}}]}}}}),
        ));
        let pending = task.pending_approval().unwrap();
        assert!(task.is_final());
        assert_eq!(
            (pending.approval_id.as_str(), pending.question.as_str()),
            ("ap", "May I?")
        );
        assert_eq!(pending.details["tool_name"], "x");
        // A replacing (non-append) chunk replaces the artifact.
        task.apply(&task_event(
            json!({"artifactUpdate": {"taskId": "t", "contextId": "c",
            "artifact": {"artifactId": "x", "parts": [{"text": "new"}]}}}),
        ));
        assert_eq!(task.artifact_text(), "new");
    }

    #[test]
    fn a_task_round_trips_what_the_client_does_not_read() {
        let wire = json!({"id": "t", "contextId": "c", "history": [{"role": "ROLE_USER"}],
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:00Z",
                "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi", "mediaType": "text/plain"}]}},
            "artifacts": [{"artifactId": "a", "name": "answer", "parts": [{"data": {"k": 1}}]}]});
        let task: Task = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(serde_json::to_value(&task).unwrap(), wire);
    }

    #[test]
    fn an_outbound_body_becomes_a_user_message() {
        let message = outbound_message(json!({"text": "hi", "data": {"k": 1}, "context_id": "c"})).unwrap();
        assert_eq!(message["parts"], json!([{"text": "hi"}, {"data": {"k": 1}}]));
        assert_eq!(
            (message["contextId"].as_str(), message.get("taskId")),
            (Some("c"), None)
        );
        let answer =
            outbound_message(json!({"data": {"approval_id": "a", "approved": true}, "task_id": "t"}));
        assert_eq!(answer.unwrap()["taskId"], "t");
        assert!(outbound_message(json!({})).is_err());
        assert!(outbound_message(json!({"text": 3})).is_err());
        assert!(outbound_message(json!("hi")).is_err());
    }

    #[test]
    fn an_approval_answer_carries_feedback_only_when_given() {
        assert_eq!(
            approval_answer("a", false, Some("no")),
            json!({"data": {"approval_id": "a", "approved": false, "feedback": "no"}})
        );
        assert_eq!(
            approval_answer("a", true, None),
            json!({"data": {"approval_id": "a", "approved": true}})
        );
        let message = user_message(vec![text_part("hi")], Some("t"), None);
        assert_eq!(
            (message["taskId"].as_str(), message.get("contextId")),
            (Some("t"), None)
        );
        assert_eq!(message["role"], "ROLE_USER");
    }
}
