//! `resources/list`, `resources/templates/list`, `resources/read`, `resources/(un)subscribe`.

use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use super::{Reply, paging, params, raw};
use crate::catalog::ResourceError;
use crate::context::RequestContext;
use crate::protocol::model::{ReadResourceResult, Resource, ResourceTemplate};
use crate::protocol::{ErrorCode, ErrorData, errors};
use crate::server::Shared;
use crate::session::Session;

pub(super) fn list(shared: &Shared, p: Option<&RawValue>) -> Reply {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ListResources<'a> {
        resources: Vec<&'a Resource>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    }
    let catalog = shared.catalog();
    let (page, next_cursor) = paging::page(&catalog.resources, p, shared.config.page_size)?;
    raw(&ListResources {
        resources: page.iter().map(|r| r.descriptor()).collect(),
        next_cursor,
    })
}

pub(super) fn list_templates(shared: &Shared, p: Option<&RawValue>) -> Reply {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ListTemplates<'a> {
        resource_templates: Vec<&'a ResourceTemplate>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    }
    let catalog = shared.catalog();
    let (page, next_cursor) = paging::page(&catalog.templates, p, shared.config.page_size)?;
    raw(&ListTemplates {
        resource_templates: page.iter().map(|t| t.descriptor()).collect(),
        next_cursor,
    })
}

#[derive(Deserialize)]
struct UriParams {
    uri: String,
}

fn not_found(uri: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::RESOURCE_NOT_FOUND,
        "Resource not found",
        Some(json!({"uri": uri})),
    )
}

pub(super) async fn read(shared: &Shared, p: Option<&RawValue>, ctx: RequestContext) -> Reply {
    let UriParams { uri } = params(p)?;
    let catalog = shared.catalog();
    let fut = if let Some(r) = catalog.resource(&uri) {
        r.read(ctx)
    } else if let Some((t, vars)) = catalog.match_template(&uri) {
        t.read(uri.clone(), vars, ctx)
    } else {
        return Err(not_found(&uri));
    };
    drop(catalog);
    match fut.await {
        Ok(contents) => {
            let mut result = ReadResourceResult::new(contents);
            result.result_type = None;
            raw(&result)
        }
        Err(ResourceError::NotFound(_)) => Err(not_found(&uri)),
        Err(ResourceError::Failed(msg)) => Err(errors::internal(msg)),
    }
}

pub(super) fn subscribe(session: &Session, p: Option<&RawValue>, on: bool) -> Reply {
    let UriParams { uri } = params(p)?;
    if on {
        session.subscribe(&uri);
    } else {
        session.unsubscribe(&uri);
    }
    raw(&json!({}))
}
