//! The one Redis connection an instance shares between its stores (sessions, events, tasks),
//! its limits and distributed mode, with every command bounded. (Pub/sub subscriptions and
//! client-side caching keep dedicated connections, built from the same configuration.)
//!
//! Every command is bounded by `command_timeout_ms` (the connection's response timeout, and a
//! Tokio timeout around it) and fails with [`CommandError::Timeout`]; any other failure is
//! [`CommandError::Unavailable`]. A lost connection is re-established by the `redis` crate's
//! `ConnectionManager`. A server that stops answering without closing the connection (paused,
//! or a black-holed network) only shows as timeouts, and the manager does not reconnect on
//! those: after `REBUILD_AFTER_TIMEOUTS` (3) timeouts in a row a new connection is built in the
//! background and swapped in; callers never wait for that. When Redis cannot be reached at
//! start, a background task retries (1 s doubling to 30 s) while commands fail at once.
//!
//! No command fails with an error left over from an outage once Redis answers again. The
//! connection manager keeps a failed reconnect attempt and hands it to the next command, however
//! late, and a connection that Redis closed while nobody used it is only found dead by the next
//! command sent on it (without RESP3 nothing tells the manager earlier). So a connection on
//! which nothing was sent for `VALIDATE_AFTER_IDLE` (500 ms), or whose last command found it
//! dropped or refused, is first checked with `PING` (sent twice when the first finds it
//! dropped: `PING` has no effect to double), and a command refused a connection is sent once
//! more: a refused connection proves the command never left. A busy connection pays nothing, nor does a slow one
//! (a paused Redis: its commands queue as before); an idle one pays one `PING` before its first
//! command (a pool's check on borrow).
//!
//! With Redis Sentinel, every connection (this one, pub/sub, client-side caching's) first asks
//! the sentinels which server is master, and checks with `ROLE` that it is. The sentinels are
//! asked every 250 ms whether it changed (on one kept connection to each, `sentinel.rs`), a
//! `+switch-master` a sentinel announces moves the connection at once to the master named, and
//! a `READONLY` answer or a refused connection asks again at once, so the instance follows a
//! failover without a restart. When the connection moves, `RedisConn::replaced` tells the
//! dedicated connections (pub/sub subscriptions, client-side caching) to follow it, so nothing
//! stays on a demoted master.
//!
//! Durable writes (`durable.rs`, [`RedisConn::pipe_durably`]): a new session's record, and a
//! stream's first entry and end, are written and then confirmed on the same connection by the
//! replicas `redis.wait_replicas` asks for (`ROLE`, `WAIT`; with Sentinel, every replica the
//! sentinels find up, known without asking them per write: `failover.rs` subscribes to every
//! sentinel's events and keeps their views, refreshed every second and at once after an event).
//! A master with fewer replicas connected, a failover announced during the write, or fewer than
//! a majority of sentinels naming the master refuse the write; with no replica to wait for, the
//! sentinels are asked whether a failover is under way, whether they find the master down, and
//! whether they find one of its replicas anything but down (which a failover could promote
//! without the write). A record that may be lost in a failover is refused, never acknowledged.
//!
//! Every command's latency, timeouts and failures are recorded into the server's `Meters`
//! (`RedisConn::instrument`), in the one function every command goes through (`link.rs`).
//! [`RedisConn::run`], [`RedisConn::eval`] and [`RedisConn::pipe`] are public, so an application
//! keeps its own keys on the same bounded connection type (`examples/help-desk`'s tickets).
//!
//! # Redis Cluster
//!
//! With Redis Cluster (`cluster_nodes`), the connection is the `redis` crate's cluster
//! connection: it discovers the nodes, sends each command to the node that holds its key's
//! slot, and follows `MOVED` and failovers. Every script and pipeline of fleetmcp touches keys
//! of one slot, whatever the topology, so one code path serves one server, Sentinel and a
//! cluster. What must change together lives in one slot: a session's SSE streams and their
//! index (`mcp:events:{<sessionId>}...`), a limit key's rates and places in flight
//! (`mcp:limits:{<key>}:...`), a session's task records and task index (on a cluster,
//! `mcp:task:records:{<sessionId>}:<taskId>`, so `CREATE` can bound them atomically).
//!
//! Where the contract's key names leave no room for a hash tag (a session's record and its
//! holder's index, `mcp:node:<id>:sessions:<n>`, whose buckets are spread over the slots so
//! that a large instance's index is not one shard's; a heartbeat, the node list and an index;
//! a task record and its executor's index), **the record is the truth and the index a hint**:
//! the fenced scripts compare and write the record alone, and the index is written by its own
//! command once the record says so; readers of an index (the orphan scanner, `fail_tasks_of`)
//! re-check each record. Commands to several slots are sent together (one round trip on one
//! server) rather than pipelined.
//!
//! Pub/sub: when every master runs Redis 7 or later (read from `INFO server` once, logged
//! once), an instance's channel and the changes channel are sharded (`sharded.rs`: `SPUBLISH`,
//! `SSUBSCRIBE` on the master of the channel's slot, with the classic `SUBSCRIBE` beside it for
//! older instances; presence is `PUBSUB SHARDNUMSUB` on that master): a message touches one
//! shard (1 message between servers on 3 masters with a replica each, against 5 for a classic
//! `PUBLISH`, which a cluster copies to every node). A sharded subscription that Redis drops
//! (`sunsubscribe`: a failover, a slot moved) is made again on the slot's new master. The task
//! signals stay classic (a pattern subscription, which sharded pub/sub lacks), on a dedicated
//! connection to one configured node, and so does everything on an older cluster;
//! `PUBSUB NUMSUB` is summed over the nodes. Client-side caching keeps one tracking connection
//! per master (`session/tracking.rs`), each record checked on its slot's master, the slot map
//! read again every second.
//!
//! Tested: `redis_store.rs`, `redis_instances.rs`, `redis_tasks.rs` and `limits.rs` (in
//! `crates/fleetmcp/tests/`) run their fleet tests on both topologies
//! (`support_redis::SharedRedis`), and `examples/help-desk/tests/redis_cluster.rs` runs two
//! binaries on three masters, kills a master (with a replica) under load, and counts the
//! cluster's messages per notification through a `CLUSTER FAILOVER`.
//!
//! This file is the connection as its users see it (connect, run, eval, pipe); `link.rs` is the
//! connection underneath and its upkeep (opening, checking, bounding, rebuilding),
//! `sentinel.rs` what the sentinels are asked, `failover.rs` what they say of failovers kept
//! current (their events and views), `durable.rs` writes confirmed by replicas, `pubsub.rs` the
//! dedicated subscriptions, and `sharded.rs` which of them go by shard.

mod durable;
#[doc(hidden)]
pub use durable::ReadOn;
mod failover;
mod link;
mod pubsub;
mod sentinel;
mod sharded;

pub(crate) use pubsub::Subscription;
pub(crate) use sentinel::server_info;
pub(crate) use sharded::{Broadcast, slot_of};

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;

use crate::redis_config::RedisConfig;
use crate::telemetry::Meters;
use link::Link;
use sentinel::watch_master;

/// Timeouts in a row after which the connection is rebuilt.
pub(crate) const REBUILD_AFTER_TIMEOUTS: u32 = 3;
/// First delay of the background connection retry; it doubles up to [`RETRY_MAX`].
pub(crate) const RETRY_MIN: Duration = Duration::from_secs(1);
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(30);
/// A single-server connection that has not answered for this long is checked with `PING`
/// before its next command (see the module's comment). Short enough that Redis restarting
/// behind an idle connection is noticed, long enough that a busy connection never pays it.
pub(crate) const VALIDATE_AFTER_IDLE: Duration = Duration::from_millis(500);

/// Why a Redis command failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommandError {
    /// No answer within the command timeout (`redis.command_timeout_ms`, the value given).
    #[error("Redis did not answer within {0} ms")]
    Timeout(u64),
    /// No connection to Redis, or the command failed there (the reason given).
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
    /// With Sentinel: when the sentinels last confirmed the master in use, and the count of
    /// `replaced` then (`RedisConn::confirm_master`).
    master_confirmed: parking_lot::Mutex<Option<(std::time::Instant, u64)>>,
    /// Held while the sentinels are asked to confirm the master (one round at a time).
    confirming: tokio::sync::Mutex<()>,
    /// Where every command's latency and failures are counted (the server's, once given).
    meters: std::sync::OnceLock<Meters>,
    /// How channels for one instance go, once decided (`sharded.rs`): 0 not yet, else its code.
    pubsub_mode: AtomicU8,
    /// State the layers above keep per connection, one value per type ([`RedisConn::shared`]).
    shared: parking_lot::Mutex<SharedState>,
    /// With Sentinel: what the sentinels say of failovers, kept current (`failover.rs`).
    failovers: Option<Arc<failover::Failovers>>,
}

/// One value per type, made on first use.
type SharedState =
    std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>;

impl RedisConn {
    fn new_inner(cfg: RedisConfig) -> Result<Arc<Inner>, CommandError> {
        cfg.validate()
            .map_err(|e| CommandError::Unavailable(e.to_string()))?;
        let is_sentinel = cfg.is_sentinel();
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
            master_confirmed: parking_lot::Mutex::new(None),
            confirming: tokio::sync::Mutex::new(()),
            meters: std::sync::OnceLock::new(),
            pubsub_mode: AtomicU8::new(0),
            shared: Default::default(),
            failovers: is_sentinel.then(Default::default),
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
            failover::watch(&inner);
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
            failover::watch(inner);
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
    /// `REBUILD_AFTER_TIMEOUTS` (3) timeouts in a row.
    pub fn rebuild_attempts(&self) -> u32 {
        self.inner.rebuilds.load(Ordering::Acquire)
    }

    /// The settings of the server the connection uses now (with Sentinel, the master it
    /// follows): dedicated connections go where it goes, not to whichever server a lagging
    /// sentinel would name. `None` before it first connected.
    pub(crate) fn server_in_use(&self) -> Option<redis::ConnectionInfo> {
        let client = self.inner.client.load_full()?;
        Some(client.get_connection_info().clone())
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

    /// What counts this connection's work, once [`RedisConn::instrument`] was called.
    pub(crate) fn meters(&self) -> Option<&Meters> {
        self.inner.meters.get()
    }

    /// The configuration this connection was built from.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.cfg
    }

    /// The value of type `T` every user of this connection shares, made with `T::default()`
    /// on first use: what the layers above know of the Redis behind it (the bucket counts of
    /// the holder indexes, `session/index.rs`), which must not be mixed with another Redis's,
    /// as a process-wide value would be when one process talks to several (tests, embedders).
    pub(crate) fn shared<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut shared = self.inner.shared.lock();
        let any = shared
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        // The entry under `T`'s id holds a `T`: the downcast cannot fail.
        any.downcast::<T>()
            .unwrap_or_else(|_| Arc::new(T::default()))
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
