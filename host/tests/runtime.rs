//! The plugin runtime in process: load, invoke, reload and limits, with no
//! sockets and no node around it, so a change to `host/src/runtime` has a
//! test loop of seconds (`cargo test -p agora-node --test runtime`).
//!
//! Each test builds its own [`Runtime`] on a temporary store and a temporary
//! plugins folder, fed with the plugins `./x test --no-run` built under
//! `target/plugins/wasm32-wasip2/plugin/`. Compiled components are cached in
//! `target/runtime-test-cache`, so only the first run pays for cranelift.
//! What the transports add on top (wire shapes, HTTP limits) is the e2e suite's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agora_node::Config;
use agora_node::metrics::Metrics;
use agora_node::runtime::{
    ApprovalAsked, ApprovalOutcome, Approvals, Approver, Call, CallEvent, Exchange, InvokeError,
    LoadedPlugin, Phase, Risk, Runtime, TransportKind,
};
use agora_node::store::Store;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// The built `.wasm` of a plugin or fixture crate (package name, e.g. "unit-converter").
fn plugin_wasm(package: &str) -> PathBuf {
    let path = repo_root()
        .join("target/plugins/wasm32-wasip2/plugin")
        .join(format!("{}.wasm", package.replace('-', "_")));
    assert!(
        path.exists(),
        "{} is missing: build the plugins with `./x test --no-run`",
        path.display()
    );
    path
}

fn plugin_bytes(package: &str) -> Vec<u8> {
    std::fs::read(plugin_wasm(package)).expect("reading a built plugin")
}

/// A runtime of its own over a temporary store and plugins folder.
struct TestRuntime {
    runtime: Runtime,
    plugins: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestRuntime {
    /// The default configuration with a small instance pool, changed by `tune`.
    fn new(tune: impl FnOnce(&mut Config)) -> TestRuntime {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let mut config = Config::defaults();
        config.data_dir = dir.path().to_path_buf();
        config.plugins.dir = dir.path().join("plugins");
        config.plugins.cache_dir = repo_root().join("target/runtime-test-cache");
        config.plugins.max_instances = 16;
        config.plugins.max_parked_calls = 4;
        tune(&mut config);
        std::fs::create_dir_all(&config.plugins.dir).expect("the plugins folder");
        let plugins = config.plugins.dir.clone();
        let store = Store::temporary().expect("a temporary store");
        let runtime = Runtime::new(Arc::new(config), store, Metrics::new()).expect("a runtime");
        TestRuntime {
            runtime,
            plugins,
            _dir: dir,
        }
    }

    /// A runtime serving `packages`, loaded as at start-up.
    async fn serving(packages: &[&str], tune: impl FnOnce(&mut Config)) -> TestRuntime {
        let test = TestRuntime::new(tune);
        for package in packages {
            test.install(package, &plugin_bytes(package));
        }
        test.runtime.load_all().await;
        test
    }

    /// Write `bytes` as `{name}.wasm` the way a user installs one: write, then rename.
    fn install(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let target = self.plugins.join(format!("{name}.wasm"));
        let temp = self.plugins.join(format!(".{name}.wasm.tmp"));
        std::fs::write(&temp, bytes).expect("writing a plugin");
        std::fs::rename(&temp, &target).expect("renaming a plugin into place");
        target
    }

    fn plugin(&self, name: &str) -> Arc<LoadedPlugin> {
        self.runtime
            .registry()
            .by_name(name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not loaded: {:?}", self.status()))
    }

    fn status(&self) -> Value {
        serde_json::to_value(self.runtime.status()).expect("status serialises")
    }

    /// One call of `plugin` with `body`, as the Agora transport makes it.
    async fn call(&self, plugin: &str, body: Value) -> Result<Value, InvokeError> {
        self.call_in(plugin, body, Exchange::new()).await
    }

    async fn call_in(&self, plugin: &str, body: Value, exchange: Exchange) -> Result<Value, InvokeError> {
        let plugin = self.plugin(plugin);
        invoke(&self.runtime, &plugin, body, exchange).await
    }
}

/// One call of `plugin`, its reply parsed as JSON. The route is the plugin's
/// first protocol's hash, or its arena league.
async fn invoke(
    runtime: &Runtime,
    plugin: &Arc<LoadedPlugin>,
    body: Value,
    exchange: Exchange,
) -> Result<Value, InvokeError> {
    let (transport, route) = match plugin.manifest.protocols.first() {
        Some(protocol) => (TransportKind::Agora, protocol.hash.clone()),
        None => (TransportKind::Arena, plugin.manifest.routes().join(",")),
    };
    let call = Call {
        transport,
        phase: Phase::Handle,
        route,
        sender: None,
        conversation: None,
        body: body.to_string(),
    };
    let reply = runtime.invoke(plugin, call, exchange).await?;
    Ok(serde_json::from_str(&reply).unwrap_or(Value::String(reply)))
}

// ---- load and invoke ------------------------------------------------------

#[tokio::test]
async fn a_loaded_plugin_answers_a_call_and_shows_in_status() {
    let test = TestRuntime::serving(&["unit-converter"], |_| {}).await;

    let reply = test
        .call("unit-converter", json!({"value": 10, "from": "km", "to": "mi"}))
        .await
        .expect("the converter answers");
    assert_eq!(reply["unit"], "mi", "{reply}");
    let miles = reply["value"].as_f64().expect("a number of miles");
    assert!((miles - 6.21371).abs() < 1e-4, "{reply}");

    let status = test.status();
    let lines = status.as_array().expect("one line per plugin file");
    assert_eq!(lines.len(), 1, "{status}");
    assert_eq!(lines[0]["name"], "unit-converter", "{status}");
    assert!(lines[0]["error"].is_null(), "{status}");
    assert!(
        lines[0]["routes"].as_array().is_some_and(|r| !r.is_empty()),
        "{status}"
    );
}

#[tokio::test]
async fn the_start_up_load_shows_each_file_pending_then_loaded_or_failed() {
    let test = TestRuntime::new(|_| {});
    test.install("unit-converter", &plugin_bytes("unit-converter"));
    test.install("junk", b"\0asm not really");
    assert!(!test.runtime.is_starting());
    assert!(test.runtime.not_found_yet().is_ok());

    // The folder is listed when the load is asked for; nothing compiles until it is awaited.
    let load = test.runtime.load_all();
    assert!(test.runtime.is_starting());
    assert!(matches!(test.runtime.not_found_yet(), Err(InvokeError::Starting)));
    let status = test.status();
    let states: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|plugin| plugin["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["pending", "pending"], "{status}");

    load.await;
    assert!(!test.runtime.is_starting());
    assert!(test.runtime.not_found_yet().is_ok());
    let status = test.status();
    assert_eq!(
        status[0]["file"].as_str().unwrap_or_default().rsplit('/').next(),
        Some("junk.wasm")
    );
    assert_eq!(status[0]["state"], "failed", "{status}");
    assert_eq!(status[1]["state"], "loaded", "{status}");
    assert_eq!(status[1]["name"], "unit-converter", "{status}");
}

#[tokio::test]
async fn a_file_that_is_not_a_component_is_refused_with_its_error_in_status() {
    let test = TestRuntime::new(|_| {});
    test.install("junk", b"\0asm not really");
    test.runtime.load_all().await;

    assert_eq!(test.runtime.registry().plugins().count(), 0);
    let status = test.status();
    let error = status[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("junk.wasm") && error.contains("not a valid plugin component"),
        "{status}"
    );
}

// ---- reload ---------------------------------------------------------------

/// The versioned fixture answers `{"version": MARKER}`; patching the marker mints a new version.
const VERSION_MARKER: &[u8] = b"AGORA-VERSION-MARKER-00000000000";

fn versioned_build(version: u32) -> Vec<u8> {
    let mut bytes = plugin_bytes("fixture-versioned");
    let at = bytes
        .windows(VERSION_MARKER.len())
        .position(|window| window == VERSION_MARKER)
        .expect("the versioned fixture carries its marker");
    let marker = format!("AGORA-VERSION-MARKER-{version:011}");
    bytes[at..at + VERSION_MARKER.len()].copy_from_slice(marker.as_bytes());
    bytes
}

async fn version_of(runtime: &Runtime, plugin: &Arc<LoadedPlugin>) -> String {
    let reply = invoke(runtime, plugin, json!("which"), Exchange::new())
        .await
        .expect("the versioned fixture answers");
    let marker = reply["version"].as_str().unwrap_or_default();
    marker
        .strip_prefix("AGORA-VERSION-MARKER-")
        .unwrap_or_else(|| panic!("no marker in {reply}"))
        .to_string()
}

#[tokio::test]
async fn a_replaced_file_serves_its_new_version_and_calls_holding_the_old_one_finish_on_it() {
    let test = TestRuntime::new(|_| {});
    let file = test.install("versioned", &versioned_build(1));
    test.runtime.load_all().await;
    let first = test.plugin("fixture-versioned");
    assert_eq!(version_of(&test.runtime, &first).await, "00000000001");

    test.install("versioned", &versioned_build(2));
    test.runtime.reload(&file).await;

    let second = test.plugin("fixture-versioned");
    assert_eq!(version_of(&test.runtime, &second).await, "00000000002");
    assert_ne!(first.content_hash, second.content_hash);
    // A request that took the registry before the swap runs on the version it took.
    assert_eq!(version_of(&test.runtime, &first).await, "00000000001");
    assert_eq!(test.runtime.registry().plugins().count(), 1);
}

#[tokio::test]
async fn a_broken_file_leaves_the_old_version_serving_until_a_good_one_comes() {
    let test = TestRuntime::new(|_| {});
    let file = test.install("versioned", &versioned_build(1));
    test.runtime.load_all().await;

    let mut broken = versioned_build(2);
    broken.truncate(broken.len() / 2);
    test.install("versioned", &broken);
    test.runtime.reload(&file).await;

    let serving = test.plugin("fixture-versioned");
    assert_eq!(version_of(&test.runtime, &serving).await, "00000000001");
    let status = test.status();
    assert_eq!(status.as_array().map(Vec::len), Some(1), "{status}");
    assert_eq!(status[0]["version"], "1.0.0", "{status}");
    let error = status[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("not a valid plugin component"), "{status}");
    // The same bytes again (the watcher after an upload): not compiled, nor reported, twice.
    let failed_loads = || {
        test.runtime
            .metrics()
            .render()
            .lines()
            .find(|line| line.starts_with("agora_plugin_reloads_total{outcome=\"error\"}"))
            .map(str::to_string)
    };
    let once = failed_loads();
    assert!(
        once.as_deref().is_some_and(|line| line.ends_with(" 1")),
        "{once:?}"
    );
    test.runtime.reload(&file).await;
    assert_eq!(failed_loads(), once);
    assert_eq!(
        test.status()[0]["error"],
        status[0]["error"],
        "the reason stays shown"
    );

    test.install("versioned", &versioned_build(3));
    test.runtime.reload(&file).await;
    let serving = test.plugin("fixture-versioned");
    assert_eq!(version_of(&test.runtime, &serving).await, "00000000003");
    assert!(test.status()[0]["error"].is_null(), "{}", test.status());
}

#[tokio::test]
async fn a_removed_file_is_unloaded() {
    let test = TestRuntime::serving(&["fixture-versioned", "unit-converter"], |_| {}).await;
    let file = test.plugins.join("fixture-versioned.wasm");

    std::fs::remove_file(&file).expect("removing the plugin file");
    test.runtime.reload(&file).await;

    let registry = test.runtime.registry();
    assert!(registry.by_name("fixture-versioned").is_none());
    assert!(registry.by_name("unit-converter").is_some());
    let status = test.status();
    assert_eq!(status.as_array().map(Vec::len), Some(1), "{status}");
    assert_eq!(status[0]["name"], "unit-converter", "{status}");
}

// ---- limits ---------------------------------------------------------------

/// The hostile fixture misbehaves as its body says ("loop", "memory", "trap",
/// "panic", "huge-output"); afterwards the same runtime must still answer "ok".
async fn hostile_call(tune: impl FnOnce(&mut Config), misbehaviour: &str) -> InvokeError {
    let test = TestRuntime::serving(&["fixture-hostile"], tune).await;
    let error = test
        .call("fixture-hostile", json!(misbehaviour))
        .await
        .expect_err("the misbehaving call fails");
    let after = test.call("fixture-hostile", json!("ok")).await;
    assert_eq!(
        after.ok(),
        Some(json!("ok")),
        "the next call is served after {misbehaviour}"
    );
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_spins_past_its_time_limit_times_out() {
    let error = hostile_call(|c| c.plugins.call_timeout_ms = 200, "loop").await;
    assert!(matches!(error, InvokeError::Timeout), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_grows_past_its_memory_limit_is_stopped() {
    let error = hostile_call(|c| c.plugins.max_memory_mb = 16, "memory").await;
    assert!(matches!(error, InvokeError::MemoryExceeded), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_and_a_panic_fail_only_their_own_call() {
    for misbehaviour in ["trap", "panic"] {
        let error = hostile_call(|_| {}, misbehaviour).await;
        assert!(
            matches!(error, InvokeError::Trapped(_)),
            "{misbehaviour}: {error:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_the_output_limit_is_refused() {
    let error = hostile_call(|c| c.plugins.max_output_bytes = 1 << 20, "huge-output").await;
    assert!(
        matches!(error, InvokeError::OutputTooLarge { size, limit } if size == 24 << 20 && limit == 1 << 20),
        "{error:?}"
    );
}

/// With `tune` applied, a slow-league call holds its slot and instance while
/// it waits to emit into an event channel nobody reads: a converter call
/// meanwhile must be refused as overloaded, and one after the slow call ended
/// (its events read) must be served. No timing decides the outcome.
async fn a_call_beside_a_busy_one_is_overloaded(tune: impl FnOnce(&mut Config)) {
    const EVENTS: usize = 3;
    let test = TestRuntime::serving(&["fixture-slow-league", "unit-converter"], tune).await;
    let (events, mut stream) = mpsc::channel(1);
    let busy = {
        let (runtime, plugin) = (test.runtime.clone(), test.plugin("fixture-slow-league"));
        let body = json!({"task": {"spin_ms": 0, "events": EVENTS}});
        let mut exchange = Exchange::new().with_events(events);
        exchange.emit_timeout = Some(Duration::from_secs(60));
        tokio::spawn(async move { invoke(&runtime, &plugin, body, exchange).await })
    };
    // Its first event says the busy call runs; it cannot end before its last is read.
    let first = tokio::time::timeout(Duration::from_secs(30), stream.recv())
        .await
        .expect("the busy call starts");
    let first = first.and_then(|event| match event {
        CallEvent::Plugin(event) => Some(event.kind),
        _ => None,
    });
    assert_eq!(first, Some("thinking".to_string()));

    let centimetres = || test.call("unit-converter", json!({"value": 1, "from": "m", "to": "cm"}));
    let refused = centimetres().await;
    assert!(matches!(refused, Err(InvokeError::Overloaded)), "{refused:?}");

    let mut read = 1;
    while stream.recv().await.is_some() {
        read += 1;
    }
    assert_eq!(read, EVENTS);
    let finished = busy.await.expect("the busy call's task");
    assert_eq!(finished.expect("the busy call answers")["answer"], "worked 0 ms");
    let served = centimetres().await.expect("the freed slot serves the next call");
    assert_eq!(served["value"], 100.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_finding_every_node_slot_taken_is_overloaded() {
    a_call_beside_a_busy_one_is_overloaded(|c| {
        c.plugins.max_concurrent_calls = 1;
        c.plugins.queue_timeout_ms = 100;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_finding_the_instance_pool_full_is_overloaded_not_trapped() {
    a_call_beside_a_busy_one_is_overloaded(|c| {
        c.plugins.max_instances = 1;
        c.plugins.max_parked_calls = 0;
    })
    .await;
}

// ---- tools ----------------------------------------------------------------

/// A human at the other end of a channel: each question arrives on `asked`
/// with the means to answer it, which delivers the answer as a transport
/// does, through the runtime's approvals.
struct Human {
    asked: mpsc::UnboundedSender<(ApprovalAsked, oneshot::Sender<ApprovalOutcome>)>,
    approvals: Approvals,
}

const HUMAN_SCOPE: &str = "test:human";

#[async_trait::async_trait]
impl Approver for Human {
    fn scope(&self) -> String {
        HUMAN_SCOPE.into()
    }

    async fn ask(&self, question: &ApprovalAsked) -> Result<(), String> {
        let (answer, answered) = oneshot::channel();
        self.asked
            .send((question.clone(), answer))
            .map_err(|_| "nobody listens".to_string())?;
        let (approvals, id) = (self.approvals.clone(), question.approval_id.clone());
        tokio::spawn(async move {
            if let Ok(outcome) = answered.await
                && let Some(decision) = approvals.take(HUMAN_SCOPE, &id)
            {
                decision.deliver(outcome);
            }
        });
        Ok(())
    }
}

type Asked = mpsc::UnboundedReceiver<(ApprovalAsked, oneshot::Sender<ApprovalOutcome>)>;

/// An exchange with a human approver and an event channel; what the human is
/// asked, and the events.
fn approved_exchange(runtime: &Runtime) -> (Exchange, Asked, mpsc::Receiver<CallEvent>) {
    let (asked, questions) = mpsc::unbounded_channel();
    let (events, stream) = mpsc::channel(16);
    let human = Human {
        asked,
        approvals: runtime.approvals().clone(),
    };
    let exchange = Exchange::new().with_events(events).with_approver(Arc::new(human));
    (exchange, questions, stream)
}

fn tool_statuses(stream: &mut mpsc::Receiver<CallEvent>) -> Vec<String> {
    let mut statuses = Vec::new();
    while let Ok(event) = stream.try_recv() {
        if let CallEvent::ToolCall(lifecycle) = event {
            let wire = serde_json::to_value(&lifecycle).unwrap_or_default();
            statuses.push(wire["status"].as_str().unwrap_or_default().to_string());
        }
    }
    statuses
}

fn convert_ten_km() -> Value {
    json!({"tool": "convert_units", "arguments": {"value": 10, "from": "km", "to": "mi"}})
}

/// The tool caller asking for `convert_units` (low risk) with every tool
/// needing approval: it waits for its human, who has been asked.
struct AwaitingApproval {
    test: Arc<TestRuntime>,
    caller: tokio::task::JoinHandle<Result<Value, InvokeError>>,
    request: ApprovalAsked,
    answer: oneshot::Sender<ApprovalOutcome>,
    events: mpsc::Receiver<CallEvent>,
}

impl AwaitingApproval {
    async fn start(tune: impl FnOnce(&mut Config)) -> AwaitingApproval {
        let test = Arc::new(
            TestRuntime::serving(&["fixture-tool-caller", "unit-converter"], |c| {
                c.tools.approval_threshold = "low".into();
                tune(c);
            })
            .await,
        );
        let (exchange, mut questions, events) = approved_exchange(&test.runtime);
        let caller = {
            let test = test.clone();
            tokio::spawn(async move {
                test.call_in("fixture-tool-caller", convert_ten_km(), exchange)
                    .await
            })
        };
        let (request, answer) = tokio::time::timeout(Duration::from_secs(30), questions.recv())
            .await
            .expect("the human is asked")
            .expect("an approval request");
        AwaitingApproval {
            test,
            caller,
            request,
            answer,
            events,
        }
    }

    /// The human answers `outcome`; the caller's reply and the tool's lifecycle statuses.
    async fn answer(mut self, outcome: ApprovalOutcome) -> (Value, Vec<String>) {
        self.answer.send(outcome).expect("the caller still waits");
        let reply = self
            .caller
            .await
            .expect("the caller's task")
            .expect("the caller answers");
        (reply, tool_statuses(&mut self.events))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_tool_runs_and_its_caller_gives_up_its_slot_while_it_waits() {
    let waiting = AwaitingApproval::start(|c| {
        c.plugins.max_concurrent_calls = 1;
        c.plugins.queue_timeout_ms = 200;
    })
    .await;
    assert_eq!(waiting.request.tool_name, "convert_units");
    assert_eq!(waiting.request.risk, Risk::Low);
    assert_eq!(waiting.request.arguments, convert_ten_km()["arguments"]);

    // The only call slot is free while the caller waits for the human.
    let meanwhile = waiting
        .test
        .call("unit-converter", json!({"value": 1, "from": "m", "to": "cm"}))
        .await;
    assert!(meanwhile.is_ok(), "{meanwhile:?}");

    let (reply, statuses) = waiting.answer(ApprovalOutcome::Approved).await;
    let output = reply["output"]
        .as_str()
        .unwrap_or_else(|| panic!("no output in {reply}"));
    let output: Value = serde_json::from_str(output).expect("the tool's output is JSON");
    assert!(
        (output["value"].as_f64().unwrap_or_default() - 6.21371).abs() < 1e-4,
        "{output}"
    );
    assert_eq!(statuses, ["started", "completed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_tool_never_runs_and_its_caller_hears_why() {
    let waiting = AwaitingApproval::start(|_| {}).await;
    let (reply, statuses) = waiting
        .answer(ApprovalOutcome::Rejected {
            feedback: Some("not today".into()),
        })
        .await;
    let error = reply["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("rejected") && error.contains("not today"),
        "{reply}"
    );
    assert_eq!(statuses, ["failed"]);
}

#[tokio::test]
async fn a_tool_needing_approval_fails_when_no_human_can_be_asked() {
    let test = TestRuntime::serving(&["fixture-tool-caller", "unit-converter"], |c| {
        c.tools.approval_threshold = "low".into();
    })
    .await;
    let reply = test
        .call("fixture-tool-caller", convert_ten_km())
        .await
        .expect("the caller answers");
    let error = reply["error"].as_str().unwrap_or_default();
    assert!(error.contains("no human to ask"), "{reply}");
}

#[tokio::test]
async fn a_tool_below_the_approval_threshold_runs_without_asking() {
    let test = TestRuntime::serving(&["fixture-tool-caller", "fixture-warm-counter"], |_| {}).await;
    let (exchange, mut questions, mut stream) = approved_exchange(&test.runtime);
    let reply = test
        .call_in(
            "fixture-tool-caller",
            json!({"tool": "warm_count", "arguments": {"what": "count"}}),
            exchange,
        )
        .await
        .expect("the caller answers");
    assert_eq!(reply["output"], r#"{"count":1}"#, "{reply}");
    assert!(questions.try_recv().is_err(), "a low-risk tool asked a human");
    assert_eq!(tool_statuses(&mut stream), ["started", "completed"]);
}
