//! Session records in Redis, shared by every instance of a fleet.
//!
//! One string key per session, `<prefix>session:<id>` (`mcp:session:<id>` by default), holding
//! the record as JSON in the contract's layout (the holder is `session.nodeId`), written with
//! `SET ... PX <ttl>`. `exists` is `EXISTS`, `touch` is `PEXPIRE`, `get` is `GET`, `delete`
//! is `DEL`, `ping` is `PING`: one command each.
//!
//! Every command is bounded by `command_timeout_ms` (the connection's response timeout, and a
//! Tokio timeout around it) and fails with [`StoreError::Timeout`]; any other failure is
//! [`StoreError::Unavailable`]. A lost connection is re-established by the `redis` crate's
//! `ConnectionManager`. A server that stops answering without closing the connection (paused,
//! or a black-holed network) only shows as timeouts, and the manager does not reconnect on
//! those: after [`REBUILD_AFTER_TIMEOUTS`] timeouts in a row this store builds a new
//! connection in the background and swaps it in; callers never wait for that.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::store::{SessionRecord, SessionStore, StoreError};
use crate::redis_config::RedisConfig;

/// Timeouts in a row after which the connection is rebuilt.
pub const REBUILD_AFTER_TIMEOUTS: u32 = 3;
/// First delay of the background connection retry; it doubles up to [`RETRY_MAX`].
pub const RETRY_MIN: Duration = Duration::from_secs(1);
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// The stored record, in the contract's layout (ha-contract 4.2) plus the fields a Rust
/// instance needs to recreate the session (`protocolVersion`, `clientInfo`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    session: WireSession,
    created_at: u64,
    last_accessed_at: u64,
    initialized: bool,
    protocol_version: String,
    #[serde(default)]
    client_info: Value,
    #[serde(default)]
    client_capabilities: Value,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSession {
    id: String,
    protocol: String,
    created_at: u64,
    node_id: String,
}

impl Wire {
    fn from_record(r: &SessionRecord) -> Self {
        Self {
            session: WireSession {
                id: r.id.clone(),
                protocol: "streamable-http".into(),
                created_at: r.created_at,
                node_id: r.node_id.clone(),
            },
            created_at: r.created_at,
            last_accessed_at: now_ms(),
            initialized: true,
            protocol_version: r.protocol_version.clone(),
            client_info: r.client_info.clone(),
            client_capabilities: r.client_capabilities.clone(),
        }
    }

    fn into_record(self) -> SessionRecord {
        SessionRecord {
            id: self.session.id,
            node_id: self.session.node_id,
            protocol_version: self.protocol_version,
            client_info: self.client_info,
            client_capabilities: self.client_capabilities,
            created_at: self.session.created_at,
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Session records in Redis. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct RedisSessionStore {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: RedisConfig,
    client: redis::Client,
    ttl_ms: u64,
    /// `None` until the first connection succeeds.
    conn: ArcSwapOption<ConnectionManager>,
    timeouts_in_a_row: AtomicU32,
    rebuilding: AtomicBool,
    /// Connection rebuilds started after timeouts (for tests and metrics).
    rebuilds: AtomicU32,
    /// The last command or ping got an answer.
    healthy: AtomicBool,
}

impl RedisSessionStore {
    fn new_inner(cfg: RedisConfig) -> Result<Arc<Inner>, StoreError> {
        cfg.validate()
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let client = cfg
            .client()
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(Arc::new(Inner {
            ttl_ms: cfg.default_ttl_ms,
            cfg,
            client,
            conn: ArcSwapOption::empty(),
            timeouts_in_a_row: AtomicU32::new(0),
            rebuilding: AtomicBool::new(false),
            rebuilds: AtomicU32::new(0),
            healthy: AtomicBool::new(false),
        }))
    }

    /// Connects and checks the connection with `PING`; fails if Redis does not answer within
    /// the connect timeout.
    pub async fn connect(cfg: RedisConfig) -> Result<Self, StoreError> {
        let inner = Self::new_inner(cfg)?;
        let manager = inner.open().await?;
        inner.conn.store(Some(Arc::new(manager)));
        inner.healthy.store(true, Ordering::Release);
        tracing::info!(
            target_redis = %inner.cfg.display_target(),
            "[TransportService] Session store connection validated successfully"
        );
        Ok(Self { inner })
    }

    /// Tries once (bounded by the connect timeout plus one command timeout), then returns
    /// whether or not Redis is reachable. Until a connection succeeds every
    /// command fails with [`StoreError::Unavailable`] (callers serve sessions from memory)
    /// and a background task retries, 1 s doubling to 30 s. Configuration errors are
    /// reported here, not retried.
    pub async fn connect_in_background(cfg: RedisConfig) -> Result<Self, StoreError> {
        let inner = Self::new_inner(cfg)?;
        match inner.open().await {
            Ok(manager) => {
                inner.conn.store(Some(Arc::new(manager)));
                inner.healthy.store(true, Ordering::Release);
                tracing::info!(
                    target_redis = %inner.cfg.display_target(),
                    "[TransportService] Session store connection validated successfully"
                );
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    target_redis = %inner.cfg.display_target(),
                    "[TransportService] Failed to connect to Redis - session persistence disabled"
                );
                tokio::spawn(retry_until_connected(Arc::downgrade(&inner)));
            }
        }
        Ok(Self { inner })
    }

    /// Whether the store has a connection and the last command on it got an answer.
    pub fn is_connected(&self) -> bool {
        self.inner.conn.load().is_some() && self.inner.healthy.load(Ordering::Acquire)
    }

    /// How many times the connection was rebuilt (or a rebuild attempted) after
    /// [`REBUILD_AFTER_TIMEOUTS`] timeouts in a row.
    pub fn rebuild_attempts(&self) -> u32 {
        self.inner.rebuilds.load(Ordering::Acquire)
    }

    /// The configuration this store was built from.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.cfg
    }

    /// The key of a session's record.
    pub fn key(&self, id: &str) -> String {
        self.inner.cfg.session_key(id)
    }

    pub(crate) async fn run<T: redis::FromRedisValue>(
        &self,
        cmd: redis::Cmd,
    ) -> Result<T, StoreError> {
        self.inner.run(cmd).await
    }
}

/// Retries the first connection: 1 s, doubling, capped at 30 s. Stops when the store is dropped.
async fn retry_until_connected(inner: Weak<Inner>) {
    let mut delay = RETRY_MIN;
    loop {
        tokio::time::sleep(delay).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match inner.open().await {
            Ok(manager) => {
                inner.conn.store(Some(Arc::new(manager)));
                inner.timeouts_in_a_row.store(0, Ordering::Release);
                inner.healthy.store(true, Ordering::Release);
                tracing::info!("[TransportService] Session store recovered after startup failure");
                tracing::info!(
                    target_redis = %inner.cfg.display_target(),
                    "[TransportService] Session store connection validated successfully"
                );
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, retry_in_ms = delay.as_millis() as u64, "Redis session store still unreachable");
            }
        }
        delay = (delay * 2).min(RETRY_MAX);
    }
}

impl Inner {
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.cfg.command_timeout()))
            .set_connection_timeout(Some(self.cfg.connect_timeout()))
            // Reconnection after a lost connection: quick, bounded attempts; a command that
            // finds the connection still down fails and triggers the next round.
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1))
            .set_number_of_retries(3)
    }

    /// A new connection, checked with `PING`, within the connect timeout (plus one command
    /// timeout for the `PING`).
    async fn open(&self) -> Result<ConnectionManager, StoreError> {
        let bound = self.cfg.connect_timeout() + self.cfg.command_timeout();
        let attempt = async {
            let mut manager =
                ConnectionManager::new_with_config(self.client.clone(), self.manager_config())
                    .await
                    .map_err(map_err_untimed)?;
            redis::cmd("PING")
                .query_async::<String>(&mut manager)
                .await
                .map_err(map_err_untimed)?;
            Ok::<_, StoreError>(manager)
        };
        match tokio::time::timeout(bound, attempt).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(bound.as_millis() as u64)),
        }
    }

    async fn run<T: redis::FromRedisValue>(
        self: &Arc<Self>,
        cmd: redis::Cmd,
    ) -> Result<T, StoreError> {
        let Some(manager) = self.conn.load_full() else {
            return Err(StoreError::Unavailable(
                "not connected to Redis yet (retrying in the background)".into(),
            ));
        };
        let mut conn = (*manager).clone();
        let limit = self.cfg.command_timeout();
        let ms = self.cfg.command_timeout_ms;
        match tokio::time::timeout(limit, cmd.query_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => {
                self.timeouts_in_a_row.store(0, Ordering::Release);
                self.healthy.store(true, Ordering::Release);
                Ok(v)
            }
            Ok(Err(e)) if e.is_timeout() => {
                self.on_timeout();
                Err(StoreError::Timeout(ms))
            }
            Ok(Err(e)) => {
                self.healthy.store(false, Ordering::Release);
                Err(StoreError::Unavailable(e.to_string()))
            }
            Err(_) => {
                self.on_timeout();
                Err(StoreError::Timeout(ms))
            }
        }
    }

    /// Counts a timeout; the [`REBUILD_AFTER_TIMEOUTS`]th in a row starts a rebuild of the
    /// connection in the background (one at a time).
    fn on_timeout(self: &Arc<Self>) {
        self.healthy.store(false, Ordering::Release);
        let n = self.timeouts_in_a_row.fetch_add(1, Ordering::AcqRel) + 1;
        if n < REBUILD_AFTER_TIMEOUTS {
            return;
        }
        if self
            .rebuilding
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        self.rebuilds.fetch_add(1, Ordering::AcqRel);
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            tracing::warn!(
                timeouts = n,
                "Redis session store: no answer to {n} commands in a row; opening a new connection"
            );
            match inner.open().await {
                Ok(manager) => {
                    inner.conn.store(Some(Arc::new(manager)));
                    inner.timeouts_in_a_row.store(0, Ordering::Release);
                    inner.healthy.store(true, Ordering::Release);
                    tracing::info!("Redis session store: new connection in use");
                }
                Err(e) => {
                    // Keep the old connection (it answers again if the server resumes); the
                    // next timeouts try again.
                    inner
                        .timeouts_in_a_row
                        .store(REBUILD_AFTER_TIMEOUTS - 1, Ordering::Release);
                    tracing::warn!(error = %e, "Redis session store: new connection failed");
                }
            }
            inner.rebuilding.store(false, Ordering::Release);
        });
    }
}

fn map_err_untimed(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

#[async_trait]
impl SessionStore for RedisSessionStore {
    async fn put(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let json = serde_json::to_string(&Wire::from_record(record))
            .map_err(|e| StoreError::Unavailable(format!("cannot encode the record: {e}")))?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(&record.id))
            .arg(json)
            .arg("PX")
            .arg(self.inner.ttl_ms);
        self.run::<()>(cmd).await
    }

    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.key(id));
        let Some(raw) = self.run::<Option<String>>(cmd).await? else {
            return Ok(None);
        };
        match serde_json::from_str::<Wire>(&raw) {
            Ok(w) if w.session.id == id => Ok(Some(w.into_record())),
            Ok(_) | Err(_) => {
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

    async fn exists(&self, id: &str) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.key(id));
        Ok(self.run::<i64>(cmd).await? > 0)
    }

    async fn touch(&self, id: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("PEXPIRE");
        cmd.arg(self.key(id)).arg(self.inner.ttl_ms);
        self.run::<i64>(cmd).await.map(|_| ())
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.key(id));
        self.run::<i64>(cmd).await.map(|_| ())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.run::<String>(redis::cmd("PING")).await.map(|_| ())
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_layout_matches_the_contract() {
        let r = SessionRecord {
            id: "s1".into(),
            node_id: "desk-a".into(),
            protocol_version: "2025-06-18".into(),
            client_info: serde_json::json!({"name": "c"}),
            client_capabilities: serde_json::json!({"elicitation": {}}),
            created_at: 42,
        };
        let v = serde_json::to_value(Wire::from_record(&r)).unwrap();
        assert_eq!(v["session"]["nodeId"], "desk-a");
        assert_eq!(v["session"]["protocol"], "streamable-http");
        assert_eq!(v["session"]["id"], "s1");
        assert_eq!(v["initialized"], true);
        assert_eq!(
            v["clientCapabilities"]["elicitation"],
            serde_json::json!({})
        );
        let back: Wire = serde_json::from_value(v).unwrap();
        assert_eq!(back.into_record(), r);
    }
}
