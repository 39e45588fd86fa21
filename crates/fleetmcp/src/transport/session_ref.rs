//! From the `Mcp-Session-Id` header to a held session, or to the exact error of the contract:
//!
//! | situation | answer |
//! |---|---|
//! | no header (POST) | `400` `-32600` ``Session not initialized — send `initialize` first`` |
//! | an id that does not open under our secret | `404` `-32000` `invalid session id` |
//! | deleted on this instance | `404` `text/plain` `Session not found` |
//! | expired (idle, or its stored record is gone) | `404` `-32001` `session expired` |
//! | opens, but no instance knows it | `404` `-32000` `session not initialized` |
//!
//! A held session is found with one hash-map read of the exact id; the seal is opened only
//! when that misses. Each request of a held session also checks that its stored record still
//! exists (another instance may have deleted it), bounded by `sessions.check_timeout_ms`: a
//! store that does not answer in time never blocks a session this instance can serve.

use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde_json::json;
use serde_json::value::RawValue;

use super::{SESSION_HEADER, reply};
use crate::protocol::{ErrorCode, ErrorData, ProtocolVersion};
use crate::server::Shared;
use crate::session::{Ended, Session, SessionIdPayload, SessionRecord};

/// Which method asked: the answers for a missing or unknown session differ slightly.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Asker {
    Post,
    Get,
    Delete,
}

/// Finds the session of a request; `id` is the JSON-RPC id, echoed in error answers.
pub(super) async fn find(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    asker: Asker,
    id: Option<&RawValue>,
) -> Result<Arc<Session>, Response> {
    let Some(raw) = headers.get(SESSION_HEADER) else {
        return Err(match asker {
            Asker::Post => reply::rpc_error(
                StatusCode::BAD_REQUEST,
                id,
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
    let sid = raw.to_str().unwrap_or("");
    if let Some(s) = shared.live.get(sid) {
        return still_stored(shared, s, id).await;
    }
    let verified = !sid.is_empty()
        && sid.trim() == sid
        && shared.sealer.as_ref().and_then(|s| s.open(sid)).is_some();
    if !verified {
        tracing::warn!("parseInput: mcp-session-id is not a session this server verified");
        return Err(invalid_session_id(id));
    }
    match shared.live.ended(sid) {
        Some(Ended::Deleted) => {
            return Err(reply::text(StatusCode::NOT_FOUND, "Session not found"));
        }
        Some(Ended::Expired) => return Err(session_expired(id)),
        None => {}
    }
    // Not held here: the store is the only copy, so this waits for it (a paused or restarting
    // Redis), retrying, until `sessions.store_wait_ms`; then a clear 503, never a hang.
    let bound = Duration::from_millis(shared.config.sessions.store_wait_ms);
    let deadline = tokio::time::Instant::now() + bound;
    let outcome = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, shared.store.get(sid)).await {
            Ok(Ok(found)) => break Ok(found),
            Ok(Err(e)) if tokio::time::Instant::now() + STORE_RETRY < deadline => {
                tracing::debug!(error = %e, "the session store did not answer; retrying");
                tokio::time::sleep(STORE_RETRY).await;
            }
            Ok(Err(e)) => break Err(e.to_string()),
            Err(_) => break Err(format!("no answer within {} ms", bound.as_millis())),
        }
    };
    match outcome {
        Ok(Some(record)) => recreate(shared, record)
            .await
            .ok_or_else(|| unavailable(id, "This instance holds too many sessions; retry shortly")),
        Ok(None) => Err(match asker {
            Asker::Get => reply::text(StatusCode::NOT_FOUND, "Session not found"),
            _ => reply::rpc_error(
                StatusCode::NOT_FOUND,
                id,
                &crate::protocol::errors::server("session not initialized"),
            ),
        }),
        Err(why) => {
            tracing::warn!(error = %why, wait_ms = bound.as_millis() as u64, "the session store could not be read for a session this instance does not hold");
            Err(unavailable(
                id,
                "The session store is unavailable; retry shortly",
            ))
        }
    }
}

/// Pause between attempts to read a session from a store that did not answer.
const STORE_RETRY: Duration = Duration::from_millis(100);

fn unavailable(id: Option<&RawValue>, message: &'static str) -> Response {
    reply::with_retry_after(
        reply::rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            &crate::protocol::errors::server(message),
        ),
        1,
    )
}

/// A held session is served only while its stored record exists. When the store cannot say
/// in time, the session is served from memory and checked again on its next request.
async fn still_stored(
    shared: &Arc<Shared>,
    session: Arc<Session>,
    id: Option<&RawValue>,
) -> Result<Arc<Session>, Response> {
    let limit = shared.config.sessions.check_timeout_ms;
    match tokio::time::timeout(
        Duration::from_millis(limit),
        shared.store.exists(&session.id),
    )
    .await
    {
        Ok(Ok(true)) => {
            refresh(shared, &session);
            Ok(session)
        }
        Ok(Ok(false)) if !session.is_persisted() => {
            // Created while the store was unreachable: it was never stored, so it is not gone.
            // Store it now that the store answers.
            persist(shared, &session).await;
            Ok(session)
        }
        Ok(Ok(false)) => {
            tracing::info!(
                "[TransportService] The stored session is gone — dropping its transport here"
            );
            shared.live.remove(&session.id, Ended::Expired);
            shared.events.forget(&session.id).await;
            Err(session_expired(id))
        }
        Ok(Err(e)) => {
            if matches!(e, crate::session::StoreError::Timeout(_)) {
                tracing::warn!("The session store did not answer within {limit} ms");
            }
            tracing::warn!(error = %e, "[TransportService] Could not confirm the session is still stored — serving it here");
            Ok(session)
        }
        Err(_) => {
            tracing::warn!("The session store did not answer within {limit} ms");
            tracing::warn!(
                "[TransportService] Could not confirm the session is still stored — serving it here"
            );
            Ok(session)
        }
    }
}

/// Writes a held session's record (one the store could not take when it was created).
async fn persist(shared: &Arc<Shared>, session: &Arc<Session>) {
    let record = SessionRecord {
        id: session.id.to_string(),
        node_id: shared.machine_id.clone(),
        protocol_version: session.version.as_str().into(),
        client_info: session.client_info.clone(),
        client_capabilities: session.client_capabilities.clone(),
        created_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64,
    };
    let bound = Duration::from_millis(shared.config.sessions.check_timeout_ms);
    if let Ok(Ok(())) = tokio::time::timeout(bound, shared.store.put(&record)).await {
        session.mark_persisted();
    }
}

/// Pushes the stored record's expiry out, at most once per quarter of the idle TTL, off the
/// request path.
fn refresh(shared: &Arc<Shared>, session: &Arc<Session>) {
    let ttl = match &shared.config.redis {
        Some(r) => r.default_ttl_ms.min(shared.config.sessions.idle_ttl_ms),
        None => shared.config.sessions.idle_ttl_ms,
    };
    let quarter = ttl / 4;
    if !session.due_for_touch(quarter) {
        return;
    }
    let store = shared.store.clone();
    let sid = session.id.clone();
    tokio::spawn(async move {
        if let Err(e) = store.touch(&sid).await {
            tracing::warn!(error = %e, "[TransportService] Failed to refresh session TTL");
        }
    });
}

/// Serves a stored session this instance does not hold: it becomes the holder.
async fn recreate(shared: &Arc<Shared>, record: SessionRecord) -> Option<Arc<Session>> {
    let version =
        ProtocolVersion::parse(&record.protocol_version).unwrap_or(ProtocolVersion::LATEST);
    let session = Arc::new(Session::new(
        record.id.as_str().into(),
        version,
        record.client_info.clone(),
        record.client_capabilities.clone(),
        shared.shutdown.child_token(),
    ));
    session.mark_persisted();
    // Concurrent requests for the same session may all read the record; the first to register
    // it recreates it, the others serve the session it registered.
    let (session, created) = shared.live.insert_if_absent(session)?;
    if !created {
        return Some(session);
    }
    tracing::info!(session_node = %record.node_id, "[TransportService] Recreating transport from stored session");
    tracing::info!(
        "[StreamableHttpAdapter] Marked transport as pre-initialized for session recreation"
    );
    // Written back before the request is served, not in the background: a write landing
    // after a DELETE of the same session would bring it back to life.
    let record = SessionRecord {
        node_id: shared.machine_id.clone(),
        ..record
    };
    let bound = Duration::from_millis(shared.config.sessions.check_timeout_ms);
    match tokio::time::timeout(bound, shared.store.put(&record)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "Failed to update session in Redis"),
        Err(_) => tracing::warn!(
            "Failed to update session in Redis: no answer within {} ms",
            bound.as_millis()
        ),
    }
    Some(session)
}

pub(super) fn invalid_session_id(id: Option<&RawValue>) -> Response {
    reply::rpc_error(
        StatusCode::NOT_FOUND,
        id,
        &crate::protocol::errors::server("invalid session id"),
    )
}

pub(super) fn session_expired(id: Option<&RawValue>) -> Response {
    reply::rpc_error(
        StatusCode::NOT_FOUND,
        id,
        &ErrorData::new(ErrorCode(-32001), "session expired", None),
    )
}

/// Mints a sealed session id naming this instance; `protocol` is the transport
/// (`streamable-http`, `legacy-sse`). In production without `MCP_SESSION_SECRET` no id can be
/// minted: the answer is `500`.
pub(super) fn mint_id(
    shared: &Shared,
    protocol: &str,
    rid: Option<&RawValue>,
) -> Result<String, Box<Response>> {
    let Some(sealer) = &shared.sealer else {
        tracing::error!(
            "initialize refused: MCP_SESSION_SECRET is required in production to issue session ids"
        );
        return Err(Box::new(reply::rpc_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            rid,
            &crate::protocol::errors::internal(
                "Session ids cannot be issued: MCP_SESSION_SECRET is not set",
            ),
        )));
    };
    let payload = SessionIdPayload {
        node_id: shared.machine_id.clone(),
        uuid: uuid::Uuid::new_v4().to_string(),
        iat: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs(),
        protocol: protocol.into(),
        auth_sig: "public".into(),
        is_public: true,
    };
    sealer.seal(&payload).ok_or_else(|| {
        Box::new(reply::rpc_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            rid,
            &crate::protocol::errors::internal("could not seal a session id"),
        ))
    })
}

/// Holds a new session here and writes its record to the store (bounded: a store that does
/// not answer leaves the session in memory, stored once the store answers). `503` when this
/// instance already holds its maximum.
pub(super) async fn open_session(
    shared: &Arc<Shared>,
    id: &str,
    version: ProtocolVersion,
    client_info: serde_json::Value,
    client_capabilities: serde_json::Value,
    rid: Option<&RawValue>,
) -> Result<Arc<Session>, Response> {
    let session = Arc::new(Session::new(
        id.into(),
        version,
        client_info.clone(),
        client_capabilities.clone(),
        shared.shutdown.child_token(),
    ));
    if !shared.live.insert(session.clone()) {
        tracing::warn!(
            limit = shared.config.sessions.max_sessions,
            "initialize refused: this instance holds its maximum of sessions"
        );
        return Err(reply::with_retry_after(
            reply::rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                rid,
                &crate::protocol::errors::server(
                    "This instance holds its maximum number of sessions; retry shortly",
                ),
            ),
            5,
        ));
    }
    let record = SessionRecord {
        id: id.to_string(),
        node_id: shared.machine_id.clone(),
        protocol_version: version.as_str().into(),
        client_info,
        client_capabilities,
        created_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64,
    };
    let bound = Duration::from_millis(shared.config.sessions.check_timeout_ms);
    match tokio::time::timeout(bound, shared.store.put(&record)).await {
        Ok(Ok(())) => session.mark_persisted(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "[TransportService] Failed to persist session to Redis")
        }
        Err(_) => tracing::warn!(
            "[TransportService] Failed to persist session to Redis: no answer within {} ms",
            bound.as_millis()
        ),
    }
    tracing::debug!(version = %version, "session opened");
    Ok(session)
}
