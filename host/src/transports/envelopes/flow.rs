//! The task negotiation loop of the signed envelopes spec §3–4, for envelopes
//! that already passed every check in [`super::Service::process`].
//!
//! - HELLO → WELCOME `{did, resources}` from the loaded plugins.
//! - REQUEST → a direct resource answers RESULT; a negotiated one is priced by
//!   its plugin (`Phase::Quote`) and answered with an OFFER whose envelope id is
//!   the offer id, or ERROR 402 when the request's budget is below the cost.
//!   `params` are capped (`envelopes.max_params_bytes`, ERROR 400); an offer's
//!   params are stored beside it only until its ttl, and live offers are capped
//!   per sender (`max_offers_per_sender`, 429) and in bytes overall
//!   (`max_offer_bytes_total`, 503) — both checked before the plugin runs.
//! - ACCEPT → only from the offeree, once, before the offer's ttl; checks that
//!   refuse never consume the offer (a compare-and-swap in sled marks it
//!   accepted only after all of them pass). Then `Phase::Execute` → RESULT.
//! - STATUS → the request's state (PENDING, NEGOTIATING, PROCESSING,
//!   COMPLETED, FAILED), kept in sled per sender and request id.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::OwnedSemaphorePermit;

use super::Early;
use super::error::{AnswersRequest, EnvelopesError, Refusal};
use super::limits::SenderKey;
use super::state::EnvelopesState;
use crate::crypto::envelope::Header;
use crate::crypto::jcs;
use crate::policy::ledger::Measure;
use crate::runtime::{Call, Exchange, LoadedPlugin, Phase, TransportKind};
use crate::store::{Collection, UnitOfWork, now_ms};

const MAX_RESOURCE_LEN: usize = 256;
const MAX_PROOF_LEN: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum TaskState {
    Pending,
    Negotiating,
    Processing,
    Completed,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RequestRecord {
    state: TaskState,
    resource: String,
    updated_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OfferRecord {
    /// The sender the offer was made to: the only one who may accept it.
    offeree: String,
    request_id: String,
    resource: String,
    /// Older records kept params inline; new ones keep them under [`params_key`].
    #[serde(default)]
    params: Value,
    cost: f64,
    timeout_ms: u64,
    expires_at_ms: u64,
    accepted: bool,
}

/// An accepted or expired offer is remembered this long past its ttl, so a late
/// or second ACCEPT gets its precise answer instead of "unknown".
const OFFER_MEMORY_MS: u64 = 3_600_000;

/// Which REQUEST an error about this envelope answers, if any.
pub(super) fn answers_request(header: &Header) -> Option<String> {
    match header.kind.as_str() {
        "REQUEST" => Some(header.id.clone()),
        "STATUS" => header
            .payload
            .get("request_id")
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    }
}

pub(super) async fn dispatch(
    service: &EnvelopesState,
    sender: &str,
    key: &SenderKey,
    header: Header,
    early: Option<&Early>,
    unit: &UnitOfWork,
) -> Result<Value, Refusal> {
    match header.kind.as_str() {
        "HELLO" => Ok(welcome(service)?),
        "REQUEST" => request(service, sender, key, &header, unit)
            .await
            .answering(Some(&header.id)),
        "ACCEPT" => accept(service, sender, &header.payload, early, unit).await,
        "STATUS" => status(service, sender, &header.payload).await,
        other => Err(EnvelopesError::BadRequest(format!(
            "this node does not take {other} envelopes; send HELLO, REQUEST, ACCEPT or STATUS"
        ))
        .into()),
    }
}

fn welcome(service: &EnvelopesState) -> Result<Value, EnvelopesError> {
    let registry = service.node.runtime.registry();
    let mut resources: Vec<Value> = registry
        .plugins()
        .flat_map(|plugin| plugin.manifest.resources.iter())
        .map(|resource| {
            json!({
                "resource": resource.name,
                "negotiated": resource.negotiated,
                "description": resource.description,
            })
        })
        .collect();
    resources.sort_by(|a, b| a["resource"].as_str().cmp(&b["resource"].as_str()));
    service.envelope(
        "WELCOME",
        json!({"did": service.did, "protocol": crate::crypto::envelope::PROTOCOL, "resources": resources}),
    )
}

/// A REQUEST payload (§4), validated.
struct TaskRequest {
    resource: String,
    params: Value,
    /// Bytes of `params` as JSON text.
    params_bytes: usize,
    budget: Option<Value>,
    budget_max: Option<f64>,
    timeout_ms: Option<u64>,
}

fn bad(message: impl Into<String>) -> EnvelopesError {
    EnvelopesError::BadRequest(message.into())
}

fn parse_task(payload: &Map<String, Value>, max_params_bytes: usize) -> Result<TaskRequest, EnvelopesError> {
    let resource = match payload.get("resource") {
        Some(Value::String(resource)) if !resource.is_empty() && resource.len() <= MAX_RESOURCE_LEN => {
            resource.clone()
        }
        _ => {
            return Err(bad(format!(
                "payload.resource must be a string of 1-{MAX_RESOURCE_LEN} characters"
            )));
        }
    };
    let params = match payload.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(params @ Value::Object(_)) => params.clone(),
        Some(_) => return Err(bad("payload.params must be an object")),
    };
    let params_bytes = params.to_string().len();
    if params_bytes > max_params_bytes {
        return Err(bad(format!(
            "payload.params is {params_bytes} bytes; at most {max_params_bytes} are accepted"
        )));
    }
    let (budget, budget_max) = match payload.get("budget") {
        None | Some(Value::Null) => (None, None),
        Some(Value::Object(budget)) => {
            let limit = budget.get("max").or_else(|| budget.get("max_credits"));
            let max = match limit {
                None => None,
                Some(value) => match value.as_f64() {
                    Some(max) if max >= 0.0 => Some(max),
                    _ => return Err(bad("payload.budget.max must be a number ≥ 0")),
                },
            };
            (Some(Value::Object(budget.clone())), max)
        }
        Some(_) => return Err(bad("payload.budget must be an object like {\"max\": 10}")),
    };
    let timeout_ms = match payload.get("timeout") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_u64() {
            Some(ms) if ms > 0 => Some(ms),
            _ => return Err(bad("payload.timeout must be a positive integer (ms)")),
        },
    };
    Ok(TaskRequest {
        resource,
        params,
        params_bytes,
        budget,
        budget_max,
        timeout_ms,
    })
}

fn request_key(sender: &str, request_id: &str) -> Vec<u8> {
    format!("request\0{sender}\0{request_id}").into_bytes()
}

fn offer_key(offer_id: &str) -> Vec<u8> {
    format!("offer\0{offer_id}").into_bytes()
}

/// An offer's params, kept only while the offer can be accepted.
fn params_key(offer_id: &str) -> Vec<u8> {
    format!("offer-params\0{offer_id}").into_bytes()
}

/// Whether one more offer of `bytes` from `key` fits the caps; with `take`
/// (offer id, expiry) the room is also taken, under the same lock.
fn offer_room(
    service: &EnvelopesState,
    key: &SenderKey,
    bytes: usize,
    take: Option<(&str, u64)>,
) -> Result<(), EnvelopesError> {
    let bytes = bytes as u64;
    let mut ledger = service.offers.lock();
    let checked = match take {
        // An offer can be accepted through its `expires_at_ms`, so it holds
        // its room until the millisecond after.
        Some((offer_id, expires_at_ms)) => {
            ledger.admit(*key, offer_id, expires_at_ms.saturating_add(1), bytes, now_ms())
        }
        None => ledger.check(key, bytes, now_ms()),
    };
    checked.map_err(|refusal| match refusal.measure {
        Measure::PerClientItems => EnvelopesError::TooManyOffers(refusal.limit as usize),
        // The only other bound is the bytes all live offers hold: the node's, not the sender's.
        _ => EnvelopesError::Overloaded,
    })
}

/// Record a request's state with the envelope's other writes (`unit`).
async fn set_state(
    service: &EnvelopesState,
    unit: &UnitOfWork,
    sender: &str,
    request_id: &str,
    resource: &str,
    state: TaskState,
) -> Result<(), EnvelopesError> {
    let now = now_ms();
    let record = RequestRecord {
        state,
        resource: resource.to_string(),
        updated_at_ms: now,
    };
    let ttl = service.node.config.envelopes.status_ttl_secs.saturating_mul(1000);
    // Read back only by STATUS: on the embedded store, memory behind its journal.
    unit.put_keyed(
        Collection::Negotiations,
        &request_key(sender, request_id),
        &record,
        Some(now.saturating_add(ttl)),
    )
    .await?;
    Ok(())
}

fn slot(service: &EnvelopesState) -> Result<OwnedSemaphorePermit, EnvelopesError> {
    service
        .in_flight
        .clone()
        .try_acquire_owned()
        .map_err(|_| EnvelopesError::Overloaded)
}

async fn request(
    service: &EnvelopesState,
    sender: &str,
    key: &SenderKey,
    header: &Header,
    unit: &UnitOfWork,
) -> Result<Value, EnvelopesError> {
    let task = parse_task(&header.payload, service.node.config.envelopes.max_params_bytes)?;
    let registry = service.node.runtime.registry();
    let Some(plugin) = registry.envelope_resource(&task.resource).cloned() else {
        service.node.runtime.not_found_yet()?;
        return Err(EnvelopesError::NotFound(format!(
            "this node does not serve the resource {:?}",
            task.resource
        )));
    };
    let negotiated = plugin
        .manifest
        .resources
        .iter()
        .any(|r| r.name == task.resource && r.negotiated);
    if negotiated {
        // Before the quote runs: a refusal here costs no plugin work.
        offer_room(service, key, task.params_bytes, None)?;
    }
    let _slot = slot(service)?;
    let request_id = header.id.as_str();
    // A direct request is processed at once: PENDING would be overwritten
    // before anyone could read it, so only a negotiated one records it.
    let running = if negotiated {
        set_state(
            service,
            unit,
            sender,
            request_id,
            &task.resource,
            TaskState::Pending,
        )
        .await?;
        None
    } else {
        Some(Running::start(service, sender, request_id))
    };
    let cap = service.node.config.envelopes.request_timeout_ms;
    let timeout_ms = task.timeout_ms.map_or(cap, |ms| ms.min(cap));
    let mut body = json!({
        "request_id": request_id,
        "resource": task.resource,
        "params": task.params,
    });
    if let Some(budget) = &task.budget {
        body["budget"] = budget.clone();
    }
    let outcome = if negotiated {
        offer(
            service, unit, sender, key, request_id, &task, &plugin, body, timeout_ms,
        )
        .await
    } else {
        match run(
            service,
            &plugin,
            Phase::Handle,
            sender,
            &task.resource,
            body,
            timeout_ms,
        )
        .await
        {
            Ok(data) => {
                set_state(
                    service,
                    unit,
                    sender,
                    request_id,
                    &task.resource,
                    TaskState::Completed,
                )
                .await?;
                result_envelope(service, request_id, data)
            }
            Err(error) => Err(error),
        }
    };
    if outcome.is_err() {
        set_state(
            service,
            unit,
            sender,
            request_id,
            &task.resource,
            TaskState::Failed,
        )
        .await?;
    }
    drop(running);
    outcome
}

/// A direct request's PROCESSING state while its plugin runs, held in memory
/// (`Service::running`) until the final state is written, so a request costs
/// one state write rather than two (a node that crashes meanwhile never
/// finishes it, and a PROCESSING left on disk would say otherwise). On a
/// shared store that write is in the request's one transaction with its
/// replay claim, so nothing of the request is in the database before it
/// ends: STATUS at another node of the fleet answers "no request" until then.
struct Running<'a> {
    service: &'a EnvelopesState,
    key: Vec<u8>,
}

impl<'a> Running<'a> {
    fn start(service: &'a EnvelopesState, sender: &str, request_id: &str) -> Running<'a> {
        let key = request_key(sender, request_id);
        service.running.lock().insert(key.clone());
        Running { service, key }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.service.running.lock().remove(&self.key);
    }
}

/// Price a negotiated request and make the offer (or refuse it for the budget).
#[allow(clippy::too_many_arguments)]
async fn offer(
    service: &EnvelopesState,
    unit: &UnitOfWork,
    sender: &str,
    key: &SenderKey,
    request_id: &str,
    task: &TaskRequest,
    plugin: &Arc<LoadedPlugin>,
    body: Value,
    timeout_ms: u64,
) -> Result<Value, EnvelopesError> {
    let quote = run(
        service,
        plugin,
        Phase::Quote,
        sender,
        &task.resource,
        body,
        timeout_ms,
    )
    .await?;
    let invalid = |what: &str| EnvelopesError::Internal(format!("the resource's quote is invalid: {what}"));
    let cost = quote
        .get("cost")
        .and_then(Value::as_f64)
        .filter(|cost| cost.is_finite() && *cost >= 0.0)
        .ok_or_else(|| invalid("cost must be a number ≥ 0"))?;
    let ttl = quote
        .get("ttl")
        .and_then(Value::as_u64)
        .filter(|ttl| *ttl > 0)
        .ok_or_else(|| invalid("ttl must be a positive integer (ms)"))?
        .min(service.node.config.envelopes.max_offer_ttl_ms);
    let eta = quote
        .get("eta")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("eta must be an integer (ms)"))?;
    if let Some(max) = task.budget_max
        && max < cost
    {
        return Err(EnvelopesError::PaymentRequired(format!(
            "the budget ({max}) is below the cost ({cost})"
        )));
    }
    let payload = json!({
        "request_id": request_id,
        "cost": jcs::finite(cost).map_err(|e| EnvelopesError::Internal(e.to_string()))?,
        "ttl": ttl,
        "eta": eta,
    });
    let envelope = service.envelope("OFFER", payload)?;
    let offer_id = envelope["id"].as_str().unwrap_or_default().to_string();
    let expires_at_ms = now_ms().saturating_add(ttl);
    let record = OfferRecord {
        offeree: sender.to_string(),
        request_id: request_id.to_string(),
        resource: task.resource.clone(),
        params: Value::Null,
        cost,
        timeout_ms,
        expires_at_ms,
        accepted: false,
    };
    // Checked again: other REQUESTs may have taken the room while the quote ran.
    offer_room(service, key, task.params_bytes, Some((&offer_id, expires_at_ms)))?;
    unit.put(
        Collection::Negotiations,
        &params_key(&offer_id),
        &task.params,
        Some(expires_at_ms),
    )
    .await?;
    unit.put(
        Collection::Negotiations,
        &offer_key(&offer_id),
        &record,
        Some(expires_at_ms.saturating_add(OFFER_MEMORY_MS)),
    )
    .await?;
    set_state(
        service,
        unit,
        sender,
        request_id,
        &task.resource,
        TaskState::Negotiating,
    )
    .await?;
    Ok(envelope)
}

async fn accept(
    service: &EnvelopesState,
    sender: &str,
    payload: &Map<String, Value>,
    early: Option<&Early>,
    unit: &UnitOfWork,
) -> Result<Value, Refusal> {
    // The ACCEPT's claim is committed before the offer is read and taken:
    // taking it is a step the fleet must see at once (one winner, the other
    // refused at once), made on a connection of its own, which a request
    // must not wait for while its claim holds one.
    unit.commit_open_transaction().await?;
    let offer_id = match payload.get("offer_id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= 128 => id.clone(),
        _ => return Err(bad("payload.offer_id must be the OFFER envelope's id").into()),
    };
    let payment_proof = match payload.get("payment_proof") {
        None | Some(Value::Null) => None,
        Some(Value::String(proof)) if proof.len() <= MAX_PROOF_LEN => Some(proof.clone()),
        Some(_) => {
            return Err(bad(format!(
                "payload.payment_proof must be a string of at most {MAX_PROOF_LEN} bytes"
            ))
            .into());
        }
    };
    let store = &service.node.store;
    let key = offer_key(&offer_id);
    let Some(offer) = store.get::<OfferRecord>(Collection::Negotiations, &key).await? else {
        return Err(EnvelopesError::NotFound(format!("no offer {offer_id:?}")).into());
    };
    // Someone else's offer: say nothing about its request, and leave it untouched.
    if offer.offeree != sender {
        return Err(EnvelopesError::Unauthorized("this offer was made to another sender".into()).into());
    }
    let request_id = offer.request_id.clone();
    let answering = Some(request_id.as_str());
    if offer.accepted {
        return Err(bad("this offer was already accepted")).answering(answering);
    }
    if now_ms() > offer.expires_at_ms {
        set_state(
            service,
            unit,
            sender,
            &request_id,
            &offer.resource,
            TaskState::Failed,
        )
        .await
        .answering(answering)?;
        return Err(EnvelopesError::Timeout("the offer has expired".into())).answering(answering);
    }
    let registry = service.node.runtime.registry();
    let Some(plugin) = registry.envelope_resource(&offer.resource).cloned() else {
        // The offer stays open: after start-up it may be accepted again.
        service.node.runtime.not_found_yet().answering(answering)?;
        return Err(EnvelopesError::NotFound(format!(
            "the resource {:?} is no longer served",
            offer.resource
        )))
        .answering(answering);
    };
    let _slot = slot(service).answering(answering)?;
    let params = if offer.params.is_null() {
        let stored = store
            .get::<Value>(Collection::Negotiations, &params_key(&offer_id))
            .await
            .answering(answering)?;
        match stored {
            Some(params) => params,
            None => {
                // Gone: another ACCEPT (on this node or another of the fleet) won
                // the offer and dropped its params, or the ttl just passed.
                let now_accepted = store
                    .get::<OfferRecord>(Collection::Negotiations, &key)
                    .await
                    .answering(answering)?
                    .is_some_and(|current| current.accepted);
                return Err(if now_accepted {
                    bad("this offer was already accepted")
                } else {
                    EnvelopesError::Timeout("the offer has expired".into())
                })
                .answering(answering);
            }
        }
    } else {
        offer.params.clone()
    };
    let accepted = OfferRecord {
        accepted: true,
        ..offer.clone()
    };
    let won = store
        .update(
            Collection::Negotiations,
            &key,
            &offer,
            &accepted,
            Some(offer.expires_at_ms.saturating_add(OFFER_MEMORY_MS)),
        )
        .await
        .answering(answering)?;
    if !won {
        return Err(bad("this offer was already accepted")).answering(answering);
    }
    service.offers.lock().release(&offer_id);
    unit.remove(Collection::Negotiations, &params_key(&offer_id))
        .await
        .answering(answering)?;
    set_state(
        service,
        unit,
        sender,
        &request_id,
        &offer.resource,
        TaskState::Processing,
    )
    .await
    .answering(answering)?;
    if let Some(early) = early {
        // The connection learns at once that the task runs; the RESULT follows when ready.
        let processing = service
            .envelope(
                "STATUS",
                json!({"request_id": request_id, "state": TaskState::Processing}),
            )
            .answering(answering)?;
        unit.commit().await.answering(answering)?;
        let _ = early.send(processing).await;
    }
    let mut body = json!({
        "request_id": request_id,
        "offer_id": offer_id,
        "resource": offer.resource,
        "params": params,
        "cost": jcs::finite(offer.cost).unwrap_or(Value::Null),
    });
    if let Some(proof) = payment_proof {
        body["payment_proof"] = Value::String(proof);
    }
    let outcome = run(
        service,
        &plugin,
        Phase::Execute,
        sender,
        &offer.resource,
        body,
        offer.timeout_ms,
    )
    .await;
    let state = if outcome.is_ok() {
        TaskState::Completed
    } else {
        TaskState::Failed
    };
    set_state(service, unit, sender, &request_id, &offer.resource, state)
        .await
        .answering(answering)?;
    let data = outcome.answering(answering)?;
    result_envelope(service, &request_id, data).answering(answering)
}

async fn status(
    service: &EnvelopesState,
    sender: &str,
    payload: &Map<String, Value>,
) -> Result<Value, Refusal> {
    let Some(request_id) = payload.get("request_id").and_then(Value::as_str) else {
        return Err(bad("payload.request_id must be a string").into());
    };
    let answering = Some(request_id);
    let key = request_key(sender, request_id);
    if service.running.lock().contains(&key) {
        return service
            .envelope(
                "STATUS",
                json!({"request_id": request_id, "state": TaskState::Processing}),
            )
            .answering(answering);
    }
    let record = service
        .node
        .store
        .get_keyed::<RequestRecord>(Collection::Negotiations, &key)
        .await
        .answering(answering)?
        .ok_or_else(|| EnvelopesError::NotFound(format!("no request {request_id:?} from you")))
        .answering(answering)?;
    service
        .envelope("STATUS", json!({"request_id": request_id, "state": record.state}))
        .answering(answering)
}

/// RESULT `{request_id, status, data}`. A plugin may answer `{"status": "partial", "data": {…}}`;
/// any other object is the data itself.
fn result_envelope(
    service: &EnvelopesState,
    request_id: &str,
    reply: Value,
) -> Result<Value, EnvelopesError> {
    let (status, data) = match reply {
        Value::Object(mut fields)
            if fields.len() == 2
                && matches!(
                    fields.get("status").and_then(Value::as_str),
                    Some("success" | "partial")
                )
                && fields.get("data").is_some_and(Value::is_object) =>
        {
            let status = fields.remove("status").unwrap_or(Value::Null);
            (status, fields.remove("data").unwrap_or(Value::Null))
        }
        data @ Value::Object(_) => (json!("success"), data),
        other => (json!("success"), json!({"value": other})),
    };
    // Moved in, not through `json!`, which would copy `data` through a serializer.
    let mut payload = Map::new();
    payload.insert("request_id".into(), request_id.into());
    payload.insert("status".into(), status);
    payload.insert("data".into(), data);
    service.envelope("RESULT", Value::Object(payload))
}

/// Run one plugin phase under the envelope's time limit; the reply must be strict JSON.
async fn run(
    service: &EnvelopesState,
    plugin: &Arc<LoadedPlugin>,
    phase: Phase,
    sender: &str,
    resource: &str,
    body: Value,
    timeout_ms: u64,
) -> Result<Value, EnvelopesError> {
    let call = Call {
        transport: TransportKind::Envelope,
        phase,
        route: resource.to_string(),
        sender: Some(sender.to_string()),
        conversation: body["request_id"].as_str().map(str::to_string),
        body: body.to_string(),
    };
    let invocation = service.node.runtime.invoke(plugin, call, Exchange::new());
    let text = match tokio::time::timeout(Duration::from_millis(timeout_ms), invocation).await {
        Err(_) => {
            return Err(EnvelopesError::Timeout(format!(
                "the resource did not finish within {timeout_ms} ms"
            )));
        }
        Ok(result) => result?,
    };
    jcs::parse_strict(text.as_bytes())
        .map_err(|e| EnvelopesError::Internal(format!("the resource's reply is not valid JSON: {e}")))
}
