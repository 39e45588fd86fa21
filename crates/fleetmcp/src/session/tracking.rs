//! Client-side caching of the records of held sessions: how an instance serves a held session's
//! requests without a Redis round trip each, and still sees at once that the record was
//! deleted, expired or claimed elsewhere.
//!
//! One dedicated RESP3 connection has `CLIENT TRACKING ON BCAST PREFIX <prefix>session:<tag>
//! NOLOOP`, where `<tag>` is this instance's tag, the 4 characters every id it mints starts with
//! (`id.rs`): when any other connection changes one of those records (a `DEL` on another
//! instance, a claim, the key's expiry) Redis pushes an `invalidate` message on it. The tracker
//! turns those into [`Invalidation`]s for the sessions layer, which then checks that session
//! again on its next request. Its own writes (the refresh inside the check script) do not count
//! (`NOLOOP`). Broadcast rather than per-key tracking, so that Redis keeps no entry per record
//! read (see `tracking_conn`); by tag rather than the whole `<prefix>session:`, so that an
//! instance is told of the records of its own sessions, not of the fleet's (issue 37: each
//! record write was pushed to every other instance, I - 1 pushes, I² for the fleet).
//!
//! A session held here under another instance's tag (claimed by the orphan scanner, taken over on
//! demand) is tracked once its check added that tag's prefix to the connection
//! ([`Tracked::cover`]), before the check's read: the answer of that read is then `tracked`.
//! Prefixes of other tags are bounded ([`MAX_PREFIXES`]) and only grow while the connection lives:
//! when one has gone unused for a session lifetime, the connection is rebuilt with its own prefix
//! alone (voiding every confirmation, as after a lost connection), and the sessions still held add
//! theirs again at their next check. An id without a tag (minted before tags, or with a JSON
//! payload: its first characters are random) is not tracked: a prefix per such session would make
//! Redis's prefix table, which it scans at every key write, grow with sessions; such a session is
//! checked at every request, as when the tracker is down.
//!
//! Whatever Redis may have failed to tell us voids every confirmation: when the connection is
//! lost or replaced, and when Redis flushes its tracking table, the tracker sends
//! [`Invalidation::All`]; until it is connected again checks run on the shared connection and
//! confirm nothing.
//!
//! On a Redis Cluster a server reports only changes to the keys it serves: the tracker keeps one
//! such connection per master (each with the same prefixes), and a record is checked on the
//! connection of the master that serves its slot (the slot map read with `CLUSTER SLOTS`). The map
//! is read again every [`TOPOLOGY_WATCH`]; when it changed (a failover, a slot moved), every
//! connection is rebuilt and every confirmation voided, as after a lost connection.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::id::{instance_tag, tag_of};
use super::lossy::Invalidation;
use super::lossy::{Got, InvalidationSender, Invalidations, LossyReceiver, LossySender};
use crate::redis_config::RedisConfig;
use crate::redis_conn::{CommandError, RedisConn, slot_of};
use arc_swap::ArcSwapOption;
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Value};

/// The tracking connection of one instance (one per master on a cluster).
pub(super) struct Tracker {
    cfg: RedisConfig,
    /// The instance's shared connection: with Sentinel, the tracking connection goes to the
    /// master it follows; its meters count the invalidations received.
    shared: RedisConn,
    conn: ArcSwapOption<Tracked>,
    /// Where invalidations go (the sessions layer); when its receiver is gone, the tracker stops.
    out: InvalidationSender,
    /// `<prefix>session:`: what an invalidated key starts with.
    prefix: String,
    /// This instance's tag: what the ids it mints start with.
    tag: String,
    /// Changes when the instance's shared connection moves to another server (a failover):
    /// the tracking connection follows it.
    replaced: tokio::sync::watch::Receiver<u64>,
}

/// Pause before connecting again: 100 ms doubling to 5 s.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// On a cluster, how often the slot map is read again.
const TOPOLOGY_WATCH: Duration = Duration::from_secs(1);
/// Prefixes of other instances' tags a connection takes at most; past it, sessions of a new tag
/// are checked at every request until the connection is rebuilt. Redis scans every prefix of
/// its table at each key write (`trackingRememberKeyToBroadcast`), and a fleet has about one
/// prefix per instance: this bounds what one instance adds to it.
const MAX_PREFIXES: usize = 1024;
/// How often the tracker looks for prefixes gone unused (see [`Tracked::stale`]), at most: a
/// quarter of the session lifetime when that is shorter.
const TRIM_WATCH: Duration = Duration::from_secs(60);

/// The tracking connection(s), and the prefixes of other tags added to them.
struct Tracked {
    route: Route,
    /// Each connection once (a cluster's master may serve several ranges): where prefixes go.
    masters: Vec<MultiplexedConnection>,
    /// The prefixes added beyond this instance's own, with when a check last needed each.
    added: parking_lot::Mutex<HashMap<String, Instant>>,
    /// One addition at a time: Redis refuses a prefix the connection already has, and a check
    /// must not read before its prefix is in place.
    adding: tokio::sync::Mutex<()>,
}

impl Tracked {
    fn new(route: Route) -> Self {
        let mut masters: Vec<MultiplexedConnection> = Vec::new();
        match &route {
            Route::One(c) => masters.push(c.clone()),
            Route::Slots(shards) => {
                let mut seen: Vec<(&str, u16)> = Vec::new();
                for (s, c) in shards {
                    if !seen.contains(&(s.host.as_str(), s.port)) {
                        seen.push((s.host.as_str(), s.port));
                        masters.push(c.clone());
                    }
                }
            }
        }
        Self {
            route,
            masters,
            added: parking_lot::Mutex::new(HashMap::new()),
            adding: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether Redis reports changes to the keys starting with `prefix` on every connection,
    /// adding it when it is not there yet (and the bound allows): once this answers `true`,
    /// a read on any of them is followed by a push for every later change.
    async fn cover(&self, prefix: &str, limit: Duration) -> bool {
        if self.used(prefix) {
            return true;
        }
        let _one = self.adding.lock().await;
        if self.used(prefix) {
            return true;
        }
        if self.added.lock().len() >= MAX_PREFIXES {
            return false;
        }
        let mut add = redis::cmd("CLIENT");
        add.arg("TRACKING")
            .arg("ON")
            .arg("BCAST")
            .arg("PREFIX")
            .arg(prefix)
            .arg("NOLOOP");
        for conn in &self.masters {
            let mut conn = conn.clone();
            let add = add.query_async::<()>(&mut conn);
            match tokio::time::timeout(limit, add).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "a tracking prefix was not added; the session is checked at every request");
                    return false;
                }
                Err(_) => return false,
            }
        }
        tracing::debug!(
            prefixes = self.added.lock().len() + 1,
            "the records of another instance's tag are tracked here too (a session held here)"
        );
        self.added.lock().insert(prefix.to_string(), Instant::now());
        true
    }

    /// Whether `prefix` was added, noting that a check needs it now.
    fn used(&self, prefix: &str) -> bool {
        match self.added.lock().get_mut(prefix) {
            Some(at) => {
                *at = Instant::now();
                true
            }
            None => false,
        }
    }

    /// Whether a prefix went unused for `lifetime` (a session record's): every session of its
    /// tag held here was checked less recently than that, so is expired or idle for as long.
    fn stale(&self, lifetime: Duration) -> bool {
        self.added.lock().values().any(|at| at.elapsed() > lifetime)
    }
}

/// Where a key is read with tracking on.
enum Route {
    /// One server.
    One(MultiplexedConnection),
    /// A cluster: each slot range with the connection to its master.
    Slots(Vec<(Shard, MultiplexedConnection)>),
}

/// One slot range of a cluster and the master that serves it, as `CLUSTER SLOTS` says.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Shard {
    first: u16,
    last: u16,
    host: String,
    port: u16,
}

impl Route {
    fn for_key(&self, key: &str) -> Option<&MultiplexedConnection> {
        match self {
            Route::One(c) => Some(c),
            Route::Slots(shards) => {
                let slot = slot_of(key.as_bytes());
                shards
                    .iter()
                    .find(|(s, _)| (s.first..=s.last).contains(&slot))
                    .map(|(_, c)| c)
            }
        }
    }
}

impl Tracker {
    /// Starts connecting in the background; returns the tracker and the invalidations it will
    /// report, for the instance named `holder`.
    pub fn start(shared: &RedisConn, holder: &str) -> (Arc<Self>, Invalidations) {
        let (out, rx) = super::lossy::invalidations();
        let cfg = shared.config().clone();
        let tracker = Arc::new(Self {
            prefix: cfg.session_key_prefix(),
            tag: instance_tag(holder),
            cfg,
            shared: shared.clone(),
            replaced: shared.replaced(),
            conn: ArcSwapOption::empty(),
            out,
        });
        tokio::spawn(run(Arc::downgrade(&tracker)));
        (tracker, rx)
    }

    /// The tracking connection that reads session `id`'s record `key` (on a cluster, its
    /// master's), while it is up and reports changes to that record: an id of this instance's
    /// tag, or of another tag once its prefix is added. `None`: the check runs on the shared
    /// connection and confirms nothing (an id without a tag, a prefix that could not be added).
    pub async fn conn_for(&self, id: &str, key: &str) -> Option<MultiplexedConnection> {
        let tracked = self.conn.load_full()?;
        let conn = tracked.route.for_key(key)?.clone();
        if id.starts_with(&self.tag) {
            return Some(conn);
        }
        let prefix = format!("{}{}", self.prefix, tag_of(id)?);
        tracked
            .cover(&prefix, self.cfg.command_timeout())
            .await
            .then_some(conn)
    }

    /// `<prefix>session:<tag>`: the records of the sessions this instance minted.
    fn own_prefix(&self) -> String {
        format!("{}{}", self.prefix, self.tag)
    }

    /// The tracking connection(s), and the receiver of their push messages.
    async fn open(&self) -> Result<(Route, LossyReceiver<PushInfo>), String> {
        // Bounded like the invalidations they become: what does not fit voids every
        // confirmation once (`pump`).
        let (tx, rx) = super::lossy::channel(super::lossy::QUEUED_INVALIDATIONS);
        if !self.cfg.is_cluster() {
            let info = match self.shared.server_in_use() {
                Some(info) if self.cfg.is_sentinel() => info,
                _ => crate::redis_conn::server_info(&self.cfg)
                    .await
                    .map_err(|e| e.to_string())?,
            };
            return Ok((Route::One(self.tracking_conn(info, tx).await?), rx));
        }
        let map = self.slot_map().await?;
        let mut shards: Vec<(Shard, MultiplexedConnection)> = Vec::with_capacity(map.len());
        for shard in map {
            // One connection per master, however many ranges it serves.
            let known = shards
                .iter()
                .find(|(s, _)| (&s.host, s.port) == (&shard.host, shard.port))
                .map(|(_, c)| c.clone());
            let conn = match known {
                Some(c) => c,
                None => {
                    let info = self
                        .cfg
                        .server_connection_info(&shard.host, shard.port)
                        .map_err(|e| e.to_string())?;
                    self.tracking_conn(info, tx.clone()).await?
                }
            };
            shards.push((shard, conn));
        }
        Ok((Route::Slots(shards), rx))
    }

    /// A RESP3 connection to the server `info` names, with tracking on (`NOLOOP`), its pushes
    /// sent to `pushes`.
    async fn tracking_conn(
        &self,
        info: redis::ConnectionInfo,
        pushes: LossySender<PushInfo>,
    ) -> Result<MultiplexedConnection, String> {
        let client = self.cfg.resp3_client_for(info).map_err(|e| e.to_string())?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.cfg.connect_timeout()))
            .set_response_timeout(Some(self.cfg.command_timeout()))
            .set_push_sender(move |push| pushes.send(push));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| e.to_string())?;
        // Broadcast mode on the record prefix: Redis reports every change to a record, as it
        // would for the records read here, but keeps no entry per key read (about 190 bytes of
        // its memory per session held, docs/BENCHMARKS.md, Memory), and never evicts entries
        // past `tracking-table-max-keys` (which voids confirmations). The price: changes to
        // records held elsewhere are reported too (creations, refreshes, claims, deletions
        // of this instance's tag, not each call), ignored here by one map lookup each when the
        // session went elsewhere.
        redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .arg("BCAST")
            .arg("PREFIX")
            .arg(self.own_prefix())
            .arg("NOLOOP")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(conn)
    }

    /// The cluster's slot map, as the first configured node that answers `CLUSTER SLOTS`
    /// reports it.
    async fn slot_map(&self) -> Result<Vec<Shard>, String> {
        crate::redis_conn::on_first_cluster_node(&self.cfg, |client| async move {
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| CommandError::Unavailable(e.to_string()))?;
            read_slot_map(&mut conn)
                .await
                .map_err(CommandError::Unavailable)
        })
        .await
        .map_err(|e| e.to_string())
    }

    /// Whether the cluster's slot map is no longer the one the connections were made for (or
    /// cannot be read on them: a master gone).
    async fn topology_changed(&self) -> bool {
        let Some(route) = self.conn.load_full() else {
            return false;
        };
        let Route::Slots(shards) = &route.route else {
            return false;
        };
        let Some((_, conn)) = shards.first() else {
            return true;
        };
        let mut conn = conn.clone();
        match tokio::time::timeout(self.cfg.command_timeout(), read_slot_map(&mut conn)).await {
            Ok(Ok(now)) => !now.iter().eq(shards.iter().map(|(s, _)| s)),
            _ => true,
        }
    }

    /// Reports the invalidations of the connection(s) until one is lost (or, on a cluster, the
    /// slot map changes, or a prefix went unused: [`Ended::Trim`]).
    async fn pump(&self, mut pushes: LossyReceiver<PushInfo>) -> Ended {
        let mut replaced = self.replaced.clone();
        replaced.mark_unchanged();
        let mut topology = tokio::time::interval(TOPOLOGY_WATCH);
        topology.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        topology.tick().await;
        let lifetime = Duration::from_millis(self.cfg.default_ttl_ms);
        let every = TRIM_WATCH.min(lifetime / 4).max(Duration::from_millis(50));
        let mut trim = tokio::time::interval(every);
        trim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        trim.tick().await;
        loop {
            let push = tokio::select! {
                p = pushes.recv() => p,
                // The shared connection moved (a failover): this one reconnects too.
                Ok(()) = replaced.changed() => return Ended::Lost,
                // Nobody listens any more (the server stopped): let the connection go.
                _ = self.out.closed() => return Ended::Lost,
                _ = topology.tick(), if self.cfg.is_cluster() => {
                    if self.topology_changed().await {
                        tracing::info!("the cluster's slot map changed; tracking connections follow it");
                        return Ended::Lost;
                    }
                    continue;
                }
                _ = trim.tick() => {
                    if self.conn.load().as_ref().is_some_and(|t| t.stale(lifetime)) {
                        return Ended::Trim;
                    }
                    continue;
                }
            };
            let push = match push {
                Some(Got::One(push)) => push,
                // Pushes Redis sent that did not fit: their keys are unknown, so every one.
                Some(Got::Lost(n)) => {
                    tracing::warn!(
                        lost = n,
                        "more record changes were pushed than queued; every held session is checked again"
                    );
                    let _ = self.out.send(Invalidation::All);
                    continue;
                }
                None => return Ended::Lost,
            };
            match push.kind {
                PushKind::Invalidate => match push.data.first() {
                    Some(Value::Array(keys)) => {
                        if let Some(m) = self.shared.meters() {
                            m.invalidations(keys.len() as u64);
                        }
                        for key in keys {
                            let key = match key {
                                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                                Value::SimpleString(s) => s.clone(),
                                _ => continue,
                            };
                            if let Some(id) = key.strip_prefix(&self.prefix) {
                                let _ = self.out.send(Invalidation::Key(id.to_string()));
                            }
                        }
                    }
                    // A null key list: Redis flushed its tracking table.
                    _ => {
                        let _ = self.out.send(Invalidation::All);
                    }
                },
                PushKind::Disconnection => return Ended::Lost,
                _ => {}
            }
        }
    }
}

/// Why [`Tracker::pump`] let its connection(s) go.
enum Ended {
    /// Lost or replaced: whatever Redis said meanwhile may be missing.
    Lost,
    /// A prefix went unused: rebuilt at once with this instance's prefix alone.
    Trim,
}

/// `CLUSTER SLOTS` on `conn`, sorted by slot.
async fn read_slot_map(conn: &mut MultiplexedConnection) -> Result<Vec<Shard>, String> {
    let ranges: Vec<Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    let field = |v: Option<&Value>| v.cloned().unwrap_or(Value::Nil);
    let mut map = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(items) = range else {
            return Err("a CLUSTER SLOTS entry that is not an array".into());
        };
        let Some(Value::Array(master)) = items.get(2) else {
            return Err("a CLUSTER SLOTS entry without its master".into());
        };
        let (first, last, host, port) =
            redis::from_redis_value::<(u16, u16, String, u16)>(Value::Array(vec![
                field(items.first()),
                field(items.get(1)),
                field(master.first()),
                field(master.get(1)),
            ]))
            .map_err(|e| e.to_string())?;
        map.push(Shard {
            first,
            last,
            host,
            port,
        });
    }
    map.sort();
    Ok(map)
}

/// Connects, reports, and connects again when the connection is lost, until the tracker is
/// dropped or nobody listens to it.
async fn run(tracker: Weak<Tracker>) {
    let mut delay = RETRY_MIN;
    loop {
        let Some(t) = tracker.upgrade() else { return };
        if t.out.is_closed() {
            return;
        }
        match t.open().await {
            Ok((conn, pushes)) => {
                delay = RETRY_MIN;
                // Nothing confirmed before this connection is known to Redis's table.
                let _ = t.out.send(Invalidation::All);
                t.conn.store(Some(Arc::new(Tracked::new(conn))));
                tracing::debug!("session records are tracked (client-side caching on)");
                let ended = t.pump(pushes).await;
                t.conn.store(None);
                if t.out.is_closed() {
                    // The server stopped: nothing was lost, and nothing is to be said.
                    return;
                }
                // Confirmations made under the prefixes of the old connection: void.
                let _ = t.out.send(Invalidation::All);
                if let Ended::Trim = ended {
                    tracing::info!(
                        "a tracked prefix went unused; the tracking connection is rebuilt with this instance's alone"
                    );
                    continue;
                }
                tracing::warn!(
                    "the tracking connection to Redis was lost; every held session is checked again until it is back"
                );
            }
            Err(e) => {
                tracing::debug!(error = %e, retry_in_ms = delay.as_millis() as u64, "the tracking connection to Redis could not be opened");
            }
        }
        drop(t);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RETRY_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::slot_of;

    #[test]
    fn slots_are_redis_clusters() {
        // Values from `CLUSTER KEYSLOT` and the specification's CRC16 check value.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"123456789"), 0x31c3);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"mcp:events:{abc}:7"), slot_of(b"abc"));
        // An empty tag hashes the whole key.
        assert_eq!(slot_of(b"foo{}{bar}"), {
            crc16::State::<crc16::XMODEM>::calculate(b"foo{}{bar}") % 16384
        });
    }
}
