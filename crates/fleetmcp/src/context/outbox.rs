//! A running request's outbox: the messages its handler sent (progress, log lines, requests to
//! the client), or in a gateway its upstream, until the request's driver hands them on to the
//! answer's stream.
//!
//! A handler never waits to send: `ctx.progress()` and `ctx.log()` return at once, and a loop
//! of them may run many thousands of times between two `.await`s, or from a task of its own,
//! while the stream does not take them (the event store slow, or a client that does not read a
//! 2026-07-28 or stdio stream). So the outbox is bounded in messages and in bytes
//! (`http.max_outbox_messages`, `http.max_outbox_bytes`), and past the bound it drops the
//! oldest progress and log notifications queued: a newer progress supersedes an older one,
//! and a log line is worth less than the memory of the process that serves everyone (issue 36:
//! 200,000 notes of 1 KiB held 430 MiB). What a handler asks of the client (a request, whose
//! answer it awaits), the polling end and any other notification are never dropped: they are
//! few, as each awaits an answer or ends a connection, and losing one would leave a handler, or
//! a client, waiting. Every drop is counted (`fleetmcp_outbox_notifications_dropped_total`);
//! the first of a request is logged at WARN, the total at debug when the request's outbox goes.
//!
//! A sender that can wait does ([`Outbox::room`]): a gateway's upstream reader
//! ([`RequestContext::send_waiting`](super::RequestContext::send_waiting)) is not read on while
//! the outbox is full, so an upstream's flood of progress is bounded by what the driver takes
//! (found with issue 36: 300,000 progress lines of 1 KB took a gateway to 341 MiB).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

use super::Outbound;

/// How much one request's outbox holds (`http.max_outbox_messages`, `http.max_outbox_bytes`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    pub messages: usize,
    pub bytes: usize,
}

/// What became of a message given to [`Outbox::send`] besides being queued.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Notifications dropped to make room (the message itself, if it was one and found none).
    pub dropped: u64,
    /// Whether these are the request's first drops (the one a WARN is for).
    pub first_drops: bool,
}

/// Where a running request's messages go until its driver hands them on: a queue made when
/// the handler sends its first message. Most calls send none, and a queue made for every call
/// cost its allocations and set-up on each (issue 23: a channel cost ~1,100 instructions, its
/// first block allocated up front). The driver waits on [`Outbox::sent`] beside the handler,
/// takes the receiver when something was sent ([`Outbox::take`]), and closes the outbox
/// otherwise: a message sent after that comes back to its sender, as one sent to a receiver
/// that is gone does, so it goes to the session's standalone stream rather than nowhere.
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
    /// Sent to: the queue, and whether the driver took its receiver.
    Open(Arc<Queue>, bool),
    /// The driver is done with it, and nothing had been sent: every message comes back.
    Closed,
}

/// The queue between a request's context and its driver.
struct Queue {
    state: parking_lot::Mutex<QueueState>,
    /// The receiver, waiting for a message (a permit is kept when it does not wait yet).
    ready: Notify,
    /// Senders waiting for room ([`Outbox::room`]): told whenever something is taken.
    taken: Notify,
}

#[derive(Default)]
struct QueueState {
    items: VecDeque<Queued>,
    /// The bytes of `items`.
    bytes: usize,
    /// The receiver was dropped: messages come back to their senders.
    receiver_gone: bool,
    /// The outbox (every context of the request) is gone: nothing more will come.
    senders_gone: bool,
    /// Notifications this request's outbox dropped.
    dropped: u64,
}

struct Queued {
    message: Outbound,
    /// A progress or log notification: may be dropped to make room.
    droppable: bool,
}

impl Queued {
    fn len(&self) -> usize {
        match &self.message {
            Outbound::Message(b) => b.len(),
            Outbound::EndConnection => 0,
        }
    }
}

impl QueueState {
    /// Queues `q` within `bounds`: the oldest droppable notifications go first; when none is
    /// left and `q` is droppable, `q` goes (unless the queue is then empty: a notification
    /// larger than the whole bound still passes alone). Anything else is queued past the
    /// bound. Returns how many were dropped.
    fn push(&mut self, q: Queued, bounds: Bounds) -> u64 {
        let len = q.len();
        let mut dropped = 0;
        let over = |s: &Self| s.items.len() >= bounds.messages || s.bytes + len > bounds.bytes;
        while over(self) {
            let Some(i) = self.items.iter().position(|q| q.droppable) else {
                break;
            };
            if let Some(old) = self.items.remove(i) {
                self.bytes -= old.len();
                dropped += 1;
            }
        }
        if over(self) && q.droppable && !self.items.is_empty() {
            dropped += 1;
        } else {
            self.bytes += len;
            self.items.push_back(q);
        }
        self.dropped += dropped;
        dropped
    }

    fn pop(&mut self) -> Option<Outbound> {
        let q = self.items.pop_front()?;
        self.bytes -= q.len();
        Some(q.message)
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        let dropped = self.state.get_mut().dropped;
        if dropped > 0 {
            tracing::debug!(
                dropped,
                "a request's outbox dropped progress or log notifications in all"
            );
        }
    }
}

impl Outbox {
    pub(super) const fn new() -> Self {
        Self {
            state: parking_lot::Mutex::new(OutboxState::Empty),
            sent: AtomicBool::new(false),
            waiter: AtomicWaker::new(),
        }
    }

    /// Queues `message` within `bounds` (`droppable`: a progress or log notification, which
    /// may be dropped to make room, see the module's comment); it comes back when nobody will
    /// read it (the outbox closed, or the receiver taken and dropped).
    pub(crate) fn send(
        &self,
        message: Outbound,
        droppable: bool,
        bounds: Bounds,
    ) -> Result<Sent, Outbound> {
        let queue = {
            let mut state = self.state.lock();
            match &*state {
                OutboxState::Open(queue, _) => queue.clone(),
                OutboxState::Closed => return Err(message),
                OutboxState::Empty => {
                    let queue = Arc::new(Queue {
                        state: parking_lot::Mutex::default(),
                        ready: Notify::new(),
                        taken: Notify::new(),
                    });
                    *state = OutboxState::Open(queue.clone(), false);
                    queue
                }
            }
        };
        let sent = {
            let mut q = queue.state.lock();
            if q.receiver_gone {
                return Err(message);
            }
            let before = q.dropped;
            let dropped = q.push(Queued { message, droppable }, bounds);
            Sent {
                dropped,
                first_drops: before == 0 && dropped > 0,
            }
        };
        queue.ready.notify_one();
        if !self.sent.swap(true, Ordering::AcqRel) {
            self.waiter.wake();
        }
        Ok(sent)
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
            OutboxState::Open(queue, taken) if !*taken => {
                *taken = true;
                Some(OutboxReceiver(queue.clone()))
            }
            OutboxState::Open(..) | OutboxState::Closed => None,
            OutboxState::Empty => {
                *state = OutboxState::Closed;
                None
            }
        }
    }

    /// Closes the outbox unless the driver took its receiver: messages sent from now on come
    /// back, as they would with that receiver dropped.
    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        if matches!(&*state, OutboxState::Empty | OutboxState::Open(_, false)) {
            *state = OutboxState::Closed;
        }
    }
}

impl Outbox {
    /// Completes once the outbox holds less than `bounds` (or nobody will take what it holds:
    /// closed, or its receiver dropped), for a sender that can wait.
    pub(crate) async fn room(&self, bounds: Bounds) {
        let queue = match &*self.state.lock() {
            OutboxState::Open(queue, _) => queue.clone(),
            _ => return,
        };
        loop {
            let taken = queue.taken.notified();
            let mut taken = std::pin::pin!(taken);
            // Registered before the check, so a take between the two is not missed.
            taken.as_mut().enable();
            {
                let q = queue.state.lock();
                let full = q.items.len() >= bounds.messages || q.bytes >= bounds.bytes;
                if !full || q.receiver_gone {
                    return;
                }
            }
            taken.await;
        }
    }
}

impl Drop for Outbox {
    /// The request's last context is gone: the receiver learns that nothing more will come.
    fn drop(&mut self) {
        if let OutboxState::Open(queue, _) = &*self.state.get_mut() {
            queue.state.lock().senders_gone = true;
            queue.ready.notify_one();
        }
    }
}

/// The driver's end of an outbox: the messages in the order sent.
pub(crate) struct OutboxReceiver(Arc<Queue>);

impl OutboxReceiver {
    /// The next message; `None` once the request's contexts are all gone and nothing is left.
    pub(crate) async fn recv(&mut self) -> Option<Outbound> {
        loop {
            {
                let mut q = self.0.state.lock();
                if let Some(m) = q.pop() {
                    drop(q);
                    self.0.taken.notify_waiters();
                    return Some(m);
                }
                if q.senders_gone {
                    return None;
                }
            }
            // A message sent since the check left a permit: this returns at once.
            self.0.ready.notified().await;
        }
    }

    /// The next message if one is queued.
    pub(crate) fn try_recv(&mut self) -> Option<Outbound> {
        let m = self.0.state.lock().pop();
        if m.is_some() {
            self.0.taken.notify_waiters();
        }
        m
    }
}

impl Drop for OutboxReceiver {
    /// Nobody reads the queue any more: what it holds goes now, what comes later goes back.
    fn drop(&mut self) {
        {
            let mut q = self.0.state.lock();
            q.receiver_gone = true;
            q.items.clear();
            q.bytes = 0;
        }
        self.0.taken.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    const BOUNDS: Bounds = Bounds {
        messages: 4,
        bytes: 100,
    };

    fn note(n: u8, len: usize) -> Outbound {
        Outbound::Message(Bytes::from(vec![n; len]))
    }

    fn first_byte(m: Option<Outbound>) -> Option<u8> {
        match m? {
            Outbound::Message(b) => b.first().copied(),
            Outbound::EndConnection => Some(0),
        }
    }

    /// Past the bound in messages the oldest notifications go, counted; requests to the
    /// client and the polling end stay, past the bound if they must.
    #[test]
    fn the_oldest_notifications_go_and_nothing_else_does() {
        let outbox = Outbox::new();
        let send = |m, droppable| outbox.send(m, droppable, BOUNDS).expect("queued");
        assert_eq!(send(note(1, 10), false), Sent::default());
        for n in 2..=4 {
            send(note(n, 10), true);
        }
        let first = send(note(5, 10), true);
        assert_eq!(
            first,
            Sent {
                dropped: 1,
                first_drops: true
            }
        );
        assert_eq!(send(note(6, 10), true).dropped, 1);
        assert!(!send(note(7, 10), true).first_drops);
        // A request to the client is never dropped: queued past the bound.
        assert_eq!(send(note(8, 10), false).dropped, 1);
        assert_eq!(send(Outbound::EndConnection, false).dropped, 1);
        let mut rx = outbox.take().expect("sent to");
        let got: Vec<_> = std::iter::from_fn(|| first_byte(rx.try_recv())).collect();
        assert_eq!(
            got,
            [1, 7, 8, 0],
            "the oldest notes went to make room for the rest"
        );
    }

    /// The bound in bytes: the oldest notifications go until the new one fits; a note larger
    /// than the whole bound passes alone, and is dropped behind anything that cannot go.
    #[test]
    fn the_bound_in_bytes_holds() {
        let outbox = Outbox::new();
        let send = |m, droppable| outbox.send(m, droppable, BOUNDS).expect("queued");
        send(note(1, 60), true);
        assert_eq!(send(note(2, 60), true).dropped, 1);
        assert_eq!(send(note(3, 30), true).dropped, 0);
        assert_eq!(send(note(4, 500), true).dropped, 2, "alone past the bound");
        send(note(5, 90), false);
        assert_eq!(send(note(6, 500), true).dropped, 1, "the big note itself");
        let mut rx = outbox.take().expect("sent to");
        assert_eq!(first_byte(rx.try_recv()), Some(5));
        assert_eq!(first_byte(rx.try_recv()), None);
    }

    /// Once the receiver is dropped, messages come back (to go to the standalone stream),
    /// and what was queued is freed.
    #[test]
    fn a_dropped_receiver_sends_messages_back() {
        let outbox = Outbox::new();
        outbox.send(note(1, 10), true, BOUNDS).expect("queued");
        drop(outbox.take());
        assert!(outbox.send(note(2, 10), true, BOUNDS).is_err());
        let closed = Outbox::new();
        assert!(closed.take().is_none());
        assert!(closed.send(note(3, 10), true, BOUNDS).is_err());
    }

    /// A sender that waits for room waits until the driver takes something, or drops the
    /// receiver.
    #[tokio::test]
    async fn a_sender_waits_for_room_until_the_driver_takes_or_drops_the_receiver() {
        let outbox = Arc::new(Outbox::new());
        for n in 0..4 {
            outbox.send(note(n, 10), true, BOUNDS).expect("queued");
        }
        let mut rx = outbox.take().expect("sent to");
        let wait = |outbox: Arc<Outbox>| tokio::spawn(async move { outbox.room(BOUNDS).await });
        let waiting = wait(outbox.clone());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the outbox is full");
        assert!(rx.recv().await.is_some());
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("room came")
            .expect("the task");
        outbox.send(note(9, 10), true, BOUNDS).expect("queued");
        let waiting = wait(outbox.clone());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(rx);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("a dropped receiver holds nothing")
            .expect("the task");
    }

    /// The receiver wakes for a message sent while it waits, and ends once the outbox is gone.
    #[tokio::test]
    async fn the_receiver_ends_with_the_outbox() {
        let outbox = Arc::new(Outbox::new());
        outbox.send(note(1, 1), true, BOUNDS).expect("queued");
        let mut rx = outbox.take().expect("sent to");
        assert_eq!(first_byte(rx.recv().await), Some(1));
        let sender = outbox.clone();
        let late = tokio::spawn(async move {
            tokio::task::yield_now().await;
            sender.send(note(2, 1), true, BOUNDS).expect("queued");
        });
        assert_eq!(first_byte(rx.recv().await), Some(2));
        late.await.expect("sender");
        drop(outbox);
        assert!(rx.recv().await.is_none());
    }
}
