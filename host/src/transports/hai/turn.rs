//! One answer to one `user_message` (the HAI specification §"Conversation Flows"):
//! `status: thinking` → the plugin's `routing` / the host's `executing_tools`,
//! `tool_call`s and `tool_approval_request`s → `assistant_message_chunk`s
//! sharing one `message_id`, the last `is_final` (or one `assistant_message`
//! when the client asked for it) → `status: completed`.
//!
//! The assistant plugin streams with `emit("chunk", {"content": …})`, may
//! report `emit("status", {"status": "routing", "message": …})` and explain a
//! risky tool call with `emit("tool_reasoning", {"reasoning": …})` just before
//! it; its reply is `{"content": …}`. The host runs its tools and asks the
//! human; every frame goes to all connections of the session, and the
//! messages, tool results and approvals go to the session's history.
//!
//! `tool_call` frames come only from the host's tool path: a plugin's `emit`
//! cannot make a [`CallEvent::ToolCall`], and, should one reach here any other
//! way, a lifecycle step is shown only when it names a loaded tool with its
//! manifest's risk, follows the host's order (started, then completed or
//! failed, once), and, for a tool that needs approval, matches what this
//! turn's approver saw.
//!
//! The user's message is committed before `thinking`, the reply before its final
//! chunk: a client that saw either can rely on the history having it.
//!
//! On a shared store a turn holds a lease from before its user message is
//! recorded to its end ([`crate::store::lease`]), so a turn whose node dies
//! is ended by another node ([`super::fleet`]); a turn whose lease another
//! node took stops here and says no more (that node told the session).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::session::{HostCalls, Origin, QueuedTurn, Session, SessionApprover};
use super::wire::{Outbound, Status, ToolStatus, UserMessage, truncate_chars};
use super::{HaiError, HaiState, history_id};

use crate::runtime::{
    ApprovalAsked, Call, CallEvent, EventSink, Exchange, Phase, Risk, TransportKind, event_channel,
};
use crate::store::lease::{Held, Lease};
use crate::transports::chunks::{ChunkedAnswer, OverLimit, stated_answer};
use crate::vocab::{ToolLifecycle, ToolStage};

/// The most reply text one turn assembles; chunks beyond it are dropped.
const MAX_REPLY_BYTES: usize = 1 << 20;
const MAX_REASONING_CHARS: usize = 1_000;
/// A tool result shown in a `tool_call` frame's `result`.
const MAX_RESULT_CHARS: usize = 4_000;
const EVENT_BUFFER: usize = 64;

/// Run a turn to its end. Every failure becomes an error frame for the session.
pub async fn run(
    shared: HaiState,
    session: Arc<Session>,
    origin: Origin,
    message: UserMessage,
    queued: QueuedTurn,
) {
    let _turn = session.turn.lock().await;
    let client = origin.ip;
    let started = std::time::Instant::now();
    let turn_id = uuid::Uuid::new_v4().to_string();
    let lease = match shared.lease_turn(&session, &turn_id).await {
        Ok(lease) => lease,
        Err(error) => {
            error.log("turn");
            session.publish(&error.to_frame());
            drop(queued);
            session.publish(&completed(&session));
            return;
        }
    };
    let work = answer(&shared, &session, origin, &message, &turn_id);
    let held = match &lease {
        Some(lease) => lease.hold(work).await,
        None => Held::Done(work.await),
    };
    let Held::Done(answered) = held else {
        tracing::warn!(transport = "hai", session = %super::access::session_tag(&session.id), "hai: another node ended this turn (its lease lapsed); it stops here");
        return;
    };
    // A turn is the WebSocket's request: the console's HAI chart counts it like an HTTP one.
    shared.node.runtime.metrics().recent.observe_request(
        "hai",
        answered.is_err(),
        started.elapsed(),
        crate::vocab::now_ms(),
    );
    if let Err(error) = answered {
        error.log("turn");
        session.publish(&error.to_frame());
    }
    // What the turn stored is charged to its client now, not at its next turn.
    if session.has_appended()
        && let Err(error) = shared.record_session(&session, client).await
    {
        error.log("turn");
    }
    // The turn no longer counts as using the session once a client can see it ended.
    drop(queued);
    session.publish(&completed(&session));
    if let Some(lease) = lease {
        lease.release().await;
    }
}

/// The frame that ends every turn.
fn completed(session: &Session) -> Outbound {
    Outbound::Status {
        status: Status::Completed,
        message: None,
        session_id: session.id.clone(),
    }
}

impl HaiState {
    /// Hold turn `turn_id` of `session` for this node while it runs (a shared store only).
    async fn lease_turn(&self, session: &Session, turn_id: &str) -> Result<Option<Lease>, HaiError> {
        match &self.leases {
            Some(leases) => Ok(Some(
                leases.acquire(turn_id, json!({"session_id": session.id})).await?,
            )),
            None => Ok(None),
        }
    }
}

async fn answer(
    shared: &HaiState,
    session: &Arc<Session>,
    origin: Origin,
    message: &UserMessage,
    turn_id: &str,
) -> Result<(), HaiError> {
    shared.record_session(session, origin.ip).await?;
    shared
        .append(
            session,
            "user",
            json!({"content": message.content, "metadata": message.metadata}),
        )
        .await?;
    shared.commit().await?;
    session.publish(&Outbound::Status {
        status: Status::Thinking,
        message: Some("Assistant is thinking...".into()),
        session_id: session.id.clone(),
    });

    let registry = shared.node.runtime.registry();
    let Some(plugin) = registry.hai_assistant().cloned() else {
        shared.node.runtime.not_found_yet()?;
        return Err(HaiError::NoAssistant);
    };
    let (events, stream) = event_channel(EVENT_BUFFER);
    let host_calls = HostCalls::default();
    let owner = origin.ip;
    let approver = Arc::new(SessionApprover {
        session: session.clone(),
        turn_id: turn_id.to_string(),
        events: events.clone(),
        calls: host_calls.clone(),
        store: shared.node.store.clone(),
    });
    let exchange = Exchange::new()
        .with_events(events)
        .with_history(history_id(&session.id))
        .with_approver(approver)
        .with_caller("hai", owner.to_string());
    let call = Call {
        transport: TransportKind::Hai,
        phase: Phase::Handle,
        route: "assistant".into(),
        sender: None,
        conversation: Some(session.id.clone()),
        body: json!({
            "content": message.content,
            "session_id": session.id,
            "metadata": message.metadata,
        })
        .to_string(),
    };
    let mut turn = Turn {
        shared,
        session,
        message_id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
        agent_id: plugin.manifest.name.clone(),
        streaming: !message.wants_complete_message(),
        answer: ChunkedAnswer::new(MAX_REPLY_BYTES),
        reasoning: None,
        calls: HashMap::new(),
        host_calls,
        announced_tools: false,
    };
    let runtime = shared.node.runtime.clone();
    let outcome = runtime
        .invoke_streaming(&plugin, call, exchange, stream, &mut turn, None)
        .await;
    match outcome {
        Ok(reply) => turn.finish(&reply).await,
        Err(error) => {
            // Close the partial message so clients stop waiting for it, then say why.
            turn.flush_final();
            Err(error.into())
        }
    }
}

/// What a tool call looked like, for the frames that follow it.
struct KnownCall {
    parameters: Value,
    approval_id: Option<String>,
    started: bool,
    ended: bool,
}

struct Turn<'a> {
    shared: &'a HaiState,
    session: &'a Arc<Session>,
    message_id: String,
    agent_id: String,
    streaming: bool,
    /// The reply so far; its latest chunk is held back to be sent with `is_final: true`.
    answer: ChunkedAnswer,
    reasoning: Option<String>,
    calls: HashMap<String, KnownCall>,
    /// What the host's approver saw; see the module docs.
    host_calls: HostCalls,
    announced_tools: bool,
}

impl EventSink for Turn<'_> {
    async fn on_event(&mut self, event: CallEvent) {
        let event = match event {
            CallEvent::Plugin(event) => event,
            CallEvent::ToolCall(lifecycle) => return self.tool_call(lifecycle).await,
            CallEvent::ApprovalAsked(asked) => return self.approval_request(asked).await,
            // The tool's lifecycle says what became of the call.
            CallEvent::ApprovalWithdrawn { .. } => return,
        };
        match event.kind.as_str() {
            "chunk" | "assistant_message_chunk" => {
                if let Some(content) = event.data["content"].as_str() {
                    self.chunk(content);
                }
            }
            "status" => {
                if let Some(status) = event.data["status"].as_str().and_then(Status::from_plugin) {
                    self.session.publish(&Outbound::Status {
                        status,
                        message: event.data["message"]
                            .as_str()
                            .map(|m| truncate_chars(m, MAX_REASONING_CHARS)),
                        session_id: self.session_id(),
                    });
                }
            }
            "tool_reasoning" => {
                self.reasoning = event.data["reasoning"]
                    .as_str()
                    .map(|r| truncate_chars(r, MAX_REASONING_CHARS));
            }
            other => tracing::debug!(kind = other, "hai: event kind ignored"),
        }
    }
}

impl Turn<'_> {
    fn session_id(&self) -> String {
        self.session.id.clone()
    }

    fn chunk(&mut self, content: &str) {
        match self.answer.push(content) {
            Ok(Some(previous)) if self.streaming => self.publish_chunk(previous, false),
            Ok(_) => {}
            Err(OverLimit) => {
                tracing::warn!(session = %super::access::session_tag(&self.session.id), "hai: reply over {MAX_REPLY_BYTES} bytes; the rest is dropped")
            }
        }
    }

    fn publish_chunk(&self, content: String, is_final: bool) {
        self.session.publish(&Outbound::AssistantMessageChunk {
            content,
            session_id: self.session_id(),
            agent_id: Some(self.agent_id.clone()),
            message_id: self.message_id.clone(),
            is_final,
        });
    }

    fn flush_final(&mut self) {
        if let Some(last) = self.answer.take_held()
            && self.streaming
        {
            self.publish_chunk(last, true);
        }
    }

    async fn approval_request(&mut self, asked: ApprovalAsked) {
        let ApprovalAsked {
            approval_id,
            call_id,
            tool_name,
            arguments: parameters,
            risk,
            description,
            ..
        } = asked;
        // Only the host's approver registers approvals; anything else is not one.
        let asked = self
            .host_calls
            .lock()
            .get(&call_id)
            .is_some_and(|mark| mark.approval_id.as_deref() == Some(approval_id.as_str()));
        let waiting = self
            .shared
            .node
            .runtime
            .approvals()
            .is_waiting(&self.session.approval_scope(), &approval_id);
        if !asked || !waiting || self.calls.contains_key(&call_id) {
            tracing::warn!(session = %super::access::session_tag(&self.session.id), "hai: an approval request not from the host was dropped");
            return;
        }
        let reasoning = self
            .reasoning
            .take()
            .unwrap_or_else(|| format!("The assistant wants to run {tool_name} to answer your message"));
        self.calls.insert(
            call_id,
            KnownCall {
                parameters: parameters.clone(),
                approval_id: Some(approval_id.clone()),
                started: false,
                ended: false,
            },
        );
        self.record(
            "approval_request",
            json!({"approval_id": approval_id, "tool_name": tool_name, "parameters": parameters, "risk_level": risk, "reasoning": reasoning}),
        )
        .await;
        self.session.publish(&Outbound::ToolApprovalRequest {
            tool_name,
            tool_description: description,
            parameters,
            reasoning,
            risk_level: risk,
            session_id: self.session_id(),
            approval_id,
        });
    }

    async fn tool_call(&mut self, event: ToolLifecycle) {
        let status = match &event.stage {
            ToolStage::Started { .. } => ToolStatus::Started,
            ToolStage::Completed { .. } => ToolStatus::Completed,
            ToolStage::Failed { .. } => ToolStatus::Failed,
        };
        let refusal = match self.host_event(&event, status) {
            Some(refusal) => refusal,
            None => {
                tracing::warn!(session = %super::access::session_tag(&self.session.id), tool = %truncate_chars(&event.tool_name, 64), "hai: a tool_call event not from the host's tool path was dropped");
                return;
            }
        };
        let ToolLifecycle {
            call_id,
            tool_name,
            risk,
            stage,
        } = event;
        if let ToolStage::Started { .. } = stage
            && !self.announced_tools
        {
            self.announced_tools = true;
            self.session.publish(&Outbound::Status {
                status: Status::ExecutingTools,
                message: Some(format!("Running {tool_name}...")),
                session_id: self.session_id(),
            });
        }
        let known = self.calls.entry(call_id.clone()).or_insert(KnownCall {
            parameters: Value::Null,
            approval_id: None,
            started: false,
            ended: false,
        });
        match &stage {
            ToolStage::Started { arguments } => {
                known.parameters = arguments.clone();
                known.started = true;
            }
            ToolStage::Completed { .. } | ToolStage::Failed { .. } => known.ended = true,
        }
        let parameters = if known.parameters.is_object() {
            known.parameters.clone()
        } else {
            json!({})
        };
        let mut metadata = json!({"risk_level": risk});
        if let Some(approval_id) = &known.approval_id {
            metadata["approval_id"] = json!(approval_id);
        }
        let result = match &stage {
            ToolStage::Started { .. } => None,
            ToolStage::Completed { result } => {
                metadata["result"] = result.clone();
                Some(match (result.as_str(), result["summary"].as_str()) {
                    (Some(text), _) | (None, Some(text)) => truncate_chars(text, MAX_RESULT_CHARS),
                    _ => truncate_chars(&result.to_string(), MAX_RESULT_CHARS),
                })
            }
            ToolStage::Failed { error } => Some(truncate_chars(error, MAX_RESULT_CHARS)),
        };
        if status != ToolStatus::Started {
            self.record(
                "tool",
                json!({"tool_call_id": call_id, "tool_name": tool_name, "status": status, "result": result}),
            )
            .await;
        }
        self.session.publish(&Outbound::ToolCall {
            tool_call_id: call_id.clone(),
            tool_name: tool_name.clone(),
            parameters,
            session_id: self.session_id(),
            status,
            result: result.clone(),
            agent_id: Some(self.agent_id.clone()),
            metadata,
        });
        // A tool that ran and failed is an error the human should see; a refusal
        // (rejected, timed out, no approver) is the human's own decision, not a failure.
        if status == ToolStatus::Failed && !stage.is_refusal() {
            let error = HaiError::ToolFailed {
                tool: tool_name,
                tool_call_id: call_id,
                message: result.unwrap_or_default(),
            };
            self.session.publish(&error.to_frame());
        }
        // Refused before a human was asked (a pending-approval bound): say which bound.
        if let Some(refusal) = refusal {
            self.session.publish(&refusal.to_frame());
        }
    }

    /// Whether a `tool_call` event is the host's (see the module docs): `None` when
    /// it is not; `Some(refusal)` with the approver's refusal of this call, if any.
    fn host_event(&self, event: &ToolLifecycle, status: ToolStatus) -> Option<Option<HaiError>> {
        let tool_name = event.tool_name.as_str();
        // Plugin tools and allow-listed tools of configured MCP servers alike.
        let risk = self.shared.node.runtime.tool_risk(tool_name);
        let threshold = Risk::parse(&self.shared.node.config.tools.approval_threshold).unwrap_or(Risk::High);
        let seen = self
            .calls
            .get(&event.call_id)
            .map(|known| (known.started, known.ended));
        let mut host_calls = self.host_calls.lock();
        let mark = host_calls.get_mut(&event.call_id);
        let approved = mark.as_ref().map(|mark| mark.approved);
        if !host_order(
            risk,
            threshold,
            &event.call_id,
            status,
            event.risk,
            seen,
            approved,
        ) {
            return None;
        }
        Some(match (status, mark) {
            (ToolStatus::Failed, Some(mark)) => mark.refusal.take(),
            _ => None,
        })
    }

    async fn finish(mut self, reply: &str) -> Result<(), HaiError> {
        let stated = stated_answer(reply);
        if self.answer.text().is_empty() {
            // Nothing was streamed: the reply is the whole answer, sent as one final chunk.
            if stated.trim().is_empty() {
                return Err(HaiError::AssistantFailed("the assistant gave no answer".into()));
            }
            self.chunk(&truncate_chars(&stated, MAX_REPLY_BYTES / 4));
        }
        // On disk before the final frame: a client that saw the whole reply finds it in the history.
        let recorded = self
            .shared
            .append(
                self.session,
                "assistant",
                json!({"content": self.answer.text(), "message_id": self.message_id, "agent_id": self.agent_id}),
            )
            .await;
        let recorded = match recorded {
            Ok(()) => self.shared.commit().await,
            Err(error) => Err(error),
        };
        // Sent even when not recorded, so clients stop waiting; the error frame follows.
        if self.streaming {
            self.flush_final();
        } else {
            self.session.publish(&Outbound::AssistantMessage {
                content: self.answer.text().to_string(),
                session_id: self.session_id(),
                agent_id: Some(self.agent_id.clone()),
                metadata: json!({"message_id": self.message_id}),
            });
        }
        recorded
    }

    /// History of tool results and approvals is best effort: a full history must not abort the answer.
    async fn record(&self, role: &str, body: Value) {
        if let Err(error) = self.shared.append(self.session, role, body).await {
            tracing::warn!(session = %super::access::session_tag(&self.session.id), %error, "hai: history not recorded");
        }
    }
}

/// The host's tool lifecycle, as a plugin cannot fake it: a loaded tool (`risk`
/// from its manifest, `None` if no such tool) with the risk the event claims, a
/// host-made call id, statuses in order and each once (`seen`: started, ended);
/// for a tool that needs approval, a call the approver saw (`approved`), which
/// starts only if approved.
fn host_order(
    risk: Option<Risk>,
    threshold: Risk,
    call_id: &str,
    status: ToolStatus,
    claimed_risk: Risk,
    seen: Option<(bool, bool)>,
    approved: Option<bool>,
) -> bool {
    let Some(risk) = risk else { return false };
    if claimed_risk != risk || uuid::Uuid::try_parse(call_id).is_err() {
        return false;
    }
    let (started, ended) = seen.unwrap_or((false, false));
    if ended {
        return false;
    }
    if risk < threshold {
        return match status {
            ToolStatus::Started => seen.is_none(),
            ToolStatus::Completed | ToolStatus::Failed => started,
        };
    }
    match (status, approved) {
        // Refused before a human was asked (too many calls already wait for one):
        // a failure claims nothing ran, so it is shown whether or not it was asked.
        (ToolStatus::Failed, _) => true,
        (_, None) => false,
        (ToolStatus::Started, Some(approved)) => approved && !started,
        (ToolStatus::Completed, Some(approved)) => approved && started,
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    const ID: &str = "0b6c5a6e-8a44-4f7e-9d2f-0c6b1f3f9a10";

    fn check(risk: Risk, status: ToolStatus, seen: Option<(bool, bool)>, approved: Option<bool>) -> bool {
        host_order(Some(risk), Risk::High, ID, status, risk, seen, approved)
    }

    #[test]
    fn a_low_risk_tool_runs_started_then_one_end() {
        assert!(check(Risk::Low, ToolStatus::Started, None, None));
        assert!(
            !check(Risk::Low, ToolStatus::Started, Some((true, false)), None),
            "started twice"
        );
        assert!(check(Risk::Low, ToolStatus::Completed, Some((true, false)), None));
        assert!(
            !check(Risk::Low, ToolStatus::Completed, None, None),
            "completed, never started"
        );
        assert!(
            !check(Risk::Low, ToolStatus::Failed, Some((true, true)), None),
            "ended twice"
        );
    }

    #[test]
    fn a_risky_tool_needs_what_the_approver_saw() {
        // A plugin's invented lifecycle of a high-risk tool: the approver never saw it.
        assert!(!check(Risk::High, ToolStatus::Started, None, None));
        assert!(!check(
            Risk::High,
            ToolStatus::Completed,
            Some((true, false)),
            None
        ));
        // Refused before anyone was asked (the host's parked-call cap): shown as failed.
        assert!(check(Risk::High, ToolStatus::Failed, None, None));
        // Asked but not approved: it may fail (rejected, timed out, refused), never start.
        assert!(!check(Risk::High, ToolStatus::Started, None, Some(false)));
        assert!(check(Risk::High, ToolStatus::Failed, None, Some(false)));
        assert!(check(Risk::Critical, ToolStatus::Started, None, Some(true)));
        assert!(check(
            Risk::Critical,
            ToolStatus::Completed,
            Some((true, false)),
            Some(true)
        ));
    }

    #[test]
    fn unknown_tools_wrong_risks_and_made_up_ids_are_not_the_hosts() {
        let started = ToolStatus::Started;
        assert!(!host_order(None, Risk::High, ID, started, Risk::Low, None, None));
        assert!(!host_order(
            Some(Risk::High),
            Risk::High,
            ID,
            started,
            Risk::Low,
            None,
            Some(true)
        ));
        assert!(!host_order(
            Some(Risk::Low),
            Risk::High,
            "call_1",
            started,
            Risk::Low,
            None,
            None
        ));
        // The threshold decides which tools need the approver.
        assert!(!host_order(
            Some(Risk::Medium),
            Risk::Medium,
            ID,
            started,
            Risk::Medium,
            None,
            None
        ));
    }

    #[test]
    fn the_lifecycle_wire_form_reads_back_and_a_misshapen_one_does_not() {
        let event = ToolLifecycle {
            call_id: ID.into(),
            tool_name: "search".into(),
            risk: Risk::High,
            stage: ToolStage::Failed {
                error: ToolStage::REJECTED.into(),
            },
        };
        let wire = serde_json::to_value(&event).unwrap();
        assert_eq!(
            wire,
            json!({"call_id": ID, "tool_name": "search", "risk": "high", "status": "failed", "error": "rejected"})
        );
        assert_eq!(ToolLifecycle::deserialize(&wire).unwrap(), event);
        assert!(event.stage.is_refusal());
        assert!(
            !ToolStage::Failed {
                error: "disk full".into()
            }
            .is_refusal()
        );
        for forged in [
            json!({"call_id": ID, "tool_name": "search", "risk": "bogus", "status": "started", "arguments": {}}),
            json!({"call_id": ID, "tool_name": "search", "risk": "low", "status": "finished"}),
            json!({"call_id": ID, "tool_name": "search", "risk": "low", "status": "completed"}),
            json!({"tool_name": "search", "risk": "low", "status": "failed", "error": "x"}),
        ] {
            assert!(ToolLifecycle::deserialize(&forged).is_err(), "{forged}");
        }
    }
}
