//! The holder index in buckets: which sessions an instance holds, for the orphan scanner, in
//! sorted sets small enough for Redis's compact encoding.
//!
//! Instance `<nodeId>`'s index is `<prefix>node:<nodeId>:sessions:<n>` for `n` below its bucket
//! count, each a sorted set of session ids scored by when the holder last refreshed them; a
//! session's bucket is [`bucket_of`] its id. The bucket count, a power of two, is in
//! `<prefix>node:<nodeId>:buckets`: it grows with the sessions the instance holds (about
//! [`PER_BUCKET`] a bucket; checked at each beat and as sessions are created, one script when
//! it grows) and never shrinks while the key is there, so that a reader reading buckets
//! `0..count` finds every entry. It is written in Redis before anything is written in a new
//! bucket, and stated again about once a minute (a scanner that took a paused instance for
//! dead deleted it with the emptied index). Redis keeps a sorted set of at most 128 entries of at
//! most 64 bytes (`zset-max-listpack-entries`, `-value`) as one listpack: about 80 bytes an
//! entry for a 62-character id, where one big sorted set (a skiplist and a table) takes 166; a
//! bucket key costs about 110 bytes of its own, a byte or two a session at 64 a bucket. A
//! bucket holds 64 on average and rarely more than 100, so it stays a listpack.
//!
//! When the count grows (doubling), the entries written under the smaller one are moved to
//! their new buckets in the background ([`rebalance`]: about four commands a bucket), so that
//! an instance whose sessions open quickly does not pile them up in its first buckets. Until
//! then a session may be refreshed into its new bucket while its old entry waits to move: a
//! reader may see it twice, which costs the orphan scanner a claim that loses (the record is
//! the truth).
//!
//! Redis Cluster: the buckets of one instance are spread over the slots (no hash tag), so that
//! an instance of 100,000 sessions is not one shard's memory and every refresh of its sessions
//! not one shard's work; the scanner reads a dead instance's buckets one command each either way.
//!
//! Versions before the buckets kept one sorted set, `<prefix>node:<nodeId>:sessions`: the
//! scanner and the census read it too, so a new instance claims an old one's sessions during a
//! rolling upgrade.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::redis_conn::{CommandError, RedisConn};

/// Sessions a bucket holds on average before the count doubles.
pub(crate) const PER_BUCKET: usize = 64;

/// Most buckets of one instance (6.5 million sessions at [`PER_BUCKET`]).
pub(crate) const MAX_BUCKETS: u32 = 1 << 17;

/// Buckets pruned of expired entries per heartbeat, in rotation: an idle instance's beat costs
/// the same whatever it holds.
pub(crate) const PRUNED_PER_BEAT: u32 = 8;

/// The bucket of session `id` among `buckets` (a power of two): FNV-1a of the id, the same in
/// every version that has buckets.
pub(crate) fn bucket_of(id: &str, buckets: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h & (buckets.max(1) - 1)
}

/// The bucket count for `held` sessions.
pub(crate) fn wanted(held: usize) -> u32 {
    let n = held.div_ceil(PER_BUCKET).max(1);
    (n.next_power_of_two() as u64).min(u64::from(MAX_BUCKETS)) as u32
}

/// The bucket counts this process knows, by instance: its own (read at start, grown by its
/// heartbeat, its scanner and its creations), and those of dead instances the scanner read.
/// Shared by every user of one connection.
#[derive(Default)]
pub(crate) struct Buckets {
    known: Mutex<HashMap<String, Known>>,
}

#[derive(Clone, Copy)]
struct Known {
    count: u32,
    /// Sessions held at the last beat, and indexed since: what the index may hold now.
    held: usize,
    created: usize,
    /// Entries are being moved to the buckets of a grown count ([`rebalance`]).
    moving: bool,
}

impl Default for Known {
    fn default() -> Self {
        Self {
            count: 1,
            held: 0,
            created: 0,
            moving: false,
        }
    }
}

impl Buckets {
    /// `node`'s bucket count as known here (1 when unknown: writes then go to bucket 0, which
    /// every reader reads).
    pub fn of(&self, node: &str) -> u32 {
        self.known.lock().get(node).map_or(1, |k| k.count)
    }

    /// Records that `node` has at least `count` buckets.
    pub fn raise(&self, node: &str, count: u32) {
        self.with(node, |k| k.count = k.count.max(count));
    }

    /// `node` holds `held` sessions (its heartbeat's count).
    pub fn held(&self, node: &str, held: usize) {
        self.with(node, |k| {
            k.held = held;
            k.created = 0;
        });
    }

    /// A session was indexed under `node`: the sessions its index may hold now, when that
    /// needs more buckets than known (sessions may open faster than beats come: a bucket
    /// past 128 entries would stay a skiplist until it empties).
    pub fn created(&self, node: &str) -> Option<usize> {
        self.with(node, |k| {
            k.created += 1;
            let holds = k.held + k.created;
            (wanted(holds) > k.count).then_some(holds)
        })
    }

    /// Whether this call starts moving `node`'s entries (none was under way).
    fn start_moving(&self, node: &str) -> bool {
        self.with(node, |k| !std::mem::replace(&mut k.moving, true))
    }

    /// The move for `count` buckets is done: whether it was the last (the count did not grow
    /// meanwhile; else another pass follows).
    fn moved(&self, node: &str, count: u32) -> bool {
        self.with(node, |k| {
            k.moving = k.count != count;
            !k.moving
        })
    }

    /// A session indexed under `node` was deleted (so that sessions opened and closed in a
    /// loop do not grow the count).
    pub fn deleted(&self, node: &str) {
        self.with(node, |k| k.created = k.created.saturating_sub(1));
    }

    fn with<T>(&self, node: &str, f: impl FnOnce(&mut Known) -> T) -> T {
        let mut known = self.known.lock();
        if known.len() > 10_000 && !known.contains_key(node) {
            // Dead instances' counts are kept only to claim their sessions: a bounded memory.
            known.clear();
        }
        f(known.entry(node.to_string()).or_default())
    }
}

/// Raises `node`'s stored count to at least `count` (never lowers it); the count stored.
const GROW: &str = r#"
local c = tonumber(redis.call('GET', KEYS[1]) or '1') or 1
local want = tonumber(ARGV[1])
if c < want then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return c
"#;

/// `node`'s bucket count, read from Redis (1 when none is stored), and known here from then on.
pub(crate) async fn read(redis: &RedisConn, node: &str) -> Result<u32, CommandError> {
    let key = redis.config().node_index_buckets_key(node);
    let stored: Option<u32> = redis.run(redis::cmd("GET").arg(key).clone()).await?;
    let count = stored.unwrap_or(1).clamp(1, MAX_BUCKETS);
    redis.shared::<Buckets>().raise(node, count);
    Ok(redis.shared::<Buckets>().of(node))
}

/// Makes `node`'s index hold `held` sessions: its bucket count grows in Redis first, then here
/// (writes never go to a bucket a reader would not read). Nothing when it is large enough.
pub(crate) async fn grow(redis: &RedisConn, node: &str, held: usize) -> Result<(), CommandError> {
    let want = wanted(held);
    if want <= redis.shared::<Buckets>().of(node) {
        return Ok(());
    }
    restate(redis, node, want).await
}

/// States `node`'s bucket count `count` in Redis again, never lowering what is there.
pub(crate) async fn restate(redis: &RedisConn, node: &str, count: u32) -> Result<(), CommandError> {
    let script = redis::Script::new(GROW);
    let mut inv = script.prepare_invoke();
    inv.key(redis.config().node_index_buckets_key(node))
        .arg(count);
    let stored: u32 = redis.eval(inv).await?;
    let before = redis.shared::<Buckets>().of(node);
    redis
        .shared::<Buckets>()
        .raise(node, stored.min(MAX_BUCKETS));
    if redis.shared::<Buckets>().of(node) > before {
        rebalance(redis, node);
    }
    Ok(())
}

/// Moves `node`'s entries written under a smaller bucket count to their buckets under the
/// current one, in the background (one pass at a time; another when the count grew meanwhile).
/// Left where they were, the entries of an instance whose sessions open quickly would pile up
/// in the first buckets (each doubling leaves half its entries in the lower half) past what
/// Redis keeps compact. Best effort, like every index write: a failure leaves entries where
/// readers still read them.
fn rebalance(redis: &RedisConn, node: &str) {
    if !redis.shared::<Buckets>().start_moving(node) {
        return;
    }
    let (redis, node) = (redis.clone(), node.to_string());
    tokio::spawn(async move {
        loop {
            let count = redis.shared::<Buckets>().of(&node);
            if let Err(e) = move_misplaced(&redis, &node, count).await {
                tracing::debug!(error = %e, "the session index's entries were not all moved to their buckets");
            }
            if redis.shared::<Buckets>().moved(&node, count) {
                return;
            }
        }
    });
}

/// One pass of [`rebalance`]: each bucket read (`ZRANGE`), its misplaced entries added to
/// their buckets (one `ZADD GT` each, so a refresh written meanwhile keeps its later score),
/// then removed from it (one `ZREM`).
async fn move_misplaced(redis: &RedisConn, node: &str, count: u32) -> Result<(), CommandError> {
    let cfg = redis.config();
    for n in 0..count {
        let key = cfg.node_index_bucket_key(node, n);
        let entries: Vec<(String, u64)> = redis
            .run(
                redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .clone(),
            )
            .await?;
        let mut to: std::collections::BTreeMap<u32, Vec<(String, u64)>> = Default::default();
        for (id, score) in entries {
            let b = bucket_of(&id, count);
            if b != n {
                to.entry(b).or_default().push((id, score));
            }
        }
        if to.is_empty() {
            continue;
        }
        let moved: Vec<String> = to.values().flatten().map(|(id, _)| id.clone()).collect();
        let adds = to.into_iter().map(|(b, entries)| {
            let mut add = redis::cmd("ZADD");
            add.arg(cfg.node_index_bucket_key(node, b)).arg("GT");
            for (id, score) in entries {
                add.arg(score).arg(id);
            }
            redis.run::<i64>(add)
        });
        futures_util::future::try_join_all(adds).await?;
        redis
            .run::<i64>(redis::cmd("ZREM").arg(&key).arg(moved).clone())
            .await?;
    }
    Ok(())
}

/// Every key of `node`'s index given its bucket count: the buckets, then the single sorted set
/// of versions before them.
pub(crate) fn keys(redis: &RedisConn, node: &str, count: u32) -> Vec<String> {
    let cfg = redis.config();
    (0..count)
        .map(|n| cfg.node_index_bucket_key(node, n))
        .chain(std::iter::once(cfg.node_index_key(node)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_split_evenly_and_keep_their_order_when_doubling() {
        let ids: Vec<String> = (0..64_000).map(|i| format!("session-{i:08}")).collect();
        let mut sizes = vec![0usize; 1024];
        for id in &ids {
            sizes[bucket_of(id, 1024) as usize] += 1;
            // Doubling splits a bucket in two: an entry's new bucket is n or n + count.
            assert_eq!(bucket_of(id, 2048) % 1024, bucket_of(id, 1024));
        }
        let max = sizes.iter().max().copied().unwrap_or(0);
        assert!(max <= 100, "a bucket of {max} (listpack up to 128)");
    }

    #[test]
    fn the_count_follows_the_sessions_held() {
        assert_eq!(wanted(0), 1);
        assert_eq!(wanted(64), 1);
        assert_eq!(wanted(65), 2);
        assert_eq!(wanted(100_000), 2048);
        assert_eq!(wanted(usize::MAX / 2), MAX_BUCKETS);
    }
}
