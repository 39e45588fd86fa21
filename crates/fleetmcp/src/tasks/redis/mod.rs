//! Task records in Redis, shared by every instance of a fleet (and used whenever the server has
//! Redis), so that any instance answers `tasks/get`, `tasks/list` and `tasks/result`.
//!
//! Layout, under `<redis.key_prefix>task:` (`mcp:task:` by default, the contract's prefix):
//!
//! | Key or channel | Type | What |
//! |---|---|---|
//! | `records:{sessionId}:{taskId}` | string (JSON) | a 2025-11-25 task's record (the contract's key) |
//! | `records::{taskId}` | string (JSON) | a task of no session (2026-07-28): the same shape with an empty session segment, so `get` finds it from the id alone with one `GET` |
//! | `session:{sessionId}` | sorted set | the session's task ids, scored by expiry (Unix ms): what `tasks/list` reads, and its bound |
//! | `executor:{nodeId}` | set | record keys of the tasks not ended yet that `nodeId` runs: what the orphan scanner reads |
//! | `cancel:{taskId}` | channel | `1` asks the executor to stop the task |
//! | `quota:{quota}:all`, `:meta`, `:totals`, `:done:<group>` | sorted set, hashes, sorted sets | the fleet-wide bounds: every task's charge by group (see below) |
//!
//! A record is the JSON of [`TaskRecord`]; with authorization on it carries `principal`, the
//! starter's 22-character fingerprint (absent otherwise, so anonymous records, and those written
//! before it existed, are unchanged and read as anonymous).
//!
//! A record is written with `PX ttlMs` when the task starts and with `KEEPTTL` after, so it
//! lives until its `expiresAt` (creation + `ttlMs`), as the contract says; the indexes expire
//! with the newest record they hold. Every write goes through a script that refuses to rewrite
//! a record that has ended: a task's end is final, whoever wrote it first (the executor's
//! result, a cancel from another instance, or the failure of an orphaned task), so a late write
//! of the executor cannot undo a cancel or an orphan's failure. A record that expired is not
//! written again.
//!
//! Cancel signals and answers to a task's questions: `signals.rs`. The fleet-wide bounds:
//! `quota.rs`. The Lua scripts every write goes through: `scripts.rs`.

use async_trait::async_trait;
use serde_json::Value;

use super::{TaskLimits, TaskQuota, TaskRecord, TaskStore, TaskStoreError, TaskStoreFull};
use crate::redis_conn::{CommandError, RedisConn};
use scripts::{CREATE, HELPERS, WRITE};

mod quota;
mod scripts;
mod signals;

pub(crate) use signals::CancelSignal;

/// Records read per `MGET` when listing or scanning.
const BATCH: usize = 100;

/// Task records in Redis (see the module documentation for the layout). Cheap to clone.
#[derive(Clone)]
pub struct RedisTaskStore {
    redis: RedisConn,
    /// `<redis.key_prefix>task:`.
    prefix: String,
    max_tasks_per_owner: usize,
    /// Every bound, applied fleet-wide by the quota scripts.
    limits: TaskLimits,
    /// Redis is a cluster: a session's task keys carry a hash tag.
    cluster: bool,
}

/// `<prefix>executor:<nodeId>` (`prefix` is `<key_prefix>task:`): the record keys of the
/// unfinished tasks `node` runs (also read by the operator's `status`).
fn executor_key(prefix: &str, node: &str) -> String {
    format!("{prefix}executor:{node}")
}

/// The set of the unfinished tasks instance `node` runs, under the Redis configuration's
/// `key_prefix`: `<key_prefix>task:executor:<nodeId>`.
pub(crate) fn executor_index_key(key_prefix: &str, node: &str) -> String {
    executor_key(&format!("{key_prefix}task:"), node)
}

impl RedisTaskStore {
    /// A store on `redis`, under `<key_prefix>task:` (`key_prefix` is the Redis configuration's,
    /// `mcp:` by default), bounding each session's records at `limits.max_tasks_per_owner`.
    pub fn new(redis: RedisConn, key_prefix: &str, limits: TaskLimits) -> Self {
        Self {
            cluster: redis.config().is_cluster(),
            redis,
            prefix: format!("{key_prefix}task:"),
            max_tasks_per_owner: limits.max_tasks_per_owner.max(1),
            limits,
        }
    }

    /// The key of a task's record: `records:<sessionId>:<taskId>` (the contract's key), or
    /// `records::<taskId>` for a task of no session. On a Redis Cluster the session segment is
    /// a hash tag, `records:{<sessionId>}:<taskId>`, so that a session's records and its index
    /// share the slot the `CREATE` script needs.
    pub fn record_key(&self, owner: Option<&str>, task_id: &str) -> String {
        format!(
            "{}records:{}:{task_id}",
            self.prefix,
            self.tagged(owner.unwrap_or(""))
        )
    }

    fn owner_index(&self, owner: &str) -> String {
        format!("{}session:{}", self.prefix, self.tagged(owner))
    }

    /// A session id as it appears in keys: in braces on a Redis Cluster (a hash tag).
    fn tagged<'a>(&self, owner: &'a str) -> std::borrow::Cow<'a, str> {
        if self.cluster && !owner.is_empty() {
            format!("{{{owner}}}").into()
        } else {
            owner.into()
        }
    }

    /// Lists a new record in its executor's index, which lives as long as its newest record
    /// (`PEXPIRE ... NX` gives a new index its lifetime, `GT` only ever extends it). One key:
    /// one slot, one round trip.
    async fn add_to_executor(
        &self,
        index: &str,
        record_key: &str,
        ttl_ms: u64,
    ) -> Result<(), CommandError> {
        let mut pipe = redis::pipe();
        pipe.cmd("SADD")
            .arg(index)
            .arg(record_key)
            .ignore()
            .cmd("PEXPIRE")
            .arg(index)
            .arg(ttl_ms)
            .arg("NX")
            .ignore()
            .cmd("PEXPIRE")
            .arg(index)
            .arg(ttl_ms)
            .arg("GT")
            .ignore();
        self.redis.pipe(pipe).await
    }

    fn executor_index(&self, node: &str) -> String {
        executor_key(&self.prefix, node)
    }

    fn executor_index_of(&self, record: &TaskRecord) -> String {
        record
            .executor
            .as_ref()
            .map(|e| self.executor_index(&e.machine_id))
            .unwrap_or_default()
    }

    /// The channel that asks the executor of `task_id` to stop it.
    pub fn cancel_channel(&self, task_id: &str) -> String {
        format!("{}cancel:{task_id}", self.prefix)
    }

    /// `<prefix>input:<taskId>`: the client's answers to a task's questions, for its executor.
    pub fn input_channel(&self, task_id: &str) -> String {
        format!("{}input:{task_id}", self.prefix)
    }

    /// Rewrites a record, optionally only if the stored one is still `expect`'s (see [`WRITE`]).
    async fn write(
        &self,
        record: &TaskRecord,
        expect: Option<&TaskRecord>,
    ) -> Result<i64, CommandError> {
        let json = serde_json::to_string(record)
            .map_err(|e| CommandError::Unavailable(format!("unserialisable record: {e}")))?;
        let json_len = json.len();
        let key = self.record_key(record.owner.as_deref(), &record.task_id);
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(format!("{HELPERS}{WRITE}"))
            .arg(1)
            .arg(&key)
            .arg(json)
            .arg(if record.status.is_terminal() {
                "1"
            } else {
                "0"
            });
        if let Some(seen) = expect {
            let status = serde_json::to_value(seen.status)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            cmd.arg(status).arg(&seen.last_updated_at).arg(
                seen.executor
                    .as_ref()
                    .map(|e| e.machine_id.as_str())
                    .unwrap_or(""),
            );
        }
        // A task's end is confirmed by the replicas `wait_replicas` asks for, like its
        // creation: an end a failover throws away would leave the task `working` for good.
        let written: i64 = if record.status.is_terminal() {
            self.durably(cmd).await?
        } else {
            self.redis.run(cmd).await?
        };
        if written == 1 && record.status.is_terminal() {
            self.charge_end(record, json_len).await;
        }
        let index = self.executor_index_of(record);
        if written == 1 && record.status.is_terminal() && !index.is_empty() {
            // Ended: no longer its executor's to fail if the executor dies. Best effort: an
            // entry left behind names an ended record, which the orphan scanner leaves alone.
            let mut rem = redis::cmd("SREM");
            rem.arg(index).arg(&key);
            if let Err(e) = self.redis.run::<i64>(rem).await {
                tracing::debug!(error = %e, task = %record.task_id, "an ended task stays in its executor's index");
            }
        }
        Ok(written)
    }

    /// Writes a new record and its indexes (its charge is already taken).
    async fn create_record(
        &self,
        record: &TaskRecord,
        json: String,
        key: &str,
    ) -> Result<(), TaskStoreError> {
        let owner = record.owner.as_deref();
        let key = key.to_string();
        let index = self.executor_index_of(record);
        let ttl_ms = record.ttl_ms.max(1);
        if !index.is_empty() {
            // Listed first: should this instance die between the two writes, the orphan
            // scanner finds an entry with no record (skipped), never a record it cannot find.
            if let Err(e) = self.add_to_executor(&index, &key, ttl_ms).await {
                warn_failed("creating a record", &record.task_id, &e);
                return Err(TaskStoreError::Unavailable(e.to_string()));
            }
        }
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(format!("{HELPERS}{CREATE}"));
        match owner {
            Some(o) => cmd.arg(2).arg(&key).arg(self.owner_index(o)),
            None => cmd.arg(1).arg(&key),
        };
        let cmd = cmd
            .arg(json)
            .arg(ttl_ms)
            .arg(self.max_tasks_per_owner)
            .arg(&record.task_id)
            .arg(self.record_key(owner, ""))
            .clone();
        // Confirmed by the replicas before the task is acknowledged: one written to a master
        // in the second before a failover demotes it would be lost with it (RELIABILITY F8).
        match self.durably(cmd).await {
            Ok(1) => Ok(()),
            Ok(_) => {
                if !index.is_empty() {
                    let mut rem = redis::cmd("SREM");
                    rem.arg(&index).arg(&key);
                    let _ = self.redis.run::<i64>(rem).await;
                }
                Err(TaskStoreError::Full(TaskStoreFull {
                    limit: "tasks.max_tasks_per_owner",
                    max: self.max_tasks_per_owner,
                }))
            }
            Err(e) => {
                warn_failed("creating a record", &record.task_id, &e);
                Err(TaskStoreError::Unavailable(e.to_string()))
            }
        }
    }

    /// Runs `cmd` and waits for the replicas `wait_replicas` asks for to confirm it
    /// ([`RedisConn::pipe_durably`]); plainly when it asks for none.
    async fn durably(&self, cmd: redis::Cmd) -> Result<i64, CommandError> {
        if !self.redis.writes_durably() {
            return self.redis.run(cmd).await;
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd);
        let (written,): (i64,) = self.redis.pipe_durably(pipe).await?;
        Ok(written)
    }

    /// Reads records by key, `BATCH` per round trip; a missing or unreadable one is `None`.
    async fn read_many(&self, keys: &[String]) -> Result<Vec<Option<TaskRecord>>, CommandError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH) {
            let raw: Vec<Option<String>> = self
                .redis
                .run(redis::cmd("MGET").arg(chunk).clone())
                .await?;
            out.extend(
                raw.into_iter()
                    .map(|r| r.and_then(|r| serde_json::from_str(&r).ok())),
            );
        }
        Ok(out)
    }
}

fn warn_failed(what: &str, task: &str, e: &CommandError) {
    tracing::warn!(error = %e, task, "Redis task store: {what} failed");
}

#[async_trait]
impl TaskStore for RedisTaskStore {
    async fn put(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
        match self.write(record, None).await {
            Ok(1) => {}
            Ok(-1) => {
                tracing::debug!(task = %record.task_id, "a write over an ended task was refused")
            }
            Ok(_) => {
                tracing::debug!(task = %record.task_id, "a write to an expired task was dropped")
            }
            Err(e) => {
                warn_failed("a write", &record.task_id, &e);
                return Err(TaskStoreError::Unavailable(e.to_string()));
            }
        }
        Ok(())
    }

    async fn create_for(
        &self,
        record: &TaskRecord,
        quota: &TaskQuota,
    ) -> Result<(), TaskStoreError> {
        let json = serde_json::to_string(record)
            .map_err(|e| TaskStoreError::Unavailable(format!("unserialisable record: {e}")))?;
        let owner = record.owner.as_deref();
        let key = self.record_key(owner, &record.task_id);
        // Counted first, fleet-wide: a task the bounds refuse writes nothing.
        self.reserve(
            record,
            &key,
            json.len() + quota.held_bytes,
            quota.caller.as_deref(),
        )
        .await?;
        let created = self.create_record(record, json, &key).await;
        if created.is_err() {
            self.release(&record.task_id).await;
        }
        created
    }
    async fn get(
        &self,
        owner: Option<&str>,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        let read = self.redis.reading_on();
        let raw: Option<String> = match self
            .redis
            .run(
                redis::cmd("GET")
                    .arg(self.record_key(owner, task_id))
                    .clone(),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => {
                warn_failed("a read", task_id, &e);
                return Err(TaskStoreError::Unavailable(e.to_string()));
            }
        };
        let Some(raw) = raw else {
            // "Unknown task" only from the master in charge: a process that slept through a
            // failover may still read the deposed one (see the session store's `get`).
            if let Err(e) = self.redis.confirm_master_of(read).await {
                warn_failed("a read", task_id, &e);
                return Err(TaskStoreError::Unavailable(e.to_string()));
            }
            return Ok(None);
        };
        match serde_json::from_str(&raw) {
            Ok(r) => Ok(Some(r)),
            Err(e) => {
                tracing::warn!(error = %e, task = task_id, "Redis task store: an unreadable record was ignored");
                Ok(None)
            }
        }
    }

    async fn list(&self, owner: &str) -> Result<Vec<TaskRecord>, TaskStoreError> {
        let ids: Vec<String> = match self
            .redis
            .run(
                redis::cmd("ZRANGE")
                    .arg(self.owner_index(owner))
                    .arg(0)
                    .arg(-1)
                    .clone(),
            )
            .await
        {
            Ok(ids) => ids,
            Err(e) => {
                warn_failed("listing a session's tasks", "", &e);
                return Err(TaskStoreError::Unavailable(e.to_string()));
            }
        };
        let keys: Vec<String> = ids
            .iter()
            .map(|id| self.record_key(Some(owner), id))
            .collect();
        let mut out: Vec<TaskRecord> = match self.read_many(&keys).await {
            Ok(records) => records.into_iter().flatten().collect(),
            Err(e) => {
                warn_failed("listing a session's tasks", "", &e);
                return Err(TaskStoreError::Unavailable(e.to_string()));
            }
        };
        TaskRecord::sort_for_list(&mut out);
        Ok(out)
    }

    async fn replace_if_unchanged(
        &self,
        seen: &TaskRecord,
        next: &TaskRecord,
    ) -> Result<bool, TaskStoreError> {
        match self.write(next, Some(seen)).await {
            Ok(1) => Ok(true),
            Ok(_) => Ok(false),
            Err(e) => {
                warn_failed("a compare-and-set", &seen.task_id, &e);
                Err(TaskStoreError::Unavailable(e.to_string()))
            }
        }
    }

    async fn signal_cancel(&self, task_id: &str) {
        let sent: Result<i64, _> = self
            .redis
            .run(
                redis::cmd("PUBLISH")
                    .arg(self.cancel_channel(task_id))
                    .arg("1")
                    .clone(),
            )
            .await;
        if let Err(e) = sent {
            // The record says cancelled already; the executor's end write will be refused,
            // and it stops the task at its next resync.
            warn_failed("sending a cancel signal", task_id, &e);
        }
    }

    async fn signal_answers(
        &self,
        task_id: &str,
        answers: &serde_json::Map<String, Value>,
    ) -> Result<(), TaskStoreError> {
        let payload = serde_json::to_string(answers)
            .map_err(|e| TaskStoreError::Unavailable(format!("unserialisable answers: {e}")))?;
        let sent: Result<i64, _> = self
            .redis
            .run(
                redis::cmd("PUBLISH")
                    .arg(self.input_channel(task_id))
                    .arg(payload)
                    .clone(),
            )
            .await;
        match sent {
            Ok(0) => tracing::warn!(
                task = task_id,
                "a task's answers reached no instance: its executor is gone"
            ),
            Ok(_) => {}
            Err(e) => {
                warn_failed("sending a task's answers", task_id, &e);
                return Err(TaskStoreError::Unavailable(e.to_string()));
            }
        }
        Ok(())
    }

    async fn fail_tasks_of(&self, node: &str, spawned_before: u64, error: &Value) -> usize {
        let index = self.executor_index(node);
        let keys: Vec<String> = match self
            .redis
            .run(redis::cmd("SMEMBERS").arg(&index).clone())
            .await
        {
            Ok(k) => k,
            Err(e) => {
                warn_failed("reading an executor's tasks", node, &e);
                return 0;
            }
        };
        let records = match self.read_many(&keys).await {
            Ok(r) => r,
            Err(e) => {
                warn_failed("reading an executor's tasks", node, &e);
                return 0;
            }
        };
        let mut failed = 0;
        let mut done = Vec::new();
        for (key, record) in keys.iter().zip(records) {
            let Some(record) = record else {
                done.push(key.clone());
                continue;
            };
            let Some(ex) = &record.executor else {
                done.push(key.clone());
                continue;
            };
            if ex.machine_id != node || record.status.is_terminal() {
                done.push(key.clone());
                continue;
            }
            if ex.spawned_at >= spawned_before {
                // A newer process under the same machine id runs it.
                continue;
            }
            let mut next = record.clone();
            next.status = super::TaskStatus::Failed;
            next.input_requests.clear();
            next.result = None;
            next.error = Some(error.clone());
            next.last_updated_at = crate::clock::iso_now();
            // Not written: it changed since it was read; the next scan looks again.
            if let Ok(true) = self.replace_if_unchanged(&record, &next).await {
                failed += 1;
                done.push(key.clone());
            }
        }
        if !done.is_empty() {
            let removed: Result<i64, _> = self
                .redis
                .run(redis::cmd("SREM").arg(&index).arg(&done).clone())
                .await;
            if let Err(e) = removed {
                warn_failed("pruning an executor's tasks", node, &e);
            }
        }
        failed
    }
}
