//! Issue 37, a returning HAI client: the spec's client (the HAI specification
//! §"Session Management") keeps only its `session_id`, a `crypto.randomUUID()`,
//! and resumes with it after a reload; it never learns the node's
//! `session_secret`. A canonical UUIDv4 id carries 122 random bits, so the node
//! takes it as the session's bearer secret: it alone resumes the session on the
//! WebSocket, answers its approvals and reads its history. Any other id (short,
//! another UUID version, another spelling of a UUID) still needs the secret. No
//! session id is ever written whole to the node's log.

use serde_json::Value;

use crate::hai::{Client, approve_report_007, request_report, session_id, streamed_text};
use crate::support::{HttpReply, NodeBuilder, TestNode, get};

fn builder() -> NodeBuilder {
    TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
}

/// What a spec client makes its session id with.
fn random_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Ids that are not canonical UUIDv4 strings, each for another reason.
fn near_misses() -> Vec<String> {
    vec![
        session_id("abc"),
        // The spec's own example id: a version-1 UUID.
        "123e4567-e89b-12d3-a456-426614174000".into(),
        // Version 4, but variant 110x.
        "123e4567-e89b-42d3-c456-426614174000".into(),
        // A random UUID in another spelling: not the canonical form.
        uuid::Uuid::new_v4().simple().to_string(),
        format!("urn:uuid:{}", random_uuid()),
        "00000000-0000-0000-0000-000000000000".into(),
    ]
}

fn history_url(node: &TestNode, session: &str) -> String {
    node.url(&format!("/ws/sessions/{session}/history"))
}

fn user_words(history: &HttpReply) -> Vec<String> {
    history.json()["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["role"] == "user")
        .map(|e| e["body"]["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The frames of a turn on a connection that resumed its session: the first
/// frame is the turn's own, not a refusal.
async fn resumed_turn(client: &mut Client) -> Vec<Value> {
    let first = client.next().await;
    assert_eq!(first["type"], "status", "the session was not resumed: {first}");
    let mut frames = vec![first];
    frames.extend(client.turn().await);
    frames
}

/// A new connection creates `session` by its first message; the secret it was handed.
async fn create(node: &TestNode, session: &str, words: &str) -> String {
    let mut owner = Client::connect(node).await;
    owner.say(session, words).await;
    owner.turn().await;
    owner.secret()
}

#[tokio::test]
async fn a_returning_client_resumes_its_uuid_v4_session_with_the_id_alone() {
    let data = tempfile::tempdir().unwrap();
    let session = random_uuid();
    {
        let node = builder().data_dir(data.path()).start();
        create(&node, &session, "My first words: check the walk-in freezer").await;

        // A reload: the page reconnects with its id and nothing else.
        let mut again = Client::connect_to_session(&node, &session, None).await;
        again.say(&session, "what did I say first?").await;
        let text = streamed_text(&resumed_turn(&mut again).await);
        assert!(text.contains("check the walk-in freezer"), "{text}");

        // Another connection knowing only the id answers the session's approval.
        let (_, request) = request_report(&mut again, &session, "INS-2024-007").await;
        let approval_id = request["approval_id"].as_str().unwrap().to_string();
        let mut second = Client::connect_to_session(&node, &session, None).await;
        approve_report_007(&mut second, &approval_id).await;

        // The history is readable by the id alone.
        let history = get(&history_url(&node, &session));
        assert_eq!(history.status, 200, "{}", history.body);
        let words = user_words(&history);
        assert_eq!(words[0], "My first words: check the walk-in freezer");
        assert_eq!(words[1], "what did I say first?");
        assert!(
            history.json()["entries"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["role"] == "approval" && e["body"]["approval_id"] == approval_id.as_str()),
            "{}",
            history.body
        );
        drop((again, second));
        assert!(node.stop().success());
    }
    // After a restart the session is only in the store: the id alone still opens it,
    // here by its first message, as the spec's client does.
    let node = builder().data_dir(data.path()).start();
    let mut client = Client::connect(&node).await;
    client.say(&session, "what did I say first?").await;
    let text = streamed_text(&resumed_turn(&mut client).await);
    assert!(text.contains("check the walk-in freezer"), "{text}");
    let history = get(&history_url(&node, &session));
    assert_eq!(history.status, 200, "{}", history.body);
    assert_eq!(user_words(&history).len(), 4);
}

#[tokio::test]
async fn only_a_canonical_uuid_v4_resumes_alone_and_any_other_id_still_needs_the_secret() {
    let node = builder().start();
    // Both spellings of a canonical UUIDv4 resume with the id alone.
    for session in [random_uuid(), random_uuid().to_uppercase()] {
        create(&node, &session, "words of a random session").await;
        let mut again = Client::connect_to_session(&node, &session, None).await;
        again.say(&session, "back again").await;
        resumed_turn(&mut again).await;
        assert_eq!(get(&history_url(&node, &session)).status, 200, "{session}");
    }
    for session in near_misses() {
        let secret = create(&node, &session, "private words").await;
        // From other connections with the id alone: on connect, by a message, the history.
        let mut on_connect = Client::connect_to_session(&node, &session, None).await;
        assert_eq!(
            on_connect.error().await["error_code"],
            "invalid_session",
            "{session}"
        );
        let mut by_message = Client::connect(&node).await;
        by_message.say(&session, "let me in").await;
        assert_eq!(
            by_message.error().await["error_code"],
            "invalid_session",
            "{session}"
        );
        let history = get(&history_url(&node, &session));
        assert_eq!(history.status, 403, "{session}: {}", history.body);
        // With the secret, as before.
        let mut owner = Client::connect_to_session(&node, &session, Some(&secret)).await;
        owner.say(&session, "still mine").await;
        resumed_turn(&mut owner).await;
    }
}

#[tokio::test]
async fn no_session_id_is_written_whole_to_the_log() {
    let node = builder().env("RUST_LOG", "info,agora_node=debug").start();
    let session = random_uuid();
    // With the secret as well, so this test sees only what the log says.
    let secret = create(&node, &session, "hello").await;
    let mut again = Client::connect_to_session(&node, &session, Some(&secret)).await;
    again.say(&session, "hello again").await;
    resumed_turn(&mut again).await;
    crate::hai::history(&node, &session, &secret);
    // A connection of the session naming another session is refused (and the refusal logged).
    again.say(&session_id("elsewhere"), "hi").await;
    assert_eq!(again.error().await["error_code"], "invalid_session");
    // A refusal of a guessable id without its secret: its log line comes after all the above.
    let guessable = session_id("guessable");
    create(&node, &guessable, "mine").await;
    let mut intruder = Client::connect_to_session(&node, &guessable, None).await;
    assert_eq!(intruder.error().await["error_code"], "invalid_session");
    node.wait_for_log("resume it with its session_secret");

    let log = node.log_text();
    for id in [&session, &session.to_uppercase(), &guessable] {
        assert!(!log.contains(id.as_str()), "{id} is in the log:\n{log}");
    }
}
