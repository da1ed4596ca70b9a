//! The one way the node builds a TLS client: rustls with the ring provider
//! (no OpenSSL, no aws-lc), the system's trust roots — or webpki's bundled
//! roots on a system that has none — plus PEM files an operator names, and the
//! words an operator gets when a handshake fails.
//!
//! It sits here, below the store and the peers, because both dial out with it:
//! `peers::tls` (every HTTP, WebSocket and CLI call) and the PostgreSQL store
//! (`store::postgres::tls`). Each caller names its own configuration key in
//! what it reports; the policy itself — provider, protocol versions, roots — is
//! this file's alone.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// A PEM file named in the configuration could not be used; `path` is the file.
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    #[error("cannot build the TLS client configuration: {0}")]
    Config(String),
}

/// The process's crypto provider for every TLS client: ring.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client configuration builder on [`provider`] with rustls' safe protocol versions.
pub fn builder() -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>, TrustError> {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TrustError::Config(e.to_string()))
}

/// A client that verifies servers against `roots` and presents no certificate.
pub fn client_config(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, TrustError> {
    Ok(builder()?.with_root_certificates(roots).with_no_client_auth())
}

/// Every certificate of a PEM bundle; a file holding none is an error, since an
/// operator who names a file means it to add trust.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TrustError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, format!("not a PEM certificate bundle: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) of a PEM file.
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TrustError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| file_error(path, format!("no PEM private key: {e}")))
}

/// The system's roots (webpki's bundled roots where the system has none), plus
/// `extra`, which came from the configuration key `extra_from` (named when some
/// of them are not usable CA certificates).
pub fn system_roots_and(extra: &[CertificateDer<'static>], extra_from: &str) -> rustls::RootCertStore {
    let mut store = rustls::RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    for error in &system.errors {
        tracing::debug!(%error, "a system trust root could not be read");
    }
    let (added, _) = store.add_parsable_certificates(system.certs);
    if added == 0 {
        tracing::info!("no system trust roots found; using the bundled webpki roots");
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    add_roots(&mut store, extra, extra_from);
    store
}

/// Only `certs` (from the configuration key `from`), no system roots.
pub fn only_roots(certs: &[CertificateDer<'static>], from: &str) -> rustls::RootCertStore {
    let mut store = rustls::RootCertStore::empty();
    add_roots(&mut store, certs, from);
    store
}

fn add_roots(store: &mut rustls::RootCertStore, certs: &[CertificateDer<'static>], from: &str) {
    let (_, ignored) = store.add_parsable_certificates(certs.iter().cloned());
    if ignored > 0 {
        tracing::warn!(
            ignored,
            file = from,
            "certificates that are not usable CA certificates"
        );
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TrustError> {
    std::fs::read(path).map_err(|e| file_error(path, e.to_string()))
}

fn file_error(path: &Path, reason: impl Into<String>) -> TrustError {
    TrustError::File {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Why a TLS connection failed, in words an operator can act on, if `error`
/// (or anything in its source chain) is a TLS failure; `ca_key` is the
/// configuration key that adds a CA for this connection.
pub fn failure_reason(error: &(dyn std::error::Error + 'static), ca_key: &str) -> Option<String> {
    let mut next = Some(error);
    while let Some(current) = next {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(describe(tls, ca_key));
        }
        // `io::Error::source` skips the error it wraps (tokio-rustls puts the
        // rustls error there, sometimes inside another io::Error): step into it.
        next = match current.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => current.source(),
        };
    }
    None
}

fn describe(error: &rustls::Error, ca_key: &str) -> String {
    use rustls::CertificateError as Cert;
    match error {
        rustls::Error::InvalidCertificate(cert) => match cert {
            Cert::UnknownIssuer => format!(
                "unknown issuer: the certificate is not signed by a trusted CA (add the CA to {ca_key})"
            ),
            // webpki finds the issuer by name: a trusted CA of the same name
            // with another key (a CA made anew) ends here, not as unknown.
            Cert::BadSignature => format!(
                "bad signature: the certificate is not signed by a trusted CA (one of the same name is \
                 trusted, with another key: add the CA that signed it to {ca_key})"
            ),
            Cert::NotValidForName | Cert::NotValidForNameContext { .. } => {
                format!("name mismatch: the certificate is not valid for this host ({cert})")
            }
            Cert::Expired | Cert::ExpiredContext { .. } => format!("expired certificate ({cert})"),
            Cert::NotValidYet | Cert::NotValidYetContext { .. } => {
                format!("certificate not valid yet ({cert})")
            }
            other => format!("invalid certificate: {other}"),
        },
        other => format!("TLS handshake failed: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_failures_are_named_with_the_key_that_adds_a_ca() {
        let unknown = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let wrapped = io::Error::new(io::ErrorKind::InvalidData, unknown);
        let twice = io::Error::other(wrapped);
        let reason = failure_reason(&twice, "store.postgres_ca_file").unwrap_or_default();
        assert!(reason.starts_with("unknown issuer"), "{reason}");
        assert!(reason.contains("store.postgres_ca_file"), "{reason}");
        let same_name = rustls::Error::InvalidCertificate(rustls::CertificateError::BadSignature);
        let reason = describe(&same_name, "tls.ca_file");
        assert!(reason.contains("not signed by a trusted CA"), "{reason}");
        let expired = rustls::Error::InvalidCertificate(rustls::CertificateError::Expired);
        assert!(describe(&expired, "tls.ca_file").starts_with("expired certificate"));
        let plain = io::Error::other("connection refused");
        assert_eq!(failure_reason(&plain, "tls.ca_file"), None);
    }

    #[test]
    fn a_pem_file_without_what_is_asked_for_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not pem").unwrap();
        let error = read_certificates(&path).unwrap_err().to_string();
        assert!(error.contains("no PEM certificate"), "{error}");
        let error = read_private_key(&path).unwrap_err().to_string();
        assert!(error.contains("no PEM private key"), "{error}");
        let missing = read_certificates(&dir.path().join("absent.pem")).unwrap_err();
        assert!(missing.to_string().contains("absent.pem"));
    }
}
