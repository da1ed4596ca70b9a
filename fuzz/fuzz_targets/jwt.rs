//! Arena JWTs and JWK Sets: a `POST /arena` bearer token goes through
//! `token_kid`, then `verify` with the key it names, then `check_binding`;
//! the arena's JWKS document goes through `KeySet::parse`. An input starting
//! with `{` is read as a JWK Set, anything else as a token.
//!
//! The token is verified against the public test keys of
//! `shared/vectors/jwt/jwks.json` (copied by `fuzz/seed`): with the named key
//! when the kid is known, else with each key, so malformed signatures of every
//! algorithm reach the verifier.
#![no_main]

use std::sync::OnceLock;

use agora_node::crypto::jwt::{self, KeySet, Policy};
use libfuzzer_sys::fuzz_target;

const KIDS: [&str; 3] = ["agora-test-rs256-1", "agora-test-es256-1", "agora-test-eddsa-1"];

fn keys() -> &'static KeySet {
    static KEYS: OnceLock<KeySet> = OnceLock::new();
    KEYS.get_or_init(|| {
        let keys = KeySet::parse(include_bytes!("arena_jwks.json")).expect("the test JWKS parses");
        assert_eq!(keys.len(), KIDS.len(), "the test JWKS has one key per algorithm");
        keys
    })
}

fuzz_target!(|data: &[u8]| {
    if data.first() == Some(&b'{') {
        if let Ok(set) = KeySet::parse(data) {
            let _ = set.len();
        }
        return;
    }
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    let policy = Policy {
        audience: "agora-agent",
        issuer: "",
    };
    let named = jwt::token_kid(token).ok().and_then(|kid| keys().get(&kid));
    let candidates: Vec<_> = match named {
        Some(key) => vec![key],
        None => KIDS.iter().filter_map(|kid| keys().get(kid)).collect(),
    };
    for key in candidates {
        if let Ok(claims) = jwt::verify(token, key, &policy) {
            let _ = claims.check_binding("ag_xyz123", "m_abc123def");
        }
    }
});
