//! uAgents envelopes: the body of `POST /submit` is parsed as JSON, read as an
//! `Envelope` (pydantic's rules), digested, verified and its payload decoded,
//! in that order as the transport does. Each envelope is also re-signed with a
//! fixed identity so the path past verification is reached.
//!
//! Invariants: nothing panics; an envelope survives its own `to_json` (what the
//! node sends as a sync reply) unchanged; one we just signed verifies.
#![no_main]

use std::sync::OnceLock;

use agora_node::crypto::uagents::{self, AgentIdentity, Envelope};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn identity() -> &'static AgentIdentity {
    static IDENTITY: OnceLock<AgentIdentity> = OnceLock::new();
    IDENTITY.get_or_init(|| AgentIdentity::from_seed("agora-node fuzz seed").expect("a seed phrase"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(envelope) = Envelope::from_value(value) else {
        return;
    };
    let _ = envelope.digest();
    let _ = envelope.verify();
    let _ = envelope.decode_payload();
    let _ = uagents::decode_address(&envelope.sender);
    let _ = uagents::looks_like_agent_address(&envelope.target);

    let text = envelope.to_json();
    let back: Value = serde_json::from_str(&text).expect("to_json output is JSON");
    let back = Envelope::from_value(back).expect("to_json output is an envelope again");
    assert_eq!(back, envelope, "an envelope changed through to_json");

    let mut resigned = envelope;
    resigned.sender = identity().address().to_string();
    resigned.sign(identity());
    if let Err(error) = resigned.verify() {
        panic!(
            "an envelope signed here does not verify: {error}: {}",
            resigned.to_json()
        );
    }
});
