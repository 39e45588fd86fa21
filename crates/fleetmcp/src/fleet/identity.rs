//! How an instance names itself to load balancers in distributed mode, as one layer around
//! every route: `X-FrontMCP-Machine-Id` on every response, and the `__frontmcp_node` affinity
//! cookie on the responses that open a session (`initialize`, and the 2024-11-05 `GET /sse`
//! stream, whose session cannot move).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};

use crate::transport::{MACHINE_ID_HEADER, SESSION_HEADER};

/// The header values, computed once.
struct Identity {
    machine_id: HeaderValue,
    cookie: HeaderValue,
}

/// Wraps `router` so that every response names this instance.
pub(super) fn layer(router: Router, machine_id: &str) -> Router {
    let (Ok(id), Ok(cookie)) = (
        HeaderValue::from_str(machine_id),
        HeaderValue::from_str(&format!(
            "__frontmcp_node={machine_id}; Path=/; Max-Age=86400; HttpOnly; SameSite=Strict"
        )),
    ) else {
        tracing::warn!(
            machine_id,
            "the machine id is not a valid header value; responses will not name this instance"
        );
        return router;
    };
    let identity = Arc::new(Identity {
        machine_id: id,
        cookie,
    });
    router.layer(middleware::from_fn_with_state(identity, name_instance))
}

async fn name_instance(State(id): State<Arc<Identity>>, req: Request, next: Next) -> Response {
    let opens_stream = req.uri().path() == "/sse";
    let mut res = next.run(req).await;
    let opens_session = res.status() == StatusCode::OK
        && (res.headers().contains_key(SESSION_HEADER) || opens_stream);
    let h = res.headers_mut();
    // A relayed answer already names the holder that served it.
    if !h.contains_key(MACHINE_ID_HEADER) {
        h.insert(MACHINE_ID_HEADER, id.machine_id.clone());
    }
    if opens_session {
        h.insert(header::SET_COOKIE, id.cookie.clone());
    }
    res
}
