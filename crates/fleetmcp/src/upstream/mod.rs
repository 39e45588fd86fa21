//! Sessions served by another MCP server, an *upstream*, instead of the declared catalog: what
//! `fleetmcp gateway` puts a fleet in front of.
//!
//! A server built with [`ServerBuilder::upstream`](crate::ServerBuilder::upstream) opens one
//! upstream per client session on the instance that holds the session, and relays the session's
//! JSON-RPC both ways. The [`Upstream`] supplies the pipe ([`UpstreamLink`]: whole messages each
//! way, a child process's stdin and stdout for the gateway); this module does the protocol:
//!
//! * `initialize`: the client's own `initialize` goes to the upstream, and the upstream's answer
//!   (its capabilities, `serverInfo`, instructions) is the client's answer;
//! * a session this instance did not open (recreated from the store, taken over from a holder
//!   that stopped) gets a new upstream on its first request, initialized with what the session
//!   stored (protocol version, capabilities, `clientInfo`). What the previous upstream kept in
//!   memory is gone; that is logged;
//! * every client request goes up under an id of ours and its answer comes back unchanged;
//!   the upstream's progress for it goes on the request's stream (matched by `progressToken`);
//!   a request the client cancels (or whose connection is dropped) is cancelled upstream;
//! * requests the upstream sends the client (sampling, elicitation, roots) are asked the way a
//!   tool's `ctx.ask` asks, and the answer goes back up under the upstream's own id;
//! * notifications not tied to a request (list changes, resource updates, logging while several
//!   requests run) go to the session's standalone stream;
//! * the upstream ends when the session leaves this instance (ended, expired, taken over): its
//!   link is dropped, which tells the [`Upstream`] to stop it.
//!
//! With [`Upstream::poll_after`], a request still waiting for its answer has its connection
//! ended for SSE polling (`RequestContext::end_connection_for_polling`) once that interval
//! passes, then each `http.sse_retry_ms` plus that interval (`link.rs`, `Polling`), in sessions
//! of 2025-11-25 and later: an upstream cannot ask for it itself. The task reading an upstream
//! holds `Meters::upstream_opened`'s guard (`fleetmcp_upstreams_open`).
//!
//! Bounds: both ways the link is a queue bounded in messages and bytes (`queue.rs`); nothing
//! sent on it waits in a task of its own. A client's request waits for room; a client's
//! notification POST waits at most `NOTIFY_WAIT`, at most `MAX_NOTIFY_WAITING` of a session's
//! at once, then is refused `503` (`notification_waiting`; the transports that cannot wait use
//! `notification`, which drops it with a WARN). What the reader answers the upstream itself
//! (`ping`, refusals) is awaited by the reader, so it stops reading an upstream whose answers
//! cannot be written; the tasks asking the client for the upstream count under `MAX_ASKING`
//! until their answer is queued. The session leaving ends every wait.
//!
//! Architecture invariant: layer 3; names no HTTP crate and nothing of Redis. A session's
//! upstream lives only on the instance that holds the session; nothing of it is stored.

mod host;
mod link;
mod queue;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::context::RequestContext;
use crate::limits::LimitKey;
use crate::protocol::{ErrorData, ProtocolVersion, Reply, errors};
use crate::session::{LogId, Session};

pub(crate) use host::Host;
pub(crate) use link::Handshake;
use link::Link;
pub use queue::{MessageReceiver, MessageSender};

/// The two ends of one session's connection to its upstream: whole JSON-RPC messages (one
/// object each, no line end) to it and from it, each way a [`channel`](UpstreamLink::channel) bounded in
/// messages and in bytes (the [`Upstream`] makes both and chooses their bounds).
///
/// Dropping `to_upstream` (the server does when the session leaves this instance) means the
/// upstream is no longer needed: an [`Upstream`] that runs a process ends it then. Closing
/// `from_upstream` (the upstream stopped) fails the requests waiting on it; the session's next
/// request connects again.
pub struct UpstreamLink {
    /// Messages for the upstream. Bounded, so an upstream that does not read slows its session
    /// instead of growing a queue: a client's request waits for room, a client's notification
    /// waits a while and is then refused (`503`), and what the server answers the upstream's
    /// own requests waits, and with it the reading of what the upstream sends.
    pub to_upstream: MessageSender,
    /// Messages from the upstream, in the order it sent them. Bounded too: while the session
    /// does not take them, the [`Upstream`] stops reading its upstream.
    pub from_upstream: MessageReceiver,
}

impl UpstreamLink {
    /// A queue for one way of a link, holding at most `max_messages` messages and `max_bytes`
    /// bytes of them (a longer message waits for the queue to be empty and goes alone): past
    /// either, [`MessageSender::send`] waits. Both ways of a link are one of these; an
    /// [`Upstream`] chooses the bounds (`fleetmcp-gateway`: 64 messages and
    /// `gateway.max_line_bytes`).
    pub fn channel(max_messages: usize, max_bytes: usize) -> (MessageSender, MessageReceiver) {
        queue::channel(max_messages, max_bytes)
    }
}

/// Where a server's sessions are served when it is a gateway: connects one upstream per
/// session (see [`ServerBuilder::upstream`](crate::ServerBuilder::upstream)).
#[async_trait]
pub trait Upstream: Send + Sync + 'static {
    /// A new upstream for one session (`session` names it in logs: a digest, never the id) of
    /// the client `key` (who the session counts against under `[limits]`: `principal:...` or
    /// `addr:...`; an upstream that runs processes bounds them per key with it).
    /// An `Err` refuses the session (`503` with `Retry-After`, its text in the message): the
    /// upstream could not start, or the instance (or the key) runs its most upstreams.
    async fn connect(&self, session: &str, key: &str) -> Result<UpstreamLink, String>;

    /// Whether this instance can start upstreams; an `Err` makes `/readyz` answer `503`
    /// with the reason under `probes.upstream`. Called on every readiness check: keep it cheap.
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }

    /// With authorization on (`[auth]`), the OAuth scope a call of `method` (`tools/call`,
    /// `resources/read`, `prompts/get`) on `name` (the tool's or prompt's name, the resource's
    /// URI) needs, besides `auth.required_scopes`; checked before the request goes up, as a
    /// declared tool's scope is (a token without it: `403` `insufficient_scope`). `None`, the
    /// default: no scope of its own.
    fn required_scope(&self, method: &str, name: &str) -> Option<String> {
        let _ = (method, name);
        None
    }

    /// SSE polling (SEP-1699) on the upstream's behalf: a request still waiting for its
    /// answer this long after it went up has its client connection ended, so the client
    /// resumes with `Last-Event-ID` (after `http.sse_retry_ms`) and gets what was sent
    /// meanwhile; the request goes on upstream. Again each `http.sse_retry_ms` plus this long
    /// after, so each connection the client opens lives about this long. Only in sessions whose
    /// version primes its streams (2025-11-25 and later), whose clients can always resume.
    /// An upstream cannot ask for this itself (stdio has no message for it), so the server
    /// does it by time. `None`, the default: a request's connection stays until its answer.
    fn poll_after(&self) -> Option<Duration> {
        None
    }
}

/// How long an upstream has to answer `initialize`.
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request the upstream sent the client waits for its answer.
const CLIENT_REPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// Why a session could not get its upstream.
pub(crate) enum OpenFailure {
    /// It could not be reached or did not answer: `503` with `Retry-After`.
    Unavailable(String),
    /// It answered `initialize` with this error, which the client gets unchanged.
    Refused(ErrorData),
}

/// Connects an upstream for the session `sid` is about to open and initializes it with the
/// client's own `initialize` params (`params`, as sent). The caller opens the session, then
/// hands it the link with [`adopt`].
pub(crate) async fn open(
    app: &impl Host,
    sid: &str,
    params: Option<&RawValue>,
    key: &LimitKey,
) -> Option<Result<Handshake, OpenFailure>> {
    let upstream = app.upstream()?;
    let params: Value = match params {
        Some(p) => serde_json::from_str(p.get()).unwrap_or_else(|_| json!({})),
        None => json!({}),
    };
    let log = LogId(sid).to_string();
    Some(Handshake::run(upstream.as_ref(), &log, key.as_str(), &params, false).await)
}

/// Gives a session opened here the upstream [`open`] initialized for it.
pub(crate) fn adopt(app: &impl Host, session: &Arc<Session>, handshake: Handshake) {
    if let Some(slot) = session.attached(link::SessionUpstream::default) {
        slot.install(Link::start(app, session, handshake));
    }
}

/// The protocol version the upstream answered `initialize` with, if it is one this server
/// knows (the session then serves that version).
pub(crate) fn answered_version(handshake: &Handshake) -> Option<ProtocolVersion> {
    handshake
        .result()
        .get("protocolVersion")
        .and_then(Value::as_str)
        .and_then(ProtocolVersion::parse)
}

/// What session `session`'s upstream answered `initialize` with; `None` for a session with no
/// live upstream here.
pub(crate) fn initialize_result(session: &Session) -> Option<Value> {
    let link = session.attachment::<link::SessionUpstream>()?.live()?;
    Some(link.initialize_result().clone())
}

/// Sends a session's request up and returns the upstream's answer unchanged.
pub(crate) async fn request(
    app: &impl Host,
    session: &Arc<Session>,
    method: String,
    params: Option<Box<RawValue>>,
    ctx: RequestContext,
) -> Reply {
    // Who a new upstream (a session taken over, or whose upstream stopped) counts against:
    // the client asking, as for the session's first one.
    let key = ctx
        .limit_key()
        .map_or("unknown", LimitKey::as_str)
        .to_string();
    let link = link::current(app, session, &key).await?;
    link.call(method, params, ctx).await
}

/// Passes a client's notification up without waiting (the transports that cannot make their
/// client wait: a batch's items, the 2024-11-05 `/message`, stdio); `false` when the session
/// has no upstream here (nothing was sent). With the upstream's queue full it is dropped, and
/// said in the log (see [`notification_waiting`] for the POST that waits instead).
/// `notifications/cancelled` is not passed (the request's id upstream is ours: the request's
/// cancellation sends the upstream its own).
pub(crate) fn notification(session: &Session, method: &str, params: Option<&RawValue>) -> bool {
    let Some(link) = live_link(session, method) else {
        return false;
    };
    link.notify_now(session, method, params);
    true
}

/// Passes a client's notification up, waiting for room in the upstream's queue (a client
/// that sends faster than its upstream reads is slowed, as a pipe would slow it), at most
/// [`NOTIFY_WAIT`], and only while few others wait; past either, the notification is refused
/// with `-32000` and a retry delay (`503` with `Retry-After` over HTTP). `None` when the
/// session has no upstream here (the caller handles the notification itself).
pub(crate) async fn notification_waiting(
    session: &Session,
    method: &str,
    params: Option<&RawValue>,
) -> Option<Result<(), ErrorData>> {
    let link = live_link(session, method)?;
    Some(link.notify(method, params).await)
}

/// The session's live upstream, for a client notification that goes up.
fn live_link(session: &Session, method: &str) -> Option<Arc<Link>> {
    if method == "notifications/cancelled" {
        return None;
    }
    session
        .attachment::<link::SessionUpstream>()
        .and_then(|slot| slot.live())
}

/// How long a client's notification waits for room in its upstream's queue before it is
/// refused: long enough for a busy upstream to catch up, short enough that a client whose
/// upstream has stopped reading learns it (and its connection is given back).
const NOTIFY_WAIT: Duration = Duration::from_secs(10);

/// How many of a session's notifications may wait for room at once; one more is refused at
/// once. A waiting POST holds its body: without this, a client's many concurrent POSTs would
/// hold as many bodies while they wait.
const MAX_NOTIFY_WAITING: usize = 4;

/// An error answer for a session whose upstream cannot be reached now.
fn unavailable(why: &str) -> ErrorData {
    errors::unavailable(
        format!("The upstream server is unavailable: {why}; retry shortly"),
        Duration::from_secs(5),
    )
}
