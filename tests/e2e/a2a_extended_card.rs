//! The A2A authenticated extended card (issue 41 point 5), as the real
//! `a2a-sdk` 1.3.0 client fetches it (`tests/interop/a2a/extended_card.py`).
//!
//! Behind `a2a.auth_token` the public card offers an extended card and leaves
//! out the approval-gated tools; `GetExtendedAgentCard`, past the same token
//! check as every call, lists them. The client then swaps its card for the
//! extended one, so everything but the skills must stay the same: the test
//! streams through the swapped client to show it. Without a token there is no
//! extended card: the public card lists everything, and a raw request for one
//! gets `-32007`.

use serde_json::{Value, json};

use crate::a2a::a2a_python;
use crate::support::{self, NodeBuilder, TestNode};

const TOKEN: &str = "a2a-operator-token-for-extended-card";
/// `inspection-tools`' high-risk tool: approval-gated at the default threshold.
const GATED_TOOL: &str = "generate_inspection_report";
/// Its low-risk tool: on every card.
const OPEN_TOOL: &str = "search_regulations";
/// What the SDK client switches to with the extended card: it must not change.
const SHARED_FIELDS: [&str; 4] = [
    "supportedInterfaces",
    "capabilities",
    "securitySchemes",
    "securityRequirements",
];

fn builder() -> NodeBuilder {
    TestNode::builder()
        .plugin("hai-assistant")
        .plugin("inspection-tools")
}

fn scenario(node: &TestNode, name: &str, args: &[&str]) -> Value {
    support::run_scenario(
        &a2a_python(),
        "tests/interop/a2a/extended_card.py",
        name,
        &node.url(""),
        args,
        node,
    )
}

fn skill_ids(card: &Value) -> Vec<&str> {
    card["skills"]
        .as_array()
        .unwrap_or_else(|| panic!("skills: {card}"))
        .iter()
        .map(|skill| skill["id"].as_str().unwrap_or_default())
        .collect()
}

fn skill<'a>(card: &'a Value, id: &str) -> &'a Value {
    card["skills"]
        .as_array()
        .and_then(|skills| skills.iter().find(|skill| skill["id"] == id))
        .unwrap_or_else(|| panic!("no skill {id}: {card}"))
}

#[test]
fn the_operator_token_fetches_the_extended_card_with_the_gated_skills() {
    let node = builder().env("AGORA_A2A__AUTH_TOKEN", TOKEN).start();
    let observed = scenario(&node, "authed", &[TOKEN]);
    let (public, extended) = (&observed["public"], &observed["extended"]);

    assert_eq!(public["capabilities"]["extendedAgentCard"], true, "{public}");
    let public_skills = skill_ids(public);
    assert!(
        public_skills.contains(&OPEN_TOOL) && public_skills.contains(&"assistant"),
        "{public}"
    );
    assert!(
        !public_skills.contains(&GATED_TOOL),
        "the public card leaves out the gated tool: {public}"
    );

    let extended_skills = skill_ids(extended);
    for id in ["assistant", OPEN_TOOL, GATED_TOOL] {
        assert!(extended_skills.contains(&id), "{id}: {extended}");
    }
    let gated_tags = &skill(extended, GATED_TOOL)["tags"];
    assert!(
        gated_tags
            .as_array()
            .is_some_and(|tags| tags.contains(&json!("requires-approval"))),
        "{gated_tags}"
    );
    assert_eq!(skill(extended, OPEN_TOOL), skill(public, OPEN_TOOL));
    for field in SHARED_FIELDS {
        assert!(public.get(field).is_some(), "{field}: {public}");
        assert_eq!(
            public[field], extended[field],
            "{field} differs between the cards"
        );
    }

    // The client now holds the extended card: it still streams, with its credential.
    let after = &observed["after_swap"];
    assert!(after.get("error").is_none(), "{after}");
    let events: Vec<&str> = after["events"]
        .as_array()
        .unwrap_or_else(|| panic!("events: {after}"))
        .iter()
        .map(|event| event.as_str().unwrap_or_default())
        .collect();
    assert_eq!(events.first(), Some(&"task"), "{after}");
    assert!(
        events.contains(&"artifact_update"),
        "streamed, in chunks: {after}"
    );
    assert_eq!(events.last(), Some(&"status:TASK_STATE_COMPLETED"), "{after}");
}

#[test]
fn without_the_token_the_extended_card_is_refused_with_401() {
    let node = builder().env("AGORA_A2A__AUTH_TOKEN", TOKEN).start();
    let observed = scenario(&node, "anonymous", &[]);
    assert_eq!(
        observed["public"]["capabilities"]["extendedAgentCard"], true,
        "{observed}"
    );
    assert_eq!(observed["error"], "A2AClientError", "{observed}");
    let message = observed["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("HTTP Error 401"), "{observed}");
}

#[test]
fn a_node_without_a_token_offers_no_extended_card() {
    let node = builder().start();
    let observed = scenario(&node, "public", &[]);
    let public = &observed["public"];
    assert_ne!(public["capabilities"]["extendedAgentCard"], true, "{public}");
    assert!(
        skill_ids(public).contains(&GATED_TOOL),
        "the public card lists everything: {public}"
    );
    // The SDK asks nothing and keeps the public card.
    assert_eq!(&observed["returned"], public);

    let request = json!({"jsonrpc": "2.0", "id": "ext-1", "method": "GetExtendedAgentCard", "params": {}});
    let reply = support::post_with_headers(
        &node.url("/a2a"),
        &[("content-type", "application/json"), ("a2a-version", "1.0")],
        request.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body: Value = reply.json();
    assert_eq!(body["id"], "ext-1", "{body}");
    assert_eq!(body["error"]["code"], -32007, "{body}");
    assert_eq!(
        body["error"]["data"][0]["reason"], "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        "{body}"
    );
}
