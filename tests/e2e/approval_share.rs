//! The places for calls waiting on a human's approval are shared fairly (issue
//! 37, finding 6): A2A clients on four addresses, each parking as many report
//! tasks as it may run, once held every place of the node, and a HAI user's
//! risky tool then failed at once. Now one caller holds at most its share
//! (`tools.max_waiting_approvals_per_client`) and one transport at most its
//! own (`tools.max_waiting_approvals_per_transport`).

use std::net::IpAddr;

use serde_json::{Value, json};

use crate::hai::{Client, session_id, ws_request};
use crate::support::{RawRequest, TestNode, raw_exchange};

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// SendMessage from `from` asking for a report: the task it answers with.
fn send_report_from(node: &TestNode, from: IpAddr, inspection: &str) -> Value {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {
            "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
            "parts": [{"text": format!("generate the report for {inspection}")}],
        }},
    })
    .to_string();
    let reply = raw_exchange(node, RawRequest::post_json(from, "/a2a", body.as_bytes()));
    reply.json()["result"]["task"].clone()
}

#[tokio::test]
async fn a2a_callers_cannot_take_every_approval_place_from_a_hai_user() {
    let node = TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
        .start();
    let mut parked_by_address = Vec::new();
    for last in 2..=5 {
        let mut parked = 0;
        // Eight: a2a.max_running_tasks_per_ip, as many as one address may run.
        for n in 0..8 {
            let task = send_report_from(&node, ip(last), &format!("INS-2024-00{n}"));
            match task["status"]["state"].as_str() {
                Some("TASK_STATE_INPUT_REQUIRED") => parked += 1,
                Some("TASK_STATE_COMPLETED" | "TASK_STATE_FAILED") => {}
                other => panic!("unexpected task state {other:?}: {task}"),
            }
        }
        parked_by_address.push(parked);
    }
    assert_eq!(
        parked_by_address,
        vec![4, 4, 4, 4],
        "each address parks its share (tools.max_waiting_approvals_per_client)"
    );

    let mut human = Client::connect_from(ip(9), ws_request(&node, "/ws", &[]))
        .await
        .expect("connect");
    human
        .say(
            &session_id("fair-share"),
            "Generate the inspection report for INS-2024-007",
        )
        .await;
    let frames = human
        .until(|f| {
            f["type"] == "tool_approval_request" || (f["type"] == "status" && f["status"] == "completed")
        })
        .await;
    let last = frames.last().unwrap();
    assert_eq!(
        last["type"], "tool_approval_request",
        "the HAI user's tool is asked about, not failed: {frames:#?}"
    );
}
