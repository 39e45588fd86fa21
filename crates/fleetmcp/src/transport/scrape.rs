//! `GET /metrics`: this server's metrics in the Prometheus text format (see
//! [`crate::telemetry::meters`]), behind the same `Host` and `Origin` checks as `/mcp`, and
//! only when `http.metrics` is on (else the route does not exist: `404`).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::Endpoint;

/// The exposition format's content type (text format 0.0.4).
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(super) async fn metrics(State(ep): State<Arc<Endpoint>>) -> Response {
    let held = ep.app.sessions().held();
    match ep.app.meters().render(held) {
        Some(text) => {
            let mut res = text.into_response();
            res.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            res
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
