//! A relayed answer on its way to the client: its first event awaited for a streamed answer
//! (F14: a client with no event id has nothing to resume from), then the holder's body piece by
//! piece, ended when the holder stops sending.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::OwnedSemaphorePermit;

use super::super::beat::read_beat;
use super::pool::InUse;
use super::{Silence, describe};
use crate::redis_conn::RedisConn;

/// The next piece of a relayed answer's body (its trailers, which an HTTP/1.1 holder never
/// sends, are not passed on).
async fn next_data(upstream: &mut Incoming) -> Option<Result<Bytes, hyper::Error>> {
    loop {
        match upstream.frame().await? {
            Ok(frame) => match frame.into_data() {
                Ok(data) => return Some(Ok(data)),
                Err(_trailers) => continue,
            },
            Err(e) => return Some(Err(e)),
        }
    }
}

/// Reads a relayed streamed answer up to the end of its first event (or its end, if it ends
/// before one: the holder's own answer, passed on as it is), judging the holder's silence as
/// the rest of the answer is judged. What was read is returned, to be sent first. `Err` says
/// why no event came: the link broke, or the holder stopped sending.
pub(super) async fn first_event(upstream: &mut Incoming, watch: &Watch) -> Result<Bytes, String> {
    let mut read = bytes::BytesMut::new();
    let mut wait = watch.silence.limit;
    loop {
        match tokio::time::timeout(wait, next_data(upstream)).await {
            Ok(Some(Ok(chunk))) => {
                read.extend_from_slice(&chunk);
                if holds_an_event(&read) {
                    return Ok(read.freeze());
                }
                wait = watch.silence.limit;
            }
            Ok(Some(Err(e))) => {
                return Err(format!(
                    "the link broke before the relayed stream's first event: {}",
                    describe(&e)
                ));
            }
            Ok(None) => return Ok(read.freeze()),
            Err(_) if watch.stalled().await => {
                return Err(format!(
                    "it sent no event for {} ms",
                    watch.silence.limit.as_millis()
                ));
            }
            Err(_) => wait = watch.silence.recheck,
        }
    }
}

/// Whether `sse` holds a whole event: a block ended by a blank line with a field in it (a
/// keep-alive comment, a line that starts with `:`, is none).
fn holds_an_event(sse: &[u8]) -> bool {
    let mut field = false;
    for line in sse.split(|&b| b == b'\n') {
        // A line the chunk has not finished yet is the last piece; it ends nothing.
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if field {
                return true;
            }
        } else if line[0] != b':' {
            field = true;
        }
    }
    false
}

/// What a relayed answer's body needs to judge its holder's silence.
pub(super) struct Watch {
    pub redis: RedisConn,
    /// Where holders' heartbeats are kept (the holder's key is made only when it is read).
    pub heartbeat_prefix: std::sync::Arc<str>,
    pub holder: String,
    pub silence: Silence,
    /// The relayed request's place in flight (`ha.relay_max_connections`).
    pub _place: OwnedSemaphorePermit,
}

impl Watch {
    /// Whether the holder, silent for the limit (or a recheck since), no longer sends: it missed
    /// a keep-alive, or its heartbeat is gone. A heartbeat that cannot be read (Redis does not
    /// answer) proves nothing, and the stream goes on. Owns what it reads, so that the body
    /// can keep it between polls.
    fn stalled(&self) -> Pin<Box<dyn Future<Output = bool> + Send>> {
        if self.silence.keepalive < self.silence.limit {
            return Box::pin(std::future::ready(true));
        }
        let redis = self.redis.clone();
        let key = format!("{}{}", self.heartbeat_prefix, self.holder);
        Box::pin(async move { matches!(read_beat(&redis, &key).await, Ok(None)) })
    }

    /// Says in the log that the holder stopped sending under a relayed answer, and `then`.
    fn log_stalled(&self, then: &str) {
        tracing::warn!(
            owner_node_id = %self.holder,
            "[HA] Relay to session owner failed: it sent nothing for {} ms; {then}",
            self.silence.limit.as_millis()
        );
    }
}

/// A relayed answer's body as the client gets it: `first` (what was read of it already, see
/// [`first_event`]), then the holder's body piece by piece as it comes, ended when the holder
/// stops sending (see [`Silence`]) and, for a GET, when this instance closes (`closing`).
///
/// Written out rather than made of stream adapters because it runs once per relayed call: its
/// size is the holder's (so a JSON answer goes on with its `Content-Length`, not chunked), and
/// a timer runs only while the holder's body has nothing ready (a JSON answer is usually whole
/// when its head is read, and then no timer is made at all); the timer is made once and reset.
///
/// An SSE answer (`sse`) whose link to the holder breaks ends cleanly, as one that went silent
/// does: its events are in the shared event store, and the client resumes it with
/// `Last-Event-ID` (an event cut in half is not dispatched: SSE drops an unfinished event at the
/// end of the stream). Cut off instead, the client sees a broken response, which it need not
/// resume. Any other answer's broken body stays broken: it cannot be resumed, and ending it
/// cleanly would pass a truncated JSON body off as whole.
pub(super) struct Answer {
    first: Option<Bytes>,
    upstream: Incoming,
    /// The connection `upstream` comes on, given back for the next request once `upstream`
    /// has ended (dropped with the answer if it does not: the connection closes).
    conn: Option<InUse>,
    watch: Watch,
    sse: bool,
    closing: Option<Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>>,
    /// The silence timer, made the first time the holder's body has nothing ready.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether `timer` runs for the current wait (it is disarmed by every piece that comes).
    armed: bool,
    /// The current wait: the limit, then, once the holder was found still alive, the recheck.
    wait: Duration,
    /// The look at the holder's heartbeat after a silence, while it runs.
    stalled: Option<Pin<Box<dyn Future<Output = bool> + Send>>>,
    done: bool,
}

impl Answer {
    /// `first` read already, then `upstream` (on `conn`), watched by `watch`; `closing` ends it
    /// (a GET's).
    pub(super) fn new(
        first: Option<Bytes>,
        upstream: Incoming,
        conn: InUse,
        watch: Watch,
        sse: bool,
        closing: Option<Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>>,
    ) -> Self {
        let wait = watch.silence.limit;
        let mut answer = Self {
            first,
            upstream,
            conn: Some(conn),
            watch,
            sse,
            closing,
            timer: None,
            armed: false,
            wait,
            stalled: None,
            done: false,
        };
        // A body with nothing (left) to read (a `202`, or all read for the first event) may
        // never be polled: the server sees its end from `is_end_stream`.
        answer.give_back_if_ended();
        answer
    }

    /// Gives the connection back once the holder's body has ended. Checked after every piece:
    /// the server stops polling a body whose `is_end_stream` says it is done (a JSON answer's
    /// last piece, by its `Content-Length`), so its end may never be polled.
    fn give_back_if_ended(&mut self) {
        if self.upstream.is_end_stream()
            && let Some(conn) = self.conn.take()
        {
            conn.give_back();
        }
    }
}

impl http_body::Body for Answer {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(first))));
        }
        if let Some(closing) = &mut this.closing
            && closing.as_mut().poll(cx).is_ready()
        {
            this.done = true;
            return Poll::Ready(None);
        }
        loop {
            match Pin::new(&mut this.upstream).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    this.armed = false;
                    this.wait = this.watch.silence.limit;
                    this.give_back_if_ended();
                    if frame.is_data() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    // Trailers (which an HTTP/1.1 holder never sends) are not passed on.
                }
                Poll::Ready(Some(Err(e))) if this.sse => {
                    tracing::warn!(
                        owner_node_id = %this.watch.holder,
                        error = %e,
                        "[HA] Relay to session owner failed: the link broke under a relayed stream; it ends, and the client resumes it"
                    );
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    if let Some(conn) = this.conn.take() {
                        conn.give_back();
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => break,
            }
        }
        // Nothing ready: the holder is silent, for how long is judged here.
        loop {
            if let Some(stalled) = &mut this.stalled {
                if !ready!(stalled.as_mut().poll(cx)) {
                    this.stalled = None;
                    this.wait = this.watch.silence.recheck;
                    continue;
                }
                this.stalled = None;
                this.watch
                    .log_stalled("the relayed stream ends, and the client resumes it");
                this.done = true;
                return Poll::Ready(None);
            }
            let deadline = tokio::time::Instant::now() + this.wait;
            let timer = this
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if !this.armed {
                timer.as_mut().reset(deadline);
                this.armed = true;
            }
            ready!(timer.as_mut().poll(cx));
            this.armed = false;
            this.stalled = Some(this.watch.stalled());
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || (self.first.is_none() && self.upstream.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let hint = self.upstream.size_hint();
        let Some(first) = &self.first else {
            return hint;
        };
        let n = first.len() as u64;
        let mut sum = http_body::SizeHint::new();
        if let Some(upper) = hint.upper() {
            sum.set_upper(upper.saturating_add(n));
        }
        sum.set_lower(hint.lower().saturating_add(n));
        sum
    }
}
