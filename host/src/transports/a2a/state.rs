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
//! own, or when it was this very process that ran it. On a shared store a
//! running task holds a lease ([`crate::store::lease`]); when its node dies,
//! another node takes the lease and stores the task failed
//! ([`A2aState::fail_stopped`]).
//!
//! Bounds: running tasks in total and per client address ([`RunSlot`], the
//! node's shared [`crate::policy::admission`]: a client fanning out past its
//! bound waits briefly for a place before it is refused), new tasks per client
//! address per minute, tasks per context, and the task TTL
//! for what is stored. A client address is the listener's (IPv6 by /64).
//! Stored tasks are bounded per client address in count and bytes, and in
//! bytes for the whole node ([`crate::policy::quota`], whose records live in
//! the store, so the bounds hold across restarts and on a fleet): a client
//! opening a fresh context per request escapes the per-context cap, not these.
//! A task's bytes are its stored JSON, charged when it is created and again by
//! what it grows (its answer), rather than a worst case fixed at creation: an
//! answer may be up to 1 MiB (twice: artifact and final status), so charging
//! that up front would leave an honest client a few dozen tasks. Each task
//! carries its [`Charge`] in its record, so a save after a restart (an
//! orphan read as failed) still charges the right record.
//! A `ListTasks` page ([`A2a::list_page`]) reads the context's tasks one at a
//! time and stops at its byte budget, so a context of large tasks is never
//! held whole.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, broadcast};

use super::error::A2aError;
use super::wire::{ListTasksRequest, ListTasksResponse};
use crate::jsonrpc::Faults;
use crate::models::a2a::{
    Message, Part, StreamResponse, Task, TaskState, TaskStatus, TaskStatusUpdateEvent, timestamp_now,
};
use crate::node::state::NodeState;
use crate::policy::admission::{Admission, Bounds, Slot};
use crate::policy::quota::{Charge, QuotaBounds, QuotaError, StoredQuota};
use crate::policy::rate::RateTable;
use crate::runtime::{ApprovalOutcome, Approvals};
use crate::store::lease::{Lease, Leases};
use crate::store::{Collection, now_ms};

/// Events one running task buffers for its slowest reader.
const EVENT_BUFFER: usize = 1024;
/// Compare-and-swap retries when several writers add tasks to one context.
const CONTEXT_RETRIES: usize = 16;

pub type Shared = Arc<A2aState>;

pub struct A2aState {
    pub node: NodeState,
    /// This process, in stored tasks: tells "ran here and ended" from "runs elsewhere".
    run_id: String,
    /// The running tasks' leases, on a shared store.
    leases: Option<Leases>,
    live: Mutex<HashMap<String, Arc<LiveTask>>>,
    running: Admission<IpAddr>,
    /// `a2a.new_tasks_per_ip_per_minute`, one bucket per client address.
    new_tasks: Mutex<RateTable<IpAddr>>,
    /// Stored tasks per client address and in total (`a2a.max_stored_task*`).
    stored: StoredQuota,
    /// The charges of the tasks running here, by task id, for their saves.
    charges: Mutex<HashMap<String, Charge>>,
    /// Push notification configs' bounds and the deliverer's state.
    pub push: super::push::Push,
}

/// Client rate buckets kept; beyond, a client seen once is forgotten first ([`RateTable`]).
const MAX_RATE_BUCKETS: usize = 10_000;

/// The levels a stored task wraps around each of its messages (the record, the
/// task, and its `history` or `status`; an artifact's parts sit as deep as a
/// message's): a message may nest the store's read depth less these.
pub const STORED_LEVELS_ABOVE_MESSAGE: usize = 3;

/// A stored task and the process that ran it.
#[derive(Serialize, Deserialize)]
struct StoredTask {
    task: Task,
    runner: String,
    /// What the task was charged to its client (none in tasks older than the bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    charge: Option<Charge>,
}

/// A stored task read for its state alone: serde skips the rest unparsed.
#[derive(Deserialize)]
struct StoredState {
    task: TaskHead,
    runner: String,
}

#[derive(Deserialize)]
struct TaskHead {
    status: StatusHead,
}

#[derive(Deserialize)]
struct StatusHead {
    state: TaskState,
}

/// A `ListTasks` page being filled: at most `max_tasks`, and past its first
/// task at most `max_bytes` of tasks as written.
struct Page {
    tasks: Vec<Task>,
    bytes: usize,
    max_tasks: usize,
    max_bytes: usize,
}

impl Page {
    fn new(max_tasks: usize, max_bytes: usize) -> Page {
        Page {
            tasks: Vec::new(),
            bytes: 0,
            max_tasks,
            max_bytes,
        }
    }

    fn is_full(&self) -> bool {
        self.tasks.len() >= self.max_tasks
    }

    /// Take `task` if it fits; a first task always does, so every page moves
    /// its reader on (the message limits bound that one task).
    fn take(&mut self, task: Task) -> bool {
        let size = written_len(&task);
        if !self.tasks.is_empty() && self.bytes.saturating_add(size) > self.max_bytes {
            return false;
        }
        self.bytes = self.bytes.saturating_add(size);
        self.tasks.push(task);
        true
    }
}

/// The bytes `task` takes as JSON, counted as serde writes them, never held.
fn written_len(task: &Task) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Neither a counter nor a task's serialisation can fail.
    let _ = serde_json::to_writer(&mut counter, task);
    counter.0
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

impl A2aState {
    pub fn new(node: NodeState) -> Shared {
        let running = Admission::new(Bounds {
            total: node.config.a2a.max_running_tasks,
            total_key: "a2a.max_running_tasks",
            per_client: node.config.a2a.max_running_tasks_per_ip,
            per_client_key: "a2a.max_running_tasks_per_ip",
            wait: std::time::Duration::from_millis(node.config.http.admission_wait_ms),
        });
        let per_minute = node.config.a2a.new_tasks_per_ip_per_minute;
        let stored = StoredQuota::new(
            node.store.clone(),
            "a2a_tasks",
            QuotaBounds {
                per_client_items: node.config.a2a.max_stored_tasks_per_client,
                per_client_items_key: "a2a.max_stored_tasks_per_client",
                per_client_bytes: node.config.a2a.max_stored_task_bytes_per_client,
                per_client_bytes_key: "a2a.max_stored_task_bytes_per_client",
                total_bytes: node.config.a2a.max_stored_task_bytes,
                total_bytes_key: "a2a.max_stored_task_bytes",
            },
            std::time::Duration::from_secs(node.config.a2a.task_ttl_secs),
        );
        let lease_length = std::time::Duration::from_millis(node.config.store.lease_ms);
        let push = super::push::Push::new(&node);
        Arc::new(A2aState {
            push,
            leases: Leases::new(&node.store, "a2a", lease_length),
            node,
            run_id: crate::store::lease::node_id().to_string(),
            live: Mutex::new(HashMap::new()),
            running,
            new_tasks: Mutex::new(RateTable::new(MAX_RATE_BUCKETS, per_minute)),
            stored,
            charges: Mutex::new(HashMap::new()),
        })
    }

    pub(super) fn expires(&self) -> Option<u64> {
        Some(now_ms().saturating_add(self.node.config.a2a.task_ttl_secs.saturating_mul(1000)))
    }

    /// A place for one more running task, waited for within
    /// `http.admission_wait_ms`, or `Busy` naming the bound.
    pub async fn reserve(&self, client: IpAddr) -> Result<RunSlot, A2aError> {
        let config = &self.node.config.a2a;
        let client = crate::listener::caps::client_key(client);
        if let Err(refusal) = self.new_tasks.lock().admit(client) {
            return Err(A2aError::Busy(format!(
                "this client started {} tasks in the last minute (a2a.new_tasks_per_ip_per_minute); try again in {} s",
                config.new_tasks_per_ip_per_minute,
                refusal.retry_after_secs()
            )));
        }
        let slot = self
            .running
            .admit(&client)
            .await
            .map_err(|refusal| A2aError::Busy(format!("running tasks: {refusal}")))?;
        Ok(RunSlot { slot })
    }

    /// This node's leases on its running tasks; `None` on a store of its own.
    pub fn leases(&self) -> Option<&Leases> {
        self.leases.as_ref()
    }

    /// Hold task `task_id` for this node while it runs (a shared store only).
    pub async fn lease(&self, task_id: &str) -> Result<Option<Lease>, A2aError> {
        match &self.leases {
            Some(leases) => Ok(Some(leases.acquire(task_id, serde_json::Value::Null).await?)),
            None => Ok(None),
        }
    }

    pub fn live(&self, task_id: &str) -> Option<Arc<LiveTask>> {
        self.live.lock().get(task_id).cloned()
    }

    /// A stored task, now running here; its saves charge its growth to `charge`.
    pub fn insert_live(&self, task: Task, charge: Charge) -> Arc<LiveTask> {
        let live = Arc::new(LiveTask::new(task));
        self.charges.lock().insert(live.id.clone(), charge);
        self.live.lock().insert(live.id.clone(), live.clone());
        live
    }

    pub fn remove_live(&self, task_id: &str) {
        self.live.lock().remove(task_id);
        self.charges.lock().remove(task_id);
    }

    /// Charge a new task, about to be stored for `client`, to the stored-task
    /// bounds, or refuse it as `Busy` naming the bound (then nothing is charged).
    pub async fn admit_stored(&self, client: IpAddr, task: &Task) -> Result<Charge, A2aError> {
        let client = crate::listener::caps::client_key(client).to_string();
        self.stored
            .admit(&client, written_len(task) as u64)
            .await
            .map_err(quota_error)
    }

    /// A task charged by [`A2a::admit_stored`] that was not stored after all.
    pub async fn refund_stored(&self, charge: &Charge) {
        if let Err(error) = self.stored.refund(charge).await {
            tracing::warn!(transport = "a2a", %error, "an unstored task's charge was not taken back");
        }
    }

    /// Store a new task with its charge (made for it as it is now).
    pub async fn save_new(&self, task: &Task, charge: &Charge) -> Result<(), A2aError> {
        self.put_stored(task, Some(charge.clone())).await
    }

    pub async fn save(&self, task: &Task) -> Result<(), A2aError> {
        let charge = self.charges.lock().get(&task.id).cloned();
        self.save_charged(task, charge).await
    }

    /// Store `task`, first charging what it grew by since it was last charged.
    async fn save_charged(&self, task: &Task, charge: Option<Charge>) -> Result<(), A2aError> {
        let charge = match charge {
            Some(mut charge) => {
                match self.stored.grow(&mut charge, written_len(task) as u64).await {
                    Ok(()) => {
                        if let Some(held) = self.charges.lock().get_mut(&task.id) {
                            held.clone_from(&charge);
                        }
                    }
                    // Failing the save would lose the task's state, not its growth's count.
                    Err(error) => {
                        tracing::warn!(transport = "a2a", task = %task.id, %error, "a task's growth was not charged")
                    }
                }
                Some(charge)
            }
            None => None,
        };
        self.put_stored(task, charge).await
    }

    async fn put_stored(&self, task: &Task, charge: Option<Charge>) -> Result<(), A2aError> {
        let stored = StoredTask {
            task: task.clone(),
            runner: self.run_id.clone(),
            charge,
        };
        // What the state owes the task's webhooks goes in the same atomic step.
        let owed = super::push::owed_writes(self, task).await?;
        let store = &self.node.store;
        if owed.is_empty() {
            store
                .put(Collection::A2aTasks, task.id.as_bytes(), &stored, self.expires())
                .await?;
            return Ok(());
        }
        let mut writes = vec![(
            Collection::A2aTasks,
            task.id.as_bytes().to_vec(),
            serde_json::to_value(&stored)?,
            self.expires(),
        )];
        writes.extend(owed);
        store.put_all(&writes).await?;
        self.push.wake();
        Ok(())
    }

    /// The task as it stands: live here, else as stored (an orphan read as failed).
    pub async fn load(&self, task_id: &str) -> Result<Option<Task>, A2aError> {
        if let Some(live) = self.live(task_id) {
            return Ok(Some(live.snapshot()));
        }
        let Some(stored) = self.read_stored::<StoredTask>(task_id).await? else {
            return Ok(None);
        };
        let mut task = stored.task;
        if self.orphaned(task_id, &task.status.state, &stored.runner) {
            task.status = stopped_status(&task);
            self.save_charged(&task, stored.charge).await?;
        }
        Ok(Some(task))
    }

    /// Store task `task_id` failed because the node running it stopped (its
    /// lease expired); a task that ended meanwhile, or runs here, is left as it is.
    /// Committed before it returns: the lease goes only once the end is stored.
    pub async fn fail_stopped(&self, task_id: &str) -> Result<(), A2aError> {
        if self.live(task_id).is_some() {
            return Ok(());
        }
        let Some(stored) = self.read_stored::<StoredTask>(task_id).await? else {
            return Ok(());
        };
        let mut task = stored.task;
        if task.status.state.is_terminal() {
            return Ok(());
        }
        task.status = stopped_status(&task);
        self.save_charged(&task, stored.charge).await?;
        self.node.store.commit().await?;
        Ok(())
    }

    /// A task's record in the store, read as `T`: the whole task, or its state alone.
    async fn read_stored<T: DeserializeOwned>(&self, task_id: &str) -> Result<Option<T>, A2aError> {
        Ok(self
            .node
            .store
            .get::<T>(Collection::A2aTasks, task_id.as_bytes())
            .await?)
    }

    /// Whether a stored task in `state`, run by `runner`, lost its runner (the
    /// node stopped during it): knowable on a store of its own, or when it was
    /// this very process that ran it.
    fn orphaned(&self, task_id: &str, state: &TaskState, runner: &str) -> bool {
        !state.is_terminal()
            && (runner == self.run_id || !self.node.store.is_shared())
            // It may have ended since the store was read.
            && self.live(task_id).is_none()
    }

    /// A task's state as [`A2a::load`] gives it, read without its messages.
    async fn state_of(&self, task_id: &str) -> Result<Option<TaskState>, A2aError> {
        if let Some(live) = self.live(task_id) {
            return Ok(Some(live.state()));
        }
        let Some(stored) = self.read_stored::<StoredState>(task_id).await? else {
            return Ok(None);
        };
        let state = stored.task.status.state;
        Ok(Some(if self.orphaned(task_id, &state, &stored.runner) {
            TaskState::Failed
        } else {
            state
        }))
    }

    /// One `ListTasks` page of a context, newest first, after the task
    /// `pageToken` names: at most `page_size` tasks and, past the first, at most
    /// `a2a.max_list_bytes` of them as written. Tasks are read one at a time
    /// (the count for `totalSize` reads their state alone), so one call holds
    /// about a page, however large the context.
    pub async fn list_page(
        &self,
        request: &ListTasksRequest,
        page_size: u32,
    ) -> Result<ListTasksResponse, A2aError> {
        let mut ids = self.context_tasks(&request.context_id).await?;
        ids.reverse();
        // Ids after the token's keep their place when newer tasks join the context.
        let start = match request.page_token.as_str() {
            "" => 0,
            token => ids
                .iter()
                .position(|id| id == token)
                .map(|index| index + 1)
                .ok_or_else(|| A2aError::invalid_params("pageToken is not one this node gave"))?,
        };
        let wanted = |state: &TaskState| request.status.as_ref().is_none_or(|status| status == state);
        let mut listed = Vec::with_capacity(ids.len());
        for id in &ids {
            listed.push(self.state_of(id).await?.is_some_and(|state| wanted(&state)));
        }
        let total_size = listed.iter().filter(|listed| **listed).count();
        let artifacts = request.include_artifacts.unwrap_or(false);
        let mut page = Page::new(page_size as usize, self.node.config.a2a.max_list_bytes);
        let mut more = false;
        let candidates = ids.iter().zip(&listed).skip(start).filter(|(_, listed)| **listed);
        for (id, _) in candidates {
            if page.is_full() {
                more = true;
                break;
            }
            let Some(task) = self.load(id).await? else {
                continue;
            };
            if !wanted(&task.status.state) {
                continue;
            }
            if !page.take(task.into_view(request.history_length, artifacts)) {
                more = true;
                break;
            }
        }
        let next_page_token = match page.tasks.last() {
            Some(last) if more => last.id.clone(),
            _ => String::new(),
        };
        Ok(ListTasksResponse {
            tasks: page.tasks,
            next_page_token,
            page_size,
            total_size: total_size as u32,
        })
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

/// A stored-task bound's refusal as A2A answers its other bounds (busy).
fn quota_error(error: QuotaError) -> A2aError {
    match error {
        QuotaError::Store(error) => error.into(),
        refused => A2aError::Busy(format!("stored tasks: {refused}")),
    }
}

/// One running task's place in the bounds; released when the task stops running.
pub struct RunSlot {
    slot: Slot<IpAddr>,
}

impl RunSlot {
    /// The client address the task runs for, as the bounds count addresses.
    pub fn client(&self) -> IpAddr {
        *self.slot.client()
    }
}

/// Who may answer task `id`'s approvals: a client message to that task, on any node.
pub fn approval_scope(id: &str) -> String {
    format!("a2a:{id}")
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
    /// The approval the task waits for ([`crate::runtime::approval`] holds the wait).
    pending: Option<String>,
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

    pub fn state(&self) -> TaskState {
        self.inner.lock().task.status.state.clone()
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
    pub fn park(&self, approval_id: &str) -> bool {
        let mut inner = self.inner.lock();
        if inner.pending.is_some() || inner.task.status.state.is_terminal() {
            return false;
        }
        inner.pending = Some(approval_id.to_string());
        true
    }

    /// Forget the waiting approval if it is still `approval_id`; whether it was.
    pub fn unpark(&self, approval_id: &str) -> bool {
        let mut inner = self.inner.lock();
        if inner.pending.as_deref() == Some(approval_id) {
            inner.pending = None;
            return true;
        }
        false
    }

    /// Answer the waiting approval with the client's message, which must name it
    /// (`outcome` reads it): the task goes back to working, the decision goes to
    /// the waiting tool, and the caller gets the task and its events from here on.
    pub fn resume(
        &self,
        message: Message,
        approvals: &Approvals,
        outcome: impl FnOnce(&str) -> Result<ApprovalOutcome, A2aError>,
    ) -> Result<(Task, broadcast::Receiver<StreamResponse>), A2aError> {
        let mut inner = self.inner.lock();
        let state = inner.task.status.state.clone();
        let Some(pending) = inner.pending.as_ref() else {
            return Err(A2aError::invalid_params(format!(
                "task {} is not waiting for input (it is {})",
                self.id,
                state_name(&state)
            )));
        };
        if state != TaskState::InputRequired {
            return Err(A2aError::invalid_params(format!(
                "task {} is not waiting for input yet; retry in a moment",
                self.id
            )));
        }
        let decision = outcome(pending)?;
        let Some(approval_id) = inner.pending.take() else {
            return Err(A2aError::Internal("the pending approval vanished".into()));
        };
        inner.task.history.push(message);
        inner.task.status = TaskStatus {
            state: TaskState::Working,
            message: None,
            timestamp: timestamp_now(),
            ..TaskStatus::default()
        };
        let event = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: inner.task.id.clone(),
            context_id: inner.task.context_id.clone(),
            status: inner.task.status.clone(),
        });
        let _ = inner.events.send(event);
        let watched = (inner.task.clone(), inner.events.subscribe());
        // The wait may have ended this instant; then the decision is moot and
        // the task goes on as the deadline decided (timed out).
        if let Some(waiting) = approvals.take(&approval_scope(&self.id), &approval_id) {
            waiting.deliver(decision);
        }
        Ok(watched)
    }

    /// Ask the runner to stop; false if the task already ended.
    pub fn cancel(&self) -> Result<broadcast::Receiver<StreamResponse>, TaskState> {
        let mut inner = self.inner.lock();
        let state = inner.task.status.state.clone();
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

/// The end of a task whose node stopped while it ran.
pub fn stopped_status(task: &Task) -> TaskStatus {
    let message = Message::agent(
        task,
        vec![Part::text(
            "The node running this task stopped before it finished; send the message again.",
        )],
    );
    status(TaskState::Failed, Some(message))
}

/// A status as of now.
pub fn status(state: TaskState, message: Option<Message>) -> TaskStatus {
    TaskStatus {
        state,
        message,
        timestamp: timestamp_now(),
        ..TaskStatus::default()
    }
}

/// A state as the wire names it, for messages.
pub fn state_name(state: &TaskState) -> String {
    state.to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::models::a2a::Artifact;
    use crate::store::depth as json_depth;

    fn message(data: serde_json::Value) -> Message {
        serde_json::from_value(json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"data": data}]}))
            .unwrap()
    }

    #[test]
    fn a_stored_task_wraps_its_messages_in_the_levels_the_door_allows_for() {
        let deep = message(json!({"a": {"b": [1]}}));
        let message_depth = json_depth::depth(&serde_json::to_vec(&deep).unwrap());
        let mut task: Task = serde_json::from_value(json!({"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "x"}}))
        .unwrap();
        let stored_depth = |task: &Task| {
            let stored = StoredTask {
                task: task.clone(),
                runner: "r".into(),
                charge: None,
            };
            json_depth::depth(&serde_json::to_vec(&stored).unwrap())
        };
        task.history.push(deep.clone());
        assert_eq!(stored_depth(&task), STORED_LEVELS_ABOVE_MESSAGE + message_depth);
        task.history.clear();
        task.status.message = Some(deep.clone());
        assert_eq!(stored_depth(&task), STORED_LEVELS_ABOVE_MESSAGE + message_depth);
        task.status.message = None;
        task.artifacts.push(Artifact {
            artifact_id: "a".into(),
            name: None,
            parts: deep.parts.clone(),
            ..Artifact::default()
        });
        assert_eq!(stored_depth(&task), STORED_LEVELS_ABOVE_MESSAGE + message_depth);
    }
}
