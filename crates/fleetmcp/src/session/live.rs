//! Sessions this instance holds: their runtime state, and the registry that finds them.
//!
//! The registry is keyed by the exact id string. An id found here was minted (or verified)
//! by this process, so the hot path skips decryption; only a miss opens the seal.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::running::Running;
use crate::limits::{Budget, Charge, Place};
use crate::protocol::{LogLevel, ProtocolVersion};

/// The client's answer to a request the server sent it.
pub type ClientReply = Result<Value, crate::protocol::ErrorData>;

/// What a session keeps of the client from `initialize` and rarely reads (`clientInfo` and
/// its capabilities): kept as their text, one allocation for both (a parsed object costs a
/// whole B-tree node, over 600 bytes, however few its fields), each parsed on first use.
struct ClientData {
    /// `clientInfo`'s text followed by the capabilities'.
    text: Box<str>,
    /// Where the capabilities' text starts.
    split: usize,
    /// Boxed: a pointer until first read (a `Value` in place is 32 bytes per session).
    info: std::sync::OnceLock<Box<Value>>,
    capabilities: std::sync::OnceLock<Box<Value>>,
}

impl ClientData {
    fn new(info: &Value, capabilities: &Value) -> Self {
        let mut text = info.to_string();
        let split = text.len();
        text.push_str(&capabilities.to_string());
        Self {
            text: text.into_boxed_str(),
            split,
            info: std::sync::OnceLock::new(),
            capabilities: std::sync::OnceLock::new(),
        }
    }

    fn info(&self) -> &Value {
        self.info
            .get_or_init(|| Box::new(Self::parse(&self.text[..self.split])))
    }

    fn capabilities(&self) -> &Value {
        self.capabilities
            .get_or_init(|| Box::new(Self::parse(&self.text[self.split..])))
    }

    /// Copies, without keeping the parsed values (for writing the session's record).
    fn values(&self) -> (Value, Value) {
        let info = match self.info.get() {
            Some(v) => Value::clone(v),
            None => Self::parse(&self.text[..self.split]),
        };
        let capabilities = match self.capabilities.get() {
            Some(v) => Value::clone(v),
            None => Self::parse(&self.text[self.split..]),
        };
        (info, capabilities)
    }

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or(Value::Null)
    }
}

/// What a session's times count in: milliseconds on the coarse clock, read on every call
/// ([`crate::clock::coarse_ms`]).
fn now_ms() -> u64 {
    crate::clock::coarse_ms()
}

/// The first id of the streams a session's POST answers get on this instance: a random 32-bit
/// base, then one more per stream. Stream ids must never repeat within a session while their
/// events live: a new answer's reader, starting at the stream's first event, would read an older
/// answer's events and end at its end marker. A counter alone restarts with every incarnation of
/// the session (when it moves to another instance and back, or while several instances serve it
/// at once, as Redis without distributed mode allows), so each incarnation counts from its own
/// random base: two of them share a stream id with a chance of about one in four billion per
/// thousand answers.
fn first_stream_id() -> u64 {
    (u64::from(rand::random::<u32>()) << 32) | 1
}

const UNCONFIRMED: u8 = 0;
const CHECKING: u8 = 1;
const CONFIRMED: u8 = 2;

/// What a holder knows of a session's stored record, read by every request's check
/// (`lifecycle/stored.rs`): whether it exists, when it was last refreshed, the epoch it is held
/// under, and whether (and in which lease term) the store confirmed it.
struct RecordState {
    /// Whether the session store holds a record of it (false when it was created while the
    /// store was unreachable).
    persisted: AtomicBool,
    /// When the stored record was last refreshed (see [`now_ms`]).
    last_touch: AtomicU64,
    /// The epoch this instance holds the session under (see `SessionRecord::epoch`).
    epoch: AtomicU64,
    /// The lease term (`Lease::term`) in which the store last confirmed this instance holds
    /// the session; `u32::MAX` until it has.
    confirmed_term: AtomicU32,
    /// Whether the store confirmed the record and will report a change to it
    /// ([`CONFIRMED`]), a check is running whose answer may confirm it ([`CHECKING`]), or
    /// neither: the next request checks.
    confirm: AtomicU8,
}

/// The ids a session hands out next.
struct NextIds {
    /// Of an SSE stream (see [`first_stream_id`]).
    stream: AtomicU64,
    /// Of a request to the client.
    client_request: AtomicU64,
}

/// A session held by this instance.
pub struct Session {
    pub id: Arc<str>,
    pub version: ProtocolVersion,
    client: ClientData,
    log_level: AtomicU8,
    /// Whether the client sent anything after its `initialize`: until then a 2024-11-05
    /// client may send `initialize` again (its answer may have been lost to a `503` from a
    /// relay that gave up), and is answered again.
    heard: AtomicBool,
    /// When it was last used (see [`now_ms`]); read by the idle sweeper.
    last_used: AtomicU64,
    /// What this instance knows of the session's stored record.
    record: RecordState,
    /// The next SSE stream id and the next id of a request to the client.
    next_ids: NextIds,
    /// Requests from the client still running, for `notifications/cancelled` and the
    /// session's end: in place for one at a time, no table kept while idle ([`Running`]).
    inflight: Mutex<Running>,
    /// Requests to the client awaiting an answer, by the id we gave them. Boxed on first use:
    /// most sessions never send the client a request, and an empty map in place is 48 bytes.
    pending: Mutex<Option<Box<PendingReplies>>>,
    subscriptions: Mutex<Subscriptions>,
    /// Fires when the session ends (deleted, expired, the server stopped): its running
    /// requests and the answers they stream stop. Made on first use ([`Session::closed`]) as
    /// a child of `stopping`: an idle session pays a pointer for it, not a token (about 150
    /// bytes: the token's node, and its place among the shutdown token's children).
    closed: std::sync::OnceLock<CancellationToken>,
    /// The server's shutdown token, the parent of `closed` once it is made.
    stopping: CancellationToken,
    /// A child of `closed` that also fires when this instance stops holding the session
    /// (another took it over): see [`Session::leaving`]. Made on first use, so an idle session
    /// pays a pointer for it, not a token.
    leaving: std::sync::OnceLock<CancellationToken>,
    /// Who made it, when authorization is on: the principal's fingerprint (see
    /// `Principal::fingerprint`); a request by anyone else finds no session.
    principal: Option<Box<str>>,
    /// Its place under `limits.max_sessions_per_key`, given back when the session is dropped
    /// (set by `initialize`; a session recreated from the store has none here).
    place: std::sync::OnceLock<Place>,
    /// What a layer above keeps for the session's life on this instance (the upstream of a
    /// gateway's session, `upstream/`), made on first use; a pointer for any other session.
    attached: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}

impl Session {
    /// `stopping` should be the server's shutdown token, so that stopping the server ends
    /// every session's streams and waiting requests.
    pub(crate) fn new(
        id: Arc<str>,
        version: ProtocolVersion,
        client_info: Value,
        client_capabilities: Value,
        stopping: CancellationToken,
        principal: Option<&str>,
    ) -> Self {
        Self {
            id,
            version,
            client: ClientData::new(&client_info, &client_capabilities),
            log_level: AtomicU8::new(LogLevel::Info as u8),
            heard: AtomicBool::new(false),
            last_used: AtomicU64::new(0),
            record: RecordState {
                persisted: AtomicBool::new(false),
                last_touch: AtomicU64::new(now_ms()),
                epoch: AtomicU64::new(0),
                confirmed_term: AtomicU32::new(u32::MAX),
                confirm: AtomicU8::new(UNCONFIRMED),
            },
            next_ids: NextIds {
                stream: AtomicU64::new(first_stream_id()),
                client_request: AtomicU64::new(1),
            },
            inflight: Mutex::new(Running::default()),
            pending: Mutex::new(None),
            subscriptions: Mutex::new(Subscriptions::default()),
            closed: std::sync::OnceLock::new(),
            stopping,
            leaving: std::sync::OnceLock::new(),
            principal: principal.map(Into::into),
            place: std::sync::OnceLock::new(),
            attached: std::sync::OnceLock::new(),
        }
    }

    /// What a layer above keeps with this session, made by `init` on first use; `None` when
    /// something of another type was attached first. It lives as long as the session's value
    /// here, so whoever attaches it ends it on [`Session::leaving`].
    pub(crate) fn attached<T: std::any::Any + Send + Sync>(
        &self,
        init: impl FnOnce() -> T,
    ) -> Option<Arc<T>> {
        self.attached
            .get_or_init(|| Arc::new(init()))
            .clone()
            .downcast::<T>()
            .ok()
    }

    /// What is attached to this session, if it is a `T`.
    pub(crate) fn attachment<T: std::any::Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.attached.get()?.clone().downcast::<T>().ok()
    }

    /// Keeps the session's place under `limits.max_sessions_per_key` for its life.
    pub(crate) fn keep_place(&self, place: Place) {
        let _ = self.place.set(place);
    }

    /// Charges what the session keeps of the client (`clientInfo`, capabilities) to the
    /// instance's client-data budget, for the session's life (with its subscriptions).
    pub(crate) fn keep_charge(&self, charge: Charge) {
        let mut subs = self.subscriptions.lock();
        match subs.charge.as_mut() {
            Some(c) => c.absorb(charge),
            None => subs.charge = Some(charge),
        }
    }

    /// The fingerprint of the principal that made the session (`None` without authorization).
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// Whether a request by the principal of fingerprint `caller` may use this session: only
    /// the one that made it (no principal on either side: authorization is off).
    pub fn made_by(&self, caller: Option<&str>) -> bool {
        self.principal.as_deref() == caller
    }

    pub fn log_level(&self) -> LogLevel {
        LogLevel::from_u8(self.log_level.load(Ordering::Relaxed))
    }
    pub(crate) fn set_log_level(&self, level: LogLevel) {
        self.log_level.store(level as u8, Ordering::Relaxed);
    }
    pub(crate) fn mark_persisted(&self) {
        self.record.persisted.store(true, Ordering::Relaxed);
    }
    /// Notes that the client sent something after its `initialize` (see [`Session::was_heard`]).
    pub(crate) fn mark_heard(&self) {
        if !self.heard.load(Ordering::Relaxed) {
            self.heard.store(true, Ordering::Relaxed);
        }
    }
    /// Whether the client sent anything after its `initialize`: once it has, it knows the
    /// session started, and a second `initialize` is a mistake.
    pub(crate) fn was_heard(&self) -> bool {
        self.heard.load(Ordering::Relaxed)
    }
    pub(crate) fn is_persisted(&self) -> bool {
        self.record.persisted.load(Ordering::Relaxed)
    }
    /// Whether the store confirmed the record and tracks it: requests need not check it.
    pub(crate) fn is_confirmed(&self) -> bool {
        self.record.confirm.load(Ordering::Acquire) == CONFIRMED
    }
    /// A check starts: its answer confirms the record only if no change was reported meanwhile.
    pub(crate) fn begin_confirm(&self) {
        self.record.confirm.store(CHECKING, Ordering::Release);
    }
    /// The check found the record held and tracked.
    pub(crate) fn finish_confirm(&self) {
        let _ = self.record.confirm.compare_exchange(
            CHECKING,
            CONFIRMED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
    /// The record changed, or may have: the next request checks it.
    pub(crate) fn unconfirm(&self) {
        self.record.confirm.store(UNCONFIRMED, Ordering::Release);
    }
    /// Whether the stored record is due for a refresh (see [`Session::due_for_touch`]), without
    /// marking it refreshed.
    pub(crate) fn refresh_due(&self, every_ms: u64) -> bool {
        let now = now_ms();
        now.saturating_sub(self.record.last_touch.load(Ordering::Relaxed)) >= every_ms
    }
    /// The epoch this instance holds the session under.
    pub(crate) fn epoch(&self) -> u64 {
        self.record.epoch.load(Ordering::Relaxed)
    }
    pub(crate) fn set_epoch(&self, epoch: u64) {
        self.record.epoch.store(epoch, Ordering::Relaxed);
    }
    /// Notes that the store confirmed this instance holds the session, in lease term `term`.
    pub(crate) fn confirmed_in(&self, term: u32) {
        self.record.confirmed_term.store(term, Ordering::Release);
    }
    /// Whether the store last confirmed the session in lease term `term`.
    pub(crate) fn was_confirmed_in(&self, term: u32) -> bool {
        self.record.confirmed_term.load(Ordering::Acquire) == term
    }
    /// Whether the stored record is due for a refresh (at most once per `every_ms`); marks
    /// it refreshed when it is.
    pub(crate) fn due_for_touch(&self, every_ms: u64) -> bool {
        let now = now_ms();
        let last = self.record.last_touch.load(Ordering::Relaxed);
        now.saturating_sub(last) >= every_ms
            && self
                .record
                .last_touch
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Fires when this instance stops serving the session: it ended, or it moved to another
    /// holder. What only the holder can do stops then (the standalone stream, requests waiting
    /// on the client, whose answers now reach the new holder); requests already running do not:
    /// they were admitted here, and they finish, their answers going to the shared event store
    /// where the client finds them whichever instance it resumes on.
    pub fn leaving(&self) -> CancellationToken {
        self.leaving
            .get_or_init(|| self.closed().child_token())
            .clone()
    }

    /// Fires when the session ends (deleted, expired, the server stopped): its running
    /// requests and the answers they stream stop.
    pub fn closed(&self) -> &CancellationToken {
        self.closed.get_or_init(|| self.stopping.child_token())
    }

    /// Ends the session here: [`Session::closed`] fires (made now if nothing asked for it, so
    /// whatever asks later finds it fired), and so do its running requests' tokens.
    pub(crate) fn close(&self) {
        self.closed().cancel();
        // After `closed` fired: a request registered from now on finds it fired.
        for token in self.inflight.lock().tokens() {
            token.cancel();
        }
    }

    /// A fresh stream id for a POST answered as SSE.
    pub(crate) fn next_stream_id(&self) -> u64 {
        self.next_ids.stream.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the client declared a capability (`sampling`, `elicitation`, `roots`, ...).
    #[cfg(test)]
    pub fn client_supports(&self, capability: &str) -> bool {
        self.client_capabilities().get(capability).is_some()
    }

    /// The client's `clientInfo` from `initialize`.
    pub fn client_info(&self) -> &Value {
        self.client.info()
    }

    /// Copies of `clientInfo` and the capabilities, for the session's stored record.
    pub(crate) fn client_values(&self) -> (Value, Value) {
        self.client.values()
    }

    /// The client's capabilities from `initialize`.
    pub fn client_capabilities(&self) -> &Value {
        self.client.capabilities()
    }

    /// Counts a request that runs in the session: false when `max` run already (the count
    /// and the check under one lock, so concurrent requests, a batch, cannot all slip under
    /// the limit together). Every request counts, one whose id runs already too: each runs a
    /// handler of its own, and an id sent again and again must not run any number of them.
    /// It is entered by its id only if its token is asked for ([`Session::enter_request`]);
    /// [`Session::end_request`] ends it either way.
    pub(crate) fn admit_request(&self, max: usize) -> bool {
        self.inflight.lock().admit(max)
    }

    /// Enters a running request let in by [`Session::admit_request`] under its id, and gives
    /// the token it runs under: it fires on `notifications/cancelled` (one sent before the
    /// request was entered too), the session's end and the server's stop. Made only when
    /// asked for (the handler waits, streams or reads it): a child of the server's token and
    /// an entry in the table cost a call 550 to 700 instructions and an allocation, measured,
    /// and most calls finish in their first poll (issue 40).
    pub(crate) fn enter_request(&self, raw_id: &Arc<str>) -> CancellationToken {
        let mut running = self.inflight.lock();
        // A child of the server's token, not of `closed`: a request does not make the session
        // keep a token of its own once idle (see `closed`); `close` cancels the running ones.
        let token = self.stopping.child_token();
        if self.is_closed() {
            token.cancel();
        }
        running.insert(raw_id, token)
    }

    /// Whether the session ended here ([`Session::close`]), read without making `closed`.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
            .get()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// One request let in by [`Session::admit_request`] has ended; `entered`: its id, if it
    /// was entered ([`Session::enter_request`]).
    pub(crate) fn end_request(&self, entered: Option<&str>) {
        self.inflight.lock().end(entered);
    }
    /// Drops the table of running requests if none runs (the idle sweep, for a session unused
    /// for a while): an idle session keeps no buckets, a busy one no allocation per request.
    pub(crate) fn release_idle_table(&self) {
        self.inflight.lock().release_idle();
    }
    /// Cancels a running request; false if none has that id entered (a request that runs
    /// but was not entered yet starts cancelled when it is: see [`Running::cancel`]).
    pub(crate) fn cancel_request(&self, raw_id: &str) -> bool {
        self.inflight.lock().cancel(raw_id)
    }

    /// Registers a request to the client and returns its id and the receiver of the answer.
    pub(crate) fn expect_client_reply(&self) -> (String, oneshot::Receiver<ClientReply>) {
        let n = self.next_ids.client_request.fetch_add(1, Ordering::Relaxed);
        let id = format!("fleetmcp-{n}");
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .get_or_insert_with(Default::default)
            .insert(id.clone(), tx);
        (id, rx)
    }
    pub(crate) fn forget_client_request(&self, id: &str) {
        if let Some(p) = self.pending.lock().as_mut() {
            p.remove(id);
        }
    }
    /// Delivers the client's answer; false if nothing waits for that id.
    pub(crate) fn deliver_client_reply(&self, id: &str, reply: ClientReply) -> bool {
        match self.pending.lock().as_mut().and_then(|p| p.remove(id)) {
            Some(tx) => tx.send(reply).is_ok(),
            None => false,
        }
    }

    /// Subscribes to `uri` unless the session already holds `max` subscriptions (one it
    /// already has is accepted again), charging its bytes to the instance's `budget` of client
    /// data (given back on unsubscribe, or when the session is dropped). Refused: nothing
    /// stored.
    pub(crate) fn subscribe(
        &self,
        uri: &str,
        max: usize,
        budget: &Arc<Budget>,
    ) -> Result<(), SubscribeRefusal> {
        let mut subs = self.subscriptions.lock();
        if subs.set.as_ref().is_some_and(|set| set.contains(uri)) {
            return Ok(());
        }
        if subs.set.as_ref().map_or(0, |set| set.len()) >= max {
            return Err(SubscribeRefusal::Count);
        }
        subs.charge
            .get_or_insert_with(|| Charge::empty(budget))
            .grow(uri.len() + SUBSCRIPTION_OVERHEAD)
            .map_err(|_| SubscribeRefusal::Budget)?;
        subs.set
            .get_or_insert_with(Default::default)
            .insert(uri.to_string());
        Ok(())
    }
    pub(crate) fn unsubscribe(&self, uri: &str) {
        let mut subs = self.subscriptions.lock();
        if subs.set.as_mut().is_some_and(|set| set.remove(uri))
            && let Some(c) = subs.charge.as_mut()
        {
            c.shrink(uri.len() + SUBSCRIPTION_OVERHEAD);
        }
    }
    pub fn is_subscribed(&self, uri: &str) -> bool {
        self.subscriptions
            .lock()
            .set
            .as_ref()
            .is_some_and(|set| set.contains(uri))
    }
}

/// Bytes a subscription costs besides its URI (the `String` and its place in the set).
const SUBSCRIPTION_OVERHEAD: usize = 48;

/// A session's subscriptions and the bytes they are charged against the instance's budget
/// (no charge until the first one: an idle session pays nothing for it).
type PendingReplies = HashMap<String, oneshot::Sender<ClientReply>>;

#[derive(Default)]
struct Subscriptions {
    /// Boxed on first use, like `Session::pending`: most sessions subscribe to nothing.
    #[allow(clippy::box_collection)] // the box is the point: 8 bytes in place, not 48
    set: Option<Box<HashSet<String>>>,
    charge: Option<Charge>,
}

/// Why `resources/subscribe` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubscribeRefusal {
    /// The session holds `sessions.max_subscriptions`.
    Count,
    /// The instance keeps `sessions.max_client_data_bytes` of client data.
    Budget,
}

/// Why a session this instance knew is gone; it decides which `404` the client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `DELETE` on this instance.
    Deleted,
    /// Idle too long, or its stored record vanished.
    Expired,
}

/// Recently ended sessions, oldest first in the queue.
/// A held session in the registry, found by its id: the set's entry is the session's pointer
/// alone (8 bytes a slot, where a map from a copy of the id took 24).
struct Held(Arc<Session>);

impl std::borrow::Borrow<str> for Held {
    fn borrow(&self) -> &str {
        &self.0.id
    }
}

impl std::hash::Hash for Held {
    // As the id's `str` hashes, so that a lookup by `&str` finds it.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        str::hash(&self.0.id, state)
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for Held {}

type EndedMemory = (HashMap<Arc<str>, Ended>, VecDeque<Arc<str>>);

/// The sessions this instance holds, plus a bounded memory of recently ended ones.
pub struct LiveSessions {
    /// Keyed by each session's own id (see [`Held`]), found on every call: hashed with
    /// foldhash (randomly seeded per process) rather than SipHash, ~300 instructions a call
    /// fewer (issue 23). Keys chosen to collide cannot be put here: every id inserted is one
    /// this fleet minted and sealed (a recreated session's seal is verified first), and a
    /// lookup of a client's bytes only probes.
    sessions: RwLock<HashSet<Held, foldhash::fast::RandomState>>,
    ended: Mutex<EndedMemory>,
    max_sessions: usize,
}

const MAX_ENDED: usize = 10_000;

impl LiveSessions {
    pub(crate) fn new(max_sessions: usize) -> Self {
        Self {
            sessions: RwLock::new(HashSet::default()),
            ended: Mutex::new((HashMap::new(), VecDeque::new())),
            max_sessions,
        }
    }

    fn now_ms(&self) -> u64 {
        now_ms()
    }

    /// Finds a held session by its exact id and marks it used.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        let s = self.sessions.read().get(id).map(|h| h.0.clone())?;
        s.last_used.store(self.now_ms(), Ordering::Relaxed);
        Some(s)
    }

    /// Adds a session unless one with the same id is already held, which wins: the caller
    /// gets the held one and `false`. `None` when the instance is full.
    pub fn insert_if_absent(&self, session: Arc<Session>) -> Option<(Arc<Session>, bool)> {
        let mut map = self.sessions.write();
        if let Some(existing) = map.get(&*session.id) {
            return Some((existing.0.clone(), false));
        }
        if map.len() >= self.max_sessions {
            return None;
        }
        session.last_used.store(self.now_ms(), Ordering::Relaxed);
        map.insert(Held(session.clone()));
        Some((session, true))
    }

    /// Removes a session, remembering why.
    pub fn remove(&self, id: &str, why: Ended) -> Option<Arc<Session>> {
        let removed = self.sessions.write().take(id).map(|h| h.0);
        if let Some(s) = &removed {
            s.close();
            self.remember(s.id.clone(), why);
        }
        removed
    }

    /// Drops a session that was never acknowledged (its `initialize` refused): closed, but not
    /// remembered as ended, since its id may be opened again (a 2024-11-05 session's id is its
    /// stream's, and its client sends `initialize` again under it).
    pub fn discard(&self, id: &str) {
        if let Some(Held(s)) = self.sessions.write().take(id) {
            s.close();
        }
    }

    /// Stops holding a session here without ending it: its standalone stream and the requests
    /// waiting on the client stop ([`Session::leaving`]), the requests running finish, and
    /// nothing remembers it as ended, so its next request looks for it in the store (it lives
    /// on with another holder).
    pub fn release(&self, id: &str) -> Option<Arc<Session>> {
        let removed = self.sessions.write().take(id).map(|h| h.0);
        if let Some(s) = &removed {
            s.leaving().cancel();
        }
        removed
    }

    fn remember(&self, id: Arc<str>, why: Ended) {
        let mut guard = self.ended.lock();
        let (map, order) = &mut *guard;
        if map.insert(id.clone(), why).is_none() {
            order.push_back(id);
        }
        while order.len() > MAX_ENDED {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    /// Why a session is gone, if this instance remembers it.
    pub fn ended(&self, id: &str) -> Option<Ended> {
        self.ended.lock().0.get(id).copied()
    }

    /// Removes sessions idle for longer than `idle`; returns their ids.
    pub fn expire_idle(&self, idle: Duration) -> Vec<Arc<str>> {
        let now = self.now_ms();
        let cutoff = now.saturating_sub(idle.as_millis() as u64);
        // Unused for a second: whatever it keeps for running requests can go.
        let resting = now.saturating_sub(1000);
        let stale: Vec<Arc<str>> = self
            .sessions
            .read()
            .iter()
            .map(|h| &h.0)
            .filter(|s| {
                let last = s.last_used.load(Ordering::Relaxed);
                if last < resting {
                    s.release_idle_table();
                }
                last < cutoff
            })
            .map(|s| s.id.clone())
            .collect();
        for id in &stale {
            self.remove(id, Ended::Expired);
        }
        stale
    }

    pub fn len(&self) -> usize {
        self.sessions.read().len()
    }
    /// The most sessions this instance holds at once.
    pub fn capacity(&self) -> usize {
        self.max_sessions
    }

    /// Every held session (for broadcasting list changes).
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.sessions.read().iter().map(|h| h.0.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str) -> Arc<Session> {
        Arc::new(Session::new(
            id.into(),
            ProtocolVersion::LATEST,
            Value::Null,
            serde_json::json!({"sampling": {}}),
            CancellationToken::new(),
            None,
        ))
    }

    impl Session {
        /// A request let in and entered at once (what the driver does once it is asked for
        /// the token), as the tests below need it.
        fn track_request(&self, raw_id: &str, max: usize) -> Option<(CancellationToken, Arc<str>)> {
            let id: Arc<str> = raw_id.into();
            self.admit_request(max)
                .then(|| (self.enter_request(&id), id))
        }

        fn finish_request(&self, raw_id: &str) {
            self.end_request(Some(raw_id));
        }
    }

    #[test]
    fn an_idle_session_is_small() {
        // What every held session pays in place, idle or not (docs/BENCHMARKS.md, Memory):
        // what only some sessions use is boxed on first use, so that this stays small.
        let size = std::mem::size_of::<Session>();
        eprintln!("Session: {size} bytes");
        // 304 before an idle session kept no token and no table of running requests: the
        // token's pointer and parent (16), and one running request in place (24), cost
        // fewer bytes than the token's node (~150) and a table (~200) did once a request ran.
        assert!(size <= 344, "Session is {size} bytes");
    }

    #[test]
    fn capacity_idle_expiry_and_memory_of_ended_sessions() {
        let live = LiveSessions::new(2);
        let added = |id: &str| live.insert_if_absent(session(id)).map(|(_, new)| new);
        assert_eq!(added("a"), Some(true));
        assert_eq!(added("b"), Some(true));
        assert_eq!(added("a"), Some(false), "the one held stands");
        assert_eq!(added("c"), None, "full");
        live.remove("a", Ended::Deleted);
        assert_eq!(live.ended("a"), Some(Ended::Deleted));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(live.expire_idle(Duration::from_millis(5)).len(), 1);
        assert_eq!(live.ended("b"), Some(Ended::Expired));
        assert_eq!(live.len(), 0);
    }

    #[tokio::test]
    async fn client_replies_and_cancellation_reach_their_waiters() {
        let s = session("x");
        assert!(s.client_supports("sampling"));
        assert!(!s.client_supports("elicitation"));
        let (id, rx) = s.expect_client_reply();
        assert!(s.deliver_client_reply(&id, Ok(serde_json::json!({"ok": true}))));
        assert_eq!(rx.await.unwrap().unwrap()["ok"], true);
        assert!(
            !s.deliver_client_reply(&id, Ok(Value::Null)),
            "answered once"
        );
        let (token, _) = s.track_request("7", usize::MAX).expect("under the limit");
        assert!(s.cancel_request("7"));
        assert!(token.is_cancelled());
        s.finish_request("7");
        assert!(
            !s.cancel_request("7"),
            "ended: nothing to cancel, nothing kept"
        );
        assert!(
            !s.inflight.lock().has_table(),
            "one request at a time makes no table"
        );
        let (_a, _b) = (s.track_request("a", 2), s.track_request("b", 2));
        assert!(s.track_request("c", 2).is_none(), "over the limit");
        assert!(
            s.track_request("a", 2).is_none(),
            "an id sent again counts too (it was let in, so one id ran any number of handlers)"
        );
        s.finish_request("a");
        s.finish_request("b");
        assert!(
            s.inflight.lock().has_table(),
            "a session in use keeps its table: no allocation per request"
        );
        s.release_idle_table();
        assert!(
            !s.inflight.lock().has_table(),
            "an idle session keeps no table"
        );
        assert!(s.track_request("8", 0).is_none(), "over the limit");
        assert!(!s.inflight.lock().has_table(), "nor after a refusal");
        let (id, _rx) = s.expect_client_reply();
        s.forget_client_request(&id);
        assert!(!s.deliver_client_reply(&id, Ok(Value::Null)));
        assert!(!s.is_subscribed("file:///a"));
    }

    /// A session that served requests keeps no token of its own once they ended (an idle
    /// session's memory), and closing it still stops what runs in it: its running requests,
    /// a request registered after, what waits on `closed` or `leaving`; stopping the server
    /// stops them too.
    #[test]
    fn closing_stops_running_requests_without_a_token_kept_per_session() {
        let s = session("x");
        let (done, _) = s.track_request("1", usize::MAX).expect("under the limit");
        s.finish_request("1");
        drop(done);
        assert!(
            s.closed.get().is_none(),
            "no token made for a plain request"
        );
        // An id sent again while its request runs (a client's retry after a relay's `503`):
        // the earlier one ending leaves the later one in reach of the session's end.
        let (retried, _) = s.track_request("9", usize::MAX).expect("under the limit");
        let (again, _) = s.track_request("9", usize::MAX).expect("the same id");
        s.finish_request("9");
        let (running, _) = s.track_request("2", usize::MAX).expect("under the limit");
        let leaving = s.leaving();
        assert!(!running.is_cancelled() && !leaving.is_cancelled());
        s.close();
        assert!(
            running.is_cancelled(),
            "a running request stops with its session"
        );
        assert!(
            retried.is_cancelled() && again.is_cancelled(),
            "a retried request stops with its session"
        );
        assert!(leaving.is_cancelled() && s.closed().is_cancelled());
        let (late, _) = s.track_request("3", usize::MAX).expect("under the limit");
        assert!(
            late.is_cancelled(),
            "a request registered after the close is stopped too"
        );

        let stopping = CancellationToken::new();
        let other = Arc::new(Session::new(
            "y".into(),
            ProtocolVersion::LATEST,
            Value::Null,
            Value::Null,
            stopping.clone(),
            None,
        ));
        let (request, _) = other
            .track_request("1", usize::MAX)
            .expect("under the limit");
        stopping.cancel();
        assert!(request.is_cancelled() && other.closed().is_cancelled());
    }
}
