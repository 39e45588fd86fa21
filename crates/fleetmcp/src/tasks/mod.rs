//! Background tasks (the `io.modelcontextprotocol/tasks` extension of 2026-07-28): a tool
//! that supports tasks answers `tools/call` at once with a task id; the client polls
//! `tasks/get`, answers the task's questions with `tasks/update`, and may `tasks/cancel` it.
//!
//! The record of a task (status, result or error, pending questions) lives behind
//! [`TaskStore`] so that a fleet can share it (Redis comes with the HA work); what only the
//! running instance can hold (the handler's cancel token, the channels its questions wait
//! on) lives in [`Running`].

use std::collections::{BTreeMap, HashMap};

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::config::TaskConfig;
use crate::protocol::{ErrorCode, ErrorData};

/// The extension's identifier in `capabilities.extensions`.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Whether a tool runs as a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// Always answers synchronously.
    #[default]
    Forbidden,
    /// Runs as a task when the client declared the extension, synchronously otherwise.
    Optional,
    /// Only as a task: a client without the extension gets `-32021`.
    Required,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    pub task_id: String,
    pub status: TaskStatus,
    /// ISO 8601.
    pub created_at: String,
    pub last_updated_at: String,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    /// The tool's result, once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The protocol error, once failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// Questions waiting for the client, by key, while `input_required`.
    #[serde(skip_serializing_if = "Map::is_empty", default)]
    pub input_requests: Map<String, Value>,
    /// The session that created it (2025-11-25 tasks are bound to their session).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub owner: Option<String>,
}

/// Where task records live.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Writes a record (a new one, or a change to one already stored).
    async fn put(&self, record: &TaskRecord);
    async fn get(&self, task_id: &str) -> Option<TaskRecord>;
    /// The live tasks of an owner (a session), oldest first.
    async fn list(&self, owner: &str) -> Vec<TaskRecord>;
    /// Stores the record of a task about to start, or refuses it when the store is full of
    /// records it may not drop. The default stores it unconditionally.
    async fn create(&self, record: &TaskRecord) -> Result<(), TaskStoreFull> {
        self.put(record).await;
        Ok(())
    }
}

/// A new task refused because the store holds as many records as it may, none of which it
/// can drop (they are still working).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("too many tasks: {limit} ({max}) reached; retry once a task has finished")]
pub struct TaskStoreFull {
    /// The configuration key of the bound that was reached (`tasks.max_tasks`, ...).
    pub limit: &'static str,
    /// Its value.
    pub max: usize,
}

/// The bounds a [`MemoryTaskStore`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskLimits {
    /// Records kept at once.
    pub max_tasks: usize,
    /// Bytes of records (as serialised) kept at once.
    pub max_bytes: usize,
    /// Records one owner (session) keeps.
    pub max_tasks_per_owner: usize,
    /// Bytes of records one owner keeps.
    pub max_bytes_per_owner: usize,
}

impl TaskLimits {
    /// The bounds `tasks.*` configures.
    pub fn from_config(cfg: &TaskConfig) -> Self {
        Self {
            max_tasks: cfg.max_tasks,
            max_bytes: cfg.max_bytes,
            max_tasks_per_owner: cfg.max_tasks_per_owner,
            max_bytes_per_owner: cfg.max_bytes_per_owner,
        }
    }
}

impl Default for TaskLimits {
    fn default() -> Self {
        Self::from_config(&TaskConfig::default())
    }
}

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
    /// Serialised size, what the byte bounds count.
    bytes: usize,
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
        if let Some(owner) = &e.record.owner
            && let Some(u) = self.owners.get_mut(owner)
        {
            u.bytes -= e.bytes;
            u.all.remove(&e.seq);
            u.finished.remove(&e.seq);
            if u.all.is_empty() {
                self.owners.remove(owner);
            }
        }
        Some(e)
    }

    /// Stores `record`, keeping the expiry and place of a record already stored under its id
    /// (an update), or giving it fresh ones; its sequence number.
    fn replace(&mut self, record: &TaskRecord, now: Instant) -> u64 {
        let (expires, seq) = match self.remove(&record.task_id) {
            Some(old) => (old.expires, old.seq),
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                (now + Duration::from_millis(record.ttl_ms), seq)
            }
        };
        self.insert(record.clone(), expires, seq);
        seq
    }

    fn insert(&mut self, record: TaskRecord, expires: Instant, seq: u64) {
        let bytes = serialized_len(&record);
        let id = record.task_id.clone();
        let finished = record.status.is_terminal();
        self.bytes += bytes;
        self.expiry.insert((expires, seq), id.clone());
        if finished {
            self.finished.insert(seq, id.clone());
        }
        if let Some(owner) = &record.owner {
            let u = self.owners.entry(owner.clone()).or_default();
            u.bytes += bytes;
            u.all.insert(seq, id.clone());
            if finished {
                u.finished.insert(seq, id.clone());
            }
        }
        self.records.insert(
            id,
            Entry {
                record,
                bytes,
                expires,
                seq,
            },
        );
    }

    /// Drops finished records of `owner` (or of anyone, with `None`), oldest first, until
    /// `fits` holds; `keep` is never dropped. Whether it holds in the end.
    fn make_room(
        &mut self,
        owner: Option<&str>,
        keep: Option<u64>,
        fits: impl Fn(&Self) -> bool,
    ) -> bool {
        while !fits(self) {
            let candidates = match owner {
                Some(o) => self.owners.get(o).map(|u| &u.finished),
                None => Some(&self.finished),
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
}

/// The size of a record as JSON, counted without building the JSON.
fn serialized_len(record: &TaskRecord) -> usize {
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
    pub fn len(&self) -> usize {
        self.inner.lock().records.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the records held now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    /// Brings the store back within its bounds after `seq` (owned by `owner`) grew, dropping
    /// other finished records; a working record is kept even over the bounds (it is counted,
    /// and new tasks are refused until there is room).
    fn settle(&self, inner: &mut Inner, owner: Option<&str>, seq: u64) {
        let l = self.limits;
        if let Some(o) = owner {
            inner.make_room(Some(o), Some(seq), |i| {
                let (n, b) = i.owner_use(o);
                n <= l.max_tasks_per_owner && b <= l.max_bytes_per_owner
            });
        }
        inner.make_room(None, Some(seq), |i| {
            i.records.len() <= l.max_tasks && i.bytes <= l.max_bytes
        });
    }
}

#[async_trait]
impl TaskStore for MemoryTaskStore {
    async fn put(&self, record: &TaskRecord) {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.expire(now);
        let seq = inner.replace(record, now);
        self.settle(&mut inner, record.owner.as_deref(), seq);
    }

    async fn create(&self, record: &TaskRecord) -> Result<(), TaskStoreFull> {
        let l = self.limits;
        let now = Instant::now();
        let bytes = serialized_len(record);
        let mut inner = self.inner.lock();
        inner.expire(now);
        if let Some(o) = record.owner.as_deref() {
            let fits = |i: &Inner| {
                let (n, b) = i.owner_use(o);
                n < l.max_tasks_per_owner && b + bytes <= l.max_bytes_per_owner
            };
            if !inner.make_room(Some(o), None, fits) {
                let (n, _) = inner.owner_use(o);
                return Err(if n >= l.max_tasks_per_owner {
                    TaskStoreFull {
                        limit: "tasks.max_tasks_per_owner",
                        max: l.max_tasks_per_owner,
                    }
                } else {
                    TaskStoreFull {
                        limit: "tasks.max_bytes_per_owner",
                        max: l.max_bytes_per_owner,
                    }
                });
            }
        }
        let fits = |i: &Inner| i.records.len() < l.max_tasks && i.bytes + bytes <= l.max_bytes;
        if !inner.make_room(None, None, fits) {
            return Err(if inner.records.len() >= l.max_tasks {
                TaskStoreFull {
                    limit: "tasks.max_tasks",
                    max: l.max_tasks,
                }
            } else {
                TaskStoreFull {
                    limit: "tasks.max_bytes",
                    max: l.max_bytes,
                }
            });
        }
        // A record already stored under this id (ids are fresh UUIDs, so only a replay) is
        // replaced, keeping its place.
        inner.replace(record, now);
        Ok(())
    }

    async fn get(&self, task_id: &str) -> Option<TaskRecord> {
        let inner = self.inner.lock();
        inner
            .records
            .get(task_id)
            .filter(|e| e.expires > Instant::now())
            .map(|e| e.record.clone())
    }

    async fn list(&self, owner: &str) -> Vec<TaskRecord> {
        let now = Instant::now();
        let inner = self.inner.lock();
        let Some(u) = inner.owners.get(owner) else {
            return Vec::new();
        };
        let mut out: Vec<TaskRecord> = u
            .all
            .values()
            .filter_map(|id| inner.records.get(id))
            .filter(|e| e.expires > now)
            .map(|e| e.record.clone())
            .collect();
        out.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.task_id.cmp(&b.task_id))
        });
        out
    }
}

/// What the instance running a task holds for it.
pub(crate) struct Running {
    pub cancel: CancellationToken,
    /// Questions waiting for `tasks/update`, by key.
    pub waiting: Mutex<HashMap<String, oneshot::Sender<Value>>>,
}

/// How often clients should poll a task.
const POLL_INTERVAL_MS: u64 = 500;

/// The tasks of this server: their records (shared through the store) and those running on
/// this instance.
pub(crate) struct Tasks {
    store: Arc<dyn TaskStore>,
    running: Mutex<HashMap<String, Arc<Running>>>,
    /// `ttlMs` of every task.
    ttl_ms: u64,
    /// Largest record a finished task may leave (`tasks.max_result_bytes`).
    max_result_bytes: usize,
}

impl Tasks {
    pub fn new(store: Arc<dyn TaskStore>, cfg: &TaskConfig) -> Self {
        Self {
            store,
            running: Mutex::new(HashMap::new()),
            ttl_ms: cfg.ttl_ms,
            max_result_bytes: cfg.max_result_bytes,
        }
    }

    /// Creates a working task (bound to `owner`, a session, when given), stores its record
    /// before anyone can ask for it, and registers it as running here until [`Tasks::end`].
    /// A store with no room for it refuses it: the caller answers the error and nothing runs.
    pub async fn begin(
        &self,
        owner: Option<String>,
        cancel: CancellationToken,
    ) -> Result<(TaskRecord, Arc<Running>), ErrorData> {
        let now = crate::clock::iso_now();
        let record = TaskRecord {
            task_id: uuid::Uuid::new_v4().to_string(),
            status: TaskStatus::Working,
            created_at: now.clone(),
            last_updated_at: now,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: POLL_INTERVAL_MS,
            result: None,
            error: None,
            input_requests: Map::new(),
            owner,
        };
        if let Err(full) = self.store.create(&record).await {
            tracing::warn!(
                limit = full.limit,
                max = full.max,
                "a new task was refused: the task store is full"
            );
            return Err(too_many_tasks(&full));
        }
        let running = Arc::new(Running {
            cancel,
            waiting: Mutex::new(HashMap::new()),
        });
        self.running
            .lock()
            .insert(record.task_id.clone(), running.clone());
        Ok((record, running))
    }

    /// Records how a task ended (unless it already had, e.g. cancelled) and forgets it here.
    pub async fn end(&self, task_id: &str, outcome: impl FnOnce(&mut TaskRecord)) {
        if let Some(mut record) = self.store.get(task_id).await
            && !record.status.is_terminal()
        {
            record.input_requests.clear();
            outcome(&mut record);
            self.cap_result(&mut record);
            self.update(record).await;
        }
        self.running.lock().remove(task_id);
    }

    /// A result too large to keep becomes the task's failure, naming the bound, so that one
    /// task cannot fill the store (and the client learns why there is no result).
    fn cap_result(&self, record: &mut TaskRecord) {
        let size = serialized_len(record);
        if size <= self.max_result_bytes {
            return;
        }
        tracing::warn!(task = %record.task_id, bytes = size, limit = self.max_result_bytes, "a task's result exceeds tasks.max_result_bytes and was not kept");
        record.result = None;
        record.status = TaskStatus::Failed;
        let e = ErrorData::new(
            ErrorCode::INTERNAL_ERROR,
            format!(
                "The task's result ({size} bytes) exceeds tasks.max_result_bytes ({}) and was not kept",
                self.max_result_bytes
            ),
            Some(
                serde_json::json!({"limit": "tasks.max_result_bytes", "max": self.max_result_bytes}),
            ),
        );
        record.error = serde_json::to_value(&e).ok();
    }

    /// Parks a task on questions for the client: registers a waiter per question and shows
    /// them on the record (`input_required`). Returns the receivers of the answers, in order.
    pub async fn park(
        &self,
        task_id: &str,
        running: &Running,
        questions: Vec<(String, String, Value)>,
    ) -> Vec<oneshot::Receiver<Value>> {
        let mut receivers = Vec::with_capacity(questions.len());
        let mut shown = Map::new();
        {
            let mut waiting = running.waiting.lock();
            for (key, method, params) in questions {
                let (tx, rx) = oneshot::channel();
                waiting.insert(key.clone(), tx);
                shown.insert(key, serde_json::json!({"method": method, "params": params}));
                receivers.push(rx);
            }
        }
        if let Some(mut record) = self.store.get(task_id).await
            && !record.status.is_terminal()
        {
            record.status = TaskStatus::InputRequired;
            record.input_requests.extend(shown);
            self.update(record).await;
        }
        receivers
    }

    /// A task's record.
    pub async fn get(&self, task_id: &str) -> Option<TaskRecord> {
        self.store.get(task_id).await
    }

    /// The live tasks of a session, oldest first.
    pub async fn list(&self, owner: &str) -> Vec<TaskRecord> {
        self.store.list(owner).await
    }

    /// Writes a changed record, stamping `lastUpdatedAt`.
    pub async fn update(&self, mut record: TaskRecord) {
        record.last_updated_at = crate::clock::iso_now();
        self.store.put(&record).await;
    }

    /// What this instance holds for a task running here.
    pub fn running(&self, task_id: &str) -> Option<Arc<Running>> {
        self.running.lock().get(task_id).cloned()
    }
}

/// The JSON-RPC error a refused task answers: the bound reached, named.
fn too_many_tasks(full: &TaskStoreFull) -> ErrorData {
    ErrorData::new(
        ErrorCode(-32000),
        format!(
            "Too many tasks: {} ({}) reached; retry once a task has finished",
            full.limit, full.max
        ),
        Some(serde_json::json!({"limit": full.limit, "max": full.max})),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str, owner: Option<&str>, status: TaskStatus, payload: usize) -> TaskRecord {
        TaskRecord {
            task_id: id.into(),
            status,
            created_at: crate::clock::iso_now(),
            last_updated_at: crate::clock::iso_now(),
            ttl_ms: 60_000,
            poll_interval_ms: 100,
            result: (payload > 0).then(|| Value::String("x".repeat(payload))),
            error: None,
            input_requests: Map::new(),
            owner: owner.map(Into::into),
        }
    }

    fn limits(max_tasks: usize, max_bytes: usize, per_owner: usize) -> TaskLimits {
        TaskLimits {
            max_tasks,
            max_bytes,
            max_tasks_per_owner: per_owner,
            max_bytes_per_owner: max_bytes,
        }
    }

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
            Err(TaskStoreFull {
                limit: "tasks.max_tasks",
                max: 3
            })
        );
        assert_eq!(store.get("d").await, None, "a refused task is not stored");
        // b and then a finish: the oldest finished (a, created first) goes first.
        store.put(&rec("b", None, TaskStatus::Completed, 10)).await;
        store.put(&rec("a", None, TaskStatus::Completed, 10)).await;
        store
            .create(&rec("d", None, TaskStatus::Working, 0))
            .await
            .unwrap();
        assert_eq!(store.get("a").await, None);
        assert!(store.get("b").await.is_some());
        assert!(store.get("c").await.is_some(), "working tasks stay");
        store
            .create(&rec("e", None, TaskStatus::Working, 0))
            .await
            .unwrap();
        assert_eq!(store.get("b").await, None);
        assert_eq!(store.len(), 3);
    }

    #[tokio::test]
    async fn bytes_and_owners_are_bounded_too() {
        let store = MemoryTaskStore::new(TaskLimits {
            max_tasks: 100,
            max_bytes: 10_000,
            max_tasks_per_owner: 2,
            max_bytes_per_owner: 10_000,
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
        assert_eq!(full.map_err(|f| f.limit), Err("tasks.max_tasks_per_owner"));
        // Another owner is not affected by this one's bound.
        store
            .create(&rec("t1", Some("t"), TaskStatus::Working, 0))
            .await
            .unwrap();
        // Finished records that outgrow the byte bound push the oldest finished out.
        store
            .put(&rec("s1", Some("s"), TaskStatus::Completed, 4000))
            .await;
        store
            .put(&rec("s2", Some("s"), TaskStatus::Completed, 4000))
            .await;
        store
            .put(&rec("t1", Some("t"), TaskStatus::Completed, 4000))
            .await;
        assert!(store.bytes() <= 10_000, "{} bytes", store.bytes());
        assert_eq!(
            store.get("s1").await,
            None,
            "the oldest finished went first"
        );
        assert_eq!(store.list("s").await.len(), 1);
        assert!(
            store.get("t1").await.is_some(),
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
        assert_eq!(store.list("s").await.len(), 2);
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
        };
        store.put(&rec).await;
        assert_eq!(store.list("s").await.len(), 1);
        assert!(store.list("other").await.is_empty());
        assert_eq!(store.get("t").await, Some(rec));
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(store.get("t").await, None);
    }
}
