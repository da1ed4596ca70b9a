//! What the uAgents transport holds: the node's uAgents identity (its seed,
//! kept in `{data_dir}/uagents.seed`), the replay entries that accept each
//! (sender, digest) once (`Store::claim_once`, `uagents.replay_window_secs`), and the
//! delivery slots for asynchronous replies (`uagents.max_pending_replies`),
//! and the public keys of senders it has verified ([`SenderKeys`]).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rand::RngCore;
use secp256k1::PublicKey;
use tokio::sync::Semaphore;

use super::error::SubmitError;
use crate::config::Config;
use crate::crypto::identity::create_secret_file;
use crate::crypto::uagents::{AgentIdentity, Envelope, UagentsCryptoError, decode_address};
use crate::node::state::NodeState;
use crate::peers::almanac::Resolver;
use crate::peers::uagents::{SEED_FILE, sending_identity};
use crate::store::{Collection, Store};

/// Where older versions kept a generated seed (in the store); moved to [`SEED_FILE`].
const SEED_KEY: &[u8] = b"uagents.seed";

#[derive(Clone)]
pub(super) struct UagentsState {
    pub(super) node: NodeState,
    pub(super) identity: Option<Arc<AgentIdentity>>,
    pub(super) deliveries: Arc<Semaphore>,
    /// Endpoints of senders not in `uagents.peers`, when `uagents.almanac_api` is set:
    /// the node's one resolver ([`crate::runtime::Runtime::almanac`]), whose cache
    /// plugins' messages to bare addresses share.
    pub(super) almanac: Option<Arc<Resolver>>,
    pub(super) sender_keys: Arc<SenderKeys>,
}

/// Most sender keys kept, over both generations (~200 bytes each).
const MAX_SENDER_KEYS: usize = 8192;

/// The public keys of senders whose envelopes verified, by `agent1…` address.
///
/// Decoding an address (its bech32 checksum, then the square root that
/// decompresses the curve point) is a fixed part of every verification, and a
/// node hears the same senders again and again. A key is a function of its
/// address, so a kept key is never stale. Only addresses that signed a valid
/// envelope are kept, in two generations of at most half the bound each: when
/// the newer one is full it becomes the older and the older is dropped, and a
/// key found in the older moves to the newer, so the senders in use stay and
/// a flood of new addresses costs its own decoding and no more memory.
#[derive(Default)]
pub(super) struct SenderKeys {
    generations: Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    newer: HashMap<Box<str>, PublicKey>,
    older: HashMap<Box<str>, PublicKey>,
}

impl SenderKeys {
    /// [`Envelope::verify`], with the sender's key from here when it is kept.
    pub(super) fn verify(&self, envelope: &Envelope) -> Result<(), UagentsCryptoError> {
        let mut decoded = None;
        envelope.verify_with(|sender| match self.get(sender) {
            Some(key) => Ok(key),
            None => {
                let key = decode_address(sender)?;
                decoded = Some(key);
                Ok(key)
            }
        })?;
        if let Some(key) = decoded {
            self.keep(envelope.sender.as_str().into(), key);
        }
        Ok(())
    }

    fn get(&self, address: &str) -> Option<PublicKey> {
        let mut generations = self.generations.lock();
        if let Some(key) = generations.newer.get(address) {
            return Some(*key);
        }
        let (address, key) = generations.older.remove_entry(address)?;
        generations.insert(address, key);
        Some(key)
    }

    fn keep(&self, address: Box<str>, key: PublicKey) {
        self.generations.lock().insert(address, key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        let generations = self.generations.lock();
        generations.newer.len() + generations.older.len()
    }
}

impl Generations {
    fn insert(&mut self, address: Box<str>, key: PublicKey) {
        if self.newer.len() >= MAX_SENDER_KEYS / 2 {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(address, key);
    }
}

/// The node's uAgents identity: from `uagents.seed`, else from a random seed
/// generated once and kept in `{data_dir}/uagents.seed` (owner-only).
///
/// A fleet's nodes are one agent: on a shared store the node has put the
/// fleet's seed into `uagents.seed` before this runs ([`fleet_seed`]).
pub fn node_identity(config: &Config, store: &Store) -> Result<AgentIdentity, String> {
    if !config.uagents.seed.is_empty() {
        return AgentIdentity::from_seed(&config.uagents.seed).map_err(|e| e.to_string());
    }
    // Only the embedded store gets here, and it answers without waiting.
    futures::executor::block_on(seed_from_file(config, store))
}

/// The seed every node of a fleet shares: made once by whichever node asks
/// first, kept in the shared store.
pub async fn fleet_seed(store: &Store) -> Result<String, String> {
    store.shared_secret(SEED_KEY).await.map_err(|e| e.to_string())
}

async fn seed_from_file(config: &Config, store: &Store) -> Result<AgentIdentity, String> {
    let path = config.data_dir.join(SEED_FILE);
    let shown = path.display().to_string();
    if !path.exists() {
        // A seed an older version kept in the store moves to the file, so the address stays.
        let stored: Option<String> = store
            .get(Collection::Meta, SEED_KEY)
            .await
            .map_err(|e| e.to_string())?;
        let seed = stored.unwrap_or_else(|| {
            let mut fresh = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut fresh);
            hex::encode(fresh)
        });
        match create_secret_file(&path, seed.as_bytes()) {
            Ok(()) => {}
            // Another start got there first: its seed is the one.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(format!("cannot write {shown}: {error}")),
        }
        store
            .remove(Collection::Meta, SEED_KEY)
            .await
            .map_err(|e| e.to_string())?;
    }
    sending_identity(config)
}

/// Accept a (sender, digest) once for as long as the envelope could be valid; returns
/// the key it holds. `expires` is at most `max_expiry_secs` ahead (checked before), so
/// the entry's life is bounded.
pub(super) async fn claim_once(
    state: &UagentsState,
    envelope: &Envelope,
    now: u64,
) -> Result<Vec<u8>, SubmitError> {
    let key = format!("uagents\0{}\0{}", envelope.sender, hex::encode(envelope.digest())).into_bytes();
    let window = state.node.config.uagents.replay_window_secs;
    let until_secs = envelope.expires.unwrap_or(now).max(now).saturating_add(window);
    let first = state
        .node
        .store
        .claim_once(&key, until_secs.saturating_mul(1000))
        .await?;
    if first {
        Ok(key)
    } else {
        Err(SubmitError::Replayed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed_by(identity: &AgentIdentity, nonce: u64) -> Envelope {
        let mut envelope = Envelope {
            version: 1,
            sender: identity.address().to_string(),
            target: identity.address().to_string(),
            session: "6f1c2b7e-1111-4a4a-8b8b-0123456789ab".into(),
            schema_digest: "model:0".into(),
            protocol_digest: None,
            payload: None,
            expires: None,
            nonce: Some(nonce),
            signature: None,
        };
        envelope.sign(identity);
        envelope
    }

    #[test]
    fn kept_keys_still_check_every_signature_and_only_verified_senders_are_kept() {
        let keys = SenderKeys::default();
        let alice = AgentIdentity::from_seed("alice").unwrap();
        let bob = AgentIdentity::from_seed("bob").unwrap();

        // A forged envelope (bob's signature under alice's address) is refused and keeps nothing.
        let mut forged = signed_by(&alice, 1);
        forged.signature = signed_by(&bob, 1).signature;
        assert_eq!(keys.verify(&forged), Err(UagentsCryptoError::BadSignature));
        assert_eq!(keys.len(), 0);

        keys.verify(&signed_by(&alice, 2)).unwrap();
        keys.verify(&signed_by(&alice, 3)).unwrap();
        assert_eq!(keys.len(), 1);
        // With alice's key kept, the forgery is still refused, and so is a changed envelope.
        assert_eq!(keys.verify(&forged), Err(UagentsCryptoError::BadSignature));
        let mut altered = signed_by(&alice, 4);
        altered.nonce = Some(5);
        assert_eq!(keys.verify(&altered), Err(UagentsCryptoError::BadSignature));
        let mut unsigned = signed_by(&alice, 6);
        unsigned.signature = None;
        assert_eq!(keys.verify(&unsigned), Err(UagentsCryptoError::MissingSignature));
        // As in the library, an unsigned envelope is refused as such before its sender is read.
        unsigned.sender = "user1qqqq".into();
        assert_eq!(keys.verify(&unsigned), Err(UagentsCryptoError::MissingSignature));
        assert_eq!(keys.len(), 1);
    }

    #[test]
    fn sender_keys_stay_within_the_bound_and_keys_in_use_survive() {
        let keys = SenderKeys::default();
        let alice = AgentIdentity::from_seed("alice").unwrap();
        keys.verify(&signed_by(&alice, 1)).unwrap();
        let key = *alice.verifying_key();
        for round in 0..3 * MAX_SENDER_KEYS {
            keys.keep(format!("agent1flood{round}").into(), key);
            if round % 1000 == 0 {
                // Alice keeps talking: her key moves to the newer generation each time.
                assert_eq!(keys.get(alice.address()), Some(key));
            }
            assert!(keys.len() <= MAX_SENDER_KEYS);
        }
        // After a turn-over the older generation is full and the newer is filling.
        assert!(keys.len() > MAX_SENDER_KEYS / 2);
        assert_eq!(keys.get(alice.address()), Some(key));
        assert_eq!(keys.get("agent1flood0"), None, "the oldest addresses are gone");
        // Honest senders are still served: the one in use and one never seen before.
        keys.verify(&signed_by(&alice, 2)).unwrap();
        let bob = AgentIdentity::from_seed("bob").unwrap();
        keys.verify(&signed_by(&bob, 1)).unwrap();
        assert!(keys.len() <= MAX_SENDER_KEYS);
    }
}
