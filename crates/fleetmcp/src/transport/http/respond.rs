//! Building HTTP answers: JSON-RPC bodies with the right status, and the exact session
//! errors of the deployment contract.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::value::RawValue;

use crate::config::RateLimit;
use crate::protocol::{ErrorData, encode_error, errors};

pub(crate) fn json(status: StatusCode, body: Bytes) -> Response {
    let mut res = Response::new(Body::from(body));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// A JSON-RPC error answer (`id: null` when the request had none or it could not be read).
pub(crate) fn rpc_error(status: StatusCode, id: Option<&RawValue>, error: &ErrorData) -> Response {
    json(status, encode_error(id, error))
}

/// The answer to a request whose reply is the JSON-RPC error `error`: with `status`, unless the
/// error is a store's refusal ([`errors::unavailable`]): that one is `503` with `Retry-After`
/// in either era, so a client or a load balancer retries it as it would any other refusal.
pub(crate) fn error_reply(
    status: StatusCode,
    id: Option<&RawValue>,
    error: &ErrorData,
) -> Response {
    match errors::unavailable_retry_after(error) {
        Some(secs) => with_retry_after(rpc_error(StatusCode::SERVICE_UNAVAILABLE, id, error), secs),
        None => rpc_error(status, id, error),
    }
}

/// The `id` of the single JSON-RPC message in `body`, read only to echo it in a refusal
/// (`None` for a notification, a batch, or a body that is not JSON).
pub(crate) fn message_id(body: &[u8]) -> Option<Box<RawValue>> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: Option<Box<RawValue>>,
    }
    serde_json::from_slice::<Id>(body).ok()?.id
}

pub(crate) fn text(status: StatusCode, body: &'static str) -> Response {
    let mut res = Response::new(Body::from(body));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

pub(crate) fn accepted() -> Response {
    let mut res = Response::new(Body::empty());
    *res.status_mut() = StatusCode::ACCEPTED;
    res
}

/// `503` with `Retry-After` and the JSON-RPC error `-32000` `message`: a request that cannot be
/// served right now (its session's store or holder does not answer, this instance is full).
pub(crate) fn unavailable(id: Option<&RawValue>, message: &'static str, retry_s: u64) -> Response {
    with_retry_after(
        rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            &errors::server(message),
        ),
        retry_s,
    )
}

pub(crate) fn with_retry_after(mut res: Response, seconds: u64) -> Response {
    if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
        res.headers_mut().insert(header::RETRY_AFTER, v);
    }
    res
}

/// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers), structured-field
/// lists of one item each, for a request the quota policy `name` (`rate`) refused:
/// `RateLimit-Policy: "rate";q=<requests>;w=<window in seconds, rounded up>` and
/// `RateLimit: "rate";r=0;t=<seconds until one more request is allowed>` (`Retry-After`).
pub(crate) fn with_rate_limit(
    mut res: Response,
    name: &'static str,
    rate: &RateLimit,
    reset_s: u64,
) -> Response {
    let window_s = rate.window_ms.div_ceil(1000).max(1);
    let policy = format!("\"{name}\";q={};w={window_s}", rate.requests);
    let left = format!("\"{name}\";r=0;t={reset_s}");
    for (header, value) in [(RATELIMIT_POLICY, policy), (RATELIMIT, left)] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            res.headers_mut()
                .insert(http::HeaderName::from_static(header), v);
        }
    }
    res
}

/// The draft's header names (lower case, as `HeaderName::from_static` wants them).
const RATELIMIT_POLICY: &str = "ratelimit-policy";
const RATELIMIT: &str = "ratelimit";
