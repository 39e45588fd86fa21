//! What a 2024-11-05 stream holds that its client has not read: the messages written for it
//! (answers, and the messages of its requests) and not yet taken by its connection.
//!
//! Why: a client that opens `/sse` and never reads it would otherwise have every answer of
//! every request it POSTs pile up (1.3 GB in 2.5 s in the event store, issue 36, where the
//! answers went then), and a bound that drops would lose answers. So this bound waits instead
//! (`http.max_unread_bytes`, and at most half of `sessions.max_events_per_stream` messages): a
//! request's next message waits until the stream has room, `/message` refuses new requests
//! while it is full, and nothing accepted is dropped.
//!
//! A message takes its [`Place`] before it is queued on the stream's direct line; the place is
//! given back when the stream yields it to its connection.

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The unread messages of one 2024-11-05 stream, shared by the stream and its requests.
pub struct Unread {
    max_bytes: usize,
    max_messages: usize,
    state: parking_lot::Mutex<State>,
    /// Woken when places are given back.
    room: Notify,
}

#[derive(Default)]
struct State {
    /// Bytes and messages with a place: written, or about to be, and not yet delivered.
    bytes: usize,
    messages: usize,
    /// Bytes of messages waiting for a place: owed to the client too.
    waiting: usize,
}

impl State {
    /// Whether a message of `len` bytes may have a place: one always fits an empty stream
    /// (whatever its size: nothing would ever send it otherwise).
    fn fits(&self, len: usize, max_bytes: usize, max_messages: usize) -> bool {
        self.messages == 0 || (self.messages < max_messages && self.bytes + len <= max_bytes)
    }

    fn give_back(&mut self, len: usize) {
        self.bytes = self.bytes.saturating_sub(len);
        self.messages = self.messages.saturating_sub(1);
    }
}

/// Where a stream is full, for the refusal that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    /// Bytes written and not read, and bytes waiting to be written.
    pub unread: usize,
    pub max_bytes: usize,
}

impl Unread {
    pub fn new(max_bytes: usize, max_messages: usize) -> Self {
        Self {
            max_bytes,
            max_messages: max_messages.max(1),
            state: parking_lot::Mutex::new(State::default()),
            room: Notify::new(),
        }
    }

    /// Waits for a place for a message of `len` bytes; `None` once `stop` fires (the stream
    /// ended: nothing can reach the client any more).
    pub async fn place(&self, len: usize, stop: &CancellationToken) -> Option<Place<'_>> {
        let _waiting = Waiting::new(self, len);
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            // Registered before looking, so a place given back in between wakes this one.
            notified.as_mut().enable();
            {
                let mut st = self.state.lock();
                if st.fits(len, self.max_bytes, self.max_messages) {
                    st.bytes += len;
                    st.messages += 1;
                    return Some(Place {
                        unread: self,
                        len,
                        kept: false,
                    });
                }
            }
            tokio::select! {
                _ = notified => {}
                _ = stop.cancelled() => return None,
            }
        }
    }

    /// `Some` when the stream holds (or owes) as much as it may: a new request is refused.
    pub fn full(&self) -> Option<Full> {
        let st = self.state.lock();
        let unread = st.bytes + st.waiting;
        (unread >= self.max_bytes || st.messages >= self.max_messages).then_some(Full {
            unread,
            max_bytes: self.max_bytes,
        })
    }

    /// The stream yielded a message of `len` bytes from its direct line.
    pub fn delivered_direct(&self, len: usize) {
        self.state.lock().give_back(len);
        self.room.notify_waiters();
    }

    fn give_back(&self, len: usize) {
        self.state.lock().give_back(len);
        self.room.notify_waiters();
    }
}

/// Counts a message's bytes as waiting while it waits for its place.
struct Waiting<'a> {
    unread: &'a Unread,
    len: usize,
}

impl<'a> Waiting<'a> {
    fn new(unread: &'a Unread, len: usize) -> Self {
        unread.state.lock().waiting += len;
        Self { unread, len }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut st = self.unread.state.lock();
        st.waiting = st.waiting.saturating_sub(self.len);
    }
}

/// One message's place on the stream: given back when the message is delivered, or at once
/// when it is dropped without having been written.
pub struct Place<'a> {
    unread: &'a Unread,
    len: usize,
    kept: bool,
}

impl Place<'_> {
    /// The message was queued on the direct line: its place is given back when the stream
    /// yields it ([`Unread::delivered_direct`]).
    pub fn queued(mut self) {
        self.kept = true;
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.unread.give_back(self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_message_waits_for_room_and_an_empty_stream_takes_any_size() {
        let unread = Unread::new(100, 3);
        let stop = CancellationToken::new();
        // Larger than the bound: it still fits an empty stream.
        unread.place(150, &stop).await.unwrap().queued();
        assert!(unread.full().is_some());
        let waiting = unread.place(10, &stop);
        tokio::pin!(waiting);
        assert!(waiting.as_mut().now_or_never().is_none());
        assert_eq!(unread.full().map(|f| f.unread), Some(160));
        unread.delivered_direct(150);
        waiting.await.unwrap().queued();
        assert_eq!(unread.full(), None);
        unread.delivered_direct(10);
        assert_eq!(unread.state.lock().bytes, 0);
    }

    #[tokio::test]
    async fn the_count_bound_holds_and_an_unused_place_is_given_back() {
        let unread = Unread::new(100, 2);
        let stop = CancellationToken::new();
        unread.place(10, &stop).await.unwrap().queued();
        unread.place(10, &stop).await.unwrap().queued();
        assert!(unread.full().is_some(), "two messages is the count bound");
        unread.delivered_direct(10);
        assert_eq!(unread.state.lock().messages, 1);
        // A place never used (its message dropped) goes back; a stopped stream places nothing.
        drop(unread.place(10, &stop).await.unwrap());
        assert_eq!(unread.state.lock().messages, 1);
        unread.place(90, &stop).await.unwrap().queued();
        stop.cancel();
        assert!(unread.place(1, &stop).await.is_none());
        assert_eq!(unread.state.lock().waiting, 0);
    }
}
