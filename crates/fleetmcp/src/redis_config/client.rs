//! What turns a [`RedisConfig`] into `redis` clients (with the `redis` feature): the connection
//! settings of a fixed server, a sentinel, the master the sentinels name or a cluster's nodes,
//! TLS trust, `TCP_NODELAY`, and where the configuration points, for logs.
//!
//! ```
//! use fleetmcp::config::RedisConfig;
//!
//! let cfg = RedisConfig::from_url("redis://:s3cret@10.0.0.5:6380/2");
//! assert_eq!(cfg.display_target(), "redis://10.0.0.5:6380/2");
//! ```

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use super::{RedisConfig, RedisConfigError};

/// rustls needs one process-wide crypto provider; ring is the one built in.
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An application that installed its own provider first keeps it.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl RedisConfig {
    /// What [`RedisConfig::validate`] checks of the address with the `redis` crate's parser.
    pub(super) fn check_address(&self) -> Result<(), RedisConfigError> {
        if self.is_sentinel() || self.is_cluster() {
            return self.host_settings().map(|_| ());
        }
        self.connection_info().map(|_| ())
    }

    /// A `redis` cluster client for `cluster_nodes`: every node with the host form's
    /// credentials and TLS (trusting `ca_file` when set), `TCP_NODELAY` as configured, each
    /// command bounded by the command timeout.
    pub(crate) fn cluster_client(&self) -> Result<redis::cluster::ClusterClient, RedisConfigError> {
        install_crypto_provider();
        let nodes = self
            .cluster_addresses()?
            .into_iter()
            .map(|(h, p)| self.server_connection_info(&h, p))
            .collect::<Result<Vec<_>, _>>()?;
        let mut builder = redis::cluster::ClusterClientBuilder::new(nodes)
            .connection_timeout(self.connect_timeout())
            .response_timeout(self.command_timeout())
            .tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(self.tcp_nodelay))
            // A command that meets a moved slot or a failed node is retried briefly; the
            // caller's own bound (the command timeout) still holds.
            .retries(2)
            .min_retry_wait(10)
            .max_retry_wait(100);
        if let Some(u) = &self.username {
            builder = builder.username(u);
        }
        if let Some(p) = &self.password {
            builder = builder.password(p);
        }
        if self.is_tls() {
            builder = builder.tls(redis::TlsMode::Secure);
            if let Some(certs) = self.trusted_cas()? {
                builder = builder.certs(certs);
            }
        }
        builder
            .build()
            .map_err(|e| RedisConfigError::Url(e.to_string()))
    }

    /// The connection settings for one sentinel: its own credentials, the master's TLS.
    pub(crate) fn sentinel_connection_info(
        &self,
        host: &str,
        port: u16,
    ) -> Result<ConnectionInfo, RedisConfigError> {
        let mut redis = RedisConnectionInfo::default();
        if let Some(u) = &self.sentinel_username {
            redis = redis.set_username(u);
        }
        if let Some(p) = &self.sentinel_password {
            redis = redis.set_password(p);
        }
        self.with_address(host.to_string(), port, redis)
    }

    /// The connection settings for the server at `host:port` that is not named by the
    /// configuration itself (the master the sentinels name, a node of a cluster), with the host
    /// form's credentials, database and TLS.
    pub(crate) fn server_connection_info(
        &self,
        host: &str,
        port: u16,
    ) -> Result<ConnectionInfo, RedisConfigError> {
        self.with_address(host.to_string(), port, self.host_settings()?)
    }

    /// The host form's credentials and database.
    fn host_settings(&self) -> Result<RedisConnectionInfo, RedisConfigError> {
        let db = self.db.unwrap_or(0);
        if db < 0 {
            return Err(RedisConfigError::Db(db));
        }
        let mut redis = RedisConnectionInfo::default().set_db(db);
        if let Some(u) = &self.username {
            redis = redis.set_username(u);
        }
        if let Some(p) = &self.password {
            redis = redis.set_password(p);
        }
        Ok(redis)
    }

    /// `host:port` with these settings, TLS as configured, `TCP_NODELAY` as configured.
    fn with_address(
        &self,
        host: String,
        port: u16,
        redis: RedisConnectionInfo,
    ) -> Result<ConnectionInfo, RedisConfigError> {
        if port == 0 {
            return Err(RedisConfigError::Port);
        }
        let addr = if self.tls == Some(true) {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let info = addr
            .into_connection_info()
            .map_err(|e| RedisConfigError::Url(e.to_string()))?
            .set_redis_settings(redis);
        let tcp = info.tcp_settings().clone().set_nodelay(self.tcp_nodelay);
        Ok(info.set_tcp_settings(tcp))
    }

    fn host_form_set(&self) -> bool {
        self.host.is_some()
            || self.port.is_some()
            || self.username.is_some()
            || self.password.is_some()
            || self.db.is_some()
            || self.tls.is_some()
    }

    /// A `redis` client for this configuration: with TLS, it verifies the server against
    /// `ca_file` when set, else the system's trust store. (With Sentinel, see
    /// [`RedisConfig::client_for`] with the master's [`RedisConfig::server_connection_info`].)
    pub(crate) fn client(&self) -> Result<redis::Client, RedisConfigError> {
        self.client_for(self.connection_info()?)
    }

    /// Like [`RedisConfig::client`] for the server `info` names, speaking RESP3, whose push
    /// messages carry client-side caching's invalidations.
    pub(crate) fn resp3_client_for(
        &self,
        info: ConnectionInfo,
    ) -> Result<redis::Client, RedisConfigError> {
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        self.client_for(info.set_redis_settings(settings))
    }

    /// A `redis` client for the server `info` names, with this configuration's TLS trust.
    pub(crate) fn client_for(
        &self,
        info: ConnectionInfo,
    ) -> Result<redis::Client, RedisConfigError> {
        install_crypto_provider();
        let client = if self.is_tls()
            && let Some(certs) = self.trusted_cas()?
        {
            redis::Client::build_with_tls(info, certs)
        } else {
            redis::Client::open(info)
        };
        client.map_err(|e| RedisConfigError::Url(e.to_string()))
    }

    /// `ca_file`'s certificate authorities, read now (`None`: the system's trust store).
    fn trusted_cas(&self) -> Result<Option<redis::TlsCertificates>, RedisConfigError> {
        let Some(path) = &self.ca_file else {
            return Ok(None);
        };
        let pem =
            std::fs::read(path).map_err(|e| RedisConfigError::CaFile(format!("{path}: {e}")))?;
        Ok(Some(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        }))
    }

    /// The connection settings for the `redis` crate, with `TCP_NODELAY` as configured. With
    /// Sentinel there is no fixed server: the master's settings come from
    /// [`RedisConfig::server_connection_info`] once the sentinels have named it.
    pub(crate) fn connection_info(&self) -> Result<ConnectionInfo, RedisConfigError> {
        if self.is_cluster() {
            return Err(RedisConfigError::Cluster(
                "with `cluster_nodes`, commands go to the node that holds each key's slot",
            ));
        }
        if self.is_sentinel() {
            return Err(RedisConfigError::Sentinel(
                "with `sentinels`, the master is named by the sentinels at connection time",
            ));
        }
        let info = match &self.url {
            Some(url) => {
                if self.host_form_set() {
                    return Err(RedisConfigError::UrlAndHost);
                }
                let lower = url.trim().to_ascii_lowercase();
                if !(lower.starts_with("redis://") || lower.starts_with("rediss://")) {
                    let scheme = url.split("://").next().unwrap_or(url);
                    return Err(RedisConfigError::Scheme(format!("{scheme}://")));
                }
                url.trim()
                    .into_connection_info()
                    .map_err(|e| RedisConfigError::Url(e.to_string()))?
            }
            None => {
                let host = self.host.clone().unwrap_or_else(|| "127.0.0.1".into());
                return self.with_address(host, self.port.unwrap_or(6379), self.host_settings()?);
            }
        };
        let tcp = info.tcp_settings().clone().set_nodelay(self.tcp_nodelay);
        Ok(info.set_tcp_settings(tcp))
    }

    /// Where this configuration points, for logs: scheme, host, port and database, never the
    /// user name or password.
    pub fn display_target(&self) -> String {
        if self.is_cluster() {
            let scheme = if self.is_tls() { "rediss" } else { "redis" };
            return format!("{scheme}-cluster://{}", self.cluster_nodes.join(","));
        }
        if self.is_sentinel() {
            return format!(
                "redis-sentinel://{}/{}/{}",
                self.sentinels.join(","),
                self.sentinel_master.as_deref().unwrap_or(""),
                self.db.unwrap_or(0)
            );
        }
        match self.connection_info() {
            Ok(info) => {
                let scheme = if self.is_tls() { "rediss" } else { "redis" };
                format!("{scheme}://{}/{}", info.addr(), info.redis_settings().db())
            }
            Err(_) if self.is_tls() => "rediss://<unsupported>".into(),
            Err(_) => "<invalid redis configuration>".into(),
        }
    }
}
