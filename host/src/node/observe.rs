//! What every request on every listener passes through to be traceable and
//! counted: an `x-request-id`, a tracing span, and the HTTP metrics.
//!
//! The id is the client's when it is a sane short token (so a caller can
//! follow its own request through the log), else one the node makes; it is
//! echoed in the response. The span carries the id, the method and the
//! matched route *template* (`/agora/conversations/{id}`, never the raw path:
//! raw paths are unbounded and chosen by whoever sends them), so a plugin's log
//! lines during the call carry the request id. Bodies are never logged.
//!
//! Each transport's router is also wrapped in [`protocol`], which counts its
//! requests for the console's per-protocol charts ([`crate::metrics::recent`]).
//!
//! These layers sit outside the body limit and the timeout, so the 413s and
//! 408s the node's own layers answer are counted and logged like any other.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue, Response};
use axum::middleware::{self, Next};
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use tracing::Span;

use crate::metrics::{Metrics, UNMATCHED_ROUTE};

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Longest client-chosen request id kept; a UUID is 36.
const MAX_CLIENT_ID_LEN: usize = 64;

/// `router` with request ids, per-request spans and HTTP metrics around it.
pub fn layer(router: Router, metrics: Metrics) -> Router {
    router.layer(
        ServiceBuilder::new()
            .layer(middleware::map_request(drop_insane_request_id))
            .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
            .layer(PropagateRequestIdLayer::new(REQUEST_ID))
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(request_span)
                    .on_request(())
                    .on_response(log_response)
                    // `log_response` already logs 5xx; a failed body stream is the client's hang-up.
                    .on_failure(()),
            )
            .layer(middleware::from_fn_with_state(metrics, count)),
    )
}

/// `router`, one protocol's routes, with every request counted under `protocol`
/// for the console: a refusal (4xx) or failure (5xx) counts as an error.
pub fn protocol(protocol: &'static str, metrics: Metrics, router: Router) -> Router {
    router.layer(middleware::from_fn(move |request: Request, next: Next| {
        let metrics = metrics.clone();
        async move {
            let started = Instant::now();
            let response = next.run(request).await;
            let failed = response.status().as_u16() >= 400;
            metrics
                .recent
                .observe_request(protocol, failed, started.elapsed(), crate::vocab::now_ms());
            response
        }
    }))
}

/// A client's id is kept only as a short token of `[A-Za-z0-9._:-]`; anything
/// else (long, binary, log-forging) is replaced by one the node makes.
fn is_sane_request_id(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    (1..=MAX_CLIENT_ID_LEN).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
}

async fn drop_insane_request_id(mut request: Request) -> Request {
    let ids = request.headers().get_all(&REQUEST_ID);
    let sane = {
        let mut ids = ids.iter();
        matches!((ids.next(), ids.next()), (Some(id), None) if is_sane_request_id(id))
    };
    if !sane {
        request.headers_mut().remove(&REQUEST_ID);
    }
    request
}

fn route_of(request: &Request) -> &str {
    request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED_ROUTE, MatchedPath::as_str)
}

fn request_span(request: &Request) -> Span {
    let id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|id| id.to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "request",
        request_id = id,
        method = %request.method(),
        route = route_of(request),
        status = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    )
}

fn log_response(response: &Response<Body>, latency: Duration, span: &Span) {
    let status = response.status().as_u16();
    span.record("status", status);
    span.record("latency_ms", latency.as_millis() as u64);
    match status {
        500.. => tracing::warn!(status, "request failed"),
        400..500 => tracing::info!(status, "request refused"),
        _ => tracing::debug!(status, "request served"),
    }
}

async fn count(State(metrics): State<Metrics>, request: Request, next: Next) -> Response<Body> {
    let route = route_of(&request).to_string();
    let method = request.method().clone();
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.observe_http(
        &route,
        method.as_str(),
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_plain_tokens_are_kept_as_request_ids() {
        let sane = |text: &str| is_sane_request_id(&HeaderValue::from_str(text).unwrap());
        assert!(sane("4f1c2b7e-1111-4a4a-8b8b-0123456789ab"));
        assert!(sane("client.req_42:7"));
        assert!(!sane(""));
        assert!(!sane(&"a".repeat(65)));
        assert!(!sane("two words"));
        assert!(!sane("id\"} injected"));
        assert!(!is_sane_request_id(
            &HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap()
        ));
    }
}
