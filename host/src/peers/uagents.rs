//! Sending uAgents envelopes (the uAgents Exchange protocol, "Endpoints"): an
//! envelope is POSTed as JSON to the peer's `/submit`; with
//! `x-uagents-connection: sync` the peer's HTTP body is its reply envelope.
//! Used by the node for asynchronous replies, by plugins (`host.outbound`
//! with transport `uagents`: the node signs as its own address) and by
//! `agora-node uagents send`.
//!
//! Where an envelope for an address goes is chosen in one place,
//! [`endpoint_for`], for the node's replies and for a plugin's message that
//! names no URL ([`outbound_target`]) alike: so both follow the operator's `uagents.peers` and the
//! same Almanac policy, and share the node's one [`Resolver`] and its cache.

use std::time::Duration;

use rand::RngCore;
use serde_json::{Value, json};

use super::almanac::{self, AlmanacError, Resolver};
use super::http_client::{self, ClientError};
use crate::config::Config;
use crate::crypto::identity::read_secret_file;
use crate::crypto::uagents::{AgentIdentity, Envelope};
use crate::store::now_ms;

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
            | DeliveryError::Client(ClientError::TooManyRedirects { .. })
            | DeliveryError::Client(ClientError::InternalAddress(_)) => false,
            DeliveryError::Client(_) => true,
            DeliveryError::Refused { status, .. } => *status >= 500 || *status == 429,
            DeliveryError::BadReply { .. } => false,
        }
    }
}

/// Why no endpoint was found for an address.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("no endpoint for {address}: it is not in uagents.peers, and uagents.almanac_api is not set")]
    NoAlmanac { address: String },
    #[error("Almanac lookup failed: {0}")]
    Lookup(#[from] AlmanacError),
    #[error("{address} is not registered in the Almanac")]
    NotRegistered { address: String },
    #[error("no Almanac endpoint is allowed: {refusals}")]
    NoneAllowed { refusals: String },
}

/// The endpoint an envelope for `address` goes to: the operator's
/// `uagents.peers` entry, else the first endpoint `almanac` (the node's one
/// resolver, when `uagents.almanac_api` is set) has for it that
/// [`almanac::check_reply_endpoint`] allows. The Almanac holds what other
/// agents registered: without that check, anyone could make the node POST
/// inside its own network.
pub async fn endpoint_for(
    address: &str,
    config: &Config,
    almanac: Option<&Resolver>,
) -> Result<String, EndpointError> {
    if let Some(configured) = config.uagents.peers.get(address) {
        return Ok(configured.clone());
    }
    let almanac = almanac.ok_or_else(|| EndpointError::NoAlmanac {
        address: address.to_string(),
    })?;
    let endpoints = almanac.resolve(address).await?;
    if endpoints.is_empty() {
        return Err(EndpointError::NotRegistered {
            address: address.to_string(),
        });
    }
    let mut refusals = Vec::new();
    for url in endpoints {
        match almanac::check_reply_endpoint(&url, config) {
            Ok(_) => return Ok(url),
            Err(error) => refusals.push(error.to_string()),
        }
    }
    Err(EndpointError::NoneAllowed {
        refusals: refusals.join("; "),
    })
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

/// Where the node keeps its generated uAgents seed under `data_dir`, when
/// `uagents.seed` is empty (the uAgents transport writes it at start-up).
pub const SEED_FILE: &str = "uagents.seed";

/// The node's uAgents identity for sending: `uagents.seed` (a fleet's nodes all
/// have the fleet's there), else the seed the uAgents transport generated.
pub fn sending_identity(config: &Config) -> Result<AgentIdentity, String> {
    if !config.uagents.seed.is_empty() {
        return AgentIdentity::from_seed(&config.uagents.seed).map_err(|e| e.to_string());
    }
    let path = config.data_dir.join(SEED_FILE);
    let bytes = read_secret_file(&path).map_err(|e| {
        format!(
            "the node has no uAgents identity ({}: {e}); set uagents.seed or enable the uAgents transport",
            path.display()
        )
    })?;
    let seed = String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8", path.display()))?;
    AgentIdentity::from_seed(seed.trim()).map_err(|e| e.to_string())
}

/// A message envelope from `identity` to `target`, signed, in a new session,
/// valid for `valid_for_secs`.
pub fn message_envelope(
    identity: &AgentIdentity,
    target: &str,
    schema_digest: String,
    message: &Value,
    valid_for_secs: u64,
) -> Envelope {
    let mut envelope = Envelope {
        version: 1,
        sender: identity.address().to_string(),
        target: target.to_string(),
        session: uuid::Uuid::new_v4().hyphenated().to_string(),
        schema_digest,
        protocol_digest: None,
        payload: None,
        expires: Some(now_ms() / 1000 + valid_for_secs),
        nonce: Some(rand::rngs::OsRng.next_u64()),
        signature: None,
    };
    envelope.encode_payload(&message.to_string());
    envelope.sign(identity);
    envelope
}

/// Check a reply belongs to `request` and verify it when signed (uagents'
/// own sync replies are unsigned; a signed one must verify), and summarise
/// it: `{sender, session, schema_digest, verified, message}`.
pub fn check_reply(request: &Envelope, reply: &Envelope) -> Result<Value, String> {
    if reply.sender != request.target {
        return Err(format!(
            "the reply comes from {}, not {}",
            reply.sender, request.target
        ));
    }
    if reply.target != request.sender {
        return Err(format!("the reply is for {}, not for us", reply.target));
    }
    if reply.session != request.session {
        return Err("the reply belongs to another session".into());
    }
    let signed = reply.signature.is_some();
    if signed {
        reply
            .verify()
            .map_err(|e| format!("the reply's signature does not verify: {e}"))?;
    }
    let text = reply.decode_payload()?;
    let message: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok(json!({
        "sender": reply.sender,
        "session": reply.session,
        "schema_digest": reply.schema_digest,
        "verified": signed,
        "message": message,
    }))
}

/// `host.outbound` over uAgents, for plugins. `body` is
/// `{"target": "agent1…", "schema": <the model's JSON schema> | "schema_digest": "model:…",
///   "message": {…}, "sync": false}`; the node signs as itself and POSTs the
/// envelope to `url` (the peer's `/submit`, already checked against
/// `outbound.allowed_hosts`). Answers `{"status": "delivered", "sender", "session"}`,
/// or with `sync` the peer's reply as [`check_reply`] summarises it.
pub async fn outbound(config: &Config, url: &str, body: &Value) -> Result<Value, String> {
    let request = OutboundMessage::from_body(body)?;
    send_outbound(config, url, &request).await
}

/// The `target` of a plugin's message `body`, the whole body checked as
/// [`outbound`] checks it: for a message that names no URL, so a malformed one
/// is refused before its target is resolved ([`endpoint_for`]).
pub fn outbound_target(body: &Value) -> Result<&str, String> {
    OutboundMessage::from_body(body).map(|request| request.target)
}

/// A plugin's uAgents message, its fields checked.
struct OutboundMessage<'a> {
    target: &'a str,
    schema_digest: String,
    message: &'a Value,
    sync: bool,
}

impl<'a> OutboundMessage<'a> {
    fn from_body(body: &'a Value) -> Result<OutboundMessage<'a>, String> {
        let target = body["target"]
            .as_str()
            .ok_or("`target` must be the peer's agent1… address")?;
        crate::crypto::uagents::decode_address(target).map_err(|e| format!("`target`: {e}"))?;
        let schema_digest = match (&body["schema"], &body["schema_digest"]) {
            (schema @ Value::Object(_), Value::Null) => crate::crypto::uagents::schema_digest(schema),
            (Value::Null, Value::String(digest)) if crate::crypto::uagents::is_model_digest(digest) => {
                digest.clone()
            }
            _ => return Err("give the message model as `schema` (an object) or `schema_digest` (\"model:<64 hex>\"), one of them".into()),
        };
        let message = match &body["message"] {
            message @ Value::Object(_) => message,
            _ => return Err("`message` must be an object (the model's fields)".into()),
        };
        let sync = match &body["sync"] {
            Value::Null => false,
            Value::Bool(sync) => *sync,
            _ => return Err("`sync` must be a boolean".into()),
        };
        Ok(OutboundMessage {
            target,
            schema_digest,
            message,
            sync,
        })
    }
}

async fn send_outbound(config: &Config, url: &str, request: &OutboundMessage<'_>) -> Result<Value, String> {
    let identity = sending_identity(config)?;
    let timeout = Duration::from_millis(config.outbound.timeout_ms);
    let valid_for = timeout.as_secs().max(MIN_VALIDITY_SECS);
    let envelope = message_envelope(
        &identity,
        request.target,
        request.schema_digest.clone(),
        request.message,
        valid_for,
    );
    let limit = config.outbound.max_response_bytes;
    match submit(url, &envelope, request.sync, timeout, limit)
        .await
        .map_err(|e| e.to_string())?
    {
        Delivered::Reply(reply) => check_reply(&envelope, &reply),
        Delivered::Accepted => Ok(json!({
            "status": "delivered",
            "sender": envelope.sender,
            "session": envelope.session,
        })),
    }
}

/// How long a sent envelope stays valid at least: a peer may queue it a while.
const MIN_VALIDITY_SECS: u64 = 30;

#[cfg(test)]
mod tests {
    use super::*;

    const PEER_SEED: &str = "uagents-outbound-test-peer";

    fn config_with_seed() -> Config {
        let mut config = Config::defaults();
        config.uagents.seed = "uagents-outbound-test-node".into();
        config
    }

    /// Each malformed body is refused before anything is signed or sent
    /// (the URL is unroutable, so a send would fail differently).
    #[tokio::test]
    async fn a_plugin_s_malformed_message_is_refused_naming_the_field() {
        let peer = AgentIdentity::from_seed(PEER_SEED).unwrap().address().to_string();
        let schema = json!({"title": "Message", "type": "object"});
        let cases = [
            (json!({"schema": schema, "message": {}}), "`target`"),
            (
                json!({"target": "agent1nope", "schema": schema, "message": {}}),
                "`target`",
            ),
            (json!({"target": peer, "message": {}}), "`schema`"),
            (
                json!({"target": peer, "schema_digest": "model:12", "message": {}}),
                "`schema_digest`",
            ),
            (
                json!({"target": peer, "schema": schema, "schema_digest": "model:12", "message": {}}),
                "one of them",
            ),
            (
                json!({"target": peer, "schema": schema, "message": "hi"}),
                "`message`",
            ),
            (
                json!({"target": peer, "schema": schema, "message": {}, "sync": "yes"}),
                "`sync`",
            ),
        ];
        for (body, named) in cases {
            let error = outbound(&config_with_seed(), "http://0.0.0.0:1/submit", &body)
                .await
                .expect_err("refused");
            assert!(error.contains(named), "{body}: {error}");
        }
    }

    /// `uagents.peers` decides before the Almanac is asked (its API here is
    /// unroutable, so a lookup would fail); without either there is no endpoint.
    #[tokio::test]
    async fn the_operator_s_peer_table_comes_before_the_almanac() {
        let peer = AgentIdentity::from_seed(PEER_SEED).unwrap().address().to_string();
        let mut config = Config::defaults();
        let almanac = Resolver::new("http://0.0.0.0:1");
        let error = endpoint_for(&peer, &config, None).await.unwrap_err();
        assert!(matches!(error, EndpointError::NoAlmanac { .. }), "{error}");
        assert!(
            endpoint_for(&peer, &config, Some(&almanac))
                .await
                .unwrap_err()
                .to_string()
                .starts_with("Almanac lookup failed")
        );
        config
            .uagents
            .peers
            .insert(peer.clone(), "http://127.0.0.1:9/submit".into());
        for almanac in [None, Some(&almanac)] {
            assert_eq!(
                endpoint_for(&peer, &config, almanac).await.unwrap(),
                "http://127.0.0.1:9/submit"
            );
        }
    }

    #[test]
    fn without_a_seed_or_its_file_the_node_has_no_identity_to_send_as() {
        let data = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.data_dir = data.path().to_path_buf();
        let error = sending_identity(&config).expect_err("no identity");
        assert!(error.contains("uagents.seed"), "{error}");
        std::fs::write(data.path().join(SEED_FILE), "a generated seed\n").unwrap();
        let from_file = sending_identity(&config).unwrap();
        assert_eq!(
            from_file.address(),
            AgentIdentity::from_seed("a generated seed").unwrap().address()
        );
    }

    #[test]
    fn a_sent_message_is_signed_by_the_node_and_its_reply_is_checked() {
        let node = AgentIdentity::from_seed("uagents-outbound-test-node").unwrap();
        let peer = AgentIdentity::from_seed(PEER_SEED).unwrap();
        let schema = json!({"title": "Message", "type": "object"});
        let digest = crate::crypto::uagents::schema_digest(&schema);
        let sent = message_envelope(&node, peer.address(), digest.clone(), &json!({"text": "hi"}), 30);
        sent.verify().unwrap();
        assert_eq!(sent.decode_payload().unwrap(), r#"{"text":"hi"}"#);
        let mut reply = message_envelope(&peer, node.address(), digest, &json!({"text": "yes"}), 30);
        assert!(
            check_reply(&sent, &reply)
                .unwrap_err()
                .contains("another session")
        );
        reply.session = sent.session.clone();
        reply.sign(&peer);
        let summary = check_reply(&sent, &reply).unwrap();
        assert_eq!(summary["message"], json!({"text": "yes"}));
        assert_eq!(summary["verified"], true);
        reply.payload = None;
        assert!(check_reply(&sent, &reply).unwrap_err().contains("verify"));
    }
}
