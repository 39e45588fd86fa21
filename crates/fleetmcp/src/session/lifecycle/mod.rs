//! The life of a session on this instance: mint its id, open it, find it for a request,
//! recreate it from the store, keep its record fresh, end it.
//!
//! [`Sessions`] is the one type that decides whether a session exists. It answers a lookup with
//! a typed [`Lookup`], never with an HTTP response: transport turns it into the contract's exact
//! answers, and hands a request whose session is held elsewhere to the relay seam.
//!
//! A held session is found with one hash-map read of the exact id; the seal is opened only
//! when that misses. Its stored record must still exist (another instance may have deleted or,
//! in distributed mode, claimed it), so a request checks it, bounded by
//! `sessions.check_timeout_ms` (a store that does not answer in time never blocks a session
//! this instance can serve), unless the store confirmed it before and tracks it: then nothing
//! is checked until the store reports a change, the record is due for its refresh, or, in
//! distributed mode, the lease runs out.
//!
//! A session not held here is read from the store and recreated here, or, with a [`Holders`]
//! (distributed mode), claimed, taken over from a holder found gone, or found held by a peer,
//! which is remembered for a moment so its next requests read nothing.
//!
//! `stored.rs` is everything the store's copy of a session decides: reading it, confirming a
//! held session against it, claiming or recreating a session from it, writing it back.

mod stored;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::holder::{Holder, Holders, Lease};
use super::id::{SessionIdPayload, SessionSealer, minted_uuid};
use super::live::{Ended, LiveSessions, Session};
use super::lossy::Invalidation;
use super::store::{SessionStore, StoreError};
use super::unread::Unread;
use crate::clock::unix_secs;
use crate::events::EventStore;
use crate::protocol::ProtocolVersion;

/// A direct line to a 2024-11-05 stream: JSON-RPC messages for it. Bounded: each message on
/// it holds a place of the stream's [`Unread`], which bounds it in count and bytes.
pub type LegacyLine = tokio::sync::mpsc::Sender<bytes::Bytes>;

/// A 2024-11-05 stream open here (`transport/http/legacy_sse.rs`).
pub struct LegacyStream {
    /// Messages for the stream that do not go through the event store.
    pub line: LegacyLine,
    /// What the stream holds that its client has not read.
    pub unread: Arc<Unread>,
    /// The fingerprint of the principal that opened it (none without authorization).
    pub principal: Option<Arc<str>>,
    /// Ends the stream. Its session lives as long as the stream, so a session ended another
    /// way (deleted, expired) ends it too.
    pub stop: CancellationToken,
    /// The session's requests while they run: a graceful stop ends the stream only once they
    /// answered on it.
    pub runs: TaskTracker,
}

/// What a request of a 2024-11-05 session writes to its stream through: the direct line, the
/// stream's unread messages, and the stream's end.
#[derive(Clone)]
pub struct LegacyOutlet {
    pub line: LegacyLine,
    pub unread: Arc<Unread>,
    pub stop: CancellationToken,
}

/// Where a session's request is served: what [`Sessions::find`] answers, and what transport
/// acts on (`transport/http/locate.rs`, which adds the two cases it alone sees: no id at all, and a
/// held session another principal names).
pub enum Lookup {
    /// Here: this instance holds the session.
    Held(Arc<Session>),
    /// By another live instance (its machine id): hand the request over unchanged.
    HeldElsewhere(String),
    /// Nowhere; why decides the client's answer.
    Missing(Missing),
}

/// Why no session can serve a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The request names no session (transport's case: the sessions are not asked).
    NoId,
    /// The id does not open under this deployment's secret.
    Invalid,
    /// Ended by `DELETE` on this instance.
    Deleted,
    /// Idle too long, or its stored record vanished.
    Expired,
    /// The id opens, but no instance knows the session.
    Unknown,
    /// The store did not answer within `sessions.store_wait_ms`.
    StoreUnavailable,
    /// Held here, but the store cannot confirm it is still this instance's and the lease ran
    /// out: another instance may hold it now (distributed mode).
    Unconfirmed,
    /// This instance holds its maximum of sessions.
    Full,
}

/// The protocol label a 2024-11-05 session's id carries (minted by `GET /sse`, the old pair
/// `/sse` + `/message`; a Streamable HTTP session's reads `streamable-http`): such a session is
/// pinned to the instance that has its stream, see [`Sessions::is_pinned`]. The value stays: ids
/// already minted carry it (`session/id.rs`, `PROTOCOLS`).
pub const LEGACY_SSE_PROTOCOL: &str = "legacy-sse";

/// Why a session could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// In production without `MCP_SESSION_SECRET` no id can be minted.
    NoSecret,
    /// Sealing failed (should not happen).
    SealFailed,
    /// This instance holds its maximum of sessions.
    Full,
    /// A session is already held under this id: another `initialize` for it is running, or
    /// ran (a 2024-11-05 stream's id).
    Opening,
    /// The store took the record but its replicas did not confirm it: acknowledged, the
    /// session could be lost in a failover.
    NotDurable,
}

/// The timings a session's life follows, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Bound on the existence check and on writes of a held session's record.
    pub check_timeout: Duration,
    /// Bound on reading a session this instance does not hold.
    pub store_wait: Duration,
    /// A held session's stored record is refreshed at most once per this many ms.
    pub refresh_every_ms: u64,
}

/// The sessions of this instance and the stores behind them.
pub struct Sessions {
    machine_id: String,
    /// `None` in production without `MCP_SESSION_SECRET`: no session id can be minted.
    sealer: Option<SessionSealer>,
    live: Arc<LiveSessions>,
    store: Arc<dyn SessionStore>,
    events: Arc<dyn EventStore>,
    /// `None`: every stored session is served here (see [`Holders`]). `Some` (distributed
    /// mode) also fences every holder-side write with the holder's epoch.
    holders: Option<Arc<dyn Holders>>,
    /// Renewed by the heartbeat in distributed mode; bounds how long a held session is served
    /// when the store cannot confirm it.
    lease: Arc<Lease>,
    /// Sessions found held by a live peer a moment ago: their next requests go to it without
    /// reading the store again. Short-lived, so a takeover is seen within [`ELSEWHERE_TTL`];
    /// a stale entry only sends a request to a holder that answers 404 or is found gone.
    elsewhere: parking_lot::Mutex<HashMap<Arc<str>, (String, Instant)>>,
    timing: Timing,
    /// Parent of every session's `closed` token: stopping the server ends them all.
    shutdown: CancellationToken,
    /// Ids of the 2024-11-05 streams (`GET /sse`) open on this instance. Such a session can
    /// only be initialized while its stream is open here: its answers have nowhere else to go,
    /// and an id whose stream closed, or that another instance minted, must never open.
    /// The 2024-11-05 streams open here, each with its direct line: what cannot be stored for
    /// the stream (the event store failing) is handed to it this way instead of being lost;
    /// and the fingerprint of the principal that opened it (with authorization on), the only
    /// one that may initialize its session (its answers go to that principal's stream).
    legacy_streams: parking_lot::Mutex<HashMap<Arc<str>, LegacyStream>>,
    /// Set while this instance has been absent from Redis as long as others wait before they
    /// call its 2024-11-05 streams gone: see [`Sessions::refuse_pinned`].
    pinned_refused: std::sync::atomic::AtomicBool,
}

/// Voids the confirmations of held sessions whose records changed, as the store reports them,
/// until the server stops.
async fn forget_confirmations(
    live: std::sync::Weak<LiveSessions>,
    mut changes: crate::session::lossy::Invalidations,
    stop: CancellationToken,
) {
    loop {
        let change = tokio::select! {
            c = changes.recv() => c,
            _ = stop.cancelled() => return,
        };
        let (Some(change), Some(live)) = (change, live.upgrade()) else {
            return;
        };
        match change {
            Invalidation::Key(id) => {
                if let Some(s) = live.get(&id) {
                    s.unconfirm();
                }
            }
            Invalidation::All => {
                for s in live.all() {
                    s.unconfirm();
                }
            }
        }
    }
}

/// How long a session found held elsewhere is remembered.
const ELSEWHERE_TTL: Duration = Duration::from_secs(1);
/// How long a holder found then is still tried when the store does not answer.
const ELSEWHERE_STALE: Duration = Duration::from_secs(300);
/// Entries of that memory; past it, it starts again empty.
const ELSEWHERE_MAX: usize = 65_536;

impl Sessions {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        machine_id: String,
        sealer: Option<SessionSealer>,
        max_sessions: usize,
        store: Arc<dyn SessionStore>,
        events: Arc<dyn EventStore>,
        holders: Option<Arc<dyn Holders>>,
        timing: Timing,
        shutdown: CancellationToken,
    ) -> Self {
        let live = Arc::new(LiveSessions::new(max_sessions));
        // A store that reports changes to the records it confirmed (client-side caching) lets
        // held sessions be served without a round trip each; it needs the runtime.
        if tokio::runtime::Handle::try_current().is_ok()
            && let Some(changes) = store.invalidations(&machine_id)
        {
            tokio::spawn(forget_confirmations(
                Arc::downgrade(&live),
                changes,
                shutdown.clone(),
            ));
        }
        Self {
            machine_id,
            sealer,
            live,
            store,
            events,
            holders,
            lease: Arc::new(Lease::default()),
            elsewhere: parking_lot::Mutex::new(HashMap::new()),
            timing,
            shutdown,
            legacy_streams: parking_lot::Mutex::new(HashMap::new()),
            pinned_refused: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn remembered_elsewhere(&self, id: &str) -> Option<String> {
        self.elsewhere_within(id, ELSEWHERE_TTL)
    }

    /// The holder a live peer was last seen to be, up to `age` ago.
    fn elsewhere_within(&self, id: &str, age: Duration) -> Option<String> {
        let map = self.elsewhere.lock();
        let (holder, at) = map.get(id)?;
        (at.elapsed() < age).then(|| holder.clone())
    }

    /// Remembers that `holder` holds session `id`. Only for an id that opened under this
    /// deployment's secret (one held here, or one [`Sessions::find`] checked): [`Sessions::find`]
    /// does not open a remembered id again.
    fn remember_elsewhere(&self, id: &str, holder: &str) {
        let mut map = self.elsewhere.lock();
        if map.len() >= ELSEWHERE_MAX {
            map.clear();
        }
        map.insert(id.into(), (holder.to_string(), Instant::now()));
    }

    /// Records that the 2024-11-05 stream of session `id` is open on this instance.
    pub fn legacy_stream_opened(&self, id: Arc<str>, stream: LegacyStream) {
        self.legacy_streams.lock().insert(id, stream);
    }

    /// Ends `id`'s 2024-11-05 stream, when one is open here: its session ended.
    pub(super) fn end_legacy_stream(&self, id: &str) {
        let streams = self.legacy_streams.lock();
        if let Some(stream) = streams.get(id) {
            stream.stop.cancel();
        }
    }

    /// Refuses new 2024-11-05 streams here (`GET /sse` answered `503`), or takes them again:
    /// refused while this holder has been absent from Redis ([`Lease::absent_for`]) as long
    /// as others wait before they call its streams gone, since they would call a new one gone
    /// at once ([`Sessions::end_pinned_streams`] ends the open ones). Set and cleared by the
    /// fleet's watch on the lease.
    pub fn refuse_pinned(&self, refused: bool) {
        self.pinned_refused
            .store(refused, std::sync::atomic::Ordering::Relaxed);
    }

    /// See [`Sessions::refuse_pinned`].
    pub fn pinned_refused(&self) -> bool {
        self.pinned_refused
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Ends every 2024-11-05 session whose stream is open here, as [`Sessions::close`] does
    /// (its stream closes after what was queued on its direct line, and its record goes when
    /// the store answers); how many. For a holder absent from Redis as long as others wait
    /// before they call its sessions gone (`fleet/heartbeat.rs`): nothing can take such a
    /// session over, so it ends here rather than live on where others have declared it gone.
    pub fn end_pinned_streams(&self) -> usize {
        // Collected first: `close` takes the streams' lock again.
        let ids: Vec<Arc<str>> = self.legacy_streams.lock().keys().cloned().collect();
        for id in &ids {
            self.close(id);
        }
        ids.len()
    }

    /// What writes to `id`'s 2024-11-05 stream, when it is open here.
    pub fn legacy_outlet(&self, id: &str) -> Option<LegacyOutlet> {
        self.legacy_streams
            .lock()
            .get(id)
            .map(|stream| LegacyOutlet {
                line: stream.line.clone(),
                unread: stream.unread.clone(),
                stop: stream.stop.clone(),
            })
    }

    /// What tracks the running requests of `id`'s 2024-11-05 session, when its stream is open
    /// here.
    pub fn legacy_runs(&self, id: &str) -> Option<TaskTracker> {
        self.legacy_streams
            .lock()
            .get(id)
            .map(|stream| stream.runs.clone())
    }

    /// Whether `id`'s 2024-11-05 stream, open here, was opened by the principal of fingerprint
    /// `principal` (or, like it, by no principal): only that caller may initialize its session.
    pub fn legacy_stream_opened_by(&self, id: &str, principal: Option<&str>) -> bool {
        self.legacy_streams
            .lock()
            .get(id)
            .is_some_and(|stream| stream.principal.as_deref() == principal)
    }

    /// Records that the 2024-11-05 stream of session `id` closed here.
    pub fn legacy_stream_closed(&self, id: &str) {
        self.legacy_streams.lock().remove(id);
    }

    /// Whether `id`'s 2024-11-05 stream is open on this instance: the only case in which its
    /// `initialize` may open it.
    pub fn has_legacy_stream(&self, id: &str) -> bool {
        // Asked on every `/mcp` lookup of a held session: an empty map answers without hashing.
        let streams = self.legacy_streams.lock();
        !streams.is_empty() && streams.contains_key(id)
    }

    /// The lease this instance's heartbeat renews (distributed mode).
    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// These sessions under `lease`, one the fleet's liveness checks share (they judge others
    /// only once it has held a while: [`Lease::held_for`]).
    pub fn with_lease(mut self, lease: Arc<Lease>) -> Self {
        self.lease = lease;
        self
    }

    /// Whether holder-side writes are fenced (distributed mode: a [`Holders`] seam is installed).
    fn fenced(&self) -> bool {
        self.holders.is_some()
    }

    /// This instance's machine id, as session records name it.
    pub fn machine_id(&self) -> &str {
        &self.machine_id
    }

    /// Session `id`, if this instance holds it.
    pub fn held_session(&self, id: &str) -> Option<Arc<Session>> {
        self.live.get(id)
    }

    /// Sessions held here.
    pub fn held(&self) -> usize {
        self.live.len()
    }

    /// Every held session (for announcements).
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.live.all()
    }

    /// The store's kind, for logs and `/readyz`.
    pub fn store_kind(&self) -> &'static str {
        self.store.kind()
    }

    /// Whether the store answers (readiness).
    pub async fn ping_store(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }

    /// Mints a sealed id naming this instance; `protocol` is the transport
    /// (`streamable-http`, `legacy-sse`).
    pub fn mint(&self, protocol: &str) -> Result<String, OpenError> {
        let Some(sealer) = &self.sealer else {
            tracing::error!(
                "initialize refused: MCP_SESSION_SECRET is required in production to issue session ids"
            );
            return Err(OpenError::NoSecret);
        };
        let payload = SessionIdPayload {
            holder: self.machine_id.clone(),
            // Tagged with this instance (`id.rs`): its tracking connection hears of its ids only.
            uuid: minted_uuid(&self.machine_id).to_string(),
            iat: unix_secs(),
            protocol: protocol.into(),
            auth_sig: "public".into(),
            is_public: true,
        };
        sealer.seal(&payload).ok_or(OpenError::SealFailed)
    }

    /// When session `id` was minted (Unix ms, to the second), if this deployment minted it.
    pub fn minted_at_ms(&self, id: &str) -> Option<u64> {
        self.opened(id).map(|p| p.iat.saturating_mul(1000))
    }

    /// What id `id` carries, when this deployment minted it (it opens under its secret).
    fn opened(&self, id: &str) -> Option<SessionIdPayload> {
        if id.is_empty() || id.trim() != id {
            return None;
        }
        self.sealer.as_ref()?.open(id)
    }

    /// Holds a new session here and writes its record to the store (bounded: a store that does
    /// not answer leaves the session in memory, stored once the store answers).
    pub async fn open(
        &self,
        id: &str,
        version: ProtocolVersion,
        client_info: Value,
        client_capabilities: Value,
        principal: Option<&str>,
    ) -> Result<Arc<Session>, OpenError> {
        let session = Arc::new(Session::new(
            id.into(),
            version,
            client_info,
            client_capabilities,
            self.shutdown.clone(),
            principal,
        ));
        session.set_epoch(1);
        let term = self.lease.term();
        // Never in the place of a session already held under this id (a 2024-11-05 stream's
        // id, whose client sent `initialize` twice at once): the first one stands.
        match self.live.insert_if_absent(session.clone()) {
            Some((_, true)) => {}
            Some((_, false)) => return Err(OpenError::Opening),
            None => {
                tracing::warn!(
                    limit = self.live.capacity(),
                    "initialize refused: this instance holds its maximum of sessions"
                );
                return Err(OpenError::Full);
            }
        }
        // Its own from the start: stored or not, no other instance can have claimed it.
        session.confirmed_in(term);
        match self.create(&self.record_of(&session)).await {
            Ok(()) => session.mark_persisted(),
            Err(StoreError::NotDurable(why)) => {
                // The record reached a server that may be about to lose it (a master the
                // sentinels just replaced): refused, not acknowledged and lost. The client
                // retries, by then on the new master. The id is not remembered as ended: a
                // 2024-11-05 client sends its `initialize` again under the same id (its
                // stream's), and must not be told the session is gone.
                tracing::warn!(error = %why, "initialize refused: the new session's record was not confirmed by the replicas");
                self.live.discard(id);
                let _ = self.delete_record(id).await;
                return Err(OpenError::NotDurable);
            }
            Err(why) => {
                tracing::warn!(error = %why, "[TransportService] Failed to persist session to Redis")
            }
        }
        tracing::debug!(version = %version, "session opened");
        Ok(session)
    }

    /// Where a request for session `id` is served. A session held here is checked against the
    /// store first; one that is not is read from the store (waiting at most
    /// `sessions.store_wait_ms`) and recreated here, unless its holder is a live peer.
    ///
    /// `caller` is the fingerprint of the request's principal (`None`: anonymous, or
    /// authorization off): a session this instance would take over or recreate is taken only
    /// for the principal that made it; anyone else gets the stranger's answer
    /// ([`Sessions::stranger`]) and changes nothing, not even where the session is held.
    pub async fn find(&self, id: &str, caller: Option<&str>) -> Lookup {
        if let Some(s) = self.live.get(id) {
            // A 2024-11-05 session answers on its own stream only: served here, its answers
            // would go to whoever else reads it (a `GET /mcp`), or nowhere.
            if self.has_legacy_stream(id) {
                return Lookup::Missing(Missing::Unknown);
            }
            return self.still_stored(s).await;
        }
        // A session found elsewhere a moment ago: its id opened then (only an id that opened is
        // remembered, see `remember_elsewhere`), so its seal is not opened again (a relaying
        // instance would open it on every request: about 8,600 instructions each); whether it
        // ended here is still asked.
        if let Some(holder) = self.remembered_elsewhere(id) {
            return match self.ended_here(id) {
                Some(missing) => Lookup::Missing(missing),
                None => Lookup::HeldElsewhere(holder),
            };
        }
        // Boxed: reading, claiming and recreating a session not held here is most of this
        // future's size, and every request's future would hold room for it, copied whenever
        // that future moves into a box (issue 23).
        Box::pin(self.find_not_held(id, caller)).await
    }

    /// The answer for a caller other than the principal that made session `id`: what a
    /// stranger to the id is told (the contract's token mismatch), so that ids are not
    /// confirmed to anyone else.
    pub fn stranger(id: &str) -> Lookup {
        tracing::warn!(session_id = %super::LogId(id), "[TransportService] Session token mismatch during lookup");
        Lookup::Missing(Missing::Unknown)
    }

    /// [`Sessions::find`] for a session this instance does not hold.
    async fn find_not_held(&self, id: &str, caller: Option<&str>) -> Lookup {
        let payload = match self.servable(id) {
            Ok(payload) => payload,
            Err(missing) => return Lookup::Missing(missing),
        };
        // A 2024-11-05 session is served through `/message` only ([`Sessions::find_pinned`]),
        // never relayed to its holder's `/mcp`, nor taken over: its stream died with its
        // holder, and a copy here would accept requests whose answers reach no one.
        if payload.protocol == LEGACY_SSE_PROTOCOL {
            return Lookup::Missing(Missing::Unknown);
        }
        // A holder seen a while ago is where the session most likely still is: when the store
        // does not answer, the request goes there (its holder checks it) rather than failing,
        // after a short wait, not the whole `store_wait`.
        let stale = self.elsewhere_within(id, ELSEWHERE_STALE);
        let bound = match stale {
            Some(_) => self.timing.check_timeout,
            None => self.timing.store_wait,
        };
        match self.read_within(id, bound).await {
            Ok(Some(record)) => {
                let holder = match &self.holders {
                    Some(o) => o.holder(&record).await,
                    None => Holder::Here,
                };
                let previous = match holder {
                    Holder::Peer(peer) => {
                        self.remember_elsewhere(id, &peer);
                        return Lookup::HeldElsewhere(peer);
                    }
                    Holder::TakeOver(gone) => Some(gone),
                    Holder::Here => None,
                };
                // Checked before the claim: a stranger's request moves nothing.
                if record.principal.as_deref() != caller {
                    return Self::stranger(id);
                }
                if self.fenced() {
                    return self.claim(record, previous).await;
                }
                match self.recreate(record).await {
                    Some(s) => {
                        if let Some(previous) = previous {
                            tracing::info!(session_id = %super::LogId(&s.id), previous_node_id = %previous, "[HA] Took over session from a stopped node");
                        }
                        Lookup::Held(s)
                    }
                    None => Lookup::Missing(Missing::Full),
                }
            }
            Ok(None) => Lookup::Missing(Missing::Unknown),
            Err(why) => match stale {
                Some(holder) => {
                    tracing::warn!(error = %why, holder = %holder, "the session store could not be read; relaying to the holder last seen");
                    Lookup::HeldElsewhere(holder)
                }
                None => {
                    tracing::warn!(error = %why, wait_ms = bound.as_millis() as u64, "the session store could not be read for a session this instance does not hold");
                    Lookup::Missing(Missing::StoreUnavailable)
                }
            },
        }
    }

    /// Takes over session `id` from `previous`, a holder found gone (the relay could not reach
    /// it and it holds no subscription): recreated here if the record still names `previous`;
    /// if another instance took it over meanwhile, wherever [`Sessions::find`] says.
    /// Only for `caller`, the principal that made it (see [`Sessions::find`]).
    pub async fn take_over(&self, id: &str, previous: &str, caller: Option<&str>) -> Lookup {
        self.elsewhere.lock().remove(id);
        if let Some(s) = self.live.get(id) {
            if self.has_legacy_stream(id) {
                return Lookup::Missing(Missing::Unknown);
            }
            return Lookup::Held(s);
        }
        if self.is_pinned(id) {
            return Lookup::Missing(Missing::Unknown);
        }
        match self.read(id).await {
            Ok(Some(record)) if record.principal.as_deref() != caller => Self::stranger(id),
            Ok(Some(record)) if record.holder == previous && self.fenced() => {
                self.claim(record, Some(previous.to_string())).await
            }
            Ok(Some(record)) if record.holder == previous => match self.recreate(record).await {
                Some(s) => {
                    tracing::info!(session_id = %super::LogId(&s.id), previous_node_id = %previous, "[HA] Took over session from a stopped node");
                    Lookup::Held(s)
                }
                None => Lookup::Missing(Missing::Full),
            },
            Ok(Some(_)) => self.find(id, caller).await,
            Ok(None) => Lookup::Missing(Missing::Unknown),
            Err(_) => Lookup::Missing(Missing::StoreUnavailable),
        }
    }

    /// Like [`Sessions::find`], for a session that cannot move between instances (the
    /// 2024-11-05 transport's, tied to its stream): held here (and still stored), on the peer
    /// that minted its id (its stream is there, initialized or not, whether or not the store
    /// answers and whether or not that peer's heartbeat is current: the relay finds out), or
    /// missing. Without a [`Holders`] a session not held here is never read from the store:
    /// it cannot be served here.
    pub async fn find_pinned(&self, id: &str) -> Lookup {
        // Held here is not enough: another instance may have ended it (its stored record is
        // gone), and an ended session stays ended on every path.
        if let Some(s) = self.live.get(id) {
            // Held here without a stream of this transport: a Streamable HTTP session, whose
            // answers `/message` must not send to its `GET /mcp` stream.
            if !self.has_legacy_stream(id) {
                return Lookup::Missing(Missing::Unknown);
            }
            return self.still_stored(s).await;
        }
        let payload = match self.servable(id) {
            Ok(payload) => payload,
            Err(missing) => return Lookup::Missing(missing),
        };
        if payload.protocol != LEGACY_SSE_PROTOCOL {
            return Lookup::Missing(Missing::Unknown);
        }
        let Some(holders) = &self.holders else {
            return Lookup::Missing(Missing::Unknown);
        };
        // Such a session never moves: its stream is on the instance that minted its id, for
        // its whole life, initialized or not (a `GET /sse` names no holder in the store until
        // `initialize`). A request for one minted elsewhere goes there without reading the
        // store (which may not answer: the relay does not need it). That instance answers for
        // the id itself; one that no longer runs is no holder (the relay says so).
        if payload.holder != self.machine_id {
            return Lookup::HeldElsewhere(payload.holder);
        }
        // Minted here, and not held: its stream closed, or this process is not the one that
        // opened it (restarted under the same machine id).
        match self.read(id).await {
            Ok(Some(record)) => match holders.holder(&record).await {
                Holder::Peer(peer) => Lookup::HeldElsewhere(peer),
                // Its stream was on the stopped holder: nothing to take over.
                Holder::Here | Holder::TakeOver(_) => Lookup::Missing(Missing::Unknown),
            },
            Ok(None) => Lookup::Missing(Missing::Unknown),
            Err(_) => Lookup::Missing(Missing::StoreUnavailable),
        }
    }

    /// Whether pinned session `id`'s stream is gone for good: the process of `holder` (the
    /// instance that minted the id, and opened its stream) that ran when the id was minted is
    /// gone (stopped, crashed, or restarted since). Nothing can take such a session over, so
    /// it ended with that process. `false` whenever that is not certain.
    pub async fn pinned_stream_gone(&self, id: &str, holder: &str) -> bool {
        let (Some(holders), Some(payload)) = (&self.holders, self.opened(id)) else {
            return false;
        };
        // `iat` counts whole seconds: the end of that second, so that a process that started
        // in the same second as the id was minted is never taken for a newer one.
        let minted_at = payload.iat.saturating_mul(1000).saturating_add(999);
        holders.process_gone(holder, minted_at).await
    }

    /// Whether `id` is a 2024-11-05 session's (`GET /sse`): it lives in its stream, on the
    /// instance that has it, and can never be served anywhere else.
    pub fn is_pinned(&self, id: &str) -> bool {
        self.opened(id)
            .is_some_and(|p| p.protocol == LEGACY_SSE_PROTOCOL)
    }

    /// Ends a session everywhere: here at once, then its events and its stored record.
    pub async fn end(&self, id: &str) {
        self.close(id);
        self.purge(id).await;
    }

    /// Ends a session here at once (its streams and waiting requests stop, and its id is
    /// remembered as deleted); [`Sessions::purge`] removes what other instances could read.
    pub fn close(&self, id: &str) {
        self.live.remove(id, Ended::Deleted);
        self.end_legacy_stream(id);
    }

    /// Deletes a closed session's events and stored record.
    pub async fn purge(&self, id: &str) {
        self.events.forget(id).await;
        if let Err(e) = self.delete_record(id).await {
            tracing::warn!(error = %e, "the stored session could not be deleted");
        }
    }

    /// Drops sessions nobody used for `idle`, with what this instance keeps of their events;
    /// other instances may still serve them from the shared stores.
    pub async fn expire_idle(&self, idle: Duration) {
        for id in self.live.expire_idle(idle) {
            self.end_legacy_stream(&id);
            self.events.release(&id).await;
            tracing::debug!(session = %super::LogId(&id), "session expired after being idle");
        }
    }

    /// What an id not held here carries, or why it cannot be served when that is known
    /// without the store. Opened once: about 8,600 instructions each time.
    fn servable(&self, id: &str) -> Result<SessionIdPayload, Missing> {
        let Some(payload) = self.opened(id) else {
            tracing::warn!("parseInput: mcp-session-id is not a session this server verified");
            return Err(Missing::Invalid);
        };
        match self.ended_here(id) {
            Some(missing) => Err(missing),
            None => Ok(payload),
        }
    }

    /// Why session `id` is not served, when it ended on this instance.
    fn ended_here(&self, id: &str) -> Option<Missing> {
        match self.live.ended(id) {
            Some(Ended::Deleted) => Some(Missing::Deleted),
            Some(Ended::Expired) => Some(Missing::Expired),
            None => None,
        }
    }
}
