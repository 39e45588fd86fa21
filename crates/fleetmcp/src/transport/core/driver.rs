//! The one request driver: runs a dispatched request with a context whose messages (progress,
//! logs, requests to the client) come back on a channel, and tells its caller whether the answer
//! is plain (the handler finished without sending anything first) or a stream, which the caller
//! then pumps into its sink (the event store, the 2024-11-05 stream, or the connection).
//!
//! It also keeps a session's count of running requests (to refuse a request past
//! `limits.max_inflight_per_session`) and its in-flight table (for `notifications/cancelled`:
//! an entry made only when the request's token is asked for), applies the limits of the
//! request's key (`limits/`: rate, per tool, in flight per key), and drops the handler at its
//! next `.await` when the request is cancelled. A handler that panics is answered `-32603` by
//! dispatch.
//!
//! Every request any era runs passes here, through [`start`] (a POST of either era, an item of a
//! batch, a 2024-11-05 message alike), and only on the instance that serves it: a relayed
//! request is counted by its session's holder, never by the instance that relayed it.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Client, Status, scope_error};
use crate::app::App;
use crate::auth::Principal;
use crate::config::RateLimit;
use crate::context::{CallKeyParts, Caller, Outbound, Outbox, RequestContext};
use crate::dispatch::{self, Reply};
use crate::limits::{Exceeded, LimitKey, Place, Refusal};
use crate::protocol::{ErrorData, errors};
use crate::session::Session;
use crate::telemetry::Limit;

/// How a request that runs is answered. `None` as a reply: it was cancelled, so nothing
/// answers it.
pub(in crate::transport) enum Started {
    /// It finished without sending anything first: a plain answer.
    Plain(Option<Reply>),
    /// It sent a message before finishing: the answer is a stream.
    Streaming(Streaming),
}

/// Why a request did not run; nothing else is affected. Every route answers it one of two ways:
/// with a whole answer where the request is the HTTP request (`http/refused.rs`), with
/// [`NotRun::into_error`] where it is not (an item of a batch, a message on the 2024-11-05
/// stream, a stdio line).
pub(in crate::transport) enum NotRun {
    /// A limit refused it (its session's requests in flight, its key's rate, its tool's rate,
    /// its key's requests in flight), or the shared counters did not answer.
    Refused(Refused),
    /// Authorization is on and the caller's token lacks this scope.
    Forbidden(String),
}

impl NotRun {
    /// The JSON-RPC error alone, where the HTTP status is not the request's own.
    pub fn into_error(self) -> ErrorData {
        match self {
            NotRun::Refused(r) => r.error,
            NotRun::Forbidden(scope) => scope_error(&scope),
        }
    }
}

/// Whether `principal` may call `method` with `params`: with authorization on, its token must
/// grant the scope the tool, resource or prompt declares, or a gateway's upstream names (the
/// scope missing otherwise).
pub(in crate::transport) fn permitted(
    app: &App,
    method: &str,
    params: Option<&RawValue>,
    principal: Option<&Principal>,
) -> Result<(), String> {
    if app.auth().is_none() {
        return Ok(());
    }
    let Some(scope) = dispatch::scope_for(app, method, params) else {
        return Ok(());
    };
    match principal {
        Some(p) if p.has_scope(&scope) => Ok(()),
        _ => Err(scope),
    }
}

/// How long a client refused by an in-flight limit should wait before it retries.
const BUSY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A request the core refused (a limit, or an `initialize` it could not open): its JSON-RPC
/// error, and what an HTTP answer adds to it (`http/refused.rs` writes that answer).
pub(in crate::transport) struct Refused {
    pub error: ErrorData,
    /// `Retry-After`, in seconds (rounded up, at least 1), when a retry may succeed.
    pub retry_after_s: Option<u64>,
    /// `TooManyRequests` over a limit; `Unavailable` when the counters could not be read.
    pub status: Status,
    /// The rate that refused it, as a quota policy (`RateLimit-Policy` and `RateLimit`); none
    /// for a limit on what a caller holds at once (in flight, sessions), which is no quota over
    /// a window.
    pub policy: Option<(&'static str, RateLimit)>,
}

impl Refused {
    /// `error`, answered with `status`.
    pub fn new(status: Status, error: ErrorData) -> Self {
        Self {
            error,
            retry_after_s: None,
            status,
            policy: None,
        }
    }

    /// The same, to be retried after `seconds`.
    pub fn retry_after(self, seconds: u64) -> Self {
        Self {
            retry_after_s: Some(seconds),
            ..self
        }
    }

    fn over(retry_after: Duration, data: Value) -> Self {
        Self {
            error: errors::rate_limited(retry_after, data),
            retry_after_s: Some(errors::retry_after_secs(retry_after)),
            status: Status::TooManyRequests,
            policy: None,
        }
    }

    fn from_limits(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Over { which, retry_after } => {
                let policy = match &which {
                    Exceeded::Rate(r) => Some(("rate", *r)),
                    Exceeded::Tool(_, r) => Some(("toolRate", *r)),
                    Exceeded::InflightPerKey(_) | Exceeded::SessionsPerKey(_) => None,
                };
                Self {
                    policy,
                    ..Self::over(retry_after, which.describe())
                }
            }
            Refusal::StoreUnavailable => Self {
                error: errors::rate_limit_store_unavailable(),
                retry_after_s: Some(1),
                status: Status::Unavailable,
                policy: None,
            },
        }
    }
}

/// Counts a refusal in `fleetmcp_limit_rejections_total`, by the limit that refused.
fn count_refusal(app: &App, refusal: &Refusal) {
    let limit = match refusal {
        Refusal::Over { which, .. } => match which {
            Exceeded::Rate(_) => Limit::Rate,
            Exceeded::Tool(..) => Limit::ToolRate,
            Exceeded::InflightPerKey(_) => Limit::InflightPerKey,
            Exceeded::SessionsPerKey(_) => Limit::SessionsPerKey,
        },
        Refusal::StoreUnavailable => Limit::CountersUnavailable,
    };
    app.meters().limit_rejected(limit);
}

/// Counts `initialize`, which opens a session rather than running in one, against `key`'s
/// rate like any other request (and against nothing else: it holds no place in flight once
/// answered).
pub(in crate::transport) async fn admit_initialize(
    app: &App,
    key: &LimitKey,
) -> Result<(), Refused> {
    match app.limits().admit(key, None).await {
        Ok(_slot) => Ok(()),
        Err(refusal) => {
            tracing::debug!(key = key.as_str(), refusal = ?refusal, "refused an initialize over a limit");
            count_refusal(app, &refusal);
            Err(Refused::from_limits(refusal))
        }
    }
}

/// Counts a stream that is no request of a session (`GET /sse`) against `key`'s rate and
/// in-flight limits like any request: the place it returns is held for the stream's life, so
/// one client cannot keep more streams open than `limits.max_inflight_per_key`.
pub(in crate::transport) async fn admit_stream(
    app: &App,
    key: &LimitKey,
) -> Result<Place, Refused> {
    app.limits().admit(key, None).await.map_err(|refusal| {
        tracing::debug!(key = key.as_str(), refusal = ?refusal, "refused a stream over a limit");
        count_refusal(app, &refusal);
        Refused::from_limits(refusal)
    })
}

/// The refusal of an `initialize` a per-key session limit refused (`429` with `Retry-After`,
/// or `503` when the shared counters could not be read and `limits.on_store_error` is
/// `closed`), counted.
pub(in crate::transport) fn refuse_initialize(app: &App, refusal: Refusal) -> Refused {
    count_refusal(app, &refusal);
    Refused::from_limits(refusal)
}

/// A request that answers as a stream: its first message, the rest, and its reply to come.
pub(in crate::transport) struct Streaming {
    first: Option<Outbound>,
    rest: crate::context::OutboxReceiver,
    work: Work,
    cancel: CancellationToken,
}

enum Work {
    Running(BoxFuture<'static, Option<Reply>>),
    Done(Option<Reply>),
}

/// The client went away while the answer streamed; the request was cancelled.
pub(in crate::transport) struct Gone;

/// Starts request `id` (`method` with `params`) that `client` sent, for `caller`, and waits
/// until it either finishes or sends its first message: the one place where any route's
/// request (a POST of either era, a batch's item, a 2024-11-05 message) becomes a running call.
/// `streams`: whether the answer may be a stream; without one, messages go to the session's
/// standalone stream and the answer is always plain.
pub(in crate::transport) async fn start(
    app: &App,
    caller: Caller,
    client: Client,
    id: &RawValue,
    method: String,
    params: Option<Box<RawValue>>,
    streams: bool,
) -> Result<Started, NotRun> {
    let Client { principal, key } = client;
    permitted(app, &method, params.as_deref(), principal.as_deref()).map_err(NotRun::Forbidden)?;
    let admitted = in_flight(app, &caller, &method).map_err(NotRun::Refused)?;
    // After the session's own limit, so a request it refuses spends none of the key's rate.
    let tool = (method == "tools/call" && app.limits().limits_tools())
        .then(|| tool_name(params.as_deref()))
        .flatten();
    // Boxed, and only with limits on: a limit store's check (a Redis call) is large, and
    // every request's future would hold room for it, copied whenever the future moves into a
    // box (issue 23).
    let admitted_by_limits = if app.limits().is_on() {
        Box::pin(app.limits().admit(&key, tool.as_deref())).await
    } else {
        Ok(Place::none())
    };
    let place = match admitted_by_limits {
        Ok(place) => place,
        Err(refusal) => {
            tracing::debug!(key = key.as_str(), method, refusal = ?refusal, "refused a request over a limit");
            count_refusal(app, &refusal);
            return Err(NotRun::Refused(Refused::from_limits(refusal)));
        }
    };
    let meta = meta_of(params.as_deref());
    let limit_key = key;
    let key = CallKeyParts {
        // Also the key the session's in-flight table enters it under, if it is entered.
        raw_id: Arc::from(id.get()),
        client_key: meta.idempotency_key,
    };
    // Its token made only when asked for (see `Session::enter_request`).
    let ctx = RequestContext::new(
        app.clone(),
        caller,
        streams,
        meta.progress_token,
        None,
        principal,
    )
    .with_call_key(key)
    // Held by the context, so a background task the request starts can take the place over;
    // the request's end (`Ending`) frees it, if nothing took it.
    .with_limits(limit_key, place);
    // The driver's hold on the request's outbox (none when the answer cannot be a stream): it
    // closes the outbox however this ends, unless the answer streams from it.
    let hold = OutboxHold(streams.then(|| ctx.clone()));
    // The request's token is read through a copy of its context, not a copy of the token:
    // copying or dropping a token takes its lock, a context's copy is one reference count of
    // the request's own (issue 40). The same copy ends the request in its session.
    let ending = admitted.running(ctx.clone());
    // The request leaves its session's count (and in-flight table) however the handler ends:
    // finished, cancelled, or dropped with its connection. Its work is made inside the block:
    // made outside, the block would hold it twice, as a captured value and in the `select!`.
    let running: BoxFuture<'static, Option<Reply>> = async move {
        let ending = ending;
        let work = std::pin::pin!(dispatch::request(method, params, ctx));
        unless_cancelled(&ending.ctx, work).await
    }
    .boxed();
    Ok(settle(running, &hold).await)
}

/// What [`unless_cancelled`] watches: whether it fired, asked before each poll without making
/// anything, and the token to wait on, made when the work first waits.
trait Cancellation {
    fn cancelled_yet(&self) -> bool;
    fn token(&self) -> &CancellationToken;
}

impl Cancellation for RequestContext {
    fn cancelled_yet(&self) -> bool {
        RequestContext::cancelled_yet(self)
    }
    fn token(&self) -> &CancellationToken {
        self.cancellation()
    }
}

impl Cancellation for CancellationToken {
    fn cancelled_yet(&self) -> bool {
        self.is_cancelled()
    }
    fn token(&self) -> &CancellationToken {
        self
    }
}

/// `work`'s output, or `None` once `cancel` fires: checked before every poll of `work`, which
/// is dropped at once then (a `select!` biased to the token, as this was, answers the same).
/// The token is asked for, and its waiter registered, only when `work` waits: a handler that
/// finishes in its first poll (most) makes no token, enters no in-flight table (issue 40), and
/// takes no lock of a token's waiter list. `work` comes pinned where its caller holds it:
/// taken by value, it would be held twice in this future (as the argument and as the pinned
/// local), and the request's boxed future would grow by its size.
async fn unless_cancelled<C: Cancellation, F: Future>(
    cancel: &C,
    mut work: std::pin::Pin<&mut F>,
) -> Option<F::Output> {
    // Made, and polled, only once `work` waits: a waiter joins the token's list when polled.
    let mut waiting = std::pin::pin!(None);
    std::future::poll_fn(|cx| {
        if cancel.cancelled_yet() {
            return Poll::Ready(None);
        }
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        if waiting.is_none() {
            waiting.set(Some(cancel.token().cancelled()));
        }
        // Fired between the check and now: the work is dropped as it would be at its next poll.
        match waiting.as_mut().as_pin_mut() {
            Some(fired) => fired.poll(cx).map(|()| None),
            None => Poll::Pending,
        }
    })
    .await
}

/// Waits until the request finishes or sends its first message (see [`start`]): a plain answer,
/// or a stream of what it sent so far and what is to come. Without an outbox (no stream to
/// answer on), the answer is plain.
async fn settle(mut running: BoxFuture<'static, Option<Reply>>, hold: &OutboxHold) -> Started {
    let Some((ctx, outbox)) = hold.get() else {
        return Started::Plain(running.await);
    };
    // The stream's copy of the request's token, made only for a stream.
    let cancel = || ctx.cancellation().clone();
    tokio::select! {
        biased;
        reply = &mut running => match outbox.take() {
            // It finished but sent something first: the answer must be a stream.
            Some(mut rest) => Started::Streaming(Streaming { first: rest.try_recv(), rest, work: Work::Done(reply), cancel: cancel() }),
            None => Started::Plain(reply),
        },
        () = outbox.sent() => match outbox.take() {
            Some(mut rest) => Started::Streaming(Streaming { first: rest.try_recv(), rest, work: Work::Running(running), cancel: cancel() }),
            // Not reached: only the driver takes the receiver, once.
            None => Started::Plain(running.await),
        },
    }
}

/// A request's context kept by its driver for the outbox: closes it when dropped (see
/// [`Outbox::close`]).
struct OutboxHold(Option<RequestContext>);

impl OutboxHold {
    /// The request's context and its outbox, when its answer may be a stream.
    fn get(&self) -> Option<(&RequestContext, &Outbox)> {
        let ctx = self.0.as_ref()?;
        Some((ctx, ctx.outbox()?))
    }
}

impl Drop for OutboxHold {
    fn drop(&mut self) {
        if let Some((_, outbox)) = self.get() {
            outbox.close();
        }
    }
}

/// Counts a session's request among those it runs (refused past
/// `limits.max_inflight_per_session`); it is entered in the session's in-flight table only if
/// its token is made (see `Session::enter_request`). A request of no session is cancelled with
/// the server only.
fn in_flight(app: &App, caller: &Caller, method: &str) -> Result<Admitted, Refused> {
    let Caller::Session(s) = caller else {
        return Ok(Admitted(None));
    };
    let max = app.config().limits.max_inflight_per_session;
    if s.admit_request(max) {
        return Ok(Admitted(Some(s.clone())));
    }
    tracing::warn!(
        session = %crate::session::LogId(&s.id),
        method,
        max,
        "refused a request: its session already runs the most requests allowed"
    );
    app.meters().limit_rejected(Limit::InflightPerSession);
    Err(Refused::over(
        BUSY_RETRY_AFTER,
        json!({"limit": "inflightPerSession", "maxInflightPerSession": max}),
    ))
}

/// A request counted in its session ([`Session::admit_request`]) before it has a context:
/// uncounted when dropped (a limit refused it, or its connection went while the limits were
/// asked).
struct Admitted(Option<Arc<Session>>);

impl Admitted {
    /// Hands the count on to the request's context (see [`Ending`]).
    fn running(mut self, ctx: RequestContext) -> Ending {
        Ending {
            session: self.0.take(),
            ctx,
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.end_request(None);
        }
    }
}

/// A running request: when dropped, however it ended, its place in flight is freed (unless a
/// task took it over), its session uncounts it, and takes it out of its in-flight table if it
/// was entered there (its token made: [`RequestContext::end_token`]).
struct Ending {
    session: Option<Arc<Session>>,
    ctx: RequestContext,
}

impl Drop for Ending {
    fn drop(&mut self) {
        drop(self.ctx.take_place());
        if let Some(s) = &self.session {
            let entered = self.ctx.end_token();
            s.end_request(self.ctx.raw_id().filter(|_| entered));
        }
    }
}

impl Streaming {
    /// The first message, for a caller that must handle it before the stream is handed on;
    /// [`Streaming::pump`] then passes only the rest.
    pub fn take_first(&mut self) -> Option<Outbound> {
        self.first.take()
    }

    /// Passes every message to `emit` in order, then returns the reply. When `emit` answers
    /// `false`, or `gone` completes while the handler is still running (the client went away),
    /// the request is cancelled.
    pub async fn pump<F, Fut>(
        self,
        mut emit: F,
        gone: impl Future<Output = ()>,
    ) -> Result<Option<Reply>, Gone>
    where
        F: FnMut(Outbound) -> Fut,
        Fut: Future<Output = bool>,
    {
        let Streaming {
            first,
            mut rest,
            work,
            cancel,
        } = self;
        let gone_now = |cancel: &CancellationToken| {
            cancel.cancel();
            Err(Gone)
        };
        if let Some(first) = first
            && !emit(first).await
        {
            return gone_now(&cancel);
        }
        let reply = match work {
            Work::Done(reply) => reply,
            Work::Running(mut running) => {
                let mut open = true;
                let mut client_gone = std::pin::pin!(gone);
                loop {
                    tokio::select! {
                        biased;
                        m = rest.recv(), if open => match m {
                            Some(m) => if !emit(m).await { return gone_now(&cancel); },
                            None => open = false,
                        },
                        reply = &mut running => break reply,
                        _ = &mut client_gone => return gone_now(&cancel),
                    }
                }
            }
        };
        while let Some(m) = rest.try_recv() {
            if !emit(m).await {
                return gone_now(&cancel);
            }
        }
        Ok(reply)
    }
}

/// A `tools/call`'s tool name, read without parsing the rest of the params (borrowed from them
/// unless it holds an escape).
fn tool_name(params: Option<&RawValue>) -> Option<Cow<'_, str>> {
    #[derive(Deserialize)]
    struct P<'a> {
        #[serde(borrow)]
        name: Cow<'a, str>,
    }
    serde_json::from_str::<P>(params?.get())
        .ok()
        .map(|p| p.name)
}

/// What a handler's context takes from `params._meta`, read without parsing the rest of the
/// params: the progress token, and the client's key for the call
/// ([`crate::context::IDEMPOTENCY_KEY_META`]).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    progress_token: Option<Value>,
    #[serde(rename = "io.fleetmcp/idempotency-key")]
    idempotency_key: Option<String>,
}

fn meta_of(params: Option<&RawValue>) -> Meta {
    #[derive(Deserialize)]
    struct P {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    params
        .filter(|p| may_name_meta(p.get().as_bytes()))
        .and_then(|p| serde_json::from_str::<P>(p.get()).ok())
        .and_then(|p| p.meta)
        .unwrap_or_default()
}

/// Whether params could have a `_meta` key: they name it, or they hold an escape, which could
/// spell it (`"\u005fmeta"`). Most calls carry no `_meta`, and this vectorised search for
/// `_` and `\` costs a tenth of parsing the params to find that out (issue 23: 900
/// instructions a call).
fn may_name_meta(params: &[u8]) -> bool {
    memchr::memchr2_iter(b'_', b'\\', params).any(|i| {
        params
            .get(i..)
            .is_some_and(|rest| rest.starts_with(b"\\") || rest.starts_with(b"_meta"))
    })
}

#[cfg(test)]
mod meta_tests {
    use super::*;

    fn meta(params: &str) -> Meta {
        let raw = RawValue::from_string(params.to_string()).expect("JSON");
        meta_of(Some(&raw))
    }

    /// The search before the parse finds every `_meta`, an escaped key's too, and skips
    /// params without one.
    #[test]
    fn meta_is_read_however_its_key_is_spelled() {
        let plain = meta(r#"{"name":"t","_meta":{"progressToken":7}}"#);
        assert_eq!(plain.progress_token, Some(serde_json::json!(7)));
        let escaped = meta(r#"{"name":"t","\u005fmeta":{"progressToken":"p"}}"#);
        assert_eq!(escaped.progress_token, Some(serde_json::json!("p")));
        let none = meta(r#"{"name":"find_tickets","arguments":{"q":"meta"}}"#);
        assert!(none.progress_token.is_none() && none.idempotency_key.is_none());
        assert!(!may_name_meta(br#"{"name":"find_tickets","arguments":{}}"#));
    }
}

#[cfg(test)]
mod cancel_tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A request cancelled before it runs is never polled; one cancelled while it waits is
    /// dropped; one that finishes first is answered.
    #[tokio::test]
    async fn the_token_is_checked_before_the_work_and_while_it_waits() {
        let token = CancellationToken::new();
        token.cancel();
        let polled = AtomicBool::new(false);
        let work = async {
            polled.store(true, Ordering::Relaxed);
        };
        assert!(
            unless_cancelled(&token, std::pin::pin!(work))
                .await
                .is_none()
        );
        assert!(
            !polled.load(Ordering::Relaxed),
            "polled after its cancellation"
        );

        let token = CancellationToken::new();
        let fire = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            fire.cancel();
        });
        let mut pending = std::pin::pin!(std::future::pending::<()>());
        let waits = unless_cancelled(&token, pending.as_mut());
        let out = tokio::time::timeout(Duration::from_secs(5), waits).await;
        assert!(
            matches!(out, Ok(None)),
            "a waiting request ends with its token"
        );

        let token = CancellationToken::new();
        assert_eq!(
            unless_cancelled(&token, std::pin::pin!(async { 7 })).await,
            Some(7)
        );
    }
}
