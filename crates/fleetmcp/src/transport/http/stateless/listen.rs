//! `subscriptions/listen` (2026-07-28): a long-lived SSE stream of the list and resource
//! changes a client asked for, each tagged with the subscription id (the listen request's id).
//!
//! A stream is bounded like a session's subscriptions (`sessions.max_subscriptions` URIs of at
//! most `sessions.max_subscription_uri_bytes`: beyond, `400` `-32602`, nothing kept), and
//! streams are bounded per caller key (`limits.max_listen_streams_per_key`: `429` with
//! `Retry-After`) and per instance (`stateless.max_listen_streams`, and the URIs' bytes under
//! `sessions.max_client_data_bytes`: `503` with `Retry-After`). A stream's place and bytes are
//! given back when its task ends (the client went away, or the server stops), so nothing it
//! held outlives it.

use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};

use super::super::client_key::Client;
use super::super::{respond, sse};
use crate::app::{App, Change};
use crate::limits::PlaceRefusal;
use crate::protocol::{ErrorCode, ErrorData, encode_notification, errors};
use crate::stateless::{META_SERVER_INFO, META_SUBSCRIPTION_ID};
use crate::telemetry::Limit;

/// What a listen request asked for.
#[derive(Default)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Vec<String>,
}

impl Filter {
    /// What the acknowledgement says the stream follows.
    fn honoured(&self) -> Map<String, Value> {
        let mut honoured = Map::new();
        if self.tools {
            honoured.insert("toolsListChanged".into(), json!(true));
        }
        if self.prompts {
            honoured.insert("promptsListChanged".into(), json!(true));
        }
        if self.resources {
            honoured.insert("resourcesListChanged".into(), json!(true));
        }
        if !self.uris.is_empty() {
            honoured.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        honoured
    }

    /// The notifications (method, params) a change is due as on a stream following this: none
    /// for a change it does not follow; `None` once there are no more changes.
    fn due(
        &self,
        change: Result<Change, broadcast::error::RecvError>,
    ) -> Option<Vec<(&'static str, Value)>> {
        let due = match change {
            Ok(Change::ToolsListChanged) if self.tools => {
                vec![("notifications/tools/list_changed", json!({}))]
            }
            Ok(Change::PromptsListChanged) if self.prompts => {
                vec![("notifications/prompts/list_changed", json!({}))]
            }
            Ok(Change::ResourcesListChanged) if self.resources => {
                vec![("notifications/resources/list_changed", json!({}))]
            }
            Ok(Change::ResourceUpdated(uri)) if self.uris.contains(&uri) => {
                vec![("notifications/resources/updated", json!({"uri": uri}))]
            }
            Ok(_) => Vec::new(),
            // This stream fell behind and missed changes: tell it every list it follows may
            // have changed, so the client refetches rather than trusting stale data.
            Err(broadcast::error::RecvError::Lagged(_)) => [
                (self.tools, "notifications/tools/list_changed"),
                (self.prompts, "notifications/prompts/list_changed"),
                (self.resources, "notifications/resources/list_changed"),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, m)| (m, json!({})))
            .collect(),
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some(due)
    }
}

/// Bytes a kept URI costs besides its text (the `String` it lives in).
const URI_OVERHEAD: usize = 24;

/// How long a caller refused a stream should wait: streams end when their clients leave,
/// which is not soon.
const LISTEN_RETRY_AFTER_S: u64 = 5;

/// The session limits on what one listen filters on: the number of URIs and each one's length,
/// checked before anything is copied. The `-32602` naming the limit otherwise.
fn check_uris(app: &App, map: &Map<String, Value>) -> Result<(), ErrorData> {
    let Some(Value::Array(uris)) = map
        .get("notifications")
        .and_then(|n| n.get("resourceSubscriptions"))
    else {
        return Ok(());
    };
    let cfg = &app.config().sessions;
    if uris.len() > cfg.max_subscriptions {
        return Err(errors::invalid_params_with(
            format!(
                "subscriptions/listen names {} resources, more than sessions.max_subscriptions ({})",
                uris.len(),
                cfg.max_subscriptions
            ),
            json!({"limit": "sessions.max_subscriptions", "max": cfg.max_subscriptions}),
        ));
    }
    let longest = uris
        .iter()
        .filter_map(Value::as_str)
        .map(str::len)
        .max()
        .unwrap_or(0);
    if longest > cfg.max_subscription_uri_bytes {
        return Err(errors::invalid_params_with(
            format!(
                "A resource URI of {longest} bytes is longer than sessions.max_subscription_uri_bytes ({})",
                cfg.max_subscription_uri_bytes
            ),
            json!({"limit": "sessions.max_subscription_uri_bytes", "max": cfg.max_subscription_uri_bytes}),
        ));
    }
    Ok(())
}

/// The answer to a listen no place was left for: `429` when the caller holds its most
/// streams, `503` when the instance does (its streams or its client-data bytes).
fn refused(app: &App, id: &RawValue, why: PlaceRefusal) -> Response {
    let (status, limit, error) = match why {
        PlaceRefusal::PerKey(max) => (
            StatusCode::TOO_MANY_REQUESTS,
            Limit::ListenStreamsPerKey,
            errors::rate_limited(
                std::time::Duration::from_secs(LISTEN_RETRY_AFTER_S),
                json!({"limit": "listenStreamsPerKey", "maxListenStreamsPerKey": max}),
            ),
        ),
        PlaceRefusal::Total(max) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Limit::ListenStreams,
            ErrorData::new(
                ErrorCode(-32000),
                format!(
                    "This instance holds its maximum number of listen streams (stateless.max_listen_streams, {max}); retry shortly"
                ),
                Some(json!({"limit": "stateless.max_listen_streams", "max": max})),
            ),
        ),
        PlaceRefusal::Bytes(max) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Limit::ClientData,
            ErrorData::new(
                ErrorCode(-32000),
                format!(
                    "This instance keeps its maximum of client data (sessions.max_client_data_bytes, {max}); retry shortly"
                ),
                Some(json!({"limit": "sessions.max_client_data_bytes", "max": max})),
            ),
        ),
    };
    app.meters().limit_rejected(limit);
    tracing::debug!(?why, "refused a subscriptions/listen stream over a limit");
    respond::with_retry_after(
        respond::rpc_error(status, Some(id), &error),
        LISTEN_RETRY_AFTER_S,
    )
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

/// Watching a resource needs the scope reading it does, as `resources/subscribe` does (a
/// change tells when someone else wrote it): `403` for the first one `client` lacks.
fn watched_in_scope(
    app: &App,
    id: &RawValue,
    filter: &Filter,
    client: &Client,
) -> Result<(), Response> {
    for uri in &filter.uris {
        let target = serde_json::value::to_raw_value(&json!({ "uri": uri })).ok();
        let principal = client.principal.as_deref();
        if let Err(scope) = crate::transport::core::driver::permitted(
            app,
            "resources/subscribe",
            target.as_deref(),
            principal,
        ) {
            return Err(super::super::authorize::insufficient_scope(
                app,
                Some(id),
                &scope,
            ));
        }
    }
    Ok(())
}

pub(super) fn serve(
    app: &App,
    id: &RawValue,
    map: &Map<String, Value>,
    client: &Client,
) -> Response {
    if let Err(e) = check_uris(app, map) {
        return respond::rpc_error(StatusCode::BAD_REQUEST, Some(id), &e);
    }
    let Some(filter) = parse(map) else {
        return respond::rpc_error(
            StatusCode::BAD_REQUEST,
            Some(id),
            &ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                "Invalid subscriptions/listen params",
                None,
            ),
        );
    };
    if let Err(refused) = watched_in_scope(app, id, &filter, client) {
        return refused;
    }
    let bytes = filter
        .uris
        .iter()
        .map(|u| u.len() + URI_OVERHEAD)
        .sum::<usize>();
    // Held by the stream's task: dropped with it, whichever way it ends.
    let place = match app.listens().try_take(&client.key, bytes) {
        Ok(place) => place,
        Err(why) => return refused(app, id, why),
    };
    let sub_id: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
    // Subscribe before acknowledging, so no change between the two is missed.
    let mut changes = app.changes();
    let ack = encode_notification(
        "notifications/subscriptions/acknowledged",
        &json!({"_meta": {META_SUBSCRIPTION_ID: sub_id}, "notifications": filter.honoured()}),
    );
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    // Ends with the graceful result when a stop stops accepting connections.
    let stop = app.phases().closing.clone();
    let info = app.info();
    let server_info = json!({"name": info.name, "version": info.version});
    let id_text = id.get().to_string();
    tokio::spawn(async move {
        let _place = place;
        if tx.send(sse::message_frame(&ack)).await.is_err() {
            return;
        }
        loop {
            let change = tokio::select! {
                c = changes.recv() => c,
                _ = tx.closed() => return,
                _ = stop.cancelled() => break,
            };
            let Some(due) = filter.due(change) else {
                break;
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
    sse::channel(rx, &app.config().http)
}
