//! The example HAI assistant (`hai-protocol.md` §"Conversation Flows"):
//!
//! - any message: an answer streamed in several chunks (`emit("chunk", …)`);
//! - "search …": the low-risk tool `search_regulations`, answered with its result;
//! - "report …": the high-risk tool `generate_inspection_report`, which the host
//!   only runs once a human approves; a rejection is answered with its feedback;
//! - "what did I say first?": the session's first user message, from `host::history()`.
//!
//! The host owns the frames, tools and approvals; this plugin only decides what to say.

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

    fn handle(message: Message) -> Result<String, Failure> {
        let body: Body = message.json()?;
        let lower = body.content.to_lowercase();
        let answer = if lower.contains("what did i say first") {
            recall_first()?
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
