//! `GET /mcp`: the session's standalone stream for server-initiated messages, or, with
//! `Last-Event-ID`, the resumption of a stream that broke.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;

use super::session_ref::{self, Asker};
use super::{reply, sse};
use crate::events::{Cursor, STANDALONE_STREAM};
use crate::protocol::errors;
use crate::server::Shared;

pub(super) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let headers = req.headers();
    if super::is_stateless_stream_request(headers) {
        return super::stateless_method_not_allowed("GET");
    }
    let accept = super::post::accept_header(headers).unwrap_or_default();
    if !super::post::accepts(&accept, "text/event-stream") {
        return reply::rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            &errors::server("Not Acceptable: Accept must include text/event-stream"),
        );
    }
    let session = match session_ref::find(&shared, headers, Asker::Get, None).await {
        Ok(s) => s,
        Err(res) => return res,
    };
    let keepalive = Duration::from_secs(shared.config.http.sse_keepalive_secs.max(1));
    let retry = shared.config.http.sse_retry_ms;
    // Ends when the session does; sessions end when the server shuts down, so a graceful
    // stop does not wait on open streams.
    let stop = session.closed.child_token();
    if let Some(last) = headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        return match shared.events.resolve(&session.id, last).await {
            Some((stream, cursor)) => {
                tracing::debug!(session = %session.id, stream, "resuming an SSE stream");
                sse::response(
                    shared.events.tail(&session.id, stream, cursor, stop),
                    retry,
                    keepalive,
                )
            }
            None => reply::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &errors::server(
                    "Bad Request: Last-Event-ID does not name an event of this session",
                ),
            ),
        };
    }
    // A new GET takes the standalone stream over from any earlier connection; it starts
    // with a priming event (2025-11-25) so the client can resume from it.
    let mut cursor = Cursor::Now;
    if session.version.wants_priming() {
        match shared
            .events
            .append(&session.id, STANDALONE_STREAM, Bytes::new())
            .await
        {
            Ok(id) => {
                if let Some((_, _, seq)) = crate::events::parse_event_id(&id) {
                    cursor = Cursor::After(seq.saturating_sub(1));
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not prime the standalone stream"),
        }
    }
    sse::response(
        shared
            .events
            .tail(&session.id, STANDALONE_STREAM, cursor, stop),
        retry,
        keepalive,
    )
}
