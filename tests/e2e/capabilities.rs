//! Agent capabilities of plugins (world `agent` in plugin-sdk/wit): settings and
//! secrets, a language model, schedules — each through a real node, over real
//! sockets, with the `fixture-agent` plugin asking and a stand-in
//! OpenAI-compatible server (`tests/interop/llm/standin_server.py`, which checks
//! every request and answer with the `openai` package's own types) answering.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::hai::{Client, of_type, position, session_id, streamed_text};
use crate::support::{self, HttpReply, NodeBuilder, TestNode, document_hash, post_json};
use crate::uagents::{EchoAgent, LISTENER_SEED, NODE_SEED, Script, identity};

pub(crate) const FIXTURE: &str = "fixture-agent";
pub(crate) const DOCUMENT: &str = "name: Agent capabilities fixture\ndescription: settings, model and schedules of the agent world\nmultiround: false\n---\nbody: {\"op\": \"get\" | \"leak\" | \"chat\" | \"ticks\", …}.\n";
/// The stand-in's key, known to the node only through `llm.api_key_env`.
const KEY: &str = "sk-standin-0123456789";
const KEY_ENV: &str = "LLM_STANDIN_TEST_KEY";

fn ask(node: &TestNode, body: Value) -> HttpReply {
    post_json(
        &node.url("/agora"),
        &json!({"protocolHash": document_hash(DOCUMENT), "body": body}),
    )
}

/// The fixture's answer body (HTTP 200 expected).
fn answer(node: &TestNode, body: Value) -> Value {
    let reply = ask(node, body);
    assert_eq!(reply.status, 200, "{}\n{}", reply.body, node.log_text());
    reply.json()["body"].clone()
}

/// `/metrics` has each of `lines` (a line, or the start of one).
fn assert_metrics(node: &TestNode, lines: &[&str]) {
    let metrics = support::get(&node.url("/metrics")).body;
    for line in lines {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
}

fn python() -> PathBuf {
    support::python_venv("llm", &["openai==3.51.0", "aiohttp==3.14.5"])
}

/// The stand-in model server on a free port, and its base URL (`…/v1`).
pub(crate) fn standin() -> (Script, String) {
    let port = support::free_port();
    let script = Script::start_in(
        &python(),
        &support::repo_root().join("tests/interop/llm"),
        &["standin_server.py", &port.to_string(), "--key", KEY],
        &[],
    );
    script.wait_for("ready", Duration::from_secs(60));
    (script, format!("http://127.0.0.1:{port}"))
}

pub(crate) fn checks(standin: &str) -> Value {
    support::get_json(&format!("{standin}/checks")).expect("the stand-in's checks")
}

fn with_model(standin: &str) -> NodeBuilder {
    model_configured(TestNode::builder().plugin(FIXTURE), standin)
}

/// `builder` with the stand-in at `standin` as the node's default model, its key in the environment.
pub(crate) fn model_configured(builder: NodeBuilder, standin: &str) -> NodeBuilder {
    builder
        .env("AGORA_LLM__BASE_URL", format!("{standin}/v1"))
        .env("AGORA_LLM__MODEL", "standin-model")
        .env("AGORA_LLM__API_KEY_ENV", KEY_ENV)
        .env(KEY_ENV, KEY)
}

// --- settings and secrets ---

#[test]
fn settings_and_secrets_reach_the_plugin_and_secrets_never_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("token");
    std::fs::write(&secret_file, "file-secret-42\n").unwrap();
    let node = TestNode::builder()
        .plugin(FIXTURE)
        .env("AGORA_PLUGINS__FIXTURE-AGENT__CONFIG__GREETING", "hello")
        .env(
            "AGORA_PLUGINS__FIXTURE-AGENT__SECRETS__TOKEN__FILE",
            secret_file.to_str().unwrap(),
        )
        .env(
            "AGORA_PLUGINS__FIXTURE-AGENT__SECRETS__API__ENV",
            "PLUGIN_TEST_SECRET",
        )
        .env(
            "AGORA_PLUGINS__FIXTURE-AGENT__SECRETS__GONE__ENV",
            "PLUGIN_TEST_UNSET_SECRET",
        )
        .env("PLUGIN_TEST_SECRET", "env-secret-7")
        .start();
    assert_eq!(
        answer(&node, json!({"op": "get", "key": "greeting"}))["value"],
        "hello"
    );
    assert_eq!(
        answer(&node, json!({"op": "get", "key": "token"}))["value"],
        "file-secret-42"
    );
    assert_eq!(
        answer(&node, json!({"op": "get", "key": "api"}))["value"],
        "env-secret-7"
    );
    assert_eq!(
        answer(&node, json!({"op": "get", "key": "absent"}))["value"],
        Value::Null
    );
    // A rotated secret file is read again at the next call.
    std::fs::write(&secret_file, "file-secret-43").unwrap();
    assert_eq!(
        answer(&node, json!({"op": "get", "key": "token"}))["value"],
        "file-secret-43"
    );

    // An unreadable secret is an error naming where it was looked for.
    let reply = ask(&node, json!({"op": "get", "key": "gone"}));
    assert_eq!(reply.status, 500, "{}", reply.body);
    assert!(reply.body.contains("PLUGIN_TEST_UNSET_SECRET"), "{}", reply.body);

    // The plugin logs, prints and fails with a secret: the node shows none of it.
    let reply = ask(&node, json!({"op": "leak", "key": "api"}));
    assert!(reply.body.contains("failing with [redacted]"), "{}", reply.body);
    assert!(!reply.body.contains("env-secret-7"), "{}", reply.body);
    // A plain setting is no secret: it is shown as it is.
    let reply = ask(&node, json!({"op": "leak", "key": "greeting"}));
    assert!(reply.body.contains("failing with hello"), "{}", reply.body);
    node.wait_until(
        "the plugin's lines in the log",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let log = node.log_text();
            log.contains("the value is [redacted]") && log.contains("printed: [redacted]")
        },
    );
    let log = node.log_text();
    assert!(
        !log.contains("env-secret-7") && !log.contains("file-secret-4"),
        "{log}"
    );
}

#[test]
fn a_changed_configuration_file_applies_to_the_next_call_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agora.toml");
    let settings = |greeting: &str| format!("[plugins.fixture-agent.config]\ngreeting = \"{greeting}\"\n");
    std::fs::write(&config, settings("first")).unwrap();
    let node = TestNode::builder()
        .plugin(FIXTURE)
        .arg("--config")
        .arg(config.to_str().unwrap())
        .start();
    let greeting = || answer(&node, json!({"op": "get", "key": "greeting"}))["value"].clone();
    assert_eq!(greeting(), "first");

    // Saved the way editors save: a new file renamed over the old one.
    let staged = dir.path().join(".agora.toml.swp");
    std::fs::write(&staged, settings("second")).unwrap();
    std::fs::rename(&staged, &config).unwrap();
    node.wait_until(
        "the new setting",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || greeting() == "second",
    );

    // A file that does not parse changes nothing, and the log says why.
    std::fs::write(&config, "[plugins.fixture-agent.config\n").unwrap();
    node.wait_for_log("configuration file not applied");
    assert_eq!(greeting(), "second");

    // A change outside the plugin settings is not half applied: it waits for a restart.
    std::fs::write(
        &config,
        format!("{}[plugins]\nmax_tool_depth = 2\n", settings("third")),
    )
    .unwrap();
    node.wait_until(
        "the third setting",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || greeting() == "third",
    );
    // Logged just after the settings are swapped in, so possibly after the answer above.
    node.wait_for_log("apply after a restart");
}

#[test]
fn an_empty_secret_source_or_an_unset_model_key_stops_start_up_naming_the_key() {
    for (key, value) in [
        ("AGORA_PLUGINS__FIXTURE-AGENT__SECRETS__T__ENV", ""),
        ("AGORA_LLM__API_KEY_ENV", "NO_SUCH_MODEL_KEY_VARIABLE"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_agora-node"))
            .arg("serve")
            .env("AGORA_DATA_DIR", dir.path())
            .env("AGORA_LISTEN", format!("127.0.0.1:{}", support::free_port()))
            .env("AGORA_LLM__BASE_URL", "http://127.0.0.1:9/v1")
            .env("AGORA_LLM__MODEL", "m")
            .env(key, value)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{key}: {stderr}");
        let named = if key.contains("SECRETS") {
            "plugins.NAME.secrets"
        } else {
            "llm.api_key_env"
        };
        assert!(stderr.contains(named), "{key}: {stderr}");
    }
}

// --- the language model ---

#[test]
fn a_plugin_streams_the_model_s_answer_and_the_node_sends_the_protocol_s_request() {
    let (_server, base) = standin();
    let node = with_model(&base).start();
    let reply = answer(&node, json!({"op": "chat", "text": "hello there model"}));
    assert_eq!(reply["text"], "You said: hello there model", "{reply}");
    assert!(reply["chunks"].as_u64().unwrap() >= 4, "word by word: {reply}");
    assert_eq!(reply["finish_reason"], "stop");
    assert!(reply["usage"]["input"].as_u64().unwrap() >= 3, "{reply}");

    // What the stand-in accepted, each body checked against openai's own request type.
    let accepted = checks(&base)["accepted"].as_array().unwrap().clone();
    assert_eq!(accepted.len(), 1, "{accepted:?}");
    let sent = &accepted[0];
    assert_eq!(sent["authorization"], true);
    assert_eq!(sent["body"]["model"], "standin-model");
    assert_eq!(sent["body"]["stream"], true);
    assert_eq!(
        sent["body"]["messages"],
        json!([{"role": "user", "content": "hello there model"}])
    );
    assert!(checks(&base)["refused"].as_array().unwrap().is_empty());

    // Tool calls arrive in fragments and reach the plugin whole.
    let tool = json!({"name": "lookup", "description": "looks up", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}});
    let reply = answer(
        &node,
        json!({"op": "chat", "text": "[tool lookup {\"q\": \"food storage\"}]", "tools": [tool]}),
    );
    assert_eq!(reply["finish_reason"], "tool_calls", "{reply}");
    let call = &reply["tool_calls"][0];
    assert_eq!(call["name"], "lookup");
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"q": "food storage"})
    );
    assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");

    // Counted per plugin.
    assert_metrics(
        &node,
        &[
            r#"agora_llm_calls_total{plugin="fixture-agent",outcome="ok"} 2"#,
            r#"agora_llm_tokens_total{plugin="fixture-agent",direction="output"}"#,
        ],
    );
    assert!(!node.log_text().contains(KEY), "the key is never logged");
}

/// The fixture's chat of `text`: the error it reported and its kind.
fn chat_error(node: &TestNode, body: Value) -> (String, String) {
    let reply = answer(node, body);
    let error = reply["error"]
        .as_str()
        .unwrap_or_else(|| panic!("an error: {reply}"));
    (error.to_string(), reply["kind"].as_str().unwrap().to_string())
}

#[test]
fn every_model_failure_is_an_error_the_plugin_can_read_never_a_hang() {
    let (_server, base) = standin();
    let node = with_model(&base)
        .env("AGORA_LLM__IDLE_TIMEOUT_MS", "1500")
        .start();
    let chat = |text: &str| chat_error(&node, json!({"op": "chat", "text": text}));

    let (error, kind) = chat("[error 500]");
    assert!(
        kind.contains("Failed") && error.contains("HTTP 500") && error.contains("stand-in error 500"),
        "{kind}: {error}"
    );
    let (error, kind) = chat("[error 429]");
    assert!(
        kind.contains("Failed") && error.contains("rate limiting"),
        "{kind}: {error}"
    );
    let (error, kind) = chat("[stall]");
    assert!(kind.contains("TimedOut"), "{kind}: {error}");
    let (error, kind) = chat("[drop]");
    assert!(
        kind.contains("Failed") && error.contains("broke off"),
        "{kind}: {error}"
    );
    let (error, kind) = chat("[garbage]");
    assert!(
        kind.contains("Failed") && error.contains("not its protocol"),
        "{kind}: {error}"
    );
    let (error, kind) = chat_error(
        &node,
        json!({"op": "chat", "text": "hi", "provider": "elsewhere"}),
    );
    assert!(
        kind.contains("NotDeclared") && error.contains("elsewhere"),
        "{kind}: {error}"
    );
    // Slow but within the idle timeout: answered.
    let slow = answer(&node, json!({"op": "chat", "text": "[slow 500] in time"}));
    assert_eq!(slow["text"], "You said: [slow 500] in time", "{slow}");
    // After all that the model still answers.
    assert_eq!(
        answer(&node, json!({"op": "chat", "text": "still there"}))["text"],
        "You said: still there"
    );
    assert!(!node.log_text().contains(KEY));
}

#[test]
fn the_node_s_key_and_limits_hold_for_every_plugin_call() {
    let (_server, base) = standin();
    // A key the stand-in does not know: the provider's refusal, without the key in it.
    let node = with_model(&base).env(KEY_ENV, "sk-wrong-key-value").start();
    let (error, _) = chat_error(&node, json!({"op": "chat", "text": "hi"}));
    assert!(
        error.contains("refused the node's key") && error.contains("HTTP 401"),
        "{error}"
    );
    assert!(!error.contains("sk-wrong-key-value") && !node.log_text().contains("sk-wrong-key-value"));
    drop(node);

    let node = with_model(&base).env("AGORA_LLM__CALLS_PER_MINUTE", "2").start();
    for _ in 0..2 {
        assert!(answer(&node, json!({"op": "chat", "text": "hi"}))["error"].is_null());
    }
    let (error, kind) = chat_error(&node, json!({"op": "chat", "text": "hi"}));
    assert!(
        kind.contains("Limited") && error.contains("calls_per_minute"),
        "{kind}: {error}"
    );
    assert_metrics(
        &node,
        &[r#"agora_llm_calls_total{plugin="fixture-agent",outcome="limited"} 1"#],
    );
}

#[test]
fn the_model_s_size_time_and_concurrency_bounds_hold_and_each_is_named() {
    let (_server, base) = standin();
    let node = with_model(&base)
        .env("AGORA_LLM__MAX_REQUEST_BYTES", "4000")
        .env("AGORA_LLM__MAX_ANSWER_BYTES", "200")
        .env("AGORA_LLM__MAX_CONCURRENT_CALLS", "1")
        .env("AGORA_LLM__IDLE_TIMEOUT_MS", "60000")
        .env("AGORA_LLM__TIMEOUT_MS", "2500")
        .start();
    let chat = |text: &str| chat_error(&node, json!({"op": "chat", "text": text}));

    // Too large to send: refused before it leaves the node.
    let sent_before = checks(&base)["accepted"].as_array().unwrap().len();
    let (error, kind) = chat(&"x".repeat(5000));
    assert!(
        kind.contains("BadRequest") && error.contains("llm.max_request_bytes"),
        "{kind}: {error}"
    );
    assert_eq!(checks(&base)["accepted"].as_array().unwrap().len(), sent_before);

    // An answer growing past its bound ends as a failure; what came before it is kept.
    let long = (0..60).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
    let reply = answer(&node, json!({"op": "chat", "text": long}));
    let error = reply["error"].as_str().unwrap_or_else(|| panic!("{reply}"));
    assert!(
        reply["kind"].as_str().unwrap().contains("Failed") && error.contains("llm.max_answer_bytes"),
        "{reply}"
    );
    let partial = reply["partial"].as_str().unwrap();
    assert!(
        partial.starts_with("You said: word0") && partial.len() <= 200,
        "{partial}"
    );

    // A stream that trickles nothing after its first chunk stays within the idle
    // timeout, but not within the whole answer's: it ends at `llm.timeout_ms`.
    // Meanwhile it holds the node's one model slot, so a second call is refused at once.
    std::thread::scope(|scope| {
        let holder = scope.spawn(|| chat("[stall] holding the only slot"));
        node.wait_until(
            "the stalled call to reach the model",
            Duration::from_secs(20),
            Duration::from_millis(50),
            || {
                checks(&base)["accepted"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a.to_string().contains("holding the only slot"))
            },
        );
        let (error, kind) = chat("one more");
        assert!(
            kind.contains("Limited") && error.contains("llm.max_concurrent_calls"),
            "{kind}: {error}"
        );
        let (error, kind) = holder.join().unwrap();
        assert!(
            kind.contains("TimedOut") && error.contains("llm.timeout_ms"),
            "{kind}: {error}"
        );
    });
    // The slot is free again once the stalled answer has ended.
    assert_eq!(
        answer(&node, json!({"op": "chat", "text": "free"}))["text"],
        "You said: free"
    );
}

#[test]
fn a_plugin_s_tokens_of_the_day_are_kept_across_a_restart() {
    let (_server, base) = standin();
    let data = tempfile::tempdir().unwrap();
    let node = || {
        with_model(&base)
            .env("AGORA_LLM__TOKENS_PER_DAY", "5")
            .data_dir(data.path())
            .start()
    };
    let first = node();
    // "one two three" costs 3 prompt + 5 answer tokens by the stand-in's count: over the 5.
    assert_eq!(
        answer(&first, json!({"op": "chat", "text": "one two three"}))["text"],
        "You said: one two three"
    );
    // Counted as the answer ended, before the plugin read its end: the next call is refused.
    let (error, _) = chat_error(&first, json!({"op": "chat", "text": "again"}));
    assert!(error.contains("llm.tokens_per_day (5)"), "{error}");
    drop(first);

    let restarted = node();
    let (error, kind) = chat_error(&restarted, json!({"op": "chat", "text": "after a restart"}));
    assert!(
        kind.contains("Limited") && error.contains("llm.tokens_per_day"),
        "{kind}: {error}"
    );
}

#[test]
fn without_a_model_configured_a_plugin_is_told_so_at_once() {
    let node = TestNode::builder().plugin(FIXTURE).start();
    let (error, kind) = chat_error(&node, json!({"op": "chat", "text": "hi"}));
    assert!(
        kind.contains("NotConfigured") && error.contains("[llm]"),
        "{kind}: {error}"
    );
}

/// One HAI turn of the model-driven assistant up to its approval request.
async fn until_approval(client: &mut Client, session: &str, inspection: &str) -> Value {
    let arguments = json!({"inspection_id": inspection}).to_string();
    client
        .say(
            session,
            &format!("Please file it. [tool generate_inspection_report {arguments}]"),
        )
        .await;
    let frames = client.until(|f| f["type"] == "tool_approval_request").await;
    assert!(
        of_type(&frames, "tool_call").is_empty(),
        "nothing runs before approval: {frames:#?}"
    );
    frames.last().unwrap().clone()
}

#[tokio::test]
async fn the_model_driven_assistant_streams_and_its_risky_tool_waits_for_the_human() {
    let (_server, base) = standin();
    let node = with_model(&base)
        .plugin("hai-assistant")
        .plugin("inspection-tools")
        .start();
    let session = session_id("llm-hai");
    let mut client = Client::connect(&node).await;

    // A plain message: the model's words, streamed as they arrive.
    client.say(&session, "good morning assistant").await;
    let frames = client.turn().await;
    assert_eq!(streamed_text(&frames), "You said: good morning assistant");

    // The model asks for the high-risk tool: the human approves, the tool runs, and its
    // result goes back to the model, whose answer quotes it.
    let request = until_approval(&mut client, &session, "INS-2024-007").await;
    assert_eq!(request["tool_name"], "generate_inspection_report");
    assert_eq!(request["parameters"]["inspection_id"], "INS-2024-007");
    client
        .approve(request["approval_id"].as_str().unwrap(), true, None)
        .await;
    let frames = client.turn().await;
    let completed = position(&frames, |f| {
        f["type"] == "tool_call" && f["status"] == "completed"
    });
    assert!(
        frames[completed]["result"].to_string().contains("INS-2024-007"),
        "{frames:#?}"
    );
    let text = streamed_text(&frames);
    assert!(
        text.starts_with("Tool result:") && text.contains("INS-2024-007"),
        "{text}"
    );

    // Rejected: the tool never runs, and the human's feedback reaches the model.
    let request = until_approval(&mut client, &session, "INS-2024-008").await;
    client
        .approve(
            request["approval_id"].as_str().unwrap(),
            false,
            Some("not before the audit"),
        )
        .await;
    let frames = client.turn().await;
    assert!(
        !frames
            .iter()
            .any(|f| f["type"] == "tool_call" && f["status"] == "completed"),
        "{frames:#?}"
    );
    let text = streamed_text(&frames);
    assert!(
        text.contains("rejected") && text.contains("not before the audit"),
        "{text}"
    );

    // The model saw the whole conversation, with the tools the plugins offer.
    let accepted = checks(&base)["accepted"].as_array().unwrap().clone();
    let last = &accepted.last().unwrap()["body"];
    let offered: Vec<&str> = last["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        offered.contains(&"generate_inspection_report") && offered.contains(&"search_regulations"),
        "{offered:?}"
    );
    let roles: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles.first(), Some(&"system"));
    assert!(roles.iter().filter(|r| **r == "user").count() >= 3, "{roles:?}");
    assert_eq!(roles.last(), Some(&"tool"), "{roles:?}");
}

#[tokio::test]
async fn a_model_failure_reaches_the_human_as_an_error_frame() {
    let (_server, base) = standin();
    let node = with_model(&base)
        .env("AGORA_LLM__IDLE_TIMEOUT_MS", "1500")
        .plugin("hai-assistant")
        .start();
    let session = session_id("llm-hai-error");
    let mut client = Client::connect(&node).await;
    for text in ["[error 500] hi", "[stall] hi"] {
        client.say(&session, text).await;
        let frames = client.until(|f| f["type"] == "error").await;
        let error = frames.last().unwrap();
        assert_eq!(error["error_code"], "assistant_failed", "{error}");
        assert!(error.to_string().contains("language model"), "{error}");
    }
}

// --- schedules ---

#[test]
fn schedules_run_one_at_a_time_and_stop_with_their_plugin() {
    let node = TestNode::builder()
        .plugin(FIXTURE)
        .env("AGORA_PLUGINS__FIXTURE-AGENT__CONFIG__SLOW_TICK_MS", "2500")
        .start();
    let ticks = || answer(&node, json!({"op": "ticks"}));
    node.wait_until(
        "three runs of the count schedule",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || ticks()["count"].as_u64().unwrap() >= 3,
    );
    // The slow schedule's runs outlast its interval: the ticks between are skipped, not queued.
    let metrics = |node: &TestNode| support::get(&node.url("/metrics")).body;
    node.wait_until(
        "a skipped slow tick",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || metrics(&node).contains(r#"agora_schedule_runs_total{plugin="fixture-agent",outcome="skipped"}"#),
    );
    assert_metrics(
        &node,
        &[r#"agora_schedule_runs_total{plugin="fixture-agent",outcome="ok"}"#],
    );
    let counted = ticks();
    assert!(
        counted["slow"].as_u64().unwrap() < counted["count"].as_u64().unwrap(),
        "{counted}"
    );

    // Removed: its timers stop (the kv data goes with the install, so count the log's runs).
    std::fs::remove_file(node.plugins_dir.join(format!("{FIXTURE}.wasm"))).unwrap();
    node.wait_for_health("the fixture removed", |h| !support::has_plugin(h, FIXTURE));
    std::thread::sleep(Duration::from_secs(3));
    let runs = |text: &str| {
        text.lines()
            .find(|l| l.starts_with(r#"agora_schedule_runs_total{plugin="fixture-agent",outcome="ok"}"#))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = runs(&metrics(&node));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(runs(&metrics(&node)), before, "no runs after the plugin went");
}

// --- outgoing HTTP (wasi:http) ---

/// What a [`feed_server`] answers, and the `authorization` header it last saw.
#[derive(Clone, Default)]
struct Feed {
    body: std::sync::Arc<std::sync::Mutex<String>>,
    authorization: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl Feed {
    fn new(body: &str) -> Feed {
        let feed = Feed::default();
        feed.set(body);
        feed
    }
    fn set(&self, body: &str) {
        *self.body.lock().unwrap() = body.to_string();
    }
}

/// A one-route HTTP server on loopback answering every `GET` with the feed's body; its port.
fn feed_server(feed: Feed) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            use std::io::{BufRead, Write};
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            // The request line and headers, up to the blank line.
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("authorization:") {
                    *feed.authorization.lock().unwrap() = Some(value.trim().to_string());
                }
                line.clear();
            }
            let body = feed.body.lock().unwrap().clone();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn outgoing_http_reaches_only_what_the_plugin_declares_and_the_operator_allows() {
    let port = feed_server(Feed::new("feed v1"));
    let undeclared = feed_server(Feed::new("never read"));
    let origin = format!("http://127.0.0.1:{port}");
    let node = TestNode::builder()
        .plugin(FIXTURE)
        .env("AGORA_PLUGINS__FIXTURE-AGENT__CONFIG__FETCH_ORIGIN", &origin)
        .env(
            "AGORA_OUTBOUND__ALLOWED_HOSTS",
            format!(r#"["127.0.0.1:{port}", "127.0.0.1:{undeclared}"]"#),
        )
        .start();
    let fetched = answer(
        &node,
        json!({"op": "fetch", "url": format!("{origin}/feed.json")}),
    );
    assert_eq!(fetched["status"], 200, "{fetched}");
    assert_eq!(fetched["body"], "feed v1");

    // Listed by the operator but not declared by the plugin: refused, naming where.
    let refused = answer(
        &node,
        json!({"op": "fetch", "url": format!("http://127.0.0.1:{undeclared}/")}),
    );
    let error = refused["error"].as_str().unwrap_or_else(|| panic!("{refused}"));
    assert!(
        error.contains("HTTP request denied") && error.contains(&format!("127.0.0.1:{undeclared}")),
        "{error}"
    );
    assert_metrics(
        &node,
        &[
            r#"agora_plugin_http_requests_total{plugin="fixture-agent",outcome="ok"} 1"#,
            r#"agora_plugin_http_requests_total{plugin="fixture-agent",outcome="denied"} 1"#,
        ],
    );
    drop(node);

    // Declared by the plugin but not listed by the operator: refused too.
    let node = TestNode::builder()
        .plugin(FIXTURE)
        .env("AGORA_PLUGINS__FIXTURE-AGENT__CONFIG__FETCH_ORIGIN", &origin)
        .start();
    let refused = answer(
        &node,
        json!({"op": "fetch", "url": format!("{origin}/feed.json")}),
    );
    let error = refused["error"].as_str().unwrap_or_else(|| panic!("{refused}"));
    assert!(error.contains("outbound.allowed_hosts"), "{error}");
}

/// What the feed-watcher example serves (`protocols/feed-watcher.md`): what it saw, what it told.
fn feed_watcher_saw(node: &TestNode) -> Value {
    let document = std::fs::read_to_string(support::repo_root().join("protocols/feed-watcher.md")).unwrap();
    let reply = post_json(
        &node.url("/agora"),
        &json!({"protocolHash": document_hash(&document), "body": {}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["body"].clone()
}

#[test]
fn the_feed_watcher_example_polls_its_configured_feed_with_its_secret() {
    let feed = Feed::new("first edition");
    let port = feed_server(feed.clone());
    let url = format!("http://127.0.0.1:{port}/feed.txt");
    let node = TestNode::builder()
        .plugin("feed-watcher")
        .env("AGORA_PLUGINS__FEED-WATCHER__CONFIG__FEED_URL", &url)
        .env("AGORA_PLUGINS__FEED-WATCHER__CONFIG__POLL_EVERY", "1s")
        .env(
            "AGORA_PLUGINS__FEED-WATCHER__SECRETS__FEED_TOKEN__ENV",
            "FEED_WATCHER_TEST_TOKEN",
        )
        .env("FEED_WATCHER_TEST_TOKEN", "feed-token-99")
        .env(
            "AGORA_OUTBOUND__ALLOWED_HOSTS",
            format!(r#"["127.0.0.1:{port}"]"#),
        )
        .start();
    let seen = || feed_watcher_saw(&node);
    node.wait_until(
        "the first poll",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || seen()["content"] == "first edition",
    );
    assert_eq!(seen()["feed"], url.as_str());
    assert_eq!(seen()["changes"], 1);
    assert_eq!(
        feed.authorization.lock().unwrap().as_deref(),
        Some("bearer feed-token-99")
    );
    feed.set("second edition");
    node.wait_until(
        "the change",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || seen()["content"] == "second edition",
    );
    assert_eq!(seen()["changes"], 2, "{}", seen());
    assert!(!node.log_text().contains("feed-token-99"));
}

#[test]
fn the_feed_watcher_tells_a_real_uagent_of_each_change_signed_as_the_node() {
    let feed = Feed::new("first edition");
    let feed_port = feed_server(feed.clone());
    let url = format!("http://127.0.0.1:{feed_port}/feed.txt");
    // The agent's replies to the node go nowhere: no endpoint is known for it.
    let agent = EchoAgent::start(LISTENER_SEED, &json!({}));
    let node = TestNode::builder()
        .plugin("feed-watcher")
        .env("AGORA_UAGENTS__SEED", NODE_SEED)
        .env("AGORA_PLUGINS__FEED-WATCHER__CONFIG__FEED_URL", &url)
        .env("AGORA_PLUGINS__FEED-WATCHER__CONFIG__POLL_EVERY", "1s")
        .env(
            "AGORA_PLUGINS__FEED-WATCHER__CONFIG__NOTIFY_AGENT",
            identity(LISTENER_SEED).address(),
        )
        .env(
            "AGORA_PLUGINS__FEED-WATCHER__CONFIG__NOTIFY_ENDPOINT",
            agent.url(),
        )
        .env(
            "AGORA_OUTBOUND__ALLOWED_HOSTS",
            format!(r#"["127.0.0.1:{feed_port}", "127.0.0.1:{}"]"#, agent.port),
        )
        .start();
    let seen = || feed_watcher_saw(&node);
    node.wait_until(
        "the first notification",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || seen()["notified"] == 1,
    );
    feed.set("second edition");
    node.wait_until(
        "the second notification",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || seen()["notified"] == 2,
    );
    assert_eq!(seen()["notify_error"], Value::Null, "{}", seen());
    // What the real uAgent verified and handed to its `Message` handler.
    let received = agent.received_at_least(2);
    let texts: Vec<&str> = received.iter().filter_map(|r| r["text"].as_str()).collect();
    assert_eq!(
        texts,
        [
            format!("{url} changed: first edition"),
            format!("{url} changed: second edition")
        ],
        "{received:?}"
    );
    let node_address = identity(NODE_SEED).address().to_string();
    assert!(
        received.iter().all(|r| r["sender"] == node_address.as_str()),
        "{received:?}"
    );
    // Each change is its own session.
    assert_ne!(received[0]["session"], received[1]["session"]);
}
