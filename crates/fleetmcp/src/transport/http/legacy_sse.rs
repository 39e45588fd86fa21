//! The 2024-11-05 HTTP+SSE transport, kept for old clients next to Streamable HTTP:
//! `GET /sse` opens the session's one stream, whose first event names the URL to POST to
//! (`/message?sessionId=<id>`); every answer, notification and server request travels on
//! that stream, and each POST is answered `202`.
//!
//! The session lives as long as its stream: it cannot move to another instance (the stream
//! is tied to this connection), so a POST for it that lands elsewhere goes to the relay seam.
//! That holds for the first POST too, the `initialize`, before any store names a holder: the
//! sealed id names the instance that minted it, the one with the stream
//! (`Sessions::find_pinned`).
//!
//! With authorization on, the stream belongs to the principal that opened it: only that
//! principal may `initialize` its session (the answers go to its stream), and the session is
//! then bound to it like any other, so another caller who learns the id gets `404`.
//!
//! What the stream holds that its client has not read is bounded (`session::Unread`,
//! `http.max_unread_bytes`): a request's messages wait for room, and while the stream is full
//! `/message` refuses new requests `429` rather than pile up their answers.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use http::StatusCode;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::client_key::Client;
use super::edge::Pinned;
use super::locate;
use super::{EndpointState, MESSAGE_PATH, authorize, respond, sse};
use crate::app::App;
use crate::context::{Caller, Outbound};
use crate::dispatch;
use crate::events::{Cursor, STANDALONE_STREAM, StoredEvent};
use crate::protocol::{ErrorData, Incoming, Message, encode_result, errors};
use crate::session::{LegacyStream, Missing, Session, Unread, UnreadFull};
use crate::transport::core::driver::{self, Started};
use crate::transport::core::initialize;

/// Ends the session when its stream's connection goes away, and frees the stream's place in
/// flight.
struct StreamGuard {
    app: App,
    id: Arc<str>,
    /// The stream's end, for what waits on it ([`end_in_a_graceful_stop`]).
    stop: CancellationToken,
    _place: crate::limits::Place,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.stop.cancel();
        // Closed here at once, so a POST that follows finds no session (and no `initialize`
        // can open it again); the shared state goes in the background.
        self.app.sessions().legacy_stream_closed(&self.id);
        self.app.sessions().close(&self.id);
        let app = self.app.clone();
        let id = self.id.clone();
        tokio::spawn(async move { app.sessions().purge(&id).await });
    }
}

/// `GET /sse`: a new session's stream, bound to the caller's principal (if any).
pub(super) async fn open(State(ep): EndpointState, client: Client) -> Response {
    let app = &ep.app;
    // This holder has been absent from Redis as long as others wait before they call its
    // streams gone: they would call this one gone at once (`Sessions::refuse_pinned`).
    if app.sessions().pinned_refused() {
        return respond::unavailable(
            None,
            "This instance cannot reach the session store to hold a new stream; retry shortly",
            1,
        );
    }
    let place = match driver::admit_stream(app, &client.key).await {
        Ok(place) => place,
        Err(refused) => return refused.response_to(None),
    };
    let id: Arc<str> = match initialize::mint(app, crate::session::LEGACY_SSE_PROTOCOL) {
        Ok(id) => id.into(),
        Err(refused) => return refused.response_to(None),
    };
    // Claimed before the endpoint is announced, so nothing posted afterwards is missed.
    // Ends in a graceful stop once the session's running requests answered (the client opens
    // `/sse` again, elsewhere: this transport's sessions cannot move), and when its session
    // ends another way (deleted, expired: `Sessions::end_legacy_stream`), so the client learns
    // it is gone.
    let stop = CancellationToken::new();
    let runs = TaskTracker::new();
    // Cut at `stop` here too: the store's reader sees it only between its reads, and one may
    // wait on a Redis that does not answer for its whole command timeout, while an ended
    // session's stream must end at once (F16: a holder cut off from Redis ends its streams
    // before others call them gone).
    let events = app
        .events()
        .tail(&id, STANDALONE_STREAM, Cursor::Now, stop.clone())
        .take_until(stop.clone().cancelled_owned())
        .boxed();
    let endpoint = Bytes::from(format!(
        "event: endpoint\ndata: {MESSAGE_PATH}?sessionId={id}\n\n"
    ));
    // What its client has not read, bounded in bytes and in messages (half the events a
    // stream's history keeps, the count operators already set for one stream).
    let config = app.config();
    let max_messages = (config.sessions.max_events_per_stream / 2).max(1);
    let unread = Arc::new(Unread::new(config.http.max_unread_bytes, max_messages));
    // The messages and answers of the session's requests reach the stream this way, its
    // direct line (`to_stream`), which ends with it, or, in a graceful stop, once nothing more
    // can come (`direct_end`). Each message on it holds a place of `unread`, so it never holds
    // more than `max_messages`.
    let (line, direct) = tokio::sync::mpsc::channel::<Bytes>(max_messages);
    let direct_end = stop.child_token();
    let stream = LegacyStream {
        line,
        unread: unread.clone(),
        principal: client.fingerprint().map(Arc::from),
        stop: stop.clone(),
        runs: runs.clone(),
    };
    app.sessions().legacy_stream_opened(id.clone(), stream);
    tokio::spawn(end_in_a_graceful_stop(
        app.clone(),
        id.clone(),
        stop.clone(),
        runs,
        direct_end.clone(),
    ));
    let delivered = unread.clone();
    let direct = drained(direct, direct_end).map(move |data| {
        delivered.delivered_direct(data.len());
        sse::message_frame(&data)
    });
    let guard = StreamGuard {
        app: app.clone(),
        id,
        stop,
        _place: place,
    };
    let frames = stream::once(async move { endpoint })
        .chain(stream::select(messages(events, guard), direct.boxed()));
    sse::streaming(frames, sse::keepalive_every(&app.config().http))
}

/// Ends session `id`'s 2024-11-05 stream in a graceful stop: once the server closes and the
/// session's running requests (`runs`) have answered, the stream ends after what was written
/// to it (the event store's reader is cut after the last event stored, and the direct line
/// drained: `direct_end`); when the grace period is over, at once (`stop`). Returns at once
/// when the stream ends another way.
async fn end_in_a_graceful_stop(
    app: App,
    id: Arc<str>,
    stop: CancellationToken,
    runs: TaskTracker,
    direct_end: CancellationToken,
) {
    let phases = app.phases();
    let answered = async {
        phases.closing.cancelled().await;
        // No request starts once this is closed (`post` refuses them).
        runs.close();
        runs.wait().await;
    };
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = phases.shutdown.cancelled() => stop.cancel(),
        _ = answered => {
            app.events().end_reader(&id, STANDALONE_STREAM).await;
            direct_end.cancel();
            // Should the reader not end at its cut, the grace's end still ends the stream.
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = phases.shutdown.cancelled() => stop.cancel(),
            }
        }
    }
}

/// The direct line's messages while the stream is open, then, once it ends (`stop`), those
/// already queued on it.
fn drained(
    line: tokio::sync::mpsc::Receiver<Bytes>,
    stop: CancellationToken,
) -> impl futures_util::Stream<Item = Bytes> {
    stream::unfold((line, stop, false), |(mut line, stop, ended)| async move {
        if !ended {
            tokio::select! {
                biased;
                data = line.recv() => return data.map(|d| (d, (line, stop, false))),
                _ = stop.cancelled() => line.close(),
            }
        }
        let data = line.recv().await?;
        Some((data, (line, stop, true)))
    })
}

/// The messages other parts appended to the session's standalone stream in the event store
/// (notifications), without event ids (this transport has no resumption); the guard lives as
/// long as the stream.
fn messages(
    events: BoxStream<'static, StoredEvent>,
    guard: StreamGuard,
) -> BoxStream<'static, Bytes> {
    events
        .filter(|ev| std::future::ready(!ev.data.is_empty()))
        .map(move |ev| {
            let _alive = &guard;
            sse::message_frame(&ev.data)
        })
        .boxed()
}

/// `POST /message?sessionId=<id>`: one JSON-RPC message; its answer goes to the stream. Its
/// session was located in front of this handler (`edge.rs`), and one held elsewhere answered
/// there.
pub(super) async fn post(State(ep): EndpointState, client: Client, pinned: Pinned) -> Response {
    let app = &ep.app;
    let Pinned { sid, session, body } = pinned;
    let message = match serde_json::from_slice::<Incoming>(&body) {
        Ok(m) => match m.classify() {
            Ok(m) => m,
            Err((rid, e)) => {
                return respond::rpc_error(StatusCode::BAD_REQUEST, rid.as_deref(), &e);
            }
        },
        Err(e) => {
            return respond::rpc_error(StatusCode::BAD_REQUEST, None, &errors::parse_error(e));
        }
    };
    if let Message::Request {
        id: rid,
        method,
        params,
    } = &message
        && method == "initialize"
    {
        return initialize(app, &sid, &session, rid, params.as_deref(), &client).await;
    }
    let session = match session {
        Ok(session) => session,
        // Held here, but the store cannot say so right now (or this instance is full): the
        // session is not gone, so the answer is the session era's `503`, not a `404` that
        // would make the client drop a stream that is still open. An id that does not open,
        // or a session that ended (expired, or gone with the instance that had its stream),
        // gets the session era's answer for it too.
        Err(
            why @ (Missing::StoreUnavailable
            | Missing::Unconfirmed
            | Missing::Full
            | Missing::Invalid
            | Missing::Expired),
        ) => {
            let rid = match &message {
                Message::Request { id, .. } => Some(&**id),
                _ => None,
            };
            return locate::refuse(why, locate::Asker::Post, rid);
        }
        // Not held here: this transport's sessions never move between instances.
        _ => return respond::text(StatusCode::NOT_FOUND, "Session not found"),
    };
    // The client went on from its `initialize`: a second one is no longer its retry.
    session.mark_heard();
    match message {
        Message::Notification { method, params } => {
            dispatch::notification(&session, &method, params.as_deref())
        }
        Message::Response { id, outcome } => dispatch::client_response(&session, &id, outcome),
        Message::Request { id, method, params } => {
            // Refused here, not on the stream, so the POST itself answers `403`.
            let principal = client.principal.as_deref();
            if let Err(scope) = driver::permitted(app, &method, params.as_deref(), principal) {
                return authorize::insufficient_scope(app, Some(&id), &scope);
            }
            // Tracked with the stream, so a graceful stop ends it only once this answered.
            // Once the stop waits for the last ones (or the stream is gone), a new request
            // could not answer on it: refused, for the client to send again elsewhere.
            let Some(runs) = app.sessions().legacy_runs(&sid).filter(|r| !r.is_closed()) else {
                return respond::unavailable(
                    Some(&id),
                    "This instance is stopping; open a new stream and retry",
                    1,
                );
            };
            // Its answer would join those its client has not read: not run.
            let outlet = app.sessions().legacy_outlet(&sid);
            if let Some(full) = outlet.and_then(|o| o.unread.full()) {
                return unread_full(&id, &method, full);
            }
            runs.spawn(run(app.clone(), session, client, id, method, params));
        }
    }
    respond::accepted()
}

/// Runs request `id` (`method` with `params`); its messages and then its answer go to the
/// session's stream, in order.
async fn run(
    app: App,
    session: Arc<Session>,
    client: Client,
    id: Box<RawValue>,
    method: String,
    params: Option<Box<RawValue>>,
) {
    let append = |data: Bytes| {
        let app = app.clone();
        let sid = session.id.clone();
        async move { to_stream(&app, &sid, data).await }
    };
    let emit = |m: Outbound| {
        async move {
            // This transport has no resumption, so no polling end either.
            if let Outbound::Message(b) = m {
                append(b).await;
            }
            true
        }
    };
    let caller = Caller::Session(session.clone());
    let reply = match driver::start(&app, caller, client, &id, method, params, true).await {
        Ok(Started::Plain(reply)) => reply,
        // Refused or forbidden: the error goes to the stream like any answer.
        Err(not_run) => Some(Err(not_run.into_error())),
        // The stream outlives any connection, so only the end of the request ends it.
        Ok(Started::Streaming(s)) => s.pump(emit, std::future::pending()).await.ok().flatten(),
    };
    if let Some(reply) = reply {
        append(dispatch::encode_reply(&id, reply)).await;
    }
}

/// `POST /message`'s refusal of request `id` (`method`) while its stream is `full`: `429`, as
/// for the other bounds on what one session holds (the client's own doing, and only its own
/// session's: nothing another instance could serve, which a `503` would suggest), with
/// `Retry-After` and `-32010` naming the bound.
fn unread_full(id: &RawValue, method: &str, full: UnreadFull) -> Response {
    let retry = std::time::Duration::from_secs(1);
    let error = ErrorData::new(
        errors::RATE_LIMITED,
        format!(
            "Too much unread: this session's /sse stream holds {} bytes its client has not read \
             (http.max_unread_bytes: {}); {method} was not run. Read the stream, then send it again",
            full.unread, full.max_bytes
        ),
        Some(serde_json::json!({
            "limit": "http.max_unread_bytes",
            "max": full.max_bytes,
            "unread": full.unread,
            "retryAfterMs": retry.as_millis() as u64,
        })),
    );
    let res = respond::rpc_error(StatusCode::TOO_MANY_REQUESTS, Some(id), &error);
    respond::with_retry_after(res, errors::retry_after_secs(retry))
}

/// Queues a message on session `sid`'s stream, on its direct line to the connection. Waits
/// first for a place on the stream (`Unread`), however long its client takes to read: the
/// request goes at its client's pace, and the message is dropped only if the stream ends first
/// (nobody could read it).
///
/// Not through the event store: the stream is on this instance (a POST landing elsewhere is
/// relayed here) and this transport has no resumption, so a stored copy would serve no reader
/// but this one. Stored, an answer was a Redis write that no replica confirms: written to a
/// master in the moment before a failover, it was lost with it, and the client waited for it
/// forever (seen in the Sentinel seeds, issue 38). The event store still carries what other
/// parts append to the session's standalone stream (notifications, `App::push_standalone`).
async fn to_stream(app: &App, sid: &str, data: Bytes) {
    let Some(outlet) = app.sessions().legacy_outlet(sid) else {
        tracing::debug!("a message for a closed SSE stream was dropped");
        return;
    };
    let Some(place) = outlet.unread.place(data.len(), &outlet.stop).await else {
        tracing::debug!(
            "a message waiting for its SSE stream's client was dropped: the stream ended"
        );
        return;
    };
    // Never full: every message on the line holds a place, and there are no more places.
    match outlet.line.send(data).await {
        Ok(()) => place.queued(),
        Err(_) => tracing::warn!("a message could not be queued on an SSE session's stream"),
    }
}

/// `initialize` for a stream `GET /sse` opened: the id must be one this deployment minted, for
/// a stream open here, and not yet initialized.
async fn initialize(
    app: &App,
    sid: &str,
    session: &Result<Arc<Session>, Missing>,
    rid: &RawValue,
    params: Option<&RawValue>,
    client: &Client,
) -> Response {
    let principal = client.fingerprint();
    match session {
        // Opened, but the client may not have its answer: a relay that gave up on this
        // instance answered it `503` while the `initialize` ran here. Until the client sends
        // anything else, a second `initialize` is that client's retry, and is answered again.
        Ok(s) if !s.was_heard() => {
            to_stream(app, sid, encode_result(rid, &initialize::result_of(app, s))).await;
            return respond::accepted();
        }
        Ok(_) => {
            return respond::rpc_error(
                StatusCode::BAD_REQUEST,
                Some(rid),
                &errors::invalid_request("Invalid Request: this session is already initialized"),
            );
        }
        // Not ours, or ended: an ended session is never opened again under its old id.
        Err(why @ (Missing::Invalid | Missing::Deleted | Missing::Expired)) => {
            return locate::refuse(*why, locate::Asker::Post, Some(rid));
        }
        // Opened here already, but the store cannot confirm it now: refused like any other
        // message, so the retry finds the session, never a second one in its place.
        Err(why @ (Missing::StoreUnavailable | Missing::Unconfirmed))
            if app.sessions().held_session(sid).is_some() =>
        {
            return locate::refuse(*why, locate::Asker::Post, Some(rid));
        }
        _ => {}
    }
    // Only a stream open here can carry this session's answers. An id whose stream closed, or
    // that another instance's stream (or a Streamable HTTP `initialize`) minted, is refused,
    // even when it opens under our secret and no store remembers it ended.
    if !app.sessions().has_legacy_stream(sid) {
        tracing::warn!(
            "a 2024-11-05 initialize was refused: its /sse stream is not open on this instance"
        );
        return respond::text(StatusCode::NOT_FOUND, "Session not found");
    }
    // Another principal who learned the id must not open it: its answers would go to the
    // stream's principal, and the session would be bound to the intruder. The same answer as an
    // unknown id, so it does not learn more.
    if !app.sessions().legacy_stream_opened_by(sid, principal) {
        tracing::warn!(
            "a 2024-11-05 initialize was refused: its /sse stream was opened by another principal"
        );
        return respond::text(StatusCode::NOT_FOUND, "Session not found");
    }
    match initialize::open(app, Some(sid), params, principal, &client.key).await {
        Ok((session, result)) => {
            // The stream may have closed while the session was opened: it must not outlive it.
            if !app.sessions().has_legacy_stream(sid) {
                app.sessions().end(&session.id).await;
                return respond::text(StatusCode::NOT_FOUND, "Session not found");
            }
            to_stream(app, sid, encode_result(rid, &result)).await;
            respond::accepted()
        }
        Err(refused) => refused.response(rid),
    }
}
