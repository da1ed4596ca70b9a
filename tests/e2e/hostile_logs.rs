//! Log forging (issue 37, finding 10), over real sockets against a real node
//! logging in the human format: text the node does not control and logs (a
//! plugin's `host.log` lines, its stdout and its failure; a model server's
//! error answer) carries a line break and a whole fake log line. The fake line
//! must stay inside the real event's line, escaped, never start a line of its
//! own.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use serde_json::json;

use crate::capabilities::{DOCUMENT, FIXTURE, model_configured};
use crate::hai::{Client, session_id};
use crate::support::{TestNode, document_hash, post_json};

/// A line the node could have written itself, to be smuggled in after a line break.
const FORGED: &str =
    "2026-01-01T00:00:00.000000Z  INFO agora_node::runtime::loader: forged-line: plugin loaded";

/// How the forged line must appear: after an escaped line break, inside a real line.
fn escaped_after(prefix: &str) -> String {
    format!("{prefix}\\n{FORGED}")
}

/// No line of the node's log is the forged one, and every line that holds it
/// holds it escaped, after the real event's own text.
fn assert_no_forged_line(node: &TestNode) {
    let log = node.log_text();
    for line in log.lines().filter(|line| line.contains("forged-line")) {
        assert!(
            !line.starts_with(FORGED) && line.contains(&format!("\\n{FORGED}")),
            "a forged log line:\n{line}\nin the log:\n{log}"
        );
    }
}

#[test]
fn a_plugin_s_log_output_and_failure_cannot_write_a_log_line_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agora.toml");
    // The fixture's `leak` op logs, prints and fails with this setting's value.
    std::fs::write(
        &config,
        format!("[plugins.fixture-agent.config]\ngreeting = \"hello\\n{FORGED}\"\n"),
    )
    .unwrap();
    let node = TestNode::builder()
        .plugin(FIXTURE)
        .arg("--config")
        .arg(config.to_str().unwrap())
        .start();

    let reply = post_json(
        &node.url("/agora"),
        &json!({"protocolHash": document_hash(DOCUMENT), "body": {"op": "leak", "key": "greeting"}}),
    );
    assert!(reply.body.contains("failing with hello"), "{}", reply.body);

    let expected = [
        escaped_after("the value is hello"),
        escaped_after("printed: hello"),
        escaped_after("failing with hello"),
    ];
    node.wait_until(
        "the plugin's host.log line, stdout and failure in the log",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let log = node.log_text();
            expected.iter().all(|line| log.contains(line.as_str()))
        },
    );
    assert_no_forged_line(&node);
}

/// A model server that answers every request with HTTP 500 and an OpenAI-style
/// error whose message carries the forged line; its port.
fn hostile_model_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let body =
        json!({"error": {"message": format!("overloaded\n{FORGED}"), "type": "server_error"}}).to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // The whole request is read first, so closing never resets the answer.
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            let mut length = 0;
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let _ = reader.by_ref().take(length).read_to_end(&mut Vec::new());
            let _ = write!(
                stream,
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[tokio::test]
async fn a_model_server_s_error_cannot_write_a_log_line_of_its_own() {
    let port = hostile_model_server();
    let node = model_configured(TestNode::builder(), &format!("http://127.0.0.1:{port}"))
        .plugin("hai-assistant")
        .start();
    let session = session_id("hostile-logs-model");
    let mut client = Client::connect(&node).await;
    client.say(&session, "hello").await;
    let frames = client.until(|frame| frame["type"] == "error").await;
    let error = frames.last().unwrap();
    assert_eq!(error["error_code"], "assistant_failed", "{error}");
    assert!(error.to_string().contains("forged-line"), "{error}");

    let expected = escaped_after("overloaded");
    node.wait_until(
        "the model's error in the log",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || node.log_text().contains(&expected),
    );
    assert_no_forged_line(&node);
}
