//! `GET /metrics`: this server's metrics in the Prometheus text format (see
//! [`crate::telemetry::meters`]), behind the same `Host` and `Origin` checks as `/mcp`, and
//! only when `http.metrics` is on (else the route does not exist: `404`). A scrape runs the
//! readiness probes (`fleetmcp_ready`), so an alert sees an instance that is up but unready.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::Endpoint;

/// The exposition format's content type (text format 0.0.4).
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(super) async fn metrics(State(ep): State<Arc<Endpoint>>) -> Response {
    if !ep.app.meters().enabled() {
        return StatusCode::NOT_FOUND.into_response();
    }
    // `fleetmcp_ready` is what `/readyz` would answer now: the same probes (a Redis `PING`,
    // in distributed mode the heartbeat's `GET`), each bounded, once per scrape.
    let (ready, _) = super::health::evaluate(&ep).await;
    let held = ep.app.sessions().held();
    match ep.app.meters().render(held, ready) {
        Some(text) => {
            let mut res = text.into_response();
            res.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            res
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
