//! `DELETE /mcp`: the client ends its session (and gives back its place under
//! `limits.max_sessions_per_key`).

use axum::extract::State;
use axum::response::Response;
use http::StatusCode;

use super::EndpointState;
use super::client_key::Client;
use super::edge::{Held, SessionEra};

/// Ends the session, held here, of a DELETE of the session era (checked in front of this
/// handler, `edge.rs`). `client` is whom the session counted against
/// (`limits.max_sessions_per_key`), to give its place back.
pub(super) async fn handle(
    State(ep): EndpointState,
    client: Client,
    _: SessionEra,
    Held { session, .. }: Held,
) -> Response {
    ep.app.sessions().end(&session.id).await;
    // Its place was taken when its id was minted (a moment before `initialize` was admitted).
    let admitted_ms = ep
        .app
        .sessions()
        .minted_at_ms(&session.id)
        .unwrap_or_else(crate::clock::unix_ms);
    let ttl_ms = crate::transport::core::initialize::session_lifetime_ms(&ep.app);
    ep.app
        .limits()
        .end_session(&client.key, admitted_ms, ttl_ms)
        .await;
    let mut res = Response::new(axum::body::Body::empty());
    *res.status_mut() = StatusCode::NO_CONTENT;
    res
}
