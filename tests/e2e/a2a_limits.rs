//! What one A2A client can make the node store and send back (issue 37,
//! findings 3 and 4, and the fan-out break), over real sockets against a real node:
//!
//! - a message nested deeper than a stored task can be read back is refused at
//!   the door (`-32602` naming the limit) and leaves its context readable; one
//!   just within the limit is stored and read back whole;
//! - `ListTasks` answers in pages bounded by `a2a.max_list_bytes` as well as by
//!   `pageSize`, and following `nextPageToken` yields every task exactly once;
//! - a client past its running-task bound is held briefly for a place (an
//!   orchestrator's fan-out), then refused as busy naming the bound.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::support::{HttpReply, NodeBuilder, TestNode, post_with_headers};

/// The default `a2a.path`.
const A2A_PATH: &str = "/a2a";
/// serde_json (with which the store reads every record back) stops at 128 levels.
const STORE_READ_DEPTH: usize = 127;
/// A stored task wraps a data part's value in six levels (record, task, history,
/// message, parts, part); a request in five (envelope, params, message, parts, part).
const DEEPEST_DATA: usize = STORE_READ_DEPTH - 6;
/// The limit the refusal must name: the deepest request whose data fits a stored task.
const DEEPEST_REQUEST: usize = DEEPEST_DATA + 5;

fn builder() -> NodeBuilder {
    TestNode::builder().plugin("hai-assistant")
}

/// POST one JSON-RPC body to the A2A endpoint; the whole HTTP reply (always 200 and JSON).
fn post_rpc(node: &TestNode, body: &[u8]) -> HttpReply {
    let headers = [("content-type", "application/json"), ("A2A-Version", "1.0")];
    let reply = post_with_headers(&node.url(A2A_PATH), &headers, body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.content_type.starts_with("application/json"),
        "{}: {}",
        reply.content_type,
        reply.body
    );
    reply
}

fn call(node: &TestNode, method: &str, params: Value) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": method, "method": method, "params": params});
    let answer = post_rpc(node, request.to_string().as_bytes()).json();
    assert_eq!(answer["id"], method, "the id is echoed: {answer}");
    answer
}

fn result(answer: &Value) -> &Value {
    answer
        .get("result")
        .unwrap_or_else(|| panic!("a result: {answer}"))
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_else(|| panic!("not a string: {value}"))
}

/// A user message: one text part, then `data` as a data part when given.
fn message(text: &str, data: Option<Value>, context: Option<&str>) -> Value {
    let mut parts = vec![json!({"text": text})];
    parts.extend(data.map(|data| json!({"data": data})));
    let mut message =
        json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": parts});
    if let Some(context) = context {
        message["contextId"] = json!(context);
    }
    json!({ "message": message })
}

/// SendMessage: the task it answered with, completed.
fn send(node: &TestNode, params: Value) -> Value {
    let answer = call(node, "SendMessage", params);
    let task = result(&answer)["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    task
}

/// A JSON value nesting `levels` objects deep (`{}` is one level).
fn nested(levels: usize) -> Value {
    (1..levels).fold(json!({}), |inner, _| json!({ "n": inner }))
}

/// A context's task ids through ListTasks (without history, so the reply stays
/// readable whatever the tasks hold): the read that failed for the whole context.
fn listed_ids(node: &TestNode, context: &str) -> BTreeSet<String> {
    let answer = call(
        node,
        "ListTasks",
        json!({"contextId": context, "historyLength": 0}),
    );
    let listed = result(&answer);
    let ids: BTreeSet<String> = listed["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("tasks: {listed}"))
        .iter()
        .map(|task| text(&task["id"]).to_string())
        .collect();
    assert_eq!(listed["totalSize"], ids.len(), "{listed}");
    ids
}

#[test]
fn a_message_nested_deeper_than_the_store_reads_back_is_refused_and_its_context_stays_readable() {
    let node = builder().start();
    let first = send(&node, message("before the deep ones", None, None));
    let context = text(&first["contextId"]).to_string();

    // One level past the deepest readable (the review's 122), and well past serde_json's own stop.
    for (method, levels) in [
        ("SendMessage", DEEPEST_DATA + 1),
        ("SendMessage", 130),
        ("SendStreamingMessage", DEEPEST_DATA + 1),
        ("SendStreamingMessage", 130),
    ] {
        let params = message("deep", Some(nested(levels)), Some(&context));
        let refused = call(&node, method, params);
        let error = &refused["error"];
        assert_eq!(error["code"], -32602, "{method} at {levels} levels: {refused}");
        assert_eq!(error["data"][0]["reason"], "INVALID_PARAMS", "{refused}");
        assert!(
            text(&error["message"]).contains(&DEEPEST_REQUEST.to_string()),
            "the refusal names the limit: {refused}"
        );
    }

    // Nothing was stored, and the context reads as before.
    let got = call(&node, "GetTask", json!({"id": first["id"]}));
    assert_eq!(result(&got)["id"], first["id"], "{got}");
    let expected: BTreeSet<String> = [text(&first["id"]).to_string()].into();
    assert_eq!(listed_ids(&node, &context), expected);

    // The deepest data that fits is stored and read back whole (GetTask's answer
    // wraps it as deep as the store does; SendMessage's, one level more, is asked
    // without history so this test's own JSON reader can read it).
    let deepest = nested(DEEPEST_DATA);
    let mut params = message("just within", Some(deepest.clone()), Some(&context));
    params["configuration"] = json!({"historyLength": 0});
    let kept = send(&node, params);
    let got = call(&node, "GetTask", json!({"id": kept["id"]}));
    let history = result(&got)["history"]
        .as_array()
        .unwrap_or_else(|| panic!("history: {got}"));
    assert_eq!(history[0]["parts"][1]["data"], deepest, "read back whole");
    let expected: BTreeSet<String> = [&first, &kept]
        .iter()
        .map(|task| text(&task["id"]).to_string())
        .collect();
    assert_eq!(listed_ids(&node, &context), expected);
}

#[test]
fn list_tasks_pages_by_bytes_and_the_pages_hold_every_task_once() {
    const BUDGET: usize = 256 * 1024;
    const TASKS: usize = 7;
    const TEXT_BYTES: usize = 100 * 1024;
    let node = builder()
        .env("AGORA_A2A__MAX_LIST_BYTES", BUDGET.to_string())
        .start();

    let mut context: Option<String> = None;
    let mut sent = BTreeSet::new();
    let mut largest_task = 0;
    for n in 0..TASKS {
        let big = format!("task {n} ").repeat(TEXT_BYTES / 7);
        let task = send(&node, message(&big, None, context.as_deref()));
        context.get_or_insert_with(|| text(&task["contextId"]).to_string());
        let id = text(&task["id"]).to_string();
        // GetTask answers the whole task (artifacts too): at least what a page holds of it.
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
        largest_task = largest_task.max(post_rpc(&node, request.to_string().as_bytes()).body.len());
        sent.insert(id);
    }
    let context = context.expect("a context");
    assert!(
        TASKS * TEXT_BYTES > BUDGET + largest_task,
        "the tasks do not fit one page"
    );

    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= TASKS + 1, "the pages never end: {seen:?}");
        let request = json!({"jsonrpc": "2.0", "id": pages, "method": "ListTasks",
            "params": {"contextId": context, "pageToken": token}});
        let reply = post_rpc(&node, request.to_string().as_bytes());
        assert!(
            reply.body.len() <= BUDGET + largest_task,
            "page {pages} is {} bytes; the budget is {BUDGET} and the largest task {largest_task}",
            reply.body.len()
        );
        let answer = reply.json();
        let page = result(&answer);
        assert_eq!(page["totalSize"], TASKS, "{}", page["totalSize"]);
        let tasks = page["tasks"].as_array().expect("tasks");
        assert!(!tasks.is_empty(), "every page moves the client on");
        seen.extend(tasks.iter().map(|task| text(&task["id"]).to_string()));
        token = text(&page["nextPageToken"]).to_string();
        if token.is_empty() {
            break;
        }
    }
    assert!(pages > 1, "the budget cut the list into pages");
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no task twice: {seen:?}");
    assert_eq!(unique, sent, "every task once");
}

/// The second honest-client break of issue 37: an agent fanning out past
/// `a2a.max_running_tasks_per_ip` is held (within `http.admission_wait_ms`) for a
/// place to free, instead of being refused at once; past the wait it is refused
/// as busy, naming the bound.
#[test]
fn a_fan_out_past_the_running_task_bound_waits_for_a_place_instead_of_failing() {
    let node = builder()
        .plugin("inspection-tools")
        .env("AGORA_A2A__MAX_RUNNING_TASKS_PER_IP", "1")
        // Longer than this test needs on a loaded machine, within the request timeout.
        .env("AGORA_HTTP__ADMISSION_WAIT_MS", "25000")
        .start();
    // A task waiting for its approval is running: it holds this client's one place.
    let parked = result(&call(
        &node,
        "SendMessage",
        message("generate the report for INS-2024-001", None, None),
    ))["task"]
        .clone();
    assert_eq!(parked["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{parked}");

    let (answered, answer) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let node = &node;
        scope.spawn(move || {
            let _ = answered.send(call(
                node,
                "SendMessage",
                message("the fan-out's second request", None, None),
            ));
        });
        // Before the place frees, the second request is held, not refused. (A
        // node that refuses at once answers within this; one that holds it cannot.)
        if let Ok(early) = answer.recv_timeout(std::time::Duration::from_secs(2)) {
            panic!("answered before a place was free: {early}");
        }
        let canceled = call(node, "CancelTask", json!({"id": parked["id"]}));
        assert_eq!(
            result(&canceled)["status"]["state"],
            "TASK_STATE_CANCELED",
            "{canceled}"
        );
        let second = answer
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the held request is answered");
        assert_eq!(
            result(&second)["task"]["status"]["state"],
            "TASK_STATE_COMPLETED",
            "{second}"
        );
    });
}

#[test]
fn past_the_admission_wait_a_request_is_refused_as_busy_naming_the_bound() {
    let node = builder()
        .plugin("inspection-tools")
        .env("AGORA_A2A__MAX_RUNNING_TASKS_PER_IP", "1")
        .env("AGORA_HTTP__ADMISSION_WAIT_MS", "200")
        .start();
    let parked = result(&call(
        &node,
        "SendMessage",
        message("generate the report for INS-2024-002", None, None),
    ))["task"]
        .clone();
    assert_eq!(parked["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{parked}");
    let refused = call(&node, "SendMessage", message("one too many", None, None));
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(
        refused["error"]["data"][0]["reason"], "RESOURCE_EXHAUSTED",
        "{refused}"
    );
    assert!(
        text(&refused["error"]["message"]).contains("a2a.max_running_tasks_per_ip"),
        "{refused}"
    );
}

/// A second client address to the node's per-address bounds: loopback, not 127.0.0.1.
fn address(last: u8) -> std::net::IpAddr {
    std::net::IpAddr::from([127, 0, 0, last])
}

/// SendMessage from `from` in a fresh context (no `contextId`): the whole JSON-RPC answer.
fn send_from(node: &TestNode, from: std::net::IpAddr, text: &str) -> Value {
    use crate::support::{RawRequest, raw_exchange};
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": message(text, None, None)})
    .to_string();
    let reply = raw_exchange(node, RawRequest::post_json(from, A2A_PATH, body.as_bytes()));
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

fn assert_stored(answer: &Value) {
    assert_eq!(
        result(answer)["task"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{answer}"
    );
}

/// Refused before anything is stored, as A2A refuses at its other bounds, naming `key`.
fn assert_refused_naming(answer: &Value, key: &str) {
    let error = &answer["error"];
    assert_eq!(error["code"], -32603, "{answer}");
    assert_eq!(error["data"][0]["reason"], "RESOURCE_EXHAUSTED", "{answer}");
    assert!(text(&error["message"]).contains(key), "names {key}: {answer}");
}

/// Issue 37, finding 5: a fresh context per request escaped the per-context cap,
/// so one address could store tasks without end. Its stored tasks are counted
/// per address, in the store, so the count holds across a restart.
#[test]
fn a_client_storing_tasks_in_fresh_contexts_is_refused_past_its_count_even_after_a_restart() {
    const MAX_TASKS: usize = 3;
    let data = tempfile::tempdir().unwrap();
    let start = || {
        builder()
            .data_dir(data.path())
            .env("AGORA_A2A__MAX_STORED_TASKS_PER_CLIENT", MAX_TASKS.to_string())
            .start()
    };
    let (greedy, other) = (address(2), address(3));
    let node = start();
    for n in 0..MAX_TASKS {
        assert_stored(&send_from(&node, greedy, &format!("task {n}")));
    }
    assert_refused_naming(
        &send_from(&node, greedy, "one too many"),
        "a2a.max_stored_tasks_per_client",
    );
    assert_stored(&send_from(&node, other, "another client is served"));
    node.stop();

    let node = start();
    assert_refused_naming(
        &send_from(&node, greedy, "still one too many"),
        "a2a.max_stored_tasks_per_client",
    );
    assert_stored(&send_from(&node, other, "and still served"));
}

/// Tasks sent by `from`, each about `text_bytes` long, until one is refused:
/// how many were stored first, and the refusal. Bounded by `max_sends`.
fn send_until_refused(
    node: &TestNode,
    from: std::net::IpAddr,
    text_bytes: usize,
    max_sends: usize,
) -> (usize, Value) {
    for stored in 0..max_sends {
        let answer = send_from(node, from, &format!("{stored} ").repeat(text_bytes / 2));
        if answer.get("error").is_some() {
            return (stored, answer);
        }
        assert_stored(&answer);
    }
    panic!("{max_sends} tasks of {text_bytes} bytes from {from} were all stored");
}

#[test]
fn a_client_is_refused_past_its_stored_task_bytes_while_another_is_served() {
    const MAX_BYTES: usize = 64 * 1024;
    const TEXT_BYTES: usize = 20 * 1024;
    let node = builder()
        .env(
            "AGORA_A2A__MAX_STORED_TASK_BYTES_PER_CLIENT",
            MAX_BYTES.to_string(),
        )
        .start();
    let (stored, refused) = send_until_refused(&node, address(4), TEXT_BYTES, 2 * MAX_BYTES / TEXT_BYTES);
    assert!(stored >= 1, "a task within the bound is stored: {refused}");
    assert!(
        stored * TEXT_BYTES <= MAX_BYTES,
        "{stored} tasks of {TEXT_BYTES} bytes stored"
    );
    assert_refused_naming(&refused, "a2a.max_stored_task_bytes_per_client");
    assert_stored(&send_from(&node, address(5), &"x".repeat(TEXT_BYTES)));
}

#[test]
fn the_node_refuses_past_its_total_stored_task_bytes_whichever_client_asks() {
    const MAX_BYTES: usize = 64 * 1024;
    const TEXT_BYTES: usize = 20 * 1024;
    let node = builder()
        .env("AGORA_A2A__MAX_STORED_TASK_BYTES", MAX_BYTES.to_string())
        .start();
    let (stored, refused) = send_until_refused(&node, address(6), TEXT_BYTES, 2 * MAX_BYTES / TEXT_BYTES);
    assert!(stored >= 1, "a task within the bound is stored: {refused}");
    let another = send_from(&node, address(7), &"x".repeat(TEXT_BYTES));
    for refused in [&refused, &another] {
        assert_refused_naming(refused, "a2a.max_stored_task_bytes");
        assert!(
            !text(&refused["error"]["message"]).contains("per_client"),
            "the node's bound, not a client's: {refused}"
        );
    }
}

/// On a fleet the count is the store's, not a node's: a client spreading its
/// tasks over two nodes on one PostgreSQL database meets one bound.
#[test]
fn a_clients_stored_task_count_is_shared_by_the_nodes_of_a_fleet() {
    const MAX_TASKS: usize = 2;
    let database = agora_test_postgres::Postgres::shared().create_database();
    let start = || {
        builder()
            .on_database(&database)
            .env("AGORA_A2A__MAX_STORED_TASKS_PER_CLIENT", MAX_TASKS.to_string())
            .start()
    };
    let (a, b) = (start(), start());
    let (greedy, other) = (address(8), address(9));
    assert_stored(&send_from(&a, greedy, "at the first node"));
    assert_stored(&send_from(&b, greedy, "at the second node"));
    for node in [&a, &b] {
        assert_refused_naming(
            &send_from(node, greedy, "one too many"),
            "a2a.max_stored_tasks_per_client",
        );
    }
    assert_stored(&send_from(&b, other, "another client is served"));
}
