//! The one queue of approvals waiting for a human, whichever protocol asked:
//! `GET {path}/api/approvals` lists [`crate::runtime::approval`]'s table, and
//! `POST {path}/api/approvals/{id}` answers one through
//! [`Approvals::answer`](crate::runtime::Approvals::answer), which runs the
//! transport's own answer path: the HAI session's history and fleet, the A2A
//! task going on, the MCP call released, exactly as when the asking client
//! answers. Whoever takes the approval first decides: a second answer, from
//! here or from the client, finds nothing (404 here); one that lost a race
//! after finding it waiting is a 409.
//!
//! Every answer is logged at info with what it did; the log writer escapes
//! what the operator typed as it does every other untrusted field
//! ([`crate::logging`]).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ConsoleError;
use crate::node::state::NodeState;
use crate::runtime::approval::{Answer, WaitingApproval};
use crate::store::now_ms;

/// The largest feedback taken: the smallest bound of the protocols it goes on
/// to (HAI's frame, MCP's form; A2A takes twice as much), so every transport
/// takes what the console does.
pub const MAX_FEEDBACK_CHARS: usize = crate::transports::hai::wire::MAX_FEEDBACK_CHARS;
/// The largest answer body: the feedback at four bytes a character, with room for the rest.
pub const MAX_BODY_BYTES: usize = MAX_FEEDBACK_CHARS * 4 + 1024;

pub async fn list(State(node): State<NodeState>) -> Json<Value> {
    Json(list_of(&node))
}

pub fn list_of(node: &NodeState) -> Value {
    let now = now_ms();
    let rows: Vec<Value> = node
        .runtime
        .approvals()
        .waiting()
        .iter()
        .map(|waiting| listed(waiting, now))
        .collect();
    json!({ "approvals": rows })
}

/// A waiting approval as the console shows it; `scope` names who may answer it
/// in its own protocol (the HAI session, A2A task or MCP session).
fn listed(waiting: &WaitingApproval, now: u64) -> Value {
    let (transport, _) = waiting.scope_parts();
    let asked = &waiting.asked;
    json!({
        "approval_id": asked.approval_id,
        "transport": transport,
        "scope": waiting.scope,
        "client": waiting.client,
        "tool": asked.tool_name,
        "arguments": asked.arguments,
        "risk": asked.risk.as_str(),
        "description": asked.description,
        "asked_at_ms": waiting.asked_at_ms,
        "deadline_ms": asked.deadline_ms,
        "age_ms": now.saturating_sub(waiting.asked_at_ms),
    })
}

/// `POST {path}/api/approvals/{id}`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    approved: bool,
    #[serde(default)]
    feedback: Option<String>,
}

pub async fn answer(
    State(node): State<NodeState>,
    Path(approval_id): Path<String>,
    body: Result<Json<AnswerBody>, JsonRejection>,
) -> Result<Json<Value>, ConsoleError> {
    let Json(body) = body.map_err(|rejection| ConsoleError::Body {
        status: rejection.status(),
        message: rejection.body_text(),
    })?;
    if body
        .feedback
        .as_ref()
        .is_some_and(|feedback| feedback.chars().count() > MAX_FEEDBACK_CHARS)
    {
        return Err(ConsoleError::BadRequest(format!(
            "feedback must be at most {MAX_FEEDBACK_CHARS} characters"
        )));
    }
    let decision = if body.approved { "approved" } else { "rejected" };
    let answer = Answer {
        approved: body.approved,
        feedback: body.feedback,
    };
    match node.runtime.approvals().answer(&approval_id, answer).await {
        Ok(waiting) => {
            let (transport, _) = waiting.scope_parts();
            tracing::info!(
                approval_id = %approval_id,
                transport,
                tool = %waiting.asked.tool_name,
                decision,
                "console: approval answered"
            );
            Ok(Json(json!({
                "approval_id": approval_id,
                "transport": transport,
                "tool": waiting.asked.tool_name,
                "decision": decision,
            })))
        }
        Err(error) => {
            tracing::info!(approval_id = %approval_id, decision, %error, "console: approval not answered");
            Err(error.into())
        }
    }
}
