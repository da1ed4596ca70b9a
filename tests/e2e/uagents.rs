//! End-to-end tests for the uAgents exchange transport (`POST /submit`,
//! `HEAD /submit`, `GET /agent_info`) and `agora-node uagents send`, with the
//! real uagents 0.26.1 in a venv, offline on 127.0.0.1 (the scripts in
//! `tests/interop/uagents/` patch the Almanac and Agentverse out and resolve
//! addresses from a static table).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agora_node::crypto::uagents::{AgentIdentity, Envelope};
use serde_json::{Value, json};

use crate::support::{self, TestNode};

pub(crate) const SENDER_SEED: &str = "uagents-interop-sender-seed-v1";
pub(crate) const LISTENER_SEED: &str = "uagents-interop-listener-seed-v1";
pub(crate) const OTHER_SEED: &str = "uagents-interop-other-seed-v1";
pub(crate) const NODE_SEED: &str = "uagents-interop-mock-node-seed-v1";
pub(crate) const MESSAGE_SCHEMA: &str = r#"{"properties": {"text": {"title": "Text", "type": "string"}}, "required": ["text"], "title": "Message", "type": "object"}"#;
pub(crate) const MESSAGE_DIGEST: &str =
    "model:3968d004abc47bcb38618e96eff911f3d2ee2e335856e39a9aadc90a1e3700f8";
const ERROR_DIGEST: &str = "model:94cb082f79871c5e80a20637f935d233f0ce11a135d5a3a3c6071e81102a84d5";
pub(crate) const ECHO_PROTOCOL_DIGEST: &str =
    "proto:7053d1150aeb4ab2321419183c1d414acf35781830eaed0d6ce54bde8dc9ddc3";

pub(crate) fn identity(seed: &str) -> AgentIdentity {
    AgentIdentity::from_seed(seed).unwrap()
}

fn vectors() -> Value {
    let text = std::fs::read_to_string(support::vectors_dir().join("uagents_envelope.json"))
        .expect("uagents vectors");
    serde_json::from_str(&text).unwrap()
}

pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A node serving the echo plugin as `seed`'s agent, with extra environment.
pub(crate) fn echo_node(seed: &str, env: &[(String, String)]) -> TestNode {
    let mut builder = TestNode::builder()
        .plugin("uagents-echo")
        .env("AGORA_UAGENTS__SEED", seed);
    for (key, value) in env {
        builder = builder.env(key, value.clone());
    }
    let node = builder.start();
    node.wait_for_health("the echo plugin", |h| support::has_plugin(h, "uagents-echo"));
    node
}

/// A signed Message envelope from `from` to `to`.
pub(crate) fn message_envelope(from: &AgentIdentity, to: &str, text: &str) -> Envelope {
    let mut envelope = Envelope {
        version: 1,
        sender: from.address().to_string(),
        target: to.to_string(),
        session: uuid::Uuid::new_v4().to_string(),
        schema_digest: MESSAGE_DIGEST.to_string(),
        protocol_digest: None,
        payload: None,
        expires: Some(now_secs() + 30),
        nonce: None,
        signature: None,
    };
    envelope.encode_payload(&json!({ "text": text }).to_string());
    envelope.sign(from);
    envelope
}

pub(crate) fn submit(node: &TestNode, envelope: &Envelope, sync: bool) -> support::HttpReply {
    let mut headers = vec![("content-type", "application/json")];
    if sync {
        headers.push(("x-uagents-connection", "sync"));
    }
    support::post_with_headers(&node.url("/submit"), &headers, envelope.to_json().as_bytes())
}

pub(crate) fn reply_envelope(reply: &support::HttpReply) -> Envelope {
    assert_eq!(reply.status, 200, "{}", reply.body);
    Envelope::from_value(reply.json()).expect("the sync reply is an envelope")
}

#[test]
fn submit_refusals_have_the_uagents_error_shapes() {
    let node = echo_node(LISTENER_SEED, &[]);
    let url = node.url("/submit");
    let error = |reply: support::HttpReply| {
        assert_eq!(reply.status, 400, "{}", reply.body);
        reply.json()["error"].as_str().unwrap().to_string()
    };
    assert_eq!(
        error(support::post_with_headers(&url, &[], b"{}")),
        "missing header: content-type"
    );
    assert_eq!(
        error(support::post(&url, "text/plain", b"{}")),
        "invalid content-type"
    );
    assert_eq!(
        error(support::post(&url, "application/json", b"{not json")),
        "empty or invalid payload"
    );
    assert_eq!(
        error(support::post(&url, "application/json", b"")),
        "empty or invalid payload"
    );
    assert_eq!(
        error(support::post_json(&url, &json!({"version": 1}))),
        "contents do not match envelope schema"
    );
    let mut not_v4 = vectors()["envelopes"][0]["fields"].clone();
    not_v4["session"] = json!("6f1c0c1e-0a56-1d8b-9e7a-2b2b6d2a1c11");
    assert_eq!(
        error(support::post_json(&url, &not_v4)),
        "contents do not match envelope schema"
    );

    // The library's negative vectors, addressed to this node's agent.
    let vectors = vectors();
    let expected = [
        ("payload_changed_after_signing", "Signature verification failed"),
        ("expires_changed_after_signing", "Signature verification failed"),
        ("session_changed_after_signing", "Signature verification failed"),
        ("signed_by_other_key", "Signature verification failed"),
        ("signature_wrong_hrp", "Unable to decode signature"),
        ("signature_bad_checksum", "Unable to decode value"),
        ("signature_missing", "Envelope signature is missing"),
        // Verifies (version and protocol_digest are unsigned) but expired in 2023.
        ("unsigned_fields_changed", "envelope expired"),
    ];
    for (name, message) in expected {
        let case = vectors["negative_envelopes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap();
        let body = case["json"].as_str().unwrap().as_bytes();
        assert_eq!(
            error(support::post(&url, "application/json", body)),
            message,
            "{name}"
        );
    }

    // A valid signature for another agent is not routed.
    let sender = identity(SENDER_SEED);
    let elsewhere = message_envelope(&sender, identity(OTHER_SEED).address(), "hi");
    assert_eq!(
        error(submit(&node, &elsewhere, false)),
        "unable to route envelope"
    );
    // A user address cannot sign, and the node does not take unsigned messages.
    let mut user = message_envelope(&sender, identity(LISTENER_SEED).address(), "hi");
    user.sender = "user1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq".into();
    user.signature = None;
    assert_eq!(
        error(submit(&node, &user, false)),
        "Envelope signature is missing"
    );

    // After all that the node still serves.
    let ok = message_envelope(&sender, identity(LISTENER_SEED).address(), "still here");
    let reply = reply_envelope(&submit(&node, &ok, true));
    assert_eq!(reply.decode_payload().unwrap(), r#"{"text":"echo: still here"}"#);
}

#[test]
fn sync_reply_is_a_signed_envelope_in_the_same_session_and_replays_are_refused() {
    let node = echo_node(NODE_SEED, &[]);
    let sender = identity(SENDER_SEED);
    let node_address = identity(NODE_SEED).address().to_string();

    let request = message_envelope(&sender, &node_address, "hello");
    let reply = reply_envelope(&submit(&node, &request, true));
    reply.verify().expect("the node signs its sync replies");
    assert_eq!(reply.sender, node_address);
    assert_eq!(reply.target, sender.address());
    assert_eq!(reply.session, request.session);
    assert_eq!(reply.schema_digest, MESSAGE_DIGEST);
    assert_eq!(reply.protocol_digest.as_deref(), Some(ECHO_PROTOCOL_DIGEST));
    let message: Value = serde_json::from_str(&reply.decode_payload().unwrap()).unwrap();
    assert_eq!(message, json!({"text": "echo: hello"}));

    // The very same envelope again, sync or not: refused, nothing dispatched.
    for sync in [true, false] {
        let again = submit(&node, &request, sync);
        assert_eq!(again.status, 400, "{}", again.body);
        assert_eq!(again.json(), json!({"error": "envelope already received"}));
    }
    // Same session, new nonce: a new message, accepted.
    let mut next = request.clone();
    next.nonce = Some(1);
    next.sign(&sender);
    let reply = reply_envelope(&submit(&node, &next, true));
    assert_eq!(reply.session, request.session);

    // A payload that does not fit the model gets uagents' ErrorMessage.
    let mut wrong = message_envelope(&sender, &node_address, "x");
    wrong.encode_payload(r#"{"txt": 1}"#);
    wrong.sign(&sender);
    let reply = reply_envelope(&submit(&node, &wrong, true));
    reply.verify().unwrap();
    assert_eq!(reply.schema_digest, ERROR_DIGEST);
    let error: Value = serde_json::from_str(&reply.decode_payload().unwrap()).unwrap();
    assert!(error["error"].as_str().unwrap().contains("text"), "{error}");

    // A model no plugin declared: ErrorMessage too.
    let mut unknown = message_envelope(&sender, &node_address, "x");
    unknown.schema_digest = format!("model:{}", "ab".repeat(32));
    unknown.sign(&sender);
    let reply = reply_envelope(&submit(&node, &unknown, true));
    assert_eq!(reply.schema_digest, ERROR_DIGEST);
    assert!(
        reply
            .decode_payload()
            .unwrap()
            .contains("unrecognized schema digest")
    );

    // Asynchronous with no endpoint for the sender: accepted, reply dropped and logged.
    let lone = message_envelope(&sender, &node_address, "nobody home");
    let accepted = submit(&node, &lone, false);
    assert_eq!((accepted.status, accepted.json()), (200, json!({})));
}

#[test]
fn head_submit_and_agent_info_describe_the_node_like_a_uagent() {
    let node = echo_node(NODE_SEED, &[]);
    let node_address = identity(NODE_SEED).address().to_string();
    let head = |address: Option<&str>| {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut request = agent.head(&node.url("/submit"));
        if let Some(address) = address {
            request = request.header("x-uagents-address", address);
        }
        let response = request.call().unwrap();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
        };
        (
            response.status().as_u16(),
            header("x-uagents-status"),
            header("x-uagents-response-time-hint"),
        )
    };
    assert_eq!(
        head(Some(&node_address)),
        (200, Some("ready".into()), Some("5".into()))
    );
    assert_eq!(
        head(Some(identity(OTHER_SEED).address())),
        (200, Some("not-ready".into()), None)
    );
    assert_eq!(head(None), (200, Some("indeterminate".into()), None));

    let info = support::get_json(&node.url("/agent_info")).unwrap();
    assert_eq!(info["address"], node_address);
    assert_eq!(info["prefix"], "agent");
    assert_eq!(info["agent_type"], "uagent");
    assert_eq!(info["protocols"], json!([ECHO_PROTOCOL_DIGEST]));
    assert_eq!(
        info["endpoints"],
        json!([{"url": node.url("/submit"), "weight": 1}])
    );
}

#[test]
fn a_generated_identity_survives_restarts() {
    let data = tempfile::tempdir().unwrap();
    let first = TestNode::builder().data_dir(data.path()).start();
    let address = support::get_json(&first.url("/agent_info")).unwrap()["address"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(address.starts_with("agent1") && address.len() == 65, "{address}");
    assert_ne!(address, identity(NODE_SEED).address());
    first.stop();
    let second = TestNode::builder().data_dir(data.path()).start();
    let again = support::get_json(&second.url("/agent_info")).unwrap();
    assert_eq!(again["address"], address);
}

#[test]
fn a_malformed_peer_table_stops_start_up_with_the_key_named() {
    let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .arg("serve")
        .env("AGORA_LISTEN", format!("127.0.0.1:{}", support::free_port()))
        .env("AGORA_DATA_DIR", tempfile::tempdir().unwrap().path())
        .env("AGORA_UAGENTS__PEERS__notanaddress", "http://127.0.0.1:1/submit")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("uagents.peers"), "{stderr}");
}

/// Read one HTTP/1.1 request from `stream`, answer it with `status`, return its body.
pub(crate) fn serve_one(listener: &std::net::TcpListener, status: &str) -> String {
    use std::io::{Read, Write};
    let (mut stream, _) = listener.accept().unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let body_start = loop {
        let read = stream.read(&mut chunk).unwrap();
        assert!(read > 0, "connection closed before the headers ended");
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..body_start]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    while buffer.len() < body_start + length {
        let read = stream.read(&mut chunk).unwrap();
        assert!(read > 0, "connection closed before the body ended");
        buffer.extend_from_slice(&chunk[..read]);
    }
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
    );
    stream.write_all(reply.as_bytes()).unwrap();
    String::from_utf8_lossy(&buffer[body_start..body_start + length]).to_string()
}

#[test]
fn async_replies_go_to_the_peer_from_the_environment_and_are_retried() {
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer_url = format!("http://{}/submit", peer.local_addr().unwrap());
    let sender = identity(SENDER_SEED);
    let node = echo_node(NODE_SEED, &[peer_env(sender.address(), &peer_url)]);
    let peer_thread = std::thread::spawn(move || {
        let first = serve_one(&peer, "503 Service Unavailable");
        let second = serve_one(&peer, "200 OK");
        (first, second)
    });
    let node_address = identity(NODE_SEED).address().to_string();
    let request = message_envelope(&sender, &node_address, "later");
    let accepted = submit(&node, &request, false);
    assert_eq!((accepted.status, accepted.json()), (200, json!({})));
    let (first, second) = peer_thread.join().unwrap();
    // The refused delivery was retried with the very same signed envelope.
    assert_eq!(first, second);
    let reply = Envelope::from_value(serde_json::from_str(&second).unwrap()).unwrap();
    reply.verify().unwrap();
    assert_eq!(reply.sender, node_address);
    assert_eq!(reply.target, sender.address());
    assert_eq!(reply.session, request.session);
    assert_eq!(reply.decode_payload().unwrap(), r#"{"text":"echo: later"}"#);
}

// --- Interop with the real uagents library ---

pub(crate) fn python() -> PathBuf {
    support::python_venv("uagents", &["uagents==0.26.1"])
}

pub(crate) fn scripts() -> PathBuf {
    support::repo_root().join("tests/interop/uagents")
}

/// Run a script to completion (bounded), returning its JSON stdout lines.
pub(crate) fn run_script(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Vec<Value> {
    let mut command = Command::new(python());
    command
        .args(args)
        .current_dir(scripts())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("running python");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    assert!(
        !lines.is_empty(),
        "{args:?} printed nothing (status {:?})\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    lines
}

/// A Python script from `tests/interop/uagents/` running in the venv, its JSON
/// stdout lines collected as they come; killed when dropped.
pub(crate) struct Script {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl Script {
    pub(crate) fn start(args: &[&str], env: &[(&str, &str)]) -> Script {
        Self::start_in(&python(), &scripts(), args, env)
    }

    /// A script of another venv (`python`) and folder (`dir`).
    pub(crate) fn start_in(python: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Script {
        let mut command = Command::new(python);
        command
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("starting a Python script");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str::<Value>(&line) {
                    sink.lock().unwrap().push(value);
                }
            }
        });
        Script { child, lines }
    }

    /// The lines whose `event` is `event`.
    pub(crate) fn events(&self, event: &str) -> Vec<Value> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l["event"] == event)
            .cloned()
            .collect()
    }

    /// The first `event` line, waiting up to `patience` for it (panics with all lines).
    pub(crate) fn wait_for(&self, event: &str, patience: Duration) -> Value {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(line) = self.events(event).into_iter().next() {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "{event:?} not seen; lines: {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until something accepts connections on 127.0.0.1:`port`.
pub(crate) fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A real uAgent running `echo_agent.py`.
pub(crate) struct EchoAgent {
    script: Script,
    pub(crate) port: u16,
}

impl EchoAgent {
    pub(crate) fn start(seed: &str, peers: &Value) -> EchoAgent {
        let port = support::free_port();
        let script = Script::start(
            &["echo_agent.py", seed, &port.to_string()],
            &[("UAGENTS_PEERS", &peers.to_string())],
        );
        wait_for_port(port, "the echo uAgent");
        EchoAgent { script, port }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/submit", self.port)
    }

    /// The messages the agent has reported, once there are at least `count`: it
    /// prints each before replying, but the line reaches this process through a
    /// pipe and a reader thread, possibly after the reply did.
    pub(crate) fn received_at_least(&self, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let received = self.received();
            if received.len() >= count || Instant::now() > deadline {
                return received;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn received(&self) -> Vec<Value> {
        self.script.events("received")
    }
}

/// `agora-node uagents send ARGS --schema SCHEMA --timeout 20`: its JSON output.
pub(crate) fn cli_send(args: &[&str], schema: &std::path::Path, env: &[(&str, &str)]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .args(["uagents", "send"])
        .args(args)
        .arg("--schema")
        .arg(schema)
        .args(["--timeout", "20"])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice::<Value>(&output.stdout).unwrap()
}

pub(crate) fn peer_env(address: &str, url: &str) -> (String, String) {
    (format!("AGORA_UAGENTS__PEERS__{address}"), url.to_string())
}

#[test]
fn interop_real_uagent_gets_the_echo_synchronously() {
    let node = echo_node(NODE_SEED, &[]);
    let node_address = identity(NODE_SEED).address().to_string();
    let lines = run_script(
        &[
            "send_to_node.py",
            "sync",
            &node_address,
            &node.url("/submit"),
            SENDER_SEED,
            "hello from python",
        ],
        &[],
        Duration::from_secs(60),
    );
    // send_sync_message only returns the reply if the node's signature verified.
    assert_eq!(
        lines.last().unwrap(),
        &json!({"mode": "sync", "reply": "echo: hello from python"})
    );
}

#[test]
fn interop_real_uagent_gets_the_echo_asynchronously_via_the_peer_table() {
    let agent_port = support::free_port();
    let sender = identity(SENDER_SEED);
    let node = echo_node(
        NODE_SEED,
        &[peer_env(
            sender.address(),
            &format!("http://127.0.0.1:{agent_port}/submit"),
        )],
    );
    let node_address = identity(NODE_SEED).address().to_string();
    let lines = run_script(
        &[
            "send_to_node.py",
            "async",
            &node_address,
            &node.url("/submit"),
            SENDER_SEED,
            "hello async",
            &agent_port.to_string(),
        ],
        &[],
        Duration::from_secs(60),
    );
    let last = lines.last().unwrap();
    assert_eq!(last["mode"], "async", "{lines:?}\n{}", node.log_text());
    assert_eq!(last["reply"], "echo: hello async");
    assert_eq!(last["sender"], node_address);
    assert_eq!(last["same_session"], true);
}

#[test]
fn interop_broken_library_envelopes_are_refused_and_get_no_reply() {
    let sink_port = support::free_port();
    let sender = identity(SENDER_SEED);
    let node = echo_node(
        NODE_SEED,
        &[peer_env(
            sender.address(),
            &format!("http://127.0.0.1:{sink_port}/submit"),
        )],
    );
    let node_address = identity(NODE_SEED).address().to_string();
    let lines = run_script(
        &[
            "broken.py",
            &node_address,
            &node.url("/submit"),
            SENDER_SEED,
            OTHER_SEED,
            &sink_port.to_string(),
        ],
        &[],
        Duration::from_secs(90),
    );
    let outcome = lines.last().unwrap();
    let expected = [
        ("bad_signature", "Signature verification failed"),
        ("other_signer", "Signature verification failed"),
        ("missing_signature", "Envelope signature is missing"),
        ("wrong_target", "unable to route envelope"),
        ("expired", "envelope expired"),
        ("undecodable_signature", "Unable to decode value"),
    ];
    for (case, error) in expected {
        for mode in ["async", "sync"] {
            assert_eq!(
                outcome["cases"][case][mode],
                json!([400, {"error": error}]),
                "{case} {mode}"
            );
        }
    }
    // The control envelope got exactly one reply, which the library verified;
    // so the broken ones got none, and the replay of the control got none either.
    assert_eq!(outcome["control"], json!([200, {}]));
    assert_eq!(outcome["replies"], 1, "{outcome}");
    assert_eq!(
        outcome["control_reply"],
        json!({
            "verified": true,
            "sender": node_address,
            "target": sender.address(),
            "same_session": true,
            "message": {"text": "echo: control"},
        })
    );
    assert_eq!(
        outcome["replay"],
        json!([400, {"error": "envelope already received"}])
    );
    assert_eq!(outcome["replies_after_replay"], 1);
}

#[test]
fn interop_the_reference_uagent_refuses_the_same_broken_envelopes_alike() {
    let sink_port = support::free_port();
    let sender = identity(SENDER_SEED);
    let peers = json!({ sender.address(): format!("http://127.0.0.1:{sink_port}/submit") });
    let agent = EchoAgent::start(LISTENER_SEED, &peers);
    let lines = run_script(
        &[
            "broken.py",
            identity(LISTENER_SEED).address(),
            &agent.url(),
            SENDER_SEED,
            OTHER_SEED,
            &sink_port.to_string(),
            "--reference",
        ],
        &[],
        Duration::from_secs(90),
    );
    let outcome = lines.last().unwrap();
    for (case, error) in [
        ("bad_signature", "Signature verification failed"),
        ("other_signer", "Signature verification failed"),
        ("missing_signature", "Envelope signature is missing"),
        ("wrong_target", "unable to route envelope"),
        ("undecodable_signature", "Unable to decode value"),
    ] {
        assert_eq!(
            outcome["cases"][case]["async"],
            json!([400, {"error": error}]),
            "{case}"
        );
    }
    assert_eq!(outcome["replies"], 0);
    assert!(agent.received().is_empty());
}

#[test]
fn interop_node_cli_sends_to_a_real_uagent_and_verifies_its_replies() {
    let cli_port = support::free_port();
    let sender = identity(SENDER_SEED);
    let peers = json!({ sender.address(): format!("http://127.0.0.1:{cli_port}/submit") });
    let agent = EchoAgent::start(LISTENER_SEED, &peers);
    let schema = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(schema.path(), MESSAGE_SCHEMA).unwrap();
    let listener_address = identity(LISTENER_SEED).address().to_string();
    let endpoint = agent.url();
    let send = |text: &str, extra: &[&str]| {
        let message = json!({ "text": text }).to_string();
        let mut args = vec![
            "--to",
            &listener_address,
            "--endpoint",
            &endpoint,
            "--json",
            &message,
        ];
        args.extend_from_slice(extra);
        cli_send(&args, schema.path(), &[("AGORA_CLI_UAGENTS_SEED", SENDER_SEED)])
    };

    // Asynchronous: the uAgent POSTs a signed reply to the CLI's own /submit.
    let listen = format!("127.0.0.1:{cli_port}");
    let reply = send("async from the node", &["--listen", &listen]);
    assert_eq!(reply["verified"], true, "{reply}");
    assert_eq!(reply["sender"], listener_address);
    assert_eq!(reply["schema_digest"], MESSAGE_DIGEST);
    assert_eq!(reply["message"], json!({"text": "echo: async from the node"}));

    // Synchronous: uagents answers in the HTTP body, unsigned.
    let reply = send("sync from the node", &["--sync"]);
    assert_eq!(reply["verified"], false, "{reply}");
    assert_eq!(reply["message"], json!({"text": "echo: sync from the node"}));

    let received = agent.received_at_least(2);
    assert_eq!(received.len(), 2, "{received:?}");
    assert!(received.iter().all(|r| r["sender"] == sender.address()));
}

// --- A plugin's uAgents message to a bare address (`host.outbound` with an empty url) ---

/// A node serving `fixture-outbound-caller` as [`NODE_SEED`]'s agent, with extra environment.
fn outbound_caller_node(env: &[(&str, String)]) -> TestNode {
    let mut builder = TestNode::builder()
        .plugin("fixture-outbound-caller")
        .env("AGORA_UAGENTS__SEED", NODE_SEED);
    for (key, value) in env {
        builder = builder.env(key, value.clone());
    }
    let node = builder.start();
    node.wait_for_health("the outbound caller", |h| {
        support::has_plugin(h, "fixture-outbound-caller")
    });
    node
}

/// What the node's `fixture-outbound-caller` answers when it sends `body` over
/// uAgents to `url` through `host.outbound`: `{"reply": …}` or `{"error": …}`.
fn plugin_sends_uagents(node: &TestNode, url: &str, body: &Value) -> Value {
    let hash = crate::scripting_tools::agora_route(node, "fixture-outbound-caller");
    let reply = support::post_json(
        &node.url("/agora"),
        &json!({"protocolHash": hash, "body": {"transport": "uagents", "url": url, "body": body}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["body"].clone()
}

/// A Message to `target`, answered in the HTTP body (`sync`).
fn text_message(target: &str, text: &str) -> Value {
    let schema: Value = serde_json::from_str(MESSAGE_SCHEMA).unwrap();
    json!({"target": target, "schema": schema, "message": {"text": text}, "sync": true})
}

#[test]
fn interop_a_plugin_s_message_to_a_bare_address_reaches_a_real_uagent_through_the_almanac() {
    let almanac_port = support::free_port();
    let api = format!("http://127.0.0.1:{almanac_port}");
    let _almanac = crate::almanac::stand_in(almanac_port);
    let peer_port = support::free_port();
    let peer_address = identity(LISTENER_SEED).address().to_string();
    let peer = Script::start(
        &["almanac_agent.py", &api, LISTENER_SEED, &peer_port.to_string()],
        &[],
    );
    // Printed once the library's own registration was accepted.
    let ready = peer.wait_for("ready", Duration::from_secs(60));
    assert_eq!(ready["address"], peer_address);
    wait_for_port(peer_port, "the Almanac uAgent");
    let node = outbound_caller_node(&[
        ("AGORA_UAGENTS__ALMANAC_API", api.clone()),
        // The registered endpoint is on loopback: allowed only as the operator lists it.
        (
            "AGORA_OUTBOUND__ALLOWED_HOSTS",
            format!("[\"127.0.0.1:{peer_port}\"]"),
        ),
    ]);
    let node_address = identity(NODE_SEED).address().to_string();

    let answer = plugin_sends_uagents(&node, "", &text_message(&peer_address, "found by address"));
    assert_eq!(answer["reply"]["sender"], peer_address, "{answer}");
    assert_eq!(answer["reply"]["schema_digest"], MESSAGE_DIGEST);
    assert_eq!(
        answer["reply"]["message"],
        json!({"text": "echo: found by address"})
    );
    let received = peer.wait_for("received", Duration::from_secs(20));
    assert_eq!(received["sender"], node_address, "{received}");
    assert_eq!(received["text"], "found by address");

    // The node's resolver caches the record: a second message asks the Almanac no more.
    let again = plugin_sends_uagents(&node, "", &text_message(&peer_address, "once more"));
    assert_eq!(
        again["reply"]["message"],
        json!({"text": "echo: once more"}),
        "{again}"
    );
    let lookups = crate::almanac::checks(&api)["lookups"][&peer_address].clone();
    assert_eq!(lookups, 1, "{}", crate::almanac::checks(&api));
}

#[test]
fn a_plugin_s_message_to_an_address_nobody_can_resolve_gets_a_clear_error() {
    let stranger = identity(OTHER_SEED).address().to_string();
    let almanac_port = support::free_port();
    let api = format!("http://127.0.0.1:{almanac_port}");
    let _almanac = crate::almanac::stand_in(almanac_port);
    let node = outbound_caller_node(&[("AGORA_UAGENTS__ALMANAC_API", api.clone())]);

    let answer = plugin_sends_uagents(&node, "", &text_message(&stranger, "anyone there?"));
    let error = answer["error"].as_str().unwrap_or_else(|| panic!("{answer}"));
    assert!(
        error.contains(&format!("{stranger} is not registered in the Almanac")),
        "{error}"
    );
    assert_eq!(
        crate::almanac::checks(&api)["lookups"][&stranger],
        1,
        "{}",
        crate::almanac::checks(&api)
    );

    // A malformed message is refused as such, before anything is looked up.
    let mut malformed = text_message(&stranger, "no model");
    malformed.as_object_mut().unwrap().remove("schema");
    let answer = plugin_sends_uagents(&node, "", &malformed);
    let error = answer["error"].as_str().unwrap_or_else(|| panic!("{answer}"));
    assert!(
        error.starts_with("invalid outbound request") && error.contains("`schema`"),
        "{error}"
    );
    assert_eq!(crate::almanac::checks(&api)["lookups"][&stranger], 1);

    // Without an Almanac, an address not in uagents.peers has nowhere to go.
    drop(node);
    let node = outbound_caller_node(&[]);
    let answer = plugin_sends_uagents(&node, "", &text_message(&stranger, "anyone there?"));
    let error = answer["error"].as_str().unwrap_or_else(|| panic!("{answer}"));
    assert!(
        error.contains(&stranger) && error.contains("uagents.almanac_api is not set"),
        "{error}"
    );
}
