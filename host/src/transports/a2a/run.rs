//! Running one task: the agent plugin answers the task's message through the
//! same host path as a HAI turn (transport `hai`, route `assistant`, the
//! context's history, the host's tools), and what it does becomes task events:
//!
//! - its `emit("chunk", {"content"})`s → `artifactUpdate`s of the one `answer`
//!   artifact (the last held back so it can carry `lastChunk: true`);
//! - a tool whose risk needs approval → the host's [`TaskApprover`] asks (the
//!   wait is [`crate::runtime::approval`]'s) and the task goes
//!   `TASK_STATE_INPUT_REQUIRED`, its status message
//!   carrying `{approval_id, tool_name, parameters, risk_level, description}`;
//!   only a client message answering that approval id releases it (approved →
//!   the host runs the tool; rejected → it does not, and the plugin gets the
//!   feedback, as in HAI);
//! - its reply → `TASK_STATE_COMPLETED` with the whole answer; a failure →
//!   `TASK_STATE_FAILED`; `CancelTask` → the plugin call is dropped,
//!   `TASK_STATE_CANCELED`.
//!
//! The user's message is in the context's history before the plugin runs, the
//! answer before the task reads completed, so "what did I say first?" in a
//! later task of the context sees both.
//!
//! On a shared store the run holds the task's lease ([`crate::store::lease`])
//! from its start to its stored end, through any wait for an approval (the
//! plugin call waits in this process, so a task waiting for input dies with
//! it too). A run whose lease another node took stops and writes nothing: that
//! node stored the task failed, and this node's readers are told so.

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::error::A2aError;
use super::state::{LiveTask, RunSlot, Shared, approval_scope, context_key, status};
use crate::jsonrpc::Faults;
use crate::models::a2a::{
    Artifact, Message, Part, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, new_id,
};
use crate::node::state::NodeState;
use crate::runtime::{
    ApprovalAsked, ApprovalOutcome, Approver, Call, CallEvent, EventSink, Exchange, LoadedPlugin, Phase,
    TransportKind, event_channel,
};
use crate::store::lease::{Held, Lease};
use crate::transports::chunks::{ChunkedAnswer, OverLimit, stated_answer};
use crate::vocab::{ToolLifecycle, ToolStage};

/// Host-only (a plugin's `emit` of `host.*` is refused): the approval's
/// question went unanswered, told in order after the question itself.
const EVENT_BUFFER: usize = 64;
/// The most answer text one task assembles; chunks beyond it are dropped.
const MAX_ANSWER_BYTES: usize = 1 << 20;
const MAX_FEEDBACK_CHARS: usize = 4_000;
pub const ANSWER_ARTIFACT: &str = "answer";

/// The plugin answering A2A: `a2a.default_plugin`, else the HAI assistant.
pub fn agent_plugin(node: &NodeState) -> Option<Arc<LoadedPlugin>> {
    let registry = node.runtime.registry();
    let name = &node.config.a2a.default_plugin;
    if name.is_empty() {
        registry.hai_assistant().cloned()
    } else {
        registry.by_name(name).cloned()
    }
}

/// Run `live` (its first message is the last in its history) to its end,
/// holding `lease` (a shared store) until that end is stored.
pub async fn run(shared: Shared, live: Arc<LiveTask>, slot: RunSlot, lease: Option<Lease>) {
    let task = live.snapshot();
    let work = async {
        tokio::select! {
            biased;
            () = live.cancelled() => Outcome::Canceled,
            outcome = answer(&shared, &live, &task, slot.client()) => outcome,
        }
    };
    let held = match &lease {
        Some(lease) => lease.hold(work).await,
        None => Held::Done(work.await),
    };
    let outcome = match held {
        Held::Done(outcome) => outcome,
        Held::Lost => {
            drop(slot);
            return lost(&shared, &live).await;
        }
    };
    let ended = match outcome {
        Outcome::Answered(text) => status(
            TaskState::Completed,
            Some(Message::agent(&task, vec![Part::text(text)])),
        ),
        Outcome::Failed(error) => {
            tracing::warn!(transport = "a2a", task = %task.id, %error, "task failed");
            status(
                TaskState::Failed,
                Some(Message::agent(&task, vec![Part::text(error.to_string())])),
            )
        }
        Outcome::Canceled => status(TaskState::Canceled, None),
    };
    if let Some(lease) = &lease
        && !lease.confirm().await
    {
        drop(slot);
        return lost(&shared, &live).await;
    }
    // Stored before anyone hears of it: a client told the task ended finds it
    // ended on every node, and after a restart.
    if let Err(error) = store_task(&shared, &live.with_status(&ended)).await {
        tracing::warn!(transport = "a2a", task = %task.id, %error, "the task's end was not stored");
    }
    if let Some(lease) = lease {
        lease.release().await;
    }
    // The slot is free before the client hears the end, so its next message fits.
    drop(slot);
    live.publish_status(ended);
    shared.remove_live(&task.id);
}

/// Another node took the task's lease and stored it failed: this node's
/// readers hear that end (as stored, if it can be read), and the task stops
/// running here.
async fn lost(shared: &Shared, live: &Arc<LiveTask>) {
    tracing::warn!(transport = "a2a", task = %live.id, "another node failed this task (its lease lapsed); it stops here");
    shared.remove_live(&live.id);
    let ended = match shared.load(&live.id).await {
        Ok(Some(stored)) if stored.status.state.is_terminal() => stored.status,
        _ => super::state::stopped_status(&live.snapshot()),
    };
    live.publish_status(ended);
}

enum Outcome {
    Answered(String),
    Failed(A2aError),
    Canceled,
}

async fn answer(shared: &Shared, live: &Arc<LiveTask>, task: &Task, client: IpAddr) -> Outcome {
    match try_answer(shared, live, task, client).await {
        Ok(text) => Outcome::Answered(text),
        Err(error) => Outcome::Failed(error),
    }
}

async fn try_answer(
    shared: &Shared,
    live: &Arc<LiveTask>,
    task: &Task,
    client: IpAddr,
) -> Result<String, A2aError> {
    let node = &shared.node;
    let Some(plugin) = agent_plugin(node) else {
        node.runtime.not_found_yet()?;
        return Err(A2aError::Internal(
            "no plugin answers A2A messages: load an assistant plugin or set a2a.default_plugin".into(),
        ));
    };
    let message = task
        .history
        .last()
        .cloned()
        .ok_or_else(|| A2aError::Internal("the task has no message".into()))?;
    live.set_status(TaskState::Working, None);

    let (events, stream) = event_channel(EVENT_BUFFER);
    let approver = Arc::new(TaskApprover {
        live: live.clone(),
        events: events.clone(),
    });
    let exchange = Exchange::new()
        .with_events(events)
        .with_history(context_key(&task.context_id))
        .with_approver(approver)
        .with_caller("a2a", client.to_string());
    let data: Vec<&Value> = message
        .parts
        .iter()
        .filter_map(|part| part.data.as_ref())
        .collect();
    let call = Call {
        transport: TransportKind::A2a,
        phase: Phase::Handle,
        route: "assistant".into(),
        sender: None,
        conversation: Some(task.context_id.clone()),
        body: json!({
            "content": message.text(),
            "session_id": task.context_id,
            "metadata": {"a2a": {"task_id": task.id, "context_id": task.context_id, "data": data}},
        })
        .to_string(),
    };
    let mut answer = Answer {
        shared,
        live,
        artifact_id: new_id(),
        chunks: ChunkedAnswer::new(MAX_ANSWER_BYTES),
        sent_any: false,
    };
    let outcome = node
        .runtime
        .invoke_streaming(&plugin, call, exchange, stream, &mut answer, None)
        .await;
    let stated = stated_answer(&outcome?);
    if answer.chunks.text().is_empty() {
        if stated.trim().is_empty() {
            return Err(A2aError::Internal("the agent gave no answer".into()));
        }
        answer.chunk(&stated);
    }
    append(
        shared,
        &task.context_id,
        "assistant",
        json!({"content": answer.chunks.text(), "task_id": task.id}),
    )
    .await?;
    shared.node.store.commit().await?;
    answer.finish();
    Ok(answer.chunks.text().to_string())
}

/// Store a task durably (committed), before a client hears of its state.
async fn store_task(shared: &Shared, task: &Task) -> Result<(), A2aError> {
    shared.save(task).await?;
    shared.node.store.commit().await?;
    Ok(())
}

/// Add to a context's conversation history (what the plugin's `history()` reads).
pub async fn append(shared: &Shared, context_id: &str, role: &str, body: Value) -> Result<(), A2aError> {
    let max_entries = shared.node.config.a2a.max_history_entries;
    let store = &shared.node.store;
    store
        .append_entry(&context_key(context_id), role, &body, max_entries)
        .await?;
    Ok(())
}

/// The answer being assembled and streamed.
struct Answer<'a> {
    shared: &'a Shared,
    live: &'a Arc<LiveTask>,
    artifact_id: String,
    /// The answer so far; its latest chunk is held back to say `lastChunk: true`.
    chunks: ChunkedAnswer,
    sent_any: bool,
}

impl EventSink for Answer<'_> {
    async fn on_event(&mut self, event: CallEvent) {
        match event {
            CallEvent::Plugin(event) => match event.kind.as_str() {
                "chunk" | "assistant_message_chunk" => {
                    if let Some(content) = event.data["content"].as_str() {
                        self.chunk(content);
                    }
                }
                other => tracing::debug!(kind = other, "a2a: event kind ignored"),
            },
            CallEvent::ApprovalAsked(asked) => self.ask(self.shared, &asked).await,
            CallEvent::ApprovalWithdrawn { .. } => {
                let task = self.live.snapshot();
                let note = Message::agent(
                    &task,
                    vec![Part::text(
                        "The approval was not answered in time; the tool did not run.",
                    )],
                );
                self.live.set_status(TaskState::Working, Some(note));
            }
            CallEvent::ToolCall(lifecycle) => {
                if let ToolLifecycle {
                    tool_name,
                    stage: ToolStage::Started { .. },
                    ..
                } = lifecycle
                {
                    let task = self.live.snapshot();
                    let note = Message::agent(&task, vec![Part::text(format!("Running {tool_name}…"))]);
                    self.live.set_status(TaskState::Working, Some(note));
                }
            }
        }
    }
}

impl Answer<'_> {
    fn chunk(&mut self, content: &str) {
        match self.chunks.push(content) {
            Ok(Some(previous)) => self.send(previous, false),
            Ok(None) => {}
            Err(OverLimit) => {
                tracing::warn!(task = %self.live.id, "a2a: answer over {MAX_ANSWER_BYTES} bytes; the rest is dropped")
            }
        }
    }

    /// One `artifactUpdate`; the task's artifact holds all that was sent.
    fn send(&mut self, content: String, last: bool) {
        let append = self.sent_any;
        self.sent_any = true;
        let artifact_id = self.artifact_id.clone();
        self.live.update(|task| {
            match task
                .artifacts
                .first_mut()
                .and_then(|artifact| artifact.parts.first_mut())
            {
                Some(Part { text: Some(text), .. }) => text.push_str(&content),
                _ => {
                    task.artifacts = vec![Artifact {
                        artifact_id: artifact_id.clone(),
                        name: Some(ANSWER_ARTIFACT.into()),
                        parts: vec![Part::text(content.clone())],
                        ..Artifact::default()
                    }]
                }
            }
            Some(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                artifact: Artifact {
                    artifact_id,
                    name: Some(ANSWER_ARTIFACT.into()),
                    parts: vec![Part::text(content)],
                    ..Artifact::default()
                },
                append,
                last_chunk: last,
            }))
        });
    }

    fn flush(&mut self, last: bool) {
        if let Some(held) = self.chunks.take_held() {
            self.send(held, last);
        }
    }

    fn finish(&mut self) {
        self.flush(true);
    }

    /// The host's approver asks: everything streamed so far goes out first (the
    /// stream closes at input-required), then the question.
    async fn ask(&mut self, shared: &Shared, asked: &ApprovalAsked) {
        self.flush(false);
        let task = self.live.snapshot();
        let question = format!(
            "Approve running {}? Answer with a data part {{\"approval_id\": \"{}\", \"approved\": true|false, \"feedback\": \"…\"}}.",
            asked.tool_name, asked.approval_id
        );
        let data = json!({
            "approval_id": asked.approval_id,
            "tool_name": asked.tool_name,
            "parameters": asked.arguments,
            "risk_level": asked.risk,
            "description": asked.description,
        });
        let message = Message::agent(&task, vec![Part::text(question), Part::data(data)]);
        let waiting = status(TaskState::InputRequired, Some(message));
        // Stored first, so any node of a fleet can take the answer once the client has the question.
        if let Err(error) = store_task(shared, &self.live.with_status(&waiting)).await {
            tracing::warn!(transport = "a2a", task = %task.id, %error, "the approval request was not stored");
        }
        self.live.publish_status(waiting);
    }
}

/// Asks a task's client about a risky tool call (see the module docs).
struct TaskApprover {
    live: Arc<LiveTask>,
    events: mpsc::Sender<CallEvent>,
}

#[async_trait::async_trait]
impl Approver for TaskApprover {
    fn scope(&self) -> String {
        approval_scope(&self.live.id)
    }

    async fn ask(&self, question: &ApprovalAsked) -> Result<(), String> {
        if !self.live.park(&question.approval_id) {
            return Err("another approval of this task is already waiting".into());
        }
        if self
            .events
            .send(CallEvent::ApprovalAsked(question.clone()))
            .await
            .is_err()
        {
            self.live.unpark(&question.approval_id);
            return Err("the task ended before anyone could approve".into());
        }
        Ok(())
    }

    fn withdraw(&self, question: &ApprovalAsked) {
        // A canceled task forgot its approval already: nothing to tell.
        if self.live.unpark(&question.approval_id) {
            let expired = CallEvent::ApprovalWithdrawn {
                approval_id: question.approval_id.clone(),
            };
            // The plugin waits on this very approval, so its events are drained;
            // a full stream only loses the note, not the tool's outcome.
            let _ = self.events.try_send(expired);
        }
    }
}

/// Read a client's answer to the pending approval: the data part must name it
/// and say `approved`; the feedback, if any, goes to the plugin verbatim.
pub fn decision_of(
    approval_id: &str,
    data: Option<&Map<String, Value>>,
) -> Result<ApprovalOutcome, A2aError> {
    let Some(data) = data else {
        return Err(A2aError::invalid_params(format!(
            "the task waits for approval {approval_id}: answer with a data part {{\"approval_id\", \"approved\", \"feedback\"}}"
        )));
    };
    if data.get("approval_id").and_then(Value::as_str) != Some(approval_id) {
        return Err(A2aError::invalid_params(format!(
            "approval_id does not name the pending approval ({approval_id})"
        )));
    }
    let Some(approved) = data.get("approved").and_then(Value::as_bool) else {
        return Err(A2aError::invalid_params("approved must be true or false"));
    };
    let feedback = match data.get("feedback") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.chars().count() <= MAX_FEEDBACK_CHARS => Some(text.clone()),
        Some(Value::String(_)) => {
            return Err(A2aError::invalid_params(format!(
                "feedback must be at most {MAX_FEEDBACK_CHARS} characters"
            )));
        }
        Some(_) => return Err(A2aError::invalid_params("feedback must be a string")),
    };
    Ok(if approved {
        ApprovalOutcome::Approved
    } else {
        ApprovalOutcome::Rejected { feedback }
    })
}
