//! Who may use the console: whoever presents `console.token` as
//! `Authorization: Bearer <token>`, compared in constant time by the node's one
//! bearer check ([`crate::transports::bearer_authorized`]). No cookie carries
//! it, so a page on another site cannot ride a signed-in browser into the
//! console; the browser policy ([`crate::policy::browser`]) runs before this.
//!
//! With no token the console is not mounted at all ([`super::router`]): an
//! empty token never means "open".

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ConsoleError;
use crate::node::state::NodeState;

/// Middleware: the request goes on only with the console's token.
pub async fn require_token(State(node): State<NodeState>, request: Request, next: Next) -> Response {
    let token = &node.config.console.token;
    // `bearer_authorized` lets anyone in on an empty token; the router is never built with one.
    if token.is_empty() || !crate::transports::bearer_authorized(token, request.headers()) {
        return ConsoleError::Unauthorized.into_response();
    }
    next.run(request).await
}
