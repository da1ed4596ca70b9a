//! Protocol documents (Agora two-party §8): YAML-ish metadata and a free-form
//! specification separated by a `---` line. Both layouts are accepted: the
//! spec's (metadata, `---`, text) and the reference library's front matter
//! (`---`, metadata, `---`, text). The hash is always over the exact bytes.

use base64::Engine as _;

/// What the metadata says. Only the keys Agora requires are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    pub name: Option<String>,
    pub description: Option<String>,
    pub multiround: Option<bool>,
}

pub fn metadata(document: &str) -> Metadata {
    let mut lines = document.lines().peekable();
    // Front-matter layout: skip a leading `---` line.
    if lines.peek().is_some_and(|line| line.trim() == "---") {
        lines.next();
    }
    let mut meta = Metadata::default();
    for line in lines {
        if line.trim() == "---" {
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .to_string();
        match key.trim() {
            "name" => meta.name = Some(value),
            "description" => meta.description = Some(value),
            "multiround" => {
                meta.multiround = matches!(value.to_ascii_lowercase().as_str(), "true" | "yes")
                    .then_some(true)
                    .or(Some(false))
            }
            _ => {}
        }
    }
    meta
}

/// A `protocolHash` as 40 hex digits (the spec) or base64 of the 20-byte digest
/// (agora-protocol 0.2.0), normalised to lower-case hex.
pub fn normalise_hash(hash: &str) -> Option<String> {
    if hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(hash.to_ascii_lowercase());
    }
    let engines = [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines
        .into_iter()
        .find_map(|engine| engine.decode(hash).ok())
        .filter(|digest| digest.len() == 20)
        .map(hex::encode)
}

/// The base64 form agora-protocol 0.2.0 uses for a hex hash.
pub fn hash_as_base64(hex_hash: &str) -> Option<String> {
    hex::decode(hex_hash)
        .ok()
        .map(|digest| base64::engine::general_purpose::STANDARD.encode(digest))
}

/// Decode one `protocolSources` entry that is inline: a `data:` URI, or the text itself.
/// `None` means it is a URL to fetch.
pub fn inline_source(source: &str) -> Option<Result<String, String>> {
    if let Some(rest) = source.strip_prefix("data:") {
        let Some((header, payload)) = rest.split_once(',') else {
            return Some(Err("a data: URI has no ','".into()));
        };
        let bytes = if header.ends_with(";base64") {
            match base64::engine::general_purpose::STANDARD.decode(payload.trim()) {
                Ok(bytes) => bytes,
                Err(e) => return Some(Err(format!("a data: URI is not valid base64: {e}"))),
            }
        } else {
            match percent_decode(payload) {
                Some(bytes) => bytes,
                None => return Some(Err("a data: URI has a bad %-escape".into())),
            }
        };
        return Some(String::from_utf8(bytes).map_err(|_| "a data: URI is not UTF-8".to_string()));
    }
    if source.starts_with("http://") || source.starts_with("https://") {
        return None;
    }
    Some(Ok(source.to_string()))
}

fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_layouts() {
        let spec = "name: A\ndescription: d\nmultiround: true\n---\ntext";
        let front = "---\nname: A\ndescription: d\nmultiround: true\n---\n\ntext";
        assert_eq!(metadata(spec), metadata(front));
        assert_eq!(metadata(spec).multiround, Some(true));
    }

    #[test]
    fn hashes_normalise_from_hex_and_base64() {
        let hex_hash = crate::crypto::protocol_hash(b"doc");
        let b64 = hash_as_base64(&hex_hash).unwrap();
        assert_eq!(normalise_hash(&b64).unwrap(), hex_hash);
        assert_eq!(normalise_hash(&hex_hash.to_uppercase()).unwrap(), hex_hash);
        assert_eq!(normalise_hash("nope"), None);
    }

    #[test]
    fn data_uris_decode() {
        assert_eq!(
            inline_source("data:text/plain;base64,aGk=")
                .unwrap()
                .unwrap(),
            "hi"
        );
        assert_eq!(
            inline_source("data:text/plain,a%20b").unwrap().unwrap(),
            "a b"
        );
        assert!(inline_source("https://x/y").is_none());
    }
}
