//! An Agora plugin that declares `accepts-any-document`: for a request whose
//! `protocolHash` the node does not know, but whose `protocolSources` carry a
//! document hashing to it (spec §8.3), the host verifies the document and
//! hands it over as `{"protocolDocument": …, "body": …}`. This plugin answers
//! with what it read of the document (its §8.1 metadata) and the body it got:
//! a starting point for plugins that interpret documents they have never seen.

use agora_plugin_sdk::prelude::*;

struct ProtocolInspector;

#[derive(Deserialize)]
struct Delivery {
    #[serde(rename = "protocolDocument")]
    protocol_document: String,
    body: Value,
}

/// `key: value` lines of the metadata part, in either layout (with or without a leading `---`).
fn metadata(document: &str) -> Value {
    let mut lines = document.lines().peekable();
    if lines.peek().is_some_and(|line| line.trim() == "---") {
        lines.next();
    }
    let mut fields = serde_json::Map::new();
    for line in lines.take_while(|line| line.trim() != "---") {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        if !["name", "description", "multiround"].contains(&key) || line.starts_with(' ') {
            continue;
        }
        let value = value.trim().trim_matches(['"', '\'']);
        let value = match value {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            text => Value::String(text.to_string()),
        };
        fields.insert(key.to_string(), value);
    }
    Value::Object(fields)
}

impl Plugin for ProtocolInspector {
    fn manifest() -> Manifest {
        Manifest::new("protocol-inspector", env!("CARGO_PKG_VERSION"))
            .description("Accepts any verified protocol document and reports what it read")
            .accepts_any_document()
    }

    fn handle(message: Message) -> Result<String, Failure> {
        let delivery: Delivery = message.json()?;
        let rounds = if message.conversation.is_some() {
            host::history()?
                .iter()
                .filter(|entry| entry.role == "user")
                .count()
                + 1
        } else {
            1
        };
        reply(json!({
            "protocol": metadata(&delivery.protocol_document),
            "protocolHash": message.route,
            "documentBytes": delivery.protocol_document.len(),
            "received": delivery.body,
            "round": rounds,
        }))
    }
}

export_plugin!(ProtocolInspector);
