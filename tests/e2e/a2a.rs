//! A2A 1.0 (issue 18) end to end: a real node with the bundled `hai-assistant`
//! and `inspection-tools` plugins, answered by the reference client — the real
//! `a2a-sdk` 1.3.0 in a venv, driven by `tests/interop/a2a/sdk_client.py`, one
//! scenario per run — and by raw sockets for what no SDK would send: malformed
//! JSON-RPC, batches, oversized bodies, too many parts, foreign protocol versions.
//!
//! The script only reports what the SDK saw (states, texts, event order, error
//! classes with their JSON-RPC codes); every judgement is made here.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::open_port;
use crate::support::{self, NodeBuilder, TestNode, get, post, post_with_headers};

/// The default `a2a.path`.
const A2A_PATH: &str = "/a2a";
/// The two tools `inspection-tools` declares; each is a skill on the card.
const TOOLS: [&str; 2] = ["search_regulations", "generate_inspection_report"];

/// The venv of the reference SDK (also the server side of the CLI's interop test:
/// one package list, so the two share one venv instead of rebuilding it in turn).
pub(crate) fn a2a_python() -> PathBuf {
    support::python_venv("a2a", &["a2a-sdk[http-server]==1.3.0", "uvicorn==0.54.0"])
}

fn builder() -> NodeBuilder {
    TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
}

fn node() -> TestNode {
    builder().start()
}

/// Run one scenario of the SDK client against `node`: what it observed.
fn sdk(node: &TestNode, scenario: &str, args: &[&str]) -> Value {
    let python = a2a_python();
    support::run_scenario(
        &python,
        "tests/interop/a2a/sdk_client.py",
        scenario,
        &node.url(""),
        args,
        node,
    )
}

/// An SDK exception the script reported: its class and the JSON-RPC code the SDK maps it from.
fn assert_sdk_error(observed: &Value, class: &str, code: i64, what: &str) {
    assert_eq!(observed["error"], class, "{what}: {observed}");
    assert_eq!(observed["code"], code, "{what}: {observed}");
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_else(|| panic!("not a string: {value}"))
}

/// A finished answer as the contract shapes it: one artifact "answer" holding the
/// whole text, and the same text as the agent's status message.
fn assert_answered(task: &Value) -> String {
    assert_eq!(task["state"], "TASK_STATE_COMPLETED", "{task}");
    let artifacts = task["artifacts"].as_array().expect("artifacts");
    assert_eq!(artifacts.len(), 1, "one artifact: {task}");
    assert_eq!(artifacts[0]["name"], "answer", "{task}");
    assert!(!text(&artifacts[0]["artifactId"]).is_empty(), "{task}");
    let answer = text(&task["answer"]).to_string();
    assert!(!answer.is_empty(), "{task}");
    assert_eq!(task["statusRole"], "ROLE_AGENT", "{task}");
    assert_eq!(task["statusTexts"], json!([answer]), "{task}");
    answer
}

/// A task parked on an approval: input-required, a question and the approval's data part.
fn assert_parked_on_report(parked: &Value) -> Value {
    assert_eq!(parked["state"], "TASK_STATE_INPUT_REQUIRED", "{parked}");
    assert!(
        parked["statusTexts"]
            .as_array()
            .is_some_and(|t| t.len() == 1 && !text(&t[0]).is_empty()),
        "a question: {parked}"
    );
    let approval = &parked["statusData"][0];
    assert!(!text(&approval["approval_id"]).is_empty(), "{parked}");
    assert_eq!(approval["tool_name"], "generate_inspection_report", "{parked}");
    assert_eq!(
        approval["parameters"]["inspection_id"], "INS-2024-001",
        "{parked}"
    );
    assert!(!text(&approval["risk_level"]).is_empty(), "{parked}");
    assert!(!text(&approval["description"]).is_empty(), "{parked}");
    approval.clone()
}

/// A stream as the contract orders it: the Task first (a new task's stream must
/// start with it; the SDK's own server continues a task with updates alone),
/// then updates of that task only, the artifact in chunks, and the stream closed
/// right after `last_state`. The events' artifact text, joined.
fn assert_stream_shape(events: &[Value], closed: &Value, last_state: &str, new_task: bool) -> String {
    assert_eq!(closed, &json!(true), "the node closed the stream: {events:?}");
    let first = events.first().expect("at least one event");
    if new_task {
        assert_eq!(first["kind"], "task", "the first event is the Task: {events:?}");
    }
    let task_id = if first["kind"] == "task" {
        text(&first["id"])
    } else {
        text(&first["taskId"])
    };
    for event in &events[1..] {
        assert_eq!(event["taskId"], task_id, "updates of this task only: {event}");
        assert_ne!(event["kind"], "task", "one Task event, the first: {events:?}");
    }
    let last = events.last().expect("events");
    assert_eq!(last["kind"], "status", "{events:?}");
    assert_eq!(last["state"], last_state, "{events:?}");
    let final_states = [
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
    ];
    for event in &events[..events.len() - 1] {
        assert!(
            event["kind"] != "status" || !final_states.contains(&text(&event["state"])),
            "nothing after a terminal or input-required status: {events:?}"
        );
    }
    let chunks: Vec<&Value> = events.iter().filter(|e| e["kind"] == "artifact").collect();
    let mut joined = String::new();
    for (index, chunk) in chunks.iter().enumerate() {
        assert_eq!(
            chunk["artifactId"], chunks[0]["artifactId"],
            "one artifact: {chunk}"
        );
        assert_eq!(
            chunk["append"],
            index > 0,
            "append after the first chunk: {chunk}"
        );
        assert_eq!(
            chunk["lastChunk"],
            index + 1 == chunks.len(),
            "lastChunk on the last: {chunk}"
        );
        joined.push_str(text(&chunk["text"]));
    }
    joined
}

// ---------------------------------------------------------------- the SDK's client

#[test]
fn the_sdk_resolves_the_card_and_talks_to_its_interface() {
    let node = node();
    let observed = sdk(&node, "card", &[]);
    let card = &observed["card"];
    for field in ["name", "description", "version"] {
        assert!(!text(&card[field]).is_empty(), "{field}: {card}");
    }
    assert_eq!(
        card["supportedInterfaces"],
        json!([
            {"url": node.url(A2A_PATH), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": node.url("/a2a/rest"), "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ]),
        "{card}"
    );
    assert_eq!(card["capabilities"]["streaming"], true, "{card}");
    let modes = json!(["text/plain", "application/json"]);
    assert_eq!(card["defaultInputModes"], modes, "{card}");
    assert_eq!(card["defaultOutputModes"], modes, "{card}");
    let skills = card["skills"].as_array().expect("skills");
    for skill in skills {
        for field in ["id", "name", "description"] {
            assert!(!text(&skill[field]).is_empty(), "{field}: {skill}");
        }
        assert!(
            skill["tags"].as_array().is_some_and(|tags| !tags.is_empty()),
            "non-empty tags: {skill}"
        );
    }
    for tool in TOOLS {
        assert!(
            skills.iter().any(|s| text(&s["id"]).contains(tool)),
            "a skill for {tool}: {card}"
        );
    }
    assert!(skills.len() > TOOLS.len(), "the assistant is a skill too: {card}");
    // The SDK reads a legacy top-level `url` as a 0.3 interface: the 1.0 card has none.
    let raw = get(&node.url("/.well-known/agent-card.json"));
    assert_eq!(raw.status, 200);
    assert!(raw.json().get("url").is_none(), "{}", raw.body);
    // The client the SDK built from the card reaches the node at its interface.
    assert_answered(&observed["hello"]);
}

#[test]
fn send_returns_the_completed_task_with_the_answer() {
    let node = node();
    let task = &sdk(&node, "send", &["hello from the sdk"])["task"];
    let answer = assert_answered(task);
    assert!(
        answer.starts_with("You said \u{201c}hello from the sdk\u{201d}"),
        "{answer}"
    );
    assert!(
        !text(&task["id"]).is_empty() && !text(&task["contextId"]).is_empty(),
        "{task}"
    );
    assert!(text(&task["timestamp"]).ends_with('Z'), "RFC 3339 with Z: {task}");
    // The call is counted as A2A's, not as a person's in the HAI chat.
    let metrics = support::get(&node.url("/metrics")).body;
    let a2a_calls = metrics.lines().find(|line| {
        line.starts_with("agora_plugin_calls_total{transport=\"a2a\",") && line.contains("outcome=\"ok\"")
    });
    assert!(a2a_calls.is_some(), "{metrics}");
    assert!(
        !metrics.contains("agora_plugin_calls_total{transport=\"hai\""),
        "{metrics}"
    );
}

#[test]
fn a_stream_starts_with_the_task_chunks_the_answer_and_closes_after_completion() {
    let node = node();
    let observed = sdk(&node, "stream", &["search food storage"]);
    let events = observed["events"].as_array().expect("events");
    assert_eq!(events[0]["state"], "TASK_STATE_SUBMITTED", "{observed}");
    let streamed = assert_stream_shape(events, &observed["closed"], "TASK_STATE_COMPLETED", true);
    assert!(
        events.iter().filter(|e| e["kind"] == "artifact").count() > 1,
        "the plugin's chunks arrive as several artifact updates: {observed}"
    );
    let answer = assert_answered(&observed["final"]);
    assert_eq!(streamed, answer, "the chunks make up the stored answer");
    assert!(answer.contains("regulations"), "{answer}");
}

#[test]
fn get_task_returns_what_send_returned() {
    let node = node();
    let observed = sdk(&node, "get", &[]);
    let (sent, got) = (&observed["sent"], &observed["got"]);
    assert_answered(got);
    for field in ["id", "contextId", "state", "answer", "artifacts"] {
        assert_eq!(sent[field], got[field], "{field}: {observed}");
    }
}

#[test]
fn list_tasks_filters_by_context_and_pages_with_a_token() {
    let node = node();
    let observed = sdk(&node, "list", &[]);
    let context = &observed["context"];
    let sent: BTreeSet<&str> = observed["sent"].as_array().unwrap().iter().map(text).collect();
    assert_eq!(sent.len(), 3, "{observed}");
    let ids = |page: &Value| -> BTreeSet<String> {
        page["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| text(id).to_string())
            .collect()
    };
    let all = &observed["all"];
    assert_eq!(
        ids(all),
        sent.iter().map(|s| s.to_string()).collect(),
        "{observed}"
    );
    assert_eq!(all["contextIds"], json!([context]), "{observed}");
    assert_eq!(all["nextPageToken"], "", "{observed}");
    assert_eq!(all["totalSize"], 3, "{observed}");
    let (page1, page2) = (&observed["page1"], &observed["page2"]);
    assert_eq!(ids(page1).len(), 2, "{observed}");
    assert_eq!(page1["pageSize"], 2, "{observed}");
    assert_eq!(page1["totalSize"], 3, "{observed}");
    assert!(!text(&page1["nextPageToken"]).is_empty(), "{observed}");
    assert_eq!(ids(page2).len(), 1, "{observed}");
    assert_eq!(page2["nextPageToken"], "", "the last page says so: {observed}");
    let paged: BTreeSet<String> = ids(page1).union(&ids(page2)).cloned().collect();
    assert_eq!(paged, ids(all), "the pages cover the context once: {observed}");
    assert_ne!(observed["other"]["contextId"], *context, "{observed}");
    assert!(!paged.contains(text(&observed["other"]["id"])), "{observed}");
    // On the wire, not only as the SDK's default value.
    assert!(
        observed["raw_keys"]
            .as_array()
            .unwrap()
            .contains(&json!("nextPageToken")),
        "{observed}"
    );
    assert_eq!(observed["raw_next_page_token"], "", "{observed}");
}

#[test]
fn cancel_stops_a_waiting_task_and_a_second_cancel_is_refused() {
    let node = node();
    let observed = sdk(&node, "cancel", &[]);
    assert_parked_on_report(&observed["parked"]);
    assert_eq!(observed["canceled"]["state"], "TASK_STATE_CANCELED", "{observed}");
    assert_sdk_error(
        &observed["again"],
        "TaskNotCancelableError",
        -32002,
        "cancel again",
    );
    assert_eq!(observed["after"]["state"], "TASK_STATE_CANCELED", "{observed}");
    assert!(
        !text(&observed["after"]["answer"]).contains("RPT-"),
        "the tool never ran: {observed}"
    );
}

#[test]
fn an_approved_report_runs_the_tool() {
    let node = node();
    let observed = sdk(&node, "approve", &[]);
    assert_parked_on_report(&observed["parked"]);
    let answer = assert_answered(&observed["reply"]);
    assert!(answer.contains("RPT-2024-001-"), "the tool ran: {answer}");
    assert_eq!(observed["final"]["answer"], answer, "{observed}");
}

#[test]
fn an_approved_report_over_streams_parks_then_completes() {
    let node = node();
    let observed = sdk(&node, "approve", &["--stream"]);
    let park = observed["parkEvents"].as_array().expect("events");
    assert_stream_shape(park, &observed["parkClosed"], "TASK_STATE_INPUT_REQUIRED", true);
    assert_parked_on_report(&observed["parked"]);
    let events = observed["events"].as_array().expect("events");
    let streamed = assert_stream_shape(events, &observed["closed"], "TASK_STATE_COMPLETED", false);
    let continued = if events[0]["kind"] == "task" {
        &events[0]["id"]
    } else {
        &events[0]["taskId"]
    };
    assert_eq!(
        continued, &observed["parked"]["id"],
        "the same task goes on: {observed}"
    );
    let answer = assert_answered(&observed["final"]);
    assert!(answer.contains("RPT-2024-001-"), "the tool ran: {answer}");
    assert_eq!(
        streamed, answer,
        "the continuation streamed the answer: {observed}"
    );
}

#[test]
fn a_rejected_report_quotes_the_feedback_and_does_not_run_the_tool() {
    let node = node();
    let feedback = "Not yet: the inspector has to sign the checklist first.";
    let observed = sdk(&node, "reject", &[feedback]);
    assert_parked_on_report(&observed["parked"]);
    let reply = &observed["reply"];
    let state = text(&reply["state"]);
    assert!(
        state == "TASK_STATE_COMPLETED" || state == "TASK_STATE_REJECTED",
        "a rejection is not a failure: {reply}"
    );
    let answer = text(&reply["answer"]);
    assert!(
        answer.contains(&format!("\u{201c}{feedback}\u{201d}")),
        "verbatim: {answer}"
    );
    assert!(!answer.contains("RPT-"), "the tool did not run: {answer}");
}

#[test]
fn a_context_keeps_its_history_and_another_does_not_see_it() {
    let node = node();
    let observed = sdk(&node, "history", &[]);
    let (first, second, fresh) = (&observed["first"], &observed["second"], &observed["fresh"]);
    assert_eq!(first["contextId"], second["contextId"], "{observed}");
    assert_ne!(first["id"], second["id"], "a second task: {observed}");
    let recalled = assert_answered(second);
    assert!(
        recalled.contains("\u{201c}My favourite colour is teal.\u{201d}"),
        "{recalled}"
    );
    assert_ne!(fresh["contextId"], first["contextId"], "{observed}");
    // As in HAI, the question itself is the first message of a new context.
    let alone = assert_answered(fresh);
    assert!(
        alone.contains("\u{201c}what did I say first?\u{201d}") && !alone.contains("teal"),
        "{observed}"
    );
}

#[test]
fn the_sdk_raises_the_a2a_error_of_each_refusal() {
    let node = node();
    let observed = sdk(&node, "errors", &[]);
    assert_sdk_error(&observed["unknown_get"], "TaskNotFoundError", -32001, "GetTask");
    assert_sdk_error(
        &observed["unknown_cancel"],
        "TaskNotFoundError",
        -32001,
        "CancelTask",
    );
    assert_sdk_error(
        &observed["unknown_continue"],
        "TaskNotFoundError",
        -32001,
        "continue",
    );
    assert_sdk_error(
        &observed["wrong_approval"],
        "InvalidParamsError",
        -32602,
        "wrong approval id",
    );
    assert_sdk_error(
        &observed["missing_approved"],
        "InvalidParamsError",
        -32602,
        "no `approved`",
    );
    // Nothing but the right answer releases the approval.
    assert_eq!(
        observed["still"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{observed}"
    );
    assert_sdk_error(
        &observed["version_99.0"],
        "VersionNotSupportedError",
        -32009,
        "99.0",
    );
    assert_sdk_error(
        &observed["version_0.3"],
        "VersionNotSupportedError",
        -32009,
        "0.3",
    );
    assert_eq!(
        observed["version_1.0"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{observed}"
    );
}

// ---------------------------------------------------------------- raw sockets

/// POST `body` to the A2A endpoint; the JSON-RPC answer, checked for the envelope
/// every answer has: HTTP 200, JSON, `jsonrpc: "2.0"`, exactly one of result/error.
fn rpc_raw(node: &TestNode, version: Option<&str>, body: &[u8]) -> Value {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(version) = version {
        headers.push(("A2A-Version", version));
    }
    let reply = post_with_headers(&node.url(A2A_PATH), &headers, body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.content_type.starts_with("application/json"),
        "{}",
        reply.content_type
    );
    let answer = reply.json();
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert!(
        answer.get("result").is_some() != answer.get("error").is_some(),
        "exactly one of result and error: {answer}"
    );
    answer
}

/// A request with id `id`, answered with that id echoed.
fn rpc(node: &TestNode, version: Option<&str>, id: Value, method: &str, params: Value) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let answer = rpc_raw(node, version, request.to_string().as_bytes());
    assert_eq!(answer["id"], id, "the id is echoed: {answer}");
    answer
}

fn code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error answer: {answer}"))
}

fn message_params(parts: Value) -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": parts}})
}

/// SendMessage of `text` with `A2A-Version: 1.0`: the task it answers with.
fn send_raw(node: &TestNode, text: &str, context: Option<&str>) -> Value {
    let mut params = message_params(json!([{"text": text}]));
    if let Some(context) = context {
        params["message"]["contextId"] = json!(context);
    }
    let answer = rpc(node, Some("1.0"), json!("send"), "SendMessage", params);
    answer["result"]["task"].clone()
}

fn assert_completed(task: &Value) {
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
}

#[test]
fn malformed_json_rpc_gets_its_error_and_the_node_keeps_serving() {
    let node = builder().env("AGORA_A2A__MAX_PARTS_PER_MESSAGE", "4").start();

    let parse = rpc_raw(&node, Some("1.0"), br#"{"jsonrpc":"2.0","id":1,"method":"#);
    assert_eq!(code(&parse), -32700, "{parse}");
    assert_eq!(parse["id"], Value::Null, "{parse}");

    let batch = json!([{"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "x"}}]);
    assert_eq!(
        code(&rpc_raw(&node, Some("1.0"), batch.to_string().as_bytes())),
        -32600
    );
    let old = json!({"jsonrpc": "1.0", "id": 3, "method": "GetTask", "params": {"id": "x"}});
    assert_eq!(
        code(&rpc_raw(&node, Some("1.0"), old.to_string().as_bytes())),
        -32600
    );

    for id in [json!("abc-7"), json!(42)] {
        let unknown = rpc(&node, Some("1.0"), id, "NoSuchMethod", json!({}));
        assert_eq!(code(&unknown), -32601, "{unknown}");
    }
    // As the SDK's dispatcher: params that are neither object nor array are an invalid request.
    let scalar = rpc(&node, Some("1.0"), json!(8), "GetTask", json!(7));
    assert_eq!(code(&scalar), -32600, "{scalar}");
    // A push config names its task, as the SDK's server requires (tests/e2e/a2a_push.rs has the rest).
    let push = rpc(
        &node,
        Some("1.0"),
        json!(9),
        "CreateTaskPushNotificationConfig",
        json!({}),
    );
    assert_eq!(code(&push), -32602, "{push}");

    let bad_parts = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": "not a list"}});
    for (method, params) in [("SendMessage", bad_parts), ("GetTask", json!({"id": 5}))] {
        let answer = rpc(&node, Some("1.0"), json!(5), method, params);
        assert_eq!(code(&answer), -32602, "{method}: {answer}");
    }

    let parts = |n: usize| {
        json!(
            (0..n)
                .map(|i| json!({"text": format!("part {i}")}))
                .collect::<Vec<_>>()
        )
    };
    let over = rpc(
        &node,
        Some("1.0"),
        json!(6),
        "SendMessage",
        message_params(parts(5)),
    );
    assert_eq!(
        code(&over),
        -32602,
        "more parts than a2a.max_parts_per_message: {over}"
    );
    let at = rpc(
        &node,
        Some("1.0"),
        json!(7),
        "SendMessage",
        message_params(parts(4)),
    );
    assert_completed(&at["result"]["task"]);

    // No header is served as 1.0; another major is refused.
    let params = message_params(json!([{"text": "no version header"}]));
    let task = rpc(&node, None, json!(8), "SendMessage", params)["result"]["task"].clone();
    assert_completed(&task);
    let get_task = json!({"id": task["id"]});
    for version in ["99.0", "0.3"] {
        let answer = rpc(&node, Some(version), json!(9), "GetTask", get_task.clone());
        assert_eq!(code(&answer), -32009, "A2A-Version {version}: {answer}");
    }
    for version in ["1.0", "1.1"] {
        let answer = rpc(&node, Some(version), json!(10), "GetTask", get_task.clone());
        assert_eq!(
            answer["result"]["id"], task["id"],
            "A2A-Version {version}: {answer}"
        );
    }

    assert_eq!(get(&node.url("/health")).status, 200);
    assert_completed(&send_raw(&node, "still there?", None));
}

#[test]
fn an_oversized_body_gets_413_while_the_client_still_sends() {
    let limit = 64 << 10;
    let node = builder()
        .env("AGORA_A2A__MAX_BODY_BYTES", limit.to_string())
        .start();
    // Over a2a.max_body_bytes, under the node-wide http.max_body_bytes: A2A's own bound.
    let huge = vec![b' '; 4 * limit];
    for round in 0..20 {
        // ureq writes the whole body before it reads the answer.
        let reply = post(&node.url(A2A_PATH), "application/json", &huge);
        assert_eq!(reply.status, 413, "round {round}: {}", reply.body);
        let answer = reply.json();
        assert_eq!(answer["error"]["code"], -32600, "a JSON-RPC error body: {answer}");
        assert_eq!(answer["id"], Value::Null, "{answer}");
    }
    let mut stream = open_port::connect(node.port);
    let reply = open_port::post_chunked(&mut stream, A2A_PATH, 4 * limit).expect("a chunked 413");
    assert_eq!(reply.status, 413, "chunked: {}", reply.body);

    // Just under the bound is an ordinary request.
    let request =
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}).to_string();
    let mut padded = request.into_bytes();
    padded.resize(limit - 16, b' ');
    assert_eq!(code(&rpc_raw(&node, Some("1.0"), &padded)), -32001);
    assert_completed(&send_raw(&node, "after the big ones", None));
}

/// A plugin tells an A2A client from HAI's person by `caller-transport`
/// (its message's `transport` is `hai` for both: the WIT enum has no `a2a`).
#[test]
fn the_plugin_sees_an_a2a_caller_as_a2a() {
    let node = node();
    let task = send_raw(&node, "which protocol do I reach you over?", None);
    assert_completed(&task);
    let answer = text(&task["artifacts"][0]["parts"][0]["text"]);
    assert_eq!(answer, "You reach me over A2A.", "{task}");
}

/// A task's run outlives the request that started it, so the node owns it:
/// shutdown stops a run still waiting on its approval with the node's other
/// tasks, within the grace period, instead of leaving it to the process's exit.
#[test]
fn shutdown_stops_a_task_run_still_waiting() {
    let node = builder()
        .env("RUST_LOG", "info,agora_node::background=debug")
        .start();
    let parked = send_raw(&node, "generate the report for INS-2024-001", None);
    assert_eq!(parked["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{parked}");
    node.signal_stop();
    node.wait_for_log("background tasks stopped");
    let log = node.log_text();
    assert!(
        log.lines()
            .any(|line| line.contains("background task stopped") && line.contains("a2a.task_run")),
        "{log}"
    );
    assert!(!log.contains("background tasks still running"), "{log}");
    assert!(node.stop().success());
}

#[test]
fn tasks_persist_across_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let node = builder().data_dir(data.path()).start();
    let first = send_raw(&node, "remember me", None);
    assert_completed(&first);
    let context = text(&first["contextId"]).to_string();
    let second = send_raw(&node, "what did I say first?", Some(&context));
    let parked = send_raw(&node, "generate the report for INS-2024-001", None);
    assert_eq!(parked["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{parked}");
    node.stop();

    let node = TestNode::builder().data_dir(data.path()).start();
    for task in [&first, &second] {
        let got = rpc(
            &node,
            Some("1.0"),
            json!("get"),
            "GetTask",
            json!({"id": task["id"]}),
        );
        let got = &got["result"];
        assert_eq!(got["status"]["state"], task["status"]["state"], "{got}");
        assert_eq!(got["contextId"], task["contextId"], "{got}");
        assert_eq!(got["artifacts"], task["artifacts"], "{got}");
    }
    let listed = rpc(
        &node,
        Some("1.0"),
        json!("list"),
        "ListTasks",
        json!({"contextId": context}),
    );
    assert_eq!(
        listed["result"]["tasks"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    // A task that waited when the node stopped reads as failed, and stays so.
    let was_parked = rpc(
        &node,
        Some("1.0"),
        json!("get"),
        "GetTask",
        json!({"id": parked["id"]}),
    );
    assert_eq!(
        was_parked["result"]["status"]["state"], "TASK_STATE_FAILED",
        "{was_parked}"
    );
    let cancel = rpc(
        &node,
        Some("1.0"),
        json!("cancel"),
        "CancelTask",
        json!({"id": parked["id"]}),
    );
    assert_eq!(code(&cancel), -32002, "{cancel}");
    // The context's history came back too: it still answers with the first message.
    let third = send_raw(&node, "what did I say first?", Some(&context));
    assert!(third["artifacts"].to_string().contains("remember me"), "{third}");
}

/// The card's skill ids.
fn skill_ids(node: &TestNode) -> Vec<String> {
    let card = get(&node.url("/.well-known/agent-card.json")).json();
    card["skills"]
        .as_array()
        .map(|skills| {
            skills
                .iter()
                .map(|s| s["id"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn has_tool_skill(node: &TestNode, tool: &str) -> bool {
    skill_ids(node).iter().any(|id| id.contains(tool))
}

#[test]
fn the_card_follows_plugin_reloads() {
    let node = node();
    for tool in TOOLS {
        assert!(has_tool_skill(&node, tool), "{:?}", skill_ids(&node));
    }
    std::fs::remove_file(node.plugins_dir.join("inspection-tools.wasm")).unwrap();
    node.wait_for_health("inspection-tools to be withdrawn", |h| {
        !support::has_plugin(h, "inspection-tools")
    });
    node.wait_until(
        "the tools to leave the card",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || TOOLS.iter().all(|tool| !has_tool_skill(&node, tool)),
    );
    assert!(!skill_ids(&node).is_empty(), "the assistant stays a skill");

    support::install_plugin(&node.plugins_dir, "inspection-tools");
    node.wait_until(
        "the tools to come back",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || TOOLS.iter().all(|tool| has_tool_skill(&node, tool)),
    );
}

#[test]
fn beyond_the_running_task_cap_send_is_refused_and_the_node_keeps_serving() {
    let node = builder()
        .env("AGORA_A2A__MAX_RUNNING_TASKS_PER_IP", "1")
        .env("AGORA_HTTP__ADMISSION_WAIT_MS", "200")
        .start();
    // A task waiting for its approval is running: it holds the one slot.
    let parked = send_raw(&node, "generate the report for INS-2024-001", None);
    assert_eq!(parked["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{parked}");
    let params = message_params(json!([{"text": "one more"}]));
    let refused = rpc(&node, Some("1.0"), json!("busy"), "SendMessage", params);
    assert_eq!(code(&refused), -32603, "{refused}");
    assert_eq!(
        refused["error"]["data"][0]["reason"], "RESOURCE_EXHAUSTED",
        "{refused}"
    );
    // Reads are not tasks; and once the slot is free, a new task runs.
    let got = rpc(
        &node,
        Some("1.0"),
        json!("get"),
        "GetTask",
        json!({"id": parked["id"]}),
    );
    assert_eq!(got["result"]["id"], parked["id"], "{got}");
    let canceled = rpc(
        &node,
        Some("1.0"),
        json!("cancel"),
        "CancelTask",
        json!({"id": parked["id"]}),
    );
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    assert_completed(&send_raw(&node, "one more", None));
}

/// ProtoJSON of the 1.0 proto, wherever it occurs in `value`: a Part is exactly
/// one of text/data/url/raw (no `kind`), enums are names, timestamps RFC 3339 with Z.
fn assert_proto_json(value: &Value) {
    match value {
        Value::Object(object) => {
            for (key, inner) in object {
                match key.as_str() {
                    "parts" => {
                        for part in inner.as_array().expect("parts is a list") {
                            let content = ["text", "data", "url", "raw"]
                                .iter()
                                .filter(|key| part.get(**key).is_some())
                                .count();
                            assert_eq!(content, 1, "a part is exactly one kind: {part}");
                            assert!(part.get("kind").is_none(), "no `kind` member: {part}");
                        }
                    }
                    "state" => assert!(text(inner).starts_with("TASK_STATE_"), "{value}"),
                    "role" => assert!(text(inner).starts_with("ROLE_"), "{value}"),
                    "timestamp" => assert!(text(inner).ends_with('Z'), "{value}"),
                    _ => {}
                }
                assert_proto_json(inner);
            }
        }
        Value::Array(items) => items.iter().for_each(assert_proto_json),
        _ => {}
    }
}

#[test]
fn a_raw_stream_is_sse_of_json_rpc_responses_each_with_the_request_id() {
    let node = node();
    let request = json!({
        "jsonrpc": "2.0",
        "id": "stream-7",
        "method": "SendStreamingMessage",
        "params": message_params(json!([{"text": "search hand washing"}])),
    });
    let headers = [("content-type", "application/json"), ("A2A-Version", "1.0")];
    // Read to the end: the node closes the stream after the task completes.
    let reply = post_with_headers(&node.url(A2A_PATH), &headers, request.to_string().as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.content_type.starts_with("text/event-stream"),
        "{}",
        reply.content_type
    );
    let events: Vec<Value> = reply
        .body
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let data: Vec<&str> = block
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .collect();
            serde_json::from_str(data.join("\n").trim())
                .unwrap_or_else(|e| panic!("an event's data is JSON ({e}): {block:?}"))
        })
        .collect();
    for event in &events {
        assert_eq!(event["jsonrpc"], "2.0", "{event}");
        assert_eq!(
            event["id"], "stream-7",
            "every event answers the request: {event}"
        );
        assert!(
            event.get("result").is_some() && event.get("error").is_none(),
            "{event}"
        );
        assert_proto_json(&event["result"]);
    }
    let results: Vec<&Value> = events.iter().map(|event| &event["result"]).collect();
    let task_id = &results[0]["task"]["id"];
    assert!(task_id.is_string(), "the Task first: {}", results[0]);
    assert!(
        results[1..].iter().any(|r| r.get("artifactUpdate").is_some()),
        "{}",
        reply.body
    );
    let last = results.last().expect("events");
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{last}"
    );
    assert_eq!(last["statusUpdate"]["taskId"], *task_id, "{last}");
    // The stored task is ProtoJSON as well.
    let got = rpc(&node, Some("1.0"), json!(1), "GetTask", json!({"id": task_id}));
    assert_proto_json(&got["result"]);
}

#[test]
fn a_rejected_report_over_streams_completes_with_the_feedback() {
    let node = node();
    let feedback = "Wrong inspection; use INS-2024-002 next time.";
    let observed = sdk(&node, "reject", &[feedback, "--stream"]);
    assert_parked_on_report(&observed["parked"]);
    let events = observed["events"].as_array().expect("events");
    let last = events.last().expect("events");
    let state = text(&last["state"]);
    assert!(
        state == "TASK_STATE_COMPLETED" || state == "TASK_STATE_REJECTED",
        "a rejection is not a failure: {observed}"
    );
    let streamed = assert_stream_shape(events, &observed["closed"], state, false);
    assert!(
        streamed.contains(&format!("\u{201c}{feedback}\u{201d}")),
        "verbatim: {streamed}"
    );
    assert_eq!(observed["final"]["answer"], streamed, "{observed}");
}

#[test]
fn a_context_holds_at_most_its_task_cap_and_a_new_context_is_served() {
    let node = builder().env("AGORA_A2A__MAX_TASKS_PER_CONTEXT", "2").start();
    let first = send_raw(&node, "one", None);
    assert_completed(&first);
    let context = text(&first["contextId"]).to_string();
    assert_completed(&send_raw(&node, "two", Some(&context)));
    let mut params = message_params(json!([{"text": "three"}]));
    params["message"]["contextId"] = json!(context);
    let refused = rpc(&node, Some("1.0"), json!("full"), "SendMessage", params);
    assert_eq!(code(&refused), -32603, "{refused}");
    assert_eq!(
        refused["error"]["data"][0]["reason"], "RESOURCE_EXHAUSTED",
        "{refused}"
    );
    // The refused message left no task behind; other contexts go on.
    let listed = rpc(
        &node,
        Some("1.0"),
        json!("list"),
        "ListTasks",
        json!({"contextId": context}),
    );
    assert_eq!(listed["result"]["totalSize"], 2, "{listed}");
    assert_completed(&send_raw(&node, "elsewhere", None));
}

#[test]
fn new_tasks_beyond_the_per_minute_rate_are_refused_while_reads_are_served() {
    let node = builder()
        .env("AGORA_A2A__NEW_TASKS_PER_IP_PER_MINUTE", "2")
        .start();
    let first = send_raw(&node, "one", None);
    assert_completed(&first);
    assert_completed(&send_raw(&node, "two", None));
    let params = message_params(json!([{"text": "three"}]));
    let refused = rpc(&node, Some("1.0"), json!("rate"), "SendMessage", params);
    assert_eq!(code(&refused), -32603, "{refused}");
    assert_eq!(
        refused["error"]["data"][0]["reason"], "RESOURCE_EXHAUSTED",
        "{refused}"
    );
    let got = rpc(
        &node,
        Some("1.0"),
        json!("get"),
        "GetTask",
        json!({"id": first["id"]}),
    );
    assert_eq!(got["result"]["id"], first["id"], "{got}");
}

/// a2a-sdk 1.3.0's own server refuses a message to a task in a terminal state with
/// UnsupportedOperationError (`server/agent_execution/active_task.py:608-611`),
/// which its client raises as `UnsupportedOperationError` (-32004).
#[test]
fn continuing_a_finished_task_is_an_unsupported_operation_as_in_the_sdk() {
    let node = node();
    let done = send_raw(&node, "hello", None);
    assert_completed(&done);
    for method in ["SendMessage", "SendStreamingMessage"] {
        let mut params = message_params(json!([{"text": "and one more thing"}]));
        params["message"]["taskId"] = done["id"].clone();
        let answer = rpc(&node, Some("1.0"), json!(method), method, params);
        assert_eq!(code(&answer), -32004, "{method}: {answer}");
    }
}
