//! `DELETE /mcp`: the client ends its session.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;
use http::StatusCode;

use super::session_ref::{self, Asker};
use crate::server::Shared;
use crate::session::Ended;

pub(super) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    // 2026-07-28 has no sessions to end; a sessionless DELETE without that version keeps the
    // contract's `400 No valid session ID provided`.
    let h = req.headers();
    if !h.contains_key(super::SESSION_HEADER) && super::names_stateless_version(h) {
        return super::stateless_method_not_allowed("DELETE");
    }
    let session = match session_ref::find(&shared, req.headers(), Asker::Delete, None).await {
        Ok(s) => s,
        Err(res) => return res,
    };
    shared.live.remove(&session.id, Ended::Deleted);
    shared.events.forget(&session.id).await;
    if let Err(e) = shared.store.delete(&session.id).await {
        tracing::warn!(error = %e, "the stored session could not be deleted");
    }
    let mut res = Response::new(axum::body::Body::empty());
    *res.status_mut() = StatusCode::NO_CONTENT;
    res
}
