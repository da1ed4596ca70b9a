//! Outbound TLS (issue 16): the node and its CLI call https:// and wss://
//! peers through one rustls client that trusts the system's roots plus
//! `tls.ca_file`. A throwaway CA and its certificates are made here (rcgen);
//! the peers are real TLS servers in this test (tokio-rustls), and every
//! refusal is shown with its reason and with nothing reaching the peer's handler.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agora_node::crypto::uagents::Envelope;
use serde_json::{Value, json};

use crate::pki::{LeafKind, TestCa};
use crate::support::{self, TestNode};
use crate::{arena, uagents};

/// The peers are reached by the name their certificates carry, `localhost`; a
/// name is never trusted to point inside the node's network, so the operator
/// allows loopback explicitly (issue 37).
const LOOPBACK_ALLOWED: (&str, &str) = ("AGORA_OUTBOUND__ALLOWED_PRIVATE", r#"["127.0.0.0/8", "::1"]"#);

// --- A TLS peer: HTTPS answered by a handler, or WSS collecting text frames ---

type Handler = Arc<dyn Fn(&str, &str, &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) + Send + Sync>;

enum Mode {
    Https(Handler),
    Wss,
}

/// Records what reached its handler: `{method, path, body}` per HTTP request,
/// the parsed JSON of each WebSocket text frame.
struct TlsPeer {
    port: u16,
    received: Arc<Mutex<Vec<Value>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TlsPeer {
    fn https(config: Arc<rustls::ServerConfig>, handler: Handler) -> TlsPeer {
        Self::start(config, Mode::Https(handler))
    }

    /// Answers every request with `status` and `body` (JSON).
    fn answering(config: Arc<rustls::ServerConfig>, status: u16, body: &str) -> TlsPeer {
        let body = body.as_bytes().to_vec();
        let content_type = vec![("content-type".to_string(), "application/json".to_string())];
        Self::https(
            config,
            Arc::new(move |_, _, _| (status, content_type.clone(), body.clone())),
        )
    }

    fn wss(config: Arc<rustls::ServerConfig>) -> TlsPeer {
        Self::start(config, Mode::Wss)
    }

    fn start(config: Arc<rustls::ServerConfig>, mode: Mode) -> TlsPeer {
        let (runtime, listener, port) = crate::support::server_runtime();
        let received: Arc<Mutex<Vec<Value>>> = Arc::default();
        let sink = received.clone();
        let mode = Arc::new(mode);
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            while let Ok((socket, _)) = listener.accept().await {
                let (acceptor, sink, mode) = (acceptor.clone(), sink.clone(), mode.clone());
                tokio::spawn(async move {
                    // A refused handshake ends here: nothing reaches the handler.
                    let Ok(stream) = acceptor.accept(socket).await else {
                        return;
                    };
                    match &*mode {
                        Mode::Https(handler) => serve_http(stream, handler, &sink).await,
                        Mode::Wss => collect_frames(stream, &sink).await,
                    }
                });
            }
        });
        TlsPeer {
            port,
            received,
            runtime: Some(runtime),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    fn received(&self) -> Vec<Value> {
        self.received.lock().unwrap().clone()
    }

    fn wait_received(&self, count: usize, limit: Duration) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "the peer got {received:?}, wanted {count}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for TlsPeer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn serve_http<S>(mut stream: S, handler: &Handler, sink: &Mutex<Vec<Value>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let body_start = loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
        }
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..body_start]).to_string();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buffer.len() < body_start + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
        }
    }
    let mut words = head.split(' ');
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let body = &buffer[body_start..body_start + length];
    sink.lock().unwrap().push(json!({
        "method": method, "path": path, "body": String::from_utf8_lossy(body),
    }));
    let (status, headers, reply) = handler(method, path, body);
    let mut response = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        reply.len()
    );
    for (name, value) in headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.write_all(&reply).await;
    let _ = stream.shutdown().await;
}

async fn collect_frames<S>(stream: S, sink: &Mutex<Vec<Value>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures::StreamExt;
    let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    while let Some(Ok(message)) = socket.next().await {
        if let tokio_tungstenite::tungstenite::Message::Text(text) = message
            && let Ok(event) = serde_json::from_str(text.as_str())
        {
            sink.lock().unwrap().push(event);
        }
    }
}

// --- The CLI against an Agora peer on https ---

/// `agora-node agora send URL BODY`, with `env` (and no inherited CA file).
fn cli_send(url: &str, env: &[(&str, String)]) -> (bool, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agora-node"));
    command
        .args(["agora", "send", url, r#""ping""#])
        .env_remove("AGORA_TLS__CA_FILE");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

const PONG: &str = r#"{"status":"success","body":"pong"}"#;

#[test]
fn the_cli_reaches_an_agora_peer_on_https_with_the_ca_file() {
    let pki = TestCa::new();
    let peer = TlsPeer::answering(pki.server(LeafKind::Good), 200, PONG);
    let (ok, stdout, stderr) = cli_send(&peer.url("/agora"), &[pki.ca_env()]);
    assert!(ok, "{stdout}{stderr}");
    let reply: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(reply, json!({"status": "success", "body": "pong"}));
    let received = peer.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0]["method"], "POST");
    let sent: Value = serde_json::from_str(received[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(sent["body"], "ping");
}

#[test]
fn untrusted_wrong_name_and_expired_certificates_are_refused_with_their_reason() {
    let pki = TestCa::new();
    let cases = [
        // The right certificate, but the CLI is not told to trust its CA.
        (pki.server(LeafKind::Good), false, "unknown issuer"),
        (
            pki.server(LeafKind::ForName("other.example")),
            true,
            "name mismatch",
        ),
        (pki.server(LeafKind::Expired), true, "expired certificate"),
    ];
    for (config, trust, reason) in cases {
        let peer = TlsPeer::answering(config, 200, PONG);
        let url = peer.url("/agora");
        let env = if trust { vec![pki.ca_env()] } else { Vec::new() };
        let (ok, stdout, stderr) = cli_send(&url, &env);
        assert!(!ok, "{reason}: the call succeeded: {stdout}");
        assert!(stderr.contains(reason), "{reason}: {stderr}");
        assert!(stderr.contains(&url), "the error names the URL: {stderr}");
        assert_eq!(
            peer.received(),
            Vec::<Value>::new(),
            "{reason}: the peer got a request"
        );
    }
}

// --- protocolSources over https, and a redirect off the allow-list ---

const WEATHER: &str = "---\nname: Weather\ndescription: A forecast for a city and a date.\nmultiround: false\n---\n\nThe body is {\"city\": string, \"date\": \"YYYY-MM-DD\"}.\n";

#[test]
fn protocol_sources_are_fetched_over_https_and_redirects_stay_on_the_allow_list() {
    let pki = TestCa::new();
    let elsewhere = TlsPeer::answering(pki.server(LeafKind::Good), 200, WEATHER);
    let elsewhere_url = elsewhere.url("/weather.md");
    let handler: Handler = Arc::new(move |_, path, _| match path {
        "/weather.md" => (200, Vec::new(), WEATHER.as_bytes().to_vec()),
        "/moved.md" => (302, vec![("location".into(), "/weather.md".into())], Vec::new()),
        _ => (302, vec![("location".into(), elsewhere_url.clone())], Vec::new()),
    });
    let sources = TlsPeer::https(pki.server(LeafKind::Good), handler);
    let (key, ca) = pki.ca_env();
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("protocol-inspector")
        .env(key, ca)
        .env(
            "AGORA_AGORA__SOURCE_HOSTS",
            format!(r#"["localhost:{}"]"#, sources.port),
        )
        .env(LOOPBACK_ALLOWED.0, LOOPBACK_ALLOWED.1)
        .start();
    let hash = support::document_hash(WEATHER);
    let ask = |source: String| {
        support::post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hash, "protocolSources": [source], "body": {"city": "Lima"}}),
        )
        .json()
    };
    for path in ["/weather.md", "/moved.md"] {
        let served = ask(sources.url(path));
        assert_eq!(served["status"], "success", "{path}: {served}");
        assert_eq!(served["body"]["protocol"]["name"], "Weather", "{path}");
    }
    let refused = ask(sources.url("/away.md"));
    assert_eq!(refused["status"], "failure", "{refused}");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("localhost:{}", elsewhere.port)),
        "{error}"
    );
    assert!(error.contains("not allowed"), "{error}");
    assert_eq!(elsewhere.received(), Vec::<Value>::new());
}

// --- uAgents: an asynchronous reply delivered to a peer on https ---

#[test]
fn uagents_async_replies_reach_a_peer_on_https() {
    let pki = TestCa::new();
    let peer = TlsPeer::answering(pki.server(LeafKind::Good), 200, "{}");
    let sender = uagents::identity(uagents::SENDER_SEED);
    let (key, ca) = pki.ca_env();
    let node = uagents::echo_node(
        uagents::NODE_SEED,
        &[
            uagents::peer_env(sender.address(), &peer.url("/submit")),
            (key.to_string(), ca),
            (LOOPBACK_ALLOWED.0.to_string(), LOOPBACK_ALLOWED.1.to_string()),
        ],
    );
    let node_address = uagents::identity(uagents::NODE_SEED).address().to_string();
    let request = uagents::message_envelope(&sender, &node_address, "over tls");
    let accepted = uagents::submit(&node, &request, false);
    assert_eq!((accepted.status, accepted.json()), (200, json!({})));
    let received = peer.wait_received(1, Duration::from_secs(20));
    assert_eq!(received[0]["path"], "/submit");
    let reply: Value = serde_json::from_str(received[0]["body"].as_str().unwrap()).unwrap();
    let reply = Envelope::from_value(reply).unwrap();
    reply.verify().unwrap();
    assert_eq!(reply.session, request.session);
    assert_eq!(reply.decode_payload().unwrap(), r#"{"text":"echo: over tls"}"#);
}

// --- The arena: keys over https, events over wss ---

fn gold_task(match_id: &str) -> Value {
    json!({
        "version": "1.0", "league": "trivia", "match_id": match_id, "round": 1,
        "total_rounds": null, "time_limit_seconds": 30.0, "max_tokens": 500,
        "rules": ["only_one_answer"], "opponent_count": 3,
        "task": {"description": "What is the chemical symbol for gold?", "input_format": "string",
                 "output_format": "string", "options": ["Ag", "Au", "Gd"]},
    })
}

#[test]
fn the_arena_example_works_with_https_keys_and_a_wss_stream() {
    let pki = TestCa::new();
    let jwks = arena::jwks_with(&["agora-test-rs256-1"]);
    let keys = TlsPeer::answering(pki.server(LeafKind::Good), 200, &jwks);
    let stream = TlsPeer::wss(pki.server(LeafKind::Good));
    let node = arena::node_with(
        &["trivia"],
        &[
            ("AGORA_ARENA__JWKS_URL", keys.url("/.well-known/jwks.json")),
            (
                "AGORA_ARENA__STREAM_URL",
                format!("wss://localhost:{}/v1/stream", stream.port),
            ),
            pki.ca_env(),
            (LOOPBACK_ALLOWED.0, LOOPBACK_ALLOWED.1.to_string()),
        ],
    );
    let match_id = "m_tls_1";
    let task = gold_task(match_id);
    let reply = arena::post_task(&node, &arena::rs256_token(match_id), &task);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["answer"], "Au");
    assert!(
        !keys.received().is_empty(),
        "the keys were not fetched over https"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let events = stream.received();
        if events
            .iter()
            .any(|e| e["match_id"] == match_id && e["type"] == "answer")
        {
            break;
        }
        assert!(Instant::now() < deadline, "no answer event over wss: {events:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_arena_stream_with_an_untrusted_certificate_is_refused_and_logged() {
    let pki = TestCa::new();
    let stream = TlsPeer::wss(pki.server(LeafKind::Good));
    // No CA file: the stream's certificate is not trusted.
    let node = arena::node_with(
        &["trivia"],
        &[
            arena::jwks_file_env(),
            (
                "AGORA_ARENA__STREAM_URL",
                format!("wss://localhost:{}/v1/stream", stream.port),
            ),
            (LOOPBACK_ALLOWED.0, LOOPBACK_ALLOWED.1.to_string()),
        ],
    );
    let match_id = "m_tls_untrusted";
    let task = gold_task(match_id);
    // The task is still answered: the stream never slows or fails a task.
    let reply = arena::post_task(&node, &arena::rs256_token(match_id), &task);
    assert_eq!(reply.status, 200, "{}", reply.body);
    node.wait_until(
        "the TLS failure in the log",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            let log = node.log_text();
            log.contains("TLS failed") && log.contains("unknown issuer")
        },
    );
    assert_eq!(stream.received(), Vec::<Value>::new());
}

// --- host.outbound: a plugin calls an Agora peer on https ---

#[test]
fn a_plugin_calls_an_agora_peer_on_https_through_host_outbound() {
    let pki = TestCa::new();
    let peer = TlsPeer::answering(pki.server(LeafKind::Good), 200, PONG);
    let expired = TlsPeer::answering(pki.server(LeafKind::Expired), 200, PONG);
    let (key, ca) = pki.ca_env();
    let node = TestNode::builder()
        .plugin("fixture-outbound-caller")
        .env(key, ca)
        .env(
            "AGORA_OUTBOUND__ALLOWED_HOSTS",
            format!(r#"["localhost:{}", "localhost:{}"]"#, peer.port, expired.port),
        )
        .env(LOOPBACK_ALLOWED.0, LOOPBACK_ALLOWED.1)
        .start();
    let call = crate::scripting_tools::outbound_caller(&node);
    let answered = call(peer.url("/agora"));
    assert_eq!(
        answered["reply"],
        json!({"status": "success", "body": "pong"}),
        "{answered}"
    );
    let received = peer.received();
    assert_eq!(received.len(), 1, "{received:?}");
    let sent: Value = serde_json::from_str(received[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(sent["body"], "ping");
    let refused = call(expired.url("/agora"));
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(error.contains("expired certificate"), "{refused}");
    assert_eq!(expired.received(), Vec::<Value>::new());
}
