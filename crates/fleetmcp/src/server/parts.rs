//! What [`super::ServerBuilder::build`] assembles from the configuration: the stores (in Redis
//! or in memory), the tasks, the limits, the sealers and the session timing.

use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::config::{Config, DeploymentMode};
use crate::events::{EventStore, MemoryEventStore, RedisEventStore};
use crate::machine_id::MachineIdSource;
use crate::redis_conn::RedisConn;
use crate::session::{
    Lease, MemorySessionStore, RedisSessionStore, SessionSealer, SessionStore, Timing,
};
use crate::stateless::request_state::{RequestStateSealer, StateSecrets};
use crate::tasks::{MemoryTaskStore, RedisTaskStore, TaskLimits, TaskStore, Tasks};
use crate::telemetry::Meters;
use crate::transport::{Probe, ProbeReport};
use crate::upstream::Upstream;

/// The limits, shared by the fleet whenever the server has Redis (as sessions are), else kept
/// in this process.
pub(super) fn limits_for(
    config: &Config,
    redis: Option<&RedisConn>,
    machine_id: &str,
    shutdown: tokio_util::sync::CancellationToken,
) -> crate::limits::Limits {
    match redis {
        Some(conn) => {
            crate::limits::Limits::in_redis(&config.limits, conn.clone(), machine_id, shutdown)
        }
        None => crate::limits::Limits::in_memory(&config.limits),
    }
}

/// The meters, or none when `http.metrics` is off (every call then a no-op).
pub(super) fn meters_for(config: &Config) -> Meters {
    if config.http.metrics {
        Meters::new()
    } else {
        Meters::disabled()
    }
}

/// The configuration as the server runs it. With stdio (see `Config::stdio`), log lines leave
/// stdout before anything logs (it is the client's from now on), and Redis is left to the
/// application: the one session lives in this process, so nothing of it is stored there.
pub(super) fn as_served(mut config: Config) -> Config {
    if config.stdio {
        crate::telemetry::logs::keep_stdout_for_messages();
        config.redis = None;
    }
    config
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
) -> (
    Arc<dyn SessionStore>,
    Arc<dyn EventStore>,
    Option<RedisConn>,
) {
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
    let idle = Duration::from_millis(config.sessions.idle_ttl_ms);
    let store = store.unwrap_or_else(|| Arc::new(MemorySessionStore::new(idle)));
    let events = events.unwrap_or_else(|| {
        let sessions = &config.sessions;
        Arc::new(
            MemoryEventStore::new(
                sessions.max_events_per_stream,
                sessions.max_streams_per_session,
            )
            .with_bytes(
                sessions.max_event_bytes_per_session,
                sessions.max_event_bytes,
            ),
        )
    });
    (store, events, redis)
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

/// The sealer of stateless requests' `requestState`, from the shared secrets; warns when there
/// is none and the server looks like one of a fleet.
pub(super) fn request_state_sealer(config: &Config) -> RequestStateSealer {
    let previous_session: Vec<&str> = config
        .previous_session_secrets
        .iter()
        .map(String::as_str)
        .collect();
    let request_state = RequestStateSealer::from_secrets(StateSecrets {
        vault: config.vault_secret.as_deref(),
        jwt: config.jwt_secret.as_deref(),
        session: config.session_secret.as_deref(),
        previous_session: &previous_session,
    });
    if !request_state.source.is_shared()
        && (config.deployment_mode == DeploymentMode::Distributed || config.redis.is_some())
    {
        // No shared secret at all (distributed mode requires one, so this is a fleet
        // sharing Redis in standalone mode): another instance cannot open a state this one
        // sealed, and a multi-round request that changes instance starts over.
        tracing::warn!(
            "requestState is signed with a per-process key: set MCP_SESSION_SECRET (or VAULT_SECRET or JWT_SECRET) to the same value on every instance"
        );
    }
    request_state
}

pub(super) fn session_timing(config: &Config) -> Timing {
    // A held session's record is refreshed at most once per quarter of its lifetime.
    let ttl = match &config.redis {
        Some(r) => r.default_ttl_ms.min(config.sessions.idle_ttl_ms),
        None => config.sessions.idle_ttl_ms,
    };
    Timing {
        check_timeout: Duration::from_millis(config.sessions.check_timeout_ms),
        store_wait: Duration::from_millis(config.sessions.store_wait_ms),
        refresh_every_ms: ttl / 4,
    }
}

/// The tasks, in the store `given`, else shared in Redis whenever the server has Redis (so that
/// any instance answers for any task; the executor's liveness is known only in distributed
/// mode), else in memory. With the Redis store, when it is that one.
pub(super) fn tasks_for(
    config: &Config,
    given: Option<Arc<dyn TaskStore>>,
    redis: Option<&RedisConn>,
    machine_id: &str,
    lease: &Arc<Lease>,
) -> (Tasks, Option<RedisTaskStore>) {
    let tasks_cfg = &config.tasks;
    let limits = TaskLimits::from_config(tasks_cfg);
    let redis_tasks = match (&given, redis) {
        (None, Some(conn)) => Some(RedisTaskStore::new(
            conn.clone(),
            &conn.config().key_prefix,
            limits,
        )),
        _ => None,
    };
    let task_liveness = match redis {
        Some(conn)
            if redis_tasks.is_some() && config.deployment_mode == DeploymentMode::Distributed =>
        {
            Some(crate::fleet::process_liveness(conn, &config.ha, lease))
        }
        _ => None,
    };
    let task_store: Arc<dyn TaskStore> = match (&redis_tasks, given) {
        (Some(r), _) => Arc::new(r.clone()),
        (None, Some(t)) => t,
        (None, None) => Arc::new(MemoryTaskStore::new(limits)),
    };
    let mut tasks = Tasks::new(task_store, tasks_cfg);
    if redis_tasks.is_some() {
        tasks = tasks.shared(machine_id, task_liveness);
    }
    (tasks, redis_tasks)
}

pub(super) fn sealer_for(
    cfg: &Config,
    machine_id: &str,
    source: MachineIdSource,
) -> Option<SessionSealer> {
    if let Some(secret) = &cfg.session_secret {
        let previous: Vec<&[u8]> = cfg
            .previous_session_secrets
            .iter()
            .map(|s| s.as_bytes())
            .collect();
        return Some(SessionSealer::rotating(secret.as_bytes(), &previous));
    }
    if cfg.stdio {
        // A stdio session's id never leaves the process: no key is made, nor warned about.
        return None;
    }
    if cfg.is_production() {
        tracing::error!(
            "MCP_SESSION_SECRET is not set: in production no session id can be issued, and `initialize` from clients before MCP 2026-07-28 answers 500"
        );
        return None;
    }
    if cfg.deployment_mode == DeploymentMode::Distributed {
        // The machine id is published in every response header in this mode, so a key made
        // from it would be public; `Server::start` refuses to run like this.
        return None;
    }
    tracing::warn!(
        "[SessionIdUtils] Using machine ID as session encryption secret - NOT SECURE FOR PRODUCTION. Set MCP_SESSION_SECRET."
    );
    if source == MachineIdSource::Random {
        tracing::warn!("MACHINE_ID is not set either: session ids will not survive a restart");
    }
    Some(SessionSealer::new(machine_id.as_bytes()))
}

/// `/readyz`'s `upstream` probe, for a gateway: what [`Upstream::ready`] says.
pub(super) fn upstream_probe(app: &App) -> Option<Arc<dyn Probe>> {
    let upstream = app.upstream()?.clone();
    Some(Arc::new(UpstreamProbe(upstream)))
}

struct UpstreamProbe(Arc<dyn Upstream>);

#[async_trait::async_trait]
impl Probe for UpstreamProbe {
    fn name(&self) -> &'static str {
        "upstream"
    }

    async fn check(&self) -> ProbeReport {
        match self.0.ready() {
            Ok(()) => ProbeReport {
                healthy: true,
                detail: serde_json::json!({"status": "ok"}),
            },
            Err(why) => ProbeReport {
                healthy: false,
                detail: serde_json::json!({"status": "error", "error": why}),
            },
        }
    }
}
