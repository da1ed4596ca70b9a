//! Cryptography and canonical encodings, one module per scheme:
//! protocol-document hashes (Agora two-party §8.2) here, and the uAgents
//! digests and signatures in [`uagents`].

pub mod envelope;
pub mod identity;
pub mod jcs;
pub mod jwt;
pub mod pyjson;
pub mod trust;
pub mod uagents;

use base64::Engine as _;
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// SHA1 of a protocol document's exact bytes as 40 lower-case hex digits (Agora two-party §8.2).
pub fn protocol_hash(document: &[u8]) -> String {
    hex::encode(Sha1::digest(document))
}

/// The base64 form agora-protocol 0.2.0 uses for a hex protocol hash.
pub fn hash_as_base64(hex_hash: &str) -> Option<String> {
    hex::decode(hex_hash)
        .ok()
        .map(|digest| base64::engine::general_purpose::STANDARD.encode(digest))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Compare secrets without leaking where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    #[test]
    fn protocol_hash_is_sha1_hex_of_the_exact_bytes() {
        assert_eq!(
            super::protocol_hash(b"abc"),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_ne!(super::protocol_hash(b"abc\n"), super::protocol_hash(b"abc"));
    }
}
