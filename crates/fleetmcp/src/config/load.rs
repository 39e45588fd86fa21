//! [`Config`]: every section together, how it is loaded (defaults, then the TOML file, then
//! the environment) and the order of the checks.

use std::path::Path;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use super::{
    AuthConfig, BindAddress, DeploymentMode, HaConfig, HttpConfig, LimitsConfig, SessionConfig,
    StatelessConfig, TaskConfig, Transport,
};

/// Everything a fleetmcp server is configured with: [`Config::load`] reads it from
/// `FLEETMCP_CONFIG` (a TOML file, optional) and the environment, each section in its own type
/// of [`crate::config`].
///
/// ```
/// let cfg = fleetmcp::Config::from_sources(None, [("PORT", "4001"), ("MACHINE_ID", "desk-a")]).unwrap();
/// assert_eq!(cfg.port, 4001);
/// assert_eq!(cfg.machine_id.as_deref(), Some("desk-a"));
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `PORT`: the listen port (0 picks a free one).
    pub port: u16,
    /// `FRONTMCP_BIND_ADDRESS`: `loopback` or `all`. Unset: loopback, or all in distributed mode.
    pub bind_address: Option<BindAddress>,
    /// `MCP_SESSION_SECRET`: key material for session ids, shared by every instance. Required in
    /// distributed mode. Also the key material of 2026 `requestState` when neither
    /// `VAULT_SECRET` nor `JWT_SECRET` is set (a key of its own, under another label).
    pub session_secret: Option<String>,
    /// `MCP_SESSION_SECRET_PREVIOUS` (comma-separated): secrets rotated out. Ids sealed under them
    /// still open; new ids are sealed under `session_secret` only, so a rolling change of the
    /// secret drops no session: first give every instance the new secret with the old one here,
    /// then, once no instance mints under the old one, remove it.
    pub previous_session_secrets: Vec<String>,
    /// `MACHINE_ID`: this instance's id.
    pub machine_id: Option<String>,
    /// `HOSTNAME`: the machine id in distributed mode when `MACHINE_ID` is unset.
    pub hostname: Option<String>,
    /// `NODE_ENV`: `production` switches on production rules (secret required).
    pub node_env: Option<String>,
    /// `VAULT_SECRET`: first choice for the key of 2026 `requestState`.
    pub vault_secret: Option<String>,
    /// `JWT_SECRET`: second choice for the key of 2026 `requestState` (the third is
    /// `MCP_SESSION_SECRET`).
    pub jwt_secret: Option<String>,
    /// `FRONTMCP_DEPLOYMENT_MODE`. Distributed mode needs the `redis` feature (the default).
    pub deployment_mode: DeploymentMode,
    /// `FLEETMCP_TRANSPORT` (`transport` in the TOML file): [`Transport::Stdio`] makes
    /// [`Server::serve`](crate::Server::serve) serve one session on stdin and stdout
    /// (newline-delimited JSON-RPC, the MCP stdio transport; logs go to stderr) instead of
    /// HTTP; [`Transport::Http`], the default, serves `/mcp`. A stdio server keeps its
    /// sessions, events and tasks in memory (Redis, if configured, is left to the application),
    /// cannot be part of a fleet nor use `[auth]`, and makes no session-id key of the machine
    /// id (routes taken from `Server::start` then need `MCP_SESSION_SECRET` to open sessions).
    pub transport: Transport,
    /// Items per page of every list method.
    pub page_size: usize,
    /// `[http]`: the listener, its bounds and timeouts, the streams' budgets.
    pub http: HttpConfig,
    /// `[sessions]`: how many sessions, how long an idle one lives, their event budgets.
    pub sessions: SessionConfig,
    /// Background task records.
    pub tasks: TaskConfig,
    /// `[stateless]`: the 2026-07-28 era's settings.
    pub stateless: StatelessConfig,
    /// Redis, shared by every instance of a fleet (`REDIS_URL`, `REDIS_HOST`, `REDIS_PORT`, or a
    /// `[redis]` section). Unset: sessions live in this process's memory. Served only by a
    /// build with the `redis` feature (the default); without it the server refuses to start.
    pub redis: Option<super::RedisConfig>,
    /// Distributed mode's HA manager.
    pub ha: HaConfig,
    /// Authorization (off by default).
    pub auth: AuthConfig,
    /// Rate and concurrency limits.
    pub limits: LimitsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            port: 3000,
            bind_address: None,
            session_secret: None,
            previous_session_secrets: Vec::new(),
            machine_id: None,
            hostname: None,
            node_env: None,
            deployment_mode: DeploymentMode::Standalone,
            transport: Transport::Http,
            page_size: 100,
            http: HttpConfig::default(),
            sessions: SessionConfig::default(),
            tasks: TaskConfig::default(),
            vault_secret: None,
            jwt_secret: None,
            stateless: StatelessConfig::default(),
            redis: None,
            ha: HaConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
        }
    }
}

/// A configuration value that cannot be used, with the name the operator set it under.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or the environment could not be read into a configuration (the reason given).
    #[error("configuration: {0}")]
    Parse(String),
    /// A value was read but cannot be used.
    #[error("configuration: {name} = {value:?} is not valid: {why}")]
    Invalid {
        /// The setting, as the operator wrote it (`http.max_body_bytes`, `PORT`).
        name: &'static str,
        /// The value given.
        value: String,
        /// What a valid value is.
        why: &'static str,
    },
}

impl Config {
    /// Reads `FLEETMCP_CONFIG` (a TOML file, optional) and the process environment. When it
    /// says `transport = "stdio"`, log lines go to stderr from here on (stdout is the
    /// transport's).
    pub fn load() -> Result<Self, ConfigError> {
        let file = std::env::var("FLEETMCP_CONFIG").ok();
        let cfg = Self::from_sources(file.as_deref().map(Path::new), std::env::vars())?;
        if cfg.transport == Transport::Stdio {
            // Here, not only when the server is built: this is the process's configuration,
            // and what the program logs before building its server must not reach the client.
            crate::telemetry::logs::keep_stdout_for_messages();
        }
        Ok(cfg)
    }

    /// Builds the configuration from a TOML file and a set of environment variables.
    pub fn from_sources<K, V>(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, ConfigError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::Parse(format!(
                    "config file {} does not exist",
                    path.display()
                )));
            }
            fig = fig.merge(Toml::file(path));
        }
        let mut cfg: Config = fig
            .extract()
            .map_err(|e| ConfigError::Parse(e.to_string()))?;
        for (k, v) in env {
            cfg.apply_env(k.as_ref(), v.as_ref())?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Every check: each section's own, and the few that span sections. A start reports only
    /// the first value that fails, so this order decides which of several an operator sees;
    /// keep it stable.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.auth.check()?;
        self.check_machine_id()?;
        self.http.check()?;
        if self.page_size == 0 {
            return invalid_value("page_size", "0".into(), "must be at least 1");
        }
        self.sessions.check()?;
        if self.http.max_unread_bytes > self.sessions.max_event_bytes_per_session / 2 {
            // A 2024-11-05 stream's unread answers live in the event store: past the session's
            // budget the store would drop the oldest of them (with room for the notifications
            // the stream also carries).
            return invalid_value(
                "http.max_unread_bytes",
                self.http.max_unread_bytes.to_string(),
                "must be at most half of sessions.max_event_bytes_per_session",
            );
        }
        self.stateless.check()?;
        // Sessions' subscriptions and the stateless era's listen streams share this budget.
        self.sessions.check_client_data()?;
        self.tasks.check()?;
        self.limits.check()?;
        if let Some(redis) = &self.redis
            && let Err(e) = redis.validate()
        {
            return Err(ConfigError::Parse(format!("redis: {e}")));
        }
        self.ha.check()?;
        self.check_secrets()?;
        // Last, so that adding it changed no other value's report.
        self.check_transport()
    }
}

/// The error of every check: the setting's name (as the operator wrote it), its value and why
/// it cannot be used.
pub(super) fn invalid_value(
    name: &'static str,
    value: String,
    why: &'static str,
) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid { name, value, why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_overrides_file_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.toml");
        std::fs::write(
            &path,
            "port = 5000\npage_size = 2\n[http]\nmax_body_bytes = 2048\n",
        )
        .unwrap();
        let cfg = Config::from_sources(Some(&path), [("PORT", "6000")]).unwrap();
        assert_eq!(cfg.port, 6000);
        assert_eq!(cfg.page_size, 2);
        assert_eq!(cfg.http.max_body_bytes, 2048);
        assert_eq!(cfg.effective_bind(), BindAddress::Loopback);
    }

    /// The event store's byte budget and the unread bound it carries are checked together.
    #[test]
    fn the_unread_bound_fits_in_the_sessions_event_budget() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.toml");
        let write = |unread: usize| {
            let toml = format!(
                "[http]\nmax_unread_bytes = {unread}\n[sessions]\nmax_event_bytes_per_session = 1048576\n"
            );
            std::fs::write(&path, toml).unwrap();
            Config::from_sources(Some(&path), std::iter::empty::<(&str, &str)>())
        };
        assert!(write(512 * 1024).is_ok());
        let err = write(512 * 1024 + 1).unwrap_err().to_string();
        assert!(err.contains("http.max_unread_bytes"), "{err}");
        let defaults = Config::default();
        assert!(defaults.validate().is_ok(), "the defaults fit");
    }
}
