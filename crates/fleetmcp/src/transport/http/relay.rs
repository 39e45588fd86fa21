//! The relay seam: a request whose session another live instance holds is handed over here,
//! as it was received (method, path, headers, body bytes: nothing parsed), and the holder's
//! answer is passed back as it comes, a JSON body or an SSE stream of any length.
//!
//! Distributed mode installs a [`Relay`]; a single instance has none, and never needs one:
//! without a holders seam no session is ever found "elsewhere". [`request`] builds the
//! request the seam takes; `locate.rs` decides when to call it.

use async_trait::async_trait;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};

use super::client_key::{RELAYED_PEER_HEADER, peer_of};
use super::respond;

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
            Relayed::Failed(respond::unavailable(
                None,
                "The instance holding this session cannot be reached; retry shortly",
                1,
            ))
        }
    }
}

// The two headers every relayed request gets, by names parsed once (a `&'static str` name is
// parsed again at every insert).
static RELAYED_PEER: HeaderName = HeaderName::from_static(RELAYED_PEER_HEADER);
static TRACEPARENT: HeaderName =
    HeaderName::from_static(crate::telemetry::trace_context::TRACEPARENT);

/// The request as the relay seam takes it, with this hop's `traceparent` (the client's trace,
/// or the one started here), so the holder logs under the same trace id. When nothing records
/// this hop's span it has no trace context, and the request goes on with the client's own
/// headers and body: the holder finds the client's trace in them, as it would directly.
pub(super) fn request(parts: http::request::Parts, body: Bytes) -> RelayRequest {
    let mut headers = parts.headers;
    // The holder counts the request's limits against the client, not against this instance:
    // it gets the client's peer, signed with the hop (a client's own value is replaced). The
    // strings become the values as they are (checked, not copied).
    match peer_of(&parts.extensions) {
        Some(peer) => {
            if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(peer.to_string())) {
                headers.insert(RELAYED_PEER.clone(), v);
            }
        }
        None => {
            headers.remove(&RELAYED_PEER);
        }
    }
    if let Some(trace) = crate::telemetry::labels::trace()
        && let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(trace.header_value()))
    {
        headers.insert(TRACEPARENT.clone(), v);
    }
    RelayRequest {
        method: parts.method,
        uri: parts.uri,
        headers,
        body,
    }
}
