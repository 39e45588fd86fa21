//! Method dispatch: one parsed JSON-RPC request in, a result or an error out, for both eras.
//!
//! One file per method family, and [`outcome`], what a tool call's return value means (shared by
//! `tools` and `tasks`). Handlers here see a [`Caller`] (a session, or a self-describing
//! 2026-07-28 request) and a [`RequestContext`], never HTTP: the same dispatch serves a request
//! received directly or relayed from another instance.
//!
//! [`request`] routes a method to its family (`tools.rs`, `resources.rs`, `prompts.rs`,
//! `completion.rs`, `task_methods/`), which parses its params into the type it needs;
//! `tools.rs` runs a tool's handler from the catalog snapshot and [`outcome`] maps its outcome
//! to the answer (one mapping, shared with tasks, and below both so neither imports the other).
//! `scope.rs` says which OAuth scope a request needs (what its tool, resource, template or
//! prompt declares, or a gateway's upstream), from method and params alone, so the driver
//! refuses it before anything runs. [`respond`] shapes a result for the caller's era
//! (2026-07-28 results carry `resultType`, `_meta` server info and caching hints).
//! `task_methods/mod.rs` starts every kind of task in one function (`launch`, which records
//! the caller's principal); `task_methods/extension.rs` is the 2026-07-28 extension (each
//! request reads the record through `Tasks::get_as`, so another principal's task is an unknown
//! task), `task_methods/session_era.rs` the 2025-11-25 experimental tasks (bound to their
//! session, itself bound to its principal).
//! `paging.rs` is the cursor the list methods share.
//!
//! Architecture invariant: dispatch knows nothing of HTTP, headers or Redis.

mod completion;
mod outcome;
mod paging;
mod prompts;
mod resources;
mod scope;
mod task_methods;
mod tools;

pub(crate) use scope::scope_for;

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::context::{Caller, RequestContext};
use crate::protocol::LogLevel;
use crate::protocol::{ErrorData, ProtocolVersion, STATELESS_VERSIONS, errors};
use crate::session::Session;
use crate::stateless::request_state::StatePayload;
use crate::stateless::{META_SERVER_INFO, Round};

pub(crate) use crate::protocol::Reply;

/// The JSON-RPC answer to request `id`: its result, or its error.
pub(crate) fn encode_reply(id: &RawValue, reply: Reply) -> bytes::Bytes {
    match reply {
        Ok(result) => crate::protocol::encode_raw_result(id, &result),
        Err(e) => crate::protocol::encode_error(Some(id), &e),
    }
}

/// A successful answer carrying `value`, serialised once (an error if it cannot be).
pub(crate) fn reply_of<T: Serialize + ?Sized>(value: &T) -> Reply {
    serde_json::value::to_raw_value(value)
        .map_err(|e| errors::internal(format!("serialising the result: {e}")))
}

/// Parses a method's params; absent params read as `{}`. `T` may borrow from them.
pub(crate) fn params<'a, T: Deserialize<'a>>(params: Option<&'a RawValue>) -> Result<T, ErrorData> {
    let text = params.map_or("{}", |p| p.get());
    serde_json::from_str(text).map_err(|e| errors::invalid_params(format!("Invalid params: {e}")))
}

/// Caching hints of a 2026-07-28 result: how long it stays fresh, and for whom.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cache {
    pub ttl_ms: u64,
    pub scope: &'static str,
}

/// The caching hints of every list result.
fn list_cache(app: &App) -> Cache {
    Cache {
        ttl_ms: app.config().stateless.list_ttl_ms,
        scope: "public",
    }
}

/// Serialises a result for the caller's era. 2026-07-28 results carry `resultType`, the
/// server's identity in `_meta`, and (lists, reads, discover; not a retried round's) caching
/// hints; session-era results carry none of these.
pub(crate) fn respond<T: Serialize>(
    app: &App,
    ctx: &RequestContext,
    value: &T,
    cache: Option<Cache>,
) -> Reply {
    if !ctx.is_stateless() {
        return reply_of(value);
    }
    let cache = cache.filter(|_| !matches!(ctx.caller(), Caller::Stateless(r) if r.retry));
    let mut v = serde_json::to_value(value).map_err(|e| errors::internal(e.to_string()))?;
    if let Value::Object(map) = &mut v {
        decorate(app, map, cache);
    }
    reply_of(&v)
}

fn decorate(app: &App, map: &mut Map<String, Value>, cache: Option<Cache>) {
    map.entry("resultType").or_insert_with(|| json!("complete"));
    let meta = map.entry("_meta").or_insert_with(|| json!({}));
    if let Value::Object(meta) = meta {
        meta.insert(
            META_SERVER_INFO.into(),
            json!({"name": app.info().name, "version": app.info().version}),
        );
    }
    if let Some(c) = cache {
        map.insert("ttlMs".into(), json!(c.ttl_ms));
        map.insert("cacheScope".into(), json!(c.scope));
    }
}

/// The `InputRequiredResult` of a stateless handler that asked the client for something it
/// has not answered yet: the questions, and a sealed `requestState` with the answers so far.
pub(crate) fn input_required(app: &App, round: &Round) -> Reply {
    let asked = round.take_asked();
    if asked.is_empty() {
        return Err(errors::internal(
            "the handler needs client input but asked nothing",
        ));
    }
    let now = crate::clock::unix_ms();
    let state = app
        .request_state()
        .seal(&StatePayload {
            m: round.method.clone(),
            d: round.digest.clone(),
            exp: now + app.config().stateless.request_state_ttl_ms,
            a: round.answers_to_seal(),
            q: asked.iter().map(|(k, _)| k.clone()).collect(),
            o: round.principal.clone(),
            k: Some(round.key_to_seal()),
        })
        .ok_or_else(|| errors::internal("could not seal requestState"))?;
    let requests: Map<String, Value> = asked.into_iter().collect();
    let mut result = json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": state,
    });
    if let Value::Object(map) = &mut result {
        decorate(app, map, None);
    }
    reply_of(&result)
}

/// Runs one request. A handler that panics (a tool, resource, prompt or completion handler,
/// or our own code on its way) answers `-32603` for this request alone, logged once with the
/// method and the name it was called with; the session and every other request go on.
///
/// The panic is caught here rather than in the transport's driver because here the method and
/// params are still at hand: the name is read from the params only when a panic happened, so
/// the hot path pays nothing but the `catch_unwind` frame.
pub(crate) async fn request(
    method: String,
    params: Option<Box<RawValue>>,
    ctx: RequestContext,
) -> Reply {
    // `AssertUnwindSafe`: after a panic nothing of the request's future is used again; the
    // shared state it may have touched is behind locks that do not poison (parking_lot).
    match AssertUnwindSafe(route(&method, params.as_deref(), ctx))
        .catch_unwind()
        .await
    {
        Ok(reply) => reply,
        Err(panic) => {
            tracing::error!(
                method,
                name = called_name(params.as_deref()).as_deref().unwrap_or(""),
                panic = panic_message(&*panic),
                "a handler panicked; the request is answered -32603"
            );
            Err(errors::handler_panicked())
        }
    }
}

/// What a panic said, for the log (`panic!` with a message carries a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("<a panic without a message>")
}

/// `params.name` (tools, prompts) or `params.uri` (resources), for the log of a failed request.
fn called_name(params: Option<&RawValue>) -> Option<String> {
    #[derive(Deserialize)]
    struct Named {
        name: Option<String>,
        uri: Option<String>,
    }
    let n: Named = serde_json::from_str(params?.get()).ok()?;
    n.name.or(n.uri)
}

/// Routes one request to its method family. The task methods and a gateway's requests (a
/// task store's or an upstream's calls) are boxed where they are awaited, so that a request's
/// future, which the driver boxes, stays small (issue 23).
async fn route(method: &str, p: Option<&RawValue>, ctx: RequestContext) -> Reply {
    // Nearly every request: served from the context as it is, without copies of its app's and
    // caller's handles (two reference counts every request shares, touched from every core;
    // issue 40). The match below gives the same answer.
    if method == "tools/call" && ctx.app().upstream().is_none() {
        return tools::call(p, ctx).await;
    }
    let app = ctx.app().clone();
    let caller = ctx.caller().clone();
    if app.upstream().is_some() {
        return Box::pin(gateway(&app, &caller, method, p, ctx)).await;
    }
    match (&caller, method) {
        (_, "tools/list") => tools::list(&app, &ctx, p),
        (_, "tools/call") => tools::call(p, ctx).await,
        (_, "resources/list") => resources::list(&app, &ctx, p),
        (_, "resources/templates/list") => resources::list_templates(&app, &ctx, p),
        (_, "resources/read") => resources::read(&app, p, ctx).await,
        (_, "prompts/list") => prompts::list(&app, &ctx, p),
        (_, "prompts/get") => prompts::get(&app, p, ctx).await,
        (_, "completion/complete") => completion::complete(&app, &ctx, p).await,
        (Caller::Session(_), "ping") => reply_of(&json!({})),
        (Caller::Session(s), "resources/subscribe") => resources::subscribe(&app, s, p, true),
        (Caller::Session(s), "resources/unsubscribe") => resources::subscribe(&app, s, p, false),
        (Caller::Session(s), "logging/setLevel") => set_level(s, p),
        (Caller::Session(s), "tasks/get") if s.version >= ProtocolVersion::V2025_11_25 => {
            Box::pin(task_methods::session_era::get(&app, s, p)).await
        }
        (Caller::Session(s), "tasks/result") if s.version >= ProtocolVersion::V2025_11_25 => {
            Box::pin(task_methods::session_era::result(&app, &ctx, s, p)).await
        }
        (Caller::Session(s), "tasks/list") if s.version >= ProtocolVersion::V2025_11_25 => {
            Box::pin(task_methods::session_era::list(&app, s, p)).await
        }
        (Caller::Session(s), "tasks/cancel") if s.version >= ProtocolVersion::V2025_11_25 => {
            Box::pin(task_methods::session_era::cancel(&app, s, p)).await
        }
        (Caller::Session(_), "initialize") => Err(errors::invalid_request(
            "Invalid Request: this session is already initialized",
        )),
        (Caller::Stateless(_), "server/discover") => discover(&app, &ctx),
        (Caller::Stateless(_), "tasks/get") => {
            Box::pin(task_methods::extension::get(&app, &ctx, p)).await
        }
        (Caller::Stateless(_), "tasks/update") => {
            Box::pin(task_methods::extension::update(&app, &ctx, p)).await
        }
        (Caller::Stateless(_), "tasks/cancel") => {
            Box::pin(task_methods::extension::cancel(&app, &ctx, p)).await
        }
        (_, other) => Err(errors::method_not_found(other)),
    }
}

/// A gateway's request: every one of a session goes to its upstream unchanged (the catalog is
/// not consulted); a 2026-07-28 request has no session to hold an upstream, and is refused.
async fn gateway(
    app: &App,
    caller: &Caller,
    method: &str,
    p: Option<&RawValue>,
    ctx: RequestContext,
) -> Reply {
    match caller {
        Caller::Session(s) => {
            let params = p.map(|p| p.to_owned());
            crate::upstream::request(app, s, method.to_string(), params, ctx).await
        }
        _ => Err(errors::method_not_found_msg(
            "This server is a gateway to a session-era MCP server: initialize a session",
        )),
    }
}

/// Methods a 2026-07-28 request may call (anything else is `404` `-32601`).
pub(crate) fn is_stateless_method(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "subscriptions/listen"
            | "tools/list"
            | "tools/call"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "prompts/list"
            | "prompts/get"
            | "completion/complete"
            | "tasks/get"
            | "tasks/update"
            | "tasks/cancel"
    )
}

/// The capabilities this server serves, the same in both eras apart from what 2026-07-28
/// removed (logging levels are per request there).
pub(crate) fn capabilities(stateless: bool) -> Value {
    let mut caps = json!({
        "tools": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true},
        "prompts": {"listChanged": true},
        "completions": {},
    });
    if stateless {
        caps["extensions"] = json!({crate::tasks::TASKS_EXTENSION: {}});
    } else {
        caps["logging"] = json!({});
    }
    caps
}

fn discover(app: &App, ctx: &RequestContext) -> Reply {
    let mut result = json!({
        "supportedVersions": STATELESS_VERSIONS,
        "capabilities": capabilities(true),
    });
    if let Some(i) = &app.info().instructions {
        result["instructions"] = json!(i);
    }
    respond(
        app,
        ctx,
        &result,
        Some(Cache {
            ttl_ms: app.config().stateless.list_ttl_ms,
            scope: "public",
        }),
    )
}

fn set_level(session: &Session, p: Option<&RawValue>) -> Reply {
    #[derive(Deserialize)]
    struct SetLevel {
        level: String,
    }
    let SetLevel { level } = params(p)?;
    let level = LogLevel::parse(&level)
        .ok_or_else(|| errors::invalid_params(format!("Invalid log level: {level}")))?;
    session.set_log_level(level);
    reply_of(&json!({}))
}

/// Handles a notification from a session-era client.
pub(crate) fn notification(session: &Session, method: &str, p: Option<&RawValue>) {
    if crate::upstream::notification(session, method, p) {
        return;
    }
    match method {
        "notifications/cancelled" => {
            #[derive(Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Cancelled {
                request_id: Box<RawValue>,
                #[serde(default)]
                reason: Option<String>,
            }
            if let Ok(c) = params::<Cancelled>(p) {
                let found = session.cancel_request(c.request_id.get());
                tracing::debug!(session = %crate::session::LogId(&session.id), request = c.request_id.get(), reason = ?c.reason, found, "client cancelled a request");
            }
        }
        _ => tracing::trace!(method, "notification ignored"),
    }
}

/// Delivers the client's answer to a request we sent it.
pub(crate) fn client_response(
    session: &Session,
    id: &RawValue,
    outcome: Result<Box<RawValue>, Box<RawValue>>,
) {
    let Ok(id) = serde_json::from_str::<String>(id.get()) else {
        tracing::debug!(
            id = id.get(),
            "answer to a request id this server never uses"
        );
        return;
    };
    let reply = match outcome {
        Ok(result) => {
            serde_json::from_str(result.get()).map_err(|e| errors::internal(e.to_string()))
        }
        Err(error) => Err(serde_json::from_str::<ErrorData>(error.get())
            .unwrap_or_else(|_| errors::internal("the client sent a malformed error"))),
    };
    if !session.deliver_client_reply(&id, reply) {
        tracing::debug!(session = %crate::session::LogId(&session.id), id, "answer to a request nobody waits for");
    }
}

/// The driver boxes every request's future: it stays well within glibc's per-thread cache of
/// small blocks (up to 1,032 bytes), the task methods' and a gateway's futures boxed where they
/// are awaited (issue 23: it was 1,672 bytes, and the driver's box 3,512 with it held twice).
#[cfg(test)]
mod future_sizes {
    use super::*;
    use crate::testing::{ret2, ret3};

    #[test]
    fn a_requests_future_stays_small() {
        let (request, call) = (ret3(&request), ret2(&tools::call));
        eprintln!("dispatch::request {request} B, tools::call {call} B");
        assert!(request <= 512, "dispatch::request's future: {request} B");
        assert!(call <= 256, "tools::call's future: {call} B");
    }
}
