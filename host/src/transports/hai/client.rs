//! The embedded browser client (§"Implementation Guide"): its page, scripts
//! and styles, served from the binary with a strict content security policy.

use axum::extract::State;
use axum::response::Response;

use super::HaiState;

pub(super) const CLIENT_HTML: &str = include_str!("../../../web/index.html");
pub(super) const CLIENT_JS: &str = include_str!("../../../web/hai-client.js");
pub(super) const CLIENT_CSS: &str = include_str!("../../../web/hai-client.css");
pub(super) const CLIENT_MARKDOWN: &str = include_str!("../../../web/hai-markdown.js");
pub(super) const CLIENT_CARDS: &str = include_str!("../../../web/hai-cards.js");
/// The client's markdown parser and sanitiser, vendored verbatim (see `web/vendor/`).
pub(super) const VENDOR_MARKED: &str = include_str!("../../../web/vendor/marked.esm.js");
pub(super) const VENDOR_PURIFY: &str = include_str!("../../../web/vendor/purify.min.js");

pub(super) async fn client_page(State(shared): State<HaiState>) -> Response {
    static_file("text/html; charset=utf-8", shared.page.to_string())
}

pub(super) async fn style() -> Response {
    static_file("text/css; charset=utf-8", CLIENT_CSS.to_string())
}

pub(super) async fn javascript(source: &'static str) -> Response {
    static_file("text/javascript; charset=utf-8", source.to_string())
}

pub(super) fn static_file(content_type: &'static str, body: String) -> Response {
    crate::policy::page::embedded(crate::policy::page::CHAT, content_type, body)
}
