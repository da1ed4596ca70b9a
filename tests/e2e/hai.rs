//! HAI (the HAI specification) end to end: a real node with the `hai-assistant`
//! and `inspection-tools` plugins, real WebSockets (tokio-tungstenite), and the
//! browser client in Debian's chromium driven by Playwright.

use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, client_async, connect_async};

use crate::support::{HttpReply, TestNode, get};

/// Upper bound on waiting for one frame, so a broken node fails the test instead of hanging it.
const FRAME_WAIT: Duration = Duration::from_secs(60);

fn node() -> TestNode {
    builder().start()
}

fn builder() -> crate::support::NodeBuilder {
    TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
}

/// The node's HTTP answer to a WebSocket upgrade it refused.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) status: u16,
    pub(crate) body: String,
}

pub(crate) struct Client {
    pub(crate) socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The secret of the session this connection created, from the node's `session` frame.
    secret: Option<String>,
}

impl Client {
    pub(crate) async fn connect(node: &TestNode) -> Client {
        Self::connect_url(&node.ws_url("/ws")).await
    }

    /// Join (or create) `session` when connecting; `secret` is needed to join an existing one.
    pub(crate) async fn connect_to_session(node: &TestNode, session: &str, secret: Option<&str>) -> Client {
        let mut path = format!("/ws?session_id={session}");
        if let Some(secret) = secret {
            path.push_str(&format!("&session_secret={secret}"));
        }
        Self::connect_url(&node.ws_url(&path)).await
    }

    async fn connect_url(url: &str) -> Client {
        let (socket, _) = connect_async(url).await.expect("WebSocket connect");
        Client { socket, secret: None }
    }

    /// Connect with `request` (headers of its own) from the loopback address `from`
    /// (127.0.0.x: each is another client address to the node); the node's HTTP
    /// answer when it refuses the upgrade.
    pub(crate) async fn connect_from(from: IpAddr, request: Request) -> Result<Client, Refused> {
        let port = request.uri().port_u16().expect("a port");
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind((from, 0).into()).expect("binding a loopback address");
        let stream = socket
            .connect(([127, 0, 0, 1], port).into())
            .await
            .expect("TCP connect");
        match client_async(request, MaybeTlsStream::Plain(stream)).await {
            Ok((socket, _)) => Ok(Client { socket, secret: None }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body = response
                    .body()
                    .as_ref()
                    .map(|b| String::from_utf8_lossy(b).to_string())
                    .unwrap_or_default();
                Err(Refused { status, body })
            }
            Err(other) => panic!("WebSocket connect failed: {other}"),
        }
    }

    /// The secret the node issued when this connection created its session.
    pub(crate) fn secret(&self) -> String {
        self.secret.clone().expect("this connection created a session")
    }

    /// The node's `session` frame, which must come first on a connection that
    /// created its session when it connected; its secret.
    pub(crate) async fn created(&mut self) -> String {
        let frame = self.next_raw().await;
        assert_eq!(
            frame["type"], "session",
            "expected the session frame, got {frame}"
        );
        let secret = frame["session_secret"].as_str().expect("a secret").to_string();
        self.secret = Some(secret.clone());
        secret
    }

    pub(crate) async fn send(&mut self, frame: Value) {
        self.send_text(&frame.to_string()).await;
    }

    async fn send_text(&mut self, text: &str) {
        self.socket
            .send(Message::text(text.to_string()))
            .await
            .expect("send");
    }

    pub(crate) async fn say(&mut self, session: &str, content: &str) {
        self.send(json!({"type": "user_message", "content": content, "session_id": session, "metadata": {}}))
            .await;
    }

    pub(crate) async fn approve(&mut self, approval_id: &str, approved: bool, feedback: Option<&str>) {
        let mut frame =
            json!({"type": "tool_approval_response", "approval_id": approval_id, "approved": approved});
        if let Some(feedback) = feedback {
            frame["feedback"] = json!(feedback);
        }
        self.send(frame).await;
    }

    /// The next JSON frame (pings are answered by the library and skipped). The
    /// node's `session` frame is checked and kept, not returned: every test of
    /// the spec's frames sees them as a spec client would.
    pub(crate) async fn next(&mut self) -> Value {
        loop {
            let frame = self.next_raw().await;
            if frame["type"] == "session" {
                let secret = frame["session_secret"].as_str().expect("a secret").to_string();
                assert_eq!(secret.len(), 64, "{frame}");
                assert!(frame["session_id"].is_string(), "{frame}");
                assert!(self.secret.is_none(), "one session frame per connection: {frame}");
                self.secret = Some(secret);
                continue;
            }
            return frame;
        }
    }

    /// The next JSON frame, whatever its type.
    pub(crate) async fn next_raw(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(FRAME_WAIT, self.socket.next())
                .await
                .expect("a frame within the wait")
                .expect("the connection is open")
                .expect("a valid frame");
            match message {
                Message::Text(text) => {
                    return serde_json::from_str(text.as_str()).expect("frames are JSON");
                }
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    /// Frames up to and including the first that satisfies `last`.
    pub(crate) async fn until(&mut self, last: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await;
            let done = last(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Frames of one turn, up to `status: completed`.
    pub(crate) async fn turn(&mut self) -> Vec<Value> {
        self.until(|f| f["type"] == "status" && f["status"] == "completed")
            .await
    }

    pub(crate) async fn error(&mut self) -> Value {
        let frame = self.next().await;
        assert_eq!(frame["type"], "error", "expected an error frame, got {frame}");
        frame
    }
}

pub(crate) fn session_id(label: &str) -> String {
    format!("{label}-{}", std::process::id())
}

/// `GET /ws/sessions/{session}/history` with the session's secret (as the header the browser uses).
pub(crate) fn history(node: &TestNode, session: &str, secret: &str) -> Value {
    let reply = get_with(
        &node.url(&format!("/ws/sessions/{session}/history")),
        &[("x-hai-session-secret", secret)],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

/// A GET with request headers, over a real socket.
pub(crate) fn get_with(url: &str, headers: &[(&str, &str)]) -> HttpReply {
    crate::support::get_with_headers(url, headers)
}

/// A WebSocket request for `path` on the node with extra headers (Origin, Authorization…).
pub(crate) fn ws_request(node: &TestNode, path: &str, headers: &[(&'static str, &str)]) -> Request {
    let mut request = node.ws_url(path).into_client_request().expect("a request");
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(*name, value.parse().expect("a header value"));
    }
    request
}

pub(crate) fn of_type<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["type"] == kind).collect()
}

pub(crate) fn position(frames: &[Value], matches: impl Fn(&Value) -> bool) -> usize {
    frames
        .iter()
        .position(matches)
        .unwrap_or_else(|| panic!("no such frame in {frames:#?}"))
}

/// The turn of "Search for restaurant food storage regulations" (spec flow 2): the
/// low-risk tool runs without approval, its lifecycle comes in order before the answer,
/// and the answer quotes what it found. Returns the started and completed frames' indexes.
pub(crate) fn assert_search_turn(frames: &[Value]) -> (usize, usize) {
    assert!(of_type(frames, "tool_approval_request").is_empty());
    let routing = position(frames, |f| f["status"] == "routing");
    let executing = position(frames, |f| f["status"] == "executing_tools");
    let started = position(frames, |f| f["type"] == "tool_call" && f["status"] == "started");
    let completed = position(frames, |f| f["type"] == "tool_call" && f["status"] == "completed");
    let first_chunk = position(frames, |f| f["type"] == "assistant_message_chunk");
    assert!(routing < executing && executing < started && started < completed && completed < first_chunk);
    assert_eq!(frames[started]["tool_call_id"], frames[completed]["tool_call_id"]);
    assert_eq!(
        frames[started]["parameters"]["query"],
        "restaurant food storage regulations"
    );
    let result = frames[completed]["result"].as_str().unwrap_or_default();
    assert!(
        result.starts_with("Found ") && result.ends_with("relevant regulations"),
        "{result}"
    );
    let text = streamed_text(frames);
    assert!(
        text.contains("FS-10"),
        "the answer quotes the regulations: {text}"
    );
    (started, completed)
}

/// The result text of the turn's failed tool call.
pub(crate) fn failed_tool_result(frames: &[Value]) -> &str {
    let failed = position(frames, |f| f["type"] == "tool_call" && f["status"] == "failed");
    frames[failed]["result"].as_str().unwrap_or_default()
}

/// Approve the pending report of INS-2024-007 (spec flow 3): the tool starts, then
/// completes under that approval with the generated report. Returns the turn's frames.
pub(crate) async fn approve_report_007(client: &mut Client, approval_id: &str) -> Vec<Value> {
    client
        .approve(
            approval_id,
            true,
            Some("Looks good, proceed with report generation"),
        )
        .await;
    let frames = client.turn().await;
    let started = position(&frames, |f| f["type"] == "tool_call" && f["status"] == "started");
    let completed = position(&frames, |f| {
        f["type"] == "tool_call" && f["status"] == "completed"
    });
    assert!(started < completed);
    assert_eq!(frames[completed]["metadata"]["approval_id"], approval_id);
    let result = frames[completed]["result"].as_str().unwrap_or_default();
    assert!(result.contains("Generated report RPT-2024-007-"), "{result}");
    assert!(streamed_text(&frames).contains("has been generated"));
    frames
}

/// Ask for the report of `inspection_id` and reject it with feedback (spec flow 3):
/// the tool never starts, the failure names the approval, it is not a tool failure,
/// and the answer quotes the feedback. Returns the turn's frames.
pub(crate) async fn reject_report(client: &mut Client, session: &str, inspection_id: &str) -> Vec<Value> {
    const FEEDBACK: &str = "I need to add more inspection details first";
    let (_, request) = request_report(client, session, inspection_id).await;
    let approval_id = request["approval_id"].as_str().unwrap_or_default().to_string();
    client.approve(&approval_id, false, Some(FEEDBACK)).await;
    let frames = client.turn().await;
    assert!(
        !frames
            .iter()
            .any(|f| f["type"] == "tool_call" && f["status"] == "started"),
        "a rejected tool never starts: {frames:#?}"
    );
    let failed = position(&frames, |f| f["type"] == "tool_call" && f["status"] == "failed");
    assert_eq!(frames[failed]["metadata"]["approval_id"], approval_id.as_str());
    assert!(
        !frames.iter().any(|f| f["error_code"] == "tool_execution_failed"),
        "a rejection is not a tool failure"
    );
    let text = streamed_text(&frames);
    assert!(text.contains(FEEDBACK), "{text}");
    frames
}

/// The streamed answer of a turn: chunks share one message_id, only the last is final.
pub(crate) fn streamed_text(frames: &[Value]) -> String {
    let chunks = of_type(frames, "assistant_message_chunk");
    assert!(!chunks.is_empty(), "no chunks in {frames:#?}");
    let message_id = &chunks[0]["message_id"];
    assert!(message_id.as_str().is_some_and(|id| !id.is_empty()));
    for (i, chunk) in chunks.iter().enumerate() {
        assert_eq!(&chunk["message_id"], message_id);
        assert_eq!(chunk["is_final"], i + 1 == chunks.len(), "is_final of chunk {i}");
        assert!(chunk["session_id"].is_string());
    }
    chunks.iter().map(|c| c["content"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn flow1_answer_streams_in_chunks_between_thinking_and_completed() {
    let node = node();
    let session = session_id("flow1");
    let mut client = Client::connect(&node).await;
    client.say(&session, "What are food safety regs?").await;
    let frames = client.turn().await;
    assert_eq!(frames[0]["type"], "status");
    assert_eq!(frames[0]["status"], "thinking");
    assert_eq!(frames[0]["session_id"], session.as_str());
    assert!(
        of_type(&frames, "assistant_message_chunk").len() >= 3,
        "several chunks: {frames:#?}"
    );
    let text = streamed_text(&frames);
    assert!(text.contains("What are food safety regs?"), "{text}");
    assert_eq!(frames.last().unwrap()["session_id"], session.as_str());
    // No frame after the final chunk but `completed`.
    let final_at = position(&frames, |f| f["is_final"] == true);
    assert_eq!(final_at + 2, frames.len());

    // The non-streaming form, on request.
    client
        .send(json!({"type": "user_message", "content": "hello again", "session_id": session, "metadata": {"stream": false}}))
        .await;
    let frames = client.turn().await;
    assert!(of_type(&frames, "assistant_message_chunk").is_empty());
    let messages = of_type(&frames, "assistant_message");
    assert_eq!(messages.len(), 1);
    assert!(messages[0]["content"].as_str().unwrap().contains("hello again"));
    assert_eq!(messages[0]["agent_id"], "hai-assistant");
}

#[tokio::test]
async fn flow2_search_runs_the_low_risk_tool_without_approval() {
    let node = node();
    let session = session_id("flow2");
    let mut client = Client::connect(&node).await;
    client
        .say(&session, "Search for restaurant food storage regulations")
        .await;
    let frames = client.turn().await;
    let (started, completed) = assert_search_turn(&frames);
    let done = &frames[completed];
    assert_eq!(frames[started]["tool_name"], "search_regulations");
    assert_eq!(done["session_id"], session.as_str());

    // A search the tool refuses: a failed tool_call and a tool_execution_failed error, then an answer.
    client.say(&session, "search").await;
    let frames = client.turn().await;
    let failed = position(&frames, |f| f["type"] == "tool_call" && f["status"] == "failed");
    assert!(
        frames[failed]["result"]
            .as_str()
            .unwrap()
            .contains("query is empty")
    );
    let error = position(&frames, |f| f["type"] == "error");
    assert_eq!(frames[error]["error_code"], "tool_execution_failed");
    assert_eq!(frames[error]["details"]["tool_name"], "search_regulations");
    assert!(streamed_text(&frames).contains("could not search"));
}

pub(crate) async fn request_report(
    client: &mut Client,
    session: &str,
    inspection: &str,
) -> (Vec<Value>, Value) {
    client
        .say(
            session,
            &format!("Generate the inspection report for {inspection}"),
        )
        .await;
    let frames = client.until(|f| f["type"] == "tool_approval_request").await;
    let request = frames.last().unwrap().clone();
    assert!(
        of_type(&frames, "tool_call").is_empty(),
        "nothing runs before approval: {frames:#?}"
    );
    (frames, request)
}

#[tokio::test]
async fn flow3_report_needs_approval_and_honours_rejection_with_feedback() {
    let node = node();
    let session = session_id("flow3");
    let mut client = Client::connect(&node).await;

    let (frames, request) = request_report(&mut client, &session, "INS-2024-007").await;
    assert_eq!(frames[0]["status"], "thinking");
    assert_eq!(request["tool_name"], "generate_inspection_report");
    assert_eq!(request["risk_level"], "high");
    assert_eq!(request["parameters"]["inspection_id"], "INS-2024-007");
    assert_eq!(request["session_id"], session.as_str());
    assert!(
        request["tool_description"]
            .as_str()
            .unwrap()
            .contains("stored permanently")
    );
    assert!(request["reasoning"].as_str().unwrap().contains("INS-2024-007"));
    let approval_id = request["approval_id"].as_str().unwrap().to_string();
    let frames = approve_report_007(&mut client, &approval_id).await;
    let text = streamed_text(&frames);
    assert!(
        text.contains("has been generated") && text.contains("RPT-2024-007-"),
        "{text}"
    );

    // The same approval cannot be answered twice.
    client.approve(&approval_id, true, None).await;
    let error = client.error().await;
    assert_eq!(error["error_code"], "unknown_approval");

    // Rejected: the tool does not run and the answer quotes the feedback.
    let frames = reject_report(&mut client, &session, "INS-2024-008").await;
    let text = streamed_text(&frames);
    assert!(text.contains("was not generated"), "{text}");

    // The history has both decisions and the tool result.
    let history = history(&node, &session, &client.secret());
    let entries = history["entries"].as_array().unwrap();
    let approvals: Vec<&Value> = entries.iter().filter(|e| e["role"] == "approval").collect();
    assert_eq!(approvals.len(), 2);
    assert_eq!(approvals[0]["body"]["approved"], true);
    assert_eq!(approvals[1]["body"]["approved"], false);
    assert_eq!(
        approvals[1]["body"]["feedback"],
        "I need to add more inspection details first"
    );
    assert!(
        entries
            .iter()
            .any(|e| e["role"] == "tool" && e["body"]["status"] == "completed")
    );
}

#[tokio::test]
async fn flow4_moderation_refuses_a_message_and_the_rephrased_one_is_answered() {
    let node = builder()
        .env("AGORA_HAI__BLOCKED_WORDS", r#"["darn", "bad phrase"]"#)
        .start();
    let session = session_id("flow4");
    let mut client = Client::connect(&node).await;
    client.say(&session, "This DARN fridge is warm").await;
    let error = client.error().await;
    assert_eq!(error["error_code"], "moderation_violation");
    assert_eq!(error["details"]["blocked_pattern"], "darn");
    client.say(&session, "that is a Bad  phrase!").await;
    assert_eq!(client.error().await["error_code"], "moderation_violation");
    // Whole words only: "darning" is fine.
    client
        .say(&session, "The fridge is warm, I am darning socks")
        .await;
    let frames = client.turn().await;
    assert_eq!(frames[0]["status"], "thinking");
    assert!(streamed_text(&frames).contains("darning socks"));
    // The refused messages never reached the assistant or the history.
    client.say(&session, "what did I say first?").await;
    let text = streamed_text(&client.turn().await);
    assert!(text.contains("The fridge is warm, I am darning socks"), "{text}");
}

#[tokio::test]
async fn the_plugin_sees_a_hai_caller_as_hai() {
    let node = node();
    let session = session_id("protocol");
    let mut client = Client::connect(&node).await;
    client.say(&session, "which protocol do I reach you over?").await;
    let text = streamed_text(&client.turn().await);
    assert_eq!(text, "You reach me over the HAI chat.");
}

#[tokio::test]
async fn bad_frames_get_error_frames_and_the_connection_stays_usable() {
    let node = node();
    let session = session_id("bad");
    let mut client = Client::connect(&node).await;

    client.send_text("{this is not json").await;
    assert_eq!(client.error().await["error_code"], "invalid_json");
    client
        .send(json!({"type": "user_message", "content": "hi"}))
        .await;
    assert_eq!(client.error().await["error_code"], "invalid_message");
    client.say(&session, "").await;
    assert_eq!(client.error().await["error_code"], "invalid_message");
    client.say(&session, &"x".repeat(10_001)).await;
    let error = client.error().await;
    assert_eq!(error["error_code"], "invalid_message");
    assert!(error["message"].as_str().unwrap().contains("10000"));
    client
        .send(json!({"type": "user_message", "content": 42, "session_id": session}))
        .await;
    assert_eq!(client.error().await["error_code"], "invalid_message");
    client.send(json!({"type": "status", "status": "thinking"})).await;
    assert_eq!(client.error().await["error_code"], "invalid_message");
    client
        .socket
        .send(Message::binary(vec![1u8, 2, 3]))
        .await
        .unwrap();
    assert_eq!(client.error().await["error_code"], "invalid_message");
    client.say("no/slashes here", "hi").await;
    assert_eq!(client.error().await["error_code"], "invalid_session");
    client.approve("appr_does_not_exist", true, None).await;
    let error = client.error().await;
    assert_eq!(error["error_code"], "unknown_approval");
    assert_eq!(error["details"]["approval_id"], "appr_does_not_exist");

    // Exactly 10,000 characters is allowed, and the connection still answers.
    client.say(&session, &"y".repeat(10_000)).await;
    let frames = client.turn().await;
    assert!(!streamed_text(&frames).is_empty());

    // A frame over hai.max_frame_bytes closes the connection (1009); the node serves the next one.
    let huge = json!({"type": "user_message", "content": "z".repeat(100_000), "session_id": session});
    client.send(huge).await;
    let closed = loop {
        match tokio::time::timeout(FRAME_WAIT, client.socket.next())
            .await
            .unwrap()
        {
            Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => break None,
        }
    };
    if let Some(code) = closed {
        assert_eq!(code, 1009);
    }
    let mut again = Client::connect_to_session(&node, &session, Some(&client.secret())).await;
    again.say(&session, "still there?").await;
    assert!(streamed_text(&again.turn().await).contains("still there?"));
}

#[tokio::test]
async fn sessions_are_isolated_and_every_connection_of_a_session_sees_its_frames() {
    let node = node();
    let (a, b) = (session_id("iso-a"), session_id("iso-b"));
    // a2 creates session A when it connects; a1 joins it with the secret a2 was given.
    let mut a2 = Client::connect_to_session(&node, &a, None).await;
    let secret_a = a2.created().await;
    let mut a1 = Client::connect_to_session(&node, &a, Some(&secret_a)).await;
    let mut b1 = Client::connect(&node).await;
    // Once a connection answers a frame, its subscription (made when it connected) is in place.
    for client in [&mut a1, &mut a2] {
        client.approve("appr_probe", true, None).await;
        assert_eq!(client.error().await["error_code"], "unknown_approval");
    }

    a1.say(&a, "Alpha says: cold storage first").await;
    let seen_by_a1 = a1.turn().await;
    let seen_by_a2 = a2.turn().await;
    assert_eq!(
        seen_by_a1, seen_by_a2,
        "both connections of a session get the same frames"
    );

    b1.say(&b, "Bravo says: hot holding first").await;
    let frames = b1.turn().await;
    // B's first frame is its own: nothing of A was delivered to it.
    assert_eq!(frames[0]["status"], "thinking");
    assert!(frames.iter().all(|f| f["session_id"] == b.as_str()));
    b1.say(&b, "what did I say first?").await;
    let text = streamed_text(&b1.turn().await);
    assert!(text.contains("Bravo says") && !text.contains("Alpha"), "{text}");

    // A connection belongs to one session.
    b1.say(&a, "let me into A").await;
    assert_eq!(b1.error().await["error_code"], "invalid_session");

    // An approval of session A cannot be answered from session B, but from another connection of A.
    a1.say(&a, "Please generate the report for INS-2025-042").await;
    let request = a1
        .until(|f| f["type"] == "tool_approval_request")
        .await
        .pop()
        .unwrap();
    let approval_id = request["approval_id"].as_str().unwrap();
    let mirrored = a2
        .until(|f| f["type"] == "tool_approval_request")
        .await
        .pop()
        .unwrap();
    assert_eq!(mirrored, request);
    b1.approve(approval_id, true, None).await;
    assert_eq!(b1.error().await["error_code"], "unknown_approval");
    a2.approve(approval_id, true, None).await;
    let text = streamed_text(&a1.turn().await);
    assert!(text.contains("has been generated"), "{text}");

    let history = history(&node, &b, &b1.secret());
    let users: Vec<&str> = history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "user")
        .map(|e| e["body"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["Bravo says: hot holding first", "what did I say first?"]);
}

#[tokio::test]
async fn history_survives_reconnects_and_node_restarts() {
    let data = tempfile::tempdir().unwrap();
    let session = session_id("restart");
    let secret;
    {
        let node = builder().data_dir(data.path()).start();
        let mut client = Client::connect(&node).await;
        client
            .say(&session, "My first words: check the walk-in freezer")
            .await;
        client.turn().await;
        secret = client.secret();
        drop(client);
        let mut client = Client::connect_to_session(&node, &session, Some(&secret)).await;
        client.say(&session, "and a second message").await;
        client.turn().await;
        assert!(node.stop().success());
    }
    let node = builder().data_dir(data.path()).start();
    // After a restart the secret still opens the session, here from its first message.
    let mut client = Client::connect(&node).await;
    client
        .send(json!({"type": "user_message", "content": "what did I say first?", "session_id": session, "session_secret": secret}))
        .await;
    let text = streamed_text(&client.turn().await);
    assert!(
        text.contains("My first words: check the walk-in freezer"),
        "{text}"
    );
    let history = history(&node, &session, &secret);
    let roles: Vec<&str> = history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "assistant", "user", "assistant"]
    );
}

#[tokio::test]
async fn rate_limit_is_per_session_and_leaves_the_connection_usable() {
    let node = builder().env("AGORA_HAI__MESSAGES_PER_MINUTE", "3").start();
    let session = session_id("rate");
    let mut client = Client::connect(&node).await;
    for i in 0..3 {
        client.say(&session, &format!("message {i}")).await;
        client.turn().await;
    }
    client.say(&session, "one too many").await;
    let error = client.error().await;
    assert_eq!(error["error_code"], "rate_limit_exceeded");
    assert_eq!(error["details"]["limit_per_minute"], 3);
    // Still usable: other frames are answered.
    client.approve("appr_nope", false, None).await;
    assert_eq!(client.error().await["error_code"], "unknown_approval");
    // A reconnect does not reset the session's window.
    let mut again = Client::connect_to_session(&node, &session, Some(&client.secret())).await;
    again.say(&session, "sneaky").await;
    assert_eq!(again.error().await["error_code"], "rate_limit_exceeded");
    // Another session has its own window.
    let mut other = Client::connect(&node).await;
    other.say(&session_id("rate-other"), "hello").await;
    assert!(!streamed_text(&other.turn().await).is_empty());
}

#[tokio::test]
async fn an_unanswered_approval_times_out_and_the_tool_does_not_run() {
    let node = builder().env("AGORA_TOOLS__APPROVAL_TIMEOUT_MS", "1500").start();
    let session = session_id("timeout");
    let mut client = Client::connect(&node).await;
    let (_, request) = request_report(&mut client, &session, "INS-2024-009").await;
    let approval_id = request["approval_id"].as_str().unwrap().to_string();
    let frames = client.turn().await;
    assert!(
        !frames
            .iter()
            .any(|f| f["type"] == "tool_call" && f["status"] == "started")
    );
    let failed = position(&frames, |f| f["type"] == "tool_call" && f["status"] == "failed");
    assert_eq!(frames[failed]["metadata"]["approval_id"], approval_id.as_str());
    assert!(streamed_text(&frames).contains("nobody approved it in time"));
    client.approve(&approval_id, true, None).await;
    assert_eq!(client.error().await["error_code"], "unknown_approval");
}

#[tokio::test]
async fn the_node_pings_to_keep_connections_alive() {
    let node = builder().env("AGORA_HAI__PING_INTERVAL_SECS", "1").start();
    let mut client = Client::connect(&node).await;
    let ping = loop {
        match tokio::time::timeout(FRAME_WAIT, client.socket.next())
            .await
            .unwrap()
        {
            Some(Ok(Message::Ping(payload))) => break payload,
            Some(Ok(_)) => continue,
            other => panic!("connection ended before a ping: {other:?}"),
        }
    };
    assert!(ping.len() <= 125);
    // The library answered with a pong; the connection stays open and usable.
    client.say(&session_id("ping"), "hi").await;
    assert!(!streamed_text(&client.turn().await).is_empty());
}

#[tokio::test]
async fn a_client_that_does_not_read_is_disconnected_not_buffered() {
    let node = builder().env("AGORA_HAI__SEND_BUFFER_FRAMES", "8").start();
    let mut client = Client::connect(&node).await;
    // Each bad frame earns an error frame; never reading them makes the node's queue fill.
    let sent = 300_000;
    let mut written = 0;
    for _ in 0..sent {
        if client.socket.feed(Message::text("x")).await.is_err() {
            break;
        }
        written += 1;
        if written % 1000 == 0 && client.socket.flush().await.is_err() {
            break;
        }
    }
    let _ = client.socket.flush().await;
    let mut errors = 0;
    while let Ok(Some(Ok(message))) = tokio::time::timeout(FRAME_WAIT, client.socket.next()).await {
        if let Message::Text(_) = message {
            errors += 1;
        }
    }
    assert!(
        errors < written,
        "the node stopped answering a client that did not read ({errors} of {written})"
    );
    // The node says why it let go (its log is read by another thread: give it a moment).
    let deadline = std::time::Instant::now() + FRAME_WAIT;
    while !node.log_text().contains("does not read its frames") {
        assert!(std::time::Instant::now() < deadline, "{}", node.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The node is fine.
    assert_eq!(get(&node.url("/health")).status, 200);
}

#[tokio::test]
async fn the_browser_client_is_served_at_the_root() {
    let node = node();
    let page = get(&node.url("/"));
    assert_eq!(page.status, 200);
    assert!(page.content_type.starts_with("text/html"));
    assert!(page.body.contains(r#"data-ws-path="/ws""#));
    let script = get(&node.url("/hai-client.js"));
    assert_eq!(script.status, 200);
    assert!(script.body.contains("agora_session_id"));
    assert_eq!(get(&node.url("/hai-client.css")).status, 200);
    for module in [
        "/hai-markdown.js",
        "/hai-cards.js",
        "/vendor/marked.esm.js",
        "/vendor/purify.min.js",
    ] {
        let reply = get(&node.url(module));
        assert_eq!(reply.status, 200, "{module}");
        assert!(reply.content_type.starts_with("text/javascript"), "{module}");
    }
    assert_eq!(get(&node.url("/ws/sessions/a%20b/history")).status, 400);
}

/// Install `tests/browser`'s npm packages (once) and check chromium is there.
///
/// Browser tests run in parallel threads of this process: one installs while the
/// others wait, since `npm ci` empties `node_modules` first and would pull it from
/// under a test already running.
pub(crate) fn browser_tooling(root: &Path) {
    static INSTALLED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if *installed {
        return;
    }
    // Browser downloads are impossible here: the browser is Debian's package, installed on demand.
    if !Path::new("/usr/bin/chromium").exists() {
        let apt = |args: &[&str]| {
            Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .is_ok_and(|s| s.success())
        };
        assert!(
            apt(&["update", "-qq"]) && apt(&["install", "-y", "-qq", "chromium"]),
            "the browser test needs Debian's chromium: apt-get install -y chromium (as root)"
        );
    }
    let dir = root.join("tests/browser");
    if !dir.join("node_modules/playwright-core").exists() {
        let ok = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .expect("running npm ci")
            .success();
        assert!(ok, "npm ci in tests/browser failed");
    }
    *installed = true;
}

/// Run `script` (in tests/browser) against `node` in chromium; it writes `screenshot` there.
fn browser_test(node: &TestNode, script: &str, screenshot: &str) {
    browser_test_at(node, &node.url("/"), script, screenshot);
}

/// [`browser_test`] with the page at `url` (https, another host name…).
pub(crate) fn browser_test_at(node: &TestNode, url: &str, script: &str, screenshot: &str) {
    let screenshot = crate::support::repo_root().join("tests/browser").join(screenshot);
    let _ = std::fs::remove_file(&screenshot);
    browser_script(node, url, script, &[("SCREENSHOT", screenshot.as_os_str())]);
    assert!(screenshot.exists());
}

/// Run `script` (in tests/browser) in chromium against `node`, its page at `url`,
/// with `env` besides; it must end with "browser test passed".
pub(crate) fn browser_script(node: &TestNode, url: &str, script: &str, env: &[(&str, &std::ffi::OsStr)]) {
    let root = crate::support::repo_root();
    browser_tooling(&root);
    let dir = root.join("tests/browser");
    let output = Command::new("node")
        .arg(dir.join(script))
        .env("HAI_URL", url)
        .envs(env.iter().copied())
        .current_dir(&dir)
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "browser test {script} failed\nstdout:\n{stdout}\nstderr:\n{stderr}\nnode log:\n{}",
        node.log_text()
    );
    assert!(stdout.contains("browser test passed"), "{stdout}");
}

#[test]
fn the_browser_client_streams_asks_for_approval_and_keeps_history() {
    browser_test(&node(), "hai-client.test.mjs", "screenshot.png");
}

/// Markdown (sanitised), tool and approval cards, scroll-to-latest, the retry
/// button and an axe-core check; the fixture assistant answers in markdown and HTML.
#[test]
fn the_browser_client_renders_markdown_and_cards_retries_and_passes_axe() {
    let node = TestNode::builder()
        .plugin("fixture-rich-assistant")
        .plugin("inspection-tools")
        // rich-client.test.mjs's RATE_LIMIT: a fresh session's fifth message is refused.
        .env("AGORA_HAI__MESSAGES_PER_MINUTE", "4")
        .start();
    browser_test(&node, "rich-client.test.mjs", "screenshot-rich.png");
}
