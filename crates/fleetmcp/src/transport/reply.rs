//! Building HTTP answers: JSON-RPC bodies with the right status, and the exact session
//! errors of the deployment contract.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::value::RawValue;

use crate::protocol::{ErrorData, encode_error};

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

pub(crate) fn with_retry_after(mut res: Response, seconds: u64) -> Response {
    if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
        res.headers_mut().insert(header::RETRY_AFTER, v);
    }
    res
}
