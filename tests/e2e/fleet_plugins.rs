//! Plugins for a fleet (issue 40, point 2): a plugin dropped into, replaced
//! in or removed from one node's folder, or published from the command line,
//! is served by every node of the fleet; a node that starts later loads the
//! fleet's set; a version that does not compile leaves every node on the old
//! one, saying so; `plugins.fleet = false` keeps a node to its own folder.
//! Two real nodes on a real PostgreSQL; the plugin is the versioned fixture,
//! whose answer names its build.

use std::process::Command;
use std::time::Duration;

use agora_test_postgres::Postgres;
use serde_json::Value;

use crate::host::{ask_version, versioned_build, versioned_hash};
use crate::support::{self, TestNode};

/// A liveness deadline for a change to reach a node (a bus message, or the
/// 10 s resync), with a compile on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(90);

fn fleet_node(database: &str, env: &[(&str, &str)]) -> TestNode {
    TestNode::builder().on_database(database).envs(env).start()
}

fn marker(version: u32) -> String {
    format!("AGORA-VERSION-MARKER-{version:011}")
}

/// Wait until `node` answers with build `version`.
fn wait_for_version(node: &TestNode, version: u32) {
    let hash = versioned_hash();
    let expected = marker(version);
    node.wait_until(
        &format!("version {version} to be served on port {}", node.port),
        PATIENCE,
        Duration::from_millis(50),
        || ask_version(node, &hash).ok().as_deref() == Some(expected.as_str()),
    );
}

/// The `/health` entry of the file `versioned.wasm`, if any.
fn versioned_entry(node: &TestNode) -> Option<Value> {
    let health = support::get_json(&node.url("/health")).ok()?;
    health["plugins"]
        .as_array()?
        .iter()
        .find(|plugin| plugin["file"] == "versioned.wasm")
        .cloned()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// `agora-node plugin ARGS` against `database`; (exit code, stdout + stderr).
fn plugin_command(database: &str, args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .arg("plugin")
        .args(args)
        .env("AGORA_STORE__BACKEND", "postgres")
        .env("AGORA_STORE__POSTGRES_URL", database)
        .env("AGORA_LOG_FORMAT", "human")
        .output()
        .expect("running agora-node plugin");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

#[test]
fn a_plugin_dropped_replaced_or_removed_in_one_folder_reaches_every_node() {
    let database = Postgres::shared().create_database();
    let a = fleet_node(&database, &[]);
    let b = fleet_node(&database, &[]);

    // Dropped into A's folder: B serves it, byte for byte.
    let first = versioned_build(1);
    support::install_bytes(&a.plugins_dir, "versioned", &first);
    wait_for_version(&b, 1);
    assert_eq!(
        versioned_entry(&b).expect("B's health lists it")["content_sha256"],
        sha256_hex(&first)
    );
    assert_eq!(
        std::fs::read(b.plugins_dir.join("versioned.wasm")).unwrap(),
        first,
        "B's folder mirrors the fleet's set"
    );

    // Replaced in B's folder: A follows.
    support::install_bytes(&b.plugins_dir, "versioned", &versioned_build(2));
    wait_for_version(&a, 2);
    wait_for_version(&b, 2);

    // Removed from A's folder: B withdraws it too.
    std::fs::remove_file(a.plugins_dir.join("versioned.wasm")).unwrap();
    b.wait_until(
        "B to withdraw the plugin",
        PATIENCE,
        Duration::from_millis(50),
        || versioned_entry(&b).is_none(),
    );
    assert!(!b.plugins_dir.join("versioned.wasm").exists());
    assert!(ask_version(&b, &versioned_hash()).is_err());
}

#[test]
fn a_node_that_starts_later_loads_the_fleets_set_and_sets_aside_what_it_lacks() {
    let database = Postgres::shared().create_database();
    let a = fleet_node(&database, &[]);
    support::install_bytes(&a.plugins_dir, "versioned", &versioned_build(3));
    wait_for_version(&a, 3);
    a.wait_for_log("published to the fleet");

    // C arrives with an old build of the same file and a plugin the fleet never had.
    let c_dir = tempfile::tempdir().unwrap();
    let c_plugins = c_dir.path().join("plugins");
    support::install_bytes(&c_plugins, "versioned", &versioned_build(1));
    support::install_plugin(&c_plugins, "trivia");
    let c = TestNode::builder()
        .data_dir(c_dir.path())
        .on_database(&database)
        .env(
            "AGORA_PLUGINS__CACHE_DIR",
            support::repo_root()
                .join("target/e2e-compile-cache")
                .display()
                .to_string(),
        )
        .start();
    wait_for_version(&c, 3);
    let health = support::get_json(&c.url("/health")).unwrap();
    assert!(
        !support::has_plugin(&health, "trivia"),
        "a plugin the fleet's set lacks is not served: {health}"
    );
    assert!(
        c_plugins.join("trivia.wasm.unpublished").exists(),
        "set aside, not deleted"
    );
    assert!(!c_plugins.join("trivia.wasm").exists());
    // And A never saw it.
    assert!(!a.plugins_dir.join("trivia.wasm").exists());
}

#[test]
fn publish_from_the_command_line_reaches_every_node_and_a_broken_build_leaves_the_old_one() {
    let database = Postgres::shared().create_database();
    let a = fleet_node(&database, &[]);
    let b = fleet_node(&database, &[]);
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("versioned.wasm");

    std::fs::write(&file, versioned_build(4)).unwrap();
    let (code, output) = plugin_command(&database, &["publish", file.to_str().unwrap()]);
    assert_eq!(code, 0, "publish: {output}");
    assert!(output.contains("published versioned.wasm"), "{output}");
    wait_for_version(&a, 4);
    wait_for_version(&b, 4);

    // A build that is a component header and nothing more: published (the CLI
    // does not compile), refused by every node, each keeping version 4.
    let mut broken = b"\0asm\x0d\x00\x01\x00".to_vec();
    broken.extend_from_slice(b"not a component body");
    std::fs::write(&file, &broken).unwrap();
    let (code, output) = plugin_command(
        &database,
        &["publish", file.to_str().unwrap(), "--wait-secs", "60"],
    );
    assert_eq!(code, 2, "a rollout no node could follow exits 2: {output}");
    assert!(output.contains("keeps its previous version"), "{output}");
    for node in [&a, &b] {
        node.wait_until(
            "the failed load in /health",
            PATIENCE,
            Duration::from_millis(50),
            || versioned_entry(node).is_some_and(|entry| entry["error"].is_string()),
        );
        assert_eq!(ask_version(node, &versioned_hash()).unwrap(), marker(4));
    }

    // Not a component at all: refused before anything is published.
    std::fs::write(&file, b"hello").unwrap();
    let (code, output) = plugin_command(&database, &["publish", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("not a WebAssembly component"), "{output}");

    let (code, output) = plugin_command(&database, &["unpublish", "versioned"]);
    assert_eq!(code, 0, "unpublish: {output}");
    for node in [&a, &b] {
        node.wait_until(
            "the plugin withdrawn",
            PATIENCE,
            Duration::from_millis(50),
            || versioned_entry(node).is_none(),
        );
    }
    let (code, output) = plugin_command(&database, &["unpublish", "versioned"]);
    assert_eq!(code, 1, "unpublishing what is not there is an error: {output}");
}

#[test]
fn a_node_with_fleet_plugins_off_serves_its_own_folder_only() {
    let database = Postgres::shared().create_database();
    let a = fleet_node(&database, &[]);
    let own = fleet_node(&database, &[("AGORA_PLUGINS__FLEET", "false")]);
    support::install_bytes(&own.plugins_dir, "versioned", &versioned_build(5));
    wait_for_version(&own, 5);
    support::install_bytes(&a.plugins_dir, "versioned", &versioned_build(6));
    wait_for_version(&a, 6);
    a.wait_for_log("published to the fleet");
    // The fleet's change does not reach it (its next resyncs come and go).
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(ask_version(&own, &versioned_hash()).unwrap(), marker(5));
}

#[test]
fn the_command_line_refuses_a_node_on_its_own_store() {
    let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .args(["plugin", "list"])
        .env("AGORA_STORE__BACKEND", "sled")
        .env("AGORA_DATA_DIR", tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("shared store"), "{text}");
}
