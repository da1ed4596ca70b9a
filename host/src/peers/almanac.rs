//! The Almanac API, as uagents 0.26.1 uses it: how uAgents find each other.
//!
//! - Registration (`AlmanacApiRegistrationPolicy`): `POST {almanac_api}/agents`
//!   with an `AgentRegistrationAttestation` — `agent_identifier`
//!   (`agent://agent1…`), `protocols`, `endpoints` (`[{url, weight}]`),
//!   `metadata`, `timestamp` (Unix seconds) and `signature`: the agent's
//!   secp256k1 signature (bech32 `sig1…`) over the SHA-256 of every other
//!   field dumped as Python's `json.dumps(…, sort_keys=True, separators=(",",
//!   ":"))`. Any 2xx is success. uagents registers again every hour
//!   (`REGISTRATION_UPDATE_INTERVAL_SECONDS`) and retries a failure after 60 s;
//!   the node does the same, with doubling pauses from 1 s up to those 60 s, and
//!   registers at once when its plugins' protocol digests change.
//! - Resolution (`AlmanacApiResolver`): `GET {almanac_api}/agents/{address}`;
//!   200 with an `expiry` and `endpoints` (`[{url, weight}]`) is a record, any
//!   other answer none. The library looks up every send; the node caches an
//!   answer until the record's expiry (at most [`MAX_TTL`]) and a miss for
//!   [`MISS_TTL`], in at most [`CACHE_ENTRIES`] entries, so that senders the
//!   node has never heard of cannot make it ask the API for each envelope.
//!
//! The node has one [`Resolver`] ([`node_resolver`], built at start-up): the
//! uAgents transport's replies and plugins' `host.outbound` messages to a bare
//! address share it and its cache.
//!
//! The API's URL is configuration, so it needs no `outbound.allowed_hosts`
//! entry; the endpoints it returns are what other agents registered, so a
//! reply or a plugin's message goes to one only as [`check_reply_endpoint`] allows: any public
//! address (the Almanac exists to introduce peers the operator never listed),
//! but an internal one only as the operator allowed it, since otherwise any
//! agent could register `http://127.0.0.1:…` and make the node POST inside its
//! own network.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::http_client::{self, ClientError};
use crate::config::Config;
use crate::crypto::pyjson;
use crate::crypto::uagents::AgentIdentity;

/// uagents' `REGISTRATION_UPDATE_INTERVAL_SECONDS`.
pub const REGISTER_INTERVAL: Duration = Duration::from_secs(3600);
/// First pause after a failed registration; doubled up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// uagents' `REGISTRATION_RETRY_INTERVAL_SECONDS`.
const RETRY_MAX: Duration = Duration::from_secs(60);
/// How often the registration task looks for changed protocol digests.
const DIGEST_CHECK: Duration = Duration::from_secs(1);
/// uagents' `ALMANAC_RESOLVE_TIMEOUT_SECONDS` (registration allows 1 s; a node
/// on a slower link should not fail where a lookup would pass).
const API_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Longest a resolved record is trusted without asking again.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// How long "not registered" (or an unusable answer) is remembered.
pub const MISS_TTL: Duration = Duration::from_secs(60);
/// Addresses remembered at once; beyond it the entry expiring first goes.
pub const CACHE_ENTRIES: usize = 1024;
/// uagents' `DEFAULT_MAX_ENDPOINTS`.
const MAX_ENDPOINTS: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum AlmanacError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{url} refused with HTTP {status}: {body}")]
    Refused { url: String, status: u16, body: String },
}

fn refused(url: String, response: &http_client::HttpResponse) -> AlmanacError {
    AlmanacError::Refused {
        url,
        status: response.status,
        body: String::from_utf8_lossy(&response.body)
            .chars()
            .take(256)
            .collect(),
    }
}

/// Check an envelope (a reply, or a plugin's message) may go to `url`, an endpoint the Almanac gave: one
/// `outbound.allowed_hosts` lists; else, unless
/// `uagents.almanac_replies_allowed_hosts_only`, any public address or one in
/// `outbound.allowed_private` (a name's addresses are checked when connecting).
pub fn check_reply_endpoint(url: &str, config: &Config) -> Result<url::Url, ClientError> {
    http_client::check_destination(
        url,
        &config.outbound.allowed_hosts,
        config.uagents.almanac_replies_allowed_hosts_only,
    )
}

/// `{almanac_api}` + `path`, without a doubled slash.
fn api_url(api: &str, path: &str) -> String {
    format!("{}{path}", api.trim_end_matches('/'))
}

/// The signed attestation uagents' `AgentRegistrationAttestation.sign` produces.
pub fn attestation(identity: &AgentIdentity, endpoint: &str, protocols: &[String], timestamp: u64) -> Value {
    let mut fields = json!({
        "agent_identifier": format!("agent://{}", identity.address()),
        "protocols": protocols,
        "endpoints": [{"url": endpoint, "weight": 1}],
        "metadata": null,
        "timestamp": timestamp,
    });
    let digest: [u8; 32] = Sha256::digest(pyjson::dumps_sorted_compact(&fields).as_bytes()).into();
    fields["signature"] = Value::String(identity.sign_digest(&digest));
    fields
}

/// Register once: POST the attestation to `{almanac_api}/agents`.
pub async fn register(api: &str, attestation: &Value) -> Result<(), AlmanacError> {
    let url = api_url(api, "/agents");
    let response = http_client::post(
        &url,
        &[("content-type", "application/json")],
        attestation.to_string().into_bytes(),
        API_TIMEOUT,
        MAX_ANSWER_BYTES,
    )
    .await?;
    if (200..300).contains(&response.status) {
        Ok(())
    } else {
        Err(refused(url, &response))
    }
}

/// Keep the node registered for as long as it runs: as soon as `protocols()`
/// knows the digests, every [`REGISTER_INTERVAL`], when they change, and after
/// a failure with doubling pauses. Never returns an error; every outcome is logged.
///
/// `protocols()` is `None` while the plugins are still loading at start-up: a
/// registration then would tell peers the node speaks nothing.
pub async fn keep_registered<F>(api: String, identity: Arc<AgentIdentity>, endpoint: String, protocols: F)
where
    F: Fn() -> Option<Vec<String>> + Send + 'static,
{
    let mut pause = RETRY_FIRST;
    loop {
        let registered = loop {
            match protocols() {
                Some(digests) => break digests,
                None => tokio::time::sleep(DIGEST_CHECK).await,
            }
        };
        let body = attestation(&identity, &endpoint, &registered, crate::store::now_ms() / 1000);
        let wait = match register(&api, &body).await {
            Ok(()) => {
                tracing::info!(transport = "uagents", %api, %endpoint, protocols = ?registered, "registered in the Almanac");
                pause = RETRY_FIRST;
                REGISTER_INTERVAL
            }
            Err(error) => {
                let wait = pause;
                tracing::warn!(transport = "uagents", %api, %error, retry_in_secs = wait.as_secs(), "Almanac registration failed; will retry");
                pause = (pause * 2).min(RETRY_MAX);
                wait
            }
        };
        let due = Instant::now() + wait;
        while Instant::now() < due {
            tokio::time::sleep(DIGEST_CHECK.min(due - Instant::now())).await;
            if protocols().is_some_and(|now| now != registered) {
                tracing::info!(
                    transport = "uagents",
                    "protocol digests changed; registering again"
                );
                break;
            }
        }
    }
}

struct Entry {
    endpoints: Vec<String>,
    until: Instant,
}

/// The node's resolver, when `uagents.almanac_api` is set: built once, so
/// everything that resolves shares one cache (and one lookup per address).
pub fn node_resolver(config: &Config) -> Option<Arc<Resolver>> {
    let api = &config.uagents.almanac_api;
    (!api.is_empty()).then(|| Arc::new(Resolver::new(api)))
}

/// Address → endpoints through the Almanac API, with a bounded cache.
pub struct Resolver {
    api: String,
    cache: Mutex<HashMap<String, Entry>>,
    /// One lookup per address at a time: envelopes from one unknown sender that
    /// arrive together wait for the first one's answer instead of each asking.
    in_flight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Resolver {
    pub fn new(api: &str) -> Resolver {
        Resolver {
            api: api.to_string(),
            cache: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// The endpoints registered for `address`, best weight first; empty when it
    /// has none. A network failure is an error and is not cached.
    pub async fn resolve(&self, address: &str) -> Result<Vec<String>, AlmanacError> {
        if let Some(endpoints) = self.cached_endpoints(address) {
            return Ok(endpoints);
        }
        let gate = self
            .in_flight
            .lock()
            .entry(address.to_string())
            .or_default()
            .clone();
        let _turn = gate.lock().await;
        if let Some(endpoints) = self.cached_endpoints(address) {
            return Ok(endpoints);
        }
        let answer = self.lookup(address).await;
        if let Ok((endpoints, ttl)) = &answer {
            tracing::debug!(transport = "uagents", %address, ?endpoints, ttl_secs = ttl.as_secs(), "resolved through the Almanac");
            self.remember(address, endpoints.clone(), Instant::now() + *ttl);
        }
        // Only now: whoever waits on the gate, or comes later, finds the cache filled
        // (or, after a failure, asks again).
        self.in_flight.lock().remove(address);
        answer.map(|(endpoints, _)| endpoints)
    }

    fn cached_endpoints(&self, address: &str) -> Option<Vec<String>> {
        let now = Instant::now();
        self.cache
            .lock()
            .get(address)
            .filter(|e| e.until > now)
            .map(|e| e.endpoints.clone())
    }

    async fn lookup(&self, address: &str) -> Result<(Vec<String>, Duration), AlmanacError> {
        let url = api_url(&self.api, &format!("/agents/{address}"));
        let response =
            http_client::request("GET", &url, &[], Vec::new(), API_TIMEOUT, MAX_ANSWER_BYTES).await?;
        if response.status >= 500 {
            return Err(refused(url, &response));
        }
        let record = (response.status == 200)
            .then(|| serde_json::from_slice::<Value>(&response.body).ok())
            .flatten();
        Ok(record
            .as_ref()
            .and_then(parse_record)
            .unwrap_or((Vec::new(), MISS_TTL)))
    }

    fn remember(&self, address: &str, endpoints: Vec<String>, until: Instant) {
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_ENTRIES && !cache.contains_key(address) {
            let now = Instant::now();
            cache.retain(|_, entry| entry.until > now);
            if cache.len() >= CACHE_ENTRIES {
                let first = cache.iter().min_by_key(|(_, e)| e.until).map(|(k, _)| k.clone());
                if let Some(first) = first {
                    cache.remove(&first);
                }
            }
        }
        cache.insert(address.to_string(), Entry { endpoints, until });
    }

    #[cfg(test)]
    fn cached(&self) -> usize {
        self.cache.lock().len()
    }
}

/// A record's endpoints (highest weight first, at most [`MAX_ENDPOINTS`]) and
/// how long to trust them; `None` when it is not a live record (no `expiry`,
/// an expiry passed, no endpoints), as uagents' resolver reads it.
fn parse_record(record: &Value) -> Option<(Vec<String>, Duration)> {
    let expiry = record.get("expiry")?.as_str()?;
    let ttl = match time::OffsetDateTime::parse(expiry, &time::format_description::well_known::Rfc3339) {
        Ok(at) => {
            let left = at - time::OffsetDateTime::now_utc();
            if left <= time::Duration::ZERO {
                return None;
            }
            Duration::try_from(left).unwrap_or(MAX_TTL).min(MAX_TTL)
        }
        // Present but not a form we read (uagents only asks that it is there).
        Err(_) => MISS_TTL,
    };
    let mut endpoints: Vec<(f64, String)> = record
        .get("endpoints")?
        .as_array()?
        .iter()
        .filter_map(|e| {
            let url = e.get("url")?.as_str()?.to_string();
            let weight = e.get("weight").and_then(Value::as_f64).unwrap_or(1.0);
            Some((weight, url))
        })
        .collect();
    if endpoints.is_empty() {
        return None;
    }
    endpoints.sort_by(|a, b| b.0.total_cmp(&a.0));
    endpoints.truncate(MAX_ENDPOINTS);
    Some((endpoints.into_iter().map(|(_, url)| url).collect(), ttl))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::uagents::verify_digest;

    const SEED: &str = "almanac-unit-test-seed";

    #[test]
    fn the_attestation_is_signed_over_the_compact_sorted_dump_of_its_other_fields() {
        let identity = AgentIdentity::from_seed(SEED).unwrap();
        let body = attestation(
            &identity,
            "http://127.0.0.1:1/submit",
            &["proto:ab".into()],
            1_700_000_000,
        );
        let expected = format!(
            r#"{{"agent_identifier":"agent://{}","endpoints":[{{"url":"http://127.0.0.1:1/submit","weight":1}}],"metadata":null,"protocols":["proto:ab"],"timestamp":1700000000}}"#,
            identity.address()
        );
        let digest: [u8; 32] = Sha256::digest(expected.as_bytes()).into();
        let signature = body["signature"].as_str().unwrap();
        assert!(signature.starts_with("sig1"));
        verify_digest(identity.address(), &digest, signature).unwrap();
        // Any other content does not verify under it.
        let other: [u8; 32] = Sha256::digest(expected.replace("1700000000", "1700000001").as_bytes()).into();
        assert!(verify_digest(identity.address(), &other, signature).is_err());
    }

    #[test]
    fn a_reply_goes_to_a_public_or_allowed_endpoint_unless_held_to_the_allow_list() {
        let mut config = Config::defaults();
        config.outbound.allowed_hosts = vec!["127.0.0.1:9000".into()];
        let allowed = |config: &Config, url: &str| check_reply_endpoint(url, config).is_ok();
        assert!(allowed(&config, "http://127.0.0.1:9000/submit"));
        assert!(allowed(&config, "https://93.184.216.34/submit"));
        assert!(allowed(&config, "https://peer.example/submit"));
        assert!(!allowed(&config, "http://127.0.0.1:9001/submit"));
        assert!(!allowed(&config, "http://169.254.169.254/latest"));
        config.uagents.almanac_replies_allowed_hosts_only = true;
        assert!(allowed(&config, "http://127.0.0.1:9000/submit"));
        assert!(!allowed(&config, "https://93.184.216.34/submit"));
        assert!(!allowed(&config, "https://peer.example/submit"));
    }

    #[test]
    fn a_record_needs_an_expiry_ahead_and_endpoints() {
        let ahead = (time::OffsetDateTime::now_utc() + time::Duration::minutes(10))
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let record = json!({"expiry": ahead, "endpoints": [
            {"url": "http://a/submit", "weight": 1}, {"url": "http://b/submit", "weight": 5}]});
        let (endpoints, ttl) = parse_record(&record).unwrap();
        assert_eq!(endpoints, ["http://b/submit", "http://a/submit"]);
        assert!(
            ttl > Duration::from_secs(500) && ttl <= Duration::from_secs(600),
            "{ttl:?}"
        );

        let far = json!({"expiry": "2999-01-01T00:00:00+00:00", "endpoints": [{"url": "http://a/submit", "weight": 1}]});
        assert_eq!(parse_record(&far).unwrap().1, MAX_TTL);
        let past =
            json!({"expiry": "2001-01-01T00:00:00Z", "endpoints": [{"url": "http://a/submit", "weight": 1}]});
        assert!(parse_record(&past).is_none());
        assert!(parse_record(&json!({"endpoints": [{"url": "http://a/submit", "weight": 1}]})).is_none());
        assert!(parse_record(&json!({"expiry": ahead, "endpoints": []})).is_none());
    }

    #[test]
    fn the_cache_never_holds_more_than_its_cap_and_drops_the_entry_expiring_first() {
        let resolver = Resolver::new("http://127.0.0.1:1");
        let base = Instant::now() + Duration::from_secs(100);
        for i in 0..CACHE_ENTRIES + 10 {
            resolver.remember(&format!("a{i}"), Vec::new(), base + Duration::from_secs(i as u64));
        }
        assert_eq!(resolver.cached(), CACHE_ENTRIES);
        let cache = resolver.cache.lock();
        assert!(!cache.contains_key("a0") && !cache.contains_key("a9"));
        assert!(cache.contains_key("a10") && cache.contains_key(&format!("a{}", CACHE_ENTRIES + 9)));
    }
}
