//! End-to-end tests of `agora-node a2a …` against a real A2A 1.0 agent: the
//! a2a-sdk 1.3.0 server of `tests/interop/a2a/server.py` in a venv, on a free
//! loopback port. The agent echoes (streaming its answer as artifact chunks),
//! remembers each context's first text, and asks for an approval with the
//! data part Agora Node's own A2A server uses. The SDK's handler refuses a
//! request without `A2A-Version: 1.0`, so every passing exchange also shows
//! the CLI sends it; the server's request log shows what was streamed. The
//! last tests reach the same agent from a plugin (`host.outbound-a2a`), and
//! show that adding that function kept plugins built without it loading.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use serde_json::{Value, json};

use crate::support::{self, TestNode};

/// The venv the A2A interop tests share (the same packages everywhere, so it is made once).
fn python() -> PathBuf {
    support::python_venv("a2a", &["a2a-sdk[http-server]==1.3.0", "uvicorn==0.54.0"])
}

/// The SDK agent; killed when dropped.
struct SdkAgent {
    child: Child,
    port: u16,
    log: tempfile::NamedTempFile,
}

impl SdkAgent {
    fn start() -> SdkAgent {
        SdkAgent::start_with(&[])
    }

    fn start_with(flags: &[&str]) -> SdkAgent {
        let port = support::free_port();
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(python())
            .arg("server.py")
            .arg(port.to_string())
            .arg(log.path())
            .args(flags)
            .current_dir(support::repo_root().join("tests/interop/a2a"))
            .stdout(Stdio::null())
            .spawn()
            .expect("starting the a2a-sdk agent");
        crate::uagents::wait_for_port(port, "the a2a-sdk agent");
        SdkAgent { child, port, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests the agent saw, in order (path, a2a_version, content_type).
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.log.path())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

impl Drop for SdkAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `agora-node a2a ARGS`, stdin closed (not a terminal).
fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agora-node"))
        .arg("a2a")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// What `send` printed: the answer (everything before the closing lines) and
/// the closing `task:`, `context:`, `state:` values.
struct Sent {
    answer: String,
    task: String,
    context: String,
    state: String,
    code: Option<i32>,
}

fn sent(output: &Output) -> Sent {
    let text = stdout(output);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 3, "stdout: {text}\nstderr: {}", stderr(output));
    let tail = &lines[lines.len() - 3..];
    let value = |line: &str, key: &str| {
        line.strip_prefix(key)
            .unwrap_or_else(|| panic!("{key:?} expected in {text}\nstderr: {}", stderr(output)))
            .to_string()
    };
    Sent {
        answer: lines[..lines.len() - 3].join("\n"),
        task: value(tail[0], "task: "),
        context: value(tail[1], "context: "),
        state: value(tail[2], "state: "),
        code: output.status.code(),
    }
}

/// `args`, then `args` with `--stream`: each test runs both ways.
fn plain_and_streamed<'a>(args: &[&'a str]) -> [Vec<&'a str>; 2] {
    let plain = args.to_vec();
    let mut streamed = plain.clone();
    streamed.push("--stream");
    [plain, streamed]
}

fn send(agent: &SdkAgent, args: &[&str]) -> Sent {
    let url = agent.url();
    let mut all = vec!["send", url.as_str()];
    all.extend_from_slice(args);
    sent(&cli(&all))
}

#[test]
fn card_prints_the_agents_interfaces_and_skills() {
    let agent = SdkAgent::start();
    let output = cli(&["card", &agent.url()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("name: sdk-echo\n"), "{text}");
    // The JSON-RPC 1.0 interface is the one used, though the card lists HTTP+JSON first.
    let jsonrpc = format!("  JSONRPC 1.0 {}/a2a (used)\n", agent.url());
    let rest = format!("  HTTP+JSON 1.0 {}/rest\n", agent.url());
    assert!(text.contains(&jsonrpc) && text.contains(&rest), "{text}");
    assert!(text.contains("streaming: true\n"), "{text}");
    assert!(
        text.contains("  approve: Approval - Asks before running a risky tool [approval, test]\n"),
        "{text}"
    );

    let output = cli(&["card", &agent.url(), "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let card: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(card["supportedInterfaces"][1]["protocolBinding"], "JSONRPC");
    assert_eq!(card["skills"][0]["tags"][0], "echo");
}

#[test]
fn send_prints_the_answer_then_task_context_and_state() {
    let agent = SdkAgent::start();
    let reply = send(&agent, &["hello over a2a"]);
    assert_eq!(reply.code, Some(0));
    assert_eq!(reply.answer, "echo: hello over a2a");
    assert_eq!(reply.state, "TASK_STATE_COMPLETED");
    assert!(!reply.task.is_empty() && !reply.context.is_empty());

    // The task is the agent's: GetTask finds it, completed, with the same context.
    let output = cli(&["get", &agent.url(), &reply.task]);
    assert!(output.status.success(), "{}", stderr(&output));
    let task: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(task["contextId"], reply.context.as_str());
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");

    let requests = agent.requests();
    let calls: Vec<&Value> = requests.iter().filter(|r| r["path"] == "/a2a").collect();
    assert_eq!(calls.len(), 2, "{requests:?}");
    for call in calls {
        assert_eq!(call["a2a_version"], "1.0");
        assert!(
            call["content_type"]
                .as_str()
                .unwrap()
                .starts_with("application/json")
        );
    }
}

#[test]
fn send_stream_prints_the_streamed_answer() {
    let agent = SdkAgent::start();
    let reply = send(&agent, &["one two three four", "--stream"]);
    assert_eq!(reply.code, Some(0));
    // Five artifact chunks, appended in order, then one line break.
    assert_eq!(reply.answer, "echo: one two three four");
    assert_eq!(reply.state, "TASK_STATE_COMPLETED");
    let requests = agent.requests();
    let last = requests.last().unwrap();
    assert_eq!(last["path"], "/a2a");
    assert_eq!(last["a2a_version"], "1.0");
    assert!(
        last["content_type"]
            .as_str()
            .unwrap()
            .starts_with("text/event-stream"),
        "{last}"
    );
}

#[test]
fn a_context_id_continues_the_conversation() {
    let agent = SdkAgent::start();
    let first = send(&agent, &["my name is Ada"]);
    for args in plain_and_streamed(&["what did I say first?", "--context", first.context.as_str()]) {
        let again = send(&agent, &args);
        assert_eq!(again.answer, "my name is Ada");
        assert_eq!(again.context, first.context);
        assert_ne!(again.task, first.task);
    }
    // A new context remembers nothing before its own first message.
    let fresh = send(&agent, &["what did I say first?"]);
    assert_eq!(fresh.answer, "what did I say first?");
    assert_ne!(fresh.context, first.context);
}

#[test]
fn approve_answers_the_agents_approval() {
    let agent = SdkAgent::start();
    for args in plain_and_streamed(&["please approve this", "--approve"]) {
        let reply = send(&agent, &args);
        assert_eq!(reply.code, Some(0), "{args:?}");
        assert!(
            reply
                .answer
                .contains("approval needed: May I run delete_everything?"),
            "{}",
            reply.answer
        );
        assert!(
            reply.answer.contains("  tool: delete_everything\n  risk: high"),
            "{}",
            reply.answer
        );
        assert!(
            reply.answer.ends_with("\napproved: delete_everything ran"),
            "{}",
            reply.answer
        );
        assert_eq!(reply.state, "TASK_STATE_COMPLETED");
    }
}

#[test]
fn reject_sends_the_feedback_verbatim() {
    let agent = SdkAgent::start();
    for args in plain_and_streamed(&[
        "approve it",
        "--reject",
        "--feedback",
        "not on a Friday, \"please\"",
    ]) {
        let reply = send(&agent, &args);
        assert_eq!(reply.code, Some(0));
        assert!(
            reply.answer.ends_with("\nrejected: not on a Friday, \"please\""),
            "{}",
            reply.answer
        );
        assert_eq!(reply.state, "TASK_STATE_COMPLETED");
    }
}

#[test]
fn without_a_terminal_or_a_flag_the_approval_waits_and_can_be_answered_later() {
    let agent = SdkAgent::start();
    let pending = send(&agent, &["approve later", "--stream"]);
    assert_eq!(pending.code, Some(3), "waiting on input has its own exit status");
    assert_eq!(pending.state, "TASK_STATE_INPUT_REQUIRED");
    assert!(pending.answer.contains("  approval_id: "), "{}", pending.answer);

    // A later call answers it from the task id alone (the approval is read back with GetTask).
    let answered = send(
        &agent,
        &["--task", &pending.task, "--reject", "--feedback", "later is now"],
    );
    assert_eq!(answered.code, Some(0));
    assert_eq!(
        (answered.task.as_str(), answered.context.as_str()),
        (pending.task.as_str(), pending.context.as_str())
    );
    assert!(
        answered.answer.ends_with("\nrejected: later is now"),
        "{}",
        answered.answer
    );
    assert_eq!(answered.state, "TASK_STATE_COMPLETED");

    // Now nothing is pending: answering again is refused before anything is sent.
    let again = cli(&["send", &agent.url(), "--task", &pending.task, "--approve"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("with no approval pending"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn on_a_terminal_the_operator_is_asked() {
    let agent = SdkAgent::start();
    // `script` gives the command a terminal; its input is the operator's typing.
    let command = format!(
        "{} a2a send {} 'approve me' --stream",
        env!("CARGO_BIN_EXE_agora-node"),
        agent.url()
    );
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs the command on a terminal");
    let mut typing = child.stdin.take().unwrap();
    typing.write_all(b"maybe\nn\nno, typed by hand\n").unwrap();
    drop(typing);
    let output = child.wait_with_output().unwrap();
    let text = stdout(&output).replace('\r', "");
    assert_eq!(output.status.code(), Some(0), "{text}");
    // Asked twice (the first answer was neither y nor n), then for feedback.
    assert_eq!(
        text.matches("approve delete_everything? [y/n]").count(),
        2,
        "{text}"
    );
    assert!(text.contains("feedback for the agent (optional): "), "{text}");
    assert!(text.contains("rejected: no, typed by hand\n"), "{text}");
    assert!(text.contains("state: TASK_STATE_COMPLETED"), "{text}");
}

#[test]
fn an_unknown_task_prints_the_agents_error_and_fails() {
    let agent = SdkAgent::start();
    let url = agent.url();
    for args in plain_and_streamed(&["send", url.as_str(), "hello", "--task", "no-such-task"]) {
        let output = cli(&args);
        assert_eq!(output.status.code(), Some(1));
        let error = stderr(&output);
        assert!(
            error.contains("JSON-RPC error -32001: Task no-such-task not found"),
            "{error}"
        );
    }
}

#[test]
fn a_card_without_a_jsonrpc_1x_interface_is_an_error_not_a_guess() {
    let agent = SdkAgent::start_with(&["--no-jsonrpc"]);
    let output = cli(&["send", &agent.url(), "hello"]);
    assert_eq!(output.status.code(), Some(1));
    let error = stderr(&output);
    assert!(
        error.contains("offers no JSON-RPC interface for A2A 1.x"),
        "{error}"
    );
    assert!(error.contains("JSONRPC 0.3 at "), "{error}");
    // Only the card was fetched.
    let paths: Vec<Value> = agent.requests().iter().map(|r| r["path"].clone()).collect();
    assert_eq!(paths, vec![Value::from("/.well-known/agent-card.json")]);
}

// --- host.outbound-a2a: a plugin calls the SDK agent ---

#[test]
fn a_plugin_calls_an_a2a_agent_through_host_outbound_a2a_within_the_allow_list() {
    let agent = SdkAgent::start();
    let other = SdkAgent::start();
    let node = TestNode::builder()
        .plugin("fixture-outbound-caller")
        .plugin("hai-assistant")
        .env(
            "AGORA_OUTBOUND__ALLOWED_HOSTS",
            format!(r#"["127.0.0.1:{}"]"#, agent.port),
        )
        .start();
    // A plugin that never calls `outbound-a2a` (it imports the `host` interface
    // as it did before the function existed) loads beside one that does.
    node.wait_for_health("the outbound caller and the assistant", |h| {
        support::has_plugin(h, "fixture-outbound-caller") && support::has_plugin(h, "hai-assistant")
    });
    let hash = crate::scripting_tools::agora_route(&node, "fixture-outbound-caller");
    let call = |url: &str, body: Value| {
        let reply = support::post_json(
            &node.url("/agora"),
            &json!({"protocolHash": hash, "body": {"url": url, "transport": "a2a", "body": body}}),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()["body"].clone()
    };

    // The final Task JSON comes back to the plugin.
    let answered = call(&agent.url(), json!({"text": "from a plugin"}));
    let task = &answered["reply"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answered}");
    assert_eq!(task["artifacts"][0]["name"], "answer");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "echo: from a plugin"
    );
    let context = task["contextId"].as_str().unwrap().to_string();

    // A context id continues the conversation; an approval is answered with data and the task id.
    let asked = call(&agent.url(), json!({"text": "approve", "context_id": context}));
    let waiting = &asked["reply"];
    assert_eq!(waiting["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    assert_eq!(waiting["contextId"], context.as_str());
    let approval_id = waiting["status"]["message"]["parts"][1]["data"]["approval_id"].clone();
    let answer = json!({"approval_id": approval_id, "approved": false, "feedback": "plugins ask twice"});
    let done = call(
        &agent.url(),
        json!({"data": answer, "task_id": waiting["id"], "context_id": context}),
    );
    assert_eq!(done["reply"]["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(
        done["reply"]["status"]["message"]["parts"][0]["text"],
        "rejected: plugins ask twice"
    );
    let first = call(
        &agent.url(),
        json!({"text": "what did I say first?", "context_id": context}),
    );
    assert_eq!(
        first["reply"]["status"]["message"]["parts"][0]["text"],
        "from a plugin"
    );

    // A host not on the list is refused before anything is sent to it.
    let refused = call(&other.url(), json!({"text": "hello"}));
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "host 127.0.0.1:{} is not in outbound.allowed_hosts",
            other.port
        )),
        "{refused}"
    );
    assert_eq!(other.requests(), Vec::<Value>::new());
    // A malformed body is the plugin's error, named as such.
    let invalid = call(&agent.url(), json!({"context_id": context}));
    assert!(
        invalid["error"]
            .as_str()
            .unwrap_or_default()
            .contains("give `text`, `data` or both"),
        "{invalid}"
    );
}

/// The `host` functions a plugin component imports, by name.
fn host_imports(package: &str) -> Vec<String> {
    use wasmtime::component::types::ComponentItem;
    let engine = wasmtime::Engine::default();
    let bytes = std::fs::read(support::plugin_wasm(package)).unwrap();
    let component = wasmtime::component::Component::from_binary(&engine, &bytes).unwrap();
    let kind = component.component_type();
    let host = kind.imports(&engine).find_map(|(name, import)| match import.ty {
        ComponentItem::ComponentInstance(host) if name.starts_with("agora:node/host@") => Some(host),
        _ => None,
    });
    host.map(|host| host.exports(&engine).map(|(name, _)| name.to_string()).collect())
        .unwrap_or_default()
}

/// Why `outbound-a2a` is a new function and not a `transport` case: a
/// component imports only the host functions it calls, so a plugin built
/// before the function existed imports the same `host` instance as one built
/// now that does not call it, and the node, which offers more, links both
/// (the test above loads both kinds; a new enum case instead changed the type
/// of `handle` itself and every older plugin was refused).
#[test]
fn only_plugins_that_call_outbound_a2a_import_it() {
    let caller = host_imports("fixture-outbound-caller");
    assert!(caller.contains(&"outbound-a2a".to_string()), "{caller:?}");
    assert!(caller.contains(&"outbound".to_string()), "{caller:?}");
    let assistant = host_imports("hai-assistant");
    assert!(assistant.contains(&"history".to_string()), "{assistant:?}");
    assert!(
        !assistant.iter().any(|name| name.starts_with("outbound")),
        "{assistant:?}"
    );
}
