//! The sections of the one configuration type, [`Config`], read from an optional TOML file and
//! the environment variables of the deployment contract, validated once at start.
//!
//! Precedence, lowest first: built-in defaults, the TOML file (`FLEETMCP_CONFIG` or an explicit
//! path), then the contract's environment variables (`PORT`, `MCP_SESSION_SECRET`, ...). The
//! configuration reads every variable of the contract but the tracing ones (`env::TRACING_ENV`),
//! which [`crate::init_tracing`] reads itself.
//!
//! Why a folder: each section of the TOML file has its own file (`http_config.rs` for `[http]`,
//! `sessions.rs`, `tasks.rs`, `stateless.rs`, `ha.rs`, `auth.rs`, `limits.rs`), holding its
//! struct, its defaults and its checks, so a setting is described, defaulted and bounded in
//! one place; `deployment.rs` holds the top-level settings that depend on the deployment mode,
//! and `env.rs` the contract's variables, kept together because their names and messages are
//! the contract. `load.rs` ties them together: `Config`, loading, and the order of the checks.
//! Every section is re-exported here, so callers write `config::HaConfig` whatever file holds
//! it; `Config` and `ConfigError` themselves are named at the crate root (`fleetmcp::Config`),
//! and `crate::config::Config` inside the crate.
//!
//! [`Config::transport`] (`FLEETMCP_TRANSPORT`, or the TOML file's `transport`: `http` or
//! `stdio`) picks what `Server::serve` serves; `deployment.rs`'s `check_transport` refuses stdio with
//! distributed mode or `[auth]`. Nothing else in the crate reads the environment but
//! telemetry's `init_tracing` (`RUST_LOG`, `LOG_FORMAT`, `FLEETMCP_TRANSPORT`, and with the
//! feature `otlp` the `OTEL_*` variables): how logs and spans leave the process is set up
//! before any configuration is read. The Redis settings are [`RedisConfig`], in
//! `redis_config.rs` (layer 0 too).
//!
//! ```
//! use fleetmcp::Config;
//! use fleetmcp::config::DeploymentMode;
//!
//! let cfg = Config::from_sources(None, [("PORT", "4001"), ("MACHINE_ID", "desk-a")]).unwrap();
//! assert_eq!(cfg.port, 4001);
//! assert_eq!(cfg.deployment_mode, DeploymentMode::Standalone);
//! ```
//!
//! A fleet's settings: distributed mode, the shared Redis, the secret every instance seals
//! session ids with, each instance's own id, and the heartbeat's tuning (`[ha]`).
//!
//! ```
//! use fleetmcp::Config;
//! use fleetmcp::config::DeploymentMode;
//!
//! let cfg = Config::from_sources(
//!     None,
//!     [
//!         ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
//!         ("REDIS_URL", "redis://10.0.0.5:6379"),
//!         ("MCP_SESSION_SECRET", "one-secret-for-every-instance"),
//!         ("MACHINE_ID", "desk-a"),
//!         ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "2000"),
//!     ],
//! )
//! .unwrap();
//! assert_eq!(cfg.deployment_mode, DeploymentMode::Distributed);
//! assert_eq!(cfg.machine_id.as_deref(), Some("desk-a"));
//! assert!(cfg.redis.is_some());
//! assert_eq!(cfg.ha.heartbeat_interval_ms, 2000);
//! ```

mod auth;
mod deployment;
pub(crate) mod env;
mod ha;
mod http_config;
mod limits;
pub(crate) mod load;
mod sessions;
mod stateless;
mod tasks;

pub use crate::redis_config::RedisConfig;
pub use auth::AuthConfig;
pub use deployment::{BindAddress, DeploymentMode, Transport};
pub use ha::HaConfig;
pub use http_config::HttpConfig;
pub use limits::{LimitsConfig, OnStoreError, RateLimit};
use load::invalid_value;
pub(crate) use load::{Config, ConfigError};
pub use sessions::SessionConfig;
pub use stateless::{DefaultEra, StatelessConfig};
pub use tasks::TaskConfig;
