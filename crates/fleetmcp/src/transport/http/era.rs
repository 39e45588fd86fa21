//! Which protocol era a request on `/mcp` belongs to (mcp-transports.md 8.14), from its headers
//! and, only when they do not say, its `_meta`.
//!
//! The one place the era is decided and noted for the request's metrics. Asked at two moments
//! of a POST, by the same rule ([`is_session_request`]): in front of the route,
//! [`session_by_headers`] says from the headers alone whether the session is looked up at all
//! (`edge.rs`: a request relayed to its session's holder is answered without its body ever
//! being parsed here); once the body is parsed, [`decide`] settles the era (and checks a
//! session-era version). A GET or DELETE is held to the session era in front of its route
//! ([`session_only`]).
//!
//! The method label is noted where the body is parsed (`post.rs`), once too.

use axum::response::Response;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::request_headers::{PROTOCOL_VERSION, RequestHead, only};
use super::respond;
use crate::config::DefaultEra;
use crate::protocol::{Message, ProtocolVersion, errors};
use crate::telemetry::labels::{self, Era};

/// A session-era request by its headers alone: it carries a session and no version header of
/// another era. This is the hot path, and the only requests the relay seam considers.
fn is_session_request(head: &RequestHead) -> bool {
    head.session && !head.version.names_non_session()
}

/// [`is_session_request`], for a POST in front of its route: when it is one, the session era
/// is noted for its metrics (a relayed request gets no other label), and [`decide`] keeps it,
/// but for a method only 2026-07-28 has.
pub(super) fn session_by_headers(head: &RequestHead) -> bool {
    let session = is_session_request(head);
    if session {
        labels::note_era(Era::Session);
    }
    session
}

/// The era of a POST whose body is `message` (`None`: a batch, which only the session era
/// has), decided once and noted for the request's metrics: 2026-07-28 ([`is_stateless`]), or
/// the session era, whose version header must then name a version we speak (`400` otherwise).
pub(super) fn decide(
    default: DefaultEra,
    head: &RequestHead,
    headers: &HeaderMap,
    message: Option<&Message>,
) -> Result<Era, Response> {
    if message.is_some_and(|m| is_stateless(default, head, m)) {
        labels::note_era(Era::Stateless);
        return Ok(Era::Stateless);
    }
    labels::note_era(Era::Session);
    check_session_version(head, headers)?;
    Ok(Era::Session)
}

/// GET and DELETE exist in the session era only: what each answers a request of another era,
/// before anything else is checked. (HEAD is GET's: axum serves it with GET's handler.)
pub(super) fn session_only(method: &Method, h: &HeaderMap) -> Result<(), Response> {
    let head = RequestHead::read(h);
    if *method == Method::DELETE {
        // 2026-07-28 has no sessions to end: its DELETE is `405` whatever `Mcp-Session-Id` it
        // carries (never the end of a session a 2026 client happens to name), as GET is. A
        // session with a version header of no era is a bad session-era request (`400`, as GET
        // and POST answer it); a sessionless DELETE without a 2026 version keeps the
        // contract's `400 No valid session ID provided`.
        if head.version.names_stateless_era() || (!head.session && head.version.names_non_session())
        {
            return Err(stateless_method_not_allowed("DELETE"));
        }
        if head.session {
            check_session_version(&head, h)?;
        }
        return Ok(());
    }
    if !is_session_request(&head) {
        // A session with a version header of no era is a bad session-era request (400, as a
        // POST answers it), not a 2026-07-28 one.
        if head.session && !head.version.names_stateless_era() {
            check_session_version(&head, h)?;
        }
        return Err(stateless_method_not_allowed("GET"));
    }
    Ok(())
}

/// `405` for GET and DELETE in the stateless era, with `Allow: POST` as clients expect.
fn stateless_method_not_allowed(method: &'static str) -> Response {
    let body = match method {
        "GET" => "HTTP GET is not supported by MCP protocol 2026-07-28",
        _ => "HTTP DELETE is not supported by MCP protocol 2026-07-28",
    };
    let mut res = respond::text(StatusCode::METHOD_NOT_ALLOWED, body);
    res.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static("POST"));
    res
}

/// Whether a message belongs to 2026-07-28: it says so in `_meta`, in a non-session version
/// header, or by a method only that era has; the session era for `initialize` and for requests
/// that carry a session; otherwise the configured default.
fn is_stateless(default: DefaultEra, head: &RequestHead, message: &Message) -> bool {
    let (method, params) = match message {
        Message::Request { method, params, .. } | Message::Notification { method, params } => {
            (method, params)
        }
        // A response is 2026-07-28's when its header says so: that era refuses it (clients do
        // not send responses there) instead of calling its version unsupported.
        Message::Response { .. } => return head.version.names_stateless_era(),
    };
    if matches!(method.as_str(), "server/discover" | "subscriptions/listen") {
        return true;
    }
    // The hot path of a session-era client: no need to look into the params.
    if is_session_request(head) {
        return false;
    }
    let has_session = head.session;
    let legacy_header = !head.version.names_non_session();
    if meta_version(params.as_deref()) {
        return true;
    }
    if !legacy_header {
        // `initialize` exists only in the session era: with a version header of no era it is a
        // session-era request with an unsupported version (400), not a 2026 one without `_meta`.
        if method == "initialize" && !head.version.names_stateless_era() {
            return false;
        }
        // A version header of the new era is a 2026-07-28 request, whatever session it names
        // (that era has none: contract 20.2), whose missing `_meta` is then what is wrong; an
        // unknown version on a request without a session is claimed by that era too (and
        // answered `-32022`), with a session it is a session-era request's bad version.
        return head.version.names_stateless_era() || !has_session;
    }
    if method == "initialize" || has_session {
        return false;
    }
    default == DefaultEra::Stateless
}

/// Whether `params._meta` names a protocol version.
pub(super) fn meta_version(params: Option<&RawValue>) -> bool {
    #[derive(Deserialize)]
    struct Peek {
        #[serde(rename = "_meta")]
        meta: Option<PeekMeta>,
    }
    #[derive(Deserialize)]
    struct PeekMeta {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
        version: Option<Value>,
    }
    params
        .and_then(|p| serde_json::from_str::<Peek>(p.get()).ok())
        .and_then(|p| p.meta)
        .is_some_and(|m| m.version.is_some())
}

/// Session era: a version header, when present, must name a version we speak (`head`, read
/// from `h`; the header is read again only to word a refusal).
fn check_session_version(head: &RequestHead, h: &HeaderMap) -> Result<(), Response> {
    if head.version.fits_session_era() {
        return Ok(());
    }
    let Some(v) = only(h, &PROTOCOL_VERSION).unwrap_or_default() else {
        return Err(respond::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::server("Bad Request: the MCP-Protocol-Version header is repeated"),
        ));
    };
    let v = v.to_str().unwrap_or("").trim();
    let supported: Vec<&str> = ProtocolVersion::SESSION_ERA
        .iter()
        .map(|v| v.as_str())
        .collect();
    Err(respond::rpc_error(
        StatusCode::BAD_REQUEST,
        None,
        &errors::server(format!(
            "Bad Request: Unsupported protocol version: {v} (supported versions: {})",
            supported.join(", ")
        )),
    ))
}

/// Property tests of the era decision: any version header or `_meta` is read without a panic,
/// and the session-era version check accepts exactly the session-era versions.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    use super::super::{PROTOCOL_VERSION_HEADER, SESSION_HEADER};
    use crate::testing::{prop_config as config, version_header};

    proptest! {
        #![proptest_config(config(1000))]

        #[test]
        fn version_headers_are_classified_consistently(
            version in version_header(),
            session in any::<bool>(),
            method in prop::sample::select(vec!["initialize", "ping", "tools/call", "server/discover", "subscriptions/listen"]),
            params in prop_oneof![
                Just(None),
                Just(Some(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#.to_string())),
                "[\\[\\]{}\":_a-z0-9,]{0,24}".prop_map(Some),
            ],
        ) {
            let mut h = HeaderMap::new();
            if let Some(v) = &version {
                h.insert(PROTOCOL_VERSION_HEADER, HeaderValue::from_bytes(v).expect("valid header bytes"));
            }
            if session {
                h.insert(SESSION_HEADER, HeaderValue::from_static("some-session"));
            }
            // What `HeaderValue::to_str` reads: visible ASCII, spaces and tabs only.
            let text = version
                .as_deref()
                .filter(|v| v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)))
                .and_then(|v| std::str::from_utf8(v).ok());
            let session_era = text.is_some_and(|v| ProtocolVersion::parse(v.trim()).is_some());
            // Absent, or a session-era version, passes; anything else is 400.
            let head = RequestHead::read(&h);
            match check_session_version(&head, &h) {
                Ok(()) => prop_assert!(version.is_none() || session_era),
                Err(res) => {
                    prop_assert!(version.is_some() && !session_era);
                    prop_assert_eq!(res.status(), StatusCode::BAD_REQUEST);
                }
            }
            // "Names a non-session version" only for a readable header that is not one.
            let non_session_header = text.is_some() && !session_era;
            prop_assert_eq!(head.version.names_non_session(), non_session_header);
            prop_assert_eq!(is_session_request(&head), session && !non_session_header);
            // `_meta` is peeked at from any raw params without a panic; 2026-only methods are
            // always 2026-07-28, and a session with a session-era header never is.
            let params = params.and_then(|p| RawValue::from_string(p).ok());
            let message = Message::Request {
                id: RawValue::from_string("1".into()).expect("JSON"),
                method: method.to_string(),
                params,
            };
            let stateless = is_stateless(DefaultEra::Session, &head, &message);
            if matches!(method, "server/discover" | "subscriptions/listen") {
                prop_assert!(stateless);
            } else if session && (version.is_none() || session_era) {
                prop_assert!(!stateless);
            }
        }
    }
}
