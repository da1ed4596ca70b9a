//! The node on an open port: what hostile clients do to its listeners, over raw
//! TCP so that nothing in a client library hides it.
//!
//! - Over-limit bodies, declared or chunked, get each protocol's own 413, read in
//!   full by a client that writes its whole body first (no broken pipe), 50 times.
//! - Slow headers and idle keep-alive connections are closed; oversized headers get 431.
//! - Connection caps in total and per client address (WebSockets counted) refuse
//!   the flood while other clients are still served.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::{TestNode, get, post};

/// Twice the default `http.max_body_bytes`.
const OVERSIZED: usize = 2 << 20;

/// How long any single socket operation may take before the test calls the node wedged.
const IO_DEADLINE: Duration = Duration::from_secs(20);

/// The body-carrying endpoint of every transport that takes one.
const ENDPOINTS: [(&str, &str); 4] = [
    ("agora", "/agora"),
    ("envelopes", "/envelopes"),
    ("uagents", "/submit"),
    ("arena", "/arena"),
];

pub(crate) struct RawReply {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl RawReply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A blocking socket from a chosen loopback source address (127.0.0.0/8 is all
/// ours on Linux), so that one test can be several clients.
fn connect_from(source: IpAddr, port: u16) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket
        .bind(&SocketAddr::new(source, 0).into())
        .expect("bind a loopback source address");
    socket
        .connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())
        .expect("connect");
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(IO_DEADLINE)).unwrap();
    stream.set_write_timeout(Some(IO_DEADLINE)).unwrap();
    stream
}

pub(crate) fn connect(port: u16) -> TcpStream {
    connect_from(IpAddr::from([127, 0, 0, 1]), port)
}

fn read_reply(stream: &mut TcpStream) -> std::io::Result<RawReply> {
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    if reader.read_line(&mut status_line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        ));
    }
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP status line: {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(RawReply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Write a whole chunked body of `size` bytes, and only then read the reply,
/// as a naive client does.
pub(crate) fn post_chunked(stream: &mut TcpStream, path: &str, size: usize) -> std::io::Result<RawReply> {
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )?;
    let chunk = vec![b' '; 64 << 10];
    let mut sent = 0;
    while sent < size {
        let len = chunk.len().min(size - sent);
        write!(stream, "{len:x}\r\n")?;
        stream.write_all(&chunk[..len])?;
        stream.write_all(b"\r\n")?;
        sent += len;
    }
    stream.write_all(b"0\r\n\r\n")?;
    read_reply(stream)
}

fn get_on(stream: &mut TcpStream, path: &str) -> std::io::Result<RawReply> {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")?;
    read_reply(stream)
}

/// Whether the node closes this connection (EOF or reset) within `within`.
fn closed_by_node(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => matches!(
            error.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
        ),
    }
}

fn assert_protocol_413(transport: &str, status: u16, content_type: &str, body: &str) {
    assert_eq!(status, 413, "{transport}: {body}");
    assert!(
        content_type.starts_with("application/json"),
        "{transport}: the 413 is in the protocol's own JSON shape, got {content_type:?}: {body}"
    );
    let _: serde_json::Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("{transport}: the 413 body is not JSON ({e}): {body}"));
}

#[test]
fn an_oversized_declared_body_gets_each_protocols_413_every_time() {
    let node = TestNode::builder().start();
    let huge = vec![b' '; OVERSIZED];
    for (transport, path) in ENDPOINTS {
        for round in 0..50 {
            // ureq writes the whole body before it reads anything: the case that
            // used to end in a broken pipe.
            let reply = post(&node.url(path), "application/json", &huge);
            assert_protocol_413(
                &format!("{transport} round {round}"),
                reply.status,
                &reply.content_type,
                &reply.body,
            );
        }
    }
    assert_eq!(get(&node.url("/health")).status, 200);
}

#[test]
fn an_oversized_chunked_body_gets_each_protocols_413_and_the_connection_stays_usable() {
    let node = TestNode::builder().start();
    for (transport, path) in ENDPOINTS {
        let mut stream = connect(node.port);
        for round in 0..50 {
            let reply = post_chunked(&mut stream, path, OVERSIZED)
                .unwrap_or_else(|e| panic!("{transport} round {round}: {e}"));
            let content_type = reply.header("content-type").unwrap_or("").to_string();
            assert_protocol_413(
                &format!("{transport} round {round}"),
                reply.status,
                &content_type,
                &reply.body,
            );
            assert_ne!(
                reply.header("connection"),
                Some("close"),
                "{transport}: a body drained within bounds keeps the connection"
            );
        }
        let health = get_on(&mut stream, "/health").expect("the same connection serves on");
        assert_eq!(health.status, 200);
    }
}

#[test]
fn a_body_beyond_the_discard_bound_is_refused_without_being_read() {
    let node = TestNode::builder()
        .env("AGORA_HTTP__DISCARD_BODY_BYTES", "4194304")
        .start();
    // Declares 100 MiB and waits for 100-continue: the node answers 413 at once
    // and never asks for the body.
    let mut stream = connect(node.port);
    write!(
        stream,
        "POST /agora HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\nExpect: 100-continue\r\n\r\n"
    )
    .unwrap();
    let reply = read_reply(&mut stream).expect("a reply without sending the body");
    assert_protocol_413(
        "agora",
        reply.status,
        reply.header("content-type").unwrap_or(""),
        &reply.body,
    );
    assert_eq!(reply.header("connection"), Some("close"));

    // Declares 100 MiB, beyond what the node will read and throw away: 413, then close.
    let mut stream = connect(node.port);
    write!(
        stream,
        "POST /agora HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n"
    )
    .unwrap();
    let reply = read_reply(&mut stream).expect("a reply");
    assert_eq!(reply.status, 413);
    assert_eq!(reply.header("connection"), Some("close"));
    assert!(closed_by_node(&mut stream, IO_DEADLINE));

    let metrics = get(&node.url("/metrics")).body;
    assert!(
        metrics.contains("agora_bodies_refused_total{reason=\"declared\"} 2"),
        "{metrics}"
    );
}

#[test]
fn slow_headers_and_idle_keep_alive_connections_are_closed_while_others_are_served() {
    let node = TestNode::builder()
        .env("AGORA_HTTP__HEADER_TIMEOUT_MS", "1000")
        .start();
    // Thirty clients each send half a request line and stop.
    let mut slow: Vec<TcpStream> = (0..30)
        .map(|_| {
            let mut stream = connect(node.port);
            stream.write_all(b"POST /agora HTTP/1.1\r\nHost: no").unwrap();
            stream
        })
        .collect();
    // An honest client is served while they hang.
    assert_eq!(get(&node.url("/health")).status, 200);
    let started = Instant::now();
    for stream in &mut slow {
        assert!(
            closed_by_node(stream, IO_DEADLINE),
            "a slow-header connection is closed"
        );
    }
    assert!(started.elapsed() < IO_DEADLINE);

    // A keep-alive connection that asked once and then went quiet is closed too.
    let mut idle = connect(node.port);
    assert_eq!(get_on(&mut idle, "/health").unwrap().status, 200);
    assert!(
        closed_by_node(&mut idle, IO_DEADLINE),
        "an idle keep-alive connection is closed"
    );
}

/// The client writes its whole header block before reading: 6 MiB, more than
/// loopback's socket buffers hold and less than `http.discard_body_bytes`. The
/// node must read past its refusal before closing (lingering close); closing
/// with the rest unread resets the connection and the client's write fails with
/// a broken pipe (seen 3 of 3 with the linger cut to 1 byte).
#[test]
fn oversized_headers_get_431() {
    let node = TestNode::builder().start();
    let mut stream = connect(node.port);
    let cookie = "a".repeat(6 << 20);
    write!(
        stream,
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n\r\n"
    )
    .unwrap();
    let reply = read_reply(&mut stream).expect("a reply");
    assert_eq!(reply.status, 431);
    assert_eq!(get(&node.url("/health")).status, 200);
}

#[test]
fn one_address_cannot_take_every_connection_and_websockets_count() {
    let node = TestNode::builder()
        .env("AGORA_HTTP__MAX_CONNECTIONS_PER_IP", "4")
        .env("AGORA_HTTP__MAX_CONNECTIONS", "6")
        .env("AGORA_HTTP__HEADER_TIMEOUT_MS", "60000")
        .start();
    let attacker = IpAddr::from([127, 0, 0, 1]);
    let honest = IpAddr::from([127, 0, 0, 2]);
    let third = IpAddr::from([127, 0, 0, 3]);

    // Two WebSockets and two idle connections fill the attacker's share.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sockets: Vec<_> = (0..2)
        .map(|_| {
            runtime
                .block_on(tokio_tungstenite::connect_async(node.ws_url("/ws")))
                .expect("a WebSocket under the cap")
                .0
        })
        .collect();
    let mut held: Vec<TcpStream> = (0..2).map(|_| connect_from(attacker, node.port)).collect();
    for stream in &mut held {
        assert_eq!(get_on(stream, "/health").unwrap().status, 200);
    }
    let mut over = connect_from(attacker, node.port);
    assert!(
        closed_by_node(&mut over, IO_DEADLINE),
        "a fifth connection from one address is closed on arrival"
    );

    // Another address is still served, up to the total cap of six.
    let mut first = connect_from(honest, node.port);
    assert_eq!(get_on(&mut first, "/health").unwrap().status, 200);
    let mut second = connect_from(honest, node.port);
    assert_eq!(get_on(&mut second, "/health").unwrap().status, 200);
    let mut beyond_total = connect_from(third, node.port);
    assert!(
        closed_by_node(&mut beyond_total, IO_DEADLINE),
        "a seventh connection is closed on arrival whatever its address"
    );

    // Closing connections frees their places: a WebSocket included.
    drop(sockets);
    let mut freed = None;
    for _ in 0..100 {
        let mut stream = connect_from(attacker, node.port);
        if let Ok(reply) = get_on(&mut stream, "/health") {
            assert_eq!(reply.status, 200);
            freed = Some(stream);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(freed.is_some(), "closed WebSockets give their places back");

    let metrics = get_on(&mut first, "/metrics").unwrap().body;
    assert!(
        metrics.contains("agora_connections_refused_total{reason=\"per_ip\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("agora_connections_refused_total{reason=\"total\"}"),
        "{metrics}"
    );
}
