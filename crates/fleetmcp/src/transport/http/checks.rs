//! What a request on `/mcp` (and `/message`) is checked for before anything is parsed:
//! `Content-Type` (415), `Accept` (406), and the body read under `http.max_body_bytes` (413)
//! and in time (408). The checks run in front of the route handlers, as their extractors
//! (`edge.rs`).

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::request_headers::RequestHead;
use super::respond;
use crate::protocol::errors;

/// `Content-Type` and `Accept` of a POST, before the body is read.
pub(super) fn post_headers(head: &RequestHead) -> Result<(), Response> {
    json_body(head)?;
    // Lenient when Accept is absent (some clients omit it), strict when it excludes us.
    if head.accept.is_some_and(|a| !a.json && !a.sse) {
        return Err(respond::rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            &errors::server(
                "Not Acceptable: Accept must include application/json or text/event-stream",
            ),
        ));
    }
    Ok(())
}

/// A POST's body must be JSON (`Content-Type`), before it is read: on `/mcp`, and on the
/// 2024-11-05 transport's `/message`, whose answer goes to the stream (so `Accept` says
/// nothing there).
pub(super) fn json_body(head: &RequestHead) -> Result<(), Response> {
    if head.json_body {
        return Ok(());
    }
    Err(respond::rpc_error(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        None,
        &errors::server("Unsupported Media Type: Content-Type must be application/json"),
    ))
}

/// A GET must accept `text/event-stream`.
pub(super) fn get_headers(head: &RequestHead) -> Result<(), Response> {
    if head.accept.is_some_and(|a| a.sse) {
        return Ok(());
    }
    Err(respond::rpc_error(
        StatusCode::NOT_ACCEPTABLE,
        None,
        &errors::server("Not Acceptable: Accept must include text/event-stream"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the property tests: `Application/*` was refused (406) while
    /// `Application/JSON` was accepted; a wildcard's type compared case-sensitively.
    #[test]
    fn wildcards_match_case_insensitively() {
        use super::super::request_headers::covers;
        assert!(covers("Application/*", "application/json"));
        assert!(covers("TEXT/*", "text/event-stream"));
        assert!(!covers("text/*", "application/json"));
        assert!(!covers("applications/*", "application/json"));
        assert!(!covers("/*", "application/json"));
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        h.insert(
            header::ACCEPT,
            http::HeaderValue::from_static("Application/*"),
        );
        assert!(post_headers(&RequestHead::read(&h)).is_ok());
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
    // Nearly every body is one frame, in hand (observe read it for its trace context): taken as
    // it is, with nothing collected (issue 40: a collector and its list of frames a call).
    let mut body = body;
    let first = match body.frame().await {
        None => return Ok(Bytes::new()),
        Some(Ok(frame)) => frame.into_data().ok(),
        Some(Err(e)) => return Err(unread(limit, e.into())),
    };
    let first = first.unwrap_or_default();
    if first.len() > limit {
        return Err(too_large(limit));
    }
    if http_body::Body::is_end_stream(&body) {
        return Ok(first);
    }
    match Limited::new(body, limit - first.len()).collect().await {
        Ok(rest) if first.is_empty() => Ok(rest.to_bytes()),
        Ok(rest) => {
            let rest = rest.to_bytes();
            let mut whole = Vec::with_capacity(first.len() + rest.len());
            whole.extend_from_slice(&first);
            whole.extend_from_slice(&rest);
            Ok(Bytes::from(whole))
        }
        Err(e) => Err(unread(limit, e)),
    }
}

/// The answer to a body that could not be read whole: `413` past `limit`, `408` when it did not
/// arrive in time, `400` otherwise.
fn unread(limit: usize, e: axum::BoxError) -> Response {
    if e.downcast_ref::<LengthLimitError>().is_some() {
        return too_large(limit);
    }
    // The server bounds the whole body (`http.body_read_timeout_ms`) with a `TimedOut` error.
    if timed_out(&*e) {
        return respond::rpc_error(
            StatusCode::REQUEST_TIMEOUT,
            None,
            &errors::server("Request Timeout: the body did not arrive in time"),
        );
    }
    respond::rpc_error(
        StatusCode::BAD_REQUEST,
        None,
        &errors::server(format!("Bad Request: could not read the body: {e}")),
    )
}

fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// A `413` that also closes the connection: the rest of the body was not read, so the
/// connection cannot carry another request, and a client told so does not send one on it
/// (reusing it, a client's next request could meet the close and fail).
fn too_large(limit: usize) -> Response {
    let mut res = respond::rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        None,
        &errors::invalid_request(format!("Request body exceeds the limit of {limit} bytes")),
    );
    res.headers_mut()
        .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
    res
}

/// Property tests of `Content-Type`, `Accept` and the body limit: values built from known
/// parts are judged as the rules say, arbitrary ones never panic, and no body over the limit
/// is ever read whole.
#[cfg(test)]
mod props {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    use crate::testing::prop_config as config;

    /// A media type with random case, spaces and parameters, and whether it is `target`.
    fn media(options: Vec<&'static str>) -> impl Strategy<Value = (String, &'static str)> {
        (
            prop::sample::select(options),
            prop::collection::vec(any::<bool>(), 24),
            "[ ]{0,2}",
            prop::option::of("[a-z]{1,6}=[a-z0-9.]{1,6}"),
        )
            .prop_map(|(m, upper, pad, param)| {
                let cased: String = m
                    .chars()
                    .zip(upper.iter().cycle())
                    .map(|(c, u)| if *u { c.to_ascii_uppercase() } else { c })
                    .collect();
                let param = param.map(|p| format!(";{pad}{p}")).unwrap_or_default();
                (format!("{pad}{cased}{pad}{param}"), m)
            })
    }

    fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![0x20u8..=0x7e, Just(b'\t'), 0x80u8..=0xff],
            0..30,
        )
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// 415 unless the media type is application/json (any case, any parameters); then 406
        /// when Accept is present and names neither answer type nor a wildcard covering one.
        #[test]
        fn post_headers_follow_the_rules(
            (ct, ct_type) in media(vec!["application/json", "application/jsonx", "text/json", "text/plain", "application/json-rpc"]),
            accept in prop::option::of(prop::collection::vec(
                media(vec!["application/json", "text/event-stream", "*/*", "application/*", "text/*", "text/html", "image/*", "application/xml"]),
                1..4,
            )),
        ) {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_str(&ct).expect("ASCII"));
            if let Some(list) = &accept {
                let joined: Vec<&str> = list.iter().map(|(v, _)| v.as_str()).collect();
                h.insert(header::ACCEPT, HeaderValue::from_str(&joined.join(",")).expect("ASCII"));
            }
            let json = ct_type == "application/json";
            let acceptable = accept.as_ref().is_none_or(|list| {
                list.iter().any(|(_, m)| {
                    matches!(*m, "application/json" | "text/event-stream" | "*/*" | "application/*" | "text/*")
                })
            });
            let takes = accept.as_ref().is_none_or(|list| {
                list.iter().any(|(_, m)| matches!(*m, "text/event-stream" | "*/*" | "text/*"))
            });
            let head = RequestHead::read(&h);
            prop_assert_eq!(head.takes_sse(), takes);
            match post_headers(&head) {
                Ok(()) => prop_assert!(json && acceptable),
                Err(res) if !json => prop_assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE),
                Err(res) => {
                    prop_assert!(!acceptable);
                    prop_assert_eq!(res.status(), StatusCode::NOT_ACCEPTABLE);
                }
            }
        }

        /// Any bytes in either header: an answer, never a panic, and only the documented codes.
        #[test]
        fn arbitrary_header_values_never_panic(ct in header_bytes(), accept in prop::collection::vec(header_bytes(), 0..3)) {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_bytes(&ct).expect("valid header bytes"));
            for a in &accept {
                h.append(header::ACCEPT, HeaderValue::from_bytes(a).expect("valid header bytes"));
            }
            let head = RequestHead::read(&h);
            if let Err(res) = post_headers(&head) {
                prop_assert!(matches!(res.status().as_u16(), 406 | 415));
            }
            if let Err(res) = get_headers(&head) {
                prop_assert_eq!(res.status(), StatusCode::NOT_ACCEPTABLE);
            }
        }
    }

    proptest! {
        #![proptest_config(config(256))]

        /// A body is returned whole exactly when it fits the limit, whatever Content-Length
        /// claims (an honest one over the limit is refused unread, a lying one is cut off).
        #[test]
        fn read_body_never_returns_more_than_the_limit(
            len in 0usize..300,
            limit in 0usize..200,
            declared in prop_oneof![Just(None), Just(Some("exact")), Just(Some("less")), Just(Some("junk"))],
            chunks in 1usize..4,
        ) {
            let body: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut h = HeaderMap::new();
            let claim = match declared {
                None => None,
                Some("exact") => Some(len.to_string()),
                Some("less") => Some(len.saturating_sub(1).to_string()),
                _ => Some("12ab".to_string()),
            };
            if let Some(c) = &claim {
                h.insert(header::CONTENT_LENGTH, HeaderValue::from_str(c).expect("ASCII"));
            }
            // A streamed body, so the limit is met while reading, not from a known size.
            let parts: Vec<Result<Bytes, std::io::Error>> = body
                .chunks(len.div_ceil(chunks).max(1))
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            let stream = Body::from_stream(futures_util::stream::iter(parts));
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            match rt.block_on(read_body(&h, stream, limit)) {
                Ok(read) => {
                    prop_assert!(len <= limit);
                    prop_assert_eq!(&read[..], &body[..]);
                }
                Err(res) => {
                    prop_assert!(len > limit, "refused a body within the limit");
                    prop_assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
                }
            }
        }
    }
}
