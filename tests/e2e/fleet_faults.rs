//! Faults in a fleet (issue 40, point 6): two nodes on one PostgreSQL over
//! verified TLS, a client that sends every request to the next node in turn
//! (a round-robin balancer without stickiness) and moves on to the other node
//! when one does not answer. A node killed with SIGKILL under that load must
//! lose nothing it acknowledged and let no replay through twice; the database
//! stopped for five seconds must be survived by both nodes without a restart.
//! What a dead node leaves running (A2A tasks, HAI turns, MCP sessions) is
//! taken over as `a2a_fleet`, `hai_fleet` and `mcp_fleet` show.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::envelopes::{self, Agent};
use crate::fleet::{agora_body, agora_follow, guess_hash};
use crate::postgres_tls::TlsCluster;
use crate::support::{self, TestNode};

/// Requests the client sends before the kill, and after it.
const BEFORE_KILL: usize = 40;
const AFTER_KILL: usize = 40;

/// A node of the fleet on `url`, with the per-client rates out of the way of the load.
fn node_on(url: &str, ca_file: &std::path::Path, key_file: Option<&std::path::Path>) -> TestNode {
    let mut builder = TestNode::builder()
        .plugin("guess-number")
        .plugin(envelopes::PLUGIN)
        .env("AGORA_AGORA__CONVERSATIONS_PER_CLIENT_PER_MINUTE", "100000")
        .env("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "100000")
        .on_database(url)
        .env("AGORA_STORE__POSTGRES_CA_FILE", ca_file.display().to_string());
    if let Some(key) = key_file {
        builder = builder.env("AGORA_IDENTITY__KEY_FILE", key.display().to_string());
    }
    builder.start()
}

fn start_game_request() -> Value {
    json!({"protocolHash": guess_hash(), "multiround": true, "body": {"start": {"min": 5, "max": 5}}})
}

/// What the balancer got for one request.
struct Balanced {
    /// The status and body of the first node that answered; `None` when none did.
    reply: Option<(u16, String)>,
    /// Whether a node failed before that one (the request may have reached it).
    retried: bool,
}

/// One request through the balancer: to `nodes[turn]`, else to the next node that answers.
fn balanced(nodes: &[&TestNode], turn: usize, path: &str, body: &[u8]) -> Balanced {
    let mut retried = false;
    for offset in 0..nodes.len() {
        let node = nodes[(turn + offset) % nodes.len()];
        match support::try_post_with_headers(&node.url(path), &[("content-type", "application/json")], body) {
            Ok(reply) => {
                return Balanced {
                    reply: Some((reply.status, reply.body)),
                    retried,
                };
            }
            Err(_) => retried = true,
        }
    }
    Balanced { reply: None, retried }
}

/// What the client was told while the fleet lost a node.
#[derive(Default)]
struct Acknowledged {
    conversations: Vec<String>,
    hellos: Vec<Value>,
    /// HELLOs cut off at the dead node and refused as replays at the other:
    /// the dead node had claimed them, and acknowledged nothing.
    cut_off: usize,
}

#[test]
fn a_node_killed_under_load_loses_no_acknowledged_write_and_lets_no_replay_through_twice() {
    let cluster = TlsCluster::start(false);
    let url = cluster.url("127.0.0.1", "verify-full");
    let ca_file = cluster.ca.ca_file();
    let a = node_on(&url, &ca_file, None);
    let b = node_on(&url, &ca_file, Some(&a.data_dir.join("node.key")));
    let agent = Agent::new();
    let (did, _) = envelopes::hello(&b, &agent);

    let sent = AtomicUsize::new(0);
    let seen = std::thread::scope(|scope| {
        let client = scope.spawn(|| {
            let mut seen = Acknowledged::default();
            // The balancer keeps the dead node listed: every other request meets it first.
            let nodes = [&a, &b];
            for turn in 0..BEFORE_KILL + AFTER_KILL {
                // Alternately an Agora start (three writes) and a signed HELLO (a replay claim).
                if turn % 2 == 0 {
                    let outcome = balanced(
                        &nodes,
                        turn / 2,
                        "/agora",
                        start_game_request().to_string().as_bytes(),
                    );
                    match outcome.reply {
                        Some((200, body)) => {
                            let reply: Value = serde_json::from_str(&body).expect("JSON");
                            seen.conversations
                                .push(reply["conversationId"].as_str().expect("an id").to_string());
                        }
                        other => panic!("an Agora start got {other:?}"),
                    }
                } else {
                    let hello = agent.envelope("HELLO", json!({}));
                    let outcome = balanced(&nodes, turn / 2, "/envelopes", hello.to_string().as_bytes());
                    match outcome.reply {
                        Some((200, body)) if body.contains("WELCOME") => seen.hellos.push(hello),
                        Some((401, body)) if outcome.retried && body.contains("replayed") => {
                            seen.cut_off += 1
                        }
                        other => panic!("a HELLO got {other:?}"),
                    }
                }
                sent.fetch_add(1, Ordering::SeqCst);
            }
            seen
        });
        // SIGKILL once the load is well under way, while it runs.
        while sent.load(Ordering::SeqCst) < BEFORE_KILL && !client.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let killed = Command::new("kill")
            .args(["-KILL", &a.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(killed.success());
        client.join().expect("the client")
    });
    assert!(
        seen.cut_off <= 1,
        "at most the one HELLO in flight at the kill: {}",
        seen.cut_off
    );
    assert!(!seen.hellos.is_empty() && !seen.conversations.is_empty());

    // Every acknowledged conversation, whichever node started it, goes on at the survivor.
    for id in &seen.conversations {
        let reply = agora_follow(&b, id, json!({"body": {"guess": 5}}));
        assert_eq!(agora_body(&reply)["result"], "correct", "conversation {id}");
    }
    // Every acknowledged HELLO, whichever node welcomed it, is a replay at the survivor.
    for hello in &seen.hellos {
        let reply = envelopes::send(&b, hello, &did);
        reply.assert_error(401, "an acknowledged HELLO sent again");
        assert!(
            reply.payload()["message"]
                .as_str()
                .unwrap_or("")
                .contains("replayed"),
            "{}",
            reply.envelope
        );
    }
}

#[test]
fn both_nodes_recover_when_the_database_stops_for_five_seconds() {
    let cluster = TlsCluster::start(false);
    let url = cluster.url("127.0.0.1", "verify-full");
    let ca_file = cluster.ca.ca_file();
    let a = node_on(&url, &ca_file, None);
    let b = node_on(&url, &ca_file, Some(&a.data_dir.join("node.key")));
    let started: Vec<String> = [&a, &b]
        .iter()
        .map(|node| {
            let reply = support::post_json(&node.url("/agora"), &start_game_request());
            agora_body(&reply);
            reply.json()["conversationId"]
                .as_str()
                .expect("an id")
                .to_string()
        })
        .collect();

    cluster.postgres.stop();
    for node in [&a, &b] {
        node.wait_for_health("the outage seen", |health| {
            health["store"]["status"] == "unavailable"
        });
    }
    // The fault itself: the database stays away five seconds.
    std::thread::sleep(Duration::from_secs(5));
    cluster.postgres.restart();

    for node in [&a, &b] {
        node.wait_for_health("the store back over TLS", |health| {
            health["store"]["status"] == "ok"
        });
    }
    // Each conversation goes on at the other node; each node starts new ones.
    for (id, node) in started.iter().zip([&b, &a]) {
        let reply = agora_follow(node, id, json!({"body": {"guess": 5}}));
        assert_eq!(agora_body(&reply)["result"], "correct", "conversation {id}");
    }
    for node in [&a, &b] {
        agora_body(&support::post_json(&node.url("/agora"), &start_game_request()));
    }
}
