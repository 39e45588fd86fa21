//! The event store: every SSE event a session's streams carry, kept so that a broken stream
//! can be resumed with `Last-Event-ID`, possibly on another instance.
//!
//! An SSE answer is never written to the socket directly. The code that produces messages
//! appends them to a stream here, and the HTTP response *tails* the stream. Resuming is then
//! the same operation from another position, and a stream whose connection broke keeps
//! collecting events until the client comes back. One reader at a time: a new reader of a
//! stream ends the previous one, so a message is never delivered on two connections.
//!
//! Event ids are `<tag>-<stream>-<seq>`, where the tag is derived from the session id (which
//! only its client knows): an id is resolved only within the session it names, so one session
//! can never replay another's events, even when stream numbers coincide.

mod memory;
mod redis;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;

pub use self::redis::RedisEventStore;
pub use memory::MemoryEventStore;

/// A stream within one session. Stream 0 is the session's standalone (GET) stream.
pub type StreamId = u64;
/// The standalone stream a `GET` opens, for messages unrelated to any request.
pub const STANDALONE_STREAM: StreamId = 0;

/// Where a reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cursor {
    /// From the first event kept.
    Start,
    /// After the event with this sequence number.
    After(u64),
    /// Only events appended from now on.
    Now,
}

/// One event: its id and the JSON-RPC message it carries (empty for a priming event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub id: String,
    pub data: Bytes,
}

/// A failure of the event store.
#[derive(Debug, thiserror::Error)]
#[error("event store: {0}")]
pub struct EventStoreError(pub String);

#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Appends an event to a stream, creating the stream if needed; returns the event's id.
    async fn append(
        &self,
        session: &str,
        stream: StreamId,
        data: Bytes,
    ) -> Result<String, EventStoreError>;

    /// Marks a stream complete: readers end once they have read everything.
    async fn close(&self, session: &str, stream: StreamId);

    /// Ends the connection currently reading a stream, without completing the stream
    /// (SSE polling: the client reconnects with `Last-Event-ID`).
    async fn end_reader(&self, session: &str, stream: StreamId);

    /// The events of a stream from `from` on, live, until the stream is closed and drained,
    /// another reader takes the stream over, or `stop` fires.
    fn tail(
        &self,
        session: &str,
        stream: StreamId,
        from: Cursor,
        stop: tokio_util::sync::CancellationToken,
    ) -> BoxStream<'static, StoredEvent>;

    /// Finds the stream and position a `Last-Event-ID` names, within this session only.
    async fn resolve(&self, session: &str, last_event_id: &str) -> Option<(StreamId, Cursor)>;

    /// Drops every stream of a session: the session has ended.
    async fn forget(&self, session: &str);

    /// Drops what this instance keeps for a session it no longer holds (idle here), without
    /// touching state other instances share. For a store that only this process uses, that is
    /// everything.
    async fn release(&self, session: &str) {
        self.forget(session).await;
    }
}

/// Splits `<tag>-<stream>-<seq>`.
pub(crate) fn parse_event_id(id: &str) -> Option<(&str, StreamId, u64)> {
    let mut parts = id.splitn(3, '-');
    let tag = parts.next()?;
    let stream = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    Some((tag, stream, seq))
}

pub(crate) fn event_id(tag: &str, stream: StreamId, seq: u64) -> String {
    format!("{tag}-{stream}-{seq}")
}

/// The tag of a session's event ids: 12 hex digits of SHA-256 of the session id.
/// Hex, so that the id stays splittable on `-`.
pub(crate) fn session_tag(session: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(session.as_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}
