//! `agora-node agora …`: the Agora two-party JSON client on the command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;

use crate::transports::agora::client as agora_client;

#[derive(Subcommand)]
pub enum Command {
    /// Send a request: BODY is JSON, or plain text sent as a string.
    Send {
        url: String,
        body: String,
        /// Protocol document to use (its hash and text are sent).
        #[arg(long)]
        protocol: Option<PathBuf>,
        /// Start a multi-round conversation.
        #[arg(long)]
        multiround: bool,
    },
    /// Continue a conversation.
    Follow {
        url: String,
        conversation: String,
        body: String,
    },
    /// End a conversation.
    Close { url: String, conversation: String },
}

fn body_value(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()))
}

pub async fn run(command: Command) -> Result<(), String> {
    let timeout = Duration::from_secs(30);
    let limit = 16 << 20;
    let reply = match command {
        Command::Send {
            url,
            body,
            protocol,
            multiround,
        } => {
            let protocol_document = match protocol {
                Some(path) => Some(
                    std::fs::read_to_string(&path)
                        .map_err(|e| format!("{}: {e}", path.display()))?,
                ),
                None => None,
            };
            let request = agora_client::ClientRequest {
                body: body_value(&body),
                protocol_document,
                multiround,
                conversation_id: None,
            };
            agora_client::send(&url, &request, timeout, limit).await
        }
        Command::Follow {
            url,
            conversation,
            body,
        } => {
            let request = agora_client::ClientRequest {
                body: body_value(&body),
                conversation_id: Some(conversation),
                ..Default::default()
            };
            agora_client::send(&url, &request, timeout, limit).await
        }
        Command::Close { url, conversation } => {
            agora_client::close(&url, &conversation, timeout, limit).await
        }
    }
    .map_err(|e| e.to_string())?;
    let success = reply.success;
    println!(
        "{}",
        serde_json::to_string_pretty(&reply.into_value()).unwrap_or_default()
    );
    if success {
        Ok(())
    } else {
        Err("the peer answered with a failure".into())
    }
}
