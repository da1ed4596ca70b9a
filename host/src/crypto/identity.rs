//! The node's Ed25519 identity: a key file written by `agora-node keygen`
//! (PKCS#8 PEM, mode 0600) and its did:key (W3C did:key, Ed25519 multicodec
//! `0xed 0x01`, base58btc with the multibase `z` prefix).
//!
//! Envelope senders (signed envelopes spec §1, `sender.id`) are parsed here
//! too: a did:key of that exact shape, or a raw Ed25519 public key as
//! unpadded Base64Url of 32 bytes.

use std::path::Path;

use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::{SigningKey, VerifyingKey};

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read key file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("cannot write key file {path}: {source}")]
    Write { path: String, source: std::io::Error },
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
        let bytes = read_secret_file(path).map_err(|source| IdentityError::Read {
            path: shown.clone(),
            source,
        })?;
        let pem = String::from_utf8(bytes).map_err(|_| IdentityError::Invalid { path: shown.clone() })?;
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
            .map_err(|_| IdentityError::Invalid { path: shown.clone() })?;
        let outcome = if force {
            replace_secret_file(path, pem.as_bytes())
        } else {
            create_secret_file(path, pem.as_bytes())
        };
        outcome.map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => IdentityError::Exists { path: shown.clone() },
            _ => IdentityError::Write { path: shown, source },
        })
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing_key.verifying_key()
    }

    pub fn did(&self) -> String {
        did_key(&self.verifying_key())
    }
}

/// Write `contents` to a new owner-only (0600) file next to `path`, flushed to disk.
fn write_secret_temp(path: &Path, contents: &[u8]) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.{:016x}.tmp", rand::random::<u64>()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    // The mode is set at creation: there is no moment at which the secret is readable by others.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&temp).and_then(|mut file| {
        file.write_all(contents)?;
        file.sync_all()
    });
    match written {
        Ok(()) => Ok(temp),
        Err(error) => {
            let _ = std::fs::remove_file(&temp);
            Err(error)
        }
    }
}

fn sync_parent(path: &Path) {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && let Ok(dir) = std::fs::File::open(parent)
    {
        let _ = dir.sync_all();
    }
}

/// Create `path` holding a secret, owner-only (0600); `AlreadyExists` if it is there.
/// The file appears whole or not at all (written aside, then linked into place), so a
/// crash cannot leave a truncated key that would change the node's identity.
pub fn create_secret_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let temp = write_secret_temp(path, contents)?;
    let linked = std::fs::hard_link(&temp, path);
    let _ = std::fs::remove_file(&temp);
    linked?;
    sync_parent(path);
    Ok(())
}

/// Replace (or create) `path` with a secret, owner-only (0600), atomically.
pub fn replace_secret_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let temp = write_secret_temp(path, contents)?;
    if let Err(error) = std::fs::rename(&temp, path) {
        let _ = std::fs::remove_file(&temp);
        return Err(error);
    }
    sync_parent(path);
    Ok(())
}

/// Read a secret file, first narrowing its mode to owner-only if an older version
/// (or an operator) left it readable by others.
pub fn read_secret_file(path: &Path) -> std::io::Result<Vec<u8>> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))?;
        }
    }
    std::fs::read(path)
}

/// The did:key of an Ed25519 public key.
pub fn did_key(key: &VerifyingKey) -> String {
    let mut bytes = vec![0xed, 0x01];
    bytes.extend_from_slice(key.as_bytes());
    format!("did:key:z{}", bs58::encode(bytes).into_string())
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SenderIdError {
    #[error("sender id is neither a did:key nor a raw Ed25519 public key")]
    Unrecognized,
    #[error("did:key must use multibase base58btc ('z')")]
    NotBase58btc,
    #[error("did:key is not valid base58btc")]
    BadBase58,
    #[error("did:key is not an Ed25519 key (multicodec 0xed01)")]
    NotEd25519,
    #[error("the public key is {0} bytes, not 32")]
    WrongLength(usize),
    #[error("the public key is not a valid Ed25519 point")]
    InvalidPoint,
}

/// Longest sender id looked at; a did:key of an Ed25519 key is 56 characters.
const MAX_SENDER_ID: usize = 128;

/// The Ed25519 key named by an envelope's `sender.id`.
pub fn parse_sender_id(id: &str) -> Result<VerifyingKey, SenderIdError> {
    if id.len() > MAX_SENDER_ID {
        return Err(SenderIdError::Unrecognized);
    }
    if let Some(multibase) = id.strip_prefix("did:key:") {
        return parse_did_key_value(multibase);
    }
    if id.starts_with("did:") {
        return Err(SenderIdError::Unrecognized);
    }
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(id)
        .map_err(|_| SenderIdError::Unrecognized)?;
    key_from_bytes(&bytes)
}

fn parse_did_key_value(multibase: &str) -> Result<VerifyingKey, SenderIdError> {
    let encoded = multibase.strip_prefix('z').ok_or(SenderIdError::NotBase58btc)?;
    let decoded = bs58::decode(encoded)
        .into_vec()
        .map_err(|_| SenderIdError::BadBase58)?;
    // The multicodec is an unsigned varint: ed25519-pub (0xed) is the two bytes 0xed 0x01.
    let key = decoded
        .strip_prefix(&[0xed, 0x01][..])
        .ok_or(SenderIdError::NotEd25519)?;
    key_from_bytes(key)
}

fn key_from_bytes(bytes: &[u8]) -> Result<VerifyingKey, SenderIdError> {
    let array: [u8; 32] = bytes
        .try_into()
        .map_err(|_| SenderIdError::WrongLength(bytes.len()))?;
    VerifyingKey::from_bytes(&array).map_err(|_| SenderIdError::InvalidPoint)
}

/// A raw sender id: the public key as unpadded Base64Url.
pub fn raw_sender_id(key: &VerifyingKey) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors() -> serde_json::Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/vectors/did_key/ed25519_did_key_vectors.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn did_key_vectors_derive_and_parse() {
        let vectors = vectors();
        let valid = vectors["valid"].as_array().unwrap();
        assert_eq!(valid.len(), 8);
        for case in valid {
            let seed: [u8; 32] = hex::decode(case["seed_hex"].as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap();
            let key = SigningKey::from_bytes(&seed).verifying_key();
            assert_eq!(
                hex::encode(key.as_bytes()),
                case["public_key_hex"].as_str().unwrap()
            );
            let did = case["did_key"].as_str().unwrap();
            assert_eq!(did_key(&key), did);
            assert_eq!(parse_sender_id(did).unwrap(), key);
            assert_eq!(parse_sender_id(&raw_sender_id(&key)).unwrap(), key);
        }
        for case in vectors["decode_only"].as_array().unwrap() {
            let key = parse_sender_id(case["did_key"].as_str().unwrap()).unwrap();
            assert_eq!(
                hex::encode(key.as_bytes()),
                case["public_key_hex"].as_str().unwrap()
            );
        }
        let invalid = vectors["invalid"].as_array().unwrap();
        assert_eq!(invalid.len(), 7);
        for case in invalid {
            let did = case["did"].as_str().unwrap();
            assert!(parse_sender_id(did).is_err(), "{did}: {}", case["reason"]);
        }
    }

    #[test]
    fn w3c_ccg_seeds_give_their_did_keys() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/vectors/did_key/w3c-ccg-ed25519-x25519.json");
        let entries: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let entries = entries.as_object().unwrap();
        assert_eq!(entries.len(), 5);
        for (did, entry) in entries {
            let seed: [u8; 32] = hex::decode(entry["seed"].as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap();
            let key = SigningKey::from_bytes(&seed).verifying_key();
            assert_eq!(&did_key(&key), did);
            assert_eq!(parse_sender_id(did).unwrap(), key);
        }
    }

    #[test]
    fn raw_ids_must_be_32_unpadded_base64url_bytes() {
        use base64::Engine as _;
        let key = NodeIdentity::generate().verifying_key();
        let padded = base64::engine::general_purpose::URL_SAFE.encode(key.as_bytes());
        assert!(parse_sender_id(&padded).is_err());
        let short = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([1u8; 31]);
        assert_eq!(parse_sender_id(&short), Err(SenderIdError::WrongLength(31)));
        assert!(parse_sender_id("").is_err());
        assert!(parse_sender_id(&"A".repeat(500)).is_err());
    }

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

    #[cfg(unix)]
    #[test]
    fn secret_files_are_owner_only_even_when_replacing_a_readable_one() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        std::fs::write(&path, b"old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        NodeIdentity::generate().write(&path, true).unwrap();
        assert_eq!(mode(&path), 0o600);
        // A key file an older version left readable is narrowed when loaded.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        NodeIdentity::load(&path).unwrap();
        assert_eq!(mode(&path), 0o600);

        let seed = dir.path().join("sub/uagents.seed");
        create_secret_file(&seed, b"abc").unwrap();
        assert_eq!(mode(&seed), 0o600);
        assert_eq!(
            create_secret_file(&seed, b"def").unwrap_err().kind(),
            std::io::ErrorKind::AlreadyExists
        );
        assert_eq!(read_secret_file(&seed).unwrap(), b"abc");
        // No temporary files are left behind.
        assert_eq!(std::fs::read_dir(dir.path().join("sub")).unwrap().count(), 1);
    }
}
