//! Hostile load on the plugin runtime and the store (issue 14), over real
//! sockets against the real binary: each attack runs while an honest client
//! is still served.
//!
//! - humans who never answer an approval do not hold the node's call slots;
//! - a conversation's history has a byte quota, reads are bounded pages, and
//!   concurrent rounds lose no entry;
//! - FIFOs and symlinks to devices in the plugins folder are refused, not read;
//! - a plugin cannot flood the log, forge the host's tool events, or reach its
//!   caller's history and events from a nested tool.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

use crate::support::{self, TestNode, document_hash, get, get_json, post_json, under_load};

/// Upper bound on one frame, so a broken node fails the test instead of hanging it.
const FRAME_WAIT: Duration = Duration::from_secs(60);

fn converter_hash() -> String {
    document_hash(
        &std::fs::read_to_string(support::repo_root().join("protocols/unit-conversion.md")).unwrap(),
    )
}

/// One honest Agora request (a unit conversion): `Ok` only for a success answer.
fn honest_conversion(url: &str, hash: &str) -> Result<(), String> {
    let reply = post_json(
        url,
        &json!({"protocolHash": hash, "body": {"value": 10, "from": "km", "to": "mi"}}),
    );
    let body: Value = serde_json::from_str(&reply.body).map_err(|e| format!("{e}: {}", reply.body))?;
    if reply.status == 200 && body["status"] == "success" && body["body"]["value"].is_number() {
        Ok(())
    } else {
        Err(format!("{} {}", reply.status, reply.body))
    }
}

/// A session id no other test (or call) uses: HAI sessions belong to their creator.
fn session_id(label: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{label}-{}-{n}", std::process::id())
}

/// A HAI WebSocket client (the HAI specification).
struct Hai {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The secret of the session this connection created (the HAI `session` frame).
    secret: Option<String>,
}

impl Hai {
    async fn connect(node: &TestNode) -> Hai {
        let (socket, _) = connect_async(node.ws_url("/ws"))
            .await
            .expect("WebSocket connect");
        Hai { socket, secret: None }
    }

    async fn send(&mut self, frame: Value) {
        self.socket
            .send(Message::text(frame.to_string()))
            .await
            .expect("send");
    }

    async fn say(&mut self, session: &str, content: &str) {
        self.send(json!({"type": "user_message", "content": content, "session_id": session, "metadata": {}}))
            .await;
    }

    async fn approve(&mut self, approval_id: &str) {
        self.send(json!({"type": "tool_approval_response", "approval_id": approval_id, "approved": true}))
            .await;
    }

    async fn next(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(FRAME_WAIT, self.socket.next())
                .await
                .expect("a frame within the wait")
                .expect("the connection is open")
                .expect("a valid frame");
            match message {
                Message::Text(text) => {
                    let frame: Value = serde_json::from_str(text.as_str()).expect("frames are JSON");
                    if frame["type"] == "session" {
                        self.secret = frame["session_secret"].as_str().map(str::to_string);
                        continue;
                    }
                    return frame;
                }
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    async fn until(&mut self, last: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await;
            let done = last(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    async fn turn(&mut self) -> Vec<Value> {
        self.until(|f| f["type"] == "status" && f["status"] == "completed")
            .await
    }

    /// One turn's assistant text (streamed chunks or a whole message).
    async fn ask(&mut self, session: &str, content: &str) -> (Vec<Value>, String) {
        self.say(session, content).await;
        let frames = self.turn().await;
        let text = frames
            .iter()
            .filter(|f| f["type"] == "assistant_message_chunk" || f["type"] == "assistant_message")
            .filter_map(|f| f["content"].as_str())
            .collect::<String>();
        (frames, text)
    }
}

fn hostile_assistant() -> TestNode {
    TestNode::builder()
        .plugin("fixture-hostile-assistant")
        .plugin("unit-converter")
        .env("AGORA_PLUGINS__MAX_LOG_LINES_PER_CALL", "50")
        .env("AGORA_STORE__HISTORY_PAGE_ENTRIES", "5")
        .start()
}

/// Run `attack` on a tokio runtime of its own while an honest Agora client
/// converts units on another thread; every honest request must succeed.
fn while_honest_client_served<T>(node: &TestNode, attack: impl AsyncFnOnce() -> T) -> T {
    let (url, hash) = (node.url("/agora"), converter_hash());
    let (outcome, report) = under_load(
        1,
        |_, _| honest_conversion(&url, &hash),
        || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(attack())
        },
    );
    report.assert_no_failure(1);
    outcome
}

#[test]
fn humans_who_never_approve_do_not_take_the_call_slots() {
    const SLOTS: usize = 2;
    const PARKED: usize = 4;
    let node = TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
        .plugin("unit-converter")
        .env("AGORA_PLUGINS__MAX_CONCURRENT_CALLS", SLOTS.to_string())
        .env("AGORA_PLUGINS__MAX_PARKED_CALLS", PARKED.to_string())
        .env("AGORA_PLUGINS__QUEUE_TIMEOUT_MS", "500")
        // All sessions come from 127.0.0.1: the per-client approval share (4)
        // would refuse the fifth first, and it is the runtime's parked cap under test.
        .env("AGORA_TOOLS__MAX_WAITING_APPROVALS_PER_CLIENT", "16")
        .start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Twice as many sessions as call slots, each parked on an approval nobody gives.
    let mut parked = Vec::new();
    runtime.block_on(async {
        for i in 0..PARKED {
            let mut client = Hai::connect(&node).await;
            let session = session_id(&format!("parked{i}"));
            client
                .say(&session, "Generate the inspection report for INS-2024-007")
                .await;
            let frames = client.until(|f| f["type"] == "tool_approval_request").await;
            let approval = frames.last().unwrap()["approval_id"]
                .as_str()
                .unwrap()
                .to_string();
            parked.push((client, approval));
        }
    });

    // Every slot's holder is waiting for a human, yet Agora is answered, not "overloaded".
    let (url, hash) = (node.url("/agora"), converter_hash());
    for round in 0..20 {
        honest_conversion(&url, &hash).unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
    let (_, report) = under_load(
        4,
        |_, _| honest_conversion(&url, &hash),
        || std::thread::sleep(Duration::from_millis(500)),
    );
    report.assert_no_failure(4);

    runtime.block_on(async {
        // One more session needing an approval is refused at once rather than parked.
        let mut extra = Hai::connect(&node).await;
        let session = session_id("one-too-many");
        let (frames, _) = extra
            .ask(&session, "Generate the inspection report for INS-2024-008")
            .await;
        assert!(
            !frames.iter().any(|f| f["type"] == "tool_approval_request"),
            "{frames:#?}"
        );
        let failed = frames
            .iter()
            .find(|f| f["type"] == "tool_call" && f["status"] == "failed")
            .unwrap_or_else(|| panic!("no failed tool call: {frames:#?}"));
        assert!(failed.to_string().contains("wait for an approval"), "{failed}");

        // A parked call resumes when its human finally answers.
        let (client, approval) = &mut parked[0];
        client.approve(approval).await;
        let frames = client.turn().await;
        let completed = frames
            .iter()
            .find(|f| f["type"] == "tool_call" && f["status"] == "completed")
            .unwrap_or_else(|| panic!("the approved tool did not complete: {frames:#?}"));
        assert!(
            completed["result"]
                .as_str()
                .unwrap_or_default()
                .contains("RPT-2024-007"),
            "{completed}"
        );
    });
}

/// Resident memory of the node process, in KiB (Linux).
fn rss_kib(node: &TestNode) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.child.id())).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// Start a multi-round conversation with the default plugin; its id.
fn start_conversation(url: &str) -> String {
    let reply = post_json(
        url,
        &json!({"protocolHash": null, "multiround": true, "body": "hello"}),
    )
    .json();
    assert_eq!(reply["status"], "success", "{reply}");
    reply["conversationId"].as_str().unwrap().to_string()
}

#[test]
fn a_conversation_that_reaches_its_byte_quota_is_refused_and_the_node_stays_small() {
    // The default quota (store.max_history_bytes = 8 MiB).
    const QUOTA: usize = 8 << 20;
    const ROUND_BYTES: usize = 700_000;
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("unit-converter")
        .start();
    let url = node.url("/agora");
    let id = start_conversation(&url);
    let follow_up = node.url(&format!("/agora/conversations/{id}"));
    let baseline = rss_kib(&node);
    let filler = "x".repeat(ROUND_BYTES);
    let hash = converter_hash();
    let (refusal, report) = under_load(
        1,
        |_, _| honest_conversion(&url, &hash),
        || {
            // A large message, then one that makes the plugin read the history
            // (and quote the last message back: a large reply too).
            for round in 1..=40 {
                for body in [filler.as_str(), "what did I say?"] {
                    let reply = post_json(&follow_up, &json!({"body": body})).json();
                    if reply["status"] == "failure" {
                        return (round, reply);
                    }
                    assert_eq!(reply["status"], "success", "round {round}: {reply}");
                }
            }
            panic!("40 rounds of {ROUND_BYTES} bytes were never refused");
        },
    );
    report.assert_no_failure(1);
    let (round, reply) = refusal;
    // The quota, not the entry count (1000), ended it: each round stores about
    // twice ROUND_BYTES.
    let expected = QUOTA / (2 * ROUND_BYTES);
    assert!(
        (expected..=expected + 2).contains(&round),
        "refused at round {round}, expected about {expected}: {reply}"
    );
    assert!(
        reply["error"].as_str().unwrap_or_default().contains("quota"),
        "{reply}"
    );
    // Another large message is refused too, while a new conversation is served.
    let again = post_json(&follow_up, &json!({"body": filler})).json();
    assert_eq!(again["status"], "failure", "{again}");
    let fresh = start_conversation(&url);
    let reply = post_json(
        &node.url(&format!("/agora/conversations/{fresh}")),
        &json!({"body": "what did I say?"}),
    )
    .json();
    assert_eq!(reply["status"], "success", "{reply}");
    // Each round's plugin call read a bounded page, never the whole history
    // (reading it whole took this conversation's node past 400 MiB).
    let grown_mib = rss_kib(&node).saturating_sub(baseline) / 1024;
    eprintln!("RSS grew by {grown_mib} MiB over {round} rounds of {ROUND_BYTES} bytes");
    assert!(grown_mib < 96, "the node grew by {grown_mib} MiB");
}

#[test]
fn concurrent_rounds_of_one_conversation_lose_no_history() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 5;
    let node = TestNode::builder().plugin("agora-assistant").start();
    let url = node.url("/agora");
    let id = start_conversation(&url);
    let follow_up = node.url(&format!("/agora/conversations/{id}"));
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let follow_up = &follow_up;
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let reply = post_json(
                        follow_up,
                        &json!({"body": format!("client {client} round {round}")}),
                    )
                    .json();
                    assert_eq!(reply["status"], "success", "{reply}");
                }
            });
        }
    });
    // The plugin counts the user messages in the history: the first one plus every round.
    let reply = post_json(&follow_up, &json!({"body": "what did I say?"})).json();
    let expected = format!("You have sent {} earlier message(s)", 1 + CLIENTS * ROUNDS);
    assert!(
        reply["body"].as_str().unwrap_or_default().starts_with(&expected),
        "{reply}"
    );
}

/// The `/health` line of the plugin file named `name`.
fn health_line(health: &Value, name: &str) -> Option<Value> {
    health["plugins"].as_array()?.iter().find_map(|p| {
        p["file"]
            .as_str()
            .is_some_and(|file| file == name)
            .then(|| p.clone())
    })
}

fn refused_as_not_a_file(health: &Value, name: &str) -> bool {
    health_line(health, name).is_some_and(|line| {
        line["error"]
            .as_str()
            .is_some_and(|error| error.contains("not a regular file"))
    })
}

fn mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn fifos_and_device_symlinks_in_the_plugins_folder_are_refused_and_the_node_serves_on() {
    let data = tempfile::tempdir().unwrap();
    let plugins = data.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    mkfifo(&plugins.join("fifo.wasm"));
    std::os::unix::fs::symlink("/dev/zero", plugins.join("zero.wasm")).unwrap();
    let node = TestNode::builder()
        .data_dir(data.path())
        .plugin("unit-converter")
        .start();
    node.wait_for_health("both refused at start-up", |health| {
        refused_as_not_a_file(health, "fifo.wasm") && refused_as_not_a_file(health, "zero.wasm")
    });
    let (url, hash) = (node.url("/agora"), converter_hash());
    honest_conversion(&url, &hash).unwrap();

    // The same, dropped in while the node runs and serves: the watcher reloads them.
    let (_, report) = under_load(
        1,
        |_, _| honest_conversion(&url, &hash),
        || {
            mkfifo(&plugins.join("late-fifo.wasm"));
            std::os::unix::fs::symlink("/dev/urandom", plugins.join("late-random.wasm")).unwrap();
            node.wait_for_health("both refused while running", |health| {
                refused_as_not_a_file(health, "late-fifo.wasm")
                    && refused_as_not_a_file(health, "late-random.wasm")
            });
        },
    );
    report.assert_no_failure(1);
    // The watcher is not stuck on them: a real plugin installed now still loads.
    support::install_plugin(&plugins, "agora-assistant");
    node.wait_for_health("a later plugin loads", |health| {
        support::has_plugin(health, "agora-assistant")
    });
}

#[test]
fn a_log_flood_is_cut_at_the_per_call_limit() {
    let node = hostile_assistant();
    let text = while_honest_client_served(&node, async || {
        let mut client = Hai::connect(&node).await;
        client.ask(&session_id("flood"), "log-flood").await.1
    });
    assert_eq!(text, "flooded");
    node.wait_until(
        "the dropped lines to be reported",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            node.log_text()
                .contains("host.log lines over this call's limit were dropped")
        },
    );
    let logged = node
        .log_text()
        .lines()
        .filter(|line| line.contains("flood line "))
        .count();
    assert_eq!(logged, 50, "plugins.max_log_lines_per_call = 50");
    node.wait_for_log("dropped=99950");
}

#[test]
fn a_plugin_cannot_forge_the_hosts_tool_events() {
    let node = hostile_assistant();
    let (frames, text) = while_honest_client_served(&node, async || {
        let mut client = Hai::connect(&node).await;
        client.ask(&session_id("forge"), "fake-events").await
    });
    for kind in ["tool_call", "tool_approval_request"] {
        assert!(
            !frames.iter().any(|f| f["type"] == kind),
            "a forged {kind} reached the session: {frames:#?}"
        );
    }
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    for what in ["tool_call", "approval"] {
        assert!(
            report[what]
                .as_str()
                .unwrap_or_default()
                .contains("reserved for the host"),
            "{report}"
        );
    }
}

#[test]
fn a_nested_tool_reaches_neither_its_callers_history_nor_its_events() {
    let node = hostile_assistant();
    let session = session_id("probe");
    let ((frames, text), (deep_frames, deep_text)) = while_honest_client_served(&node, async || {
        let mut client = Hai::connect(&node).await;
        // Give the session some history first.
        client.ask(&session, "hello").await;
        let shallow = client.ask(&session, "probe").await;
        let deep = client.ask(&session, "probe-recursive").await;
        (shallow, deep)
    });
    let probe: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(probe["history_entries"], 0, "{probe}");
    assert!(
        probe["emit"].as_str().unwrap_or_default().starts_with("refused"),
        "{probe}"
    );
    for frames in [&frames, &deep_frames] {
        assert!(
            !frames
                .iter()
                .any(|f| f.to_string().contains("LEAKED-FROM-A-NESTED-TOOL")),
            "{frames:#?}"
        );
    }
    // The host's own lifecycle of the tool still reaches the session.
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "tool_call" && f["status"] == "completed"),
        "{frames:#?}"
    );
    // Recursion ends at plugins.max_tool_depth, reported up the chain.
    assert!(deep_text.contains("nest deeper than 4"), "{deep_text}");
}

#[test]
fn history_is_read_in_bounded_pages() {
    let node = hostile_assistant();
    let session = session_id("pages");
    let (text, secret) = while_honest_client_served(&node, async || {
        let mut client = Hai::connect(&node).await;
        for _ in 0..8 {
            client.ask(&session, "hello").await;
        }
        let text = client.ask(&session, "history").await.1;
        (text, client.secret.clone().expect("the session frame's secret"))
    });
    // 17 entries when the plugin reads (this turn's message included); it gets the last 5.
    let read: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(read["entries"], 5, "{read}");

    let base = node.url(&format!(
        "/ws/sessions/{session}/history?session_secret={secret}&"
    ));
    let mut entries = Vec::new();
    let mut query = "limit=3".to_string();
    loop {
        let page = get_json(&format!("{base}{query}")).unwrap();
        let got = page["entries"].as_array().unwrap();
        assert!(!got.is_empty() && got.len() <= 3, "{page}");
        entries.extend(got.iter().cloned());
        match page["next_after"].as_u64() {
            Some(after) => query = format!("limit=3&after={after}"),
            None => break,
        }
    }
    assert_eq!(entries.len(), 18);
    assert_eq!(entries[0]["body"]["content"], "hello");
    assert_eq!(entries[17]["role"], "assistant");
    // A larger `limit` is held to store.history_page_entries.
    let page = get_json(&format!("{base}limit=100")).unwrap();
    assert_eq!(page["entries"].as_array().unwrap().len(), 5, "{page}");
    let bad = get(&format!("{base}after=soon"));
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["error_code"], "invalid_message");
}

#[test]
fn a_plugin_taking_a_removed_plugins_name_does_not_inherit_its_data() {
    let data = tempfile::tempdir().unwrap();
    let plugins = data.path().join("plugins");
    let start = || {
        TestNode::builder()
            .data_dir(data.path())
            .plugin("fixture-hostile-assistant")
            .start()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A new session each time: the key-value data under test is the plugin's, and a
    // session can only be rejoined with its secret.
    let ask = |node: &TestNode, content: &str| {
        runtime.block_on(async {
            let mut client = Hai::connect(node).await;
            client.ask(&session_id("kv"), content).await.1
        })
    };
    let node = start();
    assert_eq!(ask(&node, "kv-set first-install"), "stored");
    // The same install keeps its data across a restart.
    assert!(node.stop().success());
    let node = start();
    assert_eq!(ask(&node, "kv-get"), "first-install");

    // Removed while the node runs: a plugin installed later under the same name starts empty.
    std::fs::remove_file(plugins.join("fixture-hostile-assistant.wasm")).unwrap();
    node.wait_for_health("the plugin is withdrawn", |health| {
        !support::has_plugin(health, "fixture-hostile-assistant")
    });
    support::install_plugin(&plugins, "fixture-hostile-assistant");
    node.wait_for_health("the new install is loaded", |health| {
        support::has_plugin(health, "fixture-hostile-assistant")
    });
    assert_eq!(ask(&node, "kv-get"), "(none)");
    assert_eq!(ask(&node, "kv-set second-install"), "stored");

    // Removed while the node is down, the name taken by a plugin at another file: empty too.
    assert!(node.stop().success());
    std::fs::remove_file(plugins.join("fixture-hostile-assistant.wasm")).unwrap();
    support::install_bytes(
        &plugins,
        "another-file",
        &std::fs::read(support::plugin_wasm("fixture-hostile-assistant")).unwrap(),
    );
    let node = TestNode::builder().data_dir(data.path()).start();
    assert_eq!(ask(&node, "kv-get"), "(none)");
}
