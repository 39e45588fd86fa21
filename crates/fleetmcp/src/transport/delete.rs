//! `DELETE /mcp`: the client ends its session.

use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;

use super::locate::{self, Asker, Place};
use super::{Ep, SESSION_HEADER, era, relay};

pub(super) async fn handle(State(ep): Ep, req: Request) -> Response {
    let parts = super::bodiless(req);
    let h = &parts.headers;
    // 2026-07-28 has no sessions to end; a sessionless DELETE without that version keeps the
    // contract's `400 No valid session ID provided`.
    if !h.contains_key(SESSION_HEADER) && era::names_stateless_version(h) {
        return era::stateless_method_not_allowed("DELETE");
    }
    let session = match locate::locate(&ep.app, h).await {
        Place::Here(s) => s,
        Place::Holder(node) => {
            let req = super::relay_request(parts, Bytes::new());
            return relay::forward(ep.relay(), &node, req).await;
        }
        Place::Refused(why) => return locate::refuse(why, Asker::Delete, None),
    };
    ep.app.sessions().end(&session.id).await;
    let mut res = Response::new(axum::body::Body::empty());
    *res.status_mut() = StatusCode::NO_CONTENT;
    res
}
