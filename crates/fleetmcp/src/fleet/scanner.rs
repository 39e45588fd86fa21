//! The orphan scanner: claims the sessions of instances that stopped or crashed, in the
//! background, so that their next requests find a live holder without a takeover on the way.
//!
//! Nothing here lists the keyspace (`KEYS` blocks Redis for everyone, and a `SCAN` of it costs
//! as much as the keyspace is large). Every instance scores itself in `<haPrefix>nodes` at each
//! beat (its last beat, Unix ms; 0 once it stopped gracefully), and indexes the sessions it
//! holds in `<prefix>node:<nodeId>:sessions:<n>` (listpack-sized buckets, `session/index.rs`,
//! kept by the session store's create, claim and refresh). A run reads `nodes` once, with the
//! scores, finds the dead among them, and claims the sessions of each dead one's index
//! [`GATHER`] at a time: their records read [`BATCH`] to an `MGET`, then claimed by one script
//! per batch of ~500 (about one Redis command per session on one server, the `SET` of each
//! record inside the script). On a cluster the records are in different slots: an `MGET` reads
//! one slot's (the ids are ordered by slot, and the more are gathered, the more share a slot:
//! about six a slot at 100,000), and the script runs per master (`CLAIM_SPREAD`, one `SET ...
//! GET` a record): about 1.5 commands a session at 100,000 sessions, 2 at a few thousand.
//! Its cost grows with the dead instance's sessions, not with the keyspace.
//!
//! One run per interval in the whole fleet: a run first takes `<haPrefix>scanner:lock`
//! (`SET NX PX` for one interval) and leaves it to expire, so that whichever instance tries
//! first once it expired runs, and the others' tries that interval cost one `SET` each. The
//! lock only elects; a run longer than the interval keeps it (`PEXPIRE`, while it is still this
//! instance's), and two runs that meet anyway are safe, as every claim is the store's
//! compare-and-set on holder and epoch (a scanner and an on-demand takeover racing for one
//! session cannot both win either).
//!
//! Dead instances are found from the scores of that one read: an instance whose last beat is
//! recent (within the heartbeat lifetime less one interval, for clocks a little apart) rewrote
//! its heartbeat a moment ago and is alive, with no further command. Only an instance whose
//! score is older, or 0 (it stopped), is looked at: it is dead when its heartbeat is gone and
//! either nothing holds its channel (the kernel closed a crashed process's connections; a
//! stopped one unsubscribed) or its last beat is older than the heartbeat lifetime plus
//! `FRONTMCP_HA_TAKEOVER_GRACE_MS` (alive but silent for that long: the same rule as on-demand
//! takeover). An idle fleet's scanner thus costs one `SET` per instance and one `ZRANGE` per
//! interval, whatever its size. Verdicts come only once this instance's own lease has held a
//! moment (`heartbeat_liveness::RECOVERY`): after an outage of Redis as a whole, every instance's
//! heartbeat and subscription are gone at once, and the live ones show themselves again only
//! a moment after Redis answers them. A dead instance's unfinished background tasks end as
//! failed (`Tasks::fail_tasks_of`).

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::beat::nodes_key;
use super::heartbeat::{channel_of, subscribers};
use super::heartbeat_liveness::RECOVERY;
use crate::app::App;
use crate::clock::unix_ms;
use crate::redis_conn::{CommandError, RedisConn, slot_of};
use crate::session::{Claim, RedisSessionStore, index};

/// Most entries read from one index key per round.
const BATCH: usize = 500;

/// Index keys read together (one `ZRANGE` each, sent together).
const GROUP: usize = 64;

/// Most index entries gathered before their sessions are claimed together (their ids, then
/// their records, a few MB). On a Redis Cluster the records of a dead instance fall one or a
/// few in each of the 16,384 slots, and reading them costs one `MGET` a slot: the more are
/// claimed together, the more share one (100,000 sessions, about six a slot).
const GATHER: usize = 32_768;

/// Reads (`BATCH` records each) in flight at once.
const AT_ONCE: usize = 4;

/// Keeps the lock for another `ARGV[2]` ms, only while it is still this instance's.
const KEEP_LOCK: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"#;

pub(super) struct Scanner {
    /// Whose tasks a dead instance's are failed in (`Tasks::fail_tasks_of`).
    pub app: App,
    pub redis: RedisConn,
    pub store: RedisSessionStore,
    pub me: String,
    pub key_prefix: String,
    pub interval: Duration,
    pub heartbeat_ttl: Duration,
    pub grace: Duration,
}

/// What one run did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Scan {
    /// Dead instances found.
    pub dead: usize,
    /// Index entries looked at.
    pub scanned: usize,
    /// Sessions claimed for this instance.
    pub claimed: usize,
}

impl Scanner {
    /// Runs until `stop`: first after one interval plus the grace period (so that a fleet
    /// starting together does not judge itself), then every interval; runs never overlap.
    pub async fn run(self, stop: CancellationToken) {
        tracing::info!(
            "[HA] Orphan scanner started (interval: {}ms)",
            self.interval.as_millis()
        );
        let mut wait = self.interval + self.grace;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.cancelled() => return,
            }
            wait = self.interval;
            match self.scan_once().await {
                Ok(Some(scan)) => {
                    tracing::debug!(
                        "[HA] Orphan scan complete: scanned={}, claimed={}",
                        scan.scanned,
                        scan.claimed
                    );
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("[HA] Orphan scan failed: {e}"),
            }
        }
    }

    /// One run, if this instance gets the lock (`None` when another scanner ran this interval,
    /// or when no instance is alive). The lock is left to expire: one run per interval.
    pub async fn scan_once(&self) -> Result<Option<Scan>, CommandError> {
        let taken: Option<String> = self
            .redis
            .run(
                redis::cmd("SET")
                    .arg(self.lock_key())
                    .arg(&self.me)
                    .arg("NX")
                    .arg("PX")
                    .arg(self.lock_ms())
                    .clone(),
            )
            .await?;
        if taken.is_none() {
            return Ok(None);
        }
        self.scan_locked().await
    }

    fn lock_key(&self) -> String {
        format!("{}scanner:lock", self.key_prefix)
    }

    /// How long a run holds the lock: one interval.
    fn lock_ms(&self) -> u64 {
        (self.interval.as_millis() as u64).max(1)
    }

    /// Keeps the lock for another interval while this run goes on (a dead instance's many
    /// sessions may take longer than one), so that no other run starts meanwhile.
    async fn keep_lock(&self) {
        let script = redis::Script::new(KEEP_LOCK);
        let mut keep = script.prepare_invoke();
        keep.key(self.lock_key()).arg(&self.me).arg(self.lock_ms());
        if let Err(e) = self.redis.eval::<i64>(keep).await {
            tracing::debug!(error = %e, "[HA] the scanner's lock was not kept");
        }
    }

    /// Runs `work` while keeping the lock every half interval: one gather's claim may outlast
    /// an interval (another run would then read the same index again, and its claims lose).
    async fn keeping_lock<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = tokio::time::sleep(self.interval / 2) => self.keep_lock().await,
            }
        }
    }

    async fn scan_locked(&self) -> Result<Option<Scan>, CommandError> {
        let nodes: Vec<(String, u64)> = self
            .redis
            .run(
                redis::cmd("ZRANGE")
                    .arg(nodes_key(&self.key_prefix))
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .clone(),
            )
            .await?;
        if !nodes.iter().any(|(n, _)| n == &self.me) {
            // This instance's own beat should be there: an empty or foreign view means
            // Redis trouble, not a dead fleet.
            tracing::warn!(
                "[HA] Orphan scan skipped: no alive nodes detected (Redis may be unavailable)"
            );
            return Ok(None);
        }
        let mut scan = Scan::default();
        if !super::heartbeat_liveness::settled(self.app.sessions().lease()) {
            tracing::debug!(
                "[HA] Orphan scan: no verdicts yet, this instance is only just back in the fleet"
            );
            return Ok(Some(scan));
        }
        let now = unix_ms();
        // A beat this recent was written with its heartbeat, which lives a lifetime from then:
        // the instance is alive, nothing to ask. Less one interval, for a clock behind ours.
        let fresh = self.heartbeat_ttl.saturating_sub(self.interval).as_millis() as u64;
        for (node, last_beat) in nodes {
            if node == self.me
                || (last_beat > 0 && now.saturating_sub(last_beat) < fresh)
                || !self.is_dead(&node, last_beat).await?
            {
                continue;
            }
            scan.dead += 1;
            let found_dead_at = unix_ms();
            let started = Instant::now();
            let (scanned, claimed) = self.keeping_lock(self.claim_all(&node)).await?;
            scan.scanned += scanned;
            scan.claimed += claimed;
            // Its unfinished tasks end as failed rather than stay `working` until they expire;
            // those stored a moment ago are left to their readers' check
            // (`heartbeat_liveness.rs`), as their executor reached Redis then.
            let spawned_before = found_dead_at.saturating_sub(RECOVERY.as_millis() as u64);
            self.app.tasks().fail_tasks_of(&node, spawned_before).await;
            tracing::info!(
                dead_node_id = %node,
                scanned,
                claimed,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "[HA] Orphan scan: claimed the sessions of a dead node"
            );
        }
        Ok(Some(scan))
    }

    /// Whether `node`, last seen beating at `last_beat`, is dead (see the module's rule).
    async fn is_dead(&self, node: &str, last_beat: u64) -> Result<bool, CommandError> {
        let beating: i64 = self
            .redis
            .run(
                redis::cmd("EXISTS")
                    .arg(format!("{}heartbeat:{node}", self.key_prefix))
                    .clone(),
            )
            .await?;
        if beating > 0 {
            return Ok(false);
        }
        if subscribers(&self.redis, &channel_of(&self.key_prefix, node)).await == Some(0) {
            return Ok(true);
        }
        let silent_for = unix_ms().saturating_sub(last_beat);
        Ok(silent_for > (self.heartbeat_ttl + self.grace).as_millis() as u64)
    }

    /// Claims every session in `dead`'s index; returns (entries looked at, sessions claimed).
    /// Entries of sessions that ended or moved are dropped from the index; once it is empty,
    /// `dead` leaves `nodes` and its bucket count goes.
    ///
    /// The index is read [`GROUP`] buckets at a time (one `ZRANGE` each, sent together), up to
    /// [`GATHER`] entries, whose sessions are then claimed together ([`Scanner::claim_gathered`]),
    /// and again until a pass finds it empty.
    async fn claim_all(&self, dead: &str) -> Result<(usize, usize), CommandError> {
        let count = index::read(&self.redis, dead).await?;
        // Room in this instance's index for what it is about to hold, before it writes there
        // (the buckets' share estimated, an old version's single index counted).
        let legacy: usize = self
            .redis
            .run(
                redis::cmd("ZCARD")
                    .arg(self.redis.config().node_index_key(dead))
                    .clone(),
            )
            .await?;
        let coming = count as usize * index::PER_BUCKET + legacy;
        index::grow(&self.redis, &self.me, self.app.sessions().held() + coming).await?;
        let keys = index::keys(&self.redis, dead, count);
        let (mut scanned, mut claimed) = (0, 0);
        loop {
            let (mut found, mut moved) = (0, false);
            let mut gathered: Vec<(String, &String)> = Vec::new();
            for (n, group) in keys.chunks(GROUP).enumerate() {
                let reads = group.iter().map(|key| {
                    self.redis.run::<Vec<String>>(
                        redis::cmd("ZRANGE")
                            .arg(key)
                            .arg(0)
                            .arg(BATCH as i64 - 1)
                            .clone(),
                    )
                });
                let lists = futures_util::future::try_join_all(reads).await?;
                for (key, list) in group.iter().zip(lists) {
                    gathered.extend(list.into_iter().map(|id| (id, key)));
                }
                let last = (n + 1) * GROUP >= keys.len();
                if gathered.len() >= GATHER || (last && !gathered.is_empty()) {
                    let (f, m, won) = self
                        .claim_gathered(dead, std::mem::take(&mut gathered))
                        .await?;
                    found += f;
                    moved |= m;
                    claimed += won;
                }
            }
            scanned += found;
            if found == 0 {
                break;
            }
            if !moved {
                // Nothing moved: another scanner or a concurrent change; try next run.
                return Ok((scanned, claimed));
            }
        }
        let mut gone = redis::cmd("DEL");
        gone.arg(self.redis.config().node_index_buckets_key(dead));
        let mut left = redis::cmd("ZREM");
        left.arg(nodes_key(&self.key_prefix)).arg(dead);
        let (gone, left) =
            futures_util::join!(self.redis.run::<i64>(gone), self.redis.run::<i64>(left));
        gone.and(left)?;
        Ok((scanned, claimed))
    }

    /// Claims the sessions of the index entries `gathered` of `dead` (each with the key it was
    /// read from): (entries looked at, whether any entry moved or left, sessions claimed).
    /// Their records are read [`BATCH`] at a time (one `MGET` each, sent together: on a
    /// cluster one a slot, the ids ordered by slot so that a slot's records are read
    /// together), and claimed in one [`RedisSessionStore::claim_many`]; the index moves cost
    /// one command a bucket.
    async fn claim_gathered(
        &self,
        dead: &str,
        mut gathered: Vec<(String, &String)>,
    ) -> Result<(usize, bool, usize), CommandError> {
        if self.redis.config().is_cluster() {
            gathered.sort_by_cached_key(|(id, _)| slot_of(self.store.key(id).as_bytes()));
        }
        let ids: Vec<String> = gathered.iter().map(|(id, _)| id.clone()).collect();
        // A few at once: each is bounded by the command timeout from when it is sent, and on a
        // cluster each is hundreds of commands (one a slot).
        let mut records = Vec::with_capacity(ids.len());
        for some in ids.chunks(BATCH * AT_ONCE) {
            let reads = some.chunks(BATCH).map(|chunk| self.store.get_many(chunk));
            let read = futures_util::future::try_join_all(reads)
                .await
                .map_err(unavailable)?;
            records.extend(read.into_iter().flatten());
        }
        let mut stale: std::collections::BTreeMap<&String, Vec<&str>> = Default::default();
        let mut mine = Vec::new();
        let mut mine_from = Vec::new();
        for ((id, key), record) in gathered.iter().zip(records) {
            match record {
                // A 2024-11-05 session lives in its stream, on the instance that has it:
                // claimed, it could be served nowhere, and an instance that was only paused
                // would lose it when it comes back. Left to its holder (its record expires
                // if the holder is gone); out of the index, which the holder rewrites.
                Some(r) if r.holder == dead && !self.app.sessions().is_pinned(id) => {
                    mine.push(r);
                    mine_from.push(*key);
                }
                _ => stale.entry(*key).or_default().push(id),
            }
        }
        let answers = self
            .store
            .claim_many(&mine, &self.me)
            .await
            .map_err(unavailable)?;
        let mut claimed = 0;
        for ((record, key), answer) in mine.iter().zip(mine_from).zip(answers) {
            match answer {
                Claim::Won(_) => {
                    claimed += 1;
                    let short: String = record.id.chars().take(20).collect();
                    tracing::info!("[HA] Orphan scan: claimed session {short} from {dead}");
                    tracing::info!(session_id = %crate::session::LogId(&record.id), "[HA] Adopted an orphaned session — this node now serves it");
                }
                // Claimed by someone else, or gone: the script left the entry.
                Claim::Lost { .. } | Claim::Gone => stale.entry(key).or_default().push(&record.id),
            }
        }
        let removes = stale.into_iter().map(|(key, ids)| {
            self.redis
                .run::<i64>(redis::cmd("ZREM").arg(key).arg(ids).clone())
        });
        let removed: i64 = futures_util::future::try_join_all(removes)
            .await?
            .into_iter()
            .sum();
        Ok((gathered.len(), removed > 0 || claimed > 0, claimed))
    }
}

fn unavailable(e: crate::session::StoreError) -> CommandError {
    CommandError::Unavailable(e.to_string())
}
