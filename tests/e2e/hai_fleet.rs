//! HAI across a fleet (issue 17): two real nodes on one real PostgreSQL
//! database, real WebSockets. A browser on node B sees the frames of a turn
//! running on node A, in order, as A's own browser does; an approval asked by
//! a tool on A is decided on B, once, however the answers race; the history
//! reads the same from either node; a turn whose node dies is ended by B.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::hai::{Client, assert_search_turn, history, of_type, request_report, session_id, streamed_text};
use crate::support::TestNode;

/// Rounds of the simultaneous-answer race; every one must hold.
const RACE_ROUNDS: usize = 20;

/// Two nodes sharing one fresh database, with the HAI assistant and its tools.
fn fleet() -> (TestNode, TestNode) {
    fleet_with(&[])
}

/// [`fleet`] with more settings for both nodes.
fn fleet_with(settings: &[(&str, &str)]) -> (TestNode, TestNode) {
    let url = agora_test_postgres::Postgres::shared().create_database();
    let node = || {
        TestNode::builder()
            .envs(settings)
            .plugin("hai-assistant")
            .plugin("inspection-tools")
            .on_database(&url)
            // The race sends a message per round to one session; the window is not under test here.
            .env("AGORA_HAI__MESSAGES_PER_MINUTE", "1000")
            .start()
    };
    (node(), node())
}

/// A session created by a browser on `a`, and a second browser on `b` that
/// opened it with the secret `a` issued. Both subscribed before any turn, so
/// each sees every frame of the session from here on.
async fn one_session_on_two_nodes(a: &TestNode, b: &TestNode, label: &str) -> (String, Client, Client) {
    let session = session_id(label);
    let mut on_a = Client::connect_to_session(a, &session, None).await;
    let secret = on_a.created().await;
    let mut on_b = Client::connect_to_session(b, &session, Some(&secret)).await;
    // Once a connection answers a frame, it is bound and subscribed to the session.
    probe(&mut on_a, "appr_probe_join").await;
    probe(&mut on_b, "appr_probe_join").await;
    (session, on_a, on_b)
}

/// Ask for the report of `inspection` (a tool that needs approval): its
/// approval request, and the request's approval id.
async fn ask_for_report(client: &mut Client, session: &str, inspection: &str) -> (Value, String) {
    let (_, request) = request_report(client, session, inspection).await;
    let approval_id = request["approval_id"]
        .as_str()
        .expect("an approval id")
        .to_string();
    (request, approval_id)
}

/// Answer an approval id nobody asked for, and return every frame up to that
/// refusal: the connection handles its frames in order, so whatever it was
/// going to say about earlier answers has been said by then.
async fn probe(client: &mut Client, probe_id: &str) -> Vec<Value> {
    client.approve(probe_id, true, None).await;
    client
        .until(|f| f["type"] == "error" && f["details"]["approval_id"] == probe_id)
        .await
}

fn refusals_of<'a>(frames: &'a [Value], approval_id: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f["type"] == "error" && f["details"]["approval_id"] == approval_id)
        .collect()
}

fn tool_frames<'a>(frames: &'a [Value], status: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f["type"] == "tool_call" && f["status"] == status)
        .collect()
}

fn history_entries(node: &TestNode, session: &str, secret: &str) -> Vec<Value> {
    let page = history(node, session, secret);
    assert!(
        page["next_after"].is_null(),
        "one page holds these histories: {page}"
    );
    page["entries"].as_array().expect("entries").clone()
}

#[tokio::test]
async fn a_browser_on_another_node_sees_every_frame_of_a_turn_in_order() {
    let (a, b) = fleet();
    let (session, mut on_a, mut on_b) = one_session_on_two_nodes(&a, &b, "fleet-frames").await;

    on_a.say(&session, "My first words: check the walk-in freezer")
        .await;
    let seen_on_a = on_a.turn().await;
    assert_eq!(on_b.turn().await, seen_on_a);

    // A streamed answer with a tool call, run on A.
    on_a.say(&session, "Search for restaurant food storage regulations")
        .await;
    let seen_on_a = on_a.turn().await;
    let seen_on_b = on_b.turn().await;
    assert_search_turn(&seen_on_a);
    assert_eq!(seen_on_b, seen_on_a, "B sees A's turn frame for frame, in order");

    // Many chunks of one answer: the order holds chunk by chunk.
    on_a.say(&session, "What are food safety regs?").await;
    let seen_on_a = on_a.turn().await;
    let seen_on_b = on_b.turn().await;
    assert!(
        of_type(&seen_on_a, "assistant_message_chunk").len() >= 3,
        "{seen_on_a:#?}"
    );
    assert_eq!(seen_on_b, seen_on_a);
    assert!(streamed_text(&seen_on_b).contains("What are food safety regs?"));

    // And the other way: a turn on B reaches A, and B's answer knows what was said on A.
    on_b.say(&session, "what did I say first?").await;
    let seen_on_b = on_b.turn().await;
    let seen_on_a = on_a.turn().await;
    assert_eq!(seen_on_a, seen_on_b);
    let text = streamed_text(&seen_on_b);
    assert!(
        text.contains("My first words: check the walk-in freezer"),
        "{text}"
    );

    // History: the same from either node, with the user's messages in order.
    let secret = on_a.secret();
    let from_a = history_entries(&a, &session, &secret);
    assert_eq!(from_a, history_entries(&b, &session, &secret));
    let users: Vec<&str> = from_a
        .iter()
        .filter(|e| e["role"] == "user")
        .filter_map(|e| e["body"]["content"].as_str())
        .collect();
    assert_eq!(
        users,
        [
            "My first words: check the walk-in freezer",
            "Search for restaurant food storage regulations",
            "What are food safety regs?",
            "what did I say first?"
        ]
    );
}

#[tokio::test]
async fn an_approval_asked_on_one_node_is_answered_on_the_other_and_the_tool_runs_once() {
    let (a, b) = fleet();
    let (session, mut on_a, mut on_b) = one_session_on_two_nodes(&a, &b, "fleet-approve").await;

    let (request, approval_id) = ask_for_report(&mut on_a, &session, "INS-2024-007").await;
    let mirrored = on_b
        .until(|f| f["type"] == "tool_approval_request")
        .await
        .pop()
        .expect("the request reached B");
    assert_eq!(mirrored, request);

    on_b.approve(&approval_id, true, Some("Approved from the other node"))
        .await;
    let seen_on_a = on_a.turn().await;
    let seen_on_b = on_b.turn().await;
    assert_eq!(seen_on_b, seen_on_a);
    assert_eq!(tool_frames(&seen_on_a, "started").len(), 1, "{seen_on_a:#?}");
    let completed = tool_frames(&seen_on_a, "completed");
    assert_eq!(completed.len(), 1, "{seen_on_a:#?}");
    assert_eq!(completed[0]["metadata"]["approval_id"], approval_id.as_str());
    assert!(streamed_text(&seen_on_a).contains("has been generated"));

    // Decided once: a second answer, on either node, is refused.
    for client in [&mut on_a, &mut on_b] {
        client.approve(&approval_id, true, None).await;
        let error = client.error().await;
        assert_eq!(error["error_code"], "unknown_approval", "{error}");
    }

    let secret = on_a.secret();
    let entries = history_entries(&b, &session, &secret);
    assert_eq!(entries, history_entries(&a, &session, &secret));
    let approvals: Vec<&Value> = entries.iter().filter(|e| e["role"] == "approval").collect();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0]["body"]["approval_id"], approval_id.as_str());
    assert_eq!(approvals[0]["body"]["feedback"], "Approved from the other node");
    let tool_runs = entries
        .iter()
        .filter(|e| e["role"] == "tool" && e["body"]["status"] == "completed")
        .count();
    assert_eq!(tool_runs, 1);
}

/// Both nodes answer the same approval at the same instant, one approving and
/// one rejecting (which node says which alternates): exactly one answer is
/// taken, the other is told `unknown_approval`, and the tool runs exactly when
/// the taken answer approved it.
#[tokio::test]
async fn racing_answers_on_two_nodes_decide_an_approval_exactly_once() {
    let (a, b) = fleet();
    let (session, mut on_a, mut on_b) = one_session_on_two_nodes(&a, &b, "fleet-race").await;
    let mut decided = Vec::new();
    for round in 0..RACE_ROUNDS {
        let inspection = format!("INS-2024-{:03}", 100 + round);
        let (_, approval_id) = ask_for_report(&mut on_a, &session, &inspection).await;
        on_b.until(|f| f["type"] == "tool_approval_request" && f["approval_id"] == approval_id.as_str())
            .await;
        let a_approves = round % 2 == 0;
        tokio::join!(
            on_a.approve(&approval_id, a_approves, None),
            on_b.approve(&approval_id, !a_approves, None)
        );
        let mut seen_on_a = on_a.turn().await;
        let mut seen_on_b = on_b.turn().await;
        seen_on_a.extend(probe(&mut on_a, &format!("appr_probe_a{round}")).await);
        seen_on_b.extend(probe(&mut on_b, &format!("appr_probe_b{round}")).await);

        let refused_on_a = refusals_of(&seen_on_a, &approval_id);
        let refused_on_b = refusals_of(&seen_on_b, &approval_id);
        assert_eq!(
            refused_on_a.len() + refused_on_b.len(),
            1,
            "round {round}: exactly one answer refused; A: {seen_on_a:#?}\nB: {seen_on_b:#?}"
        );
        let refused = refused_on_a
            .first()
            .or(refused_on_b.first())
            .expect("one refusal");
        assert_eq!(refused["error_code"], "unknown_approval", "round {round}");
        let approved = if refused_on_a.is_empty() {
            a_approves
        } else {
            !a_approves
        };
        for frames in [&seen_on_a, &seen_on_b] {
            let started = tool_frames(frames, "started");
            let completed = tool_frames(frames, "completed");
            let failed = tool_frames(frames, "failed");
            if approved {
                assert_eq!(
                    (started.len(), completed.len(), failed.len()),
                    (1, 1, 0),
                    "round {round}: {frames:#?}"
                );
            } else {
                assert_eq!(
                    (started.len(), completed.len(), failed.len()),
                    (0, 0, 1),
                    "round {round}: {frames:#?}"
                );
                assert_eq!(failed[0]["metadata"]["approval_id"], approval_id.as_str());
            }
        }
        decided.push((approval_id, approved));
    }

    // The history, the same from both nodes, has each decision once, as taken, and one run per approval.
    let secret = on_a.secret();
    let entries = history_entries(&a, &session, &secret);
    assert_eq!(entries, history_entries(&b, &session, &secret));
    let approvals: Vec<(String, bool)> = entries
        .iter()
        .filter(|e| e["role"] == "approval")
        .map(|e| {
            (
                e["body"]["approval_id"].as_str().unwrap_or_default().to_string(),
                e["body"]["approved"] == true,
            )
        })
        .collect();
    assert_eq!(approvals, decided);
    let ids: HashSet<&str> = approvals.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), RACE_ROUNDS);
    let tool_runs = entries
        .iter()
        .filter(|e| e["role"] == "tool" && e["body"]["status"] == "completed")
        .count();
    assert_eq!(
        tool_runs,
        decided.iter().filter(|(_, approved)| *approved).count()
    );
}

#[tokio::test]
async fn an_approval_that_timed_out_on_its_node_cannot_be_answered_on_the_other() {
    let (a, b) = fleet_with(&[("AGORA_TOOLS__APPROVAL_TIMEOUT_MS", "1500")]);
    let (session, mut on_a, mut on_b) = one_session_on_two_nodes(&a, &b, "fleet-timeout").await;
    let (_, approval_id) = ask_for_report(&mut on_a, &session, "INS-2024-009").await;
    let seen_on_a = on_a.turn().await;
    let seen_on_b = on_b.turn().await;
    assert_eq!(seen_on_b.last(), seen_on_a.last());
    assert!(tool_frames(&seen_on_a, "started").is_empty(), "{seen_on_a:#?}");
    assert_eq!(tool_frames(&seen_on_b, "failed").len(), 1, "{seen_on_b:#?}");
    assert!(streamed_text(&seen_on_b).contains("nobody approved it in time"));

    // A late answer on B finds nothing to decide (the wait claimed the approval's record
    // when it gave up; the record would have lapsed with the timeout anyway).
    on_b.approve(&approval_id, true, None).await;
    let error = on_b.error().await;
    assert_eq!(error["error_code"], "unknown_approval", "{error}");
    let entries = history_entries(&a, &session, &on_a.secret());
    assert!(!entries.iter().any(|e| e["role"] == "approval"), "{entries:#?}");
}

/// Kill -9 the node running a turn (its tool waits for an approval): once the
/// turn's lease lapses the other node ends it for the session's browsers (a
/// `node_stopped` error frame naming the withdrawn approval, then
/// `status: completed`), records it in the history, and withdraws the
/// approval, so no human approves a turn that no longer runs.
#[tokio::test]
async fn a_turn_whose_node_was_killed_is_ended_by_the_other_node_and_its_approval_withdrawn() {
    let (a, b) = fleet_with(&[("AGORA_STORE__LEASE_MS", "900")]);
    let (session, mut on_a, mut on_b) = one_session_on_two_nodes(&a, &b, "fleet-dead-turn").await;
    let (_, approval_id) = ask_for_report(&mut on_a, &session, "INS-2024-011").await;
    on_b.until(|f| f["type"] == "tool_approval_request" && f["approval_id"] == approval_id.as_str())
        .await;
    let secret = on_a.secret();
    a.kill();

    // A liveness deadline: the connection's pings would keep a bare wait going.
    let frames = tokio::time::timeout(std::time::Duration::from_secs(30), on_b.turn())
        .await
        .expect("the dead node's turn ended for B's browser within the deadline");
    let errors: Vec<&Value> = frames.iter().filter(|f| f["type"] == "error").collect();
    assert_eq!(errors.len(), 1, "{frames:#?}");
    assert_eq!(errors[0]["error_code"], "node_stopped", "{frames:#?}");
    assert_eq!(errors[0]["details"]["approval_ids"], json!([approval_id]));

    let entries = history_entries(&b, &session, &secret);
    let last = entries.last().expect("history entries");
    assert_eq!(last["role"], "error", "{entries:#?}");
    assert_eq!(last["body"]["error_code"], "node_stopped", "{entries:#?}");
    assert_eq!(last["body"]["approval_ids"], json!([approval_id]));
    assert_eq!(last["body"]["turn_id"], errors[0]["details"]["turn_id"]);

    on_b.approve(&approval_id, true, None).await;
    let error = on_b.error().await;
    assert_eq!(error["error_code"], "unknown_approval", "{error}");
    assert!(
        !history_entries(&b, &session, &secret)
            .iter()
            .any(|e| e["role"] == "approval")
    );
}
