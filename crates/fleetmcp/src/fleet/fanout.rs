//! List changes and resource updates across the fleet: what one instance announces reaches the
//! `subscriptions/listen` streams and the subscribed sessions of every other, through one
//! channel every instance listens on, `<prefix>changes` (sharded on a Redis 7 cluster once every
//! instance listens so: `redis_conn/sharded.rs`).
//!
//! Every message is signed like a message on an instance's channel ([`super::channel_auth`]),
//! for the whole fleet (target [`FLEET`]): a `PUBLISH` by anyone who can reach Redis is dropped,
//! not turned into `resources/updated` or list changes in sessions.
//!
//! Best effort, like the notifications themselves: a change published while Redis does not
//! answer is lost (and logged); a listen stream that missed changes is told to refetch only by
//! its own instance's lag detection. Both ways go through one worker fed by a bounded queue
//! ([`Lanes`]): a burst of changes while Redis does not answer queues up to [`CHANGES_BOUND`]
//! and drops the rest (counted, logged), never a task per change.

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::app::{App, Bound, Change, Fanout, Lanes};
use crate::redis_conn::RedisConn;

/// The message's path in its MAC: what kind of message it is.
const PATH: &str = "/changes";
/// What the queue of changes to publish, and the queue of changes received to apply, each
/// hold at most (a change is a URI at most, in an envelope of about 200 bytes).
const CHANGES_BOUND: Bound = Bound {
    count: 1024,
    bytes: 4 << 20,
};

/// The target a change is signed for: every instance (an instance's own machine id never is
/// this, so a change cannot pass for a message on an instance's channel, nor the reverse).
const FLEET: &str = "*fleet*";

#[derive(Serialize, Deserialize)]
struct Envelope {
    /// The instance that made the change (it has applied it already).
    from: String,
    /// The change, as JSON: the bytes the MAC covers.
    change: String,
    /// `v1;<unix ms>;<nonce>;<names>;<mac>` ([`super::channel_auth::sign`]).
    auth: String,
}

/// Publishes this instance's changes on the fleet's channel, and routes notifications for
/// sessions held elsewhere to their holders.
pub(super) struct RedisFanout {
    me: String,
    router: super::notify::Router,
    /// Signs every change.
    keys: super::relay_auth::RelayKeys,
    /// Signed changes waiting for their `PUBLISH`, in order.
    outbox: Lanes<String>,
}

impl RedisFanout {
    pub fn new(
        redis: RedisConn,
        key_prefix: &str,
        me: &str,
        keys: super::relay_auth::RelayKeys,
    ) -> Self {
        Self {
            router: super::notify::Router::new(redis.clone(), key_prefix, me, keys.clone()),
            outbox: publisher(redis, channel(key_prefix)),
            me: me.to_string(),
            keys,
        }
    }
}

/// The worker that publishes changes on `channel`, one at a time.
fn publisher(redis: RedisConn, channel: String) -> Lanes<String> {
    // Sharded on a Redis 7 cluster once every instance listens so (`redis_conn/sharded.rs`).
    let channel = std::sync::Arc::new(crate::redis_conn::Broadcast::new(channel));
    Lanes::new(
        "changes to publish to the fleet",
        1,
        CHANGES_BOUND,
        move |payload: String| {
            let (redis, channel) = (redis.clone(), channel.clone());
            async move {
                if let Err(e) = channel.publish(&redis, &payload).await {
                    tracing::warn!(error = %e, "[HA] a change could not be sent to the other instances");
                }
            }
        },
    )
}

fn channel(key_prefix: &str) -> String {
    format!("{key_prefix}changes")
}

#[async_trait::async_trait]
impl Fanout for RedisFanout {
    async fn to_holder(&self, session_id: &str, method: &str, params: &serde_json::Value) -> bool {
        self.router.route(session_id, method, params).await
    }

    fn publish(&self, change: &Change) {
        let Ok(body) = serde_json::to_string(change) else {
            return;
        };
        let auth = match super::channel_auth::sign(
            &self.keys,
            &self.me,
            FLEET,
            PATH,
            body.as_bytes(),
            crate::clock::unix_ms(),
        ) {
            Ok(a) => a,
            Err(why) => {
                tracing::warn!("[HA] a change could not be signed: {why}");
                return;
            }
        };
        let envelope = Envelope {
            from: self.me.clone(),
            change: body,
            auth,
        };
        let Ok(payload) = serde_json::to_string(&envelope) else {
            return;
        };
        let size = payload.len();
        self.outbox.push("", payload, size);
    }
}

/// Listens on the fleet's channel until `stop`, applying the other instances' changes here.
pub(super) async fn listen(
    redis: RedisConn,
    key_prefix: String,
    app: App,
    stop: CancellationToken,
) {
    let me = app.sessions().machine_id().to_string();
    let handle = app.handle();
    // Applying a resource update appends to every subscribed session's stream (Redis, in
    // distributed mode): one worker, in order, instead of a task per change received.
    let apply = Lanes::new(
        "changes received from the fleet",
        1,
        CHANGES_BOUND,
        move |change: Change| {
            let handle = handle.clone();
            async move { handle.apply_remote(change).await }
        },
    );
    let verifier = super::relay_auth::Verifier::new(
        super::relay_auth::RelayKeys::from_config(app.config()),
        FLEET,
        app.config().ha.relay_window_ms,
    )
    .started_at(crate::clock::unix_ms());
    super::subscription::keep(
        redis,
        channel(&key_prefix),
        None,
        stop,
        move |payload| {
            let Ok(envelope) = serde_json::from_slice::<Envelope>(payload) else {
                tracing::debug!("[HA] ignored a malformed message on the changes channel");
                return;
            };
            if envelope.from == me {
                return;
            }
            if let Err(why) = super::channel_auth::verify(
                &verifier,
                &envelope.from,
                PATH,
                envelope.change.as_bytes(),
                Some(&envelope.auth),
                crate::clock::unix_ms(),
            ) {
                tracing::warn!(
                    source = %envelope.from,
                    "[HA] Dropped a message on the changes channel from {}: {why}",
                    envelope.from
                );
                return;
            }
            let Ok(change) = serde_json::from_str::<Change>(&envelope.change) else {
                tracing::debug!("[HA] ignored a malformed change on the changes channel");
                return;
            };
            apply.push("", change, envelope.change.len());
        },
        |_| {},
    )
    .await;
}
