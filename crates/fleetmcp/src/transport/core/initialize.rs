//! `initialize`: opens a session (Streamable HTTP's, the 2024-11-05 transport's, whose id its
//! stream already announced, or stdio's) and builds the result every transport sends; what it
//! refuses is a [`Refused`], which each transport answers its own way.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::Status;
use super::driver::Refused;
use crate::app::App;
use crate::dispatch;
use crate::limits::Charge;
use crate::limits::LimitKey;
use crate::protocol::{ErrorCode, ErrorData, ProtocolVersion, errors};
use crate::session::{OpenError, Session};
use crate::telemetry::Limit;
use crate::upstream::{self, OpenFailure};

/// Kept raw at first so that their size is checked before anything is built from them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    protocol_version: String,
    #[serde(default)]
    capabilities: Option<Box<RawValue>>,
    #[serde(default)]
    client_info: Option<Box<RawValue>>,
}

/// `clientInfo` and `capabilities` as values, once their size (as sent) is within
/// `sessions.max_client_info_bytes`: both live as long as the session, in memory and in the
/// store, so a client may not make them arbitrarily large.
fn client_data(app: &App, p: &InitializeParams) -> Result<(Value, Value), ErrorData> {
    let max = app.config().sessions.max_client_info_bytes;
    let len = |v: &Option<Box<RawValue>>| v.as_ref().map_or(0, |r| r.get().len());
    let size = len(&p.client_info) + len(&p.capabilities);
    if size > max {
        return Err(errors::invalid_params_with(
            format!(
                "clientInfo and capabilities take {size} bytes, more than sessions.max_client_info_bytes ({max})"
            ),
            serde_json::json!({"limit": "sessions.max_client_info_bytes", "max": max, "size": size}),
        ));
    }
    let value = |v: &Option<Box<RawValue>>| -> Result<Value, ErrorData> {
        match v {
            Some(r) => serde_json::from_str(r.get())
                .map_err(|e| errors::invalid_params(format!("invalid initialize params: {e}"))),
            None => Ok(Value::Null),
        }
    };
    Ok((value(&p.client_info)?, value(&p.capabilities)?))
}

/// How long a session counts under `limits.max_sessions_per_key` when it is not ended: its
/// record's lifetime in Redis, else its idle lifetime here.
pub(in crate::transport) fn session_lifetime_ms(app: &App) -> u64 {
    app.config()
        .redis
        .as_ref()
        .map_or(app.config().sessions.idle_ttl_ms, |r| r.default_ttl_ms)
}

/// Opens session `sid` (minted with [`mint`] when `None`) for an `initialize` with `params`;
/// the session and its result, or the refusal the transport answers. The session counts against `key`
/// (`limits.max_sessions_per_key`: `429` with `Retry-After` beyond it) and what it keeps of the
/// client against the instance's `sessions.max_client_data_bytes` (`503` beyond it).
pub(in crate::transport) async fn open(
    app: &App,
    sid: Option<&str>,
    params: Option<&RawValue>,
    principal: Option<&str>,
    key: &LimitKey,
) -> Result<(Arc<Session>, Value), Refused> {
    let p: InitializeParams =
        dispatch::params(params).map_err(|e| Refused::new(Status::BadRequest, e))?;
    // Checked before an id is minted or anything is held, so a refusal leaves nothing behind.
    let (client_info, capabilities) =
        client_data(app, &p).map_err(|e| Refused::new(Status::BadRequest, e))?;
    let version_asked = ProtocolVersion::negotiate(&p.protocol_version);
    let minted;
    let sid = match sid {
        Some(s) => s,
        None => {
            minted = mint(app, "streamable-http")?;
            &minted
        }
    };
    // Both before the session exists, so a refusal leaves nothing behind.
    let raw_len = |v: &Option<Box<RawValue>>| v.as_ref().map_or(0, |r| r.get().len());
    let kept = raw_len(&p.client_info) + raw_len(&p.capabilities);
    let charge = charge_client_data(app, kept)?;
    let ttl_ms = session_lifetime_ms(app);
    let admitted_ms = crate::clock::unix_ms();
    let place = match app.limits().admit_session(key, ttl_ms).await {
        Ok(place) => place,
        Err(refusal) => {
            tracing::debug!(
                key = key.as_str(),
                ?refusal,
                "refused an initialize: the key holds its most sessions"
            );
            return Err(super::driver::refuse_initialize(app, refusal));
        }
    };
    // A gateway's upstream answers `initialize` before the session exists, so that a refusal
    // leaves nothing behind, and the session serves the version the upstream chose.
    let upstream = match upstream::open(app, sid, params, key).await.transpose() {
        Ok(handshake) => handshake,
        Err(failure) => {
            app.limits().end_session(key, admitted_ms, ttl_ms).await;
            return Err(upstream_refusal(failure));
        }
    };
    let version = upstream.as_ref().and_then(upstream::answered_version);
    let version = version.unwrap_or(version_asked);
    let session = match app
        .sessions()
        .open(sid, version, client_info, capabilities, principal)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            if matches!(e, OpenError::Full) {
                app.meters().limit_rejected(Limit::Sessions);
            }
            app.limits().end_session(key, admitted_ms, ttl_ms).await;
            return Err(open_error(e));
        }
    };
    session.keep_place(place);
    session.keep_charge(charge);
    let result = match upstream {
        Some(handshake) => {
            let result = handshake.result().clone();
            upstream::adopt(app, &session, handshake);
            result
        }
        None => result(app, version),
    };
    Ok((session, result))
}

/// Charges what a new session keeps of the client (`kept` bytes) to the instance's budget:
/// `503` with `Retry-After` when it is spent.
fn charge_client_data(app: &App, kept: usize) -> Result<Charge, Refused> {
    app.client_data().charge(kept).map_err(|_| {
        app.meters().limit_rejected(Limit::ClientData);
        let max = app.config().sessions.max_client_data_bytes;
        let full = ErrorData::new(
            ErrorCode(-32000),
            format!("This instance keeps its maximum of client data (sessions.max_client_data_bytes, {max}); retry shortly"),
            Some(serde_json::json!({"limit": "sessions.max_client_data_bytes", "max": max})),
        );
        Refused::new(Status::Unavailable, full).retry_after(5)
    })
}

/// The answer to an `initialize` whose upstream could not be had: `503` with `Retry-After`
/// when it could not be reached, its own error (as a JSON-RPC answer) when it refused.
fn upstream_refusal(failure: OpenFailure) -> Refused {
    match failure {
        OpenFailure::Unavailable(why) => {
            tracing::warn!(error = %why, "[gateway] refused an initialize: no upstream");
            let e = errors::server(format!(
                "The upstream server could not be started: {why}; retry shortly"
            ));
            Refused::new(Status::Unavailable, e).retry_after(5)
        }
        OpenFailure::Refused(e) => Refused::new(Status::Ok, e),
    }
}

/// A new sealed session id naming this instance, for transport `protocol`.
pub(in crate::transport) fn mint(app: &App, protocol: &str) -> Result<String, Refused> {
    app.sessions().mint(protocol).map_err(open_error)
}

fn open_error(e: OpenError) -> Refused {
    let internal = |m| Refused::new(Status::Internal, errors::internal(m));
    let unavailable = |m, s| Refused::new(Status::Unavailable, errors::server(m)).retry_after(s);
    match e {
        OpenError::NoSecret => {
            internal("Session ids cannot be issued: MCP_SESSION_SECRET is not set")
        }
        OpenError::SealFailed => internal("could not seal a session id"),
        OpenError::Full => unavailable(
            "This instance holds its maximum number of sessions; retry shortly",
            5,
        ),
        OpenError::NotDurable => {
            unavailable("The session could not be stored durably; retry shortly", 1)
        }
        OpenError::Opening => unavailable(
            "Another initialize for this session is running; retry shortly",
            1,
        ),
    }
}

/// The `initialize` result session `session` was opened with, to answer a 2024-11-05
/// client's `initialize` again: the upstream's, for a gateway's session.
pub(in crate::transport) fn result_of(app: &App, session: &Session) -> Value {
    upstream::initialize_result(session).unwrap_or_else(|| result(app, session.version))
}

/// The `initialize` result for `version`.
fn result(app: &App, version: ProtocolVersion) -> Value {
    let info = app.info();
    let mut result = serde_json::json!({
        "protocolVersion": version.as_str(),
        "capabilities": dispatch::capabilities(false),
        "serverInfo": {"name": info.name, "version": info.version},
    });
    if let Some(i) = &info.instructions {
        result["instructions"] = Value::String(i.clone());
    }
    // 2025-11-25's experimental tasks, when some tool can run as one.
    let tasks = app
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
