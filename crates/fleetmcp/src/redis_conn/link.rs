//! The connection commands go through ([`Link`]: one server's, alone or found through
//! Sentinel, or a cluster's) and its upkeep: opening it, checking one that may be stale,
//! bounding every command, and rebuilding it after timeouts or a failover, as the module's
//! comment of `redis_conn` tells.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

use super::sentinel::{check_master, server_info};
use super::{CommandError, Inner, REBUILD_AFTER_TIMEOUTS, VALIDATE_AFTER_IDLE, unavailable};
use crate::telemetry::meters::RedisOutcome;

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

    pub(super) fn install(&self, link: Link) {
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
    /// timeout for the `PING`); with Sentinel, to the master a sentinel announced in a switch a
    /// moment ago (`Failovers::switched_to`), else to the one the sentinels name now, checked
    /// with `ROLE` (each sentinel asked is bounded the same way).
    pub(super) async fn open(&self) -> Result<Link, CommandError> {
        if self.cfg.is_cluster() {
            return self.open_cluster().await;
        }
        if !self.cfg.is_sentinel() {
            let client = self
                .client
                .load_full()
                .ok_or_else(|| CommandError::Unavailable("no Redis client".into()))?;
            return self.open_single(client, None).await;
        }
        let config =
            |e: crate::redis_config::RedisConfigError| CommandError::Unavailable(e.to_string());
        let announced = self.failovers.as_ref().and_then(|f| f.switched_to());
        if let Some((host, port)) = announced.as_deref().and_then(|a| a.rsplit_once(':'))
            && let Ok(port) = port.parse()
        {
            let info = self
                .cfg
                .server_connection_info(host, port)
                .map_err(config)?;
            let client = Arc::new(self.cfg.client_for(info).map_err(config)?);
            // Not a master (yet, or any more): the sentinels are asked, as without a switch.
            if let Ok(link) = self.open_single(client, announced.clone()).await {
                return Ok(link);
            }
        }
        let info = server_info(&self.cfg).await?;
        let address = Some(info.addr().to_string());
        let client = Arc::new(self.cfg.client_for(info).map_err(config)?);
        self.open_single(client, address).await
    }

    /// A connection with `client` to one server (`address`, with Sentinel: then it must be a
    /// master), within [`Inner::open`]'s bound; installed as the client and master in use once
    /// it answers.
    async fn open_single(
        &self,
        client: Arc<redis::Client>,
        address: Option<String>,
    ) -> Result<Link, CommandError> {
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
    pub(super) async fn bounded<T, F, Fut>(self: &Arc<Self>, work: F) -> Result<T, CommandError>
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
    pub(super) async fn bounded_on<T, F, Fut>(
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
    pub(super) fn rebuild(self: &Arc<Self>, why: String) {
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
pub(super) enum Link {
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
