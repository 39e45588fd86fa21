//! The operator's drain request: a message on an instance's own channel,
//! `<prefix>notify:<nodeId>`, that makes it begin its graceful stop exactly as SIGTERM would
//! (drain delay with `/readyz` at 503 and the heartbeat deleted, then close, then exit 0).
//!
//! `{"kind":"drain","sourceNodeId":..,"targetNodeId":..,"timestamp":..,"auth":..}`, authenticated
//! like a routed notification (`channel_auth.rs`, under the path `/.fleetmcp/drain`), so only a
//! holder of the fleet's `MCP_SESSION_SECRET` can stop an instance: a message that does not
//! verify for the receiving instance is dropped with a warning. The receiver acts once (the
//! token it cancels stays cancelled).
//!
//! The request names a reply channel (`<prefix>drain-reply:<random>`, which the operator's
//! command subscribes to before publishing): the instance answers there whether it accepted
//! the request or refused it, and why, so a request signed with the wrong secret is reported
//! as refused, not as sent. The answer only informs the operator (it is not signed: one who
//! could forge it could already publish on Redis); an instance replies on no other channel.

use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::channel_auth;
use super::heartbeat::channel_of;
use super::relay_auth::{RelayKeys, Verifier};
use crate::app::{Bound, Lanes};
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
    #[serde(rename = "sourceNodeId")]
    source: String,
    /// The instance asked to drain (its machine id).
    #[serde(rename = "targetNodeId")]
    target: String,
    timestamp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    auth: Option<String>,
    /// Where the instance answers (an older command sends none, and gets no answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reply_to: Option<String>,
}

/// The instance's answer on the reply channel.
#[derive(Debug, Serialize, Deserialize)]
struct DrainReply {
    accepted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    why: Option<String>,
}

/// How long the operator's command waits for the instance's answer.
const REPLY_WAIT: Duration = Duration::from_secs(3);

/// What became of a drain request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// No live instance listens under the target's machine id.
    NoInstance,
    /// The instance verified it and stops gracefully.
    Accepted,
    /// The instance dropped it, for this reason (a wrong secret, ...).
    Refused(String),
    /// Published, and no answer came within the wait (an older instance acts without
    /// answering).
    Unanswered,
}

/// The reply channels' prefix: an instance answers on no other channel.
fn reply_prefix(key_prefix: &str) -> String {
    format!("{key_prefix}drain-reply:")
}

/// What is signed besides source, target, time and nonce: the kind and the target.
fn signed_body(target: &str) -> Vec<u8> {
    format!("{KIND}\n{target}").into_bytes()
}

/// Asks instance `target` to drain, signed with `config`'s `MCP_SESSION_SECRET`, as `source`,
/// and waits (at most [`REPLY_WAIT`]) for its answer.
pub(crate) async fn request(
    redis: &RedisConn,
    config: &Config,
    source: &str,
    target: &str,
) -> Result<Drained, String> {
    let now = unix_ms();
    let keys = RelayKeys::from_config(config);
    let auth = channel_auth::sign(&keys, source, target, DRAIN_PATH, &signed_body(target), now)?;
    let reply_to = format!(
        "{}{:032x}",
        reply_prefix(&config.ha.key_prefix),
        rand::random::<u128>()
    );
    // Subscribed before the request goes, so the answer cannot come first.
    let mut replies = redis
        .subscribe_sharded(&reply_to)
        .await
        .map_err(|e| e.to_string())?;
    let message = DrainRequest {
        kind: KIND.into(),
        source: source.into(),
        target: target.into(),
        timestamp: now,
        auth: Some(auth),
        reply_to: Some(reply_to),
    };
    let payload = serde_json::to_string(&message).map_err(|e| e.to_string())?;
    let channel = channel_of(&config.ha.key_prefix, target);
    let received = redis
        .publish_one(&channel, &payload)
        .await
        .map_err(|e| e.to_string())?;
    if received == 0 {
        return Ok(Drained::NoInstance);
    }
    let answer = tokio::time::timeout(REPLY_WAIT, async {
        while let Some(m) = replies.next().await {
            if let Ok(reply) = serde_json::from_slice::<DrainReply>(m.get_payload_bytes()) {
                return Some(reply);
            }
        }
        None
    })
    .await;
    Ok(match answer {
        Ok(Some(DrainReply { accepted: true, .. })) => Drained::Accepted,
        Ok(Some(DrainReply { why, .. })) => {
            Drained::Refused(why.unwrap_or_else(|| "no reason given".into()))
        }
        _ => Drained::Unanswered,
    })
}

/// Answers waiting for their `PUBLISH` (reply channel, payload): one worker, at most
/// [`REPLIES_BOUND`] queued. A flood of drain requests (refused ones are answered too) while
/// Redis does not answer drops the answers past it (counted, logged), not a task each.
pub(super) struct Replies(Lanes<(String, String)>);

/// What [`Replies`] queues at most (an answer is under 200 bytes).
const REPLIES_BOUND: Bound = Bound {
    count: 64,
    bytes: 64 << 10,
};

impl Replies {
    pub(super) fn new(redis: RedisConn) -> Self {
        Self(Lanes::new(
            "answers to drain requests",
            1,
            REPLIES_BOUND,
            move |(channel, payload): (String, String)| {
                let redis = redis.clone();
                async move {
                    let sent = redis.publish_one(&channel, &payload).await;
                    if let Err(e) = sent {
                        tracing::debug!(error = %e, "[HA] the answer to a drain request could not be sent");
                    }
                }
            },
        ))
    }
}

/// Answers the operator's command on `reply_to`, if it is a reply channel of this fleet.
fn answer(replies: &Replies, key_prefix: &str, reply_to: Option<&str>, reply: DrainReply) {
    let Some(reply_to) = reply_to.filter(|r| r.starts_with(&reply_prefix(key_prefix))) else {
        return;
    };
    let Ok(payload) = serde_json::to_string(&reply) else {
        return;
    };
    let size = reply_to.len() + payload.len();
    replies.0.push("", (reply_to.to_string(), payload), size);
}

/// Handles `payload` if it is a drain request: when it is authentic and for this instance,
/// cancels `drain`; either way answers on its reply channel (through `replies`). Returns whether
/// it was a drain request (handled or dropped).
pub(super) fn on_message(
    verifier: &Verifier,
    me: &str,
    payload: &[u8],
    drain: &CancellationToken,
    replies: &Replies,
    key_prefix: &str,
) -> bool {
    let Ok(req) = serde_json::from_slice::<DrainRequest>(payload) else {
        return false;
    };
    if req.kind != KIND {
        return false;
    }
    let checked = if req.target != me {
        Err("it names another instance")
    } else {
        channel_auth::verify(
            verifier,
            &req.source,
            DRAIN_PATH,
            &signed_body(me),
            req.auth.as_deref(),
            unix_ms(),
        )
    };
    match checked {
        Ok(()) => {
            tracing::warn!(
                requested_by = %req.source,
                "[HA] Drain requested by the operator: stopping gracefully, as on SIGTERM"
            );
            drain.cancel();
            let reply = DrainReply {
                accepted: true,
                why: None,
            };
            answer(replies, key_prefix, req.reply_to.as_deref(), reply);
        }
        Err(why) => {
            tracing::warn!(
                source_node_id = %req.source,
                "[HA] Dropped a drain request on this instance's channel: {why}"
            );
            let reply = DrainReply {
                accepted: false,
                why: Some(why.to_string()),
            };
            answer(replies, key_prefix, req.reply_to.as_deref(), reply);
        }
    }
    true
}
