//! The operator's console (issue 39, first slice: its JSON API) end to end: real
//! nodes, real sockets. Off without a token; with one, every path asks for it;
//! overview and plugins show what the node really runs; and one queue lists the
//! approvals of HAI and A2A, whose answer there goes through each transport's
//! own answer path, so the asking client sees its tool run (or not) as if it had
//! answered itself.

use std::time::Duration;

use serde_json::{Value, json};

use crate::hai::{Client, history, position, request_report, session_id, streamed_text};
use crate::support::{
    self, HttpReply, NodeBuilder, RawReply, RawRequest, TestNode, delete_with_headers, get, get_with_headers,
    post_with_headers, put_with_headers, raw_exchange,
};

pub(crate) const TOKEN: &str = "console-token-for-the-e2e-tests";
const BEARER: &str = "Bearer console-token-for-the-e2e-tests";
/// What each console route is, for the checks every one of them passes.
const GETS: [&str; 7] = [
    "overview",
    "series",
    "plugins",
    "approvals",
    "activity",
    "log",
    "fleet",
];
/// How long a console answer may take to show where it is looked for; a deadline, not a target.
const PATIENCE: Duration = Duration::from_secs(30);

fn with_token(builder: NodeBuilder) -> NodeBuilder {
    builder.env("AGORA_CONSOLE__TOKEN", TOKEN)
}

/// A node with the assistant and its tools, and the console on.
pub(crate) fn assistant_node() -> TestNode {
    with_token(
        TestNode::builder()
            .plugin("hai-assistant")
            .plugin("inspection-tools"),
    )
    .start()
}

fn api(node: &TestNode, route: &str) -> String {
    node.url(&format!("/console/api/{route}"))
}

/// A console GET with the token: its JSON, which must come with 200.
fn console_get(node: &TestNode, route: &str) -> Value {
    let reply = get_with_headers(&api(node, route), &[("authorization", BEARER)]);
    assert_eq!(reply.status, 200, "{route}: {}", reply.body);
    assert!(
        reply.content_type.starts_with("application/json"),
        "{route}: {}",
        reply.content_type
    );
    reply.json()
}

/// The console's answer to approval `approval_id`.
fn console_answer(node: &TestNode, approval_id: &str, answer: &Value) -> HttpReply {
    post_with_headers(
        &api(node, &format!("approvals/{approval_id}")),
        &[("content-type", "application/json"), ("authorization", BEARER)],
        answer.to_string().as_bytes(),
    )
}

/// The console's row of approval `approval_id`, once the queue lists it.
fn listed_approval(node: &TestNode, approval_id: &str) -> Value {
    listed_where(node, &format!("approval {approval_id}"), |row| {
        row["approval_id"] == approval_id
    })
}

/// The first row of the console's queue that `wanted`, once there is one.
fn listed_where(node: &TestNode, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    let mut row = Value::Null;
    node.wait_until(
        &format!("{what} in the console's queue"),
        PATIENCE,
        Duration::from_millis(20),
        || {
            let queue = console_get(node, "approvals");
            row = queue["approvals"]
                .as_array()
                .expect("a list of approvals")
                .iter()
                .find(|row| wanted(row))
                .cloned()
                .unwrap_or(Value::Null);
            !row.is_null()
        },
    );
    row
}

/// The console's activity row of `kind` (`hai_sessions`, …) with id `id`, and its history's entries.
fn activity_of(node: &TestNode, list: &str, kind: &str, id: &str) -> (Value, Vec<Value>) {
    let activity = console_get(node, "activity");
    let row = activity[list]
        .as_array()
        .unwrap_or_else(|| panic!("a {list} list: {activity}"))
        .iter()
        .find(|row| row["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} in {list}: {activity}"));
    let history = console_get(node, &format!("activity/{kind}/{id}"));
    assert_eq!(
        (history["kind"].as_str(), history["id"].as_str()),
        (Some(kind), Some(id)),
        "{history}"
    );
    let entries = history["history"].as_array().cloned().expect("history entries");
    (row, entries)
}

fn queue_ids(node: &TestNode) -> Vec<String> {
    console_get(node, "approvals")["approvals"]
        .as_array()
        .expect("a list of approvals")
        .iter()
        .map(|row| row["approval_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A waiting approval as the console lists it: whose, which tool, with what, and when.
fn assert_report_row(row: &Value, transport: &str, scope: &str) {
    assert_eq!(row["transport"], transport, "{row}");
    assert_eq!(row["scope"], scope, "{row}");
    assert_eq!(row["tool"], "generate_inspection_report", "{row}");
    assert_eq!(row["arguments"]["inspection_id"], "INS-2024-001", "{row}");
    assert_eq!(row["risk"], "high", "{row}");
    assert_eq!(row["client"], "127.0.0.1", "{row}");
    let asked_at = row["asked_at_ms"].as_u64().expect("asked_at_ms");
    assert!(
        row["deadline_ms"].as_u64().expect("deadline_ms") > asked_at,
        "{row}"
    );
    assert!(row["age_ms"].is_u64(), "{row}");
}

#[test]
fn without_a_token_the_console_is_not_there_and_with_one_it_asks_for_it() {
    let off = TestNode::builder().start();
    for route in GETS {
        let reply = get(&api(&off, route));
        assert_eq!(reply.status, 404, "{route} without a token: {}", reply.body);
        assert!(
            !reply.body.contains("console"),
            "nothing names the console: {}",
            reply.body
        );
    }
    let answer = console_answer(&off, "appr_0", &json!({"approved": true}));
    assert_eq!(answer.status, 404, "{}", answer.body);
    assert_eq!(get(&off.url("/console/")).status, 404, "no page either");
    drop(off);

    let on = with_token(TestNode::builder()).start();
    for route in GETS {
        let missing = get(&api(&on, route));
        assert_eq!(missing.status, 401, "{route} without the token: {}", missing.body);
        assert_eq!(missing.header("www-authenticate"), Some("Bearer"), "{route}");
        assert!(
            missing.json()["error"]
                .as_str()
                .is_some_and(|e| e.contains("Bearer")),
            "{}",
            missing.body
        );
        let wrong = get_with_headers(&api(&on, route), &[("authorization", "Bearer not-the-token")]);
        assert_eq!(wrong.status, 401, "{route} with a wrong token: {}", wrong.body);
        console_get(&on, route);
        // The browser policy holds here as on every transport: another site's page is refused.
        let foreign = get_with_headers(
            &api(&on, route),
            &[("authorization", BEARER), ("origin", "https://elsewhere.example")],
        );
        assert_eq!(
            foreign.status, 403,
            "{route} from another origin: {}",
            foreign.body
        );
    }
    // The page loads without the token (it holds no data and asks for it), under its own CSP.
    let page = get(&on.url("/console/"));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.content_type.starts_with("text/html"),
        "{}",
        page.content_type
    );
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'self'"),
        "{csp}"
    );
    let bare = get_with_headers(&on.url("/console"), &[]);
    assert_eq!(bare.status, 200, "the bare path leads to the page: {}", bare.body);
    for asset in [
        "console.js",
        "console.css",
        "vendor/uPlot.iife.min.js",
        "vendor/uPlot.min.css",
    ] {
        assert_eq!(get(&on.url(&format!("/console/{asset}"))).status, 200, "{asset}");
    }
    assert_eq!(
        get(&api(&on, "events")).status,
        401,
        "the live stream needs the token"
    );
    let unsigned = post_with_headers(
        &api(&on, "approvals/appr_0"),
        &[("content-type", "application/json")],
        br#"{"approved": true}"#,
    );
    assert_eq!(unsigned.status, 401, "{}", unsigned.body);
    // A form another page could post is refused before anything reads it.
    let form = post_with_headers(
        &api(&on, "approvals/appr_0"),
        &[("content-type", "text/plain"), ("authorization", BEARER)],
        br#"{"approved": true}"#,
    );
    assert_eq!(form.status, 415, "{}", form.body);
    let unknown = console_answer(&on, "appr_0", &json!({"approved": true}));
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(
        unknown.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("appr_0")),
        "{}",
        unknown.body
    );
}

#[test]
fn overview_and_plugins_show_the_real_transports_and_plugins() {
    let node = assistant_node();
    support::install_bytes(&node.plugins_dir, "broken", b"not a component");
    let health = node.wait_for_health("the broken file's failure", |health| {
        health["counts"]["failed"] == 1
    });

    let overview = console_get(&node, "overview");
    assert_eq!(overview["version"], health["version"], "{overview}");
    assert!(overview["uptime_ms"].is_u64(), "{overview}");
    assert_eq!(overview["store"]["backend"], "sled", "{overview}");
    assert_eq!(overview["store"]["answers"], true, "{overview}");
    let transports = overview["transports"].as_array().expect("transports");
    let names: Vec<&str> = transports.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        ["agora", "envelopes", "uagents", "arena", "hai", "a2a", "mcp"],
        "{overview}"
    );
    let a2a = &transports[5];
    assert_eq!(a2a["enabled"], true, "{a2a}");
    assert_eq!(a2a["path"], "/a2a", "{a2a}");
    assert_eq!(a2a["listen"], format!("127.0.0.1:{}", node.port), "{a2a}");
    assert_eq!(transports[4]["path"], "/ws", "{overview}");
    assert_eq!(
        transports[2]["path"],
        Value::Null,
        "uAgents fixes its paths: {overview}"
    );
    assert_eq!(overview["plugins"]["loaded"], 2, "{overview}");
    assert_eq!(overview["plugins"]["failed"], 1, "{overview}");
    assert_eq!(overview["approvals_waiting"], 0, "{overview}");

    let plugins = console_get(&node, "plugins");
    let rows = plugins["plugins"].as_array().expect("plugins");
    assert_eq!(rows.len(), 3, "{plugins}");
    let row = |name: &str| {
        rows.iter()
            .find(|row| row["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {plugins}"))
    };
    for name in ["hai-assistant", "inspection-tools"] {
        let row = row(name);
        assert_eq!(row["state"], "loaded", "{row}");
        assert_eq!(row["language"], "rust", "{row}");
        assert!(
            row["compile_ms"].is_u64() && row["loaded_at_ms"].is_u64(),
            "{row}"
        );
        assert!(row["version"].is_string(), "{row}");
        let file = std::path::PathBuf::from(row["file"].as_str().expect("file"));
        assert_eq!(
            row["size"],
            std::fs::metadata(&file).expect("the file").len(),
            "{row}"
        );
        let served = health["plugins"]
            .as_array()
            .expect("health plugins")
            .iter()
            .find(|p| p["name"] == name)
            .expect("in /health");
        assert_eq!(
            row["sha256"], served["content_sha256"],
            "one hash with /health: {row}"
        );
        assert_eq!(row["sha256"].as_str().map(str::len), Some(64), "{row}");
    }
    let tools = row("inspection-tools")["tools"]
        .as_array()
        .expect("tools")
        .clone();
    let risk = |tool: &str| {
        tools
            .iter()
            .find(|t| t["name"] == tool)
            .map(|t| t["risk"].clone())
            .unwrap_or_else(|| panic!("no {tool} in {tools:?}"))
    };
    assert_eq!(risk("generate_inspection_report"), "high");
    assert_eq!(risk("search_regulations"), "low");
    let broken = rows
        .iter()
        .find(|row| row["file"].as_str().is_some_and(|f| f.ends_with("broken.wasm")))
        .unwrap_or_else(|| panic!("the broken file in {plugins}"));
    assert_eq!(broken["state"], "failed", "{broken}");
    assert!(
        broken["error"].as_str().is_some_and(|e| !e.is_empty()),
        "with its reason: {broken}"
    );
}

#[tokio::test]
async fn a_hai_approval_answered_in_the_console_runs_the_tool_for_the_client() {
    let node = assistant_node();
    let session = session_id("console-hai");
    let mut client = Client::connect(&node).await;
    let (_, request) = request_report(&mut client, &session, "INS-2024-001").await;
    let approval_id = request["approval_id"]
        .as_str()
        .expect("an approval id")
        .to_string();

    let row = listed_approval(&node, &approval_id);
    assert_report_row(&row, "hai", &format!("hai:{session}"));

    let answered = console_answer(
        &node,
        &approval_id,
        &json!({"approved": true, "feedback": "Go ahead"}),
    );
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(answered.json()["decision"], "approved", "{}", answered.body);

    // The client sees its tool run under that approval and its turn complete.
    let frames = client.turn().await;
    let started = position(&frames, |f| f["type"] == "tool_call" && f["status"] == "started");
    let completed = position(&frames, |f| {
        f["type"] == "tool_call" && f["status"] == "completed"
    });
    assert!(started < completed, "{frames:#?}");
    assert_eq!(frames[completed]["metadata"]["approval_id"], approval_id.as_str());
    let result = frames[completed]["result"].as_str().unwrap_or_default();
    assert!(result.contains("Generated report RPT-2024-001-"), "{result}");
    assert!(
        streamed_text(&frames).contains("has been generated"),
        "{frames:#?}"
    );

    assert!(
        !queue_ids(&node).contains(&approval_id),
        "answered: out of the queue"
    );
    let again = console_answer(&node, &approval_id, &json!({"approved": true}));
    assert_eq!(again.status, 404, "a second answer finds nothing: {}", again.body);
    // Nor can the client answer it after the console did.
    client.approve(&approval_id, false, None).await;
    assert_eq!(client.error().await["error_code"], "unknown_approval");

    // The session's history has the decision, as when the client answers.
    let (row, console_entries) = activity_of(&node, "hai_sessions", "hai", &session);
    assert!(
        row["last_at_ms"].as_u64() >= row["started_at_ms"].as_u64(),
        "{row}"
    );
    assert!(
        console_entries.iter().any(|entry| entry["role"] == "approval"),
        "the console shows the session's history: {console_entries:?}"
    );
    let entries = history(&node, &session, &client.secret())["entries"].clone();
    let decisions: Vec<&Value> = entries
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["role"] == "approval")
        .collect();
    assert_eq!(decisions.len(), 1, "{entries}");
    assert_eq!(decisions[0]["body"]["approved"], true, "{entries}");
    assert_eq!(decisions[0]["body"]["feedback"], "Go ahead", "{entries}");
    node.wait_for_log("console: approval answered");
    let log = node.log_text();
    let line = log
        .lines()
        .find(|line| line.contains("console: approval answered"))
        .expect("the answer is logged");
    for what in [
        approval_id.as_str(),
        "generate_inspection_report",
        "approved",
        "hai",
    ] {
        assert!(line.contains(what), "{what} in {line}");
    }
}

// ---------------------------------------------------------------- A2A

/// One A2A JSON-RPC call over a real socket: its result.
fn a2a(node: &TestNode, method: &str, params: Value) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": "console", "method": method, "params": params});
    let reply = post_with_headers(
        &node.url("/a2a"),
        &[("content-type", "application/json"), ("A2A-Version", "1.0")],
        request.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = reply.json();
    assert!(answer.get("error").is_none(), "{method}: {answer}");
    answer["result"].clone()
}

/// A task asking for the report of INS-2024-001: its id and the approval it waits for.
fn parked_report_task(node: &TestNode) -> (String, String) {
    let message = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "parts": [{"text": "generate the report for INS-2024-001"}],
    });
    let task = a2a(node, "SendMessage", json!({"message": message}))["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{task}");
    let approval_id = task["status"]["message"]["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .find_map(|part| part["data"]["approval_id"].as_str())
        .unwrap_or_else(|| panic!("the approval's data part: {task}"))
        .to_string();
    (task["id"].as_str().expect("a task id").to_string(), approval_id)
}

/// `GetTask` of `task_id` once it has ended (the run goes on after the answer).
fn ended_task(node: &TestNode, task_id: &str) -> Value {
    let mut task = Value::Null;
    node.wait_until(
        &format!("task {task_id} to end"),
        PATIENCE,
        Duration::from_millis(20),
        || {
            task = a2a(node, "GetTask", json!({"id": task_id}));
            task["status"]["state"] != "TASK_STATE_WORKING"
                && task["status"]["state"] != "TASK_STATE_INPUT_REQUIRED"
        },
    );
    task
}

/// The whole answer of a completed task (its one artifact).
fn answer_text(task: &Value) -> String {
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    task["artifacts"][0]["parts"]
        .as_array()
        .expect("the answer's parts")
        .iter()
        .filter_map(|part| part["text"].as_str())
        .collect()
}

#[test]
fn an_a2a_approval_answered_in_the_console_lets_the_task_complete() {
    let node = assistant_node();
    let (task_id, approval_id) = parked_report_task(&node);
    let row = listed_approval(&node, &approval_id);
    assert_report_row(&row, "a2a", &format!("a2a:{task_id}"));

    let answered = console_answer(&node, &approval_id, &json!({"approved": true}));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let task = ended_task(&node, &task_id);
    let answer = answer_text(&task);
    let (row, entries) = activity_of(&node, "a2a_tasks", "a2a", &task_id);
    assert_eq!(row["state"], "TASK_STATE_COMPLETED", "{row}");
    assert!(row["last_at_ms"].is_u64(), "{row}");
    assert!(
        entries
            .iter()
            .any(|entry| entry.to_string().contains("generate the report for INS-2024-001")),
        "the task's context history: {entries:?}"
    );
    let unknown = get_with_headers(
        &api(&node, "activity/a2a/no-such-task"),
        &[("authorization", BEARER)],
    );
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(
        answer.contains("RPT-2024-001-") && answer.contains("has been generated"),
        "the tool ran: {answer}"
    );
    assert!(
        !queue_ids(&node).contains(&approval_id),
        "answered: out of the queue"
    );
    let again = console_answer(&node, &approval_id, &json!({"approved": true}));
    assert_eq!(again.status, 404, "a second answer finds nothing: {}", again.body);

    // Rejected with feedback: the tool does not run and the answer quotes it.
    let feedback = "Not before the inspector signs the checklist.";
    let (task_id, approval_id) = parked_report_task(&node);
    listed_approval(&node, &approval_id);
    let too_long = "x".repeat(2_001);
    let refused = console_answer(
        &node,
        &approval_id,
        &json!({"approved": false, "feedback": too_long}),
    );
    assert_eq!(refused.status, 400, "{}", refused.body);
    let rejected = console_answer(
        &node,
        &approval_id,
        &json!({"approved": false, "feedback": feedback}),
    );
    assert_eq!(rejected.status, 200, "{}", rejected.body);
    assert_eq!(rejected.json()["decision"], "rejected", "{}", rejected.body);
    let answer = answer_text(&ended_task(&node, &task_id));
    assert!(
        answer.contains(&format!("\u{201c}{feedback}\u{201d}")),
        "the answer quotes the feedback: {answer}"
    );
    assert!(
        !answer.contains("RPT-2024-001-"),
        "the tool did not run: {answer}"
    );
}

// ---------------------------------------------------------------- MCP

/// What an MCP client that takes both answer shapes sends.
const MCP_ACCEPT: &str = "application/json, text/event-stream";

/// POST `body` to the MCP endpoint, in `session` when given; the reply read to its end
/// (a `tools/call` waiting for its approval streams until the call is answered).
fn mcp_post(node: &TestNode, session: Option<&str>, body: &[u8]) -> RawReply {
    let mut headers = vec![("content-type", "application/json"), ("accept", MCP_ACCEPT)];
    if let Some(session) = session {
        headers.push(("mcp-session-id", session));
    }
    let from = std::net::IpAddr::from([127, 0, 0, 1]);
    raw_exchange(
        node,
        RawRequest {
            headers: &headers,
            ..RawRequest::post_json(from, "/mcp", body)
        },
    )
}

/// An MCP session whose client declared form elicitation, so its human can be asked.
fn mcp_session(node: &TestNode) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "console-e2e", "version": "0"},
    }});
    let reply = mcp_post(node, None, initialize.to_string().as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let session = reply
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("a session id: {}", reply.body))
        .to_string();
    let initialized = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let notified = mcp_post(node, Some(&session), initialized);
    assert_eq!(notified.status, 202, "{}", notified.body);
    session
}

#[test]
fn an_mcp_approval_answered_in_the_console_releases_the_waiting_call() {
    let node = assistant_node();
    let session = mcp_session(&node);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "generate_inspection_report",
        "arguments": {"inspection_id": "INS-2024-001"},
    }});
    let call = call.to_string();
    let streamed = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| mcp_post(&node, Some(&session), call.as_bytes()));
        let row = listed_where(&node, "the MCP call's approval", |row| row["transport"] == "mcp");
        assert_report_row(&row, "mcp", &format!("mcp:{session}"));
        let approval_id = row["approval_id"].as_str().expect("an approval id").to_string();
        let answered = console_answer(&node, &approval_id, &json!({"approved": true}));
        assert_eq!(answered.status, 200, "{}", answered.body);
        let again = console_answer(&node, &approval_id, &json!({"approved": true}));
        assert_eq!(again.status, 404, "a second answer finds nothing: {}", again.body);
        waiting.join().expect("the call's stream")
    });
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    assert!(
        streamed.body.contains("elicitation/create"),
        "the client's own form was asked: {}",
        streamed.body
    );
    assert!(
        streamed.body.contains("RPT-2024-001-") && !streamed.body.contains("\"isError\":true"),
        "the call got the tool's result: {}",
        streamed.body
    );
    let (_, entries) = activity_of(&node, "mcp_sessions", "mcp", &session);
    assert!(
        entries.iter().any(|entry| entry["role"] == "approval"),
        "the session's approval in its history: {entries:?}"
    );
    let withdrawn = streamed
        .body
        .find("notifications/cancelled")
        .unwrap_or_else(|| panic!("the client's form is withdrawn: {}", streamed.body));
    assert!(
        streamed.body[withdrawn..].contains("answered in the operator's console"),
        "{}",
        streamed.body
    );
}

// ---------------------------------------------------------------- plugins, series, log, events

/// `PUT {path}/api/plugins/{file}` of `bytes`, with the token.
fn upload(node: &TestNode, file: &str, bytes: &[u8]) -> HttpReply {
    put_with_headers(
        &api(node, &format!("plugins/{file}")),
        &[("authorization", BEARER), ("content-type", "application/wasm")],
        bytes,
    )
}

/// `tools/call` of `convert_units` in `session`: the converted value's text.
fn convert(node: &TestNode, session: &str) -> String {
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "convert_units", "arguments": {"value": 2, "from": "kg", "to": "g"},
    }});
    mcp_post(node, Some(session), call.to_string().as_bytes()).body
}

#[test]
fn an_uploaded_plugin_serves_a_broken_one_leaves_it_serving_and_a_removed_one_is_gone() {
    let node = with_token(TestNode::builder().env("AGORA_PLUGINS__MAX_FILE_MB", "2")).start();
    let wasm = std::fs::read(support::plugin_wasm("unit-converter")).expect("the built plugin");

    let loaded = upload(&node, "converter", &wasm);
    assert_eq!(loaded.status, 200, "{}", loaded.body);
    let row = &loaded.json()["plugin"];
    assert_eq!(row["name"], "unit-converter", "{row}");
    assert_eq!(row["state"], "loaded", "{row}");
    assert_eq!(
        row["sha256"],
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&wasm)),
        "{row}"
    );
    let session = mcp_session(&node);
    assert!(convert(&node, &session).contains("2000"), "it answers at once");

    // Not a component, under the same name: the compiler's reason, and the old version serving.
    let broken = upload(&node, "converter", b"\0asm but not really");
    assert_eq!(broken.status, 422, "{}", broken.body);
    let reason = broken.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("converter.wasm"), "{reason}");
    assert_eq!(broken.json()["plugin"]["state"], "loaded", "{}", broken.body);
    assert!(
        convert(&node, &session).contains("2000"),
        "the old version still answers"
    );
    let log = console_get(&node, "log");
    assert!(
        log["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .any(|entry| entry["level"] == "ERROR"
                && entry["fields"]["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with("converter.wasm"))),
        "the failure is in the console's log: {log}"
    );

    let manifest = console_get(&node, "plugins/unit-converter");
    assert_eq!(manifest["manifest"]["name"], "unit-converter", "{manifest}");
    assert!(
        manifest["protocols"][0]["text"]
            .as_str()
            .is_some_and(|text| !text.is_empty()),
        "{manifest}"
    );

    for (file, status) in [("../escape", 404), ("a.b", 400), ("-flag", 400)] {
        let refused = upload(&node, file, &wasm);
        assert_eq!(refused.status, status, "{file}: {}", refused.body);
    }
    // Over plugins.max_file_mb (2 MiB here), yet over the listener's 1 MiB only by its own bound.
    let too_big = upload(&node, "huge", &vec![0; 3 << 20]);
    assert_eq!(too_big.status, 413, "{}", too_big.body);
    assert!(too_big.body.contains("max_file_mb"), "{}", too_big.body);

    let removed = delete_with_headers(&api(&node, "plugins/converter"), &[("authorization", BEARER)]);
    assert_eq!(removed.status, 200, "{}", removed.body);
    assert!(!node.plugins_dir.join("converter.wasm").exists());
    assert!(!convert(&node, &session).contains("2000"), "gone with its file");
    let again = delete_with_headers(&api(&node, "plugins/converter"), &[("authorization", BEARER)]);
    assert_eq!(again.status, 404, "{}", again.body);
}

#[test]
fn the_series_and_plugin_counts_follow_the_calls() {
    let node = assistant_node();
    let session = mcp_session(&node);
    let before = console_get(&node, "series");
    assert_eq!(before["interval_ms"], 5000, "{before}");
    let mut calls = 0;
    for _ in 0..5 {
        let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "search_regulations", "arguments": {"query": "fire"},
        }});
        let reply = mcp_post(&node, Some(&session), call.to_string().as_bytes());
        assert_eq!(reply.status, 200, "{}", reply.body);
        calls += 1;
    }
    // The calls land in the slot now open; it is shown once whole.
    let mut mcp_requests = 0;
    node.wait_until(
        "the calls in the MCP series",
        PATIENCE,
        Duration::from_millis(200),
        || {
            let series = console_get(&node, "series");
            let mcp = series["transports"]
                .as_array()
                .expect("transports")
                .iter()
                .find(|transport| transport["name"] == "mcp")
                .cloned()
                .unwrap_or(Value::Null);
            let points = mcp["points"].as_array().cloned().unwrap_or_default();
            assert_eq!(points.len(), 180, "{mcp}");
            mcp_requests = points.iter().filter_map(|point| point["requests"].as_u64()).sum();
            mcp_requests >= calls + 2
        },
    );
    let plugins = console_get(&node, "plugins");
    let tools = plugins["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .find(|row| row["name"] == "inspection-tools")
        .cloned()
        .expect("inspection-tools");
    assert_eq!(tools["stats"]["calls"], calls, "{tools}");
    assert_eq!(tools["stats"]["errors"], 0, "{tools}");
    assert!(
        tools["stats"]["calls_per_minute"]
            .as_f64()
            .is_some_and(|rate| rate >= calls as f64),
        "{tools}"
    );
    assert!(
        tools["stats"]["p99_ms"].as_f64().is_some_and(|p99| p99 > 0.0),
        "{tools}"
    );
}

#[test]
fn one_stream_sends_every_part_and_a_new_approval_at_once() {
    use std::io::{BufRead, BufReader, Write};
    let node = assistant_node();
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", node.port)).expect("connecting");
    write!(
        stream,
        "GET /console/api/events HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {BEARER}\r\n\r\n",
        node.port
    )
    .expect("asking for the stream");
    stream.set_read_timeout(Some(PATIENCE)).expect("a read timeout");
    let mut lines = BufReader::new(stream).lines();
    let mut next_event = |wanted: &str| -> Value {
        let mut kind = String::new();
        for line in lines.by_ref() {
            let line = line.expect("a line of the stream");
            if let Some(name) = line.strip_prefix("event: ") {
                kind = name.to_string();
            } else if let Some(data) = line.strip_prefix("data: ")
                && kind == wanted
            {
                return serde_json::from_str(data).expect("JSON data");
            }
        }
        panic!("the stream ended before a {wanted} event");
    };
    for kind in ["series", "overview", "approvals", "plugins", "log"] {
        next_event(kind);
    }
    let (task_id, approval_id) = parked_report_task(&node);
    let approvals = next_event("approvals");
    assert_eq!(
        approvals["approvals"][0]["approval_id"], approval_id,
        "{approvals}"
    );
    assert_eq!(
        approvals["approvals"][0]["scope"],
        format!("a2a:{task_id}"),
        "{approvals}"
    );
    let answered = console_answer(&node, &approval_id, &json!({"approved": false}));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let approvals = next_event("approvals");
    assert_eq!(approvals["approvals"], json!([]), "{approvals}");
}
