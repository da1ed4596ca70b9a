//! The ceiling of row 1: a bare axum handler returning, for every POST, the
//! exact bytes the node answers, in the same process layout as the node (its
//! own process, tokio's default multi-threaded runtime, one loopback listener).
//!
//! With a certificate and key (row 17) it serves the same handler over HTTPS:
//! `axum::serve` cannot do TLS, so it is the bare minimum the node's TLS
//! listener does too (host/src/listener): a tokio-rustls accept loop on the
//! node's rustls build (ring provider, default protocol versions, ALPN
//! `http/1.1` only), the handshake bounded by the node's default header timeout,
//! then hyper's HTTP/1.1 connection builder with the same header-read timeout
//! and keep-alive, on a TCP_NODELAY socket. No connection caps, body guards or
//! certificate reloading: that is the node's own work, which the row measures.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The node's default `http.header_timeout_ms`, which also bounds its TLS handshakes.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve on `port`; over TLS when `tls` names a PEM certificate chain and its key.
pub fn serve(port: u16, body_file: &Path, tls: Option<(&Path, &Path)>) -> Result<()> {
    let reply = Bytes::from(std::fs::read(body_file)?);
    let acceptor = tls.map(|(cert, key)| acceptor(cert, key)).transpose()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let handler = move |body: Bytes| {
            let reply = reply.clone();
            async move {
                // Read the request like the node does, answer the same bytes.
                std::hint::black_box(body.len());
                ([(header::CONTENT_TYPE, "application/json")], reply).into_response()
            }
        };
        let app = Router::new().fallback(post(handler));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        match acceptor {
            None => {
                println!("ceiling listening on http://127.0.0.1:{port}");
                axum::serve(listener, app).await?;
            }
            Some(acceptor) => {
                println!("ceiling listening on https://127.0.0.1:{port}");
                serve_tls(listener, app, acceptor).await;
            }
        }
        anyhow::Ok(())
    })
}

fn acceptor(cert_file: &Path, key_file: &Path) -> Result<TlsAcceptor> {
    let chain = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading the certificate chain {}", cert_file.display()))?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .with_context(|| format!("reading the private key {}", key_file.display()))?;
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .context("the certificate and key")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

async fn serve_tls(listener: TcpListener, app: Router, acceptor: TlsAcceptor) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            // Out of file descriptors or a connection reset before accept: as the node does.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let Ok(Ok(stream)) = tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(tcp)).await else {
                return;
            };
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
