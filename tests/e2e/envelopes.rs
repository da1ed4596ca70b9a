//! End-to-end tests for signed Agora envelopes ("Agora Protocol Specification v1.0", signed envelopes)
//! over real HTTP and WebSocket sockets against the real binary, with the
//! `envelope-services` example plugin. Every reply is verified as a signed
//! envelope from the node before its content is looked at.

use std::process::Command;
use std::time::Duration;

use agora_node::crypto::envelope::{self as signed, SignatureVariant};
use agora_node::crypto::identity::{did_key, raw_sender_id};
use agora_node::store::now_ms;
use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{self, TestNode};

pub(crate) const PLUGIN: &str = "envelope-services";

/// A test agent: its key and the sender id it signs as.
pub(crate) struct Agent {
    pub(crate) key: SigningKey,
    pub(crate) id: String,
}

impl Agent {
    pub(crate) fn new() -> Agent {
        let key = SigningKey::generate(&mut rand::rngs::OsRng);
        let id = did_key(&key.verifying_key());
        Agent { key, id }
    }

    pub(crate) fn raw() -> Agent {
        let key = SigningKey::generate(&mut rand::rngs::OsRng);
        let id = raw_sender_id(&key.verifying_key());
        Agent { key, id }
    }

    /// An unsigned envelope with a fresh id and the current time.
    pub(crate) fn draft(&self, kind: &str, payload: Value) -> Value {
        json!({
            "protocol": "agora/1.0",
            "id": uuid::Uuid::new_v4().to_string(),
            "timestamp": signed::format_timestamp(now_ms()),
            "type": kind,
            "sender": {"id": self.id, "signature": ""},
            "payload": payload,
        })
    }

    pub(crate) fn sign(&self, mut envelope: Value) -> Value {
        signed::sign(&mut envelope, &self.key).unwrap();
        envelope
    }

    pub(crate) fn envelope(&self, kind: &str, payload: Value) -> Value {
        self.sign(self.draft(kind, payload))
    }

    /// Sign with the spec's other option: the signature member removed while signing.
    fn sign_removed_variant(&self, mut envelope: Value) -> Value {
        let input = signed::signing_input(&envelope, SignatureVariant::Removed).unwrap();
        let signature = self.key.sign(&input);
        envelope["sender"]["signature"] =
            json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature.to_bytes()));
        envelope
    }
}

/// A reply checked to be a validly signed envelope from `node_did` (when known).
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) envelope: Value,
}

impl Reply {
    pub(crate) fn kind(&self) -> &str {
        self.envelope["type"].as_str().unwrap_or("")
    }
    pub(crate) fn payload(&self) -> &Value {
        &self.envelope["payload"]
    }
    /// Assert this is a signed ERROR with `code`, carried with the same HTTP status.
    pub(crate) fn assert_error(&self, code: u16, what: &str) {
        assert_eq!(self.kind(), "ERROR", "{what}: {}", self.envelope);
        assert_eq!(self.payload()["code"], code, "{what}: {}", self.envelope);
        assert_eq!(self.status, code, "{what}: HTTP status");
        assert!(self.payload()["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
}

pub(crate) fn verify_reply(raw: &[u8], node_did: Option<&str>) -> Value {
    let verified = signed::verify_bytes(raw).unwrap_or_else(|e| {
        panic!(
            "reply is not a valid signed envelope ({e}): {}",
            String::from_utf8_lossy(raw)
        )
    });
    signed::header(&verified.value).expect("reply envelope fields");
    if let Some(did) = node_did {
        assert_eq!(verified.sender_id, did, "reply signed by the node");
    }
    assert!(verified.sender_id.starts_with("did:key:z6Mk"));
    assert!(
        !verified.value["sender"]["signature"]
            .as_str()
            .unwrap()
            .ends_with('='),
        "signatures are emitted unpadded"
    );
    verified.value
}

pub(crate) fn post_raw(node: &TestNode, content_type: &str, body: &[u8], node_did: Option<&str>) -> Reply {
    try_post_raw(&node.url("/envelopes"), content_type, body, node_did).expect("HTTP request failed")
}

/// As [`post_raw`] to `url`, but an exchange that fails (a node killed
/// mid-request) is an `Err`; a reply read whole is checked as always.
pub(crate) fn try_post_raw(
    url: &str,
    content_type: &str,
    body: &[u8],
    node_did: Option<&str>,
) -> Result<Reply, String> {
    let reply = support::try_post_with_headers(url, &[("content-type", content_type)], body)?;
    assert!(
        reply.content_type.starts_with("application/json"),
        "{}",
        reply.content_type
    );
    Ok(Reply {
        status: reply.status,
        envelope: verify_reply(reply.body.as_bytes(), node_did),
    })
}

pub(crate) fn send(node: &TestNode, envelope: &Value, node_did: &str) -> Reply {
    post_raw(
        node,
        "application/json",
        envelope.to_string().as_bytes(),
        Some(node_did),
    )
}

/// HELLO → WELCOME; the node's did as the WELCOME states it.
pub(crate) fn hello(node: &TestNode, agent: &Agent) -> (String, Value) {
    let reply = post_raw(
        node,
        "application/json",
        agent.envelope("HELLO", json!({})).to_string().as_bytes(),
        None,
    );
    assert_eq!(reply.status, 200);
    assert_eq!(reply.kind(), "WELCOME", "{}", reply.envelope);
    let did = reply.payload()["did"].as_str().unwrap().to_string();
    assert_eq!(reply.envelope["sender"]["id"], did.as_str());
    (did, reply.envelope)
}

pub(crate) fn status_of(node: &TestNode, agent: &Agent, did: &str, request_id: &str) -> String {
    let reply = send(
        node,
        &agent.envelope("STATUS", json!({"request_id": request_id})),
        did,
    );
    assert_eq!(reply.kind(), "STATUS", "{}", reply.envelope);
    assert_eq!(reply.payload()["request_id"], request_id);
    reply.payload()["state"].as_str().unwrap().to_string()
}

pub(crate) fn start(builder: support::NodeBuilder) -> TestNode {
    builder.plugin(PLUGIN).start()
}

#[test]
fn hello_request_offer_accept_result_and_status_over_http() {
    let node = start(TestNode::builder());
    let alice = Agent::new();
    let (did, welcome) = hello(&node, &alice);
    // The did is logged at start-up.
    node.wait_for_log(&did);
    let resources = welcome["payload"]["resources"].as_array().unwrap();
    let primes = resources
        .iter()
        .find(|r| r["resource"] == "agora:primes:v1")
        .expect("the negotiated resource is listed");
    assert_eq!(primes["negotiated"], true);
    assert!(primes["description"].as_str().unwrap().contains("credits"));
    let sum = resources
        .iter()
        .find(|r| r["resource"] == "agora:sum:v1")
        .unwrap();
    assert_eq!(sum["negotiated"], false);

    // Direct flow: REQUEST → RESULT, then STATUS says COMPLETED.
    let request = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:sum:v1", "params": {"numbers": [1, 2.5, 4]}}),
    );
    let result = send(&node, &request, &did);
    assert_eq!(result.status, 200);
    assert_eq!(result.kind(), "RESULT", "{}", result.envelope);
    assert_eq!(result.payload()["request_id"], request["id"]);
    assert_eq!(result.payload()["status"], "success");
    assert_eq!(result.payload()["data"]["sum"], 7.5);
    let request_id = request["id"].as_str().unwrap();
    assert_eq!(status_of(&node, &alice, &did, request_id), "COMPLETED");

    // Negotiated flow: REQUEST → OFFER (cost from the plugin's rule) → ACCEPT → RESULT.
    let request = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:primes:v1", "params": {"limit": 50000}, "budget": {"max": 6}}),
    );
    let request_id = request["id"].as_str().unwrap().to_string();
    let offer = send(&node, &request, &did);
    assert_eq!(offer.kind(), "OFFER", "{}", offer.envelope);
    assert_eq!(offer.payload()["request_id"], request_id.as_str());
    assert_eq!(offer.payload()["cost"].as_f64(), Some(6.0), "1 + 50000/10000");
    assert!(offer.payload()["ttl"].as_u64().unwrap() > 0);
    assert!(offer.payload()["eta"].as_u64().is_some());
    assert_eq!(status_of(&node, &alice, &did, &request_id), "NEGOTIATING");
    let accept = alice.envelope(
        "ACCEPT",
        json!({"offer_id": offer.envelope["id"], "payment_proof": "tx-123"}),
    );
    let result = send(&node, &accept, &did);
    assert_eq!(result.kind(), "RESULT", "{}", result.envelope);
    assert_eq!(result.payload()["request_id"], request_id.as_str());
    assert_eq!(result.payload()["data"]["count"], 5133);
    assert_eq!(result.payload()["data"]["largest"], 49999);
    assert_eq!(status_of(&node, &alice, &did, &request_id), "COMPLETED");

    // Budget below the cost: 402 instead of an offer, and the request FAILED.
    let request = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:primes:v1", "params": {"limit": 50000}, "budget": {"max": 5.99}}),
    );
    let reply = send(&node, &request, &did);
    reply.assert_error(402, "budget");
    assert_eq!(reply.payload()["request_id"], request["id"]);
    assert_eq!(
        status_of(&node, &alice, &did, request["id"].as_str().unwrap()),
        "FAILED"
    );

    // Unknown resource: 404 naming the request.
    let request = alice.envelope("REQUEST", json!({"resource": "agora:nothing:v1", "params": {}}));
    let reply = send(&node, &request, &did);
    reply.assert_error(404, "unknown resource");
    assert_eq!(reply.payload()["request_id"], request["id"]);

    // Slower than the request's timeout: 408, FAILED.
    let request = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:delay:v1", "params": {"ms": 3000}, "timeout": 200}),
    );
    let reply = send(&node, &request, &did);
    reply.assert_error(408, "timeout");
    assert_eq!(reply.payload()["request_id"], request["id"]);
    assert_eq!(
        status_of(&node, &alice, &did, request["id"].as_str().unwrap()),
        "FAILED"
    );

    // A plugin's own bad-request failure is a 400 for that request.
    let request = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:sum:v1", "params": {"numbers": "many"}}),
    );
    send(&node, &request, &did).assert_error(400, "plugin bad request");

    // STATUS of someone else's (or no) request: 404.
    let bob = Agent::new();
    let reply = send(
        &node,
        &bob.envelope("STATUS", json!({"request_id": request_id})),
        &did,
    );
    reply.assert_error(404, "status of another sender's request");
}

#[test]
fn accept_rules_only_offeree_once_before_ttl() {
    let node = start(TestNode::builder());
    let alice = Agent::new();
    let mallory = Agent::new();
    let (did, _) = hello(&node, &alice);
    let offer_for = |agent: &Agent| {
        let request = agent.envelope(
            "REQUEST",
            json!({"resource": "agora:primes:v1", "params": {"limit": 1000}}),
        );
        let offer = send(&node, &request, &did);
        assert_eq!(offer.kind(), "OFFER", "{}", offer.envelope);
        (
            request["id"].as_str().unwrap().to_string(),
            offer.envelope["id"].as_str().unwrap().to_string(),
        )
    };

    // Unknown offer id: 404.
    send(
        &node,
        &alice.envelope("ACCEPT", json!({"offer_id": "no-such-offer"})),
        &did,
    )
    .assert_error(404, "unknown offer");
    // Missing offer_id: 400.
    send(&node, &alice.envelope("ACCEPT", json!({})), &did).assert_error(400, "no offer_id");

    let (request_id, offer_id) = offer_for(&alice);
    // Another sender cannot take it, and trying does not consume it.
    let reply = send(
        &node,
        &mallory.envelope("ACCEPT", json!({"offer_id": offer_id})),
        &did,
    );
    reply.assert_error(401, "other sender");
    assert!(
        reply.payload().get("request_id").is_none(),
        "nothing leaks about the request"
    );
    assert_eq!(status_of(&node, &alice, &did, &request_id), "NEGOTIATING");
    let result = send(
        &node,
        &alice.envelope("ACCEPT", json!({"offer_id": offer_id})),
        &did,
    );
    assert_eq!(result.kind(), "RESULT", "{}", result.envelope);
    assert_eq!(result.payload()["request_id"], request_id.as_str());
    assert_eq!(result.payload()["data"]["count"], 168);
    // Once only.
    let again = send(
        &node,
        &alice.envelope("ACCEPT", json!({"offer_id": offer_id})),
        &did,
    );
    again.assert_error(400, "second accept");
    assert_eq!(again.payload()["request_id"], request_id.as_str());
    assert_eq!(status_of(&node, &alice, &did, &request_id), "COMPLETED");
}

#[test]
fn expired_offers_and_overload_are_refused() {
    let node = start(
        TestNode::builder()
            .env("AGORA_ENVELOPES__MAX_OFFER_TTL_MS", "300")
            .env("AGORA_ENVELOPES__MAX_IN_FLIGHT", "1")
            // The test polls STATUS while the slow request runs.
            .env("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "100000"),
    );
    let alice = Agent::new();
    let (did, _) = hello(&node, &alice);

    // An offer accepted after its ttl: 408, and the request FAILED.
    let request = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:primes:v1", "params": {"limit": 100}}),
    );
    let offer = send(&node, &request, &did);
    assert_eq!(offer.kind(), "OFFER");
    assert_eq!(
        offer.payload()["ttl"],
        300,
        "the quoted 30 s is clamped to the config"
    );
    std::thread::sleep(Duration::from_millis(700));
    let reply = send(
        &node,
        &alice.envelope("ACCEPT", json!({"offer_id": offer.envelope["id"]})),
        &did,
    );
    reply.assert_error(408, "expired offer");
    assert_eq!(reply.payload()["request_id"], request["id"]);
    assert_eq!(
        status_of(&node, &alice, &did, request["id"].as_str().unwrap()),
        "FAILED"
    );

    // One plugin-running envelope at a time: while a slow one runs, the next gets 503.
    let slow = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:delay:v1", "params": {"ms": 3000}}),
    );
    let slow_id = slow["id"].as_str().unwrap().to_string();
    let url = node.url("/envelopes");
    let body = slow.to_string();
    let running = std::thread::spawn(move || support::post(&url, "application/json", body.as_bytes()));
    // STATUS takes no slot: wait until the slow request is known to be running.
    loop {
        let reply = send(
            &node,
            &alice.envelope("STATUS", json!({"request_id": slow_id})),
            &did,
        );
        if reply.kind() == "STATUS" && reply.payload()["state"] == "PROCESSING" {
            break;
        }
        assert!(
            !running.is_finished(),
            "the slow request ended before it was seen running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let busy = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:sum:v1", "params": {"numbers": [1]}}),
    );
    let reply = send(&node, &busy, &did);
    reply.assert_error(503, "overloaded");
    assert_eq!(reply.payload()["request_id"], busy["id"]);
    let finished = running.join().unwrap();
    let finished = verify_reply(finished.body.as_bytes(), Some(&did));
    assert_eq!(finished["type"], "RESULT", "{finished}");
    // With the slot free again the node serves.
    let reply = send(
        &node,
        &alice.envelope(
            "REQUEST",
            json!({"resource": "agora:sum:v1", "params": {"numbers": [1]}}),
        ),
        &did,
    );
    assert_eq!(reply.kind(), "RESULT");
}

#[test]
fn signatures_timestamps_and_envelope_shape_are_enforced() {
    let node = start(TestNode::builder());
    let alice = Agent::new();
    let (did, _) = hello(&node, &alice);
    let request = |agent: &Agent| {
        agent.draft(
            "REQUEST",
            json!({"resource": "agora:sum:v1", "params": {"numbers": [1, 2]}}),
        )
    };

    // Bad signature: one bit flipped.
    let mut flipped = alice.sign(request(&alice));
    let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(flipped["sender"]["signature"].as_str().unwrap())
        .unwrap();
    bytes[10] ^= 1;
    flipped["sender"]["signature"] = json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes));
    send(&node, &flipped, &did).assert_error(401, "flipped bit");

    // Key mismatch: signed by Alice, claiming to be Bob.
    let bob = Agent::new();
    let mut claimed = request(&alice);
    claimed["sender"]["id"] = json!(bob.id);
    let forged = alice.sign(claimed);
    send(&node, &forged, &did).assert_error(401, "key mismatch");

    // Tampered payload after signing.
    let mut tampered = alice.sign(request(&alice));
    tampered["payload"]["params"]["numbers"] = json!([1, 3]);
    send(&node, &tampered, &did).assert_error(401, "tampered payload");

    // Missing and empty signatures.
    let mut missing = request(&alice);
    missing["sender"].as_object_mut().unwrap().remove("signature");
    send(&node, &missing, &did).assert_error(401, "missing signature");
    send(&node, &request(&alice), &did).assert_error(401, "empty signature");
    // Truncated signature and a sender id that is not an Ed25519 key.
    let mut truncated = alice.sign(request(&alice));
    truncated["sender"]["signature"] = json!(&truncated["sender"]["signature"].as_str().unwrap()[..40]);
    send(&node, &truncated, &did).assert_error(401, "truncated signature");
    let mut secp = request(&alice);
    secp["sender"]["id"] = json!("did:key:zQ3shMYdM8Kuh6LHsfSkGi2tUnnX1e4u286ZN1qzm8wcrk3zh");
    send(&node, &alice.sign(secp), &did).assert_error(401, "non-Ed25519 did:key");

    // Both signature variants, a padded signature and a raw-key sender are accepted.
    let removed = alice.sign_removed_variant(request(&alice));
    assert_eq!(send(&node, &removed, &did).kind(), "RESULT", "removed variant");
    let mut padded = alice.sign(request(&alice));
    let signature = padded["sender"]["signature"].as_str().unwrap().to_string();
    padded["sender"]["signature"] = json!(format!("{signature}=="));
    assert_eq!(send(&node, &padded, &did).kind(), "RESULT", "padded signature");
    let raw = Agent::raw();
    assert_eq!(
        send(&node, &raw.sign(request(&raw)), &did).kind(),
        "RESULT",
        "raw key id"
    );

    // Non-canonical number forms and key order in the received bytes still verify:
    // the signature is checked over the parsed value, not a re-serialized struct.
    let draft = alice.draft(
        "REQUEST",
        json!({"resource": "agora:sum:v1", "params": {"numbers": [10000.0, -0.0, 1.5e1]}}),
    );
    let signed_value = alice.sign(draft.clone());
    let text = format!(
        r#"{{"payload":{{"params":{{"numbers":[10000.0,-0.0,1.5e1]}},"resource":"agora:sum:v1"}},"type":"REQUEST","sender":{{"signature":"{}","id":"{}"}},"timestamp":"{}","id":"{}","protocol":"agora/1.0"}}"#,
        signed_value["sender"]["signature"].as_str().unwrap(),
        alice.id,
        draft["timestamp"].as_str().unwrap(),
        draft["id"].as_str().unwrap(),
    );
    let reply = post_raw(&node, "application/json", text.as_bytes(), Some(&did));
    assert_eq!(reply.kind(), "RESULT", "{}", reply.envelope);
    assert_eq!(reply.payload()["data"]["sum"], 10015.0);
    // A duplicate member is refused before anything else (I-JSON).
    let duplicated = text.replacen(r#""type":"REQUEST","#, r#""type":"REQUEST","type":"HELLO","#, 1);
    post_raw(&node, "application/json", duplicated.as_bytes(), Some(&did))
        .assert_error(400, "duplicate member");

    // Stale and future timestamps.
    for (offset, what) in [(-61_000i64, "stale"), (61_000, "future")] {
        let mut draft = request(&alice);
        let at = (now_ms() as i64 + offset) as u64;
        draft["timestamp"] = json!(signed::format_timestamp(at));
        send(&node, &alice.sign(draft), &did).assert_error(401, what);
    }
    // Slightly off clocks are fine.
    let mut draft = request(&alice);
    draft["timestamp"] = json!(signed::format_timestamp(now_ms() - 30_000));
    assert_eq!(send(&node, &alice.sign(draft), &did).kind(), "RESULT");

    // Malformed JSON, wrong protocol, unknown type, wrong shapes, wrong media type.
    post_raw(&node, "application/json", b"{\"protocol\": ", Some(&did)).assert_error(400, "malformed JSON");
    post_raw(&node, "application/json", b"[1,2]", Some(&did)).assert_error(400, "not an object");
    post_raw(
        &node,
        "text/plain",
        request(&alice).to_string().as_bytes(),
        Some(&did),
    )
    .assert_error(400, "content type");
    let mut wrong_protocol = request(&alice);
    wrong_protocol["protocol"] = json!("agora/0.9");
    send(&node, &alice.sign(wrong_protocol), &did).assert_error(400, "wrong protocol");
    send(&node, &alice.envelope("GOSSIP", json!({})), &did).assert_error(400, "unknown type");
    send(&node, &alice.envelope("RESULT", json!({})), &did).assert_error(400, "type the node does not take");
    let mut no_payload = request(&alice);
    no_payload["payload"] = json!("text");
    send(&node, &alice.sign(no_payload), &did).assert_error(400, "payload not an object");
    let reply = send(&node, &alice.envelope("REQUEST", json!({"params": {}})), &did);
    reply.assert_error(400, "REQUEST without resource");
    let reply = send(
        &node,
        &alice.envelope("REQUEST", json!({"resource": "agora:sum:v1", "timeout": -5})),
        &did,
    );
    reply.assert_error(400, "negative timeout");
    // The node still serves after all of that.
    assert_eq!(
        send(
            &node,
            &alice.envelope(
                "REQUEST",
                json!({"resource": "agora:sum:v1", "params": {"numbers": [2]}})
            ),
            &did
        )
        .kind(),
        "RESULT"
    );
}

#[test]
fn replayed_envelopes_are_refused_even_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let alice = Agent::new();
    let request = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:sum:v1", "params": {"numbers": [1]}}),
    );
    let did;
    {
        let node = start(TestNode::builder().data_dir(dir.path()));
        did = hello(&node, &alice).0;
        assert_eq!(send(&node, &request, &did).kind(), "RESULT");
        let replay = send(&node, &request, &did);
        replay.assert_error(401, "replay");
        assert_eq!(replay.payload()["request_id"], request["id"]);
        // The same id from another sender is a different envelope.
        let bob = Agent::new();
        let mut bobs = bob.draft("HELLO", json!({}));
        bobs["id"] = request["id"].clone();
        assert_eq!(send(&node, &bob.sign(bobs), &did).kind(), "WELCOME");
        // A crash, not a clean stop: what the node answered must already be on disk.
        node.kill();
    }
    let node = start(TestNode::builder().data_dir(dir.path()));
    let (did_after, _) = hello(&node, &alice);
    assert_eq!(did_after, did, "the node keeps its identity across restarts");
    send(&node, &request, &did).assert_error(401, "replay after restart");
}

#[test]
fn allow_list_and_per_sender_rate_limit() {
    let alice = Agent::new();
    let carol = Agent::raw();
    let node = start(
        TestNode::builder()
            .env(
                "AGORA_ENVELOPES__ALLOWED_SENDERS",
                format!("[\"{}\", \"{}\"]", alice.id, carol.id),
            )
            .env("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "3"),
    );
    let (did, _) = hello(&node, &alice); // 1 of Alice's 3
    let mallory = Agent::new();
    send(&node, &mallory.envelope("HELLO", json!({})), &did).assert_error(401, "not allowed");
    assert_eq!(
        send(&node, &carol.envelope("HELLO", json!({})), &did).kind(),
        "WELCOME"
    );
    // The minute window may roll over between envelopes; then at most 3 more pass.
    let mut limited = None;
    for _ in 0..5 {
        let reply = send(&node, &alice.envelope("HELLO", json!({})), &did);
        if reply.kind() == "ERROR" {
            limited = Some(reply);
            break;
        }
        assert_eq!(reply.kind(), "WELCOME");
    }
    limited
        .expect("the rate limit applied")
        .assert_error(429, "rate limit");
    // Another sender has its own budget.
    assert_eq!(
        send(&node, &carol.envelope("HELLO", json!({})), &did).kind(),
        "WELCOME"
    );
}

#[test]
fn a_burst_over_the_rate_is_refused_with_the_limiters_retry_after() {
    // Two a minute: a burst of two, then one token every 30 s.
    let node = start(TestNode::builder().env("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "2"));
    let alice = Agent::new();
    let (did, _) = hello(&node, &alice);
    assert_eq!(
        send(&node, &alice.envelope("HELLO", json!({})), &did).kind(),
        "WELCOME"
    );
    let envelope = alice.envelope("HELLO", json!({}));
    let refused = support::post(
        &node.url("/envelopes"),
        "application/json",
        envelope.to_string().as_bytes(),
    );
    let reply = Reply {
        status: refused.status,
        envelope: verify_reply(refused.body.as_bytes(), Some(&did)),
    };
    reply.assert_error(429, "the third of a burst of two");
    let retry_after: u64 = refused
        .header("retry-after")
        .expect("a Retry-After header")
        .parse()
        .expect("whole seconds");
    assert!((1..=30).contains(&retry_after), "Retry-After {retry_after}");
    let message = reply.payload()["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("try again in {retry_after} s")),
        "the header is the limiter's wait: {message}"
    );
    // Successful replies carry no Retry-After.
    let bob = Agent::new();
    let welcome = support::post(
        &node.url("/envelopes"),
        "application/json",
        bob.envelope("HELLO", json!({})).to_string().as_bytes(),
    );
    assert_eq!(welcome.status, 200);
    assert_eq!(welcome.header("retry-after"), None);
}

pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) async fn next_envelope(socket: &mut Socket, did: &str) -> Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), socket.next())
            .await
            .expect("a frame in time")
            .expect("the socket is open")
            .expect("a valid frame");
        match frame {
            Message::Text(text) => return verify_reply(text.as_bytes(), Some(did)),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

pub(crate) async fn ws_send(socket: &mut Socket, envelope: &Value) {
    socket
        .send(Message::Text(envelope.to_string().into()))
        .await
        .unwrap();
}

#[test]
fn websocket_binding_carries_the_loop_and_pushes_long_results() {
    let node = start(TestNode::builder());
    let alice = Agent::new();
    let (did, _) = hello(&node, &alice);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (mut socket, _) = tokio_tungstenite::connect_async(node.ws_url("/envelopes/ws"))
            .await
            .expect("WebSocket upgrade");
        ws_send(&mut socket, &alice.envelope("HELLO", json!({}))).await;
        let welcome = next_envelope(&mut socket, &did).await;
        assert_eq!(welcome["type"], "WELCOME");

        // A long direct task does not hold up the socket: a later HELLO is answered first,
        // and the RESULT is pushed when ready.
        let slow = alice.envelope(
            "REQUEST",
            json!({"resource": "agora:delay:v1", "params": {"ms": 1500}}),
        );
        ws_send(&mut socket, &slow).await;
        ws_send(&mut socket, &alice.envelope("HELLO", json!({}))).await;
        let first = next_envelope(&mut socket, &did).await;
        assert_eq!(first["type"], "WELCOME", "{first}");
        let pushed = next_envelope(&mut socket, &did).await;
        assert_eq!(pushed["type"], "RESULT", "{pushed}");
        assert_eq!(pushed["payload"]["request_id"], slow["id"]);
        assert!(pushed["payload"]["data"]["waited_ms"].as_u64().unwrap() >= 1500);

        // Negotiated over the socket: OFFER, then ACCEPT → STATUS PROCESSING at once, RESULT pushed.
        let request = alice.envelope(
            "REQUEST",
            json!({"resource": "agora:primes:v1", "params": {"limit": 2000000}}),
        );
        ws_send(&mut socket, &request).await;
        let offer = next_envelope(&mut socket, &did).await;
        assert_eq!(offer["type"], "OFFER", "{offer}");
        assert_eq!(offer["payload"]["cost"].as_f64(), Some(201.0));
        ws_send(
            &mut socket,
            &alice.envelope("ACCEPT", json!({"offer_id": offer["id"]})),
        )
        .await;
        let processing = next_envelope(&mut socket, &did).await;
        assert_eq!(processing["type"], "STATUS", "{processing}");
        assert_eq!(processing["payload"]["state"], "PROCESSING");
        assert_eq!(processing["payload"]["request_id"], request["id"]);
        let result = next_envelope(&mut socket, &did).await;
        assert_eq!(result["type"], "RESULT", "{result}");
        assert_eq!(result["payload"]["request_id"], request["id"]);
        assert_eq!(result["payload"]["data"]["count"], 148933);

        // Errors are signed ERROR frames and the socket stays usable.
        socket.send(Message::Text("{not json".into())).await.unwrap();
        let error = next_envelope(&mut socket, &did).await;
        assert_eq!(error["type"], "ERROR");
        assert_eq!(error["payload"]["code"], 400);
        socket
            .send(Message::Binary(vec![1u8, 2, 3].into()))
            .await
            .unwrap();
        let error = next_envelope(&mut socket, &did).await;
        assert_eq!(error["payload"]["code"], 400);
        ws_send(&mut socket, &slow).await;
        let replay = next_envelope(&mut socket, &did).await;
        assert_eq!(replay["payload"]["code"], 401, "replay over the socket");
        assert_eq!(replay["payload"]["request_id"], slow["id"]);
        let mut tampered = alice.envelope(
            "REQUEST",
            json!({"resource": "agora:sum:v1", "params": {"numbers": [1]}}),
        );
        tampered["payload"]["params"]["numbers"] = json!([2]);
        ws_send(&mut socket, &tampered).await;
        let error = next_envelope(&mut socket, &did).await;
        assert_eq!(error["payload"]["code"], 401);
        ws_send(
            &mut socket,
            &alice.envelope("STATUS", json!({"request_id": request["id"]})),
        )
        .await;
        let status = next_envelope(&mut socket, &did).await;
        assert_eq!(status["payload"]["state"], "COMPLETED");
        socket.close(None).await.unwrap();
    });
}

#[test]
fn python_peer_with_cryptography_and_rfc8785_interoperates() {
    let python = support::python_venv(
        "envelopes-peer",
        &["cryptography==50.0.2", "rfc8785==0.1.4", "base58==2.1.1"],
    );
    let node = start(TestNode::builder());
    let script = support::repo_root().join("tests/interop/envelopes/peer.py");
    let output = Command::new(&python)
        .arg(&script)
        .arg(node.url("/envelopes"))
        .output()
        .expect("running the Python peer");
    assert!(
        output.status.success(),
        "the Python peer failed:\n{}\nnode log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        node.log_text()
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let steps: Vec<&Value> = report["steps"].as_array().unwrap().iter().collect();
    let step = |name: &str| {
        *steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("step {name}"))
    };
    // Every reply verified by the Python verifier, all from the node's did.
    assert!(steps.iter().all(|s| s["verified"] == true));
    let (node_did, _) = hello(&node, &Agent::new());
    assert_eq!(report["node"], node_did.as_str());
    assert_eq!(step("hello")["type"], "WELCOME");
    assert_eq!(step("direct")["type"], "RESULT");
    assert_eq!(step("direct")["payload"]["data"]["sum"], 6.5);
    assert_eq!(step("request_negotiated")["type"], "OFFER");
    assert_eq!(step("request_negotiated")["payload"]["cost"].as_f64(), Some(2.0));
    let accept = step("accept_removed_variant");
    assert_eq!(
        accept["type"], "RESULT",
        "the node accepts the Python signer's removed-variant ACCEPT"
    );
    assert_eq!(accept["payload"]["data"]["count"], 168);
    assert_eq!(
        accept["payload"]["request_id"],
        step("request_negotiated")["sent_id"]
    );
    assert_eq!(step("status")["payload"]["state"], "COMPLETED");
    assert_eq!(step("raw_key_sender")["type"], "WELCOME");
    assert_eq!(step("tampered")["http_status"], 401);
    assert_eq!(step("tampered")["payload"]["code"], 401);
}

#[test]
fn cli_runs_the_negotiated_loop_and_respects_the_budget() {
    let node = start(TestNode::builder());
    let url = node.url("/envelopes");
    let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .args([
            "envelope",
            "send",
            &url,
            "--hello",
            "--resource",
            "agora:primes:v1",
        ])
        .args(["--params", r#"{"limit": 100000}"#, "--budget", "20"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["status"], "success");
    assert_eq!(result["data"]["count"], 9592);
    assert!(stderr.contains("verified WELCOME"), "{stderr}");
    assert!(stderr.contains("verified OFFER"), "{stderr}");
    assert!(stderr.contains("verified RESULT"), "{stderr}");

    // The node refuses an offer over the budget (402); the CLI reports it and fails.
    let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .args(["envelope", "send", &url, "--resource", "agora:primes:v1"])
        .args(["--params", r#"{"limit": 1000000}"#, "--budget", "20"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("ERROR 402"));

    // A direct resource: REQUEST → RESULT.
    let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .args(["envelope", "send", &url, "--resource", "agora:sum:v1"])
        .args(["--params", r#"{"numbers": [1, 2, 3.5]}"#])
        .output()
        .unwrap();
    assert!(output.status.success());
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["data"]["sum"], 6.5);
}
