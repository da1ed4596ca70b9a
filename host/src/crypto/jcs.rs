//! RFC 8785 JSON Canonicalization Scheme (JCS), as the signed Agora envelopes
//! spec §2 ("Canonicalization") requires before signing and verifying.
//!
//! Two rules the crate alone does not give us:
//! - Input must be I-JSON (RFC 8785 §3.1): duplicate member names are an
//!   error. serde_json keeps the last one silently, so [`parse_strict`]
//!   parses through a visitor that refuses them.
//! - Numbers must be I-JSON (RFC 7493 §2.2): JCS serializes every number as an
//!   IEEE 754 double, so an integer beyond ±(2^53−1) would be signed by one
//!   side as written and by another as its rounded double. [`parse_strict`]
//!   refuses such integers ([`JcsError::NotIJson`]), and integral doubles
//!   written otherwise (`1e16`) that JCS would write as such integers; a sender
//!   must send them as strings.
//! - Non-finite numbers must fail (§3.2.2.3). A parsed [`Value`] cannot hold
//!   one, but `json!` turns a NaN `f64` into `null` silently; [`finite`] is
//!   how the node builds numbers it is about to sign.
//!
//! Signatures are always computed over the value parsed from the received
//! bytes, never over a re-serialized typed struct (which would drop unknown
//! fields and rewrite numbers like `10000.0`).

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

#[derive(Debug, thiserror::Error)]
pub enum JcsError {
    #[error("malformed JSON: {0}")]
    Malformed(String),
    #[error("duplicate member name {0:?}")]
    DuplicateKey(String),
    #[error("a number is not finite")]
    NotFinite,
    #[error(
        "the number {0} is outside the I-JSON range (integers within ±9007199254740991); send it as a string"
    )]
    NotIJson(String),
    #[error("cannot canonicalize: {0}")]
    Canonicalize(String),
}

/// Parse JSON text into a [`Value`], refusing duplicate member names at any depth.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, JcsError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = match StrictValue::deserialize(&mut deserializer) {
        Ok(StrictValue(value)) => value,
        Err(error) => return Err(classify(error)),
    };
    deserializer.end().map_err(classify)?;
    // serde_json reads integers beyond 64 bits as doubles without a word; only the text
    // still says they were integers.
    check_integer_literals(bytes)?;
    Ok(value)
}

/// Refuse integer literals (no fraction, no exponent) beyond ±(2^53−1) in valid JSON text.
fn check_integer_literals(bytes: &[u8]) -> Result<(), JcsError> {
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let byte = bytes[i];
        if in_string {
            match byte {
                b'\\' => i += 2,
                b'"' => {
                    in_string = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        match byte {
            b'"' => {
                in_string = true;
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < bytes.len() && matches!(bytes[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
                    i += 1;
                }
                let token = &bytes[start..i];
                if token.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                    continue;
                }
                let digits = token.strip_prefix(b"-").unwrap_or(token);
                let safe = digits.len() <= 16
                    && std::str::from_utf8(digits)
                        .ok()
                        .and_then(|d| d.parse::<u64>().ok())
                        .is_some_and(|n| n <= MAX_SAFE_INTEGER);
                if !safe {
                    return Err(JcsError::NotIJson(String::from_utf8_lossy(token).into_owned()));
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

fn classify(error: serde_json::Error) -> JcsError {
    let text = error.to_string();
    if let Some(rest) = text.strip_prefix(DUPLICATE_PREFIX) {
        let name = rest.split(MARK_SUFFIX).next().unwrap_or(rest);
        return JcsError::DuplicateKey(name.to_string());
    }
    if let Some(rest) = text.strip_prefix(NOT_IJSON_PREFIX) {
        let number = rest.split(MARK_SUFFIX).next().unwrap_or(rest);
        return JcsError::NotIJson(number.to_string());
    }
    JcsError::Malformed(text)
}

const DUPLICATE_PREFIX: &str = "duplicate member name: ";
const NOT_IJSON_PREFIX: &str = "number outside I-JSON: ";
const MARK_SUFFIX: &str = "\u{0}";

/// The largest integer magnitude every IEEE 754 double reader keeps exactly (2^53 − 1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The canonical UTF-8 bytes of `value` (RFC 8785): a parsed [`Value`], or a
/// borrowed view of one (the envelope a signature covers).
pub fn canonicalize(value: &impl serde::Serialize) -> Result<Vec<u8>, JcsError> {
    serde_jcs::to_vec(value).map_err(|e| JcsError::Canonicalize(e.to_string()))
}

/// Parse then canonicalize: the whole of RFC 8785 for text input.
pub fn canonicalize_bytes(bytes: &[u8]) -> Result<Vec<u8>, JcsError> {
    canonicalize(&parse_strict(bytes)?)
}

/// A JSON number for a value the node is about to sign; NaN and ±Infinity are refused.
pub fn finite(number: f64) -> Result<Value, JcsError> {
    Number::from_f64(number)
        .map(Value::Number)
        .ok_or(JcsError::NotFinite)
}

struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        if value.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(E::custom(format!("{NOT_IJSON_PREFIX}{value}{MARK_SUFFIX}")));
        }
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        if value > MAX_SAFE_INTEGER {
            return Err(E::custom(format!("{NOT_IJSON_PREFIX}{value}{MARK_SUFFIX}")));
        }
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        // JCS writes an integral double below 1e21 without fraction or exponent:
        // `1e16` would be signed as `10000000000000000`, an integer this parser
        // refuses. Refuse it here too, so every accepted value's JCS form parses.
        if value.fract() == 0.0 && value.abs() > MAX_SAFE_INTEGER as f64 && value.abs() < 1e21 {
            return Err(E::custom(format!("{NOT_IJSON_PREFIX}{value}{MARK_SUFFIX}")));
        }
        Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number is not finite"))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_string()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(deserializer).map(|v| v.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if members.contains_key(&key) {
                return Err(de::Error::custom(format!("{DUPLICATE_PREFIX}{key}{MARK_SUFFIX}")));
            }
            let StrictValue(value) = map.next_value_seed(StrictSeed)?;
            members.insert(key, value);
        }
        Ok(Value::Object(members))
    }
}

struct StrictSeed;

impl<'de> DeserializeSeed<'de> for StrictSeed {
    type Value = StrictValue;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<StrictValue, D::Error> {
        StrictValue::deserialize(deserializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn vectors() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors/jcs")
    }

    #[test]
    fn official_cyberphone_vectors_canonicalize_byte_for_byte() {
        let names = ["arrays", "french", "structures", "unicode", "values", "weird"];
        for name in names {
            let input = std::fs::read(vectors().join(format!("input/{name}.json"))).unwrap();
            let expected = std::fs::read(vectors().join(format!("output/{name}.json"))).unwrap();
            let hex_expected = std::fs::read_to_string(vectors().join(format!("outhex/{name}.txt"))).unwrap();
            let output = canonicalize_bytes(&input).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                String::from_utf8_lossy(&output),
                String::from_utf8_lossy(&expected),
                "{name}"
            );
            let hex_clean: String = hex_expected.split_whitespace().collect::<String>().to_lowercase();
            assert_eq!(hex::encode(&output), hex_clean, "{name} (outhex)");
        }
    }

    fn check_number_line(line: &str) {
        let (bits, expected) = line.split_once(',').expect("hex,expected");
        let number = f64::from_bits(u64::from_str_radix(bits, 16).expect("hex bits"));
        if expected == "null" {
            assert!(!number.is_finite(), "{line}");
            assert!(serde_jcs::to_string(&number).is_err(), "{line}: must fail");
            assert!(matches!(finite(number), Err(JcsError::NotFinite)), "{line}");
            return;
        }
        let canonical = canonicalize(&finite(number).expect("finite")).expect("canonical");
        assert_eq!(String::from_utf8(canonical).unwrap(), expected, "{line}");
        // The same number nested in a structure, as envelopes carry them.
        let nested = canonicalize(&serde_json::json!({"cost": finite(number).unwrap()})).unwrap();
        assert_eq!(
            String::from_utf8(nested).unwrap(),
            format!("{{\"cost\":{expected}}}"),
            "{line}"
        );
    }

    #[test]
    fn first_10k_es6_number_lines_format_like_ecmascript() {
        let text = std::fs::read_to_string(vectors().join("numbers/es6testfile_first10k.txt")).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 10_000);
        for line in lines {
            check_number_line(line);
        }
    }

    #[test]
    fn es6_edge_number_values_including_non_finite_failures() {
        let text = std::fs::read_to_string(vectors().join("numbers/es6_edge_values.txt")).unwrap();
        let mut nulls = 0;
        for line in text.lines().filter(|l| !l.is_empty()) {
            if line.ends_with(",null") {
                nulls += 1;
            }
            check_number_line(line);
        }
        assert!(nulls > 0, "the edge file carries non-finite cases");
    }

    #[test]
    fn nested_nan_is_refused_not_written_as_null() {
        assert!(finite(f64::NAN).is_err());
        assert!(finite(f64::INFINITY).is_err());
        assert!(finite(f64::NEG_INFINITY).is_err());
    }

    #[test]
    fn edge_cases_give_the_expected_verdict() {
        let cases: Value =
            serde_json::from_slice(&std::fs::read(vectors().join("edge/cases.json")).unwrap()).unwrap();
        let cases = cases["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 53);
        let (mut expected_hits, mut alternatives) = (0, 0);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let input = std::fs::read(vectors().join(format!("edge/input/{name}.json"))).unwrap();
            let result = canonicalize_bytes(&input);
            let matches_expected = match case["expected"].as_str().unwrap() {
                "error" => result.is_err(),
                "output" => {
                    let file = case["output_file"].as_str().unwrap();
                    let wanted = std::fs::read(vectors().join("edge").join(file)).unwrap();
                    result.as_ref().is_ok_and(|out| *out == wanted)
                }
                other => panic!("{name}: unknown expectation {other}"),
            };
            if matches_expected {
                expected_hits += 1;
                continue;
            }
            let alternative = &case["alternative"];
            let matches_alternative = match alternative.get("output").and_then(Value::as_str) {
                Some(output) => result.as_ref().is_ok_and(|out| out == output.as_bytes()),
                None => alternative.is_object() && result.is_err(),
            };
            assert!(
                matches_alternative,
                "{name}: got {:?}",
                result.map(|b| String::from_utf8_lossy(&b).into_owned())
            );
            alternatives += 1;
        }
        // Integers beyond ±(2^53−1) are not I-JSON: always the strict alternative.
        for case in cases {
            let strict_integers = case["alternative"]["kind"]
                .as_str()
                .is_some_and(|kind| kind.contains("strict integer domain"));
            let name = case["name"].as_str().unwrap();
            let input = std::fs::read(vectors().join(format!("edge/input/{name}.json"))).unwrap();
            if strict_integers && name != "num_es6_boundaries" {
                assert!(
                    matches!(canonicalize_bytes(&input), Err(JcsError::NotIJson(_))),
                    "{name}"
                );
            }
        }
        // Duplicate keys must take the strict path: never the lenient alternative.
        for name in ["dup_keys", "dup_keys_after_unescape", "dup_keys_nested"] {
            let input = std::fs::read(vectors().join(format!("edge/input/{name}.json"))).unwrap();
            assert!(
                matches!(canonicalize_bytes(&input), Err(JcsError::DuplicateKey(_))),
                "{name}"
            );
        }
        assert_eq!(expected_hits + alternatives, 53);
        assert!(expected_hits >= 40, "{expected_hits} expected verdicts");
    }

    #[test]
    fn integers_beyond_the_i_json_range_are_refused_wherever_they_are() {
        // Every accepted value's JCS form must parse again (the fuzz invariant).
        for accepted in ["1e300", "1e21", "9007199254740991.0", "-0.0", "0.1"] {
            let canonical = canonicalize_bytes(accepted.as_bytes()).unwrap();
            parse_strict(&canonical).unwrap_or_else(|e| panic!("{accepted}: {e}"));
        }
        for bad in [
            "9007199254740992",
            "-9007199254740992",
            "[18446744073709551615]",
            r#"{"a":{"b":[1,123456789012345678901234567890]}}"#,
            "-123456789012345678901234567890",
            // Integral doubles JCS would write as such integers (found by fuzz/run).
            "1e16",
            "[10000000000000000.0,1]",
            r#"{"f":12345678901234567890.5}"#,
            "-9007199254740992.0",
        ] {
            assert!(
                matches!(parse_strict(bad.as_bytes()), Err(JcsError::NotIJson(_))),
                "{bad}"
            );
        }
        for good in [
            "9007199254740991",
            "-9007199254740991",
            r#"{"s":"12345678901234567890","e":1e300,"g":1e21,"h":9007199254740991.0,"f":0.5,"z":-0}"#,
            r#"["\"99999999999999999999"]"#,
        ] {
            parse_strict(good.as_bytes()).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }

    #[test]
    fn strict_parse_refuses_trailing_garbage_and_reports_the_duplicate() {
        assert!(parse_strict(b"{\"a\":1} x").is_err());
        match parse_strict(br#"{"a":{"b":1,"b":2}}"#) {
            Err(JcsError::DuplicateKey(name)) => assert_eq!(name, "b"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_strict(br#"{"a":[1,{"b":null}]}"#).unwrap(),
            serde_json::json!({"a":[1,{"b":null}]})
        );
    }
}
