//! A2A behind an operator token (`a2a.auth_token`): the card stays public and
//! names the bearer scheme; every JSON-RPC call needs the token, and a wrong
//! or missing one is HTTP 401 with `WWW-Authenticate: Bearer` before any
//! method runs.

use serde_json::{Value, json};

use crate::support::{self, TestNode};

const TOKEN: &str = "a2a-operator-token-for-tests";

fn get_task(node: &TestNode, authorization: Option<&str>) -> support::HttpReply {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(value) = authorization {
        headers.push(("authorization", value));
    }
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such-task"}});
    support::post_with_headers(&node.url("/a2a"), &headers, request.to_string().as_bytes())
}

#[test]
fn an_operator_token_guards_every_call_but_not_the_card() {
    let node = TestNode::builder()
        .plugin("hai-assistant")
        .env("AGORA_A2A__AUTH_TOKEN", TOKEN)
        .start();
    let card = support::get_json(&node.url("/.well-known/agent-card.json")).expect("the card is public");
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer",
        "{card}"
    );
    assert_eq!(card["securityRequirements"], json!([{"schemes": {"bearer": {}}}]));

    for refused in [None, Some("Bearer wrong-token"), Some(TOKEN), Some("Basic YTpi")] {
        let reply = get_task(&node, refused);
        assert_eq!(reply.status, 401, "{refused:?}: {}", reply.body);
        assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
        let body: Value = reply.json();
        assert_eq!(body["jsonrpc"], "2.0");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("Unauthorized"),
            "{body}"
        );
    }
    let allowed = get_task(&node, Some(&format!("Bearer {TOKEN}")));
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert_eq!(
        allowed.json()["error"]["code"],
        -32001,
        "past the token, the method runs"
    );
}

#[test]
fn without_a_token_the_card_names_no_scheme_and_calls_are_served() {
    let node = TestNode::builder().plugin("hai-assistant").start();
    let card = support::get_json(&node.url("/.well-known/agent-card.json")).expect("card");
    assert!(card.get("securitySchemes").is_none(), "{card}");
    let reply = get_task(&node, None);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["error"]["code"], -32001);
}
