//! A2A push notifications (issue 41 point 4) end to end: the real `a2a-sdk`
//! 1.3.0 client manages a task's webhook configs over JSON-RPC and REST
//! (`tests/interop/a2a/sdk_client.py`, `rest_client.py`), and a webhook on
//! loopback (`tests/interop/a2a/webhook.py`, standard library only) logs every
//! delivery; the SDK's own `StreamResponse` then reads each body strictly
//! (`sdk_client.py deliveries`). The webhook is reached only because
//! `outbound.allowed_hosts` lists its `127.0.0.1:PORT`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::a2a::a2a_python;
use crate::a2a_rest::sdk_rest;
use crate::support::{self, NodeBuilder, TestNode, get, post_json};

const TOKEN: &str = "tok-1";
/// A liveness bound for a debug node on a loaded machine, not a speed target.
const PATIENCE: Duration = Duration::from_secs(90);

/// A node whose outbound policy lets it reach webhooks on `ports`, retrying fast.
fn builder(ports: &[u16]) -> NodeBuilder {
    let hosts: Vec<String> = ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
    TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
        .env("AGORA_OUTBOUND__ALLOWED_HOSTS", json!(hosts).to_string())
        .env("AGORA_A2A__PUSH_RETRY_INITIAL_MS", "200")
        .env("AGORA_A2A__PUSH_RETRY_MAX_INTERVAL_MS", "1000")
}

/// `webhook.py` on 127.0.0.1:`port`, logging to `log`.
struct Webhook {
    child: Child,
    log: PathBuf,
}

impl Webhook {
    fn start(port: u16, log: &Path, flags: &[&str]) -> Webhook {
        let child = Command::new(a2a_python())
            .arg(support::repo_root().join("tests/interop/a2a/webhook.py"))
            .arg(port.to_string())
            .arg(log)
            .args(flags)
            .stdout(Stdio::null())
            .spawn()
            .expect("starting webhook.py");
        crate::uagents::wait_for_port(port, "the webhook");
        Webhook {
            child,
            log: log.to_path_buf(),
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hook_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/hook")
}

/// Deliveries logged so far.
fn logged(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|text| text.lines().filter(|line| !line.trim().is_empty()).count())
        .unwrap_or(0)
}

fn wait_for_deliveries(node: &TestNode, log: &Path, count: usize) {
    node.wait_until(
        &format!("{count} deliveries at the webhook"),
        PATIENCE,
        Duration::from_millis(50),
        || logged(log) >= count,
    );
}

/// The first `count` deliveries, each body parsed by the SDK as a `StreamResponse`.
fn deliveries(node: &TestNode, log: &Path, count: usize) -> Value {
    let count = count.to_string();
    sdk(node, "deliveries", &[log.to_str().unwrap(), &count])
}

fn sdk(node: &TestNode, scenario: &str, args: &[&str]) -> Value {
    support::run_scenario(
        &a2a_python(),
        "tests/interop/a2a/sdk_client.py",
        scenario,
        &node.url(""),
        args,
        node,
    )
}

/// A counter or gauge of `/metrics`, 0 when absent.
fn metric(node: &TestNode, series: &str) -> u64 {
    get(&node.url("/metrics"))
        .body
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

fn outcomes(node: &TestNode, outcome: &str) -> u64 {
    metric(
        node,
        &format!("agora_a2a_push_deliveries_total{{outcome=\"{outcome}\"}} "),
    )
}

fn wait_for_outcomes(node: &TestNode, outcome: &str, count: u64) {
    node.wait_until(
        &format!("{count} push deliveries {outcome}"),
        PATIENCE,
        Duration::from_millis(50),
        || outcomes(node, outcome) >= count,
    );
}

fn pending(node: &TestNode) -> u64 {
    metric(node, "agora_a2a_push_pending ")
}

/// Each delivery's kind and state (`task`/`status`) or name (`artifact`).
fn kinds(deliveries: &Value) -> Vec<String> {
    deliveries["deliveries"]
        .as_array()
        .unwrap_or_else(|| panic!("no deliveries: {deliveries}"))
        .iter()
        .map(|d| {
            let detail = d["state"].as_str().or(d["name"].as_str()).unwrap_or("?");
            format!("{} {detail}", d["kind"].as_str().unwrap_or("?"))
        })
        .collect()
}

/// The deliveries with repeats left out: delivery is at least once, and a
/// node killed between the webhook's answer and its own record of it sends
/// that delivery again.
fn distinct(deliveries: &Value) -> Value {
    let mut seen: Vec<Value> = Vec::new();
    for delivery in deliveries["deliveries"].as_array().unwrap() {
        if !seen.contains(delivery) {
            seen.push(delivery.clone());
        }
    }
    json!({ "deliveries": seen })
}

/// Every delivery is a strict `StreamResponse` of `task_id`, with the config's token and credentials.
fn assert_sent_as_the_sdk_sends(deliveries: &Value, task_id: &str, token: &str) {
    for delivery in deliveries["deliveries"].as_array().unwrap() {
        assert_eq!(delivery["strict"], true, "{delivery}");
        assert_eq!(delivery["token"], token, "{delivery}");
        assert_eq!(delivery["authorization"], "Bearer cred-1", "{delivery}");
        assert_eq!(delivery["contentType"], "application/json", "{delivery}");
        let id = delivery["taskId"].as_str().or(delivery["id"].as_str());
        assert_eq!(id, Some(task_id), "{delivery}");
    }
}

/// A "hello" task's deliveries, as the SDK's sender would make them: the task,
/// the answer, the end, each with the config's token.
fn assert_a_completed_hello_pushed(got: &Value, task_id: &str) {
    assert_eq!(
        kinds(got),
        [
            "task TASK_STATE_SUBMITTED",
            "artifact answer",
            "status TASK_STATE_COMPLETED"
        ],
        "{got}"
    );
    assert_sent_as_the_sdk_sends(got, task_id, TOKEN);
}

fn error_class(observed: &Value) -> &str {
    observed["error"].as_str().unwrap_or("")
}

#[test]
fn push_configs_are_created_read_replaced_and_deleted_over_json_rpc_and_rest() {
    let port = support::free_port();
    let node = builder(&[port])
        .env("AGORA_A2A__PUSH_MAX_CONFIGS_PER_TASK", "4")
        .start();
    let card = get(&node.url("/.well-known/agent-card.json")).json();
    assert_eq!(card["capabilities"]["pushNotifications"], true, "{card}");
    let hook = hook_url(port);
    // Only 127.0.0.1:PORT is listed: the name `localhost` is refused at create.
    let refused = format!("http://localhost:{port}/hook");
    for (binding, seen) in [
        ("JsonRpcTransport", sdk(&node, "push-crud", &[&hook, &refused])),
        ("RestTransport", sdk_rest(&node, "push-crud", &[&hook, &refused])),
    ] {
        assert_eq!(seen["transport"], binding, "{seen}");
        let task_id = seen["taskId"].as_str().unwrap();
        assert_eq!(
            seen["created"],
            json!({"id": "p1", "taskId": task_id, "url": hook, "token": TOKEN}),
            "{seen}"
        );
        assert_eq!(seen["got"], seen["created"], "{seen}");
        assert_eq!(seen["listed"], json!([["p1", hook], ["p2", hook]]), "{seen}");
        assert_eq!(seen["replacedAnswer"]["token"], "tok-2", "{seen}");
        assert_eq!(
            seen["replaced"],
            json!([["p1", format!("{hook}/moved")], ["p2", hook]]),
            "{seen}"
        );
        assert_eq!(error_class(&seen["deleted"]), "", "{seen}");
        assert_eq!(seen["afterDelete"], json!([["p2", hook]]), "{seen}");
        // As the SDK's handler: an unknown config reads as an unknown task, and deletes quietly.
        assert_eq!(error_class(&seen["gone"]), "TaskNotFoundError", "{seen}");
        assert_eq!(error_class(&seen["deleteAgain"]), "", "{seen}");
        assert_eq!(seen["defaultId"]["id"], task_id, "{seen}");
        assert_eq!(error_class(&seen["unknownTask"]), "TaskNotFoundError", "{seen}");
        assert_eq!(error_class(&seen["noUrl"]), "InvalidParamsError", "{seen}");
        assert_eq!(error_class(&seen["refused"]), "InvalidParamsError", "{seen}");
        assert!(
            seen["refused"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Invalid push notification URL")),
            "{seen}"
        );
        // p2 and the default id are two of four: two more fit, the next does not.
        let over = &seen["overTask"];
        assert_eq!(over[0]["id"], "p5", "{seen}");
        assert_eq!(over[1]["id"], "p6", "{seen}");
        assert_eq!(error_class(&over[2]), "InvalidParamsError", "{seen}");
    }
}

fn rpc(node: &TestNode, method: &str, params: Value) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    post_json(&node.url("/a2a"), &request).json()
}

fn hello_task(node: &TestNode) -> String {
    let params = json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}});
    let answer = rpc(node, "SendMessage", params);
    answer["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {answer}"))
        .to_string()
}

#[test]
fn push_configs_are_bounded_per_client_and_refused_when_push_is_off() {
    let port = support::free_port();
    let node = builder(&[port])
        .env("AGORA_A2A__PUSH_MAX_CONFIGS_PER_CLIENT", "2")
        .start();
    let task = hello_task(&node);
    let create = |id: &str| {
        let params = json!({"taskId": task, "id": id, "url": hook_url(port)});
        rpc(&node, "CreateTaskPushNotificationConfig", params)
    };
    assert_eq!(create("a")["result"]["id"], "a");
    assert_eq!(create("b")["result"]["id"], "b");
    // Replacing a config takes no more room; a third one is past the client's bound.
    assert_eq!(create("a")["result"]["id"], "a");
    let refused = create("c");
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("a2a.push_max_configs_per_client")),
        "{refused}"
    );
    // A deleted config gives its room back.
    let deleted = rpc(
        &node,
        "DeleteTaskPushNotificationConfig",
        json!({"taskId": task, "id": "b"}),
    );
    assert_eq!(deleted["result"], Value::Null, "{deleted}");
    assert_eq!(create("c")["result"]["id"], "c");

    let off = builder(&[port]).env("AGORA_A2A__PUSH_ENABLED", "false").start();
    let card = get(&off.url("/.well-known/agent-card.json")).json();
    assert_eq!(card["capabilities"]["pushNotifications"], false, "{card}");
    let task = hello_task(&off);
    let refused = rpc(
        &off,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task, "url": hook_url(port)}),
    );
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
}

#[test]
fn an_approval_round_is_pushed_in_order_with_token_and_credentials() {
    let (rpc_port, rest_port) = (support::free_port(), support::free_port());
    let logs = tempfile::tempdir().unwrap();
    let node = builder(&[rpc_port, rest_port]).start();
    for (port, script) in [(rpc_port, "sdk_client.py"), (rest_port, "rest_client.py")] {
        let hook = Webhook::start(port, &logs.path().join(format!("{port}.log")), &[]);
        let seen = if script == "sdk_client.py" {
            sdk(&node, "push-round", &[&hook_url(port), TOKEN])
        } else {
            sdk_rest(&node, "push-round", &[&hook_url(port), TOKEN])
        };
        let task_id = seen["parked"]["id"].as_str().unwrap();
        assert_eq!(seen["final"]["state"], "TASK_STATE_COMPLETED", "{seen}");
        assert_eq!(seen["configs"][0]["url"], hook_url(port), "{seen}");
        assert_eq!(seen["configs"][0]["id"], task_id, "{seen}");
        wait_for_deliveries(&node, &hook.log, 4);
        let got = deliveries(&node, &hook.log, 4);
        assert_eq!(got["logged"], 4, "{script}: {got}");
        assert_eq!(
            kinds(&got),
            [
                "task TASK_STATE_SUBMITTED",
                "status TASK_STATE_INPUT_REQUIRED",
                "artifact answer",
                "status TASK_STATE_COMPLETED"
            ],
            "{script}: {got}"
        );
        assert_sent_as_the_sdk_sends(&got, task_id, TOKEN);
        let asked = &got["deliveries"][1]["statusData"][0];
        assert_eq!(asked["tool_name"], "generate_inspection_report", "{got}");
        let answer = &got["deliveries"][2];
        assert_eq!(answer["lastChunk"], true, "{got}");
        assert_eq!(answer["text"], seen["final"]["answer"], "{got}");
    }
    assert_eq!(outcomes(&node, "delivered"), 8);
}

#[test]
fn a_failing_webhook_is_retried_with_backoff_and_counted() {
    let port = support::free_port();
    let logs = tempfile::tempdir().unwrap();
    let hook = Webhook::start(port, &logs.path().join("hook.log"), &["--fail-first", "3"]);
    let node = builder(&[port]).start();
    let sent = sdk(&node, "push-send", &["hello", &hook_url(port), TOKEN]);
    assert_eq!(sent["task"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    wait_for_deliveries(&node, &hook.log, 6);
    wait_for_outcomes(&node, "delivered", 3);
    let got = deliveries(&node, &hook.log, 6);
    assert_eq!(got["logged"], 6, "{got}");
    // The first delivery until it is taken, and only then the next ones: in order.
    assert_eq!(
        kinds(&got),
        [
            "task TASK_STATE_SUBMITTED",
            "task TASK_STATE_SUBMITTED",
            "task TASK_STATE_SUBMITTED",
            "task TASK_STATE_SUBMITTED",
            "artifact answer",
            "status TASK_STATE_COMPLETED"
        ],
        "{got}"
    );
    let answered: Vec<&Value> = got["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["answered"])
        .collect();
    assert_eq!(answered, [503, 503, 503, 200, 200, 200], "{got}");
    assert_eq!(outcomes(&node, "retried"), 3);
    assert_eq!(outcomes(&node, "delivered"), 3);
    node.wait_until("nothing pending", PATIENCE, Duration::from_millis(50), || {
        pending(&node) == 0
    });
}

#[test]
fn a_webhook_refusing_with_a_4xx_gets_each_delivery_once() {
    let port = support::free_port();
    let logs = tempfile::tempdir().unwrap();
    let hook = Webhook::start(port, &logs.path().join("hook.log"), &["--status", "404"]);
    let node = builder(&[port]).start();
    sdk(&node, "push-send", &["hello", &hook_url(port), TOKEN]);
    wait_for_outcomes(&node, "rejected", 3);
    let got = deliveries(&node, &hook.log, 3);
    assert_eq!(got["logged"], 3, "{got}");
    assert_eq!(
        kinds(&got),
        [
            "task TASK_STATE_SUBMITTED",
            "artifact answer",
            "status TASK_STATE_COMPLETED"
        ],
        "{got}"
    );
    assert_eq!(outcomes(&node, "retried"), 0);
    assert_eq!(outcomes(&node, "delivered"), 0);
}

#[test]
fn deliveries_owed_when_the_node_is_killed_arrive_after_its_restart() {
    let port = support::free_port();
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    // No webhook yet: every delivery is owed when the node dies.
    let node = builder(&[port]).data_dir(data.path()).start();
    let sent = sdk(&node, "push-send", &["hello", &hook_url(port), TOKEN]);
    assert_eq!(sent["task"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    let task_id = sent["task"]["id"].as_str().unwrap().to_string();
    wait_for_outcomes(&node, "retried", 1);
    assert!(pending(&node) >= 1, "nothing pending before the kill");
    node.kill();

    let hook = Webhook::start(port, &logs.path().join("hook.log"), &[]);
    let node = builder(&[port]).data_dir(data.path()).start();
    wait_for_deliveries(&node, &hook.log, 3);
    wait_for_outcomes(&node, "delivered", 3);
    let got = deliveries(&node, &hook.log, 3);
    assert_a_completed_hello_pushed(&got, &task_id);
    node.wait_until("nothing pending", PATIENCE, Duration::from_millis(50), || {
        pending(&node) == 0
    });
}

#[test]
fn a_task_parked_when_the_node_is_killed_is_pushed_failed_after_its_restart() {
    let port = support::free_port();
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let hook = Webhook::start(port, &logs.path().join("hook.log"), &[]);
    let node = builder(&[port]).data_dir(data.path()).start();
    let parked = sdk(
        &node,
        "push-send",
        &["generate the report for INS-2024-001", &hook_url(port), TOKEN],
    );
    assert_eq!(parked["task"]["state"], "TASK_STATE_INPUT_REQUIRED", "{parked}");
    let task_id = parked["task"]["id"].as_str().unwrap().to_string();
    wait_for_deliveries(&node, &hook.log, 2);
    node.kill();

    // Nobody asks for the task: the restarted node finds it and pushes its end.
    let node = builder(&[port]).data_dir(data.path()).start();
    node.wait_until(
        "the task's end at the webhook",
        PATIENCE,
        Duration::from_millis(50),
        || std::fs::read_to_string(&hook.log).is_ok_and(|log| log.contains("TASK_STATE_FAILED")),
    );
    let got = distinct(&deliveries(&node, &hook.log, usize::MAX));
    assert_eq!(
        kinds(&got),
        [
            "task TASK_STATE_SUBMITTED",
            "status TASK_STATE_INPUT_REQUIRED",
            "status TASK_STATE_FAILED"
        ],
        "{got}"
    );
    assert_sent_as_the_sdk_sends(&got, &task_id, TOKEN);
    let stored = rpc(&node, "GetTask", json!({"id": task_id}));
    assert_eq!(
        stored["result"]["status"]["state"], "TASK_STATE_FAILED",
        "{stored}"
    );
}

#[test]
fn a_webhook_taken_off_the_allow_list_gets_nothing_more() {
    let port = support::free_port();
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let node = builder(&[port]).data_dir(data.path()).start();
    sdk(&node, "push-send", &["hello", &hook_url(port), TOKEN]);
    wait_for_outcomes(&node, "retried", 1);
    node.stop();

    let hook = Webhook::start(port, &logs.path().join("hook.log"), &[]);
    let node = builder(&[]).data_dir(data.path()).start();
    // Checked again before each attempt: the owed deliveries are refused, not sent.
    wait_for_outcomes(&node, "refused", 3);
    node.wait_until("nothing pending", PATIENCE, Duration::from_millis(50), || {
        pending(&node) == 0
    });
    assert_eq!(
        logged(&hook.log),
        0,
        "a delivery reached a host no longer allowed"
    );
    assert_eq!(outcomes(&node, "delivered"), 0);
}

/// `SendMessage` of "hello" with a webhook, raw JSON-RPC: the task's id.
fn hello_with_webhook(node: &TestNode, port: u16) -> String {
    let params = json!({
        "message": {"messageId": "m-push", "role": "ROLE_USER", "parts": [{"text": "hello"}]},
        "configuration": {"taskPushNotificationConfig": {
            "url": hook_url(port), "token": TOKEN,
            "authentication": {"scheme": "Bearer", "credentials": "cred-1"}}},
    });
    let answer = rpc(node, "SendMessage", params);
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
    answer["result"]["task"]["id"].as_str().unwrap().to_string()
}

#[test]
fn on_a_fleet_another_node_delivers_and_each_delivery_is_sent_once() {
    let database = agora_test_postgres::Postgres::shared().create_database();
    let port = support::free_port();
    let logs = tempfile::tempdir().unwrap();
    let a = builder(&[port]).on_database(&database).start();
    let b = builder(&[port]).on_database(&database).start();
    // The webhook is down while A holds what the task owes; A then stops.
    let first = hello_with_webhook(&a, port);
    wait_for_outcomes(&a, "retried", 1);
    a.stop();
    let hook = Webhook::start(port, &logs.path().join("hook.log"), &[]);
    wait_for_outcomes(&b, "delivered", 3);
    let got = deliveries(&b, &hook.log, 3);
    assert_a_completed_hello_pushed(&got, &first);

    // With two nodes looking at one outbox, each delivery is claimed by one.
    let c = builder(&[port]).on_database(&database).start();
    let second = hello_with_webhook(&c, port);
    let delivered = || outcomes(&b, "delivered") + outcomes(&c, "delivered");
    b.wait_until(
        "the second task's deliveries",
        PATIENCE,
        Duration::from_millis(50),
        || delivered() >= 6,
    );
    assert_eq!(logged(&hook.log), 6, "a delivery was sent twice");
    assert_eq!(delivered(), 6);
    let got = deliveries(&b, &hook.log, 6);
    let second_only = json!({"deliveries": got["deliveries"].as_array().unwrap()[3..].to_vec()});
    assert_eq!(
        kinds(&second_only),
        [
            "task TASK_STATE_SUBMITTED",
            "artifact answer",
            "status TASK_STATE_COMPLETED"
        ],
        "{got}"
    );
    assert_sent_as_the_sdk_sends(&second_only, &second, TOKEN);
}

#[test]
fn a_delivery_never_accepted_is_given_up_after_its_retry_time() {
    let port = support::free_port();
    let logs = tempfile::tempdir().unwrap();
    let hook = Webhook::start(port, &logs.path().join("hook.log"), &["--status", "503"]);
    let node = builder(&[port])
        .env("AGORA_A2A__PUSH_RETRY_FOR_MS", "3000")
        .start();
    sdk(&node, "push-send", &["hello", &hook_url(port), TOKEN]);
    // Each delivery is owed when the task's state is stored, so once the
    // first has run out of time, so have the two behind it.
    wait_for_outcomes(&node, "expired", 3);
    node.wait_until("nothing pending", PATIENCE, Duration::from_millis(50), || {
        pending(&node) == 0
    });
    assert_eq!(outcomes(&node, "delivered"), 0);
    assert!(outcomes(&node, "retried") >= 2);
    let got = deliveries(&node, &hook.log, usize::MAX);
    let kinds = kinds(&got);
    assert!(
        kinds.iter().all(|kind| kind == "task TASK_STATE_SUBMITTED"),
        "only the first was attempted: {got}"
    );
}

#[test]
fn deliveries_past_the_pending_bound_are_dropped_and_the_task_goes_on() {
    let port = support::free_port();
    let logs = tempfile::tempdir().unwrap();
    let node = builder(&[port]).env("AGORA_A2A__PUSH_MAX_PENDING", "1").start();
    // The webhook is down: the new task's delivery is owed, and fills the bound.
    let sent = sdk(&node, "push-send", &["hello", &hook_url(port), TOKEN]);
    assert_eq!(sent["task"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    wait_for_outcomes(&node, "dropped", 2);
    let hook = Webhook::start(port, &logs.path().join("hook.log"), &[]);
    wait_for_outcomes(&node, "delivered", 1);
    node.wait_until("nothing pending", PATIENCE, Duration::from_millis(50), || {
        pending(&node) == 0
    });
    let got = deliveries(&node, &hook.log, usize::MAX);
    assert_eq!(kinds(&got), ["task TASK_STATE_SUBMITTED"], "{got}");
}
