//! A2A on a fleet: two nodes on one PostgreSQL database, as behind a load
//! balancer. A task started at one node is read at the other, a context's
//! history follows the client to whichever node it reaches, a task one node
//! runs is approved, rejected (streaming) or canceled through the other, and
//! a task whose node dies is failed by the other within its lease.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agora_test_postgres::Postgres;
use serde_json::{Value, json};

use crate::support::{self, TestNode};

const PLUGINS: [&str; 2] = ["hai-assistant", "inspection-tools"];

fn node(database: &str) -> TestNode {
    node_with(database, &[])
}

/// [`node`] with more settings.
fn node_with(database: &str, settings: &[(&str, &str)]) -> TestNode {
    let mut builder = TestNode::builder().on_database(database).envs(settings);
    for plugin in PLUGINS {
        builder = builder.plugin(plugin);
    }
    builder.start()
}

/// A short lease, so a dead node's tasks are failed within a test's patience.
const SHORT_LEASE: (&str, &str) = ("AGORA_STORE__LEASE_MS", "900");

fn rpc(node: &TestNode, method: &str, params: Value) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": method, "method": method, "params": params});
    let reply = support::post_with_headers(
        &node.url("/a2a"),
        &[("content-type", "application/json"), ("a2a-version", "1.0")],
        request.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{method}: {}", reply.body);
    let answer = reply.json();
    assert_eq!(answer["id"], method, "{answer}");
    answer
}

fn send(node: &TestNode, text: &str, context: Option<&str>) -> Value {
    let mut message = json!({"messageId": uuid(), "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(context) = context {
        message["contextId"] = json!(context);
    }
    let answer = rpc(node, "SendMessage", json!({"message": message}));
    answer["result"]["task"].clone()
}

/// A message id of its own (the node does not require them unique; a client should).
fn uuid() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("fleet-test-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn answer_text(task: &Value) -> String {
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_task_and_its_context_are_read_and_continued_at_either_node() {
    let database = Postgres::shared().create_database();
    let (a, b) = (node(&database), node(&database));
    let first = send(&a, "hello from the fleet test", None);
    assert_eq!(first["status"]["state"], "TASK_STATE_COMPLETED", "{first}");
    let context = first["contextId"].as_str().expect("a contextId").to_string();

    let read_at_b = rpc(&b, "GetTask", json!({"id": first["id"]}));
    assert_eq!(read_at_b["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(answer_text(&read_at_b["result"]), answer_text(&first));

    // The context's history is in the shared store: node B's assistant sees A's turn.
    let recall = send(&b, "what did I say first?", Some(&context));
    assert_eq!(recall["status"]["state"], "TASK_STATE_COMPLETED", "{recall}");
    assert!(
        answer_text(&recall).contains("hello from the fleet test"),
        "{}",
        answer_text(&recall)
    );

    let listed = rpc(&a, "ListTasks", json!({"contextId": context}));
    let ids: Vec<&str> = listed["result"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|task| task["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [recall["id"].as_str().unwrap(), first["id"].as_str().unwrap()],
        "newest first"
    );
    assert_eq!(listed["result"]["nextPageToken"], "");
}

/// A task `node` starts and parks on the high-risk report tool: (task id, approval id).
fn parked_report(node: &TestNode) -> (String, String) {
    let parked = send(node, "generate the report for INS-2024-001", None);
    assert_eq!(parked["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{parked}");
    let approval = parked["status"]["message"]["parts"]
        .as_array()
        .and_then(|parts| parts.iter().find_map(|part| part.get("data")))
        .and_then(|data| data["approval_id"].as_str())
        .expect("an approval data part")
        .to_string();
    (parked["id"].as_str().expect("a task id").to_string(), approval)
}

fn decision(task_id: &str, approval_id: &str, approved: bool) -> Value {
    json!({"message": {"messageId": uuid(), "role": "ROLE_USER", "taskId": task_id,
        "parts": [{"data": {"approval_id": approval_id, "approved": approved, "feedback": "not from this node"}}]}})
}

#[test]
fn a_task_waiting_at_one_node_is_answered_and_canceled_through_the_other() {
    let database = Postgres::shared().create_database();
    let (a, b) = (node(&database), node(&database));

    // Approved at B: A runs the tool, and B answers with the end A stored.
    let (task_id, approval_id) = parked_report(&a);
    let wrong = rpc(&b, "SendMessage", decision(&task_id, "appr_not_this_one", true));
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    let done = rpc(&b, "SendMessage", decision(&task_id, &approval_id, true));
    let task = &done["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert!(answer_text(task).contains("RPT-"), "{}", answer_text(task));
    let seen = rpc(&a, "GetTask", json!({"id": task_id}));
    assert_eq!(seen["result"]["status"]["state"], "TASK_STATE_COMPLETED");

    // Rejected at B over a stream: the Task first, the end last, the feedback quoted.
    let (task_id, approval_id) = parked_report(&a);
    let request = json!({"jsonrpc": "2.0", "id": 9, "method": "SendStreamingMessage",
        "params": decision(&task_id, &approval_id, false)});
    let reply = support::post_with_headers(
        &b.url("/a2a"),
        &[("content-type", "application/json"), ("a2a-version", "1.0")],
        request.to_string().as_bytes(),
    );
    assert!(
        reply.content_type.starts_with("text/event-stream"),
        "{}",
        reply.body
    );
    let events: Vec<Value> = reply
        .body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str(data.trim()).expect("an event is JSON"))
        .collect();
    let first = &events.first().expect("events")["result"];
    assert_eq!(first["task"]["id"], task_id.as_str(), "{first}");
    let last = &events.last().expect("events")["result"]["statusUpdate"];
    assert_eq!(last["status"]["state"], "TASK_STATE_COMPLETED", "{last}");
    let text = last["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("not from this node"), "{text}");

    // Canceled at B: A stops the call.
    let (task_id, _) = parked_report(&a);
    let canceled = rpc(&b, "CancelTask", json!({"id": task_id}));
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    let again = rpc(&a, "CancelTask", json!({"id": task_id}));
    assert_eq!(again["error"]["code"], -32002, "{again}");
}

/// What one client can push through the fleet bus is bounded (issue 37): an
/// answer to an approval whose task runs on another node crosses the bus once,
/// and only as its decision. With the runner gone (killed), the answer stays
/// unapplied, so a client repeating it would be forwarded again and again.
#[test]
fn an_approval_answer_crosses_the_fleet_bus_once_and_only_as_its_decision() {
    let database = Postgres::shared().create_database();
    // A's lease outlasts the test: its task is not failed while B is asked.
    let a = node_with(&database, &[("AGORA_STORE__LEASE_MS", "600000")]);
    let b = TestNode::builder()
        .on_database(&database)
        // B answers with the task as it stands after about 2.7 s (no runner will end it).
        .env("AGORA_HTTP__REQUEST_TIMEOUT_MS", "3000")
        .env("AGORA_HTTP__ADMISSION_WAIT_MS", "1000")
        .plugin(PLUGINS[0])
        .plugin(PLUGINS[1])
        .start();
    let (task_id, approval_id) = parked_report(&a);
    a.kill();

    let mut answer = decision(&task_id, &approval_id, true);
    // A client may send a large message with its answer; only the decision travels.
    answer["message"]["parts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"text": "x".repeat(200_000)}));
    let first = rpc(&b, "SendMessage", answer.clone());
    assert_eq!(
        first["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "the runner is gone, so the task waits on: {first}"
    );
    let again = rpc(&b, "SendMessage", answer);
    assert_eq!(again["error"]["code"], -32602, "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("answered already"),
        "{again}"
    );

    let largest: usize = Postgres::shared()
        .query_one(
            &database,
            "SELECT coalesce(max(octet_length(payload)), 0) FROM fleet_messages WHERE topic = 'a2a.task'",
        )
        .parse()
        .expect("a size");
    assert!(
        (1..4096).contains(&largest),
        "one forwarded decision of a few hundred bytes, not the 200 kB message: {largest}"
    );
}

/// Wait (a liveness deadline, polling `GetTask` at `node`) until task `task_id` is in `state`.
fn task_reaches(node: &TestNode, task_id: &str, state: &str) -> Value {
    let mut task = Value::Null;
    node.wait_until(
        &format!("task {task_id} {state}"),
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            task = rpc(node, "GetTask", json!({"id": task_id}))["result"].clone();
            task["status"]["state"] == state
        },
    );
    task
}

/// Kill -9 the node running a task (it waits for an approval, so its plugin
/// call is in the middle of its work): the other node stores it failed, saying
/// the node stopped, once the lease lapses; the task takes no more answers.
#[test]
fn a_task_whose_node_was_killed_is_failed_by_the_other_node() {
    let database = Postgres::shared().create_database();
    let (a, b) = (
        node_with(&database, &[SHORT_LEASE]),
        node_with(&database, &[SHORT_LEASE]),
    );
    let (task_id, approval_id) = parked_report(&a);
    a.kill();

    let failed = task_reaches(&b, &task_id, "TASK_STATE_FAILED");
    let text = failed["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("node running this task stopped"), "{failed}");
    let late = rpc(&b, "SendMessage", decision(&task_id, &approval_id, true));
    assert!(
        late["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("TASK_STATE_FAILED"),
        "a failed task takes no answer: {late}"
    );
    // The taker removes the lease once the task's end is stored.
    b.wait_until(
        "the taken lease removed",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || lease_until(&database, &task_id) == 0,
    );
}

/// A node stopped gracefully hands its work over: with a lease of two
/// minutes, the other node fails the task it cut at its next sweep (a third
/// of a lease), long before the lease would have run out.
#[test]
fn a_task_whose_node_stopped_gracefully_is_failed_before_its_lease_runs_out() {
    const LONG_LEASE_MS: u64 = 120_000;
    let long_lease = ("AGORA_STORE__LEASE_MS", "120000");
    let database = Postgres::shared().create_database();
    let (a, b) = (
        node_with(&database, &[long_lease]),
        node_with(&database, &[long_lease]),
    );
    let (task_id, _) = parked_report(&a);
    assert!(a.stop().success(), "a graceful stop");

    // Half the lease: a third (the sweep's tick) and room for a loaded machine.
    let mut failed = Value::Null;
    b.wait_until(
        "the cut task failed by the other node",
        Duration::from_millis(LONG_LEASE_MS / 2),
        Duration::from_millis(200),
        || {
            failed = rpc(&b, "GetTask", json!({"id": task_id}))["result"].clone();
            failed["status"]["state"] == "TASK_STATE_FAILED"
        },
    );
    let text = failed["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("node running this task stopped"), "{failed}");
}

/// The `until_ms` of task `task_id`'s lease as the database holds it (0: none).
fn lease_until(database: &str, task_id: &str) -> u64 {
    let sql = format!(
        "SELECT coalesce(max((convert_from(value, 'UTF8')::jsonb->>'until_ms')::bigint), 0) FROM entries \
         WHERE collection = 'leases' AND key = convert_to('a2a', 'UTF8') || '\\x00'::bytea || convert_to('{task_id}', 'UTF8')"
    );
    Postgres::shared()
        .query_one(database, &sql)
        .parse()
        .expect("a time")
}

/// A task that runs for several leases on a live node is its node's all along:
/// the runner's renewals move the lease on, the other node's sweeper (which
/// would take a lapsed lease within a third of one) leaves it, and the task
/// ends as its answer says.
#[test]
fn a_task_running_longer_than_its_lease_on_a_live_node_is_not_failed() {
    let database = Postgres::shared().create_database();
    let (a, b) = (
        node_with(&database, &[SHORT_LEASE]),
        node_with(&database, &[SHORT_LEASE]),
    );
    let (task_id, approval_id) = parked_report(&a);
    let first = lease_until(&database, &task_id);
    assert!(first > 0, "a running task holds a lease");
    // Renewed until it runs two more leases past its first: by then it has
    // outlived that first lease by a whole one, through three of B's sweeps.
    let lease_ms: u64 = SHORT_LEASE.1.parse().unwrap();
    a.wait_until(
        "the lease renewed past two more leases",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || lease_until(&database, &task_id) > first + 2 * lease_ms,
    );
    let waiting = rpc(&b, "GetTask", json!({"id": task_id}));
    assert_eq!(
        waiting["result"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{waiting}"
    );
    let done = rpc(&b, "SendMessage", decision(&task_id, &approval_id, true));
    let task = &done["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert!(answer_text(task).contains("RPT-"), "{}", answer_text(task));
    a.wait_until(
        "the ended task's lease released",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || lease_until(&database, &task_id) == 0,
    );
}
