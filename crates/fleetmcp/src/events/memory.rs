//! Events in this process's memory, bounded per stream, per session and for the instance, in
//! count and in bytes ([`budget`](super::budget)).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::budget::{Bounds, Budget, Cut, ReaderMark};
use super::{
    Cursor, EventStore, EventStoreError, StoredEvent, StreamId, Unresolved, event_id,
    parse_event_id, session_tag,
};

struct Stream {
    /// (sequence number, data); oldest first.
    events: VecDeque<(u64, Bytes)>,
    next_seq: u64,
    closed: bool,
    /// Bumped by each new reader; a reader whose generation is stale ends.
    reader_gen: u64,
    /// Set by `end_reader`: the reader of that generation ends once it has delivered the
    /// event with that sequence number (everything written before the cut).
    cut: Option<(u64, u64)>,
}

struct Shared {
    state: Mutex<Stream>,
    notify: Notify,
}

#[derive(Default)]
struct SessionStreams {
    /// Prefix of this session's event ids.
    tag: Arc<str>,
    streams: HashMap<StreamId, Arc<Shared>>,
}

/// An [`EventStore`] in memory.
pub struct MemoryEventStore {
    max_events_per_stream: usize,
    /// Taken before any stream's own lock.
    sessions: Mutex<HashMap<String, SessionStreams>>,
    /// What the sessions keep ([`super::budget`]); taken alone.
    budget: Arc<Mutex<Budget>>,
}

impl MemoryEventStore {
    /// Bounded in count: `max_events_per_stream` events a stream, `max_streams_per_session`
    /// streams a session; in bytes, see [`MemoryEventStore::with_bytes`].
    pub fn new(max_events_per_stream: usize, max_streams_per_session: usize) -> Self {
        let bounds = Bounds {
            per_session: usize::MAX,
            per_instance: usize::MAX,
            streams_per_session: max_streams_per_session,
            events_per_stream: max_events_per_stream,
            ttl: None,
        };
        Self {
            max_events_per_stream,
            sessions: Mutex::new(HashMap::new()),
            budget: Arc::new(Mutex::new(Budget::new(bounds))),
        }
    }

    /// Bounded in bytes too: `per_session` bytes of events a session keeps, `per_instance`
    /// all of them together (`sessions.max_event_bytes_per_session`, `sessions.max_event_bytes`).
    pub fn with_bytes(self, per_session: usize, per_instance: usize) -> Self {
        {
            let mut budget = self.budget.lock();
            let mut bounds = budget.bounds();
            bounds.per_session = per_session;
            bounds.per_instance = per_instance;
            *budget = Budget::new(bounds);
        }
        self
    }

    /// Carries out what the ledger gave up: a closed stream's events are freed (a reader still
    /// on it ends), an open stream keeps its newest event.
    fn cut(sessions: &mut HashMap<String, SessionStreams>, cuts: Vec<Cut>) {
        for cut in cuts {
            match cut {
                Cut::Drop(session, stream) => {
                    let Some(entry) = sessions.get_mut(&*session) else {
                        continue;
                    };
                    if let Some(shared) = entry.streams.remove(&stream) {
                        shared.state.lock().events.clear();
                        shared.notify.notify_waiters();
                    }
                    if entry.streams.is_empty() {
                        sessions.remove(&*session);
                    }
                }
                // Streams in memory do not expire.
                Cut::Expired(..) => {}
                Cut::Trim(session, stream) => {
                    let shared = sessions.get(&*session).and_then(|e| e.streams.get(&stream));
                    if let Some(shared) = shared {
                        let mut st = shared.state.lock();
                        let keep = st.events.len().saturating_sub(1);
                        st.events.drain(..keep);
                    }
                }
            }
        }
    }

    fn stream(
        &self,
        session: &str,
        stream: StreamId,
        create: bool,
    ) -> Option<(Arc<Shared>, Arc<str>)> {
        let mut sessions = self.sessions.lock();
        if !create {
            let entry = sessions.get(session)?;
            return Some((entry.streams.get(&stream).cloned()?, entry.tag.clone()));
        }
        let entry = sessions
            .entry(session.to_string())
            .or_insert_with(|| SessionStreams {
                tag: session_tag(session).into(),
                ..Default::default()
            });
        if let Some(s) = entry.streams.get(&stream) {
            return Some((s.clone(), entry.tag.clone()));
        }
        // A new stream counts towards the session's streams once it has an event (`append`).
        let shared = Arc::new(Shared {
            state: Mutex::new(Stream {
                events: VecDeque::new(),
                next_seq: 1,
                closed: false,
                reader_gen: 0,
                cut: None,
            }),
            notify: Notify::new(),
        });
        entry.streams.insert(stream, shared.clone());
        Some((shared, entry.tag.clone()))
    }

    /// Number of sessions with events (for tests).
    #[cfg(test)]
    pub fn session_count(&self) -> usize {
        self.sessions.lock().len()
    }
}

#[async_trait]
impl EventStore for MemoryEventStore {
    async fn append(
        &self,
        session: &str,
        stream: StreamId,
        data: Bytes,
    ) -> Result<String, EventStoreError> {
        let (shared, tag) = self
            .stream(session, stream, true)
            .ok_or_else(|| EventStoreError("stream could not be created".into()))?;
        let size = data.len();
        let (seq, removed) = {
            let mut st = shared.state.lock();
            let seq = st.next_seq;
            st.next_seq += 1;
            st.events.push_back((seq, data));
            let mut removed = None;
            while st.events.len() > self.max_events_per_stream {
                if let Some((_, gone)) = st.events.pop_front() {
                    *removed.get_or_insert(0) += gone.len();
                }
            }
            (seq, removed)
        };
        let now = std::time::Instant::now();
        let cuts = self
            .budget
            .lock()
            .appended(session, stream, size, removed, now);
        if !cuts.is_empty() {
            Self::cut(&mut self.sessions.lock(), cuts);
        }
        shared.notify.notify_waiters();
        Ok(event_id(&tag, stream, seq))
    }

    async fn close(&self, session: &str, stream: StreamId) -> Result<(), EventStoreError> {
        if let Some((shared, _)) = self.stream(session, stream, false) {
            shared.state.lock().closed = true;
            shared.notify.notify_waiters();
        }
        self.budget.lock().closed(session, stream);
        Ok(())
    }

    async fn end_reader(&self, session: &str, stream: StreamId) {
        if let Some((shared, _)) = self.stream(session, stream, false) {
            {
                let mut st = shared.state.lock();
                st.cut = Some((st.reader_gen, st.next_seq - 1));
            }
            shared.notify.notify_waiters();
        }
    }

    fn tail(
        &self,
        session: &str,
        stream: StreamId,
        from: Cursor,
        stop: CancellationToken,
    ) -> BoxStream<'static, StoredEvent> {
        let Some((shared, tag)) = self.stream(session, stream, true) else {
            return stream::empty().boxed();
        };
        // Claim the stream: any earlier reader ends at its next wake-up.
        let (generation, start_after) = {
            let mut st = shared.state.lock();
            st.reader_gen += 1;
            let after = match from {
                Cursor::Start => 0,
                Cursor::After(seq) => seq,
                Cursor::Now => st.next_seq - 1,
            };
            (st.reader_gen, after)
        };
        shared.notify.notify_waiters();
        let mark = ReaderMark::new(&self.budget, session, stream);
        let state = (shared, start_after, generation, stop, (stream, tag, mark));
        stream::unfold(
            state,
            |(shared, after, generation, stop, (stream_id, tag, mut mark))| async move {
                enum Step {
                    Event(StoredEvent, u64),
                    /// The stream is closed and everything was read.
                    Done,
                    End,
                }
                let step = loop {
                    // Register interest before looking, so an append in between is not missed.
                    let notified = shared.notify.notified();
                    let step = {
                        let st = shared.state.lock();
                        let cut_reached = st
                            .cut
                            .is_some_and(|(g, seq)| g == generation && after >= seq);
                        if st.reader_gen != generation || cut_reached {
                            Some(Step::End)
                        } else {
                            // Events are in sequence order; find the first one after the cursor.
                            let idx = st.events.partition_point(|(seq, _)| *seq <= after);
                            match st.events.get(idx) {
                                Some((seq, data)) => Some(Step::Event(
                                    StoredEvent {
                                        id: event_id(&tag, stream_id, *seq),
                                        data: data.clone(),
                                    },
                                    *seq,
                                )),
                                None if st.closed => Some(Step::Done),
                                None => None,
                            }
                        }
                    };
                    if let Some(step) = step {
                        break step;
                    }
                    tokio::select! {
                        _ = notified => {}
                        _ = stop.cancelled() => break Step::End,
                    }
                };
                match step {
                    Step::Event(ev, seq) => {
                        Some((ev, (shared, seq, generation, stop, (stream_id, tag, mark))))
                    }
                    Step::Done => mark.read_to_the_end(),
                    Step::End => None,
                }
            },
        )
        .boxed()
    }

    async fn resolve(
        &self,
        session: &str,
        last_event_id: &str,
    ) -> Result<(StreamId, Cursor), Unresolved> {
        // One process writes and reads: nothing it wrote is lost but with the session.
        let (tag, stream, seq) = parse_event_id(last_event_id).ok_or(Unresolved::NotAnEvent)?;
        let (shared, own_tag) = self
            .stream(session, stream, false)
            .ok_or(Unresolved::NotAnEvent)?;
        if tag != &*own_tag {
            return Err(Unresolved::NotAnEvent);
        }
        let st = shared.state.lock();
        (seq < st.next_seq)
            .then_some((stream, Cursor::After(seq)))
            .ok_or(Unresolved::NotAnEvent)
    }

    async fn forget(&self, session: &str) {
        let removed = {
            self.budget.lock().forget(session);
            self.sessions.lock().remove(session)
        };
        if let Some(s) = removed {
            for shared in s.streams.values() {
                shared.state.lock().closed = true;
                shared.notify.notify_waiters();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(s: BoxStream<'static, StoredEvent>) -> Vec<String> {
        s.map(|e| String::from_utf8_lossy(&e.data).into_owned())
            .collect()
            .await
    }

    #[tokio::test]
    async fn resume_after_an_id_gets_each_later_event_once() {
        let store = MemoryEventStore::new(100, 8);
        let a = store.append("s1", 3, Bytes::from("a")).await.unwrap();
        store.append("s1", 3, Bytes::from("b")).await.unwrap();
        store.append("s1", 3, Bytes::from("c")).await.unwrap();
        store.close("s1", 3).await.unwrap();
        let (stream, cursor) = store.resolve("s1", &a).await.unwrap();
        assert_eq!(stream, 3);
        let got = collect(store.tail("s1", stream, cursor, CancellationToken::new())).await;
        assert_eq!(got, ["b", "c"]);
        assert!(
            store.resolve("s2", &a).await.is_err(),
            "ids do not cross sessions"
        );
        assert!(
            store
                .resolve("s1", &format!("{}-9-1", session_tag("s1")))
                .await
                .is_err()
        );
        store.append("s2", 3, Bytes::from("z")).await.unwrap();
        assert!(
            store.resolve("s2", &a).await.is_err(),
            "same stream number, other session"
        );
        assert!(store.resolve("s1", "garbage").await.is_err());
    }

    #[tokio::test]
    async fn a_live_reader_sees_appends_and_a_new_reader_takes_over() {
        let store = Arc::new(MemoryEventStore::new(100, 8));
        let mut first = store.tail("s", 1, Cursor::Start, CancellationToken::new());
        store.append("s", 1, Bytes::from("x")).await.unwrap();
        assert_eq!(first.next().await.unwrap().data, Bytes::from("x"));
        let second = store.tail("s", 1, Cursor::After(1), CancellationToken::new());
        assert!(first.next().await.is_none(), "the older reader ends");
        store.append("s", 1, Bytes::from("y")).await.unwrap();
        store.close("s", 1).await.unwrap();
        assert_eq!(collect(second).await, ["y"]);
    }

    #[tokio::test]
    async fn bounded_per_stream_and_per_session() {
        let store = MemoryEventStore::new(2, 2);
        for i in 0..5 {
            store
                .append("s", 1, Bytes::from(i.to_string()))
                .await
                .unwrap();
        }
        store.close("s", 1).await.unwrap();
        assert_eq!(
            collect(store.tail("s", 1, Cursor::Start, CancellationToken::new())).await,
            ["3", "4"]
        );
        store.append("s", 2, Bytes::from("b")).await.unwrap();
        store.append("s", 3, Bytes::from("c")).await.unwrap();
        assert!(
            store.resolve("s", "1-4").await.is_err(),
            "oldest closed stream dropped"
        );
        store.forget("s").await;
        assert_eq!(store.session_count(), 0);
    }
}

/// Property test of `resolve` in memory: whatever `Last-Event-ID` a client sends, it resolves
/// only to a position this session's own events reached.
#[cfg(test)]
mod props {
    use super::*;
    use crate::events::{parse_event_id, session_tag};
    use proptest::prelude::*;

    use crate::testing::prop_config as config;

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn resolve_finds_only_positions_of_this_session(
            // Events appended per stream (streams 0..4) of "s1"; "s2" gets one event on each.
            counts in prop::collection::vec(0u64..5, 4),
            candidates in prop::collection::vec(
                prop_oneof![
                    any::<String>(),
                    (0u64..6, 0u64..8).prop_map(|(st, seq)| event_id(&session_tag("s1"), st, seq)),
                    (0u64..6, 0u64..8).prop_map(|(st, seq)| event_id(&session_tag("s2"), st, seq)),
                    (0u64..6, 0u64..8).prop_map(|(st, seq)| format!("{}-+{st}-0{seq}", session_tag("s1"))),
                    "[0-9a-f]{0,13}-[0-9]{1,3}-[0-9]{1,3}",
                ],
                1..16,
            ),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            rt.block_on(async {
                let store = MemoryEventStore::new(100, 8);
                for (stream, &n) in counts.iter().enumerate() {
                    for _ in 0..n {
                        store.append("s1", stream as u64, Bytes::from("e")).await.expect("append");
                    }
                    store.append("s2", stream as u64, Bytes::from("f")).await.expect("append");
                }
                let own = session_tag("s1");
                for c in &candidates {
                    let got = store.resolve("s1", c).await;
                    // Stream `st` holds `counts[st]` events, numbered from 1: any of them, or
                    // 0 (before the first), is a position; nothing else is.
                    let want = parse_event_id(c).and_then(|(tag, st, seq)| {
                        let n = *counts.get(usize::try_from(st).ok()?)?;
                        (tag == own && n > 0 && seq <= n).then_some((st, Cursor::After(seq)))
                    });
                    prop_assert_eq!(got.ok(), want, "{:?}", c);
                    // Another session never resolves s1's ids, whatever it holds.
                    if parse_event_id(c).is_some_and(|(tag, _, _)| tag == own) {
                        prop_assert_eq!(store.resolve("s2", c).await.ok(), None);
                    }
                }
                Ok(())
            })?;
        }
    }
}
