//! The session store: the durable record of a session, shared by every instance that can
//! serve it. Memory now; Redis implements the same trait for fleets.
//!
//! The record is what another instance needs to serve a session it did not create: the
//! negotiated version, the client's capabilities and info, and the instance that holds it.
//! Runtime state (open streams, requests waiting on the client) is not here: it lives with
//! the instance that holds the session.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A session as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    pub id: String,
    /// The instance that holds the session.
    pub node_id: String,
    pub protocol_version: String,
    #[serde(default)]
    pub client_info: Value,
    #[serde(default)]
    pub client_capabilities: Value,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
}

/// A store failure: the store refused, or did not answer in time.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the session store did not answer within {0} ms")]
    Timeout(u64),
    #[error("the session store is unavailable: {0}")]
    Unavailable(String),
}

/// Where session records live.
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Writes a record (create, or write back after recreation).
    async fn put(&self, record: &SessionRecord) -> Result<(), StoreError>;
    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Whether the record still exists (cheaper than `get`).
    async fn exists(&self, id: &str) -> Result<bool, StoreError>;
    /// Pushes the record's expiry out by the store's TTL.
    async fn touch(&self, id: &str) -> Result<(), StoreError>;
    async fn delete(&self, id: &str) -> Result<(), StoreError>;
    /// Answers when the store is reachable (readiness probe).
    async fn ping(&self) -> Result<(), StoreError>;
    /// A short name for logs and `/readyz`.
    fn kind(&self) -> &'static str;
}

/// Records in this process's memory, each expiring `ttl` after its last touch.
pub struct MemorySessionStore {
    ttl: Duration,
    records: Mutex<HashMap<String, (SessionRecord, Instant)>>,
    /// Writes since the last sweep: expired records are dropped every [`SWEEP_EVERY`] writes,
    /// so memory stays bounded without a background task.
    writes: std::sync::atomic::AtomicUsize,
}

const SWEEP_EVERY: usize = 1024;

impl MemorySessionStore {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            records: Mutex::new(HashMap::new()),
            writes: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Drops expired records.
    pub fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut map = self.records.lock();
        let before = map.len();
        map.retain(|_, (_, expires)| *expires > now);
        before - map.len()
    }

    pub fn len(&self) -> usize {
        self.records.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl SessionStore for MemorySessionStore {
    async fn put(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let n = self
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep();
        }
        self.records.lock().insert(
            record.id.clone(),
            (record.clone(), Instant::now() + self.ttl),
        );
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let now = Instant::now();
        Ok(self
            .records
            .lock()
            .get(id)
            .filter(|(_, exp)| *exp > now)
            .map(|(r, _)| r.clone()))
    }

    async fn exists(&self, id: &str) -> Result<bool, StoreError> {
        let now = Instant::now();
        Ok(self
            .records
            .lock()
            .get(id)
            .is_some_and(|(_, exp)| *exp > now))
    }

    async fn touch(&self, id: &str) -> Result<(), StoreError> {
        if let Some((_, exp)) = self.records.lock().get_mut(id) {
            *exp = Instant::now() + self.ttl;
        }
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.records.lock().remove(id);
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> SessionRecord {
        SessionRecord {
            id: id.into(),
            node_id: "n".into(),
            protocol_version: "2025-11-25".into(),
            client_info: Value::Null,
            client_capabilities: Value::Null,
            created_at: 0,
        }
    }

    #[tokio::test]
    async fn records_expire_unless_touched() {
        let store = MemorySessionStore::new(Duration::from_millis(80));
        store.put(&record("a")).await.unwrap();
        store.put(&record("b")).await.unwrap();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(40)).await;
            store.touch("a").await.unwrap();
        }
        assert!(store.exists("a").await.unwrap());
        assert!(!store.exists("b").await.unwrap());
        assert_eq!(store.sweep(), 1);
        store.delete("a").await.unwrap();
        assert_eq!(store.get("a").await.unwrap(), None);
    }
}
