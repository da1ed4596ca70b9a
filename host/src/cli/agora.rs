//! `agora-node agora …`: the Agora two-party JSON client on the command line
//! ("Agora Protocol for Two-Party JSON Exchanges" §5–7). The reply is printed as JSON in the
//! spec's shape whichever dialect the peer speaks; a failure exits non-zero.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};

use crate::peers::agora::{self as agora_client, Dialect};

#[derive(Subcommand)]
pub enum Command {
    /// Send a request: BODY is JSON, or plain text sent as a string.
    Send {
        /// The peer's base URL, e.g. http://127.0.0.1:8080/agora.
        url: String,
        body: String,
        /// Protocol document to use (its hash, and its text as a data: URI source, are sent).
        #[arg(long)]
        protocol: Option<PathBuf>,
        /// Start a multi-round conversation; the reply carries its conversationId.
        #[arg(long)]
        multiround: bool,
        /// How the protocol hash is written: `spec` (hex) or `reference`
        /// (base64, what agora-protocol 0.2.0's ReceiverServer checks).
        #[arg(long, value_enum, default_value_t = DialectArg::Spec)]
        dialect: DialectArg,
    },
    /// Continue a conversation.
    Follow {
        url: String,
        // Conversation ids are base64url: one in 64 starts with '-', which is still an id.
        #[arg(allow_hyphen_values = true)]
        conversation: String,
        #[arg(allow_hyphen_values = true)]
        body: String,
    },
    /// End a conversation.
    Close {
        url: String,
        #[arg(allow_hyphen_values = true)]
        conversation: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DialectArg {
    Spec,
    Reference,
}

fn body_value(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()))
}

pub async fn run(command: Command) -> Result<(), String> {
    super::init_outbound_tls()?;
    let timeout = Duration::from_secs(30);
    let limit = 16 << 20;
    let reply = match command {
        Command::Send {
            url,
            body,
            protocol,
            multiround,
            dialect,
        } => {
            let protocol_document = match protocol {
                Some(path) => {
                    Some(std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?)
                }
                None => None,
            };
            let request = agora_client::ClientRequest {
                body: body_value(&body),
                protocol_document,
                multiround,
                conversation_id: None,
                dialect: match dialect {
                    DialectArg::Spec => Dialect::Spec,
                    DialectArg::Reference => Dialect::Reference,
                },
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
