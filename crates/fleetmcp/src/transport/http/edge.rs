//! The edge work in front of the MCP routes' handlers, as axum extractors: a handler's
//! signature lists what runs before it, in order (axum runs extractors left to right, the one
//! that reads the body last), and a check that fails answers in the handler's place, so the
//! handler starts from a request that passed them.
//!
//! | extractor | in front of | what runs |
//! |---|---|---|
//! | [`Post`] | `POST /mcp` | its [`RequestHead`] read once, then `Content-Type` (415), `Accept` (406): [`checks`]; who sent it ([`Client`]); then what [`Located`] says |
//! | [`SessionEra`] | `GET`, `DELETE /mcp` | a request of another era: `405` (or `400`): [`era`] |
//! | [`GetHeaders`] | `GET /mcp` | `Accept: text/event-stream` (406) |
//! | [`Client`] | `DELETE /mcp`, `/sse`, `/message` (and within [`Post`]) | who sent it: principal, limit key ([`super::client_key`]) |
//! | [`Located`] | `POST /mcp` (within [`Post`]) | the body under its limit (413, 408), a batch its version header forbids (400), then, for a session-era request by its headers ([`era`]), where its session is ([`locate`]): answered by its holder through the relay seam, or served here, or refused once the request's id is known |
//! | [`Held`] | `GET`, `DELETE /mcp` | where its session is: relayed, served here, or refused at once |
//! | [`Pinned`] | `POST /message` | `Content-Type` (415), one `sessionId` (400), the body, where its pinned session is: relayed, here, or refused |
//!
//! The checks themselves live in the modules named; this file only puts them in front. What
//! needs the parsed body (the era of a POST once its `_meta` may decide, the session-era
//! version) runs in the handler.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Method, StatusCode};

use super::client_key::Client;
use super::locate::{self, Asker, Located};
use super::request_headers::RequestHead;
use super::{Endpoint, authorize, batch, checks, era, respond};
use crate::protocol::errors;
use crate::session::{Missing, Session};

impl FromRequestParts<Arc<Endpoint>> for Client {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, ep: &Arc<Endpoint>) -> Result<Self, Infallible> {
        Ok(Client::of(&ep.app, parts))
    }
}

/// A GET that takes `text/event-stream` ([`checks::get_headers`]).
pub(super) struct GetHeaders;

impl FromRequestParts<Arc<Endpoint>> for GetHeaders {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &Arc<Endpoint>) -> Result<Self, Response> {
        checks::get_headers(&RequestHead::read(&parts.headers)).map(|()| GetHeaders)
    }
}

/// A GET or DELETE of the session era, the only one that has them ([`era::session_only`]).
pub(super) struct SessionEra;

impl FromRequestParts<Arc<Endpoint>> for SessionEra {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &Arc<Endpoint>) -> Result<Self, Response> {
        era::session_only(&parts.method, &parts.headers).map(|()| SessionEra)
    }
}

/// `POST /mcp` at its edge, in this order: its head read once ([`RequestHead`]) and checked
/// (`Content-Type` 415, `Accept` 406: [`checks`]), who sent it ([`Client`]), then its body
/// read and where it is served decided from its headers, before the body is parsed
/// ([`Located`]).
pub(super) struct Post {
    pub client: Client,
    pub located: Located,
}

impl FromRequest<Arc<Endpoint>> for Post {
    type Rejection = Response;

    async fn from_request(req: Request, ep: &Arc<Endpoint>) -> Result<Self, Response> {
        let head = RequestHead::read(req.headers());
        checks::post_headers(&head)?;
        let (mut parts, body) = req.into_parts();
        let client = Client::of(&ep.app, &parts);
        let body = received(&parts.headers, body, ep).await?;
        // A batch the version header forbids costs no session lookup.
        batch::check_header_version(&head, &body)?;
        // The relay seam considers session-era requests by their headers alone (the hot path).
        if !era::session_by_headers(&head) {
            let located = Located {
                session: Err(Missing::NoId),
                head,
                headers: parts.headers,
                body,
            };
            return Ok(Post { client, located });
        }
        let principal = authorize::principal(&parts.extensions);
        let fingerprint = authorize::fingerprint(&principal);
        let located = locate::resolve(ep, &mut parts, head, body, fingerprint).await?;
        Ok(Post { client, located })
    }
}

/// The session a GET or DELETE is served by here, with the request's headers (after a hop the
/// relay seam handed back: as relayed). A session another instance holds is answered there;
/// one that cannot be served is refused at once, as the request's method is
/// ([`locate::refuse`]).
pub(super) struct Held {
    pub session: Arc<Session>,
    pub headers: HeaderMap,
}

impl FromRequest<Arc<Endpoint>> for Held {
    type Rejection = Response;

    async fn from_request(req: Request, ep: &Arc<Endpoint>) -> Result<Self, Response> {
        let (mut parts, _) = req.into_parts();
        // GET's handler also serves HEAD (axum routes it there).
        let asker = match parts.method {
            Method::DELETE => Asker::Delete,
            _ => Asker::Get,
        };
        let principal = authorize::principal(&parts.extensions);
        let fingerprint = authorize::fingerprint(&principal);
        let head = RequestHead::read(&parts.headers);
        let located = locate::resolve(ep, &mut parts, head, Bytes::new(), fingerprint).await?;
        match located.session {
            Ok(session) => Ok(Held {
                session,
                headers: located.headers,
            }),
            Err(why) => Err(locate::refuse(why, asker, None)),
        }
    }
}

/// A 2024-11-05 `POST /message`, located: its session id (`sessionId` in the query), its body,
/// and the session that serves it here, or why none does (the route words the refusal: these
/// sessions never move). A session another instance holds is answered there
/// ([`locate::pinned`]).
pub(super) struct Pinned {
    pub sid: String,
    pub session: Result<Arc<Session>, Missing>,
    pub body: Bytes,
}

/// The one `sessionId` of `/message`'s query: `400` when there is none, and when there are
/// two (which one names the session would be a guess, like a repeated `Mcp-Session-Id`).
fn message_session_id(query: Option<&str>) -> Result<String, Response> {
    let refuse = |why| {
        Err(respond::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::server(why),
        ))
    };
    let mut ids = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(name, _)| name == "sessionId")
        .map(|(_, id)| id);
    match (ids.next(), ids.next()) {
        (Some(id), None) => Ok(id.into_owned()),
        (None, _) => refuse("Bad Request: sessionId is required"),
        (Some(_), Some(_)) => refuse("Bad Request: sessionId is repeated"),
    }
}

impl FromRequest<Arc<Endpoint>> for Pinned {
    type Rejection = Response;

    async fn from_request(req: Request, ep: &Arc<Endpoint>) -> Result<Self, Response> {
        checks::json_body(&RequestHead::read(req.headers()))?;
        let (parts, body) = req.into_parts();
        let sid = message_session_id(parts.uri.query())?;
        let body = received(&parts.headers, body, ep).await?;
        // The relay seam: decided from the query alone, before the body is parsed.
        let principal = authorize::principal(&parts.extensions);
        let fingerprint = authorize::fingerprint(&principal);
        let session = locate::pinned(ep, &sid, parts, &body, fingerprint).await?;
        Ok(Pinned { sid, session, body })
    }
}

/// The body, read under `http.max_body_bytes` (413) and in time (408) ([`checks::read_body`]),
/// by the request's headers `h`. The head stays with the caller: passed through by value, it
/// was held in this future as well as in the caller's, and the request's future grew by its
/// size (issue 40).
pub(super) async fn received(h: &HeaderMap, body: Body, ep: &Endpoint) -> Result<Bytes, Response> {
    let limit = ep.app.config().http.max_body_bytes;
    checks::read_body(h, body, limit).await
}
