//! A2A 1.0's HTTP+JSON binding (issue 41 point 3) end to end: the real
//! `a2a-sdk` 1.3.0 client, told to use only `HTTP+JSON`
//! (`tests/interop/a2a/rest_client.py`, which records its requests on the
//! wire), and plain HTTP for what the SDK would not send: a wrong method, an
//! unknown task read raw, a missing token, a body-less POST with no
//! `Content-Type`. The binding shares the JSON-RPC binding's task logic, so a
//! task started over one is answered over the other.

use serde_json::{Value, json};

use crate::a2a::a2a_python;
use crate::support::{self, NodeBuilder, TestNode, get, get_with_headers, post_with_headers};

const REST_PATH: &str = "/a2a/rest";
const TOKEN: &str = "rest-operator-token";
const MAX_BODY_BYTES: usize = 8192;

fn builder() -> NodeBuilder {
    TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
}

/// A scenario of the SDK's REST client (`rest_client.py`) against `node`.
pub(crate) fn sdk_rest(node: &TestNode, scenario: &str, args: &[&str]) -> Value {
    support::run_scenario(
        &a2a_python(),
        "tests/interop/a2a/rest_client.py",
        scenario,
        &node.url(""),
        args,
        node,
    )
}

/// The requests the SDK made, each "METHOD path[ typed]".
fn wire(observed: &Value) -> Vec<&str> {
    observed["wire"]
        .as_array()
        .unwrap_or_else(|| panic!("no wire: {observed}"))
        .iter()
        .map(|line| line.as_str().expect("a wire line"))
        .collect()
}

/// Every A2A call went to the REST paths: none to JSON-RPC's `/a2a`.
fn assert_rest_only(observed: &Value) {
    assert_eq!(observed["transport"], "RestTransport", "{observed}");
    for line in wire(observed) {
        let path = line.split(' ').nth(1).unwrap_or("");
        assert!(
            path == "/.well-known/agent-card.json" || path.starts_with(&format!("{REST_PATH}/")),
            "a request off the REST paths: {line} in {observed}"
        );
    }
}

/// A REST error body as the SDK's client reads it: the reason of its `ErrorInfo`.
fn assert_rest_error(reply: &support::HttpReply, status: u16, reason: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["error"]["code"], status, "{body}");
    let info = &body["error"]["details"][0];
    assert_eq!(
        info["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
        "{body}"
    );
    assert_eq!(info["reason"], reason, "{body}");
    assert_eq!(info["domain"], "a2a-protocol.org", "{body}");
    assert!(
        body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[test]
fn the_card_lists_the_rest_binding_after_json_rpc() {
    let node = builder().start();
    let card = get(&node.url("/.well-known/agent-card.json")).json();
    assert_eq!(
        card["supportedInterfaces"],
        json!([
            {"url": node.url("/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": node.url(REST_PATH), "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ]),
        "{card}"
    );
    let without = builder().env("AGORA_A2A__REST_PATH", "").start();
    let card = get(&without.url("/.well-known/agent-card.json")).json();
    assert_eq!(
        card["supportedInterfaces"].as_array().map(Vec::len),
        Some(1),
        "{card}"
    );
    let unserved = get(&without.url(&format!("{REST_PATH}/tasks?contextId=c")));
    assert_eq!(unserved.status, 404, "{}", unserved.body);
}

#[test]
fn the_sdk_sends_gets_lists_streams_subscribes_and_cancels_over_rest() {
    let node = builder().start();
    let seen = sdk_rest(&node, "tour", &[]);
    assert_rest_only(&seen);
    let sent = &seen["sent"];
    assert_eq!(sent["state"], "TASK_STATE_COMPLETED", "{seen}");
    assert!(!sent["answer"].as_str().unwrap_or("").is_empty(), "{seen}");
    assert_eq!(seen["got"]["id"], sent["id"], "{seen}");
    assert_eq!(seen["got"]["answer"], sent["answer"], "{seen}");
    assert_eq!(seen["listed"]["ids"], json!([sent["id"]]), "{seen}");
    let events = seen["events"].as_array().expect("stream events");
    assert_eq!(seen["closed"], true, "{seen}");
    assert_eq!(events[0]["kind"], "task", "{seen}");
    assert_eq!(events.last().unwrap()["state"], "TASK_STATE_COMPLETED", "{seen}");
    assert_eq!(seen["parked"]["state"], "TASK_STATE_INPUT_REQUIRED", "{seen}");
    // A parked task's stream is its state, and the turn is the client's: it ends there.
    assert_eq!(seen["subscribeClosed"], true, "{seen}");
    assert_eq!(seen["subscribed"][0]["kind"], "task", "{seen}");
    assert_eq!(
        seen["subscribed"][0]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{seen}"
    );
    assert_eq!(seen["canceled"]["state"], "TASK_STATE_CANCELED", "{seen}");
    assert_eq!(seen["again"]["error"], "TaskNotCancelableError", "{seen}");
    assert_eq!(seen["unknown"]["error"], "TaskNotFoundError", "{seen}");
    let parked = seen["parked"]["id"].as_str().unwrap();
    let context = sent["contextId"].as_str().unwrap();
    let calls = wire(&seen);
    for expected in [
        "POST /a2a/rest/message:send typed".to_string(),
        format!("GET /a2a/rest/tasks/{}", sent["id"].as_str().unwrap()),
        "POST /a2a/rest/message:stream typed".to_string(),
        // The SDK's subscribe and cancel: bodiless subscribe, no Content-Type.
        format!("POST /a2a/rest/tasks/{parked}:subscribe"),
        format!("POST /a2a/rest/tasks/{parked}:cancel typed"),
        "GET /a2a/rest/tasks/no-such-task".to_string(),
    ] {
        assert!(calls.contains(&expected.as_str()), "{expected} not in {calls:?}");
    }
    assert!(
        calls.contains(&"GET /a2a/rest/tasks"),
        "ListTasks (contextId {context}) in {calls:?}"
    );
}

#[test]
fn an_approval_round_runs_over_rest() {
    let node = builder().start();
    for streamed in [false, true] {
        let args: &[&str] = if streamed { &["--stream"] } else { &[] };
        let seen = sdk_rest(&node, "approve", args);
        assert_rest_only(&seen);
        assert_eq!(seen["parked"]["state"], "TASK_STATE_INPUT_REQUIRED", "{seen}");
        assert_eq!(
            seen["approval"]["tool_name"], "generate_inspection_report",
            "{seen}"
        );
        assert_eq!(seen["final"]["state"], "TASK_STATE_COMPLETED", "{seen}");
        assert!(
            seen["final"]["answer"]
                .as_str()
                .is_some_and(|a| a.contains("RPT-2024-001-")),
            "{seen}"
        );
    }
}

#[test]
fn the_extended_card_comes_over_rest_with_the_token() {
    let node = builder().env("AGORA_A2A__AUTH_TOKEN", TOKEN).start();
    let seen = sdk_rest(&node, "extended", &[TOKEN]);
    assert_rest_only(&seen);
    assert!(wire(&seen).contains(&"GET /a2a/rest/extendedAgentCard"), "{seen}");
    let skills = |card: &Value| -> Vec<String> {
        card["skills"]
            .as_array()
            .map(|s| s.iter().map(|s| s["id"].as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    assert!(
        !skills(&seen["public"]).contains(&"generate_inspection_report".to_string()),
        "{seen}"
    );
    assert!(
        skills(&seen["extended"]).contains(&"generate_inspection_report".to_string()),
        "{seen}"
    );
    assert_eq!(
        seen["extended"]["supportedInterfaces"], seen["public"]["supportedInterfaces"],
        "{seen}"
    );
    // Without the token: 401, which the SDK reads by its reason (an invalid request).
    assert_eq!(seen["anonymous"]["error"], "InvalidRequestError", "{seen}");
    assert!(
        seen["anonymous"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("Unauthorized"),
        "{seen}"
    );
}

#[test]
fn rest_refusals_have_the_rest_shape() {
    let node = builder()
        .env("AGORA_A2A__AUTH_TOKEN", TOKEN)
        .env("AGORA_A2A__MAX_BODY_BYTES", MAX_BODY_BYTES.to_string())
        .start();
    let bearer = format!("Bearer {TOKEN}");
    let authed = [("authorization", bearer.as_str())];
    // A known path asked with a method it does not take.
    let wrong = get_with_headers(&node.url(&format!("{REST_PATH}/message:send")), &authed);
    assert_rest_error(&wrong, 405, "METHOD_NOT_FOUND");
    let wrong = post_with_headers(
        &node.url(&format!("{REST_PATH}/tasks/t1")),
        &[authed[0], ("content-type", "application/json")],
        b"{}",
    );
    assert_rest_error(&wrong, 405, "METHOD_NOT_FOUND");
    // An unknown task.
    let unknown = get_with_headers(&node.url(&format!("{REST_PATH}/tasks/no-such-task")), &authed);
    assert_rest_error(&unknown, 404, "TASK_NOT_FOUND");
    assert_eq!(unknown.json()["error"]["status"], "NOT_FOUND");
    // No token: 401 before anything else is read.
    let anonymous = get(&node.url(&format!("{REST_PATH}/tasks/no-such-task")));
    assert_rest_error(&anonymous, 401, "INVALID_REQUEST");
    assert_eq!(anonymous.header("www-authenticate"), Some("Bearer"));
    // A body-less POST with no Content-Type reaches the binding (not the
    // browser policy's 415); one with a body that is not JSON does not.
    let bodiless = post_with_headers(
        &node.url(&format!("{REST_PATH}/tasks/no-such-task:cancel")),
        &authed,
        b"",
    );
    assert_rest_error(&bodiless, 404, "TASK_NOT_FOUND");
    let plain = post_with_headers(
        &node.url(&format!("{REST_PATH}/message:send")),
        &[authed[0], ("content-type", "text/plain")],
        b"hello",
    );
    assert_rest_error(&plain, 415, "INVALID_REQUEST");
    // A body that is not JSON, one over the limit, a query of the wrong kind, a foreign version.
    let json_type = ("content-type", "application/json");
    let garbled = post_with_headers(
        &node.url(&format!("{REST_PATH}/message:send")),
        &[authed[0], json_type],
        b"{not json",
    );
    assert_rest_error(&garbled, 400, "INVALID_REQUEST");
    let huge = vec![b' '; MAX_BODY_BYTES + 1];
    let huge = post_with_headers(
        &node.url(&format!("{REST_PATH}/message:send")),
        &[authed[0], json_type],
        &huge,
    );
    assert_rest_error(&huge, 413, "INVALID_REQUEST");
    let kind = get_with_headers(
        &node.url(&format!("{REST_PATH}/tasks/t1?historyLength=x")),
        &authed,
    );
    assert_rest_error(&kind, 400, "INVALID_PARAMS");
    let foreign = get_with_headers(
        &node.url(&format!("{REST_PATH}/tasks/t1")),
        &[authed[0], ("a2a-version", "0.3")],
    );
    assert_rest_error(&foreign, 400, "VERSION_NOT_SUPPORTED");
    // An unknown path under the binding, and the push configs of an unknown task.
    let nowhere = get_with_headers(&node.url(&format!("{REST_PATH}/nowhere")), &authed);
    assert_rest_error(&nowhere, 404, "METHOD_NOT_FOUND");
    let push = get_with_headers(
        &node.url(&format!("{REST_PATH}/tasks/t1/pushNotificationConfigs")),
        &authed,
    );
    assert_rest_error(&push, 404, "TASK_NOT_FOUND");
    // A unary answer is the bare object.
    let listed = get_with_headers(&node.url(&format!("{REST_PATH}/tasks?contextId=none")), &authed);
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(
        listed.content_type.starts_with("application/a2a+json"),
        "{}",
        listed.content_type
    );
    assert_eq!(listed.json()["tasks"], json!([]), "{}", listed.body);
}

#[test]
fn a_task_started_over_rest_is_approved_over_json_rpc() {
    let node = builder().start();
    let seen = sdk_rest(&node, "park", &[]);
    assert_rest_only(&seen);
    let parked = &seen["parked"];
    assert_eq!(parked["state"], "TASK_STATE_INPUT_REQUIRED", "{seen}");
    let task_id = parked["id"].as_str().expect("a task id");
    let approval_id = parked["statusData"][0]["approval_id"]
        .as_str()
        .expect("an approval");
    let answer = json!({
        "jsonrpc": "2.0",
        "id": "approve-over-json-rpc",
        "method": "SendMessage",
        "params": {"message": {
            "messageId": "m-approve",
            "role": "ROLE_USER",
            "taskId": task_id,
            "parts": [{"data": {"approval_id": approval_id, "approved": true}}],
        }},
    });
    let reply = support::post_json(&node.url("/a2a"), &answer).json();
    assert_eq!(reply["result"]["task"]["id"], task_id, "{reply}");
    assert_eq!(
        reply["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{reply}"
    );
    // Read back over REST: the one task, finished.
    let task = get(&node.url(&format!("{REST_PATH}/tasks/{task_id}"))).json();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let answer_text = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap_or("");
    assert!(answer_text.contains("RPT-2024-001-"), "the tool ran: {task}");
}
