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
//!
//! The id, the span and the metrics are one service ([`Observe`]) with one
//! future per request, not five stacked middlewares each wrapping the request
//! in its own future (two of them boxed, each with its own clock reading):
//! issue 42 measured that stack on the Agora hot path. The span's fields are
//! filled only when its level is enabled.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, Method, Response};
use axum::middleware::{self, Next};
use tracing::{Instrument as _, Span};
use uuid::Uuid;

use crate::metrics::{Metrics, UNMATCHED_ROUTE};

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Longest client-chosen request id kept; a UUID is 36.
const MAX_CLIENT_ID_LEN: usize = 64;

/// `router` with request ids, per-request spans and HTTP metrics around it.
pub fn layer(router: Router, metrics: Metrics) -> Router {
    router.layer(ObserveLayer { metrics })
}

#[derive(Clone)]
struct ObserveLayer {
    metrics: Metrics,
}

impl<S> tower::Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// One request's id, span and metrics around the route that answers it.
#[derive(Clone)]
struct Observe<S> {
    inner: S,
    metrics: Metrics,
}

impl<S> tower::Service<Request> for Observe<S>
where
    S: tower::Service<Request, Response = Response<Body>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let started = Instant::now();
        let id = keep_or_make_request_id(&mut request);
        // The template is shared with the router: cloning it copies no string.
        let route = request.extensions().get::<MatchedPath>().cloned();
        let method = request.method().clone();
        let span = request_span(&id, &method, route.as_ref());
        let answer = span.in_scope(|| self.inner.call(request));
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let Ok(mut response) = answer.instrument(span.clone()).await;
            let latency = started.elapsed();
            let route = route.as_ref().map_or(UNMATCHED_ROUTE, MatchedPath::as_str);
            metrics.observe_http(route, method.as_str(), response.status().as_u16(), latency);
            log_response(&response, latency, &span);
            response.headers_mut().insert(REQUEST_ID, id);
            Ok(response)
        })
    }
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

/// The request's id: the client's when it sent one sane id, else a new UUID,
/// written into the request so handlers and plugins see the same one.
fn keep_or_make_request_id(request: &mut Request) -> HeaderValue {
    let mut ids = request.headers().get_all(&REQUEST_ID).iter();
    if let (Some(id), None) = (ids.next(), ids.next())
        && is_sane_request_id(id)
    {
        return id.clone();
    }
    let mut text = Uuid::encode_buffer();
    let made = Uuid::new_v4().hyphenated().encode_lower(&mut text);
    let id = HeaderValue::from_str(made).unwrap_or_else(|_| HeaderValue::from_static("invalid"));
    request.headers_mut().insert(REQUEST_ID, id.clone());
    id
}

/// The request's span; disabled (and free of formatting) unless `info` is on here.
fn request_span(id: &HeaderValue, method: &Method, route: Option<&MatchedPath>) -> Span {
    tracing::info_span!(
        "request",
        request_id = id.to_str().unwrap_or_default(),
        method = %method,
        route = route.map_or(UNMATCHED_ROUTE, MatchedPath::as_str),
        status = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    )
}

fn log_response(response: &Response<Body>, latency: Duration, span: &Span) {
    let status = response.status().as_u16();
    if !span.is_disabled() {
        span.record("status", status);
        span.record("latency_ms", latency.as_millis() as u64);
    }
    match status {
        500.. => tracing::warn!(status, "request failed"),
        400..500 => tracing::info!(status, "request refused"),
        _ => tracing::debug!(status, "request served"),
    }
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
