//! `tools/list` and `tools/call`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::outcome::answer;
use super::{Reply, list_cache, paging, params, respond};
use crate::app::App;
use crate::catalog::ToolError;
use crate::context::{Caller, RequestContext};
use crate::protocol::model::Tool;
use crate::protocol::{ErrorCode, ErrorData, errors};

pub(super) fn list(app: &App, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ListTools<'a> {
        tools: Vec<&'a Tool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    }
    let catalog = app.catalog();
    let (page, next_cursor) = paging::page(&catalog.tools, p, app.config().page_size)?;
    let result = ListTools {
        tools: page.iter().map(|t| t.descriptor()).collect(),
        next_cursor,
    };
    respond(app, ctx, &result, Some(list_cache(app)))
}

#[derive(Deserialize)]
struct CallParams<'a> {
    /// Borrowed from the params (copied only when it holds an escape): a call reads it to
    /// find its tool, and names it only in an error (issue 23).
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    /// 2025-11-25 experimental tasks: run the call as a task (`{ttl?}`).
    #[serde(default)]
    task: Option<Value>,
}

/// A task's creation (a task store's calls) is boxed where it is awaited: every call's future
/// would otherwise hold room for it, and the driver boxes that future (issue 23: 1,352 bytes a
/// call, past glibc's per-thread cache, where a small box is one of its fastest allocations).
pub(super) async fn call(p: Option<&RawValue>, ctx: RequestContext) -> Reply {
    let app = ctx.app();
    let CallParams {
        name,
        arguments,
        task,
    } = params(p)?;
    // Borrowed from the catalog, copied only for a task (a reference count every call of
    // the tool shares: issue 40).
    let catalog = app.catalog();
    let tool = catalog
        .tool(&name)
        .ok_or_else(|| errors::invalid_params(format!("Unknown tool: {name}")))?;
    if let (Caller::Stateless(round), Some(required)) = (ctx.caller(), tool.required_capabilities())
    {
        let missing: Map<String, Value> = required
            .iter()
            .filter(|(cap, _)| !round.meta.supports(cap))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !missing.is_empty() {
            return Err(ErrorData::new(
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                format!("Missing required client capability for tool {name}"),
                Some(json!({"requiredCapabilities": missing})),
            ));
        }
    }
    // A client may omit `arguments` for a tool that takes none.
    let args = Value::Object(arguments.unwrap_or_default());
    if let Err(e) = tool.validate(&args) {
        return invalid_arguments(app, &ctx, e);
    }
    if let Caller::Session(session) = ctx.caller()
        && session.version >= crate::protocol::ProtocolVersion::V2025_11_25
    {
        use crate::tasks::TaskSupport;
        // 2025-11-25: the client asks for a task; the tool's declaration must allow it.
        match (tool.task_support(), task.is_some()) {
            (TaskSupport::Forbidden, true) => {
                return Err(errors::method_not_found_msg(format!(
                    "Tool {name} does not run as a task"
                )));
            }
            (TaskSupport::Required, false) => {
                return Err(errors::method_not_found_msg(format!(
                    "Tool {name} runs only as a task: call it with `task`"
                )));
            }
            (_, true) => {
                return Box::pin(super::task_methods::session_era::create(
                    app,
                    session,
                    tool.clone(),
                    args,
                    &ctx,
                ))
                .await;
            }
            _ => {}
        }
    }
    if let Caller::Stateless(round) = ctx.caller() {
        use super::task_methods::extension;
        use crate::tasks::TaskSupport;
        match (tool.task_support(), extension::declared(&round.meta)) {
            (TaskSupport::Required, false) => return Err(extension::missing_extension()),
            (_, true) if tool.escalates() => {
                return Box::pin(extension::run_escalating(app, &ctx, tool.clone(), args)).await;
            }
            (TaskSupport::Required | TaskSupport::Optional, true) => {
                let meta = round.meta.clone();
                return Box::pin(extension::create(app, &ctx, tool.clone(), args, meta)).await;
            }
            _ => {}
        }
    }
    let outcome = tool.call(args, ctx.clone()).await;
    answer(app, &ctx, outcome)
}

/// Arguments that fail the tool's input schema. From 2025-11-25 on (SEP-1303, and so in the
/// 2026-07-28 era) that is a tool execution error: a result with `isError: true` whose text
/// names every offending field, which the model reads and corrects its call by. Earlier
/// versions' specifications call it a protocol error: `-32602`, the fields in `data.errors`.
fn invalid_arguments(app: &App, ctx: &RequestContext, e: ErrorData) -> Reply {
    let as_result = match ctx.caller() {
        Caller::Session(session) => {
            session.version >= crate::protocol::ProtocolVersion::V2025_11_25
        }
        Caller::Stateless(_) | Caller::Task(_) => true,
    };
    if !as_result {
        return Err(e);
    }
    let mut text = e.message.to_string();
    let further = e
        .data
        .as_ref()
        .and_then(|d| d.get("errors"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .skip(1);
    for error in further {
        let path = error.get("path").and_then(Value::as_str).unwrap_or("");
        let message = error.get("message").and_then(Value::as_str).unwrap_or("");
        text.push_str(&format!("\n{path}: {message}"));
    }
    answer(app, ctx, Err(ToolError::Failed(text)))
}
