//! Cancel signals: each instance holds one pattern subscription, `cancel:*`, instead of one
//! subscription (and connection) per running task; cancels are rare, so every instance reading
//! every cancel costs less than a connection per task.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::RedisTaskStore;

/// What a shared store tells the instance about its tasks from elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CancelSignal {
    /// `tasks/cancel` reached another instance for this task.
    Cancel(String),
    /// `tasks/update` reached another instance for this task: the client's answers, by key.
    Answers(String, serde_json::Map<String, Value>),
    /// The subscription was (re)made: signals sent meanwhile were lost, so the instance checks
    /// the records of the tasks it runs.
    Resync,
}

impl RedisTaskStore {
    /// Subscribes to every task's cancel channel (the first attempt is awaited, bounded by the
    /// connection's timeouts) and keeps the subscription until `stop`, subscribing again when
    /// it drops (100 ms doubling to 5 s). What arrives is handed on through the receiver, to
    /// [`Tasks::follow`](crate::tasks::Tasks::follow): each cancel, and a [`CancelSignal::Resync`] after every
    /// (re)subscription.
    pub(crate) async fn listen_cancels(
        &self,
        stop: CancellationToken,
    ) -> mpsc::Receiver<CancelSignal> {
        let (tx, rx) = mpsc::channel(256);
        // One pattern for both signals: `cancel:<taskId>` and `input:<taskId>`.
        let pattern = format!("{}*", self.prefix);
        // Redis down at start: not waited for here; the loop below subscribes once it answers.
        let first = if !self.redis.is_connected() {
            None
        } else {
            match self.redis.psubscribe(&pattern).await {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::warn!(error = %e, %pattern, "cannot subscribe to task cancel signals yet; retrying");
                    None
                }
            }
        };
        let redis = self.redis.clone();
        let prefix = self.prefix.clone();
        let mut replaced = redis.replaced();
        tokio::spawn(async move {
            let mut messages = first;
            loop {
                if let Some(stream) = messages.as_mut() {
                    if tx.send(CancelSignal::Resync).await.is_err() {
                        return;
                    }
                    loop {
                        tokio::select! {
                            // The shared connection moved to another server: so does this one.
                            Ok(()) = replaced.changed() => break,
                            m = stream.next() => match m {
                                Some(m) => {
                                    let channel = m.get_channel_name();
                                    let Some(signal) = signal_of(&prefix, channel, m.get_payload_bytes()) else {
                                        continue;
                                    };
                                    // A full queue means the instance is far behind; the
                                    // resync after the next reconnect catches lost cancels
                                    // (lost answers are asked for again: the task still waits).
                                    if let Err(e) = tx.try_send(signal) {
                                        tracing::warn!(signal = ?e.into_inner(), "a task signal was dropped: too many pending");
                                    }
                                }
                                None => break,
                            },
                            _ = stop.cancelled() => return,
                        }
                    }
                    tracing::warn!(%pattern, "lost the task cancel subscription; subscribing again");
                }
                let mut delay = Duration::from_millis(100);
                messages = loop {
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = stop.cancelled() => return,
                    }
                    match redis.psubscribe(&pattern).await {
                        Ok(m) => break Some(m),
                        Err(e) => {
                            tracing::debug!(error = %e, %pattern, "subscribing to task cancel signals failed")
                        }
                    }
                    delay = (delay * 2).min(Duration::from_secs(5));
                };
            }
        });
        rx
    }
}

/// The signal a message on `channel` carries, if it is one.
fn signal_of(prefix: &str, channel: &str, payload: &[u8]) -> Option<CancelSignal> {
    let rest = channel.strip_prefix(prefix)?;
    if let Some(id) = rest.strip_prefix("cancel:") {
        return Some(CancelSignal::Cancel(id.to_string()));
    }
    let id = rest.strip_prefix("input:")?;
    let answers = serde_json::from_slice(payload).ok()?;
    Some(CancelSignal::Answers(id.to_string(), answers))
}
