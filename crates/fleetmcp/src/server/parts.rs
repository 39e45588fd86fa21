//! What [`super::ServerBuilder::build`] assembles from the configuration besides Redis and the
//! fleet (`shared.rs`): the stores and tasks in memory, the meters, the sealers and the session
//! timing.

use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::config::{Config, DeploymentMode, Transport};
use crate::events::{EventStore, MemoryEventStore};
use crate::machine_id::MachineIdSource;
use crate::session::{Holders, MemorySessionStore, SessionSealer, SessionStore, Timing};
use crate::stateless::request_state::{RequestStateSealer, StateSecrets};
use crate::tasks::{MemoryTaskStore, TaskLimits, TaskStore, Tasks};
use crate::telemetry::Meters;
use crate::transport::{Probe, ProbeReport, Relay};
use crate::upstream::Upstream;

/// The seams a request for a session not held here meets: who serves a stored session, and
/// how a request reaches its holder (distributed mode's, or a test's).
pub(super) type HolderSeams = (Option<Arc<dyn Holders>>, Option<Arc<dyn Relay>>);

/// The meters, or none when `http.metrics` is off (every call then a no-op).
pub(super) fn meters_for(config: &Config) -> Meters {
    if config.http.metrics {
        Meters::new()
    } else {
        Meters::disabled()
    }
}

/// The configuration as the server runs it. With stdio (see `Config::transport`), log lines leave
/// stdout before anything logs (it is the client's from now on), and Redis is left to the
/// application: the one session lives in this process, so nothing of it is stored there.
pub(super) fn as_served(mut config: Config) -> Config {
    if config.transport == Transport::Stdio {
        crate::telemetry::logs::keep_stdout_for_messages();
        config.redis = None;
    }
    config
}

/// The stores of sessions and SSE events: the ones given, else in memory (where a server
/// without Redis keeps them, `shared.rs` or `local.rs`).
pub(super) fn in_memory(
    config: &Config,
    store: Option<Arc<dyn SessionStore>>,
    events: Option<Arc<dyn EventStore>>,
) -> (Arc<dyn SessionStore>, Arc<dyn EventStore>) {
    let sessions = &config.sessions;
    let idle = Duration::from_millis(sessions.idle_ttl_ms);
    let store = store.unwrap_or_else(|| Arc::new(MemorySessionStore::new(idle)));
    let events = events.unwrap_or_else(|| {
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
    (store, events)
}

/// The tasks, in the store `given`, else in memory (each instance its own).
pub(super) fn memory_tasks(config: &Config, given: Option<Arc<dyn TaskStore>>) -> Tasks {
    let store = given
        .unwrap_or_else(|| Arc::new(MemoryTaskStore::new(TaskLimits::from_config(&config.tasks))));
    Tasks::new(store, &config.tasks)
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
    if cfg.transport == Transport::Stdio {
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
