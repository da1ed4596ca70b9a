//! The one trust policy for everything the node dials over HTTP and WebSocket:
//! a rustls `ClientConfig` from [`crate::crypto::trust`] (ring provider, the
//! system's roots — or the bundled webpki roots on a system that has none —
//! plus the PEM bundle in `tls.ca_file`), and the one pooled HTTP client built
//! on it. The PostgreSQL store builds its connector from the same module.
//!
//! Both live process-wide: every outbound path (HTTP calls, the arena JWKS, the
//! arena WebSocket stream, the CLI) reaches them without a parameter threaded
//! through each caller, and the HTTP client's connection pool is shared. The
//! node and the CLI call [`init`] once at start; a path used before that (a unit
//! test, a tool) gets the system roots only. There is deliberately no way to
//! turn verification off: a private deployment adds its CA instead.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use crate::crypto::trust::{self, TrustError};

/// Covers the TCP connect and the TLS handshake of a new pooled connection. It
/// is below the shortest call timeout (the arena JWKS's 5 s), so a stalled
/// handshake is reported as one rather than as the call's generic timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(4);
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("tls.ca_file {path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("cannot build the outbound client: {0}")]
    Client(String),
    #[error(
        "the outbound trust roots were already set up from tls.ca_file {first:?}; \
         this process cannot switch to {second:?}"
    )]
    AlreadySet { first: PathBuf, second: PathBuf },
}

/// The shared outbound TLS configuration and the HTTP client built on it.
pub struct Outbound {
    ca_file: PathBuf,
    pub tls: Arc<rustls::ClientConfig>,
    pub http: reqwest::Client,
}

static SHARED: OnceLock<Outbound> = OnceLock::new();

/// Set the process-wide trust roots from `tls.ca_file` (empty: system roots only).
///
/// Calling it again with the same file is a no-op; another file is an error,
/// since connections already pooled were verified against the first.
pub fn init(ca_file: &Path) -> Result<(), TlsSetupError> {
    if let Some(existing) = SHARED.get() {
        return check_same(existing, ca_file);
    }
    let built = Outbound::build(ca_file)?;
    // Another thread may have won the race: then its file must be this one too.
    match SHARED.set(built) {
        Ok(()) => Ok(()),
        Err(built) => SHARED
            .get()
            .map_or(Ok(()), |existing| check_same(existing, &built.ca_file)),
    }
}

fn check_same(existing: &Outbound, ca_file: &Path) -> Result<(), TlsSetupError> {
    if existing.ca_file == ca_file {
        Ok(())
    } else {
        Err(TlsSetupError::AlreadySet {
            first: existing.ca_file.clone(),
            second: ca_file.to_path_buf(),
        })
    }
}

/// The shared client; the system roots only if [`init`] was never called.
pub fn shared() -> Result<&'static Outbound, TlsSetupError> {
    if let Some(outbound) = SHARED.get() {
        return Ok(outbound);
    }
    let built = Outbound::build(Path::new(""))?;
    // Whoever set it first wins; both were built from the same policy.
    Ok(SHARED.get_or_init(|| built))
}

impl Outbound {
    fn build(ca_file: &Path) -> Result<Outbound, TlsSetupError> {
        let extra = if ca_file.as_os_str().is_empty() {
            Vec::new()
        } else {
            read_ca_file(ca_file)?
        };
        let tls =
            trust::client_config(trust::system_roots_and(&extra, "tls.ca_file")).map_err(client_error)?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls.clone())
            // Redirects are followed by `http_client::request_within`, hop by hop,
            // each checked against the call's allow-list.
            .redirect(reqwest::redirect::Policy::none())
            // Internal addresses are refused where the connection is made.
            .dns_resolver(super::http_client::CheckedResolver)
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build()
            .map_err(|e| TlsSetupError::Client(e.to_string()))?;
        Ok(Outbound {
            ca_file: ca_file.to_path_buf(),
            tls: Arc::new(tls),
            http,
        })
    }
}

fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    trust::read_certificates(path).map_err(|error| match error {
        TrustError::File { path, reason } => TlsSetupError::CaFile { path, reason },
        other => client_error(other),
    })
}

fn client_error(error: TrustError) -> TlsSetupError {
    TlsSetupError::Client(error.to_string())
}

/// Why a TLS connection failed, in words an operator can act on, if `error`
/// (or anything in its source chain) is a TLS failure.
pub fn failure_reason(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    trust::failure_reason(error, "tls.ca_file")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn certificate_failures_name_tls_ca_file() {
        let unknown = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let reason = failure_reason(&io::Error::other(unknown)).unwrap_or_default();
        assert!(reason.starts_with("unknown issuer"), "{reason}");
        assert!(reason.contains("tls.ca_file"), "{reason}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not pem").unwrap();
        let error = read_ca_file(&path).unwrap_err().to_string();
        assert!(error.contains("no PEM certificate"), "{error}");
        let missing = read_ca_file(&dir.path().join("absent.pem")).unwrap_err();
        assert!(missing.to_string().contains("absent.pem"));
    }
}
