//! Two nodes, one PostgreSQL database (`store.backend = "postgres"`): every
//! guarantee a single node gives must hold across the fleet, including when
//! the same request reaches both nodes at the same instant. The races run
//! many rounds; each round must hold.
//!
//! The database is a real PostgreSQL from Debian's package, started by the
//! harness (`agora-test-postgres`); each test has a database of its own.

use std::sync::Barrier;
use std::time::Duration;

use agora_node::crypto::uagents::AgentIdentity;
use agora_test_postgres::Postgres;
use serde_json::{Value, json};

use crate::envelopes::{self, Agent, Reply};
use crate::support::{self, HttpReply, TestNode};
use crate::uagents::{message_envelope, submit};

/// Rounds of each simultaneous race.
const ROUNDS: usize = 25;

/// A fleet's node on `database`, serving `plugins`, signing with `key_file`
/// when given (the fleet is one envelope identity: its nodes share the key).
fn fleet_node(database: &str, plugins: &[&str], key_file: Option<&std::path::Path>) -> TestNode {
    let mut builder = TestNode::builder().on_database(database);
    if let Some(key) = key_file {
        builder = builder.env("AGORA_IDENTITY__KEY_FILE", key.display().to_string());
    }
    for plugin in plugins {
        builder = builder.plugin(plugin);
    }
    builder.start()
}

/// Two nodes on one fresh database; the second signs with the first's key.
fn two_nodes(plugins: &[&str]) -> (TestNode, TestNode) {
    let database = Postgres::shared().create_database();
    let a = fleet_node(&database, plugins, None);
    let key = a.data_dir.join("node.key");
    let b = fleet_node(&database, plugins, Some(&key));
    (a, b)
}

/// Run `at_a` and `at_b` at the same instant (as near as two threads get).
fn at_once<T: Send>(at_a: impl FnOnce() -> T + Send, at_b: impl FnOnce() -> T + Send) -> (T, T) {
    let start = Barrier::new(2);
    std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            start.wait();
            at_a()
        });
        let b = scope.spawn(|| {
            start.wait();
            at_b()
        });
        (
            a.join().expect("node A's request"),
            b.join().expect("node B's request"),
        )
    })
}

/// Of two replies to one race, exactly one is a `kind`: (it, the other).
fn one_of_two<'r>(at_a: &'r Reply, at_b: &'r Reply, kind: &str, round: usize) -> (&'r Reply, &'r Reply) {
    match (at_a.kind() == kind, at_b.kind() == kind) {
        (true, false) => (at_a, at_b),
        (false, true) => (at_b, at_a),
        _ => panic!(
            "round {round}: not exactly one {kind}: {} / {}",
            at_a.envelope, at_b.envelope
        ),
    }
}

#[test]
fn a_signed_envelope_sent_to_both_nodes_at_once_is_accepted_by_exactly_one() {
    let (a, b) = two_nodes(&[envelopes::PLUGIN]);
    let agent = Agent::new();
    let (did, _) = envelopes::hello(&a, &agent);
    let (did_b, _) = envelopes::hello(&b, &agent);
    assert_eq!(did, did_b, "the fleet signs as one identity");
    for round in 0..ROUNDS {
        let hello = agent.envelope("HELLO", json!({}));
        let (at_a, at_b) = at_once(
            || envelopes::send(&a, &hello, &did),
            || envelopes::send(&b, &hello, &did),
        );
        let (_, refused) = one_of_two(&at_a, &at_b, "WELCOME", round);
        refused.assert_error(401, "the copy at the other node");
        assert!(
            refused.payload()["message"]
                .as_str()
                .unwrap_or("")
                .contains("replayed"),
            "{}",
            refused.envelope
        );
    }
    // Later copies are refused by either node, whichever saw the original.
    let hello = agent.envelope("HELLO", json!({}));
    assert_eq!(envelopes::send(&a, &hello, &did).kind(), "WELCOME");
    envelopes::send(&b, &hello, &did).assert_error(401, "replay at the other node");
}

#[test]
fn a_uagents_envelope_sent_to_both_nodes_at_once_is_accepted_by_exactly_one() {
    // No uagents.seed: the fleet makes one and both nodes are the same agent.
    let (a, b) = two_nodes(&["uagents-echo"]);
    let address = |node: &TestNode| -> String {
        let info = support::get_json(&node.url("/agent_info")).expect("agent_info");
        info["address"].as_str().expect("an address").to_string()
    };
    let node_address = address(&a);
    assert_eq!(node_address, address(&b), "one fleet, one agent address");
    let sender = AgentIdentity::from_seed("fleet test sender seed phrase").expect("identity");
    for round in 0..ROUNDS {
        let envelope = message_envelope(&sender, &node_address, &format!("round {round}"));
        let (at_a, at_b) = at_once(|| submit(&a, &envelope, true), || submit(&b, &envelope, true));
        let replies = [&at_a, &at_b];
        let accepted: Vec<&&HttpReply> = replies.iter().filter(|r| r.status == 200).collect();
        assert_eq!(accepted.len(), 1, "round {round}: {} / {}", at_a.body, at_b.body);
        let refused = if at_a.status == 200 { &at_b } else { &at_a };
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.json(), json!({"error": "envelope already received"}));
    }
}

#[test]
fn one_offer_accepted_at_both_nodes_at_once_yields_one_result_and_one_refusal() {
    let (a, b) = two_nodes(&[envelopes::PLUGIN]);
    let agent = Agent::new();
    let (did, _) = envelopes::hello(&a, &agent);
    for round in 0..ROUNDS {
        // The offer is made by one node, alternately; both are asked to accept it.
        let offering = if round % 2 == 0 { &a } else { &b };
        let request = agent.envelope(
            "REQUEST",
            json!({"resource": "agora:primes:v1", "params": {"limit": 1000}}),
        );
        let offer = envelopes::send(offering, &request, &did);
        assert_eq!(offer.kind(), "OFFER", "{}", offer.envelope);
        let offer_id = offer.envelope["id"].as_str().expect("offer id").to_string();
        let request_id = request["id"].as_str().expect("request id").to_string();
        let accept_a = agent.envelope("ACCEPT", json!({"offer_id": offer_id}));
        let accept_b = agent.envelope("ACCEPT", json!({"offer_id": offer_id}));
        let (at_a, at_b) = at_once(
            || envelopes::send(&a, &accept_a, &did),
            || envelopes::send(&b, &accept_b, &did),
        );
        let (result, refused) = one_of_two(&at_a, &at_b, "RESULT", round);
        assert_eq!(result.payload()["data"]["count"], 168);
        refused.assert_error(400, "the second ACCEPT");
        assert_eq!(refused.payload()["request_id"], request_id.as_str());
        // Either node reports the same state of the request.
        for node in [&a, &b] {
            assert_eq!(envelopes::status_of(node, &agent, &did, &request_id), "COMPLETED");
        }
    }
}

fn agora_start(node: &TestNode, request: Value) -> HttpReply {
    support::post_json(&node.url("/agora"), &request)
}

pub(crate) fn agora_follow(node: &TestNode, id: &str, request: Value) -> HttpReply {
    support::post_json(&node.url(&format!("/agora/conversations/{id}")), &request)
}

pub(crate) fn agora_body(reply: &HttpReply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.body);
    let value = reply.json();
    assert_eq!(value["status"], "success", "{value}");
    value["body"].clone()
}

#[test]
fn an_agora_conversation_continues_on_the_other_node_and_ends_exactly_once() {
    let (a, b) = two_nodes(&["guess-number"]);
    let hash = guess_hash();
    for round in 0..ROUNDS / 5 {
        let first = agora_start(
            &a,
            json!({"protocolHash": hash, "multiround": true, "body": {"start": {"min": 1, "max": 1000}}}),
        );
        agora_body(&first);
        let id = first.json()["conversationId"]
            .as_str()
            .expect("an id")
            .to_string();
        let expires = first.json()["conversationExpires"].clone();
        // Bisection, each guess at the other node than the last: the game
        // (the plugin's key-value data) and the history are the fleet's.
        let (mut low, mut high, mut guesses) = (1, 1000, Vec::new());
        loop {
            let guess = (low + high) / 2;
            guesses.push(guess);
            let node = if guesses.len() % 2 == 1 { &b } else { &a };
            let reply = agora_follow(node, &id, json!({"body": {"guess": guess}}));
            let body = agora_body(&reply);
            assert_eq!(reply.json()["conversationExpires"], expires);
            assert_eq!(body["guesses"], guesses.len(), "{body}");
            match body["result"].as_str() {
                Some("correct") => break,
                Some("higher") => low = guess + 1,
                Some("lower") => high = guess - 1,
                other => panic!("unexpected result {other:?}: {body}"),
            }
            assert!(
                guesses.len() <= 10,
                "bisection over 1000 takes at most 10 guesses"
            );
        }
        // The history the plugin reads is the same from both nodes.
        for node in [&a, &b] {
            let history = agora_body(&agora_follow(node, &id, json!({"body": "{\"history\": true}"})));
            assert_eq!(
                history,
                json!({"guesses": guesses, "solved": true}),
                "round {round}"
            );
        }
        // Ended at both nodes at once: one ends it, the other finds it gone.
        let url = |node: &TestNode| node.url(&format!("/agora/conversations/{id}"));
        let (at_a, at_b) = at_once(|| support::delete(&url(&a)), || support::delete(&url(&b)));
        let mut statuses = [at_a.status, at_b.status];
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [200, 404],
            "round {round}: {} / {}",
            at_a.body,
            at_b.body
        );
        for node in [&a, &b] {
            assert_eq!(agora_follow(node, &id, json!({"body": {"guess": 1}})).status, 404);
        }
    }
}

#[test]
fn both_nodes_show_their_store_and_the_content_hash_of_every_plugin() {
    let (a, b) = two_nodes(&["guess-number"]);
    let plugin_hash = |node: &TestNode| -> String {
        let health = support::get_json(&node.url("/health")).expect("health");
        assert_eq!(health["store"]["backend"], "postgres", "{health}");
        assert_eq!(health["store"]["status"], "ok", "{health}");
        let plugin = health["plugins"]
            .as_array()
            .and_then(|plugins| plugins.iter().find(|p| p["name"] == "guess-number"))
            .cloned()
            .unwrap_or_else(|| panic!("guess-number in {health}"));
        plugin["content_sha256"]
            .as_str()
            .expect("a content hash")
            .to_string()
    };
    let file = support::plugin_wasm("guess-number");
    let expected = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            std::fs::read(&file).expect("the plugin file"),
        ))
    };
    assert_eq!(plugin_hash(&a), expected);
    assert_eq!(plugin_hash(&b), expected);
}

/// What each protocol answers while the database is down: its own 503.
fn assert_storage_503s(node: &TestNode, agent: &Agent, did: &str, sender: &AgentIdentity, address: &str) {
    let agora = agora_start(
        node,
        json!({"protocolHash": guess_hash(), "multiround": true, "body": {"start": {"min": 1, "max": 9}}}),
    );
    assert_eq!(agora.status, 503, "{}", agora.body);
    assert_eq!(agora.json()["status"], "failure", "{}", agora.body);
    assert!(agora.header("retry-after").is_some());
    let signed = envelopes::send(node, &agent.envelope("HELLO", json!({})), did);
    signed.assert_error(503, "a signed envelope while the database is down");
    let uagents = submit(node, &message_envelope(sender, address, "down"), true);
    assert_eq!(uagents.status, 503, "{}", uagents.body);
    assert!(
        uagents.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("storage")),
        "{}",
        uagents.body
    );
    let health = support::get(&node.url("/health"));
    assert_eq!(health.status, 503, "{}", health.body);
    assert_eq!(health.json()["store"]["status"], "unavailable");
}

pub(crate) fn guess_hash() -> String {
    let document = std::fs::read_to_string(support::repo_root().join("protocols/guess-number.md"))
        .expect("the guess-number protocol document");
    support::document_hash(&document)
}

#[test]
fn a_lost_database_is_answered_503_in_each_protocol_and_the_node_recovers_without_losing_acknowledged_writes()
{
    let postgres = Postgres::start();
    let database = postgres.create_database();
    let node = fleet_node(
        &database,
        &["guess-number", envelopes::PLUGIN, "uagents-echo"],
        None,
    );
    let agent = Agent::new();
    let (did, _) = envelopes::hello(&node, &agent);
    let sender = AgentIdentity::from_seed("fleet outage sender seed phrase").expect("identity");
    let address = support::get_json(&node.url("/agent_info")).expect("agent_info")["address"]
        .as_str()
        .expect("address")
        .to_string();
    let hash = guess_hash();
    let start_game = || {
        agora_start(
            &node,
            json!({"protocolHash": hash, "multiround": true, "body": {"start": {"min": 5, "max": 5}}}),
        )
    };

    // Conversations acknowledged before the outage, and during its first instants.
    let mut acknowledged = Vec::new();
    for _ in 0..5 {
        let reply = start_game();
        agora_body(&reply);
        acknowledged.push(reply.json()["conversationId"].as_str().expect("id").to_string());
    }
    let during = std::thread::scope(|scope| {
        let load = scope.spawn(|| {
            let mut outcomes = Vec::new();
            // 5 + 30 new conversations stay under the per-client creation rate (60 a minute).
            for _ in 0..30 {
                let reply = start_game();
                outcomes.push((reply.status, reply.json()));
                std::thread::sleep(Duration::from_millis(20));
            }
            outcomes
        });
        std::thread::sleep(Duration::from_millis(200));
        postgres.stop();
        load.join().expect("the load")
    });
    for (status, body) in &during {
        match status {
            200 => acknowledged.push(body["conversationId"].as_str().expect("id").to_string()),
            503 => assert_eq!(body["status"], "failure", "{body}"),
            other => panic!("a request during the outage got {other}: {body}"),
        }
    }
    assert!(
        during.iter().any(|(status, _)| *status == 503),
        "the outage was seen"
    );

    assert_storage_503s(&node, &agent, &did, &sender, &address);

    postgres.restart();
    node.wait_for_health("the store back", |health| health["store"]["status"] == "ok");
    // The same node serves again, and every acknowledged conversation is there.
    for id in &acknowledged {
        let reply = agora_follow(&node, id, json!({"body": {"guess": 5}}));
        assert_eq!(agora_body(&reply)["result"], "correct", "conversation {id}");
    }
    assert_eq!(envelopes::hello(&node, &agent).0, did);
    let echoed = submit(&node, &message_envelope(&sender, &address, "back"), true);
    assert_eq!(echoed.status, 200, "{}", echoed.body);
}

/// A fleet is one agent: each due tick of a schedule runs on one node, the
/// other counting it as run elsewhere (without the claim, two nodes would
/// each run every tick, twice the plugin's work: two polls, two messages).
#[test]
fn each_scheduled_tick_runs_once_in_the_fleet() {
    use crate::capabilities::{DOCUMENT, FIXTURE};
    let started = std::time::Instant::now();
    let (a, b) = two_nodes(&[FIXTURE]);
    let ticks = |node: &TestNode| {
        let reply = support::post_json(
            &node.url("/agora"),
            &json!({"protocolHash": support::document_hash(DOCUMENT), "body": {"op": "ticks"}}),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()["body"].clone()
    };
    let elsewhere = |node: &TestNode| {
        support::get(&node.url("/metrics"))
            .body
            .lines()
            .find_map(|line| {
                line.strip_prefix(
                    r#"agora_schedule_runs_total{plugin="fixture-agent",outcome="elsewhere"} "#,
                )?
                .trim()
                .parse::<u64>()
                .ok()
            })
            .unwrap_or(0)
    };
    a.wait_until(
        "both nodes to see ticks",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || elsewhere(&a) >= 3 && elsewhere(&b) >= 3,
    );
    std::thread::sleep(Duration::from_secs(3));
    // Two schedules every second, each counted in the shared key-value store.
    // The ticks go on between two reads, so one store shows as b reading
    // between what a read before and after it.
    let seen = ticks(&a);
    let on_b = ticks(&b);
    let after = ticks(&a);
    let bound = started.elapsed().as_secs() + 1;
    for schedule in ["count", "slow"] {
        let (before, between, after) = (&seen[schedule], &on_b[schedule], &after[schedule]);
        assert!(
            before.as_u64() <= between.as_u64() && between.as_u64() <= after.as_u64(),
            "one store: {schedule} read {before} on a, then {between} on b, then {after} on a"
        );
    }
    for schedule in ["count", "slow"] {
        let runs = seen[schedule].as_u64().unwrap();
        assert!(
            runs >= 3 && runs <= bound,
            "{schedule}: {runs} runs in under {bound} s: {seen}"
        );
    }
}

/// How many rows `rows` (a query of `xmin`s) found, and in how many
/// transactions they were written.
fn writers(postgres: &Postgres, database: &str, rows: &str) -> String {
    postgres.query_one(
        database,
        &format!(
            "SELECT count(*) || ' rows, ' || count(DISTINCT xmin::text) || ' transactions' FROM ({rows}) written"
        ),
    )
}

/// One request, one transaction: every row an Agora multi-round start wrote
/// (its record, both history entries and their counters, the plugin's game)
/// and both rows of a signed REQUEST (its replay claim and its final state)
/// carry the same transaction id (`xmin`) — one commit, so one WAL flush, per
/// request rather than one per write. The rows themselves say it, so nothing
/// else the node does meanwhile (its heartbeat, the sweep) can blur it.
#[test]
fn each_request_commits_all_its_writes_in_one_transaction() {
    let postgres = Postgres::shared();
    let database = postgres.create_database();
    let node = fleet_node(&database, &["guess-number", envelopes::PLUGIN], None);
    let hash = guess_hash();
    for round in 0..5 {
        let reply = agora_start(
            &node,
            json!({"protocolHash": hash, "multiround": true, "body": {"start": {"min": 1, "max": 1000}}}),
        );
        agora_body(&reply);
        let id = reply.json()["conversationId"]
            .as_str()
            .expect("an id")
            .to_string();
        let rows = format!(
            "SELECT xmin FROM entries WHERE collection = 'conversations' AND key = convert_to('{id}', 'UTF8')
             UNION ALL SELECT xmin FROM entries WHERE collection = 'plugin_kv'
                 AND key = convert_to('guess-number', 'UTF8') || '\\x00'::bytea || convert_to('game:{id}', 'UTF8')
             UNION ALL SELECT xmin FROM history WHERE id = '{id}'
             UNION ALL SELECT xmin FROM history_meta WHERE id = '{id}'"
        );
        assert_eq!(
            writers(postgres, &database, &rows),
            "5 rows, 1 transactions",
            "round {round}: the start of conversation {id}"
        );
    }
    let agent = Agent::new();
    let (did, _) = envelopes::hello(&node, &agent);
    for round in 0..5 {
        let request = agent.envelope(
            "REQUEST",
            json!({"resource": "agora:sum:v1", "params": {"numbers": [round, 2]}}),
        );
        let reply = envelopes::send(&node, &request, &did);
        assert_eq!(reply.kind(), "RESULT", "{}", reply.envelope);
        let id = request["id"].as_str().expect("request id");
        assert_eq!(envelopes::status_of(&node, &agent, &did, id), "COMPLETED");
        let sender = &agent.id;
        let rows = format!(
            "SELECT xmin FROM entries WHERE collection = 'replay'
                 AND key = convert_to('{sender}', 'UTF8') || '\\x00'::bytea || convert_to('{id}', 'UTF8')
             UNION ALL SELECT xmin FROM entries WHERE collection = 'negotiations'
                 AND key = convert_to('request', 'UTF8') || '\\x00'::bytea || convert_to('{sender}', 'UTF8')
                     || '\\x00'::bytea || convert_to('{id}', 'UTF8')"
        );
        assert_eq!(
            writers(postgres, &database, &rows),
            "2 rows, 1 transactions",
            "round {round}: REQUEST {id}"
        );
    }
}
