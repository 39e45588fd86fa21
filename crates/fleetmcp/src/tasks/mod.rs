//! Background tasks (the `io.modelcontextprotocol/tasks` extension of 2026-07-28): a tool
//! that supports tasks answers `tools/call` at once with a task id; the client polls
//! `tasks/get`, answers the task's questions with `tasks/update`, and may `tasks/cancel` it.
//!
//! The record of a task (status, result or error, pending questions) lives behind
//! [`TaskStore`]: in memory ([`MemoryTaskStore`]) for one instance, in Redis
//! ([`RedisTaskStore`], `redis/`) whenever the server has Redis, so that any instance answers
//! `tasks/get`, `tasks/list` and `tasks/result`. What only the running instance can hold (the
//! handler's cancel token, the channels its questions wait on) lives in [`RunningTask`].
//!
//! In a shared store each record names its executor (machine id and start time). A
//! `tasks/cancel` received elsewhere reaches the executor through the store
//! ([`TaskStore::signal_cancel`]); a task whose executor died is ended as `failed` by whichever
//! instance reads it and finds the executor gone ([`ProcessLiveness`], implemented by the
//! fleet), or by the orphan scanner ([`Tasks::fail_tasks_of`]).
//!
//! With authorization on, a record names the principal that started it (its fingerprint, never
//! its token), and [`Tasks::get_as`] gives it to that principal only: to anyone else it is a
//! task that does not exist. Without authorization every task is anonymous, as before.
//!
//! Both stores bound the records overall, per session and per caller (a [`TaskQuota`]: the
//! caller's limit key, so one client cannot fill the table for everyone), in count and bytes,
//! charging a working task what its handler holds besides its record (its arguments).
//!
//! A task takes over its request's place under `limits.max_inflight_per_key`
//! (`RequestContext::take_place`) until it ends. Without distributed mode nothing judges an
//! executor gone: a crashed instance's tasks stay `working` until they expire (the contract's
//! behaviour). The `tasks/*` methods are answered by `dispatch/task_methods/`; this module keeps
//! the tasks themselves.

mod lifecycle;
mod memory;
#[cfg(feature = "redis")]
mod redis;

pub(crate) use lifecycle::{RunningTask, Tasks};
pub use memory::MemoryTaskStore;
pub(crate) use memory::json_len;
#[cfg(feature = "redis")]
pub use redis::RedisTaskStore;
#[cfg(feature = "redis")]
pub(crate) use redis::{CancelSignal, executor_index_key};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::TaskConfig;
pub(crate) use crate::process_liveness::ProcessLiveness;

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
    /// Running.
    Working,
    /// Waiting for the client's answer to a question.
    InputRequired,
    /// Ended with a result.
    Completed,
    /// Ended with an error.
    Failed,
    /// Ended by `tasks/cancel`.
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
    /// The task's id, as the client names it.
    pub task_id: String,
    /// Where it is in its life.
    pub status: TaskStatus,
    /// ISO 8601.
    pub created_at: String,
    /// ISO 8601: the last change of status.
    pub last_updated_at: String,
    /// How long the record is kept (the task's `ttl`).
    pub ttl_ms: u64,
    /// How often the client is told to poll (`pollInterval`).
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

    /// Puts `records` in the order [`TaskStore::list`] gives them, the same from every store:
    /// oldest first, then by id (for equal times).
    pub(crate) fn sort_for_list(records: &mut [TaskRecord]) {
        records.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.task_id.cmp(&b.task_id))
        });
    }
}

/// The instance that runs a task, as its record names it (the contract's `executor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Executor {
    /// The executing instance's machine id (`nodeId` as stored).
    #[serde(rename = "nodeId")]
    pub machine_id: String,
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
    /// session): found under that owner only. Callers still check the principal.
    /// `Ok(None)`: there is no such record; `Err(Unavailable)`: the store could not tell.
    async fn get(
        &self,
        owner: Option<&str>,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError>;
    /// The live tasks of an owner (a session), oldest first.
    async fn list(&self, owner: &str) -> Result<Vec<TaskRecord>, TaskStoreError>;
    #[cfg(any(test, feature = "testkit"))]
    /// Stores the record of a task about to start, or refuses it when the store is full of
    /// records it may not drop (or cannot be reached): [`TaskStore::create_for`] with no
    /// caller and nothing held.
    async fn create(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
        self.create_for(record, &TaskQuota::default()).await
    }
    /// `TaskStore::create`, counting the new task against its caller's bounds too, and
    /// charging, while it works, the bytes its running handler holds (`quota.held_bytes`).
    /// The default stores it unconditionally, ignoring the quota.
    async fn create_for(
        &self,
        record: &TaskRecord,
        quota: &TaskQuota,
    ) -> Result<(), TaskStoreError> {
        let _ = quota;
        self.put(record).await
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

/// The bounds a `MemoryTaskStore` keeps.
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

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn rec(
        id: &str,
        owner: Option<&str>,
        status: TaskStatus,
        payload: usize,
    ) -> TaskRecord {
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

    pub(super) fn limits(max_tasks: usize, max_bytes: usize, per_owner: usize) -> TaskLimits {
        TaskLimits {
            max_tasks,
            max_bytes,
            max_tasks_per_owner: per_owner,
            max_bytes_per_owner: max_bytes,
            max_tasks_per_caller: max_tasks,
            max_bytes_per_caller: max_bytes,
        }
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
}
