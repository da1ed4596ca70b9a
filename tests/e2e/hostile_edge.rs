//! Hostile peers against the Agora and arena transports, the outbound
//! allow-list and `/health` (issue 14), over real sockets against the real
//! node. Each test shows the attack refused in the protocol's own shape and
//! an honest client still served while it runs.
//!
//! "Another client" is another loopback source address: the client socket is
//! bound to 127.0.0.2 (Linux routes all of 127.0.0.0/8 to `lo`).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::arena::{self, JwksServer};
use crate::support::{self, RawRequest, TestNode, raw_exchange, under_load};

const ATTACKER: &str = "127.0.0.1";
const HONEST: &str = "127.0.0.2";

// --- requests from a chosen source address ---

struct Reply {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

fn request_from(source: &str, node: &TestNode, method: &str, path: &str, body: Option<&Value>) -> Reply {
    let payload = body.map(Value::to_string).unwrap_or_default();
    let reply = raw_exchange(
        node,
        RawRequest {
            from: source.parse().expect("a loopback address"),
            method,
            path,
            host: None,
            headers: &[("content-type", "application/json")],
            body: payload.as_bytes(),
        },
    );
    Reply {
        status: reply.status,
        retry_after: reply.header("retry-after").map(str::to_string),
        body: reply.json(),
    }
}

// --- Agora helpers ---

pub(crate) fn game_hash() -> String {
    let text = std::fs::read_to_string(support::repo_root().join("protocols/guess-number.md")).unwrap();
    support::document_hash(&text)
}

fn agora_node(env: &[(&str, &str)]) -> TestNode {
    let mut builder = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("guess-number");
    for (key, value) in env {
        builder = builder.env(key, *value);
    }
    builder.start()
}

fn open_game(node: &TestNode, source: &str) -> Reply {
    request_from(
        source,
        node,
        "POST",
        "/agora",
        Some(
            &json!({"protocolHash": game_hash(), "multiround": true, "body": {"start": {"min": 1, "max": 100}}}),
        ),
    )
}

fn conversation_id(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["status"], "success", "{}", reply.body);
    reply.body["conversationId"]
        .as_str()
        .expect("a conversationId")
        .to_string()
}

fn guess(node: &TestNode, source: &str, id: &str, value: u64) -> Reply {
    request_from(
        source,
        node,
        "POST",
        &format!("/agora/conversations/{id}"),
        Some(&json!({"body": {"guess": value}})),
    )
}

/// The guesses the conversation's history holds (a round that changes nothing).
fn history(node: &TestNode, source: &str, id: &str) -> Reply {
    request_from(
        source,
        node,
        "POST",
        &format!("/agora/conversations/{id}"),
        Some(&json!({"body": {"history": true}})),
    )
}

/// A refusal in Agora's failure shape (§10) with a usable `Retry-After`.
fn busy_error(reply: &Reply, status: u16) -> Result<String, String> {
    if reply.status != status {
        return Err(format!("expected {status}, got {}: {}", reply.status, reply.body));
    }
    if reply.body["status"] != "failure" {
        return Err(format!("not Agora's failure shape: {}", reply.body));
    }
    let retry = reply
        .retry_after
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| format!("no numeric Retry-After: {:?}", reply.retry_after))?;
    if !(1..=300).contains(&retry) {
        return Err(format!("Retry-After {retry} out of range"));
    }
    reply.body["error"]
        .as_str()
        .map(String::from)
        .ok_or_else(|| format!("no error text: {}", reply.body))
}

/// An honest client plays a short game from its own address: open, two guesses, end.
fn honest_game(node: &TestNode) -> Result<(), String> {
    let first = open_game(node, HONEST);
    if first.status != 200 {
        return Err(format!("honest open refused: {} {}", first.status, first.body));
    }
    let id = conversation_id(&first);
    let opening = guess(node, HONEST, &id, 50);
    if opening.status != 200 || opening.body["body"]["guesses"] != 1 {
        return Err(format!("honest guess 1: {} {}", opening.status, opening.body));
    }
    // The secret is random: after a hint the second round guesses on; a first
    // guess that found it ended the game, so the second round reads the history.
    let (second, expected) = match opening.body["body"]["result"].as_str() {
        Some("higher") => (guess(node, HONEST, &id, 75), json!(2)),
        Some("lower") => (guess(node, HONEST, &id, 25), json!(2)),
        _ => (history(node, HONEST, &id), json!([50])),
    };
    if second.status != 200 || second.body["body"]["guesses"] != expected {
        return Err(format!("honest round 2: {} {}", second.status, second.body));
    }
    let ended = request_from(
        HONEST,
        node,
        "DELETE",
        &format!("/agora/conversations/{id}"),
        None,
    );
    if ended.status != 200 {
        return Err(format!("honest end: {} {}", ended.status, ended.body));
    }
    Ok(())
}

// --- Agora: conversation caps ---

#[test]
fn a_conversation_flood_from_one_address_is_capped_while_another_address_is_served() {
    let node = agora_node(&[
        ("AGORA_AGORA__MAX_CONVERSATIONS_PER_CLIENT", "5"),
        ("AGORA_AGORA__CONVERSATIONS_PER_CLIENT_PER_MINUTE", "10000"),
    ]);
    let mut opened = Vec::new();
    let refused = loop {
        let reply = open_game(&node, ATTACKER);
        if reply.status != 200 {
            break reply;
        }
        opened.push(conversation_id(&reply));
        assert!(opened.len() <= 5, "the per-client cap did not hold");
    };
    assert_eq!(opened.len(), 5);
    let error = busy_error(&refused, 429).unwrap();
    assert!(error.contains("at most 5 per client"), "{error}");

    // The attacker keeps flooding; the honest address plays whole games meanwhile.
    let flood = |_: usize, _: u64| busy_error(&open_game(&node, ATTACKER), 429).map(|_| ());
    let (games, report) = under_load(2, flood, || {
        for _ in 0..3 {
            honest_game(&node).unwrap();
        }
        3
    });
    assert_eq!(games, 3);
    report.assert_no_failure(5);

    // The attacker's own conversations still work, and ending one frees exactly one place.
    assert_eq!(guess(&node, ATTACKER, &opened[0], 50).status, 200);
    let ended = request_from(
        ATTACKER,
        &node,
        "DELETE",
        &format!("/agora/conversations/{}", opened[0]),
        None,
    );
    assert_eq!(ended.status, 200);
    conversation_id(&open_game(&node, ATTACKER));
    busy_error(&open_game(&node, ATTACKER), 429).unwrap();
}

#[test]
fn the_creation_rate_is_limited_per_address_and_single_rounds_are_not_counted() {
    let node = agora_node(&[
        ("AGORA_AGORA__CONVERSATIONS_PER_CLIENT_PER_MINUTE", "3"),
        ("AGORA_AGORA__MAX_CONVERSATIONS_PER_CLIENT", "100"),
    ]);
    for _ in 0..3 {
        conversation_id(&open_game(&node, ATTACKER));
    }
    let refused = open_game(&node, ATTACKER);
    let error = busy_error(&refused, 429).unwrap();
    assert!(error.contains("3 per minute"), "{error}");
    // One token comes back every 20 s.
    let retry: u64 = refused.retry_after.unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "Retry-After {retry}");
    // Another address is not charged for it, and single rounds keep no state.
    honest_game(&node).unwrap();
    let single = request_from(
        ATTACKER,
        &node,
        "POST",
        "/agora",
        Some(&json!({"protocolHash": null, "body": "what is 2 + 3"})),
    );
    assert_eq!(single.status, 200, "{}", single.body);
    assert_eq!(single.body["status"], "success");
}

#[test]
fn the_total_conversation_cap_answers_503_and_existing_conversations_go_on() {
    let node = agora_node(&[("AGORA_AGORA__MAX_CONVERSATIONS", "4")]);
    let ids: Vec<String> = (0..4)
        .map(|n| conversation_id(&open_game(&node, ["127.0.0.3", "127.0.0.4"][n % 2])))
        .collect();
    let error = busy_error(&open_game(&node, HONEST), 503).unwrap();
    assert!(error.contains("maximum of 4 conversations"), "{error}");
    // Conversations already open are served, and so are single rounds.
    let reply = guess(&node, "127.0.0.3", &ids[0], 50);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["body"]["guesses"], 1);
    let single = request_from(
        HONEST,
        &node,
        "POST",
        "/agora",
        Some(&json!({"body": "what is 6 * 7"})),
    );
    assert_eq!(single.status, 200, "{}", single.body);
    // Ending one frees a place for the next client.
    let ended = request_from(
        "127.0.0.4",
        &node,
        "DELETE",
        &format!("/agora/conversations/{}", ids[1]),
        None,
    );
    assert_eq!(ended.status, 200);
    honest_game(&node).unwrap();
}

// --- Crash durability: an acknowledged round survives SIGKILL ---

#[test]
fn an_acknowledged_agora_round_survives_sigkill_and_the_caps_are_restored() {
    let dir = tempfile::tempdir().unwrap();
    let start = || {
        TestNode::builder()
            .data_dir(dir.path())
            .plugin("agora-assistant")
            .plugin("guess-number")
            .env("AGORA_AGORA__MAX_CONVERSATIONS_PER_CLIENT", "2")
    };
    let node = start().start();
    let port = node.port;
    let id = conversation_id(&open_game(&node, ATTACKER));
    let first = guess(&node, ATTACKER, &id, 50);
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["body"]["guesses"], 1);
    // Killed right after the round was acknowledged: no shutdown, no flush.
    node.kill();

    let node = start().port(port).start();
    // The history, not a second guess: the random secret may have been 50.
    let second = history(&node, ATTACKER, &id);
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.body["conversationId"], id.as_str());
    assert_eq!(
        second.body["body"]["guesses"],
        json!([50]),
        "the acknowledged round was lost: {}",
        second.body
    );
    // The conversation from before the crash still counts against its client.
    conversation_id(&open_game(&node, ATTACKER));
    busy_error(&open_game(&node, ATTACKER), 429).unwrap();
    honest_game(&node).unwrap();
}

// --- Bodies: the size refusal comes before any token or parse work ---

#[test]
fn an_oversized_body_is_refused_before_authentication_in_each_protocols_shape() {
    let node = arena::node_with(
        &["trivia", "agora-assistant"],
        &[
            arena::jwks_file_env(),
            ("AGORA_HTTP__MAX_BODY_BYTES", "1024".to_string()),
        ],
    );
    let big = vec![b' '; 4096];
    // No token at all, and a content type the arena would refuse: still 413 first.
    let reply = arena::send("POST", &node.url("/arena"), None, "text/plain", &big);
    arena::assert_error(&reply, 413, "arena, no token");
    let reply = arena::send(
        "POST",
        &node.url("/arena"),
        Some("not.a.jwt"),
        "application/json",
        &big,
    );
    arena::assert_error(&reply, 413, "arena, bad token");
    let reply = arena::send("POST", &node.url("/agora"), None, "text/plain", &big);
    assert_eq!(reply.status, 413, "{}", reply.body);
    assert_eq!(reply.body["status"], "failure");
    assert!(reply.body["error"].as_str().is_some_and(|e| e.contains("1024")));
    // The honest, small requests are served.
    let body = arena::sample_body();
    let match_id = body["match_id"].as_str().unwrap().to_string();
    let ok = arena::post_task(&node, &arena::rs256_token(&match_id), &body);
    assert_eq!(ok.status, 200, "{}", ok.body);
}

// --- Arena JWKS: https only (loopback excepted), no redirects, scheduled refresh, issuer ---

#[test]
fn a_plain_http_jwks_on_a_remote_host_stops_start_up_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .arg("serve")
        .current_dir(dir.path())
        .env("AGORA_DATA_DIR", dir.path())
        .env("AGORA_LISTEN", format!("127.0.0.1:{}", support::free_port()))
        .env("AGORA_ARENA__JWKS_URL", "http://192.0.2.10/.well-known/jwks.json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the node started with an http JWKS on a remote host");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    assert!(!status.success());
    assert!(!stdout.contains("listening on"), "{stdout}");
    for needle in ["arena.jwks_url", "https://", "loopback", "swapped in transit"] {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }
}

/// Answers every request with a redirect to `location`, counting them.
fn redirector(location: String) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let count = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            count.fetch_add(1, Ordering::SeqCst);
            let _ = write!(
                stream,
                "HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (url, hits)
}

#[test]
fn a_jwks_redirect_is_not_followed() {
    let keys = JwksServer::start(arena::jwks_with(&["agora-test-rs256-1"]));
    let (url, hits) = redirector(keys.url());
    let node = arena::node_with(
        &["trivia"],
        &[
            ("AGORA_ARENA__JWKS_URL", url),
            ("AGORA_ARENA__JWKS_MIN_REFETCH_MS", "50".into()),
        ],
    );
    let body = arena::sample_body();
    let match_id = body["match_id"].as_str().unwrap().to_string();
    let token = arena::rs256_token(&match_id);
    // Each attempt may refetch (50 ms apart); none may reach the redirect's target.
    for _ in 0..3 {
        let reply = arena::post_task(&node, &token, &body);
        arena::assert_error(&reply, 401, "keys behind a redirect");
        std::thread::sleep(Duration::from_millis(60));
    }
    assert!(hits.load(Ordering::SeqCst) >= 2, "the JWKS URL was not fetched");
    assert_eq!(keys.fetches(), 0, "the node followed the JWKS redirect");
    node.wait_for_log("redirects are not followed");
    // The node itself keeps serving.
    assert_eq!(support::get(&node.url("/arena/health")).status, 200);
}

#[test]
fn the_jwks_is_refreshed_on_schedule_without_an_unknown_kid() {
    let jwks = JwksServer::start(arena::jwks_with(&["agora-test-rs256-1"]));
    let node = arena::node_with(
        &["trivia"],
        &[
            ("AGORA_ARENA__JWKS_URL", jwks.url()),
            ("AGORA_ARENA__JWKS_REFRESH_SECS", "1".into()),
            // Unknown kids may not trigger a fetch during this test.
            ("AGORA_ARENA__JWKS_MIN_REFETCH_MS", "600000".into()),
        ],
    );
    let body = arena::sample_body();
    let match_id = body["match_id"].as_str().unwrap().to_string();
    let es256 = arena::sign("es256-1", "agora-test-es256-1", &arena::claims(&match_id));
    assert_eq!(
        arena::post_task(&node, &arena::rs256_token(&match_id), &body).status,
        200
    );

    // The arena rotates to the EC key.
    jwks.serve(arena::jwks_with(&["agora-test-es256-1"]));
    let rotated_at = jwks.fetches();
    // Two scheduled fetches after the rotation: the first has certainly been
    // stored once the second (serialised behind it) arrives.
    let deadline = Instant::now() + Duration::from_secs(30);
    while jwks.fetches() < rotated_at + 2 {
        assert!(Instant::now() < deadline, "no scheduled JWKS refresh");
        std::thread::sleep(Duration::from_millis(50));
    }
    let reply = arena::post_task(&node, &es256, &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    arena::assert_error(
        &arena::post_task(&node, &arena::rs256_token(&match_id), &body),
        401,
        "withdrawn key",
    );
}

#[test]
fn a_token_from_another_issuer_is_refused_when_an_issuer_is_configured() {
    let node = arena::node_with(
        &["trivia"],
        &[
            arena::jwks_file_env(),
            ("AGORA_ARENA__ISSUER", "agora-arena-test".into()),
        ],
    );
    let body = arena::sample_body();
    let match_id = body["match_id"].as_str().unwrap().to_string();
    let with_iss = |iss: Option<&str>| {
        let mut claims = arena::claims(&match_id);
        if let Some(iss) = iss {
            claims["iss"] = json!(iss);
        }
        arena::sign("rs256-1", "agora-test-rs256-1", &claims)
    };
    for (iss, context) in [(Some("evil-arena"), "wrong iss"), (None, "no iss")] {
        let reply = arena::post_task(&node, &with_iss(iss), &body);
        arena::assert_error(&reply, 401, context);
        assert!(
            reply.body["error"].as_str().unwrap().contains("issuer"),
            "{}",
            reply.body
        );
    }
    let reply = arena::post_task(&node, &with_iss(Some("agora-arena-test")), &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
}

// --- The allow-list: a bare host means its default port only ---

const WEATHER: &str = "---\nname: Weather\ndescription: A forecast for a city and a date.\nmultiround: false\n---\n\nThe body is {\"city\": string, \"date\": \"YYYY-MM-DD\"}.\n";

#[test]
fn an_allow_list_host_without_a_port_does_not_allow_other_ports() {
    // Port A is only covered by the bare entry "127.0.0.1"; port B is listed.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    closed.set_nonblocking(true).unwrap();
    let port_a = closed.local_addr().unwrap().port();
    let served = TcpListener::bind("127.0.0.1:0").unwrap();
    let port_b = served.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in served.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/markdown\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{WEATHER}",
                WEATHER.len()
            );
        }
    });
    let node = TestNode::builder()
        .plugin("agora-assistant")
        .plugin("protocol-inspector")
        .env(
            "AGORA_AGORA__SOURCE_HOSTS",
            format!(r#"["127.0.0.1", "127.0.0.1:{port_b}"]"#),
        )
        .start();
    let hash = support::document_hash(WEATHER);
    let ask = |port: u16| {
        support::post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hash, "protocolSources": [format!("http://127.0.0.1:{port}/weather.md")], "body": {"city": "Lima"}}),
        )
        .json()
    };
    let refused = ask(port_a);
    assert_eq!(refused["status"], "failure", "{refused}");
    assert_eq!(refused["error"], "Unsupported protocol");
    assert_eq!(
        closed.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the bare entry 127.0.0.1 let the node call 127.0.0.1:{port_a}"
    );
    let allowed = ask(port_b);
    assert_eq!(allowed["status"], "success", "{allowed}");
    assert_eq!(allowed["body"]["protocol"]["name"], "Weather");
}

// --- /health names files, never the node's folders ---

#[test]
fn health_shows_plugin_file_names_and_no_absolute_paths() {
    let node = TestNode::builder().plugin("agora-assistant").start();
    support::install_bytes(&node.plugins_dir, "broken", b"not a wasm component");
    // A file is listed from the moment the watcher sees it ("compiling"): wait for
    // the broken one's verdict, not just its entry.
    let health = node.wait_for_health("the broken file's load error", |health| {
        health["plugins"].as_array().is_some_and(|plugins| {
            plugins.len() == 2
                && plugins
                    .iter()
                    .any(|p| p["file"] == "broken.wasm" && p["error"].is_string())
        })
    });
    let mut files: Vec<&str> = health["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["file"].as_str().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["agora-assistant.wasm", "broken.wasm"]);
    let broken = health["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["file"] == "broken.wasm")
        .unwrap();
    assert!(
        broken["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{broken}"
    );
    let text = health.to_string();
    let data_dir = node.data_dir.display().to_string();
    assert!(!text.contains(&data_dir), "/health shows {data_dir}: {text}");
    let canonical = node.data_dir.canonicalize().unwrap().display().to_string();
    assert!(!text.contains(&canonical), "/health shows {canonical}: {text}");
    // The operator still finds the full path in the log.
    node.wait_for_log("broken.wasm");
}
