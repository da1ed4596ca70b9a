//! Outbound calls to other agents, for the CLI and for plugins (`host.outbound`,
//! and `host.outbound-a2a` for A2A agents: A2A is not a case of the WIT
//! `transport` enum, since adding one would break every plugin built before it).
//! The host checks the destination against `outbound.allowed_hosts` before
//! anything leaves the node. A uAgents message may name no URL: its `target`
//! is then resolved as the node's own replies are ([`uagents::endpoint_for`]:
//! `uagents.peers`, else the Almanac under its endpoint policy), so a plugin
//! can reach an agent by address alone.

use std::time::Duration;

use serde_json::Value;

use super::almanac::Resolver;
use super::http_client::{self, ClientError};
use super::{a2a, agora, envelopes, uagents};
use crate::config::Config;
use crate::vocab::TransportKind;

#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    A2a(#[from] a2a::A2aClientError),
    #[error(transparent)]
    NoEndpoint(#[from] uagents::EndpointError),
    #[error("invalid outbound request: {0}")]
    Invalid(String),
    #[error("the peer answered with a failure: {0}")]
    Peer(String),
    #[error("outbound calls over {0} are not available")]
    Unsupported(&'static str),
}

/// `almanac` is the node's one resolver (with `uagents.almanac_api` set), for
/// a uAgents message with an empty `url`.
pub async fn call(
    config: &Config,
    almanac: Option<&Resolver>,
    transport: TransportKind,
    url: &str,
    body: Value,
) -> Result<Value, OutboundError> {
    if transport == TransportKind::Uagents && url.is_empty() {
        let target = uagents::outbound_target(&body).map_err(OutboundError::Invalid)?;
        let resolved = uagents::endpoint_for(target, config, almanac).await?;
        return uagents::outbound(config, &resolved, &body)
            .await
            .map_err(OutboundError::Peer);
    }
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
        TransportKind::Uagents => uagents::outbound(config, url, &body)
            .await
            .map_err(OutboundError::Peer),
        other => Err(OutboundError::Unsupported(other.as_str())),
    }
}

/// Sends `body` (`{text?, data?, context_id?, task_id?}`) to the A2A agent at
/// `url` and answers the final Task JSON (or the agent's Message JSON).
pub async fn call_a2a(config: &Config, url: &str, body: Value) -> Result<Value, OutboundError> {
    http_client::check_allowed(url, &config.outbound.allowed_hosts)?;
    let message = a2a::outbound_message(body).map_err(OutboundError::Invalid)?;
    let limits = a2a::Limits {
        timeout: Duration::from_millis(config.outbound.timeout_ms),
        max_response_bytes: config.outbound.max_response_bytes,
    };
    // The card, the endpoint it names and any redirect are all held to the allow-list.
    let allowed = Some(config.outbound.allowed_hosts.clone());
    let agent = a2a::Agent::resolve(url, limits, allowed).await?;
    let answer = match agent.send(message).await? {
        a2a::SendResult::Task(task) => serde_json::to_value(task),
        a2a::SendResult::Message(message) => serde_json::to_value(message),
    };
    answer.map_err(|e| OutboundError::Invalid(e.to_string()))
}
