//! HTTPS and WSS on every listener, with the certificate re-read when it changes.
//!
//! The TLS layer sits on top of the counted, lingering socket ([`super::socket`]),
//! so the connection caps hold from the first byte and a connection the node ends
//! still closes lingering; hyper then runs on the decrypted stream exactly as on a
//! plain one (header timeout, header cap, body limits, upgrades to WebSocket).
//!
//! - **Handshake timeout**: a client that connects and never says hello would hold
//!   a connection permit forever (hyper's header clock only starts after the
//!   handshake), so the handshake must finish within `http.header_timeout_ms`.
//! - **HTTP/1.1 only** over ALPN: hyper's HTTP/2 server has no header-read timeout
//!   and its own flow-control and stream limits in place of the node's connection
//!   model, and the node's h2 stack is not built; browsers and curl negotiate
//!   http/1.1 and WebSockets stay plain HTTP/1.1 upgrades.
//! - **Rotation**: both files are read again every [`RELOAD_INTERVAL`] and compared
//!   byte for byte with what was last examined; a change is examined once two reads
//!   in a row agree, so a file caught mid-write or a pair renewed one file at a
//!   time is not refused on the way. Polling rather than `notify`:
//!   certbot and Kubernetes replace certificates by renaming symlinks or whole
//!   directories, which a watch on the files misses and a watch on the folders sees
//!   as a burst of events to debounce; two small reads a second see every kind of
//!   replacement. A pair that parses and matches is swapped in atomically
//!   ([`ServedCertificate`]): connections already open keep the session they have,
//!   new handshakes get the new certificate. A pair that does not (garbage, a key
//!   of another certificate, a file left half-written) leaves the served pair in place and is
//!   logged once, until the files change again. At start-up the same errors stop
//!   the node, naming the setting.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::RwLock;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;

use crate::config::TlsConfig;

/// How often the certificate files are read again.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct TlsError {
    /// The setting whose file is at fault (`tls.cert_file`, `tls.key_file`).
    pub key: &'static str,
    pub reason: String,
}

fn invalid(key: &'static str, reason: impl Into<String>) -> TlsError {
    TlsError {
        key,
        reason: reason.into(),
    }
}

/// The TLS side shared by every listener of one node.
#[derive(Clone)]
pub struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    handshake_timeout: Duration,
}

impl Tls {
    /// Load the pair named in `config` (an error names the setting at fault) and
    /// start re-reading it every [`RELOAD_INTERVAL`] for as long as a listener uses it.
    pub fn start(config: &TlsConfig, handshake_timeout: Duration) -> Result<Tls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let files = PairFiles {
            cert: config.cert_file.clone(),
            key: config.key_file.clone(),
        };
        let pair = files.read().map_err(|(key, error)| invalid(key, error))?;
        let served = Arc::new(ServedCertificate {
            current: RwLock::new(Arc::new(pair.certified(&provider)?)),
        });
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("tls.cert_file", format!("no TLS version available: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(served.clone());
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        tokio::spawn(reload(files, pair, provider, Arc::downgrade(&served)));
        Ok(Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            handshake_timeout,
        })
    }

    /// The TLS stream once the handshake is done; None (logged) when it fails, takes
    /// longer than the handshake timeout, or the listener stops first.
    pub async fn accept<IO>(&self, io: IO, stop: &mut watch::Receiver<bool>) -> Option<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let handshake = tokio::time::timeout(self.handshake_timeout, self.acceptor.accept(io));
        tokio::select! {
            done = handshake => match done {
                Ok(Ok(stream)) => Some(stream),
                Ok(Err(error)) => {
                    tracing::debug!(%error, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!("TLS handshake timed out");
                    None
                }
            },
            _ = stop.wait_for(|stopped| *stopped) => None,
        }
    }
}

/// The certificate new handshakes get; swapped whole when a renewal is read.
#[derive(Debug)]
struct ServedCertificate {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ServedCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

struct PairFiles {
    cert: PathBuf,
    key: PathBuf,
}

/// The two files' bytes as read together.
#[derive(PartialEq, Eq)]
struct PairBytes {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl PairFiles {
    /// Both files, or the setting whose file could not be read and why.
    fn read(&self) -> Result<PairBytes, (&'static str, String)> {
        let read = |key: &'static str, path: &Path| {
            std::fs::read(path).map_err(|e| (key, format!("cannot read {}: {e}", path.display())))
        };
        Ok(PairBytes {
            cert: read("tls.cert_file", &self.cert)?,
            key: read("tls.key_file", &self.key)?,
        })
    }
}

impl PairBytes {
    /// The chain and its signing key, checked to belong together.
    fn certified(&self, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("tls.cert_file", format!("not a PEM certificate chain: {e}")))?;
        if chain.is_empty() {
            return Err(invalid("tls.cert_file", "no PEM CERTIFICATE block in the file"));
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key)
            .map_err(|e| invalid("tls.key_file", format!("no usable PEM private key: {e}")))?;
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| invalid("tls.key_file", format!("unsupported private key: {e}")))?;
        let certified = CertifiedKey::new(chain, signing);
        certified.keys_match().map_err(|e| {
            invalid(
                "tls.key_file",
                format!("the key does not belong to the certificate in tls.cert_file: {e}"),
            )
        })?;
        Ok(certified)
    }
}

/// Re-read the pair until no listener serves it any more.
async fn reload(
    files: PairFiles,
    loaded: PairBytes,
    provider: Arc<CryptoProvider>,
    served: Weak<ServedCertificate>,
) {
    // What was last examined, accepted or not: unchanged files are not parsed or
    // logged again.
    let mut examined = loaded;
    // Changed files read once: examined only if the next read finds them the same,
    // so a pair caught half-written (or one file renewed before the other) is not
    // refused with a warning a second before it is complete.
    let mut settling: Option<PairBytes> = None;
    let mut last_read_error = None;
    let mut ticker = tokio::time::interval(RELOAD_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let Some(served) = served.upgrade() else {
            return;
        };
        let pair = match files.read() {
            Ok(pair) => pair,
            Err((key, reason)) => {
                if last_read_error.as_ref() != Some(&reason) {
                    tracing::warn!(key, %reason, "keeping the served TLS certificate");
                    last_read_error = Some(reason);
                }
                continue;
            }
        };
        last_read_error = None;
        if pair == examined {
            settling = None;
            continue;
        }
        if settling.as_ref() != Some(&pair) {
            settling = Some(pair);
            continue;
        }
        settling = None;
        match pair.certified(&provider) {
            Ok(certified) => {
                *served.current.write() = Arc::new(certified);
                tracing::info!(
                    cert_file = %files.cert.display(),
                    "TLS certificate reloaded; new connections get it"
                );
            }
            Err(error) => {
                tracing::warn!(%error, "renewed TLS certificate refused; keeping the served one");
            }
        }
        examined = pair;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(names: &[&str]) -> PairBytes {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let cert = params.self_signed(&key).unwrap();
        PairBytes {
            cert: cert.pem().into_bytes(),
            key: key.serialize_pem().into_bytes(),
        }
    }

    fn refusal(pair: &PairBytes) -> TlsError {
        match pair.certified(&rustls::crypto::ring::default_provider()) {
            Ok(_) => panic!("the pair was accepted"),
            Err(error) => error,
        }
    }

    #[test]
    fn a_matching_pair_is_accepted_with_its_chain() {
        let certified = pair(&["localhost"])
            .certified(&rustls::crypto::ring::default_provider())
            .expect("a matching pair");
        assert_eq!(certified.cert.len(), 1);
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_naming_the_key_file() {
        let one = pair(&["localhost"]);
        let other = pair(&["localhost"]);
        let error = refusal(&PairBytes {
            cert: one.cert,
            key: other.key,
        });
        assert_eq!(error.key, "tls.key_file");
        assert!(error.reason.contains("does not belong"), "{error}");
    }

    #[test]
    fn garbage_and_missing_blocks_name_the_file_at_fault() {
        let good = pair(&["localhost"]);
        for cert in [
            &b"garbage"[..],
            b"-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
        ] {
            let error = refusal(&PairBytes {
                cert: cert.to_vec(),
                key: good.key.clone(),
            });
            assert_eq!(error.key, "tls.cert_file", "{error}");
        }
        // A certificate where the key should be is no key.
        let error = refusal(&PairBytes {
            cert: good.cert.clone(),
            key: good.cert.clone(),
        });
        assert_eq!(error.key, "tls.key_file", "{error}");
    }
}
