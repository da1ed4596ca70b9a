//! The 2026-07-28 request envelope: what makes a request of the stateless era,
//! and the ladder that checks it before any method is looked at.
//!
//! At 2026-07-28 there is no session to remember what a client is: every
//! request carries its revision and its capabilities in `params._meta`
//! (`io.modelcontextprotocol/protocolVersion`, `…/clientCapabilities`), and
//! repeats its routing in headers (`MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name`) so a gateway can route without reading the body. The two must
//! agree. [`classify`] mirrors `classify_inbound_request` of the `mcp` 2.3.0
//! package (`shared/inbound.py`), rung for rung and first failure wins:
//! 1. `_meta` an object with both required keys, else `-32602`;
//! 2. the headers equal the body (version, method, and the name or URI of the
//!    name-bearing methods), else `-32020`; a routing header sent twice is a
//!    mismatch too;
//! 3. the version a string the node serves, else `-32602` / `-32022`.
//!
//! Which era a request is of ([`is_modern`]) is decided per request on the one
//! `{mcp.path}`: the reference routes by header alone; the node also takes the
//! body's `_meta` version as a sign, so a modern client that lost its header is
//! told of the mismatch instead of "no session".

use axum::http::HeaderMap;
use base64::Engine;
use serde_json::Value;

use super::error::McpError;
use super::wire::{PROTOCOL_VERSION_HEADER, PROTOCOL_VERSIONS};
use crate::jsonrpc::Faults;

/// The stateless revisions the node serves, newest first.
pub const MODERN_VERSIONS: [&str; 1] = ["2026-07-28"];
pub const METHOD_HEADER: &str = "mcp-method";
pub const NAME_HEADER: &str = "mcp-name";
/// The reserved `_meta` keys of the envelope and of the node's answers.
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
pub const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";
pub const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";

/// What a checked modern request says of its client.
#[derive(Debug)]
pub struct Envelope {
    pub version: &'static str,
    /// The client's capabilities for this request only (the spec forbids
    /// inferring them from an earlier one).
    pub capabilities: Value,
}

impl Envelope {
    /// Whether an approval may be asked of this client as a form.
    pub fn accepts_form_elicitation(&self) -> bool {
        super::wire::capabilities_allow_forms(&self.capabilities)
    }
}

/// Whether a request belongs to the stateless era: its `MCP-Protocol-Version`
/// is not a handshake revision, or its body carries the envelope's version.
pub fn is_modern(headers: &HeaderMap, params: Option<&Value>) -> bool {
    let header_says = headers
        .get(PROTOCOL_VERSION_HEADER)
        .is_some_and(|version| !PROTOCOL_VERSIONS.contains(&version.to_str().unwrap_or_default()));
    let body_says = params
        .and_then(|params| params.get("_meta"))
        .and_then(|meta| meta.get(PROTOCOL_VERSION_META))
        .is_some();
    header_says || body_says
}

/// The body parameter a method's `Mcp-Name` repeats (`NAME_BEARING_METHODS`).
fn name_key(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// A header value as the client meant it: verbatim, or the UTF-8 inside the
/// `=?base64?…?=` sentinel the SDK wraps non-ASCII and edge whitespace in.
pub fn decode_header_value(value: &str) -> Option<String> {
    let Some(inner) = value
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    else {
        return Some(value.to_string());
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(inner).ok()?;
    String::from_utf8(bytes).ok()
}

/// The one value of a routing header; sent twice, it cannot route.
fn routing_header<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, McpError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(McpError::HeaderMismatch(format!("{name} is sent more than once")));
    }
    Ok(first.map(|value| value.to_str().unwrap_or_default()))
}

/// The version a notification's header names, when the node serves it.
pub fn check_notification_version(headers: &HeaderMap) -> Result<(), McpError> {
    let version = routing_header(headers, PROTOCOL_VERSION_HEADER)?.unwrap_or_default();
    if MODERN_VERSIONS.contains(&version) {
        Ok(())
    } else {
        Err(McpError::UnsupportedVersion {
            requested: version.chars().take(64).collect(),
        })
    }
}

/// The ladder (module docs) for one request.
pub fn classify(headers: &HeaderMap, method: &str, params: &Value) -> Result<Envelope, McpError> {
    let version_header = routing_header(headers, PROTOCOL_VERSION_HEADER)?;
    let method_header = routing_header(headers, METHOD_HEADER)?;
    let name_header = routing_header(headers, NAME_HEADER)?;
    let Some(meta) = params.get("_meta").and_then(Value::as_object) else {
        return Err(McpError::invalid_params(format!(
            "params._meta must be an object carrying {PROTOCOL_VERSION_META:?} and {CLIENT_CAPABILITIES_META:?}"
        )));
    };
    let missing: Vec<&str> = [PROTOCOL_VERSION_META, CLIENT_CAPABILITIES_META]
        .into_iter()
        .filter(|key| !meta.contains_key(*key))
        .collect();
    if !missing.is_empty() {
        return Err(McpError::invalid_params(format!(
            "params._meta is missing the required envelope key(s): {}",
            missing.join(", ")
        )));
    }
    let version = &meta[PROTOCOL_VERSION_META];
    if version_header.is_none_or(|header| Some(header) != version.as_str()) {
        return Err(McpError::HeaderMismatch(format!(
            "{PROTOCOL_VERSION_HEADER} does not match params._meta's protocol version"
        )));
    }
    if method_header != Some(method) {
        return Err(McpError::HeaderMismatch(format!(
            "{METHOD_HEADER} does not match the request's method"
        )));
    }
    if let Some(key) = name_key(method)
        && let Some(named) = params.get(key).filter(|value| !value.is_null())
    {
        let decoded = name_header.and_then(decode_header_value);
        if decoded.as_deref() != named.as_str() {
            return Err(McpError::HeaderMismatch(format!(
                "{NAME_HEADER} does not match the request's {key:?}"
            )));
        }
    }
    let Some(version) = version.as_str() else {
        return Err(McpError::invalid_params(
            "the protocol-version envelope value must be a string",
        ));
    };
    let Some(version) = MODERN_VERSIONS.iter().find(|served| **served == version) else {
        return Err(McpError::UnsupportedVersion {
            requested: version.chars().take(64).collect(),
        });
    };
    Ok(Envelope {
        version,
        capabilities: meta[CLIENT_CAPABILITIES_META].clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).expect("header"));
        }
        map
    }

    fn envelope(version: &str) -> Value {
        json!({"_meta": {PROTOCOL_VERSION_META: version, CLIENT_CAPABILITIES_META: {}}, "name": "tool é"})
    }

    const OK: [(&str, &str); 3] = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "=?base64?dG9vbCDDqQ==?="),
    ];

    fn code(result: Result<Envelope, McpError>) -> i64 {
        result.expect_err("refused").code()
    }

    #[test]
    fn a_request_that_agrees_with_itself_is_classified() {
        let found = classify(&headers(&OK), "tools/call", &envelope("2026-07-28")).expect("modern");
        assert_eq!(found.version, "2026-07-28");
    }

    #[test]
    fn each_rung_refuses_with_the_reference_code() {
        let no_meta = json!({"name": "x"});
        assert_eq!(code(classify(&headers(&OK), "tools/call", &no_meta)), -32602);
        let no_caps = json!({"_meta": {PROTOCOL_VERSION_META: "2026-07-28"}});
        assert_eq!(code(classify(&headers(&OK), "tools/call", &no_caps)), -32602);
        assert_eq!(
            code(classify(&headers(&OK), "tools/list", &envelope("2026-07-28"))),
            -32020
        );
        let other_name = [OK[0], OK[1], ("mcp-name", "other")];
        assert_eq!(
            code(classify(
                &headers(&other_name),
                "tools/call",
                &envelope("2026-07-28")
            )),
            -32020
        );
        let twice = [OK[0], OK[1], OK[1], OK[2]];
        assert_eq!(
            code(classify(&headers(&twice), "tools/call", &envelope("2026-07-28"))),
            -32020
        );
        let future = [("mcp-protocol-version", "2099-01-01"), OK[1], OK[2]];
        assert_eq!(
            code(classify(&headers(&future), "tools/call", &envelope("2099-01-01"))),
            -32022
        );
        assert_eq!(
            code(classify(
                &headers(&OK[1..]),
                "tools/call",
                &envelope("2026-07-28")
            )),
            -32020
        );
    }

    #[test]
    fn the_era_follows_the_header_or_the_body() {
        assert!(is_modern(&headers(&OK), None));
        assert!(!is_modern(
            &headers(&[("mcp-protocol-version", "2025-11-25")]),
            None
        ));
        assert!(!is_modern(&headers(&[]), Some(&json!({"cursor": "a"}))));
        assert!(is_modern(&headers(&[]), Some(&envelope("2026-07-28"))));
    }

    #[test]
    fn a_sentinel_header_value_decodes_to_its_utf8() {
        assert_eq!(decode_header_value("plain").as_deref(), Some("plain"));
        assert_eq!(
            decode_header_value("=?base64?dG9vbCDDqQ==?=").as_deref(),
            Some("tool é")
        );
        assert_eq!(decode_header_value("=?base64?***?="), None);
    }
}
