//! [`MemoryTaskStore`]: task records in this process, for one instance (a fleet shares them
//! in Redis, `redis/`). Bounded like the Redis store (overall, per session, per caller, in
//! count and bytes), with ordered indexes so that expiry and eviction never scan the table.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::Serialize;

use super::{TaskLimits, TaskQuota, TaskRecord, TaskStore, TaskStoreError, TaskStoreFull};

/// Task records in memory, each dropped `ttl_ms` after its creation, bounded in count and
/// bytes overall and per owner. When a new task needs room, finished records go first, oldest
/// first; working ones are never dropped to make room (the new task is refused instead).
///
/// Every operation costs O(log n) (plus the size of the record written): expiry and eviction
/// follow ordered indexes rather than scanning the store.
#[derive(Default)]
pub struct MemoryTaskStore {
    limits: TaskLimits,
    inner: Mutex<Inner>,
}

struct Entry {
    record: TaskRecord,
    /// Serialised size, plus what its running handler holds while it works: what the byte
    /// bounds count.
    bytes: usize,
    /// The caller it counts against, and what its handler holds (both from its creation).
    caller: Option<String>,
    held: usize,
    expires: Instant,
    /// Creation order: "oldest" in every index.
    seq: u64,
}

#[derive(Default)]
struct OwnerUse {
    bytes: usize,
    /// Every record of the owner, by creation order.
    all: BTreeMap<u64, String>,
    /// Its finished records, by creation order (the eviction candidates).
    finished: BTreeMap<u64, String>,
}

#[derive(Default)]
struct Inner {
    records: HashMap<String, Entry>,
    bytes: usize,
    next_seq: u64,
    /// Expiry queue: the front is the next record to expire.
    expiry: BTreeMap<(Instant, u64), String>,
    /// Finished records of every owner, by creation order.
    finished: BTreeMap<u64, String>,
    owners: HashMap<String, OwnerUse>,
    /// The same per caller (limit key).
    callers: HashMap<String, OwnerUse>,
}

/// Whose records a bound counts.
#[derive(Clone, Copy)]
enum Group<'a> {
    All,
    Owner(&'a str),
    Caller(&'a str),
}

/// Takes a record out of a group's use.
fn leave_group(map: &mut HashMap<String, OwnerUse>, name: &str, seq: u64, bytes: usize) {
    if let Some(u) = map.get_mut(name) {
        u.bytes -= bytes;
        u.all.remove(&seq);
        u.finished.remove(&seq);
        if u.all.is_empty() {
            map.remove(name);
        }
    }
}

/// Puts a record into a group's use.
fn join_group(
    map: &mut HashMap<String, OwnerUse>,
    name: &str,
    seq: u64,
    id: &str,
    bytes: usize,
    finished: bool,
) {
    let u = map.entry(name.to_string()).or_default();
    u.bytes += bytes;
    u.all.insert(seq, id.to_string());
    if finished {
        u.finished.insert(seq, id.to_string());
    }
}

impl Inner {
    /// Drops records whose time is up, from the front of the expiry queue.
    fn expire(&mut self, now: Instant) {
        while let Some(entry) = self.expiry.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let id = entry.remove();
            self.remove(&id);
        }
    }

    fn remove(&mut self, id: &str) -> Option<Entry> {
        let e = self.records.remove(id)?;
        self.bytes -= e.bytes;
        self.expiry.remove(&(e.expires, e.seq));
        self.finished.remove(&e.seq);
        if let Some(owner) = &e.record.owner {
            leave_group(&mut self.owners, owner, e.seq, e.bytes);
        }
        if let Some(caller) = &e.caller {
            leave_group(&mut self.callers, caller, e.seq, e.bytes);
        }
        Some(e)
    }

    /// Stores `record`, keeping the expiry and place of a record already stored under its id
    /// (an update), or giving it fresh ones; its sequence number.
    fn replace(&mut self, record: &TaskRecord, now: Instant, quota: Option<&TaskQuota>) -> u64 {
        let (expires, seq, caller, held) = match self.remove(&record.task_id) {
            Some(old) => (old.expires, old.seq, old.caller, old.held),
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                let q = quota.cloned().unwrap_or_default();
                (
                    now + Duration::from_millis(record.ttl_ms),
                    seq,
                    q.caller,
                    q.held_bytes,
                )
            }
        };
        self.insert(record.clone(), expires, seq, caller, held);
        seq
    }

    fn insert(
        &mut self,
        record: TaskRecord,
        expires: Instant,
        seq: u64,
        caller: Option<String>,
        held: usize,
    ) {
        let finished = record.status.is_terminal();
        // A working task's handler still holds its arguments; an ended one holds nothing.
        let bytes = serialized_len(&record) + if finished { 0 } else { held };
        let id = record.task_id.clone();
        self.bytes += bytes;
        self.expiry.insert((expires, seq), id.clone());
        if finished {
            self.finished.insert(seq, id.clone());
        }
        if let Some(owner) = &record.owner {
            join_group(&mut self.owners, owner, seq, &id, bytes, finished);
        }
        if let Some(c) = &caller {
            join_group(&mut self.callers, c, seq, &id, bytes, finished);
        }
        self.records.insert(
            id,
            Entry {
                record,
                bytes,
                caller,
                held,
                expires,
                seq,
            },
        );
    }

    /// Drops finished records of `owner` (or of anyone, with `None`), oldest first, until
    /// `fits` holds; `keep` is never dropped. Whether it holds in the end.
    fn make_room(
        &mut self,
        group: Group<'_>,
        keep: Option<u64>,
        fits: impl Fn(&Self) -> bool,
    ) -> bool {
        while !fits(self) {
            let candidates = match group {
                Group::Owner(o) => self.owners.get(o).map(|u| &u.finished),
                Group::Caller(c) => self.callers.get(c).map(|u| &u.finished),
                Group::All => Some(&self.finished),
            };
            let victim = candidates.and_then(|c| {
                c.iter()
                    .find(|(seq, _)| Some(**seq) != keep)
                    .map(|(_, id)| id.clone())
            });
            match victim {
                Some(id) => {
                    tracing::debug!(task = %id, "a finished task record was dropped to make room");
                    self.remove(&id);
                }
                None => return false,
            }
        }
        true
    }

    fn owner_use(&self, owner: &str) -> (usize, usize) {
        self.owners
            .get(owner)
            .map_or((0, 0), |u| (u.all.len(), u.bytes))
    }

    fn caller_use(&self, caller: &str) -> (usize, usize) {
        self.callers
            .get(caller)
            .map_or((0, 0), |u| (u.all.len(), u.bytes))
    }
}

/// The size of a value as JSON, counted without building the JSON (what a task's arguments
/// cost its handler, roughly).
pub(crate) fn json_len(value: &impl Serialize) -> usize {
    serialized_len(value)
}

/// The size of a record as JSON, counted without building the JSON.
pub(super) fn serialized_len(record: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Serialising plain JSON values into a counter cannot fail; if it somehow did, the count
    // so far still bounds something.
    let _ = serde_json::to_writer(&mut c, record);
    c.0
}

impl MemoryTaskStore {
    /// A store with these bounds.
    pub fn new(limits: TaskLimits) -> Self {
        Self {
            limits,
            inner: Mutex::default(),
        }
    }

    /// Records held now (including any whose time is up but that no write has dropped yet).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.lock().records.len()
    }

    /// Bytes of the records held now.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    /// Brings the store back within its bounds (overall, its owner's, its caller's) after
    /// `record` (stored as `seq`) grew, dropping
    /// other finished records; a working record is kept even over the bounds (it is counted,
    /// and new tasks are refused until there is room).
    fn settle(&self, inner: &mut Inner, record: &TaskRecord, seq: u64) {
        let owner = record.owner.as_deref();
        let l = self.limits;
        if let Some(o) = owner {
            inner.make_room(Group::Owner(o), Some(seq), |i| {
                let (n, b) = i.owner_use(o);
                n <= l.max_tasks_per_owner && b <= l.max_bytes_per_owner
            });
        }
        let caller = inner
            .records
            .get(&record.task_id)
            .and_then(|e| e.caller.clone());
        if let Some(c) = caller.as_deref() {
            inner.make_room(Group::Caller(c), Some(seq), |i| {
                let (n, b) = i.caller_use(c);
                n <= l.max_tasks_per_caller && b <= l.max_bytes_per_caller
            });
        }
        inner.make_room(Group::All, Some(seq), |i| {
            i.records.len() <= l.max_tasks && i.bytes <= l.max_bytes
        });
    }
}

#[async_trait]
impl TaskStore for MemoryTaskStore {
    async fn put(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.expire(now);
        let seq = inner.replace(record, now, None);
        self.settle(&mut inner, record, seq);
        Ok(())
    }

    async fn create_for(
        &self,
        record: &TaskRecord,
        quota: &TaskQuota,
    ) -> Result<(), TaskStoreError> {
        let l = self.limits;
        let now = Instant::now();
        let bytes = serialized_len(record) + quota.held_bytes;
        let mut inner = self.inner.lock();
        inner.expire(now);
        if let Some(c) = quota.caller.as_deref() {
            let fits = |i: &Inner| {
                let (n, b) = i.caller_use(c);
                n < l.max_tasks_per_caller && b + bytes <= l.max_bytes_per_caller
            };
            if !inner.make_room(Group::Caller(c), None, fits) {
                let (n, _) = inner.caller_use(c);
                return Err(TaskStoreError::Full(if n >= l.max_tasks_per_caller {
                    TaskStoreFull {
                        limit: "tasks.max_tasks_per_caller",
                        max: l.max_tasks_per_caller,
                    }
                } else {
                    TaskStoreFull {
                        limit: "tasks.max_bytes_per_caller",
                        max: l.max_bytes_per_caller,
                    }
                }));
            }
        }
        if let Some(o) = record.owner.as_deref() {
            let fits = |i: &Inner| {
                let (n, b) = i.owner_use(o);
                n < l.max_tasks_per_owner && b + bytes <= l.max_bytes_per_owner
            };
            if !inner.make_room(Group::Owner(o), None, fits) {
                let (n, _) = inner.owner_use(o);
                return Err(TaskStoreError::Full(if n >= l.max_tasks_per_owner {
                    TaskStoreFull {
                        limit: "tasks.max_tasks_per_owner",
                        max: l.max_tasks_per_owner,
                    }
                } else {
                    TaskStoreFull {
                        limit: "tasks.max_bytes_per_owner",
                        max: l.max_bytes_per_owner,
                    }
                }));
            }
        }
        let fits = |i: &Inner| i.records.len() < l.max_tasks && i.bytes + bytes <= l.max_bytes;
        if !inner.make_room(Group::All, None, fits) {
            return Err(TaskStoreError::Full(
                if inner.records.len() >= l.max_tasks {
                    TaskStoreFull {
                        limit: "tasks.max_tasks",
                        max: l.max_tasks,
                    }
                } else {
                    TaskStoreFull {
                        limit: "tasks.max_bytes",
                        max: l.max_bytes,
                    }
                },
            ));
        }
        // A record already stored under this id (ids are fresh UUIDs, so only a replay) is
        // replaced, keeping its place.
        inner.replace(record, now, Some(quota));
        Ok(())
    }

    async fn get(
        &self,
        owner: Option<&str>,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        let inner = self.inner.lock();
        // Found under its owner only, as the Redis store files it (`records:<session>:<id>`):
        // a session's task is no one else's to read, a 2026-07-28 request's included.
        Ok(inner
            .records
            .get(task_id)
            .filter(|e| e.expires > Instant::now() && e.record.owner.as_deref() == owner)
            .map(|e| e.record.clone()))
    }

    async fn list(&self, owner: &str) -> Result<Vec<TaskRecord>, TaskStoreError> {
        let now = Instant::now();
        let inner = self.inner.lock();
        let Some(u) = inner.owners.get(owner) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<TaskRecord> = u
            .all
            .values()
            .filter_map(|id| inner.records.get(id))
            .filter(|e| e.expires > now)
            .map(|e| e.record.clone())
            .collect();
        TaskRecord::sort_for_list(&mut out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{limits, rec};
    use super::*;
    use crate::tasks::TaskStatus;
    use serde_json::Map;

    #[tokio::test]
    async fn a_full_store_drops_the_oldest_finished_record_and_never_a_working_one() {
        let store = MemoryTaskStore::new(limits(3, 1 << 20, 3));
        for id in ["a", "b", "c"] {
            store
                .create(&rec(id, None, TaskStatus::Working, 0))
                .await
                .unwrap();
        }
        let full = store.create(&rec("d", None, TaskStatus::Working, 0)).await;
        assert_eq!(
            full,
            Err(TaskStoreError::Full(TaskStoreFull {
                limit: "tasks.max_tasks",
                max: 3
            }))
        );
        assert_eq!(
            store.get(None, "d").await.unwrap(),
            None,
            "a refused task is not stored"
        );
        // b and then a finish: the oldest finished (a, created first) goes first.
        store
            .put(&rec("b", None, TaskStatus::Completed, 10))
            .await
            .unwrap();
        store
            .put(&rec("a", None, TaskStatus::Completed, 10))
            .await
            .unwrap();
        store
            .create(&rec("d", None, TaskStatus::Working, 0))
            .await
            .unwrap();
        assert_eq!(store.get(None, "a").await.unwrap(), None);
        assert!(store.get(None, "b").await.unwrap().is_some());
        assert!(
            store.get(None, "c").await.unwrap().is_some(),
            "working tasks stay"
        );
        store
            .create(&rec("e", None, TaskStatus::Working, 0))
            .await
            .unwrap();
        assert_eq!(store.get(None, "b").await.unwrap(), None);
        assert_eq!(store.len(), 3);
    }

    #[tokio::test]
    async fn bytes_and_owners_are_bounded_too() {
        let store = MemoryTaskStore::new(TaskLimits {
            max_tasks: 100,
            max_bytes: 10_000,
            max_tasks_per_owner: 2,
            max_bytes_per_owner: 10_000,
            max_tasks_per_caller: 100,
            max_bytes_per_caller: 10_000,
        });
        store
            .create(&rec("s1", Some("s"), TaskStatus::Working, 0))
            .await
            .unwrap();
        store
            .create(&rec("s2", Some("s"), TaskStatus::Working, 0))
            .await
            .unwrap();
        let full = store
            .create(&rec("s3", Some("s"), TaskStatus::Working, 0))
            .await;
        assert!(
            matches!(&full, Err(TaskStoreError::Full(f)) if f.limit == "tasks.max_tasks_per_owner"),
            "{full:?}"
        );
        // Another owner is not affected by this one's bound.
        store
            .create(&rec("t1", Some("t"), TaskStatus::Working, 0))
            .await
            .unwrap();
        // Finished records that outgrow the byte bound push the oldest finished out.
        store
            .put(&rec("s1", Some("s"), TaskStatus::Completed, 4000))
            .await
            .unwrap();
        store
            .put(&rec("s2", Some("s"), TaskStatus::Completed, 4000))
            .await
            .unwrap();
        store
            .put(&rec("t1", Some("t"), TaskStatus::Completed, 4000))
            .await
            .unwrap();
        assert!(store.bytes() <= 10_000, "{} bytes", store.bytes());
        assert_eq!(
            store.get(Some("s"), "s1").await.unwrap(),
            None,
            "the oldest finished went first"
        );
        assert_eq!(store.list("s").await.unwrap().len(), 1);
        assert!(
            store.get(Some("t"), "t1").await.unwrap().is_some(),
            "the record just written stays"
        );
    }

    #[tokio::test]
    async fn expired_records_leave_the_indexes() {
        let store = MemoryTaskStore::new(limits(2, 1 << 20, 2));
        let mut r = rec("old", Some("s"), TaskStatus::Working, 0);
        r.ttl_ms = 20;
        store.create(&r).await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        store
            .create(&rec("n1", Some("s"), TaskStatus::Working, 0))
            .await
            .unwrap();
        store
            .create(&rec("n2", Some("s"), TaskStatus::Working, 0))
            .await
            .unwrap();
        assert_eq!(store.len(), 2);
        assert_eq!(store.list("s").await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn records_round_trip_until_their_ttl() {
        let store = MemoryTaskStore::default();
        let rec = TaskRecord {
            task_id: "t".into(),
            status: TaskStatus::Working,
            created_at: crate::clock::iso_now(),
            last_updated_at: crate::clock::iso_now(),
            ttl_ms: 50,
            poll_interval_ms: 100,
            result: None,
            error: None,
            input_requests: Map::new(),
            owner: Some("s".into()),
            executor: None,
            principal: None,
        };
        store.put(&rec).await.unwrap();
        assert_eq!(store.list("s").await.unwrap().len(), 1);
        assert!(store.list("other").await.unwrap().is_empty());
        assert_eq!(store.get(Some("s"), "t").await.unwrap(), Some(rec));
        // Found under its session only, as the Redis store files it.
        assert_eq!(store.get(None, "t").await.unwrap(), None);
        assert_eq!(store.get(Some("other"), "t").await.unwrap(), None);
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(store.get(Some("s"), "t").await.unwrap(), None);
    }
}
