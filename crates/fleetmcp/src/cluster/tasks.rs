//! Whether the instance running a background task is gone: the `tasks::ExecutorLiveness` the
//! cluster installs, with the same evidence and the same grace as session takeover
//! (`directory.rs`).
//!
//! - A heartbeat under the executor's machine id that started after the task did belongs to a
//!   newer process (restarted under the same id): the task's executor is gone.
//! - A heartbeat otherwise: alive.
//! - No heartbeat and no subscriber on the executor's channel: its process is gone (the kernel
//!   closed its connections), at once.
//! - No heartbeat while its process still holds the channel (paused, or its Redis writes
//!   failing): gone only once `FRONTMCP_HA_TAKEOVER_GRACE_MS` has passed since this instance
//!   first saw it so.
//! - Redis not answering: not gone (nothing is decided on a guess).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::heartbeat::{channel_of, read_beat, subscribers};
use crate::redis_conn::RedisConn;
use crate::tasks::ExecutorLiveness;

/// Most executors remembered as silent at once; beyond it the memory starts over (a silent
/// executor is then given its grace again, which only delays its tasks' failure).
const MAX_SILENT: usize = 1024;

pub(super) struct TaskLiveness {
    redis: RedisConn,
    key_prefix: String,
    grace: Duration,
    /// Executors seen without a heartbeat but still subscribed, and since when.
    silent_since: Mutex<HashMap<String, Instant>>,
}

impl TaskLiveness {
    pub fn new(redis: RedisConn, key_prefix: &str, grace: Duration) -> Self {
        Self {
            redis,
            key_prefix: key_prefix.to_string(),
            grace,
            silent_since: Mutex::new(HashMap::new()),
        }
    }
}

#[async_trait]
impl ExecutorLiveness for TaskLiveness {
    async fn is_gone(&self, node: &str, spawned_at: u64) -> bool {
        let key = format!("{}heartbeat:{node}", self.key_prefix);
        match read_beat(&self.redis, &key).await {
            Ok(Some(beat)) => {
                self.silent_since.lock().remove(node);
                beat.started_at > spawned_at
            }
            Ok(None) => match subscribers(&self.redis, &channel_of(&self.key_prefix, node)).await {
                Some(0) => {
                    self.silent_since.lock().remove(node);
                    true
                }
                Some(_) => {
                    let mut silent = self.silent_since.lock();
                    if silent.len() >= MAX_SILENT && !silent.contains_key(node) {
                        silent.clear();
                    }
                    let since = *silent.entry(node.to_string()).or_insert_with(Instant::now);
                    since.elapsed() >= self.grace
                }
                // Redis did not answer the count: nothing is decided.
                None => false,
            },
            Err(e) => {
                tracing::debug!(error = %e, executor = node, "cannot read a task executor's heartbeat; presumed alive");
                false
            }
        }
    }
}
