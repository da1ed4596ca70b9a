//! The uAgents echo protocol (`protocols/uagents-echo.md`): a `Message{text}`
//! is answered in the same session with `Message{text: "echo: " + text}`.
//!
//! The plugin only declares the model's JSON schema; the host derives its
//! schema digest, routes envelopes carrying it here, and sends the reply with
//! the same model unless the reply names another with `"@model"`.

use agora_plugin_sdk::prelude::*;

/// pydantic's schema of `class Message(Model): text: str`, as uAgents hashes it.
const MESSAGE_SCHEMA: &str = r#"{"properties": {"text": {"title": "Text", "type": "string"}}, "required": ["text"], "title": "Message", "type": "object"}"#;

struct UagentsEcho;

#[derive(Deserialize)]
struct Message {
    text: String,
}

#[derive(Serialize)]
struct Reply {
    text: String,
}

impl Plugin for UagentsEcho {
    fn manifest() -> Manifest {
        Manifest::new("uagents-echo", "1.0.0")
            .description("uAgents echo: Message{text} -> Message{text: \"echo: \" + text}")
            .model("Message", MESSAGE_SCHEMA)
    }

    fn handle(message: agora_plugin_sdk::Message) -> Result<String, Failure> {
        let request: Message = message.json()?;
        reply(Reply {
            text: format!("echo: {}", request.text),
        })
    }
}

export_plugin!(UagentsEcho);
