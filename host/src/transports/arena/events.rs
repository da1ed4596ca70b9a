//! One task's live events (AAP §2, "Live events"):
//! plugin events and the host's tool lifecycle translated into §2 events,
//! stamped with their match and round (our extension), and queued on the
//! stream without ever waiting. On the way the host learns which tools and
//! subagents the task used, for the §1 reply.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::state::ArenaState;
use super::stream::EventStream;
use super::wire::Task;
use crate::runtime::{CallEvent, EventSink, PluginEvent};
use crate::vocab::{ToolLifecycle, ToolStage};

/// One task's events on their way to the stream, and what the host learns from them.
pub(super) struct Events {
    stream: Option<Arc<EventStream>>,
    match_id: String,
    round: Value,
    max_event_bytes: usize,
    pub(super) tools: Vec<String>,
    pub(super) subagents: Vec<String>,
    tool_started: HashMap<String, Instant>,
}

impl EventSink for Events {
    fn on_event(&mut self, event: CallEvent) -> impl Future<Output = ()> + Send {
        match event {
            CallEvent::Plugin(event) => self.forward(event),
            CallEvent::ToolCall(lifecycle) => self.forward_tool(lifecycle),
            // An approval is asked of a human; the arena's stream has none.
            CallEvent::ApprovalAsked(_) | CallEvent::ApprovalWithdrawn { .. } => {}
        }
        std::future::ready(())
    }
}

impl Events {
    pub(super) fn new(arena: &ArenaState, task: &Task) -> Events {
        Events {
            stream: arena.stream.clone(),
            match_id: task.match_id.clone(),
            round: task.round.clone(),
            max_event_bytes: arena.node.config.plugins.max_event_bytes,
            tools: Vec::new(),
            subagents: Vec::new(),
            tool_started: HashMap::new(),
        }
    }

    /// Translate a tool call's lifecycle step into a §2 event.
    fn forward_tool(&mut self, lifecycle: ToolLifecycle) {
        let event = self.tool_event(lifecycle);
        self.emit(Value::Object(event));
    }

    /// Translate a plugin's event into a §2 event.
    pub(super) fn forward(&mut self, event: PluginEvent) {
        let PluginEvent { kind, data } = event;
        let translated = match kind.as_str() {
            "thinking" | "error" => Some(merge(&kind, data, "message")),
            "spawn_subagent" | "subagent_done" => {
                let event = merge(&kind, data, "name");
                if kind == "spawn_subagent"
                    && let Some(name) = event.get("name").and_then(Value::as_str)
                    && !self.subagents.iter().any(|n| n == name)
                    && self.subagents.len() < 64
                {
                    self.subagents.push(name.chars().take(128).collect());
                }
                Some(event)
            }
            "intermediate_result" => Some(match data {
                Value::Object(fields) if fields.contains_key("data") => {
                    merge(&kind, Value::Object(fields), "data")
                }
                other => merge(&kind, json!({ "data": other }), "data"),
            }),
            // `answer`, `tool_response` and anything unknown are the host's to say.
            _ => {
                tracing::debug!(kind = %kind, "arena: dropping a plugin event of a reserved or unknown type");
                None
            }
        };
        if let Some(mut event) = translated {
            if kind == "error" {
                // Only the host decides whether a task failed.
                event.insert("fatal".into(), Value::Bool(false));
            }
            self.emit(Value::Object(event));
        }
    }

    /// The host's tool lifecycle (`kind: tool_call`, `status`) as §2's
    /// `tool_call` / `tool_response`, with the duration measured here.
    fn tool_event(&mut self, lifecycle: ToolLifecycle) -> Map<String, Value> {
        let ToolLifecycle {
            call_id,
            tool_name: tool,
            stage,
            ..
        } = lifecycle;
        match stage {
            ToolStage::Started { arguments } => {
                if !self.tools.contains(&tool) {
                    self.tools.push(tool.clone());
                }
                if self.tool_started.len() < 1024 {
                    self.tool_started.insert(call_id.clone(), Instant::now());
                }
                object(json!({"type": "tool_call", "tool": tool, "args": arguments, "call_id": call_id}))
            }
            ToolStage::Completed { result } => self.tool_response(call_id, tool, "result", result),
            ToolStage::Failed { error } => self.tool_response(call_id, tool, "error", Value::String(error)),
        }
    }

    /// A `tool_response` event: the call's end, with how long it ran.
    fn tool_response(
        &mut self,
        call_id: String,
        tool: String,
        key: &str,
        value: Value,
    ) -> Map<String, Value> {
        let duration_ms = self
            .tool_started
            .remove(&call_id)
            .map_or(0, |at| at.elapsed().as_millis() as u64);
        object(json!({
            "type": "tool_response", "tool": tool, "call_id": call_id, "duration_ms": duration_ms,
            key: value,
        }))
    }

    /// Stamp the event with its match and round and queue it; never waits.
    pub(super) fn emit(&self, event: Value) {
        let Some(stream) = &self.stream else {
            return;
        };
        let mut event = object(event);
        event.insert("match_id".into(), Value::String(self.match_id.clone()));
        event.insert("round".into(), self.round.clone());
        let mut event = Value::Object(event);
        if event.to_string().len() > self.max_event_bytes {
            // Keep the event, lose its bulk: spectators still see that it happened.
            for field in ["result", "args", "data", "value", "message"] {
                if let Some(value) = event.get_mut(field) {
                    *value = Value::String("(truncated)".into());
                }
            }
        }
        stream.push(event);
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(fields) => fields,
        _ => Map::new(),
    }
}

/// `{"type": kind, …fields}`: an object's fields are kept, any other value goes under `key`.
fn merge(kind: &str, data: Value, key: &str) -> Map<String, Value> {
    let mut event = Map::new();
    event.insert("type".into(), Value::String(kind.to_string()));
    match data {
        Value::Object(fields) => {
            for (name, value) in fields {
                if !matches!(name.as_str(), "type" | "match_id" | "round") {
                    event.insert(name, value);
                }
            }
        }
        other => {
            event.insert(key.into(), other);
        }
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::Risk;

    #[test]
    fn plugin_events_are_translated_and_host_types_are_reserved() {
        let mut events = Events {
            stream: None,
            match_id: "m".into(),
            round: json!(1),
            max_event_bytes: 65536,
            tools: Vec::new(),
            subagents: Vec::new(),
            tool_started: HashMap::new(),
        };
        events.forward(PluginEvent {
            kind: "spawn_subagent".into(),
            data: json!({"name": "Analyzer", "role": "analysis"}),
        });
        let step = |stage| ToolLifecycle {
            call_id: "c".into(),
            tool_name: "t".into(),
            risk: Risk::Low,
            stage,
        };
        events.forward_tool(step(ToolStage::Started { arguments: json!({}) }));
        assert_eq!(events.subagents, ["Analyzer"]);
        assert_eq!(events.tools, ["t"]);
        let response = events.tool_event(step(ToolStage::Completed { result: json!(4) }));
        assert_eq!(response["type"], "tool_response");
        assert_eq!(response["result"], 4);
        assert_eq!(merge("thinking", json!("hm"), "message")["message"], "hm");
    }
}
