//! RFC 8785 JSON Canonicalization Scheme (JCS), as the signed Agora envelopes
//! spec §2 ("Canonicalization") requires before signing and verifying.
//!
//! Two rules the crate alone does not give us:
//! - Input must be I-JSON (RFC 8785 §3.1): duplicate member names are an
//!   error. serde_json keeps the last one silently, so [`parse_strict`]
//!   parses through a visitor that refuses them.
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
    Ok(value)
}

fn classify(error: serde_json::Error) -> JcsError {
    let text = error.to_string();
    match text.strip_prefix(DUPLICATE_PREFIX) {
        Some(rest) => {
            let name = rest.split(DUPLICATE_SUFFIX).next().unwrap_or(rest);
            JcsError::DuplicateKey(name.to_string())
        }
        None => JcsError::Malformed(text),
    }
}

const DUPLICATE_PREFIX: &str = "duplicate member name: ";
const DUPLICATE_SUFFIX: &str = "\u{0}";

/// The canonical UTF-8 bytes of `value` (RFC 8785).
pub fn canonicalize(value: &Value) -> Result<Vec<u8>, JcsError> {
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

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
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
                return Err(de::Error::custom(format!(
                    "{DUPLICATE_PREFIX}{key}{DUPLICATE_SUFFIX}"
                )));
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
        // Duplicate keys must take the strict path: never the lenient alternative.
        for name in ["dup_keys", "dup_keys_after_unescape", "dup_keys_nested"] {
            let input = std::fs::read(vectors().join(format!("edge/input/{name}.json"))).unwrap();
            assert!(
                matches!(canonicalize_bytes(&input), Err(JcsError::DuplicateKey(_))),
                "{name}"
            );
        }
        assert_eq!(expected_hits + alternatives, 53);
        assert!(expected_hits >= 50, "{expected_hits} expected verdicts");
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
