//! Tickets in Redis, shared by every instance that uses the same Redis and key prefix: a ticket
//! opened through one instance is found through any other.
//!
//! Layout, under the configured `redis.key_prefix` (`mcp:` by default):
//!
//! | Key | Type | What |
//! |---|---|---|
//! | `helpdesk:last_id` | string | the last id given (`INCR`: ids are never reused) |
//! | `helpdesk:tickets` | hash | ticket id → the ticket as JSON; `call:<key>` → the id of the ticket the call with that key opened |
//! | `helpdesk:once:<call key>` | string, expires | `running` or `done`: a call's one run of `stamp_confirmed`'s effect, kept for the `requestState` lifetime |
//!
//! Listing reads the one hash (`HGETALL`, leaving out the `call:` fields): no `KEYS`, no scan
//! of the keyspace; the desk is a demo, so one hash holds it all (the call fields are never
//! trimmed). Opening takes an id (`INCR`), then one script stores the ticket unless the call's
//! key already names one, which it returns instead: a retried call opens one ticket (a retry
//! spends an id, and ids are never reused). Closing is one script (read, change, write in one
//! step), so two instances closing the same ticket at once leave one whole record, the last
//! one's. Each script touches the one hash, so the desk also runs on a Redis Cluster. Every
//! command goes through fleetmcp's [`RedisConn`], so each is bounded by `redis.command_timeout_ms`.

use async_trait::async_trait;
use fleetmcp::redis_conn::{CommandError, RedisConn};

use super::{Once, SeenIds, StoreError, TicketStore};
use crate::ticket::{NewTicket, Status, Ticket};

/// Closes ticket `ARGV[1]` of hash `KEYS[1]` with resolution `ARGV[2]`; returns the new record,
/// or nil when there is no such ticket.
const CLOSE: &str = r#"
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return false end
local t = cjson.decode(raw)
t.status = 'closed'
t.resolution = ARGV[2]
local out = cjson.encode(t)
redis.call('HSET', KEYS[1], ARGV[1], out)
return out
"#;

/// Stores ticket `ARGV[2]` (JSON) under id `ARGV[1]` in hash `KEYS[1]`, unless field `ARGV[3]`
/// (the call's key, or empty for none) already names a ticket: then returns that one.
const OPEN: &str = r#"
if ARGV[3] ~= '' then
  local prior = redis.call('HGET', KEYS[1], ARGV[3])
  if prior then
    local t = redis.call('HGET', KEYS[1], prior)
    if t then return t end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], ARGV[3], ARGV[1]) end
return ARGV[2]
"#;

/// Claims key `KEYS[1]` for `ARGV[1]` ms (`running`), unless an earlier run holds it: then
/// what that run left (`running` or `done`; a key that expired in between reads `running`).
const CLAIM_ONCE: &str = r#"
if redis.call('SET', KEYS[1], 'running', 'NX', 'PX', ARGV[1]) then return 'claimed' end
return redis.call('GET', KEYS[1]) or 'running'
"#;

/// Fields of the tickets hash that map a call's key to its ticket.
const CALL_FIELD: &str = "call:";

/// The desk in Redis.
pub struct RedisStore {
    redis: RedisConn,
    last_id_key: String,
    tickets_key: String,
    close: redis::Script,
    open: redis::Script,
    claim_once: redis::Script,
    once_prefix: String,
    seen: SeenIds,
}

impl RedisStore {
    /// A store on `redis`, its keys under `key_prefix`.
    pub fn new(redis: RedisConn, key_prefix: &str) -> Self {
        Self {
            redis,
            last_id_key: format!("{key_prefix}helpdesk:last_id"),
            tickets_key: format!("{key_prefix}helpdesk:tickets"),
            close: redis::Script::new(CLOSE),
            open: redis::Script::new(OPEN),
            claim_once: redis::Script::new(CLAIM_ONCE),
            once_prefix: format!("{key_prefix}helpdesk:once:"),
            seen: SeenIds::default(),
        }
    }
}

fn unavailable(e: CommandError) -> StoreError {
    StoreError(e.to_string())
}

fn decode(raw: &str) -> Result<Ticket, StoreError> {
    serde_json::from_str(raw).map_err(|e| StoreError(format!("a stored ticket is not valid: {e}")))
}

#[async_trait]
impl TicketStore for RedisStore {
    async fn open(&self, new: NewTicket, key: Option<&str>) -> Result<Ticket, StoreError> {
        let id: u64 = self
            .redis
            .run(redis::cmd("INCR").arg(&self.last_id_key).clone())
            .await
            .map_err(unavailable)?;
        let t = new.with_id(id);
        let json = serde_json::to_string(&t).map_err(|e| StoreError(e.to_string()))?;
        let field = key.map_or(String::new(), |k| format!("{CALL_FIELD}{k}"));
        let mut invocation = self.open.prepare_invoke();
        invocation
            .key(&self.tickets_key)
            .arg(id)
            .arg(json)
            .arg(field);
        let raw: String = self.redis.eval(invocation).await.map_err(unavailable)?;
        let t = decode(&raw)?;
        self.seen.saw([&t]);
        Ok(t)
    }

    async fn find(
        &self,
        query: Option<&str>,
        status: Option<Status>,
    ) -> Result<Vec<Ticket>, StoreError> {
        let raw: Vec<(String, String)> = self
            .redis
            .run(redis::cmd("HGETALL").arg(&self.tickets_key).clone())
            .await
            .map_err(unavailable)?;
        let mut all = raw
            .iter()
            .filter(|(field, _)| !field.starts_with(CALL_FIELD))
            .map(|(_, r)| decode(r))
            .collect::<Result<Vec<_>, _>>()?;
        self.seen.saw(&all);
        all.retain(|t| t.matches(query, status));
        all.sort_by_key(|t| t.id);
        Ok(all)
    }

    async fn get(&self, id: u64) -> Result<Option<Ticket>, StoreError> {
        let raw: Option<String> = self
            .redis
            .run(redis::cmd("HGET").arg(&self.tickets_key).arg(id).clone())
            .await
            .map_err(unavailable)?;
        let t = raw.as_deref().map(decode).transpose()?;
        self.seen.saw(&t);
        Ok(t)
    }

    async fn close(&self, id: u64, resolution: String) -> Result<Option<Ticket>, StoreError> {
        let mut invocation = self.close.prepare_invoke();
        invocation.key(&self.tickets_key).arg(id).arg(resolution);
        let raw: Option<String> = self.redis.eval(invocation).await.map_err(unavailable)?;
        let t = raw.as_deref().map(decode).transpose()?;
        self.seen.saw(&t);
        Ok(t)
    }

    async fn claim_once(&self, key: &str, ttl_ms: u64) -> Result<Once, StoreError> {
        let mut invocation = self.claim_once.prepare_invoke();
        invocation
            .key(format!("{}{key}", self.once_prefix))
            .arg(ttl_ms.max(1));
        let found: String = self.redis.eval(invocation).await.map_err(unavailable)?;
        Ok(match found.as_str() {
            "claimed" => Once::Claimed,
            "done" => Once::Done,
            _ => Once::Running,
        })
    }

    async fn finish_once(&self, key: &str, done: bool, ttl_ms: u64) -> Result<(), StoreError> {
        let once = format!("{}{key}", self.once_prefix);
        let cmd = if done {
            redis::cmd("SET")
                .arg(&once)
                .arg("done")
                .arg("XX")
                .arg("PX")
                .arg(ttl_ms.max(1))
                .clone()
        } else {
            redis::cmd("DEL").arg(&once).clone()
        };
        let _: redis::Value = self.redis.run(cmd).await.map_err(unavailable)?;
        Ok(())
    }

    fn known_ids(&self) -> Vec<u64> {
        self.seen.all()
    }
}
