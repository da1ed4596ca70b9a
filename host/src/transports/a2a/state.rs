//! Tasks: the running ones in memory, every one in the store.
//!
//! A running task ([`LiveTask`]) holds its current [`Task`] and a broadcast of
//! its events under one lock, so a reader takes a snapshot and subscribes in
//! one step and misses nothing between the two. The store has every task
//! (`a2a_tasks`, by id) and every context's task list (`a2a_contexts`, whose key
//! is also the id of the context's conversation history, so both expire
//! together): `GetTask` and `ListTasks` work after a restart and on every node
//! of a fleet sharing the store.
//!
//! A task stored as running that no process runs any more (the node stopped
//! during it) reads as failed, once the node can know that: on a store of its
//! own, or when it was this very process that ran it.
//!
//! Bounds: running tasks in total and per client address ([`RunSlot`]), new
//! tasks per client address per minute, tasks per context, and the task TTL
//! for what is stored. A client address is the listener's (IPv6 by /64).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use governor::{DefaultKeyedRateLimiter, Quota};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, broadcast, oneshot};

use super::error::A2aError;
use super::wire::{
    Message, Part, StreamResponse, Task, TaskState, TaskStatus, TaskStatusUpdateEvent, timestamp_now,
};
use crate::node::state::NodeState;
use crate::runtime::ApprovalOutcome;
use crate::store::{Collection, now_ms};

/// Events one running task buffers for its slowest reader.
const EVENT_BUFFER: usize = 1024;
/// Compare-and-swap retries when several writers add tasks to one context.
const CONTEXT_RETRIES: usize = 16;

pub type Shared = Arc<A2a>;

pub struct A2a {
    pub node: NodeState,
    /// This process, in stored tasks: tells "ran here and ended" from "runs elsewhere".
    run_id: String,
    live: Mutex<HashMap<String, Arc<LiveTask>>>,
    running: Arc<Semaphore>,
    running_per_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
    /// `a2a.new_tasks_per_ip_per_minute`, one bucket per client address.
    new_tasks: DefaultKeyedRateLimiter<IpAddr>,
}

/// Client buckets kept before idle (full) ones are dropped.
const MAX_RATE_BUCKETS: usize = 10_000;

/// A stored task and the process that ran it.
#[derive(Serialize, Deserialize)]
struct StoredTask {
    task: Task,
    runner: String,
}

/// A context's tasks, oldest first.
#[derive(Serialize, Deserialize, Clone, PartialEq, Default)]
struct ContextRecord {
    tasks: Vec<String>,
}

/// The conversation history (and context record key) of an A2A context.
pub fn context_key(context_id: &str) -> String {
    format!("a2a:{context_id}")
}

impl A2a {
    pub fn new(node: NodeState) -> Shared {
        let running = Arc::new(Semaphore::new(node.config.a2a.max_running_tasks));
        let per_minute =
            NonZeroU32::new(node.config.a2a.new_tasks_per_ip_per_minute).unwrap_or(NonZeroU32::MIN);
        Arc::new(A2a {
            node,
            run_id: uuid::Uuid::new_v4().to_string(),
            live: Mutex::new(HashMap::new()),
            running,
            running_per_ip: Arc::new(Mutex::new(HashMap::new())),
            new_tasks: DefaultKeyedRateLimiter::keyed(Quota::per_minute(per_minute)),
        })
    }

    fn expires(&self) -> Option<u64> {
        Some(now_ms().saturating_add(self.node.config.a2a.task_ttl_secs.saturating_mul(1000)))
    }

    /// A place for one more running task, or `Busy` naming the bound.
    pub fn reserve(&self, client: IpAddr) -> Result<RunSlot, A2aError> {
        let config = &self.node.config.a2a;
        let client = crate::listener::caps::client_key(client);
        if self.new_tasks.len() > MAX_RATE_BUCKETS {
            self.new_tasks.retain_recent();
        }
        if self.new_tasks.check_key(&client).is_err() {
            return Err(A2aError::Busy(format!(
                "this client started {} tasks in the last minute (a2a.new_tasks_per_ip_per_minute); try again shortly",
                config.new_tasks_per_ip_per_minute
            )));
        }
        let mut per_ip = self.running_per_ip.lock();
        let mine = per_ip.get(&client).copied().unwrap_or(0);
        if mine >= config.max_running_tasks_per_ip {
            return Err(A2aError::Busy(format!(
                "this client already has {mine} running tasks (a2a.max_running_tasks_per_ip); wait for one to finish"
            )));
        }
        let permit = self.running.clone().try_acquire_owned().map_err(|_| {
            A2aError::Busy(format!(
                "the node is running {} tasks, its limit (a2a.max_running_tasks); try again shortly",
                config.max_running_tasks
            ))
        })?;
        per_ip.insert(client, mine + 1);
        Ok(RunSlot {
            _permit: permit,
            client,
            per_ip: self.running_per_ip.clone(),
        })
    }

    pub fn live(&self, task_id: &str) -> Option<Arc<LiveTask>> {
        self.live.lock().get(task_id).cloned()
    }

    pub fn insert_live(&self, task: Task) -> Arc<LiveTask> {
        let live = Arc::new(LiveTask::new(task));
        self.live.lock().insert(live.id.clone(), live.clone());
        live
    }

    pub fn remove_live(&self, task_id: &str) {
        self.live.lock().remove(task_id);
    }

    pub async fn save(&self, task: &Task) -> Result<(), A2aError> {
        let stored = StoredTask {
            task: task.clone(),
            runner: self.run_id.clone(),
        };
        self.node
            .store
            .put(Collection::A2aTasks, task.id.as_bytes(), &stored, self.expires())
            .await?;
        Ok(())
    }

    /// The task as it stands: live here, else as stored (an orphan read as failed).
    pub async fn load(&self, task_id: &str) -> Result<Option<Task>, A2aError> {
        if let Some(live) = self.live(task_id) {
            return Ok(Some(live.snapshot()));
        }
        let Some(stored) = self
            .node
            .store
            .get::<StoredTask>(Collection::A2aTasks, task_id.as_bytes())
            .await?
        else {
            return Ok(None);
        };
        let mut task = stored.task;
        let orphaned = !task.status.state.is_terminal()
            && (stored.runner == self.run_id || !self.node.store.is_shared())
            // It may have ended between the two reads above.
            && self.live(task_id).is_none();
        if orphaned {
            task.status = TaskStatus {
                state: TaskState::Failed,
                message: Some(Message::agent(
                    &task,
                    vec![Part::text(
                        "The node stopped while this task was running; send the message again.",
                    )],
                )),
                timestamp: timestamp_now(),
            };
            self.save(&task).await?;
        }
        Ok(Some(task))
    }

    /// Add a task to its context, refused when the context holds its maximum.
    pub async fn add_to_context(&self, context_id: &str, task_id: &str) -> Result<(), A2aError> {
        let key = context_key(context_id);
        let store = &self.node.store;
        let max = self.node.config.a2a.max_tasks_per_context;
        for _ in 0..CONTEXT_RETRIES {
            let current = store
                .get::<ContextRecord>(Collection::A2aContexts, key.as_bytes())
                .await?;
            let mut next = current.clone().unwrap_or_default();
            if next.tasks.len() >= max {
                return Err(A2aError::Busy(format!(
                    "context {context_id} holds {max} tasks, its limit (a2a.max_tasks_per_context); start a new context"
                )));
            }
            next.tasks.push(task_id.to_string());
            let done = match &current {
                Some(current) => {
                    store
                        .update(
                            Collection::A2aContexts,
                            key.as_bytes(),
                            current,
                            &next,
                            self.expires(),
                        )
                        .await?
                }
                None => {
                    store
                        .insert_new(Collection::A2aContexts, key.as_bytes(), &next, self.expires())
                        .await?
                }
            };
            if done {
                return Ok(());
            }
        }
        Err(A2aError::Busy(format!(
            "context {context_id} is being changed by many requests at once; try again"
        )))
    }

    /// A context's task ids, oldest first.
    pub async fn context_tasks(&self, context_id: &str) -> Result<Vec<String>, A2aError> {
        let record = self
            .node
            .store
            .get::<ContextRecord>(Collection::A2aContexts, context_key(context_id).as_bytes())
            .await?;
        Ok(record.unwrap_or_default().tasks)
    }
}

/// One running task's place in the bounds; released when the task stops running.
pub struct RunSlot {
    _permit: OwnedSemaphorePermit,
    client: IpAddr,
    per_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let mut per_ip = self.per_ip.lock();
        if let Some(count) = per_ip.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                per_ip.remove(&self.client);
            }
        }
    }
}

/// A tool call waiting for the client's decision.
pub struct Pending {
    pub approval_id: String,
    pub decide: oneshot::Sender<ApprovalOutcome>,
}

pub struct LiveTask {
    pub id: String,
    inner: Mutex<Inner>,
    cancelled: AtomicBool,
    cancel: Notify,
}

struct Inner {
    task: Task,
    events: broadcast::Sender<StreamResponse>,
    pending: Option<Pending>,
}

impl LiveTask {
    fn new(task: Task) -> LiveTask {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        LiveTask {
            id: task.id.clone(),
            inner: Mutex::new(Inner {
                task,
                events,
                pending: None,
            }),
            cancelled: AtomicBool::new(false),
            cancel: Notify::new(),
        }
    }

    pub fn snapshot(&self) -> Task {
        self.inner.lock().task.clone()
    }

    /// The task now, and every event after it.
    pub fn watch(&self) -> (Task, broadcast::Receiver<StreamResponse>) {
        let inner = self.inner.lock();
        (inner.task.clone(), inner.events.subscribe())
    }

    /// Change the task and tell its readers, as one step.
    pub fn update(&self, change: impl FnOnce(&mut Task) -> Option<StreamResponse>) -> Task {
        let mut inner = self.inner.lock();
        if let Some(event) = change(&mut inner.task) {
            // No reader is not an error: the events are also in the task.
            let _ = inner.events.send(event);
        }
        inner.task.clone()
    }

    /// Set the task's status and tell its readers.
    pub fn set_status(&self, state: TaskState, message: Option<Message>) -> Task {
        self.publish_status(status(state, message))
    }

    /// Set a status made earlier (and stored before its readers hear of it).
    pub fn publish_status(&self, status: TaskStatus) -> Task {
        self.update(|task| {
            task.status = status;
            Some(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                status: task.status.clone(),
            }))
        })
    }

    /// The task as `status` would leave it.
    pub fn with_status(&self, status: &TaskStatus) -> Task {
        let mut task = self.snapshot();
        task.status = status.clone();
        task
    }

    /// Register the one approval this task waits for; false if one already waits.
    pub fn park(&self, pending: Pending) -> bool {
        let mut inner = self.inner.lock();
        if inner.pending.is_some() || inner.task.status.state.is_terminal() {
            return false;
        }
        inner.pending = Some(pending);
        true
    }

    /// Take the waiting approval if it is still `approval_id`.
    pub fn unpark(&self, approval_id: &str) -> Option<Pending> {
        let mut inner = self.inner.lock();
        match &inner.pending {
            Some(pending) if pending.approval_id == approval_id => inner.pending.take(),
            _ => None,
        }
    }

    /// Answer the waiting approval with the client's message, which must name it:
    /// the task goes back to working, and the caller gets the task and its
    /// events from here on.
    pub fn resume(
        &self,
        message: Message,
        outcome: impl FnOnce(&Pending) -> Result<ApprovalOutcome, A2aError>,
    ) -> Result<(Task, broadcast::Receiver<StreamResponse>), A2aError> {
        let mut inner = self.inner.lock();
        let state = inner.task.status.state;
        let Some(pending) = inner.pending.as_ref() else {
            return Err(A2aError::InvalidParams(format!(
                "task {} is not waiting for input (it is {})",
                self.id,
                state_name(state)
            )));
        };
        if state != TaskState::InputRequired {
            return Err(A2aError::InvalidParams(format!(
                "task {} is not waiting for input yet; retry in a moment",
                self.id
            )));
        }
        let decision = outcome(pending)?;
        let Some(pending) = inner.pending.take() else {
            return Err(A2aError::Internal("the pending approval vanished".into()));
        };
        inner.task.history.push(message);
        inner.task.status = TaskStatus {
            state: TaskState::Working,
            message: None,
            timestamp: timestamp_now(),
        };
        let event = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: inner.task.id.clone(),
            context_id: inner.task.context_id.clone(),
            status: inner.task.status.clone(),
        });
        let _ = inner.events.send(event);
        let watched = (inner.task.clone(), inner.events.subscribe());
        // The approver may have given up this instant; then the decision is moot
        // and the task goes on as the approver decided (timed out).
        let _ = pending.decide.send(decision);
        Ok(watched)
    }

    /// Ask the runner to stop; false if the task already ended.
    pub fn cancel(&self) -> Result<broadcast::Receiver<StreamResponse>, TaskState> {
        let mut inner = self.inner.lock();
        let state = inner.task.status.state;
        if state.is_terminal() {
            return Err(state);
        }
        inner.pending = None;
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel.notify_one();
        Ok(inner.events.subscribe())
    }

    pub async fn cancelled(&self) {
        if self.cancelled.load(Ordering::SeqCst) {
            return;
        }
        self.cancel.notified().await;
    }
}

/// A status as of now.
pub fn status(state: TaskState, message: Option<Message>) -> TaskStatus {
    TaskStatus {
        state,
        message,
        timestamp: timestamp_now(),
    }
}

/// A state as the wire names it, for messages.
pub fn state_name(state: TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_default()
}
