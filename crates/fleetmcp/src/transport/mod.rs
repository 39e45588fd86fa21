//! Streamable HTTP on `/mcp`, plus `/healthz` and `/readyz`.
//!
//! A request flows: [`guard`] (Host and Origin, DNS rebinding) → the method's handler, which
//! checks headers, reads the body under the size limit and turns the request into an
//! [`McpRequest`] (method, headers, raw body) → [`session_ref`] finds the session from the
//! header alone → dispatch. Up to that point nothing has parsed the body, so distributed mode
//! can hand an `McpRequest` to the instance that holds the session and stream its answer
//! back unchanged.
//!
//! Architecture invariant: this module is the only one that knows HTTP.

mod delete;
mod get;
mod guard;
mod post;
pub(crate) mod reply;
mod session_ref;
mod sse;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get as get_route;
use bytes::Bytes;
use http::HeaderMap;

use crate::config::DeploymentMode;
use crate::server::Shared;

/// The header that names the instance that served a response (distributed mode).
pub const MACHINE_ID_HEADER: &str = "x-frontmcp-machine-id";
/// The session header (names are case-insensitive).
pub const SESSION_HEADER: &str = "mcp-session-id";
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// A request to `/mcp` as received: everything needed to serve it here or elsewhere.
pub(crate) struct McpRequest {
    pub headers: HeaderMap,
    pub body: Bytes,
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let mcp = Router::new()
        .route(
            "/mcp",
            axum::routing::post(post::handle)
                .get(get::handle)
                .delete(delete::handle),
        )
        .layer(middleware::from_fn_with_state(shared.clone(), guard::check));
    let health = Router::new()
        .route("/healthz", get_route(crate::health::healthz))
        .route("/health", get_route(crate::health::healthz))
        .route("/readyz", get_route(crate::health::readyz));
    let app = mcp.merge(health).with_state(shared.clone());
    if shared.config.deployment_mode == DeploymentMode::Distributed {
        app.layer(middleware::from_fn_with_state(shared, machine_id_header))
    } else {
        app
    }
}

/// Distributed mode: every response names the instance that served it, for load balancers
/// that route by it.
async fn machine_id_header(
    State(shared): State<Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
    let mut res = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&shared.machine_id) {
        res.headers_mut().insert(MACHINE_ID_HEADER, v);
    }
    res
}
