//! Who may use the HAI endpoints, checked after the node's browser policy
//! ([`crate::policy::browser`]: `Host` and `Origin`) and before anything else runs:
//!
//! - the optional operator token `hai.auth_token`.
//! - session secrets: the node issues one when a session is created; resuming the
//!   session from another connection, approving its tools there and reading its
//!   history need it. Only its SHA-256 is kept.
//! - bearer session ids: the spec's clients never learn that secret; they keep
//!   their `session_id`, a `crypto.randomUUID()`, and resume with it after a
//!   reload. A canonical UUIDv4 carries 122 random bits, as many as a guesser
//!   would have to find, so such an id is itself its session's secret and opens
//!   it alone. Any other id (short, another UUID version, another spelling)
//!   could be guessed and still needs the secret. Ids are client-made: one who
//!   makes a UUIDv4 by hand rather than at random weakens only their own session.
//!   Since an id may be a credential, the log names a session by [`session_tag`].
//! - the client address limits are counted by: an IPv4 address, or an IPv6 /64
//!   (one subscriber's usual allocation, so rotating addresses inside it gains nothing).
//!
//! Secrets and tokens are compared in constant time.

use axum::http::{HeaderMap, header};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

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

/// Whether `id` is a canonical UUIDv4 string: `8-4-4-4-12` hex digits (lowercase
/// or uppercase), version nibble `4`, variant `10xx`. Nothing else counts, not
/// even the same 128 bits spelt otherwise (no hyphens, braces, `urn:uuid:`).
pub fn is_bearer_session_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(at, byte)| match at {
            8 | 13 | 18 | 23 => *byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        })
        && bytes[14] == b'4'
        && matches!(bytes[19], b'8' | b'9' | b'a' | b'b' | b'A' | b'B')
}

/// Whether a client presenting `secret` may use session `id`, whose secret
/// hashes to `expected`: a bearer id opens its session alone.
pub fn session_opens(id: &str, secret: Option<&str>, expected: &SecretHash) -> bool {
    is_bearer_session_id(id) || secret_matches(secret, expected)
}

/// How the log names session `id`: the first 8 hex digits of its SHA-256, enough
/// to follow one session through the log, never enough to resume it.
pub fn session_tag(id: &str) -> String {
    hex::encode(&Sha256::digest(id.as_bytes())[..4])
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

/// What the per-address limits count by (the listener's rule, for every limit).
pub use crate::listener::caps::client_key;

#[cfg(test)]
mod tests {
    use super::*;

    use crate::policy::header_map as headers;

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

    #[test]
    fn only_a_canonical_uuid_v4_is_a_bearer_session_id() {
        let made = uuid::Uuid::new_v4().to_string();
        for id in [
            made.as_str(),
            &made.to_uppercase(),
            "123e4567-e89b-42d3-a456-426614174000",
            "123E4567-E89B-42D3-B456-42661417400F",
        ] {
            assert!(is_bearer_session_id(id), "{id}");
        }
        for id in [
            "abc",
            "test-123",
            // Version 1 (the spec's example), variants 0xxx and 110x, nil.
            "123e4567-e89b-12d3-a456-426614174000",
            "123e4567-e89b-42d3-7456-426614174000",
            "123e4567-e89b-42d3-c456-426614174000",
            "00000000-0000-0000-0000-000000000000",
            // The right bits spelt otherwise, or one digit short or long.
            &uuid::Uuid::new_v4().simple().to_string(),
            &format!("urn:uuid:{made}"),
            &format!("{{{made}}}"),
            &made[1..],
            &format!("{made}0"),
            "123e4567-e89b-42d3-a456-42661417400g",
            "123e4567_e89b-42d3-a456-426614174000",
        ] {
            assert!(!is_bearer_session_id(id), "{id}");
        }
        let (secret, hash) = new_secret();
        assert!(session_opens(&made, None, &hash));
        assert!(!session_opens("abc", None, &hash));
        assert!(session_opens("abc", Some(&secret), &hash));
    }

    #[test]
    fn a_session_tag_is_eight_hex_digits_of_the_exact_id() {
        let id = uuid::Uuid::new_v4().to_string();
        let tag = session_tag(&id);
        assert_eq!(tag.len(), 8);
        assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(tag, session_tag(&id));
        assert_ne!(tag, session_tag(&id.to_uppercase()));
    }
}
