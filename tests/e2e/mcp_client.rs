//! The node as an MCP client (issue 19, "Client side"): a plugin's
//! `call-tool("<server>/<tool>", …)` reaches a tool of a configured MCP server
//! — the mcp 2.3.0 SDK's own server (`tests/interop/mcp/fastmcp_server.py`)
//! over Streamable HTTP on a loopback port — with approval decided by the
//! host from the remote tool's annotations. The caller is the tool-caller
//! fixture on an Agora route: an exchange with no human, so a tool that needs
//! approval must fail there without the server ever seeing the call, which
//! the server's call log shows; and the tool-assistant fixture on HAI, where
//! the human on the WebSocket approves or rejects the remote tool.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::hai::{Client, of_type, session_id, streamed_text};
use crate::scripting_tools::{agora_route, call_tool};
use crate::support::{self, TestNode, has_plugin};

const TOKEN: &str = "s3cret-token";
const ALLOWED: &str = r#"["lookup", "inventory", "annotate", "purge", "unannotated", "broken", "confirm"]"#;

/// The SDK's server on its own port, logging calls and requests; killed when dropped.
struct McpServer {
    child: Child,
    port: u16,
    log: tempfile::NamedTempFile,
}

impl McpServer {
    fn start(token: &str) -> McpServer {
        McpServer::start_with(token, &[])
    }

    fn start_with(token: &str, flags: &[&str]) -> McpServer {
        let port = support::free_port();
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = spawn(port, log.path(), token, flags);
        McpServer { child, port, log }
    }

    /// Stop and start again on the same port: every session it had is gone.
    fn restart(&mut self, token: &str) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(self.port, self.log.path(), token, &[]);
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn entries(&self) -> Vec<Value> {
        std::fs::read_to_string(self.log.path())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// The tools that ran, in order.
    fn calls(&self) -> Vec<String> {
        self.entries()
            .iter()
            .filter_map(|entry| Some(entry["tool"].as_str()?.to_string()))
            .collect()
    }

    /// The `Authorization` header of every HTTP request it saw.
    fn authorizations(&self) -> Vec<Value> {
        self.entries()
            .iter()
            .filter(|entry| entry.get("http").is_some())
            .map(|entry| entry["authorization"].clone())
            .collect()
    }
}

fn spawn(port: u16, log: &Path, token: &str, flags: &[&str]) -> Child {
    let mut command = Command::new(support::mcp_python());
    command
        .arg("fastmcp_server.py")
        .arg(port.to_string())
        .arg(log)
        .args(flags)
        .current_dir(support::repo_root().join("tests/interop/mcp"))
        .stdout(Stdio::null());
    if !token.is_empty() {
        command.args(["--token", token]);
    }
    let child = command.spawn().expect("starting the MCP SDK server");
    crate::uagents::wait_for_port(port, "the MCP SDK server");
    child
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node with the tool-caller fixture, `servers` as `[mcp.servers]` (name →
/// url, token) allowing [`ALLOWED`], `allowed_hosts` and more `env`.
fn node(
    servers: &[(&str, &str, &str)],
    allowed_hosts: &[String],
    env: &[(&str, &str)],
) -> (TestNode, String) {
    let mut builder = TestNode::builder()
        .plugin("fixture-tool-caller")
        .env("AGORA_OUTBOUND__ALLOWED_HOSTS", json!(allowed_hosts).to_string());
    for (name, url, token) in servers {
        let key = format!("AGORA_MCP__SERVERS__{}", name.to_ascii_uppercase());
        builder = builder
            .env(&format!("{key}__URL"), *url)
            .env(&format!("{key}__TOOLS"), ALLOWED);
        if !token.is_empty() {
            builder = builder.env(&format!("{key}__TOKEN"), *token);
        }
    }
    for (key, value) in env {
        builder = builder.env(key, *value);
    }
    let node = builder.start();
    node.wait_for_health("the tool caller", |h| has_plugin(h, "fixture-tool-caller"));
    let hash = agora_route(&node, "fixture-tool-caller");
    (node, hash)
}

#[test]
fn a_plugin_calls_remote_tools_with_approval_decided_by_their_annotations() {
    let mut server = McpServer::start(TOKEN);
    let (node, hash) = node(
        &[("remote", &server.url(), TOKEN)],
        &[format!("127.0.0.1:{}", server.port)],
        &[],
    );
    let call = |tool: &str, arguments: Value| call_tool(&node, &hash, &format!("remote/{tool}"), &arguments);

    // Read-only (low): runs without a human; the text, or the structured content as JSON.
    assert_eq!(
        call("lookup", json!({"term": "chair"})),
        Ok("chair: found".into())
    );
    let shelf = call("inventory", json!({"shelf": "A4"})).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&shelf).unwrap(),
        json!({"shelf": "A4", "items": 3})
    );
    // destructiveHint false (medium): under the default threshold (high), it runs too.
    assert_eq!(
        call("annotate", json!({"record": "r1", "note": "checked"})),
        Ok("noted on r1".into())
    );
    assert_eq!(server.calls(), ["lookup", "inventory", "annotate"]);
    // The tools were listed once, across every page (8 tools, 3 a page), and then cached.
    let pages: Vec<Value> = server
        .entries()
        .iter()
        .filter_map(|e| e.get("list").cloned())
        .collect();
    assert_eq!(pages, [json!(0), json!(3), json!(6)]);

    // destructiveHint true, and no annotations at all (MCP's default: may destroy): high,
    // so approval is needed; an Agora exchange has no human, and the server never sees the call.
    for tool in ["purge", "unannotated"] {
        let refused = call(tool, json!({"record": "r1"})).unwrap_err();
        assert_eq!(
            refused,
            format!("tool remote/{tool} needs a human's approval and this exchange has no human to ask")
        );
    }
    assert_eq!(server.calls(), ["lookup", "inventory", "annotate"]);

    // Not on the allow-list: refused before the server is asked anything at all.
    let requests = server.authorizations().len();
    let refused = call("secret", json!({})).unwrap_err();
    assert_eq!(
        refused,
        "tool remote/secret is not allowed: mcp.servers.remote.tools does not list \"secret\""
    );
    assert_eq!(server.authorizations().len(), requests);

    // isError is the tool's failure, with the server's text.
    assert_eq!(
        call("broken", json!({"reason": "disk full"})),
        Err("tool remote/broken failed: Error executing tool broken: broken on purpose: disk full".into())
    );
    // Arguments the server's schema refuses: its error comes back, nothing ran.
    let invalid = call("lookup", json!({"term": 5})).unwrap_err();
    assert!(invalid.starts_with("tool remote/lookup failed: "), "{invalid}");
    // A server's elicitation is refused (-32601) on the call's own stream; the tool carries on.
    let confirmed = call("confirm", json!({"record": "r2"})).unwrap();
    assert!(confirmed.starts_with("elicitation refused: "), "{confirmed}");
    assert!(confirmed.contains("no human to ask"), "{confirmed}");
    assert_eq!(
        server.calls(),
        ["lookup", "inventory", "annotate", "broken", "confirm"]
    );

    // A restarted server has forgotten the session: the node initializes again and the call goes through.
    server.restart(TOKEN);
    assert_eq!(call("lookup", json!({"term": "desk"})), Ok("desk: found".into()));
    assert_eq!(server.calls().last().map(String::as_str), Some("lookup"));

    // Every request carried the configured token (the server refuses any other with 401).
    let authorizations = server.authorizations();
    assert!(authorizations.len() >= 10, "{authorizations:?}");
    assert!(
        authorizations
            .iter()
            .all(|a| a == &json!(format!("Bearer {TOKEN}"))),
        "{authorizations:?}"
    );
}

#[test]
fn remote_tool_failures_are_named_and_bounded() {
    let server = McpServer::start(TOKEN);
    // Accepts connections (the kernel's backlog) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let down_port = support::free_port();
    let elsewhere = McpServer::start("");
    let plain = McpServer::start_with("", &["--json"]);
    let servers = [
        ("remote", server.url(), TOKEN.to_string()),
        ("plain", plain.url(), String::new()),
        ("wrongtoken", server.url(), "not-the-token".to_string()),
        ("down", format!("http://127.0.0.1:{down_port}/mcp"), String::new()),
        (
            "silent",
            format!("http://127.0.0.1:{silent_port}/mcp"),
            String::new(),
        ),
        ("elsewhere", elsewhere.url(), String::new()),
    ];
    let servers: Vec<(&str, &str, &str)> = servers
        .iter()
        .map(|(name, url, token)| (*name, url.as_str(), token.as_str()))
        .collect();
    let allowed = [server.port, plain.port, down_port, silent_port].map(|port| format!("127.0.0.1:{port}"));
    // Only critical tools need a human here: the destructive tool runs.
    let (node, hash) = node(
        &servers,
        &allowed,
        &[
            ("AGORA_TOOLS__APPROVAL_THRESHOLD", "critical"),
            ("AGORA_OUTBOUND__TIMEOUT_MS", "1500"),
        ],
    );
    let call = |name: &str| call_tool(&node, &hash, name, &json!({"record": "r9"}));

    assert_eq!(call("remote/purge"), Ok("r9 purged".into()));
    assert_eq!(server.calls(), ["purge"]);
    // A server answering plain JSON bodies rather than event streams serves the same.
    assert_eq!(call("plain/purge"), Ok("r9 purged".into()));
    assert_eq!(plain.calls(), ["purge"]);

    let wrong = call("wrongtoken/purge").unwrap_err();
    assert!(
        wrong.starts_with(&format!(
            "tool wrongtoken/purge failed: {} answered HTTP 401",
            server.url()
        )),
        "{wrong}"
    );
    let down = call("down/purge").unwrap_err();
    assert!(
        down.starts_with(&format!(
            "tool down/purge failed: request to http://127.0.0.1:{down_port}/mcp failed"
        )),
        "{down}"
    );
    assert!(down.to_lowercase().contains("connection refused"), "{down}");

    let silent_error = call("silent/purge").unwrap_err();
    assert_eq!(
        silent_error,
        format!("tool silent/purge failed: http://127.0.0.1:{silent_port}/mcp did not answer within 1500 ms")
    );

    let outside = call("elsewhere/purge").unwrap_err();
    assert_eq!(
        outside,
        format!(
            "tool elsewhere/purge failed: host 127.0.0.1:{} is not in outbound.allowed_hosts",
            elsewhere.port
        )
    );
    assert!(elsewhere.entries().is_empty(), "{:?}", elsewhere.entries());
    assert_eq!(server.calls(), ["purge"]);
    drop(silent);
}

#[tokio::test]
async fn a_human_on_hai_approves_or_rejects_a_remote_tool_before_the_server_sees_it() {
    let server = McpServer::start(TOKEN);
    let node = TestNode::builder()
        .plugin("fixture-tool-assistant")
        .env(
            "AGORA_OUTBOUND__ALLOWED_HOSTS",
            json!([format!("127.0.0.1:{}", server.port)]).to_string(),
        )
        .env("AGORA_MCP__SERVERS__REMOTE__URL", server.url())
        .env("AGORA_MCP__SERVERS__REMOTE__TOOLS", ALLOWED)
        .env("AGORA_MCP__SERVERS__REMOTE__TOKEN", TOKEN)
        .start();
    node.wait_for_health("the tool assistant", |h| has_plugin(h, "fixture-tool-assistant"));
    let session = session_id("mcp-client");
    let mut client = Client::connect(&node).await;
    let ask = |record: &str| json!({"tool": "remote/purge", "arguments": {"record": record}}).to_string();

    client.say(&session, &ask("r5")).await;
    let frames = client.until(|f| f["type"] == "tool_approval_request").await;
    let request = frames.last().unwrap();
    assert_eq!(request["tool_name"], "remote/purge");
    assert_eq!(request["risk_level"], "high");
    assert_eq!(request["tool_description"], "Deletes a record");
    assert_eq!(request["parameters"], json!({"record": "r5"}));
    assert!(server.calls().is_empty(), "{:?}", server.calls());
    let approval_id = request["approval_id"].as_str().unwrap().to_string();
    client.approve(&approval_id, true, None).await;
    let frames = client.turn().await;
    assert_eq!(streamed_text(&frames), "r5 purged");
    // HAI shows the remote tool's lifecycle as it shows a plugin tool's.
    let completed: Vec<&Value> = of_type(&frames, "tool_call")
        .into_iter()
        .filter(|f| f["status"] == "completed" && f["tool_name"] == "remote/purge")
        .collect();
    assert_eq!(completed.len(), 1, "{frames:#?}");
    assert_eq!(server.calls(), ["purge"]);

    client.say(&session, &ask("r6")).await;
    let frames = client.until(|f| f["type"] == "tool_approval_request").await;
    let approval_id = frames.last().unwrap()["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    client.approve(&approval_id, false, Some("not that one")).await;
    let frames = client.turn().await;
    let text = streamed_text(&frames);
    assert!(
        text.starts_with("error: tool remote/purge was rejected: not that one"),
        "{text}"
    );
    assert!(
        of_type(&frames, "tool_call")
            .iter()
            .all(|f| f["status"] != "started"),
        "{frames:#?}"
    );
    assert_eq!(server.calls(), ["purge"]);
}
