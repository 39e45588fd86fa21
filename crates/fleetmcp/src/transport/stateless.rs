//! `POST /mcp` for 2026-07-28 requests: no session; the request carries its metadata.
//!
//! Validation runs in the order the specification's checks need: required `_meta` fields
//! (`-32602`), mirrored headers (`-32020`), version (`-32022`), method (`404` `-32601`), then
//! the capabilities the call needs (`-32021`, in dispatch). An SSE answer here is not
//! resumable: it is written straight to the connection, and closing it cancels the request.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::{FutureExt, StreamExt, stream};
use http::{HeaderMap, StatusCode};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::{listen, reply};
use crate::context::{Caller, Outbound, RequestContext};
use crate::dispatch::{self, Reply};
use crate::protocol::{ErrorCode, ErrorData, Message, STATELESS_VERSIONS, encode_result, errors};
use crate::server::Shared;
use crate::stateless::request_state::{StateError, request_digest};
use crate::stateless::{RequestMeta, Round, headers};

/// HTTP status of a 2026-07-28 error answer.
fn status_of(e: &ErrorData) -> StatusCode {
    match e.code {
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        ErrorCode::INVALID_PARAMS
        | ErrorCode::INVALID_REQUEST
        | ErrorCode::PARSE_ERROR
        | ErrorCode::HEADER_MISMATCH
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

fn error(id: &RawValue, e: &ErrorData) -> Response {
    reply::rpc_error(status_of(e), Some(id), e)
}

pub(super) async fn serve(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    message: Message,
    sse_ok: bool,
) -> Response {
    let (id, method, params) = match message {
        // The core protocol defines no client notifications over HTTP in this era.
        Message::Notification { .. } => return reply::accepted(),
        Message::Response { id, .. } => {
            return reply::rpc_error(
                StatusCode::BAD_REQUEST,
                Some(&id),
                &errors::invalid_request(
                    "Invalid Request: clients do not send responses in MCP 2026-07-28",
                ),
            );
        }
        Message::Request { id, method, params } => (id, method, params),
    };
    let map: Map<String, Value> = match params
        .as_deref()
        .map(|p| serde_json::from_str::<Value>(p.get()))
    {
        None => Map::new(),
        Some(Ok(Value::Object(m))) => m,
        Some(_) => {
            return error(
                &id,
                &errors::invalid_params("Invalid params: params must be an object"),
            );
        }
    };
    let meta = match RequestMeta::from_params(&map) {
        Ok(m) => m,
        Err(e) => return error(&id, &e),
    };
    if let Err(msg) = headers::check_standard(headers, &meta.version, &method, &map) {
        return error(&id, &ErrorData::new(ErrorCode::HEADER_MISMATCH, msg, None));
    }
    if !STATELESS_VERSIONS.contains(&meta.version.as_str()) {
        return error(
            &id,
            &ErrorData::new(
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                format!("Unsupported protocol version: {}", meta.version),
                Some(json!({"supported": STATELESS_VERSIONS, "requested": meta.version})),
            ),
        );
    }
    if !dispatch::is_stateless_method(&method) {
        return error(&id, &errors::method_not_found(&method));
    }
    if method == "tools/call" {
        let tool = map
            .get("name")
            .and_then(Value::as_str)
            .and_then(|n| shared.catalog().tool(n).cloned());
        if let Some(tool) = tool {
            let empty = Map::new();
            let args = map
                .get("arguments")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            if let Err(msg) = headers::check_params(headers, &tool, args) {
                return error(&id, &ErrorData::new(ErrorCode::HEADER_MISMATCH, msg, None));
            }
        }
    }
    if method == "subscriptions/listen" {
        return listen::serve(shared, &id, &map);
    }
    let round = match round_for(shared, meta, &method, &map) {
        Ok(r) => Arc::new(r),
        Err(e) => return error(&id, &e),
    };
    let progress_token = map
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .cloned();
    run(shared, round, id, method, params, progress_token, sse_ok).await
}

/// The answers this round starts with: those sealed in `requestState`, then `inputResponses`.
fn round_for(
    shared: &Shared,
    meta: RequestMeta,
    method: &str,
    map: &Map<String, Value>,
) -> Result<Round, ErrorData> {
    let digest = request_digest(method, map);
    let mut answers = Map::new();
    let multi_round = matches!(method, "tools/call" | "prompts/get" | "resources/read");
    if multi_round {
        if let Some(state) = map.get("requestState") {
            let state = state
                .as_str()
                .ok_or_else(|| errors::invalid_params("Invalid requestState: not a string"))?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64;
            let payload = shared
                .request_state
                .open(state, method, &digest, now)
                .map_err(|e| {
                    let why = match e {
                        StateError::Invalid => "it failed verification",
                        StateError::Expired => "it has expired",
                        StateError::OtherRequest => "it belongs to another request",
                    };
                    errors::invalid_params(format!("Invalid requestState: {why}"))
                })?;
            answers = payload.a;
        }
        match map.get("inputResponses") {
            None | Some(Value::Null) => {}
            Some(Value::Object(responses)) => {
                for (k, v) in responses {
                    answers.insert(k.clone(), v.clone());
                }
            }
            Some(_) => {
                return Err(errors::invalid_params(
                    "Invalid params: inputResponses must be an object",
                ));
            }
        }
    }
    Ok(Round::new(meta, method.to_string(), digest, answers))
}

type Running = futures_util::future::BoxFuture<'static, Reply>;

async fn run(
    shared: &Arc<Shared>,
    round: Arc<Round>,
    id: Box<RawValue>,
    method: String,
    params: Option<Box<RawValue>>,
    progress_token: Option<Value>,
    sse_ok: bool,
) -> Response {
    let cancel = shared.shutdown.child_token();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let ctx = RequestContext::new(
        shared.clone(),
        Caller::Stateless(round),
        sse_ok.then_some(tx),
        progress_token,
        cancel.clone(),
    );
    let mut work: Running = dispatch::request(shared.clone(), method, params, ctx).boxed();
    tokio::select! {
        biased;
        reply = &mut work => match rx.try_recv() {
            Ok(first) => stream(id, first, rx, None, Some(reply), cancel),
            Err(_) => match reply {
                Ok(result) => reply::json(StatusCode::OK, encode_result(&id, &result)),
                Err(e) => error(&id, &e),
            },
        },
        Some(first) = rx.recv() => stream(id, first, rx, Some(work), None, cancel),
    }
}

/// An SSE answer written straight to the connection. When the client closes it, the request
/// is cancelled (2026-07-28 has no resumption).
fn stream(
    id: Box<RawValue>,
    first: Outbound,
    mut rx: mpsc::UnboundedReceiver<Outbound>,
    work: Option<Running>,
    done: Option<Reply>,
    cancel: tokio_util::sync::CancellationToken,
) -> Response {
    let (body_tx, body_rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let send = |m: Outbound| {
            let body_tx = body_tx.clone();
            async move {
                match m {
                    Outbound::Message(b) => {
                        body_tx.send(super::sse::message_frame(&b)).await.is_ok()
                    }
                    Outbound::EndConnection => true,
                }
            }
        };
        if !send(first).await {
            cancel.cancel();
            return;
        }
        let reply = match (work, done) {
            (_, Some(reply)) => reply,
            (Some(mut work), None) => loop {
                tokio::select! {
                    biased;
                    Some(m) = rx.recv() => if !send(m).await { cancel.cancel(); return; },
                    reply = &mut work => break reply,
                    _ = body_tx.closed() => { cancel.cancel(); return; }
                }
            },
            (None, None) => return,
        };
        while let Ok(m) = rx.try_recv() {
            if !send(m).await {
                return;
            }
        }
        let last = dispatch::encode_reply(&id, reply);
        let _ = body_tx.send(super::sse::message_frame(&last)).await;
    });
    sse_body(body_rx)
}

pub(super) fn sse_body(rx: mpsc::Receiver<Bytes>) -> Response {
    let body = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    super::sse::streaming(Body::from_stream(body.boxed()))
}
