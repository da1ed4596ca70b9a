//! Outbound calls to other agents, for the CLI and for plugins (`host.outbound`).
//! The host checks the destination against `outbound.allowed_hosts` before
//! anything leaves the node.

use std::time::Duration;

use serde_json::Value;

use super::http_client::{self, ClientError};
use super::{agora, envelopes};
use crate::config::Config;
use crate::vocab::TransportKind;

#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("invalid outbound request: {0}")]
    Invalid(String),
    #[error("the peer answered with a failure: {0}")]
    Peer(String),
    #[error("outbound calls over {0} are not available")]
    Unsupported(&'static str),
}

pub async fn call(
    config: &Config,
    transport: TransportKind,
    url: &str,
    body: Value,
) -> Result<Value, OutboundError> {
    http_client::check_allowed(url, &config.outbound.allowed_hosts)?;
    let timeout = Duration::from_millis(config.outbound.timeout_ms);
    let limit = config.outbound.max_response_bytes;
    match transport {
        TransportKind::Agora => {
            let request = agora::OutboundAgora::from_value(body).map_err(OutboundError::Invalid)?;
            let reply = agora::send(url, &request.into_request(), timeout, limit).await?;
            Ok(reply.into_value())
        }
        TransportKind::Envelope => envelopes::outbound(config, url, &body)
            .await
            .map_err(|e| OutboundError::Peer(e.to_string())),
        other => Err(OutboundError::Unsupported(other.as_str())),
    }
}
