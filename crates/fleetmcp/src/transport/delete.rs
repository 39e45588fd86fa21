//! `DELETE /mcp`: the client ends its session (and gives back its place under
//! `limits.max_sessions_per_key`).

use axum::extract::{Request, State};
use axum::response::Response;
use http::StatusCode;

use super::locate::{self, Asker};
use super::{Ep, SESSION_HEADER, era};

pub(super) async fn handle(State(ep): Ep, req: Request) -> Response {
    let parts = super::bodiless(req);
    // Whom the session counted against (`limits.max_sessions_per_key`), to give its place back.
    let client = super::client_key::Client::of(&ep.app, &parts);
    let h = &parts.headers;
    // 2026-07-28 has no sessions to end; a sessionless DELETE without that version keeps the
    // contract's `400 No valid session ID provided`.
    if !h.contains_key(SESSION_HEADER) && era::names_stateless_version(h) {
        return era::stateless_method_not_allowed("DELETE");
    }
    let (session, _) = match locate::here_or_answer(&ep, parts, Asker::Delete).await {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    ep.app.sessions().end(&session.id).await;
    ep.app.limits().end_session(&client.key, &session.id).await;
    let mut res = Response::new(axum::body::Body::empty());
    *res.status_mut() = StatusCode::NO_CONTENT;
    res
}
