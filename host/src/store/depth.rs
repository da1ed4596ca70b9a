//! How deep a JSON document nests, and how deep the store can read one back.
//!
//! The store reads every record back with serde_json, whose recursion limit
//! refuses a document nesting 128 levels or more: a record written deeper would
//! be kept, yet every read of it would fail until it expired. So the store
//! refuses to write one ([`super::Store`]'s writes check [`MAX_STORED_DEPTH`]),
//! and a transport that stores what a client sent measures the client's JSON at
//! the door against the same number less the levels its own record wraps
//! around that JSON, to refuse it in its own protocol's words: the input limit
//! and the store's read limit are one number, pinned to serde_json by the test
//! below. The measure reads bytes, not a parsed value, so a document too deep
//! for serde_json is still measured (and refused with the transport's own
//! error, not a parse error).

/// The deepest JSON document the store reads back (serde_json refuses the 128th level).
pub const MAX_STORED_DEPTH: usize = 127;

/// How many arrays and objects `json` opens inside one another at its deepest
/// (`1` is 0, `{}` 1, `[{"a": []}]` 3); brackets inside strings do not count.
/// For text that is not JSON the answer means nothing, but is still bounded by its length.
pub fn depth(json: &[u8]) -> usize {
    let mut open = 0usize;
    let mut deepest = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in json {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                open += 1;
                deepest = deepest.max(open);
            }
            b']' | b'}' => open = open.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::store::{Collection, Store};

    fn nested(levels: usize) -> Value {
        (1..levels).fold(json!({}), |inner, _| json!({ "n": inner }))
    }

    #[test]
    fn depth_counts_the_arrays_and_objects_open_at_once() {
        for (json, expected) in [
            (r#"1"#, 0),
            (r#""[{""#, 0),
            (r#"{}"#, 1),
            (r#"[[], [], {"a": {}}]"#, 3),
            (r#"[{"a": []}]"#, 3),
            (r#"{"a": "}}}]]]\"{{{{{", "b": [1]}"#, 2),
            (r#"{"a\\": [[1]]}"#, 3),
        ] {
            assert_eq!(depth(json.as_bytes()), expected, "{json}");
        }
    }

    #[test]
    fn nested_values_have_the_depth_asked_for() {
        for levels in [1, 2, 5, 40] {
            assert_eq!(depth(nested(levels).to_string().as_bytes()), levels);
        }
    }

    /// The limit is serde_json's, as the store meets it: a record exactly
    /// `MAX_STORED_DEPTH` deep reads back; one level deeper would be unreadable
    /// (serde_json refuses it), so the store refuses to write it.
    #[tokio::test]
    async fn the_store_reads_back_exactly_max_stored_depth_and_writes_nothing_deeper() {
        let store = Store::temporary().unwrap();
        let deepest = nested(MAX_STORED_DEPTH);
        store
            .put(Collection::A2aTasks, b"deepest", &deepest, None)
            .await
            .unwrap();
        let read: Option<Value> = store.get(Collection::A2aTasks, b"deepest").await.unwrap();
        assert_eq!(read, Some(deepest));

        let too_deep = nested(MAX_STORED_DEPTH + 1);
        let text = too_deep.to_string();
        assert!(
            serde_json::from_str::<Value>(&text).is_err(),
            "serde_json reads one level deeper: the limit moved"
        );
        let refused = store
            .put(Collection::A2aTasks, b"too-deep", &too_deep, None)
            .await
            .unwrap_err();
        assert!(refused.is_quota(), "{refused}");
        assert_eq!(
            store
                .get::<Value>(Collection::A2aTasks, b"too-deep")
                .await
                .unwrap(),
            None
        );
        assert!(store.append_history("h", &too_deep, 10).await.is_err());
    }
}
