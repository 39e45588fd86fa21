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
//! Cancel signals: each instance holds one pattern subscription, `cancel:*`, instead of one
//! subscription (and connection) per running task; cancels are rare, so every instance reading
//! every cancel costs less than a connection per task.
//!
//! Bounds, fleet-wide, as in memory: `tasks.max_tasks` and `tasks.max_bytes` over every task,
//! the `_per_owner` pair per session, the `_per_caller` pair per caller (its limit key, kept as a
//! digest). A task is charged its record's bytes plus, while it works, what its handler holds
//! (its arguments): so the bound also caps what a crowd of working tasks costs the instances
//! running them. One script ([`QUOTA_RESERVE`]) checks and charges every group at once before
//! the record is written, dropping the oldest finished records of a full group to make room
//! (the script returns their keys, deleted next); with only working tasks left, the new task is
//! refused naming the bound. A task's end re-charges its final size ([`QUOTA_END`]). The quota
//! keys share one Cluster slot (hash tag `{quota}`); entries are scored by their record's
//! expiry and trimmed on every call, and the keys expire twice a task's lifetime after their
//! last write, so a count cannot outlive what it counts (no `KEYS`, every call bounded). A
//! session still keeps at most `tasks.max_tasks_per_owner` ids in its index (as before);
//! `tasks.max_result_bytes` bounds each record. Every command is bounded by the shared
//! connection's timeout.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{TaskLimits, TaskQuota, TaskRecord, TaskStore, TaskStoreError, TaskStoreFull};
use crate::redis_conn::{CommandError, RedisConn};

/// What a shared store tells the instance about its tasks from elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CancelSignal {
    /// `tasks/cancel` reached another instance for this task.
    Cancel(String),
    /// `tasks/update` reached another instance for this task: the client's answers, by key.
    Answers(String, serde_json::Map<String, Value>),
    /// The subscription was (re)made: signals sent meanwhile were lost, so the instance checks
    /// the records of the tasks it runs.
    Resync,
}

/// Lua helpers every script shares: a record's status (read from the front of the JSON, where
/// serde writes `taskId` then `status`, so a large result is not decoded), and whether it ended.
const HELPERS: &str = r#"
local function status_of(v)
  local s = string.match(v, '^{"taskId":"[^"]*","status":"([%a_]+)"')
  if s then return s end
  local ok, r = pcall(cjson.decode, v)
  if ok and type(r) == 'table' and type(r.status) == 'string' then return r.status end
  return nil
end
local function ended(s)
  return s == 'completed' or s == 'failed' or s == 'cancelled'
end
"#;

/// Creates a record. KEYS: record, then the session index (a task of a session). ARGV: record
/// JSON, ttl ms, max per session, task id, the session's record-key prefix. Returns 1, or 0
/// when the session is full of records not ended. The session's records and index share a
/// Cluster slot (see [`RedisTaskStore::record_key`]); the executor index, in another, is
/// written by the caller.
const CREATE: &str = r#"
local ttl = tonumber(ARGV[2])
if #KEYS > 1 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then
    local freed = false
    for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
      local key = ARGV[5] .. id
      local v = redis.call('GET', key)
      if (not v) or ended(status_of(v)) then
        redis.call('DEL', key)
        redis.call('ZREM', KEYS[2], id)
        freed = true
        break
      end
    end
    if not freed then return 0 end
  end
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[4])
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return 1
"#;

/// Rewrites a record. KEYS: record. ARGV: record JSON, '1' when it has ended (the caller then
/// takes it out of its executor's index); then optionally the expected status, `lastUpdatedAt` and executor node ('' none)
/// of the stored record (the compare-and-set). Returns 1 written, 0 no such record, -1 the
/// stored record has ended, -2 it changed.
const WRITE: &str = r#"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
if ended(status_of(cur)) then return -1 end
if ARGV[3] then
  local ok, r = pcall(cjson.decode, cur)
  if not ok or type(r) ~= 'table' or r.status ~= ARGV[3] or r.lastUpdatedAt ~= ARGV[4] then
    return -2
  end
  local node = ''
  if type(r.executor) == 'table' and type(r.executor.nodeId) == 'string' then
    node = r.executor.nodeId
  end
  if node ~= ARGV[5] then return -2 end
end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
return 1
"#;

/// The fleet-wide bounds of task records (`tasks.max_tasks`, `tasks.max_bytes`, the same per
/// session and per caller), kept beside the records in keys of one Cluster slot (the hash tag
/// `{quota}`), so one script checks and charges every bound at once. KEYS: `all` (sorted set:
/// task id scored by its record's expiry, Unix ms), `meta` (hash: task id to
/// `<bytes>\n<record key>\n<group>...`), `totals` (hash: `n:<group>` records, `b:<group>`
/// bytes); ARGV[1] is the prefix of each group's `done` sorted set (the finished records,
/// oldest first: the eviction candidates). A group is `all`, `s:<session>` or `c:<digest of the
/// caller's key>`. Expired entries are trimmed on every call (at most 100 at a time, more
/// than a call adds), so the counts cannot leak: an entry leaves with its record's expiry
/// at the latest, and every key expires twice a task's lifetime after its last write.
const QUOTA_HELPERS: &str = r#"
local DONE = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function parse(m)
  local parts = {}
  for p in string.gmatch(m, '[^\n]+') do parts[#parts + 1] = p end
  local groups = {}
  for i = 3, #parts do groups[#groups + 1] = parts[i] end
  return tonumber(parts[1]) or 0, parts[2], groups
end
local function drop(id, victims)
  redis.call('ZREM', KEYS[1], id)
  local m = redis.call('HGET', KEYS[2], id)
  if not m then return end
  redis.call('HDEL', KEYS[2], id)
  local b, rkey, groups = parse(m)
  for _, g in ipairs(groups) do
    local n = redis.call('HINCRBY', KEYS[3], 'n:' .. g, -1)
    redis.call('HINCRBY', KEYS[3], 'b:' .. g, -b)
    if n <= 0 then redis.call('HDEL', KEYS[3], 'n:' .. g, 'b:' .. g) end
    redis.call('ZREM', DONE .. g, id)
  end
  if victims then victims[#victims + 1] = rkey end
end
local function trim(now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 100)) do
    drop(id, nil)
  end
end
local function use(g)
  local v = redis.call('HMGET', KEYS[3], 'n:' .. g, 'b:' .. g)
  return tonumber(v[1]) or 0, tonumber(v[2]) or 0
end
-- Drops the oldest finished records of group g (never `keep`) until `fits(n, b)`; false when
-- none is left to drop.
local function make_room(g, keep, fits, victims)
  while true do
    local n, b = use(g)
    if fits(n, b) then return true end
    local cands = redis.call('ZRANGE', DONE .. g, 0, 1)
    local victim = nil
    for _, id in ipairs(cands) do
      if id ~= keep then victim = id break end
    end
    if not victim then return false end
    drop(victim, victims)
  end
end
local function expire_all(ttl)
  for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
"#;

/// Charges a new task to its groups, first dropping finished records to make room. ARGV: done
/// prefix, task id, bytes, record ttl ms, record key, key ttl ms, then (group, max records, max
/// bytes) for each group. Returns `{'1'}` plus the keys of the records dropped (to delete), or
/// `{'0', group, 'n' or 'b'}` plus those keys when a group is full of working tasks.
const QUOTA_RESERVE: &str = r#"
local now = now_ms()
trim(now)
local id, bytes = ARGV[2], tonumber(ARGV[3])
local victims = {}
local groups = {}
for i = 7, #ARGV, 3 do
  local g, maxn, maxb = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  groups[#groups + 1] = g
  local fits = function(n, b) return n + 1 <= maxn and b + bytes <= maxb end
  if not make_room(g, id, fits, victims) then
    local n = use(g)
    local which = 'b'
    if n + 1 > maxn then which = 'n' end
    local out = {'0', g, which}
    for _, v in ipairs(victims) do out[#out + 1] = v end
    return out
  end
end
drop(id, nil)
redis.call('HSET', KEYS[2], id, bytes .. '\n' .. ARGV[5] .. '\n' .. table.concat(groups, '\n'))
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), id)
for _, g in ipairs(groups) do
  redis.call('HINCRBY', KEYS[3], 'n:' .. g, 1)
  redis.call('HINCRBY', KEYS[3], 'b:' .. g, bytes)
end
expire_all(ARGV[6])
local out = {'1'}
for _, v in ipairs(victims) do out[#out + 1] = v end
return out
"#;

/// A task ended: its charge becomes its final record's size (its handler no longer holds
/// anything), it becomes an eviction candidate in its groups, and each group that grew past
/// its bounds drops its oldest other finished records. ARGV: done prefix, task id, bytes, key
/// ttl ms, then max records and max bytes of `all`, of a session (`s:`), of a caller (`c:`).
/// Returns the keys of the records dropped.
const QUOTA_END: &str = r#"
local id, bytes = ARGV[2], tonumber(ARGV[3])
local m = redis.call('HGET', KEYS[2], id)
if not m then return {} end
local old, rkey, groups = parse(m)
local score = redis.call('ZSCORE', KEYS[1], id) or now_ms()
redis.call('HSET', KEYS[2], id, bytes .. '\n' .. rkey .. '\n' .. table.concat(groups, '\n'))
for _, g in ipairs(groups) do
  redis.call('HINCRBY', KEYS[3], 'b:' .. g, bytes - old)
  redis.call('ZADD', DONE .. g, score, id)
  redis.call('PEXPIRE', DONE .. g, ARGV[4])
end
expire_all(ARGV[4])
local victims = {}
for _, g in ipairs(groups) do
  local at = 5
  if string.sub(g, 1, 2) == 's:' then at = 7 elseif string.sub(g, 1, 2) == 'c:' then at = 9 end
  local maxn, maxb = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  make_room(g, id, function(n, b) return n <= maxn and b <= maxb end, victims)
end
return victims
"#;

/// Takes a task's charge back (its record could not be written after all). ARGV: done
/// prefix, task id.
const QUOTA_RELEASE: &str = r#"
drop(ARGV[2], nil)
return 1
"#;

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

    /// The quota's keys (`all`, `meta`, `totals`) and the prefix of its groups' `done` sets,
    /// in one Cluster slot.
    fn quota_keys(&self) -> ([String; 3], String) {
        let base = format!("{}quota:{{quota}}:", self.prefix);
        (
            [
                format!("{base}all"),
                format!("{base}meta"),
                format!("{base}totals"),
            ],
            format!("{base}done:"),
        )
    }

    /// The groups a task counts in, with their bounds: every task, its session's, its caller's
    /// (under a digest of the caller's key: no address or principal is written in the clear).
    fn quota_groups(
        &self,
        owner: Option<&str>,
        caller: Option<&str>,
    ) -> Vec<(String, usize, usize)> {
        let l = &self.limits;
        let mut groups = vec![("all".to_string(), l.max_tasks, l.max_bytes)];
        if let Some(o) = owner {
            groups.push((
                format!("s:{o}"),
                l.max_tasks_per_owner,
                l.max_bytes_per_owner,
            ));
        }
        if let Some(c) = caller {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(c.as_bytes());
            let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
            groups.push((
                format!("c:{hex}"),
                l.max_tasks_per_caller,
                l.max_bytes_per_caller,
            ));
        }
        groups
    }

    /// The quota script `body` with its keys and `args` (after the done prefix).
    fn quota_cmd(&self, body: &str, args: &[String]) -> redis::Cmd {
        let (keys, done) = self.quota_keys();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(format!("{QUOTA_HELPERS}{body}"))
            .arg(3)
            .arg(&keys[..])
            .arg(done)
            .arg(args);
        cmd
    }

    /// Deletes the records the quota dropped to make room (each on its own slot); an error
    /// leaves the record to its expiry, already uncounted.
    async fn delete_victims(&self, keys: &[String]) {
        for key in keys {
            if let Err(e) = self
                .redis
                .run::<i64>(redis::cmd("DEL").arg(key).clone())
                .await
            {
                tracing::debug!(error = %e, key, "a task record dropped to make room stays until it expires");
            }
        }
    }

    /// Charges a new task to its groups (see [`QUOTA_RESERVE`]).
    async fn reserve(
        &self,
        record: &TaskRecord,
        key: &str,
        bytes: usize,
        caller: Option<&str>,
    ) -> Result<(), TaskStoreError> {
        let ttl = record.ttl_ms.max(1);
        let mut args = vec![
            record.task_id.clone(),
            bytes.to_string(),
            ttl.to_string(),
            key.to_string(),
            (ttl.saturating_mul(2)).to_string(),
        ];
        let groups = self.quota_groups(record.owner.as_deref(), caller);
        for (g, n, b) in &groups {
            args.extend([g.clone(), n.to_string(), b.to_string()]);
        }
        let out: Vec<String> = self
            .redis
            .run(self.quota_cmd(QUOTA_RESERVE, &args))
            .await
            .map_err(|e| {
                warn_failed("bounding a new task", &record.task_id, &e);
                TaskStoreError::Unavailable(e.to_string())
            })?;
        match out.first().map(String::as_str) {
            Some("1") => {
                self.delete_victims(&out[1..]).await;
                Ok(())
            }
            Some("0") if out.len() >= 3 => {
                self.delete_victims(&out[3..]).await;
                let l = &self.limits;
                let count = out[2] == "n";
                let (limit, max) = match (out[1].split(':').next(), count) {
                    (Some("s"), true) => ("tasks.max_tasks_per_owner", l.max_tasks_per_owner),
                    (Some("s"), false) => ("tasks.max_bytes_per_owner", l.max_bytes_per_owner),
                    (Some("c"), true) => ("tasks.max_tasks_per_caller", l.max_tasks_per_caller),
                    (Some("c"), false) => ("tasks.max_bytes_per_caller", l.max_bytes_per_caller),
                    (_, true) => ("tasks.max_tasks", l.max_tasks),
                    (_, false) => ("tasks.max_bytes", l.max_bytes),
                };
                Err(TaskStoreError::Full(TaskStoreFull { limit, max }))
            }
            _ => Err(TaskStoreError::Unavailable(format!(
                "unexpected answer of the task quota: {out:?}"
            ))),
        }
    }

    /// Takes back the charge of a task whose record was not written.
    async fn release(&self, task_id: &str) {
        let cmd = self.quota_cmd(QUOTA_RELEASE, &[task_id.to_string()]);
        if let Err(e) = self.redis.run::<i64>(cmd).await {
            // Counted until its expiry: a bound slightly tighter for a while, never looser.
            warn_failed("releasing a task's charge", task_id, &e);
        }
    }

    /// A task ended: its charge becomes its final record (see [`QUOTA_END`]).
    async fn charge_end(&self, record: &TaskRecord, bytes: usize) {
        let mut args = vec![
            record.task_id.clone(),
            bytes.to_string(),
            (record.ttl_ms.max(1).saturating_mul(2)).to_string(),
        ];
        // The task's groups are read from its own entry; the bounds by kind of group.
        let l = &self.limits;
        args.extend(
            [
                l.max_tasks,
                l.max_bytes,
                l.max_tasks_per_owner,
                l.max_bytes_per_owner,
                l.max_tasks_per_caller,
                l.max_bytes_per_caller,
            ]
            .map(|n| n.to_string()),
        );
        match self
            .redis
            .run::<Vec<String>>(self.quota_cmd(QUOTA_END, &args))
            .await
        {
            Ok(victims) => self.delete_victims(&victims).await,
            Err(e) => warn_failed("recounting an ended task", &record.task_id, &e),
        }
    }

    /// The key of a task's record: `records:<sessionId>:<taskId>` (the contract's key), or
    /// `records::<taskId>` for a task of no session. On a Redis Cluster the session segment is
    /// a hash tag, `records:{<sessionId>}:<taskId>`, so that a session's records and its index
    /// share the slot [`CREATE`] needs.
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
            .map(|e| self.executor_index(&e.node_id))
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
                    .map(|e| e.node_id.as_str())
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

    /// Subscribes to every task's cancel channel (the first attempt is awaited, bounded by the
    /// connection's timeouts) and keeps the subscription until `stop`, subscribing again when
    /// it drops (100 ms doubling to 5 s). What arrives is handed on through the receiver, to
    /// [`super::Tasks::follow`]: each cancel, and a [`CancelSignal::Resync`] after every
    /// (re)subscription.
    pub(crate) async fn listen_cancels(
        &self,
        stop: CancellationToken,
    ) -> mpsc::Receiver<CancelSignal> {
        let (tx, rx) = mpsc::channel(256);
        // One pattern for both signals: `cancel:<taskId>` and `input:<taskId>`.
        let pattern = format!("{}*", self.prefix);
        // Redis down at start: not waited for here; the loop below subscribes once it answers.
        let first = if !self.redis.is_connected() {
            None
        } else {
            match self.redis.psubscribe(&pattern).await {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::warn!(error = %e, %pattern, "cannot subscribe to task cancel signals yet; retrying");
                    None
                }
            }
        };
        let redis = self.redis.clone();
        let prefix = self.prefix.clone();
        let mut replaced = redis.replaced();
        tokio::spawn(async move {
            let mut messages = first;
            loop {
                if let Some(stream) = messages.as_mut() {
                    if tx.send(CancelSignal::Resync).await.is_err() {
                        return;
                    }
                    loop {
                        tokio::select! {
                            // The shared connection moved to another server: so does this one.
                            Ok(()) = replaced.changed() => break,
                            m = stream.next() => match m {
                                Some(m) => {
                                    let channel = m.get_channel_name();
                                    let Some(signal) = signal_of(&prefix, channel, m.get_payload_bytes()) else {
                                        continue;
                                    };
                                    // A full queue means the instance is far behind; the
                                    // resync after the next reconnect catches lost cancels
                                    // (lost answers are asked for again: the task still waits).
                                    if let Err(e) = tx.try_send(signal) {
                                        tracing::warn!(signal = ?e.into_inner(), "a task signal was dropped: too many pending");
                                    }
                                }
                                None => break,
                            },
                            _ = stop.cancelled() => return,
                        }
                    }
                    tracing::warn!(%pattern, "lost the task cancel subscription; subscribing again");
                }
                let mut delay = Duration::from_millis(100);
                messages = loop {
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = stop.cancelled() => return,
                    }
                    match redis.psubscribe(&pattern).await {
                        Ok(m) => break Some(m),
                        Err(e) => {
                            tracing::debug!(error = %e, %pattern, "subscribing to task cancel signals failed")
                        }
                    }
                    delay = (delay * 2).min(Duration::from_secs(5));
                };
            }
        });
        rx
    }
}

/// The signal a message on `channel` carries, if it is one.
fn signal_of(prefix: &str, channel: &str, payload: &[u8]) -> Option<CancelSignal> {
    let rest = channel.strip_prefix(prefix)?;
    if let Some(id) = rest.strip_prefix("cancel:") {
        return Some(CancelSignal::Cancel(id.to_string()));
    }
    let id = rest.strip_prefix("input:")?;
    let answers = serde_json::from_slice(payload).ok()?;
    Some(CancelSignal::Answers(id.to_string(), answers))
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

    async fn create(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
        self.create_for(record, &TaskQuota::default()).await
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
        out.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.task_id.cmp(&b.task_id))
        });
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
            if ex.node_id != node || record.status.is_terminal() {
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
