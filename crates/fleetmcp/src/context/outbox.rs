//! A running request's outbox: where its messages go until its driver hands them on, and the
//! bytes it holds (sent by the handler or, in a gateway, by the upstream, not yet taken by
//! the driver), so that a sender that can wait does: a gateway's upstream that floods a
//! request's stream with progress faster than the driver stores it (the event store in Redis:
//! a round trip a message) would otherwise grow the outbox without bound (found with issue 36:
//! 300,000 progress lines of 1 KB took a gateway to 341 MiB). The channel stays unbounded for
//! the handlers' own `ctx.progress` and `ctx.log`, which cannot wait;
//! [`RequestContext::send_waiting`](super::RequestContext::send_waiting) waits for room first.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;

use futures_util::task::AtomicWaker;
use tokio::sync::{Notify, mpsc};

use super::Outbound;

/// Where a running request's messages go until its driver hands them on: a channel made when
/// the handler sends its first message. Most calls send none, and a channel made for every call
/// cost its allocations and set-up on each (issue 23: ~1,100 instructions, its first block
/// allocated up front). The driver waits on [`Outbox::sent`] beside the handler, takes the
/// receiver when something was sent ([`Outbox::take`]), and closes the outbox otherwise: a
/// message sent after that fails as one sent on a channel whose receiver is gone did, so it
/// goes to the session's standalone stream rather than nowhere.
pub(crate) struct Outbox {
    state: parking_lot::Mutex<OutboxState>,
    /// Set with the first message: what [`Outbox::sent`] polls, without the lock.
    sent: AtomicBool,
    /// The driver, waiting for the first message (a handler may send from another task).
    waiter: AtomicWaker,
}

enum OutboxState {
    /// Nothing sent yet.
    Empty,
    /// Sent to: the channel, its receiver until the driver takes it, and the bytes it holds.
    Open(
        mpsc::UnboundedSender<Outbound>,
        Option<mpsc::UnboundedReceiver<Outbound>>,
        Arc<Queued>,
    ),
    /// The driver is done with it, and nothing had been sent: every message fails.
    Closed,
}

impl Outbox {
    pub(super) const fn new() -> Self {
        Self {
            state: parking_lot::Mutex::new(OutboxState::Empty),
            sent: AtomicBool::new(false),
            waiter: AtomicWaker::new(),
        }
    }

    /// Queues `message`; it comes back when nobody will read it (the outbox closed, or the
    /// receiver taken and dropped).
    pub(super) fn send(&self, message: Outbound) -> Result<(), Outbound> {
        let mut state = self.state.lock();
        let n = match &message {
            Outbound::Message(b) => b.len(),
            Outbound::EndConnection => 0,
        };
        let sent = match &*state {
            OutboxState::Open(tx, _, queued) => {
                let sent = tx.send(message).map_err(|e| e.0);
                sent.is_ok().then(|| queued.add(n));
                sent
            }
            OutboxState::Closed => Err(message),
            OutboxState::Empty => {
                let (tx, rx) = mpsc::unbounded_channel();
                let queued = Arc::new(Queued::default());
                queued.add(n);
                let sent = tx.send(message).map_err(|e| e.0);
                *state = OutboxState::Open(tx, Some(rx), queued);
                sent
            }
        };
        drop(state);
        if sent.is_ok() && !self.sent.swap(true, Ordering::AcqRel) {
            self.waiter.wake();
        }
        sent
    }

    /// Completes once a message was sent.
    pub(crate) fn sent(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            if self.sent.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            self.waiter.register(cx.waker());
            // A message sent between the check and the registration woke no one: look again.
            if self.sent.load(Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    /// The messages sent so far and those to come, when anything was sent (once); `None`
    /// otherwise, and the outbox is closed.
    pub(crate) fn take(&self) -> Option<OutboxReceiver> {
        let mut state = self.state.lock();
        match &mut *state {
            OutboxState::Open(_, rx, queued) => {
                rx.take().map(|rx| OutboxReceiver::new(rx, queued.clone()))
            }
            OutboxState::Empty => {
                *state = OutboxState::Closed;
                None
            }
            OutboxState::Closed => None,
        }
    }

    /// Closes the outbox unless the driver took its receiver: messages sent from now on go
    /// elsewhere, as they would with that receiver dropped.
    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        if let OutboxState::Open(_, Some(_), queued) = &*state {
            queued.clear();
        }
        if matches!(
            &*state,
            OutboxState::Empty | OutboxState::Open(_, Some(_), _)
        ) {
            *state = OutboxState::Closed;
        }
    }

    /// Completes once the outbox holds at most [`ROOM`] bytes (or nobody will
    /// take them: closed, or its receiver dropped).
    pub(super) async fn room(&self) {
        let queued = match &*self.state.lock() {
            OutboxState::Open(_, _, queued) => queued.clone(),
            _ => return,
        };
        queued.room().await;
    }
}

/// Past this many bytes held, a sender that waits for room waits for the driver to take some.
pub(crate) const ROOM: usize = 1 << 20;

/// What an outbox holds, shared by its sending side and its receiver.
#[derive(Default)]
pub(crate) struct Queued {
    bytes: AtomicUsize,
    taken: Notify,
}

impl Queued {
    /// `n` more bytes sent.
    pub(super) fn add(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::AcqRel);
    }

    fn sub(&self, n: usize) {
        let _ = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b.saturating_sub(n))
            });
        self.taken.notify_waiters();
    }

    /// Nothing is held any more (the receiver is gone, with what it held).
    pub(super) fn clear(&self) {
        self.bytes.store(0, Ordering::Release);
        self.taken.notify_waiters();
    }

    /// Completes once at most [`ROOM`] bytes are held.
    pub(super) async fn room(&self) {
        loop {
            let taken = self.taken.notified();
            let mut taken = std::pin::pin!(taken);
            // Registered before the check, so a take between the two is not missed.
            taken.as_mut().enable();
            if self.bytes.load(Ordering::Acquire) <= ROOM {
                return;
            }
            taken.await;
        }
    }
}

/// The receiving end of an outbox, for its driver: each message taken gives its bytes back.
pub(crate) struct OutboxReceiver {
    rx: mpsc::UnboundedReceiver<Outbound>,
    queued: Arc<Queued>,
}

impl OutboxReceiver {
    pub(super) fn new(rx: mpsc::UnboundedReceiver<Outbound>, queued: Arc<Queued>) -> Self {
        Self { rx, queued }
    }

    pub(crate) async fn recv(&mut self) -> Option<Outbound> {
        let m = self.rx.recv().await;
        self.took(m.as_ref());
        m
    }

    pub(crate) fn try_recv(&mut self) -> Result<Outbound, mpsc::error::TryRecvError> {
        let m = self.rx.try_recv();
        self.took(m.as_ref().ok());
        m
    }

    fn took(&self, m: Option<&Outbound>) {
        if let Some(Outbound::Message(b)) = m {
            self.queued.sub(b.len());
        }
    }
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        self.queued.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;

    #[tokio::test]
    async fn a_sender_waits_for_room_until_the_driver_takes_or_drops_the_receiver() {
        let queued = Arc::new(Queued::default());
        let (tx, rx) = mpsc::unbounded_channel();
        let mut rx = OutboxReceiver::new(rx, queued.clone());
        for _ in 0..3 {
            tx.send(Outbound::Message(Bytes::from(vec![0; ROOM / 2])))
                .expect("open");
            queued.add(ROOM / 2);
        }
        let waiting = {
            let queued = queued.clone();
            tokio::spawn(async move { queued.room().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "1.5 times the room is held");
        assert!(rx.recv().await.is_some());
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("room came")
            .expect("the task");
        queued.add(ROOM);
        let waiting = {
            let queued = queued.clone();
            tokio::spawn(async move { queued.room().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(rx);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a dropped receiver holds nothing")
            .expect("the task");
    }
}
