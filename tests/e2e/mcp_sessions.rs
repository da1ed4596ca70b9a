//! MCP's session bounds against a greedy client (issue 37: "8 addresses × 32
//! MCP sessions hold all 256 for 30 minutes"), over real sockets from several
//! loopback addresses against a real node:
//!
//! - at `mcp.max_sessions`, a client holding fewer sessions gets one: the least
//!   recently used idle session of the client holding the most is ended (its id
//!   then answers 404 "Session not found"), the greedy client's other sessions
//!   keep working, and the greedy client cannot take the place back;
//! - a session in use (an open notification stream, a running call) is never
//!   the one ended, however long ago it was last asked anything.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{RawReply, RawRequest, TestNode, raw_exchange};

/// The default `mcp.path`.
const MCP_PATH: &str = "/mcp";
/// What a client that takes both answer shapes sends, as the spec asks of it.
const ACCEPT: &str = "application/json, text/event-stream";
/// The node-wide session bound these tests set; the per-address bound is the same.
const MAX_SESSIONS: usize = 8;
const GREEDY: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const HONEST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
/// A liveness deadline for reading a stream's first events, not a latency target.
const STREAM_PATIENCE: Duration = Duration::from_secs(60);

fn node() -> TestNode {
    TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
        .env("AGORA_MCP__MAX_SESSIONS", MAX_SESSIONS.to_string())
        .env("AGORA_MCP__MAX_SESSIONS_PER_IP", MAX_SESSIONS.to_string())
        .start()
}

pub(crate) fn request(id: i64, method: &str, params: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

/// An initialize; `elicitation` declares form elicitation, so approvals can be asked.
pub(crate) fn initialize_request(elicitation: bool) -> Vec<u8> {
    let capabilities = if elicitation {
        json!({"elicitation": {"form": {}}})
    } else {
        json!({})
    };
    request(
        0,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "0"},
        }),
    )
}

/// POST `body` to the MCP endpoint from `from`, in `session` when given.
pub(crate) fn post(node: &TestNode, from: IpAddr, session: Option<&str>, body: &[u8]) -> RawReply {
    let mut headers = vec![("content-type", "application/json"), ("accept", ACCEPT)];
    if let Some(session) = session {
        headers.push(("mcp-session-id", session));
    }
    raw_exchange(
        node,
        RawRequest {
            headers: &headers,
            ..RawRequest::post_json(from, MCP_PATH, body)
        },
    )
}

/// The initialize reply from `from`, without judging it.
fn try_initialize(node: &TestNode, from: IpAddr) -> RawReply {
    post(node, from, None, &initialize_request(false))
}

/// A new session from `from` (initialize and `notifications/initialized`): its id.
pub(crate) fn open_session(node: &TestNode, from: IpAddr, elicitation: bool) -> String {
    let reply = post(node, from, None, &initialize_request(elicitation));
    assert_eq!(reply.status, 200, "initialize from {from}: {}", reply.body);
    let session = reply
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("a session id: {}", reply.body))
        .to_string();
    let notified = post(
        node,
        from,
        Some(&session),
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(notified.status, 202, "{}", notified.body);
    session
}

/// A `ping` in `session` from `from`: the reply, unjudged.
pub(crate) fn ping(node: &TestNode, from: IpAddr, session: &str) -> RawReply {
    post(node, from, Some(session), &request(9, "ping", json!({})))
}

pub(crate) fn assert_serves(node: &TestNode, from: IpAddr, session: &str) {
    let reply = ping(node, from, session);
    assert_eq!(reply.status, 200, "session {session} serves: {}", reply.body);
    assert_eq!(reply.json()["result"], json!({}), "{}", reply.body);
}

pub(crate) fn assert_ended(node: &TestNode, from: IpAddr, session: &str) {
    let reply = ping(node, from, session);
    assert_eq!(reply.status, 404, "session {session} ended: {}", reply.body);
    let answer = reply.json();
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("Session not found")),
        "{answer}"
    );
}

/// Send one request from `from` on a connection of its own and read until the
/// reply's text contains `until`; the connection stays open (a stream in use)
/// for as long as the returned socket lives.
fn hold_open(
    node: &TestNode,
    from: IpAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    until: &str,
) -> TcpStream {
    hold_open_reading(node, from, method, headers, body, until).0
}

/// [`hold_open`], with the text read so far.
pub(crate) fn hold_open_reading(
    node: &TestNode,
    from: IpAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    until: &str,
) -> (TcpStream, String) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::new(from, 0).into())
        .unwrap_or_else(|e| panic!("binding a client socket to {from}: {e}"));
    socket
        .connect(&SocketAddr::from(([127, 0, 0, 1], node.port)).into())
        .expect("connecting to the node");
    let mut stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(STREAM_PATIENCE)).unwrap();
    let mut head = format!(
        "{method} {MCP_PATH} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-length: {}\r\n",
        node.port,
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let deadline = Instant::now() + STREAM_PATIENCE;
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(until) {
        assert!(Instant::now() < deadline, "{until:?} within {STREAM_PATIENCE:?}");
        let read = stream
            .read(&mut buffer)
            .unwrap_or_else(|e| panic!("{method} from {from}: {e}"));
        assert!(
            read > 0,
            "the stream ended before {until:?}: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buffer[..read]);
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    (stream, text)
}

/// The session's notification stream, held open.
pub(crate) fn open_stream(node: &TestNode, from: IpAddr, session: &str) -> TcpStream {
    let headers = [("accept", "text/event-stream"), ("mcp-session-id", session)];
    hold_open(node, from, "GET", &headers, b"", "\r\n\r\n")
}

/// A call of the approval-gated tool, held running while its approval form waits for an answer.
pub(crate) fn running_call(node: &TestNode, from: IpAddr, session: &str) -> TcpStream {
    running_call_reading(node, from, session).0
}

/// [`running_call`], with what the stream said so far (its approval form).
pub(crate) fn running_call_reading(node: &TestNode, from: IpAddr, session: &str) -> (TcpStream, String) {
    let headers = [
        ("content-type", "application/json"),
        ("accept", ACCEPT),
        ("mcp-session-id", session),
    ];
    let call = request(
        5,
        "tools/call",
        json!({"name": "generate_inspection_report", "arguments": {"inspection_id": "INS-2024-001"}}),
    );
    hold_open_reading(node, from, "POST", &headers, &call, "elicitation/create")
}

#[test]
fn at_the_session_bound_a_new_client_ends_the_greedy_clients_least_recently_used_idle_session() {
    let node = node();
    let greedy: Vec<String> = (0..MAX_SESSIONS)
        .map(|_| open_session(&node, GREEDY, false))
        .collect();
    // The oldest is asked something again, so the least recently used is the second.
    assert_serves(&node, GREEDY, &greedy[0]);

    let honest = try_initialize(&node, HONEST);
    assert_eq!(
        honest.status, 200,
        "the honest client gets a session: {}",
        honest.body
    );
    let honest = honest.header("mcp-session-id").expect("a session id").to_string();
    assert_serves(&node, HONEST, &honest);

    assert_ended(&node, GREEDY, &greedy[1]);
    for (index, session) in greedy.iter().enumerate().filter(|(index, _)| *index != 1) {
        assert_serves(&node, GREEDY, session);
        assert_ne!(index, 1);
    }

    // The greedy client, now holding more than the honest one, cannot take the place back.
    let refused = try_initialize(&node, GREEDY);
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.body.contains("(mcp.max_sessions)"), "{}", refused.body);
    assert_serves(&node, HONEST, &honest);
}

#[test]
fn a_session_with_an_open_stream_or_a_running_call_is_never_the_one_ended() {
    let node = node();
    // The two oldest sessions are put in use at once, and never asked anything after.
    let streaming = open_session(&node, GREEDY, false);
    let _stream = open_stream(&node, GREEDY, &streaming);
    let calling = open_session(&node, GREEDY, true);
    let _call = running_call(&node, GREEDY, &calling);
    let idle: Vec<String> = (2..MAX_SESSIONS)
        .map(|_| open_session(&node, GREEDY, false))
        .collect();

    let honest = try_initialize(&node, HONEST);
    assert_eq!(
        honest.status, 200,
        "the honest client gets a session: {}",
        honest.body
    );

    assert_serves(&node, GREEDY, &streaming);
    assert_serves(&node, GREEDY, &calling);
    assert_ended(&node, GREEDY, &idle[0]);
    for session in &idle[1..] {
        assert_serves(&node, GREEDY, session);
    }
}

/// MCP's approval forms wait in the node's one approval table (issue 37): they
/// hold places of the caller's fair share as HAI's and A2A's waits do, so one
/// address cannot park calls in session after session.
#[test]
fn an_mcp_clients_waiting_approvals_count_against_its_share_of_the_nodes_places() {
    let node = TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
        .env("AGORA_TOOLS__MAX_WAITING_APPROVALS_PER_CLIENT", "1")
        // Short, so a node without the bound answers (timed out) instead of hanging the test.
        .env("AGORA_TOOLS__APPROVAL_TIMEOUT_MS", "5000")
        .start();
    let first = open_session(&node, GREEDY, true);
    let _waiting = running_call(&node, GREEDY, &first);

    let second = open_session(&node, GREEDY, true);
    let call = request(
        6,
        "tools/call",
        json!({"name": "generate_inspection_report", "arguments": {"inspection_id": "INS-2024-002"}}),
    );
    let refused = post(&node, GREEDY, Some(&second), &call);
    assert_eq!(refused.status, 200, "{}", refused.body);
    assert!(
        !refused.body.contains("elicitation/create"),
        "no second form is asked: {}",
        refused.body
    );
    assert!(
        refused.body.contains("tools.max_waiting_approvals_per_client")
            && refused.body.contains("\"isError\":true"),
        "an error result naming the bound: {}",
        refused.body
    );

    // Another address has its own share: its human is asked.
    let honest = open_session(&node, HONEST, true);
    let _asked = running_call(&node, HONEST, &honest);
}
