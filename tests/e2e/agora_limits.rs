//! Agora's conversation creation rate against a spread of client addresses
//! (issue 37), over real sockets against the real node. The per-client buckets
//! live in the node's shared rate table (`policy::rate`), which has room for a
//! bounded number of clients: when it is full it forgets a client seen once,
//! and never refuses anyone for want of room.
//!
//! "Another client" is another loopback source address (Linux routes all of
//! 127.0.0.0/8 to `lo`).

use std::net::{IpAddr, Ipv4Addr};

use serde_json::json;

use crate::hostile_edge::game_hash;
use crate::support::{RawReply, RawRequest, TestNode, raw_exchange};

/// More clients than the rate table tracks (`agora.max_conversations`, but at least 1024).
const SPREAD: u16 = 1100;

/// The `n`th client address of the spread, none of them 127.0.0.2.
fn spread_address(n: u16) -> IpAddr {
    let [high, low] = n.to_be_bytes();
    Ipv4Addr::new(127, 1, high, low).into()
}

fn open_game(node: &TestNode, from: IpAddr) -> RawReply {
    let body =
        json!({"protocolHash": game_hash(), "multiround": true, "body": {"start": {"min": 1, "max": 100}}})
            .to_string();
    raw_exchange(node, RawRequest::post_json(from, "/agora", body.as_bytes()))
}

fn end_game(node: &TestNode, from: IpAddr, id: &str) -> RawReply {
    let path = format!("/agora/conversations/{id}");
    raw_exchange(
        node,
        RawRequest {
            method: "DELETE",
            ..RawRequest::post_json(from, &path, b"")
        },
    )
}

#[test]
fn a_spread_of_addresses_cannot_lock_new_clients_out_of_opening_conversations() {
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("guess-number")
        .env("AGORA_AGORA__MAX_CONVERSATIONS", "64")
        .env("AGORA_AGORA__CONVERSATIONS_PER_CLIENT_PER_MINUTE", "1")
        .start();
    // Each address opens one conversation and ends it: the live caps stay
    // free, and every address has spent its one token of the minute.
    for n in 0..SPREAD {
        let from = spread_address(n);
        let opened = open_game(&node, from);
        assert_eq!(
            opened.status, 200,
            "fresh client {n} ({from}) was refused: {}",
            opened.body
        );
        let id = opened.json()["conversationId"]
            .as_str()
            .expect("a conversationId")
            .to_string();
        let ended = end_game(&node, from, &id);
        assert_eq!(ended.status, 200, "{}", ended.body);
    }
    // A client the node has never seen opens one, and its own rate still holds.
    let honest: IpAddr = "127.0.0.2".parse().unwrap();
    let opened = open_game(&node, honest);
    assert_eq!(opened.status, 200, "{}", opened.body);
    let refused = open_game(&node, honest);
    assert_eq!(refused.status, 429, "{}", refused.body);
    let error = refused.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("1 per minute"), "{error}");
}
