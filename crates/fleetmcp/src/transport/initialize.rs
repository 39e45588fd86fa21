//! `initialize`: opens a session (Streamable HTTP, or the 2024-11-05 transport's, whose id its
//! stream already announced) and builds the result both transports send.

use std::sync::Arc;

use axum::response::Response;
use http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{locate, reply};
use crate::app::App;
use crate::dispatch;
use crate::protocol::{ProtocolVersion, errors};
use crate::session::{OpenError, Session};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    protocol_version: String,
    #[serde(default)]
    capabilities: Value,
    #[serde(default)]
    client_info: Value,
}

/// Opens session `sid` (minted with [`mint`] when `None`) for the `initialize` request `rid`;
/// the session and its result, or the error answer.
pub(super) async fn open(
    app: &App,
    sid: Option<&str>,
    rid: &RawValue,
    params: Option<&RawValue>,
) -> Result<(Arc<Session>, Value), Response> {
    let p: InitializeParams = dispatch::params(params)
        .map_err(|e| reply::rpc_error(StatusCode::BAD_REQUEST, Some(rid), &e))?;
    let version = ProtocolVersion::negotiate(&p.protocol_version);
    let minted;
    let sid = match sid {
        Some(s) => s,
        None => {
            minted = mint(app, "streamable-http", Some(rid))?;
            &minted
        }
    };
    let session = app
        .sessions()
        .open(sid, version, p.client_info, p.capabilities)
        .await
        .map_err(|e| open_error(e, Some(rid)))?;
    Ok((session, result(app, version)))
}

/// A new sealed session id naming this instance, for transport `protocol`.
pub(super) fn mint(app: &App, protocol: &str, rid: Option<&RawValue>) -> Result<String, Response> {
    app.sessions()
        .mint(protocol)
        .map_err(|e| open_error(e, rid))
}

fn open_error(e: OpenError, rid: Option<&RawValue>) -> Response {
    match e {
        OpenError::NoSecret => reply::rpc_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            rid,
            &errors::internal("Session ids cannot be issued: MCP_SESSION_SECRET is not set"),
        ),
        OpenError::SealFailed => reply::rpc_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            rid,
            &errors::internal("could not seal a session id"),
        ),
        OpenError::Full => locate::unavailable(
            rid,
            "This instance holds its maximum number of sessions; retry shortly",
            5,
        ),
    }
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
