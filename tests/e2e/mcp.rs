//! MCP (issues 19 and 41) end to end: a real node with the four example tools
//! (`inspection-tools`' two, `unit-converter`'s and `trivia`'s), answered by the
//! reference client — the real `mcp` 2.3.0 SDK in a venv, driven by
//! `tests/interop/mcp/sdk_client.py`, one scenario per run, in each of its
//! modes: the stock "auto" (`server/discover`, which the node answers, so the
//! client adopts the stateless 2026-07-28), pinned "2026-07-28" (no discover),
//! and "legacy" (the 2025-11-25 `initialize` handshake and its session) — and
//! by raw sockets for what no SDK sends: truncated JSON, missing or unknown
//! session ids, oversized bodies, missing tokens, every rung of the 2026
//! envelope ladder.
//!
//! The script only reports what the SDK saw (results, elicitation requests, the
//! HTTP exchanges with their statuses and session ids); every judgement is made here.

use std::collections::BTreeSet;
use std::process::Command;
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

/// The client's three modes: how `Client(mode=…)` connects.
const MODES: [&str; 3] = ["auto", "2026-07-28", "legacy"];
/// The modes that speak the stateless revision.
const MODERN_MODES: [&str; 2] = ["auto", "2026-07-28"];

/// [`sdk`] with the client in `mode`.
fn sdk_in(node: &TestNode, mode: &str, scenario: &str, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["--mode", mode]);
    sdk(node, scenario, &args)
}

/// [`sdk_in`] for a scenario that prints `ready` once its stream is open.
fn sdk_until_ready(node: &TestNode, mode: &str, scenario: &str) -> support::ReadyScenario {
    let python = support::mcp_python();
    support::ReadyScenario::start(
        &python,
        SCRIPT,
        scenario,
        &node.url(MCP_PATH),
        &["--mode", mode],
        node,
    )
}

/// The SDK's `tools/call` of each `(name, arguments)` in one session, the
/// elicitation callback answering as `elicit` says (`none`: no callback at all).
fn sdk_calls(node: &TestNode, calls: &[(&str, Value)], elicit: &str, feedback: Option<&str>) -> Value {
    sdk_calls_in(node, "auto", calls, elicit, feedback)
}

fn sdk_calls_in(
    node: &TestNode,
    mode: &str,
    calls: &[(&str, Value)],
    elicit: &str,
    feedback: Option<&str>,
) -> Value {
    let calls = json!(
        calls
            .iter()
            .map(|(name, args)| json!([name, args]))
            .collect::<Vec<_>>()
    );
    let calls = calls.to_string();
    let mut args = vec![calls.as_str(), "--elicit", elicit, "--mode", mode];
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

/// Every exchange of a stateless client: POSTs only, no session sent or
/// given, each carrying the revision and its method in headers.
fn assert_stateless(observed: &Value) {
    for exchange in observed["exchanges"].as_array().expect("exchanges") {
        assert_eq!(exchange["http"], "POST", "no GET stream, no DELETE: {observed}");
        assert!(exchange["sentSession"].is_null(), "{observed}");
        assert!(exchange["session"].is_null(), "{observed}");
        assert_ne!(exchange["rpc"], "initialize", "{observed}");
        assert_eq!(exchange["version"], "2026-07-28", "{exchange}");
        assert_eq!(exchange["mcpMethod"], exchange["rpc"], "{exchange}");
    }
}

#[test]
fn auto_adopts_2026_07_28_through_discover() {
    let node = node();
    let observed = sdk(
        &node,
        "call",
        &[r#"[["convert_units", {"value": 2, "from": "km", "to": "m"}]]"#],
    );
    let all = observed["exchanges"].as_array().expect("exchanges");
    assert_eq!(all[0]["rpc"], "server/discover", "{observed}");
    assert_eq!(all[0]["status"], 200, "{observed}");
    assert!(
        text(&all[0]["contentType"]).starts_with("application/json"),
        "{observed}"
    );
    assert_stateless(&observed);
    let calls = exchanges(&observed, "POST", Some("tools/call"));
    assert_eq!(calls.len(), 1, "{observed}");
    assert_eq!(calls[0]["mcpName"], "convert_units", "{observed}");
    assert_eq!(
        assert_ok_result(&observed["results"][0])["value"],
        2000.0,
        "{observed}"
    );

    let connected = sdk(&node, "init", &[]);
    assert_eq!(connected["protocolVersion"], "2026-07-28", "{connected}");
    assert_eq!(connected["serverInfo"]["name"], "agora-node", "{connected}");
    assert!(
        !text(&connected["serverInfo"]["version"]).is_empty(),
        "{connected}"
    );
    for list in ["tools", "resources", "prompts"] {
        assert_eq!(
            connected["capabilities"][list]["listChanged"], true,
            "{connected}"
        );
    }
    assert!(connected["sessionId"].is_null(), "{connected}");
}

#[test]
fn a_pinned_client_is_served_without_discover() {
    let node = node();
    let observed = sdk_calls_in(
        &node,
        "2026-07-28",
        &[("convert_units", json!({"value": 3, "from": "km", "to": "m"}))],
        "accept",
        None,
    );
    let all = observed["exchanges"].as_array().expect("exchanges");
    assert_eq!(
        all[0]["rpc"], "tools/call",
        "the call is the first exchange: {observed}"
    );
    assert!(
        exchanges(&observed, "POST", Some("server/discover")).is_empty(),
        "{observed}"
    );
    assert_stateless(&observed);
    assert_eq!(
        assert_ok_result(&observed["results"][0])["value"],
        3000.0,
        "{observed}"
    );
    let listed = sdk_in(&node, "2026-07-28", "list", &[]);
    assert_eq!(
        entries_of_pages(&listed, "tools", 50).len(),
        TOOLS.len(),
        "{listed}"
    );
}

#[test]
fn legacy_mode_still_gets_the_2025_handshake() {
    let node = node();
    let observed = sdk_in(&node, "legacy", "init", &[]);
    let all = observed["exchanges"].as_array().expect("exchanges");
    assert_eq!(
        all[0]["rpc"], "initialize",
        "no discover in legacy mode: {observed}"
    );
    assert_eq!(all[0]["status"], 200, "{observed}");
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
    for exchange in &all[1..] {
        assert_eq!(exchange["sentSession"], session, "{observed}");
    }
    let initialized = exchanges(&observed, "POST", Some("notifications/initialized"));
    assert_eq!(initialized.len(), 1, "{observed}");
    assert_eq!(initialized[0]["status"], 202, "{observed}");
}

#[test]
fn a_session_the_client_ends_is_gone() {
    let node = node();
    let observed = sdk_in(&node, "legacy", "init", &[]);
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

fn report_call(node: &TestNode, mode: &str, elicit: &str, feedback: Option<&str>) -> (Value, Value) {
    let observed = sdk_calls_in(
        node,
        mode,
        &[(REPORT, json!({"inspection_id": "INS-2024-001"}))],
        elicit,
        feedback,
    );
    let result = observed["results"][0].clone();
    if mode != "legacy" && elicit != "none" {
        assert_answered_in_a_round(&observed);
    }
    (observed, result)
}

/// At 2026-07-28 an approval is a round: the first `tools/call` is answered
/// at once with the form (JSON, no stream), the second carries the answer.
fn assert_answered_in_a_round(observed: &Value) {
    assert_stateless(observed);
    let calls = exchanges(observed, "POST", Some("tools/call"));
    assert_eq!(calls.len(), 2, "the call and its answered retry: {observed}");
    for call in calls {
        assert_eq!(call["status"], 200, "{observed}");
        assert!(
            text(&call["contentType"]).starts_with("application/json"),
            "{observed}"
        );
    }
}

#[test]
fn an_approved_report_runs_the_tool() {
    let node = node();
    for mode in MODES {
        let before = tool_calls(&node, "inspection-tools");
        let (observed, result) = report_call(&node, mode, "accept", None);
        assert!(
            observed["declared"]["elicitation"].is_object(),
            "{mode}: {observed}"
        );
        assert_asked_for_the_report(&observed);
        let report = assert_ok_result(&result);
        assert!(
            text(&report["summary"]).starts_with("Generated report RPT-2024-001-"),
            "{mode}: the tool ran: {report}"
        );
        assert_eq!(tool_calls(&node, "inspection-tools"), before + 1, "{mode}");
    }
}

#[test]
fn a_rejected_report_quotes_the_feedback_and_does_not_run_the_tool() {
    let node = node();
    let feedback = "Not yet: the inspector has to sign the checklist first.";
    for mode in MODES {
        let (observed, result) = report_call(&node, mode, "reject", Some(feedback));
        assert_asked_for_the_report(&observed);
        let said = assert_error_result(&result, &["reject", feedback]);
        assert!(
            !said.contains("Generated report"),
            "{mode}: the tool did not run: {said}"
        );
    }
    assert_eq!(tool_calls(&node, "inspection-tools"), 0);
}

#[test]
fn a_declined_or_cancelled_report_does_not_run() {
    let node = node();
    for mode in MODES {
        for (answer, reason) in [("decline", "declined"), ("cancel", "cancelled")] {
            let (observed, result) = report_call(&node, mode, answer, None);
            assert_asked_for_the_report(&observed);
            let said = assert_error_result(&result, &[reason]);
            assert!(!said.contains("Generated report"), "{mode} {answer}: {said}");
        }
    }
    assert_eq!(tool_calls(&node, "inspection-tools"), 0);
}

#[test]
fn an_unanswered_approval_times_out() {
    let node = builder().env("AGORA_TOOLS__APPROVAL_TIMEOUT_MS", "1500").start();
    // Only a session waits on the node; a 2026 round costs it nothing while a human thinks.
    let (observed, result) = report_call(&node, "legacy", "wait", None);
    assert_asked_for_the_report(&observed);
    let said = assert_error_result(&result, &["timed out"]);
    assert!(!said.contains("Generated report"), "{said}");
}

#[test]
fn a_client_without_elicitation_is_told_approval_is_needed_and_never_asked() {
    let node = node();
    for mode in MODES {
        let (observed, result) = report_call(&node, mode, "none", None);
        let declared = observed["declared"]
            .as_object()
            .expect("the capabilities the client declared");
        assert!(
            !declared.contains_key("elicitation"),
            "{mode}: the SDK declared no elicitation capability: {observed}"
        );
        assert_eq!(observed["elicitations"], json!([]), "{mode}: {observed}");
        let said = assert_error_result(&result, &["approval"]);
        assert!(!said.contains("Generated report"), "{mode}: {said}");
        assert_eq!(
            exchanges(&observed, "POST", Some("tools/call")).len(),
            1,
            "{mode}: no round: {observed}"
        );
    }
    assert_eq!(tool_calls(&node, "inspection-tools"), 0);
}

#[test]
fn a_hot_reload_notifies_the_open_stream_and_changes_the_list() {
    let node = node();
    let scenario = sdk_until_ready(&node, "legacy", "reload");
    std::fs::remove_file(node.plugins_dir.join("unit-converter.wasm")).unwrap();
    let observed = scenario.observed();
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
    // The unit converter's protocol document went with it.
    assert!(notified("notifications/resources/list_changed"), "{observed}");
    assert_the_unit_converter_went(&observed, before, after);
    let streams = exchanges(&observed, "GET", None);
    assert!(
        streams
            .iter()
            .any(|e| e["status"] == 200 && text(&e["contentType"]).starts_with("text/event-stream")),
        "the session's GET stream: {observed}"
    );
}

#[test]
fn a_hot_reload_is_announced_on_the_listen_stream() {
    for mode in MODERN_MODES {
        let node = node();
        let scenario = sdk_until_ready(&node, mode, "listen");
        std::fs::remove_file(node.plugins_dir.join("unit-converter.wasm")).unwrap();
        let observed = scenario.observed();
        assert_eq!(observed["protocolVersion"], "2026-07-28", "{observed}");
        let honored = &observed["honored"];
        for flag in ["toolsListChanged", "resourcesListChanged", "promptsListChanged"] {
            assert_eq!(honored[flag], true, "{mode}: {observed}");
        }
        assert!(
            honored.get("resourceSubscriptions").is_none_or(Value::is_null),
            "documents are content-addressed: no resource subscriptions: {observed}"
        );
        let events = observed["events"].as_array().expect("events");
        assert!(events.contains(&json!("ToolsListChanged")), "{mode}: {observed}");
        assert!(
            events.contains(&json!("ResourcesListChanged")),
            "{mode}: {observed}"
        );
        // unit-converter's `convert` prompt went too.
        assert!(
            events.contains(&json!("PromptsListChanged")),
            "{mode}: {observed}"
        );
        let names = |pages: &Value| listed(pages, "tools", "name");
        let (before, after) = (names(&observed["before"]), names(&observed["after"]));
        assert_the_unit_converter_went(&observed, before, after);
        let listens = exchanges(&observed, "POST", Some("subscriptions/listen"));
        assert_eq!(listens.len(), 1, "{observed}");
        assert!(
            text(&listens[0]["contentType"]).starts_with("text/event-stream"),
            "{observed}"
        );
        assert_stateless(&observed);
    }
}

#[test]
fn the_sdk_sees_a_listen_end_gracefully_after_listen_max_ms() {
    let node = builder().env("AGORA_MCP__LISTEN_MAX_MS", "2000").start();
    for mode in MODERN_MODES {
        let observed = sdk_in(&node, mode, "listen-end", &[]);
        assert_eq!(
            observed["ended"], "graceful",
            "{mode}: no SubscriptionLost: {observed}"
        );
        assert_eq!(observed["events"], json!([]), "{observed}");
    }
}

#[test]
fn a_listen_stream_ends_gracefully_when_the_node_stops() {
    for mode in MODERN_MODES {
        let node = node();
        let scenario = sdk_until_ready(&node, mode, "listen-end");
        let status = node.stop();
        assert!(status.success(), "{mode}: the node's exit: {status}");
        let observed = scenario.observed();
        assert_eq!(
            observed["ended"], "graceful",
            "{mode}: the listen's result, not SubscriptionLost: {observed}"
        );
    }
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

/// After `unit-converter.wasm` was removed: the lists a reload scenario saw
/// before and after differ by its tool and its protocol document, and only so.
fn assert_the_unit_converter_went(observed: &Value, before: BTreeSet<String>, after: BTreeSet<String>) {
    let mut expected = before;
    assert!(expected.remove("convert_units"), "{observed}");
    assert_eq!(after, expected, "{observed}");
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
    for mode in MODES {
        resources_are_served_in(&node, mode, &unknown_hash, &malformed);
    }
}

fn resources_are_served_in(node: &TestNode, mode: &str, unknown_hash: &str, malformed: &str) {
    let observed = sdk_in(node, mode, "resources", &[unknown_hash, malformed]);
    // A pinned client asks for no capabilities (it never discovers).
    if mode != "2026-07-28" {
        assert_eq!(
            observed["capabilities"]["resources"]["listChanged"], true,
            "{mode}: {observed}"
        );
    }

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
        // Content-addressed, so a 2026 client may keep it (mcp.resource_ttl_ms).
        let ttl = if mode == "legacy" {
            json!(0)
        } else {
            json!(3_600_000)
        };
        assert_eq!(read["ttlMs"], ttl, "{mode}: {read}");
    }
    for uri in [unknown_hash, malformed] {
        let read = reads
            .iter()
            .find(|r| r["uri"] == uri)
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
    let observed = sdk_in(&node, "legacy", "parallel", &["10"]);
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

#[test]
fn ten_modern_clients_in_parallel_hold_no_session() {
    let node = node();
    let observed = sdk(&node, "parallel", &["10"]);
    let clients = observed["clients"].as_array().expect("clients");
    assert_eq!(clients.len(), 10, "{observed}");
    for client in clients {
        let converted = assert_ok_result(&client["result"]);
        let value = client["value"].as_f64().unwrap();
        assert_eq!(converted["value"], value * 1000.0, "{client}");
        assert!(client["sessionId"].is_null(), "{client}");
    }
}

/// `rounds` against the report tool: the first answer, then each step of `plan`.
fn rounds(node: &TestNode, mode: &str, plan: &str) -> Value {
    let arguments = json!({"inspection_id": "INS-2024-001"}).to_string();
    let other = json!({"inspection_id": "INS-2024-002"}).to_string();
    sdk_in(
        node,
        mode,
        "rounds",
        &[REPORT, &arguments, plan, "--other-args", &other],
    )
}

#[test]
fn a_wrong_tampered_rebound_or_replayed_answer_is_refused() {
    let node = node();
    for mode in MODERN_MODES {
        let before = tool_calls(&node, "inspection-tools");
        let observed = rounds(
            &node,
            mode,
            "wrongkey,tamper,noanswer,otherargs,othertool,ok,replay,fresh",
        );
        let first = &observed["first"];
        assert_eq!(first["resultType"], "input_required", "{mode}: {observed}");
        let requests = first["inputRequests"].as_object().expect("inputRequests");
        assert_eq!(requests.len(), 1, "{observed}");
        let (key, asked) = requests.iter().next().unwrap();
        assert!(key.starts_with("appr_"), "{observed}");
        assert_eq!(asked["method"], "elicitation/create", "{observed}");
        assert_eq!(asked["params"]["mode"], "form", "{observed}");
        assert!(text(&first["requestState"]).starts_with("r1."), "{observed}");
        let steps = observed["steps"].as_array().expect("steps");
        let step = |name: &str| {
            steps
                .iter()
                .find(|s| s["step"] == name)
                .unwrap_or_else(|| panic!("{name}: {observed}"))
        };
        for refused in ["wrongkey", "tamper", "noanswer", "otherargs", "replay"] {
            let step = step(refused);
            assert_eq!(step["error"], "MCPError", "{mode} {refused}: {observed}");
            assert_eq!(step["code"], -32602, "{mode} {refused}: {observed}");
            assert!(text(&step["message"]).contains("requestState"), "{step}");
        }
        // Another tool, which needs no approval, runs as asked: the state bought nothing.
        let other = step("othertool");
        assert_eq!(assert_ok_result(other)["value"], 1000.0, "{observed}");
        let ran = assert_ok_result(step("ok"));
        assert!(
            text(&ran["summary"]).starts_with("Generated report"),
            "{observed}"
        );
        // A refusal consumed nothing: a fresh round still runs once.
        assert_ok_result(step("fresh"));
        assert_eq!(
            tool_calls(&node, "inspection-tools"),
            before + 2,
            "{mode}: exactly the ok and the fresh answer ran: {observed}"
        );
        for exchange in exchanges(&observed, "POST", Some("tools/call")) {
            let status = exchange["status"].as_u64().unwrap();
            assert!(status == 200 || status == 400, "{exchange}");
        }
    }
}

#[test]
fn a_round_answered_after_its_deadline_is_refused() {
    let node = builder().env("AGORA_TOOLS__APPROVAL_TIMEOUT_MS", "1000").start();
    let arguments = json!({"inspection_id": "INS-2024-001"}).to_string();
    // "late" waits past the round's deadline before answering.
    let observed = sdk_in(&node, "2026-07-28", "rounds", &[REPORT, &arguments, "late"]);
    let late = &observed["steps"][0];
    assert_eq!(late["code"], -32602, "{observed}");
    assert_eq!(tool_calls(&node, "inspection-tools"), 0);
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

/// A 2026-07-28 request body: `params` with the envelope in `_meta`.
fn modern_request(id: i64, method: &str, mut params: Value) -> Vec<u8> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    });
    request(id, method, params)
}

/// POST a 2026 request with its routing headers (`mcp-method` = `method`), and `extra`.
fn modern_post(node: &TestNode, method: &str, extra: &[(&str, &str)], body: &[u8]) -> HttpReply {
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", ACCEPT),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    headers.extend_from_slice(extra);
    post_with_headers(&node.url(MCP_PATH), &headers, body)
}

#[test]
fn discover_answers_the_2026_era() {
    let node = node();
    let reply = modern_post(
        &node,
        "server/discover",
        &[],
        &modern_request(1, "server/discover", json!({})),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.header("mcp-session-id").is_none(), "no session at 2026");
    let answer = answer(&reply);
    assert_eq!(answer["id"], 1, "{answer}");
    let result = &answer["result"];
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]), "{result}");
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(result["ttlMs"], 0, "{result}");
    assert_eq!(result["cacheScope"], "private", "{result}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "agora-node",
        "{result}"
    );
    assert!(
        result["capabilities"]["resources"].get("subscribe").is_none(),
        "{result}"
    );
}

#[test]
fn the_envelope_ladder() {
    let node = node();
    let refused = |reply: HttpReply, status: u16, code: i64| {
        assert_eq!(reply.status, status, "{}", reply.body);
        assert_eq!(error_code(&reply), code, "{}", reply.body);
        reply.json()
    };
    let list = |params: Value| request(1, "tools/list", params);
    // No _meta, or one without the client's capabilities.
    refused(
        modern_post(&node, "tools/list", &[], &list(json!({}))),
        400,
        -32602,
    );
    let half = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}});
    refused(modern_post(&node, "tools/list", &[], &list(half)), 400, -32602);
    // Headers that disagree with the body, or repeat.
    let listing = modern_request(1, "tools/list", json!({}));
    refused(modern_post(&node, "tools/call", &[], &listing), 400, -32020);
    refused(
        modern_post(&node, "tools/list", &[("mcp-method", "tools/list")], &listing),
        400,
        -32020,
    );
    let other_version = [
        ("content-type", "application/json"),
        ("mcp-protocol-version", "2099-01-01"),
        ("mcp-method", "tools/list"),
    ];
    refused(
        post_with_headers(&node.url(MCP_PATH), &other_version, &listing),
        400,
        -32020,
    );
    let call = |name: &str| {
        modern_request(
            2,
            "tools/call",
            json!({"name": name, "arguments": {"value": 1, "from": "km", "to": "m"}}),
        )
    };
    refused(
        modern_post(
            &node,
            "tools/call",
            &[("mcp-name", "trivia_knowledge")],
            &call("convert_units"),
        ),
        400,
        -32020,
    );
    // The SDK's sentinel for a value that is not plain ASCII is the name it wraps.
    let wrapped = modern_post(
        &node,
        "tools/call",
        &[("mcp-name", "=?base64?Y29udmVydF91bml0cw==?=")],
        &call("convert_units"),
    );
    assert_eq!(
        answer(&wrapped)["result"]["resultType"],
        "complete",
        "{}",
        wrapped.body
    );
    // A revision the node does not serve, in both places.
    let mut future: Value = serde_json::from_slice(&listing).unwrap();
    future["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let future_headers = [
        ("content-type", "application/json"),
        ("mcp-protocol-version", "2099-01-01"),
        ("mcp-method", "tools/list"),
    ];
    let unsupported = refused(
        post_with_headers(
            &node.url(MCP_PATH),
            &future_headers,
            future.to_string().as_bytes(),
        ),
        400,
        -32022,
    );
    assert_eq!(
        unsupported["error"]["data"]["requested"], "2099-01-01",
        "{unsupported}"
    );
    let supported = unsupported["error"]["data"]["supported"].as_array().unwrap();
    assert!(supported.contains(&json!("2026-07-28")), "{unsupported}");
    assert!(
        supported.contains(&json!("2025-11-25")),
        "so a newer client falls back: {unsupported}"
    );
    // What 2026 does not have.
    for method in ["ping", "initialize", "resources/subscribe", "no/such"] {
        refused(
            modern_post(&node, method, &[], &modern_request(3, method, json!({}))),
            404,
            -32601,
        );
    }
    // A notification is taken; a response or a batch is not a request.
    let noted = modern_post(
        &node,
        "notifications/cancelled",
        &[],
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#,
    );
    assert_eq!(noted.status, 202, "{}", noted.body);
    refused(
        modern_post(
            &node,
            "tools/list",
            &[],
            br#"{"jsonrpc":"2.0","id":"appr_1","result":{}}"#,
        ),
        400,
        -32600,
    );
    refused(
        modern_post(
            &node,
            "tools/list",
            &[],
            &[b"[".as_slice(), &listing, b"]"].concat(),
        ),
        400,
        -32600,
    );
    // GET and DELETE carry no meaning at 2026.
    for reply in [
        support::get_with_headers(
            &node.url(MCP_PATH),
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("accept", "text/event-stream"),
            ],
        ),
        support::delete_with_headers(&node.url(MCP_PATH), &[("mcp-protocol-version", "2026-07-28")]),
    ] {
        assert_eq!(reply.status, 405, "{}", reply.body);
        assert_eq!(reply.header("allow"), Some("POST"), "{}", reply.body);
    }
    // A listen must be able to stream.
    let listen = modern_request(
        4,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let json_only = [
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
    ];
    let not_acceptable = post_with_headers(&node.url(MCP_PATH), &json_only, &listen);
    assert_eq!(not_acceptable.status, 406, "{}", not_acceptable.body);
    // The node's own policies hold in the new era too.
    let tokened = builder().env("AGORA_MCP__TOKEN", "s3cret").start();
    let unauthorized = modern_post(&tokened, "tools/list", &[], &listing);
    assert_eq!(unauthorized.status, 401, "{}", unauthorized.body);
    assert_eq!(unauthorized.header("www-authenticate"), Some("Bearer"));
    let authorized = modern_post(
        &tokened,
        "tools/list",
        &[("authorization", "Bearer s3cret")],
        &listing,
    );
    assert_eq!(
        answer(&authorized)["result"]["resultType"],
        "complete",
        "{}",
        authorized.body
    );
}

/// A raw `subscriptions/listen` kept open: the socket, once the node acknowledged it.
fn open_listen(node: &TestNode, id: &str) -> (std::net::TcpStream, String) {
    use std::io::{Read, Write};
    let url = node.url(MCP_PATH);
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let mut stream = std::net::TcpStream::connect(&authority).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut body: Value = serde_json::from_slice(&modern_request(
        0,
        "subscriptions/listen",
        json!({
            "notifications": {"toolsListChanged": true, "resourcesListChanged": true},
        }),
    ))
    .unwrap();
    body["id"] = json!(id);
    let body = body.to_string();
    let head = format!(
        "POST {MCP_PATH} HTTP/1.1\r\nHost: {authority}\r\ncontent-type: application/json\r\naccept: {ACCEPT}\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: subscriptions/listen\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut seen = String::new();
    let mut buffer = [0u8; 4096];
    for _ in 0..1000 {
        if seen.contains("notifications/subscriptions/acknowledged") || seen.contains("\r\n\r\n{") {
            break;
        }
        let read = stream.read(&mut buffer).expect("the listen's answer");
        if read == 0 {
            break;
        }
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
    (stream, seen)
}

/// Read an open stream until `needle` (or its end): what was read.
fn read_until(stream: &mut std::net::TcpStream, needle: &str) -> String {
    use std::io::Read;
    let mut seen = String::new();
    let mut buffer = [0u8; 4096];
    for _ in 0..1000 {
        if seen.contains(needle) {
            break;
        }
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => seen.push_str(&String::from_utf8_lossy(&buffer[..read])),
        }
    }
    seen
}

#[test]
fn listen_streams_are_bounded_per_address_and_end_gracefully() {
    let node = builder()
        .env("AGORA_MCP__MAX_LISTEN_STREAMS_PER_IP", "2")
        .env("AGORA_MCP__LISTEN_MAX_MS", "3000")
        .start();
    let (mut first, acked) = open_listen(&node, "listen-1");
    assert!(acked.contains("text/event-stream"), "{acked}");
    assert!(acked.contains(r#""toolsListChanged":true"#), "{acked}");
    assert!(
        acked.contains(r#""io.modelcontextprotocol/subscriptionId":"listen-1""#),
        "{acked}"
    );
    let (_second, acked) = open_listen(&node, "listen-2");
    assert!(
        acked.contains("notifications/subscriptions/acknowledged"),
        "{acked}"
    );
    let (_third, refused) = open_listen(&node, "listen-3");
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("-32000"), "a JSON-RPC error body: {refused}");
    assert!(!refused.contains("acknowledged"), "{refused}");
    // After mcp.listen_max_ms the stream ends with the listen's own result, and its place is free.
    let ended = read_until(&mut first, r#""resultType":"complete""#);
    assert!(ended.contains(r#""id":"listen-1""#), "{ended}");
    assert!(!ended.contains("\nid:"), "no SSE event ids at 2026: {ended}");
    drop(first);
    let (_fourth, acked) = open_listen(&node, "listen-4");
    assert!(
        acked.contains("acknowledged"),
        "a place freed by the graceful end: {acked}"
    );
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
