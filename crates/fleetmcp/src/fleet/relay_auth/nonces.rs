//! The holder's memory of the nonces it accepted, so a relayed request is served once: what a
//! replay is refused by, bounded in time (the replay window) and in size (fail closed).

use std::collections::{BTreeMap, HashSet};

use super::unverified::Unverified;

/// Nonces remembered at most. A nonce is kept about 1.25 windows (see [`SeenNonces`]), so at
/// the default 30 s window a holder takes about 28,000 relayed requests a second before it
/// refuses more (fail closed, `503`) rather than forget nonces that could still be replayed.
/// About 20 MB when full.
const MAX_NONCES: usize = 1 << 20;

/// The nonces of the relayed requests accepted lately, in buckets by their request's timestamp
/// (a quarter window wide): a request is replayable only while its timestamp is within the
/// window of now, so a bucket whose every timestamp is older than that is dropped whole. Keys
/// are a nonce's first 8 bytes: among at most [`MAX_NONCES`], a genuine request mistaken for a
/// replay has odds of about 2^-44.
#[derive(Default)]
pub(super) struct SeenNonces {
    buckets: BTreeMap<u64, HashSet<u64>>,
    total: usize,
    /// The latest clock reading seen: buckets expire against it, so a clock stepped back
    /// cannot make a forgotten nonce acceptable again.
    high_ms: u64,
}

impl SeenNonces {
    /// Remembers the nonce of a request stamped `ts`, accepted at `now_ms` (within `window_ms`
    /// of it): refused if it is already there (a replay), older than the window at the latest
    /// clock reading, or if there is no room left.
    pub fn remember(
        &mut self,
        nonce: u64,
        ts: u64,
        now_ms: u64,
        window_ms: u64,
    ) -> Result<(), Unverified> {
        self.high_ms = self.high_ms.max(now_ms);
        let oldest = self.high_ms.saturating_sub(window_ms);
        if ts < oldest {
            return Err(Unverified::Stale);
        }
        let width = (window_ms / 4).max(1);
        // Buckets below `oldest`'s hold only timestamps before it: none is acceptable again.
        // Split only when there is one (a quarter window apart): splitting moves the map.
        let cutoff = oldest / width;
        if self
            .buckets
            .first_key_value()
            .is_some_and(|(k, _)| *k < cutoff)
        {
            let kept = self.buckets.split_off(&cutoff);
            for gone in std::mem::replace(&mut self.buckets, kept).into_values() {
                self.total -= gone.len();
            }
        }
        let bucket = self.buckets.entry(ts / width).or_default();
        if bucket.contains(&nonce) {
            return Err(Unverified::Replayed);
        }
        if self.total >= MAX_NONCES {
            return Err(Unverified::Overloaded);
        }
        bucket.insert(nonce);
        self.total += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_are_kept_as_long_as_their_request_is_within_the_window() {
        let mut seen = SeenNonces::default();
        let w = 1000;
        // Stamped 10 000, accepted at 9 500 (a clock ahead): replayable until 11 000.
        seen.remember(1, 10_000, 9_500, w).unwrap();
        for at in [9_500, 10_000, 10_999, 11_000] {
            assert_eq!(
                seen.remember(1, 10_000, at, w),
                Err(Unverified::Replayed),
                "at {at}"
            );
        }
        // Past it, the bucket goes (and its timestamp is stale anyway).
        seen.remember(2, 11_500, 11_500, w).unwrap();
        assert_eq!(seen.remember(1, 10_000, 11_500, w), Err(Unverified::Stale));
        assert_eq!(seen.total, 1, "only nonce 2 is kept: {:?}", seen.buckets);
        // A clock stepped back does not bring a forgotten timestamp back.
        assert_eq!(seen.remember(1, 10_000, 10_500, w), Err(Unverified::Stale));
        // The same nonce under another timestamp is another bucket: still one request's.
        seen.remember(3, 11_400, 11_500, w).unwrap();
        assert_eq!(
            seen.remember(3, 11_400, 11_600, w),
            Err(Unverified::Replayed)
        );
    }

    #[test]
    fn a_full_nonce_memory_refuses_rather_than_forgets() {
        let w = 1000;
        let mut seen = SeenNonces::default();
        for n in 0..MAX_NONCES as u64 {
            seen.remember(n, 1_000, 1_000, w).unwrap();
        }
        assert_eq!(
            seen.remember(u64::MAX, 1_000, 1_000, w),
            Err(Unverified::Overloaded)
        );
        // Once those timestamps are out of the window, there is room again.
        seen.remember(u64::MAX, 2_500, 2_500, w).unwrap();
        assert_eq!(seen.total, 1);
    }
}
