//! The one Redis configuration shared by every part of fleetmcp that talks to Redis (session
//! store, event store, HA), from a URL (`REDIS_URL`: `redis://`, `rediss://`) or from
//! host, port, username, password and database, or, with Redis Sentinel, from the sentinels'
//! addresses and the name of the master they watch (the host form's credentials, database and
//! TLS then apply to whichever server is master).
//!
//! Every connection built from it has `TCP_NODELAY` on (the `redis` crate leaves it off in
//! 1.x), a connect timeout, and a timeout on every command.
//!
//! ```
//! use fleetmcp::config::RedisConfig;
//!
//! let cfg = RedisConfig::from_url("redis://:s3cret@10.0.0.5:6380/2");
//! assert_eq!(cfg.session_key("abc"), "mcp:session:abc");
//!
//! // The same, in the host form, as a TOML section would give it.
//! let cfg: RedisConfig = serde_json::from_value(serde_json::json!({
//!     "host": "10.0.0.5", "port": 6380, "password": "s3cret", "db": 2,
//!     "key_prefix": "desk:", "default_ttl_ms": 600000
//! })).unwrap();
//! assert_eq!(cfg.session_key("abc"), "desk:session:abc");
//! assert_eq!(cfg.command_timeout_ms, 500);
//! ```

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

// What builds a `redis` client from the configuration; with the `redis` feature only.
#[cfg(feature = "redis")]
mod client;

/// Where Redis is and how every command to it is bounded.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `REDIS_URL`: `redis://[user][:password@]host[:port][/db]`, or `rediss://` for TLS.
    /// When set, `host`, `port`, `username`, `password`, `db` and `tls` must be left unset.
    pub url: Option<String>,
    /// Host form: the server's host name or address (default `127.0.0.1` when `url` is unset).
    pub host: Option<String>,
    /// Host form: the port (default 6379).
    pub port: Option<u16>,
    /// Host form: the ACL user name (Redis 6+).
    pub username: Option<String>,
    /// Host form: the password (`AUTH`).
    pub password: Option<String>,
    /// Host form: the database number (default 0).
    pub db: Option<i64>,
    /// Host form: connect with TLS (what `rediss://` means in a URL).
    pub tls: Option<bool>,
    /// TLS: a PEM file with the certificate authorities that sign the server's certificate
    /// (default: the system's trust store).
    pub ca_file: Option<String>,
    /// Base of every key fleetmcp writes (default `mcp:`); sessions live at
    /// `<key_prefix>session:<id>`. Two deployments sharing one Redis need different prefixes.
    #[serde(alias = "keyPrefix")]
    pub key_prefix: String,
    /// Lifetime of a stored session after its last refresh (default one hour).
    #[serde(alias = "defaultTtlMs")]
    pub default_ttl_ms: u64,
    /// Bound on every command (default 500 ms): past it the command fails with a timeout.
    #[serde(alias = "commandTimeoutMs")]
    pub command_timeout_ms: u64,
    /// Bound on opening a connection, handshake included (default 1000 ms).
    #[serde(alias = "connectTimeoutMs")]
    pub connect_timeout_ms: u64,
    /// `TCP_NODELAY` on the connection (default on: small commands are not delayed by Nagle).
    #[serde(alias = "tcpNodelay")]
    pub tcp_nodelay: bool,
    /// Redis Sentinel (`REDIS_SENTINELS`, comma-separated): the sentinels' `host:port`. When
    /// set, `url`, `host` and `port` must be unset: the master is asked of the sentinels at
    /// every connection and reconnection, so a failover is followed without a restart.
    pub sentinels: Vec<String>,
    /// Redis Sentinel (`REDIS_SENTINEL_MASTER`): the name of the master the sentinels watch.
    #[serde(alias = "sentinelMaster")]
    pub sentinel_master: Option<String>,
    /// Redis Sentinel: the ACL user the sentinels require, if any.
    #[serde(alias = "sentinelUsername")]
    pub sentinel_username: Option<String>,
    /// Redis Sentinel (`REDIS_SENTINEL_PASSWORD`): the password the sentinels require, if any
    /// (the master's is `password`).
    #[serde(alias = "sentinelPassword")]
    pub sentinel_password: Option<String>,
    /// Redis Cluster (`REDIS_CLUSTER_NODES`, comma-separated): `host:port` of some of the
    /// cluster's nodes, from which the rest of the cluster is discovered. When set, `url`,
    /// `host`, `port` and `sentinels` must be unset and `db` 0 or unset; the host form's
    /// credentials and TLS apply to every node.
    #[serde(alias = "clusterNodes")]
    pub cluster_nodes: Vec<String>,
    /// How many replicas must confirm a new session's record before `initialize` is answered
    /// (`FLEETMCP_REDIS_WAIT_REPLICAS`): `off`, `auto` (the default: one with Sentinel, none
    /// otherwise), or a count. Replication is asynchronous: a record written to a master in the
    /// second before a failover demotes it is lost with it, and a session acknowledged then
    /// lost is worse than one refused (`503` with `Retry-After`, the client retries). `WAIT`
    /// costs `initialize` one round trip to the replicas; nothing else waits for it. Not done
    /// on a Redis Cluster (its record and index sit on two masters).
    #[serde(alias = "waitReplicas")]
    pub wait_replicas: String,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: None,
            host: None,
            port: None,
            username: None,
            password: None,
            db: None,
            tls: None,
            ca_file: None,
            key_prefix: "mcp:".into(),
            default_ttl_ms: 3_600_000,
            command_timeout_ms: 500,
            connect_timeout_ms: 1000,
            tcp_nodelay: true,
            sentinels: Vec::new(),
            sentinel_master: None,
            sentinel_username: None,
            sentinel_password: None,
            cluster_nodes: Vec::new(),
            wait_replicas: "auto".into(),
        }
    }
}

/// How many replicas must confirm a new session's record before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReplicas {
    /// None (a single Redis, a cluster, or `off`).
    Off,
    /// With Sentinel: every replica of the master the sentinels find up (Sentinel promotes the
    /// one with the largest offset it can reach), but those the failover that made it master
    /// re-pointed at it, until they have synced (`redis_conn/failover.rs`). A master with none
    /// left is written to alone while a majority of the sentinels name it and none could
    /// promote a replica without the write; a master with fewer replicas connected than that,
    /// or the sentinels no longer name (the second after a failover), is refused.
    Auto,
    /// At least this many, always (with Sentinel, and every replica `Auto` counts).
    Count(u32),
}

/// The password never appears in logs.
impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RedisConfig");
        // Where it points needs the `redis` crate's URL parser (`client.rs`).
        #[cfg(feature = "redis")]
        d.field("target", &self.display_target());
        d.field("key_prefix", &self.key_prefix)
            .field("default_ttl_ms", &self.default_ttl_ms)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("tcp_nodelay", &self.tcp_nodelay)
            .finish()
    }
}

/// A Redis configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisConfigError {
    #[error(
        "redis: set either `url` or the host form (host, port, username, password, db, tls), not both"
    )]
    UrlAndHost,
    #[error("redis: `url` must start with redis:// or rediss:// (got `{0}`)")]
    Scheme(String),
    #[error("redis: `url` does not parse: {0}")]
    Url(String),
    #[error("redis: `port` must not be 0")]
    Port,
    #[error("redis: `db` must be 0 or more (got {0})")]
    Db(i64),
    #[error("redis: `{0}` must be greater than 0")]
    Zero(&'static str),
    #[error("redis: `ca_file` {0}")]
    CaFile(String),
    #[error("redis: {0}")]
    Sentinel(&'static str),
    #[error("redis: `wait_replicas` must be off, auto or a number of replicas (got `{0}`)")]
    WaitReplicas(String),
    #[error("redis: sentinel address `{0}` is not host:port")]
    SentinelAddress(String),
    #[error("redis: {0}")]
    Cluster(&'static str),
    #[error("redis: cluster node address `{0}` is not host:port")]
    ClusterAddress(String),
}

/// `host:port` addresses (`[v6]:port` too), each refused with `bad` when it does not parse.
fn parse_addresses(
    list: &[String],
    bad: fn(String) -> RedisConfigError,
) -> Result<Vec<(String, u16)>, RedisConfigError> {
    list.iter()
        .map(|a| {
            let a = a.trim();
            a.rsplit_once(':')
                .and_then(|(h, p)| Some((h.trim_matches(['[', ']']).to_string(), p.parse().ok()?)))
                .filter(|(h, p): &(String, u16)| !h.is_empty() && *p != 0)
                .ok_or_else(|| bad(a.to_string()))
        })
        .collect()
}

impl RedisConfig {
    /// A configuration from a `redis://` or `rediss://` URL, with the other settings at their
    /// defaults.
    pub fn from_url(url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            ..Self::default()
        }
    }

    /// A configuration in the host form, with the other settings at their defaults.
    pub fn from_host(host: impl Into<String>, port: u16) -> Self {
        Self {
            host: Some(host.into()),
            port: Some(port),
            ..Self::default()
        }
    }

    /// Checks everything that can be checked without connecting.
    pub(crate) fn validate(&self) -> Result<(), RedisConfigError> {
        self.replicas_to_wait()?;
        if let Some(path) = &self.ca_file
            && let Err(e) = std::fs::metadata(path)
        {
            return Err(RedisConfigError::CaFile(format!("{path}: {e}")));
        }
        if self.is_cluster() {
            self.cluster_addresses()?;
            if self.url.is_some() || self.host.is_some() || self.port.is_some() {
                return Err(RedisConfigError::Cluster(
                    "with `cluster_nodes`, leave `url`, `host` and `port` unset: the cluster names its nodes",
                ));
            }
            if self.is_sentinel() || self.sentinel_master.is_some() {
                return Err(RedisConfigError::Cluster(
                    "set either `cluster_nodes` (REDIS_CLUSTER_NODES) or `sentinels`, not both",
                ));
            }
            if self.db.is_some_and(|db| db != 0) {
                return Err(RedisConfigError::Cluster(
                    "a Redis Cluster has only database 0: leave `db` unset",
                ));
            }
        }
        if self.is_sentinel() || self.sentinel_master.is_some() {
            self.sentinel_addresses()?;
            if self
                .sentinel_master
                .as_deref()
                .is_none_or(|m| m.trim().is_empty())
            {
                return Err(RedisConfigError::Sentinel(
                    "`sentinels` needs `sentinel_master` (REDIS_SENTINEL_MASTER), the name of the master they watch",
                ));
            }
            if self.sentinels.is_empty() {
                return Err(RedisConfigError::Sentinel(
                    "`sentinel_master` needs `sentinels` (REDIS_SENTINELS), their host:port addresses",
                ));
            }
            if self.url.is_some() || self.host.is_some() || self.port.is_some() {
                return Err(RedisConfigError::Sentinel(
                    "with `sentinels`, leave `url`, `host` and `port` unset: the sentinels name the master",
                ));
            }
        }
        for (name, v) in [
            ("default_ttl_ms", self.default_ttl_ms),
            ("command_timeout_ms", self.command_timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
        ] {
            if v == 0 {
                return Err(RedisConfigError::Zero(name));
            }
        }
        // The address itself is checked by the `redis` crate's parser (`client.rs`); a build
        // without the `redis` feature refuses a configuration naming Redis at start anyway.
        #[cfg(feature = "redis")]
        self.check_address()?;
        Ok(())
    }

    /// Whether Redis is a Redis Cluster (`cluster_nodes`).
    pub fn is_cluster(&self) -> bool {
        !self.cluster_nodes.is_empty()
    }

    /// The configured cluster nodes' addresses, parsed.
    pub(crate) fn cluster_addresses(&self) -> Result<Vec<(String, u16)>, RedisConfigError> {
        parse_addresses(&self.cluster_nodes, RedisConfigError::ClusterAddress)
    }

    /// Whether the master is found through Redis Sentinel.
    pub fn is_sentinel(&self) -> bool {
        !self.sentinels.is_empty()
    }

    /// How many replicas must confirm a new session's record (see `wait_replicas`).
    pub(crate) fn replicas_to_wait(&self) -> Result<WaitReplicas, RedisConfigError> {
        match self.wait_replicas.trim() {
            "off" | "0" => Ok(WaitReplicas::Off),
            "auto" | "" if self.is_sentinel() => Ok(WaitReplicas::Auto),
            "auto" | "" => Ok(WaitReplicas::Off),
            n => n
                .parse()
                .map(WaitReplicas::Count)
                .map_err(|_| RedisConfigError::WaitReplicas(n.to_string())),
        }
    }

    /// The sentinels' addresses, parsed.
    pub(crate) fn sentinel_addresses(&self) -> Result<Vec<(String, u16)>, RedisConfigError> {
        parse_addresses(&self.sentinels, RedisConfigError::SentinelAddress)
    }

    /// Whether the connection uses TLS.
    pub fn is_tls(&self) -> bool {
        match &self.url {
            Some(u) => u.trim_start().to_ascii_lowercase().starts_with("rediss://"),
            None => self.tls.unwrap_or(false),
        }
    }

    /// Prefix of session keys: `<key_prefix>session:`.
    pub fn session_key_prefix(&self) -> String {
        format!("{}session:", self.key_prefix)
    }

    /// The key of one session's record: `<key_prefix>session:<id>` (`mcp:session:<id>` by
    /// default).
    pub fn session_key(&self, id: &str) -> String {
        format!("{}session:{id}", self.key_prefix)
    }

    /// The index of the sessions an instance held before the index had buckets:
    /// `<key_prefix>node:<nodeId>:sessions`, one sorted set of session ids scored by when the
    /// holder last refreshed them. Read (never written) so that an old instance's sessions are
    /// claimed during a rolling upgrade (`session/index.rs`).
    pub fn node_index_key(&self, holder: &str) -> String {
        format!("{}node:{holder}:sessions", self.key_prefix)
    }

    /// Bucket `n` of the index of the sessions an instance holds:
    /// `<key_prefix>node:<nodeId>:sessions:<n>` (`session/index.rs`). The orphan scanner reads a
    /// dead instance's index instead of scanning the keyspace.
    pub fn node_index_bucket_key(&self, holder: &str, n: u32) -> String {
        format!("{}node:{holder}:sessions:{n}", self.key_prefix)
    }

    /// How many buckets an instance's index has: `<key_prefix>node:<nodeId>:buckets`.
    pub fn node_index_buckets_key(&self, holder: &str) -> String {
        format!("{}node:{holder}:buckets", self.key_prefix)
    }

    /// `redis.default_ttl_ms`, as a duration.
    pub fn default_ttl(&self) -> Duration {
        Duration::from_millis(self.default_ttl_ms)
    }

    /// `redis.command_timeout_ms`, as a duration.
    pub fn command_timeout(&self) -> Duration {
        Duration::from_millis(self.command_timeout_ms)
    }

    /// `redis.connect_timeout_ms`, as a duration.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }
}

// The `redis` crate builds what these tests check (`client.rs`).
#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;

    #[test]
    fn cluster_form_is_checked_and_names_no_fixed_server() {
        let cfg = RedisConfig {
            cluster_nodes: vec!["10.0.0.1:7000".into(), "10.0.0.2:7001".into()],
            password: Some("s3cret".into()),
            ..RedisConfig::default()
        };
        cfg.validate().unwrap();
        assert!(cfg.is_cluster());
        assert_eq!(
            cfg.cluster_addresses().unwrap(),
            vec![("10.0.0.1".into(), 7000), ("10.0.0.2".into(), 7001)]
        );
        assert!(cfg.connection_info().is_err(), "no fixed server");
        assert!(cfg.cluster_client().is_ok());
        assert_eq!(
            cfg.display_target(),
            "redis-cluster://10.0.0.1:7000,10.0.0.2:7001"
        );
        assert!(!format!("{cfg:?}").contains("s3cret"));
        for bad in [
            RedisConfig {
                url: Some("redis://127.0.0.1:6379".into()),
                ..cfg.clone()
            },
            RedisConfig {
                sentinels: vec!["10.0.0.3:26379".into()],
                sentinel_master: Some("m".into()),
                ..cfg.clone()
            },
            RedisConfig {
                db: Some(2),
                ..cfg.clone()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(RedisConfigError::Cluster(_))),
                "{:?}",
                bad.validate()
            );
        }
        let unparsable = RedisConfig {
            cluster_nodes: vec!["nowhere".into()],
            ..RedisConfig::default()
        };
        assert_eq!(
            unparsable.validate(),
            Err(RedisConfigError::ClusterAddress("nowhere".into()))
        );
    }

    #[test]
    fn sentinel_form_is_checked_and_names_no_fixed_server() {
        let cfg = RedisConfig {
            sentinels: vec!["10.0.0.1:26379".into(), "[::1]:26380".into()],
            sentinel_master: Some("desk".into()),
            password: Some("s3cret".into()),
            db: Some(2),
            ..RedisConfig::default()
        };
        cfg.validate().unwrap();
        assert_eq!(
            cfg.sentinel_addresses().unwrap(),
            vec![("10.0.0.1".into(), 26379), ("::1".into(), 26380)]
        );
        assert!(cfg.connection_info().is_err(), "no fixed server");
        let master = cfg.server_connection_info("10.0.0.9", 6380).unwrap();
        assert_eq!(master.addr().to_string(), "10.0.0.9:6380");
        assert_eq!(master.redis_settings().db(), 2);
        assert_eq!(
            cfg.display_target(),
            "redis-sentinel://10.0.0.1:26379,[::1]:26380/desk/2"
        );
        assert!(!format!("{cfg:?}").contains("s3cret"));

        let no_master = RedisConfig {
            sentinel_master: None,
            ..cfg.clone()
        };
        assert!(matches!(
            no_master.validate(),
            Err(RedisConfigError::Sentinel(_))
        ));
        let with_url = RedisConfig {
            url: Some("redis://127.0.0.1:6379".into()),
            ..cfg.clone()
        };
        assert!(matches!(
            with_url.validate(),
            Err(RedisConfigError::Sentinel(_))
        ));
        let bad = RedisConfig {
            sentinels: vec!["nowhere".into()],
            ..cfg
        };
        assert_eq!(
            bad.validate(),
            Err(RedisConfigError::SentinelAddress("nowhere".into()))
        );
    }

    #[test]
    fn defaults_and_key_layout() {
        let cfg = RedisConfig::default();
        cfg.validate().unwrap();
        assert_eq!(cfg.session_key("x"), "mcp:session:x");
        assert_eq!(cfg.default_ttl_ms, 3_600_000);
        assert!(cfg.connection_info().unwrap().tcp_settings().nodelay());
        assert_eq!(cfg.display_target(), "redis://127.0.0.1:6379/0");
    }

    #[test]
    fn url_form_parses_credentials_and_db() {
        let cfg = RedisConfig::from_url("redis://alice:pw@example.com:6390/3");
        let info = cfg.connection_info().unwrap();
        assert_eq!(info.redis_settings().username(), Some("alice"));
        assert_eq!(info.redis_settings().password(), Some("pw"));
        assert_eq!(info.redis_settings().db(), 3);
        assert!(info.tcp_settings().nodelay());
        assert!(!format!("{cfg:?}").contains("pw"));
    }

    #[test]
    fn host_form() {
        let mut cfg = RedisConfig::from_host("db.internal", 6381);
        cfg.password = Some("pw".into());
        cfg.db = Some(4);
        let info = cfg.connection_info().unwrap();
        assert_eq!(info.addr().to_string(), "db.internal:6381");
        assert_eq!(info.redis_settings().password(), Some("pw"));
        assert_eq!(info.redis_settings().db(), 4);
    }

    #[test]
    fn clear_errors() {
        let mut both = RedisConfig::from_url("redis://a");
        both.host = Some("b".into());
        assert_eq!(both.validate(), Err(RedisConfigError::UrlAndHost));
        assert_eq!(
            RedisConfig::from_url("http://a").validate(),
            Err(RedisConfigError::Scheme("http://".into()))
        );
        assert!(matches!(
            RedisConfig::from_url("redis://a/notanumber").validate(),
            Err(RedisConfigError::Url(_))
        ));
        assert_eq!(
            RedisConfig::from_host("a", 0).validate(),
            Err(RedisConfigError::Port)
        );
        let zero = RedisConfig {
            command_timeout_ms: 0,
            ..RedisConfig::default()
        };
        assert_eq!(
            zero.validate(),
            Err(RedisConfigError::Zero("command_timeout_ms"))
        );
        assert!(RedisConfig::from_url("rediss://a").validate().is_ok());
        let missing = RedisConfig {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..RedisConfig::from_url("rediss://a")
        };
        assert!(matches!(
            missing.validate(),
            Err(RedisConfigError::CaFile(_))
        ));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<RedisConfig, _> = serde_json::from_value(serde_json::json!({"hots": "a"}));
        assert!(r.is_err());
        let r: RedisConfig =
            serde_json::from_value(serde_json::json!({"keyPrefix": "x:", "defaultTtlMs": 5}))
                .unwrap();
        assert_eq!((r.key_prefix.as_str(), r.default_ttl_ms), ("x:", 5));
    }
}
