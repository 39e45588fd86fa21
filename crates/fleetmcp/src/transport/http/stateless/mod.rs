//! `POST /mcp` for 2026-07-28 requests: no session; the request carries its metadata.
//!
//! Validation runs in the order the specification's checks need: required `_meta` fields
//! (`-32602`), mirrored headers (`-32020`), version (`-32022`), method (`404` `-32601`), then
//! the capabilities the call needs (`-32021`, in dispatch). An SSE answer here is not
//! resumable: it is written straight to the connection, and closing it cancels the request.

mod listen;
mod mirrored;

use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::client_key::Client;
use super::{PROTOCOL_VERSION_HEADER, respond, sse};
use crate::app::App;
use crate::context::{Caller, Outbound};
use crate::dispatch::{self, Reply};
use crate::protocol::{ErrorCode, ErrorData, Message, STATELESS_VERSIONS, encode_result, errors};
use crate::stateless::request_state::{StateError, request_digest};
use crate::stateless::{RequestMeta, Round};
use crate::transport::core::driver::{self, Started, Streaming};

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
    respond::error_reply(status_of(e), Some(id), e)
}

pub(super) async fn serve(
    app: &App,
    headers: &HeaderMap,
    message: Message,
    sse_ok: bool,
    client: Client,
) -> Response {
    let (id, method, params) = match message {
        // The core protocol defines no client notifications over HTTP in this era: one is
        // checked as far as its version header (contract 20.3), then accepted. A client that
        // declared the era in `_meta` must send the header too.
        Message::Notification { params, .. } => {
            if headers.get(PROTOCOL_VERSION_HEADER).is_none()
                && super::era::meta_version(params.as_deref())
            {
                return respond::rpc_error(
                    StatusCode::BAD_REQUEST,
                    None,
                    &ErrorData::new(
                        ErrorCode::HEADER_MISMATCH,
                        "Header mismatch: MCP-Protocol-Version header is required",
                        None,
                    ),
                );
            }
            return respond::accepted();
        }
        Message::Response { id, .. } => {
            return respond::rpc_error(
                StatusCode::BAD_REQUEST,
                Some(&id),
                &errors::invalid_request(
                    "Invalid Request: clients do not send responses in MCP 2026-07-28",
                ),
            );
        }
        Message::Request { id, method, params } => (id, method, params),
    };
    let (map, meta) = match checked(app, headers, &method, params.as_deref()) {
        Ok(checked) => checked,
        Err(e) => return error(&id, &e),
    };
    if method == "subscriptions/listen" {
        return listen::serve(app, &id, &map, &client);
    }
    let principal = client.fingerprint().map(String::from);
    let round = match round_for(app, meta, &method, &map, principal) {
        Ok(r) => Arc::new(r),
        Err(e) => return error(&id, &e),
    };
    let caller = Caller::Stateless(round);
    match driver::start(app, caller, client, &id, method, params, sse_ok).await {
        Ok(Started::Plain(Some(Ok(result)))) => {
            respond::json(StatusCode::OK, encode_result(&id, &result))
        }
        Ok(Started::Plain(Some(Err(e)))) => error(&id, &e),
        Ok(Started::Plain(None)) => error(&id, &shutting_down()),
        Ok(Started::Streaming(s)) => stream(app, id, s),
        // Over a limit (the same 429 as in the session era), or without the scope (403).
        Err(not_run) => not_run.response(app, &id),
    }
}

/// A request's params as an object and its `_meta`, once they pass this era's checks: an
/// object, a supported protocol version, a method this era has, and the `Mcp-*` headers that
/// mirror the body (the tool's declared ones too, for `tools/call`) agreeing with it.
fn checked(
    app: &App,
    headers: &HeaderMap,
    method: &str,
    params: Option<&RawValue>,
) -> Result<(Map<String, Value>, RequestMeta), ErrorData> {
    let map = match params.map(|p| serde_json::from_str::<Value>(p.get())) {
        None => Map::new(),
        Some(Ok(Value::Object(m))) => m,
        Some(_) => {
            return Err(errors::invalid_params(
                "Invalid params: params must be an object",
            ));
        }
    };
    let meta = RequestMeta::from_params(&map)?;
    if let Err(msg) = mirrored::check_standard(headers, &meta.version, method, &map) {
        return Err(ErrorData::new(ErrorCode::HEADER_MISMATCH, msg, None));
    }
    if !STATELESS_VERSIONS.contains(&meta.version.as_str()) {
        return Err(ErrorData::new(
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
            format!("Unsupported protocol version: {}", meta.version),
            Some(json!({"supported": STATELESS_VERSIONS, "requested": meta.version})),
        ));
    }
    if !dispatch::is_stateless_method(method) {
        return Err(errors::method_not_found(method));
    }
    let tool = (method == "tools/call")
        .then(|| map.get("name").and_then(Value::as_str))
        .flatten()
        .and_then(|n| app.catalog().tool(n).cloned());
    if let Some(tool) = tool {
        let empty = Map::new();
        let args = map
            .get("arguments")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if let Err(msg) = mirrored::check_params(headers, &tool, args) {
            return Err(ErrorData::new(ErrorCode::HEADER_MISMATCH, msg, None));
        }
    }
    Ok((map, meta))
}

/// The answer to a request the server's shutdown cancelled.
fn shutting_down() -> ErrorData {
    errors::internal("The server is shutting down; retry the request")
}

/// The answers this round starts with: those sealed in `requestState`, then the
/// `inputResponses` to the questions the previous round asked (the keys sealed with it). Any
/// other key is ignored, as the specification advises for unknown keys, and a sealed answer is
/// never replaced: so a client cannot rewrite an answer the handler already acted on, nor make
/// the server seal (and carry to the next round) anything it did not ask for. `principal` is the
/// caller's principal's fingerprint (authorization on): a state sealed for another principal
/// is refused as an invalid one, and the next state is sealed for this one.
fn round_for(
    app: &App,
    meta: RequestMeta,
    method: &str,
    map: &Map<String, Value>,
    principal: Option<String>,
) -> Result<Round, ErrorData> {
    let digest = request_digest(method, map);
    let mut answers = Map::new();
    let mut asked = Vec::new();
    let mut sealed_key = None;
    let multi_round = matches!(method, "tools/call" | "prompts/get" | "resources/read");
    if multi_round {
        if let Some(state) = map.get("requestState") {
            let state = state
                .as_str()
                .ok_or_else(|| errors::invalid_params("Invalid requestState: not a string"))?;
            let payload = app
                .request_state()
                .open(
                    state,
                    method,
                    &digest,
                    principal.as_deref(),
                    crate::clock::unix_ms(),
                )
                .map_err(|e| {
                    let why = match e {
                        StateError::Invalid => "it failed verification",
                        StateError::Expired => "it has expired",
                        StateError::OtherRequest => "it belongs to another request",
                    };
                    errors::invalid_params(format!("Invalid requestState: {why}"))
                })?;
            answers = payload.a;
            asked = payload.q;
            sealed_key = payload.k;
        }
        let sealed = map.contains_key("requestState");
        match map.get("inputResponses") {
            None | Some(Value::Null) => {}
            Some(Value::Object(responses)) => {
                for (k, v) in responses {
                    // With a state: only what its round asked, never replacing a sealed answer.
                    // Without one (a client answering up front): any key; the handler looks up
                    // only what it asks, and only what it used is sealed.
                    let wanted = if sealed { asked.contains(k) } else { true };
                    if wanted && !answers.contains_key(k) {
                        answers.insert(k.clone(), v.clone());
                    } else {
                        tracing::debug!(
                            key = %k,
                            "ignored an inputResponses key the previous round did not ask (or already answered)"
                        );
                    }
                }
            }
            Some(_) => {
                return Err(errors::invalid_params(
                    "Invalid params: inputResponses must be an object",
                ));
            }
        }
    }
    let client_key = client_key(map, principal.as_deref());
    let mut round = Round::new(meta, method.to_string(), digest, principal, answers);
    round.sealed_key = sealed_key;
    round.client_key = client_key;
    // A retry's result is not cacheable (mcp-transports.md 8.5).
    let carries = |k: &str| map.get(k).is_some_and(|v| !v.is_null());
    round.retry = multi_round && (carries("requestState") || carries("inputResponses"));
    Ok(round)
}

/// The client's own key for the call (`_meta` `io.fleetmcp/idempotency-key`), scoped as the
/// call's key would be (`principal`: the principal's fingerprint): what a first round seals for
/// the rounds after it.
fn client_key(map: &Map<String, Value>, principal: Option<&str>) -> Option<String> {
    map.get("_meta")
        .and_then(|m| m.get(crate::context::IDEMPOTENCY_KEY_META))
        .and_then(Value::as_str)
        .and_then(|k| crate::context::scoped_client_key(k, principal, None))
}

/// An SSE answer written straight to the connection. When the client closes it, the request
/// is cancelled (2026-07-28 has no resumption).
fn stream(app: &App, id: Box<RawValue>, streaming: Streaming) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let watch = tx.clone();
    tokio::spawn(async move {
        let sent = streaming
            .pump(
                |m| {
                    let tx = tx.clone();
                    async move {
                        match m {
                            Outbound::Message(b) => tx.send(sse::message_frame(&b)).await.is_ok(),
                            // No polling end in this era: the connection is the stream.
                            Outbound::EndConnection => true,
                        }
                    }
                },
                async move { watch.closed().await },
            )
            .await;
        let last: Reply = match sent {
            Ok(Some(reply)) => reply,
            Ok(None) => Err(shutting_down()),
            Err(driver::Gone) => return,
        };
        let _ = tx
            .send(sse::message_frame(&dispatch::encode_reply(&id, last)))
            .await;
    });
    sse::channel(rx, &app.config().http)
}
