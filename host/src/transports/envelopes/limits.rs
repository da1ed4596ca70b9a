//! The envelope transport's per-sender bounds, as the node's shared policies
//! ([`crate::policy`]) configured by its `envelopes.*` keys:
//!
//! - the per-sender rate (`rate_limit_per_minute`): a [`RateTable`] keyed by
//!   the sender's public key, so its did:key and raw forms share one bucket, of
//!   at most `max_tracked_senders` senders;
//! - live offers per sender (`max_offers_per_sender`) and the params bytes all
//!   live offers hold (`max_offer_bytes_total`): a [`Ledger`] of offers by id,
//!   so stored negotiation state is capped per sender and in total.

use crate::config::EnvelopesConfig;
use crate::policy::ledger::{Ledger, LedgerBounds, bounded};
use crate::policy::rate::RateTable;

/// An Ed25519 public key: what a sender is, whichever id form it writes.
pub type SenderKey = [u8; 32];

/// The per-sender rate table.
pub fn rate_table(config: &EnvelopesConfig) -> RateTable<SenderKey> {
    RateTable::new(config.max_tracked_senders, config.rate_limit_per_minute)
}

/// The ledger of live offers (quoted, not accepted, not expired) and their params bytes.
pub fn offer_ledger(config: &EnvelopesConfig) -> Ledger<SenderKey> {
    Ledger::new(LedgerBounds {
        per_client_items: bounded(config.max_offers_per_sender, "envelopes.max_offers_per_sender"),
        total_bytes: bounded(config.max_offer_bytes_total, "envelopes.max_offer_bytes_total"),
        ..LedgerBounds::default()
    })
}
