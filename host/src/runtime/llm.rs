//! The `agora:node/llm` host interface: a plugin's chat with a language model,
//! under the node's policy.
//!
//! The host decides everything a plugin could otherwise abuse or leak: which
//! provider answers (only those the plugin's capabilities declare), with which
//! key (the plugin never sees it), how often (`llm.calls_per_minute`), how much
//! (`llm.tokens_per_day`, counted from the provider's usage, or estimated from
//! the bytes when it reports none), how many answers stream at once across the
//! node (`llm.max_concurrent_calls`), and how long any wait may be. A plugin
//! waiting for the model is parked like one waiting for an approval, so a slow
//! model does not hold a call slot other transports need.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::Resource;

use super::bindings::agora::node::llm as wit;
use super::instance::PluginState;
use crate::config::{DEFAULT_PROVIDER, LlmConfig};
use crate::metrics::Metrics;
use crate::peers::llm::{self as model, LlmError};

/// An answer a plugin is reading (the `chat-stream` resource), and what it counts.
pub struct LlmStream {
    stream: model::ChatStream,
    plugin: Arc<str>,
    started: Instant,
    /// Bytes handed on, for the token estimate when the provider reports no usage.
    bytes: usize,
    ended: bool,
    budget: Arc<LlmBudget>,
    /// One of `llm.max_concurrent_calls`, held while the answer streams.
    _permit: OwnedSemaphorePermit,
}

/// The node's model limits and what each plugin has used of them. In memory:
/// a restart starts every plugin's minute and day afresh.
pub(crate) struct LlmBudget {
    config: LlmConfig,
    concurrent: Arc<Semaphore>,
    usage: Mutex<HashMap<Arc<str>, PluginUsage>>,
    metrics: Metrics,
}

#[derive(Default)]
struct PluginUsage {
    minute: u64,
    calls_this_minute: u32,
    day: u64,
    tokens_today: u64,
}

impl LlmBudget {
    pub(crate) fn new(config: LlmConfig, metrics: Metrics) -> LlmBudget {
        LlmBudget {
            concurrent: Arc::new(Semaphore::new(config.max_concurrent_calls)),
            usage: Mutex::new(HashMap::new()),
            config,
            metrics,
        }
    }

    /// Count a call `plugin` starts, or say which limit it has reached.
    fn admit(&self, plugin: &Arc<str>) -> Result<OwnedSemaphorePermit, LlmError> {
        let now = crate::store::now_ms() / 1000;
        let (minute, day) = (now / 60, now / 86_400);
        let mut usage = self.usage.lock();
        let entry = usage.entry(plugin.clone()).or_default();
        if entry.day != day {
            (entry.day, entry.tokens_today) = (day, 0);
        }
        if entry.minute != minute {
            (entry.minute, entry.calls_this_minute) = (minute, 0);
        }
        if entry.tokens_today >= self.config.tokens_per_day {
            return Err(LlmError::Limited(format!(
                "plugin {plugin} has used its llm.tokens_per_day ({})",
                self.config.tokens_per_day
            )));
        }
        if entry.calls_this_minute >= self.config.calls_per_minute {
            return Err(LlmError::Limited(format!(
                "plugin {plugin} has made its llm.calls_per_minute ({})",
                self.config.calls_per_minute
            )));
        }
        let permit = self.concurrent.clone().try_acquire_owned().map_err(|_| {
            LlmError::Limited(format!(
                "the node is streaming llm.max_concurrent_calls ({}) answers already",
                self.config.max_concurrent_calls
            ))
        })?;
        entry.calls_this_minute += 1;
        Ok(permit)
    }

    fn spend(&self, plugin: &Arc<str>, tokens: u64) {
        if let Some(entry) = self.usage.lock().get_mut(plugin) {
            entry.tokens_today = entry.tokens_today.saturating_add(tokens);
        }
    }
}

impl LlmStream {
    /// The answer has ended (finished, failed or abandoned): count it once.
    fn end(&mut self, outcome: &str) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let usage = self.stream.usage().unwrap_or(model::Usage {
            input_tokens: 0,
            // About four bytes a token, for a provider that reports no usage.
            output_tokens: (self.bytes / 4) as u32,
        });
        self.budget.spend(
            &self.plugin,
            u64::from(usage.input_tokens) + u64::from(usage.output_tokens),
        );
        self.budget.metrics.observe_llm_call(
            &self.plugin,
            outcome,
            self.started.elapsed(),
            usage.input_tokens,
            usage.output_tokens,
        );
    }
}

impl Drop for LlmStream {
    fn drop(&mut self) {
        self.end("abandoned");
    }
}

impl PluginState {
    /// Which provider this call may use for a request naming `provider`.
    fn llm_provider(&self, provider: Option<&str>) -> Result<crate::config::LlmProviderConfig, LlmError> {
        let name = provider.unwrap_or(DEFAULT_PROVIDER);
        let declared = super::Runtime::from_weak(&self.runtime)
            .and_then(|runtime| runtime.loaded(&self.plugin_name))
            .is_some_and(|plugin| plugin.capabilities.llm.iter().any(|p| p == name));
        if !declared {
            return Err(LlmError::NotDeclared(format!(
                "plugin {} does not declare the model provider {name:?} in its capabilities",
                self.plugin_name
            )));
        }
        self.host.node_config.llm.provider(provider).ok_or_else(|| {
            LlmError::NotConfigured(match provider {
                None => "no language model is configured ([llm] base_url)".to_string(),
                Some(name) => {
                    format!("no language model provider {name:?} is configured ([llm.providers.{name}])")
                }
            })
        })
    }

    /// Start a chat; a refusal or failure before the answer starts is counted here.
    async fn start_chat(&mut self, request: wit::ChatRequest) -> Result<LlmStream, LlmError> {
        let started = Instant::now();
        let budget = self.host.llm.clone();
        let opened = self.open_chat(request, &budget, started).await;
        if let Err(error) = &opened {
            budget
                .metrics
                .observe_llm_call(&self.plugin_name, error.outcome(), started.elapsed(), 0, 0);
        }
        opened
    }

    async fn open_chat(
        &mut self,
        request: wit::ChatRequest,
        budget: &Arc<LlmBudget>,
        started: Instant,
    ) -> Result<LlmStream, LlmError> {
        let provider = self.llm_provider(request.provider.as_deref())?;
        let request = model_request(request)?;
        let permit = budget.admit(&self.plugin_name)?;
        let place = self.host.park_place();
        let config = &self.host.node_config.llm;
        let stream = self
            .host
            .while_parked(&mut self.slot, place, model::chat(&provider, config, &request))
            .await?;
        Ok(LlmStream {
            stream,
            plugin: self.plugin_name.clone(),
            started,
            bytes: 0,
            ended: false,
            budget: budget.clone(),
            _permit: permit,
        })
    }
}

impl wit::Host for PluginState {
    async fn chat(&mut self, request: wit::ChatRequest) -> Result<Resource<LlmStream>, wit::LlmError> {
        let stream = self.start_chat(request).await.map_err(to_wit)?;
        self.table
            .push(stream)
            .map_err(|e| to_wit(LlmError::Failed(format!("cannot hold the answer: {e}"))))
    }

    /// The provider check of `chat`, alone: nothing is counted or spent.
    async fn ready(&mut self, provider: Option<String>) -> bool {
        self.llm_provider(provider.as_deref()).is_ok()
    }
}

impl wit::HostChatStream for PluginState {
    async fn next(&mut self, stream: Resource<LlmStream>) -> Result<Option<wit::Chunk>, wit::LlmError> {
        let host = self.host.clone();
        let answer = self
            .table
            .get_mut(&stream)
            .map_err(|_| to_wit(LlmError::Failed("no such answer".into())))?;
        if answer.ended {
            return Ok(None);
        }
        // Parked while the model thinks; the slot is taken back before the plugin runs on.
        let result = host
            .while_parked(&mut self.slot, host.park_place(), answer.stream.next())
            .await;
        match result {
            Ok(Some(chunk)) => {
                let calls: usize = chunk
                    .tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum();
                answer.bytes += chunk.text.len() + calls;
                if chunk.finish_reason.is_some() {
                    answer.end("ok");
                }
                Ok(Some(to_wit_chunk(chunk)))
            }
            Ok(None) => {
                answer.end("ok");
                Ok(None)
            }
            Err(error) => {
                answer.end(error.outcome());
                Err(to_wit(error))
            }
        }
    }

    async fn drop(&mut self, stream: Resource<LlmStream>) -> wasmtime::Result<()> {
        self.table.delete(stream)?;
        Ok(())
    }
}

/// The request as the model client takes it; tool schemas must be JSON objects.
fn model_request(request: wit::ChatRequest) -> Result<model::ChatRequest, LlmError> {
    if request.messages.is_empty() {
        return Err(LlmError::BadRequest("a chat needs at least one message".into()));
    }
    let tools = request
        .tools
        .into_iter()
        .map(|tool| {
            let parameters: serde_json::Value = serde_json::from_str(&tool.parameters).map_err(|e| {
                LlmError::BadRequest(format!(
                    "the parameters of tool {:?} are not JSON: {e}",
                    tool.name
                ))
            })?;
            if !parameters.is_object() {
                return Err(LlmError::BadRequest(format!(
                    "the parameters of tool {:?} are not a JSON Schema object",
                    tool.name
                )));
            }
            Ok(model::ToolDefinition {
                name: tool.name,
                description: tool.description,
                parameters,
            })
        })
        .collect::<Result<_, _>>()?;
    let messages = request
        .messages
        .into_iter()
        .map(|message| model::ChatMessage {
            role: match message.role {
                wit::Role::System => model::Role::System,
                wit::Role::User => model::Role::User,
                wit::Role::Assistant => model::Role::Assistant,
                wit::Role::Tool => model::Role::Tool,
            },
            content: message.content,
            tool_calls: message.tool_calls.into_iter().map(from_wit_call).collect(),
            tool_call_id: message.tool_call_id,
        })
        .collect();
    Ok(model::ChatRequest {
        messages,
        tools,
        temperature: request.temperature,
        max_tokens: request.max_tokens,
    })
}

fn from_wit_call(call: wit::ToolCall) -> model::ToolCall {
    model::ToolCall {
        id: call.id,
        name: call.name,
        arguments: call.arguments,
    }
}

fn to_wit_chunk(chunk: model::Chunk) -> wit::Chunk {
    wit::Chunk {
        text: chunk.text,
        tool_calls: chunk
            .tool_calls
            .into_iter()
            .map(|call| wit::ToolCall {
                id: call.id,
                name: call.name,
                arguments: call.arguments,
            })
            .collect(),
        finish_reason: chunk.finish_reason,
        usage: chunk.usage.map(|usage| wit::Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        }),
    }
}

/// The one place a model failure becomes the WIT's error.
fn to_wit(error: LlmError) -> wit::LlmError {
    let kind = match &error {
        LlmError::NotConfigured(_) => wit::ErrorKind::NotConfigured,
        LlmError::NotDeclared(_) => wit::ErrorKind::NotDeclared,
        LlmError::Limited(_) => wit::ErrorKind::Limited,
        LlmError::BadRequest(_) => wit::ErrorKind::BadRequest,
        LlmError::Failed(_) => wit::ErrorKind::Failed,
        LlmError::TimedOut(_) => wit::ErrorKind::TimedOut,
    };
    wit::LlmError {
        kind,
        message: error.to_string(),
    }
}
