//! The protocol documents the node's plugins serve, as MCP resources
//! (§"Server Features" → "Resources"): `resources/list`, `resources/read`
//! and `resources/templates/list`, and what `notifications/resources/list_changed`
//! compares after a hot reload.
//!
//! **Why these.** A document is what an Agora peer negotiates over and what a
//! model needs to read before it calls a protocol: MCP resources are made for
//! exactly that. Each document is one resource, named by its content:
//! `agora://protocols/<sha1>`, the SHA1 of its exact bytes (the hash Agora
//! peers send as `protocolHash`), so a URI never names two texts and a client
//! may keep what it read for as long as it likes. `resources/read` answers the
//! bytes as loaded, as `text/markdown` unless the plugin declares another media
//! type for it (its capabilities' `documents`; when several plugins serve one
//! document, the first by file name that declares one is shown).
//!
//! **Bounds.** A document is at most 256 KiB and a plugin has at most 64 (the
//! manifest's bounds, checked at load); a `resources/list` page holds
//! `mcp.page_size` entries without their texts; a read answers one document.
//!
//! An unknown or malformed URI is `-32602` with "Unknown resource", as the `mcp`
//! package's own server answers it (the 2025-11-25 text suggests `-32002`,
//! which the 2026-07-28 revision retires; clients act on either the same way).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::error::McpError;
use super::state::Shared;
use super::wire;
use crate::jsonrpc::Faults;
use crate::runtime::Registry;
use crate::transports::agora::document;

/// Where every document's URI starts; the rest is its SHA1 in lower-case hex.
pub const URI_PREFIX: &str = "agora://protocols/";
/// The media type of a document no plugin declares one for: Agora protocol documents are Markdown.
const MIME_TYPE: &str = "text/markdown";

/// One document and the plugins that serve it (several may carry the same text).
struct Listed<'a> {
    text: &'a str,
    plugins: Vec<&'a str>,
    /// What a plugin serving it declares, else [`MIME_TYPE`].
    mime_type: &'a str,
}

/// Every document the loaded plugins serve, by hash (the order pages follow).
fn listed_documents(registry: &Registry) -> BTreeMap<&str, Listed<'_>> {
    let mut documents: BTreeMap<&str, Listed<'_>> = BTreeMap::new();
    for plugin in registry.plugins() {
        for protocol in &plugin.manifest.protocols {
            let declared = plugin.capabilities.document_mime_type(&protocol.hash);
            let listed = documents.entry(protocol.hash.as_str()).or_insert_with(|| Listed {
                text: &protocol.text,
                plugins: Vec::new(),
                mime_type: MIME_TYPE,
            });
            listed.plugins.push(&plugin.manifest.name);
            if let (Some(declared), true) = (declared, listed.mime_type == MIME_TYPE) {
                listed.mime_type = declared;
            }
        }
    }
    documents
}

fn describe(hash: &str, listed: &Listed<'_>) -> Value {
    let metadata = document::metadata(listed.text);
    let name = metadata
        .name
        .unwrap_or_else(|| format!("Agora protocol {}", &hash[..hash.len().min(12)]));
    let mut resource = json!({
        "uri": format!("{URI_PREFIX}{hash}"),
        "name": name,
        "mimeType": listed.mime_type,
        "size": listed.text.len(),
        "_meta": {"agora-node/plugins": listed.plugins},
    });
    if let Some(description) = metadata.description {
        resource["description"] = json!(description);
    }
    resource
}

/// One page of `resources/list`: documents whose hash sorts after `cursor`,
/// and the cursor of the next page (the last hash of this one).
pub fn list_page(shared: &Shared, cursor: Option<&str>) -> Value {
    let registry = shared.node.runtime.registry();
    let documents = listed_documents(&registry);
    wire::page(
        "resources",
        documents.iter().map(|(hash, listed)| (*hash, (*hash, listed))),
        cursor,
        shared.node.config.mcp.page_size,
        |(hash, listed)| describe(hash, listed),
    )
}

/// `resources/templates/list`: the one shape of a document's URI, so a client
/// that learned a hash elsewhere (an Agora peer's `protocolHash`) can read it.
pub fn templates() -> Value {
    json!({"resourceTemplates": [{
        "uriTemplate": format!("{URI_PREFIX}{{sha1}}"),
        "name": "Agora protocol document",
        "description": "A protocol document this node serves, by the SHA1 of its exact bytes (lower-case hex).",
        "mimeType": MIME_TYPE,
    }]})
}

/// `resources/read`: the document's exact text.
pub fn read(shared: &Shared, uri: &str) -> Result<Value, McpError> {
    let registry = shared.node.runtime.registry();
    let unknown = || {
        McpError::invalid_params(format!(
            "Unknown resource: {:?} (resources/list lists this node's)",
            uri.chars().take(160).collect::<String>()
        ))
    };
    let hash = uri.strip_prefix(URI_PREFIX).ok_or_else(unknown)?;
    let documents = listed_documents(&registry);
    let listed = documents.get(hash).ok_or_else(unknown)?;
    Ok(json!({"contents": [{
        "uri": uri,
        "mimeType": listed.mime_type,
        "text": listed.text,
    }]}))
}

/// A hash of what `resources/list` shows, to tell whether a hot reload changed it.
pub fn listing_fingerprint(registry: &Registry) -> String {
    let listing: Vec<Value> = listed_documents(registry)
        .iter()
        .map(|(hash, listed)| describe(hash, listed))
        .collect();
    crate::crypto::sha256_hex(Value::Array(listing).to_string().as_bytes())
}
