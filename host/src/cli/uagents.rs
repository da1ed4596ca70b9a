//! `agora-node uagents …`: a uAgents client on the command line
//! (the uAgents Exchange protocol): sign a message envelope with a uAgents identity,
//! POST it to an agent's `/submit`, and verify the reply — from the HTTP
//! body with `--sync`, or, with `--listen`, as an asynchronous envelope the
//! agent POSTs back to this command's own `/submit`. The agent's endpoint is
//! given, or looked up in an Almanac API (`--almanac-api`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use bytes::Bytes;
use clap::Subcommand;
use rand::RngCore;
use serde_json::{Value, json};
use tokio::sync::{Mutex, oneshot};

use crate::crypto::uagents::{self as ucrypto, AgentIdentity, Envelope};
use crate::peers::almanac::Resolver;
use crate::transports::uagents::client::{self, Delivered};

#[derive(Subcommand)]
pub enum Command {
    /// Send a message to an agent and print its reply as JSON.
    Send {
        /// The agent's address (agent1…).
        #[arg(long)]
        to: String,
        /// The agent's endpoint, e.g. http://127.0.0.1:8000/submit; without it,
        /// the endpoint is looked up in --almanac-api.
        #[arg(long, required_unless_present = "almanac_api")]
        endpoint: Option<String>,
        /// An Almanac API (e.g. https://agentverse.ai/v1/almanac) to resolve --to through.
        #[arg(long, env = "AGORA_CLI_UAGENTS_ALMANAC_API")]
        almanac_api: Option<String>,
        /// The message model's JSON schema (pydantic v1 `Model.schema_json()`); its digest names the model.
        #[arg(long)]
        schema: PathBuf,
        /// The message, as JSON.
        #[arg(long)]
        json: String,
        /// Ask for the reply in the HTTP response (`x-uagents-connection: sync`).
        #[arg(long)]
        sync: bool,
        /// Seed phrase of the sending identity; default: a fresh random identity.
        #[arg(long, env = "AGORA_CLI_UAGENTS_SEED", hide_env_values = true)]
        seed: Option<String>,
        /// Without --sync: receive the asynchronous reply on http://LISTEN/submit
        /// (the agent must know that endpoint for this command's address).
        #[arg(long)]
        listen: Option<String>,
        /// Seconds the envelope is valid and the reply is waited for.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
    },
    /// Print the agent1… address of a seed phrase.
    Address {
        #[arg(long, env = "AGORA_CLI_UAGENTS_SEED", hide_env_values = true)]
        seed: String,
    },
}

pub async fn run(command: Command) -> Result<(), String> {
    super::init_outbound_tls()?;
    match command {
        Command::Address { seed } => {
            println!("{}", identity(Some(&seed))?.address());
            Ok(())
        }
        Command::Send {
            to,
            endpoint,
            almanac_api,
            schema,
            json,
            sync,
            seed,
            listen,
            timeout,
        } => {
            let identity = identity(seed.as_deref())?;
            let schema_text =
                std::fs::read_to_string(&schema).map_err(|e| format!("{}: {e}", schema.display()))?;
            let schema_value: Value = serde_json::from_str(&schema_text)
                .map_err(|e| format!("{}: not JSON: {e}", schema.display()))?;
            let message: Value =
                serde_json::from_str(&json).map_err(|e| format!("--json is not JSON: {e}"))?;
            ucrypto::decode_address(&to).map_err(|e| format!("--to: {e}"))?;
            let endpoint = match (endpoint, almanac_api) {
                (Some(endpoint), _) => endpoint,
                (None, Some(api)) => resolve(&api, &to).await?,
                (None, None) => return Err("give --endpoint or --almanac-api".into()),
            };
            let envelope = client::message_envelope(
                &identity,
                &to,
                ucrypto::schema_digest(&schema_value),
                &message,
                timeout,
            );
            let wait = Duration::from_secs(timeout);
            let reply = if sync {
                match client::submit(&endpoint, &envelope, true, wait, 4 << 20)
                    .await
                    .map_err(|e| e.to_string())?
                {
                    Delivered::Reply(reply) => *reply,
                    Delivered::Accepted => return Err("the agent sent no reply".into()),
                }
            } else if let Some(listen) = listen {
                receive_async_reply(&listen, &endpoint, &envelope, wait).await?
            } else {
                client::submit(&endpoint, &envelope, false, wait, 64 * 1024)
                    .await
                    .map_err(|e| e.to_string())?;
                println!(
                    "{}",
                    json!({"status": "delivered", "sender": envelope.sender, "session": envelope.session})
                );
                return Ok(());
            };
            let summary = client::check_reply(&envelope, &reply)?;
            if summary["verified"] != true {
                eprintln!("agora-node: warning: the reply is unsigned (uagents does not sign sync replies)");
            }
            println!("{summary}");
            Ok(())
        }
    }
}

/// The endpoint `address` registered in the Almanac API `api` (its best weight).
/// The operator asked for this agent by name, so any http(s) endpoint is used.
async fn resolve(api: &str, address: &str) -> Result<String, String> {
    let endpoints = Resolver::new(api)
        .resolve(address)
        .await
        .map_err(|e| format!("resolving {address} through {api}: {e}"))?;
    endpoints
        .into_iter()
        .find(|url| url.starts_with("http://") || url.starts_with("https://"))
        .ok_or_else(|| format!("{address} has no http(s) endpoint registered in {api}"))
}

fn identity(seed: Option<&str>) -> Result<AgentIdentity, String> {
    match seed {
        Some(seed) => AgentIdentity::from_seed(seed).map_err(|e| e.to_string()),
        None => {
            let mut fresh = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut fresh);
            AgentIdentity::from_seed(&hex::encode(fresh)).map_err(|e| e.to_string())
        }
    }
}

type Waiter = Arc<Mutex<Option<oneshot::Sender<Envelope>>>>;

#[derive(Clone)]
struct Listener {
    request: Arc<Envelope>,
    waiter: Waiter,
}

/// Serve `/submit` on `listen`, send the envelope, and wait for the verified reply.
async fn receive_async_reply(
    listen: &str,
    endpoint: &str,
    envelope: &Envelope,
    wait: Duration,
) -> Result<Envelope, String> {
    let socket = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let (tx, rx) = oneshot::channel();
    let state = Listener {
        request: Arc::new(envelope.clone()),
        waiter: Arc::new(Mutex::new(Some(tx))),
    };
    let app = axum::Router::new()
        .route("/submit", post(receive))
        .layer(axum::extract::DefaultBodyLimit::max(1 << 20))
        .with_state(state);
    let server = tokio::spawn(async move { axum::serve(socket, app).await });
    let outcome = async {
        client::submit(endpoint, envelope, false, wait, 64 * 1024)
            .await
            .map_err(|e| e.to_string())?;
        tokio::time::timeout(wait, rx)
            .await
            .map_err(|_| format!("no reply within {} s", wait.as_secs()))?
            .map_err(|_| "the reply listener stopped".to_string())
    }
    .await;
    server.abort();
    outcome
}

/// Accept only a verified envelope from the agent we wrote to, in our session.
async fn receive(State(listener): State<Listener>, body: Bytes) -> impl IntoResponse {
    let refuse = |error: String| (StatusCode::BAD_REQUEST, axum::Json(json!({"error": error})));
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        return refuse("empty or invalid payload".into());
    };
    let Ok(reply) = Envelope::from_value(value) else {
        return refuse("contents do not match envelope schema".into());
    };
    if let Err(error) = reply.verify() {
        return refuse(error.to_string());
    }
    if reply.target != listener.request.sender {
        return refuse("unable to route envelope".into());
    }
    if reply.sender != listener.request.target || reply.session != listener.request.session {
        return refuse("not a reply to the message sent".into());
    }
    if let Some(waiter) = listener.waiter.lock().await.take() {
        let _ = waiter.send(reply);
    }
    (StatusCode::OK, axum::Json(json!({})))
}
