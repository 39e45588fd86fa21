//! Whether another instance's process is gone, judged from its heartbeat and its channel: the
//! `process_liveness::ProcessLiveness` the fleet installs, for background tasks (is a task's
//! executor gone?) and for SSE answers kept for resumption (is the stream's writer gone?),
//! with the same evidence as session takeover (`directory.rs`, `relay/`).
//!
//! - A heartbeat under the machine id that started after the work did belongs to a newer
//!   process (restarted under the same id): the work's process is gone.
//! - Neither a heartbeat nor a subscriber on its channel: gone, at once (it stopped, or its
//!   key expired and the kernel closed its connections).
//! - A heartbeat but no subscriber: gone only once `FRONTMCP_HA_TAKEOVER_GRACE_MS` has passed
//!   since this instance first saw it so. A SIGKILLed process's key outlives it by up to the
//!   heartbeat lifetime, but so does a live instance's whose subscription dropped with a Redis
//!   restart or a broken link, and which subscribes again within a quarter second of Redis answering
//!   (`subscription.rs`). Sessions need not wait (their holder's lease holds only while its
//!   subscription is up, `Lease::set_present`, so the relay takes them over at once); work
//!   that runs on regardless of the subscription does: a task's handler, an SSE answer's
//!   writer. Judged gone at once, such work was failed while it ran and then finished (F6 in
//!   docs/RELIABILITY.md).
//! - No heartbeat while its process still holds the channel (paused, or its Redis writes
//!   failing): gone, likewise, once the grace has passed.
//! - A heartbeat and a subscriber: alive.
//! - Work started less than two seconds ago (or the grace, if shorter): not gone on absence
//!   alone. Its process reached Redis when it stored the work, and may be back from an outage
//!   that expired its heartbeat and dropped its subscription, not beating or subscribed again
//!   yet (the fault harness found a task failed 0.3 s after its live executor created it so).
//! - Redis not answering: not gone (nothing is decided on a guess).
//! - This instance back from an outage less than [`RECOVERY`] ago (its own lease has not held
//!   that long): not gone on absence alone. An outage of Redis as a whole (a restart, or a
//!   pause past the heartbeat's lifetime) takes every instance's heartbeat and subscription
//!   at once, and the first instance back would otherwise judge the others before they are
//!   back too (the fault harness found a scanner failing a live instance's task so). The
//!   orphan scanner (`scanner.rs`) waits likewise.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::beat::read_beat;
use super::heartbeat::{channel_of, subscribers};
use crate::process_liveness::ProcessLiveness;
use crate::redis_conn::RedisConn;
use crate::session::Lease;

/// How long a live instance may take to show itself again once Redis answers it: it beats
/// again within half a second (`mod.rs`) and subscribes again within a quarter second
/// (`subscription.rs`), given a margin for its connections to be made again. Work stored
/// less than this ago is not judged by a missing heartbeat or subscription, and an instance
/// judges none by absence until its own lease has held this long.
pub(super) const RECOVERY: Duration = Duration::from_secs(2);

/// Whether this instance has been back long enough to take another's absence for its death:
/// its lease (heartbeat written, subscription up) has held for [`RECOVERY`].
pub(super) fn settled(lease: &Lease) -> bool {
    lease.held_for().is_some_and(|held| held >= RECOVERY)
}

/// Most instances remembered as silent at once; beyond it the memory starts over (a silent
/// instance is then given its grace again, which only delays the verdict).
const MAX_SILENT: usize = 1024;

pub(super) struct HeartbeatLiveness {
    redis: RedisConn,
    key_prefix: String,
    grace: Duration,
    /// This instance's own lease: see [`settled`].
    lease: Arc<Lease>,
    /// Instances seen without a heartbeat or without a subscriber (not both), and since when.
    silent_since: Mutex<HashMap<String, Instant>>,
}

impl HeartbeatLiveness {
    pub fn new(redis: RedisConn, key_prefix: &str, grace: Duration, lease: Arc<Lease>) -> Self {
        Self {
            redis,
            key_prefix: key_prefix.to_string(),
            grace,
            lease,
            silent_since: Mutex::new(HashMap::new()),
        }
    }
}

#[async_trait]
impl ProcessLiveness for HeartbeatLiveness {
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
        let absent = match subscribers(&self.redis, &channel_of(&self.key_prefix, node)).await {
            Some(0) if beat.is_none() => {
                self.silent_since.lock().remove(node);
                true
            }
            Some(n) if n > 0 && beat.is_some() => {
                self.silent_since.lock().remove(node);
                false
            }
            // One of the two is missing: gone once it has been so for the grace (the clock
            // starts at the first sight, fresh work or not).
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
        };
        // Its process reached Redis to store this work a moment ago: a missing heartbeat or
        // subscription may date from an outage it has just come back from (its heartbeat
        // expired, it has not beaten or subscribed again yet).
        let fresh = RECOVERY.min(self.grace).as_millis() as u64;
        absent && crate::clock::unix_ms().saturating_sub(since) >= fresh && settled(&self.lease)
    }
}
