//! The `agora:node/llm` host interface: a plugin's chat with a language model,
//! under the node's policy.
//!
//! The host decides everything a plugin could otherwise abuse or leak: which
//! provider answers (only those the plugin's capabilities declare), with which
//! key (the plugin never sees it), how often (`llm.calls_per_minute`), how much
//! (`llm.tokens_per_day` per plugin and `llm.tokens_per_day_per_caller` per
//! caller the call serves, so one caller of a shared assistant cannot spend
//! everyone's day; counted from the provider's usage, or estimated from
//! the bytes of the prompt and the answer when it reports none; kept in the
//! node's store, so a restart does not start the day afresh and a fleet's
//! nodes share one count), how many answers stream at once across the
//! node (`llm.max_concurrent_calls`), and how long any wait may be. A prompt
//! is weighed before it is sent: one whose own estimate is over what is left
//! of the day is refused there, since a day counted only as answers end would
//! let any number of large prompts through on its last token. A plugin
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
use crate::store::{Collection, Store};

const DAY_SECS: u64 = 86_400;
/// Tries at adding to a day's count before giving up (each loses only to
/// another node or call adding at the same instant).
const ADD_TRIES: usize = 8;
/// About four bytes a token: the estimate for a provider that reports no usage.
const BYTES_PER_TOKEN: usize = 4;

/// The tokens `bytes` of text are estimated to be, prompt or answer alike.
fn estimated_tokens(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(BYTES_PER_TOKEN)).unwrap_or(u32::MAX)
}

/// Whose day a call's tokens count toward: its plugin's, and its caller's
/// when it serves one (the store keys of both).
#[derive(Clone)]
struct Accounts {
    plugin: Arc<str>,
    caller: Option<Arc<str>>,
}

impl Accounts {
    fn keys(&self, day: u64) -> impl Iterator<Item = Vec<u8>> + '_ {
        std::iter::once(tokens_key(&self.plugin, day)).chain(
            self.caller
                .iter()
                .map(move |caller| format!("llm.caller_tokens\0{caller}\0{day}").into_bytes()),
        )
    }
}

/// An answer a plugin is reading (the `chat-stream` resource), and what it counts.
pub struct LlmStream {
    stream: model::ChatStream,
    accounts: Accounts,
    started: Instant,
    /// The prompt's estimated tokens, counted when the provider reports no usage.
    prompt_tokens: u32,
    ended: bool,
    budget: Arc<LlmBudget>,
    /// One of `llm.max_concurrent_calls`, held while the answer streams.
    _permit: OwnedSemaphorePermit,
}

/// The node's model limits and what each plugin has used of them: the calls
/// of this minute in memory (per node), the tokens of this UTC day in the store.
pub(crate) struct LlmBudget {
    config: LlmConfig,
    concurrent: Arc<Semaphore>,
    calls: Mutex<HashMap<Arc<str>, MinuteCalls>>,
    store: Store,
    metrics: Metrics,
}

#[derive(Default)]
struct MinuteCalls {
    minute: u64,
    count: u32,
}

/// The most rows of each list [`LlmBudget::usage_today`] answers.
pub const MAX_USAGE_ROWS: usize = 100;
/// The most day counters it reads of each kind (older days included, until the store expires them).
const MAX_USAGE_KEYS: usize = 10_000;

/// Today's model use, for the console.
#[derive(Debug, Default, serde::Serialize)]
pub struct UsageToday {
    pub tokens_per_day: u64,
    pub tokens_per_day_per_caller: u64,
    pub per_plugin: Vec<TokensUsed>,
    pub per_caller: Vec<TokensUsed>,
}

#[derive(Debug, serde::Serialize)]
pub struct TokensUsed {
    pub name: String,
    pub tokens: u64,
}

/// Where `plugin`'s tokens of the UTC day `day` are counted.
fn tokens_key(plugin: &str, day: u64) -> Vec<u8> {
    format!("llm.tokens\0{plugin}\0{day}").into_bytes()
}

impl LlmBudget {
    /// Today's tokens (UTC) of every plugin and every caller that used the
    /// model, as the limits count them, with the limits: what the console shows.
    /// At most [`MAX_USAGE_ROWS`] of each, the largest first.
    pub(crate) async fn usage_today(&self) -> Result<UsageToday, crate::store::StoreError> {
        let day = crate::store::now_ms() / 1000 / DAY_SECS;
        let mut usage = UsageToday {
            tokens_per_day: self.config.tokens_per_day,
            tokens_per_day_per_caller: self.config.tokens_per_day_per_caller,
            ..UsageToday::default()
        };
        for (prefix, rows) in [
            ("llm.tokens\0", &mut usage.per_plugin),
            ("llm.caller_tokens\0", &mut usage.per_caller),
        ] {
            // Keys are `prefix name \0 day`; names hold no NUL (a plugin's or a caller's).
            for key in self
                .store
                .keys(Collection::Meta, prefix.as_bytes(), MAX_USAGE_KEYS)
                .await?
            {
                let text = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                let Some((name, key_day)) = text.rsplit_once('\0') else {
                    continue;
                };
                if key_day.parse::<u64>().ok() != Some(day) {
                    continue;
                }
                let tokens = self
                    .store
                    .get::<u64>(Collection::Meta, &key)
                    .await?
                    .unwrap_or_default();
                rows.push(TokensUsed {
                    name: name.to_string(),
                    tokens,
                });
            }
            rows.sort_by(|a, b| b.tokens.cmp(&a.tokens).then_with(|| a.name.cmp(&b.name)));
            rows.truncate(MAX_USAGE_ROWS);
        }
        Ok(usage)
    }

    pub(crate) fn new(config: LlmConfig, store: Store, metrics: Metrics) -> LlmBudget {
        LlmBudget {
            concurrent: Arc::new(Semaphore::new(config.max_concurrent_calls)),
            calls: Mutex::new(HashMap::new()),
            config,
            store,
            metrics,
        }
    }

    /// The tokens each of `accounts` has used today, across restarts and the
    /// fleet: the plugin's, then the caller's (0 without one).
    async fn tokens_today(&self, accounts: &Accounts) -> Result<(u64, u64), LlmError> {
        let day = crate::store::now_ms() / 1000 / DAY_SECS;
        let mut used = [0u64; 2];
        for (slot, key) in used.iter_mut().zip(accounts.keys(day)) {
            *slot = self
                .store
                .get::<u64>(Collection::Meta, &key)
                .await
                .map(Option::unwrap_or_default)
                // Refused rather than let through: the limit is what bounds the bill.
                .map_err(|e| {
                    LlmError::Failed(format!("cannot read plugin {}'s token use: {e}", accounts.plugin))
                })?;
        }
        Ok((used[0], used[1]))
    }

    /// Count a call `plugin` starts with a prompt of about `prompt_tokens`, its
    /// plugin and caller having used `tokens_today`, or say which limit it has reached.
    fn admit(
        &self,
        accounts: &Accounts,
        (tokens_today, caller_today): (u64, u64),
        prompt_tokens: u32,
    ) -> Result<OwnedSemaphorePermit, LlmError> {
        let plugin = &accounts.plugin;
        if let Some(caller) = &accounts.caller {
            let per_caller = self.config.tokens_per_day_per_caller;
            let left = per_caller.saturating_sub(caller_today);
            if left == 0 || u64::from(prompt_tokens) > left {
                return Err(LlmError::Limited(format!(
                    "this caller ({caller}) has {left} tokens left today of its \
                     llm.tokens_per_day_per_caller ({per_caller}); the prompt is about {prompt_tokens}"
                )));
            }
        }
        let minute = crate::store::now_ms() / 60_000;
        let mut calls = self.calls.lock();
        let entry = calls.entry(plugin.clone()).or_default();
        if entry.minute != minute {
            (entry.minute, entry.count) = (minute, 0);
        }
        let tokens_left = self.config.tokens_per_day.saturating_sub(tokens_today);
        if tokens_left == 0 {
            return Err(LlmError::Limited(format!(
                "plugin {plugin} has used its llm.tokens_per_day ({})",
                self.config.tokens_per_day
            )));
        }
        if u64::from(prompt_tokens) > tokens_left {
            return Err(LlmError::Limited(format!(
                "plugin {plugin}'s prompt, about {prompt_tokens} tokens by its size, is over the \
                 {tokens_left} left today of its llm.tokens_per_day ({})",
                self.config.tokens_per_day
            )));
        }
        if entry.count >= self.config.calls_per_minute {
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
        entry.count += 1;
        Ok(permit)
    }

    /// Add `tokens` to the counts of today, in the background: for an answer
    /// abandoned unread, which ends in `Drop`, where nothing can be awaited.
    fn spend_later(&self, accounts: &Accounts, tokens: u64) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, accounts) = (self.store.clone(), accounts.clone());
        handle.spawn(async move { spend(&store, &accounts, tokens).await });
    }
}

/// Add `tokens` to today's count of each of `accounts`; a failure is logged.
async fn spend(store: &Store, accounts: &Accounts, tokens: u64) {
    let day = crate::store::now_ms() / 1000 / DAY_SECS;
    for key in accounts.keys(day) {
        if let Err(error) = add_tokens(store, &key, day, tokens).await {
            let plugin = &accounts.plugin;
            tracing::warn!(%plugin, tokens, %error, "the model's tokens were not counted");
        }
    }
}

/// Add `tokens` to the count at `key` (a day's): compare-and-swap, so that calls
/// ending at once (on this node or another of the fleet) all count.
async fn add_tokens(store: &Store, key: &[u8], day: u64, tokens: u64) -> Result<(), String> {
    // Kept a day past its own, then swept.
    let expires = Some((day + 2) * DAY_SECS * 1000);
    for _ in 0..ADD_TRIES {
        let added = match store.get::<u64>(Collection::Meta, key).await {
            Ok(None) => store.insert_new(Collection::Meta, key, &tokens, expires).await,
            Ok(Some(used)) => {
                store
                    .update(
                        Collection::Meta,
                        key,
                        &used,
                        &used.saturating_add(tokens),
                        expires,
                    )
                    .await
            }
            Err(error) => Err(error),
        };
        match added {
            // Durable like any write a client was answered about (group commit).
            Ok(true) => return store.commit().await.map_err(|e| e.to_string()),
            Ok(false) => continue,
            Err(error) => return Err(error.to_string()),
        }
    }
    Err(format!("{ADD_TRIES} tries lost to other writers"))
}

impl LlmStream {
    /// The answer has ended (finished, failed or abandoned): count it once;
    /// the tokens it used, to add to the day's count (none the second time).
    fn end(&mut self, outcome: &str) -> Option<u64> {
        if std::mem::replace(&mut self.ended, true) {
            return None;
        }
        let usage = self.stream.usage().unwrap_or(model::Usage {
            input_tokens: self.prompt_tokens,
            output_tokens: estimated_tokens(self.stream.kept_bytes()),
        });
        self.budget.metrics.observe_llm_call(
            &self.accounts.plugin,
            outcome,
            self.started.elapsed(),
            usage.input_tokens,
            usage.output_tokens,
        );
        Some(u64::from(usage.input_tokens) + u64::from(usage.output_tokens))
    }
}

impl Drop for LlmStream {
    fn drop(&mut self) {
        if let Some(tokens) = self.end("abandoned") {
            self.budget.spend_later(&self.accounts, tokens);
        }
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
        let prompt_tokens = estimated_tokens(request.prompt_bytes());
        let accounts = Accounts {
            plugin: self.plugin_name.clone(),
            caller: self
                .exchange
                .caller
                .as_ref()
                .map(|caller| Arc::from(format!("{}:{}", caller.transport, caller.client).as_str())),
        };
        let used = budget.tokens_today(&accounts).await?;
        let permit = budget.admit(&accounts, used, prompt_tokens)?;
        let place = self.host.park_place();
        let config = &self.host.node_config.llm;
        let stream = self
            .host
            .while_parked(&mut self.slot, place, model::chat(&provider, config, &request))
            .await?;
        Ok(LlmStream {
            stream,
            accounts,
            started,
            prompt_tokens,
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
        let (reply, spent) = match result {
            Ok(Some(chunk)) => {
                let spent = chunk.finish_reason.is_some().then(|| answer.end("ok")).flatten();
                (Ok(Some(to_wit_chunk(chunk))), spent)
            }
            Ok(None) => (Ok(None), answer.end("ok")),
            Err(error) => {
                let spent = answer.end(error.outcome());
                (Err(to_wit(error)), spent)
            }
        };
        if let Some(tokens) = spent {
            // Counted (durably) before the plugin learns the answer ended, so
            // its next call, or the node after a restart, sees the count.
            let (budget, accounts) = (answer.budget.clone(), answer.accounts.clone());
            spend(&budget.store, &accounts, tokens).await;
        }
        reply
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_about_four_bytes_and_a_started_one_counts() {
        assert_eq!(estimated_tokens(0), 0);
        assert_eq!(estimated_tokens(1), 1);
        assert_eq!(estimated_tokens(4), 1);
        assert_eq!(estimated_tokens(400 * 1024), 102_400);
        assert_eq!(estimated_tokens(usize::MAX), u32::MAX);
    }
}
