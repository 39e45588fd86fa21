//! `/healthz` (liveness: no I/O) and `/readyz` (readiness: probes, bounded in time), in the
//! JSON shapes of the deployment contract.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::Response;
use http::StatusCode;
use serde_json::json;

use crate::server::Shared;
use crate::transport::reply;

/// How long a readiness probe may take before it counts as unhealthy.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let body = json!({
        "status": "ok",
        "server": {"name": shared.info.name, "version": shared.info.version},
        "runtime": {
            "platform": std::env::consts::OS,
            "runtime": "rust",
            "deployment": shared.config.deployment_mode.as_str(),
            "env": shared.config.node_env.as_deref().unwrap_or("development"),
        },
        "uptime": shared.started.elapsed().as_secs_f64(),
    });
    reply::json(StatusCode::OK, body.to_string().into())
}

pub(crate) async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let started = Instant::now();
    let probe = tokio::time::timeout(PROBE_TIMEOUT, shared.store.ping()).await;
    let latency = started.elapsed().as_millis() as u64;
    let (healthy, detail) = match probe {
        Ok(Ok(())) => (true, json!({"status": "healthy", "latencyMs": latency})),
        Ok(Err(e)) => (
            false,
            json!({"status": "unhealthy", "latencyMs": latency, "error": e.to_string()}),
        ),
        Err(_) => (
            false,
            json!({"status": "unhealthy", "error": format!("Probe timed out after {}ms", PROBE_TIMEOUT.as_millis())}),
        ),
    };
    let catalog = shared.catalog();
    let mut body = json!({
        "status": if healthy { "ready" } else { "not_ready" },
        "totalLatencyMs": started.elapsed().as_millis() as u64,
        "catalog": {
            "toolsHash": catalog.tools_hash(),
            "catalogHash": catalog.catalog_hash(),
            "toolCount": catalog.tool_count(),
            "resourceCount": catalog.resource_count(),
            "promptCount": catalog.prompt_count(),
            "skillCount": 0,
            "agentCount": 0,
        },
    });
    let mut ready = healthy;
    let mut probes = json!({"session-store": detail});
    if let Some(ha) = shared.ha.load_full() {
        let active = ha.heartbeat_present().await;
        ready &= active;
        probes["ha"] = json!({
            "status": if active { "healthy" } else { "unhealthy" },
            "details": {"nodeId": ha.node_id(), "heartbeatActive": active},
        });
    }
    body["status"] = json!(if ready { "ready" } else { "not_ready" });
    if !shared.config.is_production() {
        body["probes"] = probes;
        body["sessions"] = json!({"held": shared.live.len(), "store": shared.store.kind()});
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    reply::json(status, body.to_string().into())
}
