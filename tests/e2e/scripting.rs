//! Scriptable handlers (issue 8): warm instance pools, and plugins written in
//! JavaScript (componentize-js) and Python (componentize-py) for the node's
//! WIT world, each built here from source and served over real sockets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, TestNode, document_hash, has_plugin, post_json};

const POLICY_MARKER: &[u8] = b"policy=warm;max=00001000;conc=02;idle=00060000;";
const COUNTER_DOCUMENT: &str = "name: Warm counter fixture\ndescription: counts the requests its instance has seen\nmultiround: false\n---\nbody: \"count\" | \"trap\". Answers {\"count\": n}.\n";

/// The warm-counter fixture with its instance policy rewritten in the binary:
/// `policy` is "warm" or "frsh"; the same code either way.
pub(crate) fn counter_build(policy: &str, max_invocations: u32, concurrency: u32, idle_ms: u32) -> Vec<u8> {
    let mut bytes = std::fs::read(support::plugin_wasm("fixture-warm-counter")).unwrap();
    let at = bytes
        .windows(POLICY_MARKER.len())
        .position(|w| w == POLICY_MARKER)
        .expect("policy marker in the fixture");
    let policy = format!("policy={policy};max={max_invocations:08};conc={concurrency:02};idle={idle_ms:08};");
    assert_eq!(policy.len(), POLICY_MARKER.len());
    bytes[at..at + POLICY_MARKER.len()].copy_from_slice(policy.as_bytes());
    bytes
}

fn counter_node(build: &[u8]) -> TestNode {
    let node = TestNode::builder().start();
    support::install_bytes(&node.plugins_dir, "warm-counter", build);
    node.wait_for_health("the counter fixture", |h| has_plugin(h, "fixture-warm-counter"));
    node
}

/// Ask the counter: its count, or the HTTP status and body of a failure.
fn ask(node: &TestNode, what: &str) -> Result<u64, String> {
    let reply = post_json(
        &node.url("/agora"),
        &json!({"protocolHash": document_hash_cached(), "body": what}),
    );
    let value = reply.json();
    match value["body"]["count"].as_u64() {
        Some(count) if reply.status == 200 => Ok(count),
        _ => Err(format!("HTTP {}: {}", reply.status, reply.body)),
    }
}

fn document_hash_cached() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| document_hash(COUNTER_DOCUMENT))
}

fn counts(node: &TestNode, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| ask(node, "count").unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

fn metric(node: &TestNode, line_prefix: &str) -> u64 {
    let metrics = support::get(&node.url("/metrics")).body;
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(line_prefix)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn warm_instances_keep_state_between_requests_and_fresh_ones_see_none() {
    // Warm (documented behaviour): one instance serves the requests in turn and its static persists.
    let node = counter_node(&counter_build("warm", 1000, 2, 60_000));
    assert_eq!(counts(&node, 5), vec![1, 2, 3, 4, 5]);
    // A typed failure is an answer, not a broken instance: it is kept.
    let failure = ask(&node, "failure").unwrap_err();
    assert!(failure.contains("typed failure at 6"), "{failure}");
    assert_eq!(counts(&node, 1), vec![7]);
    drop(node);

    // Fresh: exactly the same code, and no request ever sees another's state.
    let node = counter_node(&counter_build("frsh", 1000, 2, 60_000));
    assert_eq!(counts(&node, 5), vec![1, 1, 1, 1, 1]);
    let failure = ask(&node, "failure").unwrap_err();
    assert!(failure.contains("typed failure at 1"), "{failure}");
}

#[test]
fn a_trapping_warm_instance_is_discarded_never_reused() {
    let node = counter_node(&counter_build("warm", 1000, 2, 60_000));
    assert_eq!(counts(&node, 3), vec![1, 2, 3]);
    let trap = ask(&node, "trap").unwrap_err();
    assert!(
        trap.starts_with("HTTP 500") && trap.contains("the plugin failed"),
        "{trap}"
    );
    // The next request runs in a new instance: the counter starts again.
    assert_eq!(counts(&node, 2), vec![1, 2]);
    let metrics = support::get(&node.url("/metrics")).body;
    assert!(
        metrics.contains("plugin=\"fixture-warm-counter\",outcome=\"trap\"} 1"),
        "{metrics}"
    );
}

#[test]
fn a_warm_instance_retires_after_its_invocations_and_when_idle() {
    let node = counter_node(&counter_build("warm", 3, 2, 60_000));
    assert_eq!(counts(&node, 7), vec![1, 2, 3, 1, 2, 3, 1]);
    drop(node);

    let node = counter_node(&counter_build("warm", 1000, 2, 2_000));
    assert_eq!(counts(&node, 2), vec![1, 2]);
    // Well past the idle timeout, the instance has been dropped.
    std::thread::sleep(Duration::from_millis(4_000));
    assert_eq!(counts(&node, 2), vec![1, 2]);
}

#[test]
fn warm_concurrency_is_bounded_by_the_pool() {
    let node = Arc::new(counter_node(&counter_build("warm", 1000, 2, 60_000)));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let node = node.clone();
            std::thread::spawn(move || (0..10).map(|_| ask(&node, "count")).collect::<Vec<_>>())
        })
        .collect();
    let mut seen: Vec<u64> = Vec::new();
    for thread in threads {
        for result in thread.join().unwrap() {
            seen.push(result.unwrap_or_else(|e| panic!("{e}")));
        }
    }
    seen.sort_unstable();
    // Each instance counts 1, 2, 3, ...: the number of 1s is the number of instances made.
    let instances = seen.iter().filter(|&&count| count == 1).count();
    assert!(
        (1..=2).contains(&instances),
        "at most 2 instances, made {instances}: {seen:?}"
    );
    // 80 requests over at most 2 instances, each count seen at most once per instance.
    assert!(*seen.last().unwrap() >= 40, "{seen:?}");
    for count in 1..=*seen.last().unwrap() {
        let times = seen.iter().filter(|&&c| c == count).count();
        assert!(times <= instances, "count {count} seen {times} times: {seen:?}");
    }
}

#[test]
fn a_reload_drops_the_old_versions_warm_pool() {
    let node = counter_node(&counter_build("warm", 1000, 2, 60_000));
    assert_eq!(counts(&node, 3), vec![1, 2, 3]);
    let reloads = metric(&node, "agora_plugin_reloads_total{outcome=\"ok\"}");
    // A different build of the same plugin (another idle timeout): a new version, a new pool.
    support::install_bytes(
        &node.plugins_dir,
        "warm-counter",
        &counter_build("warm", 1000, 2, 59_000),
    );
    node.wait_until(
        "the reload",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || metric(&node, "agora_plugin_reloads_total{outcome=\"ok\"}") > reloads,
    );
    assert_eq!(counts(&node, 2), vec![1, 2]);
}

// --- JavaScript and Python plugins, built from source here ---

/// `npm install` in an example JS plugin folder, once per run; the folder.
fn js_installed(plugin: &str) -> PathBuf {
    static INSTALLED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let dir = support::repo_root().join("plugins").join(plugin);
    let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    if !installed.iter().any(|done| done == plugin) {
        // `npm install` follows the committed lock; `npm ci` rejects it here because the
        // registry mirror lacks other platforms' optional binaries the lock would list.
        run_in(&dir, "npm", &["install", "--no-audit", "--no-fund"], &[]);
        installed.push(plugin.to_string());
    }
    dir
}

/// `npm run check` (tsc against the WIT declarations) and `npm run build` in a JS
/// plugin folder, once per run; the built component.
fn built_js(plugin: &str, wasm: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = js_installed(plugin);
            run_in(&dir, "npm", &["run", "check"], &[]);
            run_in(&dir, "npm", &["run", "build"], &[]);
            dir.join("dist").join(wasm)
        })
        .clone()
}

/// componentize-py from PyPI in a harness venv.
fn componentize_py() -> PathBuf {
    let python = support::python_venv("componentize-py", &["componentize-py==0.25.1"]);
    python.parent().unwrap().join("componentize-py")
}

/// A Python plugin's `build.sh`, once per run; the built component.
fn built_python(plugin: &str, wasm: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = support::repo_root().join("plugins").join(plugin);
            run_in(
                &dir,
                "bash",
                &["build.sh"],
                &[("COMPONENTIZE_PY", &componentize_py())],
            );
            dir.join("dist").join(wasm)
        })
        .clone()
}

fn node_with_file(name: &str, wasm: &Path, plugin: &str) -> TestNode {
    let node = TestNode::builder().start();
    support::install_bytes(&node.plugins_dir, name, &std::fs::read(wasm).unwrap());
    node.wait_for_health_within(plugin, Duration::from_secs(300), |h| has_plugin(h, plugin));
    node
}

fn converter_requests() -> Vec<Value> {
    vec![
        json!({"value": 1, "from": "km", "to": "m"}),
        json!({"value": 2, "from": "mi", "to": "km"}),
        json!({"value": 100, "from": "C", "to": "F"}),
        json!({"value": -40, "from": "F", "to": "C"}),
        json!({"value": 0, "from": "K", "to": "C"}),
        json!({"value": 3.5, "from": "gal", "to": "l"}),
        json!({"value": 1, "from": "GiB", "to": "MB"}),
        json!({"value": 90, "from": "min", "to": "h"}),
        json!({"value": 1e-7, "from": "t", "to": "mg"}),
        json!({"value": -2.5, "from": "lb", "to": "oz"}),
        Value::String(json!({"value": 12, "from": "in", "to": "cm"}).to_string()),
        json!({"value": 1, "from": "km", "to": "kg"}),
        json!({"value": 1, "from": "parsec", "to": "m"}),
        json!({"value": "ten", "from": "m", "to": "km"}),
        json!({"from": "m"}),
    ]
}

fn numbers_as_f64(value: &Value) -> Value {
    match value {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_f64).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), numbers_as_f64(v))).collect())
        }
        other => other.clone(),
    }
}

#[test]
fn javascript_plugin_serves_unit_conversion_exactly_like_the_rust_plugin() {
    let wasm = built_js("js-unit-converter", "js_unit_converter.wasm");
    let js = node_with_file("js-unit-converter", &wasm, "js-unit-converter");
    let rust = TestNode::builder().plugin("unit-converter").start();
    let hash = document_hash(
        &std::fs::read_to_string(support::repo_root().join("protocols/unit-conversion.md")).unwrap(),
    );
    // The JS plugin claims the same protocol document, so the same routing key.
    let health = support::get(&js.url("/health")).json();
    assert!(
        health["plugins"][0]["routes"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("agora:{hash}"))),
        "{health}"
    );

    for body in converter_requests() {
        let request = json!({"protocolHash": hash, "body": body});
        let from_js = post_json(&js.url("/agora"), &request);
        let from_rust = post_json(&rust.url("/agora"), &request);
        assert_eq!(from_js.status, 200, "{body}: {}", from_js.body);
        let (from_js, from_rust) = (from_js.json(), from_rust.json());
        assert_eq!(from_js["status"], "success", "{body}: {from_js}");
        if from_rust["body"].get("error").is_some() {
            assert!(
                from_js["body"]["error"].is_string(),
                "{body}: JS {from_js} vs Rust {from_rust}"
            );
        } else {
            // Same JSON numbers (1000 and 1000.0 are one number), same everything else.
            assert_eq!(
                numbers_as_f64(&from_js["body"]),
                numbers_as_f64(&from_rust["body"]),
                "{body}"
            );
        }
    }
    let reply = post_json(
        &js.url("/agora"),
        &json!({"protocolHash": hash, "body": {"value": 2, "from": "mi", "to": "km"}}),
    );
    assert_eq!(
        reply.json()["body"],
        json!({"value": 3.21869, "unit": "km", "from": {"value": 2, "unit": "mi"}})
    );
}

/// protocols/text-stats.md computed independently of the Python plugin.
fn text_stats(text: &str, top: usize) -> Value {
    let words: Vec<String> = text
        .split_whitespace()
        .map(|piece| {
            piece
                .trim_matches(|c: char| c.is_ascii_punctuation())
                .to_lowercase()
        })
        .filter(|word| !word.is_empty())
        .collect();
    let mut counts: std::collections::BTreeMap<&str, u64> = Default::default();
    for word in &words {
        *counts.entry(word).or_default() += 1;
    }
    let mut ranked: Vec<(&str, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked.truncate(top);
    json!({
        "words": words.len(),
        "characters": text.chars().count(),
        "lines": if text.is_empty() { 0 } else { text.matches('\n').count() + 1 },
        "top": ranked.iter().map(|(word, count)| json!({"word": word, "count": count})).collect::<Vec<_>>(),
    })
}

fn text_stats_hash() -> String {
    document_hash(&std::fs::read_to_string(support::repo_root().join("protocols/text-stats.md")).unwrap())
}

#[test]
fn python_plugin_serves_text_statistics() {
    let wasm = built_python("py-text-stats", "py_text_stats.wasm");
    let node = node_with_file("py-text-stats", &wasm, "py-text-stats");
    let hash = text_stats_hash();
    let ask = |body: Value| {
        let reply = post_json(&node.url("/agora"), &json!({"protocolHash": hash, "body": body}));
        assert_eq!(reply.status, 200, "{}", reply.body);
        let value = reply.json();
        assert_eq!(value["status"], "success", "{value}");
        value["body"].clone()
    };
    // Known answer, worked by hand from the document.
    assert_eq!(
        ask(json!({"text": "The cat saw the other cat.\nThe end!"})),
        json!({"words": 8, "characters": 35, "lines": 2, "top": [
            {"word": "the", "count": 3}, {"word": "cat", "count": 2}, {"word": "end", "count": 1}]})
    );
    let samples = [
        ("", 3),
        ("  \n\n ", 5),
        (
            "Ünïcode wörds, ÜNÏCODE Wörds; «quoted» 'single' --dash-- a\tb\r\nc",
            20,
        ),
        ("one two two three three three four four four four", 2),
        ("...!!! ??? ,,,", 1),
    ];
    for (text, top) in samples {
        assert_eq!(
            ask(json!({"text": text, "top": top})),
            text_stats(text, top),
            "{text:?}"
        );
    }
    // A body sent as a string holding the object (agora-protocol 0.2.0 style).
    assert_eq!(
        ask(Value::String(json!({"text": "a a b"}).to_string())),
        text_stats("a a b", 3)
    );
    for bad in [
        json!({"top": 3}),
        json!({"text": "x", "top": 0}),
        json!({"text": "x", "top": 21}),
        json!({"text": 5}),
        json!({"text": "x", "top": true}),
        Value::String("[1]".into()),
    ] {
        assert!(ask(bad.clone())["error"].is_string(), "{bad}");
    }
    assert!(
        ask(json!({"text": "a".repeat(100_001)}))["error"]
            .as_str()
            .unwrap()
            .contains("longer")
    );
}

/// `bytes` with a custom section appended: a distinct component (new content hash)
/// with the same behaviour, to mint versions of a plugin without rebuilding it.
fn with_custom_section(bytes: &[u8], tag: u32) -> Vec<u8> {
    let name = b"agora-test-version";
    let payload = tag.to_le_bytes();
    let size = 1 + name.len() + payload.len();
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.push(u8::try_from(size).unwrap()); // < 128: one LEB128 byte
    out.push(u8::try_from(name.len()).unwrap());
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

#[test]
fn python_plugin_hot_reloads_under_load_with_no_failed_request() {
    let built = built_python("py-text-stats", "py_text_stats.wasm");
    let wasm = std::fs::read(&built).unwrap();
    let node = node_with_file("py-text-stats", &built, "py-text-stats");
    let hash = text_stats_hash();
    let request = |client: usize, round: u64| {
        let text = format!("client {client} round {round} round");
        let reply = post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hash, "body": {"text": text, "top": 1}}),
        );
        if reply.status == 200 && reply.json()["body"] == text_stats(&text, 1) {
            Ok(())
        } else {
            Err(format!("HTTP {}: {}", reply.status, reply.body))
        }
    };
    let ((), load) = support::under_load(4, request, || {
        for version in 1..=3u32 {
            let reloads = metric(&node, "agora_plugin_reloads_total{outcome=\"ok\"}");
            support::install_bytes(
                &node.plugins_dir,
                "py-text-stats",
                &with_custom_section(&wasm, version),
            );
            node.wait_until(
                &format!("version {version} to load"),
                Duration::from_secs(300),
                Duration::from_millis(50),
                || metric(&node, "agora_plugin_reloads_total{outcome=\"ok\"}") > reloads,
            );
        }
    });
    load.assert_no_failure(21);
    assert!(support::get(&node.url("/health")).json()["status"] == "ok");
}

/// `agora-node plugin new NAME --lang LANG` into `parent`.
pub(crate) fn scaffold(name: &str, lang: &str, parent: &Path) -> PathBuf {
    let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .args(["plugin", "new", name, "--lang", lang, "--dir"])
        .arg(parent)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    parent.join(name)
}

fn output_in(dir: &Path, program: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(program);
    command.args(args).current_dir(dir);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap_or_else(|e| panic!("{program}: {e}"))
}

fn run_in(dir: &Path, program: &str, args: &[&str], env: &[(&str, &Path)]) {
    let output = output_in(dir, program, args, env);
    assert!(
        output.status.success(),
        "{program} {args:?} in {} failed:\n{}\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn scaffolded_python_and_javascript_plugins_build_with_their_readme_line_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let python = scaffold("demo-py", "python", dir.path());
    run_in(
        &python,
        "bash",
        &["build.sh"],
        &[("COMPONENTIZE_PY", &componentize_py())],
    );
    // The typed bindings ship with it, as the SDK commits them.
    let sdk = support::repo_root().join("plugin-sdk/bindings");
    for relative in [
        "wit_world/__init__.py",
        "wit_world/imports/types.py",
        "agora_plugin.py",
    ] {
        assert_eq!(
            std::fs::read(python.join("bindings").join(relative)).unwrap(),
            std::fs::read(sdk.join("python").join(relative)).unwrap(),
            "{relative}"
        );
    }
    let js = scaffold("demo-js", "js", dir.path());
    run_in(&js, "npm", &["install", "--no-audit", "--no-fund"], &[]);
    // `npm run check` type-checks the handler against the world's declarations:
    // it passes as scaffolded and fails on a field the WIT does not have.
    run_in(&js, "npm", &["run", "check"], &[]);
    let handler = js.join("src/plugin.js");
    let source = std::fs::read_to_string(&handler).unwrap();
    std::fs::write(&handler, source.replace("message.body", "message.text")).unwrap();
    let mistyped = output_in(&js, "npm", &["run", "check"], &[]);
    let said = String::from_utf8_lossy(&mistyped.stdout);
    assert!(
        !mistyped.status.success() && said.contains("'text' does not exist on type 'Message'"),
        "{said}"
    );
    std::fs::write(&handler, source).unwrap();
    run_in(&js, "npm", &["run", "build"], &[]);
    for (plugin, folder) in [("demo-py", &python), ("demo-js", &js)] {
        let readme = std::fs::read_to_string(folder.join("README.md")).unwrap();
        assert!(readme.contains("Build: `"), "{readme}");
        let wasm = folder
            .join("dist")
            .join(format!("{}.wasm", plugin.replace('-', "_")));
        let node = node_with_file(plugin, &wasm, plugin);
        let hash = document_hash(&std::fs::read_to_string(folder.join("protocol.md")).unwrap());
        let reply = post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hash, "body": {"text": "hi"}}),
        );
        assert_eq!(reply.json()["body"], json!({"reply": "you said: hi"}), "{plugin}");
        // A typed bad-request failure from the script is answered as the protocol-level
        // error the Agora transport makes of it, not as a trap.
        let reply = post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hash, "body": {"words": 1}}),
        );
        assert_eq!(reply.status, 200, "{plugin}: {}", reply.body);
        let body = reply.json();
        assert!(
            body["body"]["error"]
                .as_str()
                .unwrap_or_default()
                .contains("text"),
            "{plugin}: {body}"
        );
    }
}

/// Every file below `dir`, by relative path (caches left out).
fn files_below(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.ends_with("__pycache__") {
                continue;
            }
            if path.is_dir() {
                folders.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn committed_bindings_are_what_the_pinned_tools_generate_from_the_wit() {
    let sdk = support::repo_root().join("plugin-sdk/bindings");
    let tools = js_installed("js-unit-converter").join("node_modules");
    let out = tempfile::tempdir().unwrap();
    run_in(
        &sdk,
        "bash",
        &["regenerate.sh", out.path().to_str().unwrap()],
        &[("COMPONENTIZE_PY", &componentize_py()), ("JS_TOOLS", &tools)],
    );
    let generated = files_below(out.path());
    // World `agent`: everything of `plugin`, and the `extensions` export's types;
    // for Python, `agent-http`: that, the node's `types` by its name, and wasi:http's.
    for expected in [
        "python/wit_world/__init__.py",
        "python/wit_world/exports/extensions.py",
        "python/wit_world/imports/llm.py",
        "python/wit_world/imports/types.py",
        "python/wit_world/imports/outgoing_handler.py",
        "python/wit_world/imports/wasi_http_types.py",
        "js/agent.d.ts",
        "js/interfaces/agora-node-extensions.d.ts",
    ] {
        assert!(generated.contains_key(expected), "{:?}", generated.keys());
    }
    // Everything under python/ and js/ but the hand-written helpers is generated.
    let committed: std::collections::BTreeMap<_, _> = files_below(&sdk)
        .into_iter()
        .filter(|(path, _)| path.starts_with("python/") || path.starts_with("js/"))
        .filter(|(path, _)| path != "python/agora_plugin.py" && path != "js/agora-plugin.js")
        .collect();
    assert_eq!(
        committed.keys().collect::<Vec<_>>(),
        generated.keys().collect::<Vec<_>>(),
        "run plugin-sdk/bindings/regenerate.sh"
    );
    for (path, bytes) in &generated {
        assert!(
            committed[path] == *bytes,
            "{path} differs from what plugin-sdk/wit generates: run plugin-sdk/bindings/regenerate.sh"
        );
    }
}

#[test]
fn dev_mode_rebuilds_saved_python_and_javascript_plugins_and_serves_them_live() {
    let dir = tempfile::tempdir().unwrap();
    let sources = dir.path().join("sources");
    let python = scaffold("live-py", "python", &sources);
    let js = scaffold("live-js", "js", &sources);
    let node = TestNode::builder()
        .arg("--plugins-dir")
        .arg(dir.path().join("live-plugins").to_str().unwrap())
        .env("AGORA_PLUGINS__SOURCES_DIR", sources.to_str().unwrap())
        .env("COMPONENTIZE_PY", componentize_py().to_str().unwrap())
        .start_dev();
    node.wait_for_health_within("the first builds", Duration::from_secs(900), |h| {
        has_plugin(h, "live-py") && has_plugin(h, "live-js")
    });
    for (plugin, folder, handler) in [("live-py", &python, "app.py"), ("live-js", &js, "src/plugin.js")] {
        let hash = document_hash(&std::fs::read_to_string(folder.join("protocol.md")).unwrap());
        let ask = || {
            let reply = post_json(
                &node.url("/agora"),
                &json!({"protocolHash": hash, "body": {"text": "hi"}}),
            );
            match reply.json()["body"]["reply"].as_str() {
                Some(said) if reply.status == 200 => Ok(said.to_string()),
                _ => Err(format!("{plugin}: HTTP {}: {}", reply.status, reply.body)),
            }
        };
        assert_eq!(ask().as_deref(), Ok("you said: hi"));
        // One save under load: every request meanwhile gets the old or the new answer.
        let ((), load) = support::under_load(
            2,
            |_, _| match ask()?.as_str() {
                "you said: hi" | "you wrote: hi" => Ok(()),
                other => Err(format!("{plugin}: unexpected reply {other:?}")),
            },
            || {
                let path = folder.join(handler);
                let source = std::fs::read_to_string(&path).unwrap();
                std::fs::write(&path, source.replace("you said", "you wrote")).unwrap();
                node.wait_until(
                    &format!("the edit of {plugin} to go live"),
                    Duration::from_secs(600),
                    Duration::from_millis(200),
                    || ask().as_deref() == Ok("you wrote: hi"),
                );
            },
        );
        load.assert_no_failure(10);
    }
}

// --- The agent world in Python and JavaScript: settings, a model, schedules ---

/// A secret the agent fixtures' nodes name and nobody sets (outside `AGORA_`,
/// which the node reads as its own configuration).
const UNSET_SECRET: &str = "SCRIPTED_AGENT_UNSET_SECRET";

/// Where the agent fixtures are built (once per run).
fn fixtures_out() -> PathBuf {
    let dir = support::repo_root().join("target/scripted-fixtures");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// tests/fixtures-py/agent built for the world `agent-http` (`agent`, and the
/// wasi:http bindings `http_request` uses; the node's `types` keeps its name)
/// with the SDK's helper.
pub(crate) fn built_python_agent() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = fixtures_out().join("fixture_py_agent.wasm");
        run_in(
            &support::repo_root(),
            componentize_py().to_str().unwrap(),
            &[
                "-d",
                "plugin-sdk/wit",
                "-w",
                "agent-http",
                "--import-interface-name",
                "agora:node/types@0.1.0=types",
                "componentize",
                "-p",
                "tests/fixtures-py/agent",
                "-p",
                "plugin-sdk/bindings/python",
                "app",
                "-o",
                out.to_str().unwrap(),
            ],
            &[],
        );
        out
    })
}

/// tests/fixtures-js/agent type-checked against the world's declarations and
/// the SDK's helper, and built for the world `agent` with `fetch()` (componentize-js's
/// `http` feature; incoming `fetch-event`s off), with js-unit-converter's tools.
pub(crate) fn built_js_agent() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let tools = js_installed("js-unit-converter").join("node_modules/.bin");
        let root = support::repo_root();
        let tsc = tools.join("tsc");
        let tsconfig = ["--noEmit", "-p", "tests/fixtures-js/agent/tsconfig.json"];
        run_in(&root, tsc.to_str().unwrap(), &tsconfig, &[]);
        let out = fixtures_out().join("fixture_js_agent.wasm");
        let componentize = tools.join("componentize-js");
        // The source and what it imports must lie below the working directory.
        let args = [
            "tests/fixtures-js/agent/plugin.js",
            "--wit",
            "plugin-sdk/wit",
            "--world-name",
            "agent",
            "--disable",
            "fetch-event",
            "-o",
            out.to_str().unwrap(),
        ];
        run_in(&root, componentize.to_str().unwrap(), &args, &[]);
        out
    })
}

/// A node with the agent fixture `plugin` installed from `wasm`: its setting
/// `greeting` given as an environment variable, its secret `gone` named but
/// unset, and no language model configured.
fn agent_node(plugin: &str, wasm: &Path) -> TestNode {
    agent_node_from(TestNode::builder(), plugin, wasm)
}

fn agent_node_from(builder: support::NodeBuilder, plugin: &str, wasm: &Path) -> TestNode {
    // Figment lower-cases the keys; a plugin's `-` is fine in a variable's name.
    let prefix = format!("AGORA_PLUGINS__{}__", plugin.to_uppercase());
    let node = builder
        .env(&format!("{prefix}CONFIG__GREETING"), "hey")
        .env(&format!("{prefix}SECRETS__GONE__ENV"), UNSET_SECRET)
        .start();
    support::install_bytes(&node.plugins_dir, plugin, &std::fs::read(wasm).unwrap());
    node.wait_for_health_within(plugin, Duration::from_secs(300), |h| has_plugin(h, plugin));
    node
}

/// What the agent fixture `plugin` (tool `tool`) answers, checked the same for
/// each language: a setting, the settings error of an unreadable secret, the
/// model error of a node with no model, the tool list, and its schedules' runs.
fn agent_scenario(node: &TestNode, plugin: &str, tool: &str) {
    let hash = crate::scripting_tools::agora_route(node, plugin);
    let answer = |body: Value| {
        let reply = post_json(&node.url("/agora"), &json!({"protocolHash": hash, "body": body}));
        assert_eq!(reply.status, 200, "{plugin}: {}\n{}", reply.body, node.log_text());
        let value = reply.json();
        assert_eq!(value["status"], "success", "{plugin}: {value}");
        value["body"].clone()
    };

    // (a) A setting given to the node as an environment variable.
    assert_eq!(
        answer(json!({"op": "greet", "text": "hi"})),
        json!({"reply": "hey: hi"}),
        "{plugin}"
    );
    assert_eq!(
        answer(json!({"op": "get", "key": "greeting"})),
        json!({"value": "hey"})
    );
    assert_eq!(
        answer(json!({"op": "get", "key": "absent"})),
        json!({"value": null})
    );
    let unreadable = answer(json!({"op": "get", "key": "gone"}));
    assert_eq!(unreadable["kind"], "settings", "{plugin}: {unreadable}");
    assert!(
        unreadable["error"]
            .as_str()
            .unwrap_or_default()
            .contains(UNSET_SECRET),
        "{plugin}: {unreadable}"
    );

    // (b) The model, declared but not configured on this node: not ready, and a
    // chat is refused at once, typed.
    assert_eq!(
        answer(json!({"op": "ready"})),
        json!({"ready": false}),
        "{plugin}"
    );
    assert_eq!(
        answer(json!({"op": "ready", "provider": "default"})),
        json!({"ready": false})
    );
    let refused = answer(json!({"op": "chat", "text": "hello"}));
    assert_eq!(refused["kind"], "model", "{plugin}: {refused}");
    assert_eq!(refused["model_kind"], "not-configured", "{plugin}: {refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no language model is configured"),
        "{plugin}: {refused}"
    );

    // The tool list, the plugin's own tool with its schema as JSON (not text).
    let tools = answer(json!({"op": "tools"}));
    assert_eq!(
        tools["tools"].as_array().map(Vec::len),
        Some(1),
        "{plugin}: {tools}"
    );
    assert_eq!(tools["tools"][0]["name"], tool);
    assert_eq!(tools["tools"][0]["risk"], "low");
    assert_eq!(tools["tools"][0]["parameters"]["required"], json!(["text"]));

    // (c) The schedule `count` every second: its ticks reach the store.
    node.wait_until(
        &format!("two ticks of {plugin}"),
        Duration::from_secs(15),
        Duration::from_millis(200),
        || answer(json!({"op": "ticks"}))["count"].as_u64().unwrap_or(0) >= 2,
    );
    // A tick whose host call fails fails as the tick's error, never a trap.
    let failed = format!("agora_schedule_runs_total{{plugin=\"{plugin}\",outcome=\"failure\"}}");
    node.wait_until(
        &format!("a failed run of {plugin}'s schedule unreadable"),
        Duration::from_secs(15),
        Duration::from_millis(200),
        || metric(node, &failed) >= 1,
    );
    let metrics = support::get(&node.url("/metrics")).body;
    let trapped = format!("agora_schedule_runs_total{{plugin=\"{plugin}\",outcome=\"trap\"}}");
    assert!(!metrics.contains(&trapped), "{metrics}");
    node.wait_for_log(UNSET_SECRET);
}

#[test]
fn a_python_plugin_for_the_agent_world_reads_settings_reaches_the_model_and_runs_schedules() {
    let node = agent_node("fixture-py-agent", built_python_agent());
    agent_scenario(&node, "fixture-py-agent", "py_agent_echo");
}

#[test]
fn a_javascript_plugin_for_the_agent_world_reads_settings_reaches_the_model_and_runs_schedules() {
    let node = agent_node("fixture-js-agent", built_js_agent());
    agent_scenario(&node, "fixture-js-agent", "js_agent_echo");
}

/// Each language's `complete` against the stand-in model server (its requests
/// and answers checked with the `openai` package's types): the SDK's request
/// goes out as the protocol's, and the streamed answer comes back whole.
#[test]
fn python_and_javascript_plugins_get_the_model_s_streamed_answer() {
    let (_standin, base) = crate::capabilities::standin();
    for (plugin, wasm) in [
        ("fixture-py-agent", built_python_agent()),
        ("fixture-js-agent", built_js_agent()),
    ] {
        let builder = crate::capabilities::model_configured(TestNode::builder(), &base);
        let node = agent_node_from(builder, plugin, wasm);
        let hash = crate::scripting_tools::agora_route(&node, plugin);
        let answer = |body: Value| {
            let reply = post_json(&node.url("/agora"), &json!({"protocolHash": hash, "body": body}));
            assert_eq!(reply.status, 200, "{plugin}: {}", reply.body);
            reply.json()["body"].clone()
        };
        assert_eq!(answer(json!({"op": "ready"})), json!({"ready": true}), "{plugin}");
        assert_eq!(
            answer(json!({"op": "chat", "text": "several words, streamed one by one"})),
            json!({"text": "You said: several words, streamed one by one"}),
            "{plugin}"
        );
        // A provider failure reaches the plugin as the SDK's typed error.
        let failed = answer(json!({"op": "chat", "text": "[error 500]"}));
        assert_eq!(failed["kind"], "model", "{plugin}: {failed}");
        assert_eq!(failed["model_kind"], "failed", "{plugin}: {failed}");
    }
    let accepted = crate::capabilities::checks(&base)["accepted"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(accepted, 4, "two chats per language reached the model");
}

// --- Outgoing HTTP from Python (`http_request`) and JavaScript (`fetch()`) ---

/// A loopback HTTP origin answering every request with `"<name> saw <METHOD>
/// <path> <body>"` (404 for `/missing`), counting the requests it sees.
struct Origin {
    port: u16,
    hits: Arc<std::sync::atomic::AtomicUsize>,
}

impl Origin {
    fn start(name: &'static str) -> Origin {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = Self::answer(name, stream);
            }
        });
        Origin { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// One request (its body by `content-length` or chunked), one answer, then close.
    fn answer(name: &str, stream: std::net::TcpStream) -> std::io::Result<()> {
        use std::io::{BufRead, Read, Write};
        let mut reader = std::io::BufReader::new(stream.try_clone()?);
        let mut request_line = String::new();
        reader.read_line(&mut request_line)?;
        let (mut length, mut chunked) = (0, false);
        loop {
            let mut line = String::new();
            reader.read_line(&mut line)?;
            let header = line.trim_end().to_ascii_lowercase();
            if header.is_empty() {
                break;
            }
            if let Some(value) = header.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
            if header.starts_with("transfer-encoding:") && header.contains("chunked") {
                chunked = true;
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size)?;
                let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                let mut piece = vec![0; size + 2];
                reader.read_exact(&mut piece)?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&piece[..size]);
            }
        } else {
            body.resize(length, 0);
            reader.read_exact(&mut body)?;
        }
        let mut parts = request_line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let status = if path == "/missing" {
            "404 Not Found"
        } else {
            "200 OK"
        };
        let text = format!("{name} saw {method} {path} {}", String::from_utf8_lossy(&body));
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            text.len()
        )?;
        stream.flush()
    }
}

/// The agent fixture `plugin` (built as `wasm`) on a node whose operator allows
/// two loopback origins, of which the plugin declares one (its setting
/// `fetch_origin`): the declared one answers through the plugin's ordinary HTTP
/// code, the other is refused without a byte sent, naming it; the refused
/// fixture's error, and the node's log. Also checks what both languages share.
fn outgoing_http_scenario(plugin: &str, wasm: &Path) -> (Value, String) {
    let allowed = Origin::start("allowed");
    let undeclared = Origin::start("undeclared");
    let origin = format!("http://127.0.0.1:{}", allowed.port);
    let prefix = format!("AGORA_PLUGINS__{}__", plugin.to_uppercase());
    let node = TestNode::builder()
        .env(&format!("{prefix}CONFIG__FETCH_ORIGIN"), &origin)
        .env(
            "AGORA_OUTBOUND__ALLOWED_HOSTS",
            format!(
                r#"["127.0.0.1:{}", "127.0.0.1:{}"]"#,
                allowed.port, undeclared.port
            ),
        )
        .start();
    support::install_bytes(&node.plugins_dir, plugin, &std::fs::read(wasm).unwrap());
    node.wait_for_health_within(plugin, Duration::from_secs(300), |h| has_plugin(h, plugin));
    let hash = crate::scripting_tools::agora_route(&node, plugin);
    let fetch = |request: Value| {
        let reply = post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hash, "body": request}),
        );
        assert_eq!(reply.status, 200, "{plugin}: {}\n{}", reply.body, node.log_text());
        let value = reply.json();
        assert_eq!(value["status"], "success", "{plugin}: {value}");
        value["body"].clone()
    };

    assert_eq!(
        fetch(json!({"op": "fetch", "url": format!("{origin}/feed.txt?since=1")})),
        json!({"status": 200, "body": "allowed saw GET /feed.txt?since=1 "}),
        "{plugin}\n{}",
        node.log_text()
    );
    // A body larger than one write to the host's stream arrives whole.
    let long = "ping ".repeat(5_000);
    assert_eq!(
        fetch(json!({"op": "fetch", "url": format!("{origin}/echo"), "method": "POST", "body": long})),
        json!({"status": 200, "body": format!("allowed saw POST /echo {long}")}),
        "{plugin}"
    );
    // A status is an answer, not an error.
    assert_eq!(
        fetch(json!({"op": "fetch", "url": format!("{origin}/missing")})),
        json!({"status": 404, "body": "allowed saw GET /missing "}),
        "{plugin}"
    );
    assert_eq!(allowed.hits(), 3);

    // Listed by the operator, not declared by the plugin: refused, never sent.
    let refused =
        fetch(json!({"op": "fetch", "url": format!("http://127.0.0.1:{}/feed.txt", undeclared.port)}));
    let error = refused["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{plugin}: {refused}"));
    assert!(
        error.contains(&format!("127.0.0.1:{}", undeclared.port)),
        "{plugin}: {error}"
    );
    assert_eq!(undeclared.hits(), 0, "{plugin}");
    let metrics = support::get(&node.url("/metrics")).body;
    for expected in [
        format!(r#"agora_plugin_http_requests_total{{plugin="{plugin}",outcome="ok"}} 3"#),
        format!(r#"agora_plugin_http_requests_total{{plugin="{plugin}",outcome="denied"}} 1"#),
    ] {
        assert!(metrics.contains(&expected), "{expected}\n{metrics}");
    }
    // The node says why, whatever the plugin's HTTP client kept of it.
    let why = format!(
        "HTTP request denied: http://127.0.0.1:{} is not in the allowed_hosts of plugin {plugin}'s capabilities",
        undeclared.port
    );
    node.wait_for_log(&why);
    (refused, why)
}

#[test]
fn a_python_plugin_for_the_agent_world_reaches_what_it_declares_over_http_and_nothing_else() {
    let (refused, why) = outgoing_http_scenario("fixture-py-agent", built_python_agent());
    // `http_request` raises the node's refusal in its words, typed.
    assert_eq!(refused, json!({"error": why, "kind": "outbound-refused"}));
}

#[test]
fn a_javascript_plugin_for_the_agent_world_reaches_what_it_declares_with_fetch_and_nothing_else() {
    let wasm = built_js_agent();
    // The wasi:http componentize-js imports for `fetch()` is one the node's linker
    // serves: 0.2.x, no newer than the node's own (plugin-sdk/wit/deps, wasmtime-wasi-http's).
    let node_wit =
        std::fs::read_to_string(support::repo_root().join("plugin-sdk/wit/deps/http.wit")).unwrap();
    let served = node_wit
        .lines()
        .find_map(|line| {
            line.strip_prefix("package wasi:http@0.2.")?
                .strip_suffix(';')?
                .parse::<u32>()
                .ok()
        })
        .expect("the node's wasi:http version");
    let imports = js_component_imports(wasm);
    let http: Vec<u32> = imports
        .iter()
        .filter_map(|import| import.strip_prefix("wasi:http/"))
        .map(|import| {
            let patch = import
                .split_once("@0.2.")
                .and_then(|(_, patch)| patch.parse().ok());
            patch.unwrap_or_else(|| panic!("wasi:http/{import} is not 0.2.x: {imports:?}"))
        })
        .collect();
    assert!(!http.is_empty(), "no wasi:http import: {imports:?}");
    assert!(
        http.iter().all(|&patch| patch <= served),
        "{imports:?} vs 0.2.{served}"
    );
    let (refused, _) = outgoing_http_scenario("fixture-js-agent", wasm);
    // StarlingMonkey's `fetch()` rejects with a bare network error; the fixture names the request.
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("NetworkError"), "{error}");
}

/// The interfaces a component imports, as jco's `wit` prints them.
fn js_component_imports(wasm: &Path) -> Vec<String> {
    let jco = js_installed("js-unit-converter").join("node_modules/@bytecodealliance/jco/dist/jco.js");
    let output = output_in(
        &support::repo_root(),
        "node",
        &[jco.to_str().unwrap(), "wit", wasm.to_str().unwrap()],
        &[],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("import ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// `llm.ready` says whether a chat would pass the provider check, and nothing
/// else: true for the declared default on a node that configures it (its
/// server is never asked), false for a provider the node configures but the
/// plugin does not declare, and false on a node with no model.
#[test]
fn a_plugin_is_told_a_model_is_ready_only_when_the_node_has_it_and_the_plugin_declared_it() {
    let ready = |node: &TestNode, request: Value| {
        let hash = crate::scripting_tools::agora_route(node, "fixture-agent");
        let reply = post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hash, "body": request}),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()["body"]["ready"].clone()
    };
    // Nothing listens here: `ready` must not reach the provider.
    let nowhere = format!("http://127.0.0.1:{}/v1", support::free_port());
    let node = TestNode::builder()
        .plugin("fixture-agent")
        .env("AGORA_LLM__BASE_URL", &nowhere)
        .env("AGORA_LLM__MODEL", "never-called")
        .env("AGORA_LLM__PROVIDERS__OTHER__BASE_URL", &nowhere)
        .env("AGORA_LLM__PROVIDERS__OTHER__MODEL", "never-called")
        .start();
    assert_eq!(ready(&node, json!({"op": "ready"})), json!(true));
    assert_eq!(
        ready(&node, json!({"op": "ready", "provider": "default"})),
        json!(true)
    );
    assert_eq!(
        ready(&node, json!({"op": "ready", "provider": "other"})),
        json!(false)
    );
    assert_eq!(
        ready(&node, json!({"op": "ready", "provider": "absent"})),
        json!(false)
    );
    // Asking spent nothing: no model call was counted.
    let metrics = support::get(&node.url("/metrics")).body;
    assert!(!metrics.contains("agora_llm_calls_total{"), "{metrics}");
    drop(node);

    let node = TestNode::builder().plugin("fixture-agent").start();
    assert_eq!(ready(&node, json!({"op": "ready"})), json!(false));
}

/// Dropping the last handle of a runtime frees its plugins' idle warm
/// instances and everything they hold, the store included: once the runtime
/// is gone the store's directory opens again in the same process (sled locks
/// it while any handle lives). An instance holding the runtime strongly kept
/// the whole runtime alive for ever through its own registry.
#[test]
fn dropping_the_runtime_frees_its_idle_warm_instances_and_the_store() {
    use agora_node::metrics::Metrics;
    use agora_node::runtime::{Call, Exchange, Phase, Runtime, TransportKind};
    use agora_node::store::Store;

    let dir = tempfile::tempdir().unwrap();
    let mut config = agora_node::Config::defaults();
    config.data_dir = dir.path().to_path_buf();
    config.plugins.dir = dir.path().join("plugins");
    config.plugins.cache_dir = dir.path().join("cache");
    support::install_bytes(
        &config.plugins.dir,
        "warm-counter",
        &counter_build("warm", 1000, 2, 60_000),
    );
    let state = dir.path().join("state");
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let store = Store::open(&state).unwrap();
        let runtime = Runtime::new(Arc::new(config), store, Metrics::new()).unwrap();
        runtime.load_all().await;
        let plugin = runtime
            .registry()
            .by_name("fixture-warm-counter")
            .cloned()
            .unwrap();
        let call = |n: u32| Call {
            transport: TransportKind::Agora,
            phase: Phase::Handle,
            route: format!("agora:{}", document_hash_cached()),
            sender: Some(format!("test-{n}")),
            conversation: None,
            body: "\"count\"".into(),
        };
        for expected in 1..=2 {
            let reply = runtime
                .invoke(&plugin, call(expected), Exchange::new())
                .await
                .unwrap();
            let reply: Value = serde_json::from_str(&reply).unwrap();
            assert_eq!(
                reply["count"], expected,
                "both calls ran in the one warm instance"
            );
        }
        assert!(
            Store::open(&state).is_err(),
            "sled refuses a second open while the runtime lives"
        );
        drop(plugin);
        drop(runtime);
        Store::open(&state).expect("the runtime and its idle warm instance are gone with the last handle");
    });
}
