//! Validation of what a plugin says it serves (`types.manifest` in the WIT).
//!
//! A manifest is untrusted input: every list and string is bounded, names are
//! restricted, JSON schemas must parse, and routing keys are computed here by
//! the host (protocol SHA1s, uAgents schema digests and the protocol digest
//! they make), never taken from the plugin.

use serde::Serialize;

use super::bindings;
use crate::crypto;
use crate::vocab::Risk;

const MAX_NAME: usize = 64;
pub(super) const MAX_TEXT: usize = 4096;
pub(super) const MAX_ITEMS: usize = 64;
const MAX_DOCUMENT: usize = 256 * 1024;
const MAX_SCHEMA: usize = 64 * 1024;

#[derive(Debug, Clone, Serialize)]
pub struct PluginManifest {
    pub name: String,
    pub version: String,
    pub description: String,
    pub protocols: Vec<ProtocolDocument>,
    pub default_agora: bool,
    pub accepts_any_document: bool,
    pub resources: Vec<Resource>,
    pub models: Vec<Model>,
    /// The uAgents protocol digest its models make (each answered by any of
    /// them), `None` without models: computed once here, since every uAgents
    /// reply and the Almanac registration carry it.
    pub uagents_protocol: Option<String>,
    pub leagues: Vec<String>,
    pub assistant: bool,
    pub tools: Vec<ToolSpec>,
    pub instance: InstancePolicy,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProtocolDocument {
    /// SHA1 of the exact document bytes, lower-case hex.
    pub hash: String,
    #[serde(skip)]
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Resource {
    pub name: String,
    pub description: String,
    pub negotiated: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Model {
    pub name: String,
    /// `model:<sha256 hex>` as uAgents computes it.
    pub digest: String,
    #[serde(skip)]
    pub schema: serde_json::Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
    pub risk: Risk,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum InstancePolicy {
    Fresh,
    Warm {
        max_invocations: u32,
        max_concurrency: u32,
        idle_timeout_ms: u32,
    },
}

/// The protocol digest `models` make, as [`PluginManifest::uagents_protocol`] holds it.
pub fn uagents_protocol(models: &[Model]) -> Option<String> {
    if models.is_empty() {
        return None;
    }
    let models: Vec<crypto::uagents::ProtocolModel<'_>> = models
        .iter()
        .map(|m| crypto::uagents::ProtocolModel {
            digest: &m.digest,
            schema: &m.schema,
        })
        .collect();
    Some(crypto::uagents::answering_protocol_digest(&models))
}

pub(super) fn check_name(what: &str, name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{what} {name:?} must be 1-{MAX_NAME} characters of a-z, 0-9, - _ . : /"
        ))
    }
}

pub(super) fn check_text(what: &str, text: &str, max: usize) -> Result<(), String> {
    if text.len() > max {
        Err(format!("{what} is longer than {max} bytes"))
    } else {
        Ok(())
    }
}

fn check_count(what: &str, count: usize) -> Result<(), String> {
    if count > MAX_ITEMS {
        Err(format!("more than {MAX_ITEMS} {what}"))
    } else {
        Ok(())
    }
}

fn parse_schema(what: &str, text: &str) -> Result<serde_json::Value, String> {
    check_text(what, text, MAX_SCHEMA)?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("{what} is not valid JSON: {e}"))?;
    if !value.is_object() {
        return Err(format!("{what} must be a JSON object"));
    }
    Ok(value)
}

impl PluginManifest {
    pub fn validate(raw: bindings::Manifest) -> Result<PluginManifest, String> {
        check_name("plugin name", &raw.name)?;
        check_text("version", &raw.version, MAX_NAME)?;
        if raw.version.is_empty() {
            return Err("version is empty".into());
        }
        check_text("description", &raw.description, MAX_TEXT)?;
        check_count("protocol documents", raw.protocols.len())?;
        check_count("resources", raw.resources.len())?;
        check_count("models", raw.models.len())?;
        check_count("leagues", raw.leagues.len())?;
        check_count("tools", raw.tools.len())?;

        let mut protocols = Vec::new();
        for text in raw.protocols {
            check_text("protocol document", &text, MAX_DOCUMENT)?;
            if text.trim().is_empty() {
                return Err("a protocol document is empty".into());
            }
            protocols.push(ProtocolDocument {
                hash: crypto::protocol_hash(text.as_bytes()),
                text,
            });
        }
        let mut resources = Vec::new();
        for resource in raw.resources {
            check_name("resource", &resource.name)?;
            check_text("resource description", &resource.description, MAX_TEXT)?;
            resources.push(Resource {
                name: resource.name,
                description: resource.description,
                negotiated: resource.negotiated,
            });
        }
        let mut models = Vec::new();
        for model in raw.models {
            check_name("model", &model.name)?;
            let schema = parse_schema(&format!("schema of model {}", model.name), &model.schema)?;
            let digest = crypto::uagents::schema_digest(&schema);
            models.push(Model {
                name: model.name,
                digest,
                schema,
            });
        }
        for league in &raw.leagues {
            check_name("league", league)?;
        }
        let mut tools = Vec::new();
        for tool in raw.tools {
            check_name("tool", &tool.name)?;
            check_text("tool description", &tool.description, MAX_TEXT)?;
            let parameters = parse_schema(&format!("parameters of tool {}", tool.name), &tool.parameters)?;
            tools.push(ToolSpec {
                name: tool.name,
                description: tool.description,
                parameters,
                risk: tool.risk.into(),
            });
        }
        let instance = match raw.instance {
            bindings::InstancePolicy::Fresh => InstancePolicy::Fresh,
            bindings::InstancePolicy::Warm(pool) => {
                if pool.max_concurrency == 0 || pool.max_invocations == 0 {
                    return Err("a warm pool needs max-invocations and max-concurrency above 0".into());
                }
                InstancePolicy::Warm {
                    max_invocations: pool.max_invocations,
                    max_concurrency: pool.max_concurrency.min(64),
                    idle_timeout_ms: pool.idle_timeout_ms,
                }
            }
        };
        Ok(PluginManifest {
            name: raw.name,
            version: raw.version,
            description: raw.description,
            protocols,
            default_agora: raw.default_agora,
            accepts_any_document: raw.accepts_any_document,
            resources,
            uagents_protocol: uagents_protocol(&models),
            models,
            leagues: raw.leagues,
            assistant: raw.assistant,
            tools,
            instance,
        })
    }

    /// Every routing key this plugin claims, as `kind:key` (for conflicts and /health).
    pub fn routes(&self) -> Vec<String> {
        let mut routes = Vec::new();
        routes.extend(self.protocols.iter().map(|p| format!("agora:{}", p.hash)));
        if self.default_agora {
            routes.push("agora:default".into());
        }
        if self.accepts_any_document {
            routes.push("agora:any-document".into());
        }
        routes.extend(self.resources.iter().map(|r| format!("envelope:{}", r.name)));
        routes.extend(self.models.iter().map(|m| format!("uagents:{}", m.digest)));
        routes.extend(self.leagues.iter().map(|l| format!("arena:{l}")));
        if self.assistant {
            routes.push("hai:assistant".into());
        }
        routes.extend(self.tools.iter().map(|t| format!("tool:{}", t.name)));
        routes
    }
}
