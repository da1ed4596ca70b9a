//! A language model, through the node (`agora:node/llm`).
//!
//! The node holds the provider, its key and the limits; a plugin names only
//! which provider it uses, in its [`crate::Capabilities`] (`.llm("default")`),
//! and the node refuses any other. [`chat`] streams the answer as it arrives;
//! [`complete`] waits for all of it; [`ready`] says, for nothing, whether there
//! is a model to ask.
//!
//! ```ignore
//! if !llm::ready(None) {
//!     return reply(json!({"text": "no model here"}));
//! }
//! let answer = llm::complete(&ChatRequest::new().system("Be brief.").user("Hi"))?;
//! for chunk in llm::chat(&request)? {
//!     let chunk = chunk?;
//!     host::emit("chunk", &json!({"content": chunk.text}))?;
//! }
//! ```

use crate::HostError;
use crate::bindings::agora::node::llm as raw;

pub use raw::{ChatMessage, ErrorKind, Role, ToolCall, ToolDefinition, Usage};

/// What to ask the model: the conversation so far, and the tools it may call.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    provider: Option<String>,
    messages: Vec<ChatMessage>,
    tools: Vec<ToolDefinition>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
}

impl ChatRequest {
    /// An empty conversation for the default provider (`[llm]`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask a named provider (`[llm.providers.NAME]`) instead; the plugin's capabilities must declare it.
    pub fn provider(mut self, name: &str) -> Self {
        self.provider = Some(name.to_string());
        self
    }

    /// Add a message with `role` and `content`.
    pub fn message(mut self, role: Role, content: &str) -> Self {
        self.messages.push(ChatMessage {
            role,
            content: content.to_string(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        });
        self
    }

    /// Add a system message.
    pub fn system(self, content: &str) -> Self {
        self.message(Role::System, content)
    }

    /// Add a user message.
    pub fn user(self, content: &str) -> Self {
        self.message(Role::User, content)
    }

    /// Add an assistant message.
    pub fn assistant(self, content: &str) -> Self {
        self.message(Role::Assistant, content)
    }

    /// Add the model's earlier answer that called tools (before their results).
    pub fn assistant_calls(mut self, content: &str, calls: Vec<ToolCall>) -> Self {
        self.messages.push(ChatMessage {
            role: Role::Assistant,
            content: content.to_string(),
            tool_calls: calls,
            tool_call_id: None,
        });
        self
    }

    /// Add a tool's result for the call `call_id`.
    pub fn tool_result(mut self, call_id: &str, content: &str) -> Self {
        self.messages.push(ChatMessage {
            role: Role::Tool,
            content: content.to_string(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.to_string()),
        });
        self
    }

    /// Offer the model a tool; `parameters` is its JSON Schema.
    pub fn tool(mut self, name: &str, description: &str, parameters: &serde_json::Value) -> Self {
        self.tools.push(ToolDefinition {
            name: name.to_string(),
            description: description.to_string(),
            parameters: parameters.to_string(),
        });
        self
    }

    /// Sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Most tokens the answer may have.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// The messages so far.
    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    fn to_wit(&self) -> raw::ChatRequest {
        raw::ChatRequest {
            provider: self.provider.clone(),
            messages: self.messages.clone(),
            tools: self.tools.clone(),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
        }
    }
}

/// A piece of the answer: text as it arrives; the last piece carries the
/// complete tool calls, the finish reason and the usage.
pub type Chunk = raw::Chunk;

/// An answer being streamed: an iterator of its chunks, ending after the last.
pub struct ChatStream {
    stream: raw::ChatStream,
    done: bool,
}

impl Iterator for ChatStream {
    type Item = Result<Chunk, HostError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.stream.next() {
            Ok(Some(chunk)) => Some(Ok(chunk)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(error) => {
                self.done = true;
                Some(Err(model_error(error)))
            }
        }
    }
}

/// Whether the node has `provider` (none: the default `[llm]`) configured and
/// this plugin's capabilities declare it: what [`chat`] checks first, asked
/// before gathering what a chat would need. Spends nothing; a `true` says
/// nothing of limits or of the provider's health, so [`chat`] may still fail.
pub fn ready(provider: Option<&str>) -> bool {
    raw::ready(provider)
}

/// Ask the model; its answer streams from the returned iterator.
pub fn chat(request: &ChatRequest) -> Result<ChatStream, HostError> {
    let stream = raw::chat(&request.to_wit()).map_err(model_error)?;
    Ok(ChatStream { stream, done: false })
}

/// A whole answer.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// The text, all chunks joined.
    pub text: String,
    /// The tools the model asks to call, each complete.
    pub tool_calls: Vec<ToolCall>,
    /// Why the answer ended (`stop`, `tool_calls`, `length`, …).
    pub finish_reason: Option<String>,
    /// Tokens used, when the provider says.
    pub usage: Option<Usage>,
}

impl Answer {
    /// Add a chunk as it arrives.
    pub fn push(&mut self, chunk: Chunk) {
        self.text.push_str(&chunk.text);
        self.tool_calls.extend(chunk.tool_calls);
        if chunk.finish_reason.is_some() {
            self.finish_reason = chunk.finish_reason;
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
    }
}

/// Ask the model and wait for its whole answer.
pub fn complete(request: &ChatRequest) -> Result<Answer, HostError> {
    let mut answer = Answer::default();
    for chunk in chat(request)? {
        answer.push(chunk?);
    }
    Ok(answer)
}

fn model_error(error: raw::LlmError) -> HostError {
    HostError::Model {
        kind: error.kind,
        message: error.message,
    }
}
