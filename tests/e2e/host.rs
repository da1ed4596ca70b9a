//! The plugin host (issue 2): hot reload under load, broken and conflicting
//! plugins, hostile plugins, state across restarts, configuration layers,
//! the scaffold, health and metrics — all against the real binary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{self, TestNode, document_hash, has_plugin, post_json};

const MARKER: &[u8] = b"AGORA-VERSION-MARKER-00000000000";

/// The protocol documents of the fixtures, as their manifests carry them.
pub(crate) fn versioned_hash() -> String {
    document_hash(
        "name: Versioned fixture\ndescription: reports its build marker\nmultiround: false\n---\nAnswers {\"version\": marker}.\n",
    )
}

fn hostile_hash() -> String {
    document_hash(
        "name: Hostile fixture\ndescription: misbehaves on request\nmultiround: false\n---\nbody: \"loop\" | \"memory\" | \"trap\" | \"panic\" | \"huge-output\" | \"emit-flood\" | \"ok\"\n",
    )
}

fn converter_hash() -> String {
    document_hash(
        &std::fs::read_to_string(support::repo_root().join("protocols/unit-conversion.md")).unwrap(),
    )
}

/// The versioned fixture with its marker rewritten to `version`.
pub(crate) fn versioned_build(version: u32) -> Vec<u8> {
    let mut bytes = std::fs::read(support::plugin_wasm("fixture-versioned")).unwrap();
    let at = bytes
        .windows(MARKER.len())
        .position(|w| w == MARKER)
        .expect("marker present in the fixture");
    assert_eq!(
        bytes.windows(MARKER.len()).filter(|w| *w == MARKER).count(),
        1,
        "marker must be unique"
    );
    let replacement = format!("AGORA-VERSION-MARKER-{version:011}");
    bytes[at..at + MARKER.len()].copy_from_slice(replacement.as_bytes());
    bytes
}

pub(crate) fn ask_version(node: &TestNode, hash: &str) -> Result<String, String> {
    let reply = post_json(
        &node.url("/agora"),
        &json!({"protocolHash": hash, "body": "which version?"}),
    );
    if reply.status != 200 {
        return Err(format!("HTTP {}: {}", reply.status, reply.body));
    }
    let value = reply.json();
    if value["status"] != "success" {
        return Err(format!("failure: {value}"));
    }
    Ok(value["body"]["version"].as_str().unwrap_or_default().to_string())
}

#[test]
fn hot_reload_under_load_fails_no_request_and_serves_each_new_version() {
    let node = TestNode::builder().start();
    let hash = versioned_hash();
    support::install_bytes(&node.plugins_dir, "versioned", &versioned_build(0));
    node.wait_for_health("the versioned fixture", |h| has_plugin(h, "fixture-versioned"));

    let ((), load) = support::under_load(
        4,
        |_, _| ask_version(&node, &hash).map(drop),
        || {
            for version in 1..=20u32 {
                support::install_bytes(&node.plugins_dir, "versioned", &versioned_build(version));
                let expected = format!("AGORA-VERSION-MARKER-{version:011}");
                node.wait_until(
                    &format!("version {version} to be served"),
                    Duration::from_secs(30),
                    Duration::from_millis(5),
                    || ask_version(&node, &hash).ok().as_deref() == Some(expected.as_str()),
                );
            }
        },
    );
    load.assert_no_failure(101);
}

#[test]
fn a_broken_plugin_keeps_the_old_version_and_deleting_withdraws_routes() {
    let node = TestNode::builder().plugin("unit-converter").start();
    let hash = converter_hash();
    let request = json!({"protocolHash": hash, "body": {"value": 1, "from": "km", "to": "m"}});
    assert_eq!(
        post_json(&node.url("/agora"), &request).json()["body"]["value"],
        1000.0
    );

    // Overwrite the plugin with something that is not a component.
    support::install_bytes(
        &node.plugins_dir,
        "unit-converter",
        b"\0asm this is not a component",
    );
    let health = node.wait_for_health("the load error", |h| {
        h["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["error"].is_string())
    });
    assert_eq!(health["status"], "degraded");
    let entry = &health["plugins"][0];
    assert!(
        entry["error"].as_str().unwrap().contains("unit-converter.wasm"),
        "{entry}"
    );
    assert_eq!(
        entry["name"], "unit-converter",
        "the previous version is still listed as serving"
    );
    assert_eq!(
        post_json(&node.url("/agora"), &request).json()["body"]["value"],
        1000.0
    );
    assert!(
        support::get(&node.url("/agora/wellknown"))
            .json()
            .get(&hash)
            .is_some()
    );

    // A good version clears the error.
    support::install_plugin(&node.plugins_dir, "unit-converter");
    node.wait_for_health("the error to clear", |h| h["status"] == "ok");

    // Deleting the file withdraws both the route and the /wellknown entry.
    std::fs::remove_file(node.plugins_dir.join("unit-converter.wasm")).unwrap();
    node.wait_for_health("the plugin to be withdrawn", |h| {
        h["plugins"].as_array().unwrap().is_empty()
    });
    let reply = post_json(&node.url("/agora"), &request).json();
    assert_eq!(
        reply,
        json!({"status": "failure", "error": "Unsupported protocol"})
    );
    assert_eq!(support::get(&node.url("/agora/wellknown")).json(), json!({}));
}

#[test]
fn two_plugins_claiming_one_route_is_an_error_naming_both() {
    let node = TestNode::builder().plugin("unit-converter").start();
    let bytes = std::fs::read(support::plugin_wasm("unit-converter")).unwrap();
    support::install_bytes(&node.plugins_dir, "zz-converter-copy", &bytes);
    let health = node.wait_for_health("the conflict", |h| h["status"] == "degraded");
    let error = health["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|p| p["error"].as_str())
        .unwrap()
        .to_string();
    assert!(
        error.contains("unit-converter.wasm") && error.contains("zz-converter-copy.wasm"),
        "{error}"
    );
    assert!(
        error.contains("claimed by both") || error.contains("used by both"),
        "{error}"
    );
    // The plugin that was there first keeps serving.
    let reply = post_json(
        &node.url("/agora"),
        &json!({"protocolHash": converter_hash(), "body": {"value": 2, "from": "kg", "to": "g"}}),
    );
    assert_eq!(reply.json()["body"]["value"], 2000.0);
}

#[test]
fn hostile_plugins_fail_only_their_own_request() {
    let node = TestNode::builder()
        .plugin("fixture-hostile")
        .plugin("unit-converter")
        .env("AGORA_PLUGINS__CALL_TIMEOUT_MS", "500")
        .env("AGORA_PLUGINS__MAX_MEMORY_MB", "32")
        .start();
    let hostile = hostile_hash();
    let converter = json!({"protocolHash": converter_hash(), "body": {"value": 1, "from": "h", "to": "min"}});
    let cases = [
        ("loop", "execution time"),
        ("memory", "memory limit"),
        ("trap", "the plugin failed"),
        ("panic", "the plugin failed"),
        ("huge-output", ""),
    ];
    for (behaviour, expected) in cases {
        let started = Instant::now();
        let reply = post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hostile, "body": behaviour}),
        );
        assert_eq!(reply.status, 500, "{behaviour}: {}", reply.body);
        let body = reply.json();
        assert_eq!(body["status"], "failure", "{behaviour}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(expected),
            "{behaviour}: {body}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{behaviour} was not contained"
        );
        // The node and the other plugin keep serving after each.
        assert_eq!(
            post_json(&node.url("/agora"), &converter).json()["body"]["value"],
            60.0,
            "after {behaviour}"
        );
        assert_eq!(support::get(&node.url("/health")).json()["status"], "ok");
    }
    // The hostile plugin itself still serves well-behaved requests.
    assert_eq!(
        post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hostile, "body": "ok"})
        )
        .json()["body"],
        "ok"
    );
    // Emits with nobody listening are bounded and harmless.
    assert_eq!(
        post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hostile, "body": "emit-flood"})
        )
        .json()["body"],
        "flood stopped"
    );
    let metrics = support::get(&node.url("/metrics")).body;
    assert!(
        metrics.contains(
            "agora_plugin_traps_total{transport=\"agora\",plugin=\"fixture-hostile\",outcome=\"timeout\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("outcome=\"memory\"} 1"), "{metrics}");
}

#[test]
fn conversations_survive_a_crash_and_restart() {
    let data = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let node = TestNode::builder()
        .data_dir(data.path())
        .port(port)
        .plugin("unit-converter")
        .start();
    let hash = converter_hash();
    let started = post_json(
        &node.url("/agora"),
        &json!({"protocolHash": hash, "multiround": true, "body": {"value": 1, "from": "mi", "to": "km"}}),
    )
    .json();
    let id = started["conversationId"]
        .as_str()
        .expect("a conversation id")
        .to_string();
    assert!(id.len() >= 22, "ids carry at least 128 bits: {id}");
    node.kill();
    let cached = |dir: &std::path::Path| -> Vec<_> {
        let mut files: Vec<_> = std::fs::read_dir(dir.join("cache"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
    };
    let before = cached(data.path());
    assert_eq!(before.len(), 1, "the compiled plugin is cached: {before:?}");
    // A rewrite goes through a temporary file and a rename: a new inode. (The
    // modification time is no witness: a cache hit touches it, for the LRU bound.)
    let inode =
        |path: &std::path::Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap());
    let written = inode(&before[0]);

    let node = TestNode::builder().data_dir(data.path()).port(port).start();
    node.wait_for_health("the plugin after restart", |h| has_plugin(h, "unit-converter"));
    assert_eq!(
        cached(data.path()),
        before,
        "a restart reuses the compiled artifact"
    );
    assert_eq!(inode(&before[0]), written, "and does not rewrite it");
    let reply = post_json(
        &node.url(&format!("/agora/conversations/{id}")),
        &json!({"body": {"value": 2, "from": "mi", "to": "km"}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = reply.json();
    assert_eq!(reply["conversationId"], id.as_str());
    assert_eq!(reply["conversationExpires"], started["conversationExpires"]);
    assert_eq!(
        reply["body"]["value"], 3.21869,
        "6 significant digits, as the protocol document says"
    );
}

#[test]
fn sigterm_drains_in_flight_requests() {
    let node = TestNode::builder()
        .plugin("fixture-hostile")
        .env("AGORA_PLUGINS__CALL_TIMEOUT_MS", "1500")
        .start();
    let url = node.url("/agora");
    let body = json!({"protocolHash": hostile_hash(), "body": "loop"});
    let in_flight = std::thread::spawn(move || post_json(&url, &body));
    std::thread::sleep(Duration::from_millis(300));
    let status = node.stop();
    let reply = in_flight.join().unwrap();
    assert_eq!(
        reply.status, 500,
        "the in-flight request got its answer: {}",
        reply.body
    );
    assert!(reply.body.contains("execution time"));
    assert!(status.success(), "graceful shutdown exits 0: {status:?}");
}

#[test]
fn shutdown_stops_the_nodes_background_tasks_within_the_grace_period() {
    let node = TestNode::builder().start();
    node.signal_stop();
    node.wait_for_log("background tasks stopped");
    let log = node.log_text();
    let line = log
        .lines()
        .find(|line| line.contains("background tasks stopped"))
        .unwrap();
    // The store's sweeper and schedules at least, and every transport's own loops.
    let tasks: usize = line
        .split("tasks=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no task count in {line:?}"));
    assert!(tasks >= 3, "{line}");
    assert!(!log.contains("background tasks still running"), "{log}");
    assert!(node.stop().success());
}

fn run_node_expecting_failure(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agora-node"));
    command
        .arg("serve")
        .args(args)
        .current_dir(dir.path())
        .env("AGORA_DATA_DIR", dir.path());
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    assert!(!output.status.success(), "start-up should fail");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_bad_config_value_stops_start_up_naming_the_key() {
    let stderr = run_node_expecting_failure(&[], &[("AGORA_PLUGINS__MAX_MEMORY_MB", "lots")]);
    assert!(stderr.contains("`plugins.max_memory_mb`"), "{stderr}");
    let stderr = run_node_expecting_failure(&[], &[("AGORA_LISTEN", "not-an-address")]);
    assert!(stderr.contains("`listen`"), "{stderr}");
    let stderr = run_node_expecting_failure(&[], &[("AGORA_TOOLS__APPROVAL_THRESHOLD", "scary")]);
    assert!(stderr.contains("tools.approval_threshold"), "{stderr}");
    let stderr = run_node_expecting_failure(&[], &[("AGORA_PLUGINS__NO_SUCH_KEY", "1")]);
    assert!(stderr.contains("no_such_key"), "{stderr}");
    let stderr = run_node_expecting_failure(&[], &[("AGORA_ARENA__PATH", "/agora")]);
    assert!(stderr.contains("`arena.path`"), "{stderr}");
    let stderr = run_node_expecting_failure(&["--config", "/nonexistent/agora.toml"], &[]);
    assert!(stderr.contains("does not exist"), "{stderr}");
}

#[test]
fn client_command_variables_do_not_stop_serve() {
    // An unknown AGORA_ key is refused (the old name of the seed variable was one)...
    let stderr = run_node_expecting_failure(&[], &[("AGORA_UAGENTS_CLIENT_SEED", "seed")]);
    assert!(stderr.contains("uagents_client_seed"), "{stderr}");
    // ...but the client commands' AGORA_CLI_* variables are not configuration.
    let node = TestNode::builder()
        .env("AGORA_CLI_UAGENTS_SEED", "my client seed")
        .env("AGORA_CLI__NESTED__KEY", "1")
        .start();
    assert_eq!(support::get(&node.url("/health")).status, 200);
}

#[test]
fn config_layers_apply_in_order_file_env_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("custom.toml");
    let (file_port, env_port, flag_port) = (support::free_port(), support::free_port(), support::free_port());
    std::fs::write(
        &file,
        format!("listen = \"127.0.0.1:{file_port}\"\n[agora]\npath = \"/from-file\"\n"),
    )
    .unwrap();
    let file_arg = file.to_str().unwrap();

    // File only: its listen address and path.
    let node = TestNode::builder()
        .arg("--config")
        .arg(file_arg)
        .port(file_port)
        .start_with_file_listen();
    assert_eq!(
        support::get(&format!("http://127.0.0.1:{file_port}/from-file/wellknown")).status,
        200
    );
    drop(node);

    // Environment over file.
    let node = TestNode::builder()
        .arg("--config")
        .arg(file_arg)
        .env("AGORA_AGORA__PATH", "/from-env")
        .port(env_port)
        .start();
    assert_eq!(support::get(&node.url("/from-env/wellknown")).status, 200);
    assert_eq!(support::get(&node.url("/from-file/wellknown")).status, 404);
    drop(node);

    // Flag over environment.
    let node = TestNode::builder()
        .arg("--config")
        .arg(file_arg)
        .arg("--listen")
        .arg(&format!("127.0.0.1:{flag_port}"))
        .port(flag_port)
        .start_with_file_listen();
    assert_eq!(
        support::get(&format!("http://127.0.0.1:{flag_port}/from-file/wellknown")).status,
        200
    );
    drop(node);
}

#[test]
fn scaffolded_plugin_outside_the_repo_builds_with_its_vendored_sdk_and_loads() {
    let dir = tempfile::tempdir().unwrap();
    assert!(!dir.path().starts_with(support::repo_root()));
    let crate_dir = crate::scripting::scaffold("demo-echo", "rust", dir.path());
    // The SDK comes from the binary, not from this source tree.
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains(r#"agora-plugin-sdk = { path = "vendor/agora-plugin-sdk" }"#),
        "{manifest}"
    );
    let root = support::repo_root().canonicalize().unwrap();
    assert!(!manifest.contains(root.to_str().unwrap()), "{manifest}");
    assert_eq!(
        std::fs::read_to_string(crate_dir.join("vendor/agora-plugin-sdk/src/lib.rs")).unwrap(),
        std::fs::read_to_string(root.join("plugin-sdk/src/lib.rs")).unwrap()
    );
    // Offline: the scaffold's Cargo.lock pins what the node's workspace already fetched.
    let build = std::process::Command::new("cargo")
        .args([
            "build",
            "--quiet",
            "--offline",
            "--profile",
            "release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(support::repo_root().join("target/plugins"))
        .current_dir(&crate_dir)
        .status()
        .unwrap();
    assert!(build.success(), "the scaffold builds");
    let wasm = support::repo_root().join("target/plugins/wasm32-wasip2/release/demo_echo.wasm");
    let node = TestNode::builder().start();
    support::install_bytes(&node.plugins_dir, "demo-echo", &std::fs::read(wasm).unwrap());
    node.wait_for_health("the scaffolded plugin", |h| has_plugin(h, "demo-echo"));
    let hash = document_hash(&std::fs::read_to_string(crate_dir.join("protocol.md")).unwrap());
    let reply = post_json(
        &node.url("/agora"),
        &json!({"protocolHash": hash, "body": {"text": "hi"}}),
    )
    .json();
    assert_eq!(reply["body"], json!({"reply": "you said: hi"}));
}

#[test]
fn health_lists_plugins_and_metrics_count_calls() {
    let node = TestNode::builder().plugin("unit-converter").start();
    let health = node.wait_for_health("the plugin", |h| has_plugin(h, "unit-converter"));
    let plugin = &health["plugins"][0];
    assert_eq!(plugin["version"], "0.1.0");
    let routes: Vec<&str> = plugin["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        routes.contains(&format!("agora:{}", converter_hash()).as_str()),
        "{routes:?}"
    );
    assert!(routes.contains(&"tool:convert_units"), "{routes:?}");
    for _ in 0..3 {
        post_json(
            &node.url("/agora"),
            &json!({"protocolHash": converter_hash(), "body": {"value": 1, "from": "l", "to": "ml"}}),
        );
    }
    let metrics = support::get(&node.url("/metrics"));
    assert!(metrics.content_type.starts_with("application/openmetrics-text"));
    assert!(
        metrics.body.contains(
            "agora_plugin_calls_total{transport=\"agora\",plugin=\"unit-converter\",outcome=\"ok\"} 3"
        ),
        "{}",
        metrics.body
    );
    assert!(
        metrics
            .body
            .contains("agora_plugin_reloads_total{outcome=\"ok\"}")
    );
    assert!(metrics.body.contains("agora_plugin_call_seconds_bucket"));
}

#[test]
fn dev_mode_rebuilds_a_saved_plugin_and_serves_it_live() {
    let dir = tempfile::tempdir().unwrap();
    let sources = dir.path().join("sources");
    let made = std::process::Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .args(["plugin", "new", "demo-live", "--dir"])
        .arg(&sources)
        .status()
        .unwrap();
    assert!(made.success());
    let lib = sources.join("demo-live/src/lib.rs");
    let hash = document_hash(&std::fs::read_to_string(sources.join("demo-live/protocol.md")).unwrap());
    let node = TestNode::builder()
        .arg("--plugins-dir")
        .arg(dir.path().join("live-plugins").to_str().unwrap())
        .env("AGORA_PLUGINS__SOURCES_DIR", sources.to_str().unwrap())
        .env(
            "CARGO_TARGET_DIR",
            support::repo_root().join("target/plugins").to_str().unwrap(),
        )
        .start_dev();
    node.wait_for_health_within("the first build", Duration::from_secs(600), |h| {
        has_plugin(h, "demo-live")
    });
    let ask = || {
        post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hash, "body": {"text": "hi"}}),
        )
        .json()
    };
    assert_eq!(ask()["body"]["reply"], "you said: hi");

    // One save: edit the handler and wait for the new answer.
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, source.replace("you said", "you wrote")).unwrap();
    node.wait_until(
        "the edit to go live",
        Duration::from_secs(600),
        Duration::from_millis(200),
        || ask()["body"]["reply"] == "you wrote: hi",
    );
}

#[test]
fn exhausted_instance_slots_answer_overloaded_not_a_crash() {
    let node = TestNode::builder()
        .plugin("fixture-hostile")
        .env("AGORA_PLUGINS__MAX_INSTANCES", "1")
        .env("AGORA_PLUGINS__CALL_TIMEOUT_MS", "2000")
        .start();
    let url = node.url("/agora");
    let hash = hostile_hash();
    let looping = {
        let (url, body) = (url.clone(), json!({"protocolHash": hash, "body": "loop"}));
        std::thread::spawn(move || post_json(&url, &body))
    };
    std::thread::sleep(Duration::from_millis(400));
    let refused = post_json(&url, &json!({"protocolHash": hash, "body": "ok"}));
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["status"], "failure");
    assert_eq!(looping.join().unwrap().status, 500);
    // The slot is free again.
    assert_eq!(
        post_json(&url, &json!({"protocolHash": hash, "body": "ok"})).json()["body"],
        "ok"
    );
}

#[test]
fn concurrent_durable_writes_never_wedge_the_node() {
    // Every multi-round start flushes the store before replying; many at once must all finish.
    // 160 conversations from one address: above the per-client caps, which are not under test here.
    let node = Arc::new(
        TestNode::builder()
            .plugin("unit-converter")
            .env("AGORA_AGORA__MAX_CONVERSATIONS_PER_CLIENT", "1000")
            .env("AGORA_AGORA__CONVERSATIONS_PER_CLIENT_PER_MINUTE", "1000")
            .start(),
    );
    let hash = converter_hash();
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let (node, hash) = (node.clone(), hash.clone());
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| {
                        post_json(
                            &node.url("/agora"),
                            &json!({"protocolHash": hash, "multiround": true, "body": {"value": 1, "from": "d", "to": "h"}}),
                        )
                        .status
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    let statuses: Vec<u16> = clients.into_iter().flat_map(|c| c.join().unwrap()).collect();
    assert_eq!(statuses.len(), 160);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
}

#[test]
fn protocol_hash_prints_the_documents_sha1_in_hex_and_base64() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let text = "name: x\ndescription: y\nmultiround: false\n---\nz\n";
    std::fs::write(file.path(), text).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .args(["protocol", "hash"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], document_hash(text));
    let digest = hex::decode(lines[0]).unwrap();
    use base64::Engine as _;
    assert_eq!(lines[1], base64::engine::general_purpose::STANDARD.encode(digest));
}

#[test]
fn version_names_the_node_the_sdk_and_the_wit_package() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(output.status.success());
    let wit = std::fs::read_to_string(support::repo_root().join("plugin-sdk/wit/agora-node.wit")).unwrap();
    let package = wit
        .lines()
        .find_map(|line| line.strip_prefix("package "))
        .unwrap()
        .trim_end_matches(';');
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("agora-node {version} (plugin SDK {version}, WIT {package})")
    );
}
