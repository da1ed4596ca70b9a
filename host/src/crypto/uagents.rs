//! uAgents cryptography as uagents-core 0.4.12 does it (the uAgents Exchange protocol,
//! "Envelopes"; the algorithm notes in `vectors/uagents_envelope.json`):
//!
//! - keys: secp256k1, private key = sha256(sha256("agent" ‖ index) ‖ sha256(seed));
//! - addresses: classic bech32 (BIP-173, not bech32m), prefix `agent`, over the
//!   33-byte compressed public key; signatures: bech32 `sig` over r‖s (113
//!   characters, beyond BIP-173's 90, which uagents does not enforce either);
//! - envelope digest: SHA-256 over sender ‖ target ‖ session ‖ schema_digest ‖
//!   payload? ‖ expires? ‖ nonce? (no separators); `version` and
//!   `protocol_digest` are not covered;
//! - model schema digests (`model:…`) and protocol digests (`proto:…`).
//!
//! The Python library signs with a random nonce and never normalises s, so
//! about half of real signatures are high-S: [`verify_digest`] normalises
//! before verifying, as libsecp256k1 rejects them otherwise.
//!
//! The curve arithmetic is libsecp256k1 (the `secp256k1` crate, Bitcoin
//! Core's library): verify + sign take ~71 µs here against k256's ~186 µs,
//! with byte-identical signatures (RFC 6979 nonces, low-S), and it is most of
//! what a uAgents exchange costs the node (`bench/README.md`, row 4).

use bech32::primitives::decode::CheckedHrpstring;
use bech32::{Bech32, Hrp};
use secp256k1::ecdsa::Signature;
use secp256k1::{Message, PublicKey, SECP256K1, SecretKey};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{pyjson, sha256_hex};

pub const AGENT_PREFIX: &str = "agent";
pub const SIGNATURE_PREFIX: &str = "sig";
const AGENT_HRP: Hrp = Hrp::parse_unchecked(AGENT_PREFIX);
const SIGNATURE_HRP: Hrp = Hrp::parse_unchecked(SIGNATURE_PREFIX);
/// Length of an `agent1…` address (65 characters).
pub const AGENT_ADDRESS_LENGTH: usize = 65;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UagentsCryptoError {
    /// The library's words for a string that is not bech32 at all.
    #[error("Unable to decode value")]
    Undecodable,
    #[error("Unable to decode agent address")]
    NotAnAgentAddress,
    #[error("Unable to decode signature")]
    NotASignature,
    #[error("Envelope signature is missing")]
    MissingSignature,
    #[error("Signature verification failed")]
    BadSignature,
    #[error("the seed does not give a valid secp256k1 key")]
    InvalidKey,
}

/// `sha256(sha256(utf8(prefix) ‖ u8(index)) ‖ sha256(utf8(seed)))`, uagents' key derivation.
pub fn derive_private_key(seed: &str, index: u8) -> [u8; 32] {
    let mut derivation = Sha256::new();
    derivation.update(AGENT_PREFIX.as_bytes());
    derivation.update([index]);
    let mut hasher = Sha256::new();
    hasher.update(derivation.finalize());
    hasher.update(Sha256::digest(seed.as_bytes()));
    hasher.finalize().into()
}

/// Bech32 (BIP-173 checksum) of `data` under `hrp`, lower case, without the 90-character limit.
fn encode_bech32(hrp: &str, data: &[u8]) -> String {
    let hrp = Hrp::parse_unchecked(hrp);
    // The crate limits length only to the BCH code length (1023), so 113-character
    // signatures encode; a failure here would be a bug in a constant prefix.
    bech32::encode::<Bech32>(hrp, data).unwrap_or_default()
}

/// Decode a bech32 string (classic checksum) into its prefix and bytes. Only the
/// canonical encoding is accepted, as Python's `convertbits(…, False)` does: at
/// most four padding bits, all zero (BIP-173's rule, which the crate checks for
/// segwit data), so no two strings decode to the same bytes.
fn decode_bech32(text: &str) -> Result<(Hrp, Vec<u8>), UagentsCryptoError> {
    if text.len() > 1023 {
        return Err(UagentsCryptoError::Undecodable);
    }
    let checked = CheckedHrpstring::new::<Bech32>(text).map_err(|_| UagentsCryptoError::Undecodable)?;
    checked
        .validate_segwit_padding()
        .map_err(|_| UagentsCryptoError::Undecodable)?;
    Ok((checked.hrp(), checked.byte_iter().collect()))
}

/// The `agent1…` address of a public key.
pub fn address_of(key: &PublicKey) -> String {
    encode_bech32(AGENT_PREFIX, &key.serialize())
}

/// The public key behind an `agent1…` address.
pub fn decode_address(address: &str) -> Result<PublicKey, UagentsCryptoError> {
    let (prefix, data) = decode_bech32(address)?;
    if prefix != AGENT_HRP {
        return Err(UagentsCryptoError::NotAnAgentAddress);
    }
    PublicKey::from_slice(&data).map_err(|_| UagentsCryptoError::NotAnAgentAddress)
}

/// Whether a string is shaped like an agent address (what uagents' `is_valid_address` checks).
pub fn looks_like_agent_address(text: &str) -> bool {
    text.len() == AGENT_ADDRESS_LENGTH && text.starts_with(AGENT_PREFIX)
}

pub fn encode_signature(signature: &Signature) -> String {
    encode_bech32(SIGNATURE_PREFIX, &signature.serialize_compact())
}

/// Decode a `sig1…` string into r‖s; high-S values are kept as they are.
pub fn decode_signature(text: &str) -> Result<Signature, UagentsCryptoError> {
    let (prefix, data) = decode_bech32(text)?;
    if prefix != SIGNATURE_HRP {
        return Err(UagentsCryptoError::NotASignature);
    }
    Signature::from_compact(&data).map_err(|_| UagentsCryptoError::BadSignature)
}

/// Verify a `sig1…` signature by the key of `address` over a 32-byte digest used as
/// the prehash. High-S signatures (as Python produces half the time) are accepted.
pub fn verify_digest(address: &str, digest: &[u8; 32], signature: &str) -> Result<(), UagentsCryptoError> {
    verify_digest_by(&decode_address(address)?, digest, signature)
}

/// [`verify_digest`] with the sender's key already decoded from its address.
fn verify_digest_by(key: &PublicKey, digest: &[u8; 32], signature: &str) -> Result<(), UagentsCryptoError> {
    let mut signature = decode_signature(signature)?;
    signature.normalize_s();
    SECP256K1
        .verify_ecdsa(Message::from_digest(*digest), &signature, key)
        .map_err(|_| UagentsCryptoError::BadSignature)
}

/// A uAgents identity: a secp256k1 key and its `agent1…` address.
#[derive(Clone)]
pub struct AgentIdentity {
    key: SecretKey,
    public: PublicKey,
    address: String,
}

impl std::fmt::Debug for AgentIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentIdentity")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl AgentIdentity {
    /// The identity a uAgent with this seed phrase has (`Identity.from_seed(seed, 0)`).
    pub fn from_seed(seed: &str) -> Result<AgentIdentity, UagentsCryptoError> {
        Self::from_seed_index(seed, 0)
    }

    pub fn from_seed_index(seed: &str, index: u8) -> Result<AgentIdentity, UagentsCryptoError> {
        Self::from_private_key(&derive_private_key(seed, index))
    }

    pub fn from_private_key(secret: &[u8; 32]) -> Result<AgentIdentity, UagentsCryptoError> {
        let key = SecretKey::from_byte_array(*secret).map_err(|_| UagentsCryptoError::InvalidKey)?;
        let public = key.public_key(SECP256K1);
        let address = address_of(&public);
        Ok(AgentIdentity { key, public, address })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn verifying_key(&self) -> &PublicKey {
        &self.public
    }

    /// Sign a 32-byte digest: RFC 6979 nonce, low-S (any valid signature verifies in uagents).
    pub fn sign_digest(&self, digest: &[u8; 32]) -> String {
        encode_signature(&SECP256K1.sign_ecdsa(Message::from_digest(*digest), &self.key))
    }
}

/// An exchange envelope as uagents-core's `Envelope` model serialises it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub version: i64,
    pub sender: String,
    pub target: String,
    /// Lower-case hyphenated UUID v4 (normalised by [`Envelope::from_value`]).
    pub session: String,
    pub schema_digest: String,
    #[serde(default)]
    pub protocol_digest: Option<String>,
    #[serde(default)]
    pub payload: Option<String>,
    #[serde(default)]
    pub expires: Option<u64>,
    #[serde(default)]
    pub nonce: Option<u64>,
    #[serde(default)]
    pub signature: Option<String>,
}

impl Envelope {
    /// Read an envelope like pydantic validates one: required fields typed, the
    /// session a UUID v4 (any spelling `uuid` accepts, stored hyphenated lower
    /// case since that is what the digest covers), unknown fields ignored.
    pub fn from_value(value: Value) -> Result<Envelope, String> {
        let mut envelope: Envelope = serde_json::from_value(value).map_err(|e| e.to_string())?;
        let session =
            uuid::Uuid::parse_str(&envelope.session).map_err(|_| "session is not a UUID".to_string())?;
        if session.get_version_num() != 4 {
            return Err("session is not a version 4 UUID".into());
        }
        envelope.session = session.hyphenated().to_string();
        Ok(envelope)
    }

    /// The digest the signature covers.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.sender.as_bytes());
        hasher.update(self.target.as_bytes());
        hasher.update(self.session.as_bytes());
        hasher.update(self.schema_digest.as_bytes());
        if let Some(payload) = &self.payload {
            hasher.update(payload.as_bytes());
        }
        if let Some(expires) = self.expires {
            hasher.update(expires.to_be_bytes());
        }
        if let Some(nonce) = self.nonce {
            hasher.update(nonce.to_be_bytes());
        }
        hasher.finalize().into()
    }

    pub fn sign(&mut self, identity: &AgentIdentity) {
        self.signature = Some(identity.sign_digest(&self.digest()));
    }

    /// Check the signature against the sender's address.
    pub fn verify(&self) -> Result<(), UagentsCryptoError> {
        self.verify_with(decode_address)
    }

    /// [`Envelope::verify`] with the sender's key from `key_of`, which is asked
    /// only once the envelope is signed: the library refuses an unsigned
    /// envelope before it reads the sender (a receiver that sees the same
    /// senders again keeps their keys).
    pub fn verify_with(
        &self,
        key_of: impl FnOnce(&str) -> Result<PublicKey, UagentsCryptoError>,
    ) -> Result<(), UagentsCryptoError> {
        let signature = self
            .signature
            .as_deref()
            .ok_or(UagentsCryptoError::MissingSignature)?;
        verify_digest_by(&key_of(&self.sender)?, &self.digest(), signature)
    }

    /// `payload` as standard base64 of the message's JSON text.
    pub fn encode_payload(&mut self, json_text: &str) {
        use base64::Engine as _;
        self.payload = Some(base64::engine::general_purpose::STANDARD.encode(json_text));
    }

    /// The message JSON text (empty when there is no payload, as in uagents).
    pub fn decode_payload(&self) -> Result<String, String> {
        use base64::Engine as _;
        let Some(payload) = &self.payload else {
            return Ok(String::new());
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(payload)
            .map_err(|_| "payload is not valid base64".to_string())?;
        String::from_utf8(bytes).map_err(|_| "payload is not UTF-8".to_string())
    }

    /// Serialise like pydantic's `model_dump_json` (compact, fields in declaration order).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Whether `text` is shaped like the digests [`schema_digest`] (and uagents) produce.
pub fn is_model_digest(text: &str) -> bool {
    text.strip_prefix("model:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// `model:` + SHA-256 hex of the model's JSON schema as Python dumps it with sorted keys.
pub fn schema_digest(schema: &Value) -> String {
    format!("model:{}", sha256_hex(pyjson::dumps_sorted(schema).as_bytes()))
}

/// One message model of a protocol: its digest and JSON schema.
pub struct ProtocolModel<'a> {
    pub digest: &'a str,
    pub schema: &'a Value,
}

/// The manifest a protocol digest is computed over (`Protocol.compute_digest`):
/// metadata emptied, models sorted by digest, interactions by request digest,
/// each interaction's responses sorted.
pub fn protocol_manifest(models: &[ProtocolModel<'_>], interactions: &[(&str, Vec<&str>)]) -> Value {
    let mut models: Vec<&ProtocolModel<'_>> = models.iter().collect();
    models.sort_by(|a, b| a.digest.cmp(b.digest));
    models.dedup_by(|a, b| a.digest == b.digest);
    let mut interactions: Vec<(&str, Vec<&str>)> = interactions.to_vec();
    interactions.sort_by(|a, b| a.0.cmp(b.0));
    json!({
        "version": "1.0",
        "metadata": {},
        "models": models
            .iter()
            .map(|m| json!({"digest": m.digest, "schema": m.schema}))
            .collect::<Vec<_>>(),
        "interactions": interactions
            .into_iter()
            .map(|(request, mut responses)| {
                responses.sort();
                responses.dedup();
                json!({"type": "normal", "request": request, "responses": responses})
            })
            .collect::<Vec<_>>(),
    })
}

/// The protocol digest of an agent whose every model may be answered by any
/// of them: what a plugin's declared models make (one interaction per model,
/// all models as its responses).
pub fn answering_protocol_digest(models: &[ProtocolModel<'_>]) -> String {
    let all: Vec<&str> = models.iter().map(|m| m.digest).collect();
    let interactions: Vec<(&str, Vec<&str>)> = all.iter().map(|digest| (*digest, all.clone())).collect();
    protocol_digest(&protocol_manifest(models, &interactions))
}

/// `proto:` + SHA-256 hex of the cleaned manifest as Python dumps it with sorted keys.
pub fn protocol_digest(manifest: &Value) -> String {
    format!("proto:{}", sha256_hex(pyjson::dumps_sorted(manifest).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bech32::Fe32;
    use bech32::primitives::iter::{ByteIterExt, Fe32IterExt};

    fn vectors() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/vectors/uagents_envelope.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn text<'a>(value: &'a Value, key: &str) -> &'a str {
        value[key].as_str().unwrap_or_else(|| panic!("{key} missing"))
    }

    fn envelope_of(fields: &Value) -> Envelope {
        Envelope::from_value(fields.clone()).unwrap()
    }

    #[test]
    fn schema_digests_match_the_library_vectors() {
        let vectors = vectors();
        let cases = vectors["schema_digests"].as_array().unwrap();
        assert!(!cases.is_empty());
        for case in cases {
            let schema: Value = serde_json::from_str(text(case, "schema_json")).unwrap();
            assert_eq!(
                schema_digest(&schema),
                text(case, "schema_digest"),
                "{}",
                case["model"]
            );
        }
    }

    #[test]
    fn identities_keys_and_addresses_match_the_library() {
        let vectors = vectors();
        let cases = vectors["identities"].as_array().unwrap();
        assert!(cases.len() >= 5);
        for case in cases {
            let seed = text(case, "seed");
            let index = case["index"].as_u64().unwrap() as u8;
            assert_eq!(
                hex::encode(Sha256::digest(seed.as_bytes())),
                text(case, "seed_hash_hex")
            );
            let private = derive_private_key(seed, index);
            assert_eq!(hex::encode(private), text(case, "private_key_hex"), "{seed}");
            let identity = AgentIdentity::from_seed_index(seed, index).unwrap();
            assert_eq!(
                hex::encode(identity.verifying_key().serialize()),
                text(case, "public_key_compressed_hex")
            );
            assert_eq!(
                hex::encode(identity.verifying_key().serialize_uncompressed()),
                text(case, "public_key_uncompressed_hex")
            );
            assert_eq!(identity.address(), text(case, "address"));
            assert_eq!(identity.address().len(), AGENT_ADDRESS_LENGTH);
            assert!(looks_like_agent_address(identity.address()));
            assert_eq!(
                &decode_address(text(case, "address")).unwrap(),
                identity.verifying_key()
            );
        }
    }

    #[test]
    fn envelope_digests_and_deterministic_signatures_match() {
        let vectors = vectors();
        let sender = AgentIdentity::from_seed(text(&vectors["identities"][0], "seed")).unwrap();
        let cases = vectors["envelopes"].as_array().unwrap();
        assert!(cases.len() >= 4);
        for case in cases {
            let name = text(case, "name");
            let mut envelope = envelope_of(&case["fields"]);
            assert_eq!(envelope.sender, sender.address());
            // The preimage, rebuilt field by field, is what the digest hashes.
            let mut preimage = Vec::new();
            preimage.extend(envelope.sender.as_bytes());
            preimage.extend(envelope.target.as_bytes());
            preimage.extend(envelope.session.as_bytes());
            preimage.extend(envelope.schema_digest.as_bytes());
            if let Some(p) = &envelope.payload {
                preimage.extend(p.as_bytes());
            }
            if let Some(e) = envelope.expires {
                preimage.extend(e.to_be_bytes());
            }
            if let Some(n) = envelope.nonce {
                preimage.extend(n.to_be_bytes());
            }
            assert_eq!(
                hex::encode(&preimage),
                text(case, "digest_preimage_hex"),
                "{name}"
            );
            assert_eq!(hex::encode(envelope.digest()), text(case, "digest_hex"), "{name}");
            match case["payload_decoded"].as_str() {
                Some(decoded) => assert_eq!(envelope.decode_payload().unwrap(), decoded),
                None => assert_eq!(envelope.decode_payload().unwrap(), ""),
            }

            let low = &case["signature_rfc6979_low_s"];
            envelope.sign(&sender);
            assert_eq!(envelope.signature.as_deref(), Some(text(low, "bech32")), "{name}");
            assert_eq!(text(low, "bech32").len(), 113);
            let decoded = decode_signature(text(low, "bech32")).unwrap().serialize_compact();
            assert_eq!(hex::encode(&decoded[..32]), text(low, "r_hex"));
            assert_eq!(hex::encode(&decoded[32..]), text(low, "s_hex"));
            envelope.verify().unwrap();

            let high = &case["signature_high_s_variant"];
            let decoded_high = decode_signature(text(high, "bech32")).unwrap();
            let mut normalised = decoded_high;
            normalised.normalize_s();
            assert_ne!(normalised, decoded_high, "{name}: high S");
            assert_eq!(
                hex::encode(&decoded_high.serialize_compact()[32..]),
                text(high, "s_hex")
            );
            envelope.signature = Some(text(high, "bech32").to_string());
            envelope.verify().unwrap_or_else(|e| panic!("{name} high-S: {e}"));

            let library = &case["signature_library_random"];
            envelope.signature = Some(text(library, "bech32").to_string());
            envelope
                .verify()
                .unwrap_or_else(|e| panic!("{name} library: {e}"));
            let as_sent = decode_signature(text(library, "bech32")).unwrap();
            let mut low = as_sent;
            low.normalize_s();
            let is_high = low != as_sent;
            assert_eq!(is_high, library["s_is_high"].as_bool().unwrap());

            // What the library sends parses to the same envelope and verifies.
            let sent: Value = serde_json::from_str(text(case, "json_as_sent_by_library")).unwrap();
            let parsed = Envelope::from_value(sent).unwrap();
            assert_eq!(hex::encode(parsed.digest()), text(case, "digest_hex"));
            parsed.verify().unwrap();
        }
    }

    #[test]
    fn negative_envelopes_are_refused_and_unsigned_fields_ignored() {
        let vectors = vectors();
        let cases = vectors["negative_envelopes"].as_array().unwrap();
        assert!(cases.len() >= 8);
        for case in cases {
            let name = text(case, "name");
            let value: Value = serde_json::from_str(text(case, "json")).unwrap();
            let envelope = Envelope::from_value(value).unwrap();
            let must_verify = case["must_verify"].as_bool().unwrap();
            assert_eq!(envelope.verify().is_ok(), must_verify, "{name}");
        }
        let by_name = |name: &str| {
            let case = cases.iter().find(|c| c["name"] == name).unwrap();
            Envelope::from_value(serde_json::from_str(text(case, "json")).unwrap())
                .unwrap()
                .verify()
                .unwrap_err()
        };
        assert_eq!(by_name("signature_missing"), UagentsCryptoError::MissingSignature);
        assert_eq!(by_name("signature_wrong_hrp"), UagentsCryptoError::NotASignature);
        assert_eq!(by_name("signature_bad_checksum"), UagentsCryptoError::Undecodable);
        assert_eq!(by_name("signed_by_other_key"), UagentsCryptoError::BadSignature);
    }

    #[test]
    fn envelope_parsing_normalises_the_session_and_rejects_non_envelopes() {
        let vectors = vectors();
        let mut fields = vectors["envelopes"][0]["fields"].clone();
        fields["session"] = json!("6F1C0C1E0A564D8B9E7A2B2B6D2A1C11");
        let envelope = Envelope::from_value(fields.clone()).unwrap();
        assert_eq!(envelope.session, "6f1c0c1e-0a56-4d8b-9e7a-2b2b6d2a1c11");
        fields["session"] = json!("6f1c0c1e-0a56-1d8b-9e7a-2b2b6d2a1c11");
        assert!(Envelope::from_value(fields.clone()).is_err(), "UUID v1");
        fields["session"] = json!("nope");
        assert!(Envelope::from_value(fields.clone()).is_err());
        let mut fields = vectors["envelopes"][0]["fields"].clone();
        fields.as_object_mut().unwrap().remove("sender");
        assert!(Envelope::from_value(fields).is_err());
        let mut fields = vectors["envelopes"][0]["fields"].clone();
        fields["expires"] = json!(-1);
        assert!(Envelope::from_value(fields).is_err());
    }

    #[test]
    fn sync_reply_example_parses_and_signed_replies_verify() {
        let vectors = vectors();
        let body: Value = serde_json::from_str(text(&vectors["sync_reply_example"], "body")).unwrap();
        let mut reply = Envelope::from_value(body.clone()).unwrap();
        assert_eq!(reply.signature, None);
        assert_eq!(reply.decode_payload().unwrap(), r#"{"text": "echo: hello"}"#);
        assert_eq!(serde_json::from_str::<Value>(&reply.to_json()).unwrap(), body);
        let listener = AgentIdentity::from_seed(text(&vectors["identities"][1], "seed")).unwrap();
        assert_eq!(reply.sender, listener.address());
        reply.sign(&listener);
        reply.verify().unwrap();
        reply.target = listener.address().to_string();
        assert_eq!(reply.verify(), Err(UagentsCryptoError::BadSignature));
    }

    #[test]
    fn protocol_digest_matches_the_library() {
        let vectors = vectors();
        let case = &vectors["protocol_digests"][0];
        let input: Value = serde_json::from_str(text(case, "digest_input_json")).unwrap();
        assert_eq!(pyjson::dumps_sorted(&input), text(case, "digest_input_json"));
        assert_eq!(protocol_digest(&input), text(case, "protocol_digest"));
        let message = &vectors["schema_digests"][0];
        let schema: Value = serde_json::from_str(text(message, "schema_json")).unwrap();
        let digest = schema_digest(&schema);
        let manifest = protocol_manifest(
            &[ProtocolModel {
                digest: &digest,
                schema: &schema,
            }],
            &[(digest.as_str(), vec![digest.as_str()])],
        );
        assert_eq!(manifest, input);
        assert_eq!(protocol_digest(&manifest), text(case, "protocol_digest"));
    }

    #[test]
    fn bech32_rejects_bech32m_and_non_canonical_padding() {
        let identity = AgentIdentity::from_seed("x").unwrap();
        let key = identity.verifying_key().serialize();
        let m = bech32::encode::<bech32::Bech32m>(Hrp::parse_unchecked("agent"), &key).unwrap();
        assert_eq!(decode_address(&m), Err(UagentsCryptoError::Undecodable));
        assert_eq!(decode_address("agent1"), Err(UagentsCryptoError::Undecodable));
        assert_eq!(decode_address(""), Err(UagentsCryptoError::Undecodable));
        let sig = encode_signature(&Signature::from_compact(&[1u8; 64]).unwrap());
        assert_eq!(decode_address(&sig), Err(UagentsCryptoError::NotAnAgentAddress));

        // 33 bytes are 264 bits: 53 groups of five with one padding bit. Strings with
        // a valid checksum whose padding is set, or one group too many, name the same
        // key but are not the canonical encoding Python accepts.
        let encode = |groups: &[Fe32]| -> String {
            groups
                .iter()
                .copied()
                .with_checksum::<Bech32>(&AGENT_HRP)
                .chars()
                .collect()
        };
        let mut groups: Vec<Fe32> = key.iter().copied().bytes_to_fes().collect();
        let canonical = encode(&groups);
        assert_eq!(canonical, identity.address(), "groups encode as the library does");
        assert_eq!(decode_address(&canonical), Ok(*identity.verifying_key()));
        let mut upper = canonical.to_ascii_uppercase();
        assert_eq!(decode_address(&upper), Ok(*identity.verifying_key()));
        upper.replace_range(..1, "a");
        assert_eq!(
            decode_address(&upper),
            Err(UagentsCryptoError::Undecodable),
            "mixed case"
        );
        let last = groups.len() - 1;
        let padded = groups[last];
        groups[last] = Fe32::try_from(padded.to_u8() | 1).unwrap();
        assert_eq!(
            decode_address(&encode(&groups)),
            Err(UagentsCryptoError::Undecodable),
            "a padding bit set"
        );
        groups[last] = padded;
        groups.push(Fe32::Q);
        assert_eq!(
            decode_address(&encode(&groups)),
            Err(UagentsCryptoError::Undecodable),
            "six bits of padding"
        );
    }
}
