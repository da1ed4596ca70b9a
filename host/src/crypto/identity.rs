//! The node's Ed25519 identity: a key file written by `agora-node keygen`
//! (PKCS#8 PEM, mode 0600) and its did:key (W3C did:key, Ed25519 multicodec
//! `0xed 0x01`, base58btc with the multibase `z` prefix).

use std::path::Path;

use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::{SigningKey, VerifyingKey};

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read key file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write key file {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not an Ed25519 PKCS#8 PEM key")]
    Invalid { path: String },
    #[error("{path} already exists (use --force to replace it)")]
    Exists { path: String },
}

pub struct NodeIdentity {
    pub signing_key: SigningKey,
}

impl NodeIdentity {
    pub fn generate() -> NodeIdentity {
        NodeIdentity {
            signing_key: SigningKey::generate(&mut rand::rngs::OsRng),
        }
    }

    pub fn load(path: &Path) -> Result<NodeIdentity, IdentityError> {
        let shown = path.display().to_string();
        let pem = std::fs::read_to_string(path).map_err(|source| IdentityError::Read {
            path: shown.clone(),
            source,
        })?;
        let signing_key =
            SigningKey::from_pkcs8_pem(&pem).map_err(|_| IdentityError::Invalid { path: shown })?;
        Ok(NodeIdentity { signing_key })
    }

    /// Load the key at `path`, creating it first if it does not exist.
    pub fn load_or_create(path: &Path) -> Result<NodeIdentity, IdentityError> {
        if path.exists() {
            return Self::load(path);
        }
        let identity = Self::generate();
        identity.write(path, false)?;
        Ok(identity)
    }

    /// Write the key as PKCS#8 PEM, readable by the owner only.
    pub fn write(&self, path: &Path, force: bool) -> Result<(), IdentityError> {
        let shown = path.display().to_string();
        if path.exists() && !force {
            return Err(IdentityError::Exists { path: shown });
        }
        let pem = self
            .signing_key
            .to_pkcs8_pem(Default::default())
            .map_err(|_| IdentityError::Invalid {
                path: shown.clone(),
            })?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| IdentityError::Write {
                path: shown.clone(),
                source,
            })?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        use std::io::Write;
        let mut file = options.open(path).map_err(|source| IdentityError::Write {
            path: shown.clone(),
            source,
        })?;
        file.write_all(pem.as_bytes())
            .map_err(|source| IdentityError::Write {
                path: shown,
                source,
            })?;
        Ok(())
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing_key.verifying_key()
    }

    pub fn did(&self) -> String {
        did_key(&self.verifying_key())
    }
}

/// The did:key of an Ed25519 public key.
pub fn did_key(key: &VerifyingKey) -> String {
    let mut bytes = vec![0xed, 0x01];
    bytes.extend_from_slice(key.as_bytes());
    format!("did:key:z{}", bs58::encode(bytes).into_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8032_test1_key_has_the_known_did() {
        let secret: [u8; 32] =
            hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
                .unwrap()
                .try_into()
                .unwrap();
        let key = SigningKey::from_bytes(&secret);
        assert_eq!(
            did_key(&key.verifying_key()),
            "did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw"
        );
    }

    #[test]
    fn key_files_round_trip_with_owner_only_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        let identity = NodeIdentity::load_or_create(&path).unwrap();
        assert_eq!(NodeIdentity::load(&path).unwrap().did(), identity.did());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        assert!(matches!(
            identity.write(&path, false),
            Err(IdentityError::Exists { .. })
        ));
    }
}
