//! The node's HTTP listeners, hardened for an open port.
//!
//! `axum::serve` gives no header-read timeout, no connection cap and no control
//! over what happens to a body a handler did not read, so the node runs its own
//! accept loop over hyper's HTTP/1 connection builder:
//!
//! - **Connection caps** ([`caps`]): at most `http.max_connections` open
//!   connections across every listener and `http.max_connections_per_ip` from one
//!   address. A connection over a cap is closed on arrival rather than left in the
//!   kernel's backlog, so a flood from one address cannot starve the others. The
//!   permit travels inside the socket, so an upgraded WebSocket keeps counting
//!   until it closes.
//! - **Slow clients**: the request line and headers must arrive within
//!   `http.header_timeout_ms` (hyper restarts that clock whenever a keep-alive
//!   connection waits for its next request, so it also bounds idle connections),
//!   and headers are capped at `http.max_header_bytes` (431 beyond).
//! - **Closing** ([`socket`]): a connection the node ends is closed lingering
//!   (write side first, then what the client still sends is read and dropped,
//!   within the discard bounds below), so a refusal sent while the client is still
//!   writing reaches it instead of a reset.
//! - **Bodies** ([`body`]): a body declared larger than `http.max_body_bytes` is
//!   refused before anything reads it, and every body a handler leaves unread (too
//!   large, or refused before it was read) is read and thrown away within
//!   `http.discard_body_bytes` / `http.discard_timeout_ms` before the reply goes out.
//!   A client that writes its whole body before reading (most do) then reads the
//!   protocol's own 413 instead of a broken pipe.
//! - **TLS** ([`tls`]): with `tls.cert_file` and `tls.key_file` set, every
//!   listener wraps the counted socket in TLS (handshake bounded by the header
//!   timeout) and serves HTTPS and WSS; the certificate is re-read when it changes.
//!
//! The handlers see `ConnectInfo<SocketAddr>` exactly as with
//! `into_make_service_with_connect_info`.

pub mod body;
pub mod caps;
pub mod socket;
pub mod tls;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tower::ServiceExt;

use crate::config::HttpConfig;
use crate::metrics::Metrics;

pub use body::{BodyLimits, LargerBodies};
pub use caps::ConnectionCaps;
pub use tls::{Tls, TlsError};

/// What every listener of one node shares.
#[derive(Clone)]
pub struct ListenerLimits {
    pub caps: ConnectionCaps,
    pub body: BodyLimits,
    pub header_timeout: Duration,
    pub max_header_bytes: usize,
    pub metrics: Metrics,
}

impl ListenerLimits {
    pub fn new(http: &HttpConfig, metrics: Metrics) -> ListenerLimits {
        ListenerLimits {
            caps: ConnectionCaps::new(http.max_connections, http.max_connections_per_ip, metrics.clone()),
            body: BodyLimits {
                max_body_bytes: http.max_body_bytes as u64,
                larger: Vec::new(),
                discard_bytes: http.discard_body_bytes,
                discard_timeout: Duration::from_millis(http.discard_timeout_ms),
            },
            header_timeout: Duration::from_millis(http.header_timeout_ms),
            max_header_bytes: http.max_header_bytes,
            metrics,
        }
    }

    /// These limits, with `larger` routes taking larger bodies than `http.max_body_bytes`.
    pub fn with_larger_bodies(mut self, larger: Vec<LargerBodies>) -> ListenerLimits {
        self.body.larger = larger;
        self
    }
}

/// Accept and serve connections on `listener` (over TLS when `tls` is set) until `stop` turns true, then
/// let every connection finish its in-flight request and close.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenerLimits,
    tls: Option<Tls>,
    mut stop: watch::Receiver<bool>,
) {
    let limits = Arc::new(limits);
    // Each connection task holds a sender; once `stop` is set and every task has
    // ended, `recv` returns None.
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors or a connection reset before accept:
                    // wait a little instead of spinning, and keep serving.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { stop.wait_for(|stopped| *stopped).await.map(|_| ()) } => break,
        };
        let Some(permit) = limits.caps.admit(peer.ip()) else {
            continue;
        };
        // Without TCP_NODELAY a reply written in two parts (a HAI `thinking`
        // frame, then the first chunk) waits for the client's delayed ACK: 40 ms.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        let linger = socket::Linger {
            max_bytes: limits.body.discard_bytes,
            timeout: limits.body.discard_timeout,
        };
        let counted = socket::Counted::new(tcp, permit, linger);
        let router = router.clone();
        let request_limits = limits.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let router = router.clone();
            let limits = request_limits.clone();
            async move { Ok::<_, Infallible>(handle(router, peer, &limits, request).await) }
        });
        let mut stop = stop.clone();
        let open = open_tx.clone();
        let limits = limits.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _open = open;
            let result = match tls {
                None => serve_connection(counted, service, &limits, stop).await,
                Some(tls) => match tls.accept(counted, &mut stop).await {
                    Some(stream) => serve_connection(stream, service, &limits, stop).await,
                    None => return,
                },
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    drop(open_tx);
    let _ = open_rx.recv().await;
}

/// Serve HTTP/1.1 (and upgrades) on one accepted stream, plain or TLS, until the
/// client closes or `stop` turns true and the in-flight request is done.
async fn serve_connection<S>(
    stream: S,
    service: impl hyper::service::Service<
        hyper::Request<Incoming>,
        Response = axum::response::Response,
        Error = Infallible,
        Future: Send + 'static,
    > + Send
    + 'static,
    limits: &ListenerLimits,
    mut stop: watch::Receiver<bool>,
) -> hyper::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(limits.max_header_bytes)
        .keep_alive(true);
    let connection = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => result,
        _ = async { stop.wait_for(|stopped| *stopped).await.map(|_| ()) } => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    }
}

async fn handle(
    router: Router,
    peer: SocketAddr,
    limits: &ListenerLimits,
    request: hyper::Request<Incoming>,
) -> axum::response::Response {
    let (mut parts, incoming) = request.into_parts();
    parts.extensions.insert(ConnectInfo(peer));
    let guarded = body::guard(&parts, incoming, &limits.body, &limits.metrics);
    let request = axum::http::Request::from_parts(parts, guarded.body);
    let response = match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    guarded.leftover.finish(response, &limits.body).await
}
