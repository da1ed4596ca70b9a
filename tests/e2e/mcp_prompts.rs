//! MCP prompts (issue 41, point 2) end to end: a real node whose plugins declare
//! prompts in their capabilities and render them through the optional
//! `agora:node/prompts` export — `unit-converter`'s `convert` (the Rust SDK), and
//! the agent fixtures' `py_greeting` and `js_greeting` (the Python and JS SDKs'
//! helpers) — answered to the real `mcp` 2.3.0 client, driven by
//! `tests/interop/mcp/prompts_client.py`. The fixtures also declare their
//! document's media type (`text/plain`), which resources list and read with.
//!
//! The script only reports what the SDK saw; every judgement is made here.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, TestNode};

const SCRIPT: &str = "tests/interop/mcp/prompts_client.py";
const MCP_PATH: &str = "/mcp";
/// Small enough that a long quantity renders over it, large enough for a normal render.
const MAX_PROMPT_BYTES: &str = "4096";

fn run(node: &TestNode, scenario: &str, args: &[&str]) -> Value {
    let python = support::mcp_python();
    support::run_scenario(&python, SCRIPT, scenario, &node.url(MCP_PATH), args, node)
}

/// A node with `unit-converter` and the Python and JavaScript agent fixtures,
/// one entry per list page.
fn node_with_three_sdks() -> TestNode {
    let node = TestNode::builder()
        .plugin("unit-converter")
        .env("AGORA_MCP__PAGE_SIZE", "1")
        .env("AGORA_MCP__MAX_PROMPT_BYTES", MAX_PROMPT_BYTES)
        .start();
    for (name, wasm) in [
        ("fixture-py-agent", crate::scripting::built_python_agent()),
        ("fixture-js-agent", crate::scripting::built_js_agent()),
    ] {
        support::install_bytes(&node.plugins_dir, name, &std::fs::read(wasm).unwrap());
        node.wait_for_health_within(name, Duration::from_secs(300), |health| {
            support::has_plugin(health, name)
        });
    }
    node
}

fn all_entries<'a>(pages: &'a Value, list: &str) -> Vec<&'a Value> {
    let pages = pages.as_array().expect("pages");
    for (index, page) in pages.iter().enumerate() {
        let last = index + 1 == pages.len();
        assert!(page[list].as_array().unwrap().len() <= 1, "page size 1: {page}");
        assert_eq!(
            page["nextCursor"].is_null(),
            last,
            "a cursor on all but the last page: {pages:?}"
        );
    }
    pages
        .iter()
        .flat_map(|page| page[list].as_array().unwrap())
        .collect()
}

fn get(observed: &Value, index: usize) -> &Value {
    &observed["gets"][index]
}

/// `mode` is the client's; `version` the revision it must settle on.
fn prompts_in_mode(mode: &str, version: &str) {
    let node = node_with_three_sdks();
    let long_quantity = format!("{} m", "9".repeat(8192));
    let gets = json!([
        ["convert", {"quantity": "3.5 mi", "to": "km"}],
        ["convert", {"to": "km"}],
        ["no_such_prompt", {}],
        ["convert", {"quantity": long_quantity}],
        ["py_greeting", {"who": "Ada"}],
        ["js_greeting", {"who": "Grace"}],
        ["convert", {"quantity": "1 kg", "colour": "red"}],
    ])
    .to_string();
    let observed = run(&node, "prompts", &[gets.as_str(), "--mode", mode]);
    let log = || node.log_text();
    assert_eq!(observed["protocolVersion"], version, "{observed}");

    // Listed by name, one per page, the cursor passed back verbatim.
    let prompts = all_entries(&observed["pages"], "prompts");
    let names: Vec<&str> = prompts.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["convert", "js_greeting", "py_greeting"], "{observed}");
    assert_eq!(
        prompts[0]["arguments"],
        json!([
            {"name": "quantity", "description": "What to convert, with its unit: \"3.5 mi\"", "required": true},
            {"name": "to", "description": "The unit wanted (else the model picks the usual ones)", "required": false},
        ]),
        "{observed}"
    );
    assert!(
        prompts[0]["description"]
            .as_str()
            .unwrap()
            .contains("convert_units"),
        "{observed}"
    );
    assert_eq!(prompts[2]["arguments"][0]["name"], "who", "{observed}");
    // A pinned client skips `server/discover`, so it knows no capabilities.
    if mode != "2026-07-28" {
        assert_eq!(
            observed["capabilities"]["prompts"]["listChanged"], true,
            "{observed}"
        );
    }

    // Rendered with the arguments, in MCP's text content.
    let converted = get(&observed, 0);
    assert_eq!(converted["description"], "Convert 3.5 mi", "{observed}");
    let message = &converted["messages"][0];
    assert_eq!(
        (&message["role"], &message["type"]),
        (&json!("user"), &json!("text")),
        "{observed}"
    );
    assert!(
        message["text"]
            .as_str()
            .unwrap()
            .starts_with("Convert 3.5 mi to km."),
        "{observed}"
    );
    let python = &get(&observed, 4)["messages"][0];
    assert_eq!(python["text"], "Greet Ada in Python.", "{observed}");
    let javascript = &get(&observed, 5)["messages"][0];
    assert_eq!(javascript["text"], "Greet Grace in JavaScript.", "{observed}");

    // What the caller got wrong is -32602, and names it; nothing ran.
    let missing = get(&observed, 1);
    assert_eq!(missing["code"], -32602, "{observed}");
    assert!(
        missing["message"].as_str().unwrap().contains("quantity"),
        "{observed}"
    );
    assert_eq!(get(&observed, 2)["code"], -32602, "{observed}");
    assert!(
        get(&observed, 2)["message"]
            .as_str()
            .unwrap()
            .contains("Unknown prompt"),
        "{observed}"
    );
    assert_eq!(get(&observed, 6)["code"], -32602, "{observed}");
    assert!(
        get(&observed, 6)["message"].as_str().unwrap().contains("colour"),
        "{observed}"
    );
    // A render over mcp.max_prompt_bytes is the plugin's failure, -32603, never sent.
    let oversized = get(&observed, 3);
    assert_eq!(oversized["code"], -32603, "{observed}");
    assert!(
        oversized["message"].as_str().unwrap().contains(MAX_PROMPT_BYTES),
        "{observed}"
    );
    assert!(oversized.get("messages").is_none(), "{observed}");

    // The fixtures' documents are text/plain as declared, in the list and the read;
    // unit-converter's, undeclared, are Markdown.
    let resources = all_entries(&observed["resourcePages"], "resources");
    let mime_of = |needle: &str| -> Vec<(String, String)> {
        observed["reads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|read| {
                read["contents"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(needle))
            })
            .map(|read| {
                let uri = read["uri"].as_str().unwrap();
                let listed = resources.iter().find(|r| r["uri"] == uri).expect("listed");
                (
                    listed["mimeType"].as_str().unwrap().to_string(),
                    read["contents"][0]["mimeType"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let both = |mime: &str| vec![(mime.to_string(), mime.to_string())];
    assert_eq!(
        mime_of("name: Python agent fixture"),
        both("text/plain"),
        "{observed}\n{}",
        log()
    );
    assert_eq!(
        mime_of("agent world, in JavaScript"),
        both("text/plain"),
        "{observed}"
    );
    assert_eq!(
        mime_of("name: Unit conversion"),
        both("text/markdown"),
        "{observed}"
    );
}

#[test]
fn plugin_prompts_list_render_and_refuse_through_the_legacy_client() {
    prompts_in_mode("legacy", "2025-11-25");
}

#[test]
fn plugin_prompts_list_render_and_refuse_through_the_auto_client() {
    prompts_in_mode("auto", "2026-07-28");
}

#[test]
fn plugin_prompts_list_render_and_refuse_through_the_pinned_client() {
    prompts_in_mode("2026-07-28", "2026-07-28");
}

#[test]
fn a_hot_reload_announces_prompts_list_changed_on_the_sessions_stream() {
    let node = TestNode::builder()
        .plugin("unit-converter")
        .plugin("trivia")
        .start();
    let python = support::mcp_python();
    let scenario = support::ReadyScenario::start(
        &python,
        SCRIPT,
        "reload",
        &node.url(MCP_PATH),
        &["--mode", "legacy"],
        &node,
    );
    std::fs::remove_file(node.plugins_dir.join("unit-converter.wasm")).unwrap();
    let observed = scenario.observed();
    let names = |pages: &Value| -> Vec<String> {
        pages
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|page| page["prompts"].as_array().unwrap())
            .map(|prompt| prompt["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&observed["before"]), ["convert"], "{observed}");
    assert_eq!(observed["notified"], true, "{observed}\n{}", node.log_text());
    assert!(names(&observed["after"]).is_empty(), "{observed}");
}
