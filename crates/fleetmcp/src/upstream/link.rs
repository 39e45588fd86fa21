//! One session's upstream on the instance that holds the session: the `initialize` handshake,
//! the requests waiting for their answers, and the task that reads what the upstream sends.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{
    CLIENT_REPLY_TIMEOUT, Host, INITIALIZE_TIMEOUT, MAX_NOTIFY_WAITING, MessageReceiver,
    MessageSender, NOTIFY_WAIT, OpenFailure, Reply, Upstream, UpstreamLink,
};
use crate::context::{ClientRequestError, RequestContext};
use crate::events::STANDALONE_STREAM;
use crate::protocol::{
    ErrorData, Incoming, Message, encode_error, encode_notification, encode_request, encode_result,
    errors,
};
use crate::session::{LogId, Session};

/// The id of the `initialize` this server sends an upstream (every later request of ours is
/// numbered from 1, so it never collides).
const INITIALIZE_ID: &str = "fleetmcp-initialize";

/// An upstream that answered `initialize`: its link, and its answer.
pub(crate) struct Handshake {
    link: UpstreamLink,
    result: Value,
}

impl Handshake {
    /// Connects an upstream for the client `key` and initializes it with `params`;
    /// `initialized`: also send `notifications/initialized` (a session taken over, whose client
    /// sent its own long ago).
    pub(super) async fn run(
        upstream: &dyn Upstream,
        log: &str,
        key: &str,
        params: &Value,
        initialized: bool,
    ) -> Result<Self, OpenFailure> {
        let mut link = upstream
            .connect(log, key)
            .await
            .map_err(OpenFailure::Unavailable)?;
        let stopped = || OpenFailure::Unavailable("it stopped before answering initialize".into());
        link.to_upstream
            .send(encode_request(INITIALIZE_ID, "initialize", params))
            .await
            .map_err(|_| stopped())?;
        let result = tokio::time::timeout(INITIALIZE_TIMEOUT, initialize_answer(&mut link))
            .await
            .map_err(|_| {
                OpenFailure::Unavailable(format!(
                    "it did not answer initialize within {INITIALIZE_TIMEOUT:?}"
                ))
            })??;
        if initialized {
            link.to_upstream
                .send(encode_notification("notifications/initialized", &json!({})))
                .await
                .map_err(|_| stopped())?;
        }
        Ok(Self { link, result })
    }

    /// The upstream's `initialize` result.
    pub(crate) fn result(&self) -> &Value {
        &self.result
    }
}

/// Reads the upstream until it answers `initialize` (a `ping` meanwhile is answered; anything
/// else before the session exists has nowhere to go).
async fn initialize_answer(link: &mut UpstreamLink) -> Result<Value, OpenFailure> {
    loop {
        let Some(bytes) = link.from_upstream.recv().await else {
            return Err(OpenFailure::Unavailable(
                "it stopped before answering initialize".into(),
            ));
        };
        let message = serde_json::from_slice::<Incoming>(&bytes)
            .ok()
            .and_then(|m| m.classify().ok());
        match message {
            Some(Message::Response { id, outcome }) if id.get() == "\"fleetmcp-initialize\"" => {
                return match outcome {
                    Ok(result) => serde_json::from_str(result.get())
                        .map_err(|e| OpenFailure::Unavailable(format!("its answer: {e}"))),
                    Err(error) => Err(OpenFailure::Refused(upstream_error(&error))),
                };
            }
            Some(Message::Request { id, method, .. }) if method == "ping" => {
                let _ = link.to_upstream.send(encode_result(&id, &json!({}))).await;
            }
            _ => tracing::debug!("an upstream message before initialize was answered; dropped"),
        }
    }
}

/// The upstream's error object as it sent it (a malformed one becomes `-32603`).
fn upstream_error(error: &RawValue) -> ErrorData {
    serde_json::from_str(error.get())
        .unwrap_or_else(|_| errors::internal("the upstream server sent a malformed error"))
}

/// What a session keeps of its upstream (attached to the session on first use).
#[derive(Default)]
pub(super) struct SessionUpstream {
    link: parking_lot::Mutex<Option<Arc<Link>>>,
    /// Held while a new upstream starts, so concurrent requests start one, not several.
    connecting: tokio::sync::Mutex<()>,
}

impl SessionUpstream {
    /// The session's upstream, if it has one that has not stopped.
    pub(super) fn live(&self) -> Option<Arc<Link>> {
        self.link.lock().as_ref().filter(|l| l.is_alive()).cloned()
    }

    pub(super) fn install(&self, link: Arc<Link>) {
        *self.link.lock() = Some(link);
    }
}

/// The session's upstream, started here now if it has none: a session this instance did not
/// open (recreated, taken over) or whose upstream stopped gets a new one, initialized with
/// what the session stored, counted against `key` (the requesting client's).
pub(super) async fn current(
    app: &impl Host,
    session: &Arc<Session>,
    key: &str,
) -> Result<Arc<Link>, ErrorData> {
    let slot = session
        .attached(SessionUpstream::default)
        .ok_or_else(|| errors::internal("the session has no upstream slot"))?;
    if let Some(link) = slot.live() {
        return Ok(link);
    }
    let _connecting = slot.connecting.lock().await;
    if let Some(link) = slot.live() {
        return Ok(link);
    }
    let upstream = app
        .upstream()
        .ok_or_else(|| errors::internal("this server has no upstream"))?;
    let log = LogId(&session.id).to_string();
    tracing::warn!(
        session = %log,
        "[gateway] starting a new upstream for a session this instance did not start one for (taken over, recreated from the store, or its upstream stopped); it is initialized with the session's stored initialize, and whatever the previous upstream kept in memory (subscriptions, log level, state of its own) is gone"
    );
    let params = json!({
        "protocolVersion": session.version.as_str(),
        "capabilities": session.client_capabilities(),
        "clientInfo": session.client_info(),
    });
    let handshake = Handshake::run(upstream.as_ref(), &log, key, &params, true)
        .await
        .map_err(|f| match f {
            OpenFailure::Unavailable(why) => super::unavailable(&why),
            OpenFailure::Refused(e) => e,
        })?;
    let link = Link::start(app, session, handshake);
    slot.install(link.clone());
    Ok(link)
}

/// A request sent up, waiting for its answer.
struct Waiter {
    answer: oneshot::Sender<Result<Box<RawValue>, Box<RawValue>>>,
    ctx: RequestContext,
    /// Its `_meta.progressToken`: the upstream's progress for it goes on its stream.
    progress: Option<Value>,
}

/// One session's live upstream.
pub(super) struct Link {
    /// Taken (dropped) when the link ends: the [`Upstream`] then stops the upstream.
    to: parking_lot::Mutex<Option<MessageSender>>,
    waiting: parking_lot::Mutex<HashMap<u64, Waiter>>,
    next: AtomicU64,
    ended: CancellationToken,
    /// Requests of the upstream's waiting for the client (see [`MAX_ASKING`]).
    asking: Arc<AtomicUsize>,
    /// What the upstream answered `initialize` with, for a 2024-11-05 client that sends its
    /// `initialize` again (`transport/core/initialize.rs`).
    initialize_result: Value,
    /// When a request waiting for its answer has its client connection ended for SSE polling
    /// ([`Upstream::poll_after`]), in a session whose clients can resume.
    polling: Option<Polling>,
    /// Whether the upstream already sent something that is not JSON-RPC: said once at WARN,
    /// then at debug (an upstream that prints its own logs to stdout would flood the log).
    said_not_json: std::sync::atomic::AtomicBool,
    /// The client's notifications waiting for room in the queue (see [`MAX_NOTIFY_WAITING`]).
    notifying: AtomicUsize,
    /// Whether a notification was already dropped for want of room: said once at WARN.
    said_full: std::sync::atomic::AtomicBool,
}

/// The most requests an upstream may have waiting for the client at once: past it, one is
/// answered with an error at once, so an upstream that floods the client holds no more tasks
/// and no more of the session's memory than this.
const MAX_ASKING: usize = 32;

impl Link {
    /// Starts reading what the upstream sends, until the session leaves this instance or the
    /// upstream stops.
    pub(super) fn start(
        app: &impl Host,
        session: &Arc<Session>,
        handshake: Handshake,
    ) -> Arc<Self> {
        let Handshake {
            link:
                UpstreamLink {
                    to_upstream,
                    from_upstream,
                },
            result: initialize_result,
        } = handshake;
        let link = Arc::new(Self {
            to: parking_lot::Mutex::new(Some(to_upstream)),
            waiting: parking_lot::Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            ended: CancellationToken::new(),
            asking: Arc::new(AtomicUsize::new(0)),
            said_not_json: std::sync::atomic::AtomicBool::new(false),
            notifying: AtomicUsize::new(0),
            said_full: std::sync::atomic::AtomicBool::new(false),
            initialize_result,
            polling: app
                .upstream()
                .and_then(|u| u.poll_after())
                .filter(|_| session.version.wants_priming())
                .map(|after| Polling {
                    after,
                    retry: std::time::Duration::from_millis(app.config().http.sse_retry_ms),
                }),
        });
        tokio::spawn(read(
            app.clone(),
            session.clone(),
            link.clone(),
            from_upstream,
        ));
        link
    }

    /// What the upstream answered `initialize` with.
    pub(super) fn initialize_result(&self) -> &Value {
        &self.initialize_result
    }

    fn is_alive(&self) -> bool {
        !self.ended.is_cancelled()
    }

    /// Ends the link: the upstream's input is dropped (the [`Upstream`] stops it) and every
    /// request still waiting fails.
    fn end(&self) {
        self.ended.cancel();
        drop(self.to.lock().take());
        self.waiting.lock().clear();
    }

    /// Sends one message up, waiting for room (in messages and in bytes); `false` once the
    /// link has ended (then it no longer waits).
    async fn send(&self, message: Bytes) -> bool {
        let Some(tx) = self.to.lock().clone() else {
            return false;
        };
        tokio::select! {
            sent = tx.send(message) => sent.is_ok(),
            _ = self.ended.cancelled() => false,
        }
    }

    /// Sends one message up if the queue has room now; the message back otherwise (`None`
    /// once the link has ended). Never waits, never spawns: a queue whose reader does not read
    /// makes its writer wait or fails it, it does not grow.
    fn try_send(&self, message: Bytes) -> Result<(), Option<Bytes>> {
        let Some(tx) = self.to.lock().clone() else {
            return Err(None);
        };
        match tx.try_send(message) {
            Ok(()) => Ok(()),
            Err(_) if tx.is_closed() => Err(None),
            Err(message) => Err(Some(message)),
        }
    }

    /// A client's notification, passed up unchanged, waiting for room at most
    /// [`NOTIFY_WAIT`] and only while fewer than [`MAX_NOTIFY_WAITING`] others wait; `Err`:
    /// it was not passed (the client is told to retry later).
    pub(super) async fn notify(
        &self,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), ErrorData> {
        let message = match self.try_send(notification_message(method, params)) {
            Ok(()) => return Ok(()),
            Err(None) => return Err(super::unavailable("it stopped")),
            Err(Some(message)) => message,
        };
        let Some(_waiting) = NotifyWaiting::take(&self.notifying) else {
            return Err(not_reading(&format!(
                "{MAX_NOTIFY_WAITING} of this session's notifications wait already"
            )));
        };
        match tokio::time::timeout(NOTIFY_WAIT, self.send(message)).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(super::unavailable("it stopped")),
            Err(_) => Err(not_reading(&format!("no room came within {NOTIFY_WAIT:?}"))),
        }
    }

    /// A client's notification passed up without waiting (see
    /// [`notification`](super::notification)): dropped, and said, when the queue is full.
    pub(super) fn notify_now(&self, session: &Session, method: &str, params: Option<&RawValue>) {
        if let Err(Some(_)) = self.try_send(notification_message(method, params)) {
            if self.said_full.swap(true, Ordering::Relaxed) {
                tracing::debug!(session = %LogId(&session.id), method, "[gateway] the upstream does not read: a client notification was dropped");
            } else {
                tracing::warn!(
                    session = %LogId(&session.id),
                    method,
                    "[gateway] the upstream does not read what its session sends: a client notification (batch, 2024-11-05 or stdio) was dropped, its queue being full (further ones are logged at debug level)"
                );
            }
        }
    }

    /// Sends a client's request up under an id of ours and waits for the upstream's answer,
    /// which is the client's answer unchanged. Dropped before the answer (the client
    /// cancelled, or its connection went away), it cancels the request upstream.
    pub(super) async fn call(
        &self,
        method: String,
        params: Option<Box<RawValue>>,
        ctx: RequestContext,
    ) -> Reply {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let (answer, rx) = oneshot::channel();
        let progress = progress_token(params.as_deref());
        let polled = self.polling.map(|polling| (polling, ctx.clone()));
        self.waiting.lock().insert(
            n,
            Waiter {
                answer,
                ctx,
                progress,
            },
        );
        let mut pending = Pending {
            link: self,
            n,
            armed: true,
        };
        let id = n.to_string();
        let message = match params.as_deref() {
            Some(p) => encode_request(&id, &method, p),
            None => encode_request(&id, &method, &json!({})),
        };
        if !self.send(message).await {
            pending.armed = false;
            self.waiting.lock().remove(&n);
            return Err(super::unavailable("it stopped"));
        }
        let outcome = match polled {
            Some((polling, ctx)) => polling.answer(rx, &ctx).await,
            None => rx.await,
        };
        pending.armed = false;
        match outcome {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(upstream_error(&error)),
            // Not `unavailable`: the request may have had its effect before the upstream
            // stopped, so it is not safe to send again as is.
            Err(_) => Err(errors::internal(
                "The upstream server stopped before answering this request",
            )),
        }
    }

    /// The context of the one request waiting, when exactly one is: what the upstream sends
    /// that names no request (a log line, a request to the client) then goes on its stream,
    /// as it would from a server speaking HTTP itself.
    fn sole_request(&self) -> Option<RequestContext> {
        let waiting = self.waiting.lock();
        if waiting.len() != 1 {
            return None;
        }
        waiting.values().next().map(|w| w.ctx.clone())
    }

    /// Routes one message from the upstream.
    async fn route(self: &Arc<Self>, app: &impl Host, session: &Arc<Session>, bytes: Bytes) {
        let Ok(incoming) = serde_json::from_slice::<Incoming>(&bytes) else {
            if self.said_not_json.swap(true, Ordering::Relaxed) {
                tracing::debug!(session = %LogId(&session.id), "the upstream sent something else that is not a JSON-RPC message; dropped");
            } else {
                tracing::warn!(
                    session = %LogId(&session.id),
                    "the upstream sent something that is not a JSON-RPC message; dropped (further ones are logged at debug level)"
                );
            }
            return;
        };
        let asks = incoming.method.is_some();
        match incoming.classify() {
            Ok(Message::Response { id, outcome }) => self.answered(&id, outcome),
            Ok(Message::Notification { method, params }) => {
                self.notified(app, session, &method, params.as_deref(), bytes)
                    .await;
            }
            Ok(Message::Request { id, method, params }) => {
                self.asked(app, session, id, method, params).await;
            }
            // A request the client cannot be asked (its id is `null` or not a string or an
            // integer): refused back up, so the upstream does not wait for an answer. Waited
            // for: while the refusal cannot be written, the upstream is not read either.
            Err((id, e)) if asks => {
                self.send(encode_error(id.as_deref(), &e)).await;
            }
            Err((_, e)) => tracing::warn!(
                session = %LogId(&session.id),
                error = %e.message,
                "the upstream sent an invalid JSON-RPC message; dropped"
            ),
        }
    }

    /// The upstream answered request `id` of ours.
    fn answered(&self, id: &RawValue, outcome: Result<Box<RawValue>, Box<RawValue>>) {
        // Ours are strings of digits; an upstream that echoes one as a number (`1` for `"1"`)
        // still answers it, rather than leave the client waiting for ever.
        let n = serde_json::from_str::<String>(id.get())
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .or_else(|| id.get().parse::<u64>().ok());
        match n.and_then(|n| self.waiting.lock().remove(&n)) {
            Some(w) => {
                let _ = w.answer.send(outcome);
            }
            None => tracing::debug!(id = id.get(), "an upstream answer nobody waits for"),
        }
    }

    /// A notification from the upstream: progress on the stream of the request whose token it
    /// names; a log line on the stream of the one request running, if one is; anything else
    /// (list changes, resource updates) on the session's standalone stream, in order.
    async fn notified(
        &self,
        app: &impl Host,
        session: &Session,
        method: &str,
        params: Option<&RawValue>,
        bytes: Bytes,
    ) {
        let target = match method {
            "notifications/progress" => {
                let token = params.and_then(|p| {
                    serde_json::from_str::<ProgressParams>(p.get())
                        .ok()
                        .map(|p| p.progress_token)
                });
                let waiting = self.waiting.lock();
                waiting
                    .values()
                    .find(|w| token.is_some() && w.progress == token)
                    .map(|w| w.ctx.clone())
            }
            "notifications/message" => self.sole_request(),
            // The upstream gave up on a request it sent the client: nothing to map it to on the
            // client's side (its id there is ours), and the client's answer is simply dropped.
            "notifications/cancelled" => return,
            _ => None,
        };
        match target {
            // Waits while the request's stream holds its most unstored (the upstream is then
            // not read): an upstream's flood of progress is bounded by what the store takes.
            Some(ctx) => ctx.send_waiting(bytes).await,
            None => {
                if let Err(e) = app
                    .events()
                    .append(&session.id, STANDALONE_STREAM, bytes)
                    .await
                {
                    tracing::warn!(session = %LogId(&session.id), error = %e, "could not queue an upstream notification for the session's stream");
                }
            }
        }
    }

    /// A request from the upstream to the client (sampling, elicitation, roots): asked on the
    /// stream of the one request running if one is, else on the standalone stream; the
    /// client's answer goes back up under the upstream's id. `ping` is answered here. What is
    /// answered here (a `ping`, a refusal past [`MAX_ASKING`]) is waited for: while it cannot
    /// be written, the upstream is not read, so an upstream that asks without reading its
    /// answers is stopped by its own pipe instead of filling our memory (issue 36: a million
    /// `roots/list` queued 999,968 refusals).
    async fn asked(
        self: &Arc<Self>,
        app: &impl Host,
        session: &Arc<Session>,
        id: Box<RawValue>,
        method: String,
        params: Option<Box<RawValue>>,
    ) {
        if method == "ping" {
            self.send(encode_result(&id, &json!({}))).await;
            return;
        }
        if self.asking.fetch_add(1, Ordering::AcqRel) >= MAX_ASKING {
            self.asking.fetch_sub(1, Ordering::AcqRel);
            let e = errors::internal(format!(
                "the upstream has {MAX_ASKING} requests waiting for the client already"
            ));
            self.send(encode_error(Some(&id), &e)).await;
            return;
        }
        let params: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_else(|| json!({}));
        let ctx = self.sole_request();
        let (link, app, session) = (self.clone(), app.clone(), session.clone());
        tokio::spawn(async move {
            let answer = match ctx {
                Some(ctx) => ctx
                    .ask("upstream", &method, params)
                    .await
                    .map_err(client_error),
                None => ask_on_standalone(&app, &session, &method, &params).await,
            };
            let message = match answer {
                Ok(result) => encode_result(&id, &result),
                Err(e) => encode_error(Some(&id), &e),
            };
            link.send(message).await;
            // Only now: a task waiting to send its answer still counts, so at most
            // MAX_ASKING of them wait, whatever the upstream sends.
            link.asking.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// SSE polling on the upstream's behalf: a request's connection is ended once it has been open
/// `after`: first `after` the request went up, then each `retry + after` (the client comes back
/// `retry` after an end, so each connection it opens lives about `after`).
#[derive(Clone, Copy)]
pub(super) struct Polling {
    after: std::time::Duration,
    retry: std::time::Duration,
}

impl Polling {
    /// Waits for an answer, ending the client's connection when due (the request's stream goes
    /// on in the event store; the client resumes it).
    async fn answer<T>(
        self,
        mut rx: oneshot::Receiver<T>,
        ctx: &RequestContext,
    ) -> Result<T, oneshot::error::RecvError> {
        let mut wait = self.after;
        loop {
            tokio::select! {
                outcome = &mut rx => return outcome,
                _ = tokio::time::sleep(wait) => ctx.end_connection_for_polling(),
            }
            wait = self.retry + self.after;
        }
    }
}

/// Asks the client on the session's standalone stream (no request of the client's is running
/// for it to go on), and waits for the answer.
async fn ask_on_standalone(
    app: &impl Host,
    session: &Session,
    method: &str,
    params: &Value,
) -> Result<Value, ErrorData> {
    // As a request's own questions are checked (`RequestContext::ask`): one the client cannot
    // answer is refused now, not left waiting for the reply timeout.
    if let Some(cap) = crate::context::capability_for(method)
        && !crate::stateless::declares(session.client_capabilities(), cap)
    {
        return Err(client_error(ClientRequestError::NotSupported(cap)));
    }
    let (id, rx) = session.expect_client_reply();
    let leaving = session.leaving();
    let queued = app
        .events()
        .append(
            &session.id,
            STANDALONE_STREAM,
            encode_request(&id, method, params),
        )
        .await;
    let outcome = match queued {
        Err(e) => Err(errors::internal(format!(
            "could not send the request to the client: {e}"
        ))),
        Ok(_) => tokio::select! {
            reply = rx => match reply {
                Ok(reply) => reply,
                Err(_) => Err(client_error(ClientRequestError::SessionClosed)),
            },
            _ = leaving.cancelled() => Err(client_error(ClientRequestError::SessionClosed)),
            _ = tokio::time::sleep(CLIENT_REPLY_TIMEOUT) => Err(client_error(ClientRequestError::Timeout(CLIENT_REPLY_TIMEOUT))),
        },
    };
    if outcome.is_err() {
        session.forget_client_request(&id);
    }
    outcome
}

/// What the upstream is answered when the client could not answer its request: the client's
/// own error when it sent one.
fn client_error(e: ClientRequestError) -> ErrorData {
    match e {
        ClientRequestError::Client(e) => e,
        other => errors::internal(other.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressParams {
    progress_token: Value,
}

/// A request's `_meta.progressToken`, if it has one.
fn progress_token(params: Option<&RawValue>) -> Option<Value> {
    #[derive(Deserialize)]
    struct P {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        progress_token: Option<Value>,
    }
    serde_json::from_str::<P>(params?.get())
        .ok()?
        .meta?
        .progress_token
}

/// A request sent up whose answer has not come: dropped while armed (the call was cancelled),
/// it cancels the request upstream.
struct Pending<'a> {
    link: &'a Link,
    n: u64,
    armed: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed && self.link.waiting.lock().remove(&self.n).is_some() {
            // Not waited for (a drop cannot wait) and not given a task of its own (a client
            // that sends and cancels in a loop would make one per request): with the queue
            // full it is not sent. Cancellation is advisory in MCP; its answer, should the
            // upstream send one, finds nobody waiting and is dropped.
            let cancelled = encode_notification(
                "notifications/cancelled",
                &json!({"requestId": self.n.to_string(), "reason": "The client cancelled the request"}),
            );
            if let Err(Some(_)) = self.link.try_send(cancelled) {
                tracing::debug!(
                    request = self.n,
                    "[gateway] the upstream's queue is full: a cancellation was not sent up"
                );
            }
        }
    }
}

/// Reads the upstream until the session leaves this instance or the upstream stops, then ends
/// the link.
async fn read(app: impl Host, session: Arc<Session>, link: Arc<Link>, mut from: MessageReceiver) {
    // The upstream counts as open (`fleetmcp_upstreams_open`) as long as this reads it.
    let _open = app.meters().upstream_opened();
    let leaving = session.leaving();
    loop {
        let message = tokio::select! {
            m = from.recv() => m,
            _ = leaving.cancelled() => {
                tracing::debug!(session = %LogId(&session.id), "the session left this instance; its upstream is stopped");
                break;
            }
        };
        let Some(message) = message else {
            tracing::warn!(session = %LogId(&session.id), "[gateway] the session's upstream stopped; its next request starts a new one");
            break;
        };
        // Routing may wait (an answer up, a notification into the event store): the session
        // leaving ends the wait too, so a stuck upstream does not keep its link.
        tokio::select! {
            () = link.route(&app, &session, message) => {}
            _ = leaving.cancelled() => break,
        }
    }
    link.end();
}

/// A client notification as sent up (no `params`: an empty object).
fn notification_message(method: &str, params: Option<&RawValue>) -> Bytes {
    match params {
        Some(p) => encode_notification(method, p),
        None => encode_notification(method, &json!({})),
    }
}

/// The refusal of a client notification its upstream could not take: `-32000` with a retry
/// delay (`503` with `Retry-After` over HTTP), naming the bound that refused it.
fn not_reading(why: &str) -> ErrorData {
    errors::unavailable(
        format!(
            "The upstream server is not reading what this session sends: its queue is full and {why}; this notification was not delivered: retry shortly"
        ),
        std::time::Duration::from_secs(2),
    )
}

/// A client notification's place among those waiting for room (see [`MAX_NOTIFY_WAITING`]);
/// given back when dropped, also when the client's connection goes away while it waits.
struct NotifyWaiting<'a>(&'a AtomicUsize);

impl<'a> NotifyWaiting<'a> {
    fn take(count: &'a AtomicUsize) -> Option<Self> {
        if count.fetch_add(1, Ordering::AcqRel) >= MAX_NOTIFY_WAITING {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(count))
    }
}

impl Drop for NotifyWaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
