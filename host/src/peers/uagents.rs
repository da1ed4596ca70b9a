//! Sending uAgents envelopes (`uagents-exchange.txt`, "Endpoints"): an
//! envelope is POSTed as JSON to the peer's `/submit`; with
//! `x-uagents-connection: sync` the peer's HTTP body is its reply envelope.
//! Used by the node for asynchronous replies and by `agora-node uagents send`.

use std::time::Duration;

use serde_json::Value;

use super::http_client::{self, ClientError};
use crate::crypto::uagents::Envelope;

#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{url} refused the envelope with HTTP {status}: {body}")]
    Refused { url: String, status: u16, body: String },
    #[error("{url} answered with something that is not an envelope: {message}")]
    BadReply { url: String, message: String },
}

impl DeliveryError {
    /// Whether trying again may help (network trouble or a server-side failure).
    fn is_transient(&self) -> bool {
        match self {
            DeliveryError::Client(ClientError::InvalidUrl(_))
            | DeliveryError::Client(ClientError::HostNotAllowed(_))
            | DeliveryError::Client(ClientError::TooLarge { .. })
            | DeliveryError::Client(ClientError::RedirectNotAllowed { .. })
            | DeliveryError::Client(ClientError::TooManyRedirects { .. }) => false,
            DeliveryError::Client(_) => true,
            DeliveryError::Refused { status, .. } => *status >= 500 || *status == 429,
            DeliveryError::BadReply { .. } => false,
        }
    }
}

/// What a peer answered to a delivered envelope.
#[derive(Debug)]
pub enum Delivered {
    /// Asynchronous delivery: the peer accepted it (`200 {}`).
    Accepted,
    /// Synchronous delivery: the peer's reply envelope (not yet verified).
    Reply(Box<Envelope>),
}

/// POST one envelope once.
pub async fn submit(
    url: &str,
    envelope: &Envelope,
    sync: bool,
    timeout: Duration,
    max_response_bytes: usize,
) -> Result<Delivered, DeliveryError> {
    let mut headers = vec![("content-type", "application/json")];
    if sync {
        headers.push(("x-uagents-connection", "sync"));
    }
    let response = http_client::post(
        url,
        &headers,
        envelope.to_json().into_bytes(),
        timeout,
        max_response_bytes,
    )
    .await?;
    if response.status != 200 {
        return Err(DeliveryError::Refused {
            url: url.to_string(),
            status: response.status,
            body: String::from_utf8_lossy(&response.body)
                .chars()
                .take(512)
                .collect(),
        });
    }
    if !sync {
        return Ok(Delivered::Accepted);
    }
    let bad_reply = |message: String| DeliveryError::BadReply {
        url: url.to_string(),
        message,
    };
    let value: Value = serde_json::from_slice(&response.body).map_err(|e| bad_reply(e.to_string()))?;
    Envelope::from_value(value)
        .map(|reply| Delivered::Reply(Box::new(reply)))
        .map_err(bad_reply)
}

/// POST one envelope asynchronously, retrying transient failures up to
/// `retries` more times with a doubling pause (250 ms, 500 ms, … capped at 8 s).
pub async fn deliver_with_retries(
    url: &str,
    envelope: &Envelope,
    retries: u32,
    timeout: Duration,
) -> Result<(), DeliveryError> {
    let mut attempt = 0u32;
    loop {
        match submit(url, envelope, false, timeout, 64 * 1024).await {
            Ok(_) => return Ok(()),
            Err(error) if error.is_transient() && attempt < retries => {
                let pause = Duration::from_millis(250u64 << attempt.min(5));
                tracing::debug!(transport = "uagents", %url, %error, attempt, "delivery failed; retrying");
                tokio::time::sleep(pause).await;
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}
