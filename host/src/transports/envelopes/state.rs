//! What the signed-envelopes transport holds: the node's signing identity
//! (every reply is signed, the Agora envelope specification §2), the per-sender rate
//! table and the open-offer ledger ([`super::limits`]), and the cap on
//! envelopes in flight. Replay claims, offers and task states live in the
//! node's store, written by [`super::flow`] and the checks in `mod.rs`; on the
//! embedded store a direct request's PROCESSING state is held here instead
//! (`running`, see `flow::Running`).

use std::collections::HashSet;
use std::sync::Arc;

use ed25519_dalek::SigningKey;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::error::EnvelopesError;
use super::limits;
use crate::crypto::envelope as signed;
use crate::node::state::NodeState;
use crate::policy::ledger::Ledger;
use crate::policy::rate::RateTable;
use crate::store::now_ms;

pub(crate) struct EnvelopesState {
    pub(super) node: NodeState,
    signing_key: SigningKey,
    pub(super) did: String,
    pub(super) rate: Mutex<RateTable<limits::SenderKey>>,
    pub(super) offers: Mutex<Ledger<limits::SenderKey>>,
    pub(super) in_flight: Arc<Semaphore>,
    /// Direct requests whose plugin runs now, by request key: at most one
    /// per `in_flight` permit.
    pub(super) running: Mutex<HashSet<Vec<u8>>>,
}

impl EnvelopesState {
    pub(super) fn new(node: NodeState, signing_key: SigningKey) -> EnvelopesState {
        let did = crate::crypto::identity::did_key(&signing_key.verifying_key());
        let in_flight = Arc::new(Semaphore::new(node.config.envelopes.max_in_flight));
        let rate = Mutex::new(limits::rate_table(&node.config.envelopes));
        let offers = Mutex::new(limits::offer_ledger(&node.config.envelopes));
        EnvelopesState {
            node,
            signing_key,
            did,
            rate,
            offers,
            in_flight,
            running: Mutex::default(),
        }
    }

    /// A signed envelope from this node.
    pub(super) fn envelope(&self, kind: &str, payload: Value) -> Result<Value, EnvelopesError> {
        signed::build(kind, &self.signing_key, &self.did, payload, now_ms())
            .map_err(|e| EnvelopesError::Internal(format!("cannot sign the reply: {e}")))
    }
}
