//! TLS to the database: one connector, used by the pool and by the fleet bus's
//! listening connection alike, built from the node's one client policy
//! ([`crate::crypto::trust`]: rustls, ring, no OpenSSL).
//!
//! The tokio-postgres glue is `tokio-postgres-rustls` (it also gives SCRAM's
//! `tls-server-end-point` channel binding); what it cannot know is libpq's
//! `sslmode`, which is read from the URL by `config::store` and turned here
//! into the rustls verifier:
//!
//! | sslmode | the server's certificate |
//! |---|---|
//! | `disable` | no TLS at all |
//! | `require` | not checked (libpq's meaning); checked as `verify-ca` when `store.postgres_ca_file` is set, as libpq does with a root file |
//! | `verify-ca` | must chain to a trusted CA; any host name |
//! | `verify-full` | must chain to a trusted CA and be valid for the URL's host |
//!
//! "Trusted" is `store.postgres_ca_file` alone when it is set (a database's CA
//! vouches for nothing else, and a public CA should not vouch for it), else the
//! node's outbound trust: the system's roots plus `tls.ca_file`. tokio-postgres
//! then runs in its own `require` mode for every mode but `disable`, so a
//! server that declines TLS is refused rather than spoken to in plaintext.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::Socket;
use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;
pub(super) use tokio_postgres_rustls::MakeRustlsConnect as Connector;

use crate::config::{SslMode, StoreConfig, is_loopback_host};
use crate::crypto::trust::{self, TrustError};
use crate::store::{Result, StoreError};

/// The stream a connection made by the [`Connector`] runs on.
pub(super) type Stream = <Connector as MakeTlsConnect<Socket>>::Stream;

/// What tokio-postgres says when the server answers the TLS request with "no".
const NO_TLS_ON_SERVER: &str = "server does not support TLS";

/// The URL's mode, or when it gave none, the default for its hosts.
pub(super) fn mode(given: Option<SslMode>, config: &tokio_postgres::Config) -> SslMode {
    given.unwrap_or_else(|| SslMode::default_for(every_host_is_local(config)))
}

/// Whether every address the pool may dial is this machine (a loopback host or
/// a Unix socket; where `hostaddr` is given, that is where the connection goes).
fn every_host_is_local(config: &tokio_postgres::Config) -> bool {
    let hosts_local = config.get_hosts().iter().all(|host| match host {
        Host::Tcp(name) => is_loopback_host(name),
        Host::Unix(_) => true,
    });
    hosts_local && config.get_hostaddrs().iter().all(|addr| addr.is_loopback())
}

/// The connector for `mode`, trusting and presenting what `store` names.
pub(super) fn connector(store: &StoreConfig, outbound_ca_file: &Path, mode: SslMode) -> Result<Connector> {
    let builder = trust::builder().map_err(setup_error)?;
    let verifying = match mode {
        // Never used for a handshake: tokio-postgres does not ask for TLS.
        SslMode::Disable => builder.with_root_certificates(RootCertStore::empty()),
        SslMode::VerifyFull => builder.with_root_certificates(roots(store, outbound_ca_file)?),
        SslMode::VerifyCa => builder
            .dangerous()
            .with_custom_certificate_verifier(ChainOnly::new(Some(roots(store, outbound_ca_file)?))),
        SslMode::Require if has(&store.postgres_ca_file) => builder
            .dangerous()
            .with_custom_certificate_verifier(ChainOnly::new(Some(roots(store, outbound_ca_file)?))),
        SslMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(ChainOnly::new(None)),
    };
    let config = if mode != SslMode::Disable && has(&store.postgres_client_cert_file) {
        let chain = file(
            "store.postgres_client_cert_file",
            trust::read_certificates(&store.postgres_client_cert_file),
        )?;
        let key = file(
            "store.postgres_client_key_file",
            trust::read_private_key(&store.postgres_client_key_file),
        )?;
        verifying.with_client_auth_cert(chain, key).map_err(|e| {
            StoreError::Database(format!(
                "store.postgres_client_cert_file and store.postgres_client_key_file: {e}"
            ))
        })?
    } else {
        verifying.with_no_client_auth()
    };
    Ok(Connector::new(config))
}

/// What the database's certificate must chain to (see the module doc).
fn roots(store: &StoreConfig, outbound_ca_file: &Path) -> Result<RootCertStore> {
    if has(&store.postgres_ca_file) {
        let certs = file(
            "store.postgres_ca_file",
            trust::read_certificates(&store.postgres_ca_file),
        )?;
        return Ok(trust::only_roots(&certs, "store.postgres_ca_file"));
    }
    let extra = if has(outbound_ca_file) {
        file("tls.ca_file", trust::read_certificates(outbound_ca_file))?
    } else {
        Vec::new()
    };
    Ok(trust::system_roots_and(&extra, "tls.ca_file"))
}

fn has(path: &Path) -> bool {
    !path.as_os_str().is_empty()
}

/// A file's failure, naming the key that named the file.
fn file<T>(key: &str, read: std::result::Result<T, TrustError>) -> Result<T> {
    read.map_err(|error| match error {
        TrustError::File { path, reason } => StoreError::Database(format!("{key} {path}: {reason}")),
        other => setup_error(other),
    })
}

fn setup_error(error: TrustError) -> StoreError {
    StoreError::Database(format!("TLS to the database: {error}"))
}

/// A failed connection's TLS cause, in words naming what to change, if it was one.
pub(super) fn failure(error: &tokio_postgres::Error) -> Option<String> {
    if let Some(reason) = trust::failure_reason(error, "store.postgres_ca_file") {
        return Some(format!("TLS to the database failed: {reason}"));
    }
    let declined = std::iter::successors(Some(error as &(dyn std::error::Error + 'static)), |current| {
        current.source()
    })
    .any(|current| current.to_string() == NO_TLS_ON_SERVER);
    declined.then(|| {
        "the database server does not offer TLS, which the URL's sslmode requires \
         (turn ssl on in PostgreSQL, or set sslmode=disable for a database on this machine)"
            .to_string()
    })
}

/// `verify-ca`: the chain is checked against `roots`, the host name is not.
/// Without roots (`require`), no certificate is checked at all. Either way the
/// handshake's signatures are, so the session is bound to the presented key.
#[derive(Debug)]
struct ChainOnly {
    roots: Option<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ChainOnly {
    fn new(roots: Option<RootCertStore>) -> Arc<ChainOnly> {
        Arc::new(ChainOnly {
            roots,
            provider: trust::provider(),
        })
    }
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_mode(url: &str) -> SslMode {
        mode(None, &url.parse().expect("a URL"))
    }

    #[test]
    fn without_sslmode_a_remote_host_is_verified_in_full_and_loopback_is_plain() {
        assert_eq!(default_mode("postgres://a@db.internal/x"), SslMode::VerifyFull);
        assert_eq!(default_mode("postgres://a@127.0.0.1:5432/x"), SslMode::Disable);
        assert_eq!(default_mode("postgres://a@localhost/x"), SslMode::Disable);
        assert_eq!(default_mode("postgres://a@[::1]:5432/x"), SslMode::Disable);
        assert_eq!(
            default_mode("postgres://a@%2Frun%2Fpostgresql/x"),
            SslMode::Disable
        );
        // One remote host among several is enough to verify them all.
        assert_eq!(
            default_mode("postgres://a@localhost,db.internal/x"),
            SslMode::VerifyFull
        );
        assert_eq!(
            default_mode("postgres://a@localhost/x?hostaddr=10.0.0.5"),
            SslMode::VerifyFull
        );
        let url: tokio_postgres::Config = "postgres://a@db.internal/x".parse().unwrap();
        assert_eq!(mode(Some(SslMode::Disable), &url), SslMode::Disable);
    }
}
