//! Inbound TLS: every listener serves HTTPS and WSS with the certificate named
//! by `tls.cert_file` / `tls.key_file`, renewals are picked up without a restart,
//! and the open-port hardening (handshake timeout, plain HTTP on a TLS port)
//! holds. A throwaway CA made here signs every certificate; the clients (curl,
//! rustls, a WebSocket over rustls) trust only that CA.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::pki::{TestCa, replace};
use crate::support::{NodeBuilder, TestNode, free_port, under_load};

/// Long enough for any honest exchange on a loaded machine; only a wedged node hits it.
const IO_WAIT: Duration = Duration::from_secs(60);

/// A node builder serving `ca`'s node pair (see [`TestCa::install`]).
fn tls_node(ca: &TestCa) -> NodeBuilder {
    TestNode::builder()
        .env("AGORA_TLS__CERT_FILE", ca.cert_file().display().to_string())
        .env("AGORA_TLS__KEY_FILE", ca.key_file().display().to_string())
}

/// A TLS connection to the node on `port` that checked the node's certificate
/// for `localhost` against the test CA.
fn tls_connect(
    port: u16,
    config: &Arc<rustls::ClientConfig>,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    tcp.set_read_timeout(Some(IO_WAIT)).unwrap();
    tcp.set_write_timeout(Some(IO_WAIT)).unwrap();
    let server = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(config.clone(), server).map_err(|e| e.to_string())?;
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    Ok(stream)
}

/// One HTTPS GET on a fresh connection (`Connection: close`): the whole reply,
/// which must end with the server's close_notify, and the certificate it showed.
fn https_get(
    port: u16,
    path: &str,
    config: &Arc<rustls::ClientConfig>,
) -> Result<(String, CertificateDer<'static>), String> {
    let mut stream = tls_connect(port, config)?;
    let shown = stream
        .conn
        .peer_certificates()
        .and_then(|chain| chain.first())
        .ok_or("no certificate shown")?
        .clone()
        .into_owned();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .map_err(|e| format!("read: {e} (after {reply:?})"))?;
    if !reply.starts_with("HTTP/1.1 200") {
        return Err(format!("not a 200: {reply}"));
    }
    Ok((reply, shown))
}

/// `curl` trusting only the test CA; its stdout, or its exit code and stderr.
fn curl(ca: &TestCa, args: &[&str]) -> Result<String, String> {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "60", "--cacert"])
        .arg(ca.ca_file())
        .args(args)
        .output()
        .expect("running curl");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The HTTP status curl (trusting the test CA) got for `url` with `args`.
fn curl_status(ca: &TestCa, args: &[&str], url: &str) -> String {
    let mut all = vec!["-o", "/dev/null", "-w", "%{http_code}"];
    all.extend_from_slice(args);
    all.push(url);
    curl(ca, &all).unwrap_or_else(|e| panic!("curl {url}: {e}"))
}

#[test]
fn every_listener_serves_https_and_wss_to_a_client_trusting_the_ca() {
    let ca = TestCa::new();
    ca.install(&ca.leaf(1));
    let agora_port = free_port();
    let node = tls_node(&ca)
        .plugin("agora-assistant")
        .plugin("hai-assistant")
        .env("AGORA_AGORA__LISTEN", format!("127.0.0.1:{agora_port}"))
        .start();
    let https_line = format!("listening on https://127.0.0.1:{}", node.port);
    let wss_line = format!("websocket=wss://127.0.0.1:{}", node.port);
    node.wait_until("the start-up lines", IO_WAIT, Duration::from_millis(20), || {
        let log = node.log_text();
        log.contains(&https_line) && log.contains(&wss_line)
    });

    // curl over https on the shared listener, by name and by address.
    let health = curl(&ca, &[&format!("https://localhost:{}/health", node.port)]).expect("curl /health");
    let health: Value = serde_json::from_str(&health).unwrap();
    assert!(health["plugins"].is_array(), "{health}");
    curl(&ca, &[&format!("https://127.0.0.1:{}/health", node.port)]).expect("curl by IP address");

    // An Agora POST on the section's own listener, over https too.
    let reply = curl(
        &ca,
        &[
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"body": "what is 2 + 3 * (4 - 1)"}"#,
            &format!("https://localhost:{agora_port}/agora"),
        ],
    )
    .expect("curl POST /agora");
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["status"], "success", "{reply}");
    assert_eq!(reply["body"], "2 + 3 * (4 - 1) = 11");
    // The listener's limits hold inside TLS: a body over http.max_body_bytes gets
    // the protocol's 413, a header block over http.max_header_bytes a 431.
    let big = ca.dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; 2 << 20]).unwrap();
    let body = format!("@{}", big.display());
    let status = curl_status(
        &ca,
        &["-H", "content-type: application/json", "--data-binary", &body],
        &format!("https://localhost:{agora_port}/agora"),
    );
    assert_eq!(status, "413");
    let huge_header = format!("x-filler: {}", "a".repeat(64 << 10));
    let status = curl_status(
        &ca,
        &["-H", &huge_header],
        &format!("https://localhost:{}/health", node.port),
    );
    assert_eq!(status, "431");
    let plain = Command::new("curl")
        .args(["--silent", "--max-time", "30"])
        .arg(format!("http://127.0.0.1:{agora_port}/agora"))
        .output()
        .unwrap();
    assert!(
        !plain.status.success(),
        "plain HTTP to a TLS section listener is not served"
    );

    // A HAI session over wss: the upgrade and every frame inside TLS.
    let config = ca.client_config();
    let stream = tls_connect(node.port, &config).expect("TLS to the HAI listener");
    let url = format!("wss://localhost:{}/ws?session_id=tls-inbound-1", node.port);
    let (mut socket, _) = tungstenite::client(url.as_str(), stream).expect("WebSocket upgrade over TLS");
    let say = json!({"type": "user_message", "content": "hello over wss", "session_id": "tls-inbound-1", "metadata": {"stream": false}});
    socket.send(Message::text(say.to_string())).unwrap();
    let mut answer = None;
    while answer.is_none() {
        match socket.read().expect("a frame") {
            Message::Text(text) => {
                let frame: Value = serde_json::from_str(text.as_str()).unwrap();
                if frame["type"] == "assistant_message" {
                    answer = Some(frame);
                }
            }
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected frame {other:?}"),
        }
    }
    let answer = answer.unwrap();
    assert!(
        answer["content"].as_str().unwrap().contains("hello over wss"),
        "{answer}"
    );
    assert_eq!(answer["agent_id"], "hai-assistant");
    socket.close(None).unwrap();
}

#[test]
fn plain_http_and_silent_clients_on_a_tls_port_are_dropped_without_wedging_it() {
    let ca = TestCa::new();
    let leaf = ca.leaf(7);
    ca.install(&leaf);
    let node = tls_node(&ca)
        .env("AGORA_HTTP__HEADER_TIMEOUT_MS", "1000")
        // Four silent clients, plus the connection that last asked for the metrics,
        // which may still be closing (lingering) when they arrive.
        .env("AGORA_HTTP__MAX_CONNECTIONS_PER_IP", "5")
        .start();
    let config = ca.client_config();

    // Plain HTTP to the TLS port: no HTTP reply, the connection ends.
    let mut plain = TcpStream::connect(("127.0.0.1", node.port)).unwrap();
    plain.set_read_timeout(Some(IO_WAIT)).unwrap();
    plain
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("HTTP/1.1"),
        "no plaintext reply: {answer:?}"
    );
    drop(plain);
    wait_for_open_connections(&node, &config, 1);

    // Silent clients: the node admits them, closes each once the handshake timeout
    // passes (they never sent a byte), and their places are free again for
    // clients that do speak TLS.
    let silent: Vec<TcpStream> = (0..4)
        .map(|_| {
            let tcp = TcpStream::connect(("127.0.0.1", node.port)).unwrap();
            tcp.set_read_timeout(Some(IO_WAIT)).unwrap();
            tcp
        })
        .collect();
    for mut tcp in silent {
        let mut byte = [0u8; 1];
        match tcp.read(&mut byte) {
            Ok(0) => {}
            other => panic!("a silent client was not closed by the node: {other:?}"),
        }
    }
    wait_for_open_connections(&node, &config, 1);
    let refused = connections_refused(&node, &config);
    assert_eq!(
        refused, 0.0,
        "no silent client was refused on arrival: each held a place until the timeout"
    );
    let (_, shown) = https_get(node.port, "/health", &config).expect("the listener still serves TLS");
    assert_eq!(shown, leaf.der);
}

fn metrics(node: &TestNode, config: &Arc<rustls::ClientConfig>) -> String {
    https_get(node.port, "/metrics", config)
        .expect("GET /metrics over https")
        .0
}

/// The sum of the samples of `name` (every label set) in the node's metrics.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(name))
        .map(|line| line.rsplit(' ').next().unwrap().trim().parse::<f64>().unwrap())
        .sum()
}

fn connections_refused(node: &TestNode, config: &Arc<rustls::ClientConfig>) -> f64 {
    sample(&metrics(node, config), "agora_connections_refused_total")
}

/// Wait until the node counts `open` connections (the asking one included):
/// every connection closed before has given its place back.
fn wait_for_open_connections(node: &TestNode, config: &Arc<rustls::ClientConfig>, open: u64) {
    node.wait_until("connections closed", IO_WAIT, Duration::from_millis(20), || {
        sample(&metrics(node, config), "agora_connections_open") == open as f64
    });
}

#[test]
fn a_renewed_certificate_reaches_new_connections_under_load_and_a_broken_one_is_refused() {
    let ca = TestCa::new();
    let first = ca.leaf(1001);
    ca.install(&first);
    let node = tls_node(&ca).start();
    let config = ca.client_config();
    let second = ca.leaf(1002);
    let port = node.port;
    let seen = Mutex::new(HashSet::<Vec<u8>>::new());

    let ((), report) = under_load(
        4,
        |_, _| {
            let (_, shown) = https_get(port, "/health", &config)?;
            seen.lock().unwrap().insert(shown.to_vec());
            Ok(())
        },
        || {
            node.wait_until(
                "the first certificate served under load",
                IO_WAIT,
                Duration::from_millis(20),
                || seen.lock().unwrap().contains(first.der.as_ref()),
            );
            ca.install(&second);
            node.wait_until(
                "new connections get the renewed certificate",
                IO_WAIT,
                Duration::from_millis(20),
                || seen.lock().unwrap().contains(second.der.as_ref()),
            );
            // A broken renewal: garbage where the certificate was. (Counted from here:
            // the renewal above, had a stall split its two renames across reads, would
            // rightly have been refused once on the way.)
            let refusals = || node.log_text().matches("renewed TLS certificate refused").count();
            let before = refusals();
            replace(
                &ca.cert_file(),
                b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n",
            );
            node.wait_until(
                "the broken renewal logged",
                IO_WAIT,
                Duration::from_millis(20),
                || refusals() > before,
            );
            seen.lock().unwrap().clear();
            node.wait_until(
                "more connections after the broken renewal",
                IO_WAIT,
                Duration::from_millis(20),
                || !seen.lock().unwrap().is_empty(),
            );
        },
    );
    report.assert_no_failure(20);
    eprintln!(
        "rotation under load: {} HTTPS requests served, 0 failed",
        report.served
    );
    let seen = seen.into_inner().unwrap();
    assert_eq!(
        seen,
        HashSet::from([second.der.to_vec()]),
        "after the broken renewal only the renewed certificate is served"
    );
    // The refusal names the setting.
    node.wait_for_log("tls.cert_file");
    node.wait_for_log("TLS certificate reloaded");
}

#[test]
fn bad_certificate_files_at_start_up_stop_the_node_naming_the_setting() {
    let ca = TestCa::new();
    let one = ca.leaf(1);
    let other = ca.leaf(2);
    let data = tempfile::tempdir().unwrap();
    let start = |cert: &[u8], key: &[u8]| {
        std::fs::write(ca.cert_file(), cert).unwrap();
        std::fs::write(ca.key_file(), key).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
            .arg("serve")
            .env("AGORA_DATA_DIR", data.path())
            .env("AGORA_LISTEN", format!("127.0.0.1:{}", free_port()))
            .env("AGORA_TLS__CERT_FILE", ca.cert_file())
            .env("AGORA_TLS__KEY_FILE", ca.key_file())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(!output.status.success(), "the node must not start");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let error = start(one.cert_pem.as_bytes(), other.key_pem.as_bytes());
    assert!(
        error.contains("tls.key_file") && error.contains("does not belong"),
        "{error}"
    );
    let error = start(b"garbage", one.key_pem.as_bytes());
    assert!(error.contains("tls.cert_file"), "{error}");
    let error = start(one.cert_pem.as_bytes(), b"");
    assert!(error.contains("tls.key_file"), "{error}");
}

/// The HAI page over https in Chromium: its WebSocket is wss:// and a chat
/// message goes both ways (tests/browser/hai-tls.test.mjs).
#[test]
fn the_browser_client_chats_over_https_and_wss() {
    let ca = TestCa::new();
    ca.install(&ca.leaf(1));
    let node = tls_node(&ca).plugin("hai-assistant").start();
    let url = format!("https://localhost:{}/", node.port);
    crate::hai::browser_test_at(&node, &url, "hai-tls.test.mjs", "screenshot-tls.png");
}

/// Both ends of every protocol over real TLS: the node's own clients (Agora,
/// signed envelopes, uAgents), trusting the test CA through `tls.ca_file`, the
/// envelope WebSocket binding over wss, a real uAgent (uagents 0.26.1, aiohttp trusting the CA through `SSL_CERT_FILE`)
/// and an arena's signed task (curl) reach a node that serves https.
#[test]
fn every_protocols_clients_reach_a_tls_node() {
    use crate::uagents::{MESSAGE_SCHEMA, NODE_SEED, SENDER_SEED, cli_send, identity, run_script};
    let ca = TestCa::new();
    ca.install(&ca.leaf(1));
    let node = tls_node(&ca)
        .plugin("agora-assistant")
        .plugin(crate::envelopes::PLUGIN)
        .plugin("uagents-echo")
        .plugin("trivia")
        .env("AGORA_UAGENTS__SEED", NODE_SEED)
        .env("AGORA_ARENA__AGENT_ID", crate::arena::AGENT)
        .env(crate::arena::jwks_file_env().0, crate::arena::jwks_file_env().1)
        .start();
    let base = format!("https://localhost:{}", node.port);
    let (ca_key, ca_file) = ca.ca_env();
    let cli = |args: &[&str]| -> Value {
        let output = Command::new(env!("CARGO_BIN_EXE_agora-node"))
            .args(args)
            .env(ca_key, &ca_file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?}: {stderr}");
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {stderr}"))
    };

    let reply = cli(&["agora", "send", &format!("{base}/agora"), "what is 9 * 9"]);
    assert_eq!(reply, json!({"status": "success", "body": "9 * 9 = 81"}));

    let result = cli(&[
        "envelope",
        "send",
        &format!("{base}/envelopes"),
        "--resource",
        "agora:sum:v1",
        "--params",
        r#"{"numbers": [1, 2, 3.5]}"#,
    ]);
    assert_eq!(result["data"]["sum"], 6.5, "{result}");

    // The envelope WebSocket binding over wss: a signed REQUEST → a verified RESULT.
    let stream = tls_connect(node.port, &ca.client_config()).expect("TLS to the envelope listener");
    let url = format!("wss://localhost:{}/envelopes/ws", node.port);
    let (mut socket, _) = tungstenite::client(url.as_str(), stream).expect("WebSocket upgrade over TLS");
    let alice = crate::envelopes::Agent::new();
    let request = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:sum:v1", "params": {"numbers": [2, 2.5]}}),
    );
    socket.send(Message::text(request.to_string())).unwrap();
    let reply = loop {
        match socket.read().expect("a frame") {
            Message::Text(text) => break crate::envelopes::verify_reply(text.as_bytes(), None),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected frame {other:?}"),
        }
    };
    assert_eq!(reply["type"], "RESULT", "{reply}");
    assert_eq!(reply["payload"]["request_id"], request["id"]);
    assert_eq!(reply["payload"]["data"]["sum"], 4.5, "{reply}");

    let node_address = identity(NODE_SEED).address().to_string();
    let schema = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(schema.path(), MESSAGE_SCHEMA).unwrap();
    let submit = format!("{base}/submit");
    let reply = cli_send(
        &[
            "--to",
            &node_address,
            "--endpoint",
            &submit,
            "--sync",
            "--json",
            r#"{"text": "over tls"}"#,
        ],
        schema.path(),
        &[("AGORA_CLI_UAGENTS_SEED", SENDER_SEED), (ca_key, &ca_file)],
    );
    assert_eq!(reply["message"], json!({"text": "echo: over tls"}), "{reply}");

    let lines = run_script(
        &[
            "send_to_node.py",
            "sync",
            &node_address,
            &submit,
            SENDER_SEED,
            "hello over tls",
        ],
        &[("SSL_CERT_FILE", &ca_file)],
        Duration::from_secs(60),
    );
    assert_eq!(
        lines.last().unwrap(),
        &json!({"mode": "sync", "reply": "echo: hello over tls"})
    );

    let task = crate::arena::sample_body();
    let token = crate::arena::rs256_token(task["match_id"].as_str().unwrap());
    let answer = curl(
        &ca,
        &[
            "-H",
            &format!("Authorization: Bearer {token}"),
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &task.to_string(),
            &format!("{base}/arena"),
        ],
    )
    .expect("curl POST /arena");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["answer"], "Canberra", "{answer}");
}
