//! `POST /mcp`: one JSON-RPC message (or, in 2025-03-26, a [`super::batch`]).
//!
//! The handler starts from a request checked and located in front of it (`edge.rs`): it parses
//! the body, settles the era once (`era::decide`: 2026-07-28 goes to `stateless.rs`), opens a
//! session for `initialize`, and runs anything else in the session that serves it.
//!
//! A request is answered as JSON when its handler finishes without sending anything first.
//! The moment a handler sends a message (progress, a log line, a request to the client), the
//! answer becomes an SSE stream: events go to the event store and the response tails it, so
//! a broken connection can be resumed with `Last-Event-ID`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use http::{HeaderValue, StatusCode};
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::client_key::Client;
use super::edge::Post;
use super::locate::{self, Asker, Located};
use super::{EndpointState, SESSION_HEADER, batch, era, respond, sse, stateless};
use crate::app::App;
use crate::context::{Caller, Outbound};
use crate::dispatch::{self, Reply};
use crate::events::{Cursor, EventStore, StoredEvent, StreamId, parse_event_id};
use crate::protocol::{Incoming, Message, encode_result, errors};
use crate::session::Session;
use crate::telemetry::labels::{self, Era, Method};
use crate::transport::core::driver::{self, NotRun, Started, Streaming};
use crate::transport::core::initialize;

/// Serves a POST that passed its checks and was located in front of this handler (`edge.rs`):
/// `post.located` is its body, its headers (and their [`RequestHead`](super::request_headers::RequestHead)), and the
/// session that serves it here or why none does (answered once the request's id is known);
/// `post.client` who sent it.
pub(super) async fn handle(State(ep): EndpointState, post: Post) -> Response {
    let app = &ep.app;
    let Post { client, located } = post;
    let Located {
        session,
        head,
        headers,
        body,
    } = located;
    let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let message = if first == Some(b'[') {
        labels::note_method(Method::BATCH);
        None
    } else {
        match one_message(&body) {
            Ok(m) => Some(m),
            Err(bad) => return bad,
        }
    };
    let default = app.config().stateless.default_era;
    let era = match era::decide(default, &head, &headers, message.as_ref()) {
        Ok(era) => era,
        Err(bad) => return bad,
    };
    let Some(message) = message else {
        return Box::pin(batch::serve(app, &body, session, client)).await;
    };
    let sse_ok = head.takes_sse();
    if era == Era::Stateless {
        return Box::pin(stateless::serve(app, &headers, message, sse_ok, client)).await;
    }
    if let Message::Request { method, id, params } = &message
        && method == "initialize"
    {
        // Boxed, as every branch off the held session's call below: a future is as large as
        // its largest state, and axum copies the handler's whole future into its box on every
        // call (issue 23: 4 KiB, 4,000 instructions of `memcpy` a call).
        return Box::pin(open_session(app, id, params.as_deref(), &client)).await;
    }
    let session = match session {
        Ok(s) => s,
        Err(why) => {
            let rid = match &message {
                Message::Request { id, .. } => Some(&**id),
                _ => None,
            };
            return locate::refuse(why, Asker::Post, rid);
        }
    };
    match message {
        Message::Request { id, method, params } => {
            served(&session, &id);
            let caller = Caller::Session(session.clone());
            let started = driver::start(app, caller, client, &id, method, params, sse_ok).await;
            answer(app, session, id, started).await
        }
        Message::Notification { method, params } => {
            // A gateway's session: passed up once its upstream has room, which may take a
            // while (or be refused: `503`, the notification not delivered).
            match crate::upstream::notification_waiting(&session, &method, params.as_deref()).await
            {
                Some(Err(e)) => {
                    return respond::error_reply(StatusCode::SERVICE_UNAVAILABLE, None, &e);
                }
                Some(Ok(())) => {}
                None => dispatch::notification(&session, &method, params.as_deref()),
            }
            respond::accepted()
        }
        Message::Response { id, outcome } => {
            dispatch::client_response(&session, &id, outcome);
            respond::accepted()
        }
    }
}

/// `initialize`: a new session, admitted against the client's limits, its id in the answer's
/// session header.
async fn open_session(
    app: &App,
    id: &RawValue,
    params: Option<&RawValue>,
    client: &Client,
) -> Response {
    if let Err(refused) = driver::admit_initialize(app, &client.key).await {
        return refused.response(id);
    }
    let principal = client.fingerprint();
    match initialize::open(app, None, params, principal, &client.key).await {
        Ok((session, result)) => {
            let mut res = respond::json(StatusCode::OK, encode_result(id, &result));
            if let Ok(v) = HeaderValue::from_str(&session.id) {
                res.headers_mut().insert(SESSION_HEADER, v);
            }
            res
        }
        Err(refused) => refused.response(id),
    }
}

/// A body of one JSON-RPC message, parsed and classified (`400` otherwise), its method noted
/// for the request's metrics.
fn one_message(body: &[u8]) -> Result<Message, Response> {
    // Checked as UTF-8 once, whole, then parsed as text: parsed from bytes, each string and
    // each raw value (the id, the params) is checked again as it is read, each check with its
    // own set-up (issue 40: about 800 instructions a call). A body that is not UTF-8 is parsed
    // from its bytes as before, so it is refused with the same error.
    let parsed = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str::<Incoming>(text),
        Err(_) => serde_json::from_slice::<Incoming>(body),
    };
    let incoming = parsed
        .map_err(|e| respond::rpc_error(StatusCode::BAD_REQUEST, None, &errors::parse_error(e)))?;
    let message = incoming
        .classify()
        .map_err(|(id, e)| respond::rpc_error(StatusCode::BAD_REQUEST, id.as_deref(), &e))?;
    labels::note_method(match &message {
        Message::Request { method, .. } => Method::of(method),
        Message::Notification { .. } => Method::NOTIFICATION,
        Message::Response { .. } => Method::RESPONSE,
    });
    Ok(message)
}

/// For fault-injection histories (`examples/help-desk/tests/faults`): which epoch of its
/// session a request is served at. The id is a credential: only its log id (a digest),
/// computed only when the target is on.
fn served(session: &Session, id: &RawValue) {
    tracing::debug!(
        target: "fleetmcp::served",
        session = %crate::session::LogId(&session.id),
        epoch = session.epoch(),
        request_id = %id.get(),
        "served"
    );
}

/// The answer to a session's request: a JSON answer, or an SSE stream through the event store.
async fn answer(
    app: &App,
    session: Arc<Session>,
    id: Box<RawValue>,
    started: Result<Started, NotRun>,
) -> Response {
    match started {
        Ok(Started::Plain(Some(reply))) => json_answer(&id, reply),
        // Cancelled before it sent anything: an empty stream, as for a cancelled stream.
        Ok(Started::Plain(None)) => sse::response(
            futures_util::stream::empty().boxed(),
            0,
            sse::keepalive_every(&app.config().http),
        ),
        // Boxed: only a request whose handler sends messages streams (see `handle`).
        Ok(Started::Streaming(s)) => Box::pin(stream_answer(app, session, id, s)).await,
        Err(not_run) => not_run.response(app, &id),
    }
}

/// A plain JSON answer.
fn json_answer(id: &serde_json::value::RawValue, reply: Reply) -> Response {
    match reply {
        Err(e) => respond::error_reply(StatusCode::OK, Some(id), &e),
        ok => respond::json(StatusCode::OK, dispatch::encode_reply(id, ok)),
    }
}

/// The answer as an SSE stream: a writer task moves the handler's messages and its final
/// answer into the event store; the response tails the stream, so it can be resumed.
///
/// When the event store fails under it (Redis down), the answer does not wait for events
/// that cannot be stored: from the first failed append on, the writer sends every message,
/// and the final answer, straight to this connection, and the response ends when the writer
/// does. Those messages carry the id of the last event stored (or of the stream's start), so
/// a client whose connection breaks resumes from there: the final answer is stored once the
/// store answers again (see the writer's end), and the resume gets it. The response also ends as soon as
/// it has delivered the final answer, so it never waits for an end marker that may be lost.
/// The direct line is bounded ([`Direct`]): while the client does not read, the writer waits.
async fn stream_answer(
    app: &App,
    session: Arc<Session>,
    id: Box<serde_json::value::RawValue>,
    mut streaming: Streaming,
) -> Response {
    let (direct_tx, direct_rx) = direct(app.config().http.max_unread_bytes);
    let stream = session.next_stream_id();
    let sink = Arc::new(StoredStream {
        events: app.events().clone(),
        session: session.id.clone(),
        stream,
        degraded: CancellationToken::new(),
        direct: Mutex::new(Some(direct_tx)),
        resume_from: Mutex::new(crate::events::stream_start_id(&session.id, stream)),
        last: Arc::new(Mutex::new(None)),
        first: Mutex::new(Some(id.get().into())),
    });
    // The reader claims the stream before anything is written to it, so a polling end sent
    // as the very first message ends this connection and not a reader that does not exist yet.
    let tail = sink.events.tail(
        &sink.session,
        sink.stream,
        Cursor::Start,
        session.closed().child_token(),
    );
    if session.version.wants_priming() {
        sink.append(Bytes::new()).await;
    }
    // Stored before the response starts, so polling cannot race it.
    if let Some(first) = streaming.take_first() {
        sink.forward(first).await;
    }
    let writer = sink.clone();
    // A broken connection does not end the request: its events wait in the store for the
    // client to resume.
    let event_ttl = Duration::from_millis(app.config().sessions.event_ttl_ms);
    tokio::spawn(write_answer(writer, streaming, id, event_ttl));
    let body = Answer {
        tail,
        direct: direct_rx,
        degraded: sink.degraded.clone(),
        last: sink.last.clone(),
        phase: Phase::Tail,
        retry_ms: app.config().http.sse_retry_ms,
        sent_id: None,
    };
    sse::streaming(body.frames(), sse::keepalive_every(&app.config().http))
}

/// The writer of a streamed answer: the request's messages, then its answer, into the store
/// (or straight to the connection once the store failed), then the end marker.
async fn write_answer(
    writer: Arc<StoredStream>,
    streaming: Streaming,
    id: Box<serde_json::value::RawValue>,
    event_ttl: Duration,
) {
    let reply = streaming
        .pump(
            |m| {
                let writer = writer.clone();
                async move {
                    writer.forward(m).await;
                    true
                }
            },
            std::future::pending(),
        )
        .await;
    let mut unstored = None;
    if let Ok(Some(reply)) = reply {
        let answer = dispatch::encode_reply(&id, reply);
        // Known to the response before it can be read back, so the response ends on it.
        *writer.last.lock() = Some(answer.clone());
        writer.append(answer.clone()).await;
        // The store failed under this answer: the connection got it directly, if it is
        // still there; a client whose connection broke resumes from the store, so the
        // answer goes there too, with the end marker. A store with replicas confirms the
        // answer with the end marker in the same way, retried until they take it: appended
        // alone it would be written to the master only, and a failover could drop it while
        // this writer believes it stored (a client resuming then waits for nothing).
        if writer.degraded.is_cancelled() || writer.events.confirms_on_replicas() {
            unstored = Some(answer);
        }
    }
    // No more direct messages: a response that switched to them ends here.
    writer.direct.lock().take();
    mark_complete(&writer, unstored, event_ttl).await;
}

/// The end marker (after the answer, if the store did not take it or must confirm it on its
/// replicas), for readers that resume the stream later: a store that failed, or whose replicas
/// did not confirm, is tried again (0.25 s doubling to [`RETRY_CAP`])
/// while the stream's events live, so a reader that resumes once Redis is back is not left
/// waiting for an answer or an end that never comes.
async fn mark_complete(writer: &StoredStream, unstored: Option<Bytes>, event_ttl: Duration) {
    let mut delay = Duration::from_millis(250);
    let give_up = tokio::time::Instant::now() + event_ttl;
    let events = &writer.events;
    let (session, stream) = (&writer.session, writer.stream);
    while let Err(e) = match &unstored {
        Some(answer) => events.finish(session, stream, answer.clone()).await,
        None => events.close(session, stream).await,
    } {
        if tokio::time::Instant::now() + delay > give_up {
            tracing::warn!(error = %e, "an SSE stream could not be marked complete");
            break;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RETRY_CAP);
    }
}

/// The longest wait between two tries to store a stream's end: a client that resumes once
/// Redis is back waits at most about this long for its answer. (It was 10 s: F11, a resumed
/// stream that carried nothing for longer than its client waited.) Each try is one command,
/// bounded, and only streams whose store failed under them make any.
const RETRY_CAP: Duration = Duration::from_secs(2);

/// Where the response of a streamed answer reads from.
enum Phase {
    /// The event store (the normal case).
    Tail,
    /// The writer's direct messages, once the event store failed.
    Direct,
    /// Finished: the final answer was delivered.
    Done,
}

/// The response side of a streamed answer.
struct Answer {
    tail: BoxStream<'static, StoredEvent>,
    direct: mpsc::Receiver<(StoredEvent, OwnedSemaphorePermit)>,
    degraded: CancellationToken,
    last: Arc<Mutex<Option<Bytes>>>,
    phase: Phase,
    retry_ms: u64,
    /// The last event id this response sent: a direct message repeats no id (an id names one
    /// event), so it carries one only when it differs.
    sent_id: Option<String>,
}

impl Answer {
    fn frames(self) -> BoxStream<'static, Bytes> {
        futures_util::stream::unfold(self, |mut st| async move {
            loop {
                match st.phase {
                    Phase::Tail => tokio::select! {
                        // What the store already delivers goes first.
                        biased;
                        ev = st.tail.next() => {
                            let ev = ev?;
                            if !ev.data.is_empty() && st.last.lock().as_ref() == Some(&ev.data) {
                                st.phase = Phase::Done;
                            }
                            let frame = sse::frame(&ev, st.retry_ms);
                            st.sent_id = Some(ev.id);
                            return Some((frame, st));
                        }
                        _ = st.degraded.cancelled() => st.phase = Phase::Direct,
                    },
                    Phase::Direct => {
                        // Its bytes' permits go back once the frame is handed on.
                        let (ev, _permit) = st.direct.recv().await?;
                        if !later(&ev.id, st.sent_id.as_deref()) {
                            return Some((sse::message_frame(&ev.data), st));
                        }
                        let frame = sse::frame(&ev, st.retry_ms);
                        st.sent_id = Some(ev.id);
                        return Some((frame, st));
                    }
                    Phase::Done => return None,
                }
            }
        })
        .boxed()
    }
}

/// Whether a direct message's `id` (the last event its writer stored, or the stream's start)
/// may be sent as the stream's event id after `sent` (the last one the response sent): only
/// when it names a later event. The tail may have sent an event whose append the writer took
/// for failed (stored, but not confirmed in time by the replicas, as in a failover): the
/// writer's `id` is then older, and sent again it would move the client's resume point back
/// (the Sentinel seed with two replicas saw the stream's start sent after its first event).
/// The message then goes without an id: a client that resumes does so from `sent`.
fn later(id: &str, sent: Option<&str>) -> bool {
    let Some(sent) = sent else { return true };
    match (parse_event_id(id), parse_event_id(sent)) {
        (Some((_, _, seq)), Some((_, _, before))) => seq > before,
        _ => false,
    }
}

/// Messages a streamed answer's direct line holds at most (its bytes: `http.max_unread_bytes`).
const DIRECT_MESSAGES: usize = 256;

/// The writer's end of a streamed answer's direct line (used once the event store failed):
/// bounded in messages ([`DIRECT_MESSAGES`]) and in bytes (`http.max_unread_bytes`), and
/// when full the writer waits. It was unbounded: a handler's flood, with Redis down and a
/// client that did not read, grew it without limit (issue 36, gap 6).
///
/// Waiting rather than ending the connection: with the store down there is nothing to resume
/// from, so a connection ended here would lose every message it holds, and a client that reads
/// slowly but reads would lose its answer's stream for nothing. The wait is bounded by the
/// connection: a client that stops reading has it closed once one write stays blocked
/// `http.write_timeout_ms`, which drops the receiver, and the writer goes on (its final answer
/// to the store, for a resume once the store is back). While it waits, the handler's own
/// messages pile up in its outbox, bounded too (the oldest progress and logs go).
#[derive(Clone)]
struct Direct {
    tx: mpsc::Sender<(StoredEvent, OwnedSemaphorePermit)>,
    /// Permits for the bytes queued: `max_bytes` of them.
    bytes: Arc<Semaphore>,
    max_bytes: u32,
}

/// A direct line holding at most `max_bytes` (and [`DIRECT_MESSAGES`] messages).
fn direct(max_bytes: usize) -> (Direct, mpsc::Receiver<(StoredEvent, OwnedSemaphorePermit)>) {
    let (tx, rx) = mpsc::channel(DIRECT_MESSAGES);
    let max_bytes = u32::try_from(max_bytes).unwrap_or(u32::MAX).max(1);
    let bytes = Arc::new(Semaphore::new(max_bytes as usize));
    let line = Direct {
        tx,
        bytes,
        max_bytes,
    };
    (line, rx)
}

impl Direct {
    /// Queues `ev` once there is room for its bytes (a message larger than the whole bound
    /// waits for an empty line); dropped when the connection is gone. A receiver dropped while
    /// this waits drops what it held, whose permits come back: the wait ends then too.
    async fn send(&self, ev: StoredEvent) {
        let n = u32::try_from(ev.data.len()).map_or(self.max_bytes, |n| n.min(self.max_bytes));
        if let Ok(permit) = self.bytes.clone().acquire_many_owned(n).await {
            let _ = self.tx.send((ev, permit)).await;
        }
    }
}

/// One stream of a session in the event store, as a request's answer writes it.
struct StoredStream {
    events: Arc<dyn EventStore>,
    session: Arc<str>,
    stream: StreamId,
    /// Fires at the first append that fails: from then on messages go to `direct`.
    degraded: CancellationToken,
    /// The connection, for messages the store could not take (`None` once the writer ended).
    direct: Mutex<Option<Direct>>,
    /// The id of the last event stored (the stream's start before any): what a direct
    /// message carries, so that a client that loses it resumes after what was stored.
    resume_from: Mutex<String>,
    /// The final answer, once known: the response ends after delivering it.
    last: Arc<Mutex<Option<Bytes>>>,
    /// The request's raw JSON id, given with the first event (then `None`), so that a reader
    /// elsewhere can answer the request if this process dies before it does.
    first: Mutex<Option<Box<str>>>,
}

impl StoredStream {
    async fn append(&self, data: Bytes) {
        if !self.degraded.is_cancelled() {
            let first = self.first.lock().take();
            let stored = match first {
                Some(request_id) => {
                    self.events
                        .append_first(&self.session, self.stream, &request_id, data.clone())
                        .await
                }
                None => {
                    self.events
                        .append(&self.session, self.stream, data.clone())
                        .await
                }
            };
            match stored {
                Ok(id) => {
                    *self.resume_from.lock() = id;
                    return;
                }
                Err(e) => {
                    tracing::warn!(session = %crate::session::LogId(&self.session), error = %e, "an SSE event could not be stored; the answer continues on its connection, without resumption");
                    self.degraded.cancel();
                }
            }
        }
        // A priming event only serves resumption, which this stream no longer offers.
        let direct = self.direct.lock().clone();
        if !data.is_empty()
            && let Some(direct) = direct
        {
            // The connection may be gone already: then the message is lost (a resume gets
            // the final answer, stored once the store answers again, not the others).
            let id = self.resume_from.lock().clone();
            direct.send(StoredEvent { id, data }).await;
        }
    }

    async fn forward(&self, m: Outbound) {
        match m {
            Outbound::Message(b) => self.append(b).await,
            // Ending the connection asks the client to resume from the store; once the store
            // failed there is nothing to resume from, so the connection stays.
            Outbound::EndConnection if self.degraded.is_cancelled() => {}
            Outbound::EndConnection => self.events.end_reader(&self.session, self.stream).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::later;
    use super::*;

    /// A body parsed as text (`one_message`, when it is UTF-8) reads as it did parsed from its
    /// bytes, a malformed one is refused the same way, and one that is not UTF-8 still gets
    /// the parse error it always got.
    #[tokio::test]
    async fn a_body_parsed_as_text_reads_as_from_its_bytes() {
        let bodies: [&[u8]; 7] = [
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{}}}"#,
            br#"{"jsonrpc":"2.0","id":"a\u00e9","method":"m\u0065","params":[1,"\ud83d\ude00"]}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"caf\u{e9}\"}".as_bytes(),
            br#"{"jsonrpc":"2.0","id":1,"method":"m""#,
            br#"{"jsonrpc":"2.0","id":1,"method":"m\ud800"}"#,
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
            b"\xef\xbb\xbf{}",
        ];
        for body in bodies {
            let as_text = std::str::from_utf8(body).map(serde_json::from_str::<Incoming>);
            let as_bytes = serde_json::from_slice::<Incoming>(body);
            if let Ok(as_text) = as_text {
                assert_eq!(format!("{as_text:?}"), format!("{as_bytes:?}"), "{body:?}");
            }
            let (got, want) = match (one_message(body), as_bytes) {
                (Ok(m), Ok(incoming)) => (
                    format!("{:?}", Ok::<_, ()>(m)),
                    format!("{:?}", incoming.classify().map_err(|_| ())),
                ),
                (Err(res), Err(e)) => {
                    let bytes = axum::body::to_bytes(res.into_body(), 4096).await.unwrap();
                    let want =
                        respond::rpc_error(StatusCode::BAD_REQUEST, None, &errors::parse_error(e));
                    let want = axum::body::to_bytes(want.into_body(), 4096).await.unwrap();
                    (format!("{bytes:?}"), format!("{want:?}"))
                }
                (Ok(_), Err(e)) => panic!("{body:?}: parsed, but from bytes: {e}"),
                (Err(_), Ok(_)) => continue, // parsed, refused when classified: not this test's
            };
            assert_eq!(got, want, "{body:?}");
        }
    }

    #[test]
    fn a_direct_message_never_moves_the_resume_point_back() {
        assert!(later("s-1-0", None), "the first event sent carries its id");
        assert!(later("s-1-9", Some("s-1-5")));
        // The writer's last stored event (or the stream's start) behind what the tail sent.
        assert!(!later("s-1-0", Some("s-1-1883872379021557760")));
        assert!(!later("s-1-5", Some("s-1-5")), "sent already");
        assert!(!later("not an id", Some("s-1-5")));
    }
}
