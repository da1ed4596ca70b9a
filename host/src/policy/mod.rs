//! The node's policies, each written once and used by every transport: a
//! transport decides only how to ask and how to answer in its own protocol's
//! shape, never what is allowed.
//!
//! - [`admission`]: how many live things one client and the node may hold at
//!   once; an over-bound caller waits briefly for a place, then is refused
//!   saying which bound it met.
//! - [`quota`]: how many items, and bytes of them, one client and the node may
//!   have stored (on disk, across restarts, on a shared store), until they expire.
//! - [`browser`]: which web pages and `Host` names may reach the endpoints a
//!   browser can load or call, and that JSON-RPC bodies are JSON.

pub mod admission;
pub mod browser;
pub mod quota;

/// Whether a `Content-Type` header names JSON (parameters such as charset allowed).
pub fn is_json_content_type(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// Request headers from `(name, value)` pairs, for the policies' tests.
#[cfg(test)]
pub(crate) fn header_map(pairs: &[(&'static str, &str)]) -> axum::http::HeaderMap {
    let mut map = axum::http::HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, axum::http::HeaderValue::from_str(value).unwrap());
    }
    map
}
