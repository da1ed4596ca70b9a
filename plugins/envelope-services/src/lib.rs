//! Example resources for signed Agora envelopes ("Agora Protocol Specification v1.0", signed envelopes §3–4).
//!
//! - `agora:sum:v1` (direct): `{"numbers": [..]}` → `{"sum", "count"}`.
//! - `agora:delay:v1` (direct): waits `{"ms": n}` (at most 4000) and says how long it took;
//!   a long task for clients and timeouts to be tried against.
//! - `agora:primes:v1` (negotiated): counts the primes up to `{"limit": n}`. The quote
//!   is priced by the work: 1 credit plus 1 per 10,000 numbers sieved, valid 30 s, with an
//!   ETA of 1 ms per 20,000 numbers. The host enforces budgets, offers and ACCEPT rules;
//!   this plugin only prices (`Phase::Quote`) and runs (`Phase::Execute`).

use agora_plugin_sdk::prelude::*;

struct EnvelopeServices;

const SUM: &str = "agora:sum:v1";
const DELAY: &str = "agora:delay:v1";
const PRIMES: &str = "agora:primes:v1";

const MAX_NUMBERS: usize = 100_000;
const MAX_DELAY_MS: u64 = 4_000;
const MAX_PRIME_LIMIT: u64 = 20_000_000;
const OFFER_TTL_MS: u64 = 30_000;

/// What the host sends for every phase.
#[derive(Deserialize)]
struct Request {
    resource: String,
    #[serde(default)]
    params: Value,
}

impl Plugin for EnvelopeServices {
    fn manifest() -> Manifest {
        Manifest::new("envelope-services", env!("CARGO_PKG_VERSION"))
            .description("Example signed-envelope resources: sum, delay, prime counting")
            .resource(SUM, "Adds up {\"numbers\": [..]}", false)
            .resource(DELAY, "Waits {\"ms\": n} (at most 4000) then answers", false)
            .resource(
                PRIMES,
                "Counts primes up to {\"limit\": n}; costs 1 + limit/10000 credits",
                true,
            )
    }

    fn handle(message: Message) -> Result<String, Failure> {
        let request: Request = message.json()?;
        match (message.phase, request.resource.as_str()) {
            (Phase::Handle, SUM) => sum(&request.params),
            (Phase::Handle, DELAY) => delay(&request.params),
            (Phase::Quote, PRIMES) => quote_primes(&request.params),
            (Phase::Execute, PRIMES) => count_primes(&request.params),
            (_, other) => Err(Failure::not_found(format!(
                "{other:?} is not served in this phase"
            ))),
        }
    }
}

fn sum(params: &Value) -> Result<String, Failure> {
    let numbers = params
        .get("numbers")
        .and_then(Value::as_array)
        .ok_or_else(|| Failure::bad_request("params.numbers must be an array of numbers"))?;
    if numbers.len() > MAX_NUMBERS {
        return Err(Failure::bad_request(format!("at most {MAX_NUMBERS} numbers")));
    }
    let mut total = 0.0;
    for number in numbers {
        total += number
            .as_f64()
            .ok_or_else(|| Failure::bad_request("params.numbers must hold only numbers"))?;
    }
    if !total.is_finite() {
        return Err(Failure::bad_request("the sum overflows"));
    }
    reply(json!({"sum": total, "count": numbers.len()}))
}

fn delay(params: &Value) -> Result<String, Failure> {
    let wanted = params
        .get("ms")
        .and_then(Value::as_u64)
        .ok_or_else(|| Failure::bad_request("params.ms must be a whole number of milliseconds"))?;
    if wanted > MAX_DELAY_MS {
        return Err(Failure::bad_request(format!(
            "params.ms is at most {MAX_DELAY_MS}"
        )));
    }
    let started = host::now_ms();
    while host::now_ms().saturating_sub(started) < wanted {
        core::hint::spin_loop();
    }
    reply(json!({"waited_ms": host::now_ms().saturating_sub(started)}))
}

fn prime_limit(params: &Value) -> Result<u64, Failure> {
    let limit = params
        .get("limit")
        .and_then(Value::as_u64)
        .ok_or_else(|| Failure::bad_request("params.limit must be a whole number"))?;
    if limit > MAX_PRIME_LIMIT {
        return Err(Failure::bad_request(format!(
            "params.limit is at most {MAX_PRIME_LIMIT}"
        )));
    }
    Ok(limit)
}

fn quote_primes(params: &Value) -> Result<String, Failure> {
    let limit = prime_limit(params)?;
    let cost = 1.0 + (limit as f64 / 10_000.0).ceil();
    let eta = (limit / 20_000).max(1);
    reply(json!({"cost": cost, "ttl": OFFER_TTL_MS, "eta": eta}))
}

fn count_primes(params: &Value) -> Result<String, Failure> {
    let limit = prime_limit(params)? as usize;
    if limit < 2 {
        return reply(json!({"limit": limit, "count": 0, "largest": null}));
    }
    let mut composite = vec![false; limit + 1];
    let (mut count, mut largest) = (0u64, 0usize);
    for n in 2..=limit {
        if composite[n] {
            continue;
        }
        count += 1;
        largest = n;
        let mut multiple = n.saturating_mul(n);
        while multiple <= limit {
            composite[multiple] = true;
            multiple += n;
        }
    }
    reply(json!({"limit": limit, "count": count, "largest": largest}))
}

export_plugin!(EnvelopeServices);
