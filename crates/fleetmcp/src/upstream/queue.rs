//! The queue each way of an [`UpstreamLink`](super::UpstreamLink): bounded in messages AND in
//! bytes, so that a side that stops reading makes the other side wait instead of holding its
//! messages. A count alone is not a bound: 64 messages of 4 MiB each are 256 MiB per link
//! (issue 36: a client's padded notifications took a gateway to 1.2 GB).
//!
//! A message costs its length in bytes of the budget from the moment it is queued until the
//! receiver takes it; one longer than the whole budget costs the whole budget (it waits until
//! the queue is empty, and goes alone), so any message can pass. Senders wait in the order
//! they came (both the count and the bytes are fair semaphores), so one sender's messages stay
//! in order, and a long message is not overtaken for ever by short ones.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// A message in the queue, with the bytes of the budget it holds until it is taken.
struct Queued {
    message: Bytes,
    _bytes: OwnedSemaphorePermit,
}

impl Queued {
    /// Queues `message` in the `slot` reserved for it, holding `bytes` of the budget: the last
    /// step of [`MessageSender::send`] and [`MessageSender::try_send`] alike.
    fn put(slot: mpsc::Permit<'_, Queued>, message: Bytes, bytes: OwnedSemaphorePermit) {
        slot.send(Queued {
            message,
            _bytes: bytes,
        });
    }
}

/// A queue of whole messages holding at most `max_messages` of them and `max_bytes` bytes
/// (at least 1 each; `max_bytes` at most `u32::MAX`): its sending and receiving ends
/// ([`UpstreamLink::channel`](super::UpstreamLink::channel)).
pub(super) fn channel(max_messages: usize, max_bytes: usize) -> (MessageSender, MessageReceiver) {
    let max_bytes = max_bytes.clamp(1, u32::MAX as usize);
    let (tx, rx) = mpsc::channel(max_messages.max(1));
    let sender = MessageSender {
        tx,
        bytes: Arc::new(Semaphore::new(max_bytes)),
        max_bytes: max_bytes as u32,
    };
    (sender, MessageReceiver { rx })
}

/// The sending end of an [`UpstreamLink::channel`](super::UpstreamLink::channel). Cheap to clone; the queue closes when every
/// sender is dropped.
#[derive(Clone)]
pub struct MessageSender {
    tx: mpsc::Sender<Queued>,
    bytes: Arc<Semaphore>,
    max_bytes: u32,
}

impl MessageSender {
    /// What `message` costs of the byte budget.
    fn cost(&self, message: &Bytes) -> u32 {
        u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .clamp(1, self.max_bytes)
    }

    /// Queues `message`, waiting for room (in messages and in bytes); `Err` gives it back
    /// when the receiver is gone. Cancel-safe: dropped while waiting, it holds nothing.
    pub async fn send(&self, message: Bytes) -> Result<(), Bytes> {
        let Ok(slot) = self.tx.reserve().await else {
            return Err(message);
        };
        let Ok(bytes) = self
            .bytes
            .clone()
            .acquire_many_owned(self.cost(&message))
            .await
        else {
            // Never: the semaphore is not closed.
            return Err(message);
        };
        Queued::put(slot, message, bytes);
        Ok(())
    }

    /// Queues `message` if there is room now, or gives it back: the queue is full, or its
    /// receiver gone ([`is_closed`](Self::is_closed) tells which).
    pub fn try_send(&self, message: Bytes) -> Result<(), Bytes> {
        let Ok(slot) = self.tx.try_reserve() else {
            return Err(message);
        };
        let Ok(bytes) = self
            .bytes
            .clone()
            .try_acquire_many_owned(self.cost(&message))
        else {
            return Err(message);
        };
        Queued::put(slot, message, bytes);
        Ok(())
    }

    /// Completes when the receiver is gone.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The receiving end of an [`UpstreamLink::channel`](super::UpstreamLink::channel).
pub struct MessageReceiver {
    rx: mpsc::Receiver<Queued>,
}

impl MessageReceiver {
    /// The next message (its bytes given back to the budget), or `None` once every sender is
    /// gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.rx.recv().await.map(|q| q.message)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn of(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[tokio::test]
    async fn the_queue_is_bounded_in_bytes_as_well_as_in_messages() {
        let (tx, mut rx) = channel(4, 100);
        tx.try_send(of(60)).expect("room");
        assert!(
            tx.try_send(of(60)).is_err(),
            "120 bytes are past the budget, with only one message queued"
        );
        tx.try_send(of(40)).expect("100 bytes fit");
        // A sender past the budget waits until the receiver takes something.
        let waiting = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.send(of(50)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "it waits for room");
        assert_eq!(rx.recv().await.map(|m| m.len()), Some(60));
        waiting
            .await
            .expect("the task")
            .expect("queued once room came");
        assert_eq!(rx.recv().await.map(|m| m.len()), Some(40));
        assert_eq!(rx.recv().await.map(|m| m.len()), Some(50));
        // And in messages: four short ones fill it.
        for _ in 0..4 {
            tx.try_send(of(1)).expect("room");
        }
        assert!(tx.try_send(of(1)).is_err() && !tx.is_closed());
    }

    #[tokio::test]
    async fn a_message_longer_than_the_budget_goes_alone_and_a_closed_queue_gives_it_back() {
        let (tx, mut rx) = channel(4, 100);
        tx.try_send(of(10)).expect("room");
        assert!(tx.try_send(of(500)).is_err(), "it waits for an empty queue");
        assert_eq!(rx.recv().await.map(|m| m.len()), Some(10));
        tx.send(of(500)).await.expect("alone, it passes");
        assert!(tx.try_send(of(1)).is_err() && !tx.is_closed());
        assert_eq!(rx.recv().await.map(|m| m.len()), Some(500));
        drop(rx);
        assert!(tx.is_closed());
        assert_eq!(tx.send(of(3)).await.map_err(|m| m.len()), Err(3));
        assert!(tx.try_send(of(1)).is_err());
    }
}
