//! One approval path for every transport: a tool call that needs a human's
//! yes waits here, whichever protocol its human speaks.
//!
//! HAI, A2A and MCP each once owned an id format, an "approval asked" event,
//! a deadline and a way to withdraw the question, and each copy drifted (three
//! deadlines, one of them past the tool path's own timeout; two id formats).
//! Now a pending approval is one entry of [`Approvals`], the node-wide table:
//! - it owns its id (`appr_` and 32 hex digits), its question
//!   ([`ApprovalAsked`], the one payload every transport's event carries) and
//!   one deadline, `tools.approval_timeout_ms` less a grace (a tenth, at most
//!   2 s), so the deadline always ends the wait before the tool path's outer
//!   timeout does and the outcome is "timed out", never a cut-off;
//! - its place is shared fairly ([`crate::policy::admission`]): one caller holds
//!   at most `tools.max_waiting_approvals_per_client` and one transport at most
//!   `tools.max_waiting_approvals_per_transport`, so no address and no protocol
//!   can take every place from the others' humans;
//! - a guard withdraws it when the wait ends unanswered however it ends (the
//!   deadline, or the call dropped), so a late answer finds nothing to decide;
//! - an answer is taken out of the table once ([`Approvals::take`]), so two
//!   answers, or an answer racing the deadline, never both count.
//!
//! A transport keeps only what its protocol says: how to put the question to
//! its client and how to read the answer (an [`Approver`]), and who may answer
//! (the approval's *scope*: its HAI session, A2A task or MCP session). The
//! table also lists every waiting approval, so the node can show one queue,
//! and answers any of them from there ([`Approvals::answer`]) through the
//! transport's own answer path (its [`Answerer`]), so the history, the fleet
//! and the client's own view are as if its client had answered.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use base64::Engine;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::config::ToolsConfig;
use crate::policy::admission::{Admission, Bounds, Refusal, Slot};
use crate::store::now_ms;
use crate::vocab::Risk;

/// Who a plugin call serves: the transport and the client (an address as the
/// listener counts them, or a token), so no one caller can take what the node
/// shares among all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller {
    pub transport: &'static str,
    pub client: String,
}

/// A tool call waiting for a human.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRequest {
    pub call_id: String,
    pub tool_name: String,
    pub arguments: serde_json::Value,
    pub risk: Risk,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalOutcome {
    Approved,
    Rejected { feedback: Option<String> },
    TimedOut,
}

/// The longest grace between the approval's deadline and the tool path's timeout.
const MAX_DEADLINE_GRACE: Duration = Duration::from_secs(2);

/// A question put to a human: what every transport shows of a pending approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalAsked {
    pub approval_id: String,
    /// The tool call it gates (its lifecycle events carry the same id).
    pub call_id: String,
    pub tool_name: String,
    pub arguments: Value,
    pub risk: Risk,
    pub description: String,
    /// Unix milliseconds after which no answer counts.
    pub deadline_ms: u64,
}

/// A waiting approval as the node lists it: the question, and whose it is.
#[derive(Debug, Clone, Serialize)]
pub struct WaitingApproval {
    #[serde(flatten)]
    pub asked: ApprovalAsked,
    /// Who may answer: the transport's own unit (`hai:<session>`, `a2a:<task>`, `mcp:<session>`).
    pub scope: String,
    /// The caller whose call waits (`None`: the node's own call).
    pub transport: Option<&'static str>,
    pub client: Option<String>,
    pub asked_at_ms: u64,
}

/// How a transport asks its client's human, and what it must know of the wait.
/// Everything else (the id, the deadline, the places, the withdrawal on drop)
/// is [`Approvals`]'.
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// Who may answer (see [`Approvals::take`]).
    fn scope(&self) -> String;

    /// Put the question to the client. The approval is in the table already,
    /// so an answer may arrive before this returns. `Err` says why it could not
    /// be asked: the tool does not run.
    async fn ask(&self, question: &ApprovalAsked) -> Result<(), String>;

    /// At the deadline, before the approval times out: `false` when an answer
    /// has been taken elsewhere (another node of a fleet) and is on its way, so
    /// the wait goes on for it.
    async fn claim_deadline(&self, _question: &ApprovalAsked) -> bool {
        true
    }

    /// The question is moot (the deadline passed, the call ended unanswered):
    /// tell the client, if its protocol can. Called from a drop: must not wait.
    fn withdraw(&self, _question: &ApprovalAsked) {}

    /// How the wait ended, answered or not.
    fn settled(&self, _question: &ApprovalAsked, _outcome: &ApprovalOutcome) {}

    /// No question was asked: a bound of the node refused the approval a place.
    fn refused(&self, _call_id: &str, _refusal: &Refusal) {}
}

impl WaitingApproval {
    /// The transport that may answer it and its unit there (`hai` and the session id).
    pub fn scope_parts(&self) -> (&str, &str) {
        self.scope.split_once(':').unwrap_or((self.scope.as_str(), ""))
    }
}

/// An answer given to a waiting approval by someone other than its client
/// (the operator's console).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub approved: bool,
    pub feedback: Option<String>,
}

impl Answer {
    /// What the waiting tool is told, as from its own client.
    pub fn outcome(self) -> ApprovalOutcome {
        if self.approved {
            ApprovalOutcome::Approved
        } else {
            ApprovalOutcome::Rejected {
                feedback: self.feedback,
            }
        }
    }
}

/// Why [`Approvals::answer`] decided nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// No approval of that id waits: never asked, answered already, or timed out.
    #[error("no approval {0:?} is waiting (unknown, answered already or timed out)")]
    Unknown(String),
    /// It was waiting, and something else decided it first.
    #[error("approval {approval_id:?} was decided by something else meanwhile: {why}")]
    Lost { approval_id: String, why: String },
    /// Its transport takes no answers from outside its own protocol here.
    #[error("{transport} approvals cannot be answered from here: {why}")]
    Unsupported { transport: String, why: String },
    /// The transport's answer path failed (the store, say); nothing was decided.
    #[error("{0}")]
    Failed(String),
}

impl AnswerError {
    /// `waiting` was decided by something else first, for the reason `why`.
    pub fn lost(waiting: &WaitingApproval, why: impl Into<String>) -> AnswerError {
        AnswerError::Lost {
            approval_id: waiting.asked.approval_id.clone(),
            why: why.into(),
        }
    }
}

/// How a transport decides one of its approvals for someone other than its
/// client: the code its client's own answer runs, so both go one way.
#[async_trait::async_trait]
pub trait Answerer: Send + Sync {
    async fn answer(&self, waiting: &WaitingApproval, answer: Answer) -> Result<(), AnswerError>;
}

/// Keeps a transport's [`Answerer`] answering (see [`Approvals::answer_with`]).
#[derive(Clone)]
pub struct Answering {
    _answerer: Arc<dyn Answerer>,
}

struct Entry {
    listed: WaitingApproval,
    reply: oneshot::Sender<ApprovalOutcome>,
}

struct Inner {
    timeout: Duration,
    waiting: Mutex<HashMap<String, Entry>>,
    /// Bumped after every change of `waiting`: the console's live queue.
    changes: tokio::sync::watch::Sender<u64>,
    /// Each transport's answerer, by the transport part of a scope; held weakly (see [`Approvals::answer_with`]).
    answerers: Mutex<HashMap<&'static str, Weak<dyn Answerer>>>,
    by_client: Admission<String>,
    by_transport: Admission<&'static str>,
}

/// Every approval waiting on this node (see the module docs).
#[derive(Clone)]
pub struct Approvals {
    inner: Arc<Inner>,
}

/// A taken approval: deliver the decision once it is durable where it must be.
pub struct Decision {
    reply: oneshot::Sender<ApprovalOutcome>,
    pub asked: ApprovalAsked,
}

impl Decision {
    /// `false` when the call stopped waiting meanwhile (its wait was dropped).
    pub fn deliver(self, outcome: ApprovalOutcome) -> bool {
        self.reply.send(outcome).is_ok()
    }
}

impl Approvals {
    /// `total` places, shared by client and by transport as `tools` says.
    pub(crate) fn new(tools: &ToolsConfig, total: usize) -> Approvals {
        let share = |per: usize, per_key: &'static str| Bounds {
            total,
            total_key: "plugins.max_parked_calls",
            per_client: per,
            per_client_key: per_key,
            wait: Duration::ZERO,
        };
        Approvals {
            inner: Arc::new(Inner {
                timeout: Duration::from_millis(tools.approval_timeout_ms),
                waiting: Mutex::new(HashMap::new()),
                changes: tokio::sync::watch::Sender::new(0),
                answerers: Mutex::new(HashMap::new()),
                by_client: Admission::new(share(
                    tools.max_waiting_approvals_per_client,
                    "tools.max_waiting_approvals_per_client",
                )),
                by_transport: Admission::new(share(
                    tools.max_waiting_approvals_per_transport,
                    "tools.max_waiting_approvals_per_transport",
                )),
            }),
        }
    }

    /// How long the tool path waits for an approval in all (`tools.approval_timeout_ms`).
    pub(crate) fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Ask `approver`'s human about `request` for `caller`, and wait for the
    /// answer or the deadline. `Err`: no place was free; nothing was asked.
    pub(crate) async fn ask(
        &self,
        approver: &dyn Approver,
        caller: Option<&Caller>,
        request: ApprovalRequest,
    ) -> Result<ApprovalOutcome, Refusal> {
        let share = match self.share(caller) {
            Ok(share) => share,
            Err(refusal) => {
                approver.refused(&request.call_id, &refusal);
                return Err(refusal);
            }
        };
        let until_deadline = until_deadline(self.inner.timeout);
        let asked = ApprovalAsked {
            approval_id: format!("appr_{}", uuid::Uuid::new_v4().simple()),
            call_id: request.call_id,
            tool_name: request.tool_name,
            arguments: request.arguments,
            risk: request.risk,
            description: request.description,
            deadline_ms: now_ms().saturating_add(until_deadline.as_millis() as u64),
        };
        let (reply, mut answer) = oneshot::channel();
        self.inner.waiting.lock().insert(
            asked.approval_id.clone(),
            Entry {
                listed: WaitingApproval {
                    asked: asked.clone(),
                    scope: approver.scope(),
                    transport: caller.map(|caller| caller.transport),
                    client: caller.map(|caller| caller.client.clone()),
                    asked_at_ms: now_ms(),
                },
                reply,
            },
        );
        self.changed();
        let mut wait = Wait {
            approvals: self,
            approver,
            asked: &asked,
            answered: false,
            _share: share,
        };
        if let Err(why) = approver.ask(&asked).await {
            // Never asked, so nothing to withdraw; the guard still takes it out of the table.
            wait.answered = true;
            return Ok(ApprovalOutcome::Rejected {
                feedback: Some(format!("no approval could be asked: {why}")),
            });
        }
        let deadline = tokio::time::Instant::now() + until_deadline;
        let outcome = match tokio::time::timeout_at(deadline, &mut answer).await {
            Ok(answered) => answered.ok(),
            // Nobody took it: it times out here, and no answer can count any more.
            Err(_) if approver.claim_deadline(&asked).await && self.remove(&asked.approval_id) => None,
            // An answer was taken meanwhile; the tool path's own timeout still bounds this.
            Err(_) => answer.await.ok(),
        };
        wait.answered = outcome.is_some();
        let outcome = outcome.unwrap_or(ApprovalOutcome::TimedOut);
        approver.settled(&asked, &outcome);
        Ok(outcome)
    }

    fn share(&self, caller: Option<&Caller>) -> Result<Option<Share>, Refusal> {
        let Some(caller) = caller else { return Ok(None) };
        let client = self.inner.by_client.try_admit(&caller.client)?;
        let transport = self.inner.by_transport.try_admit(&caller.transport)?;
        Ok(Some((client, transport)))
    }

    /// Take approval `approval_id` out of the table to decide it, if it waits
    /// and `scope` may answer it. Nobody else can take it after this.
    pub fn take(&self, scope: &str, approval_id: &str) -> Option<Decision> {
        let mut waiting = self.inner.waiting.lock();
        if waiting.get(approval_id)?.listed.scope != scope {
            return None;
        }
        let entry = waiting.remove(approval_id)?;
        drop(waiting);
        self.changed();
        Some(Decision {
            reply: entry.reply,
            asked: entry.listed.asked,
        })
    }

    /// Whether approval `approval_id` of `scope` waits for an answer.
    pub fn is_waiting(&self, scope: &str, approval_id: &str) -> bool {
        self.inner
            .waiting
            .lock()
            .get(approval_id)
            .is_some_and(|entry| entry.listed.scope == scope)
    }

    /// End every approval of `scope` with `outcome` (its session ended).
    pub fn settle_scope(&self, scope: &str, outcome: ApprovalOutcome) {
        let ended: Vec<Entry> = {
            let mut waiting = self.inner.waiting.lock();
            let ids: Vec<String> = waiting
                .iter()
                .filter(|(_, entry)| entry.listed.scope == scope)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| waiting.remove(id)).collect()
        };
        if !ended.is_empty() {
            self.changed();
        }
        for entry in ended {
            let _ = entry.reply.send(outcome.clone());
        }
    }

    /// Every approval waiting now, oldest first.
    pub fn waiting(&self) -> Vec<WaitingApproval> {
        let mut listed: Vec<WaitingApproval> = self
            .inner
            .waiting
            .lock()
            .values()
            .map(|entry| entry.listed.clone())
            .collect();
        listed.sort_by_key(|listed| listed.asked_at_ms);
        listed
    }

    fn remove(&self, approval_id: &str) -> bool {
        let removed = self.inner.waiting.lock().remove(approval_id).is_some();
        if removed {
            self.changed();
        }
        removed
    }

    /// A receiver that sees every change of the approvals waiting, after it took effect.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    fn changed(&self) {
        self.inner.changes.send_modify(|generation| *generation += 1);
    }

    /// Have `answerer` decide, for [`Approvals::answer`], the approvals whose
    /// scope is `transport`'s, while the returned handle lives. The table holds
    /// the answerer weakly: an answerer reaches the node, whose runtime holds
    /// this table, so its transport's routes hold the handle instead.
    pub fn answer_with(&self, transport: &'static str, answerer: Arc<dyn Answerer>) -> Answering {
        self.inner
            .answerers
            .lock()
            .insert(transport, Arc::downgrade(&answerer));
        Answering { _answerer: answerer }
    }

    /// Decide approval `approval_id` as its own client would, through its
    /// transport's [`Answerer`]: the approval as it waited, or why nothing was
    /// decided. Whoever takes it first decides, here as between two clients.
    pub async fn answer(&self, approval_id: &str, answer: Answer) -> Result<WaitingApproval, AnswerError> {
        let waiting = self
            .inner
            .waiting
            .lock()
            .get(approval_id)
            .map(|entry| entry.listed.clone())
            .ok_or_else(|| AnswerError::Unknown(approval_id.to_string()))?;
        let (transport, _) = waiting.scope_parts();
        let answerer = self
            .inner
            .answerers
            .lock()
            .get(transport)
            .and_then(Weak::upgrade)
            .ok_or_else(|| AnswerError::Unsupported {
                transport: transport.to_string(),
                why: "this node's transport takes no answers from outside its protocol".into(),
            })?;
        answerer.answer(&waiting, answer).await?;
        Ok(waiting)
    }
}

/// An approval's places in its caller's share and its transport's, given back when dropped.
type Share = (Slot<String>, Slot<&'static str>);

/// One wait for an answer: withdraws its question when it ends unanswered,
/// and holds the approval's fair-share places until then.
struct Wait<'a> {
    approvals: &'a Approvals,
    approver: &'a dyn Approver,
    asked: &'a ApprovalAsked,
    answered: bool,
    _share: Option<Share>,
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.approvals.remove(&self.asked.approval_id);
        if !self.answered {
            self.approver.withdraw(self.asked);
        }
    }
}

/// The deadline of an approval asked now: `timeout` less its grace (module docs).
fn until_deadline(timeout: Duration) -> Duration {
    timeout.saturating_sub((timeout / 10).min(MAX_DEADLINE_GRACE))
}

// ---------------------------------------------------------------- stateless rounds

/// Where every node of a fleet finds the rounds' signing key.
const ROUND_KEY: &[u8] = b"approval_rounds.key";
/// What a round's claim is kept under in the store's replay window.
const ROUND_CLAIM_PREFIX: &str = "approval-round:";
const ROUND_STATE_PREFIX: &str = "r1.";
/// The longest `requestState` read: a token the node minted is a few hundred bytes.
const MAX_ROUND_STATE: usize = 4_096;

/// Approvals of a protocol with no waiting call (MCP 2026-07-28's
/// `InputRequiredResult`): the node asks, forgets, and recognises the answer
/// when it comes back on a later request, on any node of a fleet.
///
/// The question travels as a signed token (HMAC-SHA256 with a key kept in the
/// store, so every node and a restarted one verify it) bound to the call it
/// gates: the method, the tool, a digest of the arguments, a digest of the
/// question (the tool's risk and description: a tool changed by a hot reload
/// is asked again) and a deadline (`tools.approval_timeout_ms` less the
/// grace, as for a waiting approval). An answer is redeemed once, fleet-wide
/// ([`crate::store::Store::claim_once`]): a replay is refused. Only
/// [`ApprovalRounds::redeem`] makes a [`Redeemed`], and the runtime's tool
/// path runs a call with one only if it binds that very call, so no transport
/// can fabricate a decision.
pub struct ApprovalRounds {
    store: crate::store::Store,
    lifetime: Duration,
    key: tokio::sync::OnceCell<[u8; 32]>,
}

/// The call a round gates, as the runtime's tool path will run it.
pub struct RoundQuestion<'a> {
    pub method: &'a str,
    pub tool_name: &'a str,
    pub arguments: &'a Value,
    pub risk: Risk,
    pub description: &'a str,
}

/// A round asked: the question to show, and the token that must come back with the answer.
pub struct Round {
    pub asked: ApprovalAsked,
    pub state: String,
}

/// A human's decision on one round, checked and claimed: what lets the
/// runtime run (or refuse) exactly the call it was asked about.
#[derive(Debug)]
pub struct Redeemed {
    approval_id: String,
    tool_name: String,
    arguments_digest: String,
    outcome: ApprovalOutcome,
}

impl Redeemed {
    pub fn approval_id(&self) -> &str {
        &self.approval_id
    }

    /// The decision, if it was taken about this very call.
    pub(crate) fn outcome_for(&self, tool_name: &str, arguments: &Value) -> Option<ApprovalOutcome> {
        (self.tool_name == tool_name && self.arguments_digest == arguments_digest(arguments))
            .then(|| self.outcome.clone())
    }
}

/// Why an answer cannot count. The client is told only that its state is
/// invalid; the reason is for the log.
#[derive(Debug, thiserror::Error)]
pub enum RoundRefusal {
    #[error("the requestState is not one this node minted")]
    Malformed,
    #[error("the requestState's signature does not verify")]
    Forged,
    #[error("the round's deadline has passed")]
    Expired,
    #[error("the requestState was minted for another call ({0})")]
    Rebound(&'static str),
    #[error("the answer is not keyed by the round's question")]
    WrongKey,
    #[error("the round was answered already")]
    Replayed,
    #[error("the store did not answer: {0}")]
    Store(#[from] crate::store::StoreError),
}

#[derive(Serialize, Deserialize)]
struct RoundClaims {
    id: String,
    m: String,
    t: String,
    a: String,
    q: String,
    exp: u64,
}

fn arguments_digest(arguments: &Value) -> String {
    let canonical =
        crate::crypto::jcs::canonicalize(arguments).unwrap_or_else(|_| arguments.to_string().into_bytes());
    crate::crypto::sha256_hex(&canonical)
}

fn question_digest(question: &RoundQuestion<'_>) -> String {
    let shown = serde_json::json!({"risk": question.risk.as_str(), "description": question.description});
    arguments_digest(&shown)
}

impl ApprovalRounds {
    pub fn new(store: crate::store::Store, tools: &ToolsConfig) -> ApprovalRounds {
        ApprovalRounds {
            store,
            lifetime: until_deadline(Duration::from_millis(tools.approval_timeout_ms)),
            key: tokio::sync::OnceCell::new(),
        }
    }

    /// The fleet's key: made by whichever node asks first, then read by all.
    async fn key(&self) -> Result<&[u8; 32], RoundRefusal> {
        self.key
            .get_or_try_init(|| async {
                let kept = self.store.shared_secret(ROUND_KEY).await?;
                let bytes = hex::decode(kept).map_err(|_| RoundRefusal::Malformed)?;
                <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| RoundRefusal::Malformed)
            })
            .await
    }

    fn sign(key: &[u8; 32], signed: &str) -> Vec<u8> {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(signed.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// Ask about `question`: nothing waits on the node, the answer brings the token back.
    pub async fn mint(&self, question: &RoundQuestion<'_>) -> Result<Round, RoundRefusal> {
        let key = self.key().await?;
        let asked = ApprovalAsked {
            approval_id: format!("appr_{}", uuid::Uuid::new_v4().simple()),
            call_id: uuid::Uuid::new_v4().to_string(),
            tool_name: question.tool_name.to_string(),
            arguments: question.arguments.clone(),
            risk: question.risk,
            description: question.description.to_string(),
            deadline_ms: now_ms().saturating_add(self.lifetime.as_millis() as u64),
        };
        let claims = RoundClaims {
            id: asked.approval_id.clone(),
            m: question.method.to_string(),
            t: question.tool_name.to_string(),
            a: arguments_digest(question.arguments),
            q: question_digest(question),
            exp: asked.deadline_ms,
        };
        let encode = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let claims = serde_json::to_vec(&claims).map_err(|_| RoundRefusal::Malformed)?;
        let signed = format!("{ROUND_STATE_PREFIX}{}", encode(&claims));
        let signature = encode(&Self::sign(key, &signed));
        Ok(Round {
            asked,
            state: format!("{signed}.{signature}"),
        })
    }

    /// Check an answer to a round against the call it comes with, and claim it
    /// once: every check passes before the claim, so a refused answer consumes
    /// nothing and the right one can still be sent.
    pub async fn redeem(
        &self,
        state: &str,
        question: &RoundQuestion<'_>,
        answered_key: &str,
        outcome: ApprovalOutcome,
    ) -> Result<Redeemed, RoundRefusal> {
        if state.len() > MAX_ROUND_STATE {
            return Err(RoundRefusal::Malformed);
        }
        let (signed, signature) = state.rsplit_once('.').ok_or(RoundRefusal::Malformed)?;
        let claims = signed
            .strip_prefix(ROUND_STATE_PREFIX)
            .ok_or(RoundRefusal::Malformed)?;
        let decode = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text);
        let signature = decode(signature).map_err(|_| RoundRefusal::Malformed)?;
        let key = self.key().await?;
        if !crate::crypto::constant_time_eq(&Self::sign(key, signed), &signature) {
            return Err(RoundRefusal::Forged);
        }
        let claims: RoundClaims = decode(claims)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or(RoundRefusal::Malformed)?;
        if now_ms() > claims.exp {
            return Err(RoundRefusal::Expired);
        }
        if claims.m != question.method {
            return Err(RoundRefusal::Rebound("method"));
        }
        if claims.t != question.tool_name {
            return Err(RoundRefusal::Rebound("tool"));
        }
        let digest = arguments_digest(question.arguments);
        if claims.a != digest {
            return Err(RoundRefusal::Rebound("arguments"));
        }
        if claims.q != question_digest(question) {
            return Err(RoundRefusal::Rebound("the tool changed since it was asked"));
        }
        if answered_key != claims.id {
            return Err(RoundRefusal::WrongKey);
        }
        let claim = format!("{ROUND_CLAIM_PREFIX}{}", claims.id);
        if !self.store.claim_once(claim.as_bytes(), claims.exp).await? {
            return Err(RoundRefusal::Replayed);
        }
        Ok(Redeemed {
            approval_id: claims.id,
            tool_name: claims.t,
            arguments_digest: digest,
            outcome,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn tools(timeout_ms: u64, per_client: usize, per_transport: usize) -> ToolsConfig {
        ToolsConfig {
            approval_threshold: "high".into(),
            approval_timeout_ms: timeout_ms,
            max_waiting_approvals_per_client: per_client,
            max_waiting_approvals_per_transport: per_transport,
        }
    }

    fn request(call_id: &str) -> ApprovalRequest {
        ApprovalRequest {
            call_id: call_id.into(),
            tool_name: "generate_inspection_report".into(),
            arguments: serde_json::json!({"inspection_id": "INS-1"}),
            risk: Risk::High,
            description: "a report".into(),
        }
    }

    fn rounds(timeout_ms: u64) -> ApprovalRounds {
        let store = crate::store::Store::temporary().expect("a store");
        ApprovalRounds::new(store, &tools(timeout_ms, 1, 1))
    }

    fn question<'a>(tool_name: &'a str, arguments: &'a Value) -> RoundQuestion<'a> {
        RoundQuestion {
            method: "tools/call",
            tool_name,
            arguments,
            risk: Risk::High,
            description: "a report",
        }
    }

    #[tokio::test]
    async fn a_round_is_redeemed_once_for_the_call_it_was_asked_about() {
        let rounds = rounds(60_000);
        let arguments = serde_json::json!({"inspection_id": "INS-1", "notes": "b"});
        let asked = question("generate_inspection_report", &arguments);
        let round = rounds.mint(&asked).await.expect("minted");
        let id = round.asked.approval_id.clone();
        // The same arguments in another key order are the same call.
        let reordered = serde_json::json!({"notes": "b", "inspection_id": "INS-1"});
        let redeemed = rounds
            .redeem(
                &round.state,
                &question("generate_inspection_report", &reordered),
                &id,
                ApprovalOutcome::Approved,
            )
            .await
            .expect("redeemed");
        assert_eq!(
            redeemed.outcome_for("generate_inspection_report", &arguments),
            Some(ApprovalOutcome::Approved)
        );
        assert_eq!(redeemed.outcome_for("other_tool", &arguments), None);
        assert_eq!(
            redeemed.outcome_for("generate_inspection_report", &serde_json::json!({})),
            None
        );
        let replay = rounds
            .redeem(&round.state, &asked, &id, ApprovalOutcome::Approved)
            .await;
        assert!(matches!(replay, Err(RoundRefusal::Replayed)), "{replay:?}");
    }

    #[tokio::test]
    async fn a_forged_rebound_or_misanswered_round_is_refused_and_consumes_nothing() {
        let rounds = rounds(60_000);
        let arguments = serde_json::json!({"inspection_id": "INS-1"});
        let asked = question("generate_inspection_report", &arguments);
        let round = rounds.mint(&asked).await.expect("minted");
        let id = round.asked.approval_id.clone();
        let approve = || ApprovalOutcome::Approved;
        // Change the signature's first character: the last one carries two
        // padding bits, so changing it may make the text malformed, not forged.
        let (signed, signature) = round.state.rsplit_once('.').expect("signed.signature");
        let first = if signature.starts_with('A') { 'B' } else { 'A' };
        let forged = format!("{signed}.{first}{}", &signature[1..]);
        let other_arguments = serde_json::json!({"inspection_id": "INS-2"});
        let changed_tool = RoundQuestion {
            description: "changed by a reload",
            ..question("generate_inspection_report", &arguments)
        };
        let refusals = [
            rounds.redeem(&forged, &asked, &id, approve()).await,
            rounds.redeem("r1.e30.AAAA", &asked, &id, approve()).await,
            rounds
                .redeem(&round.state, &question("other_tool", &arguments), &id, approve())
                .await,
            rounds
                .redeem(
                    &round.state,
                    &question("generate_inspection_report", &other_arguments),
                    &id,
                    approve(),
                )
                .await,
            rounds.redeem(&round.state, &changed_tool, &id, approve()).await,
            rounds.redeem(&round.state, &asked, "appr_other", approve()).await,
        ];
        for refusal in &refusals {
            assert!(refusal.is_err(), "{refusal:?}");
        }
        assert!(matches!(refusals[0], Err(RoundRefusal::Forged)));
        assert!(matches!(refusals[5], Err(RoundRefusal::WrongKey)));
        rounds
            .redeem(&round.state, &asked, &id, approve())
            .await
            .expect("still redeemable");
    }

    #[tokio::test]
    async fn a_round_past_its_deadline_is_refused() {
        let rounds = rounds(1);
        let arguments = serde_json::json!({});
        let asked = question("generate_inspection_report", &arguments);
        let round = rounds.mint(&asked).await.expect("minted");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let late = rounds
            .redeem(
                &round.state,
                &asked,
                &round.asked.approval_id,
                ApprovalOutcome::Approved,
            )
            .await;
        assert!(matches!(late, Err(RoundRefusal::Expired)), "{late:?}");
    }

    fn caller(client: &str) -> Caller {
        Caller {
            transport: "hai",
            client: client.into(),
        }
    }

    /// Records what it was asked, and answers nothing itself.
    #[derive(Default)]
    struct Recorder {
        asked: Mutex<Vec<ApprovalAsked>>,
        withdrawn: AtomicUsize,
        refused: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Approver for Recorder {
        fn scope(&self) -> String {
            "test:1".into()
        }
        async fn ask(&self, question: &ApprovalAsked) -> Result<(), String> {
            self.asked.lock().push(question.clone());
            Ok(())
        }
        fn withdraw(&self, _question: &ApprovalAsked) {
            self.withdrawn.fetch_add(1, Ordering::SeqCst);
        }
        fn refused(&self, _call_id: &str, _refusal: &Refusal) {
            self.refused.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Call `c1` of client 10.0.0.1 asking, in a task of its own: its approver, and its wait.
    fn ask_in_background(
        approvals: &Approvals,
    ) -> (
        Arc<Recorder>,
        tokio::task::JoinHandle<Result<ApprovalOutcome, Refusal>>,
    ) {
        let approver = Arc::new(Recorder::default());
        let (approvals, asking) = (approvals.clone(), approver.clone());
        let waiting = tokio::spawn(async move {
            approvals
                .ask(asking.as_ref(), Some(&caller("10.0.0.1")), request("c1"))
                .await
        });
        (approver, waiting)
    }

    /// The first waiting approval's id, once it is asked.
    async fn asked_id(approvals: &Approvals) -> String {
        for _ in 0..1_000 {
            if let Some(waiting) = approvals.waiting().first() {
                return waiting.asked.approval_id.clone();
            }
            tokio::task::yield_now().await;
        }
        panic!("nothing was asked");
    }

    #[tokio::test]
    async fn an_answer_from_its_scope_decides_once_and_only_it() {
        let approvals = Approvals::new(&tools(60_000, 4, 16), 32);
        let (approver, waiting) = ask_in_background(&approvals);
        let id = asked_id(&approvals).await;
        assert!(id.starts_with("appr_") && id.len() == 37, "{id}");
        assert!(
            approvals.take("test:2", &id).is_none(),
            "another scope cannot answer"
        );
        assert!(approvals.is_waiting("test:1", &id));
        let decision = approvals.take("test:1", &id).expect("its scope answers");
        assert!(
            approvals.take("test:1", &id).is_none(),
            "a second answer finds nothing"
        );
        assert!(decision.deliver(ApprovalOutcome::Approved));
        assert_eq!(waiting.await.unwrap(), Ok(ApprovalOutcome::Approved));
        assert_eq!(approver.withdrawn.load(Ordering::SeqCst), 0);
        assert!(approvals.waiting().is_empty());
    }

    /// Answers as a transport does: takes the approval from its own scope.
    struct TakesItsOwn {
        approvals: Approvals,
    }

    #[async_trait::async_trait]
    impl Answerer for TakesItsOwn {
        async fn answer(&self, waiting: &WaitingApproval, answer: Answer) -> Result<(), AnswerError> {
            let lost = || AnswerError::lost(waiting, "taken");
            let decision = self
                .approvals
                .take(&waiting.scope, &waiting.asked.approval_id)
                .ok_or_else(lost)?;
            decision.deliver(answer.outcome()).then_some(()).ok_or_else(lost)
        }
    }

    #[tokio::test]
    async fn an_answer_from_outside_goes_through_its_transports_answerer_once() {
        let approvals = Approvals::new(&tools(60_000, 4, 16), 32);
        let (approver, waiting) = ask_in_background(&approvals);
        let id = asked_id(&approvals).await;
        let reject = Answer {
            approved: false,
            feedback: Some("not today".into()),
        };
        assert!(
            matches!(approvals.answer(&id, reject.clone()).await, Err(AnswerError::Unsupported { transport, .. }) if transport == "test"),
            "no answerer for the transport yet"
        );
        let answering = approvals.answer_with(
            "test",
            Arc::new(TakesItsOwn {
                approvals: approvals.clone(),
            }),
        );
        let answered = approvals.answer(&id, reject.clone()).await.expect("answered");
        assert_eq!(answered.scope_parts(), ("test", "1"));
        assert_eq!(
            waiting.await.unwrap(),
            Ok(ApprovalOutcome::Rejected {
                feedback: Some("not today".into())
            })
        );
        assert_eq!(
            approvals.answer(&id, reject).await.unwrap_err(),
            AnswerError::Unknown(id.clone()),
            "a second answer finds nothing"
        );
        drop(answering);
        let asking = caller("10.0.0.1");
        let next = approvals.ask(approver.as_ref(), Some(&asking), request("c2"));
        tokio::pin!(next);
        assert!(futures::poll!(next.as_mut()).is_pending());
        let id = asked_id(&approvals).await;
        let approve = Answer {
            approved: true,
            feedback: None,
        };
        assert!(
            matches!(
                approvals.answer(&id, approve).await,
                Err(AnswerError::Unsupported { .. })
            ),
            "the answerer went with its handle"
        );
    }

    #[tokio::test]
    async fn the_deadline_ends_the_wait_before_the_timeout_and_withdraws_the_question() {
        let approvals = Approvals::new(&tools(300, 4, 16), 32);
        let approver = Recorder::default();
        let before = now_ms();
        // Nothing bounds this wait but the approval's own deadline.
        let outcome = approvals
            .ask(&approver, Some(&caller("10.0.0.1")), request("c1"))
            .await;
        assert_eq!(outcome, Ok(ApprovalOutcome::TimedOut));
        assert_eq!(approver.withdrawn.load(Ordering::SeqCst), 1);
        let asked = approver.asked.lock()[0].clone();
        assert!(
            asked.deadline_ms < before + 300,
            "the deadline ends before the tool path's timeout"
        );
        assert!(
            approvals.take("test:1", &asked.approval_id).is_none(),
            "too late to answer"
        );
    }

    #[tokio::test]
    async fn one_client_holds_at_most_its_share_and_a_dropped_wait_gives_it_back() {
        let approvals = Approvals::new(&tools(60_000, 1, 16), 32);
        let approver = Recorder::default();
        let (one, two) = (caller("10.0.0.1"), caller("10.0.0.2"));
        let mut first = Box::pin(approvals.ask(&approver, Some(&one), request("c1")));
        assert!(futures::poll!(first.as_mut()).is_pending());
        let refused = approvals
            .ask(&approver, Some(&caller("10.0.0.1")), request("c2"))
            .await;
        assert!(matches!(
            refused,
            Err(Refusal::PerClient {
                key: "tools.max_waiting_approvals_per_client",
                ..
            })
        ));
        assert_eq!(approver.refused.load(Ordering::SeqCst), 1);
        let other = approvals.ask(&approver, Some(&two), request("c3"));
        tokio::pin!(other);
        assert!(
            futures::poll!(other.as_mut()).is_pending(),
            "another client has its own share"
        );
        drop(first);
        assert_eq!(
            approver.withdrawn.load(Ordering::SeqCst),
            1,
            "the dropped wait withdrew its question"
        );
        assert_eq!(approvals.waiting().len(), 1);
        let again = approvals.ask(&approver, Some(&one), request("c4"));
        tokio::pin!(again);
        assert!(
            futures::poll!(again.as_mut()).is_pending(),
            "the place was given back"
        );
    }
}
