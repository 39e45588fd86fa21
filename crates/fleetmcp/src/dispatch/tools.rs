//! `tools/list` and `tools/call`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{Reply, paging, params, raw};
use crate::catalog::ToolError;
use crate::context::RequestContext;
use crate::protocol::errors;
use crate::protocol::model::{CallToolResult, ContentBlock, Tool};
use crate::server::Shared;

pub(super) fn list(shared: &Shared, p: Option<&RawValue>) -> Reply {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ListTools<'a> {
        tools: Vec<&'a Tool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    }
    let catalog = shared.catalog();
    let (page, next_cursor) = paging::page(&catalog.tools, p, shared.config.page_size)?;
    raw(&ListTools {
        tools: page.iter().map(|t| t.descriptor()).collect(),
        next_cursor,
    })
}

#[derive(Deserialize)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
}

pub(super) async fn call(shared: &Shared, p: Option<&RawValue>, ctx: RequestContext) -> Reply {
    let CallParams { name, arguments } = params(p)?;
    let tool = shared
        .catalog()
        .tool(&name)
        .cloned()
        .ok_or_else(|| errors::invalid_params(format!("Unknown tool: {name}")))?;
    // A client may omit `arguments` for a tool that takes none.
    let args = Value::Object(arguments.unwrap_or_default());
    tool.validate(&args)?;
    let mut result = match tool.call(args, ctx).await {
        Ok(r) => r,
        Err(ToolError::Failed(msg)) => CallToolResult::error(vec![ContentBlock::text(msg)]),
        Err(ToolError::Protocol(e)) => return Err(e),
    };
    // `resultType` exists from 2026-07-28 on; session-era peers must not see it.
    result.result_type = None;
    raw(&result)
}
