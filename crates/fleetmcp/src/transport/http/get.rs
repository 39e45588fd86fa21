//! `GET /mcp`: the session's standalone stream for server-initiated messages, or, with
//! `Last-Event-ID`, the resumption of a stream that broke.

use axum::extract::State;
use axum::response::Response;
use futures_util::StreamExt;
use http::StatusCode;

use super::edge::{GetHeaders, Held, SessionEra};
use super::{EndpointState, respond, sse};
use crate::events::{Cursor, STANDALONE_STREAM, STREAM_LOST_MESSAGE, Unresolved};
use crate::protocol::errors;

/// Serves a GET of the session era that takes SSE, whose session is held here (all three
/// checked in front of this handler, `edge.rs`).
pub(super) async fn handle(
    State(ep): EndpointState,
    _: SessionEra,
    _: GetHeaders,
    Held { session, headers }: Held,
) -> Response {
    let app = &ep.app;
    let events = app.events();
    let keepalive = sse::keepalive_every(&app.config().http);
    let retry = app.config().http.sse_retry_ms;
    // Ends when this instance stops serving the session (it ended, or moved to another
    // holder), and when a graceful stop stops accepting connections (the drain delay is over):
    // the client then resumes with `Last-Event-ID` on another instance, from the shared event
    // store, and the stop does not wait on open streams.
    let stop = session.leaving().child_token();
    let closing = app.phases().closing.clone();
    if let Some(last) = headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        return match events.resolve(&session.id, last).await {
            Ok((stream, cursor)) => {
                tracing::debug!(session = %crate::session::LogId(&session.id), stream, "resuming an SSE stream");
                sse::response(
                    events
                        .tail(&session.id, stream, cursor, stop)
                        .take_until(closing.cancelled_owned())
                        .boxed(),
                    retry,
                    keepalive,
                )
            }
            Err(Unresolved::NotAnEvent) => respond::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &errors::server(
                    "Bad Request: Last-Event-ID does not name an event of this session",
                ),
            ),
            // Gone for good, and not the client's mistake: 410, not 404 (which a client reads
            // as its session gone) nor 503 (which it would retry forever).
            Err(Unresolved::Lost) => {
                respond::rpc_error(StatusCode::GONE, None, &errors::server(STREAM_LOST_MESSAGE))
            }
        };
    }
    // A new GET takes the standalone stream over from any earlier connection; it starts
    // with a priming event (2025-11-25) so the client can resume from it. With replicas the
    // priming event is confirmed on them (`prime`), so the stream survives a failover that
    // loses its later events, and a resume naming one of those still finds it.
    let mut cursor = Cursor::Now;
    if session.version.wants_priming() {
        match events.prime(&session.id, STANDALONE_STREAM).await {
            Ok(id) => {
                if let Some((_, _, seq)) = crate::events::parse_event_id(&id) {
                    cursor = Cursor::After(seq.saturating_sub(1));
                }
            }
            // Its id could name nothing once a failover has passed: refused like a session
            // that cannot be stored durably; the client opens the stream again.
            Err(e) if events.confirms_on_replicas() => {
                tracing::warn!(error = %e, "could not prime the standalone stream; refused");
                return respond::unavailable(
                    None,
                    "The stream could not be stored durably; retry shortly",
                    1,
                );
            }
            Err(e) => tracing::warn!(error = %e, "could not prime the standalone stream"),
        }
    }
    sse::response(
        events
            .tail(&session.id, STANDALONE_STREAM, cursor, stop)
            .take_until(closing.cancelled_owned())
            .boxed(),
        retry,
        keepalive,
    )
}
