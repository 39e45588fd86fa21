//! [`App`]: what every request of one server shares, behind one narrow type.
//!
//! The fields are private; callers get the catalog snapshot, the configuration, the sessions,
//! the event and task stores, the list-change channel and the user's state through methods, so
//! how each is held can change without touching them (mini-redis keeps its `Db` the same way).
//! `App` knows nothing of HTTP. Of other instances it knows only the [`Fanout`] distributed mode
//! installs: changes published to the fleet, and notifications handed to the instance that holds
//! a session ([`App::to_holder`]); without one, both stay on this instance.
//!
//! `handle.rs` is [`ServerHandle`]: runtime catalog changes, resource-update announcements, a
//! notification for one session wherever it is held. `lanes.rs` runs the work handed off a
//! caller's path (standalone-stream appends, the fleet channels' messages) on a few worker
//! tasks fed by queues bounded in count and bytes: past a bound an item is dropped and counted,
//! never a task per message.

mod handle;
mod hosts;
mod lanes;

use crate::auth::Authorizer;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub use handle::ServerHandle;
pub(crate) use lanes::{Bound, Lanes};

use crate::catalog::Catalog;
use crate::config::Config;
use crate::events::{EventStore, STANDALONE_STREAM};
use crate::limits::{Budget, Limits, Places};
use crate::session::{Session, Sessions};
use crate::stateless::request_state::RequestStateSealer;
use crate::tasks::Tasks;

/// Name, version and instructions announced to clients.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
    pub instructions: Option<String>,
}

/// A change clients can subscribe to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "change", content = "uri", rename_all = "camelCase")]
pub enum Change {
    ToolsListChanged,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated(String),
}

/// Carries what one instance tells the others of its fleet (distributed mode installs one):
/// the changes a server announces, which reach `subscriptions/listen` streams and subscribed
/// sessions everywhere, and messages for sessions another instance holds.
#[async_trait::async_trait]
pub trait Fanout: Send + Sync + 'static {
    /// Sends `change` to every other instance; best effort, never blocking the caller.
    fn publish(&self, change: &Change);

    /// Hands notification `method` with `params` for the standalone stream of session
    /// `session_id`, which this instance does not hold, to the instance that holds it. `false`
    /// when no live instance took it: the message is dropped, never broadcast.
    async fn to_holder(&self, session_id: &str, method: &str, params: &serde_json::Value) -> bool;
}

/// The values handlers get as their state (`ServerBuilder::state`), one per type. Looked up on
/// most calls (a handler's `State<T>`): keyed by `TypeId`s the compiler makes, hashed with
/// foldhash's fixed-seed hasher rather than SipHash (~220 instructions a call, issue 23).
pub(crate) type StateMap = HashMap<TypeId, Arc<dyn Any + Send + Sync>, foldhash::fast::FixedState>;

/// The state of one server, shared by every request. Cheap to clone.
#[derive(Clone)]
pub(crate) struct App {
    inner: Arc<Inner>,
}

struct Inner {
    info: ServerInfo,
    catalog: ArcSwap<Catalog>,
    config: Config,
    sessions: Sessions,
    events: Arc<dyn EventStore>,
    tasks: Tasks,
    request_state: RequestStateSealer,
    /// Rate and concurrency limits per key.
    limits: Limits,
    /// Bytes of client data kept for sessions and listen streams (`sessions.max_client_data_bytes`).
    client_data: Arc<Budget>,
    /// Open `subscriptions/listen` streams, per key and in all.
    listens: Places,
    /// Catalog and resource changes, for 2026-07-28 `subscriptions/listen` streams.
    changes: broadcast::Sender<Change>,
    /// The graceful stop's tokens.
    phases: Phases,
    started: Instant,
    state: StateMap,
    meters: crate::telemetry::Meters,
    /// Installed once, when distributed mode starts.
    fanout: std::sync::OnceLock<Arc<dyn Fanout>>,
    /// Checks access tokens (`None`: authorization is off).
    auth: Option<Arc<Authorizer>>,
    /// Serves every session's requests in place of the catalog (a gateway), when set.
    upstream: Option<Arc<dyn crate::upstream::Upstream>>,
    /// Messages for sessions' standalone streams, appended off the caller's path
    /// ([`App::push_standalone`]).
    standalone: Lanes<(Arc<str>, Bytes)>,
    /// Set by the first request that carried a client's address this server does not believe
    /// (`transport/http/client_key.rs`), so the warning is logged once, not once a request.
    forwarding_warned: AtomicBool,
    /// `limits.trusted_proxies`, parsed once: every request counted by address matches its
    /// peer against them (parsed per request, they cost ~100 ns each).
    trusted_proxies: Vec<ipnet::IpNet>,
}

/// Workers appending to standalone streams: a session's messages always take the same one (in
/// order); several, so that one session's slow appends do not hold every other's.
const STANDALONE_LANES: usize = 8;
/// What each of them queues at most (8 x 4 MiB for the instance): past it a message for the
/// standalone stream is dropped and counted, as one the store refused would be.
const STANDALONE_BOUND: Bound = Bound {
    count: 256,
    bytes: 4 << 20,
};

/// What an [`App`] is made of (the server builder fills it in).
pub(crate) struct Parts {
    pub info: ServerInfo,
    pub catalog: Catalog,
    pub config: Config,
    pub sessions: Sessions,
    pub events: Arc<dyn EventStore>,
    pub tasks: Tasks,
    pub request_state: RequestStateSealer,
    pub limits: Limits,
    pub phases: Phases,
    pub state: StateMap,
    pub auth: Option<Arc<Authorizer>>,
    pub meters: crate::telemetry::Meters,
    pub upstream: Option<Arc<dyn crate::upstream::Upstream>>,
}

/// The tokens of a server's graceful stop, one per phase ([`App::phases`]), as the app, the
/// accept loop and each connection see them.
#[derive(Clone)]
pub(crate) struct Phases {
    /// The grace period is over: what still runs is cancelled.
    pub shutdown: CancellationToken,
    /// The drain delay is over: stop accepting, and close every connection once its request
    /// is answered.
    pub closing: CancellationToken,
    /// The stop began: every response from now on carries `Connection: close`, so no
    /// connection is used again (a load balancer's request written on a kept-alive connection
    /// the server closes is lost, and a POST is not retried); the instance otherwise serves as
    /// usual. Idle connections are left to their client to close.
    pub draining: CancellationToken,
}

impl Phases {
    /// Each phase a child of the next, so it implies the ones before it: code that checks an
    /// early phase is right whichever way the server was stopped (a signal, `Running::stop`).
    pub fn new() -> Self {
        let shutdown = CancellationToken::new();
        let closing = shutdown.child_token();
        let draining = closing.child_token();
        Self {
            shutdown,
            closing,
            draining,
        }
    }
}

impl App {
    pub fn new(p: Parts) -> Self {
        let (changes, _) = broadcast::channel(256);
        let trusted_proxies = p.config.limits.trusted_nets();
        let client_data = Budget::new(p.config.sessions.max_client_data_bytes);
        let listens = Places::new(
            p.config.limits.max_listen_streams_per_key,
            p.config.stateless.max_listen_streams,
            client_data.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                info: p.info,
                catalog: ArcSwap::from_pointee(p.catalog),
                config: p.config,
                sessions: p.sessions,
                events: p.events.clone(),
                tasks: p.tasks,
                request_state: p.request_state,
                limits: p.limits,
                client_data,
                listens,
                changes,
                phases: p.phases,
                started: Instant::now(),
                state: p.state,
                meters: p.meters,
                fanout: std::sync::OnceLock::new(),
                auth: p.auth,
                upstream: p.upstream,
                standalone: standalone_lanes(p.events),
                forwarding_warned: AtomicBool::new(false),
                trusted_proxies,
            }),
        }
    }

    pub fn info(&self) -> &ServerInfo {
        &self.inner.info
    }
    /// The catalog as it is now (a snapshot: later changes do not affect it).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog.load_full()
    }
    /// Swaps the catalog for a changed copy.
    pub(crate) fn change_catalog(&self, f: impl Fn(&Catalog) -> Catalog) {
        self.inner.catalog.rcu(|c| f(c));
    }
    pub fn config(&self) -> &Config {
        &self.inner.config
    }
    /// The access-token checker, when authorization is on.
    pub fn auth(&self) -> Option<&Arc<Authorizer>> {
        self.inner.auth.as_ref()
    }

    /// Where sessions are served when this server is a gateway (see `upstream/`).
    pub fn upstream(&self) -> Option<&Arc<dyn crate::upstream::Upstream>> {
        self.inner.upstream.as_ref()
    }

    /// This server's metrics.
    pub fn meters(&self) -> &crate::telemetry::Meters {
        &self.inner.meters
    }

    /// `limits.trusted_proxies`, parsed (canonical: see `LimitsConfig::trusted_nets`).
    pub fn trusted_proxies(&self) -> &[ipnet::IpNet] {
        &self.inner.trusted_proxies
    }

    /// True the first time it is called on this server, false after: a plain load first, so
    /// the calls after the first write nothing.
    pub fn first_forwarding_warning(&self) -> bool {
        let warned = &self.inner.forwarding_warned;
        !warned.load(Ordering::Relaxed) && !warned.swap(true, Ordering::Relaxed)
    }

    pub fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }
    pub fn events(&self) -> &Arc<dyn EventStore> {
        &self.inner.events
    }
    pub fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }
    pub fn request_state(&self) -> &RequestStateSealer {
        &self.inner.request_state
    }
    /// Fires when the server stops: sessions end and running handlers are cancelled.
    /// The limits every request is checked against (rate, in flight per key).
    /// The instance's budget of client data bytes.
    pub fn client_data(&self) -> &Arc<Budget> {
        &self.inner.client_data
    }

    /// The open `subscriptions/listen` streams.
    pub fn listens(&self) -> &Places {
        &self.inner.listens
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }
    /// The graceful stop's tokens: `draining` fires when the stop begins (SIGTERM: the
    /// instance still serves, but `/readyz` answers `503` and every response closes its
    /// connection, so load balancers move away), `closing` when it stops accepting connections
    /// (after the drain delay: open streams end so their clients resume on another instance;
    /// running requests go on), `shutdown` when what still runs is cancelled.
    pub fn phases(&self) -> &Phases {
        &self.inner.phases
    }
    /// When the server was built (uptime in `/healthz`).
    pub fn started(&self) -> Instant {
        self.inner.started
    }
    /// Whether the server was given a value of this type with `ServerBuilder::state`.
    pub fn has_state(&self, id: TypeId) -> bool {
        self.inner.state.contains_key(&id)
    }

    /// Follows catalog and resource changes (2026-07-28 `subscriptions/listen`).
    pub fn changes(&self) -> broadcast::Receiver<Change> {
        self.inner.changes.subscribe()
    }
    /// Tells every listener here about a change; nobody listening is not an error.
    pub fn announce(&self, change: Change) {
        let _ = self.inner.changes.send(change);
    }

    /// Sends a change made here to the fleet's other instances, if there is a fleet.
    pub fn publish(&self, change: &Change) {
        if let Some(f) = self.inner.fanout.get() {
            f.publish(change);
        }
    }

    /// Installs the fleet's fanout (once; distributed mode at start).
    pub fn install_fanout(&self, fanout: Arc<dyn Fanout>) {
        let _ = self.inner.fanout.set(fanout);
    }

    /// Hands a message for a session held elsewhere to its holder (see [`Fanout::to_holder`]);
    /// `false` without distributed mode.
    pub async fn to_holder(
        &self,
        session_id: &str,
        method: &str,
        params: &serde_json::Value,
    ) -> bool {
        match self.inner.fanout.get() {
            Some(f) => f.to_holder(session_id, method, params).await,
            None => false,
        }
    }

    /// Appends a message to a session's standalone (GET) stream, off the caller's path: queued
    /// for its lane's worker, or dropped (and counted) when that lane is full.
    pub fn push_standalone(&self, session: &Session, message: Bytes) {
        let size = message.len() + session.id.len();
        self.inner
            .standalone
            .push(&session.id, (session.id.clone(), message), size);
    }

    /// The handle for runtime changes.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle::new(self.clone())
    }
}

/// The lanes of [`App::push_standalone`], appending to `events`.
fn standalone_lanes(events: Arc<dyn EventStore>) -> Lanes<(Arc<str>, Bytes)> {
    Lanes::new(
        "messages for standalone streams",
        STANDALONE_LANES,
        STANDALONE_BOUND,
        move |(id, message): (Arc<str>, Bytes)| {
            let events = events.clone();
            async move {
                if let Err(e) = events.append(&id, STANDALONE_STREAM, message).await {
                    tracing::warn!(session = %crate::session::LogId(&id), error = %e, "could not queue a message for the session's stream");
                }
            }
        },
    )
}
