//! Outbound calls never reach inside the node's network through a name or an
//! untrusted endpoint (issue 37, "Outbound"): after DNS, a loopback, private or
//! link-local address is refused unless the operator named it (an IP literal
//! in `outbound.allowed_hosts`, a range in `outbound.allowed_private`). With
//! that check in place, a reply to a uAgent the Almanac resolved is no longer
//! held to the allow-list. Loopback is the only network here, so the peers sit
//! on 127.0.0.x and `outbound.allowed_private` plays the part of "public".

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use agora_node::crypto::uagents::Envelope;
use serde_json::{Value, json};

use crate::support::TestNode;
use crate::uagents::{NODE_SEED, OTHER_SEED, SENDER_SEED, echo_node, identity, message_envelope, submit};

/// Longest wait for something the node does in the background.
const PATIENCE: Duration = Duration::from_secs(20);

/// One request a [`Peer`] answered.
#[derive(Debug)]
struct Received {
    method: String,
    path: String,
    body: String,
}

/// A plain HTTP server on its own thread: each request is answered by `answer`
/// (status, JSON body) and then handed to the test through a channel.
struct Peer {
    address: SocketAddr,
    received: mpsc::Receiver<Received>,
}

impl Peer {
    fn start(bind: &str, answer: impl Fn(&str, &str) -> (u16, String) + Send + 'static) -> Peer {
        let listener = TcpListener::bind(bind).unwrap();
        let address = listener.local_addr().unwrap();
        let (sink, received) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if let Some(request) = answer_one(stream, &answer) {
                    // The test may be over and the receiver gone: nothing to tell then.
                    let _ = sink.send(request);
                }
            }
        });
        Peer { address, received }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Everything answered so far, without waiting.
    fn answered(&self) -> Vec<Received> {
        self.received.try_iter().collect()
    }
}

fn answer_one(stream: TcpStream, answer: &impl Fn(&str, &str) -> (u16, String)) -> Option<Received> {
    stream.set_read_timeout(Some(PATIENCE)).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    let mut words = request_line.split_whitespace();
    let (method, path) = (words.next()?.to_string(), words.next()?.to_string());
    let (status, reply) = answer(&method, &path);
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        reply.len()
    );
    (&stream).write_all(response.as_bytes()).ok()?;
    Some(Received {
        method,
        path,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

// --- (a) a listed name that resolves inside is refused; the IP literal is reached ---

const PONG: &str = r#"{"status":"success","body":"pong"}"#;

#[test]
fn a_listed_name_resolving_to_loopback_is_refused_and_its_ip_literal_is_reached() {
    let peer = Peer::start("127.0.0.1:0", |_, _| (200, PONG.to_string()));
    let port = peer.address.port();
    let node = TestNode::builder()
        .plugin("fixture-outbound-caller")
        .env(
            "AGORA_OUTBOUND__ALLOWED_HOSTS",
            format!(r#"["localhost:{port}", "127.0.0.1:{port}"]"#),
        )
        .start();
    let call = crate::scripting_tools::outbound_caller(&node);

    let refused = call(format!("http://localhost:{port}/agora"));
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(error.contains("localhost"), "{refused}");
    assert!(error.contains("inside the node's network"), "{refused}");
    assert!(error.contains("outbound.allowed_private"), "{refused}");
    assert!(peer.answered().is_empty(), "the peer was reached through a name");

    let answered = call(format!("http://127.0.0.1:{port}/agora"));
    assert_eq!(
        answered["reply"],
        json!({"status": "success", "body": "pong"}),
        "{answered}"
    );
    let received = peer
        .received
        .recv_timeout(PATIENCE)
        .expect("the IP literal is reached");
    assert_eq!(
        (received.method.as_str(), received.path.as_str()),
        ("POST", "/agora")
    );
}

// --- (b) an Almanac-resolved reply is not held to the allow-list any more ---

/// An Almanac API answering `GET /agents/{address}` from `records`
/// (address → endpoint URL), and any registration with 200.
fn almanac(records: Vec<(String, String)>) -> Peer {
    Peer::start("127.0.0.1:0", move |method, path| {
        let asked = path.strip_prefix("/agents/");
        match records
            .iter()
            .find(|(address, _)| Some(address.as_str()) == asked)
        {
            Some((_, url)) if method == "GET" => (
                200,
                json!({"expiry": "2999-01-01T00:00:00+00:00", "endpoints": [{"url": url, "weight": 1}]})
                    .to_string(),
            ),
            _ if method == "POST" && path == "/agents" => (200, "{}".to_string()),
            _ => (404, json!({"detail": "not found"}).to_string()),
        }
    })
}

#[test]
fn an_almanac_resolved_reply_reaches_an_unlisted_endpoint_in_an_allowed_range() {
    // The peer is on 127.0.0.2, which only outbound.allowed_private allows; nothing
    // lists it in outbound.allowed_hosts.
    let peer = Peer::start("127.0.0.2:0", |_, _| (200, "{}".to_string()));
    let (sender, named) = (identity(SENDER_SEED), identity(OTHER_SEED));
    let api = almanac(vec![
        (sender.address().to_string(), peer.url("/submit")),
        // A name for the same loopback: never trusted to point inside.
        (
            named.address().to_string(),
            format!("http://localhost:{}/submit", peer.address.port()),
        ),
    ]);
    let node = echo_node(
        NODE_SEED,
        &[
            ("AGORA_UAGENTS__ALMANAC_API".to_string(), api.url("")),
            (
                "AGORA_OUTBOUND__ALLOWED_PRIVATE".to_string(),
                r#"["127.0.0.2/32"]"#.to_string(),
            ),
        ],
    );
    let node_address = identity(NODE_SEED).address().to_string();

    let request = message_envelope(&sender, &node_address, "found in the almanac");
    let accepted = submit(&node, &request, false);
    assert_eq!((accepted.status, accepted.json()), (200, json!({})));
    let delivered = peer
        .received
        .recv_timeout(PATIENCE)
        .expect("the reply reaches the Almanac's endpoint");
    assert_eq!(
        (delivered.method.as_str(), delivered.path.as_str()),
        ("POST", "/submit")
    );
    let reply = Envelope::from_value(serde_json::from_str::<Value>(&delivered.body).unwrap()).unwrap();
    reply.verify().unwrap();
    assert_eq!(
        (reply.target.as_str(), reply.session.as_str()),
        (sender.address(), request.session.as_str())
    );
    assert_eq!(
        reply.decode_payload().unwrap(),
        r#"{"text":"echo: found in the almanac"}"#
    );

    // The same peer by name resolves to 127.0.0.1 (and ::1), outside the allowed range.
    let by_name = submit(&node, &message_envelope(&named, &node_address, "by name"), false);
    assert_eq!(by_name.status, 200, "{}", by_name.body);
    node.wait_for_log_within("reply not delivered", PATIENCE);
    let log = node.log_text();
    let refusal = log
        .lines()
        .find(|line| line.contains("reply not delivered"))
        .unwrap_or_default();
    assert!(refusal.contains("inside the node's network"), "{refusal}");
    assert!(
        peer.answered().is_empty(),
        "a reply went to the peer through a name"
    );
}
