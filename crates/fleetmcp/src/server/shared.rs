//! The parts of a server that live in Redis and the fleet (feature `redis`): the Redis
//! connection, the stores in Redis (sessions, SSE events, tasks, limits) and distributed mode
//! (`fleet::Fleet` and its seams). `local.rs` has the same names for a build without the
//! feature; `mod.rs` wires whichever is built, so nothing else there knows the feature.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::parts::{HolderSeams, in_memory, memory_tasks};
use crate::app::App;
use crate::config::{Config, DeploymentMode};
use crate::events::{EventStore, RedisEventStore};
use crate::fleet::Fleet;
use crate::limits::{Connections, Limits};
use crate::redis_conn::RedisConn;
use crate::session::{Lease, RedisSessionStore, SessionStore};
use crate::tasks::{RedisTaskStore, TaskLimits, TaskStore, Tasks};
use crate::telemetry::Meters;
use crate::transport::{Gate, Probe};

/// What the server has of Redis, from its build to its start.
pub(super) struct Shared {
    redis: Option<RedisConn>,
    /// The task store, when it is in Redis: its cancel signals are followed from the start.
    redis_tasks: Option<RedisTaskStore>,
}

/// The stores of sessions and SSE events: the ones given, else in Redis when the configuration
/// names it (with the connection the rest of the server then shares), else in memory. A store
/// given for sessions means no Redis at all.
pub(super) fn session_stores(
    config: &Config,
    meters: &Meters,
    machine_id: &str,
    lease: &Arc<Lease>,
    store: Option<Arc<dyn SessionStore>>,
    events: Option<Arc<dyn EventStore>>,
) -> (Arc<dyn SessionStore>, Arc<dyn EventStore>, Shared) {
    let (mut store, mut events, mut redis) = (store, events, None);
    if store.is_none()
        && let Some(mut cfg) = config.redis.clone()
    {
        // The existence check is bounded by `sessions.check_timeout_ms`; a shorter command
        // timeout would cut it short.
        cfg.command_timeout_ms = cfg.command_timeout_ms.max(config.sessions.check_timeout_ms);
        match RedisConn::new(cfg) {
            Ok(conn) => {
                conn.instrument(meters.clone());
                store = Some(Arc::new(RedisSessionStore::on(conn.clone())));
                if events.is_none() {
                    events = Some(Arc::new(redis_event_store(
                        &conn, config, machine_id, lease,
                    )));
                    tracing::info!("EventStore initialized for SSE resumability");
                }
                redis = Some(conn);
            }
            Err(e) => tracing::error!(
                error = %e,
                "[TransportService] Failed to create session store - session persistence disabled"
            ),
        }
    }
    let (store, events) = in_memory(config, store, events);
    let shared = Shared {
        redis,
        redis_tasks: None,
    };
    (store, events, shared)
}

fn redis_event_store(
    conn: &RedisConn,
    config: &Config,
    machine_id: &str,
    lease: &Arc<Lease>,
) -> RedisEventStore {
    let sessions = &config.sessions;
    let events = RedisEventStore::new(
        conn.clone(),
        sessions.max_events_per_stream,
        sessions.event_ttl_ms,
        Duration::from_millis(sessions.stream_read_outage_ms),
    )
    .with_bounds(
        sessions.max_streams_per_session,
        sessions.max_event_bytes_per_session,
        sessions.max_event_bytes,
    );
    // Only in distributed mode can a reader tell that a stream's writer is gone (and end the
    // stream for it).
    let liveness = (config.deployment_mode == DeploymentMode::Distributed)
        .then(|| crate::fleet::process_liveness(conn, &config.ha, lease));
    events.with_writers(machine_id, liveness)
}

impl Shared {
    /// The tasks, in the store `given`, else shared in Redis whenever the server has Redis (so
    /// that any instance answers for any task; the executor's liveness is known only in
    /// distributed mode), else in memory.
    pub(super) fn tasks(
        &mut self,
        config: &Config,
        given: Option<Arc<dyn TaskStore>>,
        machine_id: &str,
        lease: &Arc<Lease>,
    ) -> Tasks {
        let (Some(conn), None) = (&self.redis, &given) else {
            return memory_tasks(config, given);
        };
        let limits = TaskLimits::from_config(&config.tasks);
        let store = RedisTaskStore::new(conn.clone(), &conn.config().key_prefix, limits);
        let liveness = (config.deployment_mode == DeploymentMode::Distributed)
            .then(|| crate::fleet::process_liveness(conn, &config.ha, lease));
        let tasks = Tasks::new(Arc::new(store.clone()), &config.tasks).shared(machine_id, liveness);
        self.redis_tasks = Some(store);
        tasks
    }

    /// The seams a request for a session not held here meets: the ones given (tests of the
    /// seams), else distributed mode's (`fleet::seams`), else none.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn seams(
        &self,
        config: &Config,
        machine_id: &str,
        closing: CancellationToken,
        connections: &Connections,
        meters: &Meters,
        lease: &Arc<Lease>,
        given: HolderSeams,
    ) -> HolderSeams {
        let (holders, relay) = given;
        if config.deployment_mode == DeploymentMode::Distributed
            && let Some(conn) = &self.redis
            && let Some((o, r)) = crate::fleet::seams(
                conn,
                machine_id,
                config,
                closing,
                connections,
                meters,
                lease,
            )
        {
            return (holders.or(Some(o)), relay.or(Some(r)));
        }
        (holders, relay)
    }

    /// The limits, shared by the fleet whenever the server has Redis (as sessions are), else
    /// kept in this process.
    pub(super) fn limits(
        &self,
        config: &Config,
        machine_id: &str,
        shutdown: CancellationToken,
    ) -> Limits {
        match &self.redis {
            Some(conn) => Limits::in_redis(&config.limits, conn.clone(), machine_id, shutdown),
            None => Limits::in_memory(&config.limits),
        }
    }

    /// At start, before the routes exist: the first connection to Redis, and the task store's
    /// cancel signals followed (so a cancel sent through another instance for a task started
    /// here is never missed for want of a subscription).
    pub(super) async fn connect(&self, app: &App) -> std::io::Result<()> {
        if let Some(redis) = &self.redis {
            redis.first_connect().await;
        }
        if let Some(store) = &self.redis_tasks {
            let signals = store.listen_cancels(app.phases().shutdown.clone()).await;
            let follower = app.clone();
            tokio::spawn(async move { follower.tasks().follow(signals).await });
        }
        Ok(())
    }

    /// Distributed mode, started (its heartbeat, scanner, channel) when configured.
    pub(super) async fn start_fleet(&self, app: &App) -> std::io::Result<Started> {
        if app.config().deployment_mode != DeploymentMode::Distributed {
            return Ok(Started(None));
        }
        let fleet = Fleet::start(app, self.redis.clone()).await.map_err(|why| {
            tracing::error!("{why}");
            std::io::Error::new(std::io::ErrorKind::AddrInUse, why)
        })?;
        Ok(Started(Some(Arc::new(fleet))))
    }
}

/// Distributed mode as it runs, when it does; shared with the task that runs a graceful stop's
/// first phase.
#[derive(Clone)]
pub(super) struct Started(Option<Arc<Fleet>>);

impl Started {
    /// What `/readyz` checks of the fleet.
    pub(super) fn probes(&self) -> Vec<Arc<dyn Probe>> {
        self.0.iter().flat_map(|f| f.probes()).collect()
    }

    /// What stands in front of every request in distributed mode.
    pub(super) fn gate(&self) -> Option<Arc<dyn Gate>> {
        self.0.as_ref().map(|f| f.gate())
    }

    /// Tells the fleet the address the server listens on.
    pub(super) fn listening_on(&self, local: std::net::SocketAddr) {
        if let Some(f) = &self.0 {
            f.listening_on(local);
        }
    }

    /// Cancelled when the operator asks this instance to drain.
    pub(super) fn drain_requested(&self) -> Option<CancellationToken> {
        self.0.as_ref().map(|f| f.drain_requested())
    }

    /// The graceful stop's first phase: the others take this instance's sessions over.
    pub(super) async fn withdraw(&self) {
        if let Some(f) = &self.0 {
            f.withdraw().await;
        }
    }

    /// Stops what the fleet runs.
    pub(super) async fn stop(&self) {
        if let Some(f) = &self.0 {
            f.stop().await;
        }
    }
}

/// Whether `path` is distributed mode's self-check (a health route for the connection cap).
pub(super) fn is_self_check(path: &str) -> bool {
    path == crate::fleet::SELF_CHECK_PATH
}

/// The operator's command (`ops.rs`).
pub(super) async fn operator_command(args: &[String]) -> i32 {
    crate::ops::main(args).await
}
