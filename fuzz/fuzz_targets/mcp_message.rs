//! MCP messages: a `POST {mcp.path}` body goes through the JSON-RPC classifier
//! in MCP's dialect (`jsonrpc::parse`, `wire::DIALECT`), a request's params through the readers of
//! `tools/call` and `tools/list`, and a client's answer through the reader of
//! the approval form.
//!
//! Invariants: nothing panics; a request's method is at most 128 characters;
//! `tools/call` arguments are always an object; an approval's feedback is
//! bounded, so nothing a client sends grows what the node stores.
#![no_main]

use agora_node::jsonrpc::{self, Inbound};
use agora_node::transports::mcp::wire::{self, ElicitAnswer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = jsonrpc::parse(data, wire::DIALECT) else {
        return;
    };
    match message {
        Inbound::Request { method, params, .. } => {
            assert!(method.chars().count() <= 128);
            if let Ok(call) = wire::tool_call_params(&params) {
                assert!(call.arguments.is_object());
            }
            let _ = wire::cursor(&params);
            let _ = wire::negotiate(params.get("protocolVersion").and_then(|v| v.as_str()));
            let _ = wire::accepts_form_elicitation(&params);
        }
        Inbound::Response { outcome, .. } => match wire::elicit_answer(outcome) {
            ElicitAnswer::Rejected { feedback: Some(text) } | ElicitAnswer::Failed(text) => {
                assert!(text.chars().count() <= 2_000);
            }
            _ => {}
        },
        Inbound::Notification { .. } => {}
    }
});
