//! Where a session's request is served, decided from its headers before the body is parsed:
//! here (a held session), on its holder through the relay seam, or nowhere, with the
//! contract's exact answer:
//!
//! | situation | answer |
//! |---|---|
//! | no header (POST) | `400` `-32600` ``Session not initialized — send `initialize` first`` |
//! | an id that does not open under our secret | `404` `-32000` `invalid session id` |
//! | deleted on this instance | `404` `text/plain` `Session not found` |
//! | expired (idle, or its stored record is gone) | `404` `-32001` `session expired` |
//! | opens, but no instance knows it | `404` `-32000` `session not initialized` |
//! | the store could not be read in time | `503` `Retry-After: 1` |
//! | held for another principal (authorization on) | as for an id no instance knows |
//!
//! Whether the session exists is decided by `session::Sessions`; this file only maps its
//! answer to HTTP.

use crate::telemetry::{RelayOutcome, scope};
use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, StatusCode};
use serde_json::json;
use serde_json::value::RawValue;

use super::relay::{RelayRequest, Relayed};
use super::{Endpoint, SESSION_HEADER, authorize, relay, reply};
use crate::app::App;
use crate::protocol::{ErrorCode, ErrorData, errors};
use crate::session::{Lookup, Missing, Session};

/// Where a request is served.
pub(super) enum Place {
    /// Here, by the session this instance holds.
    Here(Arc<Session>),
    /// By another instance (its machine id): the request goes to the relay seam as received.
    Holder(String),
    /// Nowhere.
    Refused(Refusal),
}

/// Why a request has no session to serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// It carries no session id.
    NoSession,
    /// It names one that cannot be served.
    Missing(Missing),
}

/// Which method asked: the answers for a missing or unknown session differ slightly.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Asker {
    Post,
    Get,
    Delete,
}

/// For a request without a body (GET, DELETE): the session that serves it here, with the
/// request's headers; otherwise the answer, the holder's through the relay seam or the refusal.
pub(super) async fn here_or_answer(
    ep: &Endpoint,
    parts: Parts,
    asker: Asker,
) -> Result<(Arc<Session>, HeaderMap), Response> {
    let principal = authorize::principal(&parts.extensions);
    let owner = authorize::owner(&principal);
    let (place, headers) = match locate(&ep.app, &parts.headers, owner).await {
        Place::Holder(node) => {
            let req =
                relay_or_take_over(ep, &node, relay::request(parts, Bytes::new()), owner).await?;
            (req.0, req.1.headers)
        }
        place => (place, parts.headers),
    };
    match place {
        Place::Here(s) => Ok((s, headers)),
        Place::Refused(why) => Err(refuse(why, asker, None)),
        Place::Holder(_) => Err(reply::unavailable(
            None,
            "The session moved while the request was read; retry",
            1,
        )),
    }
}

/// Hands `req` to `holder` through the relay seam: its answer, or, when the holder is gone,
/// where the request is served now that its session was taken over (here, or by the instance
/// that took it over first, one hop more), with the request back.
pub(super) async fn relay_or_take_over(
    ep: &Endpoint,
    holder: &str,
    req: RelayRequest,
    owner: Option<&str>,
) -> Result<(Place, RelayRequest), Response> {
    let meters = ep.app.meters();
    let began = std::time::Instant::now();
    let req = match relay::forward(ep.relay(), holder, req).await {
        Relayed::Answered(res) => {
            meters.relayed(RelayOutcome::Answered, began.elapsed());
            scope::note_method(scope::Method::RELAYED);
            return Err(res);
        }
        Relayed::Failed(res) => {
            meters.relayed(RelayOutcome::Failed, began.elapsed());
            scope::note_method(scope::Method::RELAYED);
            return Err(res);
        }
        Relayed::HolderGone(req) => {
            meters.relayed(RelayOutcome::HolderGone, began.elapsed());
            req
        }
    };
    let Some(id) = req
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok((Place::Refused(Refusal::NoSession), req));
    };
    let began = std::time::Instant::now();
    let lookup = ep.app.sessions().take_over(id, holder).await;
    if matches!(lookup, Lookup::Held(_)) {
        meters.took_over(began.elapsed());
    }
    match place(lookup, owner) {
        Place::Holder(next) => {
            let began = std::time::Instant::now();
            match relay::forward(ep.relay(), &next, req).await {
                Relayed::Answered(res) => {
                    meters.relayed(RelayOutcome::Answered, began.elapsed());
                    scope::note_method(scope::Method::RELAYED);
                    Err(res)
                }
                Relayed::Failed(res) => {
                    meters.relayed(RelayOutcome::Failed, began.elapsed());
                    scope::note_method(scope::Method::RELAYED);
                    Err(res)
                }
                Relayed::HolderGone(_) => {
                    meters.relayed(RelayOutcome::HolderGone, began.elapsed());
                    Err(reply::unavailable(
                        None,
                        "The instances holding this session stopped; retry shortly",
                        1,
                    ))
                }
            }
        }
        place => Ok((place, req)),
    }
}

/// Where the session the request's `Mcp-Session-Id` names is served, for the caller whose
/// principal has fingerprint `owner` (`None`: authorization is off).
pub(super) async fn locate(app: &App, headers: &HeaderMap, owner: Option<&str>) -> Place {
    let Some(raw) = headers.get(SESSION_HEADER) else {
        return Place::Refused(Refusal::NoSession);
    };
    let id = raw.to_str().unwrap_or("");
    place(app.sessions().find(id).await, owner)
}

/// The same for a session that cannot move between instances (2024-11-05's `/message`).
pub(super) async fn locate_pinned(app: &App, id: &str, owner: Option<&str>) -> Place {
    place(app.sessions().find_pinned(id).await, owner)
}

/// A held session serves only the principal that made it: anyone else is told what a stranger
/// to the id would be (the contract's token mismatch), so ids are not confirmed to them. A
/// session held elsewhere is checked by its holder, which gets the request's token.
fn place(lookup: Lookup, owner: Option<&str>) -> Place {
    match lookup {
        Lookup::Held(s) if !s.is_owned_by(owner) => {
            tracing::warn!(session_id = %crate::session::LogId(&s.id), "[TransportService] Session token mismatch during lookup");
            Place::Refused(Refusal::Missing(Missing::Unknown))
        }
        Lookup::Held(s) => Place::Here(s),
        Lookup::Elsewhere(node) => Place::Holder(node),
        Lookup::Missing(m) => Place::Refused(Refusal::Missing(m)),
    }
}

/// The answer to a request whose session cannot be served here or anywhere; `id` is the
/// JSON-RPC id, echoed in error answers.
pub(super) fn refuse(why: Refusal, asker: Asker, id: Option<&RawValue>) -> Response {
    match why {
        Refusal::NoSession => match asker {
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
                &errors::server("Bad Request: Mcp-Session-Id header is required"),
            ),
            Asker::Delete => reply::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &errors::server("No valid session ID provided"),
            ),
        },
        Refusal::Missing(Missing::Invalid) => invalid_session_id(id),
        Refusal::Missing(Missing::Deleted) => {
            reply::text(StatusCode::NOT_FOUND, "Session not found")
        }
        Refusal::Missing(Missing::Expired) => reply::rpc_error(
            StatusCode::NOT_FOUND,
            id,
            &ErrorData::new(ErrorCode(-32001), "session expired", None),
        ),
        Refusal::Missing(Missing::Unknown) => match asker {
            Asker::Get => reply::text(StatusCode::NOT_FOUND, "Session not found"),
            _ => reply::rpc_error(
                StatusCode::NOT_FOUND,
                id,
                &errors::server("session not initialized"),
            ),
        },
        Refusal::Missing(Missing::StoreUnavailable) => {
            reply::unavailable(id, "The session store is unavailable; retry shortly", 1)
        }
        Refusal::Missing(Missing::Unconfirmed) => reply::unavailable(
            id,
            "This instance cannot reach the session store to confirm it still serves this session; retry shortly",
            1,
        ),
        Refusal::Missing(Missing::Full) => reply::unavailable(
            id,
            "This instance holds too many sessions; retry shortly",
            1,
        ),
    }
}

pub(super) fn invalid_session_id(id: Option<&RawValue>) -> Response {
    reply::rpc_error(
        StatusCode::NOT_FOUND,
        id,
        &errors::server("invalid session id"),
    )
}
