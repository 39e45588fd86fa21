//! Tickets in this process's memory: the default, when no Redis is configured (`cargo run -p
//! help-desk`). Every instance has its own desk.

use std::collections::BTreeMap;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{StoreError, TicketStore};
use crate::ticket::{NewTicket, Status, Ticket};

/// Tickets in memory, ids counted from 1.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    last_id: u64,
    tickets: BTreeMap<u64, Ticket>,
}

#[async_trait]
impl TicketStore for MemoryStore {
    async fn open(&self, new: NewTicket) -> Result<Ticket, StoreError> {
        let mut inner = self.inner.lock();
        inner.last_id += 1;
        let t = new.with_id(inner.last_id);
        inner.tickets.insert(t.id, t.clone());
        Ok(t)
    }

    async fn find(
        &self,
        query: Option<&str>,
        status: Option<Status>,
    ) -> Result<Vec<Ticket>, StoreError> {
        let inner = self.inner.lock();
        Ok(inner
            .tickets
            .values()
            .filter(|t| t.matches(query, status))
            .cloned()
            .collect())
    }

    async fn get(&self, id: u64) -> Result<Option<Ticket>, StoreError> {
        Ok(self.inner.lock().tickets.get(&id).cloned())
    }

    async fn close(&self, id: u64, resolution: String) -> Result<Option<Ticket>, StoreError> {
        let mut inner = self.inner.lock();
        Ok(inner.tickets.get_mut(&id).map(|t| {
            t.close(resolution);
            t.clone()
        }))
    }

    fn known_ids(&self) -> Vec<u64> {
        self.inner.lock().tickets.keys().copied().collect()
    }
}
