//! Hostile peers against the two signed transports (uAgents `POST /submit`,
//! signed envelopes `POST /envelopes` and `GET /envelopes/ws`), over real
//! sockets against the real binary. Every attack runs next to an honest
//! sender that must still be served.

use std::time::{Duration, Instant};

use agora_node::crypto::identity::raw_sender_id;
use agora_node::crypto::uagents::Envelope;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::envelopes::{self as env, Agent};
use crate::support::{self, TestNode};
use crate::uagents::{
    LISTENER_SEED, NODE_SEED, SENDER_SEED, echo_node, identity, message_envelope, now_secs, peer_env,
    reply_envelope, submit,
};

fn error_of(reply: &support::HttpReply) -> String {
    reply.json()["error"].as_str().unwrap_or_default().to_string()
}

/// The honest uAgents sender gets its echo.
fn assert_echoed(node: &TestNode, node_address: &str, text: &str) {
    let honest = message_envelope(&identity(SENDER_SEED), node_address, text);
    let reply = reply_envelope(&submit(node, &honest, true));
    reply.verify().unwrap();
    assert_eq!(
        reply.decode_payload().unwrap(),
        json!({"text": format!("echo: {text}")}).to_string()
    );
}

fn vector_envelope(name: &str) -> Value {
    let text = std::fs::read_to_string(support::vectors_dir().join("uagents_envelope.json")).unwrap();
    let vectors: Value = serde_json::from_str(&text).unwrap();
    let case = vectors["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
        .clone();
    serde_json::from_str(case["json_as_sent_by_library"].as_str().unwrap()).unwrap()
}

#[test]
fn uagents_expiry_moved_into_the_nonce_is_refused() {
    let node = echo_node(LISTENER_SEED, &[]);
    let listener = identity(LISTENER_SEED).address().to_string();

    // Envelopes signed by the real library (expired in 2023): moving `expires` into
    // `nonce` keeps the signature valid, since the digest has no separators.
    for name in ["hello_expires", "no_payload"] {
        let original = vector_envelope(name);
        let mut forged = original.clone();
        forged["nonce"] = original["expires"].clone();
        forged["expires"] = Value::Null;
        let parsed = Envelope::from_value(forged.clone()).unwrap();
        parsed.verify().expect("the forgery carries a valid signature");
        let reply = support::post_json(&node.url("/submit"), &forged);
        assert_eq!(
            (reply.status, error_of(&reply)),
            (400, "envelope has no expiry".into()),
            "{name}"
        );
        let reply = support::post_json(&node.url("/submit"), &original);
        assert_eq!(error_of(&reply), "envelope expired", "{name}");
        assert_echoed(&node, &listener, name);
    }

    // The same with a live envelope: the forgery is refused and does not use up the original.
    let sender = identity(SENDER_SEED);
    let original = message_envelope(&sender, &listener, "live");
    let mut forged = original.clone();
    forged.nonce = forged.expires.take();
    forged.verify().expect("same signature");
    let reply = submit(&node, &forged, true);
    assert_eq!(
        (reply.status, error_of(&reply)),
        (400, "envelope has no expiry".into())
    );
    assert_echoed(&node, &listener, "while forging");
    let reply = reply_envelope(&submit(&node, &original, true));
    assert_eq!(reply.decode_payload().unwrap(), r#"{"text":"echo: live"}"#);

    // Payload characters moved onto the schema digest: same digest, refused by its shape.
    let original = message_envelope(&sender, &listener, "shifted");
    let mut shifted = original.clone();
    let payload = shifted.payload.take().unwrap();
    shifted.schema_digest.push_str(&payload[..4]);
    shifted.payload = Some(payload[4..].to_string());
    shifted.verify().expect("same signature");
    let reply = submit(&node, &shifted, true);
    assert_eq!(
        (reply.status, error_of(&reply)),
        (400, "invalid schema digest".into())
    );

    // An expiry beyond uagents.max_expiry_secs (3600 by default) is refused too.
    let mut far = message_envelope(&sender, &listener, "far");
    far.expires = Some(now_secs() + 10 * 24 * 3600);
    far.sign(&sender);
    let reply = submit(&node, &far, true);
    assert_eq!(
        (reply.status, error_of(&reply)),
        (400, "envelope expiry is more than 3600 seconds ahead".into())
    );
    assert_echoed(&node, &listener, "after all that");
}

#[test]
fn uagents_replays_are_refused_after_the_window_until_expiry() {
    let node = echo_node(
        LISTENER_SEED,
        &[("AGORA_UAGENTS__REPLAY_WINDOW_SECS".into(), "1".into())],
    );
    let listener = identity(LISTENER_SEED).address().to_string();
    let request = message_envelope(&identity(SENDER_SEED), &listener, "once");
    reply_envelope(&submit(&node, &request, true));
    // Past the one-second window, but the envelope is valid for ~30 s more.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(request.expires.unwrap() > now_secs() + 5, "still valid");
    for sync in [true, false] {
        let again = submit(&node, &request, sync);
        assert_eq!(
            (again.status, error_of(&again)),
            (400, "envelope already received".into())
        );
    }
    assert_echoed(&node, &listener, "honest");
}

/// A peer endpoint that takes one delivery and holds it unanswered until told, then
/// answers every later delivery with 200.
fn stalling_peer(release: std::sync::mpsc::Receiver<()>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/submit", listener.local_addr().unwrap());
    let thread = std::thread::spawn(move || {
        use std::io::Write;
        let (mut held, _) = listener.accept().unwrap();
        release.recv().unwrap();
        let _ = held.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
        );
        drop(held);
        vec![crate::uagents::serve_one(&listener, "200 OK")]
    });
    (url, thread)
}

#[test]
fn uagents_async_replies_beyond_the_queue_are_refused_before_recording() {
    let (release, released) = std::sync::mpsc::channel();
    let (peer_url, peer) = stalling_peer(released);
    let sender = identity(SENDER_SEED);
    let node = echo_node(
        NODE_SEED,
        &[
            peer_env(sender.address(), &peer_url),
            ("AGORA_UAGENTS__MAX_PENDING_REPLIES".into(), "1".into()),
            ("AGORA_OUTBOUND__TIMEOUT_MS".into(), "120000".into()),
        ],
    );
    let node_address = identity(NODE_SEED).address().to_string();
    let first = message_envelope(&sender, &node_address, "first");
    let accepted = submit(&node, &first, false);
    assert_eq!((accepted.status, accepted.json()), (200, json!({})));
    // The only reply slot is held by the stalled delivery: the next async envelope is
    // refused with the busy error instead of being accepted and its reply dropped.
    let second = message_envelope(&sender, &node_address, "second");
    let busy = submit(&node, &second, false);
    assert_eq!(busy.status, 503, "{}", busy.body);
    assert!(error_of(&busy).contains("overloaded"), "{}", busy.body);
    // Sync senders need no slot and are served meanwhile.
    assert_echoed(&node, &node_address, "sync meanwhile");
    release.send(()).unwrap();
    // Once the slot is free the refused envelope is taken: it was never recorded.
    let deadline = Instant::now() + Duration::from_secs(30);
    let accepted = loop {
        let reply = submit(&node, &second, false);
        if reply.status != 503 || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (accepted.status, accepted.json()),
        (200, json!({})),
        "{}",
        accepted.body
    );
    let delivered = peer.join().unwrap();
    let reply = Envelope::from_value(serde_json::from_str(&delivered[0]).unwrap()).unwrap();
    reply.verify().unwrap();
    assert_eq!(reply.decode_payload().unwrap(), r#"{"text":"echo: second"}"#);
}

#[cfg(unix)]
#[test]
fn seed_and_node_key_files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let node = TestNode::builder().plugin("uagents-echo").start();
    let address = support::get_json(&node.url("/agent_info")).unwrap()["address"].clone();
    for name in ["uagents.seed", "node.key"] {
        let path = node.data_dir.join(name);
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }
    let seed = std::fs::read_to_string(node.data_dir.join("uagents.seed")).unwrap();
    assert_eq!(
        identity(seed.trim()).address(),
        address.as_str().unwrap(),
        "the file holds the identity's seed"
    );
}

#[test]
fn replaying_a_captured_envelope_does_not_spend_the_victims_quota() {
    let node = env::start(TestNode::builder().env("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "5"));
    let victim = Agent::new();
    let captured = victim.envelope("HELLO", json!({}));
    let reply = env::post_raw(&node, "application/json", captured.to_string().as_bytes(), None);
    assert_eq!(reply.kind(), "WELCOME");
    let did = reply.payload()["did"].as_str().unwrap().to_string();
    let body = captured.to_string();
    let url = node.url("/envelopes");
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..250 {
                    let reply = support::post(&url, "application/json", body.as_bytes());
                    assert_eq!(reply.status, 401, "{}", reply.body);
                    assert!(reply.body.contains("replayed envelope"), "{}", reply.body);
                }
            });
        }
        // The victim is served while the replays run.
        assert_eq!(
            env::send(&node, &victim.envelope("HELLO", json!({})), &did).kind(),
            "WELCOME"
        );
    });
    // 1000 replays later the victim still has the rest of its burst of 5: at
    // least 3 more (more only if its bucket refilled meanwhile, never past 5), then 429.
    let mut served = 0;
    let refused = loop {
        let reply = env::send(&node, &victim.envelope("HELLO", json!({})), &did);
        if reply.kind() != "WELCOME" {
            break reply;
        }
        served += 1;
        assert!(served <= 5, "more than the burst passed");
    };
    assert!(
        served >= 3,
        "the replays spent the victim's tokens: only {served} left"
    );
    refused.assert_error(429, "own quota");
}

#[test]
fn did_key_and_raw_forms_of_one_key_share_one_bucket() {
    // One envelope a minute: the bucket holds one token, and the next comes a minute later.
    let node = env::start(TestNode::builder().env("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "1"));
    let as_did = Agent::new();
    let as_raw = Agent {
        key: as_did.key.clone(),
        id: raw_sender_id(&as_did.key.verifying_key()),
    };
    let other = Agent::new();
    let (did, _) = env::hello(&node, &as_did);
    env::send(&node, &as_raw.envelope("HELLO", json!({})), &did).assert_error(429, "raw form");
    env::send(&node, &as_did.envelope("HELLO", json!({})), &did).assert_error(429, "did form");
    assert_eq!(
        env::send(&node, &other.envelope("HELLO", json!({})), &did).kind(),
        "WELCOME"
    );
}

#[test]
fn a_flood_of_fresh_keys_does_not_lock_out_anyone() {
    let node = env::start(
        TestNode::builder()
            .env("AGORA_ENVELOPES__MAX_TRACKED_SENDERS", "16")
            .env("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "100000"),
    );
    let established = Agent::new();
    let (did, _) = env::hello(&node, &established);
    let url = node.url("/envelopes");
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                for _ in 0..200 {
                    let body = Agent::new().envelope("HELLO", json!({})).to_string();
                    let reply = support::post(&url, "application/json", body.as_bytes());
                    assert_eq!(reply.status, 200, "fresh keys are served too: {}", reply.body);
                }
            });
        }
        for _ in 0..20 {
            assert_eq!(
                env::send(&node, &established.envelope("HELLO", json!({})), &did).kind(),
                "WELCOME"
            );
        }
    });
    assert_eq!(
        env::send(&node, &Agent::new().envelope("HELLO", json!({})), &did).kind(),
        "WELCOME"
    );
    assert_eq!(
        env::send(&node, &established.envelope("HELLO", json!({})), &did).kind(),
        "WELCOME"
    );
}

pub(crate) fn primes_request(agent: &Agent, params: Value) -> Value {
    agent.envelope(
        "REQUEST",
        json!({"resource": "agora:primes:v1", "params": params}),
    )
}

#[test]
fn offer_params_and_open_offers_are_capped() {
    let node = env::start(
        TestNode::builder()
            .env("AGORA_ENVELOPES__MAX_PARAMS_BYTES", "1024")
            .env("AGORA_ENVELOPES__MAX_OFFERS_PER_SENDER", "2")
            .env("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "100000"),
    );
    let alice = Agent::new();
    let bob = Agent::new();
    let (did, _) = env::hello(&node, &alice);
    let big = primes_request(&alice, json!({"limit": 10, "pad": "x".repeat(2000)}));
    let reply = env::send(&node, &big, &did);
    reply.assert_error(400, "oversized params");
    assert!(reply.payload()["message"].as_str().unwrap().contains("params"));
    assert_eq!(reply.payload()["request_id"], big["id"]);

    let mut offers = Vec::new();
    for _ in 0..2 {
        let offer = env::send(&node, &primes_request(&alice, json!({"limit": 10})), &did);
        assert_eq!(offer.kind(), "OFFER", "{}", offer.envelope);
        offers.push(offer.envelope["id"].clone());
    }
    env::send(&node, &primes_request(&alice, json!({"limit": 10})), &did)
        .assert_error(429, "third open offer");
    // Others are not affected.
    assert_eq!(
        env::send(&node, &primes_request(&bob, json!({"limit": 10})), &did).kind(),
        "OFFER"
    );
    // Accepting one frees its place.
    let result = env::send(
        &node,
        &alice.envelope("ACCEPT", json!({"offer_id": offers[0]})),
        &did,
    );
    assert_eq!(result.kind(), "RESULT", "{}", result.envelope);
    assert_eq!(result.payload()["data"]["count"], 4);
    assert_eq!(
        env::send(&node, &primes_request(&alice, json!({"limit": 10})), &did).kind(),
        "OFFER"
    );
}

#[test]
fn integers_outside_i_json_are_refused() {
    let node = env::start(TestNode::builder());
    let alice = Agent::new();
    let (did, _) = env::hello(&node, &alice);
    for number in [
        "9007199254740993",
        "-9007199254740993",
        "123456789012345678901234567890",
    ] {
        // Signed as the sender's own JCS would have it: the text carries the digits.
        let draft = alice.envelope(
            "REQUEST",
            json!({"resource": "agora:sum:v1", "params": {"numbers": ["PLACEHOLDER"]}}),
        );
        let text = draft.to_string().replace("\"PLACEHOLDER\"", number);
        let reply = env::post_raw(&node, "application/json", text.as_bytes(), Some(&did));
        reply.assert_error(400, number);
        let message = reply.payload()["message"].as_str().unwrap();
        assert!(
            message.contains("I-JSON") && message.contains(number),
            "{message}"
        );
    }
    let fine = alice.envelope(
        "REQUEST",
        json!({"resource": "agora:sum:v1", "params": {"numbers": [9007199254740991u64, 0]}}),
    );
    let reply = env::send(&node, &fine, &did);
    assert_eq!(reply.kind(), "RESULT", "{}", reply.envelope);
}

#[test]
fn idle_envelope_websockets_are_closed() {
    let node = env::start(TestNode::builder().env("AGORA_ENVELOPES__WS_IDLE_TIMEOUT_SECS", "2"));
    let alice = Agent::new();
    let (did, _) = env::hello(&node, &alice);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut idle = Vec::new();
        for _ in 0..20 {
            let (socket, _) = tokio_tungstenite::connect_async(node.ws_url("/envelopes/ws"))
                .await
                .expect("upgrade");
            idle.push(socket);
        }
        // A busy socket is kept: frames closer together than the timeout.
        let (mut active, _) = tokio_tungstenite::connect_async(node.ws_url("/envelopes/ws"))
            .await
            .unwrap();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            env::ws_send(&mut active, &alice.envelope("HELLO", json!({}))).await;
            assert_eq!(env::next_envelope(&mut active, &did).await["type"], "WELCOME");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Each idle one was closed by the node (a close frame, then the end).
        for mut socket in idle {
            let ended = tokio::time::timeout(Duration::from_secs(30), async {
                loop {
                    match socket.next().await {
                        None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                        Some(Ok(_)) => continue,
                    }
                }
            })
            .await;
            assert!(ended.is_ok(), "an idle socket was not closed");
        }
    });
    assert_eq!(
        env::send(&node, &alice.envelope("HELLO", json!({})), &did).kind(),
        "WELCOME"
    );
}

#[test]
fn oversized_bodies_are_refused_first_in_each_protocols_shape() {
    let node = echo_node(NODE_SEED, &[("AGORA_HTTP__MAX_BODY_BYTES".into(), "4096".into())]);
    let big = vec![b'x'; 6000];
    let reply = env::post_raw(&node, "application/json", &big, None);
    reply.assert_error(413, "envelopes body");
    let reply = support::post(&node.url("/submit"), "application/json", &big);
    assert_eq!(reply.status, 413, "{}", reply.body);
    assert!(error_of(&reply).contains("too large"), "{}", reply.body);
    let node_address = identity(NODE_SEED).address().to_string();
    assert_echoed(&node, &node_address, "small");
}

#[test]
fn acknowledged_signed_state_survives_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let alice = Agent::new();
    let sender = identity(SENDER_SEED);
    let node_address = identity(NODE_SEED).address().to_string();
    let seed_env = [("AGORA_UAGENTS__SEED", NODE_SEED)];
    let start = || {
        let mut builder = TestNode::builder()
            .data_dir(dir.path())
            .plugin("envelope-services")
            .plugin("uagents-echo");
        for (key, value) in seed_env {
            builder = builder.env(key, value);
        }
        let node = builder.start();
        node.wait_for_health("both plugins", |h| {
            support::has_plugin(h, "uagents-echo") && support::has_plugin(h, "envelope-services")
        });
        node
    };
    let request = primes_request(&alice, json!({"limit": 100}));
    let request_id = request["id"].as_str().unwrap().to_string();
    let message = message_envelope(&sender, &node_address, "durable");
    let (did, accept) = {
        let node = start();
        let (did, _) = env::hello(&node, &alice);
        let offer = env::send(&node, &request, &did);
        assert_eq!(offer.kind(), "OFFER");
        let accept = alice.envelope("ACCEPT", json!({"offer_id": offer.envelope["id"]}));
        let result = env::send(&node, &accept, &did);
        assert_eq!(result.kind(), "RESULT", "{}", result.envelope);
        reply_envelope(&submit(&node, &message, true));
        // A crash right after the acknowledgements.
        node.kill();
        (did, accept)
    };
    let node = start();
    assert_eq!(env::status_of(&node, &alice, &did, &request_id), "COMPLETED");
    env::send(&node, &accept, &did).assert_error(401, "replayed ACCEPT");
    let again = alice.envelope("ACCEPT", json!({"offer_id": accept["payload"]["offer_id"]}));
    let reply = env::send(&node, &again, &did);
    reply.assert_error(400, "the offer was consumed");
    assert_eq!(reply.payload()["request_id"], request_id.as_str());
    let replay = submit(&node, &message, true);
    assert_eq!(
        (replay.status, error_of(&replay)),
        (400, "envelope already received".into())
    );
    assert_echoed(&node, &node_address, "after the crash");
}
