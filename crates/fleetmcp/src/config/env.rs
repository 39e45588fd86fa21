//! The deployment contract's environment variables, and how each one sets the configuration.
//! Their names, what a blank or unreadable value does, and the error messages are the
//! contract: deployment files and operators rely on them word for word. So they are kept here
//! together, the lists of names beside the one function per section that reads them, rather
//! than spread over the sections they set.
//!
//! Two rules run through them: a variable set but blank mostly leaves the default (or the TOML
//! value) in place, and a value that cannot be read stops the start naming the variable, except
//! where the contract says to ignore it (the `FRONTMCP_HA_*` timings).

use super::{
    AuthConfig, BindAddress, Config, ConfigError, DeploymentMode, HaConfig, HttpConfig,
    LimitsConfig, OnStoreError, RateLimit, SessionConfig, StatelessConfig, TaskConfig,
};
use crate::redis_config::RedisConfig;

/// Environment variables of the contract that each set one field as they are.
const ENV_KEYS: &[&str] = &[
    "PORT",
    "MCP_SESSION_SECRET",
    "MACHINE_ID",
    "HOSTNAME",
    "NODE_ENV",
    "VAULT_SECRET",
    "JWT_SECRET",
];

/// The other variables the configuration reads, each with its own parsing.
const OTHER_ENV: &[&str] = &[
    "MCP_SESSION_SECRET_PREVIOUS",
    "FRONTMCP_BIND_ADDRESS",
    "FRONTMCP_DEPLOYMENT_MODE",
    "FLEETMCP_TRANSPORT",
    "REDIS_URL",
    "REDIS_HOST",
    "REDIS_PORT",
    "REDIS_SENTINELS",
    "REDIS_SENTINEL_MASTER",
    "REDIS_SENTINEL_PASSWORD",
    "REDIS_CLUSTER_NODES",
    "FLEETMCP_REDIS_WAIT_REPLICAS",
    "FRONTMCP_HA_HEARTBEAT_INTERVAL_MS",
    "FRONTMCP_HA_HEARTBEAT_TTL_MS",
    "FRONTMCP_HA_KEY_PREFIX",
    "FRONTMCP_HA_TAKEOVER_GRACE_MS",
    "FLEETMCP_ADVERTISE_ADDRESS",
    "FLEETMCP_RELAY_WINDOW_MS",
    "FLEETMCP_RELAY_MAX_CONNECTIONS",
    "FLEETMCP_DRAIN_MS",
    "FLEETMCP_SHUTDOWN_GRACE_MS",
    "FLEETMCP_AUTH_ENABLED",
    "FLEETMCP_AUTH_ISSUER",
    "FLEETMCP_AUTH_RESOURCE",
    "FLEETMCP_AUTH_JWKS_URI",
    "FLEETMCP_AUTH_INTROSPECTION_ENDPOINT",
    "FLEETMCP_AUTH_INTROSPECTION_CLIENT_ID",
    "FLEETMCP_AUTH_INTROSPECTION_CLIENT_SECRET",
    "FLEETMCP_RATE_LIMIT",
    "FLEETMCP_MAX_INFLIGHT_PER_SESSION",
    "FLEETMCP_MAX_INFLIGHT_PER_KEY",
    "FLEETMCP_MAX_LISTEN_STREAMS_PER_KEY",
    "FLEETMCP_MAX_SESSIONS_PER_KEY",
    "FLEETMCP_MAX_TASKS_PER_CALLER",
    "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
    "FLEETMCP_MAX_LISTEN_STREAMS",
    "FLEETMCP_MAX_CLIENT_DATA_BYTES",
    "FLEETMCP_LIMITS_ON_STORE_ERROR",
    "FLEETMCP_CLIENT_ADDRESS_HEADER",
    "FLEETMCP_TRUSTED_PROXIES",
    "FLEETMCP_IPV6_PREFIX_LEN",
    "FLEETMCP_METRICS",
];

/// Every environment variable a fleetmcp server reads: the configuration's (see
/// [`Config::from_sources`]), `FLEETMCP_CONFIG` (the TOML file, read by [`Config::load`]) and
/// those read by [`crate::init_tracing`] (`TRACING_ENV`). Deployment files are checked
/// against it (`tests/deploy_k8s.rs`).
pub fn environment_variables() -> impl Iterator<Item = &'static str> {
    ENV_KEYS
        .iter()
        .chain(OTHER_ENV)
        .chain(&["FLEETMCP_CONFIG"])
        .chain(TRACING_ENV)
        .copied()
}

/// The variables [`crate::init_tracing`] reads, not the configuration: the log filter and
/// format, and (with the cargo feature `otlp`) where spans are exported and under which
/// service name. The OTLP exporter also reads the other standard `OTEL_*` variables.
pub const TRACING_ENV: &[&str] = &[
    "RUST_LOG",
    "LOG_FORMAT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
];

impl Config {
    /// Every environment variable a fleetmcp server reads (its configuration's, `FLEETMCP_CONFIG`
    /// and the logging and tracing ones): for a program that starts other processes and must
    /// not hand them its own settings and secrets (the gateway's child processes), or checks a
    /// deployment file against them.
    ///
    /// ```
    /// assert!(fleetmcp::Config::environment_variables().any(|v| v == "MCP_SESSION_SECRET"));
    /// ```
    pub fn environment_variables() -> impl Iterator<Item = &'static str> {
        environment_variables()
    }

    /// Sets what the variable `name` stands for; a variable the configuration does not read is
    /// ignored. Every name belongs to one section, whose function sets it (the others pass it
    /// by).
    pub(super) fn apply_env(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        if !ENV_KEYS.contains(&name) && !OTHER_ENV.contains(&name) {
            return Ok(());
        }
        apply_top_level(self, name, value)?;
        apply_http(&mut self.http, name, value)?;
        apply_sessions(&mut self.sessions, name, value)?;
        apply_tasks(&mut self.tasks, name, value)?;
        apply_stateless(&mut self.stateless, name, value)?;
        apply_redis(&mut self.redis, name, value)?;
        apply_ha(&mut self.ha, name, value)?;
        apply_auth(&mut self.auth, name, value)?;
        apply_limits(&mut self.limits, name, value)
    }
}

/// The top-level settings: port, identity, secrets, bind address and deployment mode.
fn apply_top_level(cfg: &mut Config, name: &str, value: &str) -> Result<(), ConfigError> {
    match name {
        "PORT" => {
            cfg.port = value
                .parse()
                .map_err(|_| invalid("PORT", value, "expected a port number 0-65535"))?
        }
        "MCP_SESSION_SECRET" => cfg.session_secret = non_empty(value),
        "MCP_SESSION_SECRET_PREVIOUS" => cfg.previous_session_secrets = split_list(value),
        "MACHINE_ID" => cfg.machine_id = non_empty(value),
        "HOSTNAME" => cfg.hostname = non_empty(value),
        "NODE_ENV" => cfg.node_env = non_empty(value),
        "VAULT_SECRET" => cfg.vault_secret = non_empty(value),
        "JWT_SECRET" => cfg.jwt_secret = non_empty(value),
        "FRONTMCP_BIND_ADDRESS" => cfg.bind_address = bind_address(value)?,
        "FRONTMCP_DEPLOYMENT_MODE" => cfg.deployment_mode = deployment_mode(value)?,
        // Blank leaves the TOML file's choice.
        "FLEETMCP_TRANSPORT" if !value.trim().is_empty() => {
            cfg.transport = super::Transport::from_name(value)
                .ok_or_else(|| invalid("FLEETMCP_TRANSPORT", value, "expected `http` or `stdio`"))?
        }
        _ => {}
    }
    Ok(())
}

/// `FRONTMCP_BIND_ADDRESS`; blank is unset (the deployment mode decides).
fn bind_address(value: &str) -> Result<Option<BindAddress>, ConfigError> {
    Ok(match value.to_ascii_lowercase().as_str() {
        "" => None,
        "loopback" | "127.0.0.1" | "localhost" => Some(BindAddress::Loopback),
        "all" | "0.0.0.0" => Some(BindAddress::All),
        "loopback6" | "::1" | "[::1]" => Some(BindAddress::Loopback6),
        "all6" | "::" | "[::]" => Some(BindAddress::All6),
        _ => {
            return Err(invalid(
                "FRONTMCP_BIND_ADDRESS",
                value,
                "expected `loopback`, `all`, `loopback6` (::1) or `all6` (::, dual-stack)",
            ));
        }
    })
}

/// `FRONTMCP_DEPLOYMENT_MODE`; blank is standalone.
fn deployment_mode(value: &str) -> Result<DeploymentMode, ConfigError> {
    Ok(match value.to_ascii_lowercase().as_str() {
        "" | "standalone" => DeploymentMode::Standalone,
        "distributed" => DeploymentMode::Distributed,
        // Named on its own: it is a mode of the contract fleetmcp does not offer,
        // not a typo, and starting as standalone instead would mislead.
        "serverless" => {
            return Err(invalid(
                "FRONTMCP_DEPLOYMENT_MODE",
                value,
                "serverless mode is not supported; expected `standalone` or `distributed` (or unset)",
            ));
        }
        _ => {
            return Err(invalid(
                "FRONTMCP_DEPLOYMENT_MODE",
                value,
                "expected `standalone` or `distributed` (or unset)",
            ));
        }
    })
}

/// `[http]`: the stop sequence and metrics.
fn apply_http(http: &mut HttpConfig, name: &str, value: &str) -> Result<(), ConfigError> {
    let blank = value.trim().is_empty();
    match name {
        "FLEETMCP_DRAIN_MS" if !blank => {
            http.drain_ms = Some(number(
                "FLEETMCP_DRAIN_MS",
                value,
                "expected milliseconds (0 or more)",
            )?)
        }
        "FLEETMCP_SHUTDOWN_GRACE_MS" if !blank => {
            http.shutdown_grace_ms = number(
                "FLEETMCP_SHUTDOWN_GRACE_MS",
                value,
                "expected milliseconds (0 or more)",
            )?
        }
        "FLEETMCP_METRICS" if !blank => {
            http.metrics = match value.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "on" => true,
                "0" | "false" | "off" => false,
                _ => return Err(invalid("FLEETMCP_METRICS", value, "expected on or off")),
            }
        }
        _ => {}
    }
    Ok(())
}

/// `[sessions]`: the instance's budget of client data.
fn apply_sessions(
    sessions: &mut SessionConfig,
    name: &str,
    value: &str,
) -> Result<(), ConfigError> {
    if name == "FLEETMCP_MAX_CLIENT_DATA_BYTES" && !value.trim().is_empty() {
        sessions.max_client_data_bytes = number(
            "FLEETMCP_MAX_CLIENT_DATA_BYTES",
            value,
            "expected a number of bytes (at least 1 MiB)",
        )?;
    }
    Ok(())
}

/// `[tasks]`: the per-caller bounds.
fn apply_tasks(tasks: &mut TaskConfig, name: &str, value: &str) -> Result<(), ConfigError> {
    let blank = value.trim().is_empty();
    match name {
        "FLEETMCP_MAX_TASKS_PER_CALLER" if !blank => {
            tasks.max_tasks_per_caller = number(
                "FLEETMCP_MAX_TASKS_PER_CALLER",
                value,
                "expected a number of task records (1 or more)",
            )?
        }
        "FLEETMCP_MAX_TASK_BYTES_PER_CALLER" if !blank => {
            tasks.max_bytes_per_caller = number(
                "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
                value,
                "expected a number of bytes (at least tasks.max_result_bytes)",
            )?
        }
        _ => {}
    }
    Ok(())
}

/// `[stateless]`: the instance's bound on listen streams.
fn apply_stateless(
    stateless: &mut StatelessConfig,
    name: &str,
    value: &str,
) -> Result<(), ConfigError> {
    if name == "FLEETMCP_MAX_LISTEN_STREAMS" && !value.trim().is_empty() {
        stateless.max_listen_streams = number(
            "FLEETMCP_MAX_LISTEN_STREAMS",
            value,
            "expected a number of streams (1 or more)",
        )?;
    }
    Ok(())
}

/// `[redis]`: setting any of these configures Redis.
fn apply_redis(
    redis: &mut Option<RedisConfig>,
    name: &str,
    value: &str,
) -> Result<(), ConfigError> {
    let blank = value.trim().is_empty();
    match name {
        "REDIS_URL" if !value.is_empty() => {
            redis.get_or_insert_with(Default::default).url = non_empty(value);
        }
        "REDIS_HOST" if !value.is_empty() => {
            redis.get_or_insert_with(Default::default).host = non_empty(value);
        }
        "REDIS_PORT" if !value.is_empty() => {
            let port = value
                .parse()
                .map_err(|_| invalid("REDIS_PORT", value, "expected a port number 1-65535"))?;
            redis.get_or_insert_with(Default::default).port = Some(port);
        }
        "REDIS_SENTINELS" if !blank => {
            redis.get_or_insert_with(Default::default).sentinels = split_list(value);
        }
        "FLEETMCP_REDIS_WAIT_REPLICAS" if !blank => {
            redis.get_or_insert_with(Default::default).wait_replicas = value.trim().to_string();
        }
        "REDIS_CLUSTER_NODES" if !blank => {
            redis.get_or_insert_with(Default::default).cluster_nodes = split_list(value);
        }
        "REDIS_SENTINEL_MASTER" if !blank => {
            redis.get_or_insert_with(Default::default).sentinel_master =
                Some(value.trim().to_string());
        }
        "REDIS_SENTINEL_PASSWORD" if !value.is_empty() => {
            redis.get_or_insert_with(Default::default).sentinel_password = non_empty(value);
        }
        _ => {}
    }
    Ok(())
}

/// `[ha]`. The contract: a timing that is not a positive integer is ignored (the default
/// applies), and so is a blank prefix.
fn apply_ha(ha: &mut HaConfig, name: &str, value: &str) -> Result<(), ConfigError> {
    match name {
        "FRONTMCP_HA_HEARTBEAT_INTERVAL_MS" => {
            ha.heartbeat_interval_ms = positive(value).unwrap_or(ha.heartbeat_interval_ms)
        }
        "FRONTMCP_HA_HEARTBEAT_TTL_MS" => {
            ha.heartbeat_ttl_ms = positive(value).unwrap_or(ha.heartbeat_ttl_ms)
        }
        "FRONTMCP_HA_TAKEOVER_GRACE_MS" => {
            ha.takeover_grace_ms = positive(value).unwrap_or(ha.takeover_grace_ms)
        }
        "FLEETMCP_RELAY_WINDOW_MS" => {
            ha.relay_window_ms = positive(value).unwrap_or(ha.relay_window_ms)
        }
        "FLEETMCP_RELAY_MAX_CONNECTIONS" => {
            ha.relay_max_connections = match value.trim() {
                "" => None,
                _ => Some(number(
                    "FLEETMCP_RELAY_MAX_CONNECTIONS",
                    value,
                    "expected a number of relayed requests (1 or more), or nothing for a quarter of http.max_connections",
                )?),
            }
        }
        "FLEETMCP_ADVERTISE_ADDRESS" => {
            ha.advertise_address = (!value.trim().is_empty()).then(|| value.trim().into())
        }
        "FRONTMCP_HA_KEY_PREFIX" if !value.trim().is_empty() => {
            ha.key_prefix = value.trim().to_string()
        }
        _ => {}
    }
    Ok(())
}

/// `[auth]`: switching it on, and the issuer's addresses.
fn apply_auth(auth: &mut AuthConfig, name: &str, value: &str) -> Result<(), ConfigError> {
    match name {
        "FLEETMCP_AUTH_ENABLED" if !value.trim().is_empty() => {
            auth.enabled = match value.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(invalid(
                        "FLEETMCP_AUTH_ENABLED",
                        value,
                        "expected true or false",
                    ));
                }
            }
        }
        "FLEETMCP_AUTH_ISSUER" if !value.is_empty() => auth.issuer = value.trim().into(),
        "FLEETMCP_AUTH_RESOURCE" if !value.is_empty() => auth.resource = value.trim().into(),
        "FLEETMCP_AUTH_JWKS_URI" if !value.is_empty() => auth.jwks_uri = value.trim().into(),
        "FLEETMCP_AUTH_INTROSPECTION_ENDPOINT" if !value.is_empty() => {
            auth.introspection_endpoint = value.trim().into()
        }
        "FLEETMCP_AUTH_INTROSPECTION_CLIENT_ID" if !value.is_empty() => {
            auth.introspection_client_id = value.trim().into()
        }
        "FLEETMCP_AUTH_INTROSPECTION_CLIENT_SECRET" => {
            auth.introspection_client_secret = non_empty(value)
        }
        _ => {}
    }
    Ok(())
}

/// `[limits]`: the rate, the bounds per session and per key, and how a caller's key is found.
fn apply_limits(limits: &mut LimitsConfig, name: &str, value: &str) -> Result<(), ConfigError> {
    let blank = value.trim().is_empty();
    match name {
        "FLEETMCP_RATE_LIMIT" => {
            limits.rate = match value.trim() {
                "" | "off" => None,
                v => Some(RateLimit::parse(v).ok_or_else(|| {
                    invalid(
                        "FLEETMCP_RATE_LIMIT",
                        value,
                        "expected <requests>/<window_ms>[/<burst>], e.g. 100/60000/20, or `off`",
                    )
                })?),
            }
        }
        "FLEETMCP_MAX_INFLIGHT_PER_SESSION" if !blank => {
            limits.max_inflight_per_session = number(
                "FLEETMCP_MAX_INFLIGHT_PER_SESSION",
                value,
                "expected a number of requests (1 or more)",
            )?
        }
        "FLEETMCP_MAX_INFLIGHT_PER_KEY" => {
            let n: usize = if blank {
                0
            } else {
                number(
                    "FLEETMCP_MAX_INFLIGHT_PER_KEY",
                    value,
                    "expected a number of requests (0 for no limit)",
                )?
            };
            limits.max_inflight_per_key = (n > 0).then_some(n);
        }
        "FLEETMCP_MAX_LISTEN_STREAMS_PER_KEY" if !blank => {
            limits.max_listen_streams_per_key = number(
                "FLEETMCP_MAX_LISTEN_STREAMS_PER_KEY",
                value,
                "expected a number of streams (1 or more)",
            )?
        }
        "FLEETMCP_MAX_SESSIONS_PER_KEY" if !blank => {
            limits.max_sessions_per_key = number(
                "FLEETMCP_MAX_SESSIONS_PER_KEY",
                value,
                "expected a number of sessions (0 for no limit)",
            )?
        }
        "FLEETMCP_LIMITS_ON_STORE_ERROR" => {
            limits.on_store_error = match value.trim().to_ascii_lowercase().as_str() {
                "" | "open" => OnStoreError::Open,
                "closed" => OnStoreError::Closed,
                _ => {
                    return Err(invalid(
                        "FLEETMCP_LIMITS_ON_STORE_ERROR",
                        value,
                        "expected `open` (serve uncounted, with a warning) or `closed` (answer 503)",
                    ));
                }
            }
        }
        "FLEETMCP_CLIENT_ADDRESS_HEADER" => {
            limits.client_address_header = (!blank).then(|| value.trim().to_ascii_lowercase())
        }
        "FLEETMCP_TRUSTED_PROXIES" => limits.trusted_proxies = split_list(value),
        "FLEETMCP_IPV6_PREFIX_LEN" if !blank => {
            limits.ipv6_prefix_len = number(
                "FLEETMCP_IPV6_PREFIX_LEN",
                value,
                "expected a prefix length from 1 to 128 (64: one key per /64 network)",
            )?
        }
        _ => {}
    }
    Ok(())
}

/// The error naming a variable whose value cannot be used.
fn invalid(name: &'static str, value: &str, why: &'static str) -> ConfigError {
    ConfigError::Invalid {
        name,
        value: value.to_string(),
        why,
    }
}

/// The value, unless it is empty (then the setting is unset).
fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

/// A number, blanks around it allowed, or the error naming the variable.
fn number<T: std::str::FromStr>(
    name: &'static str,
    value: &str,
    why: &'static str,
) -> Result<T, ConfigError> {
    value.trim().parse().map_err(|_| invalid(name, value, why))
}

/// A comma-separated list, each item trimmed and blanks dropped (`MCP_SESSION_SECRET_PREVIOUS`,
/// `FLEETMCP_TRUSTED_PROXIES`, and the `host:port` addresses of `REDIS_SENTINELS` and
/// `REDIS_CLUSTER_NODES`, each checked by
/// [`RedisConfig::validate`](crate::redis_config::RedisConfig::validate)).
fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect()
}

/// A positive integer, or nothing (the `FRONTMCP_HA_*` timings ignore anything else).
fn positive(value: &str) -> Option<u64> {
    value.trim().parse::<u64>().ok().filter(|v| *v > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_name_the_variable() {
        let err = Config::from_sources(None, [("PORT", "seventy")]).unwrap_err();
        assert!(err.to_string().contains("PORT"), "{err}");
        let err = Config::from_sources(None, [("FRONTMCP_BIND_ADDRESS", "moon")]).unwrap_err();
        assert!(err.to_string().contains("FRONTMCP_BIND_ADDRESS"), "{err}");
        let err = Config::from_sources(None, [("MCP_SESSION_SECRET", "short")]).unwrap_err();
        assert!(err.to_string().contains("MCP_SESSION_SECRET"), "{err}");
        assert!(
            !err.to_string().contains("short"),
            "secrets are never echoed"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "prot = 1\n").unwrap();
        assert!(Config::from_sources(Some(&path), Vec::<(String, String)>::new()).is_err());
    }

    #[test]
    fn redis_cluster_nodes_come_from_the_environment() {
        let cfg = Config::from_sources(
            None,
            [("REDIS_CLUSTER_NODES", " 10.0.0.1:7000, ,10.0.0.2:7001 ")],
        )
        .unwrap();
        let redis = cfg.redis.expect("Redis configured");
        assert_eq!(redis.cluster_nodes, ["10.0.0.1:7000", "10.0.0.2:7001"]);
        assert!(redis.is_cluster());
        // With a fixed server too, the configuration is refused at start.
        let both = Config::from_sources(
            None,
            [
                ("REDIS_CLUSTER_NODES", "10.0.0.1:7000"),
                ("REDIS_URL", "redis://10.0.0.9:6379"),
            ],
        );
        assert!(both.is_err(), "{both:?}");
    }

    #[test]
    fn per_caller_and_per_instance_bounds_come_from_the_environment() {
        let cfg = Config::default();
        assert_eq!(
            (
                cfg.tasks.max_tasks_per_caller,
                cfg.tasks.max_bytes_per_caller
            ),
            (100, 32 * 1024 * 1024)
        );
        assert_eq!(cfg.stateless.max_listen_streams, 10_000);
        assert_eq!(cfg.sessions.max_client_data_bytes, 256 * 1024 * 1024);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bounds.toml");
        std::fs::write(
            &path,
            "[tasks]\nmax_tasks_per_caller = 7\n[stateless]\nmax_listen_streams = 9\n",
        )
        .unwrap();
        let cfg = Config::from_sources(Some(&path), Vec::<(String, String)>::new()).unwrap();
        assert_eq!(cfg.tasks.max_tasks_per_caller, 7);
        assert_eq!(cfg.stateless.max_listen_streams, 9);
        // The environment wins over the file; blank sets nothing.
        let cfg = Config::from_sources(
            Some(&path),
            [
                ("FLEETMCP_MAX_TASKS_PER_CALLER", " 20 "),
                ("FLEETMCP_MAX_TASK_BYTES_PER_CALLER", "16777216"),
                ("FLEETMCP_MAX_LISTEN_STREAMS", "500"),
                ("FLEETMCP_MAX_CLIENT_DATA_BYTES", "67108864"),
            ],
        )
        .unwrap();
        assert_eq!(
            (
                cfg.tasks.max_tasks_per_caller,
                cfg.tasks.max_bytes_per_caller
            ),
            (20, 16 * 1024 * 1024)
        );
        assert_eq!(cfg.stateless.max_listen_streams, 500);
        assert_eq!(cfg.sessions.max_client_data_bytes, 64 * 1024 * 1024);
        let cfg =
            Config::from_sources(Some(&path), [("FLEETMCP_MAX_LISTEN_STREAMS", " ")]).unwrap();
        assert_eq!(cfg.stateless.max_listen_streams, 9);
        // Not a number: refused naming the variable; out of bounds: refused naming the key.
        for (name, bad, names) in [
            (
                "FLEETMCP_MAX_TASKS_PER_CALLER",
                "many",
                "FLEETMCP_MAX_TASKS_PER_CALLER",
            ),
            (
                "FLEETMCP_MAX_TASKS_PER_CALLER",
                "0",
                "tasks.max_tasks_per_caller",
            ),
            (
                "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
                "32MiB",
                "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
            ),
            (
                "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
                "1000",
                "tasks.max_result_bytes",
            ),
            (
                "FLEETMCP_MAX_LISTEN_STREAMS",
                "-1",
                "FLEETMCP_MAX_LISTEN_STREAMS",
            ),
            (
                "FLEETMCP_MAX_LISTEN_STREAMS",
                "0",
                "stateless.max_listen_streams",
            ),
            (
                "FLEETMCP_MAX_CLIENT_DATA_BYTES",
                "lots",
                "FLEETMCP_MAX_CLIENT_DATA_BYTES",
            ),
            (
                "FLEETMCP_MAX_CLIENT_DATA_BYTES",
                "1024",
                "sessions.max_client_data_bytes",
            ),
        ] {
            let e = Config::from_sources(None, [(name, bad)])
                .unwrap_err()
                .to_string();
            assert!(e.contains(names), "{name}={bad}: {e}");
        }
    }
}
