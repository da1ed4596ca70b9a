//! The host functions of the `agora:node/host` interface.
//!
//! Each is a policy the host enforces rather than trusts a plugin with: the
//! key-value store is namespaced and bounded (and absent while a manifest is
//! read; its writes join the request's unit of work when the transport gave
//! one, [`crate::store::UnitOfWork`], committed with the request's own or
//! before anything leaves the call), events are counted and sized and may not use the host's own kinds,
//! logging is bounded per call, history is read one bounded page at a time,
//! tools run through [`super::Runtime::run_tool`] (which demands approval by risk and
//! parks the caller), and outbound calls reach only hosts allowed in config
//! (the caller parked while they run, when a parking place is free).

use serde_json::Value;

use super::bindings::agora::node::host::{self, Level, OutboundRequest};
use super::bindings::agora::node::types;
use super::error::ToolError;
use super::events::{PluginEvent, is_reserved_kind};
use super::instance::PluginState;
use crate::peers::outbound;
use crate::store::{Collection, UnitOfWork, now_ms, plugin_key};
use crate::vocab::TransportKind;

impl types::Host for PluginState {}

impl host::Host for PluginState {
    async fn log(&mut self, level: Level, message: String) {
        let limits = &self.host.config;
        let message = truncate(&message, 4096);
        let budget = &mut self.log;
        if budget.lines >= limits.max_log_lines_per_call
            || budget.bytes.saturating_add(message.len()) > limits.max_log_bytes_per_call
        {
            // Counted, and reported once when the call ends (`drain_stdio`).
            budget.dropped = budget.dropped.saturating_add(1);
            return;
        }
        budget.lines += 1;
        budget.bytes += message.len();
        let message = super::settings::redact(message, &self.secrets_read);
        let plugin = &*self.plugin_name;
        match level {
            Level::Trace => tracing::trace!(target: "plugin", plugin, "{message}"),
            Level::Debug => tracing::debug!(target: "plugin", plugin, "{message}"),
            Level::Info => tracing::info!(target: "plugin", plugin, "{message}"),
            Level::Warn => tracing::warn!(target: "plugin", plugin, "{message}"),
            Level::Error => tracing::error!(target: "plugin", plugin, "{message}"),
        }
    }

    async fn kv_get(&mut self, key: String) -> Option<Vec<u8>> {
        if key.len() > self.host.config.max_kv_key_bytes {
            return None;
        }
        let full = plugin_key(self.kv_namespace.as_deref()?, &key);
        let value = match &self.exchange.unit {
            Some(unit) => unit.get::<Vec<u8>>(Collection::PluginKv, &full).await,
            None => self.host.store.get::<Vec<u8>>(Collection::PluginKv, &full).await,
        };
        value.ok().flatten()
    }

    async fn kv_set(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
        let limits = &self.host.config;
        if key.is_empty() || key.len() > limits.max_kv_key_bytes {
            return Err(format!("keys must be 1-{} bytes", limits.max_kv_key_bytes));
        }
        if value.len() > limits.max_kv_value_bytes {
            return Err(format!(
                "values are limited to {} bytes",
                limits.max_kv_value_bytes
            ));
        }
        let full = plugin_key(self.kv_namespace()?, &key);
        if let Some(unit) = &self.exchange.unit {
            return unit
                .put(Collection::PluginKv, &full, &value, None)
                .await
                .map_err(|e| e.to_string());
        }
        self.host
            .store
            .put(Collection::PluginKv, &full, &value, None)
            .await
            .map_err(|e| e.to_string())?;
        self.host.store.commit().await.map_err(|e| e.to_string())
    }

    async fn kv_delete(&mut self, key: String) -> Result<(), String> {
        let full = plugin_key(self.kv_namespace()?, &key);
        if let Some(unit) = &self.exchange.unit {
            return unit
                .remove(Collection::PluginKv, &full)
                .await
                .map_err(|e| e.to_string());
        }
        self.host
            .store
            .remove(Collection::PluginKv, &full)
            .await
            .map_err(|e| e.to_string())?;
        self.host.store.commit().await.map_err(|e| e.to_string())
    }

    async fn kv_keys(&mut self, prefix: String, limit: u32) -> Vec<String> {
        let Some(name) = self.kv_namespace.as_deref() else {
            return Vec::new();
        };
        let namespace = plugin_key(name, "");
        let full = plugin_key(name, &prefix);
        let limit = (limit as usize).min(1000);
        let keys = match &self.exchange.unit {
            Some(unit) => unit.keys(Collection::PluginKv, &full, limit).await,
            None => self.host.store.keys(Collection::PluginKv, &full, limit).await,
        };
        keys.unwrap_or_default()
            .into_iter()
            .map(|key| String::from_utf8_lossy(&key[namespace.len()..]).into_owned())
            .collect()
    }

    async fn now_ms(&mut self) -> u64 {
        now_ms()
    }

    async fn emit(&mut self, kind: String, data: String) -> Result<(), String> {
        let limits = &self.host.config;
        if self.events_emitted >= limits.max_events_per_call {
            return Err(format!("at most {} events per call", limits.max_events_per_call));
        }
        if kind.is_empty() || kind.len() > 64 {
            return Err("event kind must be 1-64 bytes".into());
        }
        if self.exchange.tool_depth > 0 {
            return Err("a tool called by a plugin has no event channel of its own".into());
        }
        if is_reserved_kind(&kind) {
            return Err(format!("event kind {kind:?} is reserved for the host"));
        }
        if data.len() > limits.max_event_bytes {
            return Err(format!("events are limited to {} bytes", limits.max_event_bytes));
        }
        let data: Value = serde_json::from_str(&data).map_err(|e| format!("event data is not JSON: {e}"))?;
        commit_before_it_leaves(self.exchange.unit.as_ref()).await?;
        self.events_emitted += 1;
        self.exchange.send(PluginEvent { kind, data }).await
    }

    async fn call_tool(&mut self, name: String, arguments: String) -> Result<String, String> {
        let arguments: Value =
            serde_json::from_str(&arguments).map_err(|e| format!("tool arguments are not JSON: {e}"))?;
        let Some(runtime) = super::Runtime::from_weak(&self.runtime) else {
            return Err(ToolError::ShuttingDown.to_string());
        };
        commit_before_it_leaves(self.exchange.unit.as_ref()).await?;
        runtime
            .run_tool(&name, arguments, &self.exchange, &mut self.slot)
            .await
            .map_err(|e| e.to_string())
    }

    /// The most recent entries within `store.history_page_entries` and
    /// `store.history_page_bytes`, oldest first: never a whole history, which
    /// a long conversation of large rounds would make hundreds of MB.
    async fn history(&mut self) -> String {
        let Some(id) = &self.exchange.history_id else {
            return "[]".into();
        };
        let bounds = &self.host.node_config.store;
        let entries: Vec<Value> = self
            .host
            .store
            .history_tail(id, bounds.history_page_entries, bounds.history_page_bytes)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!(plugin = &*self.plugin_name, %error, "reading history failed");
                Vec::new()
            });
        Value::Array(entries).to_string()
    }

    async fn outbound(&mut self, request: OutboundRequest) -> Result<String, String> {
        let body = outbound_body(&request.body)?;
        commit_before_it_leaves(self.exchange.unit.as_ref()).await?;
        let transport = TransportKind::from(request.transport);
        let config = self.host.node_config.clone();
        let almanac = self.host.almanac.clone();
        self.parked_outbound(outbound::call(
            &config,
            almanac.as_deref(),
            transport,
            &request.url,
            body,
        ))
        .await
    }

    async fn outbound_a2a(&mut self, url: String, body: String) -> Result<String, String> {
        let body = outbound_body(&body)?;
        commit_before_it_leaves(self.exchange.unit.as_ref()).await?;
        let config = self.host.node_config.clone();
        self.parked_outbound(outbound::call_a2a(&config, &url, body))
            .await
    }

    async fn caller_transport(&mut self) -> Option<String> {
        self.exchange.caller_transport.map(str::to_string)
    }

    async fn config_get(&mut self, key: String) -> Result<Option<String>, String> {
        if &*self.plugin_name == super::loader::LOADING {
            return Err("settings are not available until the manifest names the plugin".into());
        }
        let Some(value) = self.host.settings.get(&self.plugin_name, &key)? else {
            return Ok(None);
        };
        if value.secret && !self.secrets_read.contains(&value.text) {
            self.secrets_read.push(value.text.clone());
        }
        Ok(Some(value.text))
    }

    /// Every loaded plugin's tools, sorted by name, as the host's tool path knows them.
    async fn list_tools(&mut self) -> String {
        let Some(runtime) = super::Runtime::from_weak(&self.runtime) else {
            return "[]".into();
        };
        let registry = runtime.registry();
        let mut tools: Vec<&super::manifest::ToolSpec> =
            registry.plugins().flat_map(|p| p.manifest.tools.iter()).collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        serde_json::to_string(&tools).unwrap_or_else(|_| "[]".into())
    }
}

fn outbound_body(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("outbound body is not JSON: {e}"))
}

/// The request's writes so far (the plugin's key-value writes among them),
/// committed before anything leaves the call — a message, an event, a tool's
/// run — that someone could act on: what the plugin was told it wrote is then
/// in the store, whatever the request's end.
async fn commit_before_it_leaves(unit: Option<&UnitOfWork>) -> Result<(), String> {
    match unit {
        Some(unit) => unit.commit_pending().await.map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

impl PluginState {
    /// Runs an outbound call with the plugin's instance parked, so a slow peer
    /// does not hold a pool slot.
    async fn parked_outbound(
        &mut self,
        call: impl std::future::Future<Output = Result<Value, outbound::OutboundError>>,
    ) -> Result<String, String> {
        let place = self.host.park_place();
        self.host
            .while_parked(&mut self.slot, place, call)
            .await
            .map(|reply| reply.to_string())
            .map_err(|e| e.to_string())
    }

    fn kv_namespace(&self) -> Result<&str, String> {
        self.kv_namespace
            .as_deref()
            .ok_or_else(|| "the key-value store is not available while the manifest is read".into())
    }
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
