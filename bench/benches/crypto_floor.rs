//! The cryptographic floors under criterion, using the node's own crypto:
//! row 3's one Ed25519 verify (with the strict parse and JCS it needs) plus
//! one sign (with its JCS) per iteration, and row 4's uAgents envelope verify
//! plus reply sign (secp256k1).

use agora_bench::floor;
use agora_node::crypto::uagents::{AgentIdentity, Envelope};
use criterion::{Criterion, criterion_group, criterion_main};
use ed25519_dalek::SigningKey;

fn crypto_floor(c: &mut Criterion) {
    let client = SigningKey::from_bytes(&[7u8; 32]);
    let node = SigningKey::from_bytes(&[9u8; 32]);
    let request = floor::sum_request(&client);
    let request_bytes = request.to_string().into_bytes();
    let reply = floor::sum_result(&request, &node);
    c.bench_function("envelope_verify_plus_sign", |b| {
        b.iter(|| floor::verify_and_sign(&request_bytes, &reply, &node))
    });

    let sender = AgentIdentity::from_seed("crypto-floor-sender").expect("a seed");
    let agent = AgentIdentity::from_seed("crypto-floor-agent").expect("a seed");
    let mut message = uagents_envelope(&sender, agent.address(), r#"{"text": "bench"}"#);
    message.sign(&sender);
    let message_bytes = message.to_json().into_bytes();
    let answer = uagents_envelope(&agent, sender.address(), r#"{"text": "echo: bench"}"#);
    c.bench_function("uagents_verify_plus_sign", |b| {
        b.iter(|| floor::uagents_verify_and_sign(&message_bytes, &answer, &agent))
    });
}

fn uagents_envelope(from: &AgentIdentity, to: &str, payload: &str) -> Envelope {
    let mut envelope = Envelope {
        version: 1,
        sender: from.address().to_string(),
        target: to.to_string(),
        session: "6f1c0c1e-0a56-4d8b-9e7a-2b2b6d2a1c11".into(),
        schema_digest: "model:3968d004abc47bcb38618e96eff911f3d2ee2e335856e39a9aadc90a1e3700f8".into(),
        protocol_digest: None,
        payload: None,
        expires: Some(u64::MAX / 2),
        nonce: None,
        signature: None,
    };
    envelope.encode_payload(payload);
    envelope
}

criterion_group!(benches, crypto_floor);
criterion_main!(benches);
