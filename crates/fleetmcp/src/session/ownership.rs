//! Who serves a stored session that this instance does not hold: the seam distributed mode
//! plugs into.
//!
//! A single instance (and the default, non-distributed fleet) has no [`Ownership`]: every stored
//! session it is asked for is recreated here, and the stored record is rewritten to name this
//! instance. Distributed mode installs one that knows which instances are alive, so that a
//! session held by a live peer is relayed to it rather than recreated.
//!
//! The seam is consulted only when the session is not held here: a held session's request pays
//! nothing for it.

use async_trait::async_trait;

use super::store::SessionRecord;

/// The answer of an [`Ownership`]: serve the session here, or hand it to its live holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This instance becomes the holder (recreation).
    Here,
    /// This instance takes the session over from a holder that stopped (its machine id).
    TakeOver(String),
    /// Another live instance holds it; its machine id.
    Peer(String),
}

/// Decides who serves a stored session this instance does not hold.
#[async_trait]
pub trait Ownership: Send + Sync + 'static {
    /// `record.node_id` names the last holder written to the store.
    async fn owner(&self, record: &SessionRecord) -> Owner;
}
