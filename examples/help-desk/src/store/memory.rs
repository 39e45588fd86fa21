//! Tickets in this process's memory: the default, when no Redis is configured (`cargo run -p
//! help-desk`). Every instance has its own desk.

use std::collections::{BTreeMap, HashMap, VecDeque};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{Once, StoreError, TicketStore};
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
    /// Call key → the ticket that call opened, for the last [`CALLS_KEPT`] calls with a key.
    by_call: HashMap<String, u64>,
    calls: VecDeque<String>,
    /// Call key → whether its effect was taken (else: claimed, running), for the last
    /// [`CALLS_KEPT`] calls claimed (a count, not `ttl_ms`: the process is the desk's one
    /// instance, and a round is sent again within seconds).
    once: HashMap<String, bool>,
    once_order: VecDeque<String>,
}

/// How many calls' keys are remembered: a retry comes within seconds.
const CALLS_KEPT: usize = 10_000;

#[async_trait]
impl TicketStore for MemoryStore {
    async fn open(&self, new: NewTicket, key: Option<&str>) -> Result<Ticket, StoreError> {
        let mut inner = self.inner.lock();
        if let Some(t) = key
            .and_then(|k| inner.by_call.get(k))
            .and_then(|id| inner.tickets.get(id))
        {
            return Ok(t.clone());
        }
        inner.last_id += 1;
        let t = new.with_id(inner.last_id);
        inner.tickets.insert(t.id, t.clone());
        if let Some(k) = key {
            inner.by_call.insert(k.to_string(), t.id);
            inner.calls.push_back(k.to_string());
            if inner.calls.len() > CALLS_KEPT
                && let Some(old) = inner.calls.pop_front()
            {
                inner.by_call.remove(&old);
            }
        }
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

    async fn claim_once(&self, key: &str, _ttl_ms: u64) -> Result<Once, StoreError> {
        let mut inner = self.inner.lock();
        match inner.once.get(key) {
            Some(true) => return Ok(Once::Done),
            Some(false) => return Ok(Once::Running),
            None => {}
        }
        inner.once.insert(key.to_string(), false);
        inner.once_order.push_back(key.to_string());
        if inner.once_order.len() > CALLS_KEPT
            && let Some(old) = inner.once_order.pop_front()
        {
            inner.once.remove(&old);
        }
        Ok(Once::Claimed)
    }

    async fn finish_once(&self, key: &str, done: bool, _ttl_ms: u64) -> Result<(), StoreError> {
        let mut inner = self.inner.lock();
        if done {
            if let Some(taken) = inner.once.get_mut(key) {
                *taken = true;
            }
        } else {
            // Forgotten, so a later run claims it; its place in the order goes with the
            // oldest (a key missing from the map is skipped there).
            inner.once.remove(key);
        }
        Ok(())
    }

    fn known_ids(&self) -> Vec<u64> {
        self.inner.lock().tickets.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ticket::Priority;

    fn new(title: &str) -> NewTicket {
        NewTicket {
            title: title.into(),
            description: None,
            priority: Priority::default(),
            opened_by: None,
        }
    }

    /// A call seen before gets its ticket back; calls without a key, or with another, each
    /// open one; the oldest keys are forgotten past the bound.
    #[tokio::test]
    async fn a_call_key_opens_one_ticket() {
        let store = MemoryStore::default();
        let a = store.open(new("a"), Some("k1")).await.unwrap();
        assert_eq!(
            store.open(new("a again"), Some("k1")).await.unwrap().id,
            a.id
        );
        let b = store.open(new("b"), Some("k2")).await.unwrap();
        let c = store.open(new("c"), None).await.unwrap();
        let d = store.open(new("c"), None).await.unwrap();
        assert_eq!((a.id, b.id, c.id, d.id), (1, 2, 3, 4));
        for i in 0..CALLS_KEPT {
            store
                .open(new("filler"), Some(&format!("f{i}")))
                .await
                .unwrap();
        }
        let forgotten = store.open(new("a once more"), Some("k1")).await.unwrap();
        assert_ne!(
            forgotten.id, a.id,
            "k1 was forgotten after {CALLS_KEPT} newer keys"
        );
    }

    /// A call's effect is claimed once: a second run finds it running, then done; a run that
    /// failed before its effect gives the claim back; the oldest claims go past the bound.
    #[tokio::test]
    async fn a_call_key_claims_its_effect_once() {
        let store = MemoryStore::default();
        assert_eq!(store.claim_once("k1", 1).await.unwrap(), Once::Claimed);
        assert_eq!(store.claim_once("k1", 1).await.unwrap(), Once::Running);
        store.finish_once("k1", true, 1).await.unwrap();
        assert_eq!(store.claim_once("k1", 1).await.unwrap(), Once::Done);
        assert_eq!(store.claim_once("k2", 1).await.unwrap(), Once::Claimed);
        store.finish_once("k2", false, 1).await.unwrap();
        assert_eq!(store.claim_once("k2", 1).await.unwrap(), Once::Claimed);
        for i in 0..=CALLS_KEPT {
            store.claim_once(&format!("f{i}"), 1).await.unwrap();
        }
        let inner = store.inner.lock();
        assert!(inner.once.len() <= CALLS_KEPT && inner.once_order.len() <= CALLS_KEPT);
        assert!(
            !inner.once.contains_key("k1"),
            "the oldest claim was forgotten"
        );
    }
}
