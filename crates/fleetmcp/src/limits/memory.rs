//! The limits counted in this process's memory: the same GCRA as the Redis script (so both
//! modes refuse the same requests), and a count of requests in flight per key.
//!
//! Not `governor`: a check here applies the global and the tool's limit together, all or
//! nothing (a request one refuses costs the other nothing), as the Redis script does, and
//! `governor` checks one limiter at a time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Exceeded, LimitKey, Place, Refusal, Rule, gcra_params};

/// Past this many remembered arrival times, those in the past (keys back to a full burst)
/// are forgotten, so memory follows the keys active within a window.
const PRUNE_AT: usize = 10_000;

/// Theoretical arrival time per (key, scope), in microseconds since `epoch`.
struct Tats {
    map: HashMap<(LimitKey, String), u64>,
    /// The size at which the next prune runs: twice what the last one kept, so a prune costs
    /// O(1) per check amortised however many keys are active.
    prune_at: usize,
}

impl Default for Tats {
    fn default() -> Self {
        Self {
            map: HashMap::new(),
            prune_at: PRUNE_AT,
        }
    }
}

#[derive(Default)]
pub(super) struct MemoryLimits {
    tats: Mutex<Tats>,
    inflight: Arc<Mutex<HashMap<LimitKey, usize>>>,
    epoch: Epoch,
}

struct Epoch(Instant);

impl Default for Epoch {
    fn default() -> Self {
        Self(Instant::now())
    }
}

impl MemoryLimits {
    pub fn admit(
        &self,
        key: &LimitKey,
        rules: &[Rule],
        max_inflight: Option<usize>,
    ) -> Result<Place, Refusal> {
        let now = self.epoch.0.elapsed().as_micros() as u64;
        let mut tats = self.tats.lock();
        let mut next = Vec::with_capacity(rules.len());
        let mut worst: Option<(u64, &Exceeded)> = None;
        for rule in rules {
            let (interval, tolerance) = gcra_params(&rule.rate);
            let id = (key.clone(), rule.key_suffix.clone());
            let tat = tats.map.get(&id).copied().unwrap_or(now).max(now);
            let new_tat = tat + interval;
            let allow_at = new_tat.saturating_sub(tolerance);
            if allow_at > now {
                let wait = allow_at - now;
                if worst.is_none_or(|(w, _)| wait > w) {
                    worst = Some((wait, &rule.which));
                }
            }
            next.push((id, new_tat));
        }
        if let Some((wait, which)) = worst {
            return Err(Refusal::Over {
                which: which.clone(),
                retry_after: Duration::from_micros(wait),
            });
        }
        let place = match max_inflight {
            Some(max) => {
                let mut inflight = self.inflight.lock();
                let n = inflight.entry(key.clone()).or_insert(0);
                if *n >= max {
                    return Err(Refusal::Over {
                        which: Exceeded::InflightPerKey(max),
                        retry_after: Duration::from_secs(1),
                    });
                }
                *n += 1;
                Place::holding(Held {
                    key: key.clone(),
                    inflight: self.inflight.clone(),
                })
            }
            None => Place::none(),
        };
        if tats.map.len() >= tats.prune_at {
            tats.map.retain(|_, tat| *tat > now);
            tats.prune_at = (tats.map.len() * 2).max(PRUNE_AT);
        }
        tats.map.extend(next);
        Ok(place)
    }
}

/// A place in flight, freed on drop.
struct Held {
    key: LimitKey,
    inflight: Arc<Mutex<HashMap<LimitKey, usize>>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut inflight = self.inflight.lock();
        if let Some(n) = inflight.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                inflight.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RateLimit;

    fn rule(requests: u64, window_ms: u64, burst: Option<u64>) -> Rule {
        let rate = RateLimit {
            requests,
            window_ms,
            burst,
        };
        Rule {
            which: Exceeded::Rate(rate),
            key_suffix: "rate".into(),
            rate,
        }
    }

    #[test]
    fn a_burst_then_refusal_with_the_wait_until_the_next_request() {
        let m = MemoryLimits::default();
        let key = LimitKey::address([10, 0, 0, 1].into(), 64);
        let rules = [rule(3, 60_000, None)];
        for _ in 0..3 {
            assert!(m.admit(&key, &rules, None).is_ok());
        }
        match m.admit(&key, &rules, None) {
            Err(Refusal::Over { retry_after, .. }) => {
                // One request per 20 s: the next is due about 20 s from now.
                assert!(retry_after > Duration::from_secs(19), "{retry_after:?}");
                assert!(retry_after <= Duration::from_secs(20), "{retry_after:?}");
            }
            other => panic!("expected a refusal, got {:?}", other.is_ok()),
        }
        // Another key has its own count.
        let other = LimitKey::address([10, 0, 0, 2].into(), 64);
        assert!(m.admit(&other, &rules, None).is_ok());
    }

    #[test]
    fn a_refused_request_costs_the_other_limit_nothing() {
        let m = MemoryLimits::default();
        let key = LimitKey::principal("alice");
        let global = rule(10, 60_000, None);
        let tool = Rule {
            key_suffix: "tool:search".into(),
            ..rule(1, 60_000, None)
        };
        let both = [global.clone(), tool];
        assert!(m.admit(&key, &both, None).is_ok());
        for _ in 0..5 {
            assert!(m.admit(&key, &both, None).is_err());
        }
        // 1 of 10 spent: nine more plain requests pass.
        for _ in 0..9 {
            assert!(m.admit(&key, std::slice::from_ref(&global), None).is_ok());
        }
        assert!(m.admit(&key, &[global], None).is_err());
    }

    #[test]
    fn places_in_flight_are_freed_when_dropped() {
        let m = MemoryLimits::default();
        let key = LimitKey::principal("bob");
        let a = m.admit(&key, &[], Some(2)).ok();
        let b = m.admit(&key, &[], Some(2)).ok();
        assert!(a.is_some() && b.is_some());
        assert!(matches!(
            m.admit(&key, &[], Some(2)),
            Err(Refusal::Over {
                which: Exceeded::InflightPerKey(2),
                ..
            })
        ));
        drop(a);
        assert!(m.admit(&key, &[], Some(2)).is_ok());
        drop(b);
        assert!(m.inflight.lock().is_empty());
    }
}
