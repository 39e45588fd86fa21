//! Who serves a stored session that this instance does not hold: the seam distributed mode
//! plugs into.
//!
//! A single instance (and the default, non-distributed fleet) has no [`Holders`]: every stored
//! session it is asked for is recreated here, and the stored record is rewritten to name this
//! instance. Distributed mode installs one that knows which instances are alive, so that a
//! session held by a live peer is relayed to it rather than recreated.
//!
//! The seam is consulted only when the session is not held here: a held session's request pays
//! nothing for it.
//!
//! [`Lease`] is how long this instance may serve its sessions unconfirmed; distributed mode's
//! heartbeat renews it, and only a fenced [`Sessions`](super::Sessions) (one with an
//! [`Holders`]) consults it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::store::SessionRecord;

/// The answer of a [`Holders`]: serve the session here, or hand it to its live holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// This instance becomes the holder (recreation).
    Here,
    /// This instance takes the session over from a holder that stopped (its machine id).
    TakeOver(String),
    /// Another live instance holds it; its machine id.
    Peer(String),
}

/// Decides who serves a stored session this instance does not hold.
#[async_trait]
pub trait Holders: Send + Sync + 'static {
    /// `record.holder` names the last holder written to the store.
    async fn holder(&self, record: &SessionRecord) -> Holder;

    /// Whether the process that ran as instance `machine_id` at `since` (Unix ms) is gone for good,
    /// and with it what lived only there: a 2024-11-05 session's stream, which nothing can
    /// take over. `false` when that is not known (the default, and whenever Redis cannot say).
    async fn process_gone(&self, _machine_id: &str, _since_ms: u64) -> bool {
        false
    }
}

/// How long this instance may serve the sessions it holds without confirming them in the store:
/// the lease its heartbeat grants it.
///
/// Another instance takes a session over only once the holder's heartbeat has expired in
/// Redis, which happens no sooner than the heartbeat's lifetime after the holder sent its last
/// successful write. The lease runs out a tenth of that lifetime earlier, measured from when
/// that write was sent, so a holder cut off from Redis stops serving its sessions from memory
/// before anyone can have taken them over: two instances never serve one session. A holder
/// that can reach the store confirms each session on each request instead, and needs no lease.
#[derive(Debug)]
pub struct Lease {
    base: Instant,
    /// Milliseconds after `base` until which the lease holds (0: never granted).
    until_ms: AtomicU64,
    /// How many times the lease was granted again after it had run out: see [`Lease::term`].
    term: AtomicU32,
    /// Whether this instance's channel subscription is up: see [`Lease::set_present`].
    present: AtomicBool,
    /// Milliseconds after `base` when the current term began: see [`Lease::held_for`].
    term_began_ms: AtomicU64,
    /// Milliseconds after `base` until which the heartbeats granted the lease, whatever the
    /// subscription did (`until_ms` is voided when it drops): see [`Lease::absent_for`].
    granted_until_ms: AtomicU64,
    /// Milliseconds after `base` when the subscription last dropped (read only while it is
    /// down): see [`Lease::absent_for`].
    dropped_ms: AtomicU64,
}

impl Default for Lease {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            until_ms: AtomicU64::new(0),
            term: AtomicU32::new(0),
            present: AtomicBool::new(true),
            term_began_ms: AtomicU64::new(0),
            granted_until_ms: AtomicU64::new(0),
            dropped_ms: AtomicU64::new(0),
        }
    }
}

impl Lease {
    /// Renews the lease after a heartbeat sent at `sent_at`, written with lifetime `ttl`.
    pub fn renew(&self, sent_at: Instant, ttl: Duration) {
        let until = sent_at.saturating_duration_since(self.base) + ttl - ttl / 10;
        let now = self.base.elapsed().as_millis() as u64;
        let before = self
            .until_ms
            .fetch_max(until.as_millis() as u64, Ordering::AcqRel);
        self.granted_until_ms
            .fetch_max(until.as_millis() as u64, Ordering::AcqRel);
        if before <= now && (until.as_millis() as u64) > now {
            if before != 0 {
                self.term.fetch_add(1, Ordering::AcqRel);
            }
            self.term_began_ms.store(now, Ordering::Release);
        }
    }

    /// How long the others may have counted this instance absent (`None`: they cannot):
    /// since what its heartbeats granted ran out (its key expires a tenth of the heartbeat's
    /// lifetime later), or, while its subscription is down, since it dropped; the earlier.
    /// Counted from the process's start when no heartbeat was ever written.
    ///
    /// Others judge an instance's process gone only once its heartbeat expired, or once its
    /// subscription has been missing for the takeover grace (`fleet/heartbeat_liveness.rs`),
    /// and call what lives only there gone a while after (its drain and grace): this
    /// instance's 2024-11-05 streams must end before (`fleet/heartbeat.rs`, `watch_lease`).
    /// A subscription back with the heartbeat's grant still running is no absence, even before
    /// a beat makes the lease hold again.
    pub fn absent_for(&self) -> Option<Duration> {
        let now = self.base.elapsed().as_millis() as u64;
        let granted = self.granted_until_ms.load(Ordering::Acquire);
        let lapsed = (granted <= now).then_some(granted);
        let dropped = (!self.present.load(Ordering::Acquire))
            .then(|| self.dropped_ms.load(Ordering::Acquire));
        let since = match (lapsed, dropped) {
            (Some(lapsed), Some(dropped)) => lapsed.min(dropped),
            (lapsed, dropped) => lapsed.or(dropped)?,
        };
        Some(Duration::from_millis(now.saturating_sub(since)))
    }

    /// How long the lease has held without a break (`None`: it does not hold now).
    ///
    /// After an outage of Redis as a whole (longer than the heartbeat's lifetime, or a
    /// restart that dropped every connection), every instance's heartbeat and subscription
    /// are gone at once, and each shows itself again a moment after Redis answers it. An
    /// instance that judges others by their absence must first have been back itself for
    /// that moment, or it takes the live for the dead (`fleet/heartbeat_liveness.rs`).
    pub fn held_for(&self) -> Option<Duration> {
        if !self.valid() {
            return None;
        }
        let now = self.base.elapsed().as_millis() as u64;
        let began = self.term_began_ms.load(Ordering::Acquire);
        Some(Duration::from_millis(now.saturating_sub(began)))
    }

    /// The lease's term: it changes each time the lease is granted again after it ran out.
    /// While it had run out, another instance may have taken any session of this one over; a
    /// session confirmed in the store in an earlier term is not this instance's to serve from
    /// memory until the store confirms it again, however valid the lease is now.
    pub fn term(&self) -> u32 {
        self.term.load(Ordering::Acquire)
    }

    /// Whether the lease still holds.
    pub fn valid(&self) -> bool {
        self.present.load(Ordering::Acquire)
            && (self.base.elapsed().as_millis() as u64) < self.until_ms.load(Ordering::Acquire)
    }

    /// Notes whether this instance's channel subscription is up. Another instance takes a
    /// session over at once, heartbeat or not, when the holder's address refuses the relay
    /// and nothing holds the holder's channel (a crashed process's connections are closed by
    /// its kernel). A holder alive behind a link that refuses, whose Redis connections were
    /// closed too, looks exactly so: from the moment its subscription is gone it must not
    /// serve from memory, and what it confirmed before may have been taken (a new term).
    pub fn set_present(&self, present: bool) {
        // Noted before the flag falls, so that `absent_for` never reads an older drop (one
        // task keeps the subscription: no other writes the flag meanwhile).
        if !present && self.present.load(Ordering::Acquire) {
            let now = self.base.elapsed().as_millis() as u64;
            self.dropped_ms.store(now, Ordering::Release);
        }
        let was = self.present.swap(present, Ordering::AcqRel);
        if was && !present {
            self.term.fetch_add(1, Ordering::AcqRel);
            self.until_ms.store(1, Ordering::Release);
        }
        if !was && present {
            let now = self.base.elapsed().as_millis() as u64;
            self.term_began_ms.store(now, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renewals while the lease holds keep its term; a renewal after it ran out starts a new
    /// one (what was confirmed before may have been taken over meanwhile).
    #[test]
    fn a_lease_granted_again_after_it_ran_out_starts_a_new_term() {
        let lease = Lease::default();
        assert!(!lease.valid());
        let ttl = Duration::from_millis(100);
        lease.renew(Instant::now(), ttl);
        assert!(lease.valid());
        assert_eq!(lease.term(), 0, "the first grant is the first term");
        lease.renew(Instant::now(), ttl);
        assert_eq!(lease.term(), 0, "renewed while it holds");
        std::thread::sleep(Duration::from_millis(120));
        assert!(!lease.valid());
        lease.renew(Instant::now(), ttl);
        assert!(lease.valid());
        assert_eq!(lease.term(), 1, "granted again after it ran out");
        // A late renewal for a beat sent long ago grants nothing and starts no term.
        lease.renew(lease.base, ttl);
        assert_eq!(lease.term(), 1);
    }

    /// `held_for` counts from the start of the current term: renewals while the lease holds
    /// do not reset it; a lease that ran out, or a subscription that dropped, does.
    #[test]
    fn held_for_counts_from_the_start_of_the_term() {
        let lease = Lease::default();
        assert_eq!(lease.held_for(), None, "never granted");
        let ttl = Duration::from_millis(200);
        lease.renew(Instant::now(), ttl);
        std::thread::sleep(Duration::from_millis(60));
        lease.renew(Instant::now(), ttl);
        let held = lease.held_for().unwrap_or_default();
        assert!(
            held >= Duration::from_millis(50),
            "renewed, not reset: {held:?}"
        );
        lease.set_present(false);
        assert_eq!(lease.held_for(), None, "no subscription, no lease");
        lease.set_present(true);
        lease.renew(Instant::now(), ttl);
        let held = lease.held_for().unwrap_or_default();
        assert!(held < Duration::from_millis(50), "a new term: {held:?}");
        std::thread::sleep(Duration::from_millis(220));
        assert_eq!(lease.held_for(), None, "ran out");
        lease.renew(Instant::now(), ttl);
        let held = lease.held_for().unwrap_or_default();
        assert!(held < Duration::from_millis(50), "granted again: {held:?}");
    }

    /// `absent_for` counts from the earlier of the granted end and the subscription's drop
    /// while it is down; a subscription back with the grant still running is no absence.
    #[test]
    fn absent_for_counts_from_the_granted_end_or_the_drop() {
        let lease = Lease::default();
        assert!(lease.absent_for().is_some(), "never granted: absent");
        let ttl = Duration::from_millis(1000);
        lease.renew(Instant::now(), ttl);
        assert_eq!(lease.absent_for(), None, "granted");
        std::thread::sleep(Duration::from_millis(30));
        lease.set_present(false);
        std::thread::sleep(Duration::from_millis(60));
        let absent = lease.absent_for().unwrap_or_default();
        assert!(
            absent >= Duration::from_millis(50) && absent < Duration::from_millis(500),
            "since the drop, not the granted end: {absent:?}"
        );
        lease.set_present(true);
        assert!(!lease.valid(), "no beat since: the lease does not hold");
        assert_eq!(lease.absent_for(), None, "back, the grant still running");
        // A heartbeat that runs out: absent since the granted end (90 ms after the beat),
        // and since then still when the subscription drops later.
        let lease = Lease::default();
        lease.renew(Instant::now(), Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(150));
        let absent = lease.absent_for().unwrap_or_default();
        assert!(
            absent >= Duration::from_millis(40) && absent < Duration::from_millis(140),
            "since the granted end: {absent:?}"
        );
        lease.set_present(false);
        assert!(lease.absent_for().unwrap_or_default() >= absent);
    }
}
