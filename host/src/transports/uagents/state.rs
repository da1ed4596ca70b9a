//! What the uAgents transport holds: the node's uAgents identity (its seed,
//! kept in `{data_dir}/uagents.seed`), the replay entries that accept each
//! (sender, digest) once (`Store::claim_once`, `uagents.replay_window_secs`), and the
//! delivery slots for asynchronous replies (`uagents.max_pending_replies`).

use std::sync::Arc;

use rand::RngCore;
use tokio::sync::Semaphore;

use super::error::SubmitError;
use crate::config::Config;
use crate::crypto::identity::create_secret_file;
use crate::crypto::uagents::{AgentIdentity, Envelope};
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
    /// Endpoints of senders not in `uagents.peers`, when `uagents.almanac_api` is set.
    pub(super) almanac: Option<Arc<Resolver>>,
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
    let mut fresh = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut fresh);
    let fresh = hex::encode(fresh);
    store
        .insert_new(Collection::Meta, SEED_KEY, &fresh, None)
        .await
        .map_err(|e| e.to_string())?;
    store
        .get::<String>(Collection::Meta, SEED_KEY)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "the fleet's uAgents seed vanished from the store".to_string())
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
