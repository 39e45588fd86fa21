//! Background tasks (the `io.modelcontextprotocol/tasks` extension of 2026-07-28): a tool
//! that supports tasks answers `tools/call` at once with a task id; the client polls
//! `tasks/get`, answers the task's questions with `tasks/update`, and may `tasks/cancel` it.
//!
//! The record of a task (status, result or error, pending questions) lives behind
//! [`TaskStore`]: in memory ([`MemoryTaskStore`]) for one instance, in Redis
//! ([`RedisTaskStore`], `redis.rs`) whenever the server has Redis, so that any instance answers
//! `tasks/get`, `tasks/list` and `tasks/result`. What only the running instance can hold (the
//! handler's cancel token, the channels its questions wait on) lives in [`Running`].
//!
//! In a shared store each record names its executor (machine id and start time). A
//! `tasks/cancel` received elsewhere reaches the executor through the store
//! ([`TaskStore::signal_cancel`]); a task whose executor died is ended as `failed` by whichever
//! instance reads it and finds the executor gone ([`ProcessLiveness`], implemented by the
//! cluster), or by the orphan scanner ([`Tasks::fail_tasks_of`]).
//!
//! With authorization on, a record names the principal that started it (its fingerprint, never
//! its token), and [`Tasks::get_as`] gives it to that principal only: to anyone else it is a
//! task that does not exist. Without authorization every task is anonymous, as before.
//!
//! Both stores bound the records overall, per session and per caller (a [`TaskQuota`]: the
//! caller's limit key, so one client cannot fill the table for everyone), in count and bytes,
//! charging a working task what its handler holds besides its record (its arguments).

mod redis;

pub use redis::RedisTaskStore;
pub(crate) use redis::{CancelSignal, executor_index_key};

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
pub(crate) use crate::liveness::ProcessLiveness;
use crate::protocol::{ErrorCode, ErrorData, errors};

/// The message of a task that ended because the instance running it stopped.
pub const EXECUTOR_GONE_MESSAGE: &str = "The instance running this task stopped before it finished";

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

/// Where a task is in its life.
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
    /// Whether the task has ended (a terminal record is never rewritten in a shared store).
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
    /// The instance running it, in a shared store (absent in memory: there is only one).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub executor: Option<Executor>,
    /// The fingerprint of the principal that started it ([`crate::auth::Principal::fingerprint`],
    /// never the token), with authorization on: only that principal may read, answer or cancel
    /// it. Absent (anonymous) without authorization, and in records written before it existed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub principal: Option<String>,
}

impl TaskRecord {
    /// Whether `caller` (a principal's fingerprint; `None`: anonymous) may see this task: only
    /// the principal that started it, and an anonymous task only anonymously.
    pub fn is_visible_to(&self, caller: Option<&str>) -> bool {
        self.principal.as_deref() == caller
    }
}

/// The instance that runs a task, as its record names it (the contract's `executor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Executor {
    /// The executing instance's machine id.
    pub node_id: String,
    /// When the task started there (Unix ms). A heartbeat under the same machine id that
    /// started later belongs to a newer process, so this task's executor is gone.
    pub spawned_at: u64,
}

/// Where task records live.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Writes a record (a new one, or a change to one already stored). A shared store never
    /// rewrites a record that has ended (a task's end is final, whoever wrote it first): such a
    /// write, like one to a record that has expired, is dropped, and is no error.
    /// `Err(Unavailable)`: the store did not answer, so the write may not have happened.
    async fn put(&self, record: &TaskRecord) -> Result<(), TaskStoreError>;
    /// The record of `task_id`, filed under `owner` (its session; `None` for a task of no
    /// session). A store may find it without the owner (memory does); callers check ownership.
    /// `Ok(None)`: there is no such record; `Err(Unavailable)`: the store could not tell.
    async fn get(
        &self,
        owner: Option<&str>,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError>;
    /// The live tasks of an owner (a session), oldest first.
    async fn list(&self, owner: &str) -> Result<Vec<TaskRecord>, TaskStoreError>;
    /// Stores the record of a task about to start, or refuses it when the store is full of
    /// records it may not drop (or cannot be reached). The default stores it unconditionally.
    async fn create(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
        self.put(record).await
    }
    /// [`TaskStore::create`], counting the new task against its caller's bounds too, and
    /// charging, while it works, the bytes its running handler holds (`quota.held_bytes`).
    /// The default ignores the quota.
    async fn create_for(
        &self,
        record: &TaskRecord,
        quota: &TaskQuota,
    ) -> Result<(), TaskStoreError> {
        let _ = quota;
        self.create(record).await
    }
    /// Writes `next` only if the stored record is still the one `seen` was (same status, same
    /// `lastUpdatedAt`, same executor) and has not ended: the compare-and-set that ends an
    /// orphaned task without undoing a write that came first. Whether it was written.
    async fn replace_if_unchanged(
        &self,
        seen: &TaskRecord,
        next: &TaskRecord,
    ) -> Result<bool, TaskStoreError> {
        match self.get(seen.owner.as_deref(), &seen.task_id).await? {
            Some(cur)
                if !cur.status.is_terminal()
                    && cur.status == seen.status
                    && cur.last_updated_at == seen.last_updated_at
                    && cur.executor == seen.executor =>
            {
                self.put(next).await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
    /// Asks the instance running `task_id` (if another) to stop it. Memory: nothing to do,
    /// every task runs here.
    async fn signal_cancel(&self, _task_id: &str) {}
    /// Hands the client's answers to a task's questions to the instance running it (if
    /// another). Memory: nothing to do, every task runs here.
    async fn signal_answers(
        &self,
        _task_id: &str,
        _answers: &Map<String, Value>,
    ) -> Result<(), TaskStoreError> {
        Ok(())
    }
    /// Ends as `failed` (with `error`) every task not ended yet that `node` started before
    /// `spawned_before` (Unix ms); how many. Memory: none, every task runs here.
    async fn fail_tasks_of(&self, _node: &str, _spawned_before: u64, _error: &Value) -> usize {
        0
    }
}

/// What a new task is counted as besides its record: whose it is, and what its running
/// handler holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskQuota {
    /// The caller's limit key (the principal with authorization on, else the client's
    /// address): the per-caller bounds (`tasks.max_tasks_per_caller`,
    /// `tasks.max_bytes_per_caller`) count under it. `None`: no per-caller bound.
    pub caller: Option<String>,
    /// Bytes the running handler holds (its arguments), counted with the record until the
    /// task ends: what a crowd of working tasks costs the instance is more than their records.
    pub held_bytes: usize,
}

/// Why a new task was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskStoreError {
    /// A bound was reached.
    #[error(transparent)]
    Full(#[from] TaskStoreFull),
    /// The store could not be reached (Redis did not answer).
    #[error("the task store is unavailable: {0}")]
    Unavailable(String),
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
    /// Records one caller (limit key) keeps.
    pub max_tasks_per_caller: usize,
    /// Bytes of records (and of what their running handlers hold) one caller keeps.
    pub max_bytes_per_caller: usize,
}

impl TaskLimits {
    /// The bounds `tasks.*` configures.
    pub fn from_config(cfg: &TaskConfig) -> Self {
        Self {
            max_tasks: cfg.max_tasks,
            max_bytes: cfg.max_bytes,
            max_tasks_per_owner: cfg.max_tasks_per_owner,
            max_bytes_per_owner: cfg.max_bytes_per_owner,
            // Above the totals they never bind first: the totals do, and are named.
            max_tasks_per_caller: cfg.max_tasks_per_caller,
            max_bytes_per_caller: cfg.max_bytes_per_caller,
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
fn serialized_len(record: &impl Serialize) -> usize {
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

    async fn create(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
        self.create_for(record, &TaskQuota::default()).await
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
        _owner: Option<&str>,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        let inner = self.inner.lock();
        Ok(inner
            .records
            .get(task_id)
            .filter(|e| e.expires > Instant::now())
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
        out.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.task_id.cmp(&b.task_id))
        });
        Ok(out)
    }
}

/// What the instance running a task holds for it.
pub(crate) struct Running {
    pub cancel: CancellationToken,
    /// Questions waiting for `tasks/update`, by key.
    pub waiting: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// The session the task belongs to (where its record is filed).
    pub owner: Option<String>,
}

/// How often clients should poll a task.
const POLL_INTERVAL_MS: u64 = 500;

/// This instance in a shared store: what it stamps on the tasks it runs, and how it tells
/// whether another task's executor is gone.
struct Fleet {
    node: String,
    liveness: Option<Arc<dyn ProcessLiveness>>,
}

/// The tasks of this server: their records (shared through the store) and those running on
/// this instance.
pub(crate) struct Tasks {
    store: Arc<dyn TaskStore>,
    running: Mutex<HashMap<String, Arc<Running>>>,
    /// `ttlMs` of every task.
    ttl_ms: u64,
    /// Largest record a finished task may leave (`tasks.max_result_bytes`).
    max_result_bytes: usize,
    /// Set when the store is shared with other instances.
    fleet: Option<Fleet>,
}

impl Tasks {
    pub fn new(store: Arc<dyn TaskStore>, cfg: &TaskConfig) -> Self {
        Self {
            store,
            running: Mutex::new(HashMap::new()),
            ttl_ms: cfg.ttl_ms,
            max_result_bytes: cfg.max_result_bytes,
            fleet: None,
        }
    }

    /// The store is shared with other instances: tasks started here name `node` as their
    /// executor, and `liveness` (when the cluster provides it) tells when another task's
    /// executor is gone.
    pub fn shared(mut self, node: &str, liveness: Option<Arc<dyn ProcessLiveness>>) -> Self {
        self.fleet = Some(Fleet {
            node: node.to_string(),
            liveness,
        });
        self
    }

    /// Creates a working task (bound to `owner`, a session, when given, and to `principal`, the
    /// fingerprint of its caller, with authorization on), stores its record before anyone can
    /// ask for it, and registers it as running here until [`Tasks::end`]. A store with no room
    /// for it refuses it: the caller answers the error and nothing runs.
    #[cfg(test)]
    pub async fn begin(
        &self,
        owner: Option<String>,
        principal: Option<String>,
        cancel: CancellationToken,
    ) -> Result<(TaskRecord, Arc<Running>), ErrorData> {
        self.begin_for(owner, principal, TaskQuota::default(), cancel)
            .await
    }

    /// [`Tasks::begin`], counting the task against its caller's bounds and charging what its
    /// handler holds ([`TaskQuota`]).
    pub async fn begin_for(
        &self,
        owner: Option<String>,
        principal: Option<String>,
        quota: TaskQuota,
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
            owner: owner.clone(),
            executor: self.fleet.as_ref().map(|f| Executor {
                node_id: f.node.clone(),
                spawned_at: crate::clock::unix_ms(),
            }),
            principal,
        };
        // Registered before the record is visible, so a cancel signal from another instance
        // that follows the record at once finds the task here.
        let running = Arc::new(Running {
            cancel,
            waiting: Mutex::new(HashMap::new()),
            owner,
        });
        self.running
            .lock()
            .insert(record.task_id.clone(), running.clone());
        if let Err(e) = self.store.create_for(&record, &quota).await {
            self.running.lock().remove(&record.task_id);
            return Err(match e {
                TaskStoreError::Full(full) => {
                    tracing::warn!(
                        limit = full.limit,
                        max = full.max,
                        "a new task was refused: the task store is full"
                    );
                    too_many_tasks(&full)
                }
                TaskStoreError::Unavailable(why) => {
                    tracing::warn!(error = %why, "a new task was refused: the task store is unavailable");
                    unavailable()
                }
            });
        }
        Ok((record, running))
    }

    /// Records how a task ended (unless it already had, e.g. cancelled) and forgets it here.
    ///
    /// A store that does not answer is asked again (100 ms doubling to 2 s) until it does, for
    /// as long as the record may live: the end is the one write of a task that must not be
    /// lost. Until it is stored the task stays registered as running here, so that no reader
    /// takes its record for one a previous process left under this machine id and fails it.
    pub async fn end(
        &self,
        owner: Option<&str>,
        task_id: &str,
        outcome: impl FnOnce(&mut TaskRecord),
    ) {
        let read = self
            .until_stored(task_id, "end", None, || self.store.get(owner, task_id))
            .await
            .flatten();
        if let Some(mut record) = read
            && !record.status.is_terminal()
        {
            record.input_requests.clear();
            outcome(&mut record);
            self.cap_result(&mut record);
            record.last_updated_at = crate::clock::iso_now();
            self.until_stored(task_id, "end", None, || self.store.put(&record))
                .await;
        }
        self.running.lock().remove(task_id);
    }

    /// Runs `op` until the store answers it: on `Unavailable`, again after 100 ms doubling to
    /// 2 s, until the task's record would have expired or `stop` fires. `None`: given up.
    async fn until_stored<T, F, Fut>(
        &self,
        task_id: &str,
        what: &str,
        stop: Option<&CancellationToken>,
        mut op: F,
    ) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, TaskStoreError>>,
    {
        let deadline = Instant::now() + Duration::from_millis(self.ttl_ms);
        let mut wait = Duration::from_millis(100);
        let mut warned = false;
        loop {
            let e = match op().await {
                Ok(v) => return Some(v),
                Err(e) => e,
            };
            if !warned {
                tracing::warn!(task = %task_id, error = %e, "a task's {what} could not be stored; retrying until the task store answers");
                warned = true;
            }
            if Instant::now() + wait >= deadline {
                tracing::error!(task = %task_id, "a task's {what} could not be stored before its record expired; given up");
                return None;
            }
            match stop {
                Some(stop) => tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => return None,
                },
                None => tokio::time::sleep(wait).await,
            }
            wait = (wait * 2).min(Duration::from_secs(2));
        }
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
        // Retried like the end: a lost write would leave the client never asked.
        let owner = running.owner.as_deref();
        let stop = Some(&running.cancel);
        let read = self
            .until_stored(task_id, "questions", stop, || {
                self.store.get(owner, task_id)
            })
            .await
            .flatten();
        if let Some(mut record) = read
            && !record.status.is_terminal()
        {
            record.status = TaskStatus::InputRequired;
            record.input_requests.extend(shown);
            record.last_updated_at = crate::clock::iso_now();
            self.until_stored(task_id, "questions", stop, || self.store.put(&record))
                .await;
        }
        receivers
    }

    /// A task's record (filed under `owner`, its session, if any). A task whose executor is
    /// found gone is ended as `failed` first. A store that does not answer is the refusal a
    /// client retries ([`errors::unavailable`]), never "unknown task": the task may well exist.
    pub async fn get(
        &self,
        owner: Option<&str>,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, ErrorData> {
        let Some(record) = self.store.get(owner, task_id).await.map_err(refused)? else {
            return Ok(None);
        };
        let mut gone = HashMap::new();
        Ok(Some(self.settle_orphan(record, &mut gone).await))
    }

    /// [`Tasks::get`] on behalf of `caller` (a principal's fingerprint; `None`: anonymous):
    /// `None` for a task another principal started, exactly as for one that does not exist,
    /// and checked before anything else, so another principal's read changes nothing (not
    /// even the end of an orphaned task).
    pub async fn get_as(
        &self,
        owner: Option<&str>,
        caller: Option<&str>,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, ErrorData> {
        let Some(record) = self.store.get(owner, task_id).await.map_err(refused)? else {
            return Ok(None);
        };
        if !record.is_visible_to(caller) {
            tracing::warn!(task = %task_id, "a task was asked for by a principal other than the one that started it; answered as unknown");
            return Ok(None);
        }
        let mut gone = HashMap::new();
        Ok(Some(self.settle_orphan(record, &mut gone).await))
    }

    /// The live tasks of a session, oldest first (orphaned ones ended as in [`Tasks::get`]).
    pub async fn list(&self, owner: &str) -> Result<Vec<TaskRecord>, ErrorData> {
        let records = self.store.list(owner).await.map_err(refused)?;
        let mut gone = HashMap::new();
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(self.settle_orphan(r, &mut gone).await);
        }
        Ok(out)
    }

    /// Whether the executor of a task not ended is gone. `known`: answers already obtained
    /// in this call, by `(node, spawned_at)`, so a list asks once per executor.
    async fn executor_gone(
        &self,
        record: &TaskRecord,
        known: &mut HashMap<(String, u64), bool>,
    ) -> bool {
        let (Some(fleet), Some(ex)) = (&self.fleet, &record.executor) else {
            return false;
        };
        if record.status.is_terminal() {
            return false;
        }
        if ex.node_id == fleet.node {
            // Our machine id: a task runs here from before its record exists until after its
            // end is written, so one not running here was left by a previous process under
            // this id, or ended without its end being recorded (Redis failed then).
            return !self.running.lock().contains_key(&record.task_id);
        }
        let Some(liveness) = &fleet.liveness else {
            return false;
        };
        let key = (ex.node_id.clone(), ex.spawned_at);
        if let Some(&g) = known.get(&key) {
            return g;
        }
        let g = liveness.is_gone(&ex.node_id, ex.spawned_at).await;
        known.insert(key, g);
        g
    }

    /// Ends `record` as `failed` if its executor is gone, with a compare-and-set so that a
    /// write that came first (the executor finishing, a cancel) is kept; the record as stored.
    async fn settle_orphan(
        &self,
        record: TaskRecord,
        known: &mut HashMap<(String, u64), bool>,
    ) -> TaskRecord {
        if !self.executor_gone(&record, known).await {
            return record;
        }
        let failed = orphan_failed(&record);
        // A store that does not answer decides nothing: the record is shown as read.
        if let Ok(true) = self.store.replace_if_unchanged(&record, &failed).await {
            tracing::warn!(
                task = %record.task_id,
                executor = record.executor.as_ref().map(|e| e.node_id.as_str()).unwrap_or(""),
                "a task's executor is gone; the task failed"
            );
            return failed;
        }
        // Something was written first (or the store did not answer): show what is stored.
        match self
            .store
            .get(record.owner.as_deref(), &record.task_id)
            .await
        {
            Ok(Some(stored)) => stored,
            _ => record,
        }
    }

    /// Ends as `failed` every task not ended yet that instance `node` started before
    /// `spawned_before` (Unix ms), with [`EXECUTOR_GONE_MESSAGE`]; how many were ended.
    ///
    /// For the orphan scanner (in `cluster`): call it once `node` is known to be gone (no
    /// heartbeat and no subscriber on its channel, or no heartbeat for the takeover grace),
    /// with `spawned_before` = the time it was found gone, so that tasks of a new process
    /// started under the same machine id since are left alone. Each record is ended with a
    /// compare-and-set, so a task that ended meanwhile keeps its end; calling it twice, or on
    /// several instances at once, is harmless. Without a shared store it does nothing.
    pub async fn fail_tasks_of(&self, node: &str, spawned_before: u64) -> usize {
        let error = executor_gone_error(node);
        let n = self.store.fail_tasks_of(node, spawned_before, &error).await;
        if n > 0 {
            tracing::warn!(
                executor = node,
                tasks = n,
                "the tasks of a stopped instance failed"
            );
        }
        n
    }

    /// Writes a changed record, stamping `lastUpdatedAt`.
    async fn update(&self, mut record: TaskRecord) -> Result<(), ErrorData> {
        record.last_updated_at = crate::clock::iso_now();
        self.store.put(&record).await.map_err(refused)
    }

    /// Cancels a task that has not ended: stops it if it runs here, records it cancelled, and
    /// otherwise asks its executor (through the store) to stop it. The record as stored after.
    /// A store that does not answer refuses the cancel of a task running elsewhere (the client
    /// asks again); one running here is stopped all the same, and its end records it.
    pub async fn cancel(&self, mut r: TaskRecord) -> Result<TaskRecord, ErrorData> {
        let here = self.running(&r.task_id);
        if let Some(running) = &here {
            running.cancel.cancel();
        }
        r.status = TaskStatus::Cancelled;
        r.input_requests.clear();
        match self.update(r.clone()).await {
            Ok(()) => {}
            Err(_) if here.is_some() => return Ok(r),
            Err(e) => return Err(e),
        }
        if self.fleet.is_none() {
            return Ok(r);
        }
        if here.is_none() {
            // Written first, so the executor, once stopped, finds the task ended already.
            self.store.signal_cancel(&r.task_id).await;
        }
        // A shared record may have ended another way first (that end is kept).
        match self.store.get(r.owner.as_deref(), &r.task_id).await {
            Ok(Some(stored)) => Ok(stored),
            _ => Ok(r),
        }
    }

    /// Takes the client's answers to a task's questions (`tasks/update`): hands them to the
    /// questions waiting here and records the task working again once none is left; for a task
    /// running on another instance, sends them to it (its executor does the same there). A
    /// store that does not answer refuses them, and the client sends them again: a question
    /// answered already is no longer waiting, so an answer is never taken twice, and the record
    /// then drops it.
    pub async fn answer(
        &self,
        mut r: TaskRecord,
        answers: Map<String, Value>,
    ) -> Result<(), ErrorData> {
        let Some(running) = self.running(&r.task_id) else {
            if self.fleet.is_some() && !r.status.is_terminal() {
                return self
                    .store
                    .signal_answers(&r.task_id, &answers)
                    .await
                    .map_err(refused);
            }
            return Ok(());
        };
        {
            let mut waiting = running.waiting.lock();
            for (key, answer) in answers {
                if let Some(tx) = waiting.remove(&key) {
                    let _ = tx.send(answer);
                }
            }
            // The record shows exactly the questions still waiting.
            r.input_requests.retain(|key, _| waiting.contains_key(key));
        }
        if r.status == TaskStatus::InputRequired && r.input_requests.is_empty() {
            r.status = TaskStatus::Working;
        }
        self.update(r).await
    }

    /// What this instance holds for a task running here.
    pub fn running(&self, task_id: &str) -> Option<Arc<Running>> {
        self.running.lock().get(task_id).cloned()
    }

    /// Follows the cancel signals of a shared store until they end: stops the tasks they name
    /// that run here, and after every (re)subscription stops those whose record has ended
    /// elsewhere meanwhile (a signal sent while the subscription was down is lost).
    pub async fn follow(&self, mut signals: tokio::sync::mpsc::Receiver<CancelSignal>) {
        while let Some(signal) = signals.recv().await {
            match signal {
                CancelSignal::Cancel(task_id) => {
                    if let Some(running) = self.running(&task_id) {
                        tracing::info!(task = %task_id, "a task was cancelled through another instance; stopping it");
                        running.cancel.cancel();
                    }
                }
                CancelSignal::Answers(task_id, answers) => {
                    if self.running(&task_id).is_none() {
                        continue;
                    }
                    let owner = self.running(&task_id).and_then(|r| r.owner.clone());
                    if let Ok(Some(r)) = self.store.get(owner.as_deref(), &task_id).await {
                        tracing::debug!(task = %task_id, "a task's answers arrived through another instance");
                        // The answers reached their questions even if the record's change
                        // could not be stored; the task's next write shows it.
                        let _ = self.answer(r, answers).await;
                    }
                }
                CancelSignal::Resync => {
                    let here: Vec<(String, Arc<Running>)> = self
                        .running
                        .lock()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    for (id, running) in here {
                        if let Ok(Some(r)) = self.store.get(running.owner.as_deref(), &id).await
                            && r.status.is_terminal()
                        {
                            tracing::info!(task = %id, "a task ended elsewhere while cancel signals were not received; stopping it");
                            running.cancel.cancel();
                        }
                    }
                }
            }
        }
    }
}

/// How long a client refused because the task store did not answer waits before it asks again.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(1);

/// The refusal of a task request the store could not serve (`503` with `Retry-After` over
/// HTTP): nothing changed, and the client asks again.
fn unavailable() -> ErrorData {
    errors::unavailable(
        "The task store is unavailable; retry shortly",
        UNAVAILABLE_RETRY,
    )
}

/// [`unavailable`], for a store error of a request that creates nothing (a full store only
/// refuses new tasks, so it cannot come here).
fn refused(e: TaskStoreError) -> ErrorData {
    tracing::debug!(error = %e, "a task request was refused: the task store did not answer");
    unavailable()
}

/// The error of a task whose executor is gone.
fn executor_gone_error(node: &str) -> Value {
    let e = ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        EXECUTOR_GONE_MESSAGE,
        Some(serde_json::json!({"executor": node})),
    );
    serde_json::to_value(&e).unwrap_or(Value::Null)
}

/// `record` ended as `failed` because its executor is gone.
fn orphan_failed(record: &TaskRecord) -> TaskRecord {
    let mut failed = record.clone();
    failed.status = TaskStatus::Failed;
    failed.input_requests.clear();
    failed.result = None;
    let node = record
        .executor
        .as_ref()
        .map(|e| e.node_id.as_str())
        .unwrap_or("");
    failed.error = Some(executor_gone_error(node));
    failed.last_updated_at = crate::clock::iso_now();
    failed
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
            executor: None,
            principal: None,
        }
    }

    fn limits(max_tasks: usize, max_bytes: usize, per_owner: usize) -> TaskLimits {
        TaskLimits {
            max_tasks,
            max_bytes,
            max_tasks_per_owner: per_owner,
            max_bytes_per_owner: max_bytes,
            max_tasks_per_caller: max_tasks,
            max_bytes_per_caller: max_bytes,
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
            store.get(None, "s1").await.unwrap(),
            None,
            "the oldest finished went first"
        );
        assert_eq!(store.list("s").await.unwrap().len(), 1);
        assert!(
            store.get(None, "t1").await.unwrap().is_some(),
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
        assert_eq!(store.get(None, "t").await.unwrap(), Some(rec));
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(store.get(None, "t").await.unwrap(), None);
    }

    /// A fleet's view in miniature: a memory store that records cancel signals, and a
    /// liveness that says whatever the test sets.
    #[derive(Default)]
    struct Spy {
        inner: MemoryTaskStore,
        signals: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl TaskStore for Spy {
        async fn put(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
            self.inner.put(record).await
        }
        async fn get(
            &self,
            owner: Option<&str>,
            task_id: &str,
        ) -> Result<Option<TaskRecord>, TaskStoreError> {
            self.inner.get(owner, task_id).await
        }
        async fn list(&self, owner: &str) -> Result<Vec<TaskRecord>, TaskStoreError> {
            self.inner.list(owner).await
        }
        async fn signal_cancel(&self, task_id: &str) {
            self.signals.lock().push(task_id.to_string());
        }
    }

    struct Gone(
        std::sync::atomic::AtomicBool,
        std::sync::atomic::AtomicUsize,
    );

    #[async_trait]
    impl ProcessLiveness for Gone {
        async fn is_gone(&self, _node: &str, _spawned_at: u64) -> bool {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    fn fleet(store: Arc<Spy>, gone: Arc<Gone>) -> Tasks {
        Tasks::new(store, &TaskConfig::default()).shared("me", Some(gone))
    }

    fn foreign(id: &str, owner: Option<&str>, node: &str, spawned_at: u64) -> TaskRecord {
        let mut r = rec(id, owner, TaskStatus::Working, 0);
        r.executor = Some(Executor {
            node_id: node.into(),
            spawned_at,
        });
        r
    }

    #[tokio::test]
    async fn a_task_whose_executor_is_gone_fails_once_read_and_an_alive_one_stays() {
        let store = Arc::new(Spy::default());
        let gone = Arc::new(Gone(false.into(), 0.into()));
        let tasks = fleet(store.clone(), gone.clone());
        store
            .put(&foreign("t", Some("s"), "other", 1))
            .await
            .unwrap();
        store
            .put(&foreign("u", Some("s"), "other", 1))
            .await
            .unwrap();

        let r = tasks.get(Some("s"), "t").await.unwrap().unwrap();
        assert_eq!(r.status, TaskStatus::Working, "alive executor");

        gone.0.store(true, std::sync::atomic::Ordering::SeqCst);
        let before = gone.1.load(std::sync::atomic::Ordering::SeqCst);
        let listed = tasks.list("s").await.unwrap();
        assert!(listed.iter().all(|r| r.status == TaskStatus::Failed));
        assert_eq!(
            gone.1.load(std::sync::atomic::Ordering::SeqCst) - before,
            1,
            "a list asks once per executor"
        );
        let stored = store.get(Some("s"), "t").await.unwrap().unwrap();
        assert_eq!(stored.status, TaskStatus::Failed, "written to the store");
        let e = stored.error.unwrap();
        assert_eq!(e["message"], EXECUTOR_GONE_MESSAGE);
        assert_eq!(e["data"]["executor"], "other");
    }

    #[tokio::test]
    async fn a_task_of_a_previous_process_under_our_id_fails_and_ours_do_not() {
        let store = Arc::new(Spy::default());
        // Liveness is never asked about our own id: it would say gone.
        let gone = Arc::new(Gone(true.into(), 0.into()));
        let tasks = fleet(store.clone(), gone.clone());
        store.put(&foreign("old", None, "me", 1)).await.unwrap();
        assert_eq!(
            tasks.get(None, "old").await.unwrap().unwrap().status,
            TaskStatus::Failed
        );
        let (mine, _) = tasks
            .begin(None, None, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(mine.executor.as_ref().unwrap().node_id, "me");
        assert_eq!(
            tasks
                .get(None, &mine.task_id)
                .await
                .unwrap()
                .unwrap()
                .status,
            TaskStatus::Working
        );
        assert_eq!(gone.1.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn an_ended_task_is_not_failed_by_a_late_reader() {
        let store = Arc::new(Spy::default());
        let gone = Arc::new(Gone(true.into(), 0.into()));
        let tasks = fleet(store.clone(), gone);
        let mut done = foreign("t", None, "other", 1);
        done.status = TaskStatus::Completed;
        done.result = Some(serde_json::json!({"content": []}));
        store.put(&done).await.unwrap();
        assert_eq!(tasks.get(None, "t").await.unwrap(), Some(done));
    }

    #[tokio::test]
    async fn cancel_signals_the_executor_only_for_a_task_running_elsewhere() {
        let store = Arc::new(Spy::default());
        let tasks = fleet(store.clone(), Arc::new(Gone(false.into(), 0.into())));
        let token = CancellationToken::new();
        let (here, _) = tasks.begin(None, None, token.clone()).await.unwrap();
        let r = tasks.cancel(here.clone()).await.unwrap();
        assert_eq!(r.status, TaskStatus::Cancelled);
        assert!(token.is_cancelled(), "stopped here");
        store.put(&foreign("far", None, "other", 1)).await.unwrap();
        let far = tasks.get(None, "far").await.unwrap().unwrap();
        assert_eq!(
            tasks.cancel(far).await.unwrap().status,
            TaskStatus::Cancelled
        );
        assert_eq!(*store.signals.lock(), vec!["far".to_string()]);
    }

    #[tokio::test]
    async fn follow_stops_tasks_cancelled_elsewhere_and_resyncs_after_a_gap() {
        let store = Arc::new(Spy::default());
        let tasks = Arc::new(fleet(store.clone(), Arc::new(Gone(false.into(), 0.into()))));
        let (a_token, b_token) = (CancellationToken::new(), CancellationToken::new());
        let (a, _) = tasks.begin(None, None, a_token.clone()).await.unwrap();
        let (b, _) = tasks.begin(None, None, b_token.clone()).await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let follower = tokio::spawn({
            let tasks = tasks.clone();
            async move { tasks.follow(rx).await }
        });
        tx.send(CancelSignal::Cancel(a.task_id.clone()))
            .await
            .unwrap();
        tx.send(CancelSignal::Cancel("unknown".into()))
            .await
            .unwrap();
        // b was cancelled elsewhere while no signal could arrive: the resync finds its record.
        let mut cancelled = b.clone();
        cancelled.status = TaskStatus::Cancelled;
        store.put(&cancelled).await.unwrap();
        tx.send(CancelSignal::Resync).await.unwrap();
        drop(tx);
        tokio::time::timeout(Duration::from_secs(5), follower)
            .await
            .expect("follow ends with its signals")
            .unwrap();
        assert!(a_token.is_cancelled());
        assert!(b_token.is_cancelled());
    }

    #[tokio::test]
    async fn a_task_is_seen_only_by_the_principal_that_started_it() {
        let store = Arc::new(Spy::default());
        let tasks = fleet(store.clone(), Arc::new(Gone(false.into(), 0.into())));
        let (mine, _) = tasks
            .begin(None, Some("fp-p".into()), CancellationToken::new())
            .await
            .unwrap();
        let (anon, _) = tasks
            .begin(None, None, CancellationToken::new())
            .await
            .unwrap();
        let id = mine.task_id.as_str();
        assert_eq!(
            tasks.get_as(None, Some("fp-p"), id).await.unwrap(),
            Some(mine.clone())
        );
        assert_eq!(tasks.get_as(None, Some("fp-q"), id).await.unwrap(), None);
        assert_eq!(
            tasks.get_as(None, None, id).await.unwrap(),
            None,
            "not to anonymous"
        );
        assert_eq!(
            tasks.get_as(None, None, &anon.task_id).await.unwrap(),
            Some(anon.clone())
        );
        assert_eq!(
            tasks
                .get_as(None, Some("fp-p"), &anon.task_id)
                .await
                .unwrap(),
            None
        );
        // Another principal's read does not settle an orphan either: nothing is written.
        store
            .put(&{
                let mut r = foreign("far", None, "other", 1);
                r.principal = Some("fp-p".into());
                r
            })
            .await
            .unwrap();
        let gone = Arc::new(Gone(true.into(), 0.into()));
        let tasks = fleet(store.clone(), gone.clone());
        assert_eq!(tasks.get_as(None, Some("fp-q"), "far").await.unwrap(), None);
        assert_eq!(gone.1.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(
            store.get(None, "far").await.unwrap().unwrap().status,
            TaskStatus::Working
        );
    }

    #[test]
    fn a_record_without_a_principal_is_anonymous_and_stays_as_small_as_before() {
        // A record as written before principals were recorded (and as every anonymous one is).
        let old = r#"{"taskId":"t","status":"working","createdAt":"a","lastUpdatedAt":"a","ttlMs":1,"pollIntervalMs":1}"#;
        let r: TaskRecord = serde_json::from_str(old).unwrap();
        assert_eq!(r.principal, None);
        assert!(r.is_visible_to(None) && !r.is_visible_to(Some("fp")));
        assert_eq!(serde_json::to_string(&r).unwrap(), old);
        let mut owned = r;
        owned.principal = Some("fp".into());
        let json = serde_json::to_string(&owned).unwrap();
        assert!(json.ends_with(r#","principal":"fp"}"#), "{json}");
        assert!(owned.is_visible_to(Some("fp")) && !owned.is_visible_to(None));
    }

    #[tokio::test]
    async fn fail_tasks_of_is_a_no_op_in_memory() {
        let tasks = Tasks::new(Arc::new(MemoryTaskStore::default()), &TaskConfig::default());
        let (r, _) = tasks
            .begin(None, None, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(r.executor, None, "a single instance names no executor");
        assert_eq!(tasks.fail_tasks_of("me", u64::MAX).await, 0);
        assert_eq!(
            tasks.get(None, &r.task_id).await.unwrap().unwrap().status,
            TaskStatus::Working
        );
    }
}
