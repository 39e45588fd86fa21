//! The server: what it is built from ([`ServerBuilder`]), starting what runs besides answering
//! requests ([`Server::start`]), and serving until a signal, with a graceful shutdown.
//!
//! This file is the only place that wires the parts together: [`ServerBuilder::try_build`]
//! checks the handlers' state, makes the connection budget (`limits::Connections`) and puts
//! the `App` together from what `parts.rs` (in memory, the sealers, the meters) and
//! `shared.rs` (in Redis: the connection, the stores, the limits, distributed mode's seams)
//! make of the configuration; [`Server::start`] starts the Redis connection, the idle-session
//! sweeper and distributed mode (`fleet::Fleet`, with its seams) and only then returns the
//! routes, so an embedding app cannot forget them; `serve` binds only after that. Without the
//! `redis` feature `local.rs` stands in for `shared.rs` (the same names, everything in memory,
//! no fleet) and refuses at start a configuration that names Redis or distributed mode; the
//! `use ... as backing` below is the one place the server decides on the feature. Every builder method is order-independent: nothing takes effect before
//! `try_build` (or `build`, which panics where `try_build` errs).
//!
//! The other files: `listener.rs`, the accept loop and the bounds on every connection;
//! `stdio.rs`, what [`Server::serve`] runs for [`Transport::Stdio`] (no listener, no fleet, no
//! idle sweeper); `run.rs`, [`run()`], a server binary's whole `main` (the `fleet`
//! subcommand to `ops.rs`, `init_tracing`, `Config::load`: exit 2, the program's builder: exit
//! 2, `serve`: exit 1); `heap.rs`, glibc's mapping threshold set at start, so large blocks
//! freed after a burst go back to the system. `routes_test.rs` compares the direct `/mcp`
//! path with the router's, `seams_test.rs` tests the holder and relay seams together with
//! stand-in implementations.
//!
//! # The graceful stop
//!
//! On SIGTERM or SIGINT ([`Running::serve_on`]), three phases, one token each in
//! `app::Phases` (`draining`, a child of `closing`, a child of `shutdown`, so a later phase
//! implies the earlier ones however the server is stopped):
//!
//! 1. `draining`, for `http.drain_ms` ([`Config::drain_delay`]: 5 s when the instance is likely
//!    behind a load balancer, 0 for a lone in-memory server): `/readyz` answers `503`, every
//!    response gets `Connection: close`, and the fleet withdraws (`Fleet::withdraw`: the
//!    heartbeat's renewal, the scanner and the channel subscription stop, then the heartbeat is
//!    deleted and `[HA] Services stopped for node <id>` logged), so the others take its
//!    sessions over at once while it still serves whatever reaches it. It closes no idle
//!    connection itself: a request a load balancer writes on a connection the server closes is
//!    lost, so that is left to the client.
//! 2. `closing`: the accept loop serves the connections already in the kernel's accept queue and
//!    closes the listener; each connection closes once its request is answered and it has been
//!    idle for a second; GET streams and `subscriptions/listen` end, 2024-11-05 streams once
//!    their session's running requests have answered on them; requests in flight run on for
//!    `http.shutdown_grace_ms`.
//! 3. `shutdown`: what still runs is cancelled (sessions end), background work stops, `stopped`
//!    is logged with the stop's duration. At most drain + grace + about a second.
//!
//! A relayed request that reaches an instance which no longer holds its session (taken over
//! meanwhile, typically by the relaying instance itself during a drain) is sent back unserved,
//! marked `x-fleetmcp-relay-moved`, and the relaying instance looks the session up again (a
//! request is relayed once at most). `deploy/nginx/fleetmcp.conf` and `docs/DEPLOYMENT.md` are
//! the load balancer's side.

use crate::auth::Authorizer;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::app::{App, Parts, ServerHandle, ServerInfo, StateMap};
use crate::catalog::{BuildError, Catalog, PromptDef, ResourceDef, TemplateDef, ToolDef};
use crate::config::{Config, DeploymentMode, Transport};
use crate::events::EventStore;
use crate::machine_id;
use crate::session::{Holders, Lease, SessionStore, Sessions};
use crate::tasks::TaskStore;
use crate::transport::{self, Relay, Seams};
use crate::upstream::Upstream;
use backing::{Shared, Started, session_stores};
use parts::{as_served, meters_for, request_state_sealer, sealer_for, session_timing};

/// Declares a server. Every method may be called in any order: nothing takes effect before
/// [`ServerBuilder::build`]. See the crate documentation for a complete example.
pub struct ServerBuilder {
    info: ServerInfo,
    tools: Vec<Arc<ToolDef>>,
    resources: Vec<Arc<ResourceDef>>,
    templates: Vec<Arc<TemplateDef>>,
    prompts: Vec<Arc<PromptDef>>,
    config: Option<Config>,
    store: Option<Arc<dyn SessionStore>>,
    events: Option<Arc<dyn EventStore>>,
    tasks: Option<Arc<dyn TaskStore>>,
    state: StateMap,
    holders: Option<Arc<dyn Holders>>,
    relay: Option<Arc<dyn Relay>>,
    upstream: Option<Arc<dyn Upstream>>,
}

impl ServerBuilder {
    /// Instructions announced to clients in `initialize` and `server/discover`.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.info.instructions = Some(text.into());
        self
    }
    /// Adds a tool (see [`crate::tool`]).
    pub fn tool(mut self, def: Arc<ToolDef>) -> Self {
        self.tools.push(def);
        self
    }
    /// Adds a resource (see [`crate::resource`]).
    pub fn resource(mut self, def: Arc<ResourceDef>) -> Self {
        self.resources.push(def);
        self
    }
    /// Adds a resource template (see [`crate::template`]).
    pub fn template(mut self, def: Arc<TemplateDef>) -> Self {
        self.templates.push(def);
        self
    }
    /// Adds a prompt (see [`crate::prompt`]).
    pub fn prompt(mut self, def: Arc<PromptDef>) -> Self {
        self.prompts.push(def);
        self
    }
    /// The configuration (default: [`Config::default`]; binaries use [`Config::load`]). When it
    /// names Redis (`REDIS_URL`, `[redis]`), sessions and SSE events are kept there, unless a
    /// store is given explicitly.
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }
    /// Gives the server a value of type `T` (one per type: a database pool, a client, the
    /// application's own state) for the handlers that name it with `.state::<T>()` (see
    /// [`ToolBuilder::state`](crate::catalog::ToolBuilder::state)); they get it as an `Arc<T>`.
    /// [`ServerBuilder::try_build`] refuses a server whose handlers need a type it was not
    /// given.
    ///
    /// ```
    /// use fleetmcp::{NoArgs, Server, tool};
    /// use parking_lot::Mutex;
    ///
    /// #[derive(Default)]
    /// struct Counter(Mutex<u64>);
    ///
    /// let server = Server::builder("counter", "1.0.0")
    ///     .state(Counter::default())
    ///     .tool(tool("bump").state::<Counter>().handler(|_: NoArgs, _ctx, counter| async move {
    ///         let mut n = counter.0.lock();
    ///         *n += 1;
    ///         Ok(n.to_string())
    ///     }))
    ///     .build();
    /// # drop(server);
    /// ```
    pub fn state<T: Send + Sync + 'static>(self, value: T) -> Self {
        self.shared_state(Arc::new(value))
    }
    /// Like [`ServerBuilder::state`], for a value the program also keeps a handle on (code
    /// outside handlers, such as a background job, uses it too).
    pub fn shared_state<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.state.insert(std::any::TypeId::of::<T>(), value);
        self
    }
    /// Makes the server a gateway: every session's requests go to an upstream MCP server that
    /// `upstream` connects, one per session on the instance holding it, instead of to the
    /// declared tools, resources and prompts (see [`Upstream`]). The fleet's relay, takeover,
    /// fencing, authorization, limits and metrics apply as to any session. Session-era clients
    /// only: a 2026-07-28 request is refused.
    pub fn upstream(mut self, upstream: impl Upstream) -> Self {
        self.upstream = Some(Arc::new(upstream));
        self
    }
    /// Replaces the session store the configuration would choose. Not API: the store traits are
    /// the runtime's own seams (see [`crate::internals`]), for its tests.
    #[cfg(feature = "testkit")]
    #[doc(hidden)]
    pub fn session_store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }
    /// Replaces the task store (in Redis when the server has Redis, else in memory). Not API,
    /// as [`ServerBuilder::session_store`].
    #[cfg(feature = "testkit")]
    #[doc(hidden)]
    pub fn task_store(mut self, tasks: Arc<dyn TaskStore>) -> Self {
        self.tasks = Some(tasks);
        self
    }
    /// Replaces the event store the configuration would choose. Not API, as
    /// [`ServerBuilder::session_store`].
    #[cfg(feature = "testkit")]
    #[doc(hidden)]
    pub fn event_store(mut self, events: Arc<dyn EventStore>) -> Self {
        self.events = Some(events);
        self
    }
    /// Installs the seams distributed mode plugs into (tests of the seams use them directly).
    #[cfg(test)]
    pub(crate) fn seams(mut self, holders: Arc<dyn Holders>, relay: Arc<dyn Relay>) -> Self {
        self.holders = Some(holders);
        self.relay = Some(relay);
        self
    }

    /// Builds the server, as [`ServerBuilder::try_build`], and panics where it returns an
    /// error: for tests and programs whose declarations are fixed, where a missing state is a
    /// bug to see at the first start.
    ///
    /// # Panics
    ///
    /// When a handler needs state the server was not given; the message names each one and
    /// the type.
    pub fn build(self) -> Server {
        match self.try_build() {
            Ok(server) => server,
            Err(e) => panic!("{e}"),
        }
    }

    /// Builds the server. Nothing runs and nothing is connected yet: [`Server::start`] (or
    /// [`Server::serve`]) does that. Fails when a tool, resource, template or prompt needs
    /// state (`.state::<T>()`) the server was not given with [`ServerBuilder::state`]; the
    /// error names each one and the type.
    pub fn try_build(self) -> Result<Server, BuildError> {
        let catalog = Catalog::new(self.tools, self.resources, self.templates, self.prompts);
        catalog.check_state(|id| self.state.contains_key(&id))?;
        let config = as_served(self.config.unwrap_or_default());
        let meters = meters_for(&config);
        let (machine_id, source) = machine_id::resolve(&config);
        let sealer = sealer_for(&config, &machine_id, source);
        // One budget for the listener's connections and the relay's sockets.
        let connections = listener::connection_budget(&config.http);
        // Renewed by the heartbeat (distributed mode); read by the fleet's liveness checks.
        let lease = Arc::new(Lease::default());
        let (store, events, mut shared) = session_stores(
            &config,
            &meters,
            &machine_id,
            &lease,
            self.store,
            self.events,
        );
        let request_state = request_state_sealer(&config);
        let phases = crate::app::Phases::new();
        let shutdown = phases.shutdown.clone();
        let tasks = shared.tasks(&config, self.tasks, &machine_id, &lease);
        let (holders, relay) = shared.seams(
            &config,
            &machine_id,
            phases.closing.clone(),
            &connections,
            &meters,
            &lease,
            (self.holders, self.relay),
        );
        let sessions = Sessions::new(
            machine_id,
            sealer,
            config.sessions.max_sessions,
            store,
            events.clone(),
            holders,
            session_timing(&config),
            shutdown.clone(),
        )
        .with_lease(lease);
        let (auth, auth_error) =
            Authorizer::new(&config.auth).map_or_else(|e| (None, Some(e)), |a| (a, None));
        let limits = shared.limits(&config, sessions.machine_id(), shutdown);
        let app = App::new(Parts {
            info: self.info,
            catalog,
            config,
            sessions,
            events,
            tasks,
            request_state,
            limits,
            phases,
            state: self.state,
            auth,
            meters,
            upstream: self.upstream,
        });
        Ok(Server {
            app,
            auth_error,
            shared,
            relay,
            connections,
        })
    }
}

/// A built server: start it and embed its routes ([`Server::start`]), or serve it
/// ([`Server::serve`], [`Server::serve_on`]).
///
/// ```no_run
/// use fleetmcp::{Config, NoArgs, Server, tool};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let server = Server::builder("hello", "1.0.0")
///     .tool(tool("hello").handler(|_: NoArgs, _ctx| async { Ok("Hello!") }))
///     .config(Config::load()?)
///     .build();
/// // Or `server.start().await?` for the routes, to merge into a larger axum app.
/// server.serve().await?;
/// # Ok(()) }
/// ```
pub struct Server {
    app: App,
    /// What it has of Redis (feature `redis`).
    shared: Shared,
    relay: Option<Arc<dyn Relay>>,
    /// Why `[auth]` could not be set up: the server refuses to start rather than run open.
    auth_error: Option<String>,
    /// The connection budget the listener and the relay share.
    connections: crate::limits::Connections,
}

impl Server {
    /// Starts declaring a server.
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> ServerBuilder {
        ServerBuilder {
            info: ServerInfo {
                name: name.into(),
                version: version.into(),
                instructions: None,
            },
            tools: Vec::new(),
            resources: Vec::new(),
            templates: Vec::new(),
            prompts: Vec::new(),
            config: None,
            store: None,
            events: None,
            tasks: None,
            state: StateMap::default(),
            holders: None,
            relay: None,
            upstream: None,
        }
    }

    /// The handle for runtime changes (add or remove tools, announce resource updates).
    pub fn handle(&self) -> ServerHandle {
        self.app.handle()
    }

    /// The machine id this instance resolved at build time.
    pub fn machine_id(&self) -> &str {
        self.app.sessions().machine_id()
    }

    /// Starts what the server runs besides answering requests (the Redis connection, the
    /// expiry of idle sessions, distributed mode), and returns its routes, to serve or to embed
    /// in a larger axum app. The routes exist only once all that is running, so it cannot be
    /// forgotten.
    ///
    /// ```no_run
    /// # async fn run() -> std::io::Result<()> {
    /// let server = fleetmcp::Server::builder("embedded", "1.0.0").build();
    /// let running = server.start().await?;
    /// let app = axum::Router::new().merge(running.router());
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    /// axum::serve(listener, app).await?;
    /// running.stop().await;
    /// # Ok(()) }
    /// ```
    pub async fn start(self) -> std::io::Result<Running> {
        heap::return_large_blocks();
        let app = self.app;
        if let Some(why) = self.auth_error {
            tracing::error!("{why}");
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
        }
        if app.config().deployment_mode == DeploymentMode::Distributed
            && app.config().session_secret.is_none()
        {
            // `Config::load` refuses this already; a configuration built in code gets the same.
            let why = "MCP_SESSION_SECRET is required in distributed mode";
            tracing::error!("{why}");
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
        }
        // Before the routes exist; refused without the `redis` feature when the configuration
        // needs it.
        self.shared.connect(&app).await?;
        let limits = &app.config().limits;
        if limits.client_address_header.is_some() && limits.trusted_proxies.is_empty() {
            // Documented, but it fails open: anyone who reaches the port picks the address
            // their requests count against, so the operator hears it at every start.
            tracing::warn!(
                header = limits.client_address_header.as_deref().unwrap_or_default(),
                "FLEETMCP_CLIENT_ADDRESS_HEADER is set without FLEETMCP_TRUSTED_PROXIES: the header is believed from any peer, so a client can choose the address its limits count against; list the load balancers in FLEETMCP_TRUSTED_PROXIES"
            );
        }
        let fleet = self.shared.start_fleet(&app).await?;
        let seams = Seams {
            relay: self.relay,
            probes: fleet
                .probes()
                .into_iter()
                .chain(parts::upstream_probe(&app))
                .collect(),
            gate: fleet.gate(),
        };
        let routes = transport::routes(app.clone(), seams);
        let sweeper = tokio::spawn(sweep_idle(app.clone()));
        tokio::spawn(app.meters().clone().upkeep(app.phases().shutdown.clone()));
        Ok(Running {
            app,
            routes,
            fleet,
            sweeper,
            connections: self.connections,
        })
    }

    /// Starts (see [`Server::start`]), then binds as configured and serves until SIGTERM or
    /// SIGINT, then stops gracefully (see [`Running::serve_on`]); a second signal during the
    /// drain delay cuts it short. The port is bound only once the server is ready, so a load
    /// balancer never sees an open port that answers nothing (distributed mode's start talks to
    /// Redis first).
    ///
    /// With [`Config::transport`] `stdio` (`FLEETMCP_TRANSPORT=stdio`) it serves one session
    /// on stdin and stdout instead, binding nothing, until stdin closes or a signal comes (see
    /// `transport/stdio/`).
    pub async fn serve(self) -> std::io::Result<()> {
        heap::return_large_blocks();
        // Where the transports are chosen: one arm each.
        let transport = self.app.config().transport;
        match transport {
            Transport::Http => self.serve_http().await,
            Transport::Stdio => self.serve_stdio().await,
        }
    }

    /// [`Server::serve`] over HTTP.
    async fn serve_http(self) -> std::io::Result<()> {
        let cfg = self.app.config();
        let addr = SocketAddr::new(cfg.effective_bind().ip(), cfg.port);
        let running = self.start().await?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        // The second signal is listened for only once the first arrived: a listener made
        // earlier would see the first one too.
        running
            .serve_until(listener, shutdown_signal(), shutdown_signal)
            .await
    }

    /// Serves on an already bound listener until `stop` completes, then stops gracefully (see
    /// [`Running::serve_on`]).
    pub async fn serve_on(
        self,
        listener: TcpListener,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.start().await?.serve_on(listener, stop).await
    }
}

/// A started server: its routes, and what runs beside them until [`Running::stop`].
pub struct Running {
    app: App,
    routes: transport::Routes,
    /// Distributed mode, when it runs.
    fleet: Started,
    sweeper: JoinHandle<()>,
    /// The connection budget the listener and the relay share.
    connections: crate::limits::Connections,
}

impl Running {
    /// The HTTP routes (`/mcp`, `/sse`, `/message`, `/healthz`, `/readyz`, and `/metrics`
    /// unless `http.metrics` is off).
    pub fn router(&self) -> Router {
        self.routes.router()
    }

    /// The handle for runtime changes.
    pub fn handle(&self) -> ServerHandle {
        self.app.handle()
    }

    /// Serves on `listener` until `stop` completes, then stops gracefully, in three phases:
    ///
    /// 1. **drain** (`http.drain_ms`, see [`Config::drain_delay`]): `/readyz` answers `503`,
    ///    every response carries `Connection: close`, and in distributed mode the heartbeat is
    ///    deleted (the others take this instance's sessions over from now on); everything else
    ///    is served as usual, so whatever a load balancer still sends is answered;
    /// 2. **close**: the listener closes (a new connection is refused, which a load balancer
    ///    retries elsewhere), open SSE streams end (their clients resume elsewhere with
    ///    `Last-Event-ID`), and requests in flight finish within `http.shutdown_grace_ms`;
    /// 3. what still runs is cancelled, background work stops, and this returns: within
    ///    `drain_ms + shutdown_grace_ms` and about a second.
    ///
    /// Every connection is bounded (`http.*_timeout_ms`, `http.max_connections`; see
    /// `server/listener.rs`).
    pub async fn serve_on(
        self,
        listener: TcpListener,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.serve_until(listener, stop, std::future::pending::<()>)
            .await
    }

    /// [`Running::serve_on`], with `cut_drain`, made once `stop` completed, ending the drain
    /// delay early when it completes (a second signal).
    async fn serve_until<F>(
        self,
        listener: TcpListener,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
        cut_drain: impl FnOnce() -> F + Send + 'static,
    ) -> std::io::Result<()>
    where
        F: std::future::Future<Output = ()> + Send,
    {
        let local = listener.local_addr()?;
        log_startup(&self.app, local);
        self.fleet.listening_on(local);
        let app = self.app.clone();
        let http = &app.config().http;
        let grace = Duration::from_millis(http.shutdown_grace_ms);
        let drain = app.config().drain_delay();
        let limits = listener::ConnectionBounds::from_config(http, self.connections.clone());
        let phases = app.phases().clone();
        let began = Arc::new(std::sync::OnceLock::<tokio::time::Instant>::new());
        // The operator's drain request (distributed mode) stops the server as `stop` does.
        let requested = self.fleet.drain_requested();
        let stop = async move {
            match requested {
                Some(requested) => tokio::select! {
                    _ = stop => {}
                    _ = requested.cancelled() => {}
                },
                None => stop.await,
            }
        };
        let stopping = {
            let (app, fleet, began) = (app.clone(), self.fleet.clone(), began.clone());
            tokio::spawn(async move {
                stop.await;
                let t0 = tokio::time::Instant::now();
                let _ = began.set(t0);
                tracing::info!(
                    drain_ms = drain.as_millis() as u64,
                    grace_ms = grace.as_millis() as u64,
                    "shutting down: draining for {} ms (/readyz answers 503, responses carry Connection: close), then closing streams and finishing requests within {} ms",
                    drain.as_millis(),
                    grace.as_millis()
                );
                app.phases().draining.cancel();
                fleet.withdraw().await;
                let cut = cut_drain();
                tokio::select! {
                    _ = tokio::time::sleep_until(t0 + drain) => {}
                    _ = cut => tracing::info!("second signal: ending the drain delay now"),
                    // Stopped some other way meanwhile (`Running::stop` by an embedder).
                    _ = app.phases().closing.cancelled() => {}
                }
                tracing::info!("drain delay over: closing");
                app.phases().closing.cancel();
            })
        };
        let drained = listener::serve(listener, self.routes.clone(), limits, phases, grace).await;
        if !drained {
            tracing::warn!(
                "graceful shutdown took longer than {} ms; exiting",
                grace.as_millis()
            );
        }
        stopping.abort();
        self.stop().await;
        let took = began.get().map_or(0, |t| t.elapsed().as_millis() as u64);
        tracing::info!(shutdown_ms = took, "stopped");
        Ok(())
    }

    /// Stops at once: open streams and sessions end, running handlers are cancelled,
    /// background work stops, and in distributed mode the heartbeat is deleted. (Serving with
    /// [`Running::serve_on`] stops gracefully first.)
    pub async fn stop(self) {
        self.app.phases().shutdown.cancel();
        self.sweeper.abort();
        self.fleet.stop().await;
    }
}

/// Drops sessions nobody used for `sessions.idle_ttl_ms`.
async fn sweep_idle(app: App) {
    let idle = Duration::from_millis(app.config().sessions.idle_ttl_ms);
    let period = (idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        app.sessions().expire_idle(idle).await;
    }
}

fn log_startup(app: &App, local: SocketAddr) {
    let cat = app.catalog();
    let cfg = app.config();
    tracing::info!(
        server = %app.info().name,
        version = %app.info().version,
        machine_id = %app.sessions().machine_id(),
        deployment = cfg.deployment_mode.as_str(),
        session_store = app.sessions().store_kind(),
        tools = cat.tool_count(),
        "listening on http://{local}/mcp"
    );
    if cfg.effective_bind().is_loopback() {
        tracing::info!(audit = "BIND_RESTRICTED", "bound to loopback only")
    } else if cfg.deployment_mode == DeploymentMode::Distributed {
        tracing::info!(
            audit = "BIND_ALL_INTERFACES_DISTRIBUTED",
            "bound to every interface (distributed mode)"
        )
    } else {
        tracing::warn!(
            audit = "BIND_ALL_INTERFACES",
            "bound to every interface outside distributed mode"
        )
    }
}

/// Completes on SIGTERM or SIGINT received after the call.
///
/// The handlers are installed when this is called, not when the future is first polled: a
/// server busy before it polls (stdio answers the first line on stdin before its loop looks
/// at the signal) would otherwise leave a SIGTERM in between to the default action, and the
/// process killed rather than stopped (seen as exit "signal 15" instead of 0 under load).
/// Call it inside a Tokio runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let listeners = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        )
    };
    async move {
        #[cfg(unix)]
        if let (Ok(mut term), Ok(mut int)) = listeners {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

// Redis and the fleet: `shared.rs` with the `redis` feature, `local.rs` (the same names,
// everything in memory, a configuration needing Redis refused at start) without. The one place
// the server decides on the feature.
#[cfg(not(feature = "redis"))]
use local as backing;
#[cfg(feature = "redis")]
use shared as backing;

mod heap;
mod listener;
#[cfg(test)]
mod listener_test;
#[cfg(not(feature = "redis"))]
mod local;
mod parts;
#[cfg(test)]
mod routes_test;
mod run;
#[cfg(test)]
mod seams_test;
#[cfg(feature = "redis")]
mod shared;
mod stdio;
#[cfg(test)]
mod stdio_test;
mod test_client;
mod when_woken;
mod write_deadline;

pub use run::run;
pub use test_client::{TestClient, TestClientBuilder};
