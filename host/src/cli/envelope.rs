//! `agora-node envelope …`: the signed Agora envelopes client on the command line
//! ("Agora Protocol Specification v1.0", signed envelopes §3): the whole negotiation loop, with every
//! reply's signature verified.

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;

use crate::crypto::identity::NodeIdentity;
use crate::peers::envelopes::{EnvelopeClient, TaskSpec};

#[derive(Subcommand)]
pub enum Command {
    /// Run HELLO (with --hello), REQUEST, ACCEPT of an offer within --budget, RESULT.
    /// Prints each verified reply on stderr and the RESULT payload as JSON on stdout.
    Send {
        /// The node's envelope endpoint, e.g. http://127.0.0.1:8080/envelopes.
        url: String,
        /// The resource to ask for, e.g. agora:primes:v1.
        #[arg(long)]
        resource: String,
        /// The request's params (a JSON object).
        #[arg(long, default_value = "{}")]
        params: String,
        /// Most you will pay: sent as budget {"max": N}; offers above it are not accepted.
        /// Without it any offer is accepted.
        #[arg(long)]
        budget: Option<f64>,
        /// The request's own time limit in ms.
        #[arg(long)]
        timeout: Option<u64>,
        /// Payment proof to send with the ACCEPT.
        #[arg(long)]
        payment_proof: Option<String>,
        /// Ed25519 key file (PKCS#8 PEM, `agora-node keygen`); default: a fresh key for this run.
        #[arg(long)]
        key: Option<PathBuf>,
        /// Start with HELLO and print the node's WELCOME.
        #[arg(long)]
        hello: bool,
    },
}

pub async fn run(command: Command) -> Result<(), String> {
    super::init_outbound_tls()?;
    let Command::Send {
        url,
        resource,
        params,
        budget,
        timeout,
        payment_proof,
        key,
        hello,
    } = command;
    let params: serde_json::Value =
        serde_json::from_str(&params).map_err(|e| format!("--params is not JSON: {e}"))?;
    if !params.is_object() {
        return Err("--params must be a JSON object".into());
    }
    if budget.is_some_and(|b| !b.is_finite() || b < 0.0) {
        return Err("--budget must be a finite number ≥ 0".into());
    }
    let identity = match key {
        Some(path) => NodeIdentity::load(&path).map_err(|e| e.to_string())?,
        None => NodeIdentity::generate(),
    };
    let wait = Duration::from_millis(timeout.unwrap_or(30_000).saturating_add(5_000));
    let mut client = EnvelopeClient::new(&url, identity.signing_key, wait, 16 << 20);
    eprintln!("sender {}", client.sender_id());
    let task = TaskSpec {
        resource,
        params,
        budget,
        timeout_ms: timeout,
        payment_proof,
        hello,
    };
    let outcome = client.run(&task).await.map_err(|e| e.to_string())?;
    for reply in &outcome.replies {
        eprintln!(
            "verified {} from {}: {}",
            reply["type"].as_str().unwrap_or("?"),
            reply["sender"]["id"].as_str().unwrap_or("?"),
            reply["payload"]
        );
    }
    let text = serde_json::to_string_pretty(&outcome.result).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}
