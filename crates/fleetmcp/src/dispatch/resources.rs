//! `resources/list`, `resources/templates/list`, `resources/read`, `resources/(un)subscribe`.

use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use super::{Cache, Reply, input_required, list_cache, paging, params, reply_of, respond};
use crate::app::App;
use crate::catalog::ResourceError;
use crate::context::{Caller, RequestContext};
use crate::protocol::model::{ReadResourceResult, Resource, ResourceTemplate};
use crate::protocol::{ErrorCode, ErrorData, errors};
use crate::session::{Session, SubscribeRefusal};

pub(super) fn list(app: &App, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ListResources<'a> {
        resources: Vec<&'a Resource>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    }
    let catalog = app.catalog();
    let (page, next_cursor) = paging::page(&catalog.resources, p, app.config().page_size)?;
    let result = ListResources {
        resources: page.iter().map(|r| r.descriptor()).collect(),
        next_cursor,
    };
    respond(app, ctx, &result, Some(list_cache(app)))
}

pub(super) fn list_templates(app: &App, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ListTemplates<'a> {
        resource_templates: Vec<&'a ResourceTemplate>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    }
    let catalog = app.catalog();
    let (page, next_cursor) = paging::page(&catalog.templates, p, app.config().page_size)?;
    let result = ListTemplates {
        resource_templates: page.iter().map(|t| t.descriptor()).collect(),
        next_cursor,
    };
    respond(app, ctx, &result, Some(list_cache(app)))
}

#[derive(Deserialize)]
struct UriParams {
    uri: String,
}

/// Session era: `-32002`; 2026-07-28 (SEP-2164): `-32602`; both with `data.uri`.
fn not_found(ctx: &RequestContext, uri: &str) -> ErrorData {
    let code = if ctx.is_stateless() {
        ErrorCode::INVALID_PARAMS
    } else {
        ErrorCode::RESOURCE_NOT_FOUND
    };
    ErrorData::new(
        code,
        format!("Resource not found: {uri}"),
        Some(json!({"uri": uri})),
    )
}

pub(super) async fn read(app: &App, p: Option<&RawValue>, ctx: RequestContext) -> Reply {
    let UriParams { uri } = params(p)?;
    let catalog = app.catalog();
    let (fut, cache) = if let Some(r) = catalog.resource(&uri) {
        (r.read(ctx.clone()), r.cache())
    } else if let Some((t, vars)) = catalog.match_template(&uri) {
        (t.read(uri.clone(), vars, ctx.clone()), t.cache())
    } else {
        return Err(not_found(&ctx, &uri));
    };
    drop(catalog);
    match fut.await {
        Ok(contents) => {
            let mut result = ReadResourceResult::new(contents);
            if !ctx.is_stateless() {
                result.result_type = None;
            }
            respond(
                app,
                &ctx,
                &result,
                Some(Cache {
                    ttl_ms: cache.0,
                    scope: cache.1,
                }),
            )
        }
        Err(ResourceError::NotFound(_)) => Err(not_found(&ctx, &uri)),
        Err(ResourceError::Failed(msg)) => Err(errors::internal(msg)),
        Err(ResourceError::Protocol(e)) => Err(e),
        Err(ResourceError::InputRequired) => match ctx.caller() {
            Caller::Stateless(round) => input_required(app, round),
            _ => Err(errors::internal(
                "input required outside a multi-round request",
            )),
        },
    }
}

/// `resources/(un)subscribe`. A session's subscriptions live as long as it does, so their
/// number (`sessions.max_subscriptions`) and the length of each URI
/// (`sessions.max_subscription_uri_bytes`) are bounded; past either, `-32602` naming the bound,
/// and nothing is stored.
pub(super) fn subscribe(app: &App, session: &Session, p: Option<&RawValue>, on: bool) -> Reply {
    let UriParams { uri } = params(p)?;
    if on {
        let cfg = &app.config().sessions;
        if uri.len() > cfg.max_subscription_uri_bytes {
            let max = cfg.max_subscription_uri_bytes;
            return Err(errors::invalid_params_with(
                format!(
                    "The URI is {} bytes, longer than sessions.max_subscription_uri_bytes ({max})",
                    uri.len()
                ),
                json!({"limit": "sessions.max_subscription_uri_bytes", "max": max}),
            ));
        }
        match session.subscribe(&uri, cfg.max_subscriptions, app.client_data()) {
            Ok(()) => {}
            Err(SubscribeRefusal::Count) => {
                let max = cfg.max_subscriptions;
                return Err(errors::invalid_params_with(
                    format!(
                        "This session already holds sessions.max_subscriptions ({max}) subscriptions; unsubscribe first"
                    ),
                    json!({"limit": "sessions.max_subscriptions", "max": max}),
                ));
            }
            // The instance, not this session, is out of room: a server-side error the client
            // may retry later, naming the bound.
            Err(SubscribeRefusal::Budget) => {
                app.meters()
                    .limit_rejected(crate::telemetry::Limit::ClientData);
                let max = cfg.max_client_data_bytes;
                return Err(ErrorData::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!(
                        "This instance keeps its maximum of client data (sessions.max_client_data_bytes, {max}); retry later"
                    ),
                    Some(json!({"limit": "sessions.max_client_data_bytes", "max": max})),
                ));
            }
        }
    } else {
        session.unsubscribe(&uri);
    }
    reply_of(&json!({}))
}
