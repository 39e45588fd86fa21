//! Serving connections: the accept loop, the bounds on every connection, the connection cap,
//! and the graceful drain.
//!
//! `axum::serve` runs hyper without a timer, so a client that sends half a request line, stops
//! in the middle of a body, sits idle, or stops reading holds its connection (and a file
//! descriptor) for ever, until accept fails with "Too many open files" and `/healthz` goes
//! silent. Here each connection is served with hyper's HTTP/1.1 builder (what `axum::serve`
//! served with axum's default features; hyper-util's `auto` builder would add h2c, a new surface)
//! and bounded by:
//!
//! - **the request head**: a connection that has had no request in flight for
//!   `header_read_timeout_ms` (a new one that has not sent a whole head yet, or a kept-alive one
//!   between requests) is closed at once, as hyper's `header_read_timeout` would close it (hyper
//!   starts that timer whenever it waits for a head: on a new connection and again after each
//!   answer, hyper 1.12 `proto/h1/conn.rs` `poll_read_head`). Hyper's own timer is kept only
//!   over the cap: under it, hyper armed a timer (a boxed `Sleep`, a clock read, an entry in
//!   the runtime's timer wheel and its removal) for every request and asked for one more read
//!   after each head; the connection's task bounds the head with one timer re-armed only when
//!   it fires ([`idle_for`]), as it bounds idleness (issue 40);
//! - **the request body**: [`DeadlineBody`], a deadline on the whole body counted from the head
//!   (a per-frame timeout, as `tower_http`'s, lets a client trickle one byte at a time for
//!   ever); the body read answers `408` (`transport/http/checks.rs`);
//! - **idleness**: no request in flight for `idle_timeout_ms` starts a graceful close. As the
//!   header timer runs between requests too, an idle connection closes after the smaller of the
//!   two; this one is the bound an operator sets for keep-alive (below the header timeout, it
//!   closes idle connections sooner than a slow head would be cut);
//! - **a client that stops reading** (an SSE stream nobody drains): [`WriteDeadline`] fails the
//!   connection when one write stays blocked for `write_timeout_ms`. The kernel's socket buffers
//!   absorb a stalled reader's first megabytes, so a stream that sends only keep-alive comments
//!   is caught only once they fill; what it costs until then is one socket and one task;
//! - **the number of connections** (`max_connections`, a semaphore as in mini-redis: the
//!   instance's [`Connections`] budget, which the relay's sockets to other instances take
//!   places from too, so relayed requests count twice, as the descriptors they hold). Past it,
//!   a small reserve ([`HEALTH_RESERVE`]) of connections answers `/healthz` and
//!   `/readyz` as usual and anything else `503`, one request each with a short head wait, so a
//!   load balancer still sees the instance alive while its MCP side is saturated; past the
//!   reserve a connection is closed as soon as it is accepted, which frees its descriptor at
//!   once. Both are logged at most every [`LOG_EVERY`].
//!
//! A graceful stop ([`crate::app::Phases`]) never drops a request a load balancer already sent: while
//! draining, answers carry `Connection: close` and idle connections are left for the client to
//! close; when closing, the accept queue is served before the listener closes, and a
//! connection is closed only once its request (or its first one, if it has not sent it yet) is
//! answered and it has then stayed idle for a moment (a stream the stop ends went out without
//! `Connection: close`, and the balancer may send its next request on that connection at once).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Body as AxumBody;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::task::TaskTracker;

use super::when_woken::WhenWoken;
use super::write_deadline::WriteDeadline;
use crate::app::Phases;
use crate::config::HttpConfig;
use crate::limits::Connections;
use crate::transport::Routes;

/// Connections past `max_connections` that may still ask `/healthz` and `/readyz`: enough for
/// a few load balancers probing at once, small enough to cost nothing.
pub(super) const HEALTH_RESERVE: usize = 16;
/// The longest an over-the-cap connection may take to send its head: a health probe sends it
/// at once, and the reserve must not be held by stalled clients for long.
const OVERFLOW_HEAD_WAIT: Duration = Duration::from_secs(2);
/// Over the cap, or failing to accept, is logged at most this often (a flood would flood the
/// log too).
const LOG_EVERY: Duration = Duration::from_secs(10);
/// Descriptors left for what is not a connection (Redis, the listener, files, the reserve).
const FD_HEADROOM: usize = 64;

/// The bounds on each connection, from `[http]`, and the connection budget.
pub(super) struct ConnectionBounds {
    header: Duration,
    body: Duration,
    idle: Duration,
    write: Duration,
    connections: Connections,
}

impl ConnectionBounds {
    pub(super) fn from_config(h: &HttpConfig, connections: Connections) -> Self {
        Self {
            header: Duration::from_millis(h.header_read_timeout_ms),
            body: Duration::from_millis(h.body_read_timeout_ms),
            idle: Duration::from_millis(h.idle_timeout_ms),
            write: Duration::from_millis(h.write_timeout_ms),
            connections,
        }
    }
}

/// The instance's connection budget: `http.max_connections`, fitted to the open-files limit.
/// Made once per server, before the relay (which takes places from it) and the listener.
pub(super) fn connection_budget(h: &HttpConfig) -> Connections {
    Connections::new(fit_open_files(h.max_connections))
}

/// `max_connections`, lowered to fit the process's open-files limit: past that limit accept
/// fails, and then `/healthz` cannot be answered either.
fn fit_open_files(configured: usize) -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let Some(soft) = soft.and_then(|s| usize::try_from(s).ok()) else {
        return configured;
    };
    let room = soft.saturating_sub(FD_HEADROOM + HEALTH_RESERVE).max(1);
    if configured > room {
        tracing::warn!(
            max_connections = configured,
            open_files_limit = soft,
            "http.max_connections is above what the open-files limit allows; serving at most {room} connections (raise `ulimit -n` for more)"
        );
        return room;
    }
    configured
}

/// What a connection may ask.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Everything.
    Full,
    /// Over the cap: `/healthz` and `/readyz` only.
    HealthOnly,
}

/// How long a connection accepted just before the listener closed may take to send its first
/// request before it is closed unanswered (a load balancer sends it at once).
const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(1);
/// How long connections may take to end once what they ran was cancelled (they write the
/// cancelled requests' answers and close).
const CANCEL_WAIT: Duration = Duration::from_secs(1);

/// Accepts on `listener` and serves `routes` until `phases.closing` fires; then stops
/// accepting (serving what the kernel already accepted first), lets each connection finish its
/// request and close, and waits for them for at most `grace`; past it, cancels what still runs
/// (`phases.shutdown`) and waits [`CANCEL_WAIT`] more. False when the grace ran out first.
pub(super) async fn serve(
    listener: TcpListener,
    routes: Routes,
    limits: ConnectionBounds,
    phases: Phases,
    grace: Duration,
) -> bool {
    let limits = Arc::new(limits);
    let phases = Arc::new(phases);
    let full = Arc::new(builder());
    let overflow = Arc::new(overflow_builder(&limits));
    let main = limits.connections.clone();
    let reserve = Arc::new(Semaphore::new(HEALTH_RESERVE));
    let tracker = TaskTracker::new();
    let mut admit = Admission {
        full,
        overflow,
        main,
        reserve,
        refused: Throttle::default(),
        health_only: Throttle::default(),
    };
    let mut accept_failed = Throttle::default();
    // Admits a connection (or refuses it, over the limits) and serves it in the tracker.
    let mut serve = |stream: TcpStream, peer: SocketAddr| {
        if let Some((mode, permit, conn_builder)) = admit.admit(&stream, peer) {
            tracker.spawn(connection(
                stream,
                peer,
                routes.clone(),
                conn_builder,
                mode,
                limits.clone(),
                phases.clone(),
                permit,
            ));
        }
    };
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            _ = phases.closing.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    accept_error(e, &mut accept_failed).await;
                    continue;
                }
            },
        };
        serve(stream, peer);
    }
    // Connections the kernel completed but the loop had not accepted yet would be reset when
    // the listener closes, after their client may have sent a request: that request would be
    // lost, and a load balancer does not retry a POST it sent. They are served instead.
    let backlog = take_backlog(listener);
    for (stream, peer) in backlog {
        serve(stream, peer);
    }
    // The listener is closed: a client connecting from now on is refused by the kernel, which a
    // load balancer retries on another instance, POST included (nothing was sent).
    tracker.close();
    tracing::info!(
        open_connections = tracker.len(),
        grace_ms = grace.as_millis() as u64,
        "stopped accepting connections; open streams end; waiting up to {} ms for requests in flight",
        grace.as_millis()
    );
    if tokio::time::timeout(grace, tracker.wait()).await.is_ok() {
        return true;
    }
    tracing::warn!(
        open_connections = tracker.len(),
        "requests still running after {} ms (http.shutdown_grace_ms): cancelling them",
        grace.as_millis()
    );
    phases.shutdown.cancel();
    let _ = tokio::time::timeout(CANCEL_WAIT, tracker.wait()).await;
    false
}

/// Takes the connections waiting in `listener`'s accept queue, without waiting, and closes it.
fn take_backlog(listener: TcpListener) -> Vec<(TcpStream, SocketAddr)> {
    let mut taken = Vec::new();
    // The accept system call itself, not the reactor's readiness (which may not have seen the
    // latest arrivals yet): the standard listener is already non-blocking.
    let std_listener = match listener.into_std() {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!(error = %e, "could not take the accept queue");
            return taken;
        }
    };
    loop {
        match std_listener.accept() {
            Ok((stream, peer)) => {
                let stream = stream
                    .set_nonblocking(true)
                    .and_then(|()| TcpStream::from_std(stream));
                match stream {
                    Ok(s) => taken.push((s, peer)),
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "could not serve a queued connection")
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // `WouldBlock`: the queue is empty; anything else: nothing more to take.
            Err(_) => break,
        }
    }
    taken
}

/// Who gets a connection: everything under the cap, the health routes in the reserve past it,
/// nothing beyond (logged at most every [`LOG_EVERY`]).
struct Admission {
    full: Arc<http1::Builder>,
    overflow: Arc<http1::Builder>,
    main: Connections,
    reserve: Arc<Semaphore>,
    refused: Throttle,
    health_only: Throttle,
}

impl Admission {
    fn admit(
        &mut self,
        stream: &TcpStream,
        peer: SocketAddr,
    ) -> Option<(Mode, OwnedSemaphorePermit, Arc<http1::Builder>)> {
        // Nagle's algorithm meeting delayed ACKs stalls small SSE writes by ~40 ms.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "could not set TCP_NODELAY");
        }
        if let Some(p) = self.main.try_take() {
            return Some((Mode::Full, p, self.full.clone()));
        }
        if let Ok(p) = self.reserve.clone().try_acquire_owned() {
            if let Some(skipped) = self.health_only.allow() {
                tracing::warn!(
                    max_connections = self.main.max(),
                    since_last_log = skipped,
                    "connection limit reached (http.max_connections, client connections and relayed requests' sockets together): new connections answer only /healthz and /readyz, anything else 503"
                );
            }
            return Some((Mode::HealthOnly, p, self.overflow.clone()));
        }
        if let Some(skipped) = self.refused.allow() {
            tracing::warn!(
                max_connections = self.main.max(),
                health_reserve = HEALTH_RESERVE,
                since_last_log = skipped,
                "connection limit reached (http.max_connections and the health reserve): closing new connections at once"
            );
        }
        // Dropped by the caller: its descriptor is freed at once.
        None
    }
}

/// The builder of connections under the cap: no head timer of hyper's (hyper's default, 30 s,
/// applies to any builder with a timer), the connection's task bounds the head ([`connection`]).
fn builder() -> http1::Builder {
    let mut b = http1::Builder::new();
    b.header_read_timeout(None);
    b
}

/// The builder of connections over the cap: one HTTP/1.1 request each (health probes), its head
/// waited for briefly.
fn overflow_builder(limits: &ConnectionBounds) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header.min(OVERFLOW_HEAD_WAIT))
        .keep_alive(false);
    b
}

/// Waits after a failed accept. A connection that failed before it was accepted is nothing to
/// wait for; anything else (the open-files limit: `EMFILE`) fails again at once if retried at
/// once, so the loop pauses (as hyper 0.14 and axum do, more briefly: connections that close
/// meanwhile free descriptors, and the health reserve needs them soon).
async fn accept_error(e: io::Error, throttle: &mut Throttle) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    if let Some(skipped) = throttle.allow() {
        tracing::error!(error = %e, since_last_log = skipped, "accept failed; retrying in 100 ms");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Serves one connection until it ends, the server stops, or it idles too long. Its guards (the
/// idle and head timers, the stop) are polled only when they fire (`when_woken.rs`); the head's
/// timer is the bound under the cap (over it, hyper's own: see `builder`).
#[allow(clippy::too_many_arguments)] // one call site, every argument distinct
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    routes: Routes,
    builder: Arc<http1::Builder>,
    mode: Mode,
    limits: Arc<ConnectionBounds>,
    phases: Arc<Phases>,
    _permit: OwnedSemaphorePermit,
) {
    let activity = Arc::new(Activity::new());
    let service = requests(peer, routes, mode, &limits, activity.clone());
    let io = TokioIo::new(WriteDeadline::new(stream, peer, limits.write));
    let mut conn = pin!(builder.serve_connection(io, service));
    let mut idle = pin!(WhenWoken::new(idle_for(&activity, limits.idle)));
    let mut head = pin!(WhenWoken::new(idle_for(&activity, limits.header)));
    let mut stop = pin!(WhenWoken::new(until_closing(&phases, &activity)));
    let mut closing = false;
    // Closing, on a connection whose first request has not begun yet.
    let mut awaiting_first = false;
    let mut first = pin!(activity.first.notified());
    let mut first_deadline = pin!(tokio::time::sleep(FIRST_REQUEST_WAIT));
    // Closing, on a connection that has served: see below.
    let mut lingering = false;
    let mut linger = pin!(idle_for(&activity, FIRST_REQUEST_WAIT));
    loop {
        tokio::select! {
            biased; // the stop first: see `until_closing`
            _ = &mut stop, if !closing => {
                closing = true;
                if activity.begun() {
                    // Not closed at once: a response still streaming (a GET stream the stop
                    // ends now) went out without `Connection: close`, so the load balancer may
                    // put the connection back in its pool and send the next request on it the
                    // moment the stream ends; closed under it, that request (a POST is not
                    // retried) fails. The connection answers what comes (with `Connection:
                    // close`, hyper then closes it) and closes once idle for a moment.
                    lingering = true;
                } else {
                    // Hyper closes a connection it has read nothing from at once: a request
                    // already sent on it (by a load balancer that connected a moment before
                    // the listener closed) would be lost, and a POST is not retried. It gets
                    // answered first (with `Connection: close`), if it comes soon.
                    awaiting_first = true;
                    first_deadline
                        .as_mut()
                        .reset(Instant::now() + FIRST_REQUEST_WAIT);
                }
            }
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                break;
            }
            _ = &mut linger, if lingering => {
                lingering = false;
                conn.as_mut().graceful_shutdown();
            }
            _ = &mut first, if awaiting_first => {
                awaiting_first = false;
                conn.as_mut().graceful_shutdown();
            }
            _ = &mut first_deadline, if awaiting_first => {
                awaiting_first = false;
                conn.as_mut().graceful_shutdown();
            }
            _ = &mut head, if mode == Mode::Full => {
                // As hyper's header timeout does: closed, nothing answered.
                tracing::debug!(%peer, "closing a connection that sent no whole request head in {} ms", limits.header.as_millis());
                break;
            }
            _ = &mut idle, if !closing => {
                tracing::debug!(%peer, "closing a connection idle for {} ms", limits.idle.as_millis());
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Completes when the server's connections close (`phases.closing`); on the way, notes the
/// drain's start (`phases.draining`) where the connection's answers read it, one atomic load
/// each where the token's check takes a lock every connection shares. Polled first in the
/// connection's `select!` (`biased`), so an answer finished in the same wake as the drain's
/// start is already answered with `Connection: close`.
async fn until_closing(phases: &Phases, activity: &Activity) {
    phases.draining.cancelled().await;
    activity.draining.store(true, Ordering::Release);
    phases.closing.cancelled().await;
}

/// A request being answered, boxed: hyper keeps a place for its service's future for the whole
/// life of the connection (`Box::pin(None)` when the connection opens, the future written into
/// it per request), so an unboxed future of the routes (~6 KB) stayed allocated on every
/// connection, an idle SSE stream's included, long after its request was answered. Boxed, the
/// place is a pointer, and the future's bytes live while it runs (issue 37).
pub(super) type Answering =
    Pin<Box<dyn Future<Output = Result<Response<Tracked<AxumBody>>, Infallible>> + Send>>;

/// What answers a connection's requests: the routes (over the cap, `mode`, only for the health
/// routes), each request in flight counted in `active` until its answer's body ends, its body
/// read under the deadline `limits.body` from its head, and answered with `Connection: close`
/// once the stop began (`activity.draining`). The first request notifies `activity.first`.
pub(super) fn requests(
    peer: SocketAddr,
    routes: Routes,
    mode: Mode,
    limits: &ConnectionBounds,
    activity: Arc<Activity>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Tracked<AxumBody>>,
    Error = Infallible,
    Future = Answering,
> + Send {
    let body_limit = limits.body;
    // The routes behind one reference count of the connection's own: copying them for every
    // request touched counts every connection shares (the router's, the endpoint's; issue 40).
    let routes = Arc::new(routes);
    hyper::service::service_fn(move |req: Request<Incoming>| {
        if !activity.begun() {
            // `notify_one` keeps the wake for a waiter that comes later.
            activity.first.notify_one();
        }
        let guard = InFlight::begin(activity.clone());
        let deadline = Instant::now() + body_limit;
        // The box first, and the answer's future written straight into it by `answer`, which
        // cannot unwind: built on the stack and then boxed, all of its ~5.5 KB were copied,
        // most of them not yet written (issue 40).
        let place = Box::new_uninit();
        let answering = Box::write(
            place,
            answer(routes.clone(), req, guard, deadline, mode, peer),
        );
        Box::into_pin(answering) as Answering
    })
}

/// The answer to `req`, as [`requests`] boxes it. `extern "C"` for its ABI's one property
/// that matters here: the function cannot unwind (a panic in it aborts; it only moves its
/// arguments into the future it returns, which cannot panic), so LLVM may hand it the box as
/// the place to build its result in (memcpyopt's call-slot optimization; a function that may
/// unwind cannot write there, as the box is freed on that path). Not inlined, so that the
/// call is there to optimize: checked by `bench/call_counts.sh`'s `memcpy` (2,380 → 1,824
/// instructions a call) and a uprobe on `memcpy` (no copy of the future's 5.5 KB left).
#[inline(never)]
// Never called from C: the ABI is for `nounwind`; and an `async fn` cannot be `extern "C"`.
#[allow(improper_ctypes_definitions, clippy::manual_async_fn)]
extern "C" fn answer(
    routes: Arc<Routes>,
    req: Request<Incoming>,
    guard: InFlight,
    deadline: Instant,
    mode: Mode,
    peer: SocketAddr,
) -> impl Future<Output = Result<Response<Tracked<AxumBody>>, Infallible>> + Send {
    async move {
        let mut res = if mode == Mode::HealthOnly && !is_health(req.uri().path()) {
            over_capacity()
        } else {
            let req = req.map(|body| AxumBody::new(DeadlineBody::new(body, deadline)));
            // Whom the request's limits count against, absent a trusted header (transport).
            crate::transport::with_peer(peer, routes.serve(req)).await
        };
        if guard.0.draining.load(Ordering::Acquire) {
            // Hyper closes the connection after this answer; the client (a load balancer)
            // sends its next request on a new connection, which, once this instance stops
            // accepting, is refused and retried elsewhere.
            res.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        Ok::<_, Infallible>(res.map(|body| Tracked {
            inner: body,
            _guard: guard,
        }))
    }
}

/// The health routes, and distributed mode's self-check (a `/readyz` depends on it: an instance
/// at its connection cap still reaches itself at its advertised address).
fn is_health(path: &str) -> bool {
    matches!(path, "/healthz" | "/health" | "/readyz") || super::backing::is_self_check(path)
}

/// The answer to anything but a health probe over the cap: valid JSON-RPC, like every error.
fn over_capacity() -> Response<AxumBody> {
    let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Service Unavailable: too many connections"}}"#;
    let mut res = Response::new(AxumBody::from(body));
    *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

/// A connection's requests in flight and when it last became idle, kept with atomics: a
/// request's begin and end are an atomic add each and wake nothing (issue 23: a watch channel
/// here woke the connection's task twice per request and armed a new idle timer at each end).
pub(super) struct Activity {
    /// What `idle_since` counts from.
    base: Instant,
    /// Requests in flight (from their head until their answer's body is dropped).
    active: AtomicUsize,
    /// Microseconds from `base` to the moment the count last fell to zero (or the
    /// connection's start): finer than the timer, so the idle bound is never cut short.
    idle_since: AtomicU64,
    /// Whether a request has begun on the connection.
    begun: AtomicBool,
    /// Notified when the first request begins.
    first: Notify,
    /// Whether the stop began (`Phases::draining`): every answer from then on closes its
    /// connection. Set by the connection's task, which its answers run in, before it polls
    /// them again (see `connection`).
    draining: AtomicBool,
}

impl Activity {
    pub(super) fn new() -> Self {
        Self {
            base: Instant::now(),
            active: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            begun: AtomicBool::new(false),
            first: Notify::new(),
            draining: AtomicBool::new(false),
        }
    }

    fn begun(&self) -> bool {
        self.begun.load(Ordering::Relaxed)
    }

    /// When the connection has been idle since, if it is.
    fn idle_since(&self) -> Option<Instant> {
        if self.active.load(Ordering::Acquire) > 0 {
            return None;
        }
        let us = self.idle_since.load(Ordering::Acquire);
        Some(self.base + Duration::from_micros(us))
    }
}

/// Completes once no request has been in flight for `limit`. One timer, re-armed only when it
/// fires: to the end of the idle period under way, or, while a request is in flight, `limit`
/// later (a request ends at least `limit` before the connection may close).
async fn idle_for(activity: &Activity, limit: Duration) {
    let sleep = tokio::time::sleep(limit);
    tokio::pin!(sleep);
    loop {
        sleep.as_mut().await;
        let now = Instant::now();
        let next = match activity.idle_since() {
            Some(since) if now >= since + limit => return,
            Some(since) => since + limit,
            None => now + limit,
        };
        sleep.as_mut().reset(next);
    }
}

/// One request in flight on a connection, from its head until its answer's body is dropped
/// (sent, or the connection gone).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(activity: Arc<Activity>) -> Self {
        activity.begun.store(true, Ordering::Relaxed);
        activity.active.fetch_add(1, Ordering::AcqRel);
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        // The time first, then the count: a reader that sees the count at zero sees this
        // time or a later one (written at every end, so two ending at once cannot leave an
        // older one).
        let us = a.base.elapsed().as_micros() as u64;
        a.idle_since.fetch_max(us, Ordering::AcqRel);
        a.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An answer's body that keeps its request counted as in flight.
pub(super) struct Tracked<B> {
    inner: B,
    _guard: InFlight,
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that must be complete by a deadline; past it, reading fails with an
/// `io::ErrorKind::TimedOut` error (the body read answers `408`). Frames that arrived are
/// always delivered first, so a body complete in time never fails.
pub(super) struct DeadlineBody<B> {
    inner: B,
    deadline: Instant,
    // Made only when the body is waited on: most bodies are in hand at once.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> DeadlineBody<B> {
    pub(super) fn new(inner: B, deadline: Instant) -> Self {
        Self {
            inner,
            deadline,
            timer: None,
        }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(Some(Err(Box::new(io::Error::new(
            io::ErrorKind::TimedOut,
            "the request body did not arrive within http.body_read_timeout_ms",
        )))))
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Lets one log line through per [`LOG_EVERY`], counting the ones held back.
#[derive(Default)]
struct Throttle {
    next: Option<Instant>,
    skipped: u64,
}

impl Throttle {
    /// `Some(held back since the last line)` when a line may be logged now.
    fn allow(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.next.is_some_and(|next| now < next) {
            self.skipped += 1;
            return None;
        }
        self.next = Some(now + LOG_EVERY);
        Some(std::mem::take(&mut self.skipped))
    }
}
