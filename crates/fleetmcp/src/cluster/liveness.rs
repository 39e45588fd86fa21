//! Whether another instance's process is gone: the `liveness::ProcessLiveness` the cluster
//! installs, for background tasks (is a task's executor gone?) and for SSE answers kept for
//! resumption (is the stream's writer gone?), with the same evidence as session takeover
//! (`directory.rs`, `relay.rs`).
//!
//! - A heartbeat under the machine id that started after the work did belongs to a newer
//!   process (restarted under the same id): the work's process is gone.
//! - No subscriber on the instance's channel: its process is gone (the kernel closed its
//!   connections), at once, whether or not its heartbeat key has expired yet (a SIGKILLed
//!   process's key outlives it by up to the heartbeat lifetime). A live instance whose
//!   subscription is down is not serving either: its lease holds only while it is up
//!   (`Lease::set_present`), and the relay takes its sessions over on the same evidence.
//! - No heartbeat while its process still holds the channel (paused, or its Redis writes
//!   failing): gone only once `FRONTMCP_HA_TAKEOVER_GRACE_MS` has passed since this instance
//!   first saw it so.
//! - A heartbeat and a subscriber: alive.
//! - Redis not answering: not gone (nothing is decided on a guess).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::heartbeat::{channel_of, read_beat, subscribers};
use crate::liveness::ProcessLiveness;
use crate::redis_conn::RedisConn;

/// Most instances remembered as silent at once; beyond it the memory starts over (a silent
/// instance is then given its grace again, which only delays the verdict).
const MAX_SILENT: usize = 1024;

pub(super) struct Liveness {
    redis: RedisConn,
    key_prefix: String,
    grace: Duration,
    /// Instances seen without a heartbeat but still subscribed, and since when.
    silent_since: Mutex<HashMap<String, Instant>>,
}

impl Liveness {
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
impl ProcessLiveness for Liveness {
    async fn is_gone(&self, node: &str, since: u64) -> bool {
        let key = format!("{}heartbeat:{node}", self.key_prefix);
        let beat = match read_beat(&self.redis, &key).await {
            Ok(beat) => beat,
            Err(e) => {
                tracing::debug!(error = %e, node, "cannot read an instance's heartbeat; presumed alive");
                return false;
            }
        };
        if beat.as_ref().is_some_and(|b| b.started_at > since) {
            self.silent_since.lock().remove(node);
            return true;
        }
        match subscribers(&self.redis, &channel_of(&self.key_prefix, node)).await {
            Some(0) => {
                self.silent_since.lock().remove(node);
                true
            }
            Some(_) if beat.is_some() => {
                self.silent_since.lock().remove(node);
                false
            }
            Some(_) => {
                let mut silent = self.silent_since.lock();
                if silent.len() >= MAX_SILENT && !silent.contains_key(node) {
                    silent.clear();
                }
                let first = *silent.entry(node.to_string()).or_insert_with(Instant::now);
                first.elapsed() >= self.grace
            }
            // Redis did not answer the count: nothing is decided.
            None => false,
        }
    }
}
