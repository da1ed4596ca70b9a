//! Agora Arena (AAP): the JWT-checked task endpoint, health and the live
//! event stream, driven by a test arena (a JWKS HTTP server and a WebSocket
//! stream server running in this test) against the real node.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{TestNode, free_port, get, vectors_dir};

pub(crate) const AGENT: &str = "ag_xyz123";
pub(crate) const FUTURE: u64 = 4_102_444_800;

pub(crate) fn jwt_dir() -> PathBuf {
    vectors_dir().join("jwt")
}

pub(crate) fn sample_body() -> Value {
    serde_json::from_slice(&std::fs::read(jwt_dir().join("sample_request_body.json")).unwrap()).unwrap()
}

/// The published JWKS with only the keys whose kid is in `kids`.
pub(crate) fn jwks_with(kids: &[&str]) -> String {
    let mut set: Value =
        serde_json::from_slice(&std::fs::read(jwt_dir().join("jwks.json")).unwrap()).unwrap();
    set["keys"]
        .as_array_mut()
        .unwrap()
        .retain(|key| kids.contains(&key["kid"].as_str().unwrap()));
    set.to_string()
}

/// Sign claims with one of the TEST_ONLY keys of the vectors folder.
pub(crate) fn sign(key: &str, kid: &str, claims: &Value) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let pem =
        std::fs::read(jwt_dir().join(format!("test_only_private_keys/TEST_ONLY_{key}.private.pem"))).unwrap();
    let (algorithm, encoding) = match key {
        "es256-1" => (Algorithm::ES256, EncodingKey::from_ec_pem(&pem).unwrap()),
        "eddsa-1" => (Algorithm::EdDSA, EncodingKey::from_ed_pem(&pem).unwrap()),
        _ => (Algorithm::RS256, EncodingKey::from_rsa_pem(&pem).unwrap()),
    };
    let mut header = Header::new(algorithm);
    header.kid = Some(kid.to_string());
    jsonwebtoken::encode(&header, claims, &encoding).unwrap()
}

pub(crate) fn claims(match_id: &str) -> Value {
    json!({"agent_id": AGENT, "match_id": match_id, "expires_at": FUTURE})
}

pub(crate) fn rs256_token(match_id: &str) -> String {
    sign("rs256-1", "agora-test-rs256-1", &claims(match_id))
}

fn task(league: &str, match_id: &str, round: u64, task: Value, limit: f64) -> Value {
    json!({
        "version": "1.0", "league": league, "match_id": match_id, "round": round,
        "total_rounds": null, "task": task, "time_limit_seconds": limit,
        "max_tokens": 500, "rules": ["only_one_answer"], "opponent_count": 3,
    })
}

fn trivia(match_id: &str, round: u64, question: &str, options: &[&str]) -> Value {
    task(
        "trivia",
        match_id,
        round,
        json!({"description": question, "input_format": "string",
               "output_format": "string", "options": options}),
        30.0,
    )
}

fn slow(match_id: &str, round: u64, work: Value, limit: f64) -> Value {
    task("slow", match_id, round, work, limit)
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<String>,
    pub(crate) content_type: String,
    pub(crate) body: Value,
}

pub(crate) fn send(method: &str, url: &str, token: Option<&str>, content_type: &str, body: &[u8]) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut response = if method == "GET" {
        let mut request = agent.get(url);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.call()
    } else {
        let mut request = agent.post(url).header("content-type", content_type);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.send(body)
    }
    .expect("HTTP request failed");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let retry_after = header("retry-after");
    let content_type = header("content-type").unwrap_or_default();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {text:?}"));
    Reply {
        status: response.status().as_u16(),
        retry_after,
        content_type,
        body,
    }
}

pub(crate) fn post_task(node: &TestNode, token: &str, body: &Value) -> Reply {
    send(
        "POST",
        &node.url("/arena"),
        Some(token),
        "application/json",
        body.to_string().as_bytes(),
    )
}

/// Every error reply is JSON with a non-empty `error`.
pub(crate) fn assert_error(reply: &Reply, status: u16, context: &str) {
    assert_eq!(reply.status, status, "{context}: {}", reply.body);
    assert!(
        reply.content_type.starts_with("application/json"),
        "{context}: content type {}",
        reply.content_type
    );
    assert!(
        reply.body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{context}: {}",
        reply.body
    );
}

fn arena_health(node: &TestNode) -> Reply {
    send("GET", &node.url("/arena/health"), None, "", b"")
}

pub(crate) fn node_with(plugins: &[&str], env: &[(&str, String)]) -> TestNode {
    let mut builder = TestNode::builder().env("AGORA_ARENA__AGENT_ID", AGENT);
    for plugin in plugins {
        builder = builder.plugin(plugin);
    }
    for (key, value) in env {
        builder = builder.env(key, value.clone());
    }
    let node = builder.start();
    // Compiling plugins on a busy machine can take a while; the harness waits 30 s.
    wait_until("plugins loaded", Duration::from_secs(180), || {
        crate::support::get_json(&node.url("/health"))
            .ok()
            .filter(|health| health["plugins"].as_array().map(Vec::len) == Some(plugins.len()))
    });
    node
}

pub(crate) fn jwks_file_env() -> (&'static str, String) {
    (
        "AGORA_ARENA__JWKS_FILE",
        jwt_dir().join("jwks.json").display().to_string(),
    )
}

fn wait_until<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// --- The test arena: a JWKS server and a WebSocket stream server ---

/// Serves the current JWKS over HTTP/1.1 and counts fetches.
pub(crate) struct JwksServer {
    port: u16,
    body: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    pub(crate) fn start(initial: String) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let body = Arc::new(Mutex::new(initial));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (served, count) = (body.clone(), fetches.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n" {
                        break;
                    }
                    line.clear();
                }
                count.fetch_add(1, Ordering::SeqCst);
                let body = served.lock().unwrap().clone();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        JwksServer { port, body, fetches }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/.well-known/jwks.json", self.port)
    }

    pub(crate) fn serve(&self, jwks: String) {
        *self.body.lock().unwrap() = jwks;
    }

    pub(crate) fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// A WebSocket server collecting every text frame as JSON, on its own runtime
/// so that stopping it really closes its sockets.
struct StreamServer {
    port: u16,
    events: Arc<Mutex<Vec<Value>>>,
    authorization: Arc<Mutex<Vec<String>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl StreamServer {
    fn start(port: u16) -> StreamServer {
        Self::start_collecting(port, Arc::default(), Arc::default())
    }

    // The handshake callback's `Result` type is tungstenite's, not ours.
    #[allow(clippy::result_large_err)]
    fn start_collecting(
        port: u16,
        events: Arc<Mutex<Vec<Value>>>,
        authorization: Arc<Mutex<Vec<String>>>,
    ) -> StreamServer {
        use futures::StreamExt;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = wait_until("the stream port", Duration::from_secs(10), || {
            std::net::TcpListener::bind(("127.0.0.1", port)).ok()
        });
        listener.set_nonblocking(true).unwrap();
        let (sink, auth) = (events.clone(), authorization.clone());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((socket, _)) = listener.accept().await {
                let (sink, auth) = (sink.clone(), auth.clone());
                tokio::spawn(async move {
                    let callback = |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                                    response| {
                        let value = request
                            .headers()
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        auth.lock().unwrap().push(value);
                        Ok(response)
                    };
                    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(socket, callback).await else {
                        return;
                    };
                    while let Some(Ok(message)) = ws.next().await {
                        if let tokio_tungstenite::tungstenite::Message::Text(text) = message
                            && let Ok(event) = serde_json::from_str(text.as_str())
                        {
                            sink.lock().unwrap().push(event);
                        }
                    }
                });
            }
        });
        StreamServer {
            port,
            events,
            authorization,
            runtime: Some(runtime),
        }
    }

    fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/v1/stream", self.port)
    }

    fn stop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }

    fn restart(&mut self) {
        self.stop();
        let next = Self::start_collecting(self.port, self.events.clone(), self.authorization.clone());
        *self = next;
    }

    /// The events of one round of one match, in arrival order.
    fn round(&self, match_id: &str, round: u64) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["match_id"] == match_id && e["round"] == round)
            .cloned()
            .collect()
    }

    /// Wait until the round's final `answer` event has arrived.
    fn wait_round(&self, match_id: &str, round: u64, limit: Duration) -> Vec<Value> {
        wait_until(&format!("the events of {match_id} round {round}"), limit, || {
            let events = self.round(match_id, round);
            events
                .iter()
                .any(|e| e["type"] == "answer" || e["type"] == "error")
                .then_some(events)
        })
    }
}

impl Drop for StreamServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

// --- Tests ---

#[test]
fn every_vector_token_gets_its_documented_verdict_over_http() {
    let node = node_with(&["trivia"], &[jwks_file_env()]);
    let vectors: Value =
        serde_json::from_slice(&std::fs::read(jwt_dir().join("tokens.json")).unwrap()).unwrap();
    let body = sample_body();
    let tokens = vectors["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 23);
    let mut accepted = 0;
    for entry in tokens {
        let name = entry["name"].as_str().unwrap();
        let reply = post_task(&node, entry["token"].as_str().unwrap(), &body);
        if entry["expected"] == "accept" {
            accepted += 1;
            assert_eq!(reply.status, 200, "{name}: {}", reply.body);
            assert_eq!(reply.body["answer"], "Canberra", "{name}");
        } else {
            assert_error(&reply, 401, name);
        }
    }
    assert_eq!(accepted, 5);

    let raw = body.to_string();
    let no_header = send(
        "POST",
        &node.url("/arena"),
        None,
        "application/json",
        raw.as_bytes(),
    );
    assert_error(&no_header, 401, "no Authorization header");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut basic = agent
        .post(&node.url("/arena"))
        .header("content-type", "application/json")
        .header("authorization", "Basic YWdvcmE6YWdvcmE=")
        .send(raw.as_bytes())
        .unwrap();
    assert_eq!(basic.status().as_u16(), 401);
    let text = basic.body_mut().read_to_string().unwrap();
    assert!(serde_json::from_str::<Value>(&text).unwrap()["error"].is_string());
}

#[test]
fn key_rotation_is_picked_up_from_the_jwks_server_without_a_restart() {
    let jwks = JwksServer::start(jwks_with(&["agora-test-rs256-1"]));
    let interval_ms = 300u64;
    let node = node_with(
        &["trivia"],
        &[
            ("AGORA_ARENA__JWKS_URL", jwks.url()),
            ("AGORA_ARENA__JWKS_MIN_REFETCH_MS", interval_ms.to_string()),
        ],
    );
    let body = sample_body();
    let match_id = body["match_id"].as_str().unwrap().to_string();
    assert_eq!(post_task(&node, &rs256_token(&match_id), &body).status, 200);
    let es256 = sign("es256-1", "agora-test-es256-1", &claims(&match_id));
    assert_error(&post_task(&node, &es256, &body), 401, "key not yet published");

    // The arena rotates: the EC key replaces the RSA key.
    jwks.serve(jwks_with(&["agora-test-es256-1"]));
    let reply = wait_until("the rotated key to verify", Duration::from_secs(20), || {
        let reply = post_task(&node, &es256, &body);
        (reply.status != 401).then_some(reply)
    });
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["answer"], "Canberra");
    // The withdrawn key no longer verifies anything.
    assert_error(
        &post_task(&node, &rs256_token(&match_id), &body),
        401,
        "withdrawn key",
    );

    // A flood of unknown kids costs at most one fetch per interval.
    let rogue = sign("rs256-not-in-jwks", "rogue-kid", &claims(&match_id));
    let before = jwks.fetches();
    let started = Instant::now();
    for _ in 0..30 {
        assert_error(&post_task(&node, &rogue, &body), 401, "unknown kid");
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let fetched = jwks.fetches() - before;
    assert!(
        fetched as u64 <= elapsed_ms / interval_ms + 1,
        "{fetched} fetches in {elapsed_ms} ms"
    );
}

#[test]
fn a_token_is_bound_to_its_match_and_to_this_agent() {
    let node = node_with(&["trivia"], &[jwks_file_env()]);
    let token = rs256_token("m_one");
    let question = (
        "What is the capital of Canada?",
        ["Toronto", "Ottawa", "Vancouver"],
    );
    let reply = post_task(&node, &token, &trivia("m_one", 1, question.0, &question.1));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["answer"], "Ottawa");
    // The same token replayed on another match.
    let replayed = post_task(&node, &token, &trivia("m_two", 1, question.0, &question.1));
    assert_error(&replayed, 401, "token of another match");
    assert!(replayed.body["error"].as_str().unwrap().contains("match"));
    // A token the arena issued to another agent.
    let other_agent = sign(
        "eddsa-1",
        "agora-test-eddsa-1",
        &json!({"agent_id": "ag_other", "match_id": "m_one", "exp": FUTURE}),
    );
    let reply = post_task(&node, &other_agent, &trivia("m_one", 1, question.0, &question.1));
    assert_error(&reply, 401, "token of another agent");
}

#[test]
fn a_test_arena_drives_a_match_and_watches_its_events() {
    let jwks = JwksServer::start(jwks_with(&["agora-test-rs256-1", "agora-test-es256-1"]));
    let stream = StreamServer::start(free_port());
    let node = node_with(
        &["trivia", "fixture-slow-league"],
        &[
            ("AGORA_ARENA__JWKS_URL", jwks.url()),
            ("AGORA_ARENA__STREAM_URL", stream.url()),
            ("AGORA_ARENA__STREAM_TOKEN", "stream-secret".to_string()),
        ],
    );
    let match_id = "m_live_1";
    let token = rs256_token(match_id);
    let rounds = [
        (
            "What is the capital of Australia?",
            vec!["Sydney", "Canberra", "Melbourne", "Perth"],
            "Canberra",
        ),
        (
            "What is the chemical symbol for gold?",
            vec!["Ag", "Au", "Gd"],
            "Au",
        ),
        (
            "Who wrote Don Quixote?",
            vec!["Lope de Vega", "Miguel de Cervantes"],
            "Miguel de Cervantes",
        ),
    ];
    for (index, (question, options, expected)) in rounds.iter().enumerate() {
        let round = index as u64 + 1;
        let reply = post_task(&node, &token, &trivia(match_id, round, question, options));
        assert_eq!(reply.status, 200, "{}", reply.body);
        let body = &reply.body;
        assert_eq!(body["answer"], *expected);
        assert!(body["confidence"].as_f64().unwrap() > 0.5);
        assert!(body["reasoning"].as_str().unwrap().contains(expected));
        assert_eq!(body["tools_used"], json!(["trivia_knowledge"]));
        assert_eq!(body["subagents_used"], json!(["knowledge_retriever"]));
        assert!(body["tokens"].as_u64().unwrap() > 0);
        assert!(body["latency_ms"].is_u64());

        let events = stream.wait_round(match_id, round, Duration::from_secs(20));
        let kinds = types(&events);
        let position = |kind: &str| {
            kinds
                .iter()
                .position(|k| *k == kind)
                .unwrap_or_else(|| panic!("no {kind} event in {kinds:?}"))
        };
        assert!(position("thinking") < position("spawn_subagent"));
        assert!(position("spawn_subagent") < position("tool_call"));
        assert!(position("tool_call") < position("tool_response"));
        assert!(position("tool_response") < position("subagent_done"));
        assert!(position("subagent_done") < position("intermediate_result"));
        assert_eq!(*kinds.last().unwrap(), "answer", "{kinds:?}");
        let call = &events[position("tool_call")];
        assert_eq!(call["tool"], "trivia_knowledge");
        assert_eq!(call["args"]["question"], *question);
        let response = &events[position("tool_response")];
        assert_eq!(response["result"]["answer"], *expected);
        assert!(response["duration_ms"].is_u64());
        assert_eq!(events[position("spawn_subagent")]["name"], "knowledge_retriever");
        assert!(events[position("intermediate_result")]["data"]["scores"].is_array());
        let answer = events.last().unwrap();
        assert_eq!(answer["final"], true);
        assert_eq!(answer["value"], body["answer"], "same value as the HTTP answer");
    }
    assert!(
        stream
            .authorization
            .lock()
            .unwrap()
            .iter()
            .all(|auth| auth == "Bearer stream-secret")
    );

    // A failing plugin: 500 to the arena, a fatal `error` event to the spectators.
    let failing = slow(match_id, 4, json!({"fail": true}), 10.0);
    assert_error(&post_task(&node, &token, &failing), 500, "plugin failure");
    let events = stream.wait_round(match_id, 4, Duration::from_secs(20));
    let error = events.iter().find(|e| e["type"] == "error").unwrap();
    assert_eq!(error["fatal"], true);
    assert!(error["message"].as_str().unwrap().contains("fails on purpose"));
}

#[test]
fn the_stream_drops_its_oldest_events_when_down_and_resumes_when_back() {
    let port = free_port();
    // Nothing listens on the stream port yet.
    let node = node_with(
        &["fixture-slow-league"],
        &[
            jwks_file_env(),
            (
                "AGORA_ARENA__STREAM_URL",
                format!("ws://127.0.0.1:{port}/v1/stream"),
            ),
            ("AGORA_ARENA__STREAM_BUFFER", "4".to_string()),
        ],
    );
    let match_id = "m_down";
    let token = rs256_token(match_id);
    let reply = post_task(
        &node,
        &token,
        &slow(match_id, 1, json!({"events": 20, "spin_ms": 0}), 10.0),
    );
    assert_eq!(reply.status, 200, "a task never waits for the stream");
    // 20 thinking events and the answer went into a buffer of 4.
    let metrics = get(&node.url("/metrics")).body;
    assert!(
        metrics.contains("agora_events_dropped_total{stream=\"arena\"} 17"),
        "{metrics}"
    );

    let stream = StreamServer::start(port);
    let events = stream.wait_round(match_id, 1, Duration::from_secs(40));
    let messages: Vec<&str> = events.iter().filter_map(|e| e["message"].as_str()).collect();
    assert_eq!(messages, ["step 17", "step 18", "step 19"], "the newest survive");
    assert_eq!(types(&events).last(), Some(&"answer"));

    // Down again, and back up: tasks never fail, the stream resumes.
    let mut stream = stream;
    stream.stop();
    for round in 2..=4 {
        let reply = post_task(&node, &token, &slow(match_id, round, json!({"events": 1}), 10.0));
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    stream.restart();
    let reply = post_task(&node, &token, &slow(match_id, 5, json!({"events": 2}), 10.0));
    assert_eq!(reply.status, 200);
    let events = stream.wait_round(match_id, 5, Duration::from_secs(40));
    assert_eq!(types(&events), ["thinking", "thinking", "answer"]);
}

#[test]
fn tasks_above_max_concurrent_are_refused_with_503_and_retry_after() {
    let node = node_with(
        &["fixture-slow-league"],
        &[
            jwks_file_env(),
            ("AGORA_ARENA__MAX_CONCURRENT", "2".to_string()),
            ("AGORA_PLUGINS__CALL_TIMEOUT_MS", "30000".to_string()),
        ],
    );
    let token = rs256_token("m_busy");
    let url = node.url("/arena");
    let running: Vec<_> = (1..=2)
        .map(|round| {
            let (url, token) = (url.clone(), token.clone());
            let body = slow("m_busy", round, json!({"spin_ms": 6000}), 20.0).to_string();
            std::thread::spawn(move || send("POST", &url, Some(&token), "application/json", body.as_bytes()))
        })
        .collect();
    wait_until("two tasks in flight", Duration::from_secs(20), || {
        (arena_health(&node).body["in_flight"] == 2).then_some(())
    });
    let refused = post_task(&node, &token, &slow("m_busy", 3, json!({}), 20.0));
    assert_error(&refused, 503, "third task");
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    for handle in running {
        let reply = handle.join().unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let reply = post_task(&node, &token, &slow("m_busy", 4, json!({}), 20.0));
    assert_eq!(reply.status, 200, "slots are released");
}

#[test]
fn a_plugin_over_the_time_limit_is_cancelled_with_408() {
    let node = node_with(
        &["fixture-slow-league", "trivia"],
        &[
            jwks_file_env(),
            ("AGORA_ARENA__MAX_CONCURRENT", "1".to_string()),
            ("AGORA_PLUGINS__CALL_TIMEOUT_MS", "60000".to_string()),
            // Two wasm calls at a time (trivia and its tool), no waiting: if the slow call
            // kept running after its 408, the next task could not run.
            ("AGORA_PLUGINS__MAX_CONCURRENT_CALLS", "2".to_string()),
            ("AGORA_PLUGINS__QUEUE_TIMEOUT_MS", "200".to_string()),
        ],
    );
    let token = rs256_token("m_slow");
    let reply = post_task(&node, &token, &slow("m_slow", 1, json!({"spin_ms": 50_000}), 1.0));
    assert_error(&reply, 408, "time limit");
    let reply = post_task(
        &node,
        &token,
        &trivia("m_slow", 2, "What is the capital of Japan?", &["Kyoto", "Tokyo"]),
    );
    assert_eq!(
        reply.status, 200,
        "the cancelled call freed its slot: {}",
        reply.body
    );
    assert_eq!(reply.body["answer"], "Tokyo");
}

#[test]
fn health_lists_leagues_and_averages_real_latencies() {
    let node = node_with(&["fixture-slow-league", "trivia"], &[jwks_file_env()]);
    let health = arena_health(&node);
    assert_eq!(health.status, 200);
    assert_eq!(health.body["status"], "ok");
    assert_eq!(health.body["version"], "1.0");
    assert_eq!(health.body["capabilities"], json!(["slow", "trivia"]));
    assert_eq!(health.body["max_concurrent"], 4);
    assert_eq!(health.body["avg_latency_ms"], 0);

    let token = rs256_token("m_latency");
    let mut latencies = Vec::new();
    for (round, spin_ms) in [(1, 150), (2, 450)] {
        let reply = post_task(
            &node,
            &token,
            &slow("m_latency", round, json!({"spin_ms": spin_ms}), 20.0),
        );
        assert_eq!(reply.status, 200);
        let latency = reply.body["latency_ms"].as_u64().unwrap();
        // The plugin counts whole milliseconds of wall-clock time (`host.now-ms`), the host
        // whole milliseconds of monotonic time: they can disagree by one.
        assert!(
            latency + 1 >= spin_ms,
            "latency {latency} is measured by the host around a {spin_ms} ms task"
        );
        latencies.push(latency);
        let mean = latencies.iter().sum::<u64>() as f64 / latencies.len() as f64;
        let average = arena_health(&node).body["avg_latency_ms"].as_u64().unwrap();
        assert!(
            (average as f64 - mean).abs() <= 1.0,
            "average {average} vs served {latencies:?}"
        );
    }

    let empty = node_with(&[], &[jwks_file_env()]);
    let health = arena_health(&empty);
    assert_error(&health, 503, "no league served");
    assert_ne!(health.body["status"], "ok");
    assert_eq!(health.body["capabilities"], json!([]));
}

#[test]
fn every_error_reply_is_json_with_its_status() {
    let node = node_with(&["trivia", "fixture-slow-league"], &[jwks_file_env()]);
    let token = rs256_token("m_errors");
    let url = node.url("/arena");
    let good = trivia("m_errors", 1, "What is the capital of Peru?", &["Lima", "Cusco"]);

    let mut unknown = good.clone();
    unknown["league"] = json!("chess");
    assert_error(&post_task(&node, &token, &unknown), 404, "unknown league");
    let raw = good.to_string();
    assert_error(
        &send("POST", &url, Some(&token), "text/plain", raw.as_bytes()),
        415,
        "content type",
    );
    assert_error(
        &send("POST", &url, Some(&token), "application/json", b"{not json"),
        400,
        "malformed JSON",
    );
    let mut no_task = good.clone();
    no_task.as_object_mut().unwrap().remove("task");
    assert_error(&post_task(&node, &token, &no_task), 400, "no task");
    let mut bad_limit = good.clone();
    bad_limit["time_limit_seconds"] = json!(-3);
    assert_error(&post_task(&node, &token, &bad_limit), 400, "negative time limit");
    let huge = vec![b' '; 2 << 20];
    assert_error(
        &send("POST", &url, Some(&token), "application/json", &huge),
        413,
        "body too large",
    );
    assert_error(&send("GET", &url, None, "", b""), 405, "GET on the task path");
    let reply = post_task(&node, &token, &good);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["answer"], "Lima");
}
