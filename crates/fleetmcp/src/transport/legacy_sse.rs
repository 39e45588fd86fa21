//! The 2024-11-05 HTTP+SSE transport, kept for old clients next to Streamable HTTP:
//! `GET /sse` opens the session's one stream, whose first event names the URL to POST to
//! (`/message?sessionId=<id>`); every answer, notification and server request travels on
//! that stream, and each POST is answered `202`.
//!
//! The session lives as long as its stream: it cannot move to another instance (the stream
//! is tied to this connection), so a load balancer must keep such a client on one instance.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::response::Response;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use http::StatusCode;
use http_body_util::{BodyExt, Limited};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::{reply, sse};
use crate::context::{Caller, Outbound, RequestContext};
use crate::dispatch;
use crate::events::{Cursor, STANDALONE_STREAM, StoredEvent};
use crate::protocol::{Incoming, Message, ProtocolVersion, encode_result, errors};
use crate::server::Shared;
use crate::session::{Ended, Session};

/// The path clients POST to, named in the `endpoint` event.
pub(crate) const MESSAGE_PATH: &str = "/message";

/// Ends the session when its stream's connection goes away.
struct StreamGuard {
    shared: Arc<Shared>,
    id: Arc<str>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.shared.live.remove(&self.id, Ended::Deleted);
        let shared = self.shared.clone();
        let id = self.id.clone();
        tokio::spawn(async move {
            shared.events.forget(&id).await;
            let _ = shared.store.delete(&id).await;
        });
    }
}

/// `GET /sse`: a new session's stream.
pub(super) async fn open(State(shared): State<Arc<Shared>>) -> Response {
    let id = match super::session_ref::mint_id(&shared, "legacy-sse", None) {
        Ok(id) => id,
        Err(res) => return *res,
    };
    let id: Arc<str> = id.into();
    let stop = shared.shutdown.child_token();
    // Claimed before the endpoint is announced, so nothing posted afterwards is missed.
    let events = shared
        .events
        .tail(&id, STANDALONE_STREAM, Cursor::Now, stop);
    let endpoint = Bytes::from(format!(
        "event: endpoint\ndata: {MESSAGE_PATH}?sessionId={id}\n\n"
    ));
    let keepalive = Duration::from_secs(shared.config.http.sse_keepalive_secs.max(1));
    let guard = StreamGuard {
        shared: shared.clone(),
        id,
    };
    let body = stream::once(async move { endpoint })
        .chain(frames(events, keepalive, guard))
        .map(Ok::<_, Infallible>);
    let mut res = sse::streaming(Body::from_stream(body));
    // Such a session cannot move: in distributed mode the affinity cookie keeps the client's
    // POSTs on this instance.
    if shared.config.deployment_mode == crate::config::DeploymentMode::Distributed
        && let Ok(v) = http::HeaderValue::from_str(&super::post::affinity_cookie(&shared))
    {
        res.headers_mut().insert(http::header::SET_COOKIE, v);
    }
    res
}

/// The stream's messages, without event ids (this transport has no resumption), with
/// keep-alive comments; the guard lives as long as the stream.
fn frames(
    events: BoxStream<'static, StoredEvent>,
    keepalive: Duration,
    guard: StreamGuard,
) -> BoxStream<'static, Bytes> {
    let tick = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    stream::unfold((events, tick, guard), |(mut events, mut tick, guard)| async move {
        loop {
            tokio::select! {
                ev = events.next() => {
                    let ev = ev?;
                    if ev.data.is_empty() {
                        continue;
                    }
                    return Some((sse::message_frame(&ev.data), (events, tick, guard)));
                }
                _ = tick.tick() => return Some((Bytes::from_static(b": keepalive\n\n"), (events, tick, guard))),
            }
        }
    })
    .boxed()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MessageQuery {
    session_id: Option<String>,
}

/// `POST /message?sessionId=<id>`: one JSON-RPC message; its answer goes to the stream.
pub(super) async fn post(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<MessageQuery>,
    req: Request,
) -> Response {
    let Some(id) = q.session_id else {
        return reply::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            &errors::server("Bad Request: sessionId is required"),
        );
    };
    let limit = shared.config.http.max_body_bytes;
    let body = match Limited::new(req.into_body(), limit).collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => {
            return reply::rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                &errors::invalid_request(format!(
                    "Request body exceeds the limit of {limit} bytes"
                )),
            );
        }
    };
    let message = match serde_json::from_slice::<Incoming>(&body) {
        Ok(m) => match m.classify() {
            Ok(m) => m,
            Err((rid, e)) => return reply::rpc_error(StatusCode::BAD_REQUEST, rid.as_deref(), &e),
        },
        Err(e) => return reply::rpc_error(StatusCode::BAD_REQUEST, None, &errors::parse_error(e)),
    };
    if let Message::Request {
        id: rid,
        method,
        params,
    } = &message
        && method == "initialize"
    {
        return initialize(&shared, &id, rid, params.as_deref()).await;
    }
    let Some(session) = shared.live.get(&id) else {
        // Not held here: this transport's sessions never move between instances.
        return reply::text(StatusCode::NOT_FOUND, "Session not found");
    };
    match message {
        Message::Notification { method, params } => {
            dispatch::notification(&session, &method, params.as_deref())
        }
        Message::Response { id, outcome } => dispatch::client_response(&session, &id, outcome),
        Message::Request {
            id: rid,
            method,
            params,
        } => {
            tokio::spawn(run(shared.clone(), session, rid, method, params));
        }
    }
    reply::accepted()
}

/// Runs a request; its messages and then its answer go to the session's stream, in order.
async fn run(
    shared: Arc<Shared>,
    session: Arc<Session>,
    id: Box<RawValue>,
    method: String,
    params: Option<Box<RawValue>>,
) {
    let raw_id = id.get().to_string();
    let cancel = session.track_request(&raw_id);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let progress = params
        .as_deref()
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .and_then(|p| p.pointer("/_meta/progressToken").cloned());
    let ctx = RequestContext::new(
        shared.clone(),
        Caller::Session(session.clone()),
        Some(tx),
        progress,
        cancel.clone(),
    );
    let mut work = Box::pin(dispatch::request(shared.clone(), method, params, ctx));
    let append = |data: Bytes| {
        let shared = shared.clone();
        let sid = session.id.clone();
        async move {
            if let Err(e) = shared.events.append(&sid, STANDALONE_STREAM, data).await {
                tracing::warn!(error = %e, "a message could not be queued on an SSE session's stream");
            }
        }
    };
    let outcome = loop {
        tokio::select! {
            biased;
            Some(m) = rx.recv() => if let Outbound::Message(b) = m { append(b).await },
            r = &mut work => break Some(r),
            _ = cancel.cancelled() => break None,
        }
    };
    while let Ok(Outbound::Message(b)) = rx.try_recv() {
        append(b).await;
    }
    session.finish_request(&raw_id);
    if let Some(reply) = outcome {
        let body = dispatch::encode_reply(&id, reply);
        append(body).await;
    }
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

async fn initialize(
    shared: &Arc<Shared>,
    sid: &str,
    rid: &RawValue,
    params: Option<&RawValue>,
) -> Response {
    // The id must be one this deployment minted for a stream that is open here.
    let minted = shared.sealer.as_ref().and_then(|s| s.open(sid)).is_some();
    if !minted {
        tracing::warn!("parseInput: mcp-session-id is not a session this server verified");
        return reply::rpc_error(
            StatusCode::NOT_FOUND,
            Some(rid),
            &errors::server("invalid session id"),
        );
    }
    if shared.live.get(sid).is_some() {
        return reply::rpc_error(
            StatusCode::BAD_REQUEST,
            Some(rid),
            &errors::invalid_request("Invalid Request: this session is already initialized"),
        );
    }
    let p: InitializeParams = match dispatch::params(params) {
        Ok(p) => p,
        Err(e) => return reply::rpc_error(StatusCode::BAD_REQUEST, Some(rid), &e),
    };
    let version = ProtocolVersion::negotiate(&p.protocol_version);
    if let Err(res) = super::session_ref::open_session(
        shared,
        sid,
        version,
        p.client_info,
        p.capabilities,
        Some(rid),
    )
    .await
    {
        return res;
    }
    let result = super::post::initialize_result(shared, version);
    if let Err(e) = shared
        .events
        .append(sid, STANDALONE_STREAM, encode_result(rid, &result))
        .await
    {
        tracing::warn!(error = %e, "the initialize result could not be queued");
    }
    reply::accepted()
}
