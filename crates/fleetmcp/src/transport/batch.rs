//! A 2025-03-26 JSON-RPC batch: its requests run concurrently, and their answers come back as
//! one JSON array (messages a request sends on the way go to the session's standalone stream).

use axum::response::Response;
use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http::{HeaderMap, StatusCode};

use super::driver::{self, Call, Started};
use super::locate::{self, Asker, Place};
use super::{PROTOCOL_VERSION_HEADER, era, reply};
use crate::app::App;
use crate::context::Caller;
use crate::dispatch;
use crate::protocol::{Incoming, Message, ProtocolVersion, encode_error, errors};

pub(super) async fn serve(app: &App, headers: &HeaderMap, body: &[u8], place: Place) -> Response {
    if let Err(bad) = era::check_session_version(headers) {
        return bad;
    }
    let items: Vec<Incoming> = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return reply::rpc_error(StatusCode::BAD_REQUEST, None, &errors::parse_error(e)),
    };
    if items.is_empty() {
        return reply::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::invalid_request("Invalid Request: empty batch"),
        );
    }
    if items
        .iter()
        .any(|m| m.method.as_deref() == Some("initialize"))
    {
        return reply::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::invalid_request("Invalid Request: initialize must not be part of a batch"),
        );
    }
    let session = match place {
        Place::Here(s) => s,
        Place::Refused(why) => return locate::refuse(why, Asker::Post, None),
        Place::Holder(_) => return super::post::unreachable_holder(),
    };
    let header_version = headers
        .get(PROTOCOL_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(ProtocolVersion::parse);
    let version = header_version.unwrap_or(session.version);
    if !version.allows_batches() {
        return reply::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::invalid_request(format!(
                "Invalid Request: JSON-RPC batches are not supported by protocol version {version}"
            )),
        );
    }
    let mut answers: Vec<BoxFuture<'static, Option<Bytes>>> = Vec::new();
    for item in items {
        match item.classify() {
            Err((id, e)) => {
                let b = encode_error(id.as_deref(), &e);
                answers.push(async move { Some(b) }.boxed());
            }
            Ok(Message::Notification { method, params }) => {
                dispatch::notification(&session, &method, params.as_deref())
            }
            Ok(Message::Response { id, outcome }) => {
                dispatch::client_response(&session, &id, outcome)
            }
            Ok(Message::Request { id, method, params }) => {
                let app = app.clone();
                let caller = Caller::Session(session.clone());
                answers.push(
                    async move {
                        let answer_id = id.clone();
                        match driver::start(&app, caller, Call { id, method, params }, false).await
                        {
                            Started::Plain(Some(r)) => Some(dispatch::encode_reply(&answer_id, r)),
                            // A cancelled request is not answered.
                            Started::Plain(None) | Started::Streaming(_) => None,
                        }
                    }
                    .boxed(),
                );
            }
        }
    }
    if answers.is_empty() {
        return reply::accepted();
    }
    let parts: Vec<Bytes> = futures_util::future::join_all(answers)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut body = Vec::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + 2);
    body.push(b'[');
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(p);
    }
    body.push(b']');
    reply::json(StatusCode::OK, Bytes::from(body))
}
