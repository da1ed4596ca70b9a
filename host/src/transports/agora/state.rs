//! What the Agora transport stores (the two-party specification §7): each
//! multi-round conversation's record in sled under an unguessable id, its
//! history (two entries a round), and its place under the conversation caps
//! ([`super::limits`]), which a restart restores from the records.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine as _;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::AgoraError;
use super::limits::{self, ConversationLimits};
use crate::node::state::NodeState;
use crate::store::{Collection, StoreError, UnitOfWork, now_ms};

/// How long an expired conversation id keeps answering "Conversation expired"
/// (instead of 404) before the sweeper forgets it.
const EXPIRED_ID_RETENTION_SECS: u64 = 24 * 3600;

/// Longest conversation id the node ever issues is 32 characters; anything
/// longer is unknown without touching the store.
const MAX_CONVERSATION_ID_LEN: usize = 64;

/// What the Agora handlers share: the node, and the conversation caps.
#[derive(Clone)]
pub(super) struct AgoraState {
    pub(super) node: NodeState,
    pub(super) limits: Arc<ConversationLimits>,
}

impl AgoraState {
    pub(super) fn new(node: NodeState) -> AgoraState {
        let limits = ConversationLimits::new(&node.config.agora);
        // The caps are this node's. A shared store holds the whole fleet's
        // conversations, which are not this node's to count; the embedded one
        // answers at once, so waiting for it here blocks nothing.
        if !node.store.is_shared() {
            futures::executor::block_on(restore_limits(&node, &limits));
        }
        AgoraState { node, limits }
    }
}

/// Count the conversations the store already holds, so a restart neither
/// frees capacity an attacker filled nor forgets honest clients' places.
async fn restore_limits(node: &NodeState, limits: &ConversationLimits) {
    let now = now_ms() / 1000;
    let records = match node
        .store
        .records::<Conversation>(Collection::Conversations, b"", usize::MAX)
        .await
    {
        Ok(records) => records,
        Err(error) => {
            tracing::warn!(%error, "cannot count the stored Agora conversations");
            return;
        }
    };
    for (id, record) in records {
        limits.restore(&id, record.client, record.expires_at, now);
    }
}

/// One multi-round conversation's record (its history is stored beside it,
/// under the same id).
#[derive(Serialize, Deserialize, Clone, PartialEq)]
pub(super) struct Conversation {
    pub(super) plugin: String,
    pub(super) protocol_hash: Option<String>,
    /// The verified document, for conversations served by an any-document plugin
    /// (that plugin has no copy of its own to read on follow-ups).
    #[serde(default)]
    pub(super) document: Option<String>,
    created_at_ms: u64,
    /// Unix seconds, as `conversationExpires` says.
    pub(super) expires_at: u64,
    /// Rounds started, the first included; bounds the stored history.
    #[serde(default)]
    rounds: u64,
    /// The client address charged for it ([`limits::client_key`]), so the caps
    /// survive a restart.
    #[serde(default)]
    client: Option<String>,
}

impl Conversation {
    /// The conversation `id` as the console lists it.
    pub(super) fn thread(&self, id: String) -> crate::vocab::Thread {
        crate::vocab::Thread {
            id,
            started_at_ms: Some(self.created_at_ms),
            last_at_ms: None,
            state: Some(format!("{} rounds", self.rounds)),
            plugin: Some(self.plugin.clone()),
        }
    }
}

/// A place under the conversation caps, held for a conversation being
/// created; released when dropped unless the conversation was created.
pub(super) struct Reservation {
    limits: Arc<ConversationLimits>,
    pub(super) id: String,
    client: String,
    expires_at: u64,
    kept: bool,
}

impl Reservation {
    pub(super) fn new(agora: &AgoraState, peer: SocketAddr) -> Result<Reservation, AgoraError> {
        // 192 random bits (§11: hard to guess).
        let mut id_bytes = [0u8; 24];
        rand::rngs::OsRng.fill_bytes(&mut id_bytes);
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id_bytes);
        let now = now_ms();
        let ttl_ms = agora.node.config.agora.conversation_ttl_secs.saturating_mul(1000);
        // Rounded up, so a conversation lives at least the configured time.
        let expires_at = now.saturating_add(ttl_ms).div_ceil(1000);
        let client = limits::client_key(peer.ip());
        agora.limits.acquire(&id, &client, expires_at, now / 1000)?;
        Ok(Reservation {
            limits: agora.limits.clone(),
            id,
            client,
            expires_at,
            kept: false,
        })
    }

    pub(super) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.kept {
            self.limits.release(&self.id);
        }
    }
}

/// The record of a conversation being created, written with the request's
/// other writes (`unit`): nobody learns its id before they are committed.
pub(super) async fn create_conversation(
    unit: &UnitOfWork,
    plugin: &str,
    protocol_hash: Option<String>,
    document: Option<String>,
    reservation: &Reservation,
) -> Result<Conversation, AgoraError> {
    let record = Conversation {
        plugin: plugin.to_string(),
        protocol_hash,
        document,
        created_at_ms: now_ms(),
        expires_at: reservation.expires_at,
        rounds: 1,
        client: Some(reservation.client.clone()),
    };
    unit.put(
        Collection::Conversations,
        reservation.id.as_bytes(),
        &record,
        Some(store_expiry_ms(&record)),
    )
    .await?;
    Ok(record)
}

async fn store_conversation(state: &NodeState, id: &str, record: &Conversation) -> Result<(), AgoraError> {
    state
        .store
        .put(
            Collection::Conversations,
            id.as_bytes(),
            record,
            Some(store_expiry_ms(record)),
        )
        .await?;
    Ok(())
}

/// The store keeps a record past `conversationExpires` so the id can still be
/// answered "Conversation expired"; the sweeper drops it (and its history) later.
fn store_expiry_ms(record: &Conversation) -> u64 {
    record
        .expires_at
        .saturating_add(EXPIRED_ID_RETENTION_SECS)
        .saturating_mul(1000)
}

/// Count a round before it runs, so a conversation's history stays within
/// `max_history_entries` (two entries a round) even under concurrent follow-ups.
pub(super) async fn reserve_round(
    state: &NodeState,
    id: &str,
    mut current: Conversation,
) -> Result<Conversation, AgoraError> {
    let max_rounds = (state.config.agora.max_history_entries / 2) as u64;
    for _ in 0..16 {
        if current.rounds >= max_rounds {
            return Err(AgoraError::Rejected(format!(
                "This conversation has reached its limit of {max_rounds} rounds"
            )));
        }
        let next = Conversation {
            rounds: current.rounds + 1,
            ..current.clone()
        };
        if state
            .store
            .update(
                Collection::Conversations,
                id.as_bytes(),
                &current,
                &next,
                Some(store_expiry_ms(&next)),
            )
            .await?
        {
            return Ok(next);
        }
        current = load_conversation(state, id).await?;
    }
    Err(AgoraError::Overloaded)
}

/// A live conversation, or why there is none (§7.3: an expired id is never usable).
pub(super) async fn load_conversation(state: &NodeState, id: &str) -> Result<Conversation, AgoraError> {
    let unknown = || AgoraError::NotFound("Unknown conversation".into());
    if id.is_empty() || id.len() > MAX_CONVERSATION_ID_LEN {
        return Err(unknown());
    }
    let Some(mut conversation) = state
        .store
        .get::<Conversation>(Collection::Conversations, id.as_bytes())
        .await?
    else {
        return Err(
            if state
                .store
                .expired(Collection::Conversations, id.as_bytes())
                .await?
            {
                AgoraError::ConversationExpired
            } else {
                unknown()
            },
        );
    };
    if now_ms() >= conversation.expires_at.saturating_mul(1000) {
        // Keep only what answering "expired" needs.
        if conversation.document.is_some() || conversation.rounds > 0 {
            state.store.remove_history(id).await?;
            conversation.document = None;
            conversation.rounds = 0;
            store_conversation(state, id, &conversation).await?;
        }
        return Err(AgoraError::ConversationExpired);
    }
    Ok(conversation)
}

/// Append to a conversation's history with the request's other writes; a
/// full history refuses the round (here, or at the commit on a shared store).
pub(super) async fn append(
    state: &NodeState,
    unit: &UnitOfWork,
    history_id: &str,
    role: &str,
    body: &Value,
) -> Result<(), AgoraError> {
    let max_entries = state.config.agora.max_history_entries;
    unit.append_entry(history_id, role, body, max_entries)
        .await
        .map(drop)
        .map_err(refused)
}

/// Commit the request's writes before its reply.
pub(super) async fn commit(unit: &UnitOfWork) -> Result<(), AgoraError> {
    unit.commit().await.map_err(refused)
}

/// A store error as Agora answers it: a history's quota is the client's
/// limit, anything else the node's failure.
fn refused(error: StoreError) -> AgoraError {
    match error {
        StoreError::Limit(message) => AgoraError::Rejected(message),
        other => other.into(),
    }
}
