//! uAgents digests (uagents-core 0.4.12): model schema digests and protocol digests.

use serde_json::Value;

use super::{pyjson, sha256_hex};

/// `model:` + SHA-256 hex of the model's JSON schema as Python dumps it with sorted keys.
pub fn schema_digest(schema: &Value) -> String {
    format!(
        "model:{}",
        sha256_hex(pyjson::dumps_sorted(schema).as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_digests_match_the_library_vectors() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/vectors/uagents_envelope.json"
        );
        let vectors: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let cases = vectors["schema_digests"].as_array().unwrap();
        assert!(!cases.is_empty());
        for case in cases {
            let schema: Value =
                serde_json::from_str(case["schema_json"].as_str().unwrap()).unwrap();
            assert_eq!(
                schema_digest(&schema),
                case["schema_digest"].as_str().unwrap(),
                "{}",
                case["model"]
            );
        }
    }
}
