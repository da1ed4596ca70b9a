//! MCP (issue 19) end to end: a real node with the four example tools
//! (`inspection-tools`' two, `unit-converter`'s and `trivia`'s), answered by the
//! reference client — the real `mcp` 2.3.0 SDK in a venv, driven by
//! `tests/interop/mcp/sdk_client.py`, one scenario per run, in its stock "auto"
//! mode (`server/discover` first, then `initialize`) — and by raw sockets for
//! what no SDK sends: truncated JSON, missing or unknown session ids, oversized
//! bodies, missing tokens.
//!
//! The script only reports what the SDK saw (results, elicitation requests, the
//! HTTP exchanges with their statuses and session ids); every judgement is made here.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, HttpReply, NodeBuilder, TestNode, post_with_headers};

/// The reference client's script.
const SCRIPT: &str = "tests/interop/mcp/sdk_client.py";
/// The default `mcp.path`.
const MCP_PATH: &str = "/mcp";
/// The example tools, sorted by name as tools/list sorts them.
const TOOLS: [&str; 4] = [
    "convert_units",
    "generate_inspection_report",
    "search_regulations",
    "trivia_knowledge",
];
const READ_ONLY: [&str; 3] = ["convert_units", "search_regulations", "trivia_knowledge"];
const REPORT: &str = "generate_inspection_report";
/// What a client that takes both answer shapes sends, as the spec asks of it.
const ACCEPT: &str = "application/json, text/event-stream";

fn builder() -> NodeBuilder {
    TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
        .plugin("unit-converter")
        .plugin("trivia")
}

fn node() -> TestNode {
    builder().start()
}

/// Run one scenario of the SDK client against `node`: what it observed.
fn sdk(node: &TestNode, scenario: &str, args: &[&str]) -> Value {
    let python = support::mcp_python();
    support::run_scenario(&python, SCRIPT, scenario, &node.url(MCP_PATH), args, node)
}

/// The SDK's `tools/call` of each `(name, arguments)` in one session, the
/// elicitation callback answering as `elicit` says (`none`: no callback at all).
fn sdk_calls(node: &TestNode, calls: &[(&str, Value)], elicit: &str, feedback: Option<&str>) -> Value {
    let calls = json!(
        calls
            .iter()
            .map(|(name, args)| json!([name, args]))
            .collect::<Vec<_>>()
    );
    let calls = calls.to_string();
    let mut args = vec![calls.as_str(), "--elicit", elicit];
    if let Some(feedback) = feedback {
        args.extend(["--feedback", feedback]);
    }
    sdk(node, "call", &args)
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_else(|| panic!("not a string: {value}"))
}

/// A tool result's text content, joined.
fn result_text(result: &Value) -> String {
    let texts = result["texts"]
        .as_array()
        .unwrap_or_else(|| panic!("a tool result, not an SDK error: {result}"));
    texts.iter().map(text).collect::<Vec<_>>().join("\n")
}

/// A successful result: not an error, its text the tool's JSON output, which is
/// also its structured content.
fn assert_ok_result(result: &Value) -> Value {
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["contentTypes"], json!(["text"]), "{result}");
    let output: Value = serde_json::from_str(&result_text(result))
        .unwrap_or_else(|e| panic!("the tool's JSON output as text ({e}): {result}"));
    assert_eq!(result["structuredContent"], output, "{result}");
    output
}

/// An error result (not a JSON-RPC error) whose text contains every one of `needles`.
fn assert_error_result(result: &Value, needles: &[&str]) -> String {
    assert_eq!(result["isError"], true, "{result}");
    let said = result_text(result);
    for needle in needles {
        assert!(
            said.to_lowercase().contains(&needle.to_lowercase()),
            "{needle:?} in {said:?}"
        );
    }
    said
}

/// The value of the counter line starting with `line_prefix` on `/metrics` (0 when absent).
fn metric(node: &TestNode, line_prefix: &str) -> u64 {
    support::get(&node.url("/metrics"))
        .body
        .lines()
        .find_map(|line| line.strip_prefix(line_prefix)?.trim().parse().ok())
        .unwrap_or(0)
}

fn tool_calls(node: &TestNode, plugin: &str) -> u64 {
    metric(
        node,
        &format!("agora_plugin_calls_total{{transport=\"tool\",plugin=\"{plugin}\",outcome=\"ok\"}}"),
    )
}

/// The HTTP exchanges the SDK made for JSON-RPC method `rpc` (None: GET and DELETE).
fn exchanges<'a>(observed: &'a Value, http: &str, rpc: Option<&str>) -> Vec<&'a Value> {
    observed["exchanges"]
        .as_array()
        .expect("exchanges")
        .iter()
        .filter(|e| e["http"] == http && e["rpc"].as_str() == rpc)
        .collect()
}

// ---------------------------------------------------------------- the SDK's client

#[test]
fn the_sdk_falls_back_from_discover_and_initializes_with_the_node() {
    let node = node();
    let observed = sdk(&node, "init", &[]);
    let all = observed["exchanges"].as_array().expect("exchanges");
    // The stock client probes the 2026 era first; the node does not serve it and says so.
    assert_eq!(all[0]["rpc"], "server/discover", "{observed}");
    assert_eq!(all[0]["status"], 400, "{observed}");
    assert_eq!(all[1]["rpc"], "initialize", "{observed}");
    assert_eq!(all[1]["status"], 200, "{observed}");
    assert_eq!(observed["protocolVersion"], "2025-11-25", "{observed}");
    assert_eq!(observed["serverInfo"]["name"], "agora-node", "{observed}");
    assert!(!text(&observed["serverInfo"]["version"]).is_empty(), "{observed}");
    assert_eq!(
        observed["capabilities"]["tools"]["listChanged"], true,
        "{observed}"
    );
    let session = text(&observed["sessionId"]);
    assert!(!session.is_empty(), "{observed}");
    // Every later request carried the session, and the node accepted the notification.
    for exchange in &all[2..] {
        assert_eq!(exchange["sentSession"], session, "{observed}");
    }
    let initialized = exchanges(&observed, "POST", Some("notifications/initialized"));
    assert_eq!(initialized.len(), 1, "{observed}");
    assert_eq!(initialized[0]["status"], 202, "{observed}");
}

#[test]
fn a_session_the_client_ends_is_gone() {
    let node = node();
    let observed = sdk(&node, "init", &[]);
    let session = text(&observed["sessionId"]).to_string();
    let deletes = exchanges(&observed, "DELETE", None);
    assert_eq!(deletes.len(), 1, "the SDK ends its session on exit: {observed}");
    assert_eq!(deletes[0]["status"], 204, "{observed}");
    let after = rpc_post(&node, Some(&session), &request(1, "tools/list", json!({})));
    assert_eq!(after.status, 404, "a deleted session: {}", after.body);
    assert!(after.json()["error"]["code"].is_i64(), "{}", after.body);
}

#[test]
fn every_example_tool_is_listed_across_pages_with_its_annotations() {
    let node = builder().env("AGORA_MCP__PAGE_SIZE", "2").start();
    let observed = sdk(&node, "list", &[]);
    let pages = observed["pages"].as_array().expect("pages");
    assert!(pages.len() >= 2, "page_size 2 pages the four tools: {observed}");
    let tools = entries_of_pages(&observed, "tools", 2);
    let names: Vec<&str> = tools.iter().map(|t| text(&t["name"])).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(names, sorted, "sorted by name, each once: {names:?}");
    for wanted in TOOLS {
        assert!(names.contains(&wanted), "{wanted} listed: {names:?}");
    }
    for tool in &tools {
        let name = text(&tool["name"]);
        assert!(!text(&tool["description"]).is_empty(), "{tool}");
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object", "{tool}");
        assert!(schema["properties"].is_object(), "{tool}");
        assert!(
            !schema.to_string().contains("x-read-only"),
            "the host's own marker is not shown: {tool}"
        );
        let annotations = &tool["annotations"];
        if READ_ONLY.contains(&name) {
            assert_eq!(annotations["readOnlyHint"], true, "{tool}");
            assert_ne!(annotations["destructiveHint"], true, "{tool}");
        }
        if name == REPORT {
            assert_eq!(annotations["destructiveHint"], true, "{tool}");
            assert_ne!(annotations["readOnlyHint"], true, "never read-only: {tool}");
        }
    }
    let report = tools.iter().find(|t| t["name"] == REPORT).unwrap();
    assert_eq!(
        report["inputSchema"]["required"],
        json!(["inspection_id"]),
        "the plugin's own schema: {report}"
    );
}

#[test]
fn each_example_tool_answers_through_the_sdk_and_counts_as_a_tool_call() {
    let node = node();
    let before: Vec<u64> = ["unit-converter", "inspection-tools", "trivia"]
        .iter()
        .map(|plugin| tool_calls(&node, plugin))
        .collect();
    let observed = sdk_calls(
        &node,
        &[
            ("convert_units", json!({"value": 5, "from": "km", "to": "m"})),
            ("search_regulations", json!({"query": "food storage", "limit": 2})),
            (
                "trivia_knowledge",
                json!({"question": "What is the capital of Australia?", "options": ["Sydney", "Canberra", "Melbourne"]}),
            ),
        ],
        "accept",
        None,
    );
    let results = observed["results"].as_array().expect("results");
    let converted = assert_ok_result(&results[0]);
    assert_eq!(converted["value"], 5000.0, "{converted}");
    assert_eq!(converted["unit"], "m", "{converted}");
    let found = assert_ok_result(&results[1]);
    assert!(found["count"].as_u64().is_some_and(|n| n >= 2), "{found}");
    assert_eq!(found["results"].as_array().map(Vec::len), Some(2), "{found}");
    let known = assert_ok_result(&results[2]);
    assert_eq!(known["answer"], "Canberra", "{known}");
    assert_eq!(
        observed["elicitations"],
        json!([]),
        "low-risk tools ask nobody: {observed}"
    );
    let after: Vec<u64> = ["unit-converter", "inspection-tools", "trivia"]
        .iter()
        .map(|plugin| tool_calls(&node, plugin))
        .collect();
    for (index, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(*a, b + 1, "tool {index} counted once: {before:?} → {after:?}");
    }
}

#[test]
fn invalid_arguments_and_unknown_tools_are_error_results_and_the_session_goes_on() {
    let node = node();
    let observed = sdk_calls(
        &node,
        &[
            ("convert_units", json!({"value": "five", "from": "km", "to": "m"})),
            (REPORT, json!({"inspection_id": "not an id"})),
            ("search_regulations", json!({"limit": 2})),
            ("no_such_tool", json!({})),
            ("convert_units", json!({"value": 1, "from": "h", "to": "min"})),
        ],
        "accept",
        None,
    );
    let results = observed["results"].as_array().expect("results");
    assert_error_result(&results[0], &["value"]);
    assert_error_result(&results[1], &["inspection_id"]);
    assert_error_result(&results[2], &["query"]);
    assert_error_result(&results[3], &["no_such_tool"]);
    assert_eq!(assert_ok_result(&results[4])["value"], 60.0, "{observed}");
    // Arguments are checked before anyone is asked to approve the call.
    assert_eq!(observed["elicitations"], json!([]), "{observed}");
}

/// The one elicitation the SDK received for the report call, checked against the
/// contract: a flat form naming the tool, its parameters and its risk.
fn assert_asked_for_the_report(observed: &Value) {
    let asked = observed["elicitations"].as_array().expect("elicitations");
    assert_eq!(asked.len(), 1, "one question: {observed}");
    let asked = &asked[0];
    assert_eq!(asked["mode"], "form", "{asked}");
    let message = text(&asked["message"]);
    for needle in [REPORT, "INS-2024-001", "high"] {
        assert!(message.contains(needle), "{needle:?} in {message:?}");
    }
    let schema = &asked["requestedSchema"];
    assert_eq!(schema["type"], "object", "{schema}");
    assert_eq!(schema["required"], json!(["approve"]), "{schema}");
    let properties = schema["properties"].as_object().expect("properties");
    assert_eq!(properties["approve"]["type"], "boolean", "{schema}");
    assert_eq!(properties["feedback"]["type"], "string", "{schema}");
    for (name, property) in properties {
        let primitive = property.get("enum").is_some()
            || ["boolean", "string", "number", "integer"].contains(&text(&property["type"]));
        assert!(primitive, "{name} is a primitive: {schema}");
    }
}

fn report_call(node: &TestNode, elicit: &str, feedback: Option<&str>) -> (Value, Value) {
    let observed = sdk_calls(
        node,
        &[(REPORT, json!({"inspection_id": "INS-2024-001"}))],
        elicit,
        feedback,
    );
    let result = observed["results"][0].clone();
    (observed, result)
}

#[test]
fn an_approved_report_runs_the_tool() {
    let node = node();
    let before = tool_calls(&node, "inspection-tools");
    let (observed, result) = report_call(&node, "accept", None);
    assert!(observed["declared"]["elicitation"].is_object(), "{observed}");
    assert_asked_for_the_report(&observed);
    let report = assert_ok_result(&result);
    assert!(
        text(&report["summary"]).starts_with("Generated report RPT-2024-001-"),
        "the tool ran: {report}"
    );
    assert_eq!(tool_calls(&node, "inspection-tools"), before + 1);
}

#[test]
fn a_rejected_report_quotes_the_feedback_and_does_not_run_the_tool() {
    let node = node();
    let feedback = "Not yet: the inspector has to sign the checklist first.";
    let (observed, result) = report_call(&node, "reject", Some(feedback));
    assert_asked_for_the_report(&observed);
    let said = assert_error_result(&result, &["reject", feedback]);
    assert!(!said.contains("Generated report"), "the tool did not run: {said}");
}

#[test]
fn a_declined_or_cancelled_report_does_not_run() {
    let node = node();
    for (answer, reason) in [("decline", "declined"), ("cancel", "cancelled")] {
        let (observed, result) = report_call(&node, answer, None);
        assert_asked_for_the_report(&observed);
        let said = assert_error_result(&result, &[reason]);
        assert!(!said.contains("Generated report"), "{answer}: {said}");
    }
    assert_eq!(tool_calls(&node, "inspection-tools"), 0);
}

#[test]
fn an_unanswered_approval_times_out() {
    let node = builder().env("AGORA_TOOLS__APPROVAL_TIMEOUT_MS", "1500").start();
    let (observed, result) = report_call(&node, "wait", None);
    assert_asked_for_the_report(&observed);
    let said = assert_error_result(&result, &["timed out"]);
    assert!(!said.contains("Generated report"), "{said}");
}

#[test]
fn a_client_without_elicitation_is_told_approval_is_needed_and_never_asked() {
    let node = node();
    let (observed, result) = report_call(&node, "none", None);
    let declared = observed["declared"]
        .as_object()
        .expect("the initialize request's capabilities");
    assert!(
        !declared.contains_key("elicitation"),
        "the SDK declared no elicitation capability: {observed}"
    );
    assert_eq!(observed["elicitations"], json!([]), "{observed}");
    let said = assert_error_result(&result, &["approval"]);
    assert!(!said.contains("Generated report"), "{said}");
    assert_eq!(tool_calls(&node, "inspection-tools"), 0);
}

#[test]
fn a_hot_reload_notifies_the_open_stream_and_changes_the_list() {
    let node = node();
    let mut child = Command::new(support::mcp_python())
        .arg(support::repo_root().join(SCRIPT))
        .arg("reload")
        .arg(node.url(MCP_PATH))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running the mcp client");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().and_then(Result::ok).unwrap_or_default();
    assert_eq!(
        ready,
        "ready",
        "the script's first line; log:\n{}",
        node.log_text()
    );
    std::fs::remove_file(node.plugins_dir.join("unit-converter.wasm")).unwrap();
    let last = lines.map_while(Result::ok).last().unwrap_or_default();
    let output = child.wait_with_output().expect("the client's exit");
    assert!(
        output.status.success(),
        "{}\nstdout: {last}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let observed: Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"));
    let names = |pages: &Value| listed(pages, "tools", "name");
    let (before, after) = (names(&observed["before"]), names(&observed["after"]));
    assert!(before.contains("convert_units"), "{observed}");
    assert_eq!(observed["notified"], true, "{observed}");
    let notified = |method: &str| {
        observed["notifications"]
            .as_array()
            .unwrap()
            .contains(&json!({ "method": method }))
    };
    assert!(notified("notifications/tools/list_changed"), "{observed}");
    let mut expected = before.clone();
    expected.remove("convert_units");
    assert_eq!(after, expected, "{observed}");
    // The unit converter's protocol document went with it.
    assert!(notified("notifications/resources/list_changed"), "{observed}");
    let uris = |pages: &Value| listed(pages, "resources", "uri");
    let (unit_conversion, _) = document_uri("unit-conversion.md");
    assert!(
        uris(&observed["resourcesBefore"]).contains(&unit_conversion),
        "{observed}"
    );
    assert!(
        !uris(&observed["resourcesAfter"]).contains(&unit_conversion),
        "{observed}"
    );
    let streams = exchanges(&observed, "GET", None);
    assert!(
        streams
            .iter()
            .any(|e| e["status"] == 200 && text(&e["contentType"]).starts_with("text/event-stream")),
        "the session's GET stream: {observed}"
    );
}

/// The entries of list `list` over the pages a scenario observed, each page
/// holding at most `page_size` and a cursor on every page but the last.
fn entries_of_pages<'a>(observed: &'a Value, list: &str, page_size: usize) -> Vec<&'a Value> {
    let pages = observed["pages"].as_array().expect("pages");
    for (index, page) in pages.iter().enumerate() {
        let count = page[list].as_array().expect("a list").len();
        assert!(count <= page_size, "page {index} holds {count}: {observed}");
        let last = index + 1 == pages.len();
        assert_eq!(
            page["nextCursor"].is_null(),
            last,
            "a cursor on every page but the last: {observed}"
        );
    }
    pages
        .iter()
        .flat_map(|page| page[list].as_array().unwrap())
        .collect()
}

/// The `field` of every entry of list `list` over the pages a scenario observed.
fn listed(pages: &Value, list: &str, field: &str) -> BTreeSet<String> {
    pages
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|page| page[list].as_array().unwrap())
        .map(|entry| text(&entry[field]).to_string())
        .collect()
}

/// The SHA1 of a bundled protocol document, as its resource URI names it.
fn document_uri(file: &str) -> (String, String) {
    let text = std::fs::read_to_string(support::repo_root().join("protocols").join(file))
        .expect("reading a protocol document");
    let uri = format!(
        "agora://protocols/{}",
        agora_node::crypto::protocol_hash(text.as_bytes())
    );
    (uri, text)
}

#[test]
fn every_protocol_document_is_a_resource_read_byte_for_byte_across_pages() {
    let node = builder()
        .plugin("guess-number")
        .env("AGORA_MCP__PAGE_SIZE", "1")
        .start();
    let (unknown_hash, malformed) = (
        format!("agora://protocols/{}", "0".repeat(40)),
        "file:///etc/passwd".to_string(),
    );
    let observed = sdk(&node, "resources", &[&unknown_hash, &malformed]);
    assert_eq!(
        observed["capabilities"]["resources"]["listChanged"], true,
        "{observed}"
    );

    let pages = observed["pages"].as_array().expect("pages");
    let expected: BTreeSet<(String, String)> = ["guess-number.md", "unit-conversion.md"]
        .into_iter()
        .map(document_uri)
        .collect();
    assert_eq!(
        pages.len(),
        expected.len(),
        "page_size 1: a page per document: {observed}"
    );
    let listed = entries_of_pages(&observed, "resources", 1);
    let uris: BTreeSet<&str> = listed.iter().map(|r| text(&r["uri"])).collect();
    assert_eq!(
        uris,
        expected.iter().map(|(uri, _)| uri.as_str()).collect(),
        "{observed}"
    );
    for resource in &listed {
        let (_, document) = expected
            .iter()
            .find(|(uri, _)| uri == text(&resource["uri"]))
            .unwrap();
        assert_eq!(resource["mimeType"], "text/markdown", "{resource}");
        assert_eq!(resource["size"], document.len(), "{resource}");
        assert!(!text(&resource["name"]).is_empty(), "{resource}");
    }

    let reads = observed["reads"].as_array().expect("reads");
    for (uri, document) in &expected {
        let read = reads
            .iter()
            .find(|r| r["uri"] == uri.as_str())
            .expect("each listed one read");
        assert_eq!(
            read["contents"][0]["text"],
            document.as_str(),
            "the exact bytes of {uri}"
        );
        assert_eq!(read["contents"][0]["mimeType"], "text/markdown", "{read}");
    }
    for uri in [&unknown_hash, &malformed] {
        let read = reads
            .iter()
            .find(|r| r["uri"] == uri.as_str())
            .expect("the unknown ones read");
        assert_eq!(read["error"], "MCPError", "{read}");
        assert_eq!(read["code"], -32602, "{read}");
        assert!(text(&read["message"]).contains("Unknown resource"), "{read}");
    }
    assert_eq!(
        observed["templates"][0]["uriTemplate"], "agora://protocols/{sha1}",
        "{observed}"
    );
}

#[test]
fn ten_sessions_in_parallel_each_initialize_and_call() {
    let node = node();
    let observed = sdk(&node, "parallel", &["10"]);
    let clients = observed["clients"].as_array().expect("clients");
    assert_eq!(clients.len(), 10, "{observed}");
    let mut sessions = BTreeSet::new();
    for client in clients {
        let converted = assert_ok_result(&client["result"]);
        let value = client["value"].as_f64().unwrap();
        assert_eq!(converted["value"], value * 1000.0, "{client}");
        sessions.insert(text(&client["sessionId"]).to_string());
    }
    assert_eq!(sessions.len(), 10, "distinct session ids: {observed}");
}

// ---------------------------------------------------------------- raw sockets

fn request(id: i64, method: &str, params: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

fn initialize_request() -> Vec<u8> {
    request(
        0,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        }),
    )
}

/// POST `body` to the MCP endpoint as a client taking JSON or SSE, with a session
/// id and extra headers when given.
fn rpc_post_with(node: &TestNode, session: Option<&str>, extra: &[(&str, &str)], body: &[u8]) -> HttpReply {
    let mut headers = vec![("content-type", "application/json"), ("accept", ACCEPT)];
    if let Some(session) = session {
        headers.push(("mcp-session-id", session));
    }
    headers.extend_from_slice(extra);
    post_with_headers(&node.url(MCP_PATH), &headers, body)
}

fn rpc_post(node: &TestNode, session: Option<&str>, body: &[u8]) -> HttpReply {
    rpc_post_with(node, session, &[], body)
}

/// The JSON-RPC answer of a 200 reply: the JSON body, or an SSE stream's last message.
fn answer(reply: &HttpReply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.body);
    if reply.content_type.starts_with("text/event-stream") {
        let last = reply
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|data| !data.is_empty())
            .unwrap_or_else(|| panic!("an SSE message: {}", reply.body));
        return serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    }
    assert!(
        reply.content_type.starts_with("application/json"),
        "{}",
        reply.content_type
    );
    reply.json()
}

/// A JSON-RPC error body's code, after checking the envelope.
fn error_code(reply: &HttpReply) -> i64 {
    assert!(
        reply.content_type.starts_with("application/json"),
        "a JSON-RPC error body: {} {}",
        reply.content_type,
        reply.body
    );
    let answer = reply.json();
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error answer: {answer}"))
}

/// A raw initialize and its `notifications/initialized`: the session id.
fn raw_session(node: &TestNode) -> String {
    let reply = rpc_post(node, None, &initialize_request());
    let session = reply
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("a session id: {}", reply.body))
        .to_string();
    let init = answer(&reply);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    let notified = rpc_post(
        node,
        Some(&session),
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(notified.status, 202, "{}", notified.body);
    assert!(notified.body.is_empty(), "{}", notified.body);
    session
}

/// DELETE a session: the HTTP status.
fn delete_session(node: &TestNode, session: &str) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    agent
        .delete(&node.url(MCP_PATH))
        .header("mcp-session-id", session)
        .call()
        .map(|reply| reply.status().as_u16())
        .expect("DELETE")
}

/// `ping` answers `{}` in this session.
fn assert_serves(node: &TestNode, session: &str) {
    let pong = answer(&rpc_post(node, Some(session), &request(9, "ping", json!({}))));
    assert_eq!(pong["id"], 9, "{pong}");
    assert_eq!(pong["result"], json!({}), "{pong}");
}

#[test]
fn discover_is_refused_so_that_clients_fall_back() {
    let node = node();
    let reply = post_with_headers(
        &node.url(MCP_PATH),
        &[
            ("content-type", "application/json"),
            ("accept", ACCEPT),
            ("mcp-protocol-version", "2026-07-28"),
        ],
        &request(1, "server/discover", json!({})),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(error_code(&reply), -32601, "{}", reply.body);
    assert_eq!(reply.json()["id"], 1, "{}", reply.body);
}

#[test]
fn initialize_negotiates_the_version_the_client_names_or_the_newest() {
    let node = node();
    for (asked, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2024-11-05"),
        ("2099-01-01", "2025-11-25"),
    ] {
        let body = request(
            1,
            "initialize",
            json!({"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
        );
        let reply = rpc_post(&node, None, &body);
        assert!(reply.header("mcp-session-id").is_some(), "{}", reply.body);
        let init = answer(&reply);
        assert_eq!(init["result"]["protocolVersion"], answered, "{asked}: {init}");
    }
}

#[test]
fn truncated_json_gets_a_parse_error_and_the_session_still_serves() {
    let node = node();
    let session = raw_session(&node);
    let reply = rpc_post(&node, Some(&session), br#"{"jsonrpc":"2.0","id":1,"method":"#);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(error_code(&reply), -32700, "{}", reply.body);
    assert_eq!(reply.json()["id"], Value::Null, "{}", reply.body);
    assert_serves(&node, &session);
    let listed = answer(&rpc_post(
        &node,
        Some(&session),
        &request(2, "tools/list", json!({})),
    ));
    assert_eq!(
        listed["result"]["tools"].as_array().map(Vec::len),
        Some(4),
        "{listed}"
    );
}

#[test]
fn a_request_without_or_with_an_unknown_session_id_is_refused() {
    let node = node();
    let session = raw_session(&node);
    let missing = rpc_post(&node, None, &request(1, "tools/list", json!({})));
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert_eq!(error_code(&missing), -32600, "{}", missing.body);
    let unknown = rpc_post(
        &node,
        Some("no-such-session"),
        &request(2, "tools/list", json!({})),
    );
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    error_code(&unknown);
    assert_serves(&node, &session);

    // DELETE ends it; then its id is unknown too.
    assert_eq!(delete_session(&node, &session), 204);
    let gone = rpc_post(&node, Some(&session), &request(3, "ping", json!({})));
    assert_eq!(gone.status, 404, "{}", gone.body);
    error_code(&gone);
}

#[test]
fn a_body_over_a_mebibyte_gets_413_while_the_client_still_sends() {
    let node = node();
    let session = raw_session(&node);
    let huge = vec![b' '; 2 << 20];
    for round in 0..10 {
        // ureq writes the whole body before it reads the answer.
        let reply = rpc_post(&node, Some(&session), &huge);
        assert_eq!(reply.status, 413, "round {round}: {}", reply.body);
        error_code(&reply);
    }
    assert_serves(&node, &session);
}

#[test]
fn with_a_token_only_bearers_of_it_are_served() {
    let node = builder().env("AGORA_MCP__TOKEN", "s3cret-token").start();
    for auth in [None, Some("Bearer wrong-token"), Some("s3cret-token")] {
        let extra: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let reply = rpc_post_with(&node, None, &extra, &initialize_request());
        assert_eq!(reply.status, 401, "{auth:?}: {}", reply.body);
        let challenge = reply.header("www-authenticate").unwrap_or_default();
        assert!(challenge.starts_with("Bearer"), "{auth:?}: {challenge:?}");
    }
    let reply = rpc_post_with(
        &node,
        None,
        &[("authorization", "Bearer s3cret-token")],
        &initialize_request(),
    );
    assert!(reply.header("mcp-session-id").is_some(), "{}", reply.body);
    assert_eq!(answer(&reply)["result"]["serverInfo"]["name"], "agora-node");
}

#[test]
fn web_pages_are_refused_unless_their_origin_is_the_nodes_own_or_listed() {
    let node = builder()
        .env("AGORA_MCP__ALLOWED_ORIGINS", r#"["https://app.example.org"]"#)
        .start();
    let host = node
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    // Pages of other sites. A rebound page (its own name, same origin as the Host it
    // asks) is refused by its Host: tests/e2e/browser_policy.rs.
    for origin in ["http://evil.example", "http://127.0.0.1:1", "null"] {
        let reply = rpc_post_with(&node, None, &[("origin", origin)], &initialize_request());
        assert_eq!(reply.status, 403, "{origin}: {}", reply.body);
        assert_eq!(error_code(&reply), -32600, "{origin}: {}", reply.body);
        assert!(reply.header("mcp-session-id").is_none(), "{origin}");
    }
    // A listed page, a page the node itself served (the Host is one of its names), and
    // programs, which send no Origin at all.
    for origin in ["https://app.example.org", &format!("http://{host}")] {
        let reply = rpc_post_with(&node, None, &[("origin", origin)], &initialize_request());
        assert!(
            reply.header("mcp-session-id").is_some(),
            "{origin}: {}",
            reply.body
        );
    }
    let reply = rpc_post_with(&node, None, &[], &initialize_request());
    assert!(reply.header("mcp-session-id").is_some(), "{}", reply.body);
}

#[test]
fn a_non_loopback_listener_without_a_token_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .arg("serve")
        .current_dir(dir.path())
        .env("AGORA_DATA_DIR", dir.path())
        .env("AGORA_LISTEN", "0.0.0.0:0")
        .output()
        .expect("running agora-node");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it must not serve: {stderr}");
    assert!(stderr.contains("mcp.token"), "{stderr}");
}

#[test]
fn beyond_the_session_bound_initialize_gets_503_until_one_ends() {
    let node = builder().env("AGORA_MCP__MAX_SESSIONS_PER_IP", "2").start();
    let first = raw_session(&node);
    let _second = raw_session(&node);
    let refused = rpc_post(&node, None, &initialize_request());
    assert_eq!(refused.status, 503, "{}", refused.body);
    error_code(&refused);
    assert_serves(&node, &first);
    assert_eq!(delete_session(&node, &first), 204);
    raw_session(&node);
}

/// The SDK's answers and the raw ones agree on the shape of a streamed call.
#[test]
fn tools_call_streams_when_the_client_takes_sse_and_answers_json_otherwise() {
    let node = node();
    let session = raw_session(&node);
    let call = request(
        4,
        "tools/call",
        json!({"name": "convert_units", "arguments": {"value": 2, "from": "kg", "to": "g"}}),
    );
    let streamed = rpc_post(&node, Some(&session), &call);
    assert!(
        streamed.content_type.starts_with("text/event-stream"),
        "{}",
        streamed.content_type
    );
    let events = streamed.body.replace("\r\n", "\n");
    for event in events.split("\n\n").filter(|e| !e.trim().is_empty()) {
        assert!(
            event.lines().any(|l| l == "event: message"),
            "each event a message: {event:?}"
        );
    }
    let from_stream = answer(&streamed);
    assert_eq!(from_stream["id"], 4, "the response last: {from_stream}");
    let plain = post_with_headers(
        &node.url(MCP_PATH),
        &[
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("mcp-session-id", &session),
        ],
        &call,
    );
    let from_json = answer(&plain);
    assert!(
        plain.content_type.starts_with("application/json"),
        "{}",
        plain.content_type
    );
    for result in [&from_stream["result"], &from_json["result"]] {
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(result["structuredContent"]["value"], 2000.0, "{result}");
    }
}
