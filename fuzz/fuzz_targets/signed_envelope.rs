//! Signed Agora envelopes: the bytes of `POST /envelopes` and of each
//! `/envelopes/ws` text frame go through `verify_bytes` (strict parse → JCS →
//! Ed25519) and then `header`. Random bytes almost never carry a valid
//! signature, so each parsed object is also re-signed with a fixed key to get
//! past verification into `header`.
//!
//! Invariants: nothing panics; JCS output re-parses strictly and is a fixed
//! point; an envelope we just signed and serialised verifies.
#![no_main]

use agora_node::crypto::envelope as signed;
use agora_node::crypto::identity::did_key;
use agora_node::crypto::jcs;
use ed25519_dalek::SigningKey;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let parsed = jcs::parse_strict(data);
    if let Ok(value) = &parsed {
        check_jcs(value, data);
    }

    if let Ok(verified) = signed::verify_bytes(data) {
        let _ = signed::header(&verified.value);
    }

    if let Ok(mut value) = parsed {
        resign_and_verify(&mut value);
    }
});

fn check_jcs(value: &Value, data: &[u8]) {
    let Ok(canonical) = jcs::canonicalize(value) else {
        return;
    };
    assert_eq!(
        jcs::canonicalize_bytes(data).ok().as_deref(),
        Some(canonical.as_slice()),
        "canonicalize_bytes disagrees with parse_strict + canonicalize"
    );
    let reparsed = jcs::parse_strict(&canonical).unwrap_or_else(|e| {
        panic!(
            "JCS output does not re-parse ({e}): {:?}",
            String::from_utf8_lossy(&canonical)
        )
    });
    let again = jcs::canonicalize(&reparsed).expect("re-canonicalizing JCS output failed");
    assert_eq!(
        String::from_utf8_lossy(&again),
        String::from_utf8_lossy(&canonical),
        "JCS is not idempotent"
    );
}

fn resign_and_verify(value: &mut Value) {
    let Some(sender) = value.get_mut("sender").and_then(Value::as_object_mut) else {
        return;
    };
    let key = SigningKey::from_bytes(&[7; 32]);
    sender.insert("id".into(), Value::String(did_key(&key.verifying_key())));
    if signed::sign(value, &key).is_err() {
        return;
    }
    let bytes = serde_json::to_vec(value).expect("a Value always serialises");
    let verified = signed::verify_bytes(&bytes).unwrap_or_else(|e| {
        panic!(
            "an envelope signed here does not verify ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    let _ = signed::header(&verified.value);
}
