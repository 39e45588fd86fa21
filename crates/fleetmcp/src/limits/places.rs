//! What callers hold open in this process (streams, sessions) and the bytes of client data it
//! keeps for them, counted per key and in total, so that one caller cannot take everything and
//! a crowd cannot take more than the instance can give.
//!
//! Counted in memory only: what is counted here lives in this process (an open stream, the
//! URIs it filters on), so no other instance could free it. A place taken from [`Places`] gives
//! itself back when dropped, and a key whose count falls to zero leaves the table, so a closed
//! stream leaves nothing behind.
//!
//! [`Place`] is the one type of a place held under a limit, whatever counts it: a request in
//! flight under `limits.max_inflight_per_key` (in memory or in Redis, `memory.rs`, `redis.rs`),
//! a session under `limits.max_sessions_per_key`, a listen stream here. A place counts one
//! under a count; a [`Charge`] counts bytes under a [`Budget`] (a place taken here carries
//! one).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::LimitKey;

/// Which bound refused a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceRefusal {
    /// The key holds its most already (the bound's value).
    PerKey(usize),
    /// The instance holds its most already.
    Total(usize),
    /// The bytes would pass the instance's budget.
    Bytes(usize),
}

#[derive(Default)]
struct Table {
    per_key: HashMap<LimitKey, usize>,
    total: usize,
    bytes: usize,
}

/// Places held at once, per key and in total, each with a byte charge against a [`Budget`].
pub struct Places {
    table: Arc<Mutex<Table>>,
    max_per_key: usize,
    max_total: usize,
    budget: Arc<Budget>,
}

#[cfg(any(test, feature = "testkit"))]
/// What `Places::snapshot` reports: keys with a place held, places held, bytes charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlacesSnapshot {
    /// Keys holding at least one place (the table's entries).
    pub keys: usize,
    /// Places held.
    pub held: usize,
    /// Bytes charged to the budget by them.
    pub bytes: usize,
}

impl Places {
    /// At most `max_per_key` per key and `max_total` in all, their bytes charged to `budget`.
    pub fn new(max_per_key: usize, max_total: usize, budget: Arc<Budget>) -> Self {
        Self {
            table: Arc::default(),
            max_per_key,
            max_total,
            budget,
        }
    }

    /// Takes one place for `key`, charging `bytes` to the budget; all or nothing.
    pub fn try_take(&self, key: &LimitKey, bytes: usize) -> Result<Place, PlaceRefusal> {
        let mut t = self.table.lock();
        let n = t.per_key.get(key).copied().unwrap_or(0);
        if n >= self.max_per_key {
            return Err(PlaceRefusal::PerKey(self.max_per_key));
        }
        if t.total >= self.max_total {
            return Err(PlaceRefusal::Total(self.max_total));
        }
        let charge = self.budget.charge(bytes)?;
        *t.per_key.entry(key.clone()).or_insert(0) += 1;
        t.total += 1;
        t.bytes += bytes;
        Ok(Place::holding(Held {
            key: key.clone(),
            table: self.table.clone(),
            charge,
        }))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// What is held now (for tests and diagnostics).
    pub fn snapshot(&self) -> PlacesSnapshot {
        let t = self.table.lock();
        PlacesSnapshot {
            keys: t.per_key.len(),
            held: t.total,
            bytes: t.bytes,
        }
    }
}

/// One place held under a limit (a request in flight, a session, a listen stream), given back
/// when dropped: what a limit admitted holds until it ends.
#[must_use = "the place is given back when it is dropped"]
pub struct Place {
    /// Gives the place back when dropped (`None`: nothing to give back).
    _held: Option<Box<dyn Send + Sync>>,
}

impl Place {
    /// A place that holds nothing (no limit to hold it under, or one counted elsewhere: a
    /// session's place in Redis expires with its record).
    pub(crate) fn none() -> Self {
        Self { _held: None }
    }

    /// A place that gives `held` back when dropped (its own `Drop` does the counting).
    pub(super) fn holding(held: impl Send + Sync + 'static) -> Self {
        Self {
            _held: Some(Box::new(held)),
        }
    }
}

/// What a place taken from [`Places`] holds: its entry in the table and its bytes.
struct Held {
    key: LimitKey,
    table: Arc<Mutex<Table>>,
    /// Freed with the place (after the table entry, in field order: both are released).
    charge: Charge,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        t.total = t.total.saturating_sub(1);
        t.bytes = t.bytes.saturating_sub(self.charge.bytes);
        if let Some(n) = t.per_key.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                t.per_key.remove(&self.key);
            }
        }
        if t.per_key.is_empty() {
            // An idle table keeps no buckets: after a crowd leaves, its memory goes too.
            t.per_key = HashMap::new();
        }
    }
}

/// Bytes of client data this instance keeps at once (`sessions.max_client_data_bytes`):
/// subscriptions of sessions, URIs of listen streams.
pub struct Budget {
    used: Mutex<usize>,
    max: usize,
}

impl Budget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            used: Mutex::new(0),
            max,
        })
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Bytes charged now.
    pub fn used(&self) -> usize {
        *self.used.lock()
    }

    /// Charges `bytes`, or refuses when they would pass the budget.
    pub fn charge(self: &Arc<Self>, bytes: usize) -> Result<Charge, PlaceRefusal> {
        let mut used = self.used.lock();
        if used.saturating_add(bytes) > self.max {
            return Err(PlaceRefusal::Bytes(self.max));
        }
        *used += bytes;
        Ok(Charge {
            budget: self.clone(),
            bytes,
        })
    }
}

/// Bytes charged to a [`Budget`]; given back when dropped. It may grow and shrink.
pub struct Charge {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Charge {
    /// An empty charge, to grow with [`Charge::grow`].
    pub fn empty(budget: &Arc<Budget>) -> Self {
        Self {
            budget: budget.clone(),
            bytes: 0,
        }
    }

    /// Adds `bytes`, unless the budget has no room for them (then nothing changes).
    pub fn grow(&mut self, bytes: usize) -> Result<(), PlaceRefusal> {
        let mut used = self.budget.used.lock();
        if used.saturating_add(bytes) > self.budget.max {
            return Err(PlaceRefusal::Bytes(self.budget.max));
        }
        *used += bytes;
        self.bytes += bytes;
        Ok(())
    }

    /// Takes `other` over (its bytes stay charged, now under this charge).
    pub fn absorb(&mut self, mut other: Charge) {
        self.bytes += std::mem::take(&mut other.bytes);
    }

    /// Gives back `bytes` (at most what it holds).
    pub fn shrink(&mut self, bytes: usize) {
        let bytes = bytes.min(self.bytes);
        let mut used = self.budget.used.lock();
        *used = used.saturating_sub(bytes);
        self.bytes -= bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut used = self.budget.used.lock();
        *used = used.saturating_sub(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_per_key_and_in_all_and_freed_on_drop() {
        let budget = Budget::new(100);
        let h = Places::new(2, 3, budget.clone());
        let a = LimitKey::address([10, 0, 0, 1].into(), 64);
        let b = LimitKey::address([10, 0, 0, 2].into(), 64);
        let a1 = h.try_take(&a, 10).unwrap();
        let _a2 = h.try_take(&a, 10).unwrap();
        assert_eq!(h.try_take(&a, 10).err(), Some(PlaceRefusal::PerKey(2)));
        let b1 = h.try_take(&b, 10).unwrap();
        assert_eq!(h.try_take(&b, 10).err(), Some(PlaceRefusal::Total(3)));
        drop(b1);
        assert_eq!(h.try_take(&b, 90).err(), Some(PlaceRefusal::Bytes(100)));
        assert_eq!(budget.used(), 20, "a refused place charges nothing");
        drop(a1);
        drop(_a2);
        assert_eq!(h.snapshot(), PlacesSnapshot::default());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_charge_grows_within_the_budget_and_gives_everything_back() {
        let budget = Budget::new(10);
        let mut c = Charge::empty(&budget);
        c.grow(6).unwrap();
        assert_eq!(c.grow(5), Err(PlaceRefusal::Bytes(10)));
        c.shrink(2);
        c.grow(5).unwrap();
        assert_eq!(budget.used(), 9);
        drop(c);
        assert_eq!(budget.used(), 0);
    }
}
