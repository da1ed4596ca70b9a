//! The client side of signed Agora envelopes (spec §3): HELLO (optional),
//! REQUEST, ACCEPT of an offer within budget, RESULT — over `POST {url}`.
//! Every reply's signature is verified, it must come from the node that
//! answered first (the WELCOME's or first reply's sender) and answer our request.

use std::time::Duration;

use ed25519_dalek::SigningKey;
use serde_json::{Value, json};

use super::http_client::{self, ClientError};
use crate::crypto::envelope::{self as signed, EnvelopeError, Verified};
use crate::store::now_ms;

#[derive(Debug, thiserror::Error)]
pub enum EnvelopeClientError {
    #[error(transparent)]
    Http(#[from] ClientError),
    #[error("the peer's reply is not a valid signed envelope: {0}")]
    Unverified(#[from] EnvelopeError),
    #[error("the peer answered ERROR {code}: {message}")]
    Peer { code: i64, message: String },
    #[error("unexpected reply: {0}")]
    Unexpected(String),
    #[error("the offer costs {cost}, over the budget of {budget}; not accepted")]
    OverBudget { cost: f64, budget: f64 },
}

/// What the loop asks for.
pub struct TaskSpec {
    pub resource: String,
    pub params: Value,
    pub budget: Option<f64>,
    pub timeout_ms: Option<u64>,
    pub payment_proof: Option<String>,
    pub hello: bool,
}

/// Each verified envelope the peer sent, in order, and the final RESULT payload.
pub struct Outcome {
    pub replies: Vec<Value>,
    pub result: Value,
}

pub struct EnvelopeClient {
    url: String,
    key: SigningKey,
    sender_id: String,
    timeout: Duration,
    max_response_bytes: usize,
    peer: Option<String>,
}

impl EnvelopeClient {
    pub fn new(url: &str, key: SigningKey, timeout: Duration, max_response_bytes: usize) -> Self {
        let sender_id = crate::crypto::identity::did_key(&key.verifying_key());
        EnvelopeClient {
            url: url.to_string(),
            key,
            sender_id,
            timeout,
            max_response_bytes,
            peer: None,
        }
    }

    pub fn sender_id(&self) -> &str {
        &self.sender_id
    }

    /// Sign and send one envelope; the verified reply (an ERROR reply is returned too).
    pub async fn send(
        &mut self,
        kind: &str,
        payload: Value,
    ) -> Result<(Value, Verified), EnvelopeClientError> {
        let envelope = signed::build(kind, &self.key, &self.sender_id, payload, now_ms())?;
        let body =
            serde_json::to_vec(&envelope).map_err(|e| EnvelopeClientError::Unexpected(e.to_string()))?;
        let response = http_client::post(
            &self.url,
            &[("content-type", "application/json")],
            body,
            self.timeout,
            self.max_response_bytes,
        )
        .await?;
        let verified = signed::verify_bytes(&response.body)?;
        signed::header(&verified.value)?;
        match &self.peer {
            Some(peer) if *peer != verified.sender_id => {
                return Err(EnvelopeClientError::Unexpected(format!(
                    "reply signed by {} instead of {peer}",
                    verified.sender_id
                )));
            }
            Some(_) => {}
            None => self.peer = Some(verified.sender_id.clone()),
        }
        Ok((envelope, verified))
    }

    /// The whole negotiation loop of spec §3.
    pub async fn run(&mut self, task: &TaskSpec) -> Result<Outcome, EnvelopeClientError> {
        let mut replies = Vec::new();
        if task.hello {
            let (_, welcome) = self.send("HELLO", json!({})).await?;
            expect(&welcome.value, "WELCOME")?;
            replies.push(welcome.value);
        }
        let mut payload = json!({"resource": task.resource, "params": task.params});
        if let Some(budget) = task.budget {
            payload["budget"] = json!({"max": crate::crypto::jcs::finite(budget)
                .map_err(|e| EnvelopeClientError::Unexpected(e.to_string()))?});
        }
        if let Some(timeout) = task.timeout_ms {
            payload["timeout"] = json!(timeout);
        }
        let (request, reply) = self.send("REQUEST", payload).await?;
        let request_id = request["id"].as_str().unwrap_or_default().to_string();
        let reply = reply.value;
        replies.push(reply.clone());
        let kind = reply["type"].as_str().unwrap_or_default();
        let result = match kind {
            "RESULT" => reply,
            "OFFER" => {
                expect_request_id(&reply, &request_id)?;
                let cost = reply["payload"]["cost"]
                    .as_f64()
                    .ok_or_else(|| EnvelopeClientError::Unexpected("the OFFER has no numeric cost".into()))?;
                if let Some(budget) = task.budget
                    && cost > budget
                {
                    return Err(EnvelopeClientError::OverBudget { cost, budget });
                }
                let offer_id = reply["id"].as_str().unwrap_or_default().to_string();
                let mut accept = json!({"offer_id": offer_id});
                if let Some(proof) = &task.payment_proof {
                    accept["payment_proof"] = json!(proof);
                }
                let (_, result) = self.send("ACCEPT", accept).await?;
                replies.push(result.value.clone());
                result.value
            }
            _ => return Err(peer_error(&reply)),
        };
        expect(&result, "RESULT")?;
        expect_request_id(&result, &request_id)?;
        Ok(Outcome {
            replies,
            result: result["payload"].clone(),
        })
    }
}

fn peer_error(reply: &Value) -> EnvelopeClientError {
    if reply["type"] == "ERROR" {
        EnvelopeClientError::Peer {
            code: reply["payload"]["code"].as_i64().unwrap_or(0),
            message: reply["payload"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        }
    } else {
        EnvelopeClientError::Unexpected(format!("a {} envelope", reply["type"]))
    }
}

fn expect(reply: &Value, kind: &str) -> Result<(), EnvelopeClientError> {
    if reply["type"] == kind {
        Ok(())
    } else {
        Err(peer_error(reply))
    }
}

fn expect_request_id(reply: &Value, request_id: &str) -> Result<(), EnvelopeClientError> {
    if reply["payload"]["request_id"] == request_id {
        Ok(())
    } else {
        Err(EnvelopeClientError::Unexpected(format!(
            "the {} answers request {} instead of {request_id}",
            reply["type"], reply["payload"]["request_id"]
        )))
    }
}

/// `host.outbound` over signed envelopes, for plugins: `body` is
/// `{"resource", "params"?, "budget"?, "timeout"?, "payment_proof"?}`; the node signs
/// as itself and answers `{"result": <RESULT payload>, "peer": <peer did>}`.
/// The caller has already checked `url` against `outbound.allowed_hosts`.
pub async fn outbound(
    config: &crate::config::Config,
    url: &str,
    body: &Value,
) -> Result<Value, EnvelopeClientError> {
    let invalid = |what: &str| EnvelopeClientError::Unexpected(format!("invalid outbound body: {what}"));
    let resource = body["resource"]
        .as_str()
        .ok_or_else(|| invalid("`resource` must be a string"))?;
    let params = match &body["params"] {
        Value::Null => json!({}),
        params @ Value::Object(_) => params.clone(),
        _ => return Err(invalid("`params` must be an object")),
    };
    let identity = crate::crypto::identity::NodeIdentity::load(&config.identity.key_file)
        .map_err(|e| EnvelopeClientError::Unexpected(e.to_string()))?;
    let mut client = EnvelopeClient::new(
        url,
        identity.signing_key,
        Duration::from_millis(config.outbound.timeout_ms),
        config.outbound.max_response_bytes,
    );
    let task = TaskSpec {
        resource: resource.to_string(),
        params,
        budget: body["budget"].as_f64(),
        timeout_ms: body["timeout"].as_u64(),
        payment_proof: body["payment_proof"].as_str().map(str::to_string),
        hello: false,
    };
    let outcome = client.run(&task).await?;
    Ok(json!({"result": outcome.result, "peer": client.peer}))
}
