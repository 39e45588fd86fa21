//! List changes and resource updates across the fleet: what one instance announces reaches the
//! `subscriptions/listen` streams and the subscribed sessions of every other, through one
//! channel every instance listens on, `<prefix>changes`.
//!
//! Best effort, like the notifications themselves: a change published while Redis does not
//! answer is lost (and logged); a listen stream that missed changes is told to refetch only by
//! its own instance's lag detection.

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::app::{App, Change, Fanout};
use crate::redis_conn::RedisConn;

#[derive(Serialize, Deserialize)]
struct Envelope {
    /// The instance that made the change (it has applied it already).
    from: String,
    #[serde(flatten)]
    change: Change,
}

/// Publishes this instance's changes on the fleet's channel, and routes notifications for
/// sessions held elsewhere to their holders.
pub(super) struct RedisFanout {
    redis: RedisConn,
    channel: String,
    me: String,
    router: super::notify::Router,
}

impl RedisFanout {
    pub fn new(
        redis: RedisConn,
        key_prefix: &str,
        me: &str,
        keys: super::relay_auth::RelayKeys,
    ) -> Self {
        Self {
            router: super::notify::Router::new(redis.clone(), key_prefix, me, keys),
            redis,
            channel: channel(key_prefix),
            me: me.to_string(),
        }
    }
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
        let envelope = Envelope {
            from: self.me.clone(),
            change: change.clone(),
        };
        let Ok(payload) = serde_json::to_string(&envelope) else {
            return;
        };
        let redis = self.redis.clone();
        let channel = self.channel.clone();
        tokio::spawn(async move {
            let sent: Result<i64, _> = redis
                .run(redis::cmd("PUBLISH").arg(&channel).arg(payload).clone())
                .await;
            if let Err(e) = sent {
                tracing::warn!(error = %e, "[HA] a change could not be sent to the other instances");
            }
        });
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
    super::subscription::keep(redis, channel(&key_prefix), None, stop, move |payload| {
        let Ok(envelope) = serde_json::from_slice::<Envelope>(payload) else {
            tracing::debug!("[HA] ignored a malformed message on the changes channel");
            return;
        };
        if envelope.from == me {
            return;
        }
        let handle = handle.clone();
        tokio::spawn(async move { handle.apply_remote(envelope.change).await });
    })
    .await;
}
