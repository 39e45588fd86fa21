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
//! answer to HTTP. It runs in front of the route handlers (`edge.rs`): a handler gets where its
//! request is served here ([`Located`]: by a held session, or refused for a reason), or never
//! runs, when the request was relayed and its holder answered it.

use crate::telemetry::{RelayOutcome, labels};
use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, StatusCode};
use serde_json::json;
use serde_json::value::RawValue;

use super::relay::{RelayRequest, Relayed};
use super::request_headers::{RequestHead, session_id};
use super::{Endpoint, relay, respond};
use crate::app::App;
use crate::protocol::{ErrorCode, ErrorData, errors};
use crate::session::{Lookup, Missing, Session, Sessions};

/// Which method asked: the answers for a missing or unknown session differ slightly.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Asker {
    Post,
    Get,
    Delete,
}

/// A request once located, when this instance serves it: by the session it holds, or by no
/// session, for a reason the route answers once the request's id is known. Its headers and
/// body are as they now are (after a hop the relay seam handed back: as relayed), and so is
/// the head read from them.
pub(super) struct Located {
    pub session: Result<Arc<Session>, Missing>,
    pub head: RequestHead,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Where the request with head `parts` (its checked headers read into `head`) and `body`, from
/// the caller whose principal's fingerprint is `principal`, is served: here ([`Located`], with
/// the headers taken from `parts`), or, for a session another instance holds, by that instance
/// through the relay seam (taken over here when it is gone), whose answer is the `Err`.
/// `parts` is lent, not moved in: the caller holds it across its body read already, and a copy
/// in this future too made every request's future larger by its size (issue 40); only the
/// relay's hop takes it.
pub(super) async fn resolve(
    ep: &Endpoint,
    parts: &mut Parts,
    head: RequestHead,
    body: Bytes,
    principal: Option<&str>,
) -> Result<Located, Response> {
    let (session, head, headers, body) = match locate(&ep.app, &parts.headers, principal).await {
        Lookup::Held(s) => (Ok(s), head, std::mem::take(&mut parts.headers), body),
        Lookup::Missing(why) => (Err(why), head, std::mem::take(&mut parts.headers), body),
        Lookup::HeldElsewhere(holder) => {
            // The request's head, moved out for the hop (an empty one left in its place).
            let parts = std::mem::replace(parts, http::Request::new(()).into_parts().0);
            // Boxed: the hop and the take-over are most of this future's size, and every
            // POST's future holds room for them (issue 23: axum copies it whole into a box).
            let relayed = relay_or_take_over(ep, &holder, relay::request(parts, body), principal);
            let (session, req) = Box::pin(relayed).await?;
            (
                session,
                RequestHead::read(&req.headers),
                req.headers,
                req.body,
            )
        }
    };
    Ok(Located {
        session,
        head,
        headers,
        body,
    })
}

/// Hands `req` to `holder` through the relay seam: its answer, or, when the holder is gone,
/// where the request is served now that its session was taken over (here, or by the instance
/// that took it over first, one hop more), with the request back.
async fn relay_or_take_over(
    ep: &Endpoint,
    holder: &str,
    req: RelayRequest,
    principal: Option<&str>,
) -> Result<(Result<Arc<Session>, Missing>, RelayRequest), Response> {
    let meters = ep.app.meters();
    let began = std::time::Instant::now();
    let req = match relay::forward(ep.relay(), holder, req).await {
        Relayed::Answered(res) => {
            meters.relayed(RelayOutcome::Answered, began.elapsed());
            labels::note_method(labels::Method::RELAYED);
            return Err(res);
        }
        Relayed::Failed(res) => {
            meters.relayed(RelayOutcome::Failed, began.elapsed());
            labels::note_method(labels::Method::RELAYED);
            return Err(res);
        }
        Relayed::HolderGone(req) => {
            meters.relayed(RelayOutcome::HolderGone, began.elapsed());
            req
        }
    };
    let id = match session_id(&req.headers) {
        Some(Some(id)) => id,
        Some(None) => return Ok((Err(Missing::Invalid), req)),
        None => return Ok((Err(Missing::NoId), req)),
    };
    let began = std::time::Instant::now();
    let lookup = ep.app.sessions().take_over(id, holder, principal).await;
    if matches!(lookup, Lookup::Held(_)) {
        meters.took_over(began.elapsed());
    }
    match for_caller(lookup, principal) {
        Lookup::HeldElsewhere(next) => {
            let began = std::time::Instant::now();
            match relay::forward(ep.relay(), &next, req).await {
                Relayed::Answered(res) => {
                    meters.relayed(RelayOutcome::Answered, began.elapsed());
                    labels::note_method(labels::Method::RELAYED);
                    Err(res)
                }
                Relayed::Failed(res) => {
                    meters.relayed(RelayOutcome::Failed, began.elapsed());
                    labels::note_method(labels::Method::RELAYED);
                    Err(res)
                }
                Relayed::HolderGone(_) => {
                    meters.relayed(RelayOutcome::HolderGone, began.elapsed());
                    Err(respond::unavailable(
                        None,
                        "The instances holding this session stopped; retry shortly",
                        1,
                    ))
                }
            }
        }
        Lookup::Held(s) => Ok((Ok(s), req)),
        Lookup::Missing(why) => Ok((Err(why), req)),
    }
}

/// Where a 2024-11-05 `POST /message` for session `sid` is served (such a session cannot move
/// between instances, [`locate_pinned`]): here, nowhere, or, for a session another instance
/// holds, by that instance, whose answer (or the `503` that it cannot be reached) is the `Err`.
pub(super) async fn pinned(
    ep: &Endpoint,
    sid: &str,
    parts: Parts,
    body: &Bytes,
    principal: Option<&str>,
) -> Result<Result<Arc<Session>, Missing>, Response> {
    let holder = match locate_pinned(&ep.app, sid, principal).await {
        Lookup::Held(s) => return Ok(Ok(s)),
        Lookup::Missing(why) => return Ok(Err(why)),
        Lookup::HeldElsewhere(holder) => holder,
    };
    match relay::forward(ep.relay(), &holder, relay::request(parts, body.clone())).await {
        Relayed::Answered(res) | Relayed::Failed(res) => Err(res),
        // The instance with its stream cannot be found (its heartbeat is gone). Once its
        // process is certainly gone (`Sessions::pinned_stream_gone`), the stream and the
        // session went with it: nothing can take it over, and the client must open a new one,
        // which the contract's `404` for an ended session tells it.
        Relayed::HolderGone(_) if ep.app.sessions().pinned_stream_gone(sid, &holder).await => {
            Ok(Err(Missing::Expired))
        }
        // It may only have lost Redis with the stream still open: a `404` would make the
        // client drop a stream that may be alive. The documented `503`, and the client retries.
        Relayed::HolderGone(_) => Err(respond::unavailable(
            respond::message_id(body).as_deref(),
            "The instance holding this session's stream cannot be reached; retry shortly",
            1,
        )),
    }
}

/// Where the session the request's `Mcp-Session-Id` names is served, for the caller whose
/// principal's fingerprint is `principal` (`None`: authorization is off).
async fn locate(app: &App, headers: &HeaderMap, principal: Option<&str>) -> Lookup {
    match session_id(headers) {
        Some(Some(id)) => for_caller(app.sessions().find(id, principal).await, principal),
        Some(None) => Lookup::Missing(Missing::Invalid),
        None => Lookup::Missing(Missing::NoId),
    }
}

/// The same for a session that cannot move between instances (2024-11-05's `/message`).
async fn locate_pinned(app: &App, id: &str, principal: Option<&str>) -> Lookup {
    for_caller(app.sessions().find_pinned(id).await, principal)
}

/// `lookup` as the caller whose principal's fingerprint is `principal` may see it: a held session serves
/// only the principal that made it, and anyone else is told what a stranger to the id would be
/// (the contract's token mismatch), so ids are not confirmed to them. A session held elsewhere
/// is checked by its holder, which gets the request's token.
fn for_caller(lookup: Lookup, principal: Option<&str>) -> Lookup {
    match lookup {
        Lookup::Held(s) if !s.made_by(principal) => Sessions::stranger(&s.id),
        other => other,
    }
}

/// The answer to a request whose session cannot be served here or anywhere; `id` is the
/// JSON-RPC id, echoed in error answers.
pub(super) fn refuse(why: Missing, asker: Asker, id: Option<&RawValue>) -> Response {
    match why {
        Missing::NoId => match asker {
            Asker::Post => respond::rpc_error(
                StatusCode::BAD_REQUEST,
                id,
                &ErrorData::new(
                    ErrorCode::INVALID_REQUEST,
                    "Session not initialized — send `initialize` first",
                    Some(json!({"transport": "streamable-http", "expected": "initialize"})),
                ),
            ),
            Asker::Get => respond::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &errors::server("Bad Request: Mcp-Session-Id header is required"),
            ),
            Asker::Delete => respond::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &errors::server("No valid session ID provided"),
            ),
        },
        Missing::Invalid => invalid_session_id(id),
        Missing::Deleted => respond::text(StatusCode::NOT_FOUND, "Session not found"),
        Missing::Expired => respond::rpc_error(
            StatusCode::NOT_FOUND,
            id,
            &ErrorData::new(ErrorCode(-32001), "session expired", None),
        ),
        Missing::Unknown => match asker {
            Asker::Get => respond::text(StatusCode::NOT_FOUND, "Session not found"),
            _ => respond::rpc_error(
                StatusCode::NOT_FOUND,
                id,
                &errors::server("session not initialized"),
            ),
        },
        Missing::StoreUnavailable => {
            respond::unavailable(id, "The session store is unavailable; retry shortly", 1)
        }
        Missing::Unconfirmed => respond::unavailable(
            id,
            "This instance cannot reach the session store to confirm it still serves this session; retry shortly",
            1,
        ),
        Missing::Full => respond::unavailable(
            id,
            "This instance holds too many sessions; retry shortly",
            1,
        ),
    }
}

fn invalid_session_id(id: Option<&RawValue>) -> Response {
    respond::rpc_error(
        StatusCode::NOT_FOUND,
        id,
        &errors::server("invalid session id"),
    )
}
