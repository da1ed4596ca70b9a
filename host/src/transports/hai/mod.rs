//! The HAI protocol (the AGORA HAI Protocol Specification 1.0.0): human chat over a WebSocket at
//! `hai.path` (§"Connection"), with streaming answers, tool lifecycle frames and
//! human approval of risky tools, plus the browser client (§"Implementation
//! Guide") served at `/`.
//!
//! - this module: the routes.
//! - [`state`]: what every handler shares ([`HaiState`]).
//! - [`wire`]: the frames and the validation of what a client sends.
//! - [`connection`]: one WebSocket (bounded buffers, keep-alive, frame size)
//!   and the moderation hook.
//! - [`session`]: live sessions: broadcast to every connection, approvals, rate window.
//! - [`turn`]: one answer, from `thinking` to `completed`.
//! - [`history`]: sessions in the store, their history and its endpoint.
//! - [`client`]: the embedded browser client.
//! - [`access`]: who may open or resume a session.
//! - [`fleet`]: several nodes on one shared store: frames of a session reach
//!   its connections on every node, an approval is decided once, on any node,
//!   and a turn whose node died is failed by another.
//! - [`error`]: [`HaiError`], the one place node errors become `error` frames.
//!
//! A connection belongs to one session: the one named in `?session_id=` when it
//! connects, or else in its first `user_message`. It then receives every frame
//! of that session, also those caused by other connections on it.
//!
//! Open-port rules ([`access`], the `hai.*` limits in `config/agora.toml`): the
//! node's browser policy ([`crate::policy::browser`]) guards every route here
//! (`Host` one of the node's names, a browser's `Origin` the node's own or in
//! `hai.allowed_origins`); `hai.auth_token`, when
//! set, is required; the connection that creates a session gets its secret in a
//! `{"type":"session","session_id":…,"session_secret":…}` frame (a type the spec's
//! clients ignore), and any other connection needs that secret to use the session
//! (`?session_secret=`, the `X-HAI-Session-Secret` header, or `session_secret` in
//! its first `user_message`), as does the history endpoint — unless the session's
//! id is a canonical UUIDv4, as the spec's clients make it: such an id is its own
//! bearer secret, so the spec's returning client resumes with its id alone (see
//! [`access`]). The log names sessions by [`access::session_tag`]. Sessions created per
//! client address, live sessions, stored sessions and their history bytes
//! ([`crate::policy::quota`]) and pending approvals are capped, each refusal a
//! `rate_limit_exceeded` frame naming its limit. What a client is told about (its
//! message taken, an approval decided, the reply) is committed to disk first.

pub mod access;
pub mod activity;
mod client;
mod connection;
mod error;
mod fleet;
mod history;
mod session;
mod state;
mod turn;
pub mod wire;

use crate::node::state::NodeState;
use crate::policy::browser::{self, Endpoint};
use axum::Router;
use axum::routing::get;

use self::client::{
    CLIENT_CARDS, CLIENT_HTML, CLIENT_JS, CLIENT_MARKDOWN, VENDOR_MARKED, VENDOR_PURIFY, client_page,
    javascript, style,
};
use self::connection::upgrade;
pub use self::error::HaiError;
use self::history::{history, history_id};
pub(crate) use self::state::HaiState;

pub fn router(state: NodeState) -> Router {
    let config = &state.config.hai;
    let path = config.path.trim_end_matches('/');
    let path = if path.is_empty() { "/ws" } else { path }.to_string();
    let page = CLIENT_HTML.replace("{{WS_PATH}}", &path);
    let shared = HaiState::new(state, page);
    fleet::fail_dead_nodes_turns(&shared);
    let browser = Endpoint {
        allowed_origins: shared.node.config.hai.allowed_origins.clone(),
        origins_key: "hai.allowed_origins",
        json_posts: crate::policy::browser::JsonPosts::Unchecked,
        refuse: |refusal| HaiError::from(refusal).to_http(),
    };
    let policy = shared.node.browser.clone();
    // The console answers this transport's approvals while its routes are served.
    let answering = shared
        .node
        .runtime
        .approvals()
        .answer_with("hai", std::sync::Arc::new(shared.clone()));
    let router = Router::new()
        .route(&path, get(upgrade))
        .route(&format!("{path}/sessions/{{id}}/history"), get(history))
        .route("/", get(client_page))
        .route("/hai-client.js", get(|| javascript(CLIENT_JS)))
        .route("/hai-client.css", get(style))
        .route("/hai-markdown.js", get(|| javascript(CLIENT_MARKDOWN)))
        .route("/hai-cards.js", get(|| javascript(CLIENT_CARDS)))
        .route("/vendor/marked.esm.js", get(|| javascript(VENDOR_MARKED)))
        .route("/vendor/purify.min.js", get(|| javascript(VENDOR_PURIFY)))
        .with_state(shared)
        .layer(axum::Extension(answering));
    browser::guard(router, policy, browser)
}
