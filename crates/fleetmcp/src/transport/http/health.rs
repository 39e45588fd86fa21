//! `/healthz` (liveness: no I/O) and `/readyz` (readiness: probes, bounded in time), in the
//! JSON shapes of the deployment contract.
//!
//! `/readyz` always probes the session store; the layers above add their own [`Probe`]s
//! (distributed mode's heartbeat and advertised address) without this file knowing what they
//! check.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::extract::State;
use axum::response::Response;
use http::StatusCode;
use serde_json::{Value, json};

use super::{EndpointState, respond};

/// How long a readiness probe may take before it counts as unhealthy.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a readiness probe found.
pub struct ProbeReport {
    /// Whether the instance can serve as far as this probe is concerned.
    pub healthy: bool,
    /// The probe's entry under `probes` in `/readyz` (outside production).
    pub detail: Value,
}

/// A readiness check `/readyz` runs besides the session store's.
#[async_trait]
pub trait Probe: Send + Sync + 'static {
    /// The key of the probe's entry under `probes`.
    fn name(&self) -> &'static str;
    /// Checks; bounded by the caller.
    async fn check(&self) -> ProbeReport;
}

pub(super) async fn healthz(State(ep): EndpointState) -> Response {
    let app = &ep.app;
    let cfg = app.config();
    let body = json!({
        "status": "ok",
        "server": {"name": app.info().name, "version": app.info().version},
        "runtime": {
            "platform": std::env::consts::OS,
            "runtime": "rust",
            "deployment": cfg.deployment_mode.as_str(),
            "env": cfg.node_env.as_deref().unwrap_or("development"),
        },
        "uptime": app.started().elapsed().as_secs_f64(),
    });
    respond::json(StatusCode::OK, body.to_string().into())
}

pub(super) async fn readyz(State(ep): EndpointState) -> Response {
    let started = Instant::now();
    let (ready, probes) = evaluate(&ep).await;
    readiness(&ep.app, ready, started, probes)
}

/// Whether the instance is ready, and what each probe found: what `/readyz` answers, and
/// what a scrape reports as `fleetmcp_ready`.
pub(super) async fn evaluate(ep: &super::Endpoint) -> (bool, Value) {
    let app = &ep.app;
    let started = Instant::now();
    if app.phases().draining.is_cancelled() {
        // A stopping instance is not ready whatever its probes say, and says so at once: the
        // load balancer is to send it nothing new while it finishes what it has.
        let probes = json!({"shutdown": {
            "status": "unhealthy",
            "error": "The server is shutting down",
        }});
        return (false, probes);
    }
    let probe = tokio::time::timeout(PROBE_TIMEOUT, app.sessions().ping_store()).await;
    let latency = started.elapsed().as_millis() as u64;
    let (mut ready, detail) = match probe {
        Ok(Ok(())) => (true, json!({"status": "healthy", "latencyMs": latency})),
        Ok(Err(e)) => (
            false,
            json!({"status": "unhealthy", "latencyMs": latency, "error": e.to_string()}),
        ),
        Err(_) => (false, timed_out()),
    };
    let mut probes = json!({"session-store": detail});
    for p in &ep.seams.probes {
        let report = tokio::time::timeout(PROBE_TIMEOUT, p.check())
            .await
            .unwrap_or_else(|_| ProbeReport {
                healthy: false,
                detail: timed_out(),
            });
        ready &= report.healthy;
        probes[p.name()] = report.detail;
    }
    (ready, probes)
}

/// `/readyz`'s answer: `200` `ready` or `503` `not_ready`, with the catalog hashes, and the
/// probes and sessions outside production.
fn readiness(app: &crate::app::App, ready: bool, started: Instant, probes: Value) -> Response {
    let catalog = app.catalog();
    let mut body = json!({
        "status": if ready { "ready" } else { "not_ready" },
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
    if !app.config().is_production() {
        body["probes"] = probes;
        body["sessions"] =
            json!({"held": app.sessions().held(), "store": app.sessions().store_kind()});
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    respond::json(status, body.to_string().into())
}

fn timed_out() -> Value {
    json!({"status": "unhealthy", "error": format!("Probe timed out after {}ms", PROBE_TIMEOUT.as_millis())})
}
