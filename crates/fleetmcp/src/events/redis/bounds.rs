//! What this process keeps in Redis for replay, held to `[sessions]`'s bounds: the ledger
//! ([`crate::events::budget`]) says what to give up, and this gives it up in Redis.

use super::RedisEventStore;
use crate::events::StreamId;
use crate::events::budget::{Budget, Cut};

impl RedisEventStore {
    /// Bounds what this process keeps in Redis for replay: `streams` a session, `per_session`
    /// bytes a session, `per_instance` bytes in all (`[sessions]`).
    pub fn with_bounds(self, streams: usize, per_session: usize, per_instance: usize) -> Self {
        {
            let mut budget = self.budget.lock();
            let mut bounds = budget.bounds();
            bounds.streams_per_session = streams;
            bounds.per_session = per_session;
            bounds.per_instance = per_instance;
            *budget = Budget::new(bounds);
        }
        self
    }

    /// Counts an event this process stored, and gives up what the bounds say: a closed stream
    /// is deleted (its readers end), an open one trimmed to its newest entry. One pipeline,
    /// only when a bound is passed.
    pub(super) async fn spent(&self, session: &str, stream: StreamId, data: usize) {
        let cuts = {
            let now = std::time::Instant::now();
            self.budget
                .lock()
                .appended(session, stream, data, None, now)
        };
        if cuts.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        let mut commands = 0;
        for cut in &cuts {
            commands += usize::from(!matches!(cut, Cut::Expired(..)));
            match cut {
                // Redis dropped the stream; what this process kept for it goes unless a reader
                // still holds it.
                Cut::Expired(owner, id) => {
                    let key = self.stream_key(owner, *id);
                    let mut local = self.local.lock();
                    if local
                        .get(&key)
                        .is_some_and(|l| std::sync::Arc::strong_count(l) == 1)
                    {
                        local.remove(&key);
                    }
                }
                Cut::Drop(owner, id) => {
                    let key = self.stream_key(owner, *id);
                    pipe.add_command(redis::cmd("DEL").arg(&key).clone())
                        .ignore();
                    pipe.add_command(
                        redis::cmd("SREM")
                            .arg(self.index_key(owner))
                            .arg(&key)
                            .clone(),
                    )
                    .ignore();
                    if let Some(l) = self.local.lock().remove(&key) {
                        *l.generation.lock() += 1;
                        l.notify.notify_waiters();
                    }
                }
                Cut::Trim(owner, id) => {
                    let key = self.stream_key(owner, *id);
                    pipe.add_command(redis::cmd("XTRIM").arg(&key).arg("MAXLEN").arg(1).clone())
                        .ignore();
                }
            }
        }
        if commands == 0 {
            return;
        }
        tracing::debug!(
            cuts = commands,
            "SSE history past its byte bound; older streams dropped"
        );
        if let Err(e) = self.redis.pipe::<()>(pipe).await {
            // What was not deleted expires with its streams.
            tracing::debug!(error = %e, "dropping SSE history past its bound failed");
        }
    }
}
