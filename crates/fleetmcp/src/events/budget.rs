//! What the event store keeps for replay, counted in bytes: per session and for the whole
//! instance, with the number of streams a session keeps. Both stores keep their events
//! elsewhere (in memory, in Redis); this is only the ledger that says which of them to give up
//! when a bound is passed, and it is the same for both, so that a bound holds whichever store
//! runs.
//!
//! The order in which things are given up, at each bound:
//! 1. the oldest *closed* streams whose reader read them to their end, then the oldest closed
//!    streams nobody reads now (their request answered; a client that resumes one afterwards
//!    gets it as an unknown event, like an expired one), then
//! 2. the older events of *open* streams, oldest stream first: each keeps its newest event
//!    (a running request's older notifications; never an answer, which is a stream's last).
//!
//! A closed stream that a reader of this process is still delivering is never dropped (its
//! answer is on its way; such readers are bounded by connections), nor is the event being
//! appended: so what a session keeps is at most its bound, plus one event per open stream
//! (open streams are bounded by the requests a session may run at once), plus the streams
//! being delivered.
//!
//! The ledger is per process. With Redis, a session's streams are written by the instance that
//! holds it, so its writer counts them; a session that moves starts a new count on its new
//! holder while what the old one wrote expires (`sessions.event_ttl_ms`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::StreamId;

/// What an event costs the ledger beyond its data: its id, its place in the stream, its
/// store's bookkeeping. So that empty events (priming, end markers) count too.
pub(crate) const EVENT_OVERHEAD: usize = 64;

/// The bounds, from `[sessions]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Bytes one session's streams keep (`sessions.max_event_bytes_per_session`).
    pub per_session: usize,
    /// Bytes all sessions' streams keep together (`sessions.max_event_bytes`).
    pub per_instance: usize,
    /// Streams one session keeps (`sessions.max_streams_per_session`).
    pub streams_per_session: usize,
    /// Events one stream keeps (`sessions.max_events_per_stream`): past it the store drops the
    /// oldest itself; the ledger then counts the stream's average event as gone when it is not
    /// told exactly what went.
    pub events_per_stream: usize,
    /// How long a stream outlives its last event (Redis expires it): `None` in memory.
    pub ttl: Option<Duration>,
}

/// What a store must give up to stay within the bounds, session by session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Drop the whole stream (it is closed).
    Drop(Arc<str>, StreamId),
    /// Drop every event of the stream but its newest (it is open); the ledger already counts
    /// it so.
    Trim(Arc<str>, StreamId),
    /// The stream outlived its time in the store (Redis expired it): only what the process
    /// keeps for it is left to drop.
    Expired(Arc<str>, StreamId),
}

struct StreamUse {
    id: StreamId,
    bytes: usize,
    events: usize,
    /// The size of the newest event, what a trimmed stream keeps.
    newest: usize,
    closed: bool,
    written: Instant,
    /// Readers of this process on the stream now.
    readers: usize,
    /// A reader read the stream to its end.
    delivered: bool,
}

impl StreamUse {
    fn new(id: StreamId, now: Instant) -> Self {
        Self {
            id,
            bytes: 0,
            events: 0,
            newest: 0,
            closed: false,
            written: now,
            readers: 0,
            delivered: false,
        }
    }

    /// Whether the stream may be dropped whole: closed, and nobody here reading it.
    fn droppable(&self) -> bool {
        self.closed && self.readers == 0
    }
}

#[derive(Default)]
struct SessionUse {
    bytes: usize,
    /// Oldest first.
    streams: VecDeque<StreamUse>,
}

/// The ledger. Not thread-safe on its own: each store keeps it under its lock.
pub(crate) struct Budget {
    bounds: Bounds,
    sessions: HashMap<Arc<str>, SessionUse>,
    total: usize,
    /// Every stream in the order it was created (or last trimmed), for the instance bound:
    /// stale entries (streams since dropped) are skipped when met and swept when they are the
    /// majority.
    order: VecDeque<(Arc<str>, StreamId)>,
    live_streams: usize,
}

/// How many streams one append may look at to meet the instance bound: a pass costs at most
/// this much, whatever the fleet holds.
const INSTANCE_PASS: usize = 256;
/// How many streams one append looks at for expiry.
const EXPIRY_LOOKS: usize = 4;

impl Budget {
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            sessions: HashMap::new(),
            total: 0,
            order: VecDeque::new(),
            live_streams: 0,
        }
    }

    /// The bounds the ledger keeps.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// Bytes kept by every session, as the ledger counts them.
    #[cfg(test)]
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes kept by one session.
    #[cfg(test)]
    pub fn session_bytes(&self, session: &str) -> usize {
        self.sessions.get(session).map_or(0, |s| s.bytes)
    }

    /// An event of `data` bytes was appended to `stream`; `removed`: the bytes the store
    /// itself dropped from that stream for its event count, when it knows them. Returns what
    /// must now be given up, in order.
    pub fn appended(
        &mut self,
        session: &str,
        stream: StreamId,
        data: usize,
        removed: Option<usize>,
        now: Instant,
    ) -> Vec<Cut> {
        let expired = self.expire(now);
        let cost = data + EVENT_OVERHEAD;
        let key = self.session_key(session);
        let max_events = self.bounds.events_per_stream;
        let s = self.stream_use(&key, stream, now);
        let before = s.bytes;
        s.bytes += cost;
        s.events += 1;
        s.newest = cost;
        s.written = now;
        if s.events > max_events {
            let average = (s.bytes - cost) / (s.events - 1).max(1);
            let gone = removed.map_or(average, |r| r + EVENT_OVERHEAD);
            s.bytes = s.bytes.saturating_sub(gone).max(cost);
            s.events = max_events;
        } else if let Some(r) = removed.filter(|r| *r > 0) {
            s.bytes = s.bytes.saturating_sub(r).max(cost);
        }
        let grown = s.bytes as isize - before as isize;
        let entry = self.sessions.entry(key.clone()).or_default();
        entry.bytes = (entry.bytes as isize + grown).max(0) as usize;
        self.total = (self.total as isize + grown).max(0) as usize;
        let mut cuts = expired;
        cuts.extend(self.session_cuts(&key, stream));
        self.instance_cuts(&key, stream, &mut cuts);
        cuts
    }

    /// The ledger's entry of a stream, made if it has none.
    fn stream_use(&mut self, key: &Arc<str>, stream: StreamId, now: Instant) -> &mut StreamUse {
        let entry = self.sessions.entry(key.clone()).or_default();
        let pos = match entry.streams.iter().position(|s| s.id == stream) {
            Some(pos) => pos,
            None => {
                entry.streams.push_back(StreamUse::new(stream, now));
                self.order.push_back((key.clone(), stream));
                self.live_streams += 1;
                entry.streams.len() - 1
            }
        };
        &mut entry.streams[pos]
    }

    /// A reader of this process starts on the stream: while it reads, the stream is not
    /// dropped.
    pub fn reading(&mut self, session: &str, stream: StreamId) {
        let key = self.session_key(session);
        self.stream_use(&key, stream, Instant::now()).readers += 1;
    }

    /// That reader ended; `to_the_end`: it read the closed stream's last event.
    pub fn done_reading(&mut self, session: &str, stream: StreamId, to_the_end: bool) {
        if let Some(s) = self
            .sessions
            .get_mut(session)
            .and_then(|e| e.streams.iter_mut().find(|s| s.id == stream))
        {
            s.readers = s.readers.saturating_sub(1);
            s.delivered |= to_the_end;
        }
    }

    /// The stream is complete: it may be dropped first.
    pub fn closed(&mut self, session: &str, stream: StreamId) {
        if let Some(s) = self
            .sessions
            .get_mut(session)
            .and_then(|e| e.streams.iter_mut().find(|s| s.id == stream))
        {
            s.closed = true;
        }
    }

    /// The session's streams are gone (it ended, or moved to another instance).
    pub fn forget(&mut self, session: &str) {
        if let Some(entry) = self.sessions.remove(session) {
            self.total -= entry.bytes.min(self.total);
            self.live_streams -= entry.streams.len().min(self.live_streams);
        }
        self.sweep();
    }

    /// The cuts that bring `session` within its own bounds, never touching the newest event
    /// of `current` (the stream just appended to). Applied to the ledger as they are decided.
    fn session_cuts(&mut self, session: &Arc<str>, current: StreamId) -> Vec<Cut> {
        let mut cuts = Vec::new();
        let bounds = self.bounds;
        let Some(entry) = self.sessions.get_mut(session) else {
            return cuts;
        };
        let over = |e: &SessionUse| {
            e.bytes > bounds.per_session || e.streams.len() > bounds.streams_per_session
        };
        // 1. Closed streams, oldest first: those delivered, then those nobody reads.
        while over(entry) {
            let candidate = |delivered: bool| {
                entry
                    .streams
                    .iter()
                    .position(|s| s.droppable() && s.id != current && (s.delivered || !delivered))
            };
            let Some(pos) = candidate(true).or_else(|| candidate(false)) else {
                break;
            };
            if let Some(s) = entry.streams.remove(pos) {
                entry.bytes -= s.bytes.min(entry.bytes);
                self.total -= s.bytes.min(self.total);
                self.live_streams -= 1;
                cuts.push(Cut::Drop(session.clone(), s.id));
            }
        }
        // 2. Open streams keep their newest event, oldest stream first.
        for s in entry.streams.iter_mut() {
            if entry.bytes <= bounds.per_session {
                break;
            }
            if let Some(shrunk) = trim(s) {
                entry.bytes -= shrunk.min(entry.bytes);
                self.total -= shrunk.min(self.total);
                cuts.push(Cut::Trim(session.clone(), s.id));
            }
        }
        cuts
    }

    /// The cuts that bring the instance within its bound, from the oldest stream on, looking
    /// at most [`INSTANCE_PASS`] streams. A trimmed open stream goes to the back of the order.
    fn instance_cuts(&mut self, session: &Arc<str>, current: StreamId, cuts: &mut Vec<Cut>) {
        let mut looked = 0;
        while self.total > self.bounds.per_instance && looked < INSTANCE_PASS {
            let Some((owner, id)) = self.order.pop_front() else {
                break;
            };
            looked += 1;
            let Some(entry) = self.sessions.get_mut(&owner) else {
                continue;
            };
            let Some(pos) = entry.streams.iter().position(|s| s.id == id) else {
                continue;
            };
            let is_current = &owner == session && id == current;
            if entry.streams[pos].droppable() && !is_current {
                self.take_out(&owner, pos);
                cuts.push(Cut::Drop(owner, id));
                continue;
            }
            if let Some(shrunk) = trim(&mut entry.streams[pos]) {
                entry.bytes -= shrunk.min(entry.bytes);
                self.total -= shrunk.min(self.total);
                cuts.push(Cut::Trim(owner.clone(), id));
            }
            self.order.push_back((owner, id));
        }
        self.sweep();
    }

    /// Streams not written for longer than the store keeps them (Redis expired them). Looks at
    /// a few streams per append, oldest first, and sends one still written to the back: every
    /// stream is looked at in turn, at a bounded cost per append.
    fn expire(&mut self, now: Instant) -> Vec<Cut> {
        let mut expired = Vec::new();
        let Some(ttl) = self.bounds.ttl else {
            return expired;
        };
        for _ in 0..EXPIRY_LOOKS {
            let Some((owner, id)) = self.order.pop_front() else {
                break;
            };
            let Some(entry) = self.sessions.get_mut(&owner) else {
                continue;
            };
            let Some(pos) = entry.streams.iter().position(|s| s.id == id) else {
                continue;
            };
            if now.saturating_duration_since(entry.streams[pos].written) < ttl {
                self.order.push_back((owner, id));
                continue;
            }
            self.take_out(&owner, pos);
            expired.push(Cut::Expired(owner, id));
        }
        expired
    }

    /// Takes stream `pos` of `owner` out of the ledger (its entry in the order goes stale), and
    /// the session with it once it has none left.
    fn take_out(&mut self, owner: &Arc<str>, pos: usize) {
        let Some(entry) = self.sessions.get_mut(owner) else {
            return;
        };
        if let Some(s) = entry.streams.remove(pos) {
            entry.bytes -= s.bytes.min(entry.bytes);
            self.total -= s.bytes.min(self.total);
            self.live_streams -= 1;
        }
        if entry.streams.is_empty() {
            self.sessions.remove(owner);
        }
    }

    /// Drops stale entries from the order once they outnumber the live ones.
    fn sweep(&mut self) {
        if self.order.len() > 2 * self.live_streams + 64 {
            let sessions = &self.sessions;
            self.order.retain(|(owner, id)| {
                sessions
                    .get(owner)
                    .is_some_and(|e| e.streams.iter().any(|s| s.id == *id))
            });
        }
    }

    /// The session's key, shared with its entries in the order.
    fn session_key(&self, session: &str) -> Arc<str> {
        self.sessions
            .get_key_value(session)
            .map_or_else(|| Arc::from(session), |(k, _)| k.clone())
    }
}

/// A reader of this process on a stream, as the ledger knows it: while it lives the stream is
/// not dropped; when it ends, the ledger learns whether it read the stream to its end.
pub(crate) struct ReaderMark {
    budget: Arc<parking_lot::Mutex<Budget>>,
    session: Arc<str>,
    stream: StreamId,
    /// Set when the reader read the closed stream's last event.
    to_the_end: bool,
}

impl ReaderMark {
    pub fn new(budget: &Arc<parking_lot::Mutex<Budget>>, session: &str, stream: StreamId) -> Self {
        budget.lock().reading(session, stream);
        Self {
            budget: budget.clone(),
            session: session.into(),
            stream,
            to_the_end: false,
        }
    }

    /// The reader read the closed stream's last event: it ends (`None`, for the reader's
    /// stream to return).
    pub fn read_to_the_end<T>(&mut self) -> Option<T> {
        self.to_the_end = true;
        None
    }
}

impl Drop for ReaderMark {
    fn drop(&mut self) {
        self.budget
            .lock()
            .done_reading(&self.session, self.stream, self.to_the_end);
    }
}

/// Trims an open stream to its newest event in the ledger: the bytes that went, or `None` when
/// it holds nothing more.
fn trim(s: &mut StreamUse) -> Option<usize> {
    if s.closed || s.events <= 1 {
        return None;
    }
    let shrunk = s.bytes.saturating_sub(s.newest);
    s.bytes = s.newest;
    s.events = 1;
    (shrunk > 0).then_some(shrunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::tests_bounds as bounds;

    #[test]
    fn a_session_over_its_bound_gives_up_closed_streams_then_old_events() {
        let now = Instant::now();
        let mut b = Budget::new(bounds(10_000, usize::MAX));
        for stream in 1..=3 {
            assert!(b.appended("s", stream, 3000, None, now).is_empty());
            b.closed("s", stream);
        }
        // 4 x (3000 + overhead) passes 10,000: the oldest closed stream goes.
        let cuts = b.appended("s", 4, 3000, None, now);
        assert_eq!(cuts, [Cut::Drop("s".into(), 1)]);
        assert!(b.session_bytes("s") <= 10_000);
        // An open stream of many events: closed ones go first, then its older events.
        for _ in 0..5 {
            b.appended("s", 4, 3000, None, now);
        }
        assert!(b.session_bytes("s") <= 10_000, "{}", b.session_bytes("s"));
        let cuts = b.appended("s", 4, 3000, None, now);
        assert!(
            cuts.iter().all(|c| *c == Cut::Trim("s".into(), 4)),
            "{cuts:?}"
        );
        assert_eq!(
            b.session_bytes("s"),
            3000 + EVENT_OVERHEAD,
            "its newest event"
        );
    }

    #[test]
    fn the_instance_bound_holds_across_sessions_and_the_newest_event_stays() {
        let now = Instant::now();
        let mut b = Budget::new(bounds(usize::MAX, 100_000));
        for i in 0..100 {
            let session = format!("s{i}");
            b.appended(&session, 1, 10_000, None, now);
            b.closed(&session, 1);
            assert!(b.total() <= 100_000, "after session {i}: {}", b.total());
        }
        // One event larger than the bound is kept alone.
        b.appended("big", 1, 200_000, None, now);
        assert_eq!(b.total(), 200_000 + EVENT_OVERHEAD);
        // Forgetting everything brings the ledger to zero.
        for i in 0..100 {
            b.forget(&format!("s{i}"));
        }
        b.forget("big");
        assert_eq!(b.total(), 0);
        assert!(
            b.order.len() <= 64,
            "stale entries swept: {}",
            b.order.len()
        );
    }

    #[test]
    fn a_stream_being_delivered_is_not_dropped_and_a_delivered_one_goes_first() {
        let now = Instant::now();
        let mut b = Budget::new(bounds(10_000, usize::MAX));
        for stream in 1..=3 {
            b.appended("s", stream, 3000, None, now);
            b.closed("s", stream);
        }
        b.reading("s", 1);
        b.reading("s", 3);
        b.done_reading("s", 3, true);
        // Stream 1 is being delivered, stream 3 was: 3 goes, not 2 (older, never read).
        assert_eq!(
            b.appended("s", 4, 3000, None, now),
            [Cut::Drop("s".into(), 3)]
        );
        assert_eq!(
            b.appended("s", 5, 3000, None, now),
            [Cut::Drop("s".into(), 2)]
        );
        b.closed("s", 4);
        assert_eq!(
            b.appended("s", 6, 3000, None, now),
            [Cut::Drop("s".into(), 4)]
        );
        b.done_reading("s", 1, false);
        b.closed("s", 5);
        assert_eq!(
            b.appended("s", 7, 3000, None, now),
            [Cut::Drop("s".into(), 1)]
        );
    }

    #[test]
    fn a_session_keeps_its_stream_count() {
        let now = Instant::now();
        let mut b = Budget::new(Bounds {
            streams_per_session: 2,
            ..bounds(usize::MAX, usize::MAX)
        });
        b.appended("s", 1, 1, None, now);
        b.closed("s", 1);
        b.appended("s", 2, 1, None, now);
        assert_eq!(b.appended("s", 3, 1, None, now), [Cut::Drop("s".into(), 1)]);
        // Open streams are never dropped for the count.
        assert!(b.appended("s", 4, 1, None, now).is_empty());
    }

    #[test]
    fn streams_expire_from_the_ledger_with_their_ttl() {
        let now = Instant::now();
        let mut b = Budget::new(Bounds {
            ttl: Some(Duration::from_secs(60)),
            ..bounds(usize::MAX, usize::MAX)
        });
        b.appended("a", 1, 1000, None, now);
        let cuts = b.appended("b", 1, 1000, None, now + Duration::from_secs(61));
        assert_eq!(b.total(), 1000 + EVENT_OVERHEAD, "a's stream expired");
        assert_eq!(
            cuts,
            [Cut::Expired("a".into(), 1)],
            "for the store to forget it too"
        );
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::prop_config as config;

    use super::tests_bounds;

    #[derive(Debug, Clone)]
    enum Op {
        Append(u8, u8, usize),
        Close(u8, u8),
        Forget(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..4, 0u8..6, 0usize..5000).prop_map(|(s, t, n)| Op::Append(s, t, n)),
            2 => (0u8..4, 0u8..6).prop_map(|(s, t)| Op::Close(s, t)),
            1 => (0u8..4).prop_map(Op::Forget),
        ]
    }

    proptest! {
        #![proptest_config(config(256))]

        /// Whatever is appended, closed and forgotten, and with the cuts carried out as a store
        /// does: a session keeps at most its bound plus the newest event of each open stream,
        /// the instance likewise, and the ledger adds up.
        #[test]
        fn bounds_hold_up_to_one_event_per_open_stream(ops in prop::collection::vec(op(), 1..200)) {
            let per_session = 8000;
            let per_instance = 20_000;
            let mut b = Budget::new(Bounds {
                streams_per_session: 3,
                events_per_stream: 4,
                ..tests_bounds(per_session, per_instance)
            });
            let now = Instant::now();
            for op in ops {
                let appended = match op {
                    Op::Append(s, t, n) => {
                        // A store appends nothing to a closed stream (but its empty end marker).
                        let closed = b.sessions.get(s.to_string().as_str())
                            .and_then(|e| e.streams.iter().find(|x| x.id == u64::from(t)))
                            .is_some_and(|x| x.closed);
                        if closed {
                            continue;
                        }
                        b.appended(&s.to_string(), t.into(), n, None, now);
                        Some(s.to_string())
                    }
                    Op::Close(s, t) => { b.closed(&s.to_string(), t.into()); None }
                    Op::Forget(s) => { b.forget(&s.to_string()); None }
                };
                // The ledger adds up.
                let mut total = 0;
                for e in b.sessions.values() {
                    let sum: usize = e.streams.iter().map(|s| s.bytes).sum();
                    prop_assert_eq!(sum, e.bytes);
                    total += e.bytes;
                }
                prop_assert_eq!(total, b.total());
                // Past an append, its session keeps its bound but for one event per open
                // stream, and the instance its own but for one event per stream (a stream
                // closed since it was counted open keeps it until the next append).
                if let Some(e) = appended.as_deref().and_then(|s| b.sessions.get(s)) {
                    let allowance: usize = e.streams.iter().filter(|s| !s.closed).map(|s| s.newest).sum();
                    prop_assert!(e.bytes <= per_session + allowance, "{} > {}", e.bytes, per_session + allowance);
                }
                let allowance: usize = b.sessions.values().flat_map(|e| e.streams.iter()).map(|s| s.newest).sum();
                prop_assert!(b.total() <= per_instance + allowance);
            }
        }
    }
}

#[cfg(test)]
fn tests_bounds(per_session: usize, per_instance: usize) -> Bounds {
    Bounds {
        per_session,
        per_instance,
        streams_per_session: 64,
        events_per_stream: 1024,
        ttl: None,
    }
}
