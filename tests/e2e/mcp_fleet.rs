//! MCP across a fleet (issue 40, point 3): two real nodes on one real
//! PostgreSQL database, as behind a round-robin load balancer without
//! stickiness, over real sockets:
//!
//! - a session opened on node A is served by node B (`tools/list`,
//!   `tools/call`), and a `DELETE` on B ends it on A too, closing A's stream;
//! - a tool running on A that asks for approval (`elicitation/create` on the
//!   call's stream on A) is released by the client's answer sent to B, and the
//!   client gets the tool's result on A's stream; answers racing on A and B
//!   decide it once (one history entry, agreeing with what the tool did);
//! - a notification stream open on A, when A dies, reopens on B and carries
//!   B's notifications, and the session goes on there;
//! - the idle rule is the fleet's: a session in use on B outlives its idle
//!   timeout on A, which never saw those requests, and once the client stops
//!   it ends on both;
//! - the real Python `mcp` client, its requests sent to A and B in turn,
//!   calls tools and answers an approval form in one session (legacy mode),
//!   and, at 2026-07-28 with no session at all, has a round minted on one
//!   node answered on the other; a round's answer runs its tool once across
//!   the fleet, a replay on the other node is refused.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mcp_sessions::{
    assert_ended, assert_serves, open_session, open_stream, post, request, running_call_reading,
};
use crate::support::{TestNode, delete_with_headers};

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// A liveness deadline for what a stream is waited for, not a latency target.
const PATIENCE: Duration = Duration::from_secs(60);

/// Two nodes sharing one fresh database, with tools of which one needs approval.
fn fleet() -> (TestNode, TestNode) {
    fleet_with(&[])
}

/// [`fleet`] with more settings for both nodes.
fn fleet_with(settings: &[(&str, &str)]) -> (TestNode, TestNode) {
    let url = agora_test_postgres::Postgres::shared().create_database();
    let node = || {
        TestNode::builder()
            .envs(settings)
            .plugin("hai-assistant")
            .plugin("inspection-tools")
            .plugin("unit-converter")
            .on_database(&url)
            .start()
    };
    (node(), node())
}

/// The JSON-RPC messages of an SSE text, complete lines only (a read may end mid-line).
fn messages(text: &str) -> Vec<Value> {
    let complete = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    complete
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

/// Read `stream` on from `seen` until its messages hold one `wanted` picks: that one.
fn read_until_message(stream: &mut TcpStream, mut seen: String, wanted: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    let mut buffer = [0u8; 4096];
    loop {
        if let Some(found) = messages(&seen).into_iter().find(&wanted) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "the message within {PATIENCE:?}: {seen}"
        );
        let read = stream.read(&mut buffer).expect("reading the stream");
        assert!(read > 0, "the stream ended first: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
}

/// Read `stream` until the node ends it: what it said meanwhile.
fn read_to_end(stream: &mut TcpStream) -> String {
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut rest = Vec::new();
    stream
        .read_to_end(&mut rest)
        .expect("the node ends the stream within the patience");
    String::from_utf8_lossy(&rest).into_owned()
}

/// The JSON-RPC answer of a 200 reply: its JSON body, or its SSE stream's last message.
fn answer_of(reply: &crate::support::RawReply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.body);
    if reply
        .header("content-type")
        .is_some_and(|kind| kind.starts_with("text/event-stream"))
    {
        return messages(&reply.body).pop().expect("a message on the stream");
    }
    reply.json()
}

fn delete(node: &TestNode, session: &str) -> u16 {
    delete_with_headers(&node.url("/mcp"), &[("mcp-session-id", session)]).status
}

fn convert(node: &TestNode, session: &str) -> Value {
    let call = request(
        3,
        "tools/call",
        json!({"name": "convert_units", "arguments": {"value": 5, "from": "km", "to": "m"}}),
    );
    answer_of(&post(node, CLIENT, Some(session), &call))
}

fn tool_names(node: &TestNode, session: &str) -> Vec<String> {
    let listed = answer_of(&post(
        node,
        CLIENT,
        Some(session),
        &request(2, "tools/list", json!({})),
    ));
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a tool list: {listed}"))
        .iter()
        .filter_map(|tool| tool["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_session_opened_on_one_node_is_served_by_the_other_and_ended_there_for_both() {
    let (a, b) = fleet();
    let session = open_session(&a, CLIENT, false);

    let names = tool_names(&b, &session);
    assert!(names.iter().any(|name| name == "convert_units"), "{names:?}");
    let converted = convert(&b, &session);
    assert_eq!(
        converted["result"]["isError"], false,
        "the call ran on B: {converted}"
    );
    assert_eq!(
        converted["result"]["structuredContent"]["value"], 5000.0,
        "{converted}"
    );
    assert_serves(&a, CLIENT, &session);

    // A's notification stream is open when the session ends on B.
    let mut stream_on_a = open_stream(&a, CLIENT, &session);
    assert_eq!(delete(&b, &session), 204);
    assert_ended(&a, CLIENT, &session);
    assert_ended(&b, CLIENT, &session);
    read_to_end(&mut stream_on_a);
    assert_eq!(delete(&a, &session), 404, "ended for every node");
}

#[test]
fn an_approval_asked_by_a_tool_on_one_node_is_answered_through_the_other() {
    let (a, b) = fleet();
    let session = open_session(&a, CLIENT, true);
    let (mut call_on_a, said) = running_call_reading(&a, CLIENT, &session);
    let form = read_until_message(&mut call_on_a, said, |message| {
        message["method"] == "elicitation/create"
    });
    let approval_id = form["id"].as_str().expect("the form's request id").to_string();

    let approve = json!({"jsonrpc": "2.0", "id": approval_id,
                         "result": {"action": "accept", "content": {"approve": true}}});
    let answered = post(&b, CLIENT, Some(&session), approve.to_string().as_bytes());
    assert_eq!(answered.status, 202, "{}", answered.body);

    let done = read_until_message(&mut call_on_a, String::new(), |message| message["id"] == 5);
    let result = &done["result"];
    assert_eq!(result["isError"], false, "the tool ran: {done}");
    let summary = result["structuredContent"]["summary"]
        .as_str()
        .unwrap_or_default();
    assert!(
        summary.starts_with("Generated report RPT-2024-001-"),
        "the report: {done}"
    );
}

#[test]
fn a_notification_stream_reopens_on_the_other_node_when_its_node_dies() {
    let (a, b) = fleet();
    let session = open_session(&a, CLIENT, false);
    let stream_on_a = open_stream(&a, CLIENT, &session);
    a.kill();
    drop(stream_on_a);

    let mut stream_on_b = open_stream(&b, CLIENT, &session);
    std::fs::remove_file(b.plugins_dir.join("unit-converter.wasm")).unwrap();
    let note = read_until_message(&mut stream_on_b, String::new(), |message| {
        message["method"] == "notifications/tools/list_changed"
    });
    assert!(note.get("id").is_none(), "a notification: {note}");
    let names = tool_names(&b, &session);
    assert!(
        !names.iter().any(|name| name == "convert_units")
            && names.iter().any(|name| name == "search_regulations"),
        "the session goes on on B, with B's tools: {names:?}"
    );
}

#[test]
fn a_session_in_use_on_one_node_outlives_its_idle_timeout_on_the_other_then_ends_on_both() {
    const IDLE: Duration = Duration::from_millis(3_000);
    let idle_ms = IDLE.as_millis().to_string();
    let (a, b) = fleet_with(&[("AGORA_MCP__SESSION_IDLE_TIMEOUT_MS", &idle_ms)]);
    let session = open_session(&a, CLIENT, false);

    // The client's requests go to B for twice the idle timeout; A sees none of them.
    let busy_until = Instant::now() + 2 * IDLE;
    let mut pings = 0;
    while Instant::now() < busy_until && pings < 1_000 {
        assert_serves(&b, CLIENT, &session);
        pings += 1;
        std::thread::sleep(IDLE / 20);
    }
    assert_serves(&a, CLIENT, &session);

    // Then the client goes quiet past the longest a session outlives its last
    // request (the idle timeout and a quarter; a request would keep it alive,
    // so the wait cannot poll): the session has ended, on both nodes.
    std::thread::sleep(IDLE + IDLE / 4 + Duration::from_millis(500));
    assert_ended(&a, CLIENT, &session);
    assert_ended(&b, CLIENT, &session);
}

/// The SDK in `mode` calling the three tools, its requests sent to `a` and `b` in turn.
fn sdk_across(a: &TestNode, b: &TestNode, mode: &str) -> Value {
    let calls = json!([
        ["convert_units", {"value": 5, "from": "km", "to": "m"}],
        ["generate_inspection_report", {"inspection_id": "INS-2024-001"}],
        ["search_regulations", {"query": "food storage", "limit": 2}],
    ])
    .to_string();
    crate::support::run_scenario(
        &crate::support::mcp_python(),
        "tests/interop/mcp/fleet_client.py",
        &calls,
        &a.url("/mcp"),
        &[&b.url("/mcp"), "--mode", mode],
        a,
    )
}

/// What `sdk_across` observed: its three calls answered, the report's after
/// the one approval form the client was shown.
fn assert_three_calls_with_the_report_approved_once(observed: &Value) {
    let results = observed["results"].as_array().expect("results");
    assert_eq!(results.len(), 3, "{observed}");
    for result in results {
        assert_eq!(result["isError"], false, "{observed}");
    }
    let summary = results[1]["structuredContent"]["summary"]
        .as_str()
        .unwrap_or_default();
    assert!(
        summary.starts_with("Generated report RPT-2024-001-"),
        "approved and run: {observed}"
    );
    assert_eq!(
        observed["elicitations"].as_array().map(Vec::len),
        Some(1),
        "{observed}"
    );
}

#[test]
fn a_modern_client_spread_over_the_fleet_is_served_without_a_session() {
    let (a, b) = fleet();
    let observed = sdk_across(&a, &b, "auto");
    assert_three_calls_with_the_report_approved_once(&observed);
    let exchanges = observed["exchanges"].as_array().expect("exchanges");
    assert_eq!(exchanges[0]["rpc"], "server/discover", "{observed}");
    assert!(observed["sessionId"].is_null(), "{observed}");
    for exchange in exchanges {
        assert_eq!(exchange["version"], "2026-07-28", "{exchange}");
        assert!(
            exchange["sentSession"].is_null() && exchange["session"].is_null(),
            "{exchange}"
        );
        assert_eq!(
            exchange["status"], 200,
            "every request served, wherever it went: {observed}"
        );
    }
    // The report's round: asked on one node, its answer taken by the other.
    let report_calls: Vec<&Value> = exchanges
        .iter()
        .filter(|exchange| exchange["mcpName"] == "generate_inspection_report")
        .collect();
    assert_eq!(
        report_calls.len(),
        2,
        "the call and its answered retry: {observed}"
    );
    assert_ne!(report_calls[0]["port"], report_calls[1]["port"], "{observed}");
}

/// A raw 2026 `tools/call` of the report to `node`, from a client that takes forms;
/// `round` is the answer (`requestState`, the approval's id) when given.
fn modern_report(node: &TestNode, round: Option<(&str, &str)>) -> crate::support::HttpReply {
    let mut params = json!({
        "name": "generate_inspection_report",
        "arguments": {"inspection_id": "INS-2024-001"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    });
    if let Some((state, key)) = round {
        params["requestState"] = json!(state);
        params["inputResponses"] = json!({key: {"action": "accept", "content": {"approve": true}}});
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    crate::support::post_with_headers(
        &node.url("/mcp"),
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "generate_inspection_report"),
        ],
        body.as_bytes(),
    )
}

#[test]
fn a_round_minted_on_one_node_is_redeemed_once_across_the_fleet() {
    let (a, b) = fleet();
    for (asker, answerer, replayer) in [(&a, &b, &a), (&b, &a, &b)] {
        let asked = modern_report(asker, None).json();
        let result = &asked["result"];
        assert_eq!(result["resultType"], "input_required", "{asked}");
        let state = result["requestState"].as_str().expect("requestState");
        let key = result["inputRequests"]
            .as_object()
            .expect("inputRequests")
            .keys()
            .next()
            .unwrap()
            .clone();
        let ran = modern_report(answerer, Some((state, &key)));
        assert_eq!(ran.status, 200, "{}", ran.body);
        let summary = ran.json()["result"]["structuredContent"]["summary"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(summary.starts_with("Generated report"), "{}", ran.body);
        for node in [replayer, answerer] {
            let replayed = modern_report(node, Some((state, &key)));
            assert_eq!(replayed.status, 400, "{}", replayed.body);
            assert_eq!(replayed.json()["error"]["code"], -32602, "{}", replayed.body);
        }
    }
}

#[test]
fn the_python_sdk_with_its_requests_sent_to_each_node_in_turn_calls_and_approves() {
    let (a, b) = fleet();
    let observed = sdk_across(&a, &b, "legacy");
    assert_three_calls_with_the_report_approved_once(&observed);
    let exchanges = observed["exchanges"].as_array().expect("exchanges");
    for node in [&a, &b] {
        assert!(
            exchanges
                .iter()
                .any(|exchange| exchange["port"] == node.port && exchange["http"] == "POST"),
            "node {} served requests of the session: {observed}",
            node.port
        );
    }
    let session = observed["sessionId"].as_str().expect("a session id");
    assert_eq!(exchanges[0]["rpc"], "initialize", "legacy mode: {observed}");
    let in_session = exchanges.iter().skip(1);
    for exchange in in_session {
        assert_eq!(exchange["sentSession"], session, "{exchange}");
        assert!(
            exchange["status"].as_u64().is_some_and(|status| status < 300),
            "every request served, wherever it went: {observed}"
        );
    }
    // The approval form came on the call's stream; the SDK's answer went to the other node.
    let answer = exchanges
        .iter()
        .position(|exchange| exchange["http"] == "POST" && exchange["rpc"].is_null())
        .unwrap_or_else(|| panic!("the form's answer: {observed}"));
    let call = exchanges[..answer]
        .iter()
        .rfind(|exchange| exchange["rpc"] == "tools/call")
        .expect("the call asking");
    assert_ne!(call["port"], exchanges[answer]["port"], "{observed}");
}

/// Rounds of the racing-answers test; every one must hold.
const RACE_ROUNDS: usize = 5;

#[test]
fn answers_racing_on_both_nodes_decide_each_approval_once() {
    let (a, b) = fleet_with(&[("AGORA_CONSOLE__TOKEN", crate::console::TOKEN)]);
    let session = open_session(&a, CLIENT, true);
    let mut ran = Vec::new();
    for round in 0..RACE_ROUNDS {
        let (mut call_on_a, said) = running_call_reading(&a, CLIENT, &session);
        let form = read_until_message(&mut call_on_a, said, |message| {
            message["method"] == "elicitation/create"
        });
        let answer = |approve: bool| {
            json!({"jsonrpc": "2.0", "id": form["id"],
                   "result": {"action": "accept", "content": {"approve": approve, "feedback": format!("round {round}")}}})
            .to_string()
        };
        let (approve, reject) = (answer(true), answer(false));
        std::thread::scope(|scope| {
            let through_b = scope.spawn(|| post(&b, CLIENT, Some(&session), approve.as_bytes()));
            let through_a = scope.spawn(|| post(&a, CLIENT, Some(&session), reject.as_bytes()));
            for answered in [through_b.join().unwrap(), through_a.join().unwrap()] {
                assert_eq!(answered.status, 202, "{}", answered.body);
            }
        });
        let done = read_until_message(&mut call_on_a, String::new(), |message| message["id"] == 5);
        ran.push(done["result"]["isError"] == false);
    }

    let url = a.url(&format!("/console/api/activity/mcp/{session}"));
    let bearer = format!("Bearer {}", crate::console::TOKEN);
    let reply = crate::support::get_with_headers(&url, &[("authorization", &bearer)]);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let history = reply.json();
    let decided: Vec<bool> = history["history"]
        .as_array()
        .expect("the session's history")
        .iter()
        .filter(|entry| entry["role"] == "approval")
        .map(|entry| entry["body"]["approved"] == true)
        .collect();
    assert_eq!(
        decided, ran,
        "one decision per approval, the one the tool followed: {history}"
    );
}
