//! A2A JSON-RPC params: the body's `params` go through the transport's readers
//! (`wire::params`) as every method reads them, and a message through
//! `validate_message`, with the default bounds.
//!
//! Invariants: nothing panics; a message that validates has between one part
//! and the bound, each with exactly one content, and writes back (ProtoJSON)
//! to a message that reads as itself, so what the node stores and streams is
//! what it accepted.
#![no_main]

use agora_node::models::a2a::Message;
use agora_node::transports::a2a::wire::{
    self, GetTaskRequest, ListTasksRequest, MessageLimits, SendMessageRequest, TaskIdRequest,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const LIMITS: MessageLimits = MessageLimits {
    max_parts: 32,
    max_id_chars: 128,
};

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let params = body.remove("params").unwrap_or(Value::Null);
    let _ = wire::params::<GetTaskRequest>(params.clone());
    let _ = wire::params::<ListTasksRequest>(params.clone());
    let _ = wire::params::<TaskIdRequest>(params.clone());
    let Ok(request) = wire::params::<SendMessageRequest>(params) else {
        return;
    };
    let message = request.message;
    if wire::validate_message(&message, &LIMITS).is_err() {
        return;
    }
    assert!(!message.parts.is_empty() && message.parts.len() <= LIMITS.max_parts);
    let written = serde_json::to_value(&message).expect("a message writes");
    for part in written["parts"].as_array().expect("parts") {
        let contents = ["text", "data", "url", "raw"]
            .iter()
            .filter(|key| part.get(**key).is_some())
            .count();
        assert_eq!(contents, 1, "{part}");
    }
    let read_back: Message = serde_json::from_value(written).expect("what the node writes reads back");
    assert_eq!(read_back, message);
});
