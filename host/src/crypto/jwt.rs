//! Agora Arena bearer tokens (AAP §4, "Autenticación"): JWTs signed by the
//! arena and checked against its JWK Set.
//!
//! The policy, settled where the spec is silent (see `docs/protocols/arena.md`):
//! - the `kid` header is required and must name a key of the set; the
//!   algorithm comes from that key (its `alg`, or its `kty`/`crv` when `alg`
//!   is absent), never from the token header alone, and only RS256, ES256 and
//!   EdDSA are accepted (no `none`, no HMAC with a public key as secret);
//! - at least one of `exp` and the spec's custom `expires_at` (Unix seconds)
//!   is present, and each present one lies in the future; `nbf` is honoured;
//!   `aud`, when present, must be this node's configured audience; `iss` must
//!   equal `arena.issuer` when that is set (unchecked when it is empty);
//! - `agent_id` and `match_id` are bound to the node and the request by
//!   [`ArenaClaims::check_binding`].
//!
//! `jsonwebtoken`'s defaults get several of these wrong (it requires `exp`,
//! ignores `nbf` and knows nothing of `expires_at`), so every switch is set
//! explicitly here.

use std::collections::HashMap;
use std::str::FromStr;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// Clock difference tolerated on every time claim.
pub const LEEWAY_SECS: u64 = 60;
/// Longest token accepted; real arena tokens are a few hundred bytes.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// Most keys kept from one JWK Set.
const MAX_KEYS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("the token is over {MAX_TOKEN_BYTES} bytes")]
    TooLong,
    #[error("malformed token: {0}")]
    Malformed(String),
    #[error("the token names no key (`kid` is required)")]
    MissingKid,
    #[error("no arena key has kid {0:?}")]
    UnknownKid(String),
    #[error("the token's algorithm does not match its key")]
    AlgorithmMismatch,
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("the token carries no expiry (`exp` or `expires_at`)")]
    NoExpiry,
    #[error("the token has expired")]
    Expired,
    #[error("the token is for agent {0:?}, not this node")]
    WrongAgent(String),
    #[error("the token is for another match")]
    WrongMatch,
    #[error("the token's issuer {0:?} is not the configured arena issuer")]
    WrongIssuer(String),
    #[error("invalid JWK Set: {0}")]
    KeySet(String),
}

/// A public key of the arena with the one algorithm it may verify.
#[derive(Clone)]
pub struct VerifyingKey {
    pub algorithm: Algorithm,
    key: DecodingKey,
}

/// The arena's usable keys by `kid`.
#[derive(Clone, Default)]
pub struct KeySet {
    keys: HashMap<String, VerifyingKey>,
}

impl KeySet {
    /// Parse a JWK Set. Keys this node cannot or must not use (no `kid`, an
    /// encryption key, an unsupported algorithm or curve) are skipped, so one
    /// odd key never makes the others unusable.
    pub fn parse(json: &[u8]) -> Result<KeySet, JwtError> {
        let set: JwkSet = serde_json::from_slice(json).map_err(|e| JwtError::KeySet(e.to_string()))?;
        let mut keys = HashMap::new();
        for jwk in set.keys.iter().take(MAX_KEYS) {
            let Some(kid) = jwk.common.key_id.clone() else {
                continue;
            };
            if matches!(
                jwk.common.public_key_use,
                Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
            ) {
                continue;
            }
            let Some(algorithm) = key_algorithm(jwk) else {
                tracing::debug!(%kid, "skipping a JWK with an unsupported algorithm");
                continue;
            };
            match DecodingKey::from_jwk(jwk) {
                Ok(key) => {
                    keys.insert(kid, VerifyingKey { algorithm, key });
                }
                Err(error) => tracing::debug!(%kid, %error, "skipping an unusable JWK"),
            }
        }
        Ok(KeySet { keys })
    }

    pub fn get(&self, kid: &str) -> Option<&VerifyingKey> {
        self.keys.get(kid)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The single algorithm a key may verify: its `alg` when given, else what its
/// type and curve imply. Anything but RS256, ES256 and EdDSA is refused.
fn key_algorithm(jwk: &Jwk) -> Option<Algorithm> {
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => Algorithm::EdDSA,
        _ => return None,
    };
    match jwk.common.key_algorithm {
        None => Some(implied),
        Some(declared) => {
            let declared = Algorithm::from_str(&declared.to_string()).ok()?;
            (declared == implied).then_some(declared)
        }
    }
}

/// The `kid` a token names, read from its header before any key is chosen.
pub fn token_kid(token: &str) -> Result<String, JwtError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(JwtError::TooLong);
    }
    if token.split('.').count() != 3 {
        return Err(JwtError::Malformed("a JWS has three dot-separated parts".into()));
    }
    let header =
        jsonwebtoken::decode_header(token).map_err(|e| JwtError::Malformed(format!("header: {e}")))?;
    match header.kid {
        Some(kid) if !kid.is_empty() => Ok(kid),
        _ => Err(JwtError::MissingKid),
    }
}

/// The claims AAP §4 defines, plus the standard time claims.
#[derive(Debug, Clone, Deserialize)]
pub struct ArenaClaims {
    pub agent_id: String,
    pub match_id: String,
    /// Unix seconds; RFC 7519 allows fractions, so these are floats.
    #[serde(default)]
    pub expires_at: Option<f64>,
    #[serde(default)]
    pub exp: Option<f64>,
    #[serde(default)]
    pub iss: Option<String>,
}

/// What a token must satisfy besides its signature.
pub struct Policy<'a> {
    /// Required value of `aud` when the token carries one; empty refuses any `aud`.
    pub audience: &'a str,
    /// Required value of `iss`; empty accepts any (or none).
    pub issuer: &'a str,
}

/// Verify `token` with `key` and check its time and audience claims.
pub fn verify(token: &str, key: &VerifyingKey, policy: &Policy<'_>) -> Result<ArenaClaims, JwtError> {
    let header =
        jsonwebtoken::decode_header(token).map_err(|e| JwtError::Malformed(format!("header: {e}")))?;
    if header.alg != key.algorithm {
        return Err(JwtError::AlgorithmMismatch);
    }
    let mut validation = Validation::new(key.algorithm);
    // The spec's own token carries only `expires_at`: `exp` is checked when
    // present, and the presence of some expiry is checked below.
    validation.required_spec_claims.clear();
    validation.validate_exp = true;
    validation.validate_nbf = true;
    validation.leeway = LEEWAY_SECS;
    validation.validate_aud = true;
    if !policy.audience.is_empty() {
        validation.set_audience(&[policy.audience]);
    }
    let data =
        jsonwebtoken::decode::<ArenaClaims>(token, &key.key, &validation).map_err(|error| {
            match error.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => JwtError::Expired,
                jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => JwtError::AlgorithmMismatch,
                _ => JwtError::Invalid(error.to_string()),
            }
        })?;
    let claims = data.claims;
    let now = jsonwebtoken::get_current_timestamp() as f64;
    match (claims.exp, claims.expires_at) {
        (None, None) => return Err(JwtError::NoExpiry),
        // NaN never counts as in the future.
        (_, Some(expires_at)) if expires_at.is_nan() || expires_at + LEEWAY_SECS as f64 <= now => {
            return Err(JwtError::Expired);
        }
        _ => {}
    }
    if !policy.issuer.is_empty() && claims.iss.as_deref() != Some(policy.issuer) {
        let shown = claims.iss.as_deref().unwrap_or("(none)");
        return Err(JwtError::WrongIssuer(shown.chars().take(64).collect()));
    }
    Ok(claims)
}

impl ArenaClaims {
    /// AAP §4 binds a token to one agent and one match: a token for another
    /// agent, or one replayed on another match, is refused.
    pub fn check_binding(&self, agent_id: &str, match_id: &str) -> Result<(), JwtError> {
        if agent_id.is_empty() || !super::constant_time_eq(self.agent_id.as_bytes(), agent_id.as_bytes()) {
            return Err(JwtError::WrongAgent(self.agent_id.chars().take(64).collect()));
        }
        if !super::constant_time_eq(self.match_id.as_bytes(), match_id.as_bytes()) {
            return Err(JwtError::WrongMatch);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors/jwt")
    }

    fn check(token: &str, keys: &KeySet) -> Result<ArenaClaims, JwtError> {
        check_with_issuer(token, keys, "")
    }

    fn check_with_issuer(token: &str, keys: &KeySet, issuer: &str) -> Result<ArenaClaims, JwtError> {
        let kid = token_kid(token)?;
        let key = keys.get(&kid).ok_or(JwtError::UnknownKid(kid))?;
        let claims = verify(
            token,
            key,
            &Policy {
                audience: "agora-agent",
                issuer,
            },
        )?;
        claims.check_binding("ag_xyz123", "m_abc123def")?;
        Ok(claims)
    }

    #[test]
    fn every_vector_gets_its_documented_verdict() {
        let keys = KeySet::parse(&std::fs::read(vectors().join("jwks.json")).unwrap()).unwrap();
        assert_eq!(keys.len(), 3);
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(vectors().join("tokens.json")).unwrap()).unwrap();
        let tokens = doc["tokens"].as_array().unwrap();
        assert_eq!(tokens.len(), 23);
        for entry in tokens {
            let name = entry["name"].as_str().unwrap();
            let accept = entry["expected"] == "accept";
            let verdict = check(entry["token"].as_str().unwrap(), &keys);
            assert_eq!(verdict.is_ok(), accept, "{name}: {:?}", verdict.err());
        }
    }

    /// Every vector's `iss` is "agora-arena-test": configured as the issuer,
    /// the verdicts are unchanged; any other configured issuer refuses the
    /// otherwise valid tokens.
    #[test]
    fn a_configured_issuer_must_match_iss() {
        let keys = KeySet::parse(&std::fs::read(vectors().join("jwks.json")).unwrap()).unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(vectors().join("tokens.json")).unwrap()).unwrap();
        for entry in doc["tokens"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            let token = entry["token"].as_str().unwrap();
            let accept = entry["expected"] == "accept";
            let same = check_with_issuer(token, &keys, "agora-arena-test");
            assert_eq!(same.is_ok(), accept, "{name}: {:?}", same.err());
            if accept {
                assert!(
                    matches!(
                        check_with_issuer(token, &keys, "https://arena.example"),
                        Err(JwtError::WrongIssuer(iss)) if iss == "agora-arena-test"
                    ),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn a_key_without_alg_takes_its_algorithm_from_its_type() {
        let mut set: serde_json::Value =
            serde_json::from_slice(&std::fs::read(vectors().join("jwks.json")).unwrap()).unwrap();
        for key in set["keys"].as_array_mut().unwrap() {
            key.as_object_mut().unwrap().remove("alg");
        }
        set["keys"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}));
        let keys = KeySet::parse(set.to_string().as_bytes()).unwrap();
        assert_eq!(keys.len(), 3, "the symmetric key is never usable");
        assert_eq!(
            keys.get("agora-test-es256-1").unwrap().algorithm,
            Algorithm::ES256
        );
        assert_eq!(
            keys.get("agora-test-eddsa-1").unwrap().algorithm,
            Algorithm::EdDSA
        );
    }

    #[test]
    fn a_key_whose_alg_contradicts_its_type_is_skipped() {
        let set = serde_json::json!({"keys": [{
            "kty": "RSA", "kid": "k", "alg": "HS256", "e": "AQAB",
            "n": "nNUH_36-10dvIw5An2xmYTEENhvi8IImQZcEk7moAEtghwuPsd0Uq56us8KAJdj7vUV9Ln0NQP8L4QYYOCldxeM_XGLJOIV_dRst612LoFprP47qXNLyfrKL2XYBQV5iIcggVKY0mwr95YqhS-eMRnu7Gh_tRjabmB-UlVEgdn7zgFS1IY_uondT1966D8Ohi3K3ZWXUQas4hzGXaA0hArkj0gpnatb3gIA-h6Ri9Flw_U7kgKvAmOhG21_l6pR07wkGubmTm5hZKpzWzz8SGW3WFuX3OvFVWxuKyAZKqsT8CcWoo_kClCR5D70D1mYCikIoFsM9hXz6yhXU-jpYDQ"
        }]});
        assert!(KeySet::parse(set.to_string().as_bytes()).unwrap().is_empty());
    }
}
