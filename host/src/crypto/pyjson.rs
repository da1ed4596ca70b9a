//! Python's `json.dumps(value, sort_keys=True)` byte for byte: `", "` and
//! `": "` separators, ASCII-only output (`ensure_ascii`, the default), floats
//! as Python's `repr` writes them. uAgents hashes model schemas
//! (`schema_json(indent=None, sort_keys=True)`) and protocol manifests
//! (`json.dumps(manifest, indent=None, sort_keys=True)`) in this form, so
//! digests only match if we write it exactly as Python does.
//!
//! Integers are exact within 64 bits; serde_json (without
//! `arbitrary_precision`) parses larger ones as floats before they get here.
//! Known answers from real Python: `tests/vectors/pyjson/`.

use std::fmt::Write;

use serde_json::Value;

pub fn dumps_sorted(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, DEFAULT);
    out
}

/// `json.dumps(value, sort_keys=True, separators=(",", ":"))`: what uagents
/// signs Almanac registrations over (`VerifiableModel._build_digest`).
pub fn dumps_sorted_compact(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, COMPACT);
    out
}

/// Item and key separators.
type Separators = (&'static str, &'static str);
const DEFAULT: Separators = (", ", ": ");
const COMPACT: Separators = (",", ":");

fn write_value(out: &mut String, value: &Value, separators: Separators) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(separators.0);
                }
                write_value(out, item, separators);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(separators.0);
                }
                write_string(out, key);
                out.push_str(separators.1);
                write_value(out, &map[key], separators);
            }
            out.push('}');
        }
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        write_float(out, f);
    }
}

/// Python's `float.__repr__` (`format_float_short` in mode 'r'): the shortest
/// digits that round-trip, written positionally when the decimal point falls
/// within 16 digits (always with a `.`), otherwise in exponent form with a sign
/// and at least two exponent digits (`1e-05`, `1e+16`). Rust's `{:e}` gives the
/// same shortest digits; only the layout differs. JSON has no NaN or infinity,
/// so a `serde_json::Number` never holds one.
fn write_float(out: &mut String, f: f64) {
    let scientific = format!("{:e}", f.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    // Where the decimal point sits relative to the first digit, as CPython counts it.
    let point = exponent + 1;
    if f.is_sign_negative() {
        out.push('-');
    }
    let length = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    if point <= -4 || point > 16 {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    } else if point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
        out.push_str(&digits);
    } else if point >= length {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (point - length) as usize));
        out.push_str(".0");
    } else {
        let (whole, fraction) = digits.split_at(point as usize);
        out.push_str(whole);
        out.push('.');
        out.push_str(fraction);
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_separators_order_and_escapes() {
        let value: Value = serde_json::from_str(r#"{"b": [1, 2.5, null], "a": "é\n😀", "c": true}"#).unwrap();
        assert_eq!(
            dumps_sorted(&value),
            r#"{"a": "\u00e9\n\ud83d\ude00", "b": [1, 2.5, null], "c": true}"#
        );
    }

    #[test]
    fn matches_every_python_known_answer() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/pyjson/pyjson.json");
        let vectors: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() > 20);
        for case in cases {
            let input: Value = serde_json::from_str(case["input"].as_str().unwrap()).unwrap();
            assert_eq!(
                dumps_sorted(&input),
                case["python"].as_str().unwrap(),
                "input {}",
                case["input"]
            );
        }
        let schema = &vectors["schema"];
        let text = schema["schema_json"].as_str().unwrap();
        let parsed: Value = serde_json::from_str(text).unwrap();
        assert_eq!(dumps_sorted(&parsed), text);
        assert_eq!(
            crate::crypto::uagents::schema_digest(&parsed),
            schema["schema_digest"].as_str().unwrap()
        );
    }
}
