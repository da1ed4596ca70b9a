//! What a page the node serves from its binary (HAI's chat, the operator's
//! console) may do in the browser, and how each of its files is served: with
//! a content security policy that allows only the node's own scripts and
//! styles and the connections the page needs, `nosniff`, and `no-cache` so a
//! new binary's page is never mixed with an old one's script.
//!
//! Both pages are written for it: no inline script or style, no `eval`. Each
//! names its [`ContentSecurity`]; the headers are written once, here.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// A page's content security policy.
#[derive(Debug, Clone, Copy)]
pub struct ContentSecurity(pub &'static str);

/// HAI's chat: its own files, and WebSockets to the node.
pub const CHAT: ContentSecurity =
    ContentSecurity("default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:");

/// The console: its own files and fetches only; no other page may frame it
/// (its buttons approve tools), no form or `<base>` may point elsewhere.
pub const CONSOLE: ContentSecurity = ContentSecurity(
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; \
     frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
);

/// One embedded file of a page under `policy`.
pub fn embedded(policy: ContentSecurity, content_type: &'static str, body: impl Into<String>) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, policy.0),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body.into(),
    )
        .into_response()
}
