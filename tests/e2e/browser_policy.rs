//! The browser policy (issue 37) over real sockets, on every endpoint a page can
//! reach: HAI's page, WebSocket and history, A2A and its card, MCP.
//!
//! A rebinding page is a request whose `Host` and `Origin` both name the
//! attacker's domain (its name pointed at 127.0.0.1); a foreign page is one whose
//! `Origin` names another site. Requests are written by hand so the `Host`
//! header is exactly what a browser would send.

use serde_json::json;

use crate::hai::{Client, ws_request};
use crate::support::{RawReply, RawRequest, TestNode, raw_exchange};

const EVIL: &str = "rebind.evil.example";

/// One HTTP/1.1 exchange with the node, with `Host` and the other headers as given.
fn exchange(
    node: &TestNode,
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> RawReply {
    raw_exchange(
        node,
        RawRequest {
            from: [127, 0, 0, 1].into(),
            method,
            path,
            host: Some(host),
            headers,
            body: body.as_bytes(),
        },
    )
}

fn own_host(node: &TestNode) -> String {
    format!("127.0.0.1:{}", node.port)
}

fn send_message(text: &str) -> String {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]}},
    })
    .to_string()
}

fn builder() -> crate::support::NodeBuilder {
    TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
}

#[test]
fn a2a_takes_no_request_from_a_foreign_or_rebinding_page_nor_a_simple_request() {
    let node = builder().start();
    let own = own_host(&node);
    let origin = format!("http://{own}");
    let evil = format!("{EVIL}:{}", node.port);
    let evil_origin = format!("http://{evil}");

    // A foreign page's CORS "simple request": text/plain, its own Origin.
    let foreign = exchange(
        &node,
        "POST",
        "/a2a",
        &own,
        &[("Origin", "https://evil.example"), ("Content-Type", "text/plain")],
        &send_message("foreign"),
    );
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    assert_eq!(foreign.json()["error"]["code"], -32600, "{}", foreign.body);
    // The same without a browser's Origin, still text/plain: not JSON-RPC.
    let plain = exchange(
        &node,
        "POST",
        "/a2a",
        &own,
        &[("Content-Type", "text/plain")],
        &send_message("plain"),
    );
    assert_eq!(plain.status, 415, "{}", plain.body);
    assert_eq!(plain.json()["error"]["code"], -32600);
    // A rebinding page: same-origin as far as its browser knows.
    for (method, path, body) in [
        ("POST", "/a2a", send_message("rebound")),
        ("GET", "/.well-known/agent-card.json", String::new()),
    ] {
        let rebound = exchange(
            &node,
            method,
            path,
            &evil,
            &[("Origin", &evil_origin), ("Content-Type", "application/json")],
            &body,
        );
        assert_eq!(rebound.status, 421, "{path}: {}", rebound.body);
        assert!(rebound.body.contains("http.public_hosts"), "{}", rebound.body);
    }
    // Its same-origin GET carries no Origin at all: the Host alone tells.
    let card = exchange(&node, "GET", "/.well-known/agent-card.json", &evil, &[], "");
    assert_eq!(card.status, 421, "{}", card.body);

    // The node's own page, and a program without a browser, are served.
    for headers in [vec![("Origin", origin.as_str())], vec![]] {
        let mut headers = headers;
        headers.push(("Content-Type", "application/json"));
        let served = exchange(&node, "POST", "/a2a", &own, &headers, &send_message("honest"));
        assert_eq!(served.status, 200, "{}", served.body);
        assert!(served.json().get("result").is_some(), "{}", served.body);
    }
}

#[test]
fn the_cards_url_never_comes_from_the_host_header() {
    let node = builder().start();
    // localhost is one of a loopback node's names, so the request is served…
    let card = exchange(
        &node,
        "GET",
        "/.well-known/agent-card.json",
        &format!("localhost:{}", node.port),
        &[],
        "",
    );
    assert_eq!(card.status, 200, "{}", card.body);
    // …but the card names the listen address, not what the client called it.
    let url = card.json()["supportedInterfaces"][0]["url"].clone();
    assert_eq!(
        url,
        json!(format!("http://127.0.0.1:{}/a2a", node.port)),
        "{}",
        card.body
    );

    let named = builder()
        .env("AGORA_HTTP__PUBLIC_HOSTS", r#"["agent.example.test"]"#)
        .start();
    let card = exchange(
        &named,
        "GET",
        "/.well-known/agent-card.json",
        "agent.example.test",
        &[],
        "",
    );
    assert_eq!(card.status, 200, "{}", card.body);
    assert_eq!(
        card.json()["supportedInterfaces"][0]["url"],
        json!(format!("http://agent.example.test:{}/a2a", named.port))
    );
    let other = exchange(
        &named,
        "GET",
        "/.well-known/agent-card.json",
        "unlisted.example.test",
        &[],
        "",
    );
    assert_eq!(other.status, 421, "{}", other.body);
}

#[tokio::test]
async fn a_rebinding_page_gets_no_chat_socket_page_or_history() {
    let node = builder().start();
    let evil = format!("{EVIL}:{}", node.port);
    let evil_origin = format!("http://{evil}");
    let refused = Client::connect_from(
        [127, 0, 0, 1].into(),
        ws_request(&node, "/ws", &[("host", &evil), ("origin", &evil_origin)]),
    )
    .await
    .err()
    .expect("a rebinding page must not get a WebSocket");
    assert_eq!(refused.status, 421, "{}", refused.body);

    for path in ["/", "/hai-client.js", "/ws/sessions/some-session/history"] {
        let reply = exchange(&node, "GET", path, &evil, &[], "");
        assert_eq!(reply.status, 421, "{path}: {}", reply.body);
    }
    // The node's own names still serve the page and the socket.
    for host in [own_host(&node), format!("localhost:{}", node.port)] {
        let page = exchange(&node, "GET", "/", &host, &[], "");
        assert_eq!(page.status, 200, "{host}");
    }
    let origin = format!("http://{}", own_host(&node));
    Client::connect_from(
        [127, 0, 0, 1].into(),
        ws_request(&node, "/ws", &[("origin", &origin)]),
    )
    .await
    .unwrap_or_else(|reply| panic!("the node's own page is refused: {}", reply.body));
}

#[test]
fn mcp_refuses_rebinding_and_non_json_requests() {
    let node = TestNode::builder().plugin("unit-converter").start();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    })
    .to_string();
    let evil = format!("{EVIL}:{}", node.port);
    let accept = ("Accept", "application/json, text/event-stream");
    let rebound = exchange(
        &node,
        "POST",
        "/mcp",
        &evil,
        &[
            ("Origin", &format!("http://{evil}")),
            ("Content-Type", "application/json"),
            accept,
        ],
        &initialize,
    );
    assert_eq!(rebound.status, 421, "{}", rebound.body);
    let plain = exchange(
        &node,
        "POST",
        "/mcp",
        &own_host(&node),
        &[("Content-Type", "text/plain"), accept],
        &initialize,
    );
    assert_eq!(plain.status, 415, "{}", plain.body);
    assert_eq!(plain.json()["error"]["code"], -32600);
    let served = exchange(
        &node,
        "POST",
        "/mcp",
        &own_host(&node),
        &[("Content-Type", "application/json"), accept],
        &initialize,
    );
    assert_eq!(served.status, 200, "{}", served.body);
}
