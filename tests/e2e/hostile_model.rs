//! A hostile model server against the node's model client (issue 37, findings
//! 7, 8 and 9), over real sockets: the `fixture-agent` plugin chats through a real
//! node with a server in this test that speaks just enough of the
//! OpenAI-compatible protocol to attack it.
//!
//! - tool calls streamed without end, each under a new `index` with a long id,
//!   or as many short ones as the server likes: every byte the node keeps counts
//!   toward `llm.max_answer_bytes` and the calls of one answer are bounded
//!   (`llm.max_tool_calls_per_answer`), so the answer ends with the size error
//!   soon after the bound, the node hangs up, and it answers the next chat;
//! - a provider that reports no `usage`: each prompt is estimated from its
//!   bytes and checked against what remains of the day's tokens before it is
//!   sent, so prompts over the budget never reach the model;
//! - one caller (finding 9) spends at most its share of the day's tokens
//!   (`llm.tokens_per_day_per_caller`), whatever the plugin's own budget.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::capabilities::{DOCUMENT, FIXTURE};
use crate::support::{NodeBuilder, RawRequest, TestNode, document_hash, post_json, raw_exchange};

/// Of the server's long-id answer: each id's length, and what it sends at most.
const LONG_ID_BYTES: usize = 16 * 1024;
const LONG_IDS_SENT_AT_MOST: usize = 40 << 20;
/// Of its many-calls answer: how many calls it sends at most.
const MANY_CALLS_AT_MOST: usize = 10_000;
/// The node's bound in these tests.
const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// What the node may have let the server write past its bound: the loopback
/// socket buffers of both ends and the HTTP client's own (a few MiB), generously.
const SENT_PAST_THE_BOUND: usize = 16 << 20;
/// Longest wait for the node to hang up on an answer it refused.
const HANG_UP_WAIT: Duration = Duration::from_secs(20);

/// The hostile server: what reached it, and how much of its answers it wrote.
struct HostileModel {
    port: u16,
    /// The request bodies, in order of arrival.
    received: Arc<Mutex<Vec<Value>>>,
    /// Bytes of its answers written to the node's socket so far.
    sent: Arc<AtomicUsize>,
    /// One message per answer written to its end: by the node hanging up, or the server's cap.
    ended: mpsc::Receiver<()>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl HostileModel {
    /// Answers by the last message's text: `[long ids]` and `[many calls]` attack;
    /// anything else is a short honest answer, `ok`, without a `usage`.
    fn start() -> HostileModel {
        let (runtime, listener, port) = crate::support::server_runtime();
        let received: Arc<Mutex<Vec<Value>>> = Arc::default();
        let sent: Arc<AtomicUsize> = Arc::default();
        let (ended_tx, ended) = mpsc::channel();
        let (sink, counter) = (received.clone(), sent.clone());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((socket, _)) = listener.accept().await {
                let (sink, counter, ended_tx) = (sink.clone(), counter.clone(), ended_tx.clone());
                tokio::spawn(async move {
                    serve(socket, &sink, &counter).await;
                    let _ = ended_tx.send(());
                });
            }
        });
        HostileModel {
            port,
            received,
            sent,
            ended,
            runtime: Some(runtime),
        }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    fn requests(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    /// Wait until the answer being written has ended (the node hung up).
    fn wait_until_answer_ended(&self) {
        self.ended
            .recv_timeout(HANG_UP_WAIT)
            .expect("the node to hang up on the answer it refused");
    }
}

impl Drop for HostileModel {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// One exchange: the request (recorded), then an answer chosen by its last message.
async fn serve(mut socket: tokio::net::TcpStream, sink: &Mutex<Vec<Value>>, sent: &AtomicUsize) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let prompt = request["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .and_then(|message| message["content"].as_str())
        .unwrap_or_default()
        .to_string();
    sink.lock().unwrap().push(request);
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let (events, finish_reason) = answer_to(&prompt);
    let finish = json!({"choices": [{"delta": {}, "finish_reason": finish_reason}]});
    for event in events.chain(std::iter::once(finish)) {
        let bytes = format!("data: {event}\n\n");
        if socket.write_all(bytes.as_bytes()).await.is_err() {
            return;
        }
        sent.fetch_add(bytes.len(), Ordering::Relaxed);
    }
    let _ = socket.write_all(b"data: [DONE]\n\n").await;
    let _ = socket.shutdown().await;
}

/// The events answering `prompt`, and the finish reason that follows them.
fn answer_to(prompt: &str) -> (Box<dyn Iterator<Item = Value> + Send>, &'static str) {
    if prompt.contains("[long ids]") {
        let id = "i".repeat(LONG_ID_BYTES);
        let calls = LONG_IDS_SENT_AT_MOST / LONG_ID_BYTES;
        let events = (0..calls).map(move |index| tool_call(index, &format!("{id}{index}"), ""));
        (Box::new(events), "tool_calls")
    } else if prompt.contains("[many calls]") {
        let events = (0..MANY_CALLS_AT_MOST).map(|index| tool_call(index, &format!("c{index}"), "f"));
        (Box::new(events), "tool_calls")
    } else {
        let text = json!({"choices": [{"delta": {"content": "ok"}}]});
        (Box::new(std::iter::once(text)), "stop")
    }
}

/// A streamed fragment opening tool call `index` (no `usage` is ever sent).
fn tool_call(index: usize, id: &str, name: &str) -> Value {
    json!({"choices": [{"delta": {"tool_calls": [{
        "index": index, "id": id, "type": "function",
        "function": {"name": name, "arguments": ""},
    }]}}]})
}

/// The request's JSON body (`Content-Length` framed, as the node sends it).
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Value> {
    let mut buffer = Vec::new();
    let mut piece = [0u8; 8192];
    let body_start = loop {
        match socket.read(&mut piece).await {
            Ok(0) | Err(_) => return None,
            Ok(read) => buffer.extend_from_slice(&piece[..read]),
        }
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..body_start]).to_string();
    let length: usize = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })?;
    while buffer.len() < body_start + length {
        match socket.read(&mut piece).await {
            Ok(0) | Err(_) => return None,
            Ok(read) => buffer.extend_from_slice(&piece[..read]),
        }
    }
    serde_json::from_slice(&buffer[body_start..body_start + length]).ok()
}

fn with_model(model: &HostileModel) -> NodeBuilder {
    TestNode::builder()
        .plugin(FIXTURE)
        .env("AGORA_LLM__BASE_URL", model.base_url())
        .env("AGORA_LLM__MODEL", "hostile-model")
        // Within the test client's own patience, so a node that keeps reading ends anyway.
        .env("AGORA_LLM__TIMEOUT_MS", "20000")
}

/// The fixture's chat of `text`: its answer body.
fn chat(node: &TestNode, text: &str) -> Value {
    let reply = post_json(
        &node.url("/agora"),
        &json!({"protocolHash": document_hash(DOCUMENT), "body": {"op": "chat", "text": text}}),
    );
    assert_eq!(reply.status, 200, "{}\n{}", reply.body, node.log_text());
    reply.json()["body"].clone()
}

/// The error kind and message of a chat that must have failed.
fn chat_error(node: &TestNode, text: &str) -> (String, String) {
    let reply = chat(node, text);
    let shown: String = reply.to_string().chars().take(500).collect();
    let error = reply["error"]
        .as_str()
        .unwrap_or_else(|| panic!("an error, not: {shown}"));
    (
        reply["kind"].as_str().unwrap_or_default().to_string(),
        error.to_string(),
    )
}

#[test]
fn a_model_streaming_endless_tool_calls_is_cut_off_at_the_answer_s_bounds() {
    let model = HostileModel::start();
    let node = with_model(&model)
        .env("AGORA_LLM__MAX_ANSWER_BYTES", MAX_ANSWER_BYTES.to_string())
        .start();

    // Long ids under new indexes: the ids count, so the bytes bound ends the answer.
    let (kind, error) = chat_error(&node, "[long ids]");
    assert!(
        kind.contains("Failed") && error.contains("llm.max_answer_bytes"),
        "{kind}: {error}"
    );
    model.wait_until_answer_ended();
    let sent = model.sent.load(Ordering::Relaxed);
    assert!(
        sent <= MAX_ANSWER_BYTES + SENT_PAST_THE_BOUND,
        "the node read on to {sent} bytes"
    );

    // Short calls without end: the number of calls is bounded, whatever their bytes.
    let (kind, error) = chat_error(&node, "[many calls]");
    assert!(
        kind.contains("Failed") && error.contains("llm.max_tool_calls_per_answer (64)"),
        "{kind}: {error}"
    );
    model.wait_until_answer_ended();

    // The node still answers.
    assert_eq!(chat(&node, "hello")["text"], "ok");
}

#[test]
fn without_a_reported_usage_prompts_count_and_one_over_the_day_s_rest_is_never_sent() {
    let model = HostileModel::start();
    let node = with_model(&model)
        .env("AGORA_LLM__TOKENS_PER_DAY", "1000")
        .start();
    // About four bytes a token: 1 100 tokens, over the whole day's 1 000.
    let (kind, error) = chat_error(&node, &"x".repeat(4400));
    assert!(
        kind.contains("Limited") && error.contains("llm.tokens_per_day"),
        "{kind}: {error}"
    );
    assert_eq!(
        model.requests(),
        0,
        "the prompt over the budget reached the model"
    );

    // 400 tokens each: two fit in the day, the third is refused before it is sent.
    let prompt = "y".repeat(1600);
    for _ in 0..2 {
        assert_eq!(chat(&node, &prompt)["text"], "ok");
    }
    let (kind, error) = chat_error(&node, &prompt);
    assert!(
        kind.contains("Limited") && error.contains("llm.tokens_per_day"),
        "{kind}: {error}"
    );
    assert_eq!(model.requests(), 2);
}

/// The fixture's chat of `text` from the client address `from`: its answer body.
fn chat_from(node: &TestNode, from: [u8; 4], text: &str) -> Value {
    let body =
        json!({"protocolHash": document_hash(DOCUMENT), "body": {"op": "chat", "text": text}}).to_string();
    let reply = raw_exchange(
        node,
        RawRequest::post_json(from.into(), "/agora", body.as_bytes()),
    );
    assert_eq!(reply.status, 200, "{}\n{}", reply.body, node.log_text());
    reply.json()["body"].clone()
}

/// Finding 9: one assistant serves every caller, so its day is shared; one
/// caller spends at most `llm.tokens_per_day_per_caller` of it, and another
/// caller is served after the first has spent its own.
#[test]
fn one_caller_spends_at_most_its_share_of_the_day_and_another_is_still_served() {
    let model = HostileModel::start();
    let node = with_model(&model)
        .env("AGORA_LLM__TOKENS_PER_DAY", "1000000")
        .env("AGORA_LLM__TOKENS_PER_DAY_PER_CALLER", "1000")
        .start();
    // 400 tokens each by their size (the model reports no usage): two fit in one
    // caller's 1 000, the third is refused before it is sent.
    let prompt = "z".repeat(1600);
    let greedy = [127, 0, 0, 2];
    for _ in 0..2 {
        assert_eq!(chat_from(&node, greedy, &prompt)["text"], "ok");
    }
    let refused = chat_from(&node, greedy, &prompt);
    assert!(
        refused["kind"].as_str().unwrap_or_default().contains("Limited")
            && refused["error"]
                .as_str()
                .unwrap_or_default()
                .contains("llm.tokens_per_day_per_caller"),
        "{refused}"
    );
    assert_eq!(model.requests(), 2, "the refused prompt reached the model");
    // Another caller has its own share of the same plugin's day.
    assert_eq!(chat_from(&node, [127, 0, 0, 3], &prompt)["text"], "ok");
    assert_eq!(model.requests(), 3);
}
