//! Agent2Agent (A2A) 1.0, JSON-RPC binding, as the `a2a-sdk` 1.3.0 client
//! speaks it (where the SDK and the specification differ, the SDK wins). The
//! agent is a plugin: the HAI assistant by default, with the host's tools and
//! approvals, so an A2A client gets what a human in the HAI chat gets.
//!
//! - [`card`]: `GET /.well-known/agent-card.json` (§"Agent Discovery").
//! - this module: the methods `SendMessage`, `SendStreamingMessage`,
//!   `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask` (§"Core
//!   Operations"), the four push notification config methods ([`push`]) and,
//!   behind `a2a.auth_token`, `GetExtendedAgentCard`, each
//!   served once ([`dispatch`]) for both bindings behind one gate (the token,
//!   the `A2A-Version` header, §"Versioning"); and the JSON-RPC binding,
//!   `POST {a2a.path}` (§"JSON-RPC Protocol Binding"): the envelope, streams
//!   as SSE with one JSON-RPC response per event.
//! - [`rest`]: the HTTP+JSON binding under `a2a.rest_path`, the same methods.
//! - [`wire`]: the 1.0 objects as ProtoJSON, and what an inbound message must be.
//! - [`state`]: running tasks, stored tasks and contexts, the bounds.
//! - [`run`]: one task's plugin call, its events, and the host's approvals.
//! - [`fleet`]: approvals and cancels for tasks another node of the fleet runs.
//! - [`push`]: push notification configs, and the deliveries each stored
//!   state owes them (durable, retried, in order per webhook).
//! - [`error`]: [`A2aError`], the one place errors become JSON-RPC errors.
//!
//! Choices the issue left to us, documented in `docs/protocols/a2a.md`:
//! - a request without `A2A-Version` is served as 1.0 (curl-friendly; the SDK
//!   always sends it); another major (`0.3`, `99.0`) gets `-32009`;
//! - `ListTasks` needs a `contextId`: a context id is the capability to read
//!   its tasks, and an open port must not list everyone's conversations; its
//!   pages end at `pageSize` tasks or `a2a.max_list_bytes`, whichever comes
//!   first, so one reply (and the memory behind it) stays about that size;
//! - a request may nest JSON only as deep as a task holding its message can
//!   be read back from the store ([`crate::store::depth`]); deeper is `-32602` before
//!   anything is parsed or stored;
//! - a task runs on the node that started it; on a fleet, another node takes
//!   its approval or cancel and hands it over ([`fleet`]), and fails it when
//!   that node dies (its lease lapses, [`crate::store::lease`]).

pub mod activity;
mod card;
pub mod error;
mod fleet;
mod push;
mod rest;
mod run;
mod state;
pub mod wire;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::Stream;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use self::error::A2aError;
use self::state::{A2aState, Shared, state_name};
use self::wire::{GetTaskRequest, ListTasksRequest, MessageLimits, SendMessageRequest, TaskIdRequest};
use crate::jsonrpc::{self, Dialect, Fault, Faults, Inbound, Refused};
use crate::models::a2a::{self as model, Message, StreamResponse, Task, TaskState, TaskStatus};
use crate::node::state::NodeState;
use crate::peers::a2a::{CARD_PATH, VERSION_HEADER};
use crate::runtime::approval::{self, AnswerError, Answerer, WaitingApproval};
use crate::store::depth as json_depth;

/// How long `CancelTask` waits for the plugin call to stop before answering.
const CANCEL_WAIT: Duration = Duration::from_secs(5);
const MAX_ID_CHARS: usize = 128;
const DEFAULT_PAGE_SIZE: u32 = 50;
const MAX_PAGE_SIZE: u32 = 100;

pub fn router(node: NodeState) -> Router {
    let path = node.config.a2a.path.trim_end_matches('/').to_string();
    let path = if path.is_empty() { "/".to_string() } else { path };
    let limit = body_limit(&node);
    let browser = crate::policy::browser::Endpoint {
        allowed_origins: node.config.a2a.allowed_origins.clone(),
        origins_key: "a2a.allowed_origins",
        json_posts: crate::policy::browser::JsonPosts::All,
        refuse: error::browser_refused,
    };
    let policy = node.browser.clone();
    let shared = A2aState::new(node);
    fleet::listen(&shared);
    fleet::fail_dead_nodes_tasks(&shared);
    push::start(&shared);
    // The console answers this transport's approvals while its routes are served.
    let answering = shared
        .node
        .runtime
        .approvals()
        .answer_with("a2a", std::sync::Arc::new(ConsoleAnswers(shared.clone())));
    let json_rpc = Router::new()
        .route(CARD_PATH, get(agent_card))
        .route(&path, post(rpc).layer(DefaultBodyLimit::max(limit)))
        .with_state(shared.clone());
    let mut router = crate::policy::browser::guard(json_rpc, policy.clone(), browser.clone());
    let rest_path = shared.node.config.a2a.rest_path.trim_end_matches('/').to_string();
    if shared.node.config.a2a.serves_rest() {
        let rest = rest::routes(&rest_path)
            .layer(DefaultBodyLimit::max(limit))
            .with_state(shared);
        let rest_browser = crate::policy::browser::Endpoint {
            json_posts: crate::policy::browser::JsonPosts::WithBody,
            refuse: error::browser_refused_rest,
            ..browser
        };
        router = router.merge(crate::policy::browser::guard(rest, policy, rest_browser));
    }
    router.layer(axum::Extension(answering))
}

/// The A2A body limit: `a2a.max_body_bytes`, within the listener's own `http.max_body_bytes`.
fn body_limit(node: &NodeState) -> usize {
    node.config.body_limit(node.config.a2a.max_body_bytes)
}

async fn agent_card(State(shared): State<Shared>) -> Response {
    axum::Json(card::agent_card(&shared.node, card::Audience::Public)).into_response()
}

/// One JSON-RPC request, read as the SDK's server reads it.
async fn rpc(
    State(shared): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    if let Err(error) = authorize(&shared, &headers) {
        return reply_error(&Value::Null, error);
    }
    let raw = match raw {
        Ok(raw) => raw,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return reply_error(&Value::Null, A2aError::PayloadTooLarge(body_limit(&shared.node)));
        }
        Err(rejection) => {
            return reply_error(
                &Value::Null,
                A2aError::invalid_request(format!("unreadable body: {rejection}")),
            );
        }
    };
    if let Some(error) = deeper_than_stored(&raw, REQUEST_LEVELS_ABOVE_MESSAGE) {
        return reply_error(&envelope_id(&raw), error);
    }
    let (id, method, params) = match jsonrpc::parse(&raw, DIALECT) {
        Ok(Inbound::Request { id, method, params }) => (id, method, params),
        // A2A's dialect reads every message as a request; nothing else reaches here.
        Ok(_) => return reply_error(&Value::Null, A2aError::invalid_request("method is required")),
        Err(Refused { id, fault }) => return reply_error(&id, fault.into()),
    };
    let Some(method) = Method::from_rpc_name(&method) else {
        // `jsonrpc::parse` already bounded the name.
        return reply_error(&id, Fault::MethodNotFound(method).into());
    };
    if let Err(error) = check_version(&headers) {
        return reply_error(&id, error);
    }
    let call = Request {
        shared,
        binding: Binding::JsonRpc(id.clone()),
        client: peer.ip(),
    };
    match dispatch(call, method, params).await {
        Ok(Answer::Result(result)) => axum::Json(jsonrpc::result(&id, result)).into_response(),
        Ok(Answer::Stream(stream)) => stream,
        Err(error) => reply_error(&id, error),
    }
}

/// A2A as a2a-sdk's server reads JSON-RPC: every message is a request (a
/// missing id is a null one), params may be positional, no batches.
const DIALECT: Dialect = Dialect {
    name: "A2A",
    notifications: false,
    responses: false,
    positional_params: true,
};

/// An A2A operation (§"Core Operations"), whichever binding carried it: each
/// is served once, by [`dispatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    CreatePushConfig,
    GetPushConfig,
    ListPushConfigs,
    DeletePushConfig,
    GetExtendedAgentCard,
}

impl Method {
    fn from_rpc_name(name: &str) -> Option<Method> {
        Some(match name {
            "SendMessage" => Method::SendMessage,
            "SendStreamingMessage" => Method::SendStreamingMessage,
            "GetTask" => Method::GetTask,
            "ListTasks" => Method::ListTasks,
            "CancelTask" => Method::CancelTask,
            "SubscribeToTask" => Method::SubscribeToTask,
            "CreateTaskPushNotificationConfig" => Method::CreatePushConfig,
            "GetTaskPushNotificationConfig" => Method::GetPushConfig,
            "ListTaskPushNotificationConfigs" => Method::ListPushConfigs,
            "DeleteTaskPushNotificationConfig" => Method::DeletePushConfig,
            "GetExtendedAgentCard" => Method::GetExtendedAgentCard,
            _ => return None,
        })
    }
}

/// The one place a method is served, for both bindings: `params` are the
/// method's (JSON-RPC's `params`, or what the HTTP+JSON binding read from the
/// path, query and body).
async fn dispatch(call: Request, method: Method, params: Value) -> Result<Answer, A2aError> {
    match method {
        Method::SendMessage => call.send_message(params).await,
        Method::SendStreamingMessage => call.send_streaming_message(params).await,
        Method::GetTask => call.get_task(params).await,
        Method::ListTasks => call.list_tasks(params).await,
        Method::CancelTask => call.cancel_task(params).await,
        Method::SubscribeToTask => call.subscribe(params).await,
        Method::GetExtendedAgentCard => call.extended_card(),
        Method::CreatePushConfig => Ok(Answer::Result(
            push::create(&call.shared, call.client, params).await?,
        )),
        Method::GetPushConfig => Ok(Answer::Result(push::get(&call.shared, params).await?)),
        Method::ListPushConfigs => Ok(Answer::Result(push::list(&call.shared, params).await?)),
        Method::DeletePushConfig => Ok(Answer::Result(push::delete(&call.shared, params).await?)),
    }
}

/// The gate every call passes first, whichever binding: the operator's token
/// when `a2a.auth_token` is set.
fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), A2aError> {
    if super::bearer_authorized(&shared.node.config.a2a.auth_token, headers) {
        Ok(())
    } else {
        Err(A2aError::Unauthorized)
    }
}

/// Levels a JSON-RPC request wraps around its message: the envelope and `params`.
const REQUEST_LEVELS_ABOVE_MESSAGE: usize = 2;
/// Levels a request wraps around a data part's value: those, `message`, `parts` and the part.
const REQUEST_LEVELS_ABOVE_PART_DATA: usize = REQUEST_LEVELS_ABOVE_MESSAGE + 3;

/// The deepest request served: one whose message, once stored in a task, the
/// store can still read back. One limit with the store's, not a second guess.
const MAX_REQUEST_DEPTH: usize =
    json_depth::MAX_STORED_DEPTH - state::STORED_LEVELS_ABOVE_MESSAGE + REQUEST_LEVELS_ABOVE_MESSAGE;

/// A request nesting deeper than [`MAX_REQUEST_DEPTH`] (less what its binding
/// wraps around the message, `levels_above_message`, than JSON-RPC does) is
/// refused before it is parsed, whatever its method, so nothing of it is
/// stored: `-32602` naming the limit (a document too deep for serde_json would
/// otherwise be a parse error, and one a little less deep a task no read could
/// ever return).
fn deeper_than_stored(raw: &[u8], levels_above_message: usize) -> Option<A2aError> {
    let max_depth = MAX_REQUEST_DEPTH + levels_above_message - REQUEST_LEVELS_ABOVE_MESSAGE;
    let depth = json_depth::depth(raw);
    // Text that is not JSON at all gets the parser's own error instead.
    if depth <= max_depth || serde_json::from_slice::<IgnoredAny>(raw).is_err() {
        return None;
    }
    Some(A2aError::invalid_params(format!(
        "the request nests {depth} levels deep; this node accepts at most {max_depth} \
         (a data part's value at most {}), the deepest a stored task can be read back",
        MAX_REQUEST_DEPTH - REQUEST_LEVELS_ABOVE_PART_DATA
    )))
}

/// The `id` of a request too deep to parse whole, read without entering the
/// rest (serde_json skips what it ignores without a depth limit); null when it
/// is not a valid id.
fn envelope_id(raw: &[u8]) -> Value {
    #[derive(serde::Deserialize)]
    struct Envelope {
        #[serde(default)]
        id: Value,
    }
    let is_object = raw.trim_ascii_start().first() == Some(&b'{');
    match serde_json::from_slice::<Envelope>(raw) {
        Ok(Envelope { id }) if is_object && jsonrpc::valid_id(&id) => id,
        _ => Value::Null,
    }
}

/// A JSON-RPC error answer: HTTP 200, but for the refusals that come before
/// JSON-RPC is read (a missing token, a body over the limit), whose status is
/// the HTTP+JSON binding's.
fn reply_error(id: &Value, error: A2aError) -> Response {
    let status = match error {
        A2aError::Unauthorized | A2aError::PayloadTooLarge(_) => error.mapping().http,
        _ => StatusCode::OK,
    };
    let mut response = (status, axum::Json(error.response(id))).into_response();
    error.add_headers(&mut response);
    response
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
    binding: Binding,
    client: std::net::IpAddr,
}

/// How a call's stream events and errors are framed.
#[derive(Debug, Clone)]
enum Binding {
    /// One JSON-RPC response per event, to the request with this id.
    JsonRpc(Value),
    /// The bare `StreamResponse`, errors as `google.rpc.Status` bodies.
    Rest,
}

impl Binding {
    fn event(&self, event: &StreamResponse) -> Event {
        let data = match self {
            Binding::JsonRpc(id) => jsonrpc::result(id, event).to_string(),
            Binding::Rest => serde_json::to_string(event).unwrap_or_default(),
        };
        Event::default().data(data)
    }

    fn error_event(&self, error: &A2aError) -> Result<Event, Infallible> {
        let data = match self {
            Binding::JsonRpc(id) => error.response(id),
            Binding::Rest => error.rest_body(),
        };
        Ok(Event::default().event("error").data(data.to_string()))
    }
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
        let mut configuration = request.configuration.unwrap_or_default();
        let webhook = configuration.task_push_notification_config.take();
        let progress = self.start_or_resume(request.message, webhook).await?;
        let task_id = progress.task_id().to_string();
        if !configuration.return_immediately {
            self.until_interrupted(progress).await?;
        }
        let task = self.task(&task_id).await?;
        let task = task.view(configuration.history_length, true);
        Ok(Answer::Result(json!({ "task": task })))
    }

    async fn send_streaming_message(self, params: Value) -> Result<Answer, A2aError> {
        let request: SendMessageRequest = wire::params(params)?;
        let webhook = request
            .configuration
            .and_then(|configuration| configuration.task_push_notification_config);
        let progress = self.start_or_resume(request.message, webhook).await?;
        Ok(Answer::Stream(match progress {
            Progress::Here(snapshot, events) => self.stream(*snapshot, events),
            Progress::Elsewhere { task_id, since } => self.stream_from_store(task_id, since),
        }))
    }

    /// The operator's card, every skill: this caller already showed
    /// `a2a.auth_token`, as every call here must when it is set.
    fn extended_card(&self) -> Result<Answer, A2aError> {
        let node = &self.shared.node;
        if !card::offers_extended_card(&node.config) {
            return Err(A2aError::ExtendedCardNotConfigured);
        }
        let card = card::agent_card(node, card::Audience::Operator);
        Ok(Answer::Result(serde_json::to_value(card)?))
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
            return Err(A2aError::invalid_params(
                "contextId is required: a context's id is what lets a client read its tasks",
            ));
        }
        let page_size = request.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
        if page_size == 0 || page_size > MAX_PAGE_SIZE {
            return Err(A2aError::invalid_params(format!(
                "pageSize must be between 1 and {MAX_PAGE_SIZE}"
            )));
        }
        // Newest first, cut by `pageSize` and `a2a.max_list_bytes`; the page
        // token is the id of the last task of the previous page.
        let page = self.shared.list_page(&request, page_size).await?;
        Ok(Answer::Result(serde_json::to_value(page)?))
    }

    async fn cancel_task(self, params: Value) -> Result<Answer, A2aError> {
        let request: TaskIdRequest = wire::params(params)?;
        if let Some(live) = self.shared.live(&request.id) {
            let mut events = live
                .cancel()
                .map_err(|state| A2aError::TaskNotCancelable(state_name(&state)))?;
            wait_for_state(&mut events, TaskState::is_terminal, CANCEL_WAIT).await;
            return Ok(Answer::Result(serde_json::to_value(
                self.task(&request.id).await?,
            )?));
        }
        let task = self.task(&request.id).await?;
        if task.status.state.is_terminal() {
            return Err(A2aError::TaskNotCancelable(state_name(&task.status.state)));
        }
        // Another node of the fleet runs it: ask that node, and read the end back.
        fleet::forward(
            &self.shared,
            &fleet::Forwarded::Cancel {
                task_id: task.id.clone(),
            },
        )
        .await?;
        let task = fleet::wait_for(&self.shared, &task.id, CANCEL_WAIT, |task| {
            task.status.state.is_terminal()
        })
        .await?;
        Ok(Answer::Result(serde_json::to_value(task)?))
    }

    async fn subscribe(self, params: Value) -> Result<Answer, A2aError> {
        let request: TaskIdRequest = wire::params(params)?;
        if let Some(live) = self.shared.live(&request.id) {
            let (snapshot, events) = live.watch();
            return Ok(Answer::Stream(self.stream(snapshot, events)));
        }
        let task = self.task(&request.id).await?;
        if task.status.state.is_terminal() {
            return Err(A2aError::Unsupported(format!(
                "task {} is {}; only a running task can be subscribed to",
                task.id,
                state_name(&task.status.state)
            )));
        }
        // Another node of the fleet runs it.
        Ok(Answer::Stream(if task.status.state.is_interrupted() {
            let (_, events) = broadcast::channel(1);
            self.stream(task, events)
        } else {
            self.stream_from_store(task.id.clone(), task.status.timestamp.clone())
        }))
    }

    async fn task(&self, id: &str) -> Result<Task, A2aError> {
        load_task(&self.shared, id).await
    }

    /// A new task for a message without `taskId`; else the answer to the
    /// task's pending approval. Either way: the task, and its events from then.
    /// A `webhook` is stored for the task first, so its first state is owed to it.
    async fn start_or_resume(
        &self,
        mut message: Message,
        webhook: Option<push::PushConfig>,
    ) -> Result<Progress, A2aError> {
        wire::validate_message(&message, &self.limits())?;
        message.forget_unknown();
        if let Some(task_id) = message.task_id.clone() {
            if let Some(webhook) = webhook {
                load_task(&self.shared, &task_id).await?;
                push::store(&self.shared, self.client, &task_id, webhook).await?;
            }
            return resume(&self.shared, &task_id, message).await;
        }
        let shared = &self.shared;
        let slot = shared.reserve(self.client).await?;
        let context_id = message.context_id.clone().unwrap_or_else(model::new_id);
        let task_id = model::new_id();
        message.context_id = Some(context_id.clone());
        message.task_id = Some(task_id.clone());
        let task = Task {
            id: task_id.clone(),
            context_id: context_id.clone(),
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: model::timestamp_now(),
                ..TaskStatus::default()
            },
            history: vec![message.clone()],
            ..Task::default()
        };
        // Held before the task is stored, so no stored task runs without one:
        // should this node die from here on, another fails the task.
        let lease = shared.lease(&task_id).await?;
        if let Some(webhook) = webhook
            && let Err(error) = push::store(shared, self.client, &task_id, webhook).await
        {
            if let Some(lease) = lease {
                lease.release().await;
            }
            return Err(error);
        }
        // Charged first: a client past its stored-task bounds leaves nothing stored.
        let charge = shared.admit_stored(self.client, &task).await?;
        let stored = match shared.add_to_context(&context_id, &task_id).await {
            Ok(()) => shared.save_new(&task, &charge).await,
            Err(error) => Err(error),
        };
        if let Err(error) = stored {
            shared.refund_stored(&charge).await;
            if let Some(lease) = lease {
                lease.release().await;
            }
            return Err(error);
        }
        run::append(
            shared,
            &context_id,
            "user",
            json!({"content": message.text(), "task_id": task_id}),
        )
        .await?;
        shared.node.store.commit().await?;
        let live = shared.insert_live(task, charge);
        let (snapshot, events) = live.watch();
        shared
            .node
            .background
            .spawn("a2a.task_run", run::run(shared.clone(), live, slot, lease));
        Ok(Progress::Here(Box::new(snapshot), events))
    }

    /// How long a `SendMessage` waits: a little less than the listener's request
    /// timeout (then the task is answered as it stands, still working; the
    /// client polls `GetTask`).
    fn wait_budget(&self) -> Duration {
        let timeout = Duration::from_millis(self.shared.node.config.http.request_timeout_ms);
        timeout.saturating_sub((timeout / 10).max(Duration::from_millis(500)))
    }

    /// Wait until the task ends or waits for the client (or the budget runs out).
    async fn until_interrupted(&self, progress: Progress) -> Result<(), A2aError> {
        match progress {
            Progress::Here(snapshot, mut events) => {
                if snapshot.status.state.is_interrupted() {
                    return Ok(());
                }
                wait_for_state(&mut events, TaskState::is_interrupted, self.wait_budget()).await;
            }
            Progress::Elsewhere { task_id, since } => {
                fleet::wait_for(&self.shared, &task_id, self.wait_budget(), |task| {
                    task.status.timestamp != since && task.status.state.is_interrupted()
                })
                .await?;
            }
        }
        Ok(())
    }

    /// The SSE answer for a task another node runs, read back from the store:
    /// the task (working: the answer is on its way to its runner), then, once
    /// the runner has stored the next state a client waits for, the whole
    /// answer and that status, which ends the stream.
    fn stream_from_store(&self, task_id: String, since: String) -> Response {
        let idle = Duration::from_millis(self.shared.node.config.a2a.stream_idle_timeout_ms);
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        let shared = self.shared.clone();
        let binding = self.binding.clone();
        tokio::spawn(async move {
            let event = |result: &StreamResponse| binding.event(result);
            // The answer is on its way to the runner: the task is working again.
            let mut working = match shared.load(&task_id).await {
                Ok(Some(task)) => task,
                Ok(None) => return,
                Err(error) => {
                    let _ = sender.send(binding.error_event(&error)).await;
                    return;
                }
            };
            working.status = state::status(TaskState::Working, None);
            if sender
                .send(Ok(event(&StreamResponse::Task(working))))
                .await
                .is_err()
            {
                return;
            }
            let moved_on = |task: &Task| task.status.timestamp != since && task.status.state.is_interrupted();
            let end = match fleet::wait_for(&shared, &task_id, idle, moved_on).await {
                Ok(task) if moved_on(&task) => task,
                Ok(_) => return,
                Err(error) => {
                    let _ = sender.send(binding.error_event(&error)).await;
                    return;
                }
            };
            for closing in push::closing_events(&end) {
                if sender.send(Ok(event(&closing))).await.is_err() {
                    return;
                }
            }
        });
        sse(futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|event| (event, receiver))
        }))
    }

    /// The SSE answer: the task, then its events, closed right after the one
    /// that ends it or hands the turn to the client, or after an idle spell.
    fn stream(&self, snapshot: Task, events: broadcast::Receiver<StreamResponse>) -> Response {
        let idle = Duration::from_millis(self.shared.node.config.a2a.stream_idle_timeout_ms);
        let binding = self.binding.clone();
        let events = futures::stream::unfold(
            Some((Some(StreamResponse::Task(snapshot)), events)),
            move |state| {
                let binding = binding.clone();
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
                                return Some((binding.error_event(&error), None));
                            }
                            Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return None,
                        },
                    };
                    let ends = event.state().is_some_and(TaskState::is_interrupted);
                    let sse = Ok::<Event, Infallible>(binding.event(&event));
                    Some((sse, if ends { None } else { Some((None, events)) }))
                }
            },
        );
        sse(events)
    }
}

/// Where a task a request started or continued runs: here (its snapshot and
/// events from then), or on another node of the fleet (read back from the store).
enum Progress {
    Here(Box<Task>, broadcast::Receiver<StreamResponse>),
    Elsewhere { task_id: String, since: String },
}

impl Progress {
    fn task_id(&self) -> &str {
        match self {
            Progress::Here(task, _) => &task.id,
            Progress::Elsewhere { task_id, .. } => task_id,
        }
    }
}

/// Read a running task's events until one leaves it in a state `reached`
/// accepts, the task's events end, or `budget` runs out.
async fn wait_for_state(
    events: &mut broadcast::Receiver<StreamResponse>,
    reached: fn(&TaskState) -> bool,
    budget: Duration,
) {
    let _ = tokio::time::timeout(budget, async {
        loop {
            match events.recv().await {
                Ok(event) if event.state().is_some_and(reached) => break,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    })
    .await;
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

/// The client's answer to a task's pending approval, applied where the task
/// runs: here, or (a fleet) on the node that runs it ([`fleet`]). The one
/// answer path: a client's message and the operator's console
/// ([`ConsoleAnswers`]) both take it.
async fn resume(shared: &Shared, task_id: &str, mut message: Message) -> Result<Progress, A2aError> {
    let live = shared.live(task_id);
    let task = match &live {
        Some(live) => live.snapshot(),
        None => load_task(shared, task_id).await?,
    };
    if message
        .context_id
        .as_ref()
        .is_some_and(|context| *context != task.context_id)
    {
        return Err(A2aError::invalid_params(format!(
            "task {task_id} belongs to another contextId"
        )));
    }
    // As the SDK's server: a finished task takes no more messages.
    if task.status.state.is_terminal() {
        return Err(A2aError::Unsupported(format!(
            "task {task_id} is {}; send a message without taskId (same contextId) to go on",
            state_name(&task.status.state)
        )));
    }
    message.context_id = Some(task.context_id.clone());
    let decided = message.data().cloned();
    let progress = match live {
        Some(live) => {
            let approvals = shared.node.runtime.approvals();
            let (snapshot, events) = live.resume(message, approvals, |approval_id| {
                run::decision_of(approval_id, decided.as_ref())
            })?;
            // Not stored as working: the runner stores the next state a client
            // waits for, and a later write of this one could overwrite it.
            Progress::Here(Box::new(snapshot), events)
        }
        None => {
            let Some(approval_id) = fleet::pending_approval(&task) else {
                return Err(A2aError::invalid_params(format!(
                    "task {task_id} is not waiting for input (it is {})",
                    state_name(&task.status.state)
                )));
            };
            run::decision_of(&approval_id, decided.as_ref())?;
            if !fleet::first_answer(shared, task_id, &approval_id).await? {
                return Err(A2aError::invalid_params(format!(
                    "approval {approval_id} of task {task_id} was answered already; wait for the task"
                )));
            }
            let forwarded = fleet::Forwarded::Decide {
                task_id: task_id.to_string(),
                message: fleet::decision_only(&message),
            };
            if let Err(error) = fleet::forward(shared, &forwarded).await {
                // Not sent: the client may answer again.
                fleet::forget_answer(shared, task_id, &approval_id).await;
                return Err(error);
            }
            Progress::Elsewhere {
                task_id: task_id.to_string(),
                since: task.status.timestamp.clone(),
            }
        }
    };
    if let Some(data) = decided {
        let body = json!({"approval_id": data.get("approval_id"), "approved": data.get("approved"), "feedback": data.get("feedback"), "task_id": task_id});
        if let Err(error) = run::append(shared, &task.context_id, "approval", body).await {
            tracing::warn!(transport = "a2a", task = %task_id, %error, "the approval was not recorded in the history");
        }
    }
    Ok(progress)
}

/// Task `id` as it stands, or `TaskNotFound`.
async fn load_task(shared: &Shared, id: &str) -> Result<Task, A2aError> {
    shared
        .load(id)
        .await?
        .ok_or_else(|| A2aError::TaskNotFound(truncate(id)))
}

/// The console's answer to an A2A approval is the message a client answers
/// with (its data part naming the approval), taken by [`resume`] as a client's is:
/// the task goes on, and its client sees it in `GetTask` and its stream.
struct ConsoleAnswers(Shared);

#[async_trait::async_trait]
impl Answerer for ConsoleAnswers {
    async fn answer(&self, waiting: &WaitingApproval, answer: approval::Answer) -> Result<(), AnswerError> {
        let (_, task_id) = waiting.scope_parts();
        // The part the node's own A2A client sends to answer an approval.
        let part = crate::peers::a2a::approval_answer(
            &waiting.asked.approval_id,
            answer.approved,
            answer.feedback.as_deref(),
        );
        let part = serde_json::from_value(part).map_err(|error| AnswerError::Failed(error.to_string()))?;
        let message = Message {
            message_id: model::new_id(),
            task_id: Some(task_id.to_string()),
            role: Some(model::Role::User),
            parts: vec![part],
            ..Message::default()
        };
        match resume(&self.0, task_id, message).await {
            Ok(_) => Ok(()),
            // The task ended, or no longer waits for this approval.
            Err(error @ (A2aError::Rpc(_) | A2aError::Unsupported(_) | A2aError::TaskNotFound(_))) => {
                Err(AnswerError::lost(waiting, error.to_string()))
            }
            Err(error) => Err(AnswerError::Failed(error.to_string())),
        }
    }
}
