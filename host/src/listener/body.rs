//! Request bodies a handler refuses or leaves unread.
//!
//! HTTP/1 has no way to refuse a body the client is already sending except to
//! answer and close. A client that writes its whole body before reading its
//! reply (ureq, Python's http.client, most SDKs) then gets `EPIPE` or a reset and
//! never sees the 413. So the node reads and throws away what is left of a body,
//! within `http.discard_body_bytes` and `http.discard_timeout_ms`, before it
//! answers; only beyond those bounds does it close the connection after the reply.
//!
//! A body declared (`Content-Length`) larger than `http.max_body_bytes` is
//! replaced by one that fails at once with the length-limit error, so the
//! transport's own body extractor answers 413 in the protocol's own shape before
//! any authentication or parsing work. The one route that takes more (the
//! console's plugin upload, a `.wasm` of up to `plugins.max_file_mb`) is listed
//! in [`BodyLimits::larger`] by the node and checked against its own bound
//! here the same way. A client that asked `Expect:
//! 100-continue` never sends such a body: hyper only sends `100 Continue` when
//! the body is first read, and this one never is.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::header::{CONNECTION, CONTENT_LENGTH, EXPECT};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use parking_lot::Mutex;

use crate::metrics::{Metrics, ReasonLabels};

#[derive(Clone, Debug)]
pub struct BodyLimits {
    pub max_body_bytes: u64,
    /// Routes that take larger bodies than `max_body_bytes`.
    pub larger: Vec<LargerBodies>,
    pub discard_bytes: u64,
    pub discard_timeout: Duration,
}

/// Requests of `method` whose path starts with `path_prefix` may send up to `max_body_bytes`.
#[derive(Clone, Debug)]
pub struct LargerBodies {
    pub method: axum::http::Method,
    pub path_prefix: String,
    pub max_body_bytes: u64,
}

impl BodyLimits {
    /// The largest body `parts`' request may send.
    pub fn limit_for(&self, parts: &Parts) -> u64 {
        self.larger
            .iter()
            .find(|larger| parts.method == larger.method && parts.uri.path().starts_with(&larger.path_prefix))
            .map_or(self.max_body_bytes, |larger| larger.max_body_bytes)
    }
}

/// The body a handler gets, and what the listener must do with the rest once
/// the handler has answered.
pub struct Guarded {
    pub body: Body,
    pub leftover: Leftover,
}

pub enum Leftover {
    /// No body, or nothing to do.
    Nothing,
    /// The handler read from this; whatever it left unread is still in the slot.
    Shared(Arc<Mutex<Option<Incoming>>>),
    /// Declared over the limit; the handler saw a failing body instead.
    Refused {
        incoming: Incoming,
        declared: u64,
        expects_continue: bool,
    },
}

pub fn guard(parts: &Parts, incoming: Incoming, limits: &BodyLimits, metrics: &Metrics) -> Guarded {
    if incoming.is_end_stream() {
        return Guarded {
            body: Body::new(incoming),
            leftover: Leftover::Nothing,
        };
    }
    let limit = limits.limit_for(parts);
    if let Some(declared) = content_length(&parts.headers).filter(|n| *n > limit) {
        metrics
            .bodies_refused
            .get_or_create(&ReasonLabels { reason: "declared" })
            .inc();
        // `LengthLimitError` cannot be built outside http-body-util; a `Limited`
        // of zero bytes over a one-byte body yields it on the first read.
        let refusal = Limited::new(Full::new(Bytes::from_static(b"!")), 0);
        return Guarded {
            body: Body::new(refusal),
            leftover: Leftover::Refused {
                incoming,
                declared,
                expects_continue: expects_continue(&parts.headers),
            },
        };
    }
    let slot = Arc::new(Mutex::new(Some(incoming)));
    Guarded {
        body: Body::new(SharedBody(slot.clone())),
        leftover: Leftover::Shared(slot),
    }
}

impl Leftover {
    /// Discard what the handler left unread, within bounds, then hand back the
    /// response (marked `Connection: close` when the rest could not be read).
    pub async fn finish(self, mut response: Response, limits: &BodyLimits) -> Response {
        let keep_alive = match self {
            Leftover::Nothing => true,
            Leftover::Shared(slot) => {
                let rest = slot.lock().take();
                match rest {
                    Some(rest) if !rest.is_end_stream() => discard(rest, limits).await,
                    _ => true,
                }
            }
            Leftover::Refused {
                incoming,
                declared,
                expects_continue,
            } => !expects_continue && declared <= limits.discard_bytes && discard(incoming, limits).await,
        };
        if !keep_alive {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// Read and drop the rest of a body; false if it did not end within the bounds.
async fn discard(mut body: Incoming, limits: &BodyLimits) -> bool {
    let drain = async {
        let mut discarded: u64 = 0;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Some(data) = frame.data_ref() {
                discarded += data.len() as u64;
                if discarded > limits.discard_bytes {
                    return false;
                }
            }
        }
        true
    };
    tokio::time::timeout(limits.discard_timeout, drain)
        .await
        .unwrap_or(false)
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(EXPECT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim().eq_ignore_ascii_case("100-continue"))
}

/// The request body as the handler sees it; the listener keeps a handle on it
/// to discard whatever the handler did not read.
struct SharedBody(Arc<Mutex<Option<Incoming>>>);

impl HttpBody for SharedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let mut slot = self.0.lock();
        let Some(incoming) = slot.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(incoming).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            *slot = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.0.lock().as_ref().is_none_or(|body| body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.0
            .lock()
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |body| body.size_hint())
    }
}
