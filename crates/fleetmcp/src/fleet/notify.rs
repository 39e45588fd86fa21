//! Notifications for one session, routed to the instance that holds it (ha-contract 17): a
//! handler on one instance notifies a session another instance holds (`ServerHandle::
//! notify_session`), and the message reaches that session's stream on its holder.
//!
//! The holder is the one the stored record names; the message goes to its own channel,
//! `<prefix>notify:<nodeId>`, in the contract's `notification` format. Nobody on that channel
//! (the holder is gone) means the message is dropped and counted; it is never broadcast, and a
//! holder that no longer holds the session drops it too (never routed twice).
//!
//! Every message is authenticated like a relayed request (`channel_auth.rs`): its `auth` field
//! carries an HMAC, under a key derived from the fleet's secret, over its source, its target,
//! a timestamp, a nonce, the session and the notification. The holder drops, with a warning, a
//! message that does not verify for it, is outside the replay window, or repeats a nonce: anyone
//! who can publish on Redis cannot put words in a session's stream.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel_auth;
use super::heartbeat::channel_of;
use super::relay_auth::{RelayKeys, Verifier};
use crate::app::{Bound, Lanes, ServerHandle};
use crate::clock::unix_ms;
use crate::redis_conn::RedisConn;
use crate::session::{RedisSessionStore, SessionStore};

/// The contract's `notification` message.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Routed {
    /// `notification`, or absent in older messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    session_id: String,
    notification: Body,
    /// The sending instance's machine id.
    #[serde(rename = "sourceNodeId")]
    source: String,
    timestamp: u64,
    /// The authentication (see the module doc): `v1;<unix ms>;<nonce>;<names>;<mac>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    auth: Option<String>,
}

/// What the MAC of a routed notification covers besides source, target, time and nonce: the
/// session and the notification, as this crate encodes them (both sides encode the same).
fn signed_body(session_id: &str, notification: &Body) -> Option<Vec<u8>> {
    serde_json::to_vec(&(session_id, notification)).ok()
}

/// The path a routed notification is signed under (it is no HTTP request; the path keeps its
/// MAC apart from any relayed request's).
const NOTIFY_PATH: &str = "/.fleetmcp/notify";

#[derive(Debug, Serialize, Deserialize)]
struct Body {
    method: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    params: Value,
}

/// Routes notifications to the holders of sessions not held here.
pub(super) struct Router {
    redis: RedisConn,
    store: RedisSessionStore,
    key_prefix: String,
    me: String,
    keys: RelayKeys,
    /// Notifications dropped because no live instance held their session.
    dropped: AtomicU64,
}

impl Router {
    pub fn new(redis: RedisConn, key_prefix: &str, me: &str, keys: RelayKeys) -> Self {
        Self {
            keys,
            store: RedisSessionStore::on(redis.clone()),
            redis,
            key_prefix: key_prefix.to_string(),
            me: me.to_string(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Sends the notification to the holder's channel; `false` (dropped, counted) when the
    /// session is unknown, names this instance (which does not hold it), or nobody listens on
    /// its holder's channel.
    pub async fn route(&self, session_id: &str, method: &str, params: &Value) -> bool {
        let holder = match self.store.get(session_id).await {
            Ok(Some(record)) if record.holder != self.me => record.holder,
            Ok(_) => return self.drop_one(session_id, "no live instance holds the session"),
            Err(e) => return self.drop_one(session_id, &e.to_string()),
        };
        let notification = Body {
            method: method.to_string(),
            params: params.clone(),
        };
        let now = unix_ms();
        let Some(body) = signed_body(session_id, &notification) else {
            return false;
        };
        let auth = match channel_auth::sign(&self.keys, &self.me, &holder, NOTIFY_PATH, &body, now)
        {
            Ok(auth) => Some(auth),
            Err(why) => return self.drop_one(session_id, why),
        };
        let message = Routed {
            kind: Some("notification".into()),
            session_id: session_id.to_string(),
            notification,
            source: self.me.clone(),
            timestamp: now,
            auth,
        };
        let Ok(payload) = serde_json::to_string(&message) else {
            return false;
        };
        let channel = channel_of(&self.key_prefix, &holder);
        match self.redis.publish_one(&channel, &payload).await {
            Ok(0) => self.drop_one(session_id, "its holder is not alive"),
            Ok(_) => true,
            Err(e) => self.drop_one(session_id, &e.to_string()),
        }
    }

    fn drop_one(&self, session_id: &str, why: &str) -> bool {
        let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(
            session_id,
            dropped_total = total,
            "[HA] A notification for a session held elsewhere was dropped: {why}"
        );
        false
    }
}

/// Notifications routed here, waiting to be appended to their sessions' streams: a few
/// workers (a session's messages always take the same one, in order) fed by bounded queues,
/// so that a burst while the event store (Redis) does not answer queues up to [`INBOX_BOUND`]
/// per worker and drops the rest (counted, logged) instead of making a task per message.
pub(super) struct Inbox(Lanes<Routed>);

/// Workers of the [`Inbox`].
const INBOX_LANES: usize = 8;
/// What each queues at most (8 x 4 MiB for the instance).
const INBOX_BOUND: Bound = Bound {
    count: 256,
    bytes: 4 << 20,
};

impl Inbox {
    pub(super) fn new(handle: ServerHandle) -> Self {
        Self(Lanes::new(
            "notifications routed to this instance",
            INBOX_LANES,
            INBOX_BOUND,
            move |routed: Routed| {
                let handle = handle.clone();
                async move { deliver(&handle, routed).await }
            },
        ))
    }
}

/// Appends a routed notification to its session's stream, if the session is held here.
async fn deliver(handle: &ServerHandle, routed: Routed) {
    let Routed {
        session_id,
        notification,
        ..
    } = routed;
    if !handle
        .deliver_routed(&session_id, &notification.method, &notification.params)
        .await
    {
        tracing::debug!(session_id = %crate::session::LogId(&session_id), "[HA] a notification routed here for a session not held here was dropped");
    }
}

/// Queues for delivery a message that arrived on this instance's channel, if it is an
/// authentic notification (`payload.len()` bytes) for a session held here.
pub(super) fn on_message(inbox: &Inbox, me: &str, verifier: &Verifier, payload: &[u8]) {
    let Ok(routed) = serde_json::from_slice::<Routed>(payload) else {
        tracing::debug!(
            "[HA] ignored a message on this instance's channel that is not a notification"
        );
        return;
    };
    if routed.kind.as_deref().is_some_and(|k| k != "notification") || routed.source == me {
        return;
    }
    if let Err(why) = verify(verifier, &routed) {
        tracing::warn!(source_node_id = %routed.source, session_id = %crate::session::LogId(&routed.session_id), "[HA] Dropped a notification on this instance's channel: {why}");
        return;
    }
    let key = routed.session_id.clone();
    inbox.0.push(&key, routed, payload.len());
}

/// Whether `routed` was signed for this instance by a holder of the fleet's secret, recently,
/// and not seen before.
fn verify(verifier: &Verifier, routed: &Routed) -> Result<(), &'static str> {
    let body = signed_body(&routed.session_id, &routed.notification).ok_or("it does not encode")?;
    channel_auth::verify(
        verifier,
        &routed.source,
        NOTIFY_PATH,
        &body,
        routed.auth.as_deref(),
        unix_ms(),
    )
}
