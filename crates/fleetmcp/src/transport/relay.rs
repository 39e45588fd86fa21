//! The relay seam: a request whose session another live instance holds is handed over here,
//! as it was received (method, path, headers, body bytes: nothing parsed), and the holder's
//! answer is passed back as it comes, a JSON body or an SSE stream of any length.
//!
//! Distributed mode installs a [`Relay`]; a single instance has none, and never needs one:
//! without an ownership seam no session is ever found "elsewhere".

use async_trait::async_trait;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method, Uri};

use super::locate;

/// A request as received, ready to be served by another instance.
#[derive(Debug, Clone)]
pub struct RelayRequest {
    pub method: Method,
    /// Path and query (`/mcp`, `/message?sessionId=…`).
    pub uri: Uri,
    pub headers: HeaderMap,
    /// The body as read (empty for GET and DELETE).
    pub body: Bytes,
}

/// What became of a relayed request.
pub enum Relayed {
    /// The holder's answer (any status).
    Answered(Response),
    /// The holder could not be reached or did not answer: the `503` (with `Retry-After`) that
    /// says so, for the client. Counted apart (`fleetmcp_relays_total{outcome="failed"}`).
    Failed(Response),
    /// The holder is certainly gone (a crash): the request comes back, to be served here by
    /// taking the session over.
    HolderGone(RelayRequest),
}

/// Serves a request on the instance that holds its session.
#[async_trait]
pub trait Relay: Send + Sync + 'static {
    /// Hands `req` to the instance `holder` (its machine id). A holder that does not answer must
    /// become a `503` with `Retry-After`, never a hang; one known to be gone hands the request
    /// back.
    async fn forward(&self, holder: &str, req: RelayRequest) -> Relayed;
}

/// Relays `req` to `holder`, or, with no relay installed, answers `503`.
pub(super) async fn forward(relay: Option<&dyn Relay>, holder: &str, req: RelayRequest) -> Relayed {
    match relay {
        Some(r) => r.forward(holder, req).await,
        None => {
            tracing::warn!(
                holder,
                "a session held by another instance, and no relay to reach it"
            );
            Relayed::Failed(locate::unavailable(
                None,
                "The instance holding this session cannot be reached; retry shortly",
                1,
            ))
        }
    }
}
