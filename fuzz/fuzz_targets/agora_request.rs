//! Agora two-party requests and protocol documents: the body of `POST /agora`
//! (and of a conversation follow-up) goes through the transport's field checks
//! (`request_fields`); its `protocolHash` through `normalise_hash`; each inline
//! `protocolSources` entry through `inline_source` and then `document::parse`.
//! The whole input is also read as a protocol document, as one arriving in a
//! source would be.
//!
//! Invariants: nothing panics; a normalised hash is 40 lower-case hex digits and
//! a fixed point, and its base64 form normalises back to it; an inline source
//! never decodes to more than its limit.
#![no_main]

use std::sync::OnceLock;

use agora_node::Config;
use agora_node::crypto::protocol_hash;
use agora_node::transports::agora::{document, wire::request_fields};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(Config::defaults)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(data) {
        let hash = fields
            .get("protocolHash")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let sources: Vec<String> = fields
            .get("protocolSources")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let _ = request_fields(&mut fields, config().agora.max_sources);
        if let Some(hash) = hash {
            check_hash(&hash);
        }
        for source in &sources {
            check_source(source);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        read_document(text);
        check_source(text);
        check_hash(text);
    }
});

fn check_hash(hash: &str) {
    let Some(hex) = document::normalise_hash(hash) else {
        return;
    };
    assert_eq!(hex.len(), 40, "normalised hash {hex:?}");
    assert!(
        hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "normalised hash {hex:?}"
    );
    assert_eq!(document::normalise_hash(&hex).as_deref(), Some(hex.as_str()));
    let base64 = document::hash_as_base64(&hex).expect("hex from normalise_hash decodes");
    assert_eq!(document::normalise_hash(&base64).as_deref(), Some(hex.as_str()));
}

fn check_source(source: &str) {
    // The node's limit, and a small one so the limit checks themselves are exercised.
    for limit in [config().agora.max_document_bytes, 64] {
        if let Some(Ok(text)) = document::inline_source(source, limit) {
            assert!(
                text.len() <= limit,
                "a {}-byte source passed a {limit}-byte limit",
                text.len()
            );
            read_document(&text);
        }
    }
}

fn read_document(text: &str) {
    let _ = protocol_hash(text.as_bytes());
    let _ = document::metadata(text);
    if let Ok(parsed) = document::parse(text) {
        assert!(
            text.contains(parsed.specification),
            "the specification is not part of the document"
        );
    }
}
