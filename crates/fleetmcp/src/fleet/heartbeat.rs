//! The heartbeat: each instance keeps `<prefix>heartbeat:<nodeId>` alive in Redis
//! (`{nodeId, startedAt, lastBeat, sessionCount, address, compactRecords}`, rewritten every
//! interval, expiring after the TTL) and deletes it when it stops gracefully, so that others can
//! tell a stopped instance from a running one at once. It also refuses to start under a machine
//! id a running instance uses, reports to `/readyz` whether its key is there, renews the
//! instance's `session::Lease` after each write that succeeded, and until the fleet reads
//! compact session records, reads the others' heartbeats now and then (`record_form.rs`).
//!
//! Presence: a running instance stays subscribed to its own channel, `<prefix>notify:<nodeId>`
//! (the contract's relay channel). The kernel closes a dead process's connections, so a crashed
//! instance has no subscriber at once, while a paused or busy one keeps its subscription. At
//! start, a heartbeat key under our machine id with no subscriber on that channel is one a crash
//! left behind: the instance takes its place at once instead of waiting an interval to see
//! whether the key is rewritten.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::clock::unix_ms as now_ms;
use crate::config::HaConfig;
use crate::redis_conn::RedisConn;
use crate::session::Lease;
use crate::transport::{Probe, ProbeReport};

use super::beat::{Beat, nodes_key, read_beat};

/// Beats between two statements of this instance's index bucket count (`keep_index`).
const RESTATE_EVERY: u32 = 6;

/// How long a stop waits for Redis to see this instance's channel subscription go before it
/// deletes the heartbeat anyway (closing a connection takes Redis well under a millisecond).
const UNSUBSCRIBE_WAIT: Duration = Duration::from_secs(1);

/// The heartbeat of one instance.
pub(crate) struct Heartbeat {
    redis: RedisConn,
    machine_id: String,
    key: String,
    /// This instance's channel, whose subscriber count tells whether it is alive.
    channel: String,
    /// Where the other instances reach this one (it may change while the instance runs).
    address: Arc<super::advertise::Advertiser>,
    started_at: u64,
    interval: Duration,
    ttl_ms: u64,
    /// The last write of the heartbeat succeeded.
    active: AtomicBool,
    /// Renewed by every successful beat: how long this instance may serve its sessions without
    /// confirming them in the store.
    lease: Arc<Lease>,
    /// `<haPrefix>nodes`: every instance's last beat, for the orphan scanner.
    nodes_key: String,
    /// `<haPrefix>`, under which the others' heartbeats are read (`record_form.rs`).
    ha_prefix: String,
    /// Whether the fleet reads compact session records yet, and which older instance it saw last.
    record_form: super::record_form::Follower,
    /// The next bucket of this instance's index pruned of expired entries (a few per beat, in
    /// rotation: `session/index.rs`).
    prune_next: std::sync::atomic::AtomicU32,
    /// Whether this instance's bucket count was read from Redis (at start, else at a beat), and
    /// whether a version before the buckets left its single index under this machine id (then
    /// pruned in the rotation too, until it is gone).
    index_read: AtomicBool,
    legacy_index: AtomicBool,
    /// Beats written, to restate the bucket count now and then (see `keep_index`).
    beats: std::sync::atomic::AtomicU32,
    /// Set once the heartbeat is deleted; held across each write, so that a beat already under
    /// way cannot write the key again after [`Heartbeat::stop`] deleted it.
    stopped: tokio::sync::Mutex<bool>,
}

impl Heartbeat {
    /// Starts beating: refuses when another running instance already beats under this
    /// machine id (two instances must never share one), then writes the first heartbeat.
    pub async fn start(
        redis: RedisConn,
        machine_id: &str,
        cfg: &HaConfig,
        address: Arc<super::advertise::Advertiser>,
        lease: Arc<Lease>,
        on_message: impl Fn(&[u8]) + Send + 'static,
        stop: CancellationToken,
    ) -> Result<Arc<Self>, String> {
        let ha = Arc::new(Self {
            lease,
            nodes_key: nodes_key(&cfg.key_prefix),
            ha_prefix: cfg.key_prefix.clone(),
            record_form: Default::default(),
            prune_next: Default::default(),
            index_read: AtomicBool::new(false),
            legacy_index: AtomicBool::new(false),
            beats: Default::default(),
            address,
            key: format!("{}heartbeat:{machine_id}", cfg.key_prefix),
            channel: channel_of(&cfg.key_prefix, machine_id),
            redis,
            machine_id: machine_id.to_string(),
            started_at: now_ms(),
            interval: Duration::from_millis(cfg.heartbeat_interval_ms),
            ttl_ms: cfg.heartbeat_ttl_ms,
            active: AtomicBool::new(false),
            stopped: tokio::sync::Mutex::new(false),
        });
        if let Some(before) = ha.read().await {
            let twin = match ha.listeners().await {
                Some(n) => n > 0,
                // Redis cannot say: a live instance rewrites its key within an interval, a dead
                // one does not.
                None => {
                    tokio::time::sleep(ha.interval + ha.interval / 10).await;
                    ha.read()
                        .await
                        .is_some_and(|after| after.last_beat != before.last_beat)
                }
            };
            if twin {
                return Err(format!(
                    "another running instance already uses machine id {machine_id} (started at {} ms); give every instance its own MACHINE_ID",
                    before.started_at
                ));
            }
            tracing::info!(
                previous_started_at = before.started_at,
                "[HA] A stopped instance left its heartbeat under machine id {machine_id}; taking its place"
            );
        }
        // Subscribed before the first beat, so an instance that starts under the same id from
        // now on sees this one alive.
        // Redis may be down at start: the instance still starts (its `/readyz` says not ready
        // until the heartbeat is written) and subscribes once Redis answers.
        let messages = match ha.redis.subscribe_sharded(&ha.channel).await {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(error = %e, channel = %ha.channel, "[HA] cannot subscribe to this instance's channel yet; retrying");
                None
            }
        };
        // Its subscription tells others this instance is alive (presence); its messages are
        // notifications routed to sessions held here.
        // Others judge this instance gone by its missing subscription (with a refused
        // address): the lease holds only while it is there (`Lease::set_present`).
        let lease = ha.lease.clone();
        tokio::spawn(super::subscription::keep(
            ha.redis.clone(),
            ha.channel.clone(),
            messages,
            stop,
            on_message,
            move |present| lease.set_present(present),
        ));
        ha.beat(0).await;
        tracing::info!("[HA] Heartbeat started for node {machine_id}");
        Ok(ha)
    }

    /// Subscribers of this instance's channel (`None`: Redis did not answer).
    async fn listeners(&self) -> Option<i64> {
        subscribers(&self.redis, &self.channel).await
    }

    async fn read(&self) -> Option<Beat> {
        read_beat(&self.redis, &self.key).await.ok().flatten()
    }

    /// Rewrites the heartbeat (never once it was stopped); whether it was written.
    pub async fn beat(&self, session_count: usize) -> bool {
        let stopped = self.stopped.lock().await;
        if *stopped {
            return false;
        }
        self.keep_index(session_count).await;
        let hb = Beat {
            machine_id: self.machine_id.clone(),
            started_at: self.started_at,
            last_beat: now_ms(),
            session_count,
            address: Some(self.address.current()),
            compact_records: true,
        };
        let Ok(value) = serde_json::to_string(&hb) else {
            return false;
        };
        // The lease counts from before the write is sent: Redis starts the key's lifetime
        // later, so the lease always runs out before the key does.
        let sent_at = std::time::Instant::now();
        let session_ttl = self.redis.config().default_ttl_ms;
        // Keys in different slots of a cluster: one command each, sent together (one round
        // trip on one server). The beat counts only when all were written.
        let mut set = redis::cmd("SET");
        set.arg(&self.key).arg(value).arg("PX").arg(self.ttl_ms);
        let mut listed = redis::cmd("ZADD");
        listed
            .arg(&self.nodes_key)
            .arg(hb.last_beat)
            .arg(&self.machine_id);
        let expired = format!("({}", hb.last_beat.saturating_sub(session_ttl));
        let prunes = self.pruned_now().into_iter().map(|key| {
            let mut pruned = redis::cmd("ZREMRANGEBYSCORE");
            pruned.arg(key).arg("-inf").arg(&expired);
            self.redis.run::<i64>(pruned)
        });
        let (set, listed, pruned) = futures_util::join!(
            self.redis.run::<()>(set),
            self.redis.run::<i64>(listed),
            futures_util::future::join_all(prunes)
        );
        let written = set
            .and(listed)
            .and(pruned.into_iter().try_for_each(|p| p.map(|_| ())));
        let ok = written.is_ok();
        if ok {
            self.lease
                .renew(sent_at, Duration::from_millis(self.ttl_ms));
            let beats = self.beats.load(Ordering::Relaxed);
            self.record_form
                .follow(
                    &self.redis,
                    &self.ha_prefix,
                    self.ttl_ms,
                    beats,
                    hb.last_beat,
                )
                .await;
        }
        if !ok && self.active.load(Ordering::Relaxed) {
            tracing::warn!(node = %self.machine_id, "[HA] heartbeat could not be written; other instances may presume this one gone");
        }
        self.active.store(ok, Ordering::Relaxed);
        ok
    }

    /// This instance's index has buckets enough for `held` sessions (`session/index.rs`): its
    /// bucket count is read from Redis once (a process before this one under the same machine
    /// id may have grown it), then grown as the sessions grow. A failure is tried again at the
    /// next beat; meanwhile writes go to the buckets known, which readers read.
    async fn keep_index(&self, held: usize) {
        use crate::session::index;
        if !self.index_read.load(Ordering::Relaxed) {
            let legacy = redis::cmd("EXISTS")
                .arg(self.redis.config().node_index_key(&self.machine_id))
                .clone();
            let (count, legacy) = futures_util::join!(
                index::read(&self.redis, &self.machine_id),
                self.redis.run::<i64>(legacy)
            );
            if let (Ok(_), Ok(legacy)) = (count, legacy) {
                self.legacy_index.store(legacy > 0, Ordering::Relaxed);
                self.index_read.store(true, Ordering::Relaxed);
            }
        }
        self.redis
            .shared::<crate::session::IndexBuckets>()
            .held(&self.machine_id, held);
        let grown = index::grow(&self.redis, &self.machine_id, held).await;
        // Once a minute or so, the count known here is stated again (never lowering it): an
        // instance taken for dead while it was only paused had its count deleted by the
        // scanner that emptied its index, and must not write where no reader would read.
        let beats = self.beats.fetch_add(1, Ordering::Relaxed);
        let count = self
            .redis
            .shared::<crate::session::IndexBuckets>()
            .of(&self.machine_id);
        let restated = if beats % RESTATE_EVERY == RESTATE_EVERY - 1
            && count > 1
            && self.index_read.load(Ordering::Relaxed)
        {
            index::restate(&self.redis, &self.machine_id, count).await
        } else {
            Ok(())
        };
        if let Err(e) = grown.and(restated) {
            tracing::debug!(error = %e, "[HA] the session index's bucket count was not grown");
        }
    }

    /// The index's keys pruned at this beat: the next [`index::PRUNED_PER_BEAT`] in rotation
    /// (the single index of a version before the buckets last, while it is there).
    ///
    /// [`index::PRUNED_PER_BEAT`]: crate::session::index::PRUNED_PER_BEAT
    fn pruned_now(&self) -> Vec<String> {
        use crate::session::index;
        let count = self
            .redis
            .shared::<crate::session::IndexBuckets>()
            .of(&self.machine_id);
        let legacy = self.legacy_index.load(Ordering::Relaxed);
        let slots = count + u32::from(legacy);
        let first = self.prune_next.load(Ordering::Relaxed) % slots;
        let take = index::PRUNED_PER_BEAT.min(slots);
        self.prune_next
            .store((first + take) % slots, Ordering::Relaxed);
        let cfg = self.redis.config();
        (first..first + take)
            .map(|i| i % slots)
            .map(|n| {
                if n < count {
                    cfg.node_index_bucket_key(&self.machine_id, n)
                } else {
                    cfg.node_index_key(&self.machine_id)
                }
            })
            .collect()
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Whether this instance's heartbeat key is there (readiness).
    pub async fn heartbeat_present(&self) -> bool {
        self.read()
            .await
            .is_some_and(|h| h.started_at == self.started_at)
    }

    pub fn machine_id(&self) -> &str {
        &self.machine_id
    }

    /// A graceful stop: the heartbeat goes at once, so others need not wait for it to expire.
    /// The caller has ended this instance's channel subscription (the stop token of
    /// [`Heartbeat::start`]); this waits, briefly, until Redis has seen it go, so that from the
    /// moment the key is gone others see this instance as stopped (no heartbeat, no
    /// subscription) and take its sessions over at once rather than after the grace period.
    /// Idempotent.
    pub async fn stop(&self) {
        let mut stopped = self.stopped.lock().await;
        if *stopped {
            return;
        }
        *stopped = true;
        let began = std::time::Instant::now();
        while self.listeners().await.is_some_and(|n| n > 0) {
            if began.elapsed() >= UNSUBSCRIBE_WAIT {
                tracing::debug!(channel = %self.channel, "[HA] this instance's channel still has a subscriber; deleting the heartbeat anyway");
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Scored 0 in `nodes`: the orphan scanners judge only the instances whose score is
        // not recent (`scanner.rs`), and this one must be found stopped at their next run.
        let mut mark = redis::cmd("ZADD");
        mark.arg(&self.nodes_key).arg(0).arg(&self.machine_id);
        let (deleted, marked) = futures_util::join!(
            self.redis
                .run::<i64>(redis::cmd("DEL").arg(&self.key).clone()),
            self.redis.run::<i64>(mark)
        );
        if let Err(e) = deleted.and(marked) {
            // Others then take this instance's sessions over once the key expires.
            tracing::error!(error = %e, "[HA] Manager shutdown failed");
        }
        self.active.store(false, Ordering::Relaxed);
    }
}

/// `/readyz`'s `ha` probe: ready while this instance's heartbeat key is in Redis.
#[async_trait]
impl Probe for Heartbeat {
    fn name(&self) -> &'static str {
        "ha"
    }

    async fn check(&self) -> ProbeReport {
        let active = self.heartbeat_present().await;
        ProbeReport {
            healthy: active,
            detail: json!({
                "status": if active { "healthy" } else { "unhealthy" },
                "details": {"nodeId": self.machine_id(), "heartbeatActive": active},
            }),
        }
    }
}

/// Ends this instance's 2024-11-05 streams once it has been absent from Redis (its lease's
/// [`Lease::absent_for`]) for `streams_outlive`, and refuses new ones until it is back,
/// checking every `every` until `withdraw` (a graceful stop, which ends them its own way).
///
/// Such a session lives in its stream here, and nothing takes it over: others answer `404`
/// for it once they find this process gone (`directory.rs`, `process_gone`), which is no
/// sooner than `streams_outlive` after its heartbeat expired (a tenth of the heartbeat's
/// lifetime after what its beats granted ran out) or after its subscription went missing for
/// the takeover grace. A holder cut off from Redis that long is, for them, stopped: it ends
/// the streams first, so that no client is told its session is gone while its stream stays
/// open here (F16 in docs/RELIABILITY.md). Back before that, it keeps them. The check reads
/// a few atomics and needs no Redis, so it runs on while Redis refuses or is silent.
pub(super) async fn watch_lease(
    app: App,
    streams_outlive: Duration,
    every: Duration,
    withdraw: CancellationToken,
) {
    let sessions = app.sessions();
    // Whether this outage was already told in the log.
    let mut told = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = withdraw.cancelled() => return,
        }
        match sessions.lease().absent_for() {
            Some(absent) if absent >= streams_outlive => {
                // Refused first, so no stream opens after the ending unseen (one that opened
                // meanwhile ends at the next check).
                sessions.refuse_pinned(true);
                let ended = sessions.end_pinned_streams();
                if ended > 0 && !told {
                    tracing::warn!(
                        absent_ms = absent.as_millis() as u64,
                        "[HA] lease out past what peers wait; ending {ended} 2024-11-05 streams"
                    );
                } else if ended > 0 {
                    tracing::debug!(
                        "[HA] lease still out; ending {ended} 2024-11-05 streams opened since"
                    );
                }
                told |= ended > 0;
            }
            Some(_) => {}
            None => {
                sessions.refuse_pinned(false);
                told = false;
            }
        }
    }
}

/// Instance `node`'s own channel, `<prefix>notify:<node>` (the contract's relay channel).
pub(super) fn channel_of(key_prefix: &str, node: &str) -> String {
    format!("{key_prefix}notify:{node}")
}

/// Subscribers of `channel`: 0 on an instance's own channel once its process is gone; `None`
/// when Redis did not answer. On a sharded cluster, counted on the master of the channel's slot
/// (one command), and on every node only when that finds none (`redis_conn/sharded.rs`).
pub(super) async fn subscribers(redis: &RedisConn, channel: &str) -> Option<i64> {
    redis.listeners_of(channel).await.ok()
}
