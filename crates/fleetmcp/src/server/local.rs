//! A server built without the `redis` feature: the names `shared.rs` gives `mod.rs`, with
//! everything in this process (sessions, events, tasks, limits in memory; no fleet). A
//! configuration that asks for Redis or distributed mode is refused at start, naming the
//! feature, rather than served in memory as if it had been heard.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::parts::{HolderSeams, in_memory, memory_tasks};
use crate::app::App;
use crate::config::{Config, DeploymentMode};
use crate::events::EventStore;
use crate::limits::{Connections, Limits};
use crate::session::{Lease, SessionStore};
use crate::tasks::{TaskStore, Tasks};
use crate::telemetry::Meters;
use crate::transport::{Gate, Probe};

/// Why a build without the feature cannot serve `config`, if it cannot.
fn refusal(config: &Config) -> Option<String> {
    let asks = if config.deployment_mode == DeploymentMode::Distributed {
        "distributed mode (FRONTMCP_DEPLOYMENT_MODE=distributed)"
    } else if config.redis.is_some() {
        "Redis (REDIS_URL, REDIS_HOST or [redis])"
    } else {
        return None;
    };
    Some(format!(
        "the configuration asks for {asks}, but this server was built without fleetmcp's `redis` feature: build it with that feature (on by default; `default-features = false` turns it off), or leave Redis and distributed mode unset"
    ))
}

/// Nothing: the server has no Redis.
pub(super) struct Shared;

/// The stores of sessions and SSE events: the ones given, else in memory.
pub(super) fn session_stores(
    config: &Config,
    _meters: &Meters,
    _machine_id: &str,
    _lease: &Arc<Lease>,
    store: Option<Arc<dyn SessionStore>>,
    events: Option<Arc<dyn EventStore>>,
) -> (Arc<dyn SessionStore>, Arc<dyn EventStore>, Shared) {
    let (store, events) = in_memory(config, store, events);
    (store, events, Shared)
}

impl Shared {
    /// The tasks, in the store given, else in memory.
    pub(super) fn tasks(
        &mut self,
        config: &Config,
        given: Option<Arc<dyn TaskStore>>,
        _machine_id: &str,
        _lease: &Arc<Lease>,
    ) -> Tasks {
        memory_tasks(config, given)
    }

    /// The seams given (tests of the seams), and no others.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn seams(
        &self,
        _config: &Config,
        _machine_id: &str,
        _closing: CancellationToken,
        _connections: &Connections,
        _meters: &Meters,
        _lease: &Arc<Lease>,
        given: HolderSeams,
    ) -> HolderSeams {
        given
    }

    /// The limits, kept in this process.
    pub(super) fn limits(
        &self,
        config: &Config,
        _machine_id: &str,
        _shutdown: CancellationToken,
    ) -> Limits {
        Limits::in_memory(&config.limits)
    }

    /// At start: refuses a configuration that needs the feature (see [`refusal`]).
    pub(super) async fn connect(&self, app: &App) -> std::io::Result<()> {
        match refusal(app.config()) {
            Some(why) => {
                tracing::error!("{why}");
                Err(std::io::Error::new(std::io::ErrorKind::Unsupported, why))
            }
            None => Ok(()),
        }
    }

    /// No fleet.
    pub(super) async fn start_fleet(&self, _app: &App) -> std::io::Result<Started> {
        Ok(Started)
    }
}

/// No fleet runs.
#[derive(Clone)]
pub(super) struct Started;

impl Started {
    /// Nothing of a fleet for `/readyz` to check.
    pub(super) fn probes(&self) -> Vec<Arc<dyn Probe>> {
        Vec::new()
    }

    /// Nothing stands in front of requests.
    pub(super) fn gate(&self) -> Option<Arc<dyn Gate>> {
        None
    }

    /// Nobody to tell.
    pub(super) fn listening_on(&self, _local: std::net::SocketAddr) {}

    /// No operator's drain request can come.
    pub(super) fn drain_requested(&self) -> Option<CancellationToken> {
        None
    }

    /// Nothing to withdraw from.
    pub(super) async fn withdraw(&self) {}

    /// Nothing to stop.
    pub(super) async fn stop(&self) {}
}

/// No self-check route without a fleet.
pub(super) fn is_self_check(_path: &str) -> bool {
    false
}

/// The operator's command reads the fleet in Redis: not in this build.
pub(super) async fn operator_command(_args: &[String]) -> i32 {
    eprintln!(
        "the operator's command reads the fleet in Redis, but this binary was built without fleetmcp's `redis` feature"
    );
    2
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, DeploymentMode, RedisConfig};
    use crate::server::Server;

    async fn start_error(config: Config) -> Option<String> {
        let server = Server::builder("local", "1").config(config).build();
        match server.start().await {
            Ok(running) => {
                running.stop().await;
                None
            }
            Err(e) => Some(e.to_string()),
        }
    }

    #[tokio::test]
    async fn a_configuration_asking_for_redis_or_a_fleet_is_refused_naming_the_feature() {
        let with_redis = Config {
            redis: Some(RedisConfig::from_url("redis://127.0.0.1:6379")),
            ..Config::default()
        };
        let why = start_error(with_redis).await.expect("Redis refused");
        assert!(why.contains("asks for Redis"), "{why}");
        assert!(why.contains("`redis` feature"), "{why}");

        let distributed = Config {
            deployment_mode: DeploymentMode::Distributed,
            session_secret: Some("a-secret-of-enough-length-for-the-fleet".into()),
            ..Config::default()
        };
        let why = start_error(distributed).await.expect("a fleet refused");
        assert!(why.contains("asks for distributed mode"), "{why}");
        assert!(why.contains("`redis` feature"), "{why}");

        assert_eq!(
            start_error(Config::default()).await,
            None,
            "in memory it starts"
        );
    }

    #[tokio::test]
    async fn the_operators_command_says_it_needs_the_feature() {
        assert_eq!(Server::operator_command(&["status".into()]).await, 2);
    }
}
