//! What callers hold open in this process (streams, sessions) and the bytes of client data it
//! keeps for them, counted per key and in total, so that one caller cannot take everything and
//! a crowd cannot take more than the instance can give.
//!
//! Counted in memory only: what is counted here lives in this process (an open stream, the
//! URIs it filters on), so no other instance could free it. A [`Hold`] gives its place back
//! when dropped, and a key whose count falls to zero leaves the table, so a closed stream
//! leaves nothing behind.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::LimitKey;

/// Which bound refused a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldRefusal {
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

/// Things held at once, per key and in total, each with a byte charge against a [`Budget`].
pub struct Holdings {
    table: Arc<Mutex<Table>>,
    max_per_key: usize,
    max_total: usize,
    budget: Arc<Budget>,
}

#[cfg(any(test, feature = "testkit"))]
/// What `Holdings::snapshot` reports: keys with something held, things held, bytes charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HoldingsSnapshot {
    /// Keys holding at least one thing (the table's entries).
    pub keys: usize,
    /// Things held.
    pub held: usize,
    /// Bytes charged to the budget by them.
    pub bytes: usize,
}

impl Holdings {
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
    pub fn try_hold(&self, key: &LimitKey, bytes: usize) -> Result<Hold, HoldRefusal> {
        let mut t = self.table.lock();
        let n = t.per_key.get(key).copied().unwrap_or(0);
        if n >= self.max_per_key {
            return Err(HoldRefusal::PerKey(self.max_per_key));
        }
        if t.total >= self.max_total {
            return Err(HoldRefusal::Total(self.max_total));
        }
        let charge = self.budget.charge(bytes)?;
        *t.per_key.entry(key.clone()).or_insert(0) += 1;
        t.total += 1;
        t.bytes += bytes;
        Ok(Hold {
            key: key.clone(),
            table: self.table.clone(),
            charge,
        })
    }

    #[cfg(any(test, feature = "testkit"))]
    /// What is held now (for tests and diagnostics).
    pub fn snapshot(&self) -> HoldingsSnapshot {
        let t = self.table.lock();
        HoldingsSnapshot {
            keys: t.per_key.len(),
            held: t.total,
            bytes: t.bytes,
        }
    }
}

/// One place held; given back when dropped.
pub struct Hold {
    key: LimitKey,
    table: Arc<Mutex<Table>>,
    /// Freed with the hold (after the table entry, in field order: both are released).
    charge: Charge,
}

impl Drop for Hold {
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
    pub fn charge(self: &Arc<Self>, bytes: usize) -> Result<Charge, HoldRefusal> {
        let mut used = self.used.lock();
        if used.saturating_add(bytes) > self.max {
            return Err(HoldRefusal::Bytes(self.max));
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
    pub fn grow(&mut self, bytes: usize) -> Result<(), HoldRefusal> {
        let mut used = self.budget.used.lock();
        if used.saturating_add(bytes) > self.budget.max {
            return Err(HoldRefusal::Bytes(self.budget.max));
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
        let h = Holdings::new(2, 3, budget.clone());
        let a = LimitKey::address([10, 0, 0, 1].into(), 64);
        let b = LimitKey::address([10, 0, 0, 2].into(), 64);
        let a1 = h.try_hold(&a, 10).unwrap();
        let _a2 = h.try_hold(&a, 10).unwrap();
        assert_eq!(h.try_hold(&a, 10).err(), Some(HoldRefusal::PerKey(2)));
        let b1 = h.try_hold(&b, 10).unwrap();
        assert_eq!(h.try_hold(&b, 10).err(), Some(HoldRefusal::Total(3)));
        drop(b1);
        assert_eq!(h.try_hold(&b, 90).err(), Some(HoldRefusal::Bytes(100)));
        assert_eq!(budget.used(), 20, "a refused hold charges nothing");
        drop(a1);
        drop(_a2);
        assert_eq!(h.snapshot(), HoldingsSnapshot::default());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_charge_grows_within_the_budget_and_gives_everything_back() {
        let budget = Budget::new(10);
        let mut c = Charge::empty(&budget);
        c.grow(6).unwrap();
        assert_eq!(c.grow(5), Err(HoldRefusal::Bytes(10)));
        c.shrink(2);
        c.grow(5).unwrap();
        assert_eq!(budget.used(), 9);
        drop(c);
        assert_eq!(budget.used(), 0);
    }
}
