//! The operator's console: one place an operator sees and steers the node,
//! instead of curl against each protocol's endpoint and an approval answerable
//! only from the client that asked. This first slice is its JSON API under
//! `console.path` on the shared listener (the page comes later):
//!
//! - `GET {path}/api/overview`: version, uptime, the store and whether it
//!   answers, every transport's endpoint, the plugin counts ([`overview`]);
//! - `GET {path}/api/plugins`: one row per plugin file ([`overview`]);
//! - `GET {path}/api/approvals`: every approval waiting for a human, from HAI,
//!   A2A and MCP alike, and `POST {path}/api/approvals/{id}` to answer one as
//!   its own client would ([`approvals`]).
//!
//! It reads and steers through the node's shared modules and never keeps a
//! second copy of a policy: the approvals are [`crate::runtime::approval`]'s
//! table, answered through each transport's own answer path; the token check
//! is [`crate::transports::bearer_authorized`]; the browser policy is
//! [`crate::policy::browser`]'s, as for every transport ([`access`]). Errors
//! are [`ConsoleError`], JSON `{"error": …}` with a status, mapped in one place.
//!
//! Off until `console.token` is set (`AGORA_CONSOLE__TOKEN`): then nothing is
//! mounted, and every console path is the listener's plain 404.

mod access;
mod approvals;
mod error;
mod overview;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::IntoResponse;
use axum::routing::{get, post};

pub use self::error::ConsoleError;
use crate::node::state::NodeState;
use crate::policy::browser::{self, Endpoint};

/// The console's routes, or none when it is off (see the module docs).
pub fn router(node: NodeState) -> Router {
    let config = &node.config.console;
    if !config.is_served() {
        return Router::new();
    }
    let base = config.path.trim_end_matches('/').to_string();
    let policy = node.browser.clone();
    let guarded = Endpoint {
        // The console is for the node's own origin: no other page may call it.
        allowed_origins: Vec::new(),
        origins_key: "console",
        // Its POSTs are JSON, so a form another page submits is refused before the token is read.
        json_rpc: true,
        refuse: |refusal| ConsoleError::from(refusal).into_response(),
    };
    let router = Router::new()
        .route(&format!("{base}/api/overview"), get(overview::overview))
        .route(&format!("{base}/api/plugins"), get(overview::plugins))
        .route(&format!("{base}/api/approvals"), get(approvals::list))
        .route(
            &format!("{base}/api/approvals/{{id}}"),
            post(approvals::answer).layer(DefaultBodyLimit::max(approvals::MAX_BODY_BYTES)),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            node.clone(),
            access::require_token,
        ))
        .with_state(node);
    browser::guard(router, policy, guarded)
}
