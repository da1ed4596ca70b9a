//! Push notifications (§"Push Notifications"): a task's webhook configs, and
//! the deliveries each stored state of the task owes them.
//!
//! **Configs** (`Create/Get/List/DeleteTaskPushNotificationConfig`, both
//! bindings through [`super::dispatch`], and `SendMessage`'s
//! `configuration.taskPushNotificationConfig`) follow `a2a-sdk`'s handler: an
//! id defaults to the task's, a create with a known id replaces it, a get of
//! an unknown id is `TaskNotFound`, a delete of one succeeds. They are bounded
//! per task (`a2a.push_max_configs_per_task`) and per client address (a
//! [`StoredQuota`], so the bound holds across restarts and on a fleet), and a
//! webhook must pass the node's one outbound policy for destinations a peer
//! names ([`http_client::check_destination`]): when it is created, and again
//! before each attempt ([`deliver`]).
//!
//! **Durability.** What a state owes is written in the same atomic store step
//! as the state itself ([`A2aState::put_stored`] → [`owed_writes`],
//! [`crate::store::Store::put_all`]): one record per delivery and webhook in
//! `a2a_push_outbox`, keyed so they list in delivery order. A kill -9 keeps
//! both or neither, and the deliverer (this node's, after a restart, or any
//! other node's of a fleet) finds what is owed in the store.
//!
//! **What is owed** is the states a caller following a long task needs, each
//! durable: the new task (`{"task": …}`), input-required and the end (the
//! answer's artifacts, then the final status), as the SDK's sender shapes
//! them; not the unstored `working` or the answer's chunks (a deviation
//! `docs/protocols/a2a.md` states).

mod deliver;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::error::A2aError;
use super::state::{A2aState, Shared};
use crate::jsonrpc::Faults;
use crate::models::a2a::{StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent};
use crate::peers::http_client;
use crate::policy::quota::{Charge, QuotaBounds, QuotaError, StoredQuota};
use crate::store::{Collection, now_ms};

pub use deliver::start;

/// The longest webhook URL taken.
const MAX_URL_CHARS: usize = 2048;
/// The longest token, scheme or credentials taken (each goes into a header), in bytes.
const MAX_HEADER_CHARS: usize = 512;
/// The longest config id taken.
const MAX_ID_CHARS: usize = 128;

/// `TaskPushNotificationConfig`, as the client sends it and reads it back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushConfig {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    #[serde(default)]
    pub url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationInfo {
    #[serde(default)]
    pub scheme: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub credentials: String,
}

impl PushConfig {
    /// The `Authorization` header the SDK's sender adds: only with both parts.
    fn authorization(&self) -> Option<String> {
        let auth = self.authentication.as_ref()?;
        (!auth.scheme.is_empty() && !auth.credentials.is_empty())
            .then(|| format!("{} {}", auth.scheme, auth.credentials))
    }
}

/// A config as stored: with what it was charged to its client.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredConfig {
    config: PushConfig,
    charge: Charge,
}

/// `Get`/`DeleteTaskPushNotificationConfig` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigIdRequest {
    #[serde(default)]
    task_id: String,
    #[serde(default)]
    id: String,
}

/// `ListTaskPushNotificationConfigs` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListConfigsRequest {
    #[serde(default)]
    task_id: String,
    #[serde(default)]
    page_size: Option<u32>,
    #[serde(default)]
    page_token: String,
}

/// What the task state owes, per webhook: an event as it is sent, or the
/// end's artifact `index`, rendered from the stored (terminal, so unchanging)
/// task when sent, so an answer of up to 1 MiB is not copied per webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Owed {
    Event(Value),
    Artifact { index: usize },
}

/// One delivery owed to one webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Delivery {
    owed: Owed,
    created_ms: u64,
    attempts: u32,
    /// Not attempted before.
    next_ms: u64,
    /// The node attempting it, until when: of a fleet, one node at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claim: Option<Claim>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Claim {
    node: String,
    until_ms: u64,
}

/// This node's push state, beside its tasks ([`A2aState`]).
pub struct Push {
    /// Deliveries per client address (`a2a.push_max_configs_per_client`).
    quota: StoredQuota,
    /// Rung when something new is owed or a delivery ended.
    wake: Notify,
    /// Deliveries owed at the deliverer's last look (`a2a.push_max_pending`).
    pending: AtomicUsize,
    /// The last outbox sequence given: ms × 1000, increasing.
    sequence: AtomicU64,
}

impl Push {
    pub fn new(node: &crate::node::state::NodeState) -> Push {
        let config = &node.config.a2a;
        let quota = StoredQuota::new(
            node.store.clone(),
            "a2a_push_configs",
            QuotaBounds {
                per_client_items: config.push_max_configs_per_client,
                per_client_items_key: "a2a.push_max_configs_per_client",
                // Configs are bounded in count; their size is bounded field by field.
                per_client_bytes: u64::MAX,
                per_client_bytes_key: "a2a.push_max_configs_per_client",
                total_bytes: u64::MAX,
                total_bytes_key: "a2a.push_max_configs_per_client",
            },
            std::time::Duration::from_secs(config.task_ttl_secs),
        );
        Push {
            quota,
            wake: Notify::new(),
            pending: AtomicUsize::new(0),
            sequence: AtomicU64::new(0),
        }
    }

    /// A sequence above every one given before, so a state's deliveries list
    /// after the previous state's.
    fn next_sequence(&self) -> u64 {
        let floor = now_ms().saturating_mul(1000);
        let previous = self
            .sequence
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                Some(floor.max(last.saturating_add(1)))
            })
            .unwrap_or(0);
        floor.max(previous.saturating_add(1))
    }

    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

fn config_key(task_id: &str, config_id: &str) -> Vec<u8> {
    format!("{task_id}\0{config_id}").into_bytes()
}

fn task_prefix(task_id: &str) -> Vec<u8> {
    format!("{task_id}\0").into_bytes()
}

fn refused_url(error: impl std::fmt::Display) -> A2aError {
    A2aError::invalid_params(format!("Invalid push notification URL: {error}"))
}

fn quota_error(error: QuotaError) -> A2aError {
    match error {
        QuotaError::Store(error) => error.into(),
        refused => A2aError::Busy(format!("push notification configs: {refused}")),
    }
}

/// Whether push is on, else the SDK's answer.
fn enabled(shared: &A2aState) -> Result<(), A2aError> {
    if shared.node.config.a2a.push_enabled {
        Ok(())
    } else {
        Err(A2aError::PushNotSupported)
    }
}

/// Check a config as the SDK's validation does, within the node's bounds,
/// and its URL against the outbound policy; its id defaulted to the task's.
fn validated(shared: &A2aState, task_id: &str, mut config: PushConfig) -> Result<PushConfig, A2aError> {
    let printable =
        |text: &str, max: usize| text.chars().count() <= max && !text.chars().any(char::is_control);
    // What goes into a header must be one a header can carry.
    let header_safe = |text: &str| {
        text.len() <= MAX_HEADER_CHARS && text.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
    };
    if config.url.is_empty() {
        return Err(A2aError::invalid_params("Validation failed: url is required"));
    }
    if !printable(&config.url, MAX_URL_CHARS) {
        return Err(refused_url(format!(
            "at most {MAX_URL_CHARS} printable characters"
        )));
    }
    if config.id.is_empty() {
        config.id = task_id.to_string();
    }
    if !printable(&config.id, MAX_ID_CHARS) {
        return Err(A2aError::invalid_params(format!(
            "id must be at most {MAX_ID_CHARS} printable characters"
        )));
    }
    if !header_safe(&config.token) {
        return Err(A2aError::invalid_params(format!(
            "token must be at most {MAX_HEADER_CHARS} visible ASCII characters"
        )));
    }
    if let Some(auth) = &config.authentication {
        if auth.scheme.is_empty() {
            return Err(A2aError::invalid_params(
                "Validation failed: authentication.scheme is required",
            ));
        }
        if !header_safe(&auth.scheme) || !header_safe(&auth.credentials) {
            return Err(A2aError::invalid_params(format!(
                "authentication.scheme and credentials must be at most {MAX_HEADER_CHARS} visible ASCII characters"
            )));
        }
    }
    check_url(shared, &config.url).map_err(refused_url)?;
    config.task_id = task_id.to_string();
    Ok(config)
}

/// The node's outbound policy for a webhook: listed in
/// `outbound.allowed_hosts`, or (`a2a.push_allowed_hosts_only = false`)
/// public or in `outbound.allowed_private`.
fn check_url(shared: &A2aState, url: &str) -> Result<url::Url, http_client::ClientError> {
    let config = &shared.node.config;
    http_client::check_destination(
        url,
        &config.outbound.allowed_hosts,
        config.a2a.push_allowed_hosts_only,
    )
}

/// `CreateTaskPushNotificationConfig`: the task must exist.
pub async fn create(shared: &Shared, client: IpAddr, params: Value) -> Result<Value, A2aError> {
    enabled(shared)?;
    let config: PushConfig = super::wire::params(params)?;
    if config.task_id.is_empty() {
        return Err(A2aError::invalid_params("Validation failed: taskId is required"));
    }
    super::load_task(shared, &config.task_id).await?;
    let task_id = config.task_id.clone();
    let stored = store(shared, client, &task_id, config).await?;
    Ok(serde_json::to_value(stored)?)
}

/// Store `config` for task `task_id` (known to exist, or about to be stored):
/// validated, within the per-task and per-client bounds, committed.
pub async fn store(
    shared: &A2aState,
    client: IpAddr,
    task_id: &str,
    config: PushConfig,
) -> Result<PushConfig, A2aError> {
    enabled(shared)?;
    let config = validated(shared, task_id, config)?;
    let store = &shared.node.store;
    let key = config_key(task_id, &config.id);
    let known = store
        .get::<StoredConfig>(Collection::A2aPushConfigs, &key)
        .await?;
    let charge = match known {
        // A replaced config keeps its place in both bounds.
        Some(known) => known.charge,
        None => {
            let max = shared.node.config.a2a.push_max_configs_per_task;
            let held = store
                .keys(Collection::A2aPushConfigs, &task_prefix(task_id), max)
                .await?;
            if held.len() >= max {
                return Err(A2aError::invalid_params(format!(
                    "task {task_id} has {max} push notification configs, its limit (a2a.push_max_configs_per_task)"
                )));
            }
            let client = crate::listener::caps::client_key(client).to_string();
            shared.push.quota.admit(&client, 0).await.map_err(quota_error)?
        }
    };
    let stored = StoredConfig {
        config: config.clone(),
        charge,
    };
    store
        .put(Collection::A2aPushConfigs, &key, &stored, shared.expires())
        .await?;
    store.commit().await?;
    Ok(config)
}

/// `GetTaskPushNotificationConfig`: an unknown id is `TaskNotFound`, as the SDK's handler answers.
pub async fn get(shared: &Shared, params: Value) -> Result<Value, A2aError> {
    enabled(shared)?;
    let request: ConfigIdRequest = super::wire::params(params)?;
    required(&request.task_id, "taskId")?;
    required(&request.id, "id")?;
    super::load_task(shared, &request.task_id).await?;
    let stored = shared
        .node
        .store
        .get::<StoredConfig>(
            Collection::A2aPushConfigs,
            &config_key(&request.task_id, &request.id),
        )
        .await?
        .ok_or_else(|| A2aError::TaskNotFound(super::truncate(&request.task_id)))?;
    Ok(serde_json::to_value(stored.config)?)
}

/// `ListTaskPushNotificationConfigs`: in id order, paged by the last id given.
pub async fn list(shared: &Shared, params: Value) -> Result<Value, A2aError> {
    enabled(shared)?;
    let request: ListConfigsRequest = super::wire::params(params)?;
    required(&request.task_id, "taskId")?;
    super::load_task(shared, &request.task_id).await?;
    let max = shared.node.config.a2a.push_max_configs_per_task;
    let configs: Vec<PushConfig> = shared
        .node
        .store
        .records::<StoredConfig>(Collection::A2aPushConfigs, &task_prefix(&request.task_id), max)
        .await?
        .into_iter()
        .map(|(_, stored)| stored.config)
        .filter(|config| request.page_token.is_empty() || config.id > request.page_token)
        .collect();
    let page_size = match request.page_size {
        Some(size) if size > 0 => size as usize,
        _ => configs.len(),
    };
    let more = configs.len() > page_size;
    let page: Vec<PushConfig> = configs.into_iter().take(page_size).collect();
    let mut answer = json!({ "configs": page });
    if more && let Some(last) = page.last() {
        answer["nextPageToken"] = Value::String(last.id.clone());
    }
    Ok(answer)
}

/// `DeleteTaskPushNotificationConfig`: an unknown id succeeds, as the SDK's
/// handler does; what was still owed to it is dropped at its next attempt.
pub async fn delete(shared: &Shared, params: Value) -> Result<Value, A2aError> {
    enabled(shared)?;
    let request: ConfigIdRequest = super::wire::params(params)?;
    required(&request.task_id, "taskId")?;
    required(&request.id, "id")?;
    super::load_task(shared, &request.task_id).await?;
    let store = &shared.node.store;
    let taken = store
        .take::<StoredConfig>(
            Collection::A2aPushConfigs,
            &config_key(&request.task_id, &request.id),
        )
        .await?;
    store.commit().await?;
    if let Some(taken) = taken
        && let Err(error) = shared.push.quota.refund(&taken.charge).await
    {
        tracing::warn!(transport = "a2a", %error, "a deleted push config's charge was not taken back");
    }
    Ok(Value::Null)
}

fn required(value: &str, name: &str) -> Result<(), A2aError> {
    if value.is_empty() {
        Err(A2aError::invalid_params(format!(
            "Validation failed: {name} is required"
        )))
    } else {
        Ok(())
    }
}

/// The events a stored task's state owes its webhooks, in order: the new
/// task; input-required; the end's artifacts then its status. Nothing for
/// a working task (not a state a caller waits for).
fn owed_for(task: &Task) -> Vec<Owed> {
    let status = || {
        let update = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            status: task.status.clone(),
        });
        Owed::Event(serde_json::to_value(update).unwrap_or(Value::Null))
    };
    match &task.status.state {
        TaskState::Submitted => vec![Owed::Event(
            serde_json::to_value(StreamResponse::Task(task.clone())).unwrap_or(Value::Null),
        )],
        TaskState::InputRequired | TaskState::AuthRequired => vec![status()],
        state if state.is_terminal() => {
            let mut owed: Vec<Owed> = (0..task.artifacts.len())
                .map(|index| Owed::Artifact { index })
                .collect();
            owed.push(status());
            owed
        }
        _ => Vec::new(),
    }
}

/// The end of a task as a stream sends it: each artifact whole, then the status.
pub fn closing_events(task: &Task) -> Vec<StreamResponse> {
    let mut events: Vec<StreamResponse> = task
        .artifacts
        .iter()
        .map(|artifact| {
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                artifact: artifact.clone(),
                append: false,
                last_chunk: true,
            })
        })
        .collect();
    events.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
    }));
    events
}

/// The outbox records `task`'s state owes its webhooks, to be written with it
/// in one atomic step; none when push is off, the state owes nothing, or the
/// outbox holds `a2a.push_max_pending` (then the deliveries are dropped and
/// counted: push never fails a task, as in the SDK).
pub async fn owed_writes(
    shared: &A2aState,
    task: &Task,
) -> Result<Vec<(Collection, Vec<u8>, Value, Option<u64>)>, A2aError> {
    let config = &shared.node.config.a2a;
    if !config.push_enabled {
        return Ok(Vec::new());
    }
    let owed = owed_for(task);
    if owed.is_empty() {
        return Ok(Vec::new());
    }
    let webhooks = shared
        .node
        .store
        .keys(
            Collection::A2aPushConfigs,
            &task_prefix(&task.id),
            config.push_max_configs_per_task,
        )
        .await?;
    if webhooks.is_empty() {
        return Ok(Vec::new());
    }
    let wanted = webhooks.len() * owed.len();
    if shared.push.pending.load(Ordering::Relaxed).saturating_add(wanted) > config.push_max_pending {
        tracing::warn!(transport = "a2a", task = %task.id, "push deliveries dropped: a2a.push_max_pending are owed already");
        deliver::count(shared, "dropped", wanted as u64);
        return Ok(Vec::new());
    }
    let now = now_ms();
    let expires = Some(
        now.saturating_add(config.push_retry_for_ms)
            .saturating_add(60_000),
    );
    let mut writes = Vec::with_capacity(wanted);
    for owed in owed {
        let sequence = shared.push.next_sequence();
        for webhook in &webhooks {
            let mut key = webhook.clone();
            key.extend_from_slice(format!("\0{sequence:020}").as_bytes());
            let delivery = Delivery {
                owed: owed.clone(),
                created_ms: now,
                attempts: 0,
                next_ms: now,
                claim: None,
            };
            writes.push((
                Collection::A2aPushOutbox,
                key,
                serde_json::to_value(delivery)?,
                expires,
            ));
        }
    }
    shared.push.pending.fetch_add(wanted, Ordering::Relaxed);
    Ok(writes)
}
