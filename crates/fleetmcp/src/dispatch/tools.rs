//! `tools/list` and `tools/call`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{Cache, Reply, input_required, paging, params, respond};
use crate::catalog::ToolError;
use crate::context::{Caller, RequestContext};
use crate::protocol::model::{CallToolResult, ContentBlock, Tool};
use crate::protocol::{ErrorCode, ErrorData, errors};
use crate::server::Shared;

pub(super) fn list(shared: &Shared, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ListTools<'a> {
        tools: Vec<&'a Tool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    }
    let catalog = shared.catalog();
    let (page, next_cursor) = paging::page(&catalog.tools, p, shared.config.page_size)?;
    let result = ListTools {
        tools: page.iter().map(|t| t.descriptor()).collect(),
        next_cursor,
    };
    respond(shared, ctx, &result, Some(list_cache(shared)))
}

fn ctx_shared(ctx: &RequestContext) -> std::sync::Arc<Shared> {
    ctx.shared().clone()
}

pub(super) fn list_cache(shared: &Shared) -> Cache {
    Cache {
        ttl_ms: shared.config.stateless.list_ttl_ms,
        scope: "public",
    }
}

#[derive(Deserialize)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    /// 2025-11-25 experimental tasks: run the call as a task (`{ttl?}`).
    #[serde(default)]
    task: Option<Value>,
}

pub(super) async fn call(shared: &Shared, p: Option<&RawValue>, ctx: RequestContext) -> Reply {
    let CallParams {
        name,
        arguments,
        task,
    } = params(p)?;
    let tool = shared
        .catalog()
        .tool(&name)
        .cloned()
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
    tool.validate(&args)?;
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
                return super::tasks::create_for_session(&ctx_shared(&ctx), session, tool, args)
                    .await;
            }
            _ => {}
        }
    }
    if let Caller::Stateless(round) = ctx.caller() {
        use crate::tasks::TaskSupport;
        let declared = super::tasks::declared(&round.meta);
        match (tool.task_support(), declared) {
            (TaskSupport::Required, false) => return Err(super::tasks::missing_extension()),
            (_, true) if tool.escalates() => {
                return super::tasks::run_escalating(&ctx_shared(&ctx), &ctx, tool, args).await;
            }
            (TaskSupport::Required | TaskSupport::Optional, true) => {
                return super::tasks::create(
                    &ctx_shared(&ctx),
                    &ctx,
                    tool,
                    args,
                    round.meta.clone(),
                )
                .await;
            }
            _ => {}
        }
    }
    let mut result = match tool.call(args, ctx.clone()).await {
        Ok(r) => r,
        Err(ToolError::Failed(msg)) => CallToolResult::error(vec![ContentBlock::text(msg)]),
        Err(ToolError::Protocol(e)) => return Err(e),
        Err(ToolError::InputRequired) => {
            return match ctx.caller() {
                Caller::Stateless(round) => input_required(shared, round),
                _ => Err(errors::internal(
                    "input required outside a multi-round request",
                )),
            };
        }
    };
    if !ctx.is_stateless() {
        // `resultType` exists from 2026-07-28 on; session-era peers must not see it.
        result.result_type = None;
    }
    respond(shared, &ctx, &result, None)
}
