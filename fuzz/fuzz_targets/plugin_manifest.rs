//! Plugin manifests: what a plugin's `manifest()` export returns is checked by
//! `PluginManifest::validate` before anything is routed to it (the plugin is
//! untrusted). The component model hands the host a typed record, so the input
//! here is that record: JSON of the shape below when the input is such JSON
//! (the committed seeds are), otherwise the bytes drive `arbitrary`.
//!
//! The same input, as text, is also a plugin's capabilities (the optional
//! `extensions` export's JSON, `Capabilities::parse`): just as untrusted.
//!
//! Invariants: nothing panics; an accepted manifest keeps the bounds it was
//! checked against and claims one route per thing it declares; accepted
//! capabilities schedule nothing more often than once a second.
#![no_main]

use agora_node::runtime::PluginManifest;
use agora_node::runtime::capabilities::{Capabilities, MIN_INTERVAL, When};
use agora_node::runtime::bindings::agora::node::types as wit;
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize, Arbitrary)]
#[serde(default)]
struct Manifest {
    name: String,
    version: String,
    description: String,
    protocols: Vec<String>,
    default_agora: bool,
    accepts_any_document: bool,
    resources: Vec<Resource>,
    models: Vec<Model>,
    leagues: Vec<String>,
    assistant: bool,
    tools: Vec<Tool>,
    /// `None` is `fresh`; `[max-invocations, max-concurrency, idle-timeout-ms]` is `warm`.
    warm: Option<[u32; 3]>,
}

#[derive(Debug, Default, Deserialize, Arbitrary)]
#[serde(default)]
struct Resource {
    name: String,
    description: String,
    negotiated: bool,
}

#[derive(Debug, Default, Deserialize, Arbitrary)]
#[serde(default)]
struct Model {
    name: String,
    schema: String,
}

#[derive(Debug, Default, Deserialize, Arbitrary)]
#[serde(default)]
struct Tool {
    name: String,
    description: String,
    parameters: String,
    /// 0-3: low, medium, high, critical.
    risk: u8,
}

impl Manifest {
    fn into_wit(self) -> wit::Manifest {
        wit::Manifest {
            name: self.name,
            version: self.version,
            description: self.description,
            protocols: self.protocols,
            default_agora: self.default_agora,
            accepts_any_document: self.accepts_any_document,
            resources: self
                .resources
                .into_iter()
                .map(|r| wit::EnvelopeResource {
                    name: r.name,
                    description: r.description,
                    negotiated: r.negotiated,
                })
                .collect(),
            models: self
                .models
                .into_iter()
                .map(|m| wit::MessageModel {
                    name: m.name,
                    schema: m.schema,
                })
                .collect(),
            leagues: self.leagues,
            assistant: self.assistant,
            tools: self
                .tools
                .into_iter()
                .map(|t| wit::Tool {
                    name: t.name,
                    description: t.description,
                    parameters: t.parameters,
                    risk: match t.risk % 4 {
                        0 => wit::Risk::Low,
                        1 => wit::Risk::Medium,
                        2 => wit::Risk::High,
                        _ => wit::Risk::Critical,
                    },
                })
                .collect(),
            instance: match self.warm {
                None => wit::InstancePolicy::Fresh,
                Some([max_invocations, max_concurrency, idle_timeout_ms]) => {
                    wit::InstancePolicy::Warm(wit::WarmPool {
                        max_invocations,
                        max_concurrency,
                        idle_timeout_ms,
                    })
                }
            },
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(capabilities) = Capabilities::parse(text)
    {
        for schedule in &capabilities.schedules {
            if let When::Interval(interval) = schedule.when {
                assert!(interval >= MIN_INTERVAL);
            }
        }
    }
    let raw = match serde_json::from_slice::<Manifest>(data) {
        Ok(raw) => raw,
        Err(_) => match Manifest::arbitrary_take_rest(Unstructured::new(data)) {
            Ok(raw) => raw,
            Err(_) => return,
        },
    };
    let Ok(manifest) = PluginManifest::validate(raw.into_wit()) else {
        return;
    };
    assert!(!manifest.version.is_empty());
    let declared = manifest.protocols.len()
        + usize::from(manifest.default_agora)
        + usize::from(manifest.accepts_any_document)
        + manifest.resources.len()
        + manifest.models.len()
        + manifest.leagues.len()
        + usize::from(manifest.assistant)
        + manifest.tools.len();
    assert_eq!(manifest.routes().len(), declared);
    for model in &manifest.models {
        assert!(model.schema.is_object());
        assert_eq!(model.digest.len(), "model:".len() + 64);
    }
});
