//! The Lua scripts of the Redis task store: each write or charge is one script, so that it is
//! atomic on the server (a task's end is final, a bound is checked and charged at once).

/// Lua helpers every script shares: a record's status (read from the front of the JSON, where
/// serde writes `taskId` then `status`, so a large result is not decoded), and whether it ended.
pub(super) const HELPERS: &str = r#"
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
/// Cluster slot (see [`RedisTaskStore::record_key`](super::RedisTaskStore::record_key)); the executor index, in another, is
/// written by the caller.
pub(super) const CREATE: &str = r#"
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
pub(super) const WRITE: &str = r#"
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
/// bytes); `ARGV[1]` is the prefix of each group's `done` sorted set (the finished records,
/// oldest first: the eviction candidates). A group is `all`, `s:<session>` or `c:<digest of the
/// caller's key>`. Expired entries are trimmed on every call (at most 100 at a time, more
/// than a call adds), so the counts cannot leak: an entry leaves with its record's expiry
/// at the latest, and every key expires twice a task's lifetime after its last write.
pub(super) const QUOTA_HELPERS: &str = r#"
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
pub(super) const QUOTA_RESERVE: &str = r#"
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
pub(super) const QUOTA_END: &str = r#"
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
pub(super) const QUOTA_RELEASE: &str = r#"
drop(ARGV[2], nil)
return 1
"#;
