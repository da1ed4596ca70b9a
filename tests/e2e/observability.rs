//! End-to-end tests for what an operator sees of a running node: request ids,
//! the HTTP request metrics in `/metrics`, and `/health` while the plugins
//! compile at start-up.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::envelopes::{self, Agent};
use crate::hostile_signed::primes_request;
use crate::support::{self, TestNode, get, get_with_headers, post};

const PLUGIN: &str = "unit-converter";

/// The value of the sample whose line starts with `series` (name and labels).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[test]
fn request_ids_are_kept_when_sane_else_made_and_always_echoed() {
    let node = TestNode::builder().start();
    let kept = get_with_headers(&node.url("/health"), &[("x-request-id", "client-req.42")]);
    assert_eq!(kept.header("x-request-id"), Some("client-req.42"));

    let made = get(&node.url("/health"))
        .header("x-request-id")
        .map(str::to_string);
    let made = made.expect("a request without an id gets one");
    assert!(uuid::Uuid::parse_str(&made).is_ok(), "{made}");

    for hostile in [
        "a".repeat(65),
        "two words".to_string(),
        "x\"}{injected".to_string(),
    ] {
        let reply = get_with_headers(&node.url("/no/such/path"), &[("x-request-id", &hostile)]);
        let id = reply.header("x-request-id").expect("an id");
        assert_ne!(id, hostile);
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    }
    let again = get(&node.url("/health"))
        .header("x-request-id")
        .map(str::to_string);
    assert_ne!(again.as_deref(), Some(made.as_str()), "each request its own id");
}

#[test]
fn http_requests_are_counted_by_route_template_method_and_status() {
    let node = TestNode::builder()
        .env("AGORA_HTTP__MAX_BODY_BYTES", "2048")
        .start();
    for n in 0..3 {
        let reply = get(&node.url(&format!("/no/such/path-{n}")));
        assert_eq!(reply.status, 404);
    }
    for _ in 0..2 {
        let reply = post(&node.url("/agora"), "text/plain", b"hello");
        assert_eq!(reply.status, 415, "{}", reply.body);
    }
    let oversized = format!("{{\"body\": \"{}\"}}", "x".repeat(4096));
    let reply = post(&node.url("/agora"), "application/json", oversized.as_bytes());
    assert_eq!(reply.status, 413, "{}", reply.body);
    let conversation = get(&node.url("/agora/conversations/some-id-that-is-not-there"));

    let metrics = get(&node.url("/metrics")).body;
    let count = |labels: &str| sample(&metrics, &format!("agora_http_requests_total{{{labels}}}"));
    assert_eq!(
        count(r#"route="unmatched",method="GET",status="404""#),
        Some(3.0),
        "{metrics}"
    );
    assert_eq!(
        count(r#"route="/agora",method="POST",status="415""#),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(
        count(r#"route="/agora",method="POST",status="413""#),
        Some(1.0),
        "the body limit's refusal is counted too: {metrics}"
    );
    let status = conversation.status.to_string();
    assert_eq!(
        count(&format!(
            r#"route="/agora/conversations/{{id}}",method="GET",status="{status}""#
        )),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"agora_http_request_duration_seconds_count{route="/agora",method="POST"}"#
        ),
        Some(3.0),
        "{metrics}"
    );
    for raw in ["path-0", "some-id-that-is-not-there"] {
        assert!(
            !metrics.contains(raw),
            "a raw path leaked into the labels: {metrics}"
        );
    }
}

/// The compile-cache entry the suite's nodes use for `package`: written (or
/// touched) by the node that just loaded it, so the newest such file.
fn cached_entry_name(package: &str) -> String {
    let bytes = std::fs::read(support::plugin_wasm(package)).unwrap();
    let prefix = format!("{}-", hex::encode(Sha256::digest(&bytes)));
    let cache = support::repo_root().join("target/e2e-compile-cache");
    let newest = std::fs::read_dir(&cache)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.starts_with(&prefix) && name.ends_with(".cwasm")
        })
        .max_by_key(|entry| {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        })
        .expect("the first node cached the plugin");
    newest.file_name().to_string_lossy().into_owned()
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("running mkfifo");
    assert!(made.success());
}

#[test]
fn health_says_starting_with_progress_while_a_plugin_compiles_then_ok() {
    // A node on the suite's cache, to learn the cache entry's name for this build.
    let warm = TestNode::builder().plugin(PLUGIN).start();
    assert!(support::has_plugin(&get(&warm.url("/health")).json(), PLUGIN));
    drop(warm);
    let entry = cached_entry_name(PLUGIN);

    // A fresh cache whose only entry for the plugin is a FIFO: the node's read of
    // it blocks until the test opens the other end, so "compiling" is observed
    // for certain, not by winning a race. Nothing is written into it, so the node
    // discards the entry and compiles afresh (a cache miss).
    let data = tempfile::tempdir().unwrap();
    let cache: PathBuf = data.path().join("fresh-cache");
    std::fs::create_dir_all(&cache).unwrap();
    let gate = cache.join(&entry);
    mkfifo(&gate);
    let node = TestNode::builder()
        .data_dir(data.path())
        .env("AGORA_PLUGINS__CACHE_DIR", cache.display().to_string())
        .plugin(PLUGIN)
        .start_listening();

    let starting = node.wait_for_health("the plugin compiling", |health| {
        health["counts"]["compiling"] == 1
    });
    assert_eq!(starting["status"], "starting", "{starting}");
    assert_eq!(starting["counts"]["loaded"], 0, "{starting}");
    let plugins = starting["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 1, "{starting}");
    assert_eq!(plugins[0]["file"], format!("{PLUGIN}.wasm"));
    assert_eq!(plugins[0]["state"], "compiling");
    assert_eq!(
        get(&node.url("/metrics")).status,
        200,
        "the node serves meanwhile"
    );

    // A request needing a plugin that may be the one still compiling: "try
    // again" because the node is loading, not "unknown" and not "overloaded".
    let no_protocol = post(
        &node.url("/agora"),
        "application/json",
        br#"{"protocolHash": null, "body": "what is 1 + 1"}"#,
    );
    assert_eq!(no_protocol.status, 503, "{}", no_protocol.body);
    assert_eq!(no_protocol.header("retry-after"), Some("1"));
    let says_loading = |text: Option<&str>| text.is_some_and(|t| t.contains("still loading its plugins"));
    assert!(
        says_loading(no_protocol.json()["error"].as_str()),
        "{}",
        no_protocol.body
    );
    let alice = Agent::new();
    let (did, _) = envelopes::hello(&node, &alice);
    let request = primes_request(&alice, serde_json::json!({"limit": 10}));
    let reply = envelopes::send(&node, &request, &did);
    reply.assert_error(503, "a resource while plugins load");
    assert!(
        says_loading(reply.payload()["message"].as_str()),
        "{}",
        reply.envelope
    );

    // Open and close the other end: the node reads an empty entry and compiles.
    drop(std::fs::OpenOptions::new().write(true).open(&gate).unwrap());
    let ready = node.wait_for_health_within("the start-up load", Duration::from_secs(240), |health| {
        health["status"] != "starting"
    });
    assert_eq!(ready["status"], "ok", "{ready}");
    assert_eq!(ready["counts"]["loaded"], 1, "{ready}");
    assert_eq!(ready["counts"]["compiling"], 0, "{ready}");
    assert_eq!(ready["plugins"][0]["state"], "loaded", "{ready}");
    assert!(support::has_plugin(&ready, PLUGIN));

    // Once loaded, what no plugin serves is unknown in each protocol's own way.
    let reply = envelopes::send(
        &node,
        &primes_request(&alice, serde_json::json!({"limit": 10})),
        &did,
    );
    reply.assert_error(404, "a resource nobody serves");
    let no_protocol = post(
        &node.url("/agora"),
        "application/json",
        br#"{"protocolHash": null, "body": "what is 1 + 1"}"#,
    );
    assert_eq!(no_protocol.status, 200, "{}", no_protocol.body);
    assert_eq!(no_protocol.json()["status"], "failure", "{}", no_protocol.body);

    let log = node.log_text();
    assert!(log.contains("compiling plugin"), "{log}");
    let compiled = log
        .lines()
        .find(|line| line.contains("plugin compiled"))
        .unwrap_or_else(|| panic!("no compile line: {log}"));
    assert!(
        compiled.contains("cache=\"miss\"") || compiled.contains("cache=miss"),
        "{compiled}"
    );
    assert!(compiled.contains("elapsed_ms="), "{compiled}");
    assert!(log.contains("start-up plugin load done"), "{log}");
}
