//! The stdio transport: one session-era session over a pipe pair, as a local client (Claude
//! Desktop, MCP Inspector, an SDK's stdio client) runs a server it starts as its child process.
//! JSON-RPC messages arrive one per line on the input (stdin) and leave one per line on the
//! output (stdout); logs go to stderr (`telemetry::logs`).
//!
//! It is the session era without HTTP: `initialize` opens a session like a POST's (with
//! `initialize::open`), and every later request runs through the same
//! [`driver`](super::core::driver) and dispatch, so everything a session offers (progress, logging, cancellation, requests to
//! the client, subscriptions, list changes, tasks) is the same code. What HTTP adds is not
//! there: no session id on the wire (the session is this connection), no event ids or
//! resumption, no headers, no relay (the session is held here and nowhere else).
//!
//! Each request runs in a task of its own while the input is read on, so the client's answers
//! to our requests (sampling, elicitation, roots) and its `notifications/cancelled` reach the
//! requests waiting for them. Every message leaves through one writer ([`out`]), so lines never
//! mix.
//!
//! A client that writes faster than it reads is slowed down, never buffered without end: a
//! request waits for a place in flight (`limits.max_inflight_per_session` of them, each kept
//! until the request's answer is queued) and the next line is read only once the output's
//! queue has room (`http.max_unread_bytes`). So when the client stops reading, its answers
//! fill the queue, the requests wait on it, the reader waits on them, and stdin is no longer
//! read: the client's own writes block, and the process holds what the bounds allow. The input ending (the client closed our stdin, or went away) or `stop` (a signal) ends
//! the connection: requests waiting on the client fail at once (nobody can answer them), the
//! others get `http.shutdown_grace_ms` to finish and send their answers (a client that wrote
//! its last request and closed stdin still reads them), then what still runs is cancelled and
//! the session ends.
//!
//! `lines.rs` reads stdin on a thread of its own (tokio's stdin reads on the blocking pool and
//! cannot be cancelled: a server stopped by a signal with its stdin open would not exit) and
//! cuts it into lines of at most `http.max_body_bytes` (longer: `-32600`, never held whole); a
//! line that is not JSON is `-32700` with id `null`, and the session goes on. `batch.rs` is
//! 2025-03-26's batch on one line. Before `initialize` only `ping` is answered (anything else
//! `-32600`, so a 2026-07-28 client's `server/discover` probe falls back to `initialize`). No
//! idle expiry, no Redis (the server's build drops it from a stdio configuration,
//! `server/parts.rs`), no fleet, no `[auth]` (`Config` refuses both with stdio).
//!
//! Invariant: every byte on stdout is written by [`out`]'s one task, one whole JSON-RPC message
//! per line and one write each (a message holding a raw newline is encoded again, never split;
//! a request's progress and log messages precede its answer), and nothing else writes to
//! stdout once stdio is configured (logs go to stderr). A stdio session is held by this process
//! alone (nothing stores, finds or relays it) and differs from an HTTP one only in where its
//! lines come from and go to: the driver, dispatch and session code are the same.

mod batch;
mod connection;
mod lines;
mod out;
mod request;

use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};

pub(crate) use lines::process_stdin;

use crate::app::App;
use crate::protocol::errors;
use connection::Connection;
use lines::Line;

/// Why the connection ended.
enum End {
    /// The input ended: the client closed our stdin.
    Eof,
    /// `stop` completed (a signal).
    Stopped,
    /// Nobody reads the output any more.
    Gone,
    /// The input could not be read.
    Failed(std::io::Error),
}

/// Serves one stdio connection on `input` and `output` until the input ends, the output
/// closes or `stop` completes, then ends it (see the module documentation); `cut`, polled only
/// then, cuts the wait for running requests short (a second signal).
pub(crate) async fn serve<R, W>(
    app: App,
    input: R,
    output: W,
    stop: impl Future<Output = ()>,
    cut: impl Future<Output = ()>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, writer) = out::start(output, app.config().http.max_unread_bytes);
    let mut conn = Connection::new(app.clone(), out.clone());
    let end = read(&mut conn, &out, BufReader::new(input), stop).await;
    match end {
        End::Eof => tracing::info!("stdio: stdin closed; stopping"),
        End::Stopped => tracing::info!("stdio: stop signal; stopping"),
        End::Gone => tracing::info!("stdio: stdout closed; stopping"),
        End::Failed(e) => tracing::warn!(error = %e, "stdio: stdin could not be read; stopping"),
    }
    let grace = Duration::from_millis(app.config().http.shutdown_grace_ms);
    finish(conn, grace, cut).await;
    drop(out);
    // Everything queued is written and flushed before the server returns.
    let _ = writer.await;
}

/// Reads the input line by line and hands each message to `conn`, until the input ends, the
/// output closes or `stop` completes. Before each line it waits for room on the output, and
/// before running a request for its place in flight (see the module documentation).
async fn read<R>(
    conn: &mut Connection,
    out: &out::Out,
    mut input: BufReader<R>,
    stop: impl Future<Output = ()>,
) -> End
where
    R: AsyncRead + Unpin,
{
    let max = conn.app().config().http.max_body_bytes;
    let mut stop = std::pin::pin!(stop);
    loop {
        let next = async {
            out.room().await;
            lines::next_line(&mut input, max).await
        };
        let line = tokio::select! {
            line = next => line,
            _ = &mut stop => return End::Stopped,
            _ = out.gone() => return End::Gone,
        };
        let line = match line {
            Ok(Line::Message(line)) => line,
            Ok(Line::TooLong) => {
                let e = errors::invalid_request(format!(
                    "Invalid Request: a message longer than http.max_body_bytes ({max} bytes)"
                ));
                conn.refuse(None, &e).await;
                continue;
            }
            Ok(Line::Eof) => return End::Eof,
            Err(e) => return End::Failed(e),
        };
        let Some(item) = conn.parse(&line).await else {
            continue;
        };
        let places = conn.places_for(&item);
        let place = if places == 0 {
            None
        } else {
            tokio::select! {
                place = conn.place(places) => place,
                _ = &mut stop => return End::Stopped,
                _ = out.gone() => return End::Gone,
            }
        };
        conn.take(item, place).await;
    }
}

/// Ends the connection: see the module documentation.
async fn finish(mut conn: Connection, grace: Duration, cut: impl Future<Output = ()>) {
    if let Some(s) = conn.session() {
        // No answer to a request to the client can come any more: those waiting fail now.
        s.leaving().cancel();
    }
    conn.running().close();
    let finished = tokio::select! {
        _ = conn.running().wait() => true,
        _ = tokio::time::sleep(grace) => false,
        _ = cut => false,
    };
    if let Some(s) = conn.session().cloned() {
        if !finished {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "stdio: requests still running are cancelled"
            );
        }
        // Cancels what still runs; each ends at its next `.await`.
        conn.app().sessions().end(&s.id).await;
    }
    if tokio::time::timeout(Duration::from_secs(1), conn.running().wait())
        .await
        .is_err()
    {
        tracing::warn!("stdio: a handler did not stop when cancelled; exiting without it");
    }
    conn.stop_standalone().await;
}
