//! The operator's console: one place an operator sees and steers the node,
//! instead of curl against each protocol's endpoint and an approval answerable
//! only from the client that asked. A page at `{console.path}/` ([`page`])
//! over a JSON API under `{console.path}/api/` that scripts can use too:
//!
//! - `overview` and `series`: version, uptime, the store and whether it
//!   answers, every transport's endpoint and its last fifteen minutes
//!   ([`overview`]);
//! - `plugins`: one row per plugin file with its call counts; a plugin's
//!   manifest; upload and removal ([`plugins`]);
//! - `approvals`: every approval waiting for a human, from HAI, A2A and MCP
//!   alike, answerable as its own client would ([`approvals`]);
//! - `activity`: recent sessions, tasks and conversations of every protocol
//!   with their histories, and today's model use ([`activity`]);
//! - `log`: the last warnings and errors ([`log`]);
//! - `fleet`: on a fleet's shared store, every node with its last heartbeat,
//!   version, health and plugins, against the fleet's plugin set ([`fleet`]);
//! - `events`: the page's one live stream of all of these ([`events`]).
//!
//! It reads and steers through the node's shared modules and never keeps a
//! second copy of a policy: the approvals are [`crate::runtime::approval`]'s
//! table, answered through each transport's own answer path; an upload is the
//! runtime's own reload of a file in its folder (on a fleet, published to
//! every node as any change of the folder is); the token check is
//! [`crate::transports::bearer_authorized`]; the browser policy is
//! [`crate::policy::browser`]'s, as for every transport, and the page's
//! content security policy [`crate::policy::page`]'s ([`access`]). Errors are
//! [`ConsoleError`], JSON `{"error": …}` with a status, mapped in one place.
//!
//! Off until `console.token` is set (`AGORA_CONSOLE__TOKEN`): then nothing is
//! mounted, and every console path is the listener's plain 404.

mod access;
mod activity;
mod approvals;
mod error;
mod events;
mod fleet;
mod log;
mod overview;
mod page;
mod plugins;

use axum::Extension;
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
        json_posts: crate::policy::browser::JsonPosts::All,
        refuse: |refusal| ConsoleError::from(refusal).into_response(),
    };
    let upload_limit = larger_bodies(&node.config).first().map_or(0, |larger| {
        usize::try_from(larger.max_body_bytes).unwrap_or(usize::MAX)
    });
    let api: Router<NodeState> = Router::new()
        .route(&format!("{base}/api/overview"), get(overview::overview))
        .route(&format!("{base}/api/series"), get(overview::series))
        .route(&format!("{base}/api/plugins"), get(plugins::list))
        .route(
            &format!("{base}/api/plugins/{{name}}"),
            get(plugins::show)
                .put(plugins::upload)
                .delete(plugins::remove)
                .layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route(&format!("{base}/api/approvals"), get(approvals::list))
        .route(
            &format!("{base}/api/approvals/{{id}}"),
            post(approvals::answer).layer(DefaultBodyLimit::max(approvals::MAX_BODY_BYTES)),
        )
        .route(&format!("{base}/api/log"), get(log::list))
        .route(&format!("{base}/api/fleet"), get(fleet::fleet))
        .route(&format!("{base}/api/activity"), get(activity::activity))
        .route(
            &format!("{base}/api/activity/{{kind}}/{{id}}"),
            get(activity::history),
        )
        .route(&format!("{base}/api/events"), get(events::events))
        .layer(Extension(events::Streams::default()))
        .route_layer(axum::middleware::from_fn_with_state(
            node.clone(),
            access::require_token,
        ));
    let redirect_to = base.clone();
    let router = api
        .route(&base, get(move || async move { page::to_the_page(&redirect_to) }))
        .route(&format!("{base}/"), get(page::page))
        .route(&format!("{base}/console.js"), get(page::script))
        .route(&format!("{base}/console.css"), get(page::style))
        .route(&format!("{base}/vendor/uPlot.iife.min.js"), get(page::uplot))
        .route(&format!("{base}/vendor/uPlot.min.css"), get(page::uplot_style))
        .with_state(node);
    browser::guard(router, policy, guarded)
}

/// The console's plugin upload takes a plugin file (`plugins.max_file_mb`),
/// more than the listener's `http.max_body_bytes`; nothing else does.
pub fn larger_bodies(config: &crate::config::Config) -> Vec<crate::listener::LargerBodies> {
    if !config.console.is_served() {
        return Vec::new();
    }
    vec![crate::listener::LargerBodies {
        method: axum::http::Method::PUT,
        path_prefix: format!("{}/api/plugins/", config.console.path.trim_end_matches('/')),
        max_body_bytes: config.plugins.max_file_mb << 20,
    }]
}
