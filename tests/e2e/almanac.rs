//! The node in a uAgents Almanac (`uagents.almanac_api`): it registers there as
//! uagents 0.26.1 does and resolves unknown senders through it. The Almanac API
//! is `tests/interop/uagents/almanac_standin.py`, which checks every
//! registration with the library's own model and signature code; the real
//! library's registration is driven against it in the same test, so the
//! stand-in is proven to accept what the library sends.

use std::time::Duration;

use agora_node::peers::almanac;
use serde_json::{Value, json};

use crate::support::{self, TestNode};
use crate::uagents::{
    ECHO_PROTOCOL_DIGEST, MESSAGE_DIGEST, MESSAGE_SCHEMA, NODE_SEED, OTHER_SEED, SENDER_SEED, Script,
    cli_send, echo_node, identity, message_envelope, now_secs, submit, wait_for_port,
};

const PEER_SEED: &str = "uagents-almanac-peer-seed-v1";

/// The stand-in on `port`, ready.
pub(crate) fn stand_in(port: u16) -> Script {
    let script = Script::start(&["almanac_standin.py", &port.to_string()], &[]);
    script.wait_for("ready", Duration::from_secs(60));
    script
}

pub(crate) fn checks(api: &str) -> Value {
    support::get_json(&format!("{api}/checks")).expect("the stand-in's checks")
}

/// The registrations the stand-in accepted for `address`.
fn accepted(api: &str, address: &str) -> Vec<Value> {
    checks(api)["accepted"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["address"] == address)
        .cloned()
        .collect()
}

/// Patience covers the longest pause between two attempts (60 s) and then some.
fn wait_for_registration(node: &TestNode, api: &str, address: &str) -> Value {
    node.wait_until(
        "the registration",
        Duration::from_secs(90),
        Duration::from_millis(50),
        || !accepted(api, address).is_empty(),
    );
    accepted(api, address).remove(0)
}

#[test]
fn interop_a_real_uagent_finds_the_node_through_the_almanac_and_both_resolve_each_other() {
    let almanac_port = support::free_port();
    let api = format!("http://127.0.0.1:{almanac_port}");
    let _almanac = stand_in(almanac_port);
    let (node_port, peer_port) = (support::free_port(), support::free_port());
    let node_endpoint = format!("http://127.0.0.1:{node_port}/submit");
    let node = {
        let env = [
            ("AGORA_UAGENTS__ALMANAC_API".to_string(), api.clone()),
            // The older name of public_endpoint, still read.
            ("AGORA_UAGENTS__ENDPOINT".to_string(), node_endpoint.clone()),
            (
                "AGORA_OUTBOUND__ALLOWED_HOSTS".to_string(),
                format!("[\"127.0.0.1:{peer_port}\"]"),
            ),
        ];
        let mut builder = TestNode::builder()
            .plugin("uagents-echo")
            .port(node_port)
            .env("AGORA_UAGENTS__SEED", NODE_SEED);
        for (key, value) in env {
            builder = builder.env(&key, value);
        }
        let node = builder.start();
        node.wait_for_health("the echo plugin", |h| support::has_plugin(h, "uagents-echo"));
        node
    };
    let node_address = identity(NODE_SEED).address().to_string();

    // The node's registration passed every check of the stand-in.
    let registration = wait_for_registration(&node, &api, &node_address);
    assert_eq!(registration["prefix"], "agent");
    assert_eq!(
        registration["endpoints"],
        json!([{"url": node_endpoint, "weight": 1}])
    );
    assert_eq!(registration["protocols"], json!([ECHO_PROTOCOL_DIGEST]));
    assert!(
        checks(&api)["refused"].as_array().unwrap().is_empty(),
        "{}",
        checks(&api)
    );

    // The stand-in refuses an attestation altered after signing.
    let mut forged = almanac::attestation(
        &identity(OTHER_SEED),
        "http://127.0.0.1:9/submit",
        &[],
        now_secs(),
    );
    forged["endpoints"][0]["url"] = json!("http://127.0.0.1:10/submit");
    let refused = support::post_json(&format!("{api}/agents"), &forged);
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        refused.body.contains("signature does not verify"),
        "{}",
        refused.body
    );

    // A real uAgent registers (the library's own registration, accepted by the stand-in),
    // resolves the node through the Almanac and sends; the node resolves the uAgent
    // the same way to deliver its asynchronous reply.
    let peer_address = identity(PEER_SEED).address().to_string();
    let peer = Script::start(
        &[
            "almanac_agent.py",
            &api,
            PEER_SEED,
            &peer_port.to_string(),
            &node_address,
            "found you in the almanac",
        ],
        &[],
    );
    let reply = peer.wait_for("reply", Duration::from_secs(60));
    assert_eq!(reply["sender"], node_address, "{reply}");
    assert_eq!(reply["text"], "echo: found you in the almanac");
    let peer_registration = accepted(&api, &peer_address).remove(0);
    assert_eq!(
        peer_registration["endpoints"],
        json!([{"url": format!("http://127.0.0.1:{peer_port}/submit"), "weight": 1}])
    );
    // Logged once the uAgent's 200 is back, which may be after it printed the reply.
    node.wait_for_log_within("reply delivered", Duration::from_secs(20));

    // `agora-node uagents send --to` finds the uAgent through the same API.
    wait_for_port(peer_port, "the Almanac uAgent");
    let schema = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(schema.path(), MESSAGE_SCHEMA).unwrap();
    let reply = cli_send(
        &[
            "--to",
            &peer_address,
            "--almanac-api",
            &api,
            "--sync",
            "--json",
            r#"{"text": "via the almanac"}"#,
        ],
        schema.path(),
        &[],
    );
    assert_eq!(reply["sender"], peer_address, "{reply}");
    assert_eq!(reply["schema_digest"], MESSAGE_DIGEST);
    assert_eq!(reply["message"], json!({"text": "echo: via the almanac"}));

    // A sender whose registered endpoint is not in outbound.allowed_hosts gets no
    // reply: the Almanac is what other agents say, not where the node may POST.
    let hostile = identity(OTHER_SEED);
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let trap_url = format!("http://{}/submit", trap.local_addr().unwrap());
    let registered = support::post_json(
        &format!("{api}/agents"),
        &almanac::attestation(&hostile, &trap_url, &[], now_secs()),
    );
    assert_eq!(registered.status, 200, "{}", registered.body);
    let accepted_envelope = submit(
        &node,
        &message_envelope(&hostile, &node_address, "call me"),
        false,
    );
    assert_eq!(accepted_envelope.status, 200, "{}", accepted_envelope.body);
    node.wait_for_log_within("no Almanac endpoint is allowed", Duration::from_secs(20));
    trap.set_nonblocking(true).unwrap();
    assert!(
        trap.accept().is_err(),
        "the node connected to a disallowed endpoint"
    );

    // A sender the Almanac does not know is looked up once; the miss is remembered.
    let stranger = identity(SENDER_SEED);
    for text in ["first", "second"] {
        let sent = submit(&node, &message_envelope(&stranger, &node_address, text), false);
        assert_eq!(sent.status, 200, "{}", sent.body);
    }
    node.wait_until(
        "both replies dropped",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || node.log_text().matches("not registered in the Almanac").count() >= 2,
    );
    assert_eq!(checks(&api)["lookups"][stranger.address()], 1, "{}", checks(&api));
}

#[test]
fn an_almanac_that_is_down_is_retried_with_backoff_and_never_stops_the_node() {
    let almanac_port = support::free_port();
    let api = format!("http://127.0.0.1:{almanac_port}");
    let node = echo_node(
        NODE_SEED,
        &[
            ("AGORA_UAGENTS__ALMANAC_API".to_string(), api.clone()),
            (
                "AGORA_UAGENTS__PUBLIC_ENDPOINT".to_string(),
                "https://node.example.org/submit".to_string(),
            ),
        ],
    );
    let failures = || node.log_text().matches("Almanac registration failed").count();
    node.wait_until(
        "two failed registrations",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || failures() >= 2,
    );
    // The node serves all along.
    let sender = identity(OTHER_SEED);
    let reply = submit(
        &node,
        &message_envelope(&sender, identity(NODE_SEED).address(), "still here"),
        true,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Once the API is up, a retry registers the node.
    let _almanac = stand_in(almanac_port);
    let registration = wait_for_registration(&node, &api, identity(NODE_SEED).address());
    assert_eq!(
        registration["endpoints"],
        json!([{"url": "https://node.example.org/submit", "weight": 1}])
    );
    // Logged once the API's answer is back, which may be after it recorded the registration.
    node.wait_for_log_within("registered in the Almanac", Duration::from_secs(20));
}

#[test]
fn a_plugin_loaded_later_is_registered_without_waiting_for_the_hour() {
    let almanac_port = support::free_port();
    let api = format!("http://127.0.0.1:{almanac_port}");
    let _almanac = stand_in(almanac_port);
    let node = TestNode::builder()
        .env("AGORA_UAGENTS__SEED", NODE_SEED)
        .env("AGORA_UAGENTS__ALMANAC_API", api.clone())
        .start();
    let address = identity(NODE_SEED).address().to_string();
    let first = wait_for_registration(&node, &api, &address);
    assert_eq!(first["protocols"], json!([]));

    support::install_plugin(&node.plugins_dir, "uagents-echo");
    node.wait_until(
        "a registration with the echo protocol",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            accepted(&api, &address)
                .iter()
                .any(|r| r["protocols"] == json!([ECHO_PROTOCOL_DIGEST]))
        },
    );
    node.wait_for_log_within("protocol digests changed", Duration::from_secs(20));
}
