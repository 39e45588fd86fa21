//! Session records in Redis, shared by every instance of a fleet.
//!
//! One string key per session, `<prefix>session:<id>` (`mcp:session:<id>` by default), holding
//! the record as JSON in the contract's layout (the holder is `session.nodeId`), written with
//! `SET ... PX <ttl>`. `exists` is `EXISTS`, `touch` is `PEXPIRE`, `get` is `GET`, `delete`
//! is `DEL`, `ping` is `PING`: one command each, each bounded by the shared [`RedisConn`].

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::store::{SessionRecord, SessionStore, StoreError};
use crate::clock::unix_ms;
use crate::redis_config::RedisConfig;
use crate::redis_conn::{CommandError, RedisConn};

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
            last_accessed_at: unix_ms(),
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

/// Session records in Redis. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct RedisSessionStore {
    conn: RedisConn,
    ttl_ms: u64,
}

impl From<CommandError> for StoreError {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::Timeout(ms) => StoreError::Timeout(ms),
            CommandError::Unavailable(why) => StoreError::Unavailable(why),
        }
    }
}

impl RedisSessionStore {
    /// Session records on an existing connection.
    pub fn on(conn: RedisConn) -> Self {
        let ttl_ms = conn.config().default_ttl_ms;
        Self { conn, ttl_ms }
    }

    /// Connects (see [`RedisConn::connect`]).
    pub async fn connect(cfg: RedisConfig) -> Result<Self, StoreError> {
        Ok(Self::on(RedisConn::connect(cfg).await?))
    }

    /// Connects, or keeps retrying in the background (see [`RedisConn::connect_in_background`]).
    pub async fn connect_in_background(cfg: RedisConfig) -> Result<Self, StoreError> {
        Ok(Self::on(RedisConn::connect_in_background(cfg).await?))
    }

    /// Whether the connection is up and answered its last command.
    pub fn is_connected(&self) -> bool {
        self.conn.is_connected()
    }

    /// Connection rebuilds after repeated timeouts (see [`RedisConn::rebuild_attempts`]).
    pub fn rebuild_attempts(&self) -> u32 {
        self.conn.rebuild_attempts()
    }

    /// The connection this store uses, to share with other stores.
    pub fn conn(&self) -> &RedisConn {
        &self.conn
    }

    /// The key of a session's record.
    pub fn key(&self, id: &str) -> String {
        self.conn.config().session_key(id)
    }

    async fn run<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, StoreError> {
        Ok(self.conn.run(cmd).await?)
    }
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
            .arg(self.ttl_ms);
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
        cmd.arg(self.key(id)).arg(self.ttl_ms);
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
