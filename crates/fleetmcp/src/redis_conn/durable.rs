//! Durable writes: a pipeline sent, then confirmed by the replicas `wait_replicas` asks for
//! (`WAIT`, on the same connection), or refused as [`CommandError::NotDurable`] when they do
//! not or the server written to is no longer the master.

use std::sync::Arc;

use super::failover::{Failovers, Needed};
use super::link::Link;
use super::sentinel::{SentinelView, connected_replicas, replicas_of_master, sentinel_views};
use super::{CommandError, RedisConn};
use crate::redis_config::WaitReplicas;

/// How long the sentinels' confirmation of the master in use is taken as current
/// ([`RedisConn::confirm_master`]): shorter than a failover takes to complete.
const MASTER_CONFIRMED_FOR: std::time::Duration = std::time::Duration::from_millis(500);

impl RedisConn {
    /// Sends `pipe` like [`RedisConn::pipe`], then waits until the replicas `wait_replicas`
    /// asks for have confirmed it, on the same connection (a write and its `WAIT` must share
    /// one: `WAIT` counts the writes of its own connection, and the connection may move to a
    /// new master in between). Fails with [`CommandError::NotDurable`] when they do not, or
    /// when the server written to is no longer the master: the write may then be lost.
    ///
    /// One `ROLE` (is the server still a master, and with how many replicas), then `WAIT` for
    /// at most half the command timeout. With Sentinel, how many replicas is what the
    /// sentinels count (`failover.rs`, kept current by their events, not asked per write):
    /// every replica of the master they find up, since Sentinel promotes the one with the
    /// largest replication offset it can reach, which may be one the write has not reached yet;
    /// a master with fewer replicas connected than that may be losing one to a promotion, and
    /// is refused; and a failover announced while the write was under way refuses it. With
    /// `wait_replicas = "auto"` a master the sentinels count no replica of is confirmed by the
    /// sentinels instead (see `RedisConn::written_alone`).
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
        // The failovers announced before the write: one announced before it is confirmed
        // refuses it.
        let seen = self.inner.failovers.as_ref().map(|f| f.events());
        let pipe = &pipe;
        let confirmed = async {
            let written = self
                .inner
                .bounded_on(link.clone(), |mut conn| async move {
                    pipe.query_async::<T>(&mut conn).await
                })
                .await?;
            self.confirm_on(link, seen).await?;
            Ok(written)
        };
        // Whatever failed, the write is not known to be durable.
        confirmed.await.map_err(|e| match e {
            CommandError::NotDurable(why) => CommandError::NotDurable(why),
            other => CommandError::NotDurable(other.to_string()),
        })
    }

    /// With Sentinel, whether the server commands go to is still the master: a majority of the
    /// sentinels that answer within the command timeout name it. A process that slept through a
    /// failover (paused, or cut off while it held no command in flight) may come back to a
    /// connection still open to the old master, which answers as a master, with the data it had,
    /// until the sentinels turn it into a replica, seconds later: whatever it says of who holds
    /// what is stale. When the sentinels name another master, the connection is reopened to it
    /// and the error says so. Without Sentinel: always `Ok`. A confirmation holds for
    /// `MASTER_CONFIRMED_FOR` on the same connection: every request of a holder whose lease is
    /// out asks, and the sentinels are not asked once per request.
    pub async fn confirm_master(&self) -> Result<(), CommandError> {
        let Some(link) = self.inner.conn.load_full() else {
            return Err(CommandError::Unavailable(
                "not connected to Redis yet (retrying in the background)".into(),
            ));
        };
        let Link::Single(_, Some(server)) = &*link else {
            return Ok(());
        };
        let generation = *self.inner.replaced.borrow();
        let current = || {
            self.inner
                .master_confirmed
                .lock()
                .is_some_and(|(at, g)| g == generation && at.elapsed() < MASTER_CONFIRMED_FOR)
        };
        if current() {
            return Ok(());
        }
        // One round of questions at a time: the requests that find nothing (a crowd of expired
        // sessions, unknown task ids) when the confirmation runs out wait for that round rather
        // than each asking every sentinel.
        let _round = self.inner.confirming.lock().await;
        if current() {
            return Ok(());
        }
        let views = sentinel_views(&self.inner.cfg).await?;
        let sentinels = views.len();
        let views: Vec<SentinelView> = views.into_iter().flatten().collect();
        let naming = views.iter().filter(|v| v.master == **server).count();
        if naming * 2 > sentinels {
            *self.inner.master_confirmed.lock() = Some((std::time::Instant::now(), generation));
            return Ok(());
        }
        if let Some(other) = views.iter().find(|v| v.master != **server) {
            let why = format!(
                "the sentinels name a new master, {}, not the one connected to ({server})",
                other.master
            );
            self.inner.rebuild(why.clone());
            return Err(CommandError::Unavailable(why));
        }
        Err(CommandError::Unavailable(format!(
            "{naming} of {sentinels} sentinels name the master connected to ({server}): not a majority"
        )))
    }

    /// Where reads go now: taken before a read whose "nothing there" is believed only from the
    /// master in charge, and checked by [`RedisConn::confirm_master_of`]. Hidden: the
    /// stores' (and their tests'), not an application's.
    #[doc(hidden)]
    pub fn reading_on(&self) -> ReadOn {
        ReadOn(self.inner.conn.load_full())
    }

    /// [`RedisConn::confirm_master`] for a read sent on `read`: also refused when the
    /// connection was replaced since. A process woken after a failover sends its read to the
    /// deposed master while another of its callers (the heartbeat, a check) finds the new
    /// master and moves the connection: the confirmation is then of the new master, and the
    /// read's "nothing there" was the old one's (`redis_sentinel.rs`, the woken instance's
    /// `tasks/get` answered "unknown task" so).
    #[doc(hidden)]
    pub async fn confirm_master_of(&self, read: ReadOn) -> Result<(), CommandError> {
        self.confirm_master().await?;
        let now = self.inner.conn.load_full();
        let sentinel = now
            .as_deref()
            .is_some_and(|l| matches!(l, Link::Single(_, Some(_))));
        let same = match (&read.0, &now) {
            (Some(read), Some(now)) => Arc::ptr_eq(read, now),
            _ => false,
        };
        if sentinel && !same {
            return Err(CommandError::Unavailable(
                "the connection moved to the master the sentinels name since the read: ask again"
                    .into(),
            ));
        }
        Ok(())
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

    /// The replicas' confirmation of what `link` wrote, `seen` the count of failover events
    /// before the write (see [`RedisConn::pipe_durably`]).
    async fn confirm_on(&self, link: Arc<Link>, seen: Option<u64>) -> Result<(), CommandError> {
        let policy = self
            .inner
            .cfg
            .replicas_to_wait()
            .map_err(|e| CommandError::Unavailable(e.to_string()))?;
        let floor = match policy {
            WaitReplicas::Off => return Ok(()),
            _ if self.inner.cfg.is_cluster() => return Ok(()),
            WaitReplicas::Auto => 0,
            WaitReplicas::Count(n) => n as usize,
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
        let server = match &*link {
            Link::Single(_, Some(server)) => server.clone(),
            _ => Arc::from(""),
        };
        let mut want = floor;
        if let Some(failovers) = &self.inner.failovers {
            failovers.connected(&server, &connected_replicas(&role));
            match failovers.needed(&self.inner.cfg, &server).await? {
                Needed::Replicas(counted) if replicas < counted.max(floor) => {
                    return Err(CommandError::NotDurable(format!(
                        "the master written to ({server}) has {replicas} replica(s) connected and the sentinels count {counted} up: one may be being promoted"
                    )));
                }
                Needed::Replicas(counted) => want = counted.max(floor),
                // Every replica connected still confirms it (one the sentinels do not count yet).
                Needed::Alone if floor == 0 && replicas == 0 => {
                    return self.written_alone(&server, failovers, seen).await;
                }
                Needed::Alone => want = floor.max(replicas),
            }
            // `wait_replicas = N` with fewer connected: refused now, not after the wait.
            if replicas < want {
                return Err(CommandError::NotDurable(format!(
                    "the master written to ({server}) has {replicas} replica(s) connected, fewer than the {want} wait_replicas asks for"
                )));
            }
        }
        let wait_ms = (self.inner.cfg.command_timeout_ms / 2).max(1);
        let confirmed: usize = self
            .inner
            .bounded_on(link, |mut conn| async move {
                redis::cmd("WAIT")
                    .arg(want)
                    .arg(wait_ms)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        if confirmed < want {
            return Err(CommandError::NotDurable(format!(
                "{confirmed} of the {want} replica(s) asked for (wait_replicas, and those the sentinels count) confirmed the write within {wait_ms} ms"
            )));
        }
        if let Some(failovers) = &self.inner.failovers {
            unannounced(failovers, seen, &server)?;
        }
        // What the fault harness reads when a write confirmed here is lost after all.
        tracing::debug!(
            %server,
            replicas,
            confirmed,
            want,
            "a durable write was confirmed by the replicas"
        );
        Ok(())
    }

    /// With Sentinel, for a master the sentinels count no replica of (each one down, or the old
    /// master of the failover that made this one, not synced yet), with none connected: whether
    /// a majority of the sentinels, asked now, name the server written to, none is failing it
    /// over or finds it down, and none counts a replica of it up. The sentinels keep naming the
    /// old master until they see the promoted replica answer as master (up to a second, more
    /// for those that do not lead the failover), but the one leading the failover flags it
    /// from its start, those that voted for it find the master down, and those that know
    /// nothing yet still list the promoted replica as the master's, not down. A sentinel that
    /// does not answer in time is not counted (it may be the leader: hence the checks on every
    /// other one). Asked of every sentinel at once, within the command timeout.
    ///
    /// What this leaves open (RELIABILITY.md, F8): the old master of the failover that made this
    /// one is not waited for until it has synced (8 s or more after the switch, when the
    /// sentinels convert it, plus the sync): a second failure of this master in that window
    /// lets the sentinels promote the old one as it is, and what this one took alone is lost.
    /// `wait_replicas = 1` refuses those writes instead.
    async fn written_alone(
        &self,
        server: &str,
        failovers: &Failovers,
        seen: Option<u64>,
    ) -> Result<(), CommandError> {
        let asked = std::time::Instant::now();
        let views = sentinel_views(&self.inner.cfg).await?;
        let sentinels = views.len();
        failovers.keep(views.clone(), asked);
        let answered: Vec<SentinelView> = views.into_iter().flatten().collect();
        let agreeing = failovers
            .alone_agreed(server, &answered)
            .map_err(CommandError::NotDurable)?;
        if agreeing * 2 <= sentinels {
            return Err(CommandError::NotDurable(format!(
                "{agreeing} of {sentinels} sentinels answered: not a majority"
            )));
        }
        unannounced(failovers, seen, server)?;
        tracing::debug!(
            %server,
            agreeing,
            sentinels,
            "a durable write to a master without replicas was confirmed by the sentinels"
        );
        Ok(())
    }
}

/// Fails when a failover was announced since `seen` (the count of failover events before the
/// write) or is under way: the write's confirmation overlapped a failover it did not see end.
fn unannounced(failovers: &Failovers, seen: Option<u64>, server: &str) -> Result<(), CommandError> {
    if seen.is_some_and(|s| s != failovers.events()) || failovers.under_way() {
        return Err(CommandError::NotDurable(format!(
            "a sentinel announced a failover while the write to {server} was confirmed"
        )));
    }
    Ok(())
}

/// The connection a read was sent on ([`RedisConn::reading_on`]).
#[doc(hidden)]
pub struct ReadOn(Option<Arc<Link>>);
