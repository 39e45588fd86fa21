//! `subscriptions/listen` (2026-07-28): a long-lived SSE stream of the list and resource
//! changes a client asked for, each tagged with the subscription id (the listen request's id).

use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};

use super::{reply, sse};
use crate::app::{App, Change};
use crate::protocol::{ErrorCode, ErrorData, encode_notification};
use crate::stateless::{META_SERVER_INFO, META_SUBSCRIPTION_ID};

/// What a listen request asked for.
#[derive(Default)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Vec<String>,
}

fn parse(map: &Map<String, Value>) -> Option<Filter> {
    let n = match map.get("notifications") {
        None => return Some(Filter::default()),
        Some(Value::Object(n)) => n,
        Some(_) => return None,
    };
    let flag = |k: &str| match n.get(k) {
        None | Some(Value::Null) => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => None,
    };
    let uris = match n.get("resourceSubscriptions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|u| u.as_str().map(String::from))
            .collect::<Option<Vec<_>>>()?,
        Some(_) => return None,
    };
    Some(Filter {
        tools: flag("toolsListChanged")?,
        prompts: flag("promptsListChanged")?,
        resources: flag("resourcesListChanged")?,
        uris,
    })
}

pub(super) fn serve(app: &App, id: &RawValue, map: &Map<String, Value>) -> Response {
    let Some(filter) = parse(map) else {
        return reply::rpc_error(
            StatusCode::BAD_REQUEST,
            Some(id),
            &ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                "Invalid subscriptions/listen params",
                None,
            ),
        );
    };
    let sub_id: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
    let mut honoured = Map::new();
    if filter.tools {
        honoured.insert("toolsListChanged".into(), json!(true));
    }
    if filter.prompts {
        honoured.insert("promptsListChanged".into(), json!(true));
    }
    if filter.resources {
        honoured.insert("resourcesListChanged".into(), json!(true));
    }
    if !filter.uris.is_empty() {
        honoured.insert("resourceSubscriptions".into(), json!(filter.uris));
    }
    // Subscribe before acknowledging, so no change between the two is missed.
    let mut changes = app.changes();
    let ack = encode_notification(
        "notifications/subscriptions/acknowledged",
        &json!({"_meta": {META_SUBSCRIPTION_ID: sub_id}, "notifications": honoured}),
    );
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    // Ends with the graceful result when a stop stops accepting connections.
    let stop = app.closing().clone();
    let info = app.info();
    let server_info = json!({"name": info.name, "version": info.version});
    let id_text = id.get().to_string();
    tokio::spawn(async move {
        if tx.send(sse::message_frame(&ack)).await.is_err() {
            return;
        }
        loop {
            let change = tokio::select! {
                c = changes.recv() => c,
                _ = tx.closed() => return,
                _ = stop.cancelled() => break,
            };
            let due: Vec<(&str, Value)> = match change {
                Ok(Change::ToolsListChanged) if filter.tools => {
                    vec![("notifications/tools/list_changed", json!({}))]
                }
                Ok(Change::PromptsListChanged) if filter.prompts => {
                    vec![("notifications/prompts/list_changed", json!({}))]
                }
                Ok(Change::ResourcesListChanged) if filter.resources => {
                    vec![("notifications/resources/list_changed", json!({}))]
                }
                Ok(Change::ResourceUpdated(uri)) if filter.uris.contains(&uri) => {
                    vec![("notifications/resources/updated", json!({"uri": uri}))]
                }
                Ok(_) => continue,
                // This stream fell behind and missed changes: tell it every list it follows
                // may have changed, so the client refetches rather than trusting stale data.
                Err(broadcast::error::RecvError::Lagged(_)) => [
                    (filter.tools, "notifications/tools/list_changed"),
                    (filter.prompts, "notifications/prompts/list_changed"),
                    (filter.resources, "notifications/resources/list_changed"),
                ]
                .into_iter()
                .filter(|(on, _)| *on)
                .map(|(_, m)| (m, json!({})))
                .collect(),
                Err(broadcast::error::RecvError::Closed) => break,
            };
            for (method, mut params) in due {
                params["_meta"] = json!({META_SUBSCRIPTION_ID: sub_id});
                if tx
                    .send(sse::message_frame(&encode_notification(method, &params)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
        // A graceful end: the listen request's result, then the stream closes.
        let result = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id_text},\"result\":{}}}",
            json!({"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: sub_id, META_SERVER_INFO: server_info}})
        );
        let _ = tx.send(sse::message_frame(result.as_bytes())).await;
    });
    super::stateless::frames(app, rx)
}
