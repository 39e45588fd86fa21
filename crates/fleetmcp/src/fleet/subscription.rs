//! A channel subscription kept for an instance's whole life: when its connection drops (Redis
//! restarted) or could not be made, it subscribes again, 100 ms doubling to 250 ms between
//! attempts, until the instance stops. At the stop it unsubscribes and handles what arrived
//! before Redis confirmed it, so nothing published while this instance still counted as a
//! receiver is lost.
//!
//! On a cluster that has it, the subscription is sharded (`redis_conn/sharded.rs`): it is also
//! lost when Redis moves the channel's slot or demotes its master (a failover), and is made
//! again likewise, on the slot's master then.

use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::redis_conn::{RedisConn, Subscription};

/// Keeps `channel` subscribed until `stop`, handing each message's payload to `on_message`,
/// and telling `on_presence` whether the subscription is up (it is lost and made again).
/// `messages`: a subscription already made, if any.
pub(super) async fn keep(
    redis: RedisConn,
    channel: String,
    mut messages: Option<Subscription>,
    stop: CancellationToken,
    on_message: impl Fn(&[u8]),
    on_presence: impl Fn(bool),
) {
    let mut replaced = redis.replaced();
    loop {
        if messages.is_some() {
            on_presence(true);
        }
        if let Some(stream) = messages.as_mut() {
            loop {
                tokio::select! {
                    // The shared connection moved to another server (a failover): so does this one.
                    Ok(()) = replaced.changed() => {
                        tracing::info!(%channel, "[HA] the Redis connection moved; subscribing again");
                        if let Some(stream) = messages.take() {
                            for m in stream.leave().await {
                                on_message(m.get_payload_bytes());
                            }
                        }
                        break;
                    }
                    m = stream.next() => match m {
                        Some(m) => on_message(m.get_payload_bytes()),
                        None => break,
                    },
                    _ = stop.cancelled() => {
                        if let Some(stream) = messages.take() {
                            for m in stream.leave().await {
                                on_message(m.get_payload_bytes());
                            }
                        }
                        return;
                    }
                }
            }
            tracing::warn!(%channel, "[HA] lost a channel subscription; subscribing again");
        }
        on_presence(false);
        let mut delay = Duration::from_millis(100);
        messages = loop {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stop.cancelled() => return,
            }
            match redis.subscribe_sharded(&channel).await {
                Ok(m) => break Some(m),
                Err(e) => tracing::debug!(error = %e, %channel, "[HA] subscribing again failed"),
            }
            // At most a quarter second apart: a live instance whose subscription is down is
            // judged gone by others after the takeover grace (`heartbeat_liveness.rs`, which may
            // be as short as a second), so it must be back well before that once Redis answers.
            delay = (delay * 2).min(Duration::from_millis(250));
        };
    }
}
