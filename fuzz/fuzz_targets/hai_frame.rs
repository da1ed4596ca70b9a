//! HAI: every text frame a browser sends on `GET /ws` goes through
//! `wire::parse` before the session looks at it.
//!
//! Invariants: nothing panics; what parses respects the wire bounds.
#![no_main]

use agora_node::transports::hai::wire::{self, Inbound};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // WebSocket text frames are UTF-8 by the time the transport sees them.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match wire::parse(text) {
        Ok(Inbound::UserMessage(message)) => {
            assert!(message.content.chars().count() <= wire::MAX_CONTENT_CHARS);
            assert!(wire::check_session_id(&message.session_id).is_ok());
            let _ = message.wants_complete_message();
        }
        Ok(Inbound::ApprovalResponse(response)) => {
            assert!(response.approval_id.len() <= wire::MAX_APPROVAL_ID_BYTES);
            if let Some(feedback) = &response.feedback {
                assert!(feedback.chars().count() <= wire::MAX_FEEDBACK_CHARS);
            }
        }
        Err(_) => {}
    }
});
