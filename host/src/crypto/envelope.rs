//! Signing and verifying Agora envelopes (signed envelopes spec §1–2):
//! Ed25519 over the RFC 8785 canonical form of the whole envelope with
//! `sender.signature` set to `""`, signature as unpadded Base64Url.
//!
//! Verification accepts both options of §2 step 2 (signature `""` or the
//! member removed) and a padded Base64Url signature; it always works on the
//! generic value parsed from the received bytes (duplicate keys refused) and
//! uses `verify_strict`, which rejects small-order keys and malleable
//! signatures. Only `sender` is looked at before the signature checks out.

use base64::Engine as _;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::identity::{SenderIdError, parse_sender_id};
use super::jcs::{self, JcsError};

pub const PROTOCOL: &str = "agora/1.0";

/// The message types of spec §1.
pub const TYPES: [&str; 8] = [
    "HELLO", "WELCOME", "STATUS", "REQUEST", "OFFER", "ACCEPT", "RESULT", "ERROR",
];

/// Longest envelope `id` accepted; ids key the replay window.
pub const MAX_ID_LEN: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("{0}")]
    Json(#[from] JcsError),
    #[error("the envelope must be a JSON object")]
    NotAnObject,
    #[error("`sender` must be an object with a string `id`")]
    MissingSender,
    #[error("the envelope is not signed (`sender.signature` missing or empty)")]
    MissingSignature,
    #[error("`sender.signature` is not Base64Url of a 64-byte Ed25519 signature")]
    SignatureEncoding,
    #[error("untrusted sender: {0}")]
    SenderId(#[from] SenderIdError),
    #[error("invalid signature")]
    BadSignature,
    #[error("`{field}`: {problem}")]
    Schema { field: &'static str, problem: String },
}

impl EnvelopeError {
    /// The spec §5 code: authentication failures are 401, shape problems 400.
    pub fn code(&self) -> u16 {
        match self {
            EnvelopeError::Json(_)
            | EnvelopeError::NotAnObject
            | EnvelopeError::MissingSender
            | EnvelopeError::Schema { .. } => 400,
            EnvelopeError::MissingSignature
            | EnvelopeError::SignatureEncoding
            | EnvelopeError::SenderId(_)
            | EnvelopeError::BadSignature => 401,
        }
    }
}

fn schema(field: &'static str, problem: impl Into<String>) -> EnvelopeError {
    EnvelopeError::Schema {
        field,
        problem: problem.into(),
    }
}

/// Which option of spec §2 step 2 a signature was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureVariant {
    EmptyString,
    Removed,
}

/// An envelope whose signature checked out, as parsed from the received bytes.
#[derive(Debug, Clone)]
pub struct Verified {
    pub value: Value,
    pub sender_id: String,
    pub key: VerifyingKey,
    pub variant: SignatureVariant,
}

/// The bytes a signature covers: JCS of the envelope with the signature blanked or removed.
pub fn signing_input(envelope: &Value, variant: SignatureVariant) -> Result<Vec<u8>, EnvelopeError> {
    let fields = envelope.as_object().ok_or(EnvelopeError::MissingSender)?;
    let sender = fields
        .get("sender")
        .and_then(Value::as_object)
        .ok_or(EnvelopeError::MissingSender)?;
    Ok(jcs::canonicalize(&SigningView {
        fields,
        sender,
        variant,
    })?)
}

/// The envelope as its signature covers it, serialized from the parsed value
/// rather than from a copy with the signature edited: a deep copy of every
/// request's envelope, twice per exchange (verify and sign), was a tenth of
/// the allocations of a signed REQUEST. JCS sorts members itself, so the
/// order they are written in here does not matter.
struct SigningView<'a> {
    fields: &'a Map<String, Value>,
    sender: &'a Map<String, Value>,
    variant: SignatureVariant,
}

impl Serialize for SigningView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in self.fields {
            if name == "sender" {
                map.serialize_entry(name, &SenderView(self))?;
            } else {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}

struct SenderView<'a>(&'a SigningView<'a>);

impl Serialize for SenderView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in self.0.sender {
            if name != "signature" {
                map.serialize_entry(name, value)?;
            }
        }
        if self.0.variant == SignatureVariant::EmptyString {
            map.serialize_entry("signature", "")?;
        }
        map.end()
    }
}

/// Sign `envelope` in place (the `""` variant), writing unpadded Base64Url.
pub fn sign(envelope: &mut Value, key: &SigningKey) -> Result<(), EnvelopeError> {
    let input = signing_input(envelope, SignatureVariant::EmptyString)?;
    let signature = key.sign(&input);
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature.to_bytes());
    if let Some(sender) = envelope.get_mut("sender").and_then(Value::as_object_mut) {
        sender.insert("signature".into(), Value::String(encoded));
    }
    Ok(())
}

/// Base64Url that accepts canonical padding or none (we emit none).
const PADDING_OPTIONAL: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    base64::engine::GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// Decode a signature: Base64Url, padding optional, exactly 64 bytes.
pub fn decode_signature(text: &str) -> Result<Signature, EnvelopeError> {
    let bytes = PADDING_OPTIONAL
        .decode(text)
        .map_err(|_| EnvelopeError::SignatureEncoding)?;
    let array: [u8; 64] = bytes.try_into().map_err(|_| EnvelopeError::SignatureEncoding)?;
    Ok(Signature::from_bytes(&array))
}

/// Parse the received bytes (strictly) and verify the envelope's signature.
pub fn verify_bytes(raw: &[u8]) -> Result<Verified, EnvelopeError> {
    verify_value(jcs::parse_strict(raw)?)
}

/// Verify an already strictly-parsed envelope.
pub fn verify_value(value: Value) -> Result<Verified, EnvelopeError> {
    let sender = value
        .as_object()
        .ok_or(EnvelopeError::NotAnObject)?
        .get("sender")
        .and_then(Value::as_object)
        .ok_or(EnvelopeError::MissingSender)?;
    let sender_id = sender
        .get("id")
        .and_then(Value::as_str)
        .ok_or(EnvelopeError::MissingSender)?
        .to_string();
    let signature_text = match sender.get("signature") {
        Some(Value::String(text)) if !text.is_empty() => text.clone(),
        _ => return Err(EnvelopeError::MissingSignature),
    };
    let signature = decode_signature(&signature_text)?;
    let key = parse_sender_id(&sender_id)?;
    for variant in [SignatureVariant::EmptyString, SignatureVariant::Removed] {
        let input = signing_input(&value, variant)?;
        if key.verify_strict(&input, &signature).is_ok() {
            return Ok(Verified {
                value,
                sender_id,
                key,
                variant,
            });
        }
    }
    Err(EnvelopeError::BadSignature)
}

/// The checked top-level fields of a verified envelope.
#[derive(Debug, Clone)]
pub struct Header {
    pub id: String,
    pub kind: String,
    pub timestamp_ms: i64,
    pub payload: Map<String, Value>,
}

/// Check the envelope fields of spec §1 (after the signature verified).
pub fn header(envelope: &Value) -> Result<Header, EnvelopeError> {
    let fields = envelope.as_object().ok_or(EnvelopeError::NotAnObject)?;
    match fields.get("protocol") {
        Some(Value::String(protocol)) if protocol == PROTOCOL => {}
        Some(Value::String(other)) => {
            return Err(schema(
                "protocol",
                format!("unsupported protocol {other:?}; expected {PROTOCOL:?}"),
            ));
        }
        _ => return Err(schema("protocol", "missing or not a string")),
    }
    let id = match fields.get("id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_ID_LEN => id.clone(),
        _ => {
            return Err(schema(
                "id",
                format!("must be a string of 1-{MAX_ID_LEN} characters"),
            ));
        }
    };
    let kind = match fields.get("type") {
        Some(Value::String(kind)) if TYPES.contains(&kind.as_str()) => kind.clone(),
        Some(Value::String(kind)) => {
            return Err(schema("type", format!("unknown message type {kind:?}")));
        }
        _ => return Err(schema("type", "missing or not a string")),
    };
    let timestamp_ms = match fields.get("timestamp") {
        Some(Value::String(text)) => parse_timestamp(text)
            .ok_or_else(|| schema("timestamp", "must be an ISO 8601 / RFC 3339 date-time"))?,
        _ => return Err(schema("timestamp", "missing or not a string")),
    };
    let payload = match fields.get("payload") {
        Some(Value::Object(payload)) => payload.clone(),
        _ => return Err(schema("payload", "must be an object")),
    };
    Ok(Header {
        id,
        kind,
        timestamp_ms,
        payload,
    })
}

/// Milliseconds since the Unix epoch of an RFC 3339 date-time.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    if text.len() > 64 {
        return None;
    }
    let parsed = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(parsed.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Now as the spec writes it: `2023-10-27T10:00:00Z`.
pub fn format_timestamp(unix_ms: u64) -> String {
    let seconds = i64::try_from(unix_ms / 1000).unwrap_or(0);
    OffsetDateTime::from_unix_timestamp(seconds)
        .ok()
        .and_then(|at| at.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into())
}

/// A new signed envelope from `signer`, with a fresh id and the current time.
pub fn build(
    kind: &str,
    signer: &SigningKey,
    sender_id: &str,
    payload: Value,
    now_ms: u64,
) -> Result<Value, EnvelopeError> {
    // Built member by member: `json!` would copy `payload` through a serializer.
    let mut sender = Map::new();
    sender.insert("id".into(), sender_id.into());
    sender.insert("signature".into(), "".into());
    let mut fields = Map::new();
    fields.insert("protocol".into(), PROTOCOL.into());
    fields.insert("id".into(), uuid::Uuid::new_v4().to_string().into());
    fields.insert("timestamp".into(), format_timestamp(now_ms).into());
    fields.insert("type".into(), kind.into());
    fields.insert("sender".into(), Value::Object(sender));
    fields.insert("payload".into(), payload);
    let mut envelope = Value::Object(fields);
    sign(&mut envelope, signer)?;
    Ok(envelope)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vectors() -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/vectors/signed_envelope.json");
        jcs::parse_strict(&std::fs::read(path).unwrap()).unwrap()
    }

    fn test_key(vectors: &Value) -> SigningKey {
        let seed: [u8; 32] = hex::decode(vectors["key"]["seed_hex"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        SigningKey::from_bytes(&seed)
    }

    #[test]
    fn rfc8032_key_and_empty_message_signature() {
        let vectors = vectors();
        let key = test_key(&vectors);
        assert_eq!(
            hex::encode(key.verifying_key().as_bytes()),
            vectors["key"]["public_key_hex"].as_str().unwrap()
        );
        assert_eq!(
            super::super::identity::did_key(&key.verifying_key()),
            vectors["key"]["did_key"].as_str().unwrap()
        );
        assert_eq!(
            hex::encode(key.sign(b"").to_bytes()),
            vectors["key"]["rfc8032_test1_empty_message_signature_hex"]
                .as_str()
                .unwrap()
        );
    }

    #[test]
    fn both_variants_of_both_cases_match_byte_for_byte() {
        let vectors = vectors();
        let key = test_key(&vectors);
        let cases = vectors["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 2);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let unsigned = &case["envelope_unsigned_input"];
            for (variant_name, variant) in [
                ("empty_string", SignatureVariant::EmptyString),
                ("removed", SignatureVariant::Removed),
            ] {
                let expected = &case["variants"][variant_name];
                let input = signing_input(unsigned, variant).unwrap();
                assert_eq!(
                    std::str::from_utf8(&input).unwrap(),
                    expected["canonical_utf8"].as_str().unwrap(),
                    "{name}/{variant_name}"
                );
                assert_eq!(hex::encode(&input), expected["canonical_hex"].as_str().unwrap());
                assert_eq!(
                    super::super::sha256_hex(&input),
                    expected["canonical_sha256_hex"].as_str().unwrap()
                );
                let signature = key.sign(&input);
                assert_eq!(
                    hex::encode(signature.to_bytes()),
                    expected["signature_hex"].as_str().unwrap()
                );
                let unpadded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature.to_bytes());
                assert_eq!(unpadded, expected["signature_base64url"].as_str().unwrap());
                assert_eq!(
                    base64::engine::general_purpose::URL_SAFE.encode(signature.to_bytes()),
                    expected["signature_base64url_padded"].as_str().unwrap()
                );
                assert_eq!(
                    base64::engine::general_purpose::STANDARD.encode(signature.to_bytes()),
                    expected["signature_base64_standard"].as_str().unwrap()
                );
                // The fully signed envelope verifies, through its own received bytes.
                let signed = &expected["signed_envelope"];
                let bytes = serde_json::to_vec(signed).unwrap();
                let verified = verify_bytes(&bytes).unwrap();
                assert_eq!(verified.variant, variant, "{name}/{variant_name}");
                assert_eq!(
                    std::str::from_utf8(&jcs::canonicalize(signed).unwrap()).unwrap(),
                    expected["signed_envelope_canonical_utf8"].as_str().unwrap()
                );
            }
            // What we emit is the empty-string variant, unpadded.
            let mut ours = unsigned.clone();
            sign(&mut ours, &key).unwrap();
            assert_eq!(
                ours["sender"]["signature"],
                case["variants"]["empty_string"]["signature_base64url"]
            );
        }
    }

    #[test]
    fn the_signing_view_covers_what_an_edited_copy_would() {
        // Sender members either side of "signature" in JCS order (UTF-16 code
        // units: "é" sorts after every ASCII name), with and without a signature.
        let envelopes = [
            json!({"type": "REQUEST", "sender": {"id": "did:key:z6Mk", "signature": "c2ln", "alias": "a", "zone": 1, "é": [1.5, null]}, "payload": {"b": 1, "a": "x"}}),
            json!({"type": "REQUEST", "sender": {"id": "did:key:z6Mk"}, "payload": {}}),
            json!({"sender": {"signature": ""}, "ünïcode": "ß", "a\u{1F600}": true}),
        ];
        for envelope in envelopes {
            for variant in [SignatureVariant::EmptyString, SignatureVariant::Removed] {
                let mut copy = envelope.clone();
                let sender = copy["sender"].as_object_mut().unwrap();
                match variant {
                    SignatureVariant::EmptyString => {
                        sender.insert("signature".into(), json!(""));
                    }
                    SignatureVariant::Removed => {
                        sender.remove("signature");
                    }
                }
                assert_eq!(
                    String::from_utf8(signing_input(&envelope, variant).unwrap()).unwrap(),
                    String::from_utf8(jcs::canonicalize(&copy).unwrap()).unwrap(),
                    "{envelope} {variant:?}"
                );
            }
        }
        assert!(matches!(
            signing_input(&json!({"sender": "x"}), SignatureVariant::EmptyString),
            Err(EnvelopeError::MissingSender)
        ));
        assert!(matches!(
            signing_input(&json!([1]), SignatureVariant::Removed),
            Err(EnvelopeError::MissingSender)
        ));
    }

    #[test]
    fn the_offer_case_is_verified_from_its_non_canonical_text() {
        // `10000.0`, `-0.0` and escapes exactly as a peer might send them.
        let vectors = vectors();
        let signed = &vectors["cases"][1]["variants"]["empty_string"]["signed_envelope"];
        let signature = signed["sender"]["signature"].as_str().unwrap();
        let text = format!(
            r#"{{"type":"OFFER","timestamp":"2023-10-27T10:00:01Z","protocol":"agora/1.0","id":"9c5b94b1-35ad-49bb-b118-8e8fc24abf80","sender":{{"signature":"{signature}","id":"did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw"}},"payload":{{"request_id":"f47ac10b-58cc-4372-a567-0e02b2c3d479","cost":4.5,"ttl":10000,"eta":10000.0,"note":"Caf\u00e9 \u2615 \u20ac5 \"quoted\" \\ tab\there \ud83d\ude02 \u05d3\u05bc","\u00e9tape":1,"Zeta":0.1,"zeta":-0.0,"\ud83d\ude02":"emoji key","\ufb33":"U+FB33 key (sorts after the emoji key under UTF-16 order)"}}}}"#
        );
        verify_bytes(text.as_bytes()).unwrap();
        let duplicated = text.replacen(r#""cost":4.5,"#, r#""cost":4.5,"cost":1,"#, 1);
        assert!(matches!(
            verify_bytes(duplicated.as_bytes()),
            Err(EnvelopeError::Json(JcsError::DuplicateKey(_)))
        ));
    }

    #[test]
    fn every_verification_case_has_its_verdict() {
        let vectors = vectors();
        let cases = vectors["verification_cases"].as_array().unwrap();
        assert_eq!(cases.len(), 7);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let bytes = serde_json::to_vec(&case["envelope"]).unwrap();
            let result = verify_bytes(&bytes);
            match name {
                "padded_base64url_signature" => {
                    assert!(result.is_ok(), "{name}: padded signatures are accepted")
                }
                "non_ed25519_did_key" => assert!(
                    matches!(result, Err(EnvelopeError::SenderId(SenderIdError::NotEd25519))),
                    "{name}: {result:?}"
                ),
                "truncated_signature" => assert!(
                    matches!(result, Err(EnvelopeError::SignatureEncoding)),
                    "{name}: {result:?}"
                ),
                _ => assert!(
                    matches!(result, Err(EnvelopeError::BadSignature)),
                    "{name}: {result:?}"
                ),
            }
            if let Err(error) = verify_bytes(&bytes) {
                assert_eq!(error.code(), 401, "{name}");
            }
        }
    }

    #[test]
    fn missing_and_malformed_signatures_are_refused() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let did = super::super::identity::did_key(&key.verifying_key());
        let envelope = build("HELLO", &key, &did, json!({}), 1_700_000_000_000).unwrap();
        verify_value(envelope.clone()).unwrap();
        let mut missing = envelope.clone();
        missing["sender"].as_object_mut().unwrap().remove("signature");
        assert!(matches!(
            verify_value(missing),
            Err(EnvelopeError::MissingSignature)
        ));
        let mut not_b64 = envelope.clone();
        not_b64["sender"]["signature"] = json!("!!!");
        assert!(matches!(
            verify_value(not_b64),
            Err(EnvelopeError::SignatureEncoding)
        ));
        let mut no_sender = envelope.clone();
        no_sender.as_object_mut().unwrap().remove("sender");
        assert!(matches!(
            verify_value(no_sender),
            Err(EnvelopeError::MissingSender)
        ));
        // Raw-key sender ids verify the same way.
        let raw = super::super::identity::raw_sender_id(&key.verifying_key());
        let raw_signed = build("HELLO", &key, &raw, json!({"x": 1}), 1_700_000_000_000).unwrap();
        assert_eq!(verify_value(raw_signed).unwrap().sender_id, raw);
    }

    #[test]
    fn header_checks_protocol_type_timestamp_and_payload() {
        let key = SigningKey::from_bytes(&[9u8; 32]);
        let did = super::super::identity::did_key(&key.verifying_key());
        let envelope = build("REQUEST", &key, &did, json!({"resource": "x"}), 1_700_000_000_000).unwrap();
        let header = header(&envelope).unwrap();
        assert_eq!(header.kind, "REQUEST");
        assert_eq!(header.timestamp_ms, 1_700_000_000_000);
        assert_eq!(envelope["timestamp"], "2023-11-14T22:13:20Z");
        for (field, value) in [
            ("protocol", json!("agora/2.0")),
            ("type", json!("PING")),
            ("timestamp", json!("yesterday")),
            ("payload", json!([])),
            ("id", json!("")),
        ] {
            let mut bad = envelope.clone();
            bad[field] = value;
            assert!(
                matches!(super::header(&bad), Err(EnvelopeError::Schema { .. })),
                "{field}"
            );
        }
        assert_eq!(
            parse_timestamp("2023-10-27T10:00:00.5+00:00"),
            Some(1_698_400_800_500)
        );
    }
}
