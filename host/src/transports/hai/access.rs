//! Who may use the HAI endpoints, checked before anything else runs:
//!
//! - the `Origin` of a browser request: a page on another site must not drive a
//!   human's node (open `/ws`, ask for a risky tool and approve it itself). The
//!   node's own origin and `hai.allowed_origins` are allowed; a request without
//!   `Origin` is not a browser's and is allowed.
//! - the optional operator token `hai.auth_token`.
//! - session secrets: the node issues one when a session is created; resuming the
//!   session from another connection, approving its tools there and reading its
//!   history need it. Only its SHA-256 is kept.
//! - the client address limits are counted by: an IPv4 address, or an IPv6 /64
//!   (one subscriber's usual allocation, so rotating addresses inside it gains nothing).
//!
//! Secrets and tokens are compared in constant time.

use axum::http::{HeaderMap, header};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{normalise_origin, strip_default_port};

use super::HaiError;

/// Query parameter and header that carry a session's secret.
pub const SECRET_PARAM: &str = "session_secret";
pub const SECRET_HEADER: &str = "x-hai-session-secret";
/// Query parameter that carries the operator token (browsers cannot set headers on a WebSocket).
pub const TOKEN_PARAM: &str = "token";
/// Longest secret or token read from a client; anything longer cannot match.
const MAX_PRESENTED_BYTES: usize = 256;

pub type SecretHash = [u8; 32];

/// A fresh session secret (256 random bits, hex) and the hash that is kept.
pub fn new_secret() -> (String, SecretHash) {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let secret = hex::encode(bytes);
    let hash = hash_secret(&secret);
    (secret, hash)
}

pub fn hash_secret(secret: &str) -> SecretHash {
    Sha256::digest(secret.as_bytes()).into()
}

pub fn secret_matches(presented: Option<&str>, expected: &SecretHash) -> bool {
    match presented {
        Some(secret) if secret.len() <= MAX_PRESENTED_BYTES => {
            bool::from(hash_secret(secret).ct_eq(expected))
        }
        _ => false,
    }
}

/// The secret a request presents: the query parameter, else the header.
pub fn presented_secret<'a>(query: Option<&'a str>, headers: &'a HeaderMap) -> Option<&'a str> {
    query.or_else(|| headers.get(SECRET_HEADER).and_then(|v| v.to_str().ok()))
}

/// `hai.auth_token`, when set: the request must carry it (query `token=` or a bearer header).
pub fn check_token(expected: &str, query: Option<&str>, headers: &HeaderMap) -> Result<(), HaiError> {
    if expected.is_empty() {
        return Ok(());
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let presented = query.or(bearer).unwrap_or_default();
    // Hash both sides so the comparison takes the same time whatever the lengths.
    let matches = presented.len() <= MAX_PRESENTED_BYTES
        && bool::from(hash_secret(presented).ct_eq(&hash_secret(expected)));
    if matches {
        Ok(())
    } else {
        Err(HaiError::Unauthorized)
    }
}

/// The request's `Origin`, when it has one, must be the node's own (its `Host`)
/// or listed in `allowed`.
pub fn check_origin(allowed: &[String], headers: &HeaderMap) -> Result<(), HaiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let refused = || {
        HaiError::OriginRefused(
            String::from_utf8_lossy(origin.as_bytes())
                .chars()
                .take(200)
                .collect(),
        )
    };
    let origin = origin.to_str().map_err(|_| refused())?;
    let Some(normalised) = normalise_origin(origin) else {
        return Err(refused());
    };
    if allowed
        .iter()
        .any(|entry| normalise_origin(entry).as_deref() == Some(normalised.as_str()))
    {
        return Ok(());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    let (scheme, authority) = normalised.split_once("://").ok_or_else(refused)?;
    match host {
        Some(host) if strip_default_port(scheme, &host) == authority => Ok(()),
        _ => Err(refused()),
    }
}

/// What the per-address limits count by (the listener's rule, for every limit).
pub use crate::listener::caps::client_key;

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn same_origin_listed_origin_and_no_origin_pass_others_do_not() {
        let none: Vec<String> = Vec::new();
        let same = headers(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")]);
        assert!(check_origin(&none, &same).is_ok());
        assert!(check_origin(&none, &headers(&[("host", "127.0.0.1:8080")])).is_ok());
        let default_port = headers(&[
            ("host", "Chat.Example.com"),
            ("origin", "https://chat.example.com:443"),
        ]);
        assert!(check_origin(&none, &default_port).is_ok());
        let foreign = headers(&[("host", "127.0.0.1:8080"), ("origin", "http://evil.example")]);
        assert!(matches!(
            check_origin(&none, &foreign),
            Err(HaiError::OriginRefused(_))
        ));
        let other_port = headers(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:9999")]);
        assert!(check_origin(&none, &other_port).is_err());
        let null = headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert!(check_origin(&none, &null).is_err());
        let listed = vec!["http://evil.example:80".to_string()];
        assert!(check_origin(&listed, &foreign).is_ok());
        assert!(normalise_origin("https://a.example/path").is_none());
        assert!(normalise_origin("ftp://a.example").is_none());
    }

    #[test]
    fn token_by_query_or_bearer_and_secrets_by_hash() {
        assert!(check_token("", None, &HeaderMap::new()).is_ok());
        assert!(check_token("t0k", Some("t0k"), &HeaderMap::new()).is_ok());
        assert!(check_token("t0k", None, &headers(&[("authorization", "Bearer t0k")])).is_ok());
        assert!(check_token("t0k", Some("t0K"), &HeaderMap::new()).is_err());
        assert!(check_token("t0k", None, &HeaderMap::new()).is_err());
        let (secret, hash) = new_secret();
        assert_eq!(secret.len(), 64);
        assert!(secret_matches(Some(&secret), &hash));
        assert!(!secret_matches(Some("nope"), &hash));
        assert!(!secret_matches(None, &hash));
        assert_ne!(new_secret().0, secret);
    }
}
