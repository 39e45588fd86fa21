//! Session records in Redis, shared by every instance of a fleet.
//!
//! One string key per session, `<prefix>session:<id>` (`mcp:session:<id>` by default), holding
//! the record as JSON in the contract's layout (the holder is `session.nodeId`, its term the
//! top-level `epoch`), written with `SET ... PX <ttl>`. Once every running instance of the fleet
//! reads it, the value leaves out `session.id` (the key names the session): `form.rs`, which
//! says what each version reads during a rolling upgrade. `exists` is `EXISTS`, `touch` is
//! `PEXPIRE`, `get` is `GET`, `delete` is `DEL`, `ping` is `PING`: one command each, each
//! bounded by the shared [`RedisConn`]. The per-request check of a held session is one script,
//! `TOUCH_EXISTS` (the refresh when due, then `EXISTS`), run only when the record is not tracked
//! or due for its refresh (`tracking.rs`).
//!
//! The fenced operations of distributed mode are one Lua script each, so that the comparison
//! and the write cannot be separated by another instance's write: `check` (is the record still
//! this holder's, and refresh it if so) and `claim` (make another instance the holder, if the
//! record still names the holder and epoch the claimer read). The script only decodes the
//! record to compare; the new record is encoded here, so Lua's JSON encoder never rewrites
//! what clients sent (it would turn `[]` into `{}`).
//!
//! Each holder's sessions are also indexed, `<prefix>node:<nodeId>:sessions:<n>` (sorted sets
//! in listpack-sized buckets, scored by the time of the holder's last refresh: `index.rs`), so
//! the orphan scanner reads a dead instance's sessions without scanning the keyspace.
//! Creation, claims and refreshes keep it; a `DELETE` removes its session's entry with the
//! record (`delete_indexed`); entries of expired sessions (and of deletes that failed
//! half-way) are pruned by score.
//!
//! Redis Cluster: a record and an index live in different slots (the contract's key names
//! leave no room for a shared hash tag), so no script touches both. The record is the truth:
//! the fenced scripts compare and write the record alone, and the index is written by its own
//! command once the record says so (after a creation, a refresh, a won claim). The index is a
//! hint for the orphan scanner, which claims through the fenced script; a crash between the
//! two writes leaves at worst a session missing from an index until its holder's next refresh
//! (a request for it still finds its record and takes it over), or an entry naming a session
//! the node no longer holds (its claim then loses, harmlessly, and the score prunes it).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::store::{Checked, Claim, Fence, SessionRecord, SessionStore, Standing, StoreError};
use super::tracking::Tracker;
use crate::clock::unix_ms;
#[cfg(any(test, feature = "testkit"))]
use crate::redis_config::RedisConfig;
use crate::redis_conn::{CommandError, RedisConn};

/// The stored record, in the contract's layout (ha-contract 4.2) plus the fields a Rust
/// instance needs to recreate the session (`protocolVersion`, `clientInfo`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredRecord {
    session: StoredSession,
    created_at: u64,
    last_accessed_at: u64,
    initialized: bool,
    protocol_version: String,
    // The optional fields are left out when empty or usual (no `{}`, no epoch 1): every byte
    // of the record is paid per session in Redis, and a record of up to 316 bytes fits
    // jemalloc's 320-byte class where the full one took 384, one of up to 252 (the compact
    // form, `form.rs`) the 256-byte class (docs/BENCHMARKS.md, Memory).
    // Every version reads a missing field as its default, so records of either shape are read
    // by instances of either version during a rolling upgrade.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    client_info: Value,
    /// Read back as `{}` when absent: a client that declared no capability (a recreated
    /// session passes them on, e.g. to a gateway's upstream, where `null` would be refused).
    #[serde(default = "no_capabilities", skip_serializing_if = "is_empty_json")]
    client_capabilities: Value,
    /// The holder's term (see [`SessionRecord::epoch`]), left out while it is the first (1),
    /// as almost every session's is for its whole life. Read missing as 1, here and by the
    /// scripts. Earlier versions read a missing epoch as 0, and their scripts too: each
    /// instance compares with its own reading, and a claim always writes its epoch (2 and up
    /// here, 1 and up there), so a record never comes back to a holder and epoch a stale
    /// holder still has (the fence holds across versions).
    #[serde(default = "first_epoch", skip_serializing_if = "is_first_epoch")]
    epoch: u64,
    /// Set by a claim: when, and from which holder (the contract's takeover fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reassigned_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reassigned_from: Option<String>,
    /// The contract's field for who made the session: here the fingerprint of its principal
    /// (16 bytes of SHA-256, base64url), never a token; absent without authorization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    authorization_id: Option<String>,
}

/// `null` or `{}`: no capability declared.
fn is_empty_json(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

fn no_capabilities() -> Value {
    Value::Object(Default::default())
}

fn first_epoch() -> u64 {
    1
}

fn is_first_epoch(n: &u64) -> bool {
    *n == 1
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredSession {
    /// The session's id, as in the key; empty (left out) in the compact form, whose reader
    /// takes it from the key (`form.rs`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    id: String,
    protocol: String,
    created_at: u64,
    /// The holder: `session.nodeId` in the contract.
    #[serde(rename = "nodeId")]
    holder: String,
}

impl StoredRecord {
    /// `r` as stored: in the compact form (no `session.id`) when `compact` (see `form.rs`).
    fn from_record(r: &SessionRecord, compact: bool) -> Self {
        Self {
            session: StoredSession {
                id: if compact { String::new() } else { r.id.clone() },
                protocol: "streamable-http".into(),
                created_at: r.created_at,
                holder: r.holder.clone(),
            },
            created_at: r.created_at,
            last_accessed_at: unix_ms(),
            initialized: true,
            protocol_version: r.protocol_version.clone(),
            client_info: r.client_info.clone(),
            client_capabilities: r.client_capabilities.clone(),
            epoch: r.epoch,
            reassigned_at: None,
            reassigned_from: None,
            authorization_id: r.principal.clone(),
        }
    }

    /// The record read at session `id`'s key: `None` when it names another session (a full
    /// record names its own; a compact one is the key's).
    fn into_record(self, id: &str) -> Option<SessionRecord> {
        if !self.session.id.is_empty() && self.session.id != id {
            return None;
        }
        Some(SessionRecord {
            id: id.to_string(),
            holder: self.session.holder,
            protocol_version: self.protocol_version,
            client_info: self.client_info,
            client_capabilities: self.client_capabilities,
            created_at: self.session.created_at,
            epoch: self.epoch,
            principal: self.authorization_id,
        })
    }
}

/// The start of the fenced scripts: the record at `KEYS[1]` (answering `{0}` when there is none,
/// or it does not decode) and the `node` and `epoch` it names (`session.nodeId`, else the
/// top-level `nodeId` of older records; epoch 1 when the record has none, see `StoredRecord`).
macro_rules! holder_of_record {
    () => {
        r#"
local v = redis.call('GET', KEYS[1])
if not v then return {0, '', 0} end
local ok, r = pcall(cjson.decode, v)
if not ok or type(r) ~= 'table' then return {0, '', 0} end
local node = (type(r.session) == 'table' and r.session.nodeId) or r.nodeId or ''
local epoch = tonumber(r.epoch) or 1
"#
    };
}

/// Whether the record at `KEYS[1]` names holder `ARGV[1]` under epoch `ARGV[2]`: `{1}` yes,
/// `{0}` no record, `{2, holder, epoch}` another. When yes and `ARGV[3]` is `1`, the record's
/// expiry is pushed out by `ARGV[4]` ms (the caller then refreshes the holder's index); the key
/// is read again after that write (with per-key tracking, a connection's own write ended its
/// tracking of the key; broadcast tracking, `tracking.rs`, needs no read, and the read costs
/// nothing).
const CHECK: &str = concat!(
    holder_of_record!(),
    r#"
if node == ARGV[1] and epoch == tonumber(ARGV[2]) then
  if ARGV[3] == '1' then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    redis.call('EXISTS', KEYS[1])
  end
  return {1, node, epoch}
end
return {2, tostring(node), epoch}
"#
);

/// Whether the record at `KEYS[1]` exists (`1`) or not (`0`), after pushing its expiry out by
/// `ARGV[2]` ms when `ARGV[1]` is `1` (written first, read last: see [`CHECK`]).
const TOUCH_EXISTS: &str = r#"
if ARGV[1] == '1' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return redis.call('EXISTS', KEYS[1])
"#;

mod claim;
mod form;

pub(crate) use form::RecordForm;

/// Session records in Redis. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct RedisSessionStore {
    conn: RedisConn,
    ttl_ms: u64,
    check: std::sync::Arc<redis::Script>,
    touch_exists: std::sync::Arc<redis::Script>,
    claim: std::sync::Arc<redis::Script>,
    /// The client-side caching connection, once [`SessionStore::invalidations`] started it.
    tracker: std::sync::Arc<std::sync::OnceLock<std::sync::Arc<Tracker>>>,
}

impl From<CommandError> for StoreError {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::Timeout(ms) => StoreError::Timeout(ms),
            CommandError::Unavailable(why) => StoreError::Unavailable(why),
            CommandError::NotDurable(why) => StoreError::NotDurable(why),
        }
    }
}

impl RedisSessionStore {
    /// Session records on an existing connection.
    pub fn on(conn: RedisConn) -> Self {
        let ttl_ms = conn.config().default_ttl_ms;
        Self {
            conn,
            ttl_ms,
            check: std::sync::Arc::new(redis::Script::new(CHECK)),
            touch_exists: std::sync::Arc::new(redis::Script::new(TOUCH_EXISTS)),
            tracker: std::sync::Arc::default(),
            claim: std::sync::Arc::new(redis::Script::new(claim::CLAIM)),
        }
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Connects (see [`RedisConn::connect`]).
    pub async fn connect(cfg: RedisConfig) -> Result<Self, StoreError> {
        Ok(Self::on(RedisConn::connect(cfg).await?))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Connects, or keeps retrying in the background (see [`RedisConn::connect_in_background`]).
    pub async fn connect_in_background(cfg: RedisConfig) -> Result<Self, StoreError> {
        Ok(Self::on(RedisConn::connect_in_background(cfg).await?))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Whether the connection is up and answered its last command.
    pub fn is_connected(&self) -> bool {
        self.conn.is_connected()
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Connection rebuilds after repeated timeouts (see [`RedisConn::rebuild_attempts`]).
    pub fn rebuild_attempts(&self) -> u32 {
        self.conn.rebuild_attempts()
    }

    #[cfg(any(test, feature = "testkit"))]
    /// The connection this store uses, to share with other stores.
    pub fn conn(&self) -> &RedisConn {
        &self.conn
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Writes records in the compact form from now on, as the heartbeat does once every
    /// running instance reads it (`form.rs`).
    pub fn write_compact_records(&self) {
        self.conn.shared::<RecordForm>().write_compact();
    }

    /// The key of a session's record.
    pub fn key(&self, id: &str) -> String {
        self.conn.config().session_key(id)
    }

    async fn run<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, StoreError> {
        Ok(self.conn.run(cmd).await?)
    }

    /// The bucket of `node`'s index where session `id` is written, by the bucket count known
    /// here (see `index.rs`).
    pub fn index_key(&self, node: &str, id: &str) -> String {
        let count = self.conn.shared::<super::IndexBuckets>().of(node);
        self.conn
            .config()
            .node_index_bucket_key(node, super::index::bucket_of(id, count))
    }

    /// `record` as this instance stores it now, in the form the fleet reads (`form.rs`).
    fn wire(&self, record: &SessionRecord) -> StoredRecord {
        let compact = self.conn.shared::<RecordForm>().compact();
        StoredRecord::from_record(record, compact)
    }

    fn encode(wire: &StoredRecord) -> Result<String, StoreError> {
        serde_json::to_string(wire)
            .map_err(|e| StoreError::Unavailable(format!("cannot encode the record: {e}")))
    }

    /// The records of `ids` in one round trip (`MGET`), in order; `None` for a missing or
    /// invalid one (left for [`SessionStore::get`] to clean up).
    pub async fn get_many(&self, ids: &[String]) -> Result<Vec<Option<SessionRecord>>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("MGET");
        for id in ids {
            cmd.arg(self.key(id));
        }
        let raw: Vec<Option<String>> = self.run(cmd).await?;
        Ok(ids
            .iter()
            .zip(raw)
            .map(|(id, raw)| {
                raw.and_then(|r| serde_json::from_str::<StoredRecord>(&r).ok())
                    .and_then(|w| w.into_record(id))
            })
            .collect())
    }

    /// The check `inv` run on the tracking connection `conn` (fenced or not): its answer, which
    /// then counts as tracked, or `None` when it must run on the shared connection instead.
    async fn check_tracked(
        &self,
        mut conn: redis::aio::MultiplexedConnection,
        inv: &redis::ScriptInvocation<'_>,
        fenced: bool,
    ) -> Result<Option<(i64, String, u64)>, StoreError> {
        let limit = self.conn.config().command_timeout();
        let ran = async {
            if fenced {
                inv.invoke_async(&mut conn).await
            } else {
                inv.invoke_async::<i64>(&mut conn)
                    .await
                    .map(|n| (n, String::new(), 0))
            }
        };
        match tokio::time::timeout(limit, ran).await {
            Ok(Ok(a)) => Ok(Some(a)),
            Ok(Err(e)) if e.is_timeout() => Err(StoreError::Timeout(limit.as_millis() as u64)),
            // On a cluster, the master read may have handed the slot over (`MOVED`) before
            // the tracker follows the new map: the shared connection knows where the key
            // is now, and the answer confirms nothing.
            Ok(Err(e)) if self.conn.config().is_cluster() => {
                tracing::debug!(error = %e, "a tracked check failed; checking on the shared connection");
                Ok(None)
            }
            Ok(Err(e)) => Err(StoreError::Unavailable(e.to_string())),
            Err(_) => Err(StoreError::Timeout(limit.as_millis() as u64)),
        }
    }
}

#[async_trait]
impl SessionStore for RedisSessionStore {
    async fn put(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let json = Self::encode(&self.wire(record))?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(&record.id))
            .arg(json)
            .arg("PX")
            .arg(self.ttl_ms);
        self.run::<()>(cmd).await
    }

    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.key(id));
        let read = self.conn.reading_on();
        let Some(raw) = self.run::<Option<String>>(cmd).await? else {
            // A process that slept through a failover may still be connected to the deposed
            // master, which lacks what the new one took since: "no such session" is believed
            // only from the master in charge, on the connection the read went to (Sentinel;
            // otherwise nothing to ask).
            self.conn.confirm_master_of(read).await?;
            return Ok(None);
        };
        match serde_json::from_str::<StoredRecord>(&raw)
            .ok()
            .and_then(|w| w.into_record(id))
        {
            Some(r) => Ok(Some(r)),
            None => {
                // The contract: a record that does not parse or validate is deleted.
                tracing::warn!(
                    session_key = %self.key(id),
                    "stored session record is not valid; deleting it"
                );
                let mut del = redis::cmd("DEL");
                del.arg(self.key(id));
                let _ = self.run::<i64>(del).await;
                Ok(None)
            }
        }
    }

    #[cfg(any(test, feature = "testkit"))]
    async fn exists(&self, id: &str) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.key(id));
        Ok(self.run::<i64>(cmd).await? > 0)
    }

    async fn touch(&self, id: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("PEXPIRE");
        cmd.arg(self.key(id)).arg(self.ttl_ms);
        self.run::<i64>(cmd).await.map(|_| ())
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.key(id));
        self.run::<i64>(cmd).await.map(|_| ())
    }

    async fn delete_indexed(&self, id: &str, holder: &str) -> Result<(), StoreError> {
        let mut del = redis::cmd("DEL");
        del.arg(self.key(id));
        let mut unindex = redis::cmd("ZREM");
        unindex.arg(self.index_key(holder, id)).arg(id);
        self.conn.shared::<super::IndexBuckets>().deleted(holder);
        if self.conn.config().is_cluster() {
            // Two slots (see the module documentation), sent together: one round trip. The
            // index is a hint: a failure there leaves an entry the heartbeat prunes later.
            let (del, unindex) =
                futures_util::join!(self.run::<i64>(del), self.run::<i64>(unindex));
            if let Err(e) = unindex {
                tracing::debug!(error = %e, "a deleted session's index entry was not removed (the heartbeat prunes it)");
            }
            return del.map(|_| ());
        }
        // One server: the record and its index entry go in one pipeline, as they came.
        let mut pipe = redis::pipe();
        pipe.add_command(del).ignore();
        pipe.add_command(unindex).ignore();
        Ok(self.conn.pipe::<()>(pipe).await?)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.run::<String>(redis::cmd("PING")).await.map(|_| ())
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn waits_for_replicas(&self) -> bool {
        self.conn.writes_durably()
    }

    async fn confirm_current(&self) -> Result<(), StoreError> {
        Ok(self.conn.confirm_master().await?)
    }

    async fn create(&self, record: &SessionRecord, indexed: bool) -> Result<(), StoreError> {
        let json = Self::encode(&self.wire(record))?;
        if indexed
            && let Some(holds) = self
                .conn
                .shared::<super::IndexBuckets>()
                .created(&record.holder)
        {
            // More buckets first (one script, a few times in an instance's life), so that no
            // bucket outgrows Redis's compact encoding while sessions open faster than beats.
            if let Err(e) = super::index::grow(&self.conn, &record.holder, holds).await {
                tracing::debug!(error = %e, "the session index's bucket count was not grown");
            }
        }
        let mut set = redis::cmd("SET");
        set.arg(self.key(&record.id))
            .arg(json)
            .arg("PX")
            .arg(self.ttl_ms);
        let mut index = redis::cmd("ZADD");
        index
            .arg(self.index_key(&record.holder, &record.id))
            .arg(unix_ms())
            .arg(&record.id);
        if self.conn.config().is_cluster() {
            // Two slots (see the module documentation), sent together: one round trip.
            if !indexed {
                return self.run::<()>(set).await;
            }
            let (set, index) = futures_util::join!(self.run::<()>(set), self.run::<i64>(index));
            set?;
            return index.map(|_| ());
        }
        // One server: record and index entry in one pipeline, confirmed by the replicas
        // `wait_replicas` asks for before the session is acknowledged.
        let mut pipe = redis::pipe();
        pipe.add_command(set).ignore();
        if indexed {
            pipe.add_command(index).ignore();
        }
        Ok(self.conn.pipe_durably::<()>(pipe).await?)
    }

    /// On the tracking connection while it is up (the answer is then `tracked`), else on the
    /// shared one.
    async fn check(
        &self,
        id: &str,
        fence: Option<&Fence>,
        refresh: bool,
    ) -> Result<Checked, StoreError> {
        let refresh = if refresh { "1" } else { "0" };
        let key = self.key(id);
        let mut inv;
        match fence {
            Some(f) => {
                inv = self.check.prepare_invoke();
                inv.key(&key)
                    .arg(&f.holder)
                    .arg(f.epoch)
                    .arg(refresh)
                    .arg(self.ttl_ms);
            }
            None => {
                inv = self.touch_exists.prepare_invoke();
                inv.key(&key).arg(refresh).arg(self.ttl_ms);
            }
        }
        let tracking = match self.tracker.get() {
            Some(t) => t.conn_for(id, &key).await,
            None => None,
        };
        let tracked = match tracking {
            Some(conn) => self.check_tracked(conn, &inv, fence.is_some()).await?,
            None => None,
        };
        let is_tracked = tracked.is_some();
        let answer: (i64, String, u64) = match (tracked, fence) {
            (Some(a), _) => a,
            (None, Some(_)) => self.conn.eval(inv).await?,
            (None, None) => (self.conn.eval::<i64>(inv).await?, String::new(), 0),
        };
        if let (Some(f), (1, ..), "1") = (fence, &answer, refresh) {
            // The record was refreshed: so is its entry in the holder's index (its score keeps
            // the heartbeat from pruning it).
            // Best effort, like every index write (the record is the truth).
            let mut index = redis::cmd("ZADD");
            index
                .arg(self.index_key(&f.holder, id))
                .arg(unix_ms())
                .arg(id);
            if let Err(e) = self.run::<i64>(index).await {
                tracing::debug!(error = %e, "a refreshed session's index entry was not written");
            }
        }
        let standing = match answer {
            (1, ..) => Standing::Mine,
            (2, holder, epoch) => Standing::Lost { holder, epoch },
            _ => Standing::Gone,
        };
        Ok(Checked {
            standing,
            tracked: is_tracked,
        })
    }

    fn invalidations(&self, holder: &str) -> Option<super::lossy::Invalidations> {
        let (tracker, rx) = Tracker::start(&self.conn, holder);
        self.tracker.set(tracker).ok()?;
        Some(rx)
    }

    async fn claim(&self, record: &SessionRecord, to: &str) -> Result<Claim, StoreError> {
        self.claim_one(record, to).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_layout_matches_the_contract() {
        let r = SessionRecord {
            id: "s1".into(),
            holder: "desk-a".into(),
            protocol_version: "2025-06-18".into(),
            client_info: serde_json::json!({"name": "c"}),
            client_capabilities: serde_json::json!({"elicitation": {}}),
            created_at: 42,
            epoch: 3,
            principal: None,
        };
        let v = serde_json::to_value(StoredRecord::from_record(&r, false)).unwrap();
        assert_eq!(v["session"]["nodeId"], "desk-a");
        assert_eq!(v["session"]["protocol"], "streamable-http");
        assert_eq!(v["session"]["id"], "s1");
        assert_eq!(v["initialized"], true);
        assert_eq!(
            v["clientCapabilities"]["elicitation"],
            serde_json::json!({})
        );
        let back: StoredRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back.into_record("s1"), Some(r));
    }

    #[test]
    fn empty_optional_fields_are_left_out_and_read_back_as_before() {
        let r = SessionRecord {
            id: "s1".into(),
            holder: "desk-a".into(),
            protocol_version: "2025-11-25".into(),
            client_info: Value::Null,
            client_capabilities: serde_json::json!({}),
            created_at: 42,
            epoch: 1,
            principal: None,
        };
        let text = serde_json::to_string(&StoredRecord::from_record(&r, false)).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        for absent in [
            "clientInfo",
            "clientCapabilities",
            "epoch",
            "authorizationId",
        ] {
            assert!(v.get(absent).is_none(), "{absent} written in {text}");
        }
        // What the contract requires stays, in its place.
        assert_eq!(v["session"]["id"], "s1");
        assert_eq!(v["session"]["nodeId"], "desk-a");
        assert_eq!(v["session"]["protocol"], "streamable-http");
        assert_eq!(v["session"]["createdAt"], 42);
        assert_eq!(v["createdAt"], 42);
        assert!(v["lastAccessedAt"].is_u64());
        assert_eq!(v["initialized"], true);
        let back: StoredRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back.into_record("s1"),
            Some(r),
            "capabilities read back as {{}}"
        );
    }

    #[test]
    fn a_record_written_with_every_field_still_reads() {
        // As earlier versions wrote it: empty capabilities, epoch 0, and the contract's
        // optional fields this version never writes.
        let old = r#"{"session":{"id":"s1","protocol":"streamable-http","createdAt":42,
            "nodeId":"desk-a","clientFingerprint":"f","expiresAt":99},"createdAt":42,
            "lastAccessedAt":43,"initialized":true,"protocolVersion":"2025-06-18",
            "clientInfo":{"name":"c"},"clientCapabilities":{},"epoch":0,
            "reassignedAt":44,"reassignedFrom":"desk-b","maxLifetimeAt":100}"#;
        let r = serde_json::from_str::<StoredRecord>(old)
            .unwrap()
            .into_record("s1")
            .unwrap();
        assert_eq!(r.id, "s1");
        assert_eq!(r.holder, "desk-a");
        assert_eq!(r.protocol_version, "2025-06-18");
        assert_eq!(r.client_info, serde_json::json!({"name": "c"}));
        assert_eq!(r.client_capabilities, serde_json::json!({}));
        assert_eq!(r.epoch, 0);
    }

    /// A typical session of the benchmarks (`bench/memory.sh`): a minted 62-character id, a
    /// short machine id, `clientInfo` `{"name":"bench","version":"1.0"}`, no capability.
    fn typical() -> SessionRecord {
        SessionRecord {
            id: "A".repeat(62),
            holder: "desk-a".into(),
            protocol_version: "2025-11-25".into(),
            client_info: serde_json::json!({"name": "bench", "version": "1.0"}),
            client_capabilities: serde_json::json!({}),
            created_at: 1_765_086_902_000,
            epoch: 1,
            principal: None,
        }
    }

    /// Issue 37: the compact form of a typical record fits jemalloc's 256-byte class (a Redis
    /// string of up to 252 bytes: 3 bytes of header and the terminating zero), where the full
    /// one (309 bytes) takes the 320-byte class; even claimed (epoch and takeover fields), it
    /// stays in the 320 class.
    #[test]
    fn a_typical_compact_record_fits_the_256_byte_class() {
        let full = serde_json::to_string(&StoredRecord::from_record(&typical(), false)).unwrap();
        let compact = serde_json::to_string(&StoredRecord::from_record(&typical(), true)).unwrap();
        assert!(full.len() > 252, "{} bytes: {full}", full.len());
        assert!(compact.len() <= 252, "{} bytes: {compact}", compact.len());
        assert!(!compact.contains(&typical().id), "{compact}");
        let mut claimed = StoredRecord::from_record(&typical(), true);
        claimed.epoch = 2;
        claimed.reassigned_at = Some(1_765_086_903_000);
        claimed.reassigned_from = Some("desk-b".into());
        let claimed = serde_json::to_string(&claimed).unwrap();
        assert!(claimed.len() <= 316, "{} bytes: {claimed}", claimed.len());
    }

    /// Both forms read back at their key; a full record read at another session's key is not
    /// that session's (the check every earlier version makes, and deletes on).
    #[test]
    fn both_forms_read_back_and_a_full_record_must_name_its_key() {
        let r = typical();
        for compact in [false, true] {
            let text = serde_json::to_string(&StoredRecord::from_record(&r, compact)).unwrap();
            let read = serde_json::from_str::<StoredRecord>(&text).unwrap();
            assert_eq!(read.into_record(&r.id), Some(r.clone()), "{text}");
        }
        let full = serde_json::to_string(&StoredRecord::from_record(&r, false)).unwrap();
        let read = serde_json::from_str::<StoredRecord>(&full).unwrap();
        assert_eq!(read.into_record("another"), None);
        let compact = serde_json::to_string(&StoredRecord::from_record(&r, true)).unwrap();
        let read = serde_json::from_str::<StoredRecord>(&compact).unwrap();
        assert_eq!(
            read.into_record("another").map(|r| r.id),
            Some("another".into())
        );
    }
}
