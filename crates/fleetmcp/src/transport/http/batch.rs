//! A 2025-03-26 JSON-RPC batch: its requests run concurrently, and their answers come back as
//! one JSON array (messages a request sends on the way go to the session's standalone stream).
//!
//! A batch is refused early and cheaply: a version header without batches before its session
//! is looked up (in front of the route, `edge.rs`), the session's own version before it runs,
//! and a batch longer than `http.max_batch_len` while it is parsed, before the messages past
//! the limit are read.

use std::cell::Cell;
use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http::StatusCode;
use serde::de::{DeserializeSeed, Deserializer, Error as _, IgnoredAny, SeqAccess, Visitor};
use serde_json::json;

use super::client_key::Client;
use super::locate::{self, Asker};
use super::request_headers::{RequestHead, Version};
use super::respond;
use crate::app::App;
use crate::context::Caller;
use crate::dispatch;
use crate::protocol::{ErrorCode, ErrorData, Incoming, Message, encode_error, errors};
use crate::session::{Missing, Session};
use crate::transport::core::driver::{self, Started};
use crate::transport::core::json_array;

/// The check a batch gets before its session is looked up: a version header that names a
/// version without batches (2025-06-18 and later, 2026-07-28) refuses it at once (`400`
/// `-32600`, or `-32700` for a body that is not JSON, as for any request). An unknown
/// version is left to [`super::era::decide`], which answers it like any request.
pub(super) fn check_header_version(head: &RequestHead, body: &[u8]) -> Result<(), Response> {
    let refused = match head.version {
        Version::Session(version) if !version.allows_batches() => version.as_str(),
        Version::Stateless(name) => name,
        _ => return Ok(()),
    };
    let is_batch = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    if !is_batch {
        return Ok(());
    }
    let refused = not_allowed(refused);
    // A body that is not JSON is a parse error first, as everywhere else; checking it builds
    // nothing (`IgnoredAny`), so a refused batch still costs no allocation per message.
    if let Err(e) = serde_json::from_slice::<IgnoredAny>(body) {
        return Err(respond::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::parse_error(e),
        ));
    }
    Err(refused)
}

fn not_allowed(version: &str) -> Response {
    respond::rpc_error(
        StatusCode::BAD_REQUEST,
        None,
        &errors::invalid_request(format!(
            "Invalid Request: JSON-RPC batches are not supported by protocol version {version}"
        )),
    )
}

/// Serves a batch whose version header [`check_header_version`] and [`super::era::decide`] have
/// passed; `session` serves it, or says why none does.
pub(super) async fn serve(
    app: &App,
    body: &[u8],
    session: Result<Arc<Session>, Missing>,
    client: Client,
) -> Response {
    let items = match items_of(body, app.config().http.max_batch_len) {
        Ok(items) => items,
        Err(refused) => return refused,
    };
    let session = match session {
        Ok(s) => s,
        Err(why) => return locate::refuse(why, Asker::Post, None),
    };
    // The session's negotiated version decides: a 2025-11-25 session does not get batches by
    // sending an older version header (the header check above catches only newer ones).
    if !session.version.allows_batches() {
        return not_allowed(session.version.as_str());
    }
    let answers = start_all(app, &session, &client, items);
    if answers.is_empty() {
        return respond::accepted();
    }
    let parts: Vec<Bytes> = futures_util::future::join_all(answers)
        .await
        .into_iter()
        .flatten()
        .collect();
    respond::json(StatusCode::OK, json_array(&parts))
}

/// The batch's messages, or the `400` that refuses it whole: too long, unreadable, empty, or
/// holding an `initialize`.
fn items_of(body: &[u8], max: usize) -> Result<Vec<Incoming>, Response> {
    let items = match parse(body, max) {
        Ok(v) => v,
        Err(BadBatch::TooLong) => {
            return Err(respond::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &ErrorData::new(
                    ErrorCode::INVALID_REQUEST,
                    format!("Invalid Request: a batch holds at most {max} messages"),
                    Some(json!({"maxBatchLen": max})),
                ),
            ));
        }
        Err(BadBatch::Parse(e)) => {
            return Err(respond::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &errors::parse_error(e),
            ));
        }
    };
    if items.is_empty() {
        return Err(respond::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::invalid_request("Invalid Request: empty batch"),
        ));
    }
    if items
        .iter()
        .any(|m| m.method.as_deref() == Some("initialize"))
    {
        return Err(respond::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::invalid_request("Invalid Request: initialize must not be part of a batch"),
        ));
    }
    Ok(items)
}

/// Hands each notification and response of the batch to the session at once, and starts each
/// request: the answers to come, in order (a cancelled request has none).
fn start_all(
    app: &App,
    session: &Arc<Session>,
    client: &Client,
    items: Vec<Incoming>,
) -> Vec<BoxFuture<'static, Option<Bytes>>> {
    let mut answers: Vec<BoxFuture<'static, Option<Bytes>>> = Vec::new();
    for item in items {
        match item.classify() {
            Err((id, e)) => {
                let b = encode_error(id.as_deref(), &e);
                answers.push(async move { Some(b) }.boxed());
            }
            Ok(Message::Notification { method, params }) => {
                dispatch::notification(session, &method, params.as_deref())
            }
            Ok(Message::Response { id, outcome }) => {
                dispatch::client_response(session, &id, outcome)
            }
            Ok(Message::Request { id, method, params }) => {
                let app = app.clone();
                let caller = Caller::Session(session.clone());
                let client = client.clone();
                answers.push(
                    async move {
                        let started =
                            driver::start(&app, caller, client, &id, method, params, false);
                        match started.await {
                            Ok(Started::Plain(Some(r))) => Some(dispatch::encode_reply(&id, r)),
                            // Over a limit, or without the scope: this item alone is refused.
                            Err(not_run) => Some(encode_error(Some(&id), &not_run.into_error())),
                            // A cancelled request is not answered.
                            Ok(Started::Plain(None) | Started::Streaming(_)) => None,
                        }
                    }
                    .boxed(),
                );
            }
        }
    }
    answers
}

/// Why a batch body was refused while it was parsed.
enum BadBatch {
    /// It holds more than `http.max_batch_len` messages.
    TooLong,
    Parse(serde_json::Error),
}

/// Parses a batch, stopping at its `max + 1`th message: that message is not read at all (not
/// even checked to be valid JSON), so a long batch costs no more than `max` parsed messages.
fn parse(body: &[u8], max: usize) -> Result<Vec<Incoming>, BadBatch> {
    let too_long = Cell::new(false);
    let seed = Bounded {
        max,
        too_long: &too_long,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = seed.deserialize(&mut de).and_then(|items| {
        de.end()?;
        Ok(items)
    });
    match parsed {
        Ok(items) => Ok(items),
        Err(_) if too_long.get() => Err(BadBatch::TooLong),
        Err(e) => Err(BadBatch::Parse(e)),
    }
}

/// A JSON array of at most `max` messages; past that, `too_long` is set and the parse fails.
struct Bounded<'a> {
    max: usize,
    too_long: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Vec<Incoming>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Vec<Incoming>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a JSON-RPC batch of at most {} messages", self.max)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // The size hint of a JSON array is unknown; a small start avoids trusting anything.
        let mut items = Vec::with_capacity(self.max.min(16));
        while items.len() < self.max {
            match seq.next_element()? {
                Some(item) => items.push(item),
                None => return Ok(items),
            }
        }
        match seq.next_element_seed(Overflow(self.too_long))? {
            None => Ok(items),
            Some(never) => match never {},
        }
    }
}

/// The seed of the message after the limit: never reads it, only says it is there and fails.
/// (Called only when a message follows: the end of the array, or a malformed separator, does
/// not reach it.)
struct Overflow<'a>(&'a Cell<bool>);

/// What [`Overflow`] would produce: nothing, ever.
enum Never {}

impl<'de> DeserializeSeed<'de> for Overflow<'_> {
    type Value = Never;

    fn deserialize<D: Deserializer<'de>>(self, _d: D) -> Result<Never, D::Error> {
        self.0.set(true);
        Err(D::Error::custom("the batch is longer than its limit"))
    }
}

/// Property tests of the batch reader: any body ends in one of its documented outcomes, and
/// the limit is enforced while reading (what lies past it is never parsed).
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;
    use serde_json::value::RawValue;

    use http::HeaderMap;

    use super::super::PROTOCOL_VERSION_HEADER;
    use crate::testing::{prop_config as config, version_header};

    fn message(i: usize) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#)
    }

    /// Text that is not JSON, to put where the reader must not look.
    fn garbage() -> impl Strategy<Value = String> {
        prop_oneof![Just("{".to_string()), Just("}{".to_string()), "[{:x,]{1,8}"]
            .prop_map(|g| format!("{g}\u{1}"))
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// Any bytes: no panic, and a successful read never holds more than the limit.
        #[test]
        fn arbitrary_bodies_never_panic(
            body in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..200),
                "[\\[\\]{}\",:0-9a-z ]{0,60}".prop_map(String::into_bytes),
            ],
            max in 0usize..6,
        ) {
            if let Ok(items) = parse(&body, max) {
                prop_assert!(items.len() <= max);
            }
        }

        /// A batch of `n` messages is read whole up to the limit and refused past it, even
        /// when what follows the limit is not JSON at all (it is not read).
        #[test]
        fn the_limit_is_checked_while_reading(
            n in 0usize..24,
            max in 1usize..12,
            tail in garbage(),
            spaced in any::<bool>(),
        ) {
            let sep = if spaced { " ,\n " } else { "," };
            let items: Vec<String> = (0..n).map(message).collect();
            let body = format!("[{}]", items.join(sep));
            match parse(body.as_bytes(), max) {
                Ok(got) => {
                    prop_assert!(n <= max);
                    prop_assert_eq!(got.len(), n);
                    for (i, m) in got.iter().enumerate() {
                        let want = i.to_string();
                        prop_assert_eq!(m.id.as_deref().map(RawValue::get), Some(want.as_str()));
                    }
                }
                Err(BadBatch::TooLong) => prop_assert!(n > max),
                Err(BadBatch::Parse(e)) => prop_assert!(false, "a valid batch failed: {e}"),
            }
            if n >= max {
                // The message past the limit, and everything after it, is garbage.
                let head: Vec<String> = (0..max).map(message).collect();
                let body = format!("[{}{sep}{tail}", head.join(sep));
                prop_assert!(matches!(parse(body.as_bytes(), max), Err(BadBatch::TooLong)));
            } else {
                // Within the limit the same garbage is read, and is a parse error.
                let lead = if n > 0 { sep } else { "" };
                let body = format!("[{}{lead}{tail}", items.join(sep));
                prop_assert!(matches!(parse(body.as_bytes(), max), Err(BadBatch::Parse(_))));
            }
        }

        /// Not a JSON array of objects, or trailing text after the array: a parse error.
        #[test]
        fn non_batches_are_parse_errors(
            body in prop_oneof![
                Just("{}".to_string()),
                Just("\"[]\"".to_string()),
                Just("[1]".to_string()),
                Just("[[]]".to_string()),
                Just(r#"[["2.0",1,"ping"]]"#.to_string()),
                "[0-9]{1,5}",
            ],
            trailing in prop_oneof![Just(String::new()), Just(" x".to_string()), Just("[]".to_string())],
            max in 1usize..4,
        ) {
            prop_assert!(matches!(parse(body.as_bytes(), max), Err(BadBatch::Parse(_))));
            let array = format!("[]{trailing}");
            let read = parse(array.as_bytes(), max);
            if trailing.is_empty() {
                prop_assert!(matches!(read, Ok(ref v) if v.is_empty()));
            } else {
                prop_assert!(matches!(read, Err(BadBatch::Parse(_))));
            }
        }

        /// The check before the session lookup refuses exactly a batch under a version without
        /// batches, with `400`, whatever the header value and the body.
        #[test]
        fn the_version_check_refuses_only_batches_of_versions_without_them(
            version in version_header(),
            lead in "[ \t\r\n]{0,3}",
            body in prop_oneof![
                Just("[]".to_string()),
                Just(format!("[{}]", message(1))),
                Just(message(1)),
                Just("[{oops".to_string()),
                "[\\[{}a-z ]{0,12}",
            ],
        ) {
            let mut headers = HeaderMap::new();
            if let Some(v) = &version {
                headers.insert(PROTOCOL_VERSION_HEADER, http::HeaderValue::from_bytes(v).expect("valid header bytes"));
            }
            let body = format!("{lead}{body}");
            let is_batch = body.trim_start().starts_with('[');
            // What `HeaderValue::to_str` reads: visible ASCII, spaces and tabs only.
            let text = version
                .as_deref()
                .filter(|v| v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)))
                .and_then(|v| std::str::from_utf8(v).ok());
            let without_batches = text.map(str::trim).is_some_and(|v| {
                // Batches exist in 2025-03-26 only; an unknown version is left to a later check.
                matches!(v, "2024-11-05" | "2025-06-18" | "2025-11-25" | "2026-07-28")
            });
            match check_header_version(&RequestHead::read(&headers), body.as_bytes()) {
                Ok(()) => prop_assert!(!(is_batch && without_batches)),
                Err(res) => {
                    prop_assert!(is_batch && without_batches);
                    prop_assert_eq!(res.status(), StatusCode::BAD_REQUEST);
                }
            }
        }
    }
}
