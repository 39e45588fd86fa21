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
//!
//! Two stores behind [`EventStore`]: in memory (`memory.rs`) and in Redis Streams
//! (`redis/`, `mcp:events:{<sid>}:<stream>`), so a stream broken on one instance resumes on
//! another. Both are held to the same bounds in count and in bytes (per stream, per session,
//! per instance) by one ledger, `budget.rs`, which says what to give up; the Redis store
//! carries the cuts out in `redis/bounds.rs`, counted by the instance that writes. A reader
//! that cannot read Redis for `sessions.stream_read_outage_ms` ends instead of waiting; when
//! a reader reads Redis at all, and when it ends a stream whose writer is gone, is
//! `redis/writer.rs`.
//!
//! With `redis.wait_replicas` on (Sentinel), a stream's first entry (a request's first event,
//! a standalone stream's priming event) and its end (the answer with the end marker, one
//! script) are confirmed by the replicas as a new session's record is, and an end they do not
//! confirm is retried until they do (each try wakes this process's readers, confirmed or not:
//! the write is on the master all the same). The events in between are not (a streamed answer
//! pays no `WAIT` per message), so a failover may lose some of them but not the stream: a
//! `Last-Event-ID` naming a lost one still finds its stream and reads on after it (entry ids
//! are times: later events sort after).

mod budget;
mod memory;
#[cfg(feature = "redis")]
mod redis;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;

#[cfg(feature = "redis")]
pub use self::redis::RedisEventStore;
pub use memory::MemoryEventStore;

/// The error message of a request whose answer stream was ended by a reader because the
/// process writing it is gone: whether the request took effect is unknown (a client retries
/// it with the same idempotency key, see `RequestContext::call_key`).
pub const WRITER_GONE_MESSAGE: &str = "The instance running this request stopped before it answered; whether it took effect is unknown";

/// The error message (with `410 Gone`) of a resume whose stream was never stored and will not
/// be (`Unresolved::Lost`): like [`WRITER_GONE_MESSAGE`], the request's outcome is unknown.
pub const STREAM_LOST_MESSAGE: &str = "Gone: the stream Last-Event-ID names was never stored (the instance running its request stopped, or lost Redis, before it could); whether the request took effect is unknown";

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

/// Why a `Last-Event-ID` names nothing to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unresolved {
    /// Not an id of this session's events, or of a stream the store has.
    NotAnEvent,
    /// The start of an answer stream that was never stored, and still is not after its
    /// writer had time to store it ([`UNSTORED_WAIT`]): the instance running its request
    /// stopped, or lost Redis, before the stream's first event was stored. Nothing will come.
    Lost,
}

/// How long a resume from the start of a stream that is not stored waits for it before it is
/// judged lost ([`Unresolved::Lost`]): a writer alive and reaching Redis stores its answer
/// within its retry interval (2 s at most), so five times that.
pub const UNSTORED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A failure of the event store.
#[derive(Debug, thiserror::Error)]
#[error("event store: {0}")]
pub struct EventStoreError(pub String);

/// Where a session's SSE events are kept, so a broken stream resumes from `Last-Event-ID`
/// (in memory, or in Redis for a fleet).
#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Appends an event to a stream, creating the stream if needed; returns the event's id.
    async fn append(
        &self,
        session: &str,
        stream: StreamId,
        data: Bytes,
    ) -> Result<String, EventStoreError>;

    /// Appends the first event of the stream that answers request `request_id` (its raw JSON
    /// id), noting which request it answers and which process writes it, so that a reader on
    /// another instance can end the stream with an error answer for that request if the
    /// writer's process is gone ([`WRITER_GONE_MESSAGE`]). A store that only this process
    /// reads never outlives its writer: the default just appends.
    ///
    /// A store with replicas confirms this event on them (an error when they do not): the
    /// stream's later events may be lost in a failover, but not the stream itself, so that a
    /// `Last-Event-ID` naming a lost event still finds its stream and reads on after it, and
    /// the stream still names its writer.
    async fn append_first(
        &self,
        session: &str,
        stream: StreamId,
        request_id: &str,
        data: Bytes,
    ) -> Result<String, EventStoreError> {
        let _ = request_id;
        self.append(session, stream, data).await
    }

    /// Appends the empty priming event that opens a standalone stream's connection (its id is
    /// what the client resumes from), confirmed like a stream's first event
    /// ([`EventStore::append_first`]).
    async fn prime(&self, session: &str, stream: StreamId) -> Result<String, EventStoreError> {
        self.append(session, stream, Bytes::new()).await
    }

    /// Marks a stream complete: readers end once they have read everything. An error when the
    /// mark could not be written (the writer may try again: a reader that resumes the stream
    /// later waits for it), or, in a store with replicas, not confirmed on them.
    async fn close(&self, session: &str, stream: StreamId) -> Result<(), EventStoreError>;

    /// Whether the store confirms a stream's first event and its end on replicas: a request's
    /// writer then stores its answer with the end marker as one confirmed step
    /// ([`EventStore::finish`]), so that a failover cannot keep the end and lose the answer,
    /// or lose both while the writer believes them stored; and a standalone stream whose
    /// priming event is not confirmed is refused. A store without replicas: `false`.
    fn confirms_on_replicas(&self) -> bool {
        false
    }

    /// Stores `answer`, a request's final answer, unless the stream carries it already, then marks
    /// the stream complete, as one step: for a writer whose store failed under it (an append timed
    /// out, and may still land), so that a client that resumes the stream later gets the answer,
    /// once; and, in a store that confirms ends ([`EventStore::confirms_on_replicas`]), for every
    /// answer. Confirmed like [`EventStore::close`]. The default appends and closes (a store that
    /// cannot fail).
    async fn finish(
        &self,
        session: &str,
        stream: StreamId,
        answer: Bytes,
    ) -> Result<(), EventStoreError> {
        self.append(session, stream, answer).await?;
        self.close(session, stream).await
    }

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
    async fn resolve(
        &self,
        session: &str,
        last_event_id: &str,
    ) -> Result<(StreamId, Cursor), Unresolved>;

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

/// The id that names the start of a stream, before its first event: resuming after it reads
/// the stream from the beginning (a direct message of an answer whose store failed before it
/// stored anything carries it).
pub(crate) fn stream_start_id(session: &str, stream: StreamId) -> String {
    event_id(&session_tag(session), stream, 0)
}

/// The tag of a session's event ids: 12 hex digits of SHA-256 of the session id.
/// Hex, so that the id stays splittable on `-`.
pub(crate) fn session_tag(session: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(session.as_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// Property tests of `Last-Event-ID` parsing: the header is the client's, so any text must
/// give `None` or a triple that spells the input back.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::prop_config as config;

    /// A decimal number as `u64::from_str` reads it: digits, with an optional leading `+`.
    fn is_number(s: &str) -> bool {
        let digits = s.strip_prefix('+').unwrap_or(s);
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// Every id this server hands out parses back to what made it.
        #[test]
        fn event_ids_round_trip(session in ".{0,40}", stream in any::<u64>(), seq in any::<u64>()) {
            let tag = session_tag(&session);
            prop_assert_eq!(tag.len(), 12);
            prop_assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()), "a tag never contains '-'");
            let id = event_id(&tag, stream, seq);
            prop_assert_eq!(parse_event_id(&id), Some((tag.as_str(), stream, seq)));
        }

        /// Any text: no panic; `Some` only for `<tag without '-'>-<number>-<number>` whose
        /// numbers fit a u64, with the tag and the numbers read exactly as written.
        #[test]
        fn arbitrary_ids_parse_only_in_the_documented_form(
            id in prop_oneof![
                any::<String>(),
                "[0-9a-f+ -]{0,30}",
                "[0-9a-f]{12}-[0-9]{1,21}-[0-9+ -]{1,21}",
            ],
        ) {
            if let Some((tag, stream, seq)) = parse_event_id(&id) {
                let mut parts = id.splitn(3, '-');
                prop_assert_eq!(parts.next(), Some(tag));
                prop_assert!(!tag.contains('-'));
                let (s, q) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                prop_assert!(is_number(s) && is_number(q), "{:?}", id);
                prop_assert_eq!(s.parse::<u64>().ok(), Some(stream));
                prop_assert_eq!(q.parse::<u64>().ok(), Some(seq));
            }
        }

        /// Numbers past u64, a missing field, or an extra `-` field: `None`.
        #[test]
        fn malformed_ids_are_refused(tag in "[0-9a-f]{12}", stream in any::<u64>(), seq in any::<u64>()) {
            for bad in [
                format!("{tag}-{stream}0000000000000000000000-{seq}"),
                format!("{tag}-{stream}-{seq}0000000000000000000000"),
                format!("{tag}-{stream}"),
                format!("{tag}-{stream}-{seq}-1"),
                format!("{tag}-{stream}--{seq}"),
                format!("{tag}-{stream}- {seq}"),
            ] {
                prop_assert_eq!(parse_event_id(&bad), None, "{:?}", bad);
            }
        }
    }
}
