//! What every `/mcp` handler checks before anything is parsed: `Content-Type` (415), `Accept`
//! (406), and the body read under `http.max_body_bytes` (413).

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::reply;
use crate::protocol::errors;

/// `Content-Type` and `Accept` of a POST, before the body is read.
pub(super) fn post_headers(h: &HeaderMap) -> Result<(), Response> {
    let ct = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Err(reply::rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            &errors::server("Unsupported Media Type: Content-Type must be application/json"),
        ));
    }
    // Lenient when Accept is absent (some clients omit it), strict when it excludes us.
    if let Some(accept) = accept_header(h).as_deref()
        && !accepts(accept, "application/json")
        && !accepts(accept, "text/event-stream")
    {
        return Err(reply::rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            &errors::server(
                "Not Acceptable: Accept must include application/json or text/event-stream",
            ),
        ));
    }
    Ok(())
}

/// Whether the client takes an SSE answer (an absent `Accept` takes anything).
pub(super) fn takes_sse(h: &HeaderMap) -> bool {
    accept_header(h)
        .as_deref()
        .is_none_or(|a| accepts(a, "text/event-stream"))
}

/// A GET must accept `text/event-stream`.
pub(super) fn get_headers(h: &HeaderMap) -> Result<(), Response> {
    let accept = accept_header(h).unwrap_or_default();
    if accepts(&accept, "text/event-stream") {
        return Ok(());
    }
    Err(reply::rpc_error(
        StatusCode::NOT_ACCEPTABLE,
        None,
        &errors::server("Not Acceptable: Accept must include text/event-stream"),
    ))
}

/// Every `Accept` line joined into one list (RFC 9110 allows the list to be split).
fn accept_header(h: &HeaderMap) -> Option<String> {
    let mut lines = h
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .peekable();
    lines.peek()?;
    Some(lines.collect::<Vec<_>>().join(","))
}

fn accepts(accept: &str, mime: &str) -> bool {
    accept.split(',').any(|part| {
        let m = part.split(';').next().unwrap_or("").trim();
        // Media types are case-insensitive (RFC 9110 8.3.1), wildcards included.
        let type_prefix = m.strip_suffix('*').filter(|p| p.ends_with('/'));
        m.eq_ignore_ascii_case(mime)
            || m == "*/*"
            || type_prefix.is_some_and(|p| {
                mime.get(..p.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(p))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the property tests: `Application/*` was refused (406) while
    /// `Application/JSON` was accepted; a wildcard's type compared case-sensitively.
    #[test]
    fn wildcards_match_case_insensitively() {
        assert!(accepts("Application/*", "application/json"));
        assert!(accepts("TEXT/*;q=0.5", "text/event-stream"));
        assert!(!accepts("text/*", "application/json"));
        assert!(!accepts("applications/*", "application/json"));
        assert!(!accepts("/*", "application/json"));
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        h.insert(
            header::ACCEPT,
            http::HeaderValue::from_static("Application/*"),
        );
        assert!(post_headers(&h).is_ok());
    }
}

/// Reads a body of at most `limit` bytes: a declared `Content-Length` over it is refused before
/// reading, and a body that turns out longer is cut off at the limit. Both are `413`; a body
/// that cannot be read is `400`.
pub(super) async fn read_body(h: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, Response> {
    let declared = h
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large(limit)),
        Err(e) => Err(reply::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::server(format!("Bad Request: could not read the body: {e}")),
        )),
    }
}

fn too_large(limit: usize) -> Response {
    reply::rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        None,
        &errors::invalid_request(format!("Request body exceeds the limit of {limit} bytes")),
    )
}
