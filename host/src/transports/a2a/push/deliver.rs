//! The deliverer: one background loop per node that reads the outbox in key
//! order and POSTs what is owed, as `a2a-sdk`'s push sender does (the
//! `StreamResponse` as JSON, `X-A2A-Notification-Token`, `Authorization`),
//! through the node's one outbound client ([`http_client::post`]: its
//! timeout, no redirects followed, private addresses refused where it
//! connects).
//!
//! - **In order per webhook**: only the first record of each webhook is
//!   attempted, and the next only once it is settled, as the SDK awaits each
//!   send before the next event.
//! - **One node per attempt**: a record is claimed by compare-and-swap before
//!   it is sent, so of a fleet sharing the store one node attempts it; a claim
//!   lapses (the node died mid-attempt) after the outbound timeout and a margin.
//! - **At least once**: a record goes only after a 2xx (or a final refusal),
//!   so a node killed between the webhook's answer and the removal sends it again.
//! - **Retried** on a timeout, a connection failure, 3xx, 408, 425, 429 and
//!   5xx, after `a2a.push_retry_initial_ms` doubling (±20 %) up to
//!   `a2a.push_retry_max_interval_ms` (a `Retry-After` within that is
//!   honoured), for `a2a.push_retry_for_ms` from when it was owed; another 4xx
//!   is final. The policy is checked again before each attempt: a host taken
//!   off `outbound.allowed_hosts` gets nothing more.
//! - **Start-up**: tasks with webhooks that a killed node left running are
//!   read once ([`A2aState::load`] stores such an orphan failed, which owes
//!   its webhooks that end), so nobody has to ask for them first.
//!
//! Each outcome is counted in `agora_a2a_push_deliveries_total{outcome}`, and
//! the outbox's size at each look in `agora_a2a_push_pending`.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::{Claim, Delivery, Owed, StoredConfig, check_url, closing_events, config_key};
use crate::metrics::OutcomeLabels;
use crate::models::a2a::StreamResponse;
use crate::peers::http_client::{self, ClientError};
use crate::store::{Collection, now_ms};
use crate::transports::a2a::error::A2aError;
use crate::transports::a2a::state::{A2aState, Shared};

/// Outbox records read per look: the webhooks served in one round.
const SCAN_LIMIT: usize = 1024;
/// Tasks with webhooks read at start-up.
const STARTUP_TASKS: usize = 4096;
/// What a webhook may answer: its body is not read, only its status.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// How much longer than the outbound timeout a claim holds.
const CLAIM_MARGIN_MS: u64 = 5_000;
/// The longest wait between two looks at the outbox.
const MAX_TICK_MS: u64 = 1_000;

/// Webhooks (`task \0 config`) this node is attempting now.
type InFlight = Arc<Mutex<HashSet<String>>>;

/// Run the deliverer in the node's background, when push is on.
pub fn start(shared: &Shared) {
    if !shared.node.config.a2a.push_enabled {
        return;
    }
    shared
        .node
        .background
        .spawn("a2a.push", run(Arc::downgrade(shared)));
}

async fn run(shared: std::sync::Weak<A2aState>) {
    let Some(first) = shared.upgrade() else {
        return;
    };
    fail_orphans(&first).await;
    let config = &first.node.config.a2a;
    let tick = Duration::from_millis(config.push_retry_initial_ms.min(MAX_TICK_MS));
    let slots = Arc::new(Semaphore::new(config.push_max_concurrent));
    drop(first);
    let in_flight = InFlight::default();
    loop {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if let Err(error) = look(&shared, &in_flight, &slots).await {
            tracing::warn!(transport = "a2a", %error, "the push outbox could not be read");
        }
        tokio::select! {
            () = shared.push.wake.notified() => {}
            () = tokio::time::sleep(tick) => {}
        }
    }
}

/// Store the orphans among the tasks with webhooks failed (see the module docs).
async fn fail_orphans(shared: &Shared) {
    let store = &shared.node.store;
    let keys = match store.keys(Collection::A2aPushConfigs, b"", STARTUP_TASKS).await {
        Ok(keys) => keys,
        Err(error) => {
            tracing::warn!(transport = "a2a", %error, "push: the tasks with webhooks could not be listed");
            return;
        }
    };
    let tasks: BTreeSet<String> = keys
        .iter()
        .filter_map(|key| {
            let key = String::from_utf8_lossy(key);
            key.split_once('\0').map(|(task, _)| task.to_string())
        })
        .collect();
    for task in tasks {
        if let Err(error) = shared.load(&task).await {
            tracing::warn!(transport = "a2a", task = %task, %error, "push: a task could not be read at start-up");
        }
    }
    if let Err(error) = store.commit().await {
        tracing::warn!(transport = "a2a", %error, "push: start-up writes were not committed");
    }
}

/// One look at the outbox: start the first due delivery of each webhook not
/// in flight, as many as `a2a.push_max_concurrent` allows.
async fn look(shared: &Shared, in_flight: &InFlight, slots: &Arc<Semaphore>) -> Result<(), A2aError> {
    let store = &shared.node.store;
    let owed = store
        .records::<Delivery>(Collection::A2aPushOutbox, b"", SCAN_LIMIT)
        .await?;
    shared
        .push
        .pending
        .store(owed.len(), std::sync::atomic::Ordering::Relaxed);
    shared
        .node
        .runtime
        .metrics()
        .a2a_push_pending
        .set(i64::try_from(owed.len()).unwrap_or(i64::MAX));
    let now = now_ms();
    let mut seen = HashSet::new();
    for (key, delivery) in owed {
        let Some((webhook, _)) = key.rsplit_once('\0') else {
            continue;
        };
        // Only a webhook's first: the next waits until it is settled.
        if !seen.insert(webhook.to_string()) || in_flight.lock().contains(webhook) {
            continue;
        }
        // On a store of its own, a claim not in flight here is a dead process's.
        let claimed_elsewhere =
            store.is_shared() && delivery.claim.as_ref().is_some_and(|claim| claim.until_ms > now);
        if delivery.next_ms > now || claimed_elsewhere {
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            break;
        };
        let timeout_ms = shared.node.config.outbound.timeout_ms;
        let claimed = Delivery {
            claim: Some(Claim {
                node: crate::store::lease::node_id().to_string(),
                until_ms: now.saturating_add(timeout_ms).saturating_add(CLAIM_MARGIN_MS),
            }),
            ..delivery.clone()
        };
        let expires = expiry(shared, &delivery);
        if !store
            .update(
                Collection::A2aPushOutbox,
                key.as_bytes(),
                &delivery,
                &claimed,
                expires,
            )
            .await?
        {
            continue;
        }
        in_flight.lock().insert(webhook.to_string());
        let (shared, in_flight, webhook) = (shared.clone(), in_flight.clone(), webhook.to_string());
        shared
            .node
            .background
            .clone()
            .spawn("a2a.push_delivery", async move {
                let outcome = attempt(&shared, &key, &claimed).await;
                settle(&shared, &key, claimed, outcome).await;
                in_flight.lock().remove(&webhook);
                drop(slot);
                shared.push.wake();
            });
    }
    Ok(())
}

/// A record's expiry, the same at every write: the sweep takes what no deliverer reached.
fn expiry(shared: &A2aState, delivery: &Delivery) -> Option<u64> {
    Some(
        delivery
            .created_ms
            .saturating_add(shared.node.config.a2a.push_retry_for_ms)
            .saturating_add(60_000),
    )
}

/// How one attempt ended.
enum Outcome {
    Delivered,
    /// Worth another try; after at least this long when the webhook said so.
    Retry(Option<Duration>, String),
    /// The webhook refused it for good (a 4xx other than 408, 425, 429).
    Rejected(String),
    /// The outbound policy refuses the webhook now.
    Refused(String),
    /// Nothing to send any more (the config or the task is gone).
    Dropped(String),
    /// Not accepted within `a2a.push_retry_for_ms`.
    Expired,
}

async fn attempt(shared: &Shared, key: &str, delivery: &Delivery) -> Outcome {
    let config = &shared.node.config;
    if now_ms().saturating_sub(delivery.created_ms) > config.a2a.push_retry_for_ms {
        return Outcome::Expired;
    }
    let Some((task_id, rest)) = key.split_once('\0') else {
        return Outcome::Dropped("a malformed outbox key".into());
    };
    let Some((config_id, _)) = rest.rsplit_once('\0') else {
        return Outcome::Dropped("a malformed outbox key".into());
    };
    let store = &shared.node.store;
    // The state is durable before anyone hears of it.
    if let Err(error) = store.commit().await {
        return Outcome::Retry(None, error.to_string());
    }
    let webhook = match store
        .get::<StoredConfig>(Collection::A2aPushConfigs, &config_key(task_id, config_id))
        .await
    {
        Ok(Some(stored)) => stored.config,
        Ok(None) => return Outcome::Dropped("its config was deleted".into()),
        Err(error) => return Outcome::Retry(None, error.to_string()),
    };
    if let Err(error) = check_url(shared, &webhook.url) {
        return Outcome::Refused(error.to_string());
    }
    let body = match render(shared, task_id, &delivery.owed).await {
        Ok(Some(body)) => body,
        Ok(None) => return Outcome::Dropped("the task is gone".into()),
        Err(error) => return Outcome::Retry(None, error.to_string()),
    };
    let authorization = webhook.authorization();
    let mut headers = vec![("content-type", "application/json")];
    if !webhook.token.is_empty() {
        headers.push(("x-a2a-notification-token", webhook.token.as_str()));
    }
    if let Some(authorization) = &authorization {
        headers.push(("authorization", authorization.as_str()));
    }
    let timeout = Duration::from_millis(config.outbound.timeout_ms);
    match http_client::post(&webhook.url, &headers, body, timeout, MAX_RESPONSE_BYTES).await {
        Ok(response) => by_status(response.status, retry_after(&response.headers)),
        Err(
            error @ (ClientError::InvalidUrl(_)
            | ClientError::HostNotAllowed(_)
            | ClientError::InternalAddress(_)),
        ) => Outcome::Refused(error.to_string()),
        Err(error) => Outcome::Retry(None, error.to_string()),
    }
}

/// The body owed: the event itself, or the end's artifact read from the task.
async fn render(shared: &Shared, task_id: &str, owed: &Owed) -> Result<Option<Vec<u8>>, A2aError> {
    match owed {
        Owed::Event(event) => Ok(Some(serde_json::to_vec(event)?)),
        Owed::Artifact { index } => {
            let Some(task) = shared.load(task_id).await? else {
                return Ok(None);
            };
            let event = closing_events(&task)
                .into_iter()
                .nth(*index)
                .filter(|event| matches!(event, StreamResponse::ArtifactUpdate(_)));
            Ok(event.map(|event| serde_json::to_vec(&event)).transpose()?)
        }
    }
}

/// A webhook's answer as the SDK's sender reads it (`raise_for_status`: any
/// non-2xx failed), split into what is worth a retry and what is final.
fn by_status(status: u16, retry_after: Option<Duration>) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        408 | 425 | 429 => Outcome::Retry(retry_after, format!("the webhook answered {status}")),
        400..=499 => Outcome::Rejected(format!("the webhook answered {status}")),
        _ => Outcome::Retry(retry_after, format!("the webhook answered {status}")),
    }
}

/// `Retry-After` in seconds, the only form a webhook is likely to send.
fn retry_after(headers: &axum::http::HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(axum::http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

/// The delay before attempt `attempts + 1`: doubling from the initial delay up
/// to the longest interval, ±20 % so a fleet's retries do not come in step.
fn backoff(shared: &A2aState, attempts: u32, asked: Option<Duration>) -> u64 {
    let config = &shared.node.config.a2a;
    let doubled = config
        .push_retry_initial_ms
        .saturating_mul(1u64 << attempts.saturating_sub(1).min(32));
    let base = doubled.min(config.push_retry_max_interval_ms);
    let jitter = 0.8 + 0.4 * rand::random::<f64>();
    let delay = (base as f64 * jitter) as u64;
    let asked = asked.map_or(0, |asked| u64::try_from(asked.as_millis()).unwrap_or(u64::MAX));
    delay.max(asked.min(config.push_retry_max_interval_ms))
}

/// Remove the record, or put it back for a later attempt; count the outcome.
async fn settle(shared: &Shared, key: &str, claimed: Delivery, outcome: Outcome) {
    let store = &shared.node.store;
    let (label, why) = match outcome {
        Outcome::Delivered => ("delivered", None),
        Outcome::Retry(asked, why) => {
            let attempts = claimed.attempts.saturating_add(1);
            let next = Delivery {
                attempts,
                next_ms: now_ms().saturating_add(backoff(shared, attempts, asked)),
                claim: None,
                ..claimed.clone()
            };
            let expires = expiry(shared, &claimed);
            if let Err(error) = store
                .update(
                    Collection::A2aPushOutbox,
                    key.as_bytes(),
                    &claimed,
                    &next,
                    expires,
                )
                .await
            {
                tracing::warn!(transport = "a2a", %error, "push: a retry was not recorded");
            }
            tracing::debug!(transport = "a2a", attempts, %why, "push delivery failed; retried later");
            count(shared, "retried", 1);
            return;
        }
        Outcome::Rejected(why) => ("rejected", Some(why)),
        Outcome::Refused(why) => ("refused", Some(why)),
        Outcome::Dropped(why) => ("dropped", Some(why)),
        Outcome::Expired => (
            "expired",
            Some("not accepted within a2a.push_retry_for_ms".into()),
        ),
    };
    if let Some(why) = why {
        tracing::warn!(transport = "a2a", outcome = label, %why, "push delivery given up");
    }
    // Made durable at once: a restart sends again only what was not settled.
    let removed = match store.remove(Collection::A2aPushOutbox, key.as_bytes()).await {
        Ok(_) => store.commit().await,
        Err(error) => Err(error),
    };
    if let Err(error) = removed {
        tracing::warn!(transport = "a2a", %error, "push: a settled delivery was not removed");
    }
    count(shared, label, 1);
}

/// Count `n` deliveries that ended so.
pub(super) fn count(shared: &A2aState, outcome: &str, n: u64) {
    shared
        .node
        .runtime
        .metrics()
        .a2a_push_deliveries
        .get_or_create(&OutcomeLabels::new(outcome))
        .inc_by(n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhooks_answer_is_final_or_retried_as_the_module_says() {
        for status in [200, 202, 299] {
            assert!(matches!(by_status(status, None), Outcome::Delivered), "{status}");
        }
        for status in [301, 408, 425, 429, 500, 503] {
            assert!(matches!(by_status(status, None), Outcome::Retry(..)), "{status}");
        }
        for status in [400, 401, 404, 410] {
            assert!(
                matches!(by_status(status, None), Outcome::Rejected(_)),
                "{status}"
            );
        }
    }
}
