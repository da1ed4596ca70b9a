//! The node as an MCP client over Streamable HTTP (protocol 2025-11-25, as the
//! mcp 2.3.0 SDK's server speaks it), so plugins can call the tools of the
//! servers in `[mcp.servers]` through `call-tool("<server>/<tool>", …)`.
//!
//! One [`RemoteServer`] per configured server keeps its session (initialize,
//! `Mcp-Session-Id`, `notifications/initialized`; a 404 for the session id
//! means the server forgot it, so the client initializes again, once) and a
//! short-lived cache of its allow-listed tools, which the runtime needs before
//! a call to decide the approval from the tool's annotations. An answer may be
//! one JSON body or an event stream; on a stream, only the response with the
//! request's id counts, notifications are skipped, and a request from the
//! server (elicitation, sampling, roots) is refused with -32601: a plugin has
//! no human to ask, and a server left waiting would hold the call until its
//! own timeout.
//!
//! Everything is bounded like every other outbound call: the host must be in
//! `outbound.allowed_hosts`, each exchange (a stream included) ends within
//! `outbound.timeout_ms` and reads at most `outbound.max_response_bytes`, and
//! at most [`MAX_TOOLS`] tools are kept per server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::http_client::{self, ClientError, StreamingResponse};
use super::sse::SseParser;
use crate::config::Config;
use crate::jsonrpc::{self, ErrorObject, Reply};
use crate::vocab::Risk;

/// The protocol version this client asks for.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// Versions whose Streamable HTTP transport is the one this client speaks, should a server answer an older one.
const COMPATIBLE_VERSIONS: [&str; 3] = [PROTOCOL_VERSION, "2025-06-18", "2025-03-26"];
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// How long a server's tool list is trusted before it is listed again.
const TOOLS_TTL: Duration = Duration::from_secs(60);
/// Allow-listed tools kept per server; a server listing more is refused.
pub const MAX_TOOLS: usize = 1000;
/// `tools/list` pages read per listing: a server whose cursor never ends cannot loop the client.
const MAX_PAGES: usize = 100;
/// JSON-RPC "method not found": the answer to every request a server sends the node.

#[derive(Debug, thiserror::Error)]
pub enum McpClientError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{url} answered HTTP {status}: {body}")]
    Http { url: String, status: u16, body: String },
    #[error("{url} did not answer in MCP: {message}")]
    BadReply { url: String, message: String },
    #[error("{url} answered with JSON-RPC error {code}: {message}")]
    Rpc { url: String, code: i64, message: String },
    #[error("{url} speaks MCP {version}, which this client does not")]
    Version { url: String, version: String },
    #[error("{url} lists more than {MAX_TOOLS} tools the node may call")]
    TooManyTools { url: String },
    #[error("{url} lists no tool named {tool:?}")]
    UnknownTool { url: String, tool: String },
}

impl McpClientError {
    /// The outcome label of a failed call in the metrics.
    pub fn outcome(&self) -> &'static str {
        match self {
            McpClientError::Client(ClientError::Timeout { .. }) => "timeout",
            _ => "error",
        }
    }
}

/// A tool as a server lists it: what the runtime needs to describe it and
/// decide its approval.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub input_schema: Value,
    #[serde(default)]
    pub annotations: Option<ToolAnnotations>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    #[serde(default)]
    pub read_only_hint: Option<bool>,
    #[serde(default)]
    pub destructive_hint: Option<bool>,
}

impl RemoteTool {
    /// The risk the host decides approval by. MCP's defaults make an
    /// unannotated tool one that may write and destroy, so only a tool that
    /// says it reads is low, one that says it writes without destroying is
    /// medium, and every other is high.
    pub fn risk(&self) -> Risk {
        let hints = self.annotations.clone().unwrap_or_default();
        if hints.read_only_hint == Some(true) {
            Risk::Low
        } else if hints.destructive_hint == Some(false) {
            Risk::Medium
        } else {
            Risk::High
        }
    }
}

/// The configured servers, by name.
#[derive(Default)]
pub struct McpServers {
    servers: BTreeMap<String, Arc<RemoteServer>>,
}

impl McpServers {
    pub fn from_config(config: &Config) -> McpServers {
        let limits = Limits {
            timeout: Duration::from_millis(config.outbound.timeout_ms),
            max_response_bytes: config.outbound.max_response_bytes,
        };
        let servers = config
            .mcp
            .servers
            .iter()
            .map(|(name, server)| {
                let remote = RemoteServer {
                    name: name.clone(),
                    url: server.url.clone(),
                    token: server.token.clone(),
                    allowed_tools: server.tools.clone(),
                    allowed_hosts: config.outbound.allowed_hosts.clone(),
                    limits,
                    next_id: AtomicU64::new(1),
                    session: Mutex::new(None),
                    tools: parking_lot::RwLock::new(None),
                    listing: Mutex::new(()),
                };
                (name.clone(), Arc::new(remote))
            })
            .collect();
        McpServers { servers }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<RemoteServer>> {
        self.servers.get(name)
    }
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    timeout: Duration,
    max_response_bytes: usize,
}

/// One configured MCP server: its session and its cached tools.
pub struct RemoteServer {
    name: String,
    url: String,
    token: String,
    allowed_tools: Vec<String>,
    allowed_hosts: Vec<String>,
    limits: Limits,
    next_id: AtomicU64,
    /// Held while initializing, so concurrent calls share one new session.
    session: Mutex<Option<Arc<Session>>>,
    /// The last listing; read without waiting (see [`RemoteServer::listed_risk`]).
    tools: parking_lot::RwLock<Option<Arc<ToolCache>>>,
    /// Held while listing, so concurrent lookups share one listing.
    listing: Mutex<()>,
}

struct Session {
    /// `None` when the server runs without sessions.
    id: Option<String>,
    version: String,
}

struct ToolCache {
    fetched: Instant,
    tools: BTreeMap<String, RemoteTool>,
}

/// What one POST came to.
enum Sent {
    Answer(Value),
    /// 404 for the session id sent: the server no longer knows the session.
    SessionGone,
}

impl RemoteServer {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether `mcp.servers.<name>.tools` lets plugins call `tool`.
    pub fn allows(&self, tool: &str) -> bool {
        self.allowed_tools
            .iter()
            .any(|allowed| allowed == "*" || allowed == tool)
    }

    /// The listing of `tool`, from the cache while it is fresh; listed again
    /// when stale or when the tool is not in it (the server may have added it).
    pub async fn tool(&self, tool: &str) -> Result<RemoteTool, McpClientError> {
        if let Some(found) = self.freshly_listed(tool) {
            return Ok(found);
        }
        let _listing = self.listing.lock().await;
        // Another call may have listed the tools while this one waited: one listing serves both.
        if let Some(found) = self.freshly_listed(tool) {
            return Ok(found);
        }
        let tools = self.list_tools().await?;
        let found = tools.get(tool).cloned();
        *self.tools.write() = Some(Arc::new(ToolCache {
            fetched: Instant::now(),
            tools,
        }));
        found.ok_or_else(|| McpClientError::UnknownTool {
            url: self.url.clone(),
            tool: tool.to_string(),
        })
    }

    /// `tool` from a listing younger than [`TOOLS_TTL`].
    fn freshly_listed(&self, tool: &str) -> Option<RemoteTool> {
        let cache = self.tools.read();
        let cache = cache
            .as_ref()
            .filter(|cache| cache.fetched.elapsed() < TOOLS_TTL)?;
        cache.tools.get(tool).cloned()
    }

    /// The risk of `tool` as last listed, without asking the server: what a
    /// transport checks a tool's lifecycle events against.
    pub fn listed_risk(&self, tool: &str) -> Option<Risk> {
        self.tools.read().as_ref()?.tools.get(tool).map(RemoteTool::risk)
    }

    /// `tools/call`: the tool's output (`Ok(Err)` is a result the server
    /// marked `isError`), or why the call failed.
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<Result<String, String>, McpClientError> {
        let arguments = if arguments.is_null() { json!({}) } else { arguments };
        let result = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await?;
        Ok(tool_output(&result))
    }

    /// Every allow-listed tool the server lists, across its pages.
    async fn list_tools(&self) -> Result<BTreeMap<String, RemoteTool>, McpClientError> {
        let mut tools = BTreeMap::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let page = self.request("tools/list", params).await?;
            let (listed, next) = tools_page(&self.url, page)?;
            for tool in listed.into_iter().filter(|tool| self.allows(&tool.name)) {
                tools.insert(tool.name.clone(), tool);
            }
            if tools.len() > MAX_TOOLS {
                return Err(McpClientError::TooManyTools {
                    url: self.url.clone(),
                });
            }
            match next {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(self.bad_reply(format!("tools/list has more than {MAX_PAGES} pages")))
    }

    /// One request in the current session; a session the server forgot is
    /// replaced once.
    async fn request(&self, method: &str, params: Value) -> Result<Value, McpClientError> {
        for _ in 0..2 {
            let session = self.session().await?;
            match self.send(Some(&session), method, Some(params.clone())).await? {
                Sent::Answer(result) => return Ok(result),
                Sent::SessionGone => self.forget(&session).await,
            }
        }
        Err(self.bad_reply("the session was not found again right after initializing".into()))
    }

    async fn session(&self) -> Result<Arc<Session>, McpClientError> {
        let mut current = self.session.lock().await;
        if let Some(session) = current.as_ref() {
            return Ok(session.clone());
        }
        let session = Arc::new(self.initialize().await?);
        *current = Some(session.clone());
        Ok(session)
    }

    /// Drop `stale` unless another call has replaced it already.
    async fn forget(&self, stale: &Arc<Session>) {
        let mut current = self.session.lock().await;
        if current
            .as_ref()
            .is_some_and(|session| Arc::ptr_eq(session, stale))
        {
            *current = None;
        }
    }

    async fn initialize(&self) -> Result<Session, McpClientError> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "agora-node", "version": env!("CARGO_PKG_VERSION")},
        });
        let request = self.rpc_request("initialize", Some(params));
        let (result, session_id) = self
            .within_deadline(async {
                let (response, session_id) = self.post(None, &request).await?;
                match self.answer(response, &request, None).await? {
                    Sent::Answer(result) => Ok((result, session_id)),
                    Sent::SessionGone => Err(self.bad_reply("initialize was answered 404".into())),
                }
            })
            .await?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !COMPATIBLE_VERSIONS.contains(&version.as_str()) {
            return Err(McpClientError::Version {
                url: self.url.clone(),
                version,
            });
        }
        let session = Session {
            id: session_id,
            version,
        };
        let initialized = jsonrpc::notification("notifications/initialized", None);
        self.within_deadline(async {
            let (mut response, _) = self.post(Some(&session), &initialized).await?;
            if !(200..300).contains(&response.status) {
                return Err(self.http_error(response).await);
            }
            self.read_body(&mut response).await
        })
        .await?;
        Ok(session)
    }

    fn rpc_request(&self, method: &str, params: Option<Value>) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        jsonrpc::request(id, method, params)
    }

    /// POST a request and read its answer, the whole exchange within the timeout.
    async fn send(
        &self,
        session: Option<&Session>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Sent, McpClientError> {
        let request = self.rpc_request(method, params);
        self.within_deadline(async {
            let (response, _) = self.post(session, &request).await?;
            self.answer(response, &request, session).await
        })
        .await
    }

    /// POST one JSON-RPC message; the response (headers only) and the session id it names.
    async fn post(
        &self,
        session: Option<&Session>,
        message: &Value,
    ) -> Result<(StreamingResponse, Option<String>), McpClientError> {
        http_client::check_allowed(&self.url, &self.allowed_hosts)?;
        let bearer = format!("Bearer {}", self.token);
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        if !self.token.is_empty() {
            headers.push(("authorization", bearer.as_str()));
        }
        if let Some(session) = session {
            headers.push((VERSION_HEADER, session.version.as_str()));
            if let Some(id) = &session.id {
                headers.push((SESSION_HEADER, id.as_str()));
            }
        }
        let body = message.to_string().into_bytes();
        let response =
            http_client::open_stream("POST", &self.url, &headers, body, self.limits.timeout).await?;
        let session_id = response
            .headers
            .get(SESSION_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        Ok((response, session_id))
    }

    /// The answer to `request` in `response`.
    async fn answer(
        &self,
        mut response: StreamingResponse,
        request: &Value,
        session: Option<&Session>,
    ) -> Result<Sent, McpClientError> {
        if response.status == 404 && session.is_some_and(|session| session.id.is_some()) {
            return Ok(Sent::SessionGone);
        }
        if !(200..300).contains(&response.status) {
            return Err(self.http_error(response).await);
        }
        let is_stream = content_type(&response).starts_with("text/event-stream");
        let id = &request["id"];
        if is_stream {
            return self
                .read_stream(&mut response, id, session)
                .await
                .map(Sent::Answer);
        }
        let body = self.read_body(&mut response).await?;
        let message = serde_json::from_slice(&body)
            .map_err(|e| self.bad_reply(format!("the body is not JSON: {e}")))?;
        match jsonrpc::reply_to(&message, id) {
            Reply::Answer(answer) => answer.map(Sent::Answer).map_err(|error| self.rpc_error(error)),
            _ => Err(self.bad_reply(format!("the body is not the answer to request {id}"))),
        }
    }

    /// Read a stream up to the response to `id`, refusing the server's requests on the way.
    async fn read_stream(
        &self,
        response: &mut StreamingResponse,
        id: &Value,
        session: Option<&Session>,
    ) -> Result<Value, McpClientError> {
        let limit = self.limits.max_response_bytes;
        let mut reader = StreamReader::new(id.clone(), limit);
        while let Some(chunk) = response.chunk().await? {
            for step in reader.feed(&chunk).map_err(|message| self.bad_reply(message))? {
                match step {
                    Step::Answer(answer) => return answer.map_err(|error| self.rpc_error(error)),
                    Step::Refuse(request_id) => self.refuse(session, request_id).await,
                }
            }
        }
        Err(self.bad_reply(format!("the stream ended without the answer to request {id}")))
    }

    /// Answer a server's request with -32601; a failure here only costs the server its wait.
    async fn refuse(&self, session: Option<&Session>, request_id: Value) {
        let why = "agora-node answers no server requests: a plugin's tool call has no human to ask";
        let refusal = jsonrpc::error(&request_id, jsonrpc::code::METHOD_NOT_FOUND, why, None);
        let sent = async {
            let (mut response, _) = self.post(session, &refusal).await?;
            self.read_body(&mut response).await
        };
        if let Err(error) = sent.await {
            tracing::debug!(server = %self.name, %error, "refusing a server request failed");
        }
    }

    async fn read_body(&self, response: &mut StreamingResponse) -> Result<Vec<u8>, McpClientError> {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > self.limits.max_response_bytes {
                return Err(ClientError::TooLarge {
                    url: self.url.clone(),
                    limit: self.limits.max_response_bytes,
                }
                .into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    async fn within_deadline<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, McpClientError>>,
    ) -> Result<T, McpClientError> {
        let timeout = self.limits.timeout;
        tokio::time::timeout(timeout, work).await.map_err(|_| {
            McpClientError::from(ClientError::Timeout {
                url: self.url.clone(),
                timeout_ms: timeout.as_millis() as u64,
            })
        })?
    }

    async fn http_error(&self, mut response: StreamingResponse) -> McpClientError {
        let body = match self.read_body(&mut response).await {
            Ok(body) => String::from_utf8_lossy(&body).chars().take(512).collect(),
            Err(error) => format!("(unreadable body: {error})"),
        };
        McpClientError::Http {
            url: self.url.clone(),
            status: response.status,
            body,
        }
    }

    fn bad_reply(&self, message: String) -> McpClientError {
        McpClientError::BadReply {
            url: self.url.clone(),
            message,
        }
    }

    fn rpc_error(&self, error: Option<ErrorObject>) -> McpClientError {
        match error {
            Some(error) => McpClientError::Rpc {
                url: self.url.clone(),
                code: error.code,
                message: error.message,
            },
            None => self.bad_reply("a JSON-RPC error without an integer code".into()),
        }
    }
}

fn content_type(response: &StreamingResponse) -> String {
    response
        .headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// What reading a piece of an event stream asks of the client.
#[derive(Debug, PartialEq)]
enum Step {
    Answer(Result<Value, Option<ErrorObject>>),
    Refuse(Value),
}

/// The messages of one response stream, as they concern the request `id`;
/// the bytes read in all are bounded, events skipped included.
struct StreamReader {
    id: Value,
    parser: SseParser,
    read: usize,
    limit: usize,
}

impl StreamReader {
    fn new(id: Value, limit: usize) -> StreamReader {
        StreamReader {
            id,
            parser: SseParser::new(limit, limit),
            read: 0,
            limit,
        }
    }

    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Step>, String> {
        self.read += bytes.len();
        if self.read > self.limit {
            return Err(format!("the stream is over {} bytes", self.limit));
        }
        let mut steps = Vec::new();
        for event in self.parser.feed(bytes).map_err(|e| e.to_string())? {
            // Empty data is how servers prime a stream (an event id for resuming), not a message.
            if event.name != "message" || event.data.trim().is_empty() {
                continue;
            }
            let message: Value =
                serde_json::from_str(&event.data).map_err(|e| format!("an event that is not JSON: {e}"))?;
            match jsonrpc::reply_to(&message, &self.id) {
                Reply::Answer(answer) => {
                    steps.push(Step::Answer(answer));
                    return Ok(steps);
                }
                Reply::ServerRequest(request_id) => steps.push(Step::Refuse(request_id)),
                Reply::Other => {}
            }
        }
        Ok(steps)
    }
}

/// One page of `tools/list`: its tools and the cursor of the next page.
fn tools_page(url: &str, page: Value) -> Result<(Vec<RemoteTool>, Option<String>), McpClientError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Page {
        tools: Vec<RemoteTool>,
        #[serde(default)]
        next_cursor: Option<String>,
    }
    let page: Page = serde_json::from_value(page).map_err(|e| McpClientError::BadReply {
        url: url.to_string(),
        message: format!("an unexpected tools/list result: {e}"),
    })?;
    let next = page.next_cursor.filter(|cursor| !cursor.is_empty());
    Ok((page.tools, next))
}

/// A `tools/call` result as the plugin gets it: `structuredContent` as JSON
/// when present, else the text blocks joined by newlines; `isError` makes it
/// the tool's failure, with its text.
fn tool_output(result: &Value) -> Result<String, String> {
    let text = result
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|block| block.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(if text.is_empty() {
            "the server reported an error without text".into()
        } else {
            text
        });
    }
    match result.get("structuredContent") {
        Some(structured) if !structured.is_null() => Ok(structured.to_string()),
        _ => Ok(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(annotations: Value) -> RemoteTool {
        serde_json::from_value(
            json!({"name": "t", "inputSchema": {"type": "object"}, "annotations": annotations}),
        )
        .unwrap()
    }

    #[test]
    fn risk_follows_the_annotations_and_mcps_defaults() {
        assert_eq!(tool(json!({"readOnlyHint": true})).risk(), Risk::Low);
        // readOnlyHint wins: destructiveHint means nothing for a tool that only reads.
        assert_eq!(
            tool(json!({"readOnlyHint": true, "destructiveHint": true})).risk(),
            Risk::Low
        );
        assert_eq!(
            tool(json!({"readOnlyHint": false, "destructiveHint": false})).risk(),
            Risk::Medium
        );
        assert_eq!(tool(json!({"destructiveHint": false})).risk(), Risk::Medium);
        assert_eq!(tool(json!({"destructiveHint": true})).risk(), Risk::High);
        assert_eq!(tool(json!({"readOnlyHint": false})).risk(), Risk::High);
        assert_eq!(tool(json!({})).risk(), Risk::High);
        assert_eq!(tool(Value::Null).risk(), Risk::High);
    }

    #[test]
    fn a_stream_yields_refusals_then_the_answer_however_it_is_cut() {
        let stream = concat!(
            "id: prime\ndata: \n\n",
            ": keep-alive\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n",
            "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"method\":\"elicitation/create\",\r\n",
            "data: \"params\":{\"message\":\"sure?\"}}\r\n\r\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"other\":true}}\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[]}}\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":\"after the answer: not read\"}\n\n",
        )
        .as_bytes();
        let expected = vec![
            Step::Refuse(json!("srv-1")),
            Step::Answer(Ok(json!({"content": []}))),
        ];
        for size in 1..=stream.len() {
            let mut reader = StreamReader::new(json!(2), 4096);
            let mut steps = Vec::new();
            for piece in stream.chunks(size) {
                steps.extend(reader.feed(piece).unwrap());
                if matches!(steps.last(), Some(Step::Answer(_))) {
                    break;
                }
            }
            assert_eq!(steps, expected, "pieces of {size} bytes");
        }
    }

    #[test]
    fn a_stream_is_bounded_and_must_carry_json() {
        let mut reader = StreamReader::new(json!(1), 64);
        let progress = b"data: {\"method\":\"notifications/progress\"}\n\n";
        assert_eq!(reader.feed(progress).unwrap(), vec![]);
        assert!(reader.feed(progress).unwrap_err().contains("over 64 bytes"));
        let mut reader = StreamReader::new(json!(1), 64);
        assert!(reader.feed(b"data: {nope\n\n").unwrap_err().contains("not JSON"));
        let mut reader = StreamReader::new(json!(1), 64);
        let error = b"data: {\"id\":1,\"error\":{\"code\":-32603,\"message\":\"boom\"}}\n\n";
        assert_eq!(
            reader.feed(error).unwrap(),
            vec![Step::Answer(Err(Some(ErrorObject {
                code: -32603,
                message: "boom".into(),
                data: None,
            })))]
        );
    }

    #[test]
    fn a_tool_result_is_its_structured_content_or_its_text() {
        let text = json!({"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "…"}, {"type": "text", "text": "b"}]});
        assert_eq!(tool_output(&text), Ok("a\nb".into()));
        let structured =
            json!({"content": [{"type": "text", "text": "{\"n\": 1}"}], "structuredContent": {"n": 1}});
        assert_eq!(tool_output(&structured), Ok("{\"n\":1}".into()));
        let failed = json!({"content": [{"type": "text", "text": "no such record"}], "isError": true, "structuredContent": {"n": 1}});
        assert_eq!(tool_output(&failed), Err("no such record".into()));
        assert_eq!(
            tool_output(&json!({"content": [], "isError": true})),
            Err("the server reported an error without text".into())
        );
        assert_eq!(
            tool_output(&json!({"content": [], "isError": false})),
            Ok(String::new())
        );
    }

    #[test]
    fn a_tools_page_gives_its_tools_and_the_next_cursor() {
        let page = json!({"tools": [{"name": "a", "description": "A", "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true}}, {"name": "b", "inputSchema": {"type": "object"}}],
            "nextCursor": "2"});
        let (tools, next) = tools_page("u", page).unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(
            (tools[0].description.as_deref(), tools[0].risk()),
            (Some("A"), Risk::Low)
        );
        assert_eq!(
            (tools[1].description.as_deref(), tools[1].risk()),
            (None, Risk::High)
        );
        assert_eq!(next.as_deref(), Some("2"));
        let (_, last) = tools_page("u", json!({"tools": [], "nextCursor": ""})).unwrap();
        assert_eq!(last, None);
        assert!(matches!(
            tools_page("u", json!({"tool": []})),
            Err(McpClientError::BadReply { .. })
        ));
    }
}
