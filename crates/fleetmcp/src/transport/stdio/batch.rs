//! A 2025-03-26 JSON-RPC batch on one stdio line: its requests run concurrently, each one's
//! messages go out as they come (as for any request), and their answers go out together as one
//! array, in the batch's order. Other versions have no batches: the line is refused.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::{self, BoxFuture, FutureExt};
use serde_json::value::RawValue;

use super::out::Out;
use super::request;
use crate::app::App;
use crate::dispatch;
use crate::protocol::{ErrorData, Incoming, Message, encode_error, errors};
use crate::session::Session;

/// The items of the batch on `line` in `session`, or the error that refuses it (answered with
/// id `null`). Read before the batch runs, so that it takes a place in flight for each item.
pub(super) fn parse(
    app: &App,
    session: &Session,
    line: &[u8],
) -> Result<Vec<Box<RawValue>>, ErrorData> {
    if !session.version.allows_batches() {
        return Err(errors::invalid_request(format!(
            "Invalid Request: JSON-RPC batches are not supported by protocol version {}",
            session.version
        )));
    }
    let items: Vec<Box<RawValue>> = serde_json::from_slice(line).map_err(errors::parse_error)?;
    let max = app.config().http.max_batch_len;
    if items.is_empty() || items.len() > max {
        return Err(errors::invalid_request(format!(
            "Invalid Request: a batch holds 1 to {max} messages (http.max_batch_len)"
        )));
    }
    Ok(items)
}

/// Serves the batch of `items` in `session`, answering on `out`.
pub(super) async fn serve(app: App, out: Out, session: Arc<Session>, items: Vec<Box<RawValue>>) {
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
                    async move { request::run(app, out, session, &id, method, params).await }
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
    out.send(crate::transport::core::json_array(&answers)).await;
}
