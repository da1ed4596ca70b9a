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

/// A protocol document split into its two parts (§8.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document<'a> {
    pub metadata: Metadata,
    pub specification: &'a str,
}

/// Split a document at its `---` line (after an optional leading one, the
/// front-matter layout). Fails when there is no separator or the metadata
/// lacks a key §8.1 requires.
pub fn parse(document: &str) -> Result<Document<'_>, String> {
    let (meta_text, specification) =
        split(document).ok_or("no `---` line separates the metadata from the specification")?;
    let metadata = read_metadata(meta_text);
    for (key, present) in [
        ("name", metadata.name.is_some()),
        ("description", metadata.description.is_some()),
        ("multiround", metadata.multiround.is_some()),
    ] {
        if !present {
            return Err(format!("the metadata has no `{key}`"));
        }
    }
    Ok(Document {
        metadata,
        specification,
    })
}

/// The metadata of either layout; keys that are missing stay `None`.
pub fn metadata(document: &str) -> Metadata {
    match split(document) {
        Some((meta, _)) => read_metadata(meta),
        None => read_metadata(document),
    }
}

/// (metadata text, specification text) around the separating `---` line.
fn split(document: &str) -> Option<(&str, &str)> {
    let body = strip_separator_line(document).unwrap_or(document);
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        if line.trim() == "---" {
            return Some((&body[..offset], &body[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

/// The text after a leading `---` line, if the document starts with one.
fn strip_separator_line(text: &str) -> Option<&str> {
    let first = text.split_inclusive('\n').next()?;
    (first.trim() == "---").then(|| &text[first.len()..])
}

/// The three scalar keys of a YAML mapping, including folded (`>`) and literal
/// (`|`) block scalars, which the reference library's documents use for descriptions.
fn read_metadata(text: &str) -> Metadata {
    let lines: Vec<&str> = text.lines().collect();
    let mut meta = Metadata::default();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if line.starts_with([' ', '\t']) || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let mut value = value.trim().to_string();
        let block = value.starts_with('>') || value.starts_with('|');
        if block || value.is_empty() {
            let mut parts = Vec::new();
            while i < lines.len() && (lines[i].starts_with([' ', '\t']) || lines[i].trim().is_empty()) {
                parts.push(lines[i].trim());
                i += 1;
            }
            let joiner = if value.starts_with('|') { "\n" } else { " " };
            value = parts
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join(joiner);
        } else {
            value = unquote(&value).to_string();
        }
        match key.trim() {
            "name" => meta.name = Some(value),
            "description" => meta.description = Some(value),
            "multiround" => {
                meta.multiround = match value.to_ascii_lowercase().as_str() {
                    "true" | "yes" | "on" => Some(true),
                    "false" | "no" | "off" => Some(false),
                    _ => None,
                }
            }
            _ => {}
        }
    }
    meta
}

fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|rest| rest.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
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

/// Kept here for callers of the Agora module; it lives with the other hashes.
pub use crate::crypto::hash_as_base64;

/// Decode one `protocolSources` entry that is inline: a `data:` URI, or the text
/// itself. `None` means it is a URL to fetch. A decoded document over `limit`
/// bytes is an error, checked before decoding allocates.
pub fn inline_source(source: &str, limit: usize) -> Option<Result<String, String>> {
    let too_large = || format!("a protocol source is over the {limit}-byte limit");
    if let Some(rest) = source.strip_prefix("data:") {
        let Some((header, payload)) = rest.split_once(',') else {
            return Some(Err("a data: URI has no ','".into()));
        };
        let bytes = if header.ends_with(";base64") {
            let payload = payload.trim();
            if payload.len() / 4 * 3 > limit + 3 {
                return Some(Err(too_large()));
            }
            match base64::engine::general_purpose::STANDARD.decode(payload) {
                Ok(bytes) => bytes,
                Err(e) => return Some(Err(format!("a data: URI is not valid base64: {e}"))),
            }
        } else {
            // Every %-escape is 3 bytes of 1 decoded one: a payload this long decodes over the limit.
            if payload.len() > limit.saturating_mul(3) {
                return Some(Err(too_large()));
            }
            match percent_decode(payload) {
                Some(bytes) => bytes,
                None => return Some(Err("a data: URI has a bad %-escape".into())),
            }
        };
        if bytes.len() > limit {
            return Some(Err(too_large()));
        }
        return Some(String::from_utf8(bytes).map_err(|_| "a data: URI is not UTF-8".to_string()));
    }
    if source.starts_with("http://") || source.starts_with("https://") {
        return None;
    }
    if source.len() > limit {
        return Some(Err(too_large()));
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
        assert_eq!(parse(spec).unwrap().specification, "text");
        assert_eq!(parse(front).unwrap().specification, "\ntext");
    }

    #[test]
    fn reads_block_scalars_and_refuses_incomplete_documents() {
        let folded = "---\nname: 'B'\ndescription: >\n  two\n  lines\nmultiround: no\n---\nx";
        let meta = parse(folded).unwrap().metadata;
        assert_eq!(meta.name.as_deref(), Some("B"));
        assert_eq!(meta.description.as_deref(), Some("two lines"));
        assert_eq!(meta.multiround, Some(false));
        assert!(parse("name: A\ndescription: d\nmultiround: true\ntext").is_err());
        assert!(parse("name: A\n---\ntext").unwrap_err().contains("description"));
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
            inline_source("data:text/plain;base64,aGk=", 10).unwrap().unwrap(),
            "hi"
        );
        assert_eq!(
            inline_source("data:text/plain,a%20b", 10).unwrap().unwrap(),
            "a b"
        );
        assert!(inline_source("https://x/y", 10).is_none());
        assert!(inline_source("data:text/plain,aaaaaaaaaaa", 10).unwrap().is_err());
        assert!(inline_source("aaaaaaaaaaa", 10).unwrap().is_err());
    }
}
