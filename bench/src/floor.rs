//! The cryptographic floors of rows 3 and 4: what a signed exchange costs at
//! the least, using the node's own crypto module. Row 3: verify the
//! signed-envelope REQUEST as received (strict parse, RFC 8785 JCS, Ed25519
//! verify) and sign the RESULT (JCS, Ed25519 sign). Row 4: the same for a
//! uAgents message and its reply (secp256k1).

use agora_node::crypto::envelope as signed;
use agora_node::crypto::identity::did_key;
use agora_node::crypto::uagents::{AgentIdentity, Envelope};
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};

/// A signed REQUEST for `agora:sum:v1` like the load driver sends.
pub fn sum_request(key: &SigningKey) -> Value {
    let mut envelope = json!({
        "protocol": "agora/1.0",
        "id": uuid::Uuid::new_v4().to_string(),
        "timestamp": signed::format_timestamp(agora_node::store::now_ms()),
        "type": "REQUEST",
        "sender": {"id": did_key(&key.verifying_key()), "signature": ""},
        "payload": {"resource": "agora:sum:v1", "params": {"numbers": [1, 2.5, 4]}},
    });
    signed::sign(&mut envelope, key).expect("a well-formed envelope signs");
    envelope
}

/// An unsigned RESULT answering `request`, shaped like the node's.
pub fn sum_result(request: &Value, key: &SigningKey) -> Value {
    json!({
        "protocol": "agora/1.0",
        "id": uuid::Uuid::new_v4().to_string(),
        "timestamp": signed::format_timestamp(agora_node::store::now_ms()),
        "type": "RESULT",
        "sender": {"id": did_key(&key.verifying_key()), "signature": ""},
        "payload": {"request_id": request["id"], "status": "success", "data": {"sum": 7.5, "count": 3}},
    })
}

/// One floor operation: verify `request_bytes`, sign a copy of `reply`.
pub fn verify_and_sign(request_bytes: &[u8], reply: &Value, key: &SigningKey) -> Value {
    let verified = signed::verify_bytes(request_bytes).expect("the request verifies");
    std::hint::black_box(verified);
    let mut out = reply.clone();
    signed::sign(&mut out, key).expect("the reply signs");
    out
}

/// Row 4's floor, the same way: verify a uAgents message envelope as received
/// (parse, digest, secp256k1 verify against the sender's address) and sign a
/// copy of the reply envelope (digest, secp256k1 sign).
pub fn uagents_verify_and_sign(request_bytes: &[u8], reply: &Envelope, identity: &AgentIdentity) -> Envelope {
    let value: Value = serde_json::from_slice(request_bytes).expect("the request is JSON");
    let request = Envelope::from_value(value).expect("the request is an envelope");
    request.verify().expect("the request verifies");
    std::hint::black_box(request);
    let mut out = reply.clone();
    out.sign(identity);
    out
}
