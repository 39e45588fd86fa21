//! The limits counted in Redis, shared by every instance using it: one script per check
//! ([`ADMIT`]), so a check is one round trip, bounded by the Redis command timeout.
//!
//! Keys, all under one hash tag per limited key (one slot on a Redis Cluster):
//! `<prefix>{<key>}:rate` and `<prefix>{<key>}:tool:<name>` hold a GCRA theoretical arrival
//! time (microseconds, Redis's clock, so instances' clocks do not matter), with `PX` set to
//! when it stops mattering; `<prefix>{<key>}:inflight` is a sorted set of the key's requests
//! in flight, `<instance>:<n>` scored by when its lease ends. A live instance renews its
//! leases every third of `limits.inflight_lease_ms`; a crashed one's lapse, and the next check
//! drops them. `limits.max_sessions_per_key` is counted in hashes many keys share, a field a
//! key (`session_counts.rs`). Never `KEYS` or `SCAN`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::session_counts::{CAP, CountCell, Lifetime, TIERS};
use super::{Exceeded, LimitKey, Place, Refusal, Rule, gcra_params};
use crate::config::LimitsConfig;
use crate::redis_conn::{CommandError, RedisConn};

/// Checks every rate of one key together and, when all admit and `max` is given, takes a place
/// in flight; changes nothing unless it admits. `KEYS[1..n]`: the rates' keys; `KEYS[n+1]`: the
/// in-flight set. `ARGV[1]` = n; `ARGV[2i]`, `ARGV[2i+1]`: rate i's interval and tolerance (µs);
/// then max in flight, lease (ms), member (when there is an in-flight set). Returns
/// `{0, 0, 0}` (admitted), `{1, i, wait ms}` (rate i refuses) or `{2, 0, 0}` (in flight full).
const ADMIT: &str = r"
local n = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tats = {}
local wait, which = 0, 0
for i = 1, n do
  local interval = tonumber(ARGV[2 * i])
  local tolerance = tonumber(ARGV[2 * i + 1])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  local new_tat = tat + interval
  local allow_at = new_tat - tolerance
  if allow_at > now and allow_at - now > wait then
    wait, which = allow_at - now, i
  end
  tats[i] = new_tat
end
if which > 0 then return {1, which, math.ceil(wait / 1000)} end
if #KEYS > n then
  local base = 2 * n + 2
  local max = tonumber(ARGV[base])
  local lease = tonumber(ARGV[base + 1])
  local now_ms = math.floor(now / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[n + 1], '-inf', string.format('%d', now_ms))
  if redis.call('ZCARD', KEYS[n + 1]) >= max then return {2, 0, 0} end
  redis.call('ZADD', KEYS[n + 1], string.format('%d', now_ms + lease), ARGV[base + 2])
  redis.call('PEXPIRE', KEYS[n + 1], lease)
end
for i = 1, n do
  redis.call('SET', KEYS[i], string.format('%d', tats[i]), 'PX', math.ceil((tats[i] - now) / 1000))
end
return {0, 0, 0}
";

/// Extends this instance's leases in one in-flight set: `KEYS[1]` the set, `ARGV[1]` the lease
/// (ms), `ARGV[2..]` this instance's members in it. A member already gone stays gone (`XX`).
/// One set a call: each key's set is in its own Cluster slot.
const RENEW: &str = r"
local t = redis.call('TIME')
local until_ms = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1]))
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', until_ms, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return #ARGV - 1
";

/// In-flight sets renewed at once (each one script call).
const RENEW_CONCURRENCY: usize = 64;

/// This instance's places in flight: in-flight set → members.
type HeldMap = Arc<Mutex<HashMap<String, HashSet<String>>>>;

pub(super) struct RedisLimits {
    conn: RedisConn,
    prefix: String,
    instance: String,
    lease_ms: u64,
    admit: redis::Script,
    admit_session: redis::Script,
    end_session: redis::Script,
    next_member: AtomicU64,
    held: HeldMap,
    /// Starts the lease renewal with the first place taken (from a request, so in the runtime).
    renewer: std::sync::Once,
    stop: CancellationToken,
    /// Unix ms of the last warning that the shared counters failed (one a second at most).
    last_warned_ms: AtomicU64,
}

impl RedisLimits {
    pub fn new(
        conn: RedisConn,
        cfg: &LimitsConfig,
        instance: &str,
        stop: CancellationToken,
    ) -> Self {
        Self {
            conn,
            prefix: cfg.key_prefix.clone(),
            instance: instance.to_string(),
            lease_ms: cfg.inflight_lease_ms,
            admit: redis::Script::new(ADMIT),
            admit_session: redis::Script::new(&super::session_counts::admit_script()),
            end_session: redis::Script::new(&super::session_counts::end_script()),
            next_member: AtomicU64::new(0),
            held: Arc::default(),
            renewer: std::sync::Once::new(),
            stop,
            last_warned_ms: AtomicU64::new(0),
        }
    }

    /// Warns that a request was served uncounted because Redis failed (one a second at most).
    pub(super) fn warn_open(&self, e: &CommandError) {
        let now = crate::clock::unix_ms();
        let last = self.last_warned_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 1000
            && self
                .last_warned_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(error = %e, "served a request without counting it: the rate-limit store cannot be reached (limits.on_store_error = open)");
        }
    }

    /// Whether a session of lifetime `ttl_ms` was admitted under `key`'s most sessions
    /// (`session_counts.rs`: one script reading the key's field in this epoch and the last).
    pub async fn admit_session(
        &self,
        key: &LimitKey,
        max: usize,
        ttl_ms: u64,
    ) -> Result<bool, CommandError> {
        let life = Lifetime::of(ttl_ms);
        let cell = CountCell::of(key.as_str());
        let e = life.epoch(crate::clock::unix_ms());
        let mut inv = self.admit_session.prepare_invoke();
        for name in cell
            .keys(&self.prefix, e)
            .chain(cell.keys(&self.prefix, e.saturating_sub(1)))
        {
            inv.key(name);
        }
        inv.arg(&cell.field)
            .arg(TIERS)
            .arg(life.life_ms)
            .arg(life.granule_ms)
            .arg(max)
            .arg(e)
            .arg(CAP);
        Ok(self.conn.eval::<i64>(inv).await? > 0)
    }

    /// Gives back the place of a session of lifetime `ttl_ms` admitted at `admitted_ms` (Unix
    /// ms, this instance's clock; one script).
    pub async fn end_session(&self, key: &LimitKey, admitted_ms: u64, ttl_ms: u64) {
        let life = Lifetime::of(ttl_ms);
        let cell = CountCell::of(key.as_str());
        let epochs = life.epochs_near(admitted_ms);
        let mut inv = self.end_session.prepare_invoke();
        for &e in &epochs {
            for name in cell.keys(&self.prefix, e) {
                inv.key(name);
            }
        }
        inv.arg(&cell.field)
            .arg(TIERS)
            .arg(life.life_ms)
            .arg(life.granule_ms)
            .arg(life.until_granule(admitted_ms))
            .arg(epochs);
        if let Err(e) = self.conn.eval::<i64>(inv).await {
            tracing::debug!(error = %e, "an ended session's place stays counted until it expires");
        }
    }

    pub async fn admit(
        &self,
        key: &LimitKey,
        rules: &[Rule],
        max_inflight: Option<usize>,
    ) -> Result<Result<Place, Refusal>, CommandError> {
        let base = format!("{}{{{}}}:", self.prefix, key.as_str());
        let mut inv = self.admit.prepare_invoke();
        inv.arg(rules.len());
        for rule in rules {
            let (interval, tolerance) = gcra_params(&rule.rate);
            inv.key(format!("{base}{}", rule.key_suffix))
                .arg(interval)
                .arg(tolerance);
        }
        let place = max_inflight.map(|max| {
            let set = format!("{base}inflight");
            let member = format!(
                "{}:{}",
                self.instance,
                self.next_member.fetch_add(1, Ordering::Relaxed)
            );
            inv.key(&set).arg(max).arg(self.lease_ms).arg(&member);
            (set, member, max)
        });
        let (verdict, index, wait_ms): (u8, usize, u64) = self.conn.eval(inv).await?;
        Ok(match verdict {
            0 => Ok(match place {
                Some((set, member, _)) => {
                    self.renewer.call_once(|| {
                        tokio::spawn(renew_leases(
                            self.conn.clone(),
                            self.held.clone(),
                            self.lease_ms,
                            self.stop.clone(),
                        ));
                    });
                    self.held
                        .lock()
                        .entry(set.clone())
                        .or_default()
                        .insert(member.clone());
                    Place::holding(Held {
                        set,
                        member,
                        conn: self.conn.clone(),
                        held: self.held.clone(),
                    })
                }
                None => Place::none(),
            }),
            1 => {
                let which = rules
                    .get(index.saturating_sub(1))
                    .map(|r| r.which.clone())
                    .ok_or_else(|| CommandError::Unavailable("unexpected script answer".into()))?;
                Err(Refusal::Over {
                    which,
                    retry_after: Duration::from_millis(wait_ms),
                })
            }
            _ => Err(Refusal::Over {
                which: Exceeded::InflightPerKey(place.map_or(0, |p| p.2)),
                retry_after: Duration::from_secs(1),
            }),
        })
    }
}

/// A place in flight in Redis; dropping it removes it (in the background: a drop cannot wait).
/// If that fails, the lease ends it, as for a crashed instance.
struct Held {
    set: String,
    member: String,
    conn: RedisConn,
    held: HeldMap,
}

impl Drop for Held {
    fn drop(&mut self) {
        {
            let mut held = self.held.lock();
            if let Some(members) = held.get_mut(&self.set) {
                members.remove(&self.member);
                if members.is_empty() {
                    held.remove(&self.set);
                }
            }
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let conn = self.conn.clone();
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(&self.set).arg(&self.member);
        rt.spawn(async move {
            if let Err(e) = conn.run::<i64>(cmd).await {
                tracing::debug!(error = %e, "a place in flight was not freed in Redis; its lease ends it");
            }
        });
    }
}

/// Renews this instance's leases every third of the lease, until `stop`.
async fn renew_leases(conn: RedisConn, held: HeldMap, lease_ms: u64, stop: CancellationToken) {
    let script = redis::Script::new(RENEW);
    let every = Duration::from_millis(lease_ms / 3);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let sets: Vec<(String, Vec<String>)> = held
            .lock()
            .iter()
            .map(|(set, members)| (set.clone(), members.iter().cloned().collect()))
            .collect();
        if sets.is_empty() {
            continue;
        }
        let count = sets.len();
        let failed = futures_util::stream::iter(sets)
            .map(|(set, members)| {
                let mut inv = script.prepare_invoke();
                inv.key(set).arg(lease_ms).arg(members);
                let conn = conn.clone();
                async move { conn.eval::<i64>(inv).await.err() }
            })
            .buffer_unordered(RENEW_CONCURRENCY)
            .filter_map(std::future::ready)
            .collect::<Vec<_>>()
            .await;
        if let Some(e) = failed.first() {
            tracing::warn!(error = %e, failed = failed.len(), held = count, "could not renew this instance's places in flight in Redis; they lapse if it goes on");
        }
    }
}
