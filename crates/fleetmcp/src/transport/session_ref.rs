//! From the `Mcp-Session-Id` header to a held session, or to the exact error of the contract:
//!
//! | situation | answer |
//! |---|---|
//! | no header (POST) | `400` `-32600` ``Session not initialized — send `initialize` first`` |
//! | an id that does not open under our secret | `404` `-32000` `invalid session id` |
//! | deleted on this instance | `404` `text/plain` `Session not found` |
//! | expired (idle, or its record is gone) | `404` `-32001` `session expired` |
//! | opens, but no instance knows it | `404` `-32000` `session not initialized` |
//!
//! The lookup of a held session is one hash-map read of the exact id; the seal is opened
//! only when that misses.

use std::sync::Arc;

use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde_json::json;

use super::{SESSION_HEADER, reply};
use crate::protocol::{ErrorCode, ErrorData, ProtocolVersion};
use crate::server::Shared;
use crate::session::{Ended, Session, SessionRecord};

/// Which method asked: the answers for a missing or unknown session differ slightly.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Asker {
    Post,
    Get,
    Delete,
}

pub(super) async fn find(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    asker: Asker,
) -> Result<Arc<Session>, Response> {
    let Some(raw) = headers.get(SESSION_HEADER) else {
        return Err(match asker {
            Asker::Post => reply::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &ErrorData::new(
                    ErrorCode::INVALID_REQUEST,
                    "Session not initialized — send `initialize` first",
                    Some(json!({"transport": "streamable-http", "expected": "initialize"})),
                ),
            ),
            Asker::Get => reply::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &crate::protocol::errors::server("Bad Request: Mcp-Session-Id header is required"),
            ),
            Asker::Delete => reply::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &crate::protocol::errors::server("No valid session ID provided"),
            ),
        });
    };
    let id = raw.to_str().unwrap_or("");
    if let Some(s) = shared.live.get(id) {
        return Ok(s);
    }
    let verified = !id.is_empty()
        && id.trim() == id
        && shared.sealer.as_ref().and_then(|s| s.open(id)).is_some();
    if !verified {
        tracing::warn!("parseInput: mcp-session-id is not a session this server verified");
        return Err(invalid_session_id());
    }
    match shared.live.ended(id) {
        Some(Ended::Deleted) => {
            return Err(reply::text(StatusCode::NOT_FOUND, "Session not found"));
        }
        Some(Ended::Expired) => return Err(session_expired()),
        None => {}
    }
    match shared.store.get(id).await {
        Ok(Some(record)) => recreate(shared, record).ok_or_else(|| {
            reply::with_retry_after(
                reply::rpc_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    &crate::protocol::errors::server(
                        "This instance holds too many sessions; retry shortly",
                    ),
                ),
                1,
            )
        }),
        Ok(None) => Err(match asker {
            Asker::Get => reply::text(StatusCode::NOT_FOUND, "Session not found"),
            _ => reply::rpc_error(
                StatusCode::NOT_FOUND,
                None,
                &crate::protocol::errors::server("session not initialized"),
            ),
        }),
        Err(e) => {
            tracing::warn!(error = %e, "the session store could not be read");
            Err(reply::with_retry_after(
                reply::rpc_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    &crate::protocol::errors::server(
                        "The session store is unavailable; retry shortly",
                    ),
                ),
                1,
            ))
        }
    }
}

/// Serves a stored session this instance does not hold: it becomes the holder.
fn recreate(shared: &Arc<Shared>, record: SessionRecord) -> Option<Arc<Session>> {
    tracing::info!(session_node = %record.node_id, "[TransportService] Recreating transport from stored session");
    let version =
        ProtocolVersion::parse(&record.protocol_version).unwrap_or(ProtocolVersion::LATEST);
    let session = Arc::new(Session::new(
        record.id.as_str().into(),
        version,
        record.client_info.clone(),
        record.client_capabilities.clone(),
        shared.shutdown.child_token(),
    ));
    session.mark_initialized();
    if !shared.live.insert(session.clone()) {
        return None;
    }
    // Two concurrent requests may both get here; the registry keeps whichever came last, and
    // both serve correctly since the record is the same.
    let session = shared.live.get(&record.id).unwrap_or(session);
    tracing::info!(
        "[StreamableHttpAdapter] Marked transport as pre-initialized for session recreation"
    );
    let store = shared.store.clone();
    let node = shared.machine_id.clone();
    tokio::spawn(async move {
        let record = SessionRecord {
            node_id: node,
            ..record
        };
        if let Err(e) = store.put(&record).await {
            tracing::warn!(error = %e, "Failed to update session in Redis");
        }
    });
    Some(session)
}

pub(super) fn invalid_session_id() -> Response {
    reply::rpc_error(
        StatusCode::NOT_FOUND,
        None,
        &crate::protocol::errors::server("invalid session id"),
    )
}

pub(super) fn session_expired() -> Response {
    reply::rpc_error(
        StatusCode::NOT_FOUND,
        None,
        &ErrorData::new(ErrorCode(-32001), "session expired", None),
    )
}
