//! `DELETE /mcp`: the client ends its session.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;
use http::StatusCode;

use super::session_ref::{self, Asker};
use crate::server::Shared;
use crate::session::Ended;

pub(super) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let session = match session_ref::find(&shared, req.headers(), Asker::Delete).await {
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
