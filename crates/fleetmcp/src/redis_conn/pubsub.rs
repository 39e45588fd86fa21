//! Pub/sub: each subscription on a dedicated connection (pub/sub needs its own), a stream of its
//! messages that is left without losing any.

use super::{CommandError, RedisConn, on_first_cluster_node, unavailable};
use crate::redis_config::RedisConfig;

impl RedisConn {
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
                sink,
                messages,
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
    sink: redis::aio::PubSubSink,
    messages: redis::aio::PubSubStream,
    target: String,
    pattern: bool,
    timeout: std::time::Duration,
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
        let unsubscribe = async {
            if self.pattern {
                self.sink.punsubscribe(&self.target).await
            } else {
                self.sink.unsubscribe(&self.target).await
            }
        };
        if let Err(e) = tokio::time::timeout(self.timeout, unsubscribe)
            .await
            .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timed out"))))
        {
            tracing::debug!(error = %e, target = %self.target, "leaving a subscription: no confirmation");
        }
        let mut left = Vec::new();
        while let Some(Some(m)) =
            futures_util::FutureExt::now_or_never(futures_util::StreamExt::next(&mut self.messages))
        {
            left.push(m);
        }
        left
    }
}

impl futures_util::Stream for Subscription {
    type Item = redis::Msg;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<redis::Msg>> {
        std::pin::Pin::new(&mut self.messages).poll_next(cx)
    }
}
