//! A bounded channel whose sender never waits and never loses a fact: what does not fit is
//! counted, and the receiver is told that something was lost before anything else. For
//! reports that can be summed up when too many come at once: a store's [`Invalidation`]s
//! (too many: "any record may have changed", [`Invalidation::All`]) and the tracking
//! connection's push messages that carry them (`tracking.rs`). Their readers never block on
//! anything but the channel, but Redis reports every change of every record of the tags tracked
//! (broadcast tracking, `tracking.rs`): a burst must not grow the queue without bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

/// A change to records an instance checked, reported by a store that tracks them
/// ([`SessionStore::invalidations`](super::store::SessionStore::invalidations)); defined here,
/// with the channel that carries it, so that the store imports this file and not the reverse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidation {
    /// The record of this session changed (deleted, expired, claimed elsewhere).
    Key(String),
    /// Any record may have changed unseen (the tracking connection was lost or replaced).
    All,
}

/// What the invalidation channels queue at most: about 100 bytes each (a session id), so
/// 4,096 hold well under 1 MiB. Past it, every confirmation is voided once (one
/// [`Invalidation::All`]), which costs each held session one check of its record.
pub(crate) const QUEUED_INVALIDATIONS: usize = 4096;

/// What a [`LossyReceiver`] gets.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Got<T> {
    One(T),
    /// This many were not queued (the queue was full) since the last `Lost`.
    Lost(u64),
}

/// A bounded channel of `capacity`.
pub(crate) fn channel<T>(capacity: usize) -> (LossySender<T>, LossyReceiver<T>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let lost = Arc::new(AtomicU64::new(0));
    (
        LossySender {
            tx,
            lost: lost.clone(),
        },
        LossyReceiver { rx, lost },
    )
}

pub(crate) struct LossySender<T> {
    tx: mpsc::Sender<T>,
    lost: Arc<AtomicU64>,
}

// Not derived: `T` need not be `Clone`.
impl<T> Clone for LossySender<T> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            lost: self.lost.clone(),
        }
    }
}

/// The receiver is gone.
#[derive(Debug)]
pub(crate) struct Closed;

impl<T> LossySender<T> {
    /// Queues `item` without waiting; a full queue counts it as lost. `Err` once the receiver
    /// is gone.
    pub fn send(&self, item: T) -> Result<(), Closed> {
        match self.tx.try_send(item) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                // Counted while the queue is full, so the receiver has an item to wake it
                // and sees the count on its next `recv`.
                self.lost.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Closed),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Returns once the receiver is gone.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

pub(crate) struct LossyReceiver<T> {
    rx: mpsc::Receiver<T>,
    lost: Arc<AtomicU64>,
}

impl<T> LossyReceiver<T> {
    /// The next item, or first how many were lost since the last call said; `None` once every
    /// sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Got<T>> {
        let lost = self.lost.swap(0, Ordering::AcqRel);
        if lost > 0 {
            return Some(Got::Lost(lost));
        }
        self.rx.recv().await.map(Got::One)
    }

    /// Items queued now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.rx.len()
    }
}

/// The changes to records a store reports ([`SessionStore::invalidations`](super::store::SessionStore::invalidations)
/// (super::SessionStore::invalidations)), at most [`QUEUED_INVALIDATIONS`] queued: those that
/// do not fit become one [`Invalidation::All`].
pub struct Invalidations(LossyReceiver<Invalidation>);

/// The sending side of [`Invalidations`].
pub(crate) type InvalidationSender = LossySender<Invalidation>;

/// A new channel of invalidations.
pub(crate) fn invalidations() -> (InvalidationSender, Invalidations) {
    let (tx, rx) = channel(QUEUED_INVALIDATIONS);
    (tx, Invalidations(rx))
}

impl Invalidations {
    /// The next change; `None` once the store stopped reporting.
    pub async fn recv(&mut self) -> Option<Invalidation> {
        match self.0.recv().await? {
            Got::One(change) => Some(change),
            Got::Lost(n) => {
                tracing::warn!(
                    lost = n,
                    "more record changes were reported than queued; every held session is checked again"
                );
                Some(Invalidation::All)
            }
        }
    }

    /// Changes queued now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_does_not_fit_is_counted_and_told_first() {
        let (tx, mut rx) = channel::<u32>(4);
        for i in 0..10 {
            tx.send(i).unwrap();
        }
        assert_eq!(rx.len(), 4);
        assert_eq!(rx.recv().await, Some(Got::Lost(6)));
        for i in 0..4 {
            assert_eq!(rx.recv().await, Some(Got::One(i)));
        }
        drop(tx);
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn a_flood_of_invalidations_stays_at_the_bound_and_becomes_all() {
        let (tx, mut rx) = invalidations();
        for i in 0..100_000 {
            tx.send(Invalidation::Key(format!("session-{i}"))).unwrap();
        }
        assert_eq!(rx.len(), QUEUED_INVALIDATIONS);
        assert_eq!(rx.recv().await, Some(Invalidation::All));
        assert_eq!(rx.recv().await, Some(Invalidation::Key("session-0".into())));
        drop(rx);
        assert!(tx.send(Invalidation::All).is_err());
    }
}
