//! Scriptable handlers (issue 8) as HAI tools (the HAI specification §4–5): the
//! JavaScript port of `inspection-tools` (plugins/js-inspection-tools, built
//! here with componentize-js) serves the `hai-assistant` over the real `/ws`
//! exactly as the Rust plugin does, and tool calls (`host.call-tool` →
//! `Runtime::run_tool`) honour a tool plugin's warm instance policy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use agora_node::store::{Collection, Store, plugin_key};
use serde_json::{Value, json};

use crate::hai::{
    Client, approve_report_007, assert_search_turn, failed_tool_result, of_type, position, reject_report,
    request_report, session_id, streamed_text,
};
use crate::scripting::counter_build;
use crate::support::{self, TestNode, has_plugin, post_json};

const JS_TOOLS: &str = "js-inspection-tools";

/// `npm install` (following the committed lock) and `npm run build`, once per run.
fn built_js_tools() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = support::repo_root().join("plugins").join(JS_TOOLS);
        for args in [&["install", "--no-audit", "--no-fund"][..], &["run", "build"][..]] {
            let output = Command::new("npm")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("running npm");
            assert!(
                output.status.success(),
                "npm {args:?} in {JS_TOOLS} failed:\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        dir.join("dist").join("js_inspection_tools.wasm")
    })
}

/// A node with `plugins` and the inspection tools in `language` ("rust" or "js").
fn tools_node(language: &str, data_dir: &Path, plugins: &[&str], env: &[(&str, &str)]) -> TestNode {
    let mut builder = TestNode::builder().data_dir(data_dir);
    for plugin in plugins {
        builder = builder.plugin(plugin);
    }
    for (key, value) in env {
        builder = builder.env(key, *value);
    }
    let tools = if language == "js" {
        let wasm = std::fs::read(built_js_tools()).expect("the built JS tools");
        support::install_bytes(&data_dir.join("plugins"), JS_TOOLS, &wasm);
        JS_TOOLS
    } else {
        builder = builder.plugin("inspection-tools");
        "inspection-tools"
    };
    let node = builder.start();
    node.wait_for_health_within(tools, Duration::from_secs(300), |h| has_plugin(h, tools));
    node
}

/// What a tool_call frame says, without the ids that differ between runs.
fn tool_call(frame: &Value) -> Value {
    json!({
        "tool_name": frame["tool_name"],
        "status": frame["status"],
        "parameters": frame["parameters"],
        "result": frame["result"],
        "full_result": frame["metadata"]["result"],
        "risk_level": frame["metadata"]["risk_level"],
    })
}

/// One turn reduced to what must not depend on the tools' language.
fn transcript(frames: &[Value]) -> Value {
    json!({
        "tool_calls": of_type(frames, "tool_call").into_iter().map(tool_call).collect::<Vec<_>>(),
        "errors": of_type(frames, "error").into_iter().map(|f| json!([f["error_code"], f["details"]["tool_name"]])).collect::<Vec<_>>(),
        "answer": streamed_text(frames),
    })
}

/// hai.rs flows 2 and 3 on one node (searches without approval, reports
/// approved and rejected), checked as hai.rs checks them, plus a non-ASCII
/// search, a search with no match and a report the tool refuses; the turns'
/// transcripts in order.
async fn hai_scenario(node: &TestNode, label: &str) -> Vec<Value> {
    let session = session_id(label);
    let mut client = Client::connect(node).await;
    let mut turns = Vec::new();

    client
        .say(&session, "Search for restaurant food storage regulations")
        .await;
    let frames = client.turn().await;
    assert_search_turn(&frames);
    turns.push(transcript(&frames));

    // The tool refuses an empty query: a failed tool_call and a tool_execution_failed error.
    client.say(&session, "search").await;
    let frames = client.turn().await;
    assert!(failed_tool_result(&frames).contains("query is empty"));
    let error = position(&frames, |f| f["type"] == "error");
    assert_eq!(frames[error]["error_code"], "tool_execution_failed");
    turns.push(transcript(&frames));

    for content in [
        "Search for Kühlräume, hygiène des cuisines and Lebensmittel-Lagerung",
        "Search about zeppelins",
    ] {
        client.say(&session, content).await;
        let frames = client.turn().await;
        position(&frames, |f| {
            f["type"] == "tool_call" && f["status"] == "completed"
        });
        turns.push(transcript(&frames));
    }

    // High risk: nothing runs before the human approves.
    let (_, request) = request_report(&mut client, &session, "INS-2024-007").await;
    assert_eq!(request["tool_name"], "generate_inspection_report");
    assert_eq!(request["risk_level"], "high");
    assert!(
        request["tool_description"]
            .as_str()
            .unwrap()
            .contains("stored permanently")
    );
    turns.push(json!({"approval_request": [
        request["tool_name"], request["risk_level"], request["tool_description"], request["parameters"],
    ]}));
    let approval_id = request["approval_id"].as_str().unwrap().to_string();
    let frames = approve_report_007(&mut client, &approval_id).await;
    turns.push(transcript(&frames));

    // Rejected: the tool never starts and the answer quotes the feedback.
    let frames = reject_report(&mut client, &session, "INS-2024-008").await;
    turns.push(transcript(&frames));

    // Approved, but the tool refuses the id.
    let (_, request) = request_report(&mut client, &session, "INS-24-1").await;
    let approval_id = request["approval_id"].as_str().unwrap().to_string();
    client.approve(&approval_id, true, None).await;
    let frames = client.turn().await;
    assert!(failed_tool_result(&frames).contains("is not an inspection id"));
    turns.push(transcript(&frames));
    turns
}

/// The value a tool plugin stored under `key`, read from a stopped node's store.
fn stored(data_dir: &Path, plugin: &str, key: &str) -> Option<Value> {
    let store = Store::open(&data_dir.join("state")).expect("the stopped node's store");
    // The embedded store answers without waiting: no runtime needed to read it.
    let bytes: Vec<u8> =
        futures::executor::block_on(store.get(Collection::PluginKv, &plugin_key(plugin, key)))
            .expect("reading the store")?;
    Some(serde_json::from_slice(&bytes).expect("the stored report is JSON"))
}

#[tokio::test]
async fn javascript_tools_serve_the_hai_assistant_exactly_like_the_rust_plugin() {
    let (rust_dir, js_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rust = tools_node("rust", rust_dir.path(), &["hai-assistant"], &[]);
    let js = tools_node("js", js_dir.path(), &["hai-assistant"], &[]);
    let from_rust = hai_scenario(&rust, "tools-rust").await;
    let from_js = hai_scenario(&js, "tools-js").await;
    assert_eq!(from_js.len(), from_rust.len());
    for (turn, (js_turn, rust_turn)) in from_js.iter().zip(&from_rust).enumerate() {
        assert_eq!(
            js_turn, rust_turn,
            "turn {turn}: JS {js_turn:#} vs Rust {rust_turn:#}"
        );
    }

    // Both stored the approved report, and only that one, the same way.
    rust.stop();
    js.stop();
    let rust_report =
        stored(rust_dir.path(), "inspection-tools", "report:INS-2024-007").expect("Rust stored");
    let js_report = stored(js_dir.path(), JS_TOOLS, "report:INS-2024-007").expect("JS stored");
    assert_eq!(js_report["report"], rust_report["report"]);
    assert_eq!(
        js_report["report"], from_js[5]["tool_calls"][1]["full_result"],
        "the stored report is the one returned"
    );
    assert!(
        js_report["stored_at_ms"]
            .as_u64()
            .is_some_and(|at| at > 1_600_000_000_000)
    );
    for (dir, plugin) in [(&rust_dir, "inspection-tools"), (&js_dir, JS_TOOLS)] {
        assert_eq!(
            stored(dir.path(), plugin, "report:INS-2024-008"),
            None,
            "{plugin}"
        );
    }
}

// --- Tools called directly through the host, from the tool-caller fixture ---

/// The Agora routing key (protocol document hash) of the plugin named `plugin`, from `/health`.
pub(crate) fn agora_route(node: &TestNode, plugin: &str) -> String {
    let health = support::get(&node.url("/health")).json();
    health["plugins"]
        .as_array()
        .and_then(|plugins| plugins.iter().find(|p| p["name"] == plugin))
        .and_then(|p| p["routes"].as_array())
        .and_then(|routes| routes.iter().find_map(|r| r.as_str()?.strip_prefix("agora:")))
        .unwrap_or_else(|| panic!("no Agora route of {plugin} in {health}"))
        .to_string()
}

/// The `fixture-outbound-caller` plugin of `node`, loaded: a function that has it
/// POST "ping" to a URL through `host.outbound` and returns its answer body.
pub(crate) fn outbound_caller(node: &TestNode) -> impl Fn(String) -> serde_json::Value + '_ {
    node.wait_for_health("the outbound caller", |h| {
        support::has_plugin(h, "fixture-outbound-caller")
    });
    let hash = agora_route(node, "fixture-outbound-caller");
    move |url: String| {
        let reply = support::post_json(
            &node.url("/agora"),
            &serde_json::json!({"protocolHash": hash, "body": {"url": url, "body": "ping"}}),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()["body"].clone()
    }
}

fn tool_caller_hash(node: &TestNode) -> String {
    agora_route(node, "fixture-tool-caller")
}

/// Call `tool` through the host: the tool's text, or the error the host reported.
pub(crate) fn call_tool(
    node: &TestNode,
    hash: &str,
    tool: &str,
    arguments: &Value,
) -> Result<String, String> {
    let reply = post_json(
        &node.url("/agora"),
        &json!({"protocolHash": hash, "body": {"tool": tool, "arguments": arguments}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = &reply.json()["body"];
    match (body["output"].as_str(), body["error"].as_str()) {
        (Some(output), _) => Ok(output.to_string()),
        (None, Some(error)) => Err(error.to_string()),
        _ => panic!("unexpected reply {}", reply.body),
    }
}

fn search_arguments() -> Vec<Value> {
    vec![
        json!({"query": "restaurant food storage regulations", "limit": 3}),
        json!({"query": "food storage"}),
        json!({"query": "  Hygiene   and   PESTS in the kitchen!  ", "limit": 10}),
        json!({"query": "hand-washing; staff/kitchen", "limit": 0}),
        json!({"query": "haccp critical control", "limit": 99}),
        json!({"query": "zeppelin"}),
        json!({"query": "drinking water"}),
        json!({"query": "Kühlräume, hygiène des cuisines & Lebensmittel-Lagerung 食品 ÉTÉ"}),
        json!({"query": "sss storage"}),
        json!({"query": "storages storage storage cold COLD"}),
        json!({"query": "é".repeat(500)}),
        json!({"query": "food", "extra": true}),
        json!(["food storage", 2]),
        json!({"query": "   "}),
        json!({"query": "\u{3000}\u{a0}\n"}),
        json!({"query": "a".repeat(501)}),
        json!({}),
        json!({"query": null, "limit": null}),
    ]
}

fn report_arguments() -> Vec<Value> {
    vec![
        json!({"inspection_id": "INS-2024-001"}),
        json!({"inspection_id": "INS-2024-002", "notes": "Walk-in fridge at 9 °C"}),
        json!({"inspection_id": "INS-1999-999999", "notes": null}),
        json!({"inspection_id": "INS-0000-0", "notes": "ü".repeat(2100)}),
        json!({"inspection_id": "INS-24-1"}),
        json!({"inspection_id": "../etc"}),
        json!({"inspection_id": "ins-2024-001"}),
        json!({"inspection_id": "INS-2024-0012345"}),
        json!({"inspection_id": "INS-2024-001\n"}),
        json!({"inspection_id": "bad \"quoted\"\ttab é \u{1b}"}),
        json!({}),
    ]
}

/// Arguments the Rust plugin's serde structs reject: both refuse them, in their own words.
fn ill_typed_arguments() -> Vec<(&'static str, Value)> {
    vec![
        ("search_regulations", json!({"query": 5})),
        ("search_regulations", json!({"query": "food", "limit": -1})),
        ("search_regulations", json!("food")),
        ("search_regulations", json!(["food"])),
        ("generate_inspection_report", json!({"inspection_id": 7})),
        ("generate_inspection_report", json!(null)),
    ]
}

#[test]
fn javascript_tools_return_the_rust_plugins_results_for_the_same_arguments() {
    // Reports run without a human here: only critical tools need approval on these nodes.
    let env = [("AGORA_TOOLS__APPROVAL_THRESHOLD", "critical")];
    let (rust_dir, js_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rust = tools_node("rust", rust_dir.path(), &["fixture-tool-caller"], &env);
    let js = tools_node("js", js_dir.path(), &["fixture-tool-caller"], &env);
    let (rust_hash, js_hash) = (tool_caller_hash(&rust), tool_caller_hash(&js));
    let cases = search_arguments()
        .into_iter()
        .map(|a| ("search_regulations", a))
        .chain(
            report_arguments()
                .into_iter()
                .map(|a| ("generate_inspection_report", a)),
        );
    let (mut answered, mut refused) = (0, 0);
    for (tool, arguments) in cases {
        let from_rust = call_tool(&rust, &rust_hash, tool, &arguments);
        let from_js = call_tool(&js, &js_hash, tool, &arguments);
        // The same text: the same JSON, keys in the same order, the same error messages.
        assert_eq!(from_js, from_rust, "{tool} {arguments}");
        match from_rust {
            Ok(_) => answered += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        answered >= 15 && refused >= 10,
        "{answered} answered, {refused} refused"
    );
    for (tool, arguments) in ill_typed_arguments() {
        for node in [(&rust, &rust_hash), (&js, &js_hash)] {
            let error = call_tool(node.0, node.1, tool, &arguments).unwrap_err();
            assert!(
                error.starts_with(&format!("tool {tool} failed: bad arguments: ")),
                "{tool} {arguments}: {error}"
            );
        }
    }
}

// --- Warm instances through run_tool (fixture-warm-counter's `warm_count` tool) ---

struct CounterTool {
    node: TestNode,
    hash: String,
}

impl CounterTool {
    fn start(build: &[u8]) -> CounterTool {
        let node = TestNode::builder().plugin("fixture-tool-caller").start();
        support::install_bytes(&node.plugins_dir, "warm-counter", build);
        node.wait_for_health("the counter tool", |h| has_plugin(h, "fixture-warm-counter"));
        let hash = tool_caller_hash(&node);
        CounterTool { node, hash }
    }

    fn call(&self, what: &str) -> Result<u64, String> {
        let output = call_tool(&self.node, &self.hash, "warm_count", &json!({"what": what}))?;
        let value: Value = serde_json::from_str(&output).unwrap();
        Ok(value["count"].as_u64().unwrap())
    }

    fn counts(&self, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| self.call("count").unwrap_or_else(|e| panic!("{e}")))
            .collect()
    }
}

#[test]
fn tool_calls_reuse_a_warm_instance_and_a_fresh_tool_sees_no_state() {
    // Warm (documented behaviour): successive tool calls run in one instance and see its state.
    let tool = CounterTool::start(&counter_build("warm", 1000, 2, 60_000));
    assert_eq!(tool.counts(5), vec![1, 2, 3, 4, 5]);
    // A tool's own error is an answer, not a broken instance: it is kept.
    let failure = tool.call("failure").unwrap_err();
    assert_eq!(failure, "tool warm_count failed: typed failure at 6");
    assert_eq!(tool.counts(1), vec![7]);
    // The pool is the plugin's, shared by its tool calls and its requests.
    let reply = post_json(
        &tool.node.url("/agora"),
        &json!({"protocolHash": agora_route(&tool.node, "fixture-warm-counter"), "body": "count"}),
    );
    assert_eq!(reply.json()["body"]["count"], 8, "{}", reply.body);
    drop(tool);

    // Warm instances retire after their invocations, through run_tool too.
    let tool = CounterTool::start(&counter_build("warm", 3, 2, 60_000));
    assert_eq!(tool.counts(7), vec![1, 2, 3, 1, 2, 3, 1]);
    drop(tool);

    // Fresh: exactly the same code, and no tool call sees another's state.
    let tool = CounterTool::start(&counter_build("frsh", 1000, 2, 60_000));
    assert_eq!(tool.counts(5), vec![1, 1, 1, 1, 1]);
    assert_eq!(
        tool.call("failure").unwrap_err(),
        "tool warm_count failed: typed failure at 1"
    );
}

#[test]
fn a_trapping_warm_tool_instance_is_discarded_never_reused() {
    let tool = CounterTool::start(&counter_build("warm", 1000, 2, 60_000));
    assert_eq!(tool.counts(3), vec![1, 2, 3]);
    let trap = tool.call("trap").unwrap_err();
    assert!(
        trap.starts_with("tool warm_count failed: the plugin failed"),
        "{trap}"
    );
    // The next call runs in a new instance: the counter starts again.
    assert_eq!(tool.counts(2), vec![1, 2]);
    // The calling plugin is unaffected: its request got the tool's error as an answer.
    let health = support::get(&tool.node.url("/health")).json();
    assert_eq!(health["status"], "ok", "{health}");
    // Tool calls are counted in /metrics under transport "tool", the trap among the traps.
    let metrics = support::get(&tool.node.url("/metrics")).body;
    for line in [
        "agora_plugin_calls_total{transport=\"tool\",plugin=\"fixture-warm-counter\",outcome=\"ok\"} 5",
        "agora_plugin_calls_total{transport=\"tool\",plugin=\"fixture-warm-counter\",outcome=\"trap\"} 1",
        "agora_plugin_traps_total{transport=\"tool\",plugin=\"fixture-warm-counter\",outcome=\"trap\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
}
