//! Distributed mode: everything that knows other instances exist.
//!
//! - [`identity`]: the machine-id header and affinity cookie, one layer around every route;
//! - [`heartbeat`]: the heartbeat in Redis, the refusal to start under a machine id in use,
//!   and the `/readyz` probe.
//!
//! Relaying a session's requests to its holder, taking over a stopped instance's sessions and
//! fencing plug into the seams below this module: `session::Ownership` (who serves a stored
//! session) and `transport::Relay` (how a request reaches its holder).
//!
//! Architecture invariant: nothing outside this module knows that other instances exist; a
//! single instance (standalone mode) starts none of it.

mod heartbeat;
mod identity;

use std::sync::Arc;

use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::config::HaConfig;
use crate::redis_conn::RedisConn;
use crate::transport::Probe;
use heartbeat::Heartbeat;

/// Distributed mode on one instance, from start to a graceful stop.
pub(crate) struct Cluster {
    machine_id: String,
    heartbeat: Option<Arc<Heartbeat>>,
}

impl Cluster {
    /// Starts distributed mode: with Redis, the heartbeat (refusing a machine id in use);
    /// without it, the instance still names itself in headers and cookies, but nothing is
    /// shared. `sessions` counts the sessions held, for the heartbeat.
    pub async fn start(
        machine_id: &str,
        redis: Option<RedisConn>,
        cfg: &HaConfig,
        sessions: impl Fn() -> usize + Send + 'static,
        stop: CancellationToken,
    ) -> Result<Self, String> {
        let Some(redis) = redis else {
            tracing::warn!(
                "distributed mode without Redis: sessions stay on the instance that created them"
            );
            return Ok(Self {
                machine_id: machine_id.to_string(),
                heartbeat: None,
            });
        };
        let hb = Heartbeat::start(redis, machine_id, cfg, stop.clone()).await?;
        tracing::info!("[HA] Manager started for distributed deployment");
        let beats = hb.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(beats.interval());
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => beats.beat(sessions()).await,
                    _ = stop.cancelled() => return,
                }
            }
        });
        Ok(Self {
            machine_id: machine_id.to_string(),
            heartbeat: Some(hb),
        })
    }

    /// Wraps the routes so that responses name this instance.
    pub fn layer(&self, router: Router) -> Router {
        identity::layer(router, &self.machine_id)
    }

    /// The readiness probes distributed mode adds to `/readyz`.
    pub fn probes(&self) -> Vec<Arc<dyn Probe>> {
        self.heartbeat
            .iter()
            .map(|h| h.clone() as Arc<dyn Probe>)
            .collect()
    }

    /// A graceful stop: the heartbeat goes at once.
    pub async fn stop(&self) {
        if let Some(hb) = &self.heartbeat {
            hb.stop().await;
            tracing::info!("[HA] Services stopped for node {}", self.machine_id);
        }
    }
}
