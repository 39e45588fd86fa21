//! The server: what it was built with ([`ServerBuilder`]), the state every request shares
//! ([`Shared`]), the handle handlers use to change it at runtime ([`ServerHandle`]), and the
//! listener loop with its graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::catalog::{Catalog, PromptDef, ResourceDef, TemplateDef, ToolDef};
use crate::config::{Config, DeploymentMode};
use crate::events::{EventStore, MemoryEventStore, STANDALONE_STREAM};
use crate::machine_id::{self, MachineIdSource};
use crate::protocol::encode_notification;
use crate::session::{LiveSessions, MemorySessionStore, Session, SessionSealer, SessionStore};
use crate::stateless::request_state::{KeySource, RequestStateSealer};
use crate::tasks::{MemoryTaskStore, Runner, TaskStore};

/// Name, version and instructions announced to clients.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
    pub instructions: Option<String>,
}

/// State shared by every request of one server.
pub(crate) struct Shared {
    pub info: ServerInfo,
    pub catalog: ArcSwap<Catalog>,
    pub config: Config,
    pub machine_id: String,
    /// `None` in production without `MCP_SESSION_SECRET`: no session id can be minted.
    pub sealer: Option<SessionSealer>,
    pub live: LiveSessions,
    pub store: Arc<dyn SessionStore>,
    pub events: Arc<dyn EventStore>,
    pub shutdown: CancellationToken,
    pub started: Instant,
    /// Seals the `requestState` of 2026-07-28 multi-round requests.
    pub request_state: RequestStateSealer,
    /// Catalog and resource changes, for 2026-07-28 `subscriptions/listen` streams.
    pub changes: broadcast::Sender<Change>,
    /// Records of background tasks.
    pub tasks: Arc<dyn TaskStore>,
    /// Tasks running on this instance.
    pub runner: Runner,
    /// The Redis connection the stores share, when Redis is configured.
    pub redis: Option<crate::session::RedisSessionStore>,
    /// Distributed mode's HA manager, once started.
    pub ha: arc_swap::ArcSwapOption<crate::cluster::Ha>,
}

/// A change clients can subscribe to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    ToolsListChanged,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated(String),
}

impl Shared {
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }
}

/// Declares a server. See the crate documentation for a complete example.
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
    redis: Option<crate::session::RedisSessionStore>,
}

impl ServerBuilder {
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.info.instructions = Some(text.into());
        self
    }
    pub fn tool(mut self, def: Arc<ToolDef>) -> Self {
        self.tools.push(def);
        self
    }
    pub fn resource(mut self, def: Arc<ResourceDef>) -> Self {
        self.resources.push(def);
        self
    }
    pub fn template(mut self, def: Arc<TemplateDef>) -> Self {
        self.templates.push(def);
        self
    }
    pub fn prompt(mut self, def: Arc<PromptDef>) -> Self {
        self.prompts.push(def);
        self
    }
    /// The configuration (default: [`Config::default`]; binaries use [`Config::load`]).
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }
    /// Connects the stores the configuration names (Redis when `redis` is set) unless one
    /// was given explicitly. An unreachable Redis does not stop the server: sessions live in
    /// memory, the connection is retried in the background, and `/readyz` answers 503 until
    /// Redis answers.
    pub async fn connect_stores(mut self) -> Self {
        if self.store.is_some() {
            return self;
        }
        let Some(mut redis) = self.config.as_ref().and_then(|c| c.redis.clone()) else {
            return self;
        };
        // The existence check is bounded by `sessions.check_timeout_ms`; a shorter command
        // timeout would cut it short.
        if let Some(cfg) = &self.config {
            redis.command_timeout_ms = redis.command_timeout_ms.max(cfg.sessions.check_timeout_ms);
        }
        match crate::session::RedisSessionStore::connect_in_background(redis).await {
            Ok(store) => {
                if self.events.is_none() {
                    let (max_len, ttl_ms) = self
                        .config
                        .as_ref()
                        .map(|c| (c.sessions.max_events_per_stream, c.sessions.event_ttl_ms))
                        .unwrap_or((1024, 300_000));
                    self.events = Some(Arc::new(crate::events::RedisEventStore::new(
                        store.clone(),
                        max_len,
                        ttl_ms,
                    )));
                    tracing::info!("EventStore initialized for SSE resumability");
                }
                self.redis = Some(store.clone());
                self.store = Some(Arc::new(store));
            }
            Err(e) => tracing::error!(
                error = %e,
                "[TransportService] Failed to create session store - session persistence disabled"
            ),
        }
        self
    }

    /// Replaces the in-memory session store.
    pub fn session_store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }
    /// Replaces the in-memory task store.
    pub fn task_store(mut self, tasks: Arc<dyn TaskStore>) -> Self {
        self.tasks = Some(tasks);
        self
    }
    /// Replaces the in-memory event store.
    pub fn event_store(mut self, events: Arc<dyn EventStore>) -> Self {
        self.events = Some(events);
        self
    }

    pub fn build(self) -> Server {
        let config = self.config.unwrap_or_default();
        let (machine_id, source) = machine_id::resolve(&config);
        let sealer = sealer_for(&config, &machine_id, source);
        let idle = Duration::from_millis(config.sessions.idle_ttl_ms);
        let store = self
            .store
            .unwrap_or_else(|| Arc::new(MemorySessionStore::new(idle)));
        let events = self.events.unwrap_or_else(|| {
            Arc::new(MemoryEventStore::new(
                config.sessions.max_events_per_stream,
                config.sessions.max_streams_per_session,
            ))
        });
        let catalog = Catalog::new(self.tools, self.resources, self.templates, self.prompts);
        let request_state =
            RequestStateSealer::new(config.vault_secret.as_deref(), config.jwt_secret.as_deref());
        if request_state.source == KeySource::PerProcess
            && config.deployment_mode == DeploymentMode::Distributed
        {
            // Another instance cannot open a state this one sealed; a fleet needs a shared secret.
            tracing::warn!(
                "requestState is signed with a per-process key: set VAULT_SECRET or JWT_SECRET on every instance"
            );
        }
        let (changes, _) = broadcast::channel(256);
        let shared = Arc::new(Shared {
            info: self.info,
            catalog: ArcSwap::from_pointee(catalog),
            live: LiveSessions::new(config.sessions.max_sessions),
            config,
            machine_id,
            sealer,
            store,
            events,
            shutdown: CancellationToken::new(),
            started: Instant::now(),
            request_state,
            changes,
            tasks: self
                .tasks
                .unwrap_or_else(|| Arc::new(MemoryTaskStore::default())),
            runner: Runner::default(),
            redis: self.redis,
            ha: arc_swap::ArcSwapOption::empty(),
        });
        Server { shared }
    }
}

fn sealer_for(cfg: &Config, machine_id: &str, source: MachineIdSource) -> Option<SessionSealer> {
    if let Some(secret) = &cfg.session_secret {
        return Some(SessionSealer::new(secret.as_bytes()));
    }
    if cfg.is_production() {
        tracing::error!(
            "MCP_SESSION_SECRET is not set: in production no session id can be issued, and `initialize` from clients before MCP 2026-07-28 answers 500"
        );
        return None;
    }
    if cfg.deployment_mode == DeploymentMode::Distributed {
        // The machine id is published in every response header in this mode, so a key made
        // from it would be public. A per-process key keeps ids sealed, at the cost of not
        // surviving a restart or crossing instances: set MCP_SESSION_SECRET.
        tracing::warn!(
            "MCP_SESSION_SECRET is not set: session ids are sealed with a per-process key and no other instance can serve them"
        );
        let key: [u8; 32] = rand::random();
        return Some(SessionSealer::new(&key));
    }
    tracing::warn!(
        "[SessionIdUtils] Using machine ID as session encryption secret - NOT SECURE FOR PRODUCTION. Set MCP_SESSION_SECRET."
    );
    if source == MachineIdSource::Random {
        tracing::warn!("MACHINE_ID is not set either: session ids will not survive a restart");
    }
    Some(SessionSealer::new(machine_id.as_bytes()))
}

/// A built server, ready to serve.
pub struct Server {
    shared: Arc<Shared>,
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
            redis: None,
        }
    }

    /// The handle for runtime changes (add or remove tools, announce resource updates).
    pub fn handle(&self) -> ServerHandle {
        ServerHandle::new(self.shared.clone())
    }

    /// The machine id this instance resolved at build time.
    pub fn machine_id(&self) -> &str {
        &self.shared.machine_id
    }

    /// The HTTP routes (`/mcp`, `/healthz`, `/readyz`), to embed in a larger axum app.
    pub fn router(&self) -> axum::Router {
        crate::transport::router(self.shared.clone())
    }

    /// Binds as configured and serves until SIGTERM or SIGINT.
    pub async fn serve(self) -> std::io::Result<()> {
        let addr = SocketAddr::new(
            self.shared.config.effective_bind().ip(),
            self.shared.config.port,
        );
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        self.serve_on(listener, shutdown_signal()).await
    }

    /// Serves on an already bound listener until `stop` completes, then drains open requests
    /// for at most `http.shutdown_grace_ms`.
    pub async fn serve_on(
        self,
        listener: TcpListener,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        use axum::serve::ListenerExt;
        let local = listener.local_addr()?;
        let shared = self.shared.clone();
        log_startup(&shared, local);
        if shared.config.deployment_mode == DeploymentMode::Distributed {
            start_ha(&shared).await?;
        }
        let sweeper = tokio::spawn(sweep_idle(shared.clone()));
        // Nagle's algorithm meeting delayed ACKs stalls small SSE writes by ~40 ms.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let token = shared.shutdown.clone();
        let grace = Duration::from_millis(shared.config.http.shutdown_grace_ms);
        let stop_token = token.clone();
        tokio::spawn(async move {
            stop.await;
            tracing::info!("shutting down: closing streams and draining requests");
            stop_token.cancel();
        });
        let app = self.router();
        let serve =
            axum::serve(listener, app).with_graceful_shutdown(token.clone().cancelled_owned());
        let drained = async {
            token.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        let result = tokio::select! {
            r = serve.into_future() => r,
            _ = drained => {
                tracing::warn!("graceful shutdown took longer than {} ms; exiting", grace.as_millis());
                Ok(())
            }
        };
        sweeper.abort();
        if let Some(ha) = shared.ha.load_full() {
            ha.stop().await;
        }
        tracing::info!("stopped");
        result
    }
}

fn log_startup(shared: &Shared, local: SocketAddr) {
    let cat = shared.catalog();
    tracing::info!(
        server = %shared.info.name,
        version = %shared.info.version,
        machine_id = %shared.machine_id,
        deployment = shared.config.deployment_mode.as_str(),
        session_store = shared.store.kind(),
        tools = cat.tool_count(),
        "listening on http://{local}/mcp"
    );
    match shared.config.effective_bind() {
        crate::config::BindAddress::All
            if shared.config.deployment_mode == DeploymentMode::Distributed =>
        {
            tracing::info!(
                audit = "BIND_ALL_INTERFACES_DISTRIBUTED",
                "bound to every interface (distributed mode)"
            )
        }
        crate::config::BindAddress::All => {
            tracing::warn!(
                audit = "BIND_ALL_INTERFACES",
                "bound to every interface outside distributed mode"
            )
        }
        crate::config::BindAddress::Loopback => {
            tracing::info!(audit = "BIND_RESTRICTED", "bound to loopback only")
        }
    }
}

/// Distributed mode: the HA manager and its heartbeat loop (with Redis); without Redis the
/// instance still names itself in headers and cookies, but nothing is shared.
async fn start_ha(shared: &Arc<Shared>) -> std::io::Result<()> {
    let Some(redis) = shared.redis.clone() else {
        tracing::warn!(
            "distributed mode without Redis: sessions stay on the instance that created them"
        );
        return Ok(());
    };
    let ha = match crate::cluster::Ha::start(redis, &shared.machine_id, &shared.config.ha).await {
        Ok(ha) => ha,
        Err(why) => {
            tracing::error!("{why}");
            return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, why));
        }
    };
    shared.ha.store(Some(ha.clone()));
    let beats = shared.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(ha.interval());
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => ha.beat(beats.live.len()).await,
                _ = beats.shutdown.cancelled() => return,
            }
        }
    });
    Ok(())
}

/// Drops sessions nobody used for `sessions.idle_ttl_ms`, with their events.
async fn sweep_idle(shared: Arc<Shared>) {
    let idle = Duration::from_millis(shared.config.sessions.idle_ttl_ms);
    let period = (idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        for id in shared.live.expire_idle(idle) {
            // Idle here only: other instances may still serve it from the shared stores.
            shared.events.release(&id).await;
            tracing::debug!(session = %id, "session expired after being idle");
        }
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Appends a message to a session's standalone (GET) stream.
pub(crate) fn push_standalone(shared: &Arc<Shared>, session: &Arc<Session>, message: Bytes) {
    let events = shared.events.clone();
    let id = session.id.clone();
    tokio::spawn(async move {
        if let Err(e) = events.append(&id, STANDALONE_STREAM, message).await {
            tracing::warn!(session = %id, error = %e, "could not queue a message for the session's stream");
        }
    });
}

/// Changes a running server: its catalog, and announcements to connected clients.
#[derive(Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl ServerHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Adds (or replaces) a tool and tells every session `notifications/tools/list_changed`.
    pub async fn add_tool(&self, def: Arc<ToolDef>) {
        self.shared.catalog.rcu(|c| c.with_tool(def.clone()));
        self.broadcast(Change::ToolsListChanged).await;
    }
    pub async fn remove_tool(&self, name: &str) {
        self.shared.catalog.rcu(|c| c.without_tool(name));
        self.broadcast(Change::ToolsListChanged).await;
    }
    pub async fn add_prompt(&self, def: Arc<PromptDef>) {
        self.shared.catalog.rcu(|c| c.with_prompt(def.clone()));
        self.broadcast(Change::PromptsListChanged).await;
    }
    pub async fn remove_prompt(&self, name: &str) {
        self.shared.catalog.rcu(|c| c.without_prompt(name));
        self.broadcast(Change::PromptsListChanged).await;
    }
    pub async fn add_resource(&self, def: Arc<ResourceDef>) {
        self.shared.catalog.rcu(|c| c.with_resource(def.clone()));
        self.broadcast(Change::ResourcesListChanged).await;
    }
    pub async fn remove_resource(&self, uri: &str) {
        self.shared.catalog.rcu(|c| c.without_resource(uri));
        self.broadcast(Change::ResourcesListChanged).await;
    }

    /// Sends `notifications/resources/updated` to every session subscribed to `uri`.
    pub async fn notify_resource_updated(&self, uri: &str) {
        // No listener is not an error: broadcast only fails when nobody listens.
        let _ = self
            .shared
            .changes
            .send(Change::ResourceUpdated(uri.to_string()));
        let msg = encode_notification(
            "notifications/resources/updated",
            &serde_json::json!({"uri": uri}),
        );
        for s in self.shared.live.all() {
            if s.is_subscribed(uri) {
                self.append(&s, msg.clone()).await;
            }
        }
    }

    /// Whether the catalog has a tool of this name now.
    pub fn has_tool(&self, name: &str) -> bool {
        self.shared.catalog().tool(name).is_some()
    }

    /// Whether the catalog has a prompt of this name now.
    pub fn has_prompt(&self, name: &str) -> bool {
        self.shared.catalog().prompt(name).is_some()
    }

    /// Sessions this instance holds.
    pub fn session_count(&self) -> usize {
        self.shared.live.len()
    }

    async fn broadcast(&self, change: Change) {
        let method = match &change {
            Change::ToolsListChanged => "notifications/tools/list_changed",
            Change::PromptsListChanged => "notifications/prompts/list_changed",
            Change::ResourcesListChanged | Change::ResourceUpdated(_) => {
                "notifications/resources/list_changed"
            }
        };
        let _ = self.shared.changes.send(change);
        let msg = encode_notification(method, &serde_json::json!({}));
        for s in self.shared.live.all() {
            self.append(&s, msg.clone()).await;
        }
    }

    async fn append(&self, s: &Session, msg: Bytes) {
        if let Err(e) = self
            .shared
            .events
            .append(&s.id, STANDALONE_STREAM, msg)
            .await
        {
            tracing::warn!(session = %s.id, error = %e, "could not queue a notification");
        }
    }
}
