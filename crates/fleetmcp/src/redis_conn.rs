//! The one Redis connection an instance shares between its stores (sessions, events, tasks),
//! its limits and distributed mode, with every command bounded. (Pub/sub subscriptions and
//! client-side caching keep dedicated connections, built from the same configuration.)
//!
//! Every command is bounded by `command_timeout_ms` (the connection's response timeout, and a
//! Tokio timeout around it) and fails with [`CommandError::Timeout`]; any other failure is
//! [`CommandError::Unavailable`]. A lost connection is re-established by the `redis` crate's
//! `ConnectionManager`. A server that stops answering without closing the connection (paused,
//! or a black-holed network) only shows as timeouts, and the manager does not reconnect on
//! those: after [`REBUILD_AFTER_TIMEOUTS`] timeouts in a row a new connection is built in the
//! background and swapped in; callers never wait for that. When Redis cannot be reached at
//! start, a background task retries (1 s doubling to 30 s) while commands fail at once.
//!
//! No command fails with an error left over from an outage once Redis answers again. The
//! connection manager keeps a failed reconnect attempt and hands it to the next command, however
//! late, and a connection that Redis closed while nobody used it is only found dead by the next
//! command sent on it (without RESP3 nothing tells the manager earlier). So a connection on
//! which nothing was sent for [`VALIDATE_AFTER_IDLE`], or whose last command found it dropped or
//! refused, is first checked with `PING` (sent twice when the first finds it dropped: `PING` has
//! no effect to double), and a command refused a connection is sent once more: a refused
//! connection proves the command never left. A busy connection pays nothing, nor does a slow one
//! (a paused Redis: its commands queue as before); an idle one pays one `PING` before its first
//! command (a pool's check on borrow).
//!
//! With Redis Sentinel, every connection (this one, pub/sub, client-side caching's) first asks
//! the sentinels which server is master, and checks with `ROLE` that it is. After a failover
//! the old master refuses writes (`READONLY`) or connections: either starts a rebuild at once,
//! which asks the sentinels again, so the instance follows the failover without a restart.
//!
//! With Redis Cluster, the connection is the `redis` crate's cluster connection: it discovers
//! the nodes, sends each command to the node that holds its key's slot, and follows `MOVED`
//! and failovers. Every script and pipeline of fleetmcp touches one slot (see
//! `docs/ARCHITECTURE.md`, "Redis Cluster"); pub/sub uses the classic channels, which a
//! cluster delivers on every node, on a dedicated connection to one of the configured nodes.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

use crate::redis_config::{RedisConfig, WaitReplicas};
use crate::telemetry::Meters;
use crate::telemetry::meters::RedisOutcome;

/// Timeouts in a row after which the connection is rebuilt.
pub const REBUILD_AFTER_TIMEOUTS: u32 = 3;
/// First delay of the background connection retry; it doubles up to [`RETRY_MAX`].
pub const RETRY_MIN: Duration = Duration::from_secs(1);
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// A single-server connection that has not answered for this long is checked with `PING`
/// before its next command (see the module's comment). Short enough that Redis restarting
/// behind an idle connection is noticed, long enough that a busy connection never pays it.
pub const VALIDATE_AFTER_IDLE: Duration = Duration::from_millis(500);

/// Why a Redis command failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommandError {
    #[error("Redis did not answer within {0} ms")]
    Timeout(u64),
    #[error("Redis is unavailable: {0}")]
    Unavailable(String),
    /// The write was taken but may not survive a failover (see [`RedisConn::pipe_durably`]).
    #[error("Redis did not confirm the write durably: {0}")]
    NotDurable(String),
}

/// A shared Redis connection. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct RedisConn {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: RedisConfig,
    /// The client for the server in use: fixed, or with Sentinel the last master found.
    client: ArcSwapOption<redis::Client>,
    /// `None` until the first connection succeeds.
    conn: ArcSwapOption<Link>,
    timeouts_in_a_row: AtomicU32,
    rebuilding: AtomicBool,
    /// Connection rebuilds started after timeouts (for tests and metrics).
    rebuilds: AtomicU32,
    /// The last command or ping got an answer.
    healthy: AtomicBool,
    /// When a command was last sent, in milliseconds since `born`.
    used_at_ms: AtomicU64,
    /// The last command failed on the connection itself (dropped, refused), not by a timeout
    /// or an error answer: the next one checks the connection first.
    dropped: AtomicBool,
    born: std::time::Instant,
    /// Counts the moves of the connection to another server (with Sentinel, a new master): the
    /// dedicated connections (pub/sub, client-side caching) reconnect then, so that after a
    /// failover nothing stays on the old master.
    replaced: tokio::sync::watch::Sender<u64>,
    /// With Sentinel: the address of the master in use.
    master: parking_lot::Mutex<Option<String>>,
    /// Where every command's latency and failures are counted (the server's, once given).
    meters: std::sync::OnceLock<Meters>,
}

/// With Sentinel, how often the sentinels are asked whether the master changed. A manual or
/// automatic failover promotes the replica at once, but the old master keeps accepting writes
/// (lost when it is demoted, seconds later) until it is reconfigured: the connection must move
/// as soon as the sentinels name the new one.
const SENTINEL_WATCH: Duration = Duration::from_millis(250);

impl RedisConn {
    fn new_inner(cfg: RedisConfig) -> Result<Arc<Inner>, CommandError> {
        cfg.validate()
            .map_err(|e| CommandError::Unavailable(e.to_string()))?;
        let client = if cfg.is_sentinel() || cfg.is_cluster() {
            None
        } else {
            Some(Arc::new(
                cfg.client()
                    .map_err(|e| CommandError::Unavailable(e.to_string()))?,
            ))
        };
        Ok(Arc::new(Inner {
            cfg,
            client: ArcSwapOption::new(client),
            conn: ArcSwapOption::empty(),
            timeouts_in_a_row: AtomicU32::new(0),
            rebuilding: AtomicBool::new(false),
            rebuilds: AtomicU32::new(0),
            healthy: AtomicBool::new(false),
            used_at_ms: AtomicU64::new(0),
            dropped: AtomicBool::new(false),
            born: std::time::Instant::now(),
            replaced: tokio::sync::watch::Sender::new(0),
            master: parking_lot::Mutex::new(None),
            meters: std::sync::OnceLock::new(),
        }))
    }

    /// Connects and checks the connection with `PING`; fails if Redis does not answer within
    /// the connect timeout.
    pub async fn connect(cfg: RedisConfig) -> Result<Self, CommandError> {
        let inner = Self::new_inner(cfg)?;
        let manager = inner.open().await?;
        inner.install(manager);
        if inner.cfg.is_sentinel() {
            tokio::spawn(watch_master(Arc::downgrade(&inner)));
        }
        tracing::info!(
            target_redis = %inner.cfg.display_target(),
            "[TransportService] Session store connection validated successfully"
        );
        Ok(Self { inner })
    }

    /// Tries once (bounded by the connect timeout plus one command timeout), then returns
    /// whether or not Redis is reachable (see [`RedisConn::first_connect`]). Configuration
    /// errors are reported here, not retried.
    pub async fn connect_in_background(cfg: RedisConfig) -> Result<Self, CommandError> {
        let conn = Self::new(cfg)?;
        conn.first_connect().await;
        Ok(conn)
    }

    /// A connection that is not opened yet: no I/O, only the configuration is checked.
    /// Commands fail with [`CommandError::Unavailable`] until [`RedisConn::first_connect`].
    pub fn new(cfg: RedisConfig) -> Result<Self, CommandError> {
        Ok(Self {
            inner: Self::new_inner(cfg)?,
        })
    }

    /// Opens the connection, trying once. When Redis cannot be reached, every command fails
    /// with [`CommandError::Unavailable`] (callers serve sessions from memory) and a background
    /// task retries, 1 s doubling to 30 s, until it answers.
    pub async fn first_connect(&self) {
        let inner = &self.inner;
        if inner.cfg.is_sentinel() {
            tokio::spawn(watch_master(Arc::downgrade(inner)));
        }
        match inner.open().await {
            Ok(manager) => {
                inner.install(manager);
                tracing::info!(
                    target_redis = %inner.cfg.display_target(),
                    "[TransportService] Session store connection validated successfully"
                );
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    target_redis = %inner.cfg.display_target(),
                    "[TransportService] Failed to connect to Redis - session persistence disabled"
                );
                tokio::spawn(retry_until_connected(Arc::downgrade(inner)));
            }
        }
    }

    /// Whether there is a connection and the last command on it got an answer.
    pub fn is_connected(&self) -> bool {
        self.inner.conn.load().is_some() && self.inner.healthy.load(Ordering::Acquire)
    }

    /// How many times the connection was rebuilt (or a rebuild attempted) after
    /// [`REBUILD_AFTER_TIMEOUTS`] timeouts in a row.
    pub fn rebuild_attempts(&self) -> u32 {
        self.inner.rebuilds.load(Ordering::Acquire)
    }

    /// Changes whenever the connection moves to another server (a Sentinel failover): dedicated
    /// connections made from this one's server reconnect then.
    pub(crate) fn replaced(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.replaced.subscribe()
    }

    /// Counts every command from now on in `meters` (latency, timeouts, failures); the first
    /// call wins.
    pub(crate) fn instrument(&self, meters: Meters) {
        let _ = self.inner.meters.set(meters);
    }

    /// The configuration this connection was built from.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.cfg
    }

    /// The address this instance reaches Redis from: the local address the kernel's routing
    /// picks toward the server in use (with Sentinel the master in use, else each sentinel in
    /// turn; with a cluster each configured node in turn), the first that resolves. Found with
    /// a UDP socket's `connect`, which sends nothing: it answers while Redis is down and costs
    /// no connection. An IPv4 address of the server is tried first (a server bound to every
    /// interface listens on 0.0.0.0). `Ok(None)`: Redis is on a Unix socket, so on this host.
    pub(crate) async fn local_address(&self) -> Result<Option<std::net::IpAddr>, String> {
        let Some(targets) = self.route_targets()? else {
            return Ok(None);
        };
        let bound = self.inner.cfg.connect_timeout();
        let mut last = String::from("no Redis server configured");
        for (host, port) in targets {
            let host = host.trim_matches(['[', ']']).to_string();
            let found = tokio::time::timeout(bound, tokio::net::lookup_host((host.as_str(), port)));
            let mut addrs: Vec<std::net::SocketAddr> = match found.await {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(e)) => {
                    last = format!("{host}:{port} does not resolve: {e}");
                    continue;
                }
                Err(_) => {
                    last = format!(
                        "{host}:{port} did not resolve within {} ms",
                        bound.as_millis()
                    );
                    continue;
                }
            };
            addrs.sort_by_key(|a| !a.is_ipv4());
            for addr in addrs {
                let local: std::net::SocketAddr = if addr.is_ipv4() {
                    (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let routed = async {
                    let socket = tokio::net::UdpSocket::bind(local).await?;
                    socket.connect(addr).await?;
                    socket.local_addr()
                };
                match routed.await {
                    Ok(a) => return Ok(Some(a.ip())),
                    Err(e) => last = format!("no route to {addr}: {e}"),
                }
            }
        }
        Err(last)
    }

    /// The servers [`RedisConn::local_address`] routes toward, best first; `None` for a Unix
    /// socket.
    fn route_targets(&self) -> Result<Option<Vec<(String, u16)>>, String> {
        let cfg = &self.inner.cfg;
        let parse = |a: &str| {
            a.rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        };
        if cfg.is_cluster() {
            return cfg.cluster_addresses().map(Some).map_err(|e| e.to_string());
        }
        if cfg.is_sentinel() {
            let mut out: Vec<(String, u16)> = self
                .inner
                .master
                .lock()
                .as_deref()
                .and_then(parse)
                .into_iter()
                .collect();
            out.extend(cfg.sentinel_addresses().map_err(|e| e.to_string())?);
            return Ok(Some(out));
        }
        let info = cfg.connection_info().map_err(|e| e.to_string())?;
        Ok(match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => Some(vec![(host.clone(), *port)]),
            redis::ConnectionAddr::TcpTls { host, port, .. } => Some(vec![(host.clone(), *port)]),
            _ => None,
        })
    }

    /// A dedicated connection subscribed to `channel` (pub/sub needs its own connection), bounded
    /// by the connect timeout plus one command timeout. The stream ends when the connection does.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<Subscription, CommandError> {
        self.subscribed(channel, false).await
    }

    /// Like [`RedisConn::subscribe`], for every channel matching `pattern` (`PSUBSCRIBE`).
    pub(crate) async fn psubscribe(&self, pattern: &str) -> Result<Subscription, CommandError> {
        self.subscribed(pattern, true).await
    }

    async fn subscribed(&self, target: &str, pattern: bool) -> Result<Subscription, CommandError> {
        let bound = self.inner.cfg.connect_timeout() + self.inner.cfg.command_timeout();
        let attempt = async {
            let mut pubsub = if self.inner.cfg.is_cluster() {
                cluster_pubsub(&self.inner.cfg).await?
            } else {
                let client = self.inner.client.load_full().ok_or_else(|| {
                    CommandError::Unavailable(
                        "not connected to Redis yet (retrying in the background)".into(),
                    )
                })?;
                client.get_async_pubsub().await.map_err(unavailable)?
            };
            if pattern {
                pubsub.psubscribe(target).await.map_err(unavailable)?;
            } else {
                pubsub.subscribe(target).await.map_err(unavailable)?;
            }
            let (sink, messages) = pubsub.split();
            Ok::<_, CommandError>(Subscription {
                sink,
                messages,
                target: target.to_string(),
                pattern,
                timeout: self.inner.cfg.command_timeout(),
            })
        };
        match tokio::time::timeout(bound, attempt).await {
            Ok(r) => r,
            Err(_) => Err(CommandError::Timeout(bound.as_millis() as u64)),
        }
    }

    /// Runs one command, bounded by the command timeout (also for an application's own keys,
    /// as `examples/help-desk` keeps its tickets).
    pub async fn run<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, CommandError> {
        let cmd = &cmd;
        self.inner
            .bounded(|mut conn| async move { cmd.query_async::<T>(&mut conn).await })
            .await
    }

    /// Runs a Lua script (`EVALSHA`, loading it once when Redis does not know it), bounded by
    /// the command timeout.
    pub async fn eval<T: redis::FromRedisValue>(
        &self,
        script: redis::ScriptInvocation<'_>,
    ) -> Result<T, CommandError> {
        let script = &script;
        self.inner
            .bounded(|mut conn| async move { script.invoke_async::<T>(&mut conn).await })
            .await
    }

    /// Sends `pipe` like [`RedisConn::pipe`], then waits until the replicas `wait_replicas`
    /// asks for have confirmed it, on the same connection (a write and its `WAIT` must share
    /// one: `WAIT` counts the writes of its own connection, and the connection may move to a
    /// new master in between). Fails with [`CommandError::NotDurable`] when they do not, or
    /// when the server written to is no longer the master: the write may then be lost.
    ///
    /// One `ROLE` (is the server still a master, and with how many replicas), then `WAIT` for
    /// at most half the command timeout. With [`WaitReplicas::Auto`] a master without replicas
    /// is asked of the sentinels instead: in the second after a failover the old master has
    /// lost its replica (promoted) but still takes writes, which it will throw away.
    ///
    /// `WAIT` holds the commands sent after it on this connection until it returns: about a
    /// millisecond while replication is healthy, half the command timeout when it is not, which
    /// is when a write would otherwise be acknowledged and then lost.
    pub async fn pipe_durably<T: redis::FromRedisValue>(
        &self,
        pipe: redis::Pipeline,
    ) -> Result<T, CommandError> {
        if !self.writes_durably() {
            return self.pipe(pipe).await;
        }
        let Some(link) = self.inner.conn.load_full() else {
            return Err(CommandError::NotDurable(
                "not connected to Redis yet (retrying in the background)".into(),
            ));
        };
        let pipe = &pipe;
        let confirmed = async {
            let written = self
                .inner
                .bounded_on(link.clone(), |mut conn| async move {
                    pipe.query_async::<T>(&mut conn).await
                })
                .await?;
            self.confirm_on(link).await?;
            Ok(written)
        };
        // Whatever failed, the write is not known to be durable.
        confirmed.await.map_err(|e| match e {
            CommandError::NotDurable(why) => CommandError::NotDurable(why),
            other => CommandError::NotDurable(other.to_string()),
        })
    }

    /// Whether [`RedisConn::pipe_durably`] waits for replicas (`wait_replicas` asks for some,
    /// and this is not a cluster).
    pub fn writes_durably(&self) -> bool {
        !self.inner.cfg.is_cluster()
            && !matches!(
                self.inner.cfg.replicas_to_wait(),
                Ok(WaitReplicas::Off) | Err(_)
            )
    }

    /// The replicas' confirmation of what `link` wrote (see [`RedisConn::pipe_durably`]).
    async fn confirm_on(&self, link: Arc<Link>) -> Result<(), CommandError> {
        let policy = self
            .inner
            .cfg
            .replicas_to_wait()
            .map_err(|e| CommandError::Unavailable(e.to_string()))?;
        let want = match policy {
            WaitReplicas::Off => return Ok(()),
            _ if self.inner.cfg.is_cluster() => return Ok(()),
            WaitReplicas::Auto => 1,
            WaitReplicas::Count(n) => n,
        };
        let role: redis::Value = self
            .inner
            .bounded_on(link.clone(), |mut conn| async move {
                redis::cmd("ROLE").query_async(&mut conn).await
            })
            .await?;
        let Some(replicas) = replicas_of_master(&role) else {
            return Err(CommandError::NotDurable(
                "the server written to is no longer a master".into(),
            ));
        };
        if policy == WaitReplicas::Auto && replicas == 0 {
            return self.no_failover_under_way(&link).await;
        }
        let wait_ms = (self.inner.cfg.command_timeout_ms / 2).max(1);
        let confirmed: u32 = self
            .inner
            .bounded_on(link, |mut conn| async move {
                redis::cmd("WAIT")
                    .arg(want)
                    .arg(wait_ms)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        if confirmed >= want {
            Ok(())
        } else {
            Err(CommandError::NotDurable(format!(
                "{confirmed} of the {want} replica(s) asked for (wait_replicas) confirmed the write within {wait_ms} ms"
            )))
        }
    }

    /// With Sentinel, for a master without replicas: whether a majority of the sentinels
    /// name the server `link` writes to, and none is failing it over. The sentinels keep
    /// naming the old master until they see the promoted replica answer as master (up to a
    /// second), but the one leading the failover flags it from its start: until it ends, a
    /// master that has lost its replica may be the one about to be demoted. Asked of every
    /// sentinel at once, within the command timeout.
    async fn no_failover_under_way(&self, link: &Link) -> Result<(), CommandError> {
        let Link::Single(_, Some(server)) = link else {
            return Ok(());
        };
        let cfg = &self.inner.cfg;
        let sentinels = cfg
            .sentinel_addresses()
            .map_err(|e| CommandError::Unavailable(e.to_string()))?;
        let asks = sentinels
            .iter()
            .map(|(host, port)| sentinel_view(cfg, host, *port));
        let views =
            match tokio::time::timeout(cfg.command_timeout(), futures_util::future::join_all(asks))
                .await
            {
                Ok(views) => views,
                Err(_) => return Err(CommandError::Timeout(cfg.command_timeout_ms)),
            };
        let mut agreeing = 0;
        for view in views.into_iter().flatten() {
            if view.failing_over {
                return Err(CommandError::NotDurable(format!(
                    "a sentinel is failing over the master written to ({server})"
                )));
            }
            if view.master != **server {
                return Err(CommandError::NotDurable(format!(
                    "a sentinel names another master ({}) than the one written to ({server})",
                    view.master
                )));
            }
            agreeing += 1;
        }
        if agreeing * 2 > sentinels.len() {
            Ok(())
        } else {
            Err(CommandError::NotDurable(format!(
                "{agreeing} of {} sentinels answered: not a majority",
                sentinels.len()
            )))
        }
    }

    /// Sends a pipeline in one round trip, bounded by the command timeout.
    pub async fn pipe<T: redis::FromRedisValue>(
        &self,
        pipe: redis::Pipeline,
    ) -> Result<T, CommandError> {
        let pipe = &pipe;
        self.inner
            .bounded(|mut conn| async move { pipe.query_async::<T>(&mut conn).await })
            .await
    }
}

/// Retries the first connection: 1 s, doubling, capped at 30 s. Stops when the connection
/// is dropped.
async fn retry_until_connected(inner: Weak<Inner>) {
    let mut delay = RETRY_MIN;
    loop {
        tokio::time::sleep(delay).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match inner.open().await {
            Ok(manager) => {
                inner.install(manager);
                tracing::info!("[TransportService] Session store recovered after startup failure");
                tracing::info!(
                    target_redis = %inner.cfg.display_target(),
                    "[TransportService] Session store connection validated successfully"
                );
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, retry_in_ms = delay.as_millis() as u64, "Redis still unreachable");
            }
        }
        delay = (delay * 2).min(RETRY_MAX);
    }
}

impl Inner {
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.cfg.command_timeout()))
            .set_connection_timeout(Some(self.cfg.connect_timeout()))
            // Reconnection after a lost connection: quick, bounded attempts; a command that
            // finds the connection still down fails and triggers the next round.
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1))
            .set_number_of_retries(3)
    }

    fn install(&self, link: Link) {
        self.conn.store(Some(Arc::new(link)));
        self.timeouts_in_a_row.store(0, Ordering::Release);
        self.answered();
    }

    /// Notes that Redis answered on the connection just now.
    fn answered(&self) {
        self.healthy.store(true, Ordering::Release);
        self.dropped.store(false, Ordering::Release);
    }

    /// Whether `link` must be checked before the command about to be sent on it: a single
    /// server's connection on which nothing was sent for [`VALIDATE_AFTER_IDLE`], or whose last
    /// command found it dropped. Notes the send. (A cluster connection checks its nodes and
    /// retries on its own.) A connection that is only slow (a paused Redis: commands time out)
    /// is not checked: its commands are queued as before, and a `PING` in front of each would
    /// only hold them back.
    fn needs_check(&self, link: &Link) -> bool {
        let now = self.born.elapsed().as_millis() as u64;
        let used = self.used_at_ms.swap(now, Ordering::AcqRel);
        matches!(link, Link::Single(..))
            && (self.dropped.load(Ordering::Acquire)
                || now.saturating_sub(used) >= VALIDATE_AFTER_IDLE.as_millis() as u64)
    }

    /// `PING` on `link`, once more when the first finds the connection dropped or refused: the
    /// manager opens a new connection on that failure, and the second `PING` waits for it. An
    /// error here is current, not one left from an outage.
    async fn check(&self, link: &Link) -> redis::RedisResult<()> {
        let ping = redis::cmd("PING");
        let first = ping.query_async::<()>(&mut link.clone()).await;
        let result = match first {
            Err(e) if e.is_connection_dropped() || e.is_connection_refusal() => {
                ping.query_async::<()>(&mut link.clone()).await
            }
            other => other,
        };
        if result.is_ok() {
            self.answered();
        }
        result
    }

    /// A new connection, checked with `PING`, within the connect timeout (plus one command
    /// timeout for the `PING`); with Sentinel, to the master the sentinels name now, checked
    /// with `ROLE` (each sentinel asked is bounded the same way).
    async fn open(&self) -> Result<Link, CommandError> {
        if self.cfg.is_cluster() {
            return self.open_cluster().await;
        }
        let mut address = None;
        let client = if self.cfg.is_sentinel() {
            let info = server_info(&self.cfg).await?;
            address = Some(info.addr().to_string());
            Arc::new(
                self.cfg
                    .client_for(info)
                    .map_err(|e| CommandError::Unavailable(e.to_string()))?,
            )
        } else {
            self.client
                .load_full()
                .ok_or_else(|| CommandError::Unavailable("no Redis client".into()))?
        };
        let bound = self.cfg.connect_timeout() + self.cfg.command_timeout() * 2;
        let sentinel = self.cfg.is_sentinel();
        let attempt = async {
            let mut manager =
                ConnectionManager::new_with_config((*client).clone(), self.manager_config())
                    .await
                    .map_err(unavailable)?;
            redis::cmd("PING")
                .query_async::<String>(&mut manager)
                .await
                .map_err(unavailable)?;
            if sentinel {
                check_master(&mut manager).await?;
            }
            Ok::<_, CommandError>(Link::Single(manager, address.as_deref().map(Arc::from)))
        };
        let opened = match tokio::time::timeout(bound, attempt).await {
            Ok(r) => r,
            Err(_) => Err(CommandError::Timeout(bound.as_millis() as u64)),
        };
        if opened.is_ok() {
            self.client.store(Some(client));
            if address.is_some() {
                let previous = std::mem::replace(&mut *self.master.lock(), address.clone());
                // Only a move to another server concerns the dedicated connections: a rebuild
                // on the same server (after timeouts) leaves their own connections as they are.
                if previous.is_some() && previous != address {
                    self.replaced.send_modify(|n| *n += 1);
                }
            }
        }
        opened
    }

    /// A cluster connection: the nodes are discovered from the configured ones, and the
    /// connection is checked with `PING` (to a random node) within the same bound as
    /// [`Inner::open`].
    async fn open_cluster(&self) -> Result<Link, CommandError> {
        let client = self
            .cfg
            .cluster_client()
            .map_err(|e| CommandError::Unavailable(e.to_string()))?;
        let bound = self.cfg.connect_timeout() + self.cfg.command_timeout() * 2;
        let attempt = async {
            let mut conn = client.get_async_connection().await.map_err(unavailable)?;
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .map_err(unavailable)?;
            Ok::<_, CommandError>(Link::Cluster(conn))
        };
        match tokio::time::timeout(bound, attempt).await {
            Ok(r) => r,
            Err(_) => Err(CommandError::Timeout(bound.as_millis() as u64)),
        }
    }

    /// Runs `work` on a clone of the connection, bounded by the command timeout, counting
    /// timeouts towards a rebuild. A connection that may be stale is checked first, and `work`
    /// runs once more when its connection was refused (see the module's comment): nothing else
    /// is retried, since a command that may have reached Redis could take effect twice.
    async fn bounded<T, F, Fut>(self: &Arc<Self>, work: F) -> Result<T, CommandError>
    where
        F: Fn(Link) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let Some(link) = self.conn.load_full() else {
            if let Some(m) = self.meters.get() {
                m.redis_command(RedisOutcome::Failed, Duration::ZERO);
            }
            return Err(CommandError::Unavailable(
                "not connected to Redis yet (retrying in the background)".into(),
            ));
        };
        self.bounded_on(link, work).await
    }

    /// [`Inner::bounded`] on a given connection (one that may since have been replaced).
    async fn bounded_on<T, F, Fut>(
        self: &Arc<Self>,
        link: Arc<Link>,
        work: F,
    ) -> Result<T, CommandError>
    where
        F: Fn(Link) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let limit = self.cfg.command_timeout();
        let ms = self.cfg.command_timeout_ms;
        let began = std::time::Instant::now();
        let attempt = async {
            if self.needs_check(&link) {
                self.check(&link).await?;
            }
            match work((*link).clone()).await {
                Err(e) if e.is_connection_refusal() => work((*link).clone()).await,
                done => done,
            }
        };
        let (result, outcome) = match tokio::time::timeout(limit, attempt).await {
            Ok(Ok(v)) => {
                self.timeouts_in_a_row.store(0, Ordering::Release);
                self.answered();
                (Ok(v), RedisOutcome::Answered)
            }
            Ok(Err(e)) if e.is_timeout() => {
                self.on_timeout();
                (Err(CommandError::Timeout(ms)), RedisOutcome::Timeout)
            }
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_unrecoverable_error() {
                    self.healthy.store(false, Ordering::Release);
                    self.dropped.store(true, Ordering::Release);
                } else {
                    // Redis answered, with an error (a script's refusal, a wrong type): the
                    // connection is fine.
                    self.answered();
                }
                // With Sentinel, a server that refuses writes or connections is no longer the
                // master (a failover): ask the sentinels again now, not after three timeouts.
                if self.cfg.is_sentinel()
                    && (e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                        || e.is_connection_refusal()
                        || e.is_io_error())
                {
                    self.rebuild(format!("the master in use failed ({e})"));
                }
                (
                    Err(CommandError::Unavailable(e.to_string())),
                    RedisOutcome::Failed,
                )
            }
            Err(_) => {
                self.on_timeout();
                (Err(CommandError::Timeout(ms)), RedisOutcome::Timeout)
            }
        };
        if let Some(m) = self.meters.get() {
            m.redis_command(outcome, began.elapsed());
        }
        result
    }

    /// Counts a timeout; the [`REBUILD_AFTER_TIMEOUTS`]th in a row starts a rebuild of the
    /// connection in the background (one at a time).
    fn on_timeout(self: &Arc<Self>) {
        self.healthy.store(false, Ordering::Release);
        let n = self.timeouts_in_a_row.fetch_add(1, Ordering::AcqRel) + 1;
        if n < REBUILD_AFTER_TIMEOUTS {
            return;
        }
        self.rebuild(format!("no answer to {n} commands in a row"));
    }

    /// Opens a new connection in the background and swaps it in (one rebuild at a time).
    fn rebuild(self: &Arc<Self>, why: String) {
        if self
            .rebuilding
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        self.rebuilds.fetch_add(1, Ordering::AcqRel);
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            tracing::warn!("Redis session store: {why}; opening a new connection");
            match inner.open().await {
                Ok(manager) => {
                    inner.install(manager);
                    tracing::info!("Redis session store: new connection in use");
                }
                Err(e) => {
                    // Keep the old connection (it answers again if the server resumes); the
                    // next timeouts try again.
                    inner
                        .timeouts_in_a_row
                        .store(REBUILD_AFTER_TIMEOUTS - 1, Ordering::Release);
                    tracing::warn!(error = %e, "Redis session store: new connection failed");
                }
            }
            inner.rebuilding.store(false, Ordering::Release);
        });
    }
}

/// The connection commands go through: one server's (alone or found through Sentinel), or a
/// cluster's. Cheap to clone: clones share the connection.
#[derive(Clone)]
enum Link {
    /// With Sentinel, the address of the master the connection was opened to.
    Single(ConnectionManager, Option<Arc<str>>),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Link {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Link::Single(c, _) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Link::Single(c, _) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(c, _) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// A pub/sub connection for a cluster: to the first configured node that answers. A cluster
/// delivers classic `PUBLISH` messages on every node, so any one will do; when it fails, the
/// subscriber's retry comes here again and finds another.
async fn cluster_pubsub(cfg: &RedisConfig) -> Result<redis::aio::PubSub, CommandError> {
    on_first_cluster_node(cfg, |client| async move {
        client.get_async_pubsub().await.map_err(unavailable)
    })
    .await
}

/// `attempt` on a client for each configured cluster node in turn, each bounded by the connect
/// timeout plus one command timeout, until one succeeds; else the last failure.
pub(crate) async fn on_first_cluster_node<T, F, Fut>(
    cfg: &RedisConfig,
    attempt: F,
) -> Result<T, CommandError>
where
    F: Fn(redis::Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, CommandError>>,
{
    let config =
        |e: crate::redis_config::RedisConfigError| CommandError::Unavailable(e.to_string());
    let bound = cfg.connect_timeout() + cfg.command_timeout();
    let mut last = CommandError::Unavailable("no cluster node configured".into());
    for (host, port) in cfg.cluster_addresses().map_err(config)? {
        let client = cfg
            .client_for(cfg.server_connection_info(&host, port).map_err(config)?)
            .map_err(config)?;
        match tokio::time::timeout(bound, attempt(client)).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => last = CommandError::Unavailable(format!("{host}:{port}: {e}")),
            Err(_) => last = CommandError::Timeout(bound.as_millis() as u64),
        }
    }
    Err(last)
}

fn unavailable(e: redis::RedisError) -> CommandError {
    CommandError::Unavailable(e.to_string())
}

/// The connection settings of the server to use now: the configured one, or with Sentinel the
/// master the first sentinel that answers names (each asked within the connect timeout plus
/// one command timeout).
pub(crate) async fn server_info(cfg: &RedisConfig) -> Result<redis::ConnectionInfo, CommandError> {
    let config =
        |e: crate::redis_config::RedisConfigError| CommandError::Unavailable(e.to_string());
    if !cfg.is_sentinel() {
        return cfg.connection_info().map_err(config);
    }
    let master = cfg.sentinel_master.as_deref().unwrap_or_default();
    let bound = cfg.connect_timeout() + cfg.command_timeout();
    let mut last = String::from("no sentinel configured");
    for (host, port) in cfg.sentinel_addresses().map_err(config)? {
        let ask = async {
            let mut conn = sentinel_connection(cfg, &host, port).await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
                .map_err(unavailable)
        };
        match tokio::time::timeout(bound, ask).await {
            Ok(Ok(Some((h, p)))) => return cfg.server_connection_info(&h, p).map_err(config),
            Ok(Ok(None)) => {
                last = format!("sentinel {host}:{port} knows no master named {master:?}")
            }
            Ok(Err(e)) => last = format!("sentinel {host}:{port}: {e}"),
            Err(_) => {
                last = format!(
                    "sentinel {host}:{port} did not answer within {} ms",
                    bound.as_millis()
                )
            }
        }
    }
    Err(CommandError::Unavailable(last))
}

/// A connection to the sentinel at `host:port` (its own credentials and TLS), unbounded: the
/// callers bound what they ask.
async fn sentinel_connection(
    cfg: &RedisConfig,
    host: &str,
    port: u16,
) -> Result<redis::aio::MultiplexedConnection, CommandError> {
    let config =
        |e: crate::redis_config::RedisConfigError| CommandError::Unavailable(e.to_string());
    let client = cfg
        .client_for(cfg.sentinel_connection_info(host, port).map_err(config)?)
        .map_err(config)?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(unavailable)
}

/// What one sentinel says of the master it watches.
struct SentinelView {
    /// `host:port`.
    master: String,
    /// A failover of it is under way.
    failing_over: bool,
}

/// `SENTINEL MASTER <name>` on the sentinel at `host:port`.
async fn sentinel_view(
    cfg: &RedisConfig,
    host: &str,
    port: u16,
) -> Result<SentinelView, CommandError> {
    let mut conn = sentinel_connection(cfg, host, port).await?;
    let fields: std::collections::HashMap<String, String> = redis::cmd("SENTINEL")
        .arg("master")
        .arg(cfg.sentinel_master.as_deref().unwrap_or_default())
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    let field = |name: &str| fields.get(name).map(String::as_str).unwrap_or_default();
    Ok(SentinelView {
        master: format!("{}:{}", field("ip"), field("port")),
        failing_over: field("flags").contains("failover_in_progress"),
    })
}

/// With Sentinel: asks the sentinels every [`SENTINEL_WATCH`] which server is master, and
/// moves the connection when it is another than the one in use. Ends with the connection.
async fn watch_master(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(SENTINEL_WATCH).await;
        let Some(inner) = inner.upgrade() else { return };
        let Ok(info) = server_info(&inner.cfg).await else {
            continue;
        };
        let now = info.addr().to_string();
        let in_use = inner.master.lock().clone();
        if in_use.is_some_and(|m| m != now) {
            inner.rebuild(format!("the sentinels name a new master, {now}"));
        }
    }
}

/// From a `ROLE` answer: how many replicas a master has connected, or `None` when the server
/// is not a master.
fn replicas_of_master(role: &redis::Value) -> Option<usize> {
    let redis::Value::Array(items) = role else {
        return None;
    };
    let is_master = match items.first() {
        Some(redis::Value::BulkString(b)) => b == b"master",
        Some(redis::Value::SimpleString(s)) => s == "master",
        _ => false,
    };
    match (is_master, items.get(2)) {
        (true, Some(redis::Value::Array(replicas))) => Some(replicas.len()),
        (true, _) => Some(0),
        (false, _) => None,
    }
}

/// Fails unless the server `conn` talks to says it is a master (`ROLE`): right after a
/// failover, a sentinel may still name the old one.
async fn check_master(conn: &mut ConnectionManager) -> Result<(), CommandError> {
    let role: redis::Value = redis::cmd("ROLE")
        .query_async(conn)
        .await
        .map_err(unavailable)?;
    let is_master = replicas_of_master(&role).is_some();
    if is_master {
        Ok(())
    } else {
        Err(CommandError::Unavailable(
            "the server the sentinels named is not a master (yet)".into(),
        ))
    }
}

/// A dedicated pub/sub connection: a stream of its messages, and [`Subscription::leave`] to end
/// it without losing any.
pub(crate) struct Subscription {
    sink: redis::aio::PubSubSink,
    messages: redis::aio::PubSubStream,
    target: String,
    pattern: bool,
    timeout: std::time::Duration,
}

impl Subscription {
    /// Unsubscribes, and returns the messages that arrived before Redis confirmed it.
    ///
    /// A publisher counts this connection as a receiver until Redis has processed the
    /// unsubscribe: dropping the connection instead would lose what was published meanwhile (a
    /// notification its sender was told had reached a live holder). Redis answers the
    /// unsubscribe after every message it sent before, and the connection hands them over in
    /// order, so once the answer is in they are all queued here. Bounded by the command timeout.
    pub(crate) async fn leave(mut self) -> Vec<redis::Msg> {
        let unsubscribe = async {
            if self.pattern {
                self.sink.punsubscribe(&self.target).await
            } else {
                self.sink.unsubscribe(&self.target).await
            }
        };
        if let Err(e) = tokio::time::timeout(self.timeout, unsubscribe)
            .await
            .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timed out"))))
        {
            tracing::debug!(error = %e, target = %self.target, "leaving a subscription: no confirmation");
        }
        let mut left = Vec::new();
        while let Some(Some(m)) =
            futures_util::FutureExt::now_or_never(futures_util::StreamExt::next(&mut self.messages))
        {
            left.push(m);
        }
        left
    }
}

impl futures_util::Stream for Subscription {
    type Item = redis::Msg;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<redis::Msg>> {
        std::pin::Pin::new(&mut self.messages).poll_next(cx)
    }
}
