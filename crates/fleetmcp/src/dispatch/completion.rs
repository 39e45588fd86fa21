//! `completion/complete` for prompt arguments and resource-template variables.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::{Reply, params, respond};
use crate::app::App;
use crate::context::RequestContext;
use crate::protocol::errors;

/// The specification caps a completion answer at 100 values.
const MAX_VALUES: usize = 100;

#[derive(Deserialize)]
struct CompleteParams {
    #[serde(rename = "ref")]
    reference: Reference,
    argument: Argument,
    #[serde(default)]
    context: Option<Context>,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Reference {
    #[serde(rename = "ref/prompt")]
    Prompt { name: String },
    #[serde(rename = "ref/resource")]
    Resource { uri: String },
}

#[derive(Deserialize)]
struct Argument {
    name: String,
    value: String,
}

#[derive(Deserialize)]
struct Context {
    #[serde(default)]
    arguments: HashMap<String, String>,
}

pub(super) async fn complete(app: &App, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    let CompleteParams {
        reference,
        argument,
        context,
    } = params(p)?;
    let others = context.map(|c| c.arguments).unwrap_or_default();
    let catalog = app.catalog();
    let completer = match &reference {
        Reference::Prompt { name } => catalog
            .prompt(name)
            .ok_or_else(|| errors::invalid_params(format!("Unknown prompt: {name}")))?
            .completer(&argument.name)
            .cloned(),
        Reference::Resource { uri } => catalog
            .template_by_uri(uri)
            .ok_or_else(|| errors::invalid_params(format!("Unknown resource template: {uri}")))?
            .completer(&argument.name)
            .cloned(),
    };
    let mut values = match completer {
        Some(complete) => complete(argument.value, others, ctx.clone()).await?,
        None => Vec::new(),
    };
    let total = values.len();
    values.truncate(MAX_VALUES);
    let result =
        json!({"completion": {"values": values, "total": total, "hasMore": total > MAX_VALUES}});
    respond(app, ctx, &result, None)
}
