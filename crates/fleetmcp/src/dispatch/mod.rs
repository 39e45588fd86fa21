//! Session-era method dispatch: one parsed JSON-RPC message in, a result or an error out.
//!
//! One file per method family. Handlers here see a [`Session`] and a [`RequestContext`],
//! never HTTP: the same dispatch serves a request received directly or relayed from another
//! instance.
//!
//! Architecture invariant: dispatch knows nothing of HTTP, headers or Redis.

mod completion;
mod paging;
mod prompts;
mod resources;
mod tools;

use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::context::RequestContext;
use crate::protocol::{ErrorData, errors};
use crate::server::Shared;
use crate::session::{LogLevel, Session};

/// The result of a request, already serialised.
pub(crate) type Reply = Result<Box<RawValue>, ErrorData>;

pub(crate) fn raw<T: serde::Serialize>(value: &T) -> Reply {
    serde_json::value::to_raw_value(value)
        .map_err(|e| errors::internal(format!("serialising the result: {e}")))
}

/// Parses a method's params; absent params read as `{}`.
pub(crate) fn params<T: DeserializeOwned>(params: Option<&RawValue>) -> Result<T, ErrorData> {
    let text = params.map_or("{}", |p| p.get());
    serde_json::from_str(text).map_err(|e| errors::invalid_params(format!("Invalid params: {e}")))
}

/// Runs one request of a session.
pub(crate) async fn request(
    shared: Arc<Shared>,
    session: Arc<Session>,
    method: String,
    params: Option<Box<RawValue>>,
    ctx: RequestContext,
) -> Reply {
    let p = params.as_deref();
    match method.as_str() {
        "ping" => raw(&serde_json::json!({})),
        "tools/list" => tools::list(&shared, p),
        "tools/call" => tools::call(&shared, p, ctx).await,
        "resources/list" => resources::list(&shared, p),
        "resources/templates/list" => resources::list_templates(&shared, p),
        "resources/read" => resources::read(&shared, p, ctx).await,
        "resources/subscribe" => resources::subscribe(&session, p, true),
        "resources/unsubscribe" => resources::subscribe(&session, p, false),
        "prompts/list" => prompts::list(&shared, p),
        "prompts/get" => prompts::get(&shared, p, ctx).await,
        "completion/complete" => completion::complete(&shared, p),
        "logging/setLevel" => set_level(&session, p),
        "initialize" => Err(errors::invalid_request(
            "Invalid Request: this session is already initialized",
        )),
        other => Err(errors::method_not_found(other)),
    }
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
    raw(&serde_json::json!({}))
}

/// Handles a notification from the client.
pub(crate) fn notification(session: &Session, method: &str, p: Option<&RawValue>) {
    match method {
        "notifications/initialized" => session.mark_initialized(),
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
                tracing::debug!(session = %session.id, request = c.request_id.get(), reason = ?c.reason, found, "client cancelled a request");
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
        tracing::debug!(session = %session.id, id, "answer to a request nobody waits for");
    }
}
