//! Agora two-party JSON exchanges ("Agora Protocol for Two-Party JSON Exchanges") over real
//! HTTP against a real node with the example plugins, and interop with the
//! reference library agora-protocol 0.2.0 in both directions.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use crate::support::{self, HttpReply, TestNode, delete, get, post, post_json};

// --- helpers ---

fn protocol_text(file: &str) -> String {
    std::fs::read_to_string(support::repo_root().join("protocols").join(file))
        .expect("reading a protocol document")
}

fn sha1_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha1::digest(bytes))
}

/// The `data:` URI agora-protocol 0.2.0 writes (`encode_as_data_uri`: percent-encoded).
fn percent_data_uri(text: &str) -> String {
    let mut out = String::from("data:text/plain;charset=utf-8,");
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn base64_data_uri(text: &str) -> String {
    format!(
        "data:text/plain;charset=utf-8;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(text)
    )
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn start(node: &TestNode, request: Value) -> HttpReply {
    post_json(&node.url("/agora"), &request)
}

fn follow(node: &TestNode, id: &str, request: Value) -> HttpReply {
    post_json(&node.url(&format!("/agora/conversations/{id}")), &request)
}

/// A 200 `{"status":"success"}` reply's body, or a panic showing what came back.
fn success_body(reply: &HttpReply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.content_type.starts_with("application/json"),
        "{}",
        reply.content_type
    );
    let value = reply.json();
    assert_eq!(value["status"], "success", "{value}");
    assert!(value.get("error").is_none(), "{value}");
    value["body"].clone()
}

/// A 200 Agora-level failure's error message (§10.2).
fn failure_error(reply: &HttpReply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.body);
    let value = reply.json();
    assert_eq!(value["status"], "failure", "{value}");
    assert!(value.get("body").is_none(), "{value}");
    value["error"].as_str().expect("error is a string").to_string()
}

/// A transport-level error (§10.1): the status, and a JSON failure naming the problem.
fn transport_error(reply: &HttpReply, status: u16) -> String {
    assert_eq!(reply.status, status, "{}", reply.body);
    let value = reply.json();
    assert_eq!(value["status"], "failure", "{value}");
    value["error"].as_str().expect("error is a string").to_string()
}

/// The node still answers a plain single-round request and its well-known list.
fn assert_serves(node: &TestNode) {
    let body = success_body(&start(node, json!({"body": "what is 20 + 22"})));
    assert_eq!(body, "20 + 22 = 42");
    assert_eq!(get(&node.url("/agora/wellknown")).status, 200);
}

fn agora_node() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agora-node"))
}

/// Run `agora-node agora ARGS…` and return (exit success, printed JSON).
fn cli(args: &[&str]) -> (bool, Value) {
    let output = agora_node()
        .arg("agora")
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("running agora-node agora");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("the CLI printed no JSON ({e}): {stdout}"));
    (output.status.success(), value)
}

fn python() -> PathBuf {
    support::python_venv("agora-protocol", &["agora-protocol==0.2.0"])
}

fn interop_dir() -> PathBuf {
    support::repo_root().join("tests/interop/agora")
}

// --- single round (§5.2, §6) ---

#[test]
fn single_round_without_protocol_goes_to_the_default_plugin() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .start();
    // The spec's own example shape, with an explicit null hash.
    let reply = start(
        &node,
        json!({"protocolHash": null, "body": "Hello! What is the weather tomorrow in London?"}),
    );
    let body = success_body(&reply);
    assert!(body.as_str().unwrap().contains("weather"), "{body}");
    assert!(reply.json().get("conversationId").is_none());
    assert!(reply.json().get("conversationExpires").is_none());
    // Extra fields are ignored (§6.1); the trailing-slash base works too.
    let reply = post_json(
        &node.url("/agora/"),
        &json!({"body": "what is 2 + 3 * (4 - 1)", "x-trace": [1, 2], "protocolSources": []}),
    );
    assert_eq!(success_body(&reply), "2 + 3 * (4 - 1) = 11");
    // The default plugin calls another plugin's tool through the host.
    let body = success_body(&start(&node, json!({"body": "convert 5 km to m"})));
    assert_eq!(body, "5 km is 5000 m.");
    // An object body is accepted too.
    let body = success_body(&start(&node, json!({"body": {"message": "help"}})));
    assert!(body.as_str().unwrap().contains("arithmetic"), "{body}");
}

#[test]
fn a_node_without_a_default_plugin_says_so() {
    let node = TestNode::builder().plugin("unit-converter").start();
    let error = failure_error(&start(&node, json!({"body": "hello"})));
    assert_eq!(error, "No handler for requests without a protocol");
    // A configured default wins over the manifest flag, even when it names no loaded plugin.
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("protocol-inspector")
        .env("AGORA_AGORA__DEFAULT_PLUGIN", "no-such-plugin")
        .start();
    let error = failure_error(&start(&node, json!({"body": "hello"})));
    assert_eq!(error, "No handler for requests without a protocol");
}

#[test]
fn protocol_hash_in_hex_or_base64_routes_to_the_plugin() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .start();
    let document = protocol_text("unit-conversion.md");
    let query = json!({"value": 100, "from": "C", "to": "F"});
    for hash in [
        support::document_hash(&document),
        support::document_hash(&document).to_uppercase(),
        sha1_base64(document.as_bytes()),
    ] {
        let body = success_body(&start(&node, json!({"protocolHash": hash, "body": query})));
        assert_eq!(body["value"], 212.0, "{hash}: {body}");
        assert_eq!(body["unit"], "F");
    }
    // A structured body held in a string, as agora-protocol sends every body.
    let body = success_body(&start(
        &node,
        json!({"protocolHash": support::document_hash(&document), "body": query.to_string()}),
    ));
    assert_eq!(body["value"], 212.0, "{body}");
    // A protocol-level error is a success at the Agora layer, described in `body` (§10.3).
    let body = success_body(&start(
        &node,
        json!({"protocolHash": support::document_hash(&document), "body": {"value": 1, "from": "kg", "to": "m"}}),
    ));
    assert!(
        body["error"].as_str().unwrap().contains("cannot convert"),
        "{body}"
    );
    let body = success_body(&start(
        &node,
        json!({"protocolHash": support::document_hash(&document), "body": "not a query"}),
    ));
    assert!(body["error"].is_string(), "{body}");
}

#[test]
fn wellknown_lists_hex_hashes_of_the_exact_document_bytes_in_both_layouts() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .plugin("guess-number")
        .plugin("protocol-inspector")
        .start();
    let spec_layout = protocol_text("unit-conversion.md");
    let front_matter = protocol_text("guess-number.md");
    assert!(!spec_layout.starts_with("---") && front_matter.starts_with("---\n"));
    let reply = get(&node.url("/agora/wellknown"));
    assert_eq!(reply.status, 200);
    assert!(reply.content_type.starts_with("application/json"));
    let listed = reply.json();
    let expected = json!({
        support::document_hash(&spec_layout): [spec_layout],
        support::document_hash(&front_matter): [front_matter],
    });
    // Plugins without documents (the default, the any-document one) add nothing.
    assert_eq!(listed, expected);
    // Each listed hash routes; one byte more is another document, which the node does not know.
    let routed = success_body(&start(
        &node,
        json!({"protocolHash": support::document_hash(&front_matter), "multiround": true, "body": {"start": {"min": 1, "max": 2}}}),
    ));
    assert_eq!(routed, json!({"started": true, "min": 1, "max": 2}));
    let changed = format!("{front_matter}\n");
    let error = failure_error(&start(
        &node,
        json!({"protocolHash": support::document_hash(&changed), "body": {"guess": 1}}),
    ));
    assert_eq!(error, "Unsupported protocol");
}

// --- unknown hashes and protocolSources (§8.3) ---

const UNKNOWN_DOCUMENT: &str = "---\nname: Weather\ndescription: A forecast for a city and a date.\nmultiround: false\n---\n\nThe body is {\"city\": string, \"date\": \"YYYY-MM-DD\"}.\n";

#[test]
fn unknown_hash_is_unsupported_even_when_its_sources_verify() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .start();
    let hash = support::document_hash(UNKNOWN_DOCUMENT);
    let body = json!({"city": "London", "date": "2025-03-14"});
    let without_sources = start(&node, json!({"protocolHash": hash, "body": body}));
    assert_eq!(failure_error(&without_sources), "Unsupported protocol");
    for sources in [
        json!([UNKNOWN_DOCUMENT]),
        json!([percent_data_uri(UNKNOWN_DOCUMENT)]),
        json!([base64_data_uri(UNKNOWN_DOCUMENT)]),
    ] {
        let reply = start(
            &node,
            json!({"protocolHash": sha1_base64(UNKNOWN_DOCUMENT.as_bytes()), "protocolSources": sources, "body": body}),
        );
        assert_eq!(failure_error(&reply), "Unsupported protocol", "{sources}");
    }
    assert_serves(&node);
}

#[test]
fn sources_that_do_not_match_the_hash_are_refused_and_urls_are_not_fetched() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .start();
    let hash = support::document_hash(UNKNOWN_DOCUMENT);
    let other = UNKNOWN_DOCUMENT.replace("Weather", "Climate");
    for sources in [
        json!([other]),
        json!([percent_data_uri(&other)]),
        json!([base64_data_uri(&other), format!("{UNKNOWN_DOCUMENT} ")]),
    ] {
        let reply = start(
            &node,
            json!({"protocolHash": hash, "protocolSources": sources, "body": "x"}),
        );
        assert_eq!(
            failure_error(&reply),
            "protocolSources do not match protocolHash",
            "{sources}"
        );
    }
    // A known hash whose own sources contradict it is refused the same way.
    let known = protocol_text("unit-conversion.md");
    let reply = start(
        &node,
        json!({"protocolHash": support::document_hash(&known), "protocolSources": [other], "body": {"value": 1, "from": "m", "to": "cm"}}),
    );
    assert_eq!(failure_error(&reply), "protocolSources do not match protocolHash");
    // A URL source is never fetched unless `agora.source_hosts` allows its host.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/weather.md", listener.local_addr().unwrap());
    let reply = start(
        &node,
        json!({"protocolHash": hash, "protocolSources": [url], "body": "x"}),
    );
    assert_eq!(failure_error(&reply), "Unsupported protocol");
    assert_eq!(
        listener.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the node contacted a source host it was not allowed to"
    );
    // Bad data: URIs are malformed fields.
    for source in [
        "data:text/plain;base64,!!!",
        "data:no-comma",
        "data:text/plain,%G1",
    ] {
        let reply = start(
            &node,
            json!({"protocolHash": hash, "protocolSources": [source], "body": "x"}),
        );
        let error = transport_error(&reply, 400);
        assert!(error.contains("data: URI"), "{source}: {error}");
    }
    assert_serves(&node);
}

#[test]
fn a_plugin_accepting_any_document_serves_verified_unknown_documents() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("protocol-inspector")
        .start();
    let hash = support::document_hash(UNKNOWN_DOCUMENT);
    let body = json!({"city": "London", "date": "2025-03-14"});
    // The reference library's percent-encoded data: URI, with its base64 hash.
    let reply = start(
        &node,
        json!({"protocolHash": sha1_base64(UNKNOWN_DOCUMENT.as_bytes()), "protocolSources": [percent_data_uri(UNKNOWN_DOCUMENT)], "body": body}),
    );
    let answer = success_body(&reply);
    assert_eq!(answer["protocol"]["name"], "Weather");
    assert_eq!(answer["protocol"]["multiround"], false);
    assert_eq!(answer["protocolHash"], hash);
    assert_eq!(answer["documentBytes"], UNKNOWN_DOCUMENT.len());
    assert_eq!(answer["received"], body);
    // Still: no sources, or sources that do not verify, are refused.
    assert_eq!(
        failure_error(&start(&node, json!({"protocolHash": hash, "body": body}))),
        "Unsupported protocol"
    );
    assert_eq!(
        failure_error(&start(
            &node,
            json!({"protocolHash": hash, "protocolSources": ["name: x\n---\ny"], "body": body})
        )),
        "protocolSources do not match protocolHash"
    );
    // A verified text that is not a protocol document (no `---` part) is refused.
    let not_a_document = "just some text";
    let reply = start(
        &node,
        json!({"protocolHash": support::document_hash(not_a_document), "protocolSources": [not_a_document], "body": "x"}),
    );
    assert!(failure_error(&reply).starts_with("Invalid protocol document"));
    // In a conversation, follow-ups see the document again.
    let first = start(
        &node,
        json!({"protocolHash": hash, "protocolSources": [base64_data_uri(UNKNOWN_DOCUMENT)], "multiround": true, "body": "one"}),
    );
    assert_eq!(success_body(&first)["round"], 1);
    let id = first.json()["conversationId"].as_str().unwrap().to_string();
    let second = success_body(&follow(&node, &id, json!({"body": "two"})));
    assert_eq!(second["round"], 2);
    assert_eq!(second["protocol"]["name"], "Weather");
    assert_eq!(second["received"], "two");
}

// --- multi-round conversations (§7) ---

#[test]
fn multiround_conversation_lifecycle() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("guess-number")
        .start();
    let document = protocol_text("guess-number.md");
    let hash = support::document_hash(&document);
    let before = now_secs();
    let first = start(
        &node,
        json!({"protocolHash": hash, "multiround": true, "body": {"start": {"min": 1, "max": 1000}}}),
    );
    assert_eq!(
        success_body(&first),
        json!({"started": true, "min": 1, "max": 1000})
    );
    let id = first.json()["conversationId"]
        .as_str()
        .expect("a conversationId")
        .to_string();
    // ≥128 bits: 24 random bytes in unpadded base64url.
    assert!(id.len() >= 22, "{id}");
    let expires = first.json()["conversationExpires"]
        .as_u64()
        .expect("an integer conversationExpires");
    assert!(
        expires >= before + 3600 && expires <= now_secs() + 3601,
        "{expires}"
    );

    // A second conversation has its own id and its own game.
    let other = start(
        &node,
        json!({"protocolHash": hash, "multiround": true, "body": {"start": {"min": 7, "max": 7}}}),
    );
    let other_id = other.json()["conversationId"].as_str().unwrap().to_string();
    assert_ne!(other_id, id);

    // Play by bisection; every reply carries the id and expiry.
    let (mut low, mut high, mut guesses) = (1, 1000, Vec::new());
    let secret = loop {
        let guess = (low + high) / 2;
        guesses.push(guess);
        // The first follow-up repeats the original hash (in base64, as the reference client does).
        let request = if guesses.len() == 1 {
            json!({"protocolHash": sha1_base64(document.as_bytes()), "multiround": true, "body": {"guess": guess}})
        } else {
            json!({"body": {"guess": guess}})
        };
        let reply = follow(&node, &id, request);
        let body = success_body(&reply);
        assert_eq!(reply.json()["conversationId"], id.as_str());
        assert_eq!(reply.json()["conversationExpires"], expires);
        assert_eq!(body["guesses"], guesses.len(), "{body}");
        match body["result"].as_str().unwrap() {
            "correct" => break guess,
            "higher" => low = guess + 1,
            "lower" => high = guess - 1,
            other => panic!("unexpected result {other}"),
        }
        assert!(
            guesses.len() <= 10,
            "bisection over 1000 takes at most 10 guesses"
        );
    };
    // The plugin reads the conversation's history through the host.
    let history = success_body(&follow(&node, &id, json!({"body": "{\"history\": true}"})));
    assert_eq!(history, json!({"guesses": guesses, "solved": true}));
    let over = success_body(&follow(&node, &id, json!({"body": {"guess": secret}})));
    assert!(over["error"].as_str().unwrap().contains("over"), "{over}");
    // The other conversation's state is untouched.
    let other_body = success_body(&follow(&node, &other_id, json!({"body": {"guess": 7}})));
    assert_eq!(other_body["result"], "correct");
    assert_eq!(other_body["guesses"], 1);

    // Changing the protocol mid-conversation is malformed (§7.2).
    let unit = protocol_text("unit-conversion.md");
    let reply = follow(
        &node,
        &id,
        json!({"protocolHash": support::document_hash(&unit), "body": {"guess": 1}}),
    );
    assert!(transport_error(&reply, 400).contains("protocol cannot change"));

    // Every round waited for its writes to be durable, and `/metrics` says how long.
    let metrics = get(&node.url("/metrics")).body;
    let commits = metrics
        .lines()
        .find_map(|line| line.strip_prefix("agora_store_commit_wait_seconds_count "))
        .and_then(|count| count.trim().parse::<f64>().ok());
    assert!(
        commits.is_some_and(|count| count >= guesses.len() as f64),
        "{} rounds, commits {commits:?}: {metrics}",
        guesses.len()
    );

    // End it; it is gone afterwards.
    let ended = delete(&node.url(&format!("/agora/conversations/{id}")));
    assert_eq!(ended.status, 200);
    assert_eq!(ended.json()["status"], "success");
    assert_eq!(follow(&node, &id, json!({"body": {"guess": 1}})).status, 404);
    assert_eq!(
        delete(&node.url(&format!("/agora/conversations/{id}"))).status,
        404
    );
    // Unknown ids are 404 (§10.1), whatever their shape.
    for unknown in ["abc123xyz", &"A".repeat(200), "%00"] {
        let reply = follow(&node, unknown, json!({"body": "hi"}));
        assert!(transport_error(&reply, 404).contains("Unknown conversation"));
    }
    // The protocol-less default plugin keeps no protocol either: adding one is a change.
    let plain = start(&node, json!({"multiround": true, "body": "hello"}));
    let plain_id = plain.json()["conversationId"].as_str().unwrap().to_string();
    let reply = follow(&node, &plain_id, json!({"protocolHash": hash, "body": "hello"}));
    assert_eq!(reply.status, 400);
    // A single-round request to a multi-round protocol is the plugin's protocol error.
    let body = success_body(&start(&node, json!({"protocolHash": hash, "body": {"guess": 1}})));
    assert!(body["error"].as_str().unwrap().contains("multi-round"), "{body}");
}

#[test]
fn the_default_plugin_remembers_within_a_conversation() {
    let node = TestNode::builder().plugin("agora-assistant").start();
    let first = start(&node, json!({"multiround": true, "body": "Hi, my name is Ada"}));
    assert!(success_body(&first).as_str().unwrap().contains("Ada"));
    let id = first.json()["conversationId"].as_str().unwrap().to_string();
    assert_eq!(
        success_body(&follow(&node, &id, json!({"body": "what is 3 ^ 2"}))),
        "3 ^ 2 = 9"
    );
    assert_eq!(
        success_body(&follow(&node, &id, json!({"body": "What is my name?"}))),
        "Your name is Ada."
    );
    // Another conversation does not share it.
    let other = start(&node, json!({"multiround": true, "body": "what is my name?"}));
    assert_eq!(success_body(&other), "You have not told me your name yet.");
}

#[test]
fn expired_conversations_are_refused() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .env("AGORA_AGORA__CONVERSATION_TTL_SECS", "1")
        .start();
    let first = start(&node, json!({"multiround": true, "body": "hello"}));
    let id = first.json()["conversationId"].as_str().unwrap().to_string();
    let expires = first.json()["conversationExpires"].as_u64().unwrap();
    // Wait until the wall clock is past conversationExpires.
    while now_secs() <= expires {
        std::thread::sleep(Duration::from_millis(100));
    }
    let reply = follow(&node, &id, json!({"body": "still there?"}));
    assert_eq!(failure_error(&reply), "Conversation expired");
    // It stays expired (never usable again, §7.3), and cannot be ended either.
    let reply = follow(&node, &id, json!({"body": "again"}));
    assert_eq!(failure_error(&reply), "Conversation expired");
    let reply = delete(&node.url(&format!("/agora/conversations/{id}")));
    assert_eq!(failure_error(&reply), "Conversation expired");
    assert_serves(&node);
}

// --- bad input (§10.1) ---

#[test]
fn bad_input_gets_a_clear_error_and_the_node_keeps_serving() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .start();
    let url = node.url("/agora");
    let raw_cases: &[(&str, &[u8], u16, &str)] = &[
        ("application/json", b"{\"body\": ", 400, "malformed JSON"),
        ("application/json", b"", 400, "malformed JSON"),
        ("application/json", b"\xff\xfe", 400, "malformed JSON"),
        ("application/json", b"[\"body\"]", 400, "JSON object"),
        ("application/json", b"\"hello\"", 400, "JSON object"),
        ("text/plain", b"{\"body\": \"hi\"}", 415, "application/json"),
        (
            "application/x-www-form-urlencoded",
            b"body=hi",
            415,
            "application/json",
        ),
    ];
    for (content_type, bytes, status, needle) in raw_cases {
        let reply = post(&url, content_type, bytes);
        let error = transport_error(&reply, *status);
        assert!(error.contains(needle), "{content_type} {bytes:?}: {error}");
        assert_serves(&node);
    }
    let field_cases = [
        (json!({}), "missing field `body`"),
        (json!({"body": 42}), "`body` must be a string or an object"),
        (json!({"body": [1]}), "`body` must be a string or an object"),
        (json!({"body": true}), "`body` must be a string or an object"),
        (json!({"body": null}), "`body` must be a string or an object"),
        (
            json!({"body": "x", "protocolHash": 7}),
            "`protocolHash` must be a string or null",
        ),
        (
            json!({"body": "x", "protocolHash": ["a"]}),
            "`protocolHash` must be a string or null",
        ),
        (json!({"body": "x", "protocolHash": "not-a-hash"}), "SHA1 in hex"),
        (json!({"body": "x", "protocolHash": "abcd"}), "SHA1 in hex"),
        (
            json!({"body": "x", "protocolSources": "data:,x"}),
            "array of strings",
        ),
        (
            json!({"body": "x", "protocolSources": [1, 2]}),
            "array of strings",
        ),
        (
            json!({"body": "x", "protocolSources": {"a": 1}}),
            "array of strings",
        ),
        (
            json!({"body": "x", "multiround": "yes"}),
            "`multiround` must be a boolean",
        ),
        (
            json!({"body": "x", "multiround": 1}),
            "`multiround` must be a boolean",
        ),
    ];
    for (request, needle) in field_cases {
        let error = transport_error(&post_json(&url, &request), 400);
        assert!(error.contains(needle), "{request}: {error}");
        assert_serves(&node);
    }
    // Follow-ups are checked the same way.
    let first = start(&node, json!({"multiround": true, "body": "hello"}));
    let id = first.json()["conversationId"].as_str().unwrap().to_string();
    let follow_url = node.url(&format!("/agora/conversations/{id}"));
    assert_eq!(post(&follow_url, "application/json", b"{oops").status, 400);
    assert_eq!(post(&follow_url, "text/plain", b"{}").status, 415);
    assert_eq!(post_json(&follow_url, &json!({"body": 1})).status, 400);
    // ...and the conversation survived them.
    assert_eq!(
        success_body(&follow(&node, &id, json!({"body": "what is 1+1"}))),
        "1+1 = 2"
    );

    // Oversized body: 413 before anything is parsed.
    let huge = format!("{{\"body\": \"{}\"}}", "a".repeat(2 << 20));
    let error = transport_error(&post(&url, "application/json", huge.as_bytes()), 413);
    assert!(error.contains("limit"), "{error}");
    assert_serves(&node);

    // Huge protocolSources: too many entries, or one over max_document_bytes (256 KiB).
    let hash = support::document_hash(UNKNOWN_DOCUMENT);
    let many = vec![UNKNOWN_DOCUMENT; 9];
    let reply = post_json(
        &url,
        &json!({"protocolHash": hash, "protocolSources": many, "body": "x"}),
    );
    assert!(transport_error(&reply, 400).contains("at most 8"));
    for source in [
        "x".repeat(300 << 10),
        base64_data_uri(&"y".repeat(300 << 10)),
        percent_data_uri(&"z".repeat(300 << 10)),
    ] {
        let reply = post_json(
            &url,
            &json!({"protocolHash": hash, "protocolSources": [source], "body": "x"}),
        );
        assert!(transport_error(&reply, 400).contains("byte limit"));
        assert_serves(&node);
    }

    // Unknown endpoints are 404; a GET on the exchange endpoint is refused.
    assert_eq!(get(&node.url("/agora/nope")).status, 404);
    assert_eq!(get(&node.url("/agora")).status, 405);
    assert_serves(&node);
}

// --- the reference library's dialect (config switch) ---

#[test]
fn reference_dialect_switch_changes_failure_shape_and_serves_the_root_path() {
    let spec_node = TestNode::builder().plugin("agora-assistant").start();
    let reply = start(
        &spec_node,
        json!({"protocolHash": support::document_hash("nothing"), "body": "x"}),
    );
    assert_eq!(
        reply.json(),
        json!({"status": "failure", "error": "Unsupported protocol"})
    );
    assert!(post_json(&spec_node.url("/"), &json!({"body": "hi"})).status >= 400);

    let node = TestNode::builder()
        .plugin("agora-assistant")
        .env("AGORA_AGORA__REFERENCE_DIALECT", "true")
        .start();
    for path in ["/agora", "/"] {
        let reply = post_json(
            &node.url(path),
            &json!({"protocolHash": sha1_base64(b"nothing"), "protocolSources": [], "body": "x"}),
        );
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.json(),
            json!({"status": "error", "message": "Unsupported protocol"})
        );
        assert_eq!(
            success_body(&post_json(&node.url(path), &json!({"body": "what is 2*21"}))),
            "2*21 = 42"
        );
    }
    // Conversations on the root path, as the library's client builds its URLs.
    let first = post_json(&node.url("/"), &json!({"multiround": true, "body": "hello"}));
    let id = first.json()["conversationId"].as_str().unwrap().to_string();
    let reply = post_json(
        &node.url(&format!("/conversations/{id}")),
        &json!({"body": "what is 5-8"}),
    );
    assert_eq!(success_body(&reply), "5-8 = -3");
    assert_eq!(delete(&node.url(&format!("/conversations/{id}"))).status, 200);
    let reply = post(&node.url("/"), "application/json", b"{");
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["status"], "error");
    assert!(
        reply.json()["message"]
            .as_str()
            .unwrap()
            .contains("malformed JSON")
    );
}

#[test]
fn a_configured_base_path_moves_every_endpoint() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .env("AGORA_AGORA__PATH", "/api/agora")
        .start();
    assert_eq!(post_json(&node.url("/agora"), &json!({"body": "hi"})).status, 404);
    let first = post_json(
        &node.url("/api/agora"),
        &json!({"multiround": true, "body": "what is 1 + 1"}),
    );
    assert_eq!(success_body(&first), "1 + 1 = 2");
    let id = first.json()["conversationId"].as_str().unwrap().to_string();
    let reply = post_json(
        &node.url(&format!("/api/agora/conversations/{id}")),
        &json!({"body": "thanks"}),
    );
    assert_eq!(success_body(&reply), "You are welcome.");
    let listed = get(&node.url("/api/agora/wellknown")).json();
    assert_eq!(listed.as_object().unwrap().len(), 1);
}

// --- the node's own client ---

#[test]
fn the_cli_client_talks_to_the_node() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .plugin("protocol-inspector")
        .start();
    let base = node.url("/agora");
    let (ok, reply) = cli(&["send", &base, "what is 9 * 9"]);
    assert!(ok, "{reply}");
    assert_eq!(reply, json!({"status": "success", "body": "9 * 9 = 81"}));

    let unit = support::repo_root().join("protocols/unit-conversion.md");
    let (ok, reply) = cli(&[
        "send",
        &base,
        r#"{"value": 1.5, "from": "km", "to": "m"}"#,
        "--protocol",
        unit.to_str().unwrap(),
    ]);
    assert!(ok, "{reply}");
    assert_eq!(reply["body"]["value"], 1500.0);

    // A document the node has never seen reaches the any-document plugin through
    // the data: URI source the client sends along.
    let temp = tempfile::tempdir().unwrap();
    let document = temp.path().join("weather.md");
    std::fs::write(&document, UNKNOWN_DOCUMENT).unwrap();
    let (ok, reply) = cli(&[
        "send",
        &base,
        "London",
        "--protocol",
        document.to_str().unwrap(),
        "--multiround",
    ]);
    assert!(ok, "{reply}");
    assert_eq!(reply["body"]["protocol"]["name"], "Weather");
    let id = reply["conversationId"].as_str().unwrap().to_string();
    assert!(reply["conversationExpires"].is_u64());
    let (ok, reply) = cli(&["follow", &base, &id, "Paris"]);
    assert!(ok, "{reply}");
    assert_eq!(reply["body"]["round"], 2);
    assert_eq!(reply["body"]["received"], "Paris");
    let (ok, reply) = cli(&["close", &base, &id]);
    assert!(ok, "{reply}");
    let (ok, reply) = cli(&["follow", &base, &id, "gone?"]);
    assert!(!ok);
    assert!(
        reply["error"].as_str().unwrap().contains("Unknown conversation"),
        "{reply}"
    );
}

// --- interop with agora-protocol 0.2.0 ---

#[test]
fn interop_reference_sender_against_the_node() {
    let python = python();
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .plugin("guess-number")
        .start();
    let storage = tempfile::tempdir().unwrap();
    let output = Command::new(&python)
        .arg(interop_dir().join("sender.py"))
        .arg(node.url("/agora"))
        .arg(support::repo_root().join("protocols"))
        .arg(storage.path())
        .current_dir(storage.path())
        .env("PYTHONPATH", interop_dir())
        .env("PYTHONWARNINGS", "ignore")
        .stderr(Stdio::inherit())
        .output()
        .expect("running sender.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "sender.py failed: {stdout}\nnode log:\n{}",
        node.log_text()
    );
    let results: Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("sender.py printed no JSON ({e}): {stdout}"));

    // The library's transporter on its own.
    assert_eq!(
        results["transport_single"],
        json!({"status": "success", "body": "6 * 7 = 42"})
    );
    assert_eq!(results["transport_protocol"]["body"]["value"], 2000.0);
    assert_eq!(
        results["transport_game_start"]["body"],
        json!({"started": true, "min": 5, "max": 5})
    );
    assert_eq!(
        results["transport_game_guess"]["body"],
        json!({"result": "correct", "guess": 5, "guesses": 1})
    );
    assert_eq!(
        results["transport_game_history"]["body"],
        json!({"guesses": [5], "solved": true})
    );
    assert_eq!(results["transport_after_close_status"], 404);

    // The full Sender: no protocol (it opens a multi-round conversation), a single-round
    // protocol, and a multi-round protocol played to the end; each closed with DELETE.
    assert_eq!(results["sender_no_protocol"], "(1 + 2) * 5 = 15");
    assert_eq!(results["sender_protocol"]["value"], 36.0);
    let game = &results["sender_game"];
    let number = game["number"].as_i64().unwrap();
    assert!((1..=16).contains(&number), "{game}");
    let history = game["history"].as_array().unwrap();
    assert_eq!(history.len() as i64, game["guesses"].as_i64().unwrap());
    assert_eq!(history.last().unwrap().as_i64(), Some(number));
    let conversations = results["sender_conversations"].as_array().unwrap();
    assert_eq!(conversations.len(), 3, "{conversations:?}");
    assert_eq!(conversations[0]["multiround"], true);
    assert!(conversations[0]["id"].is_string());
    assert_eq!(conversations[1]["multiround"], false);
    assert!(conversations[1]["id"].is_null());
    assert_eq!(
        conversations[2]["hash"],
        sha1_base64(protocol_text("guess-number.md").as_bytes())
    );
    assert_eq!(results["sender_after_close_statuses"], json!([404, 404]));
}

/// The library's ReceiverServer on a free port, killed when dropped.
struct ReferenceReceiver {
    child: std::process::Child,
    url: String,
    _storage: tempfile::TempDir,
}

impl ReferenceReceiver {
    fn start() -> Self {
        let python = python();
        let storage = tempfile::tempdir().unwrap();
        let port = support::free_port();
        let mut child = Command::new(&python)
            .arg(interop_dir().join("receiver.py"))
            .arg(port.to_string())
            .arg(storage.path())
            .current_dir(storage.path())
            .env("PYTHONPATH", interop_dir())
            .env("PYTHONWARNINGS", "ignore")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting receiver.py");
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("receiver.py exited early: {status}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "receiver.py did not start listening"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        ReferenceReceiver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _storage: storage,
        }
    }
}

impl Drop for ReferenceReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn interop_node_client_against_the_reference_receiver() {
    let receiver = ReferenceReceiver::start();
    let base = receiver.url.as_str();
    let echo = |reply: &Value| -> Value {
        serde_json::from_str(reply["body"].as_str().expect("the library answers text"))
            .expect("the scripted responder answers JSON")
    };

    // Single round, no protocol: the library requires `protocolSources`, which the client sends.
    let (ok, reply) = cli(&["send", base, "hello there"]);
    assert!(ok, "{reply}");
    assert_eq!(
        echo(&reply),
        json!({"echo": "hello there", "round": 1, "protocol": null})
    );

    // With a protocol: the library verifies our data: URI against the base64 hash.
    // (agora-protocol 0.2.0's `extract_metadata` reads only the front-matter layout, so
    // documents exchanged with it are written that way.)
    let temp = tempfile::tempdir().unwrap();
    let weather = temp.path().join("weather.md");
    std::fs::write(&weather, UNKNOWN_DOCUMENT).unwrap();
    let (ok, reply) = cli(&[
        "send",
        base,
        r#"{"city": "London", "date": "2025-03-14"}"#,
        "--protocol",
        weather.to_str().unwrap(),
        "--dialect",
        "reference",
    ]);
    assert!(ok, "{reply}");
    let seen = echo(&reply);
    assert_eq!(seen["protocol"], "Weather");
    assert_eq!(seen["echo"], json!({"city": "London", "date": "2025-03-14"}));

    // The spec's hex hash does not verify there; the client reads the library's failure shape.
    let guess = support::repo_root().join("protocols/guess-number.md");
    let (ok, reply) = cli(&["send", base, "x", "--protocol", guess.to_str().unwrap()]);
    assert!(!ok);
    assert_eq!(reply["status"], "failure");
    assert!(
        reply["error"]
            .as_str()
            .unwrap()
            .contains("Failed to download protocol"),
        "{reply}"
    );

    // Multi-round with follow-ups and close.
    let (ok, reply) = cli(&[
        "send",
        base,
        r#"{"guess": 1}"#,
        "--protocol",
        guess.to_str().unwrap(),
        "--dialect",
        "reference",
        "--multiround",
    ]);
    assert!(ok, "{reply}");
    assert_eq!(echo(&reply)["protocol"], "Guess the number");
    let id = reply["conversationId"].as_str().unwrap().to_string();
    for round in 2..=3 {
        let (ok, reply) = cli(&["follow", base, &id, &format!(r#"{{"guess": {round}}}"#)]);
        assert!(ok, "{reply}");
        assert_eq!(echo(&reply)["round"], round);
        assert_eq!(echo(&reply)["echo"], json!({"guess": round}));
    }
    let (ok, reply) = cli(&["close", base, &id]);
    assert!(ok, "{reply}");
    let (ok, reply) = cli(&["follow", base, &id, "anyone?"]);
    assert!(!ok);
    assert_eq!(reply["error"], "Conversation not found.");
}
