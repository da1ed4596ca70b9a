//! The messages of the uAgents Exchange protocol ("Envelopes"), as uagents 0.26.1
//! writes them: what the node accepts of an envelope beyond its signature
//! (the digest policy in the module doc), the reply a plugin's answer becomes
//! (its model, `ErrorMessage` for a failure), the protocol digest a plugin
//! advertises, and the signed reply envelope.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rand::RngCore;
use serde_json::{Value, json};

use super::error::SubmitError;
use crate::config::Config;
use crate::crypto::uagents::{self as ucrypto, AgentIdentity, Envelope};
use crate::runtime::InvokeError;
use crate::runtime::manifest::PluginManifest;
use crate::store::now_ms;

pub(super) fn now_secs() -> u64 {
    now_ms() / 1000
}

/// pydantic's schema of uagents-core's `ErrorMessage`, and its digest.
pub const ERROR_MESSAGE_SCHEMA: &str = r#"{"description": "Error message model", "properties": {"error": {"title": "Error", "type": "string"}}, "required": ["error"], "title": "ErrorMessage", "type": "object"}"#;
pub const ERROR_MESSAGE_DIGEST: &str =
    "model:94cb082f79871c5e80a20637f935d233f0ce11a135d5a3a3c6071e81102a84d5";
/// Lifetime of the envelopes the node sends.
pub const REPLY_TTL_SECS: u64 = 60;

/// A reply to send: model digest and message JSON.
pub(super) struct ReplyMessage {
    pub(super) schema_digest: String,
    pub(super) json: String,
    pub(super) protocol_digest: Option<String>,
}

/// Refuse what uagents never sends and what would make the digest ambiguous (module doc).
pub(super) fn check_policy(config: &Config, envelope: &Envelope, now: u64) -> Result<(), SubmitError> {
    if !ucrypto::is_model_digest(&envelope.schema_digest) {
        return Err(SubmitError::BadSchemaDigest);
    }
    match envelope.expires {
        Some(expires) if expires < now => Err(SubmitError::Expired),
        Some(expires) if expires - now > config.uagents.max_expiry_secs => {
            Err(SubmitError::ExpiresTooLate(config.uagents.max_expiry_secs))
        }
        Some(_) => Ok(()),
        None if config.uagents.require_expires => Err(SubmitError::NoExpiry),
        None => Ok(()),
    }
}

pub(super) fn empty_ok() -> Response {
    (StatusCode::OK, axum::Json(json!({}))).into_response()
}

/// What a plugin failure tells the sender (internal details stay in the log).
pub(super) fn invoke_error_text(error: &InvokeError) -> String {
    match error {
        InvokeError::Failure { message, .. } => message.clone(),
        InvokeError::Timeout => "the handler took too long".into(),
        _ => "the handler failed".into(),
    }
}

pub(super) fn error_message(text: &str) -> ReplyMessage {
    ReplyMessage {
        schema_digest: ERROR_MESSAGE_DIGEST.to_string(),
        json: json!({ "error": text }).to_string(),
        protocol_digest: None,
    }
}

/// Turn a plugin's JSON text into the reply message (see the module doc).
pub(super) fn plugin_reply(
    manifest: &PluginManifest,
    request_digest: &str,
    text: &str,
) -> Option<ReplyMessage> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return None;
    }
    let fail = |why: &str| {
        tracing::warn!(transport = "uagents", plugin = %manifest.name, why, "unusable plugin reply");
        Some(error_message("the handler failed"))
    };
    let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(trimmed) else {
        return fail("the reply is not a JSON object");
    };
    let schema_digest = match fields.remove("@model") {
        None => request_digest.to_string(),
        Some(Value::String(name)) => match manifest.models.iter().find(|m| m.name == name) {
            Some(model) => model.digest.clone(),
            None => return fail("the reply names a model the plugin did not declare"),
        },
        Some(_) => return fail("\"@model\" must be a model name"),
    };
    Some(ReplyMessage {
        schema_digest,
        json: Value::Object(fields).to_string(),
        protocol_digest: manifest.uagents_protocol.clone(),
    })
}

/// A new envelope from the node to the request's sender, same session, signed.
pub(super) fn sign_reply(identity: &AgentIdentity, request: &Envelope, reply: ReplyMessage) -> Envelope {
    let mut envelope = Envelope {
        version: 1,
        sender: identity.address().to_string(),
        target: request.sender.clone(),
        session: request.session.clone(),
        schema_digest: reply.schema_digest,
        protocol_digest: reply.protocol_digest,
        payload: None,
        expires: Some(now_secs() + REPLY_TTL_SECS),
        nonce: Some(rand::rngs::OsRng.next_u64()),
        signature: None,
    };
    envelope.encode_payload(&reply.json);
    envelope.sign(identity);
    envelope
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_with(models: &[(&str, &str)]) -> PluginManifest {
        let models: Vec<crate::runtime::manifest::Model> = models
            .iter()
            .map(|(name, schema)| {
                let schema: Value = serde_json::from_str(schema).unwrap();
                crate::runtime::manifest::Model {
                    name: name.to_string(),
                    digest: ucrypto::schema_digest(&schema),
                    schema,
                }
            })
            .collect();
        PluginManifest {
            name: "test".into(),
            version: "1".into(),
            description: String::new(),
            protocols: Vec::new(),
            default_agora: false,
            accepts_any_document: false,
            resources: Vec::new(),
            uagents_protocol: crate::runtime::manifest::uagents_protocol(&models),
            models,
            leagues: Vec::new(),
            assistant: false,
            tools: Vec::new(),
            instance: crate::runtime::manifest::InstancePolicy::Fresh,
        }
    }

    const MESSAGE_SCHEMA: &str = r#"{"properties": {"text": {"title": "Text", "type": "string"}}, "required": ["text"], "title": "Message", "type": "object"}"#;

    #[test]
    fn plugin_replies_use_the_request_model_or_the_named_one() {
        let manifest = manifest_with(&[
            ("Message", MESSAGE_SCHEMA),
            ("ErrorMessage", ERROR_MESSAGE_SCHEMA),
        ]);
        let request = manifest.models[0].digest.clone();
        assert!(plugin_reply(&manifest, &request, "").is_none());
        assert!(plugin_reply(&manifest, &request, " null ").is_none());

        let same = plugin_reply(&manifest, &request, r#"{"text": "a"}"#).unwrap();
        assert_eq!(same.schema_digest, request);
        assert_eq!(same.json, r#"{"text":"a"}"#);
        assert_eq!(same.protocol_digest, manifest.uagents_protocol);

        let named = plugin_reply(
            &manifest,
            &request,
            r#"{"@model": "ErrorMessage", "error": "no"}"#,
        )
        .unwrap();
        assert_eq!(named.schema_digest, ERROR_MESSAGE_DIGEST);
        assert_eq!(named.json, r#"{"error":"no"}"#);

        for bad in [
            r#"{"@model": "Nope", "x": 1}"#,
            r#"{"@model": 3}"#,
            "[1]",
            "\"text\"",
            "not json",
        ] {
            let reply = plugin_reply(&manifest, &request, bad).unwrap();
            assert_eq!(reply.schema_digest, ERROR_MESSAGE_DIGEST, "{bad}");
            assert_eq!(reply.json, r#"{"error":"the handler failed"}"#);
        }
    }

    #[test]
    fn the_echo_plugins_protocol_digest_is_the_librarys() {
        // The digest uagents computes for Protocol(interactions={Message: {Message}}).
        assert_eq!(
            manifest_with(&[("Message", MESSAGE_SCHEMA)])
                .uagents_protocol
                .as_deref(),
            Some("proto:7053d1150aeb4ab2321419183c1d414acf35781830eaed0d6ce54bde8dc9ddc3")
        );
    }

    #[test]
    fn error_message_digest_is_the_models_schema_digest() {
        let schema: Value = serde_json::from_str(ERROR_MESSAGE_SCHEMA).unwrap();
        assert_eq!(ucrypto::schema_digest(&schema), ERROR_MESSAGE_DIGEST);
    }
}
