//! The operator's drain request: a message on an instance's own channel,
//! `<prefix>notify:<nodeId>`, that makes it begin its graceful stop exactly as SIGTERM would
//! (drain delay with `/readyz` at 503 and the heartbeat deleted, then close, then exit 0).
//!
//! `{"kind":"drain","sourceNodeId":..,"targetNodeId":..,"timestamp":..,"auth":..}`, authenticated
//! like a routed notification (`channel_auth.rs`, under the path `/.fleetmcp/drain`), so only a
//! holder of the fleet's `MCP_SESSION_SECRET` can stop an instance: a message that does not
//! verify for the receiving instance is dropped with a warning. The receiver acts once (the
//! token it cancels stays cancelled).

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::channel_auth;
use super::heartbeat::channel_of;
use super::relay_auth::{RelayKeys, Verifier};
use crate::clock::unix_ms;
use crate::config::Config;
use crate::redis_conn::RedisConn;

/// The path the request is signed under (no HTTP request: it keeps the MAC apart from any
/// other message's).
const DRAIN_PATH: &str = "/.fleetmcp/drain";
const KIND: &str = "drain";

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DrainRequest {
    kind: String,
    /// Who asks (the operator's command names itself `operator@<host>`).
    source_node_id: String,
    target_node_id: String,
    timestamp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    auth: Option<String>,
}

/// What is signed besides source, target, time and nonce: the kind and the target.
fn signed_body(target: &str) -> Vec<u8> {
    format!("{KIND}\n{target}").into_bytes()
}

/// Asks instance `target` to drain, signed with `config`'s `MCP_SESSION_SECRET`, as `source`.
/// `Ok(n)`: `n` subscribers received it (0: no live instance has that machine id).
pub(crate) async fn request(
    redis: &RedisConn,
    config: &Config,
    source: &str,
    target: &str,
) -> Result<i64, String> {
    let now = unix_ms();
    let keys = RelayKeys::from_config(config);
    let auth = channel_auth::sign(&keys, source, target, DRAIN_PATH, &signed_body(target), now)?;
    let message = DrainRequest {
        kind: KIND.into(),
        source_node_id: source.into(),
        target_node_id: target.into(),
        timestamp: now,
        auth: Some(auth),
    };
    let payload = serde_json::to_string(&message).map_err(|e| e.to_string())?;
    let channel = channel_of(&config.ha.key_prefix, target);
    redis
        .run::<i64>(redis::cmd("PUBLISH").arg(&channel).arg(payload).clone())
        .await
        .map_err(|e| e.to_string())
}

/// Handles `payload` if it is a drain request: when it is authentic and for this instance,
/// cancels `drain`. Returns whether it was a drain request (handled or dropped).
pub(super) fn on_message(
    verifier: &Verifier,
    me: &str,
    payload: &[u8],
    drain: &CancellationToken,
) -> bool {
    let Ok(req) = serde_json::from_slice::<DrainRequest>(payload) else {
        return false;
    };
    if req.kind != KIND {
        return false;
    }
    let checked = if req.target_node_id != me {
        Err("it names another instance")
    } else {
        channel_auth::verify(
            verifier,
            &req.source_node_id,
            DRAIN_PATH,
            &signed_body(me),
            req.auth.as_deref(),
            unix_ms(),
        )
    };
    match checked {
        Ok(()) => {
            tracing::warn!(
                requested_by = %req.source_node_id,
                "[HA] Drain requested by the operator: stopping gracefully, as on SIGTERM"
            );
            drain.cancel();
        }
        Err(why) => tracing::warn!(
            source_node_id = %req.source_node_id,
            "[HA] Dropped a drain request on this instance's channel: {why}"
        ),
    }
    true
}
