//! The example HAI assistant (the HAI specification §"Conversation Flows"):
//!
//! - any message: an answer streamed in several chunks (`emit("chunk", …)`);
//! - "search …": the low-risk tool `search_regulations`, answered with its result;
//! - "report …": the high-risk tool `generate_inspection_report`, which the host
//!   only runs once a human approves; a rejection is answered with its feedback;
//! - "what did I say first?": the session's first user message, from `host::history()`;
//! - "which protocol …?": the protocol the asker reaches it over, from
//!   `host::caller_transport()` (an A2A client's messages arrive as HAI's do).
//!
//! With a language model configured (`[llm]` in the node's configuration) every
//! message goes to the model instead, with the session's history and every
//! plugin tool offered as the model's tools: the answer streams as it arrives,
//! and a tool the model calls goes through `host::call_tool`, so a risky one
//! still waits for the human, whose rejection and feedback go back to the model
//! as the tool's result. Without a model (the embedded default) the rules above
//! answer, told so by `llm::ready` before anything is gathered for a model.
//!
//! The host owns the frames, tools and approvals; this plugin only decides what to say.

use agora_plugin_sdk::llm::{self, ChatRequest, ErrorKind, ToolCall};
use agora_plugin_sdk::prelude::*;

struct Assistant;

#[derive(Deserialize)]
struct Body {
    content: String,
}

/// Words per streamed chunk.
const WORDS_PER_CHUNK: usize = 3;
const DEFAULT_INSPECTION: &str = "INS-2024-001";

impl Plugin for Assistant {
    fn manifest() -> Manifest {
        Manifest::new("hai-assistant", env!("CARGO_PKG_VERSION"))
            .description("Inspection assistant for the HAI chat: regulations search and reports")
            .assistant()
    }

    fn capabilities() -> Capabilities {
        Capabilities::new().llm("default")
    }

    fn handle(message: Message) -> Result<String, Failure> {
        let body: Body = message.json()?;
        // Asked first: a turn for the model reads the history and the tool list.
        if llm::ready(None) {
            match model_turn(&body.content) {
                // Unconfigured since (a reload): the rules answer.
                Err(HostError::Model {
                    kind: ErrorKind::NotConfigured,
                    ..
                }) => {}
                Err(error) => return Err(Failure::internal(format!("the language model failed: {error}"))),
                Ok(answer) => return reply(json!({"content": answer})),
            }
        }
        let lower = body.content.to_lowercase();
        let answer = if lower.contains("what did i say first") {
            recall_first()?
        } else if lower.contains("which protocol") {
            protocol_named()
        } else if lower.contains("report") {
            report(&body.content)
        } else if lower.contains("search") {
            search(&body.content)
        } else {
            chat(&body.content)
        };
        stream(&answer)?;
        reply(json!({"content": answer}))
    }
}

/// Send the answer as several chunks, word groups with their spacing kept.
fn stream(answer: &str) -> Result<(), Failure> {
    let mut chunk = String::new();
    let mut words = 0;
    for piece in answer.split_inclusive(' ') {
        chunk.push_str(piece);
        words += 1;
        if words == WORDS_PER_CHUNK {
            emit_chunk(&std::mem::take(&mut chunk))?;
            words = 0;
        }
    }
    if !chunk.is_empty() {
        emit_chunk(&chunk)?;
    }
    Ok(())
}

fn emit_chunk(content: &str) -> Result<(), Failure> {
    host::emit("chunk", &json!({"content": content}))
        .map_err(|e| Failure::internal(format!("cannot stream the answer: {e}")))
}

fn quote(text: &str) -> String {
    let short: String = text.chars().take(300).collect();
    format!("\u{201c}{}\u{201d}", short.trim())
}

fn chat(content: &str) -> String {
    format!(
        "You said {}. I am the inspection assistant: I can search the food-safety regulations \
         (try \"search food storage\"), generate an inspection report once you approve it \
         (try \"generate the report for {DEFAULT_INSPECTION}\"), and tell you what you said first.",
        quote(content)
    )
}

fn recall_first() -> Result<String, HostError> {
    let first = host::history()?
        .into_iter()
        .find(|entry| entry.role == "user")
        .and_then(|entry| entry.body["content"].as_str().map(str::to_string));
    Ok(match first {
        Some(first) => format!("The first thing you said in this session was {}.", quote(&first)),
        None => "I have no earlier messages from you in this session.".to_string(),
    })
}

fn protocol_named() -> String {
    let protocol = match host::caller_transport().as_deref() {
        Some("a2a") => "A2A",
        Some("hai") => "the HAI chat",
        Some(other) => return format!("You reach me over {other}."),
        None => "no protocol: the node itself is asking",
    };
    format!("You reach me over {protocol}.")
}

/// The words after "search" (and a leading "for"/"about"), without closing punctuation.
fn search_query(content: &str) -> String {
    let lower = content.to_lowercase();
    let Some(at) = lower.find("search") else {
        return String::new();
    };
    let rest = &content[at + "search".len()..];
    // Skip the rest of the word ("searching", "searches").
    let rest = rest.trim_start_matches(|c: char| c.is_alphabetic());
    let mut query = rest.trim();
    for lead in ["for ", "about ", "on "] {
        if query.to_lowercase().starts_with(lead) {
            query = &query[lead.len()..];
        }
    }
    query.trim_end_matches(['?', '.', '!']).trim().to_string()
}

fn search(content: &str) -> String {
    let _ = host::emit(
        "status",
        &json!({"status": "routing", "message": "Routing to the regulations specialist..."}),
    );
    let query = search_query(content);
    match host::call_tool("search_regulations", &json!({"query": query, "limit": 3})) {
        Ok(result) => {
            let result: Value = serde_json::from_str(&result).unwrap_or(Value::Null);
            let count = result["count"].as_u64().unwrap_or(0);
            if count == 0 {
                return format!("I found no regulations matching {}.", quote(&query));
            }
            let listed: Vec<String> = result["results"]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .map(|r| {
                            format!(
                                "{} {}: {}",
                                r["id"].as_str().unwrap_or("?"),
                                r["title"].as_str().unwrap_or("?"),
                                r["text"].as_str().unwrap_or("")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "I found {count} regulations about {}. The most relevant: {}",
                quote(&query),
                listed.join(" ")
            )
        }
        Err(error) => format!("I could not search the regulations: {error}"),
    }
}

/// An inspection id like INS-2024-001 in the message, or the default one.
fn inspection_id(content: &str) -> String {
    content
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '?' | '!' | '(' | ')' | '"'))
        .map(|word| word.trim_end_matches('.'))
        .find(|word| word.len() > 4 && word[..4].eq_ignore_ascii_case("INS-"))
        .map(|word| word.to_uppercase())
        .unwrap_or_else(|| DEFAULT_INSPECTION.to_string())
}

fn report(content: &str) -> String {
    let inspection = inspection_id(content);
    let _ = host::emit(
        "tool_reasoning",
        &json!({"reasoning": format!("You asked to finalize the inspection report for {inspection}; the report is stored permanently.")}),
    );
    match host::call_tool(
        "generate_inspection_report",
        &json!({"inspection_id": inspection}),
    ) {
        Ok(result) => {
            let result: Value = serde_json::from_str(&result).unwrap_or(Value::Null);
            format!(
                "Approved and done: the inspection report {} for {inspection} has been generated. \
                 {} of 3 checks were non-compliant.",
                result["report_id"].as_str().unwrap_or("(no id)"),
                result["violations"].as_u64().unwrap_or(0)
            )
        }
        Err(HostError::ToolRejected {
            feedback: Some(feedback),
            ..
        }) => format!(
            "The inspection report for {inspection} was not generated: you rejected it. Your feedback: {}",
            quote(&feedback)
        ),
        Err(HostError::ToolRejected { feedback: None, .. }) => format!(
            "The inspection report for {inspection} was not generated: you rejected it without feedback."
        ),
        Err(HostError::ToolTimedOut { .. }) => {
            format!("The inspection report for {inspection} was not generated: nobody approved it in time.")
        }
        Err(error) => {
            format!("The inspection report for {inspection} could not be generated: {error}")
        }
    }
}

export_plugin!(Assistant);

/// Model rounds one message may take: each answer that calls tools is followed
/// by another with their results, until the model answers in words.
const MAX_MODEL_ROUNDS: usize = 4;

const SYSTEM_PROMPT: &str = "You are the inspection assistant of a food-safety inspector. \
    Answer briefly. Use the tools when they help; a risky tool runs only after the human approves it, \
    and when a tool call is rejected, say so and take the human's feedback into account.";

/// One turn answered by the language model: the session's history and the
/// plugin tools go to it, its words stream to the human, its tool calls run
/// through the host (and its approvals). The answer's whole text.
fn model_turn(content: &str) -> Result<String, HostError> {
    let mut request = ChatRequest::new().system(SYSTEM_PROMPT);
    let history = host::history()?;
    let mut last_user = None;
    for entry in &history {
        let Some(text) = entry.body["content"].as_str() else {
            continue;
        };
        request = match entry.role.as_str() {
            "user" => {
                last_user = Some(text.to_string());
                request.user(text)
            }
            "assistant" => request.assistant(text),
            _ => request,
        };
    }
    // The host records the message before the plugin runs; add it only when it is not there.
    if last_user.as_deref() != Some(content) {
        request = request.user(content);
    }
    for tool in host::list_tools()? {
        request = request.tool(&tool.name, &tool.description, &tool.parameters);
    }
    let mut said = String::new();
    for _ in 0..MAX_MODEL_ROUNDS {
        let mut answer = llm::Answer::default();
        for chunk in llm::chat(&request)? {
            let chunk = chunk?;
            if !chunk.text.is_empty() {
                emit_chunk(&chunk.text).map_err(|f| HostError::EventNotDelivered(f.message))?;
                said.push_str(&chunk.text);
            }
            answer.push(chunk);
        }
        if answer.tool_calls.is_empty() {
            return Ok(said);
        }
        request = request.assistant_calls(&answer.text, answer.tool_calls.clone());
        for call in &answer.tool_calls {
            request = request.tool_result(&call.id, &tool_result(call));
        }
    }
    Ok(said)
}

/// What a tool call gives the model back: the tool's result, or why it did not
/// run in words the model can act on (a human's rejection with their feedback).
fn tool_result(call: &ToolCall) -> String {
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
    match host::call_tool(&call.name, &arguments) {
        Ok(result) => result,
        Err(HostError::ToolRejected { feedback, .. }) => format!(
            "The human rejected this call of {}. Their feedback: {}",
            call.name,
            feedback.as_deref().unwrap_or("(none)")
        ),
        Err(error) => format!("The call of {} did not run: {error}", call.name),
    }
}
