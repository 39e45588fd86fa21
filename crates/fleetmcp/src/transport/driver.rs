//! The one request driver: runs a dispatched request with a context whose messages (progress,
//! logs, requests to the client) come back on a channel, and tells its caller whether the answer
//! is plain (the handler finished without sending anything first) or a stream, which the caller
//! then pumps into its sink (the event store, the 2024-11-05 stream, or the connection).
//!
//! It also keeps a session's in-flight table (for `notifications/cancelled`, and to refuse a
//! request past `http.max_inflight_per_session`) and drops the handler at its next `.await`
//! when the request is cancelled. A handler that panics is answered `-32603` by dispatch.

use crate::telemetry::{Limit, scope};
use std::future::Future;
use std::sync::Arc;

use axum::response::Response;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::reply;
use crate::app::App;
use crate::context::{Caller, Outbound, RequestContext};
use crate::dispatch::{self, Reply};
use crate::protocol::{ErrorData, errors};
use crate::session::Session;

/// One JSON-RPC request to run.
pub(super) struct Call {
    pub id: Box<RawValue>,
    pub method: String,
    pub params: Option<Box<RawValue>>,
}

/// How a request is answered. `None` as a reply: it was cancelled, so nothing answers it.
pub(super) enum Started {
    /// It finished without sending anything first: a plain answer.
    Plain(Option<Reply>),
    /// It sent a message before finishing: the answer is a stream.
    Streaming(Streaming),
    /// It did not run: its session already runs `http.max_inflight_per_session` requests.
    /// The error ([`busy_response`] for HTTP) names the limit; nothing else is affected.
    Busy(ErrorData),
}

/// How long a client refused by the in-flight limit should wait before it retries.
const BUSY_RETRY_AFTER_S: u64 = 1;

/// The HTTP answer of a request refused by the in-flight limit: `429` (the deployment
/// contract's rate-limit answer), with `Retry-After`. `429` rather than `503`: the server is
/// fine, this one session asks for too much at once, and a load balancer must not take a `503`
/// as a sign that the instance is unhealthy.
pub(super) fn busy_response(id: &RawValue, e: &ErrorData) -> Response {
    reply::with_retry_after(
        reply::rpc_error(StatusCode::TOO_MANY_REQUESTS, Some(id), e),
        BUSY_RETRY_AFTER_S,
    )
}

/// A request that answers as a stream: its first message, the rest, and its reply to come.
pub(super) struct Streaming {
    first: Option<Outbound>,
    rest: mpsc::UnboundedReceiver<Outbound>,
    work: Work,
    cancel: CancellationToken,
}

enum Work {
    Running(BoxFuture<'static, Option<Reply>>),
    Done(Option<Reply>),
}

/// The client went away while the answer streamed; the request was cancelled.
pub(super) struct Gone;

/// Starts `call` for `caller` and waits until it either finishes or sends its first message.
/// `streams`: whether the answer may be a stream; without one, messages go to the session's
/// standalone stream and the answer is always plain.
pub(super) async fn start(app: &App, caller: Caller, call: Call, streams: bool) -> Started {
    let Call { id, method, params } = call;
    scope::note_method(scope::Method::of(&method));
    let raw_id = id.get().to_string();
    let (cancel, tracked) = match &caller {
        Caller::Session(s) => {
            let max = app.config().http.max_inflight_per_session;
            match s.track_request(&raw_id, max) {
                Some(token) => (token, Some(Tracked(s.clone(), raw_id))),
                None => {
                    tracing::warn!(
                        session = %s.id,
                        method,
                        max,
                        "refused a request: its session already runs the most requests allowed"
                    );
                    app.meters().limit_rejected(Limit::InflightPerSession);
                    return Started::Busy(errors::rate_limited(
                        BUSY_RETRY_AFTER_S,
                        json!({"maxInflightPerSession": max}),
                    ));
                }
            }
        }
        _ => (app.shutdown().child_token(), None),
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let ctx = RequestContext::new(
        app.clone(),
        caller,
        streams.then_some(tx),
        progress_token(params.as_deref()),
        cancel.clone(),
    );
    let work = dispatch::request(method, params, ctx);
    let stop = cancel.clone();
    // The request leaves the session's in-flight table however the handler ends: finished,
    // cancelled, or dropped with its connection.
    let mut running: BoxFuture<'static, Option<Reply>> = async move {
        let _tracked = tracked;
        tokio::select! {
            biased;
            _ = stop.cancelled() => None,
            r = work => Some(r),
        }
    }
    .boxed();
    tokio::select! {
        biased;
        reply = &mut running => match rx.try_recv() {
            // It finished but sent something first: the answer must be a stream.
            Ok(first) => Started::Streaming(Streaming { first: Some(first), rest: rx, work: Work::Done(reply), cancel }),
            Err(_) => Started::Plain(reply),
        },
        Some(first) = rx.recv() => Started::Streaming(Streaming { first: Some(first), rest: rx, work: Work::Running(running), cancel }),
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
        while let Ok(m) = rest.try_recv() {
            if !emit(m).await {
                return gone_now(&cancel);
            }
        }
        Ok(reply)
    }
}

/// Runs `call` to its end, passing its messages to `emit`; the reply, `None` if cancelled.
pub(super) async fn run<F, Fut>(app: &App, caller: Caller, call: Call, emit: F) -> Option<Reply>
where
    F: FnMut(Outbound) -> Fut,
    Fut: Future<Output = bool>,
{
    match start(app, caller, call, true).await {
        Started::Plain(reply) => reply,
        Started::Busy(e) => Some(Err(e)),
        // The stream outlives any connection, so only the end of the request ends it.
        Started::Streaming(s) => s.pump(emit, std::future::pending()).await.ok().flatten(),
    }
}

/// Removes a request from its session's in-flight table when dropped.
struct Tracked(Arc<Session>, String);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.finish_request(&self.1);
    }
}

/// `params._meta.progressToken`, read without parsing the rest of the params.
fn progress_token(params: Option<&RawValue>) -> Option<Value> {
    #[derive(Deserialize)]
    struct P {
        #[serde(rename = "_meta")]
        meta: Option<M>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct M {
        progress_token: Option<Value>,
    }
    let p: P = serde_json::from_str(params?.get()).ok()?;
    p.meta?.progress_token
}
