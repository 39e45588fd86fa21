//! `prompts/list` and `prompts/get`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Reply, input_required, list_cache, paging, params, respond};
use crate::app::App;
use crate::catalog::PromptError;
use crate::context::{Caller, RequestContext};
use crate::protocol::errors;
use crate::protocol::model::Prompt;

pub(super) fn list(app: &App, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ListPrompts<'a> {
        prompts: Vec<&'a Prompt>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    }
    let catalog = app.catalog();
    let (page, next_cursor) = paging::page(&catalog.prompts, p, app.config().page_size)?;
    let result = ListPrompts {
        prompts: page.iter().map(|t| t.descriptor()).collect(),
        next_cursor,
    };
    respond(app, ctx, &result, Some(list_cache(app)))
}

#[derive(Deserialize)]
struct GetParams {
    name: String,
    #[serde(default)]
    arguments: Option<HashMap<String, Value>>,
}

pub(super) async fn get(app: &App, p: Option<&RawValue>, ctx: RequestContext) -> Reply {
    let GetParams { name, arguments } = params(p)?;
    let prompt = app
        .catalog()
        .prompt(&name)
        .cloned()
        .ok_or_else(|| errors::invalid_params(format!("Unknown prompt: {name}")))?;
    // Arguments are strings in MCP; accept other scalars by their JSON text.
    let args = arguments
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            (k, s)
        })
        .collect();
    match prompt.get(args, ctx.clone()).await {
        Ok(mut result) => {
            if !ctx.is_stateless() {
                result.result_type = None;
            }
            respond(app, &ctx, &result, None)
        }
        Err(PromptError::InvalidArguments(m)) => Err(errors::invalid_params(m)),
        Err(PromptError::Failed(m)) => Err(errors::internal(m)),
        Err(PromptError::Protocol(e)) => Err(e),
        Err(PromptError::InputRequired) => match ctx.caller() {
            Caller::Stateless(round) => input_required(app, round),
            _ => Err(errors::internal(
                "input required outside a multi-round request",
            )),
        },
    }
}
