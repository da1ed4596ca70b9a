//! A throwaway CA for the TLS tests (rcgen): leaf certificates that are good,
//! for another name, or expired; the rustls configs of a test server presenting
//! one and of a client trusting only this CA; and the node's own pair in the
//! CA's folder, replaced the way a renewal tool replaces it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SerialNumber};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// Where the CA's PEM, the node's pair and anything else a test writes live.
    pub dir: tempfile::TempDir,
}

/// What a leaf certificate is like.
pub enum LeafKind {
    /// For `localhost` and `127.0.0.1`, valid now.
    Good,
    /// For another name only.
    ForName(&'static str),
    /// Valid only in 2020.
    Expired,
}

/// A leaf certificate and its key, as PEM and as the DER a TLS peer sees.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "agora-node test CA");
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), issuer.pem()).unwrap();
        TestCa { issuer, dir }
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The node's (and the CLI's) setting that trusts this CA for outbound calls.
    pub fn ca_env(&self) -> (&'static str, String) {
        ("AGORA_TLS__CA_FILE", self.ca_file().display().to_string())
    }

    /// A good certificate with its own key and `serial`.
    pub fn leaf(&self, serial: u64) -> Leaf {
        self.make_leaf(LeafKind::Good, Some(serial))
    }

    pub fn leaf_of(&self, kind: LeafKind) -> Leaf {
        self.make_leaf(kind, None)
    }

    fn make_leaf(&self, kind: LeafKind, serial: Option<u64>) -> Leaf {
        let names = match kind {
            LeafKind::ForName(name) => vec![name.to_string()],
            LeafKind::Good | LeafKind::Expired => vec!["localhost".to_string(), "127.0.0.1".to_string()],
        };
        let mut params = CertificateParams::new(names).unwrap();
        if let LeafKind::Expired = kind {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        params.serial_number = serial.map(SerialNumber::from);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }

    /// A test server's config presenting a `kind` leaf and the CA (http/1.1 by ALPN).
    pub fn server(&self, kind: LeafKind) -> Arc<rustls::ServerConfig> {
        let leaf = self.leaf_of(kind);
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key_der));
        let chain = vec![leaf.der, self.issuer.der().clone()];
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// A client config trusting only this CA.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        // A resumed session shows the certificate of the session it resumes; every
        // connection here makes a full handshake, so it shows what the node serves now.
        config.resumption = rustls::client::Resumption::disabled();
        Arc::new(config)
    }

    /// The node's certificate file (`tls.cert_file`).
    pub fn cert_file(&self) -> PathBuf {
        self.dir.path().join("node.crt")
    }

    /// The node's key file (`tls.key_file`).
    pub fn key_file(&self) -> PathBuf {
        self.dir.path().join("node.key")
    }

    /// Put `leaf` in place as the node's pair the way a renewal tool does: each
    /// file written beside and renamed over the old one (the key first, so for a
    /// moment the pair does not match: the node must keep the old pair until both
    /// are new).
    pub fn install(&self, leaf: &Leaf) {
        replace(&self.key_file(), leaf.key_pem.as_bytes());
        replace(&self.cert_file(), leaf.cert_pem.as_bytes());
    }
}

pub fn replace(path: &Path, bytes: &[u8]) {
    let staged = path.with_extension("new");
    std::fs::write(&staged, bytes).unwrap();
    std::fs::rename(&staged, path).unwrap();
}
