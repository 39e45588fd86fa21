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
mod legacy_sse;
mod listen;
mod post;
pub(crate) mod reply;
mod session_ref;
mod sse;
mod stateless;

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
                .delete(delete::handle)
                .fallback(method_not_allowed),
        )
        .route("/sse", get_route(legacy_sse::open))
        .route(
            legacy_sse::MESSAGE_PATH,
            axum::routing::post(legacy_sse::post),
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

/// Whether the version header names a version of the stateless era (or any non-session one).
pub(crate) fn names_stateless_version(h: &HeaderMap) -> bool {
    h.get(PROTOCOL_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| crate::protocol::ProtocolVersion::parse(v.trim()).is_none())
}

/// A `GET` that is not the stream of a session: 2026-07-28 has no GET stream.
pub(crate) fn is_stateless_stream_request(h: &HeaderMap) -> bool {
    !h.contains_key(SESSION_HEADER) || names_stateless_version(h)
}

/// `405` for GET and DELETE in the stateless era, with `Allow: POST` as clients expect.
pub(crate) fn stateless_method_not_allowed(method: &'static str) -> Response {
    let body = match method {
        "GET" => "HTTP GET is not supported by MCP protocol 2026-07-28",
        _ => "HTTP DELETE is not supported by MCP protocol 2026-07-28",
    };
    let mut res = reply::text(http::StatusCode::METHOD_NOT_ALLOWED, body);
    res.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static("POST"));
    res
}

/// Any other method on `/mcp`: a JSON-RPC error, like every other error answer.
async fn method_not_allowed() -> Response {
    let mut res = reply::rpc_error(
        http::StatusCode::METHOD_NOT_ALLOWED,
        None,
        &crate::protocol::errors::server("Method Not Allowed: use POST, GET or DELETE"),
    );
    res.headers_mut().insert(
        http::header::ALLOW,
        HeaderValue::from_static("GET, POST, DELETE"),
    );
    res
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
