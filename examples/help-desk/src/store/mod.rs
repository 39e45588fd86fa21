//! Where the tickets live: [`memory::MemoryStore`] (this process, the default) or
//! [`redis::RedisStore`] (Redis, when the configuration names one: every instance of a fleet
//! then shows the same desk).

pub mod memory;
pub mod redis;

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::ticket::{NewTicket, Status, Ticket};

/// Why the store could not answer (Redis only: memory always answers).
#[derive(Debug, thiserror::Error)]
#[error("the ticket store is unavailable: {0}")]
pub struct StoreError(pub String);

/// The handlers' shared state: one store for the process.
pub type Desk = Arc<dyn TicketStore>;

/// The desk's tickets, wherever they are kept.
#[async_trait]
pub trait TicketStore: Send + Sync {
    /// Stores a new open ticket under the next id and returns it. With the call's `key`
    /// (`RequestContext::call_key`), a call seen before gets the ticket it opened then: a
    /// client retrying after an error (which may have come after the ticket was stored) opens
    /// one ticket, not two.
    async fn open(&self, new: NewTicket, key: Option<&str>) -> Result<Ticket, StoreError>;
    /// Tickets with `status` (any if `None`) containing `query` (lowercase; any if `None`), by id.
    async fn find(
        &self,
        query: Option<&str>,
        status: Option<Status>,
    ) -> Result<Vec<Ticket>, StoreError>;
    /// One ticket, if there is one with this id.
    async fn get(&self, id: u64) -> Result<Option<Ticket>, StoreError>;
    /// Closes ticket `id` with `resolution`; `None` when there is no such ticket.
    async fn close(&self, id: u64, resolution: String) -> Result<Option<Ticket>, StoreError>;
    /// Claims call `key`'s one run of an effect (`RequestContext::call_key`), remembered for
    /// `ttl_ms` at least: [`Once::Claimed`] (take the effect, then [`TicketStore::finish_once`])
    /// or what an earlier run of the same call left. `stamp_confirmed` takes its effect once
    /// per call this way, however often a client sends its answering round again.
    async fn claim_once(&self, key: &str, ttl_ms: u64) -> Result<Once, StoreError>;
    /// Ends call `key`'s run: `done` (its effect was taken: later runs get [`Once::Done`]), or
    /// not (it failed before its effect: a later run may claim it again).
    async fn finish_once(&self, key: &str, done: bool, ttl_ms: u64) -> Result<(), StoreError>;
    /// The ids this process has seen, for completions (which cannot wait for Redis: a
    /// completer is synchronous).
    fn known_ids(&self) -> Vec<u64>;
}

/// What [`TicketStore::claim_once`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Once {
    /// This run is the call's first: take the effect.
    Claimed,
    /// An earlier run took the effect.
    Done,
    /// An earlier run claimed it and has not finished: it is running now, or its instance
    /// stopped mid-way, so whether the effect was taken is not known (not taken again).
    Running,
}

/// Ticket ids seen by this process, for [`TicketStore::known_ids`].
#[derive(Default)]
pub struct SeenIds(Mutex<BTreeSet<u64>>);

impl SeenIds {
    /// Remembers the ids of `tickets`.
    pub fn saw<'a>(&self, tickets: impl IntoIterator<Item = &'a Ticket>) {
        let mut seen = self.0.lock();
        seen.extend(tickets.into_iter().map(|t| t.id));
    }

    /// Every id seen, in order.
    pub fn all(&self) -> Vec<u64> {
        self.0.lock().iter().copied().collect()
    }
}
