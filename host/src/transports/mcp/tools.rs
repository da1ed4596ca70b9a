//! The node's plugin tools as MCP tools (§"Server Features" → "Tools"):
//! their listing with annotations from the manifest's risk, the host's check of
//! a call's arguments against the tool's schema, and the call itself with the
//! approval asked of the client's human by `elicitation/create`
//! (§"Client Features" → "Elicitation").
//!
//! The approval is the host's, not the plugin's: a tool at or above
//! `tools.approval_threshold` runs only after the client answers the form with
//! `approve: true` ([`crate::runtime::Runtime::call_tool`] enforces it). The form
//! goes on the `tools/call` request's own SSE stream, so it reaches the client
//! that asked, while the call waits; a client that did not declare form
//! elicitation gets an error result and the tool does not run. On a fleet the
//! answer may reach another node: see [`super::fleet`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::envelope::Envelope;
use super::error::McpError;
use super::fleet;
use super::state::{McpSession, Shared};
use super::wire::{self, ElicitAnswer, ToolCallParams, elicit_answer};
use crate::jsonrpc;
use crate::runtime::approval::{
    Answer, AnswerError, Answerer, Decision, RoundQuestion, RoundRefusal, WaitingApproval,
};
use crate::runtime::manifest::ToolSpec;
use crate::runtime::{
    ApprovalAsked, ApprovalOutcome, Approver, Exchange, LoadedPlugin, Registry, Risk, ToolError,
};

/// The manifest's marker of a tool that only reads (`"x-read-only": true` at the
/// top of its parameters schema): a plugin says so without a new ABI field.
pub const READ_ONLY_MARKER: &str = "x-read-only";
/// What an approval form shows of a call's parameters.
const MAX_FORM_PARAMETERS_CHARS: usize = 4_000;
/// Argument errors named in one error result.
const MAX_ARGUMENT_ERRORS: usize = 5;
/// Compiled schemas kept; beyond it the cache starts over.
const MAX_VALIDATORS: usize = 1_024;

/// One listed tool, in the order `tools/list` pages through them (by name).
fn listed_tools(registry: &Registry) -> Vec<(&Arc<LoadedPlugin>, &ToolSpec)> {
    let mut tools: Vec<_> = registry
        .plugins()
        .flat_map(|plugin| plugin.manifest.tools.iter().map(move |spec| (plugin, spec)))
        .filter(|(_, spec)| spec.parameters.get("type").and_then(Value::as_str) == Some("object"))
        .collect();
    tools.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    tools
}

/// One page of `tools/list`: tools named after `cursor`, and the cursor of the next page.
pub fn list_page(shared: &Shared, cursor: Option<&str>) -> Value {
    let runtime = &shared.node.runtime;
    let registry = runtime.registry();
    let tools = listed_tools(&registry)
        .into_iter()
        .map(|(plugin, spec)| (spec.name.as_str(), (plugin, spec)));
    wire::page(
        "tools",
        tools,
        cursor,
        shared.node.config.mcp.page_size,
        |(plugin, spec)| describe(plugin, spec, runtime.needs_approval(spec.risk)),
    )
}

/// A hash of what `tools/list` shows, to tell whether a hot reload changed it.
pub fn listing_fingerprint(registry: &Registry) -> String {
    let listing: Vec<Value> = listed_tools(registry)
        .into_iter()
        .map(|(plugin, spec)| describe(plugin, spec, false))
        .collect();
    crate::crypto::sha256_hex(Value::Array(listing).to_string().as_bytes())
}

fn describe(plugin: &LoadedPlugin, spec: &ToolSpec, needs_approval: bool) -> Value {
    let read_only =
        spec.risk == Risk::Low && spec.parameters.get(READ_ONLY_MARKER) == Some(&Value::Bool(true));
    let mut input_schema = spec.parameters.clone();
    if let Some(schema) = input_schema.as_object_mut() {
        schema.remove(READ_ONLY_MARKER);
    }
    let annotations = if read_only {
        json!({"title": spec.name, "readOnlyHint": true})
    } else {
        json!({"title": spec.name, "readOnlyHint": false, "destructiveHint": spec.risk >= Risk::High})
    };
    json!({
        "name": spec.name,
        "description": spec.description,
        "inputSchema": input_schema,
        "annotations": annotations,
        "_meta": {
            "agora-node/plugin": plugin.manifest.name,
            "agora-node/risk": spec.risk.as_str(),
            "agora-node/requiresApproval": needs_approval,
        },
    })
}

/// Compiled argument schemas, by plugin file content and tool name.
#[derive(Default)]
pub struct Validators(Mutex<HashMap<(String, String), Arc<jsonschema::Validator>>>);

impl Validators {
    /// The reasons `arguments` do not fit `spec`'s schema (empty: they fit).
    fn check(&self, plugin: &LoadedPlugin, spec: &ToolSpec, arguments: &Value) -> Vec<String> {
        let key = (plugin.content_hash.clone(), spec.name.clone());
        let cached = self.0.lock().get(&key).cloned();
        let validator = match cached {
            Some(validator) => validator,
            None => {
                let mut schema = spec.parameters.clone();
                if let Some(schema) = schema.as_object_mut() {
                    schema.remove(READ_ONLY_MARKER);
                }
                match jsonschema::validator_for(&schema) {
                    Ok(validator) => {
                        let validator = Arc::new(validator);
                        let mut cache = self.0.lock();
                        if cache.len() >= MAX_VALIDATORS {
                            cache.clear();
                        }
                        cache.insert(key, validator.clone());
                        validator
                    }
                    Err(error) => return vec![format!("the tool's own schema is not usable: {error}")],
                }
            }
        };
        validator
            .iter_errors(arguments)
            .take(MAX_ARGUMENT_ERRORS)
            .map(|error| {
                let path = error.instance_path().to_string();
                let field = if path.is_empty() {
                    "(arguments)".to_string()
                } else {
                    path
                };
                format!("{field}: {error}")
            })
            .collect()
    }
}

/// A `tools/call` result.
fn result(text: String, structured: Option<Value>, is_error: bool) -> Value {
    let mut result = json!({"content": [{"type": "text", "text": text}], "isError": is_error});
    if let Some(structured) = structured {
        result["structuredContent"] = structured;
    }
    result
}

fn error_result(text: String) -> Value {
    result(text, None, true)
}

/// The plugin and spec of tool `name`, or the error result that says it is unknown.
fn resolve(shared: &Shared, name: &str) -> Result<(Arc<LoadedPlugin>, ToolSpec), Value> {
    let registry = shared.node.runtime.registry();
    registry
        .tool(name)
        .and_then(|plugin| {
            let spec = plugin.manifest.tools.iter().find(|t| t.name == name)?;
            Some((plugin.clone(), spec.clone()))
        })
        .ok_or_else(|| {
            error_result(format!(
                "Unknown tool: {name:?} is not a tool of this node (tools/list lists them)"
            ))
        })
}

/// Resolve and check a call's arguments: the plugin and spec to run, or the error result.
fn checked(shared: &Shared, call: &ToolCallParams) -> Result<(Arc<LoadedPlugin>, ToolSpec), Value> {
    let (plugin, spec) = resolve(shared, &call.name)?;
    let problems = shared.validators.check(&plugin, &spec, &call.arguments);
    if !problems.is_empty() {
        return Err(error_result(format!(
            "Invalid arguments for tool {}: {}",
            call.name,
            problems.join("; ")
        )));
    }
    Ok((plugin, spec))
}

/// The result of a call that ran or was refused by the tool path, and its
/// history status; `unasked_why` completes "did not declare the elicitation
/// capability" when the client declared it but could not be asked.
fn answer_of(
    name: &str,
    spec: &ToolSpec,
    outcome: Result<String, ToolError>,
    unasked_why: &str,
) -> (&'static str, Value) {
    match outcome {
        Ok(output) => {
            let structured = serde_json::from_str::<Value>(&output)
                .ok()
                .filter(Value::is_object);
            ("completed", result(output, structured, false))
        }
        Err(ToolError::NoApprover(_)) => (
            "failed",
            error_result(format!(
                "Tool {name} needs human approval (risk {}), and this client cannot be asked: \
                 it did not declare the elicitation capability{unasked_why}. The tool did not run.",
                spec.risk.as_str(),
            )),
        ),
        Err(error @ ToolError::Failed { .. }) => ("failed", error_result(error.to_string())),
        Err(error) => ("failed", error_result(format!("{error}. The tool did not run."))),
    }
}

/// Run one `tools/call`. `stream` is the request's SSE stream, where an approval
/// form can be sent; `None` when the client takes only JSON.
pub async fn call(
    shared: &Shared,
    session: &Arc<McpSession>,
    params: ToolCallParams,
    stream: Option<mpsc::Sender<Value>>,
) -> Value {
    let (_plugin, spec) = match checked(shared, &params) {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let ToolCallParams { name, arguments } = params;
    let Some(_slot) = session.call_slot() else {
        return error_result(format!(
            "this session already has {} tool calls running, its limit; wait for one to end",
            shared.node.config.mcp.max_calls_per_session
        ));
    };
    let mut exchange = Exchange::new().with_caller("mcp", session.client.to_string());
    let approver = match stream {
        Some(stream) if session.elicitation => Some(Arc::new(FormApprover {
            session: session.clone(),
            stream,
            fleet: shared.fleet().then(|| shared.node.store.clone()),
        })),
        _ => None,
    };
    if let Some(approver) = &approver {
        exchange = exchange.with_approver(approver.clone());
    }
    let outcome = shared.node.runtime.call_tool(&name, arguments, &exchange).await;
    let unasked_why = if session.elicitation {
        " for this call (it accepts no event stream)"
    } else {
        ""
    };
    let (status, answer) = answer_of(&name, &spec, outcome, unasked_why);
    let text = answer["content"][0]["text"].as_str().unwrap_or_default();
    let summary: String = text.chars().take(4_000).collect();
    shared
        .record(
            session,
            "tool",
            json!({"tool_name": name, "status": status, "result": summary}),
        )
        .await;
    answer
}

/// A 2026-07-28 `tools/call` (no session, nothing waits on the node): a tool
/// that needs approval is answered with an `InputRequiredResult` whose form is
/// the one a session's client is sent, and runs only when the call comes back
/// with the human's answer and the round's `requestState`, checked and claimed
/// once by [`crate::runtime::approval::ApprovalRounds`]. A client that
/// declared no form elicitation is told, as in a session, and nothing runs.
pub async fn call_stateless(
    shared: &Shared,
    client: IpAddr,
    envelope: &Envelope,
    params: &Value,
) -> Result<Value, McpError> {
    let call = super::wire::tool_call_params(params)?;
    let round = round_answer(params)?;
    let (_plugin, spec) = match checked(shared, &call) {
        Ok(found) => found,
        Err(refused) => return Ok(refused),
    };
    let runtime = &shared.node.runtime;
    let question = RoundQuestion {
        method: "tools/call",
        tool_name: &call.name,
        arguments: &call.arguments,
        risk: spec.risk,
        description: &spec.description,
    };
    let mut exchange = Exchange::new().with_caller("mcp", client.to_string());
    if runtime.needs_approval(spec.risk) {
        match round {
            None if envelope.accepts_form_elicitation() => {
                let round = shared.rounds.mint(&question).await.map_err(refused_round)?;
                let form = approval_form(&round.asked, envelope.version);
                return Ok(json!({
                    "resultType": "input_required",
                    "inputRequests": {round.asked.approval_id: {"method": "elicitation/create", "params": form}},
                    "requestState": round.state,
                }));
            }
            // No form can be asked: the tool path says so, as in a session.
            None => {}
            Some((state, key, answer)) => {
                let (_, outcome) = decision_of(elicit_answer(Ok(answer)));
                let redeemed = shared
                    .rounds
                    .redeem(&state, &question, &key, outcome)
                    .await
                    .map_err(refused_round)?;
                tracing::debug!(approval = redeemed.approval_id(), tool = %call.name, "mcp: approval round answered");
                exchange = exchange.with_redeemed(redeemed);
            }
        }
    }
    let Ok(_slot) = shared.modern_calls.try_admit(&client) else {
        return Ok(error_result(format!(
            "this client address already has {} tool calls running, its limit (mcp.max_calls_per_ip); \
             wait for one to end",
            shared.node.config.mcp.max_calls_per_ip
        )));
    };
    let outcome = runtime.call_tool(&call.name, call.arguments, &exchange).await;
    Ok(answer_of(&call.name, &spec, outcome, "").1)
}

/// A round's refusal as the client sees it; the reason goes to the log.
fn refused_round(refusal: RoundRefusal) -> McpError {
    match refusal {
        RoundRefusal::Store(error) => McpError::from(error),
        refusal => {
            tracing::info!(%refusal, "mcp: an approval round's answer is refused");
            McpError::InvalidRequestState
        }
    }
}

/// The `requestState`, answered key and answer a retried call carries: both or
/// neither, and exactly one answer (the node asks one question per round).
fn round_answer(params: &Value) -> Result<Option<(String, String, Value)>, McpError> {
    let state = params.get("requestState").filter(|value| !value.is_null());
    let responses = params.get("inputResponses").filter(|value| !value.is_null());
    match (state, responses) {
        (None, None) => Ok(None),
        (Some(Value::String(state)), Some(Value::Object(responses))) if responses.len() == 1 => {
            let (key, answer) = responses.iter().next().expect("one answer");
            if !answer.is_object() {
                return Err(McpError::InvalidRequestState);
            }
            Ok(Some((state.clone(), key.clone(), answer.clone())))
        }
        _ => Err(McpError::InvalidRequestState),
    }
}

/// Asks the client's human with a form on the call's stream; the answer comes
/// back as a response in the session ([`answer`]).
struct FormApprover {
    session: Arc<McpSession>,
    stream: mpsc::Sender<Value>,
    /// On a fleet, the shared store, where a pending form is a record any node can take.
    fleet: Option<crate::store::Store>,
}

#[async_trait::async_trait]
impl Approver for FormApprover {
    fn scope(&self) -> String {
        self.session.approval_scope()
    }

    async fn ask(&self, question: &ApprovalAsked) -> Result<(), String> {
        if let Some(store) = &self.fleet {
            fleet::put_pending(
                store,
                &self.session.id,
                &question.approval_id,
                &question.tool_name,
                question.deadline_ms,
            )
            .await
            .map_err(|error| error.to_string())?;
        }
        let params = approval_form(question, self.session.protocol_version);
        let form = jsonrpc::request(question.approval_id.as_str(), "elicitation/create", Some(params));
        self.stream
            .send(form)
            .await
            .map_err(|_| "the client's stream closed".to_string())
    }

    /// On a fleet, the deadline takes the form's record as an answer would: if
    /// an answer took it first, its decision is on its way from another node.
    async fn claim_deadline(&self, question: &ApprovalAsked) -> bool {
        let Some(store) = &self.fleet else {
            return true;
        };
        match fleet::take_pending(store, &self.session.id, &question.approval_id).await {
            Ok(taken) => taken.is_some(),
            Err(error) => {
                tracing::warn!(session = %self.session.id, %error, "mcp: an approval's deadline could not claim it; it times out here");
                true
            }
        }
    }

    fn withdraw(&self, question: &ApprovalAsked) {
        // Timed out or the call went away: tell the client the form is moot.
        self.cancel_form(
            question,
            "the approval is no longer needed (timed out or the call ended)",
        );
    }

    fn settled(&self, question: &ApprovalAsked, _outcome: &ApprovalOutcome) {
        if self
            .session
            .answered_in_console
            .lock()
            .remove(&question.approval_id)
        {
            self.cancel_form(question, "the approval was answered in the operator's console");
        }
    }
}

impl FormApprover {
    /// Withdraw the form asked for `question` (`notifications/cancelled` of its request).
    fn cancel_form(&self, question: &ApprovalAsked, reason: &str) {
        let params = json!({"requestId": question.approval_id, "reason": reason});
        let _ = self
            .stream
            .try_send(jsonrpc::notification("notifications/cancelled", Some(params)));
    }
}

/// A client's response in `session`: the answer to one of its approval forms,
/// which decides the waiting call once and goes to the session's history. On
/// a fleet the form's record decides who answers, and a call waiting on
/// another node gets the decision through the fleet bus.
pub async fn answer(shared: &Shared, session: &McpSession, id: &Value, response: Result<Value, Value>) {
    let Some(approval_id) = id.as_str() else {
        tracing::debug!(session = %session.id, %id, "mcp: an answer to no open request");
        return;
    };
    let pending = if shared.fleet() {
        match fleet::take_pending(&shared.node.store, &session.id, approval_id).await {
            Ok(Some(pending)) => Some(pending),
            Ok(None) => {
                tracing::debug!(session = %session.id, %id, "mcp: an answer to no open request");
                return;
            }
            Err(error) => {
                tracing::warn!(session = %session.id, %error, "mcp: an answer could not be taken; its call times out");
                return;
            }
        }
    } else {
        None
    };
    let waiting_here = shared
        .node
        .runtime
        .approvals()
        .take(&session.approval_scope(), approval_id);
    let (action, outcome) = decision_of(elicit_answer(response));
    match (waiting_here, pending) {
        (Some(decision), _) => {
            decide(shared, session, decision, action, outcome).await;
        }
        (None, Some(pending)) => {
            record_decision(shared, session, approval_id, &pending.tool_name, action, &outcome).await;
            fleet::send_decision(&shared.node.store, &session.id, approval_id, &outcome).await;
        }
        (None, None) => {
            tracing::debug!(session = %session.id, %id, "mcp: an answer to no open request");
        }
    }
}

/// The history's action and the call's outcome of a human's answer.
fn decision_of(answer: ElicitAnswer) -> (&'static str, ApprovalOutcome) {
    match answer {
        ElicitAnswer::Approved => ("accept", ApprovalOutcome::Approved),
        ElicitAnswer::Rejected { feedback } => ("accept", ApprovalOutcome::Rejected { feedback }),
        ElicitAnswer::Declined => (
            "decline",
            ApprovalOutcome::Rejected {
                feedback: Some("the approval was declined".into()),
            },
        ),
        ElicitAnswer::Cancelled => (
            "cancel",
            ApprovalOutcome::Rejected {
                feedback: Some("the approval was cancelled".into()),
            },
        ),
        ElicitAnswer::Failed(why) => (
            "error",
            ApprovalOutcome::Rejected {
                feedback: Some(format!("no approval could be asked: {why}")),
            },
        ),
    }
}

/// Record a decision taken for one of `session`'s approvals and release the
/// waiting call with it: the one way a client's form answer and the
/// operator's console decide. `false` when the call stopped waiting meanwhile.
async fn decide(
    shared: &Shared,
    session: &McpSession,
    decision: Decision,
    action: &str,
    outcome: ApprovalOutcome,
) -> bool {
    let asked = &decision.asked;
    // Recorded before the tool may run, as every transport's decision is.
    record_decision(
        shared,
        session,
        &asked.approval_id,
        &asked.tool_name,
        action,
        &outcome,
    )
    .await;
    decision.deliver(outcome)
}

async fn record_decision(
    shared: &Shared,
    session: &McpSession,
    approval_id: &str,
    tool_name: &str,
    action: &str,
    outcome: &ApprovalOutcome,
) {
    let (approved, feedback) = fleet::approved_and_feedback(outcome);
    let entry = json!({"approval_id": approval_id, "tool_name": tool_name,
                       "action": action, "approved": approved, "feedback": feedback});
    shared.record(session, "approval", entry).await;
}

/// The console's answer to an MCP approval is the client's form accepted with
/// its choice, decided by [`decide`] as a client's response is; the waiting
/// `tools/call` is released with the tool's result, and the client's open form
/// is withdrawn on the call's stream (its late response would find nothing to decide).
pub struct ConsoleAnswers(pub Shared);

#[async_trait::async_trait]
impl Answerer for ConsoleAnswers {
    async fn answer(&self, waiting: &WaitingApproval, answer: Answer) -> Result<(), AnswerError> {
        let shared = &self.0;
        let (_, session_id) = waiting.scope_parts();
        let lost = |why: &str| AnswerError::lost(waiting, why);
        let session = shared
            .session(session_id)
            .await
            .map_err(|_| lost("its session ended"))?;
        if shared.fleet() {
            // The form's record decides across the fleet, as for a client's answer.
            let taken = fleet::take_pending(&shared.node.store, session_id, &waiting.asked.approval_id)
                .await
                .map_err(|error| lost(&error.to_string()))?;
            if taken.is_none() {
                return Err(lost("the client answered it, or it timed out"));
            }
        }
        let decision = shared
            .node
            .runtime
            .approvals()
            .take(&session.approval_scope(), &waiting.asked.approval_id)
            .ok_or_else(|| lost("the client answered it, or it timed out"))?;
        let approval_id = waiting.asked.approval_id.clone();
        session.answered_in_console.lock().insert(approval_id.clone());
        if decide(shared, &session, decision, "accept", answer.outcome()).await {
            Ok(())
        } else {
            session.answered_in_console.lock().remove(&approval_id);
            Err(lost("the call stopped waiting"))
        }
    }
}

/// `elicitation/create`'s parameters: a flat form of primitives, as the
/// specification restricts `requestedSchema`, with the call in the message.
fn approval_form(request: &ApprovalAsked, protocol_version: &str) -> Value {
    let mut parameters = serde_json::to_string_pretty(&request.arguments).unwrap_or_default();
    if parameters.chars().count() > MAX_FORM_PARAMETERS_CHARS {
        parameters = parameters
            .chars()
            .take(MAX_FORM_PARAMETERS_CHARS)
            .collect::<String>()
            + " …";
    }
    let message = format!(
        "Approve running the tool {tool} (risk: {risk})?\n{description}\nParameters:\n{parameters}",
        tool = request.tool_name,
        risk = request.risk.as_str(),
        description = request.description,
    );
    let mut properties = Map::new();
    properties.insert(
        "approve".into(),
        json!({"type": "boolean", "title": "Approve", "description": format!("Run {} with these parameters", request.tool_name), "default": false}),
    );
    properties.insert(
        "feedback".into(),
        json!({"type": "string", "title": "Feedback", "description": "Optional: why, or what to change", "maxLength": 2000}),
    );
    let mut form = json!({
        "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": ["approve"]},
    });
    // `mode` came with URL elicitation in 2025-11-25; earlier clients know only forms.
    if protocol_version >= "2025-11-25" {
        form["mode"] = json!("form");
    }
    form
}
