//! A 2025-03-26 JSON-RPC batch on one stdio line: its requests run concurrently, each one's
//! messages go out as they come (as for any request), and their answers go out together as one
//! array, in the batch's order. Other versions have no batches: the line is refused.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::{self, BoxFuture, FutureExt};
use serde_json::value::RawValue;

use super::out::Out;
use super::session;
use crate::app::App;
use crate::dispatch;
use crate::protocol::{Incoming, Message, encode_error, errors};
use crate::session::Session;

/// Serves the batch on `line` in `session`, answering on `out`.
pub(super) async fn serve(app: App, out: Out, session: Arc<Session>, line: Vec<u8>) {
    if !session.version.allows_batches() {
        let e = errors::invalid_request(format!(
            "Invalid Request: JSON-RPC batches are not supported by protocol version {}",
            session.version
        ));
        out.send(encode_error(None, &e)).await;
        return;
    }
    let items: Vec<Box<RawValue>> = match serde_json::from_slice(&line) {
        Ok(items) => items,
        Err(e) => {
            out.send(encode_error(None, &errors::parse_error(e))).await;
            return;
        }
    };
    let max = app.config().http.max_batch_len;
    if items.is_empty() || items.len() > max {
        let e = errors::invalid_request(format!(
            "Invalid Request: a batch holds 1 to {max} messages (http.max_batch_len)"
        ));
        out.send(encode_error(None, &e)).await;
        return;
    }
    let mut answers: Vec<BoxFuture<'_, Option<Bytes>>> = Vec::new();
    for item in &items {
        let message = serde_json::from_str::<Incoming>(item.get())
            .map_err(|e| (None, errors::parse_error(e)))
            .and_then(Incoming::classify);
        match message {
            Err((id, e)) => {
                let answer = encode_error(id.as_deref(), &e);
                answers.push(future::ready(Some(answer)).boxed());
            }
            Ok(Message::Request { id, method, params }) => {
                let (app, out, session) = (&app, &out, session.clone());
                answers.push(
                    async move { session::run(app, out, session, &id, method, params).await }
                        .boxed(),
                );
            }
            Ok(Message::Notification { method, params }) => {
                dispatch::notification(&session, &method, params.as_deref())
            }
            Ok(Message::Response { id, outcome }) => {
                dispatch::client_response(&session, &id, outcome)
            }
        }
    }
    let answers: Vec<Bytes> = future::join_all(answers)
        .await
        .into_iter()
        .flatten()
        .collect();
    if answers.is_empty() {
        return;
    }
    out.send(super::super::batch::json_array(&answers)).await;
}
