//! How this instance is deployed and known: its deployment mode, where it binds, its id, its
//! session secrets, and how long it drains when stopped. These are the contract's top-level
//! variables rather than a TOML section, and they belong together because the mode changes
//! the others' defaults and rules (distributed mode binds everywhere, needs a shared secret,
//! and drains before it stops).

use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, invalid_value};

/// Where the HTTP listener binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BindAddress {
    /// 127.0.0.1 only (the default outside distributed mode).
    #[default]
    Loopback,
    /// Every interface (0.0.0.0).
    All,
    /// IPv6 loopback (`::1`) only.
    Loopback6,
    /// Every interface, IPv6 and IPv4 (`::`, dual-stack where the system allows it: IPv4
    /// clients then arrive as IPv4-mapped addresses, `::ffff:1.2.3.4`, which the limits read
    /// as the IPv4 addresses they are).
    All6,
}

impl BindAddress {
    /// The address the listener binds.
    pub fn ip(self) -> IpAddr {
        match self {
            Self::Loopback => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Self::All => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Self::Loopback6 => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            Self::All6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        }
    }

    /// Whether only this machine can connect (the `Host` check then applies by default).
    pub fn is_loopback(self) -> bool {
        matches!(self, Self::Loopback | Self::Loopback6)
    }
}

/// `FRONTMCP_DEPLOYMENT_MODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentMode {
    /// One instance; sessions live in its memory unless Redis is configured.
    #[default]
    Standalone,
    /// A fleet of instances behind a load balancer (binds every interface by default).
    Distributed,
}

impl DeploymentMode {
    /// The value as written in `FRONTMCP_DEPLOYMENT_MODE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standalone => "standalone",
            Self::Distributed => "distributed",
        }
    }
}

/// How the server is reached (`transport` in the TOML file, `FLEETMCP_TRANSPORT`): which of
/// the transports [`Server::serve`](crate::Server::serve) serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// `http`: Streamable HTTP on `/mcp` (and the 2024-11-05 pair, health and metrics routes).
    #[default]
    Http,
    /// `stdio`: one session on stdin and stdout, for a client that starts the server as its
    /// child process (newline-delimited JSON-RPC; logs go to stderr).
    Stdio,
}

impl Transport {
    /// The transport named `value`: `http` or `stdio`, in any case, blank being `http`;
    /// anything else is no transport.
    pub(super) fn from_name(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "http" => Some(Self::Http),
            "stdio" => Some(Self::Stdio),
            _ => None,
        }
    }

    /// The name the configuration gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Stdio => "stdio",
        }
    }
}

// By hand rather than derived: the TOML file reads as the variable does (any case, blank for
// `http`), and a wrong name is refused with the words it always had.
impl Serialize for Transport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Transport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::from_name(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "transport = {name:?} is not valid: expected \"http\" or \"stdio\""
            ))
        })
    }
}

/// The drain delay of an instance likely behind a load balancer when `http.drain_ms` is unset:
/// long enough for a balancer that probes `/readyz` every few seconds to see it fail, and for
/// nginx to let its idle upstream connections go (keep its `keepalive_timeout` below this);
/// short enough for a rolling restart and Kubernetes' default 30 s termination grace period.
pub const DEFAULT_DRAIN_MS: u64 = 5000;

impl Config {
    /// `MACHINE_ID`, when set, fits where it is sent.
    pub(super) fn check_machine_id(&self) -> Result<(), ConfigError> {
        if let Some(id) = &self.machine_id
            && (!id.bytes().all(|b| (0x21..=0x7e).contains(&b)) || id.len() > 128)
        {
            return invalid_value(
                "MACHINE_ID",
                id.clone(),
                "must be 1-128 visible ASCII characters (it goes into headers and cookies)",
            );
        }
        Ok(())
    }

    /// The session secrets are long enough, and set when instances must share them. A secret
    /// is never echoed in the error.
    pub(super) fn check_secrets(&self) -> Result<(), ConfigError> {
        if let Some(secret) = &self.session_secret
            && secret.len() < 16
        {
            return invalid_value(
                "MCP_SESSION_SECRET",
                "<redacted>".into(),
                "must be at least 16 characters",
            );
        }
        if self.previous_session_secrets.iter().any(|s| s.len() < 16) {
            return invalid_value(
                "MCP_SESSION_SECRET_PREVIOUS",
                "<redacted>".into(),
                "every previous secret must be at least 16 characters",
            );
        }
        if self.deployment_mode == DeploymentMode::Distributed && self.session_secret.is_none() {
            return invalid_value(
                "MCP_SESSION_SECRET",
                "<unset>".into(),
                "is required in distributed mode: every instance must open the others' session ids, and a key made from the machine id would be public (every response names it)",
            );
        }
        Ok(())
    }

    /// A stdio server is one session in one process, reached through the pipes of the client
    /// that started it: no other instance can serve that session, and no bearer token comes
    /// with it, so distributed mode and authorization (both HTTP's) are refused with it rather
    /// than left silently unused.
    pub(super) fn check_transport(&self) -> Result<(), ConfigError> {
        if self.transport != Transport::Stdio {
            return Ok(());
        }
        if self.deployment_mode == DeploymentMode::Distributed {
            return invalid_value(
                "FLEETMCP_TRANSPORT",
                "stdio".into(),
                "cannot be used in distributed mode: a stdio session lives in the one process its client started",
            );
        }
        if self.auth.enabled {
            return invalid_value(
                "FLEETMCP_TRANSPORT",
                "stdio".into(),
                "cannot be used with authorization ([auth]): it checks HTTP bearer tokens, and a stdio client is the process that started the server",
            );
        }
        Ok(())
    }

    /// How long a graceful stop keeps serving before it stops accepting connections:
    /// `http.drain_ms` when set; else `DEFAULT_DRAIN_MS` (5 s) for an instance likely behind a
    /// load balancer (sessions in Redis, distributed mode, or production), which must not drop
    /// the requests the balancer still sends it, and 0 for a lone development server (sessions
    /// in memory), which nothing else could take over and which Ctrl-C should stop at once.
    pub fn drain_delay(&self) -> std::time::Duration {
        let fleet = self.redis.is_some()
            || self.deployment_mode == DeploymentMode::Distributed
            || self.is_production();
        let ms = self
            .http
            .drain_ms
            .unwrap_or(if fleet { DEFAULT_DRAIN_MS } else { 0 });
        std::time::Duration::from_millis(ms)
    }

    /// `NODE_ENV=production`.
    pub fn is_production(&self) -> bool {
        self.node_env.as_deref() == Some("production")
    }

    /// The effective bind address (distributed mode binds every interface unless told otherwise).
    pub fn effective_bind(&self) -> BindAddress {
        self.bind_address.unwrap_or(match self.deployment_mode {
            DeploymentMode::Distributed => BindAddress::All,
            _ => BindAddress::Loopback,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_deployment_modes_are_refused_by_name() {
        for value in ["serverless", "Serverless", "lambda"] {
            let err =
                Config::from_sources(None, [("FRONTMCP_DEPLOYMENT_MODE", value)]).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("FRONTMCP_DEPLOYMENT_MODE"), "{msg}");
            assert!(msg.contains(value), "{msg}");
            assert!(
                msg.contains("`standalone`") && msg.contains("`distributed`"),
                "{msg}"
            );
        }
        let err =
            Config::from_sources(None, [("FRONTMCP_DEPLOYMENT_MODE", "serverless")]).unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
        for (value, mode) in [
            ("", DeploymentMode::Standalone),
            ("standalone", DeploymentMode::Standalone),
            ("Distributed", DeploymentMode::Distributed),
        ] {
            let env = [
                ("FRONTMCP_DEPLOYMENT_MODE", value),
                ("MCP_SESSION_SECRET", "a fleet secret of some length"),
            ];
            let cfg = Config::from_sources(None, env).unwrap();
            assert_eq!(cfg.deployment_mode, mode, "{value:?}");
        }
    }

    #[test]
    fn the_transport_is_http_unless_stdio_is_asked_for() {
        assert_eq!(Config::default().transport, Transport::Http);
        for (value, transport) in [
            ("stdio", Transport::Stdio),
            (" STDIO ", Transport::Stdio),
            ("http", Transport::Http),
            ("", Transport::Http),
        ] {
            let cfg = Config::from_sources(None, [("FLEETMCP_TRANSPORT", value)]).unwrap();
            assert_eq!(cfg.transport, transport, "{value:?}");
        }
        let err = Config::from_sources(None, [("FLEETMCP_TRANSPORT", "websocket")]).unwrap_err();
        assert!(err.to_string().contains("FLEETMCP_TRANSPORT"), "{err}");
        // The TOML key, and the variable over it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdio.toml");
        std::fs::write(&path, "transport = \"stdio\"\n").unwrap();
        let none = Vec::<(String, String)>::new();
        let cfg = Config::from_sources(Some(&path), none).unwrap();
        assert_eq!(cfg.transport, Transport::Stdio);
        let cfg = Config::from_sources(Some(&path), [("FLEETMCP_TRANSPORT", "http")]).unwrap();
        assert_eq!(cfg.transport, Transport::Http);
        std::fs::write(&path, "transport = \"pigeon\"\n").unwrap();
        let err = Config::from_sources(Some(&path), [("PORT", "1")]).unwrap_err();
        assert!(err.to_string().contains("pigeon"), "{err}");
        // Not in a fleet, not with authorization.
        let env = [
            ("FLEETMCP_TRANSPORT", "stdio"),
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("MCP_SESSION_SECRET", "a fleet secret of some length"),
        ];
        let err = Config::from_sources(None, env).unwrap_err().to_string();
        assert!(
            err.contains("FLEETMCP_TRANSPORT") && err.contains("distributed"),
            "{err}"
        );
        let env = [
            ("FLEETMCP_TRANSPORT", "stdio"),
            ("FLEETMCP_AUTH_ENABLED", "true"),
            ("FLEETMCP_AUTH_ISSUER", "https://issuer.example"),
            ("FLEETMCP_AUTH_RESOURCE", "https://mcp.example/mcp"),
            ("FLEETMCP_AUTH_JWKS_URI", "https://issuer.example/jwks"),
        ];
        let err = Config::from_sources(None, env).unwrap_err().to_string();
        assert!(
            err.contains("FLEETMCP_TRANSPORT") && err.contains("[auth]"),
            "{err}"
        );
    }

    #[test]
    fn distributed_mode_binds_everywhere_unless_told() {
        const SECRET: (&str, &str) = ("MCP_SESSION_SECRET", "a fleet secret of some length");
        let cfg = Config::from_sources(None, [("FRONTMCP_DEPLOYMENT_MODE", "distributed"), SECRET])
            .unwrap();
        assert_eq!(cfg.effective_bind(), BindAddress::All);
        let cfg = Config::from_sources(
            None,
            [
                ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
                ("FRONTMCP_BIND_ADDRESS", "loopback"),
                SECRET,
            ],
        )
        .unwrap();
        assert_eq!(cfg.effective_bind(), BindAddress::Loopback);
    }

    /// IPv6: `loopback6` (`::1`, the `Host` check on) and `all6` (`::`, dual-stack).
    #[test]
    fn the_bind_address_may_be_ipv6() {
        for (value, want, loopback) in [
            ("loopback6", BindAddress::Loopback6, true),
            ("::1", BindAddress::Loopback6, true),
            ("[::]", BindAddress::All6, false),
            ("all6", BindAddress::All6, false),
        ] {
            let cfg = Config::from_sources(None, [("FRONTMCP_BIND_ADDRESS", value)]).unwrap();
            assert_eq!(cfg.effective_bind(), want, "{value}");
            assert_eq!(want.is_loopback(), loopback, "{value}");
        }
        assert_eq!(BindAddress::All6.ip().to_string(), "::");
        assert_eq!(BindAddress::Loopback6.ip().to_string(), "::1");
        let e = Config::from_sources(None, [("FRONTMCP_BIND_ADDRESS", "::2")]).unwrap_err();
        assert!(e.to_string().contains("FRONTMCP_BIND_ADDRESS"), "{e}");
    }

    #[test]
    fn distributed_mode_requires_the_session_secret() {
        let e = Config::from_sources(None, [("FRONTMCP_DEPLOYMENT_MODE", "distributed")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MCP_SESSION_SECRET") && e.contains("required in distributed mode"),
            "{e}"
        );
    }

    #[test]
    fn previous_secrets_are_a_comma_separated_list_of_long_enough_secrets() {
        let cfg = Config::from_sources(
            None,
            [(
                "MCP_SESSION_SECRET_PREVIOUS",
                " the first old secret , ,the second old secret",
            )],
        )
        .unwrap();
        assert_eq!(
            cfg.previous_session_secrets,
            ["the first old secret", "the second old secret"].map(String::from)
        );
        let e = Config::from_sources(None, [("MCP_SESSION_SECRET_PREVIOUS", "short")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("MCP_SESSION_SECRET_PREVIOUS"), "{e}");
    }

    #[test]
    fn the_drain_delay_defaults_by_deployment_and_is_configurable() {
        let ms = |cfg: &Config| cfg.drain_delay().as_millis() as u64;
        let none = Vec::<(String, String)>::new();
        // A lone development server stops at once; one likely behind a balancer drains.
        assert_eq!(ms(&Config::from_sources(None, none.clone()).unwrap()), 0);
        for env in [
            ("REDIS_URL", "redis://127.0.0.1:6379"),
            ("NODE_ENV", "production"),
        ] {
            let cfg = Config::from_sources(None, [env]).unwrap();
            assert_eq!(ms(&cfg), DEFAULT_DRAIN_MS, "{env:?}");
        }
        let cfg = Config::from_sources(
            None,
            [
                ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
                ("MCP_SESSION_SECRET", "0123456789abcdef"),
            ],
        )
        .unwrap();
        assert_eq!(ms(&cfg), DEFAULT_DRAIN_MS);
        // Set explicitly, in TOML or the environment (which wins), 0 included.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drain.toml");
        std::fs::write(&path, "[http]\ndrain_ms = 1500\nshutdown_grace_ms = 700\n").unwrap();
        let cfg = Config::from_sources(Some(&path), [("NODE_ENV", "production")]).unwrap();
        assert_eq!((ms(&cfg), cfg.http.shutdown_grace_ms), (1500, 700));
        let cfg = Config::from_sources(
            Some(&path),
            [
                ("FLEETMCP_DRAIN_MS", "0"),
                ("FLEETMCP_SHUTDOWN_GRACE_MS", "250"),
            ],
        )
        .unwrap();
        assert_eq!((ms(&cfg), cfg.http.shutdown_grace_ms), (0, 250));
        let err = Config::from_sources(None, [("FLEETMCP_DRAIN_MS", "5s")]).unwrap_err();
        assert!(err.to_string().contains("FLEETMCP_DRAIN_MS"), "{err}");
    }
}
