//! `POST /mcp`: one JSON-RPC message (or, in 2025-03-26, a batch) from the client.
//!
//! A request is answered as JSON when its handler finishes without sending anything first.
//! The moment a handler sends a message (progress, a log line, a request to the client), the
//! answer becomes an SSE stream: events go to the event store and the response tails it, so
//! a broken connection can be resumed with `Last-Event-ID`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::session_ref::{self, Asker};
use super::{McpRequest, PROTOCOL_VERSION_HEADER, SESSION_HEADER, reply, sse};
use crate::config::DeploymentMode;
use crate::context::{Caller, Outbound, RequestContext};
use crate::dispatch::{self, Reply};
use crate::events::Cursor;
use crate::protocol::{Incoming, Message, ProtocolVersion, encode_error, encode_result, errors};
use crate::server::Shared;
use crate::session::Session;

pub(super) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    if let Some(bad) = check_headers(&parts.headers) {
        return bad;
    }
    let limit = shared.config.http.max_body_bytes;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return too_large(limit);
    }
    let body = match Limited::new(body, limit).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(limit),
        Err(e) => {
            return reply::rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                &errors::server(format!("Bad Request: could not read the body: {e}")),
            );
        }
    };
    serve(
        &shared,
        McpRequest {
            headers: parts.headers,
            body,
        },
    )
    .await
}

fn too_large(limit: usize) -> Response {
    reply::rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        None,
        &errors::invalid_request(format!("Request body exceeds the limit of {limit} bytes")),
    )
}

/// `Content-Type`, `Accept` and `MCP-Protocol-Version`, before the body is read.
fn check_headers(h: &HeaderMap) -> Option<Response> {
    let ct = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Some(reply::rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            &errors::server("Unsupported Media Type: Content-Type must be application/json"),
        ));
    }
    // Be lenient when Accept is absent (some clients omit it), strict when it excludes us.
    if let Some(accept) = accept_header(h).as_deref()
        && !accepts(accept, "application/json")
        && !accepts(accept, "text/event-stream")
    {
        return Some(reply::rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            &errors::server(
                "Not Acceptable: Accept must include application/json or text/event-stream",
            ),
        ));
    }
    None
}

/// Every `Accept` line joined into one list (RFC 9110 allows the list to be split).
pub(super) fn accept_header(h: &HeaderMap) -> Option<String> {
    let mut lines = h
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .peekable();
    lines.peek()?;
    Some(lines.collect::<Vec<_>>().join(","))
}

pub(super) fn accepts(accept: &str, mime: &str) -> bool {
    accept.split(',').any(|part| {
        let m = part.split(';').next().unwrap_or("").trim();
        m.eq_ignore_ascii_case(mime)
            || m == "*/*"
            || (m.ends_with("/*") && mime.starts_with(&m[..m.len() - 1]))
    })
}

/// Serves a request whose headers passed; also the entry point for relayed requests.
pub(crate) async fn serve(shared: &Arc<Shared>, req: McpRequest) -> Response {
    let first = req.body.iter().find(|b| !b.is_ascii_whitespace()).copied();
    if first == Some(b'[') {
        return serve_batch(shared, req).await;
    }
    let incoming: Incoming = match serde_json::from_slice(&req.body) {
        Ok(m) => m,
        Err(e) => {
            return reply::rpc_error(StatusCode::BAD_REQUEST, None, &errors::parse_error(e));
        }
    };
    let message = match incoming.classify() {
        Ok(m) => m,
        Err((id, e)) => return reply::rpc_error(StatusCode::BAD_REQUEST, id.as_deref(), &e),
    };
    let sse_ok = accept_header(&req.headers)
        .as_deref()
        .is_none_or(|a| accepts(a, "text/event-stream"));
    if is_stateless_request(shared, &req.headers, &message) {
        return super::stateless::serve(shared, &req.headers, message, sse_ok).await;
    }
    if let Some(bad) = check_legacy_version(&req.headers) {
        return bad;
    }
    if let Message::Request { method, id, params } = &message
        && method == "initialize"
    {
        return initialize(shared, id, params.as_deref()).await;
    }
    let request_id = match &message {
        Message::Request { id, .. } => Some(&**id),
        _ => None,
    };
    let session = match session_ref::find(shared, &req.headers, Asker::Post, request_id).await {
        Ok(s) => s,
        Err(res) => return res,
    };
    match message {
        Message::Request { id, method, params } => {
            run_request(shared, session, id, method, params, sse_ok).await
        }
        Message::Notification { method, params } => {
            dispatch::notification(&session, &method, params.as_deref());
            reply::accepted()
        }
        Message::Response { id, outcome } => {
            dispatch::client_response(&session, &id, outcome);
            reply::accepted()
        }
    }
}

/// Which era a message belongs to (mcp-transports.md 8.14): 2026-07-28 when it says so in
/// `_meta`, in a non-session version header, or by a method only that era has; the session era
/// for `initialize` and for requests that carry a session; otherwise the configured default.
fn is_stateless_request(shared: &Shared, headers: &HeaderMap, message: &Message) -> bool {
    let (method, params) = match message {
        Message::Request { method, params, .. } | Message::Notification { method, params } => {
            (method, params)
        }
        Message::Response { .. } => return false,
    };
    if matches!(method.as_str(), "server/discover" | "subscriptions/listen") {
        return true;
    }
    let header_version = headers
        .get(PROTOCOL_VERSION_HEADER)
        .and_then(|v| v.to_str().ok());
    let has_session = headers.contains_key(SESSION_HEADER);
    let legacy_header = header_version.is_none_or(|v| ProtocolVersion::parse(v.trim()).is_some());
    // The hot path of a session-era client: no need to look into the params.
    if has_session && legacy_header {
        return false;
    }
    if meta_version(params.as_deref()) {
        return true;
    }
    if !legacy_header {
        // A version header of the new era, or an unknown one, on a request without a session.
        return !has_session;
    }
    if method == "initialize" || has_session {
        return false;
    }
    shared.config.stateless.default_era == crate::config::DefaultEra::Stateless
}

/// Whether `params._meta` names a protocol version.
fn meta_version(params: Option<&RawValue>) -> bool {
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

/// Session era: a version header, when present, must name a version we speak.
fn check_legacy_version(h: &HeaderMap) -> Option<Response> {
    let v = h
        .get(PROTOCOL_VERSION_HEADER)?
        .to_str()
        .unwrap_or("")
        .trim();
    if ProtocolVersion::parse(v).is_some() {
        return None;
    }
    let supported: Vec<&str> = ProtocolVersion::SESSION_ERA
        .iter()
        .map(|v| v.as_str())
        .collect();
    Some(reply::rpc_error(
        StatusCode::BAD_REQUEST,
        None,
        &errors::server(format!(
            "Bad Request: Unsupported protocol version: {v} (supported versions: {})",
            supported.join(", ")
        )),
    ))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    protocol_version: String,
    #[serde(default)]
    capabilities: Value,
    #[serde(default)]
    client_info: Value,
}

async fn initialize(shared: &Arc<Shared>, id: &RawValue, params: Option<&RawValue>) -> Response {
    let p: InitializeParams = match dispatch::params(params) {
        Ok(p) => p,
        Err(e) => return reply::rpc_error(StatusCode::BAD_REQUEST, Some(id), &e),
    };
    let version = ProtocolVersion::negotiate(&p.protocol_version);
    let session_id = match session_ref::mint_id(shared, "streamable-http", Some(id)) {
        Ok(sid) => sid,
        Err(res) => return *res,
    };
    if let Err(res) = session_ref::open_session(
        shared,
        &session_id,
        version,
        p.client_info,
        p.capabilities,
        Some(id),
    )
    .await
    {
        return res;
    }
    let result = initialize_result(shared, version);
    let mut res = reply::json(StatusCode::OK, encode_result(id, &result));
    if let Ok(v) = HeaderValue::from_str(&session_id) {
        res.headers_mut().insert(SESSION_HEADER, v);
    }
    if shared.config.deployment_mode == DeploymentMode::Distributed
        && let Ok(v) = HeaderValue::from_str(&affinity_cookie(shared))
    {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

/// The affinity cookie of distributed mode: load balancers route a session's requests by it.
pub(super) fn affinity_cookie(shared: &Shared) -> String {
    format!(
        "__frontmcp_node={}; Path=/; Max-Age=86400; HttpOnly; SameSite=Strict",
        shared.machine_id
    )
}

pub(super) fn initialize_result(shared: &Shared, version: ProtocolVersion) -> Value {
    let mut result = serde_json::json!({
        "protocolVersion": version.as_str(),
        "capabilities": dispatch::capabilities(false),
        "serverInfo": {"name": shared.info.name, "version": shared.info.version},
    });
    if let Some(i) = &shared.info.instructions {
        result["instructions"] = Value::String(i.clone());
    }
    // 2025-11-25's experimental tasks, when some tool can run as one.
    let tasks = shared
        .catalog()
        .tools
        .iter()
        .any(|t| t.task_support() != crate::tasks::TaskSupport::Forbidden);
    if tasks && version >= ProtocolVersion::V2025_11_25 {
        result["capabilities"]["tasks"] =
            serde_json::json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
    }
    result
}

/// `params._meta.progressToken`, read without parsing the rest of the params.
fn progress_token(params: Option<&RawValue>) -> Option<Value> {
    #[derive(Deserialize)]
    struct P {
        #[serde(rename = "_meta")]
        meta: Option<M>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct M {
        progress_token: Option<Value>,
    }
    let p: P = serde_json::from_str(params?.get()).ok()?;
    p.meta?.progress_token
}

type Running = BoxFuture<'static, Option<Reply>>;

/// Removes a request from its session's in-flight table when dropped.
struct Tracked(Arc<Session>, String);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.finish_request(&self.1);
    }
}

async fn run_request(
    shared: &Arc<Shared>,
    session: Arc<Session>,
    id: Box<RawValue>,
    method: String,
    params: Option<Box<RawValue>>,
    sse_ok: bool,
) -> Response {
    let raw_id = id.get().to_string();
    let cancel = session.track_request(&raw_id);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let ctx = RequestContext::new(
        shared.clone(),
        Caller::Session(session.clone()),
        sse_ok.then_some(tx),
        progress_token(params.as_deref()),
        cancel.clone(),
    );
    let work = dispatch::request(shared.clone(), method, params, ctx);
    // The request leaves the session's in-flight table however the handler ends: finished,
    // cancelled, or dropped with its connection.
    let tracked = Tracked(session.clone(), raw_id.clone());
    // Cancellation drops the handler at its next await point.
    let mut running: Running = async move {
        let _tracked = tracked;
        tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            r = work => Some(r),
        }
    }
    .boxed();
    let first = tokio::select! {
        biased;
        outcome = &mut running => {
            match rx.try_recv() {
                // It finished but sent something first: the answer must be a stream.
                Ok(msg) => Upgrade::Finished(msg, outcome),
                Err(_) => {
                    session.finish_request(&raw_id);
                    return match outcome {
                        Some(reply) => json_answer(&id, reply),
                        None => sse::response(futures_util::stream::empty::<crate::events::StoredEvent>().boxed(), 0, keepalive(shared)),
                    };
                }
            }
        }
        Some(msg) = rx.recv() => Upgrade::Running(msg, running),
    };
    stream_answer(shared, session, id, raw_id, first, rx).await
}

enum Upgrade {
    Running(Outbound, Running),
    Finished(Outbound, Option<Reply>),
}

fn json_answer(id: &RawValue, reply: Reply) -> Response {
    let body = dispatch::encode_reply(id, reply);
    reply::json(StatusCode::OK, body)
}

fn keepalive(shared: &Shared) -> std::time::Duration {
    std::time::Duration::from_secs(shared.config.http.sse_keepalive_secs.max(1))
}

/// Turns the answer into an SSE stream: a writer task moves the handler's messages and its
/// final answer into the event store; the response tails the stream.
async fn stream_answer(
    shared: &Arc<Shared>,
    session: Arc<Session>,
    id: Box<RawValue>,
    raw_id: String,
    first: Upgrade,
    mut rx: mpsc::UnboundedReceiver<Outbound>,
) -> Response {
    let stream = session.next_stream_id();
    let sid_for_tail = session.id.clone();
    let stop = session.closed.child_token();
    // The reader claims the stream before anything is written to it, so a polling end sent
    // as the very first message ends this connection and not a reader that does not exist yet.
    let tail = shared
        .events
        .tail(&sid_for_tail, stream, Cursor::Start, stop);
    let events = shared.events.clone();
    let sid = session.id.clone();
    let append = {
        let events = events.clone();
        let sid = sid.clone();
        move |data: Bytes| {
            let events = events.clone();
            let sid = sid.clone();
            async move {
                if let Err(e) = events.append(&sid, stream, data).await {
                    tracing::warn!(session = %sid, error = %e, "an SSE event could not be stored");
                }
            }
        }
    };
    if session.version.wants_priming() {
        append(Bytes::new()).await;
    }
    let (first_msg, mut running, finished) = match first {
        Upgrade::Running(m, r) => (m, Some(r), None),
        Upgrade::Finished(m, o) => (m, None, Some(o)),
    };
    let forward = {
        let events = events.clone();
        let sid = sid.clone();
        let append = append.clone();
        move |m: Outbound| {
            let events = events.clone();
            let sid = sid.clone();
            let append = append.clone();
            async move {
                match m {
                    Outbound::Message(b) => append(b).await,
                    Outbound::EndConnection => events.end_reader(&sid, stream).await,
                }
            }
        }
    };
    // Store the first message before the reader starts, so polling cannot race it.
    forward(first_msg).await;
    tokio::spawn(async move {
        let outcome = match (running.take(), finished) {
            (_, Some(outcome)) => outcome,
            (Some(mut running), None) => {
                let mut open = true;
                loop {
                    tokio::select! {
                        biased;
                        m = rx.recv(), if open => match m {
                            Some(m) => forward(m).await,
                            None => open = false,
                        },
                        outcome = &mut running => break outcome,
                    }
                }
            }
            (None, None) => None,
        };
        while let Ok(m) = rx.try_recv() {
            forward(m).await;
        }
        session.finish_request(&raw_id);
        if let Some(reply) = outcome {
            let body = dispatch::encode_reply(&id, reply);
            append(body).await;
        }
        events.close(&sid, stream).await;
    });
    sse::response(tail, shared.config.http.sse_retry_ms, keepalive(shared))
}

/// A 2025-03-26 batch: requests run concurrently, answers come back as one JSON array.
async fn serve_batch(shared: &Arc<Shared>, req: McpRequest) -> Response {
    if let Some(bad) = check_legacy_version(&req.headers) {
        return bad;
    }
    let items: Vec<Incoming> = match serde_json::from_slice(&req.body) {
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
    let session = match session_ref::find(shared, &req.headers, Asker::Post, None).await {
        Ok(s) => s,
        Err(res) => return res,
    };
    let header_version = req
        .headers
        .get(PROTOCOL_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(ProtocolVersion::parse);
    if !header_version.unwrap_or(session.version).allows_batches() {
        return reply::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::invalid_request(format!(
                "Invalid Request: JSON-RPC batches are not supported by protocol version {}",
                header_version.unwrap_or(session.version)
            )),
        );
    }
    let mut answers: Vec<BoxFuture<'static, Bytes>> = Vec::new();
    for item in items {
        match item.classify() {
            Err((id, e)) => {
                let b = encode_error(id.as_deref(), &e);
                answers.push(async move { b }.boxed());
            }
            Ok(Message::Notification { method, params }) => {
                dispatch::notification(&session, &method, params.as_deref())
            }
            Ok(Message::Response { id, outcome }) => {
                dispatch::client_response(&session, &id, outcome)
            }
            Ok(Message::Request { id, method, params }) => {
                let raw_id = id.get().to_string();
                let cancel = session.track_request(&raw_id);
                let ctx = RequestContext::new(
                    shared.clone(),
                    Caller::Session(session.clone()),
                    None,
                    progress_token(params.as_deref()),
                    cancel,
                );
                let work = dispatch::request(shared.clone(), method, params, ctx);
                let session = session.clone();
                answers.push(
                    async move {
                        let r = work.await;
                        session.finish_request(&raw_id);
                        dispatch::encode_reply(&id, r)
                    }
                    .boxed(),
                );
            }
        }
    }
    if answers.is_empty() {
        return reply::accepted();
    }
    let parts = futures_util::future::join_all(answers).await;
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
