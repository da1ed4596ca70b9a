//! The node's policies, each written once and used by every transport: a
//! transport decides only how to ask and how to answer in its own protocol's
//! shape, never what is allowed.
//!
//! - [`admission`]: how many live things one client and the node may hold at
//!   once; an over-bound caller waits briefly for a place, then is refused
//!   saying which bound it met.
//! - [`quota`]: how many items, and bytes of them, one client and the node may
//!   have stored (on disk, across restarts, on a shared store), until they expire.
//! - [`rate`]: how often one client may do one thing (a token bucket per
//!   client, in a bounded table a flood of fresh clients cannot empty).
//! - [`ledger`]: live items that expire by themselves (offers, conversations),
//!   counted and weighed per client and in total, in this process's memory.
//! - [`browser`]: which web pages and `Host` names may reach the endpoints a
//!   browser can load or call, and that JSON-RPC bodies are JSON.
//! - [`page`]: what the node's own pages may do once loaded (their content
//!   security policy), and the headers each embedded file is served with.

pub mod admission;
pub mod browser;
pub mod ledger;
pub mod page;
pub mod quota;
pub mod rate;

/// A wait as HTTP's `Retry-After`: whole seconds, rounded up, at least 1 (a
/// client told 0 would come straight back and be refused again).
pub fn retry_after_secs(wait: std::time::Duration) -> u64 {
    u64::try_from(wait.as_nanos().div_ceil(1_000_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

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
