//! Pub/sub: each subscription on a dedicated connection (pub/sub needs its own), a stream of its
//! messages that is left without losing any. Classic (`SUBSCRIBE`, `PSUBSCRIBE`), or for a
//! channel one instance listens on, on a cluster that has it, sharded (`sharded.rs`).

use std::pin::Pin;
use std::task::{Context, Poll};

use redis::{PushInfo, PushKind};
use tokio::sync::mpsc::UnboundedReceiver;

use super::sharded::PubSubMode;
use super::{CommandError, RedisConn, on_first_cluster_node, unavailable};
use crate::redis_config::RedisConfig;

impl RedisConn {
    /// Like [`RedisConn::subscribe`], for a channel one instance listens on (its own channel, a
    /// reply channel): sharded on a cluster whose nodes all run Redis 7 or later, with the
    /// classic subscription beside it (`sharded.rs`); classic elsewhere.
    pub(crate) async fn subscribe_sharded(
        &self,
        channel: &str,
    ) -> Result<Subscription, CommandError> {
        if self.pubsub_mode().await == PubSubMode::Classic {
            return self.subscribe(channel).await;
        }
        let bound = self.inner.cfg.connect_timeout() + self.inner.cfg.command_timeout() * 3;
        match tokio::time::timeout(bound, self.sharded_subscription(channel)).await {
            Ok(Ok((conn, pushes))) => Ok(Subscription {
                way: Way::Sharded {
                    conn,
                    pushes,
                    ended: false,
                },
                target: channel.to_string(),
                pattern: false,
                timeout: self.inner.cfg.command_timeout(),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(CommandError::Timeout(bound.as_millis() as u64)),
        }
    }

    /// A dedicated connection subscribed to `channel` (pub/sub needs its own connection), bounded
    /// by the connect timeout plus one command timeout. The stream ends when the connection does.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<Subscription, CommandError> {
        self.subscribed(channel, false).await
    }

    /// Like [`RedisConn::subscribe`], for every channel matching `pattern` (`PSUBSCRIBE`).
    pub(crate) async fn psubscribe(&self, pattern: &str) -> Result<Subscription, CommandError> {
        self.subscribed(pattern, true).await
    }

    async fn subscribed(&self, target: &str, pattern: bool) -> Result<Subscription, CommandError> {
        let bound = self.inner.cfg.connect_timeout() + self.inner.cfg.command_timeout();
        let attempt = async {
            let mut pubsub = if self.inner.cfg.is_cluster() {
                cluster_pubsub(&self.inner.cfg).await?
            } else {
                let client = self.inner.client.load_full().ok_or_else(|| {
                    CommandError::Unavailable(
                        "not connected to Redis yet (retrying in the background)".into(),
                    )
                })?;
                client.get_async_pubsub().await.map_err(unavailable)?
            };
            if pattern {
                pubsub.psubscribe(target).await.map_err(unavailable)?;
            } else {
                pubsub.subscribe(target).await.map_err(unavailable)?;
            }
            let (sink, messages) = pubsub.split();
            Ok::<_, CommandError>(Subscription {
                way: Way::Classic { sink, messages },
                target: target.to_string(),
                pattern,
                timeout: self.inner.cfg.command_timeout(),
            })
        };
        match tokio::time::timeout(bound, attempt).await {
            Ok(r) => r,
            Err(_) => Err(CommandError::Timeout(bound.as_millis() as u64)),
        }
    }
}

/// A pub/sub connection for a cluster: to the first configured node that answers. A cluster
/// delivers classic `PUBLISH` messages on every node, so any one will do; when it fails, the
/// subscriber's retry comes here again and finds another.
async fn cluster_pubsub(cfg: &RedisConfig) -> Result<redis::aio::PubSub, CommandError> {
    on_first_cluster_node(cfg, |client| async move {
        client.get_async_pubsub().await.map_err(unavailable)
    })
    .await
}

/// A dedicated pub/sub connection: a stream of its messages, and [`Subscription::leave`] to end
/// it without losing any.
pub(crate) struct Subscription {
    way: Way,
    target: String,
    pattern: bool,
    timeout: std::time::Duration,
}

/// The connection a [`Subscription`] is on.
enum Way {
    Classic {
        sink: redis::aio::PubSubSink,
        messages: redis::aio::PubSubStream,
    },
    /// A RESP3 connection to the master of the channel's slot, subscribed both ways; its pushes
    /// carry the messages, and tell when Redis unsubscribed it or the connection dropped.
    Sharded {
        conn: redis::aio::MultiplexedConnection,
        pushes: UnboundedReceiver<PushInfo>,
        /// The subscription is gone: the stream has ended.
        ended: bool,
    },
}

impl Subscription {
    /// Unsubscribes, and returns the messages that arrived before Redis confirmed it.
    ///
    /// A publisher counts this connection as a receiver until Redis has processed the
    /// unsubscribe: dropping the connection instead would lose what was published meanwhile (a
    /// notification its sender was told had reached a live holder). Redis answers the
    /// unsubscribe after every message it sent before, and the connection hands them over in
    /// order, so once the answer is in they are all queued here. Bounded by the command timeout.
    pub(crate) async fn leave(mut self) -> Vec<redis::Msg> {
        let (target, pattern, timeout) = (self.target.clone(), self.pattern, self.timeout);
        let unsubscribe = async {
            match &mut self.way {
                Way::Classic { sink, .. } if pattern => sink.punsubscribe(&target).await,
                Way::Classic { sink, .. } => sink.unsubscribe(&target).await,
                Way::Sharded { conn, .. } => {
                    redis::cmd("SUNSUBSCRIBE")
                        .arg(&target)
                        .query_async::<redis::Value>(conn)
                        .await?;
                    conn.unsubscribe(&target).await
                }
            }
        };
        if let Err(e) = tokio::time::timeout(timeout, unsubscribe)
            .await
            .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timed out"))))
        {
            tracing::debug!(error = %e, target = %self.target, "leaving a subscription: no confirmation");
        }
        let mut left = Vec::new();
        match &mut self.way {
            Way::Classic { messages, .. } => {
                while let Some(Some(m)) =
                    futures_util::FutureExt::now_or_never(futures_util::StreamExt::next(messages))
                {
                    left.push(m);
                }
            }
            // The confirmations come after every message Redis sent before them.
            Way::Sharded { pushes, .. } => {
                while let Ok(push) = pushes.try_recv() {
                    left.extend(message_of(push));
                }
            }
        }
        left
    }
}

/// The message a push carries, if it is one (classic or sharded).
fn message_of(push: PushInfo) -> Option<redis::Msg> {
    matches!(push.kind, PushKind::Message | PushKind::SMessage)
        .then(|| redis::Msg::from_push_info(push))
        .flatten()
}

impl futures_util::Stream for Subscription {
    type Item = redis::Msg;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<redis::Msg>> {
        match &mut self.way {
            Way::Classic { messages, .. } => Pin::new(messages).poll_next(cx),
            Way::Sharded { pushes, ended, .. } => loop {
                if *ended {
                    return Poll::Ready(None);
                }
                let Some(push) = std::task::ready!(pushes.poll_recv(cx)) else {
                    *ended = true;
                    continue;
                };
                match push.kind {
                    PushKind::Message | PushKind::SMessage => {
                        if let Some(m) = message_of(push) {
                            return Poll::Ready(Some(m));
                        }
                    }
                    // Redis unsubscribed it (the slot moved, or its master became a replica),
                    // or the connection dropped: the keeper subscribes again.
                    PushKind::SUnsubscribe | PushKind::Unsubscribe | PushKind::Disconnection => {
                        *ended = true;
                    }
                    // The confirmations of its own subscribing.
                    _ => {}
                }
            },
        }
    }
}
