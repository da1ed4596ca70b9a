//! A language model over the OpenAI-compatible chat-completions protocol
//! (`POST {base_url}/chat/completions`, `stream: true`), which vLLM, llama.cpp's
//! server, Ollama and the hosted APIs all speak.
//!
//! The answer is read as server-sent events, each a `chat.completion.chunk`:
//! text deltas are handed on as they arrive; tool calls arrive as fragments
//! (an id and name, then pieces of the arguments, keyed by `index`) and are
//! handed on whole, with the finish reason and the token usage, in one last
//! chunk — a plugin never sees half a call. Everything a provider sends is
//! bounded: each line and event, the whole answer, the wait for each piece
//! (`llm.idle_timeout_ms`) and the whole answer's time (`llm.timeout_ms`). A
//! provider that breaks off, stalls or sends what is not this protocol ends
//! the stream with an error, never a hang.
//!
//! The whole answer's bound is on what the node keeps of it, whichever field
//! it arrives in: text, tool-call ids, names and arguments, the record each
//! new `index` opens, the finish reason — a field left uncounted is one a
//! hostile provider fills until the timeout. The number of tool calls is
//! bounded too (`llm.max_tool_calls_per_answer`), so many small calls cannot
//! hide under the byte bound. Wire framing the node does not keep is not
//! counted, so an honest answer's bound stays about its size as text.
//!
//! The API key is read from the environment variable the configuration names,
//! sent only as the `Authorization` header, and never written into an error.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::http_client::{self, ClientError, StreamingResponse};
use super::sse::SseParser;
use crate::config::{LlmConfig, LlmProviderConfig};

/// Longest line and event of an answer's event stream.
const MAX_SSE_LINE: usize = 256 * 1024;
/// How much of an error answer is read for its message.
const MAX_ERROR_BODY: usize = 16 * 1024;

/// Why a chat failed, in the words a plugin (and through it a user) sees.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum LlmError {
    #[error("{0}")]
    NotConfigured(String),
    #[error("{0}")]
    NotDeclared(String),
    #[error("{0}")]
    Limited(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Failed(String),
    #[error("{0}")]
    TimedOut(String),
}

impl LlmError {
    /// The metrics label of this kind of failure.
    pub fn outcome(&self) -> &'static str {
        match self {
            LlmError::NotConfigured(_) => "not_configured",
            LlmError::NotDeclared(_) => "not_declared",
            LlmError::Limited(_) => "limited",
            LlmError::BadRequest(_) => "bad_request",
            LlmError::Failed(_) => "failed",
            LlmError::TimedOut(_) => "timed_out",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text as the model wrote it (not necessarily valid JSON).
    pub arguments: String,
}

#[derive(Debug, Clone)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// Parsed JSON Schema of the arguments.
    pub parameters: Value,
}

#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolDefinition>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// A piece of the answer: text as it arrives; the last one also carries the
/// complete tool calls, the finish reason and the usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
}

impl ChatRequest {
    /// The bytes of what the model reads: each message's text and tool calls,
    /// and each tool's definition (the protocol's framing around them left out).
    pub fn prompt_bytes(&self) -> usize {
        let messages: usize = self
            .messages
            .iter()
            .map(|message| {
                message.content.len()
                    + message.tool_call_id.as_ref().map_or(0, String::len)
                    + message.tool_calls.iter().map(ToolCall::bytes).sum::<usize>()
            })
            .sum();
        let tools: usize = self
            .tools
            .iter()
            .map(|tool| tool.name.len() + tool.description.len() + tool.parameters.to_string().len())
            .sum();
        messages + tools
    }
}

impl ToolCall {
    fn bytes(&self) -> usize {
        self.id.len() + self.name.len() + self.arguments.len()
    }
}

/// The request body as the protocol has it.
pub fn request_body(model: &str, request: &ChatRequest) -> Value {
    let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        // The usage arrives in one more chunk after the finish reason.
        "stream_options": {"include_usage": true},
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                }})
            })
            .collect();
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    if let Some(max_tokens) = request.max_tokens {
        body["max_tokens"] = json!(max_tokens);
    }
    body
}

fn message_json(message: &ChatMessage) -> Value {
    let mut value = json!({"role": message.role, "content": message.content});
    if message.role == Role::Assistant && !message.tool_calls.is_empty() {
        value["tool_calls"] = message
            .tool_calls
            .iter()
            .map(|call| {
                json!({"id": call.id, "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments}})
            })
            .collect();
    }
    if let (Role::Tool, Some(id)) = (message.role, &message.tool_call_id) {
        value["tool_call_id"] = json!(id);
    }
    value
}

/// Send `request` to `provider` and return once its answer starts (headers in).
pub async fn chat(
    provider: &LlmProviderConfig,
    limits: &LlmConfig,
    request: &ChatRequest,
) -> Result<ChatStream, LlmError> {
    let body = serde_json::to_vec(&request_body(&provider.model, request))
        .map_err(|e| LlmError::BadRequest(format!("the request cannot be encoded: {e}")))?;
    if body.len() > limits.max_request_bytes {
        return Err(LlmError::BadRequest(format!(
            "the request is {} bytes, over llm.max_request_bytes ({})",
            body.len(),
            limits.max_request_bytes
        )));
    }
    let url = format!("{}/chat/completions", provider.base_url.trim_end_matches('/'));
    let key = match provider.api_key_env.as_str() {
        "" => None,
        name => Some(std::env::var(name).map_err(|_| {
            LlmError::NotConfigured(format!(
                "the environment variable {name} holding the model's key is not set"
            ))
        })?),
    };
    let authorization = key.map(|key| format!("Bearer {key}"));
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
    ];
    if let Some(authorization) = &authorization {
        headers.push(("authorization", authorization.as_str()));
    }
    let started = Instant::now();
    let idle = Duration::from_millis(limits.idle_timeout_ms);
    let response = http_client::open_stream("POST", &url, &headers, body, idle)
        .await
        .map_err(|error| client_error(&url, error))?;
    let mut stream = ChatStream {
        url,
        response,
        parser: SseParser::new(MAX_SSE_LINE, MAX_SSE_LINE),
        answer: Assembly::new(limits),
        idle,
        deadline: started + Duration::from_millis(limits.timeout_ms),
        state: StreamState::Open,
    };
    if stream.response.status != 200 {
        return Err(stream.error_answer().await);
    }
    Ok(stream)
}

fn client_error(url: &str, error: ClientError) -> LlmError {
    match error {
        ClientError::Timeout { timeout_ms, .. } => LlmError::TimedOut(format!(
            "the model at {url} did not answer within {timeout_ms} ms"
        )),
        other => LlmError::Failed(format!("the model could not be reached: {other}")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamState {
    Open,
    /// `[DONE]` (or the end of the body after a finish reason) was read; the
    /// last chunk is still to be handed on.
    Done,
    /// The last chunk was handed on (or an error was): nothing more.
    Closed,
}

/// A tool call being assembled from its fragments.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// What the node holds for each tool call before its id, name and arguments:
/// the map's key and the record itself.
const CALL_RECORD_BYTES: usize = size_of::<u64>() + size_of::<PartialCall>();

/// An answer being read.
pub struct ChatStream {
    url: String,
    response: StreamingResponse,
    parser: SseParser,
    answer: Assembly,
    idle: Duration,
    deadline: Instant,
    state: StreamState,
}

/// One `chat.completion.chunk`, as far as the host reads it.
#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    delta: WireDelta,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireDelta {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireToolCall>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: u64,
    id: Option<String>,
    function: Option<WireFunction>,
}

#[derive(Deserialize, Default)]
struct WireFunction {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u32,
    #[serde(default)]
    completion_tokens: u32,
}

/// The answer as read so far and not yet handed on, and what keeping it costs.
struct Assembly {
    /// Text deltas parsed but not yet handed on.
    pending: VecDeque<String>,
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    /// Every byte kept for this answer so far (text handed on included).
    kept_bytes: usize,
    max_bytes: usize,
    max_calls: usize,
}

impl Assembly {
    fn new(limits: &LlmConfig) -> Assembly {
        Assembly {
            pending: VecDeque::new(),
            calls: BTreeMap::new(),
            finish_reason: None,
            usage: None,
            kept_bytes: 0,
            max_bytes: limits.max_answer_bytes,
            max_calls: limits.max_tool_calls_per_answer,
        }
    }

    /// Take one chunk in; each piece is counted before it is kept.
    fn take(&mut self, chunk: WireChunk) -> Result<(), LlmError> {
        if let Some(usage) = chunk.usage {
            self.usage = Some(Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
            });
        }
        // One answer is asked for (no `n`): only the first choice is read.
        let Some(choice) = chunk.choices.into_iter().next() else {
            return Ok(());
        };
        if let Some(text) = choice.delta.content.filter(|text| !text.is_empty()) {
            self.keep(text.len())?;
            self.pending.push_back(text);
        }
        for fragment in choice.delta.tool_calls {
            self.take_call_fragment(fragment)?;
        }
        if let Some(reason) = choice.finish_reason
            && self.finish_reason.as_deref() != Some(reason.as_str())
        {
            self.keep(reason.len())?;
            self.finish_reason = Some(reason);
        }
        Ok(())
    }

    /// A fragment of tool call `index`: the first opens its record; an id replaces
    /// the one before (providers repeat it, which costs nothing); a name and
    /// arguments are appended.
    fn take_call_fragment(&mut self, fragment: WireToolCall) -> Result<(), LlmError> {
        let known = self.calls.get(&fragment.index);
        if known.is_none() && self.calls.len() >= self.max_calls {
            return Err(LlmError::Failed(format!(
                "the model's answer has more than llm.max_tool_calls_per_answer ({}) tool calls",
                self.max_calls
            )));
        }
        let new_id = fragment.id.filter(|id| known.is_none_or(|call| call.id != *id));
        let function = fragment.function.unwrap_or_default();
        let name = function.name.unwrap_or_default();
        let arguments = function.arguments.unwrap_or_default();
        let record = if known.is_none() { CALL_RECORD_BYTES } else { 0 };
        self.keep(record + new_id.as_ref().map_or(0, String::len) + name.len() + arguments.len())?;
        let call = self.calls.entry(fragment.index).or_default();
        if let Some(id) = new_id {
            call.id = id;
        }
        call.name.push_str(&name);
        call.arguments.push_str(&arguments);
        Ok(())
    }

    fn keep(&mut self, bytes: usize) -> Result<(), LlmError> {
        self.kept_bytes = self.kept_bytes.saturating_add(bytes);
        if self.kept_bytes > self.max_bytes {
            return Err(LlmError::Failed(format!(
                "the model's answer is over llm.max_answer_bytes ({})",
                self.max_bytes
            )));
        }
        Ok(())
    }

    fn last_chunk(&mut self) -> Chunk {
        let tool_calls = std::mem::take(&mut self.calls)
            .into_values()
            .map(|call| ToolCall {
                id: call.id,
                name: call.name,
                arguments: call.arguments,
            })
            .collect();
        Chunk {
            text: String::new(),
            tool_calls,
            finish_reason: self.finish_reason.clone(),
            usage: self.usage,
        }
    }
}

impl ChatStream {
    /// The next chunk; `None` once the answer has ended.
    pub async fn next(&mut self) -> Result<Option<Chunk>, LlmError> {
        loop {
            if let Some(text) = self.answer.pending.pop_front() {
                return Ok(Some(Chunk {
                    text,
                    ..Chunk::default()
                }));
            }
            match self.state {
                StreamState::Closed => return Ok(None),
                StreamState::Done => {
                    self.state = StreamState::Closed;
                    return Ok(Some(self.answer.last_chunk()));
                }
                StreamState::Open => {}
            }
            if let Err(error) = self.read_more().await {
                self.state = StreamState::Closed;
                return Err(error);
            }
        }
    }

    /// What the answer used, once known (the last chunk carries it too).
    pub fn usage(&self) -> Option<Usage> {
        self.answer.usage
    }

    /// The bytes of the answer the node has kept so far, as `llm.max_answer_bytes` counts them.
    pub fn kept_bytes(&self) -> usize {
        self.answer.kept_bytes
    }

    /// Read the next piece of the body and parse what it completes.
    async fn read_more(&mut self) -> Result<(), LlmError> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(self.timed_out("finish its answer in llm.timeout_ms"));
        }
        let whole_answer_binds = self.deadline - now < self.idle;
        let wait = self.idle.min(self.deadline - now);
        let piece = match tokio::time::timeout(wait, self.response.chunk()).await {
            // Named for the limit that ran out, so the operator knows which to raise.
            Err(_) if whole_answer_binds => return Err(self.timed_out("finish its answer in llm.timeout_ms")),
            Err(_) => {
                return Err(self.timed_out("send the next part of its answer within llm.idle_timeout_ms"));
            }
            Ok(Err(error)) => return Err(self.broke_off(&error.to_string())),
            Ok(Ok(piece)) => piece,
        };
        let Some(piece) = piece else {
            // The body ended: complete only if the answer said how it finished.
            if self.answer.finish_reason.is_some() {
                self.state = StreamState::Done;
                return Ok(());
            }
            return Err(self.broke_off("the answer ended before it finished"));
        };
        let events = self
            .parser
            .feed(&piece)
            .map_err(|error| self.not_the_protocol(&error.to_string()))?;
        for event in events {
            if self.state != StreamState::Open {
                break;
            }
            self.take_event(&event.data)?;
        }
        Ok(())
    }

    fn take_event(&mut self, data: &str) -> Result<(), LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            if self.answer.finish_reason.is_none() {
                return Err(self.broke_off("the answer ended before it finished"));
            }
            self.state = StreamState::Done;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: WireChunk = serde_json::from_str(data).map_err(|error| {
            self.not_the_protocol(&format!("a chunk is not a chat.completion.chunk ({error})"))
        })?;
        self.answer.take(chunk)
    }

    /// An error answer's status and the provider's own message (bounded).
    async fn error_answer(&mut self) -> LlmError {
        let status = self.response.status;
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BODY {
            match tokio::time::timeout(self.idle, self.response.chunk()).await {
                Ok(Ok(Some(piece))) => body.extend_from_slice(&piece),
                _ => break,
            }
        }
        body.truncate(MAX_ERROR_BODY);
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(300).collect());
        let what = match status {
            401 | 403 => "refused the node's key",
            429 => "is rate limiting the node",
            400..=499 => "refused the request",
            _ => "failed",
        };
        LlmError::Failed(format!(
            "the model at {} {what} (HTTP {status}): {message}",
            self.url
        ))
    }

    fn timed_out(&self, what: &str) -> LlmError {
        LlmError::TimedOut(format!("the model at {} did not {what}", self.url))
    }

    fn broke_off(&self, why: &str) -> LlmError {
        LlmError::Failed(format!("the model at {} broke off: {why}", self.url))
    }

    fn not_the_protocol(&self, why: &str) -> LlmError {
        LlmError::Failed(format!(
            "the model at {} sent what is not its protocol: {why}",
            self.url
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_the_protocol_s_shape() {
        let request = ChatRequest {
            messages: vec![
                ChatMessage {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "search".into(),
                        arguments: "{\"q\":1}".into(),
                    }],
                    tool_call_id: None,
                },
                ChatMessage {
                    role: Role::Tool,
                    content: "found".into(),
                    tool_calls: Vec::new(),
                    tool_call_id: Some("call_1".into()),
                },
            ],
            tools: vec![ToolDefinition {
                name: "search".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            temperature: Some(0.5),
            max_tokens: Some(10),
        };
        let body = request_body("m", &request);
        assert_eq!(body["stream"], true);
        assert_eq!(body["messages"][0]["tool_calls"][0]["function"]["name"], "search");
        assert_eq!(body["messages"][1]["tool_call_id"], "call_1");
        assert_eq!(body["tools"][0]["type"], "function");
        assert_eq!(body["max_tokens"], 10);
    }

    fn limits(max_bytes: usize, max_calls: usize) -> LlmConfig {
        LlmConfig {
            max_answer_bytes: max_bytes,
            max_tool_calls_per_answer: max_calls,
            ..crate::config::Config::defaults().llm
        }
    }

    fn chunk(value: Value) -> WireChunk {
        serde_json::from_value(value).unwrap()
    }

    fn call_fragment(index: u64, id: Option<&str>, name: &str, arguments: &str) -> WireChunk {
        chunk(json!({"choices": [{"delta": {"tool_calls": [{
            "index": index, "id": id, "function": {"name": name, "arguments": arguments},
        }]}}]}))
    }

    #[test]
    fn every_kept_byte_of_a_tool_call_counts_and_a_repeated_id_costs_nothing() {
        let mut answer = Assembly::new(&limits(1 << 20, 64));
        answer
            .take(call_fragment(0, Some("call_1"), "search", "{\"q\""))
            .unwrap();
        assert_eq!(answer.kept_bytes, CALL_RECORD_BYTES + 6 + 6 + 4);
        answer.take(call_fragment(0, Some("call_1"), "", ":1}")).unwrap();
        assert_eq!(answer.kept_bytes, CALL_RECORD_BYTES + 6 + 6 + 7);
        answer.take(call_fragment(0, Some("call_2"), "", "")).unwrap();
        assert_eq!(answer.kept_bytes, CALL_RECORD_BYTES + 6 + 6 + 7 + 6);
        answer
            .take(chunk(
                json!({"choices": [{"delta": {"content": "hi"}, "finish_reason": "tool_calls"}]}),
            ))
            .unwrap();
        assert_eq!(answer.kept_bytes, CALL_RECORD_BYTES + 6 + 6 + 7 + 6 + 2 + 10);
        let last = answer.last_chunk();
        assert_eq!(
            last.tool_calls,
            vec![ToolCall {
                id: "call_2".into(),
                name: "search".into(),
                arguments: "{\"q\":1}".into(),
            }]
        );
    }

    #[test]
    fn new_calls_with_long_ids_end_the_answer_at_its_byte_bound() {
        let mut answer = Assembly::new(&limits(1000, 64));
        let id = "i".repeat(300);
        let error = (0..64)
            .find_map(|index| answer.take(call_fragment(index, Some(&id), "", "")).err())
            .expect("the bound to end the answer");
        assert!(
            error.to_string().contains("llm.max_answer_bytes (1000)"),
            "{error}"
        );
        assert!(answer.kept_bytes <= 1000 + CALL_RECORD_BYTES + id.len());
    }

    #[test]
    fn the_tool_calls_of_one_answer_are_bounded_in_number() {
        let mut answer = Assembly::new(&limits(1 << 20, 2));
        answer.take(call_fragment(7, Some("a"), "f", "")).unwrap();
        answer.take(call_fragment(9, Some("b"), "f", "")).unwrap();
        // More of a call already open is no new call.
        answer.take(call_fragment(7, None, "", "{}")).unwrap();
        let error = answer.take(call_fragment(10, Some("c"), "f", "")).unwrap_err();
        assert!(
            matches!(&error, LlmError::Failed(message) if message.contains("llm.max_tool_calls_per_answer (2)")),
            "{error:?}"
        );
    }

    #[test]
    fn the_prompt_s_bytes_are_its_texts_calls_and_tool_definitions() {
        let request = ChatRequest {
            messages: vec![
                ChatMessage {
                    role: Role::User,
                    content: "hello".into(),
                    tool_calls: Vec::new(),
                    tool_call_id: None,
                },
                ChatMessage {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "f".into(),
                        arguments: "{}".into(),
                    }],
                    tool_call_id: None,
                },
                ChatMessage {
                    role: Role::Tool,
                    content: "done".into(),
                    tool_calls: Vec::new(),
                    tool_call_id: Some("c1".into()),
                },
            ],
            tools: vec![ToolDefinition {
                name: "f".into(),
                description: "does".into(),
                parameters: json!({"type": "object"}),
            }],
            ..ChatRequest::default()
        };
        assert_eq!(request.prompt_bytes(), 5 + (2 + 1 + 2) + (4 + 2) + (1 + 4 + 17));
    }
}
