//! The session store: the durable record of a session, shared by every instance that can
//! serve it. In memory here; Redis implements the same trait for fleets (`redis/`).
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

use super::lossy::{Invalidation, InvalidationSender, Invalidations};

/// A session as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The session's id (the store's key; not the sealed id the client holds).
    pub id: String,
    /// The instance that holds the session (its machine id; `nodeId` as stored).
    #[serde(rename = "nodeId")]
    pub holder: String,
    /// The version `initialize` agreed on.
    pub protocol_version: String,
    /// The client's `clientInfo`, as sent.
    #[serde(default)]
    pub client_info: Value,
    /// The client's `capabilities`, as sent.
    #[serde(default)]
    pub client_capabilities: Value,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// The holder's term: 1 when the session is opened, one more at every claim (takeover,
    /// recreation) in distributed mode. Holder-side writes there compare it, so an instance
    /// that lost the session cannot write over its new holder's record (0: a record written
    /// before epochs existed).
    #[serde(default)]
    pub epoch: u64,
    /// The fingerprint of the principal that made the session, when authorization is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// What a holder knows of its right to a session: the machine id and epoch it holds it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The holder's machine id.
    pub holder: String,
    /// The holder's term (see [`SessionRecord::epoch`]).
    pub epoch: u64,
}

/// Whether a holder's right to a session still stands (see [`Fence`]): the heart of
/// [`SessionStore::check`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// The record names this holder and epoch.
    Mine,
    /// The record names another holder, or a later epoch: the session was claimed.
    Lost {
        /// The holder the record names.
        holder: String,
        /// Its epoch.
        epoch: u64,
    },
    /// No record (deleted, or expired).
    Gone,
}

impl Standing {
    /// Whether stored `record` is still held under `fence` (any holder's, without one).
    fn of(record: &SessionRecord, fence: Option<&Fence>) -> Self {
        if fence.is_none_or(|f| record.holder == f.holder && record.epoch == f.epoch) {
            Standing::Mine
        } else {
            Standing::Lost {
                holder: record.holder.clone(),
                epoch: record.epoch,
            }
        }
    }
}

/// The answer of [`SessionStore::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Whether the holder's right stands.
    pub standing: Standing,
    /// Whether the store will report a later change of this record (an [`Invalidation`]): until
    /// then the instance may serve the session without asking again.
    pub tracked: bool,
}

/// The answer of [`SessionStore::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The record now names the claimer, under this epoch.
    Won(u64),
    /// The record changed since it was read: this holder and epoch have it now.
    Lost {
        /// The holder the record names now.
        holder: String,
        /// Its epoch.
        epoch: u64,
    },
    /// No record.
    Gone,
}

/// A store failure: the store refused, or did not answer in time.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No answer within this many milliseconds.
    #[error("the session store did not answer within {0} ms")]
    Timeout(u64),
    /// The store could not be reached, or refused (the reason given).
    #[error("the session store is unavailable: {0}")]
    Unavailable(String),
    /// A new record was taken but not confirmed by the replicas the store was asked to wait
    /// for: it may be lost in a failover.
    #[error("the session store did not confirm the record durably: {0}")]
    NotDurable(String),
}

/// Where session records live.
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Writes a record (create, or write back after recreation).
    async fn put(&self, record: &SessionRecord) -> Result<(), StoreError>;
    /// The record of session `id`, if there is one.
    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    #[cfg(any(test, feature = "testkit"))]
    /// Whether the record still exists (cheaper than `get`).
    async fn exists(&self, id: &str) -> Result<bool, StoreError>;
    /// Pushes the record's expiry out by the store's TTL.
    async fn touch(&self, id: &str) -> Result<(), StoreError>;
    /// Deletes the record (the session ended).
    async fn delete(&self, id: &str) -> Result<(), StoreError>;
    /// Answers when the store is reachable (readiness probe).
    async fn ping(&self) -> Result<(), StoreError>;
    /// A short name for logs and `/readyz`.
    fn kind(&self) -> &'static str;

    /// Writes the record of a new session, naming its holder under epoch 1, and when
    /// `indexed` (distributed mode) adds it to the holder's index of sessions, for stores that
    /// keep one. A store with replicas answers only once they have it, or fails with
    /// [`StoreError::NotDurable`]: a new session is acknowledged only if it survives a
    /// failover.
    async fn create(&self, record: &SessionRecord, indexed: bool) -> Result<(), StoreError> {
        let _ = indexed;
        self.put(record).await
    }

    /// Deletes the record of a session `holder` holds and, for stores that keep one, its entry
    /// in `holder`'s index of sessions (written by [`SessionStore::create`] when `indexed`), in
    /// the same round trip: without it an `initialize`/`DELETE` loop would leave one entry per
    /// session in the index until the heartbeat prunes it a session TTL later.
    async fn delete_indexed(&self, id: &str, holder: &str) -> Result<(), StoreError> {
        let _ = holder;
        self.delete(id).await
    }

    /// Whether [`SessionStore::create`] and [`SessionStore::claim`] wait for replicas: then a
    /// new session whose record cannot be confirmed in time is refused rather than served from
    /// memory, and a takeover that cannot be is not served.
    fn waits_for_replicas(&self) -> bool {
        false
    }

    /// Whether what this store answers now is current: in a store whose server can be replaced
    /// by a failover (Redis with Sentinel), that the server it reads is still the one in charge,
    /// not an old master that came back. Asked before a holder whose lease ran out serves a
    /// session again. A store that cannot be deposed: `Ok`.
    async fn confirm_current(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Whether session `id` is still stored and, with a `fence` (distributed mode), still held
    /// by it; when `refresh`, also pushes the record's expiry out, only if it is (held). One
    /// atomic step in the stores of this crate; the default reads then touches, which is enough
    /// for a store nobody else writes to, and tracks nothing.
    async fn check(
        &self,
        id: &str,
        fence: Option<&Fence>,
        refresh: bool,
    ) -> Result<Checked, StoreError> {
        let standing = match self.get(id).await? {
            None => Standing::Gone,
            Some(r) => Standing::of(&r, fence),
        };
        if refresh && standing == Standing::Mine {
            self.touch(id).await?;
        }
        Ok(Checked {
            standing,
            tracked: false,
        })
    }

    /// The changes to records this instance checked, for a store that reports them (client-side
    /// caching); called once, when the instance starts, by the instance named `holder` (whose
    /// minted ids carry its tag, `id.rs`). `None`: every request of a held session checks its
    /// record.
    fn invalidations(&self, holder: &str) -> Option<Invalidations> {
        let _ = holder;
        None
    }

    /// Makes `to` the holder of `record`'s session under the next epoch, only if the stored
    /// record still names the holder and epoch `record` names (compare-and-set). The default
    /// reads then writes, which is atomic only for a store nobody else writes to.
    async fn claim(&self, record: &SessionRecord, to: &str) -> Result<Claim, StoreError> {
        match self.get(&record.id).await? {
            None => Ok(Claim::Gone),
            Some(r) if r.holder == record.holder && r.epoch == record.epoch => {
                let epoch = r.epoch + 1;
                self.put(&SessionRecord {
                    holder: to.to_string(),
                    epoch,
                    ..r
                })
                .await?;
                Ok(Claim::Won(epoch))
            }
            Some(r) => Ok(Claim::Lost {
                holder: r.holder,
                epoch: r.epoch,
            }),
        }
    }
}

/// Records in this process's memory, each expiring `ttl` after its last touch.
pub struct MemorySessionStore {
    ttl: Duration,
    records: Mutex<HashMap<String, (SessionRecord, Instant)>>,
    /// Writes since the last sweep: expired records are dropped every [`SWEEP_EVERY`] writes,
    /// so memory stays bounded without a background task.
    writes: std::sync::atomic::AtomicUsize,
    /// The instances sharing this store, told of every write (client-side caching in memory:
    /// several servers in one process may share one store).
    /// Each channel bounded ([`super::lossy`]): a watcher that falls behind gets one
    /// [`Invalidation::All`] for what did not fit.
    watchers: Mutex<Vec<InvalidationSender>>,
}

const SWEEP_EVERY: usize = 1024;

impl MemorySessionStore {
    /// An empty store whose records expire `ttl` after their last write or touch.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            records: Mutex::new(HashMap::new()),
            writes: std::sync::atomic::AtomicUsize::new(0),
            watchers: Mutex::new(Vec::new()),
        }
    }

    /// Tells every instance sharing the store that `id`'s record changed.
    fn changed(&self, id: &str) {
        let mut watchers = self.watchers.lock();
        watchers.retain(|w| w.send(Invalidation::Key(id.to_string())).is_ok());
    }

    /// Drops expired records.
    pub fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut map = self.records.lock();
        let before = map.len();
        map.retain(|_, (_, expires)| *expires > now);
        before - map.len()
    }

    /// How many records it holds, expired ones not yet swept included.
    #[cfg(any(test, feature = "testkit"))]
    pub fn len(&self) -> usize {
        self.records.lock().len()
    }

    /// Whether it holds no record.
    #[cfg(any(test, feature = "testkit"))]
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
        self.changed(&record.id);
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

    #[cfg(any(test, feature = "testkit"))]
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
        self.changed(id);
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    /// Tracked once an instance watches the store: every write is reported to it (an expiry is
    /// not, but a held session is checked at least every quarter of the lifetime anyway).
    async fn check(
        &self,
        id: &str,
        fence: Option<&Fence>,
        refresh: bool,
    ) -> Result<Checked, StoreError> {
        let now = Instant::now();
        let mut map = self.records.lock();
        let standing = match map.get_mut(id).filter(|(_, exp)| *exp > now) {
            None => Standing::Gone,
            Some((r, exp)) => {
                let standing = Standing::of(r, fence);
                if refresh && standing == Standing::Mine {
                    *exp = now + self.ttl;
                }
                standing
            }
        };
        drop(map);
        Ok(Checked {
            standing,
            tracked: !self.watchers.lock().is_empty(),
        })
    }

    fn invalidations(&self, _holder: &str) -> Option<Invalidations> {
        let (tx, rx) = super::lossy::invalidations();
        self.watchers.lock().push(tx);
        Some(rx)
    }

    async fn claim(&self, record: &SessionRecord, to: &str) -> Result<Claim, StoreError> {
        let now = Instant::now();
        let mut map = self.records.lock();
        let Some((r, exp)) = map.get_mut(&record.id).filter(|(_, exp)| *exp > now) else {
            return Ok(Claim::Gone);
        };
        if r.holder != record.holder || r.epoch != record.epoch {
            return Ok(Claim::Lost {
                holder: r.holder.clone(),
                epoch: r.epoch,
            });
        }
        r.holder = to.to_string();
        r.epoch += 1;
        *exp = now + self.ttl;
        let epoch = r.epoch;
        drop(map);
        self.changed(&record.id);
        Ok(Claim::Won(epoch))
    }
}

/// A stored session `id` held by `node` at the first epoch, for tests.
#[cfg(test)]
pub(crate) fn test_record(id: &str, node: &str) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        holder: node.into(),
        protocol_version: "2025-11-25".into(),
        client_info: Value::Null,
        client_capabilities: Value::Null,
        created_at: 0,
        epoch: 1,
        principal: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> SessionRecord {
        test_record(id, "n")
    }

    /// Issue 36 (gap 14): a watcher that does not keep up holds at most the bound of changes
    /// queued, and is told to check everything (`All`) for the ones that did not fit. Before,
    /// the channel was unbounded: 20,000 writes queued 20,000 changes.
    #[tokio::test]
    async fn a_watcher_behind_holds_a_bounded_queue_and_gets_all_for_the_rest() {
        let store = MemorySessionStore::new(Duration::from_secs(60));
        let mut changes = store
            .invalidations("n")
            .expect("the memory store reports changes");
        for i in 0..20_000 {
            store.put(&record(&format!("s{i}"))).await.unwrap();
        }
        assert_eq!(changes.len(), super::super::lossy::QUEUED_INVALIDATIONS);
        assert_eq!(changes.recv().await, Some(Invalidation::All));
        assert_eq!(changes.recv().await, Some(Invalidation::Key("s0".into())));
    }

    #[tokio::test]
    async fn claims_compare_holder_and_epoch() {
        let store = MemorySessionStore::new(Duration::from_secs(60));
        store.create(&record("a"), true).await.unwrap();
        let held = Fence {
            holder: "n".into(),
            epoch: 1,
        };
        let check = |id: &'static str| {
            let (store, held) = (&store, held.clone());
            async move { store.check(id, Some(&held), true).await.unwrap().standing }
        };
        assert_eq!(check("a").await, Standing::Mine);
        assert_eq!(store.claim(&record("a"), "m").await.unwrap(), Claim::Won(2));
        // A second claim from what was read before the first one loses.
        assert_eq!(
            store.claim(&record("a"), "k").await.unwrap(),
            Claim::Lost {
                holder: "m".into(),
                epoch: 2
            }
        );
        assert_eq!(
            check("a").await,
            Standing::Lost {
                holder: "m".into(),
                epoch: 2
            }
        );
        assert_eq!(store.claim(&record("b"), "m").await.unwrap(), Claim::Gone);
        assert_eq!(check("b").await, Standing::Gone);
        // Without a fence, only existence counts.
        assert_eq!(
            store.check("a", None, false).await.unwrap().standing,
            Standing::Mine
        );
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
