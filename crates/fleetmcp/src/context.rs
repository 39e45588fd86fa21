//! What a handler can do besides returning its result: log, report progress, notice that it
//! was cancelled, and ask the client something (sampling, elicitation, roots). A form the user
//! fills in is typed ([`RequestContext::elicit_form`], [`RequestContext::confirm`]: the schema
//! made in `context/elicit.rs`); the other questions take and give `fleetmcp::model` types.
//!
//! The same handler code serves both eras. In the session era, asking the client sends a real
//! request on the stream of the request that runs the handler, and the answer comes back to
//! the awaiting handler. In the stateless era (2026-07-28) the server may not send requests:
//! asking looks the answer up in the retry's `inputResponses`; when it is not there, the call
//! fails with [`ClientRequestError::InputRequired`], the handler's `?` ends it, and the client
//! gets an `InputRequiredResult` listing what to answer. The client retries, the handler runs
//! again from the top, and this time the answers are there.
//!
//! Messages a handler sends go out on the stream of the request that runs it (the POST's
//! answer, which becomes an SSE stream the moment the first message is sent). They wait in the
//! request's outbox (`context/outbox.rs`), whose queue is made by the first one sent (most calls
//! send none); the driver closes it when the answer is plain, so a message sent later goes to
//! the session's standalone stream, not nowhere.
//!
//! [`RequestContext::call_key`] is the call's stable key: the client's
//! `io.fleetmcp/idempotency-key`, else the session's log id and the request id (set by
//! `transport/core/driver.rs`); in a 2026-07-28 round after the first, the key the first round
//! sealed in the `requestState` (`stateless::Round::key_to_seal`). A handler's
//! `RequestContext` shows it no HTTP, no session store and no other instance.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::auth::Principal;
use crate::limits::{LimitKey, Place};
// rmcp marks sampling and roots deprecated (SEP-2577, 2026-07-28); clients of every era still
// use them, and the session era has no replacement.
#[allow(deprecated)]
use crate::protocol::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ListRootsResult,
};
use crate::protocol::{
    ErrorCode, ErrorData, LogLevel, encode_notification, encode_request, errors,
};
use crate::session::Session;
use crate::stateless::Round;

mod cancellation;
mod elicit;
mod host;
mod outbox;
pub use elicit::Elicited;
pub(crate) use host::Host;
pub(crate) use outbox::{Bounds as OutboxBounds, Outbox, OutboxReceiver};

/// A message on its way to the client, from a running request.
#[derive(Debug)]
pub(crate) enum Outbound {
    Message(Bytes),
    /// Close the HTTP connection without ending the stream (SSE polling); the client resumes
    /// with `Last-Event-ID`.
    EndConnection,
}

/// Who sent the request: a session, a self-describing 2026-07-28 request, or (for a tool
/// running as a background task) the task it became.
#[derive(Clone)]
pub(crate) enum Caller {
    Session(Arc<Session>),
    Stateless(Arc<Round>),
    Task(Arc<TaskCall>),
}

/// A tool call running as a background task.
pub(crate) struct TaskCall {
    pub task_id: String,
    pub meta: crate::stateless::RequestMeta,
    pub running: Arc<crate::tasks::RunningTask>,
}

/// Why a request to the client failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientRequestError {
    /// Session era: the client did not declare the capability (`sampling`, `elicitation`,
    /// `elicitation.url`, `roots`) when it initialized, so it is not asked.
    #[error("the client did not declare the `{0}` capability")]
    NotSupported(&'static str),
    /// The client answered the request with a JSON-RPC error.
    #[error("the client answered with an error: {} ({})", .0.message, .0.code.0)]
    Client(ErrorData),
    /// The handler's request was cancelled (by the client, or the server stopping) while it
    /// waited for the answer.
    #[error("the request was cancelled")]
    Cancelled,
    /// The session ended, or moved to another instance, before the client answered.
    #[error("the session ended before the client answered")]
    SessionClosed,
    /// Session era: the client did not answer within this time (300 s).
    #[error("the client did not answer within {0:?}")]
    Timeout(Duration),
    /// The type given to [`RequestContext::elicit_form`] cannot be an elicitation form (a
    /// flat object of strings, numbers, booleans and enums): a mistake in the server's code,
    /// found before anything is sent. `?` makes it an internal error (`-32603`) naming the
    /// type and the field.
    #[error("{0}")]
    InvalidForm(String),
    /// Stateless era: the answer is not in this round; propagate it with `?`.
    #[error("input required from the client")]
    InputRequired,
    /// Stateless era: the client's answer does not have the shape of the method's result.
    #[error("{}", .0.message)]
    InvalidInput(ErrorData),
    /// Stateless era: the client did not declare the capability in this request, so the
    /// request cannot go on (`-32021` with `data.requiredCapabilities`, as the specification
    /// wants, rather than a failed tool); propagate it with `?`.
    #[error("{}", .0.message)]
    MissingCapability(ErrorData),
}

/// The client capability a request to the client needs (`None`: none).
pub(crate) fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// The `_meta` key under which a client may send its own key for a call (a string of at most
/// [`MAX_IDEMPOTENCY_KEY`] bytes), the same on each retry of it: see
/// [`RequestContext::call_key`].
pub const IDEMPOTENCY_KEY_META: &str = "io.fleetmcp/idempotency-key";
/// The longest key a client may send under [`IDEMPOTENCY_KEY_META`]; with a longer one the
/// call has no key.
pub const MAX_IDEMPOTENCY_KEY: usize = 256;

/// Handed to every tool, resource and prompt handler. Cheap to clone.
///
/// ```
/// use fleetmcp::{LogLevel, NoArgs, tool};
///
/// let slow = tool("slow").handler(|_: NoArgs, ctx| async move {
///     ctx.log(LogLevel::Info, "starting");
///     for step in 1..=3 {
///         if ctx.is_cancelled() {
///             break;
///         }
///         ctx.progress(f64::from(step), Some(3.0), None);
///     }
///     Ok("done")
/// });
/// # drop(slow);
/// ```
#[derive(Clone)]
pub struct RequestContext {
    inner: Arc<Inner>,
}

/// `H`, last so that an `Arc<Inner<App>>` is an `Arc<Inner>` with no new allocation.
struct Inner<H: ?Sized = dyn Host> {
    caller: Caller,
    /// The request's own stream, when its answer may be one (see [`Outbox`]).
    outbox: Option<Outbox>,
    progress_token: Option<Value>,
    /// The request's cancellation token, made when first asked for
    /// ([`RequestContext::cancellation`]): a session's request is entered in its in-flight
    /// table then. `None` once the driver ended the request with no one having asked.
    cancel: std::sync::OnceLock<Option<CancellationToken>>,
    /// The token of a context asked for one after its request ended (a task the handler
    /// spawned): a child of the server's shutdown token, which only the server's stop cancels.
    late: std::sync::OnceLock<CancellationToken>,
    /// Who made the request, when authorization is on.
    principal: Option<Arc<Principal>>,
    /// Numbers the client requests a handler makes without naming them, so that a handler
    /// run again in the next round produces the same keys.
    asked: AtomicUsize,
    /// Set while a tool that escalates runs as a plain request: `escalate` fires it.
    escalation: parking_lot::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// See [`RequestContext::call_key`]: made from `call_key_parts` when first asked.
    call_key: std::sync::OnceLock<Option<Arc<str>>>,
    call_key_parts: Option<CallKeyParts>,
    /// Who the request counts against for the limits (see `transport/http/client_key.rs`).
    limit_key: Option<LimitKey>,
    /// The request's place in flight (`limits.max_inflight_per_key`): a background task the
    /// request starts takes it over ([`RequestContext::take_place`]), so a working task keeps
    /// counting against its caller after the request is answered. Freed by the driver when
    /// the request ends, if no task took it. Held here, in the context's own allocation: a
    /// cell of its own shared with the driver was an allocation per call (issue 40).
    place: parking_lot::Mutex<Option<Place>>,
    app: H,
}

/// What a call's stable key is made of (see [`RequestContext::call_key`]): the request id as
/// received, and the client's own key from `_meta`, if it sent one.
pub(crate) struct CallKeyParts {
    pub raw_id: Arc<str>,
    pub client_key: Option<String>,
}

/// The stable key of a call: the client's own key, scoped to its principal (or, without
/// authorization, to its session), or else, in a session, the session and the request id, as
/// received on every hop. A session id is a credential: only a digest of it goes into the key.
/// A 2026-07-28 round after the first has the key its `requestState` carries, fixed by the
/// exchange's first round (`Round::key_to_seal`).
fn call_key(
    caller: &Caller,
    principal: Option<&Principal>,
    parts: &CallKeyParts,
) -> Option<Arc<str>> {
    let session = match caller {
        Caller::Session(s) => Some(crate::session::LogId(&s.id).to_string()),
        Caller::Stateless(round) if round.sealed_key.is_some() => {
            return round.sealed_key.as_deref().map(Arc::from);
        }
        _ => None,
    };
    let key = match parts.client_key.as_deref() {
        Some(k) => scoped_client_key(k, principal.map(Principal::fingerprint), session.as_deref())?,
        None => format!("s/{}/{}", session?, parts.raw_id),
    };
    Some(key.into())
}

/// The client's own key `k` as a call's key: scoped to the principal's fingerprint
/// `principal`, else to the session's digest `session`, else shared by anonymous stateless
/// callers. `None` for an empty key or one over [`MAX_IDEMPOTENCY_KEY`] bytes.
pub(crate) fn scoped_client_key(
    k: &str,
    principal: Option<&str>,
    session: Option<&str>,
) -> Option<String> {
    if k.is_empty() || k.len() > MAX_IDEMPOTENCY_KEY {
        return None;
    }
    Some(match (principal, session) {
        (Some(p), _) => format!("k/p:{p}/{k}"),
        (None, Some(s)) => format!("k/s:{s}/{k}"),
        (None, None) => format!("k/anonymous/{k}"),
    })
}

/// How long a handler waits for the client to answer a request.
const CLIENT_REPLY_TIMEOUT: Duration = Duration::from_secs(300);

impl RequestContext {
    pub(crate) fn new(
        app: impl Host,
        caller: Caller,
        streams: bool,
        progress_token: Option<Value>,
        cancel: Option<CancellationToken>,
        principal: Option<Arc<Principal>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                caller,
                outbox: streams.then(Outbox::new),
                progress_token,
                // Given (a task's own token), or made when asked for.
                cancel: cancel.map_or_else(std::sync::OnceLock::new, |t| Some(t).into()),
                late: std::sync::OnceLock::new(),
                principal,
                asked: AtomicUsize::new(0),
                escalation: parking_lot::Mutex::new(None),
                call_key: std::sync::OnceLock::new(),
                call_key_parts: None,
                limit_key: None,
                place: parking_lot::Mutex::new(None),
                app,
            }),
        }
    }

    /// The same context with what the call's stable key is made of (set before the handler
    /// sees it). The key itself is made only if a handler asks for it: it costs a SHA-256 of
    /// the session id and two strings, on every call otherwise (issue 23).
    pub(crate) fn with_call_key(mut self, parts: CallKeyParts) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.call_key_parts = Some(parts);
        }
        self
    }

    /// The request counts against `key` and holds `place` in flight (freed by its driver when
    /// it ends: [`RequestContext::take_place`], unless a task took it over first).
    pub(crate) fn with_limits(mut self, key: LimitKey, place: Place) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.limit_key = Some(key);
            *inner.place.get_mut() = Some(place);
        }
        self
    }

    /// Who the request counts against (`None` for a context no request made).
    pub(crate) fn limit_key(&self) -> Option<&LimitKey> {
        self.inner.limit_key.as_ref()
    }

    /// Takes the request's place in flight over (a background task it starts holds it until
    /// the task ends).
    pub(crate) fn take_place(&self) -> Option<Place> {
        self.inner.place.lock().take()
    }

    /// A key naming this call, the same every time the call reaches a handler again, so a tool
    /// can make its effect happen once (remember the key with the effect; on a key seen
    /// before, answer what was done).
    ///
    /// An error answer does not prove that a call had no effect: a server may stop, or lose
    /// its link, after the effect and before the answer. A client that retries a call with
    /// effects should send the same key each time, under `_meta`
    /// [`IDEMPOTENCY_KEY_META`]; the key is then scoped to its principal (with authorization
    /// on), its session, or shared by anonymous stateless clients (so pick a random one, a
    /// UUID). Without one, a session-era call's key is its session (as a digest) and request
    /// id, the same on every instance a request is relayed through; a 2026-07-28 call without
    /// a key has none in its first round.
    ///
    /// A 2026-07-28 multi-round call (an `InputRequiredResult`, then the client's retry with
    /// the answers and the `requestState`) keeps the key of its first round, sealed in the
    /// state (a random one when the client sent none), in every later round. The protocol lets
    /// a client send a round again within the state's lifetime (`stateless.request_state_ttl_ms`),
    /// and a handler past its last question runs again each time: take the effect once per key
    /// (read the key after the last answer), and a round sent again takes none.
    ///
    /// ```no_run
    /// # use fleetmcp::{tool, NoArgs, ToolError};
    /// let t = tool("charge").handler(|_: NoArgs, ctx| async move {
    ///     let key = ctx.call_key().unwrap_or("no key: at most once is not promised");
    ///     Ok::<_, ToolError>(format!("charged once for {key}"))
    /// });
    /// ```
    pub fn call_key(&self) -> Option<&str> {
        let inner = &*self.inner;
        inner
            .call_key
            .get_or_init(|| {
                let parts = inner.call_key_parts.as_ref()?;
                call_key(&inner.caller, inner.principal.as_deref(), parts)
            })
            .as_deref()
    }

    /// Who made the request: the subject, client id, scopes and claims of its verified access
    /// token. `None` when authorization is off (`[auth]`).
    ///
    /// ```no_run
    /// # use fleetmcp::{tool, NoArgs, ToolError};
    /// let t = tool("whoami").handler(|_: NoArgs, ctx| async move {
    ///     let who = ctx.principal().and_then(|p| p.subject()).unwrap_or("anonymous");
    ///     Ok::<_, ToolError>(who.to_string())
    /// });
    /// ```
    pub fn principal(&self) -> Option<&Principal> {
        self.inner.principal.as_deref()
    }

    pub(crate) fn principal_arc(&self) -> Option<Arc<Principal>> {
        self.inner.principal.clone()
    }

    /// The id of the session this request belongs to (session-era clients only; `None` for a
    /// 2026-07-28 client): what
    /// [`ServerHandle::notify_session`](crate::ServerHandle::notify_session) takes to reach the
    /// session later, from outside the handler.
    pub fn session_id(&self) -> Option<&str> {
        match &self.inner.caller {
            Caller::Session(s) => Some(&s.id),
            _ => None,
        }
    }

    /// Whether the request comes from a 2026-07-28 client (no session).
    pub fn is_stateless(&self) -> bool {
        !matches!(self.inner.caller, Caller::Session(_))
    }

    /// The id of the background task this handler runs as, if it does.
    pub fn task_id(&self) -> Option<&str> {
        match &self.inner.caller {
            Caller::Task(t) => Some(&t.task_id),
            _ => None,
        }
    }

    /// The client's declared capabilities (of the session, or of this very request).
    pub fn client_capabilities(&self) -> &Value {
        match &self.inner.caller {
            Caller::Session(s) => s.client_capabilities(),
            Caller::Stateless(r) => &r.meta.client_capabilities,
            Caller::Task(t) => &t.meta.client_capabilities,
        }
    }

    /// What the client said about itself (`clientInfo` of the session's `initialize`, or of
    /// this 2026-07-28 request's `_meta`), if it said anything.
    pub fn client_info(&self) -> Option<&Value> {
        let info = match &self.inner.caller {
            Caller::Session(s) => Some(s.client_info()),
            Caller::Stateless(r) => r.meta.client_info.as_ref(),
            Caller::Task(t) => t.meta.client_info.as_ref(),
        };
        info.filter(|v| !v.is_null())
    }

    /// Whether the client declared a capability (`sampling`, `elicitation`, `roots`): a
    /// `null` one is not declared.
    pub fn client_supports(&self, capability: &str) -> bool {
        crate::stateless::declares(self.client_capabilities(), capability)
    }

    pub(crate) fn caller(&self) -> &Caller {
        &self.inner.caller
    }

    pub(crate) fn arm_escalation(&self, tx: tokio::sync::oneshot::Sender<()>) {
        *self.inner.escalation.lock() = Some(tx);
    }

    /// For a tool declared with `escalates_to_task()`: answer the client now with a background
    /// task, and go on running as that task. Before this call the tool is a plain request (it
    /// can still ask the client through `InputRequiredResult` rounds); without the tasks
    /// extension, or called twice, it does nothing.
    pub fn escalate(&self) {
        if let Some(tx) = self.inner.escalation.lock().take() {
            let _ = tx.send(());
        }
    }

    /// The request's outbox, when its answer may be a stream (for its driver).
    pub(crate) fn outbox(&self) -> Option<&Outbox> {
        self.inner.outbox.as_ref()
    }

    /// [`send`](Self::send), for a sender that can wait (a gateway's upstream reader): first
    /// until the request's outbox has room, and to the standalone stream by awaiting the
    /// append, never a task of its own; so what it sends is bounded by what the driver takes.
    pub(crate) async fn send_waiting(&self, message: Bytes) {
        let unsent = match &self.inner.outbox {
            Some(outbox) => {
                outbox.room(self.bounds()).await;
                match outbox.send(Outbound::Message(message), true, self.bounds()) {
                    Ok(sent) => return self.note_drops(&sent),
                    Err(Outbound::Message(message)) => message,
                    Err(Outbound::EndConnection) => return,
                }
            }
            None => message,
        };
        if let Caller::Session(s) = &self.inner.caller
            && let Err(e) = self
                .inner
                .app
                .events()
                .append(&s.id, crate::events::STANDALONE_STREAM, unsent)
                .await
        {
            tracing::warn!(session = %crate::session::LogId(&s.id), error = %e, "could not queue a message for the session's stream");
        }
    }

    /// Sends a progress or log notification: past the outbox's bound the oldest of these are
    /// dropped, counted (see [`Outbox`]).
    pub(crate) fn send(&self, message: Bytes) {
        self.send_as(message, true);
    }

    /// Sends a message that must not be dropped (a request to the client, a notification other
    /// than progress or a log line).
    fn send_kept(&self, message: Bytes) {
        self.send_as(message, false);
    }

    fn send_as(&self, message: Bytes, droppable: bool) {
        let bounds = self.bounds();
        let unsent = match &self.inner.outbox {
            Some(outbox) => match outbox.send(Outbound::Message(message), droppable, bounds) {
                Ok(sent) => return self.note_drops(&sent),
                Err(Outbound::Message(message)) => message,
                // Not what was sent: nothing to pass on.
                Err(Outbound::EndConnection) => return,
            },
            None => message,
        };
        // No request stream (a batch, or the request already answered): use the session's
        // standalone stream so the message is not silently lost.
        if let Caller::Session(s) = &self.inner.caller {
            self.inner.app.push_standalone(s, unsent);
        }
    }

    /// The bounds of this request's outbox.
    fn bounds(&self) -> OutboxBounds {
        let http = &self.inner.app.config().http;
        OutboxBounds {
            messages: http.max_outbox_messages,
            bytes: http.max_outbox_bytes,
        }
    }

    /// Counts notifications the outbox dropped; the first of a request are logged at WARN
    /// (the total at debug when the outbox goes), so a flood does not flood the log too.
    fn note_drops(&self, sent: &outbox::Sent) {
        if sent.dropped == 0 {
            return;
        }
        self.inner.app.meters().outbox_dropped(sent.dropped);
        if sent.first_drops {
            let http = &self.inner.app.config().http;
            tracing::warn!(
                session = self
                    .session_id()
                    .map(|id| crate::session::LogId(id).to_string()),
                max_messages = http.max_outbox_messages,
                max_bytes = http.max_outbox_bytes,
                "a request sent progress or log notifications faster than its stream took them: \
                 the oldest queued are dropped (http.max_outbox_messages, http.max_outbox_bytes)"
            );
        }
    }

    /// Sends `notifications/message` if the client asked for this level: the session's
    /// `logging/setLevel`, or in 2026-07-28 this request's `_meta` log level (without one,
    /// nothing is sent).
    pub fn log(&self, level: LogLevel, data: impl Serialize) {
        let min = match &self.inner.caller {
            Caller::Session(s) => Some(s.log_level()),
            Caller::Stateless(r) => r.meta.log_level,
            Caller::Task(t) => t.meta.log_level,
        };
        if min.is_none_or(|min| level < min) {
            return;
        }
        let data = serde_json::to_value(data).unwrap_or(Value::Null);
        self.send(encode_notification(
            "notifications/message",
            &json!({"level": level.as_str(), "data": data}),
        ));
    }

    /// Sends `notifications/progress` when the request carried a `progressToken`.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.inner.progress_token else {
            return;
        };
        let mut params = json!({"progressToken": token, "progress": progress});
        if let Some(t) = total {
            params["total"] = json!(t);
        }
        if let Some(m) = message {
            params["message"] = json!(m);
        }
        self.send(encode_notification("notifications/progress", &params));
    }

    /// Ends the current HTTP connection of this request's SSE stream without ending the
    /// stream: the client reconnects with `Last-Event-ID` after the `retry` delay and
    /// receives the rest (SSE polling, 2025-11-25). No effect in the stateless era.
    pub fn end_connection_for_polling(&self) {
        if let (Some(outbox), Caller::Session(_)) = (&self.inner.outbox, &self.inner.caller) {
            let _ = outbox.send(Outbound::EndConnection, false, self.bounds());
        }
    }

    /// Asks the client `method` with `params`, under `key`: the key names the question in a
    /// 2026-07-28 `InputRequiredResult` (unique within the request, stable across rounds).
    pub async fn ask(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientRequestError> {
        let mut answers = self
            .ask_all(vec![(key.to_string(), method.to_string(), params)])
            .await?;
        answers.pop().ok_or(ClientRequestError::InputRequired)
    }

    /// Asks several questions at once: in the session era they go to the client together;
    /// in the stateless era every unanswered one is listed in the same `InputRequiredResult`.
    /// Answers come back in the order asked.
    pub async fn ask_all(
        &self,
        questions: Vec<(String, String, Value)>,
    ) -> Result<Vec<Value>, ClientRequestError> {
        for (_, method, params) in &questions {
            self.check_capability(method, params)?;
        }
        match &self.inner.caller {
            Caller::Stateless(round) => {
                let mut answers = Vec::with_capacity(questions.len());
                let mut missing = false;
                for (key, method, params) in &questions {
                    match round
                        .answer(key, method, params)
                        .map_err(ClientRequestError::InvalidInput)?
                    {
                        Some(a) => answers.push(a),
                        None => missing = true,
                    }
                }
                if missing {
                    Err(ClientRequestError::InputRequired)
                } else {
                    Ok(answers)
                }
            }
            Caller::Session(session) => {
                let asks = questions
                    .into_iter()
                    .map(|(_, method, params)| self.request_client(session, method, params));
                futures_util::future::try_join_all(asks).await
            }
            Caller::Task(task) => {
                // The task parks in `input_required` until `tasks/update` answers every question.
                let waits = self
                    .inner
                    .app
                    .tasks()
                    .park(&task.task_id, &task.running, questions)
                    .await;
                tokio::select! {
                    answers = futures_util::future::try_join_all(waits) => {
                        answers.map_err(|_| ClientRequestError::Cancelled)
                    }
                    _ = self.cancellation().cancelled() => Err(ClientRequestError::Cancelled),
                }
            }
        }
    }

    fn check_capability(&self, method: &str, params: &Value) -> Result<(), ClientRequestError> {
        let Some(cap) = capability_for(method) else {
            return Ok(());
        };
        let url = method == "elicitation/create"
            && params.get("mode").and_then(Value::as_str) == Some("url");
        let missing = if !self.client_supports(cap) {
            cap
        } else if url
            && self
                .client_capabilities()
                .pointer("/elicitation/url")
                .is_none_or(Value::is_null)
        {
            "elicitation.url"
        } else {
            return Ok(());
        };
        if self.is_stateless() {
            let required = match missing {
                "elicitation.url" => json!({"elicitation": {"url": {}}}),
                cap => json!({ cap: {} }),
            };
            return Err(ClientRequestError::MissingCapability(ErrorData::new(
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                format!("Missing required client capability: {missing}"),
                Some(json!({"requiredCapabilities": required})),
            )));
        }
        Err(ClientRequestError::NotSupported(missing))
    }

    async fn request_client(
        &self,
        session: &Session,
        method: String,
        params: Value,
    ) -> Result<Value, ClientRequestError> {
        let (id, rx) = session.expect_client_reply();
        // The client answers whichever instance holds the session: once it moved, the answer
        // cannot come here.
        let leaving = session.leaving();
        self.send_kept(encode_request(&id, &method, &params));
        let outcome = tokio::select! {
            reply = rx => match reply {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(ClientRequestError::Client(e)),
                Err(_) => Err(ClientRequestError::SessionClosed),
            },
            _ = self.cancellation().cancelled() => Err(ClientRequestError::Cancelled),
            _ = leaving.cancelled() => Err(ClientRequestError::SessionClosed),
            _ = tokio::time::sleep(CLIENT_REPLY_TIMEOUT) => Err(ClientRequestError::Timeout(CLIENT_REPLY_TIMEOUT)),
        };
        if outcome.is_err() {
            session.forget_client_request(&id);
        }
        outcome
    }

    fn auto_key(&self, prefix: &str) -> String {
        let n = self.inner.asked.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{prefix}-{n}")
    }

    /// `sampling/createMessage`: asks the client's model for a completion.
    ///
    /// ```no_run
    /// # #![allow(deprecated)]
    /// # use fleetmcp::RequestContext;
    /// use fleetmcp::model::{CreateMessageRequestParams, SamplingMessage};
    /// # async fn run(ctx: RequestContext) -> Result<(), fleetmcp::ToolError> {
    /// let params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text("Hi")], 100);
    /// let answer = ctx.create_message(params).await?;
    /// println!("{:?}", answer.message.content);
    /// # Ok(()) }
    /// ```
    #[allow(deprecated)] // see the import
    pub async fn create_message(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, ClientRequestError> {
        let key = self.auto_key("sampling");
        self.ask_typed(&key, "sampling/createMessage", &params)
            .await
    }

    /// `elicitation/create` with rmcp's params and answer: asks the user for input through
    /// the client, in form mode (`message` and `requestedSchema`) or URL mode (2025-11-25,
    /// only if the client declared `elicitation.url`). For a form,
    /// [`elicit_form`](Self::elicit_form) makes the schema from a Rust type and gives the
    /// answer as one, and [`confirm`](Self::confirm) asks a yes or no; they say how each era
    /// waits for the answer, and when it fails.
    ///
    /// ```no_run
    /// # use fleetmcp::RequestContext;
    /// use fleetmcp::model::ElicitRequestParams;
    /// # async fn run(ctx: RequestContext) -> Result<(), fleetmcp::ToolError> {
    /// let url = serde_json::json!({"mode": "url", "message": "Sign in to the bank",
    ///     "elicitationId": "link-1", "url": "https://bank.example/link"});
    /// let params: ElicitRequestParams = serde_json::from_value(url)?;
    /// let answer = ctx.elicit(params).await?;
    /// println!("{:?}", answer.action);
    /// # Ok(()) }
    /// ```
    pub async fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> Result<ElicitResult, ClientRequestError> {
        let key = self.auto_key("elicitation");
        self.ask_typed(&key, "elicitation/create", &params).await
    }

    /// `roots/list`: the client's roots.
    #[allow(deprecated)] // see the import
    pub async fn list_roots(&self) -> Result<ListRootsResult, ClientRequestError> {
        let key = self.auto_key("roots");
        self.ask_typed(&key, "roots/list", &json!({})).await
    }

    /// [`RequestContext::ask`] with typed params and answer. An answer that does not have
    /// the shape of `R` is [`ClientRequestError::InvalidInput`].
    async fn ask_typed<P: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        method: &str,
        params: &P,
    ) -> Result<R, ClientRequestError> {
        let params = serde_json::to_value(params).map_err(|e| {
            ClientRequestError::InvalidInput(errors::internal(format!(
                "the {method} params could not be serialised: {e}"
            )))
        })?;
        let answer = self.ask(key, method, params).await?;
        serde_json::from_value(answer).map_err(|e| {
            ClientRequestError::InvalidInput(errors::invalid_params(format!(
                "Invalid params: the client's answer is not a valid {method} result: {e}"
            )))
        })
    }

    /// `notifications/elicitation/complete` (session era): tells the client that the
    /// out-of-band (URL mode) interaction `elicitation_id` finished.
    pub fn elicitation_complete(&self, elicitation_id: &str) {
        if matches!(self.inner.caller, Caller::Session(_)) {
            self.send_kept(encode_notification(
                "notifications/elicitation/complete",
                &json!({"elicitationId": elicitation_id}),
            ));
        }
    }
}
