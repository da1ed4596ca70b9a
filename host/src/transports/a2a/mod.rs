//! Agent2Agent (A2A) 1.0, JSON-RPC binding, as the `a2a-sdk` 1.3.0 client
//! speaks it (where the SDK and the specification differ, the SDK wins). The
//! agent is a plugin: the HAI assistant by default, with the host's tools and
//! approvals, so an A2A client gets what a human in the HAI chat gets.
//!
//! - [`card`]: `GET /.well-known/agent-card.json` (§"Agent Discovery").
//! - this module: `POST {a2a.path}` (§"JSON-RPC Protocol Binding"): the
//!   JSON-RPC envelope, the `A2A-Version` header (§"Versioning"), and the
//!   methods `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`,
//!   `CancelTask`, `SubscribeToTask` (§"Core Operations"); streams are SSE,
//!   one JSON-RPC response per event.
//! - [`wire`]: the 1.0 objects as ProtoJSON, and what an inbound message must be.
//! - [`state`]: running tasks, stored tasks and contexts, the bounds.
//! - [`run`]: one task's plugin call, its events, and the host's approvals.
//! - [`error`]: [`A2aError`], the one place errors become JSON-RPC errors.
//!
//! Choices the issue left to us, documented in the README:
//! - a request without `A2A-Version` is served as 1.0 (curl-friendly; the SDK
//!   always sends it); another major (`0.3`, `99.0`) gets `-32009`;
//! - `ListTasks` needs a `contextId`: a context id is the capability to read
//!   its tasks, and an open port must not list everyone's conversations;
//! - a continued task is answered on the node that runs it; a node of a fleet
//!   that does not run it answers `-32004`.

mod card;
pub mod error;
mod run;
mod state;
pub mod wire;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use self::error::A2aError;
use self::state::{A2a, Shared, state_name};
use self::wire::{
    GetTaskRequest, ListTasksRequest, ListTasksResponse, Message, MessageLimits, SendMessageRequest,
    StreamResponse, Task, TaskIdRequest, TaskState, TaskStatus, VERSION_HEADER,
};
use crate::node::state::NodeState;

pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// How long `CancelTask` waits for the plugin call to stop before answering.
const CANCEL_WAIT: Duration = Duration::from_secs(5);
const MAX_ID_CHARS: usize = 128;
const DEFAULT_PAGE_SIZE: u32 = 50;
const MAX_PAGE_SIZE: u32 = 100;

pub fn router(node: NodeState) -> Router {
    let path = node.config.a2a.path.trim_end_matches('/').to_string();
    let path = if path.is_empty() { "/".to_string() } else { path };
    let limit = node.config.a2a.max_body_bytes;
    let shared = A2a::new(node);
    Router::new()
        .route(CARD_PATH, get(agent_card))
        .route(&path, post(rpc).layer(DefaultBodyLimit::max(limit)))
        .with_state(shared)
}

async fn agent_card(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let host = headers.get(header::HOST).and_then(|value| value.to_str().ok());
    axum::Json(card::agent_card(&shared.node, host)).into_response()
}

/// One JSON-RPC request, read as the SDK's server reads it.
async fn rpc(
    State(shared): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let raw = match raw {
        Ok(raw) => raw,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let error = A2aError::InvalidRequest(format!(
                "Payload too large: the limit is {} bytes",
                shared.node.config.a2a.max_body_bytes
            ));
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                axum::Json(error.response(&Value::Null)),
            )
                .into_response();
        }
        Err(rejection) => {
            return reply_error(
                &Value::Null,
                A2aError::InvalidRequest(format!("unreadable body: {rejection}")),
            );
        }
    };
    let body: Value = match serde_json::from_slice(&raw) {
        Ok(body) => body,
        Err(error) => return reply_error(&Value::Null, A2aError::Parse(error.to_string())),
    };
    let Value::Object(mut request) = body else {
        let why = if body.is_array() {
            "Batch requests are not supported"
        } else {
            "a request must be a JSON object"
        };
        return reply_error(&Value::Null, A2aError::InvalidRequest(why.into()));
    };
    let id = request.remove("id").unwrap_or(Value::Null);
    let id_ok = match &id {
        Value::Null | Value::String(_) => true,
        Value::Number(number) => number.is_i64() || number.is_u64(),
        _ => false,
    };
    if !id_ok {
        return reply_error(
            &Value::Null,
            A2aError::InvalidRequest("id must be a string, integer, or null".into()),
        );
    }
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return reply_error(
            &id,
            A2aError::InvalidRequest("'jsonrpc' must be exactly '2.0'".into()),
        );
    }
    let Some(method) = request.get("method").and_then(Value::as_str).map(str::to_string) else {
        return reply_error(&id, A2aError::InvalidRequest("Method is required".into()));
    };
    if !METHODS.contains(&method.as_str()) {
        return reply_error(&id, A2aError::MethodNotFound(truncate(&method)));
    }
    if let Err(error) = check_version(&headers) {
        return reply_error(&id, error);
    }
    let params = request.remove("params").unwrap_or(Value::Null);
    let call = Request {
        shared,
        id: id.clone(),
        client: peer.ip(),
    };
    let answer = match method.as_str() {
        "SendMessage" => call.send_message(params).await,
        "SendStreamingMessage" => call.send_streaming_message(params).await,
        "GetTask" => call.get_task(params).await,
        "ListTasks" => call.list_tasks(params).await,
        "CancelTask" => call.cancel_task(params).await,
        "SubscribeToTask" => call.subscribe(params).await,
        _ => Err(A2aError::Unsupported(format!("{method} is not supported"))),
    };
    match answer {
        Ok(Answer::Result(result)) => {
            axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
        }
        Ok(Answer::Stream(stream)) => stream,
        Err(error) => reply_error(&id, error),
    }
}

const METHODS: [&str; 10] = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
];

fn reply_error(id: &Value, error: A2aError) -> Response {
    axum::Json(error.response(id)).into_response()
}

fn truncate(text: &str) -> String {
    text.chars().take(MAX_ID_CHARS).collect()
}

/// `A2A-Version`: 1.x is served, and so is a request without it.
fn check_version(headers: &HeaderMap) -> Result<(), A2aError> {
    let Some(value) = headers.get(VERSION_HEADER) else {
        return Ok(());
    };
    let version = value.to_str().unwrap_or("").trim();
    if version.is_empty() {
        return Ok(());
    }
    let major = version.split('.').next().unwrap_or("");
    if major == "1" {
        Ok(())
    } else {
        Err(A2aError::VersionNotSupported(truncate(version)))
    }
}

enum Answer {
    Result(Value),
    Stream(Response),
}

struct Request {
    shared: Shared,
    id: Value,
    client: std::net::IpAddr,
}

impl Request {
    fn limits(&self) -> MessageLimits {
        MessageLimits {
            max_parts: self.shared.node.config.a2a.max_parts_per_message,
            max_id_chars: MAX_ID_CHARS,
        }
    }

    async fn send_message(self, params: Value) -> Result<Answer, A2aError> {
        let request: SendMessageRequest = wire::params(params)?;
        let configuration = request.configuration.unwrap_or_default();
        let (task_id, events) = self.start_or_resume(request.message).await?;
        if !configuration.return_immediately {
            self.until_interrupted(events).await;
        }
        let task = self.task(&task_id).await?;
        let task = task.view(configuration.history_length, true);
        Ok(Answer::Result(json!({ "task": task })))
    }

    async fn send_streaming_message(self, params: Value) -> Result<Answer, A2aError> {
        let request: SendMessageRequest = wire::params(params)?;
        let (task_id, events) = self.start_or_resume(request.message).await?;
        let _ = task_id;
        Ok(Answer::Stream(self.stream(events)))
    }

    async fn get_task(self, params: Value) -> Result<Answer, A2aError> {
        let request: GetTaskRequest = wire::params(params)?;
        let task = self.task(&request.id).await?;
        Ok(Answer::Result(serde_json::to_value(
            task.view(request.history_length, true),
        )?))
    }

    async fn list_tasks(self, params: Value) -> Result<Answer, A2aError> {
        let request: ListTasksRequest = wire::params(params)?;
        if request.context_id.is_empty() {
            return Err(A2aError::InvalidParams(
                "contextId is required: a context's id is what lets a client read its tasks".into(),
            ));
        }
        let page_size = request.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
        if page_size == 0 || page_size > MAX_PAGE_SIZE {
            return Err(A2aError::InvalidParams(format!(
                "pageSize must be between 1 and {MAX_PAGE_SIZE}"
            )));
        }
        // Newest first; the page token is the id of the last task of the previous page.
        let mut ids = self.shared.context_tasks(&request.context_id).await?;
        ids.reverse();
        let mut tasks = Vec::with_capacity(ids.len());
        for id in &ids {
            if let Some(task) = self.shared.load(id).await?
                && request.status.is_none_or(|state| state == task.status.state)
            {
                tasks.push(task);
            }
        }
        let total = tasks.len();
        let start = if request.page_token.is_empty() {
            0
        } else {
            tasks
                .iter()
                .position(|task| task.id == request.page_token)
                .map(|index| index + 1)
                .ok_or_else(|| A2aError::InvalidParams("pageToken is not one this node gave".into()))?
        };
        let end = (start + page_size as usize).min(total);
        let artifacts = request.include_artifacts.unwrap_or(false);
        let page: Vec<Task> = tasks[start..end]
            .iter()
            .map(|task| task.view(request.history_length, artifacts))
            .collect();
        let next_page_token = if end < total {
            page.last().map(|task| task.id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Answer::Result(serde_json::to_value(ListTasksResponse {
            tasks: page,
            next_page_token,
            page_size,
            total_size: total as u32,
        })?))
    }

    async fn cancel_task(self, params: Value) -> Result<Answer, A2aError> {
        let request: TaskIdRequest = wire::params(params)?;
        if let Some(live) = self.shared.live(&request.id) {
            let mut events = live
                .cancel()
                .map_err(|state| A2aError::TaskNotCancelable(state_name(state)))?;
            let _ = tokio::time::timeout(CANCEL_WAIT, async {
                loop {
                    match events.recv().await {
                        Ok(event) if event.state().is_some_and(TaskState::is_terminal) => break,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => break,
                    }
                }
            })
            .await;
            return Ok(Answer::Result(serde_json::to_value(
                self.task(&request.id).await?,
            )?));
        }
        let task = self.task(&request.id).await?;
        if task.status.state.is_terminal() {
            return Err(A2aError::TaskNotCancelable(state_name(task.status.state)));
        }
        Err(A2aError::Unsupported(format!(
            "task {} runs on another node of this fleet; cancel it there",
            request.id
        )))
    }

    async fn subscribe(self, params: Value) -> Result<Answer, A2aError> {
        let request: TaskIdRequest = wire::params(params)?;
        let Some(live) = self.shared.live(&request.id) else {
            let task = self.task(&request.id).await?;
            return Err(A2aError::Unsupported(format!(
                "task {} is {}; only a running task can be subscribed to",
                task.id,
                state_name(task.status.state)
            )));
        };
        Ok(Answer::Stream(self.stream(live.watch())))
    }

    async fn task(&self, id: &str) -> Result<Task, A2aError> {
        self.shared
            .load(id)
            .await?
            .ok_or_else(|| A2aError::TaskNotFound(truncate(id)))
    }

    /// A new task for a message without `taskId`; else the answer to the
    /// task's pending approval. Either way: the task, and its events from then.
    async fn start_or_resume(&self, mut message: Message) -> Result<(String, Watched), A2aError> {
        wire::validate_message(&message, &self.limits())?;
        if let Some(task_id) = message.task_id.clone() {
            return self.resume(&task_id, message).await;
        }
        let shared = &self.shared;
        let slot = shared.reserve(self.client)?;
        let context_id = message.context_id.clone().unwrap_or_else(wire::new_id);
        let task_id = wire::new_id();
        message.context_id = Some(context_id.clone());
        message.task_id = Some(task_id.clone());
        let task = Task {
            id: task_id.clone(),
            context_id: context_id.clone(),
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: wire::timestamp_now(),
            },
            artifacts: Vec::new(),
            history: vec![message.clone()],
            metadata: None,
        };
        shared.add_to_context(&context_id, &task_id).await?;
        shared.save(&task).await?;
        run::append(
            shared,
            &context_id,
            "user",
            json!({"content": message.text(), "task_id": task_id}),
        )
        .await?;
        shared.node.store.commit().await?;
        let live = shared.insert_live(task);
        let watched = live.watch();
        tokio::spawn(run::run(shared.clone(), live, slot));
        Ok((task_id, watched))
    }

    async fn resume(&self, task_id: &str, message: Message) -> Result<(String, Watched), A2aError> {
        let Some(live) = self.shared.live(task_id) else {
            let task = self.task(task_id).await?;
            if task.status.state.is_terminal() {
                return Err(A2aError::InvalidParams(format!(
                    "task {task_id} is {}; send a message without taskId (same contextId) to go on",
                    state_name(task.status.state)
                )));
            }
            return Err(A2aError::Unsupported(format!(
                "task {task_id} runs on another node of this fleet; continue it there"
            )));
        };
        let snapshot = live.snapshot();
        if message
            .context_id
            .as_ref()
            .is_some_and(|context| *context != snapshot.context_id)
        {
            return Err(A2aError::InvalidParams(format!(
                "task {task_id} belongs to another contextId"
            )));
        }
        let mut message = message;
        message.context_id = Some(snapshot.context_id.clone());
        let decided = message.data().cloned();
        let watched = live.resume(message, |pending| run::decision_of(pending, decided.as_ref()))?;
        if let Some(data) = decided {
            let body = json!({"approval_id": data.get("approval_id"), "approved": data.get("approved"), "feedback": data.get("feedback"), "task_id": task_id});
            if let Err(error) = run::append(&self.shared, &snapshot.context_id, "approval", body).await {
                tracing::warn!(transport = "a2a", task = %task_id, %error, "the approval was not recorded in the history");
            }
        }
        let task = live.snapshot();
        if let Err(error) = self.shared.save(&task).await {
            tracing::warn!(transport = "a2a", task = %task_id, %error, "the resumed task was not stored");
        }
        Ok((task_id.to_string(), watched))
    }

    /// Wait until the task ends or waits for the client, at most until a little
    /// before the listener's request timeout (then the task is answered as it
    /// stands, still working; the client polls `GetTask`).
    async fn until_interrupted(&self, (snapshot, mut events): Watched) {
        if snapshot.status.state.is_interrupted() {
            return;
        }
        let timeout = Duration::from_millis(self.shared.node.config.http.request_timeout_ms);
        let budget = timeout.saturating_sub((timeout / 10).max(Duration::from_millis(500)));
        let _ = tokio::time::timeout(budget, async {
            loop {
                match events.recv().await {
                    Ok(event) if event.state().is_some_and(TaskState::is_interrupted) => break,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        })
        .await;
    }

    /// The SSE answer: the task, then its events, closed right after the one
    /// that ends it or hands the turn to the client, or after an idle spell.
    fn stream(&self, (snapshot, events): Watched) -> Response {
        let idle = Duration::from_millis(self.shared.node.config.a2a.stream_idle_timeout_ms);
        let id = self.id.clone();
        let events = futures::stream::unfold(
            Some((Some(StreamResponse::Task(snapshot)), events)),
            move |state| {
                let id = id.clone();
                async move {
                    let (first, mut events) = state?;
                    let event = match first {
                        Some(first) => first,
                        None => match tokio::time::timeout(idle, events.recv()).await {
                            Ok(Ok(event)) => event,
                            Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                                let error = A2aError::Internal(
                                    "this stream fell behind the task; read it with GetTask or SubscribeToTask".into(),
                                );
                                return Some((error_event(&id, &error), None));
                            }
                            Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return None,
                        },
                    };
                    let ends = event.state().is_some_and(TaskState::is_interrupted);
                    let sse = Ok::<Event, Infallible>(
                        Event::default()
                            .data(json!({"jsonrpc": "2.0", "id": id, "result": event}).to_string()),
                    );
                    Some((sse, if ends { None } else { Some((None, events)) }))
                }
            },
        );
        sse(events)
    }
}

type Watched = (Task, broadcast::Receiver<StreamResponse>);

fn error_event(id: &Value, error: &A2aError) -> Result<Event, Infallible> {
    Ok(Event::default()
        .event("error")
        .data(error.response(id).to_string()))
}

fn sse(events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    let mut response = Sse::new(events).into_response();
    // Proxies must not buffer the stream.
    response
        .headers_mut()
        .insert("x-accel-buffering", axum::http::HeaderValue::from_static("no"));
    response
}

impl From<serde_json::Error> for A2aError {
    fn from(error: serde_json::Error) -> Self {
        A2aError::Internal(format!("serialising the answer failed: {error}"))
    }
}
