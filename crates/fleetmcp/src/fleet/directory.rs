//! Who serves a stored session this instance does not hold, in distributed mode: the
//! `session::Holders` the fleet installs.
//!
//! The record names its holder (`session.nodeId`). A holder whose heartbeat is in Redis is alive:
//! its requests are relayed to it. A holder whose heartbeat is gone and who holds no subscription
//! on its channel (it stopped, or crashed) is taken over here at once: the contract's on-demand
//! takeover, with its log lines. A holder whose heartbeat expired while its process still holds
//! the subscription is alive but not beating (paused, or its Redis writes failing): it keeps its
//! sessions for `FRONTMCP_HA_TAKEOVER_GRACE_MS` from when this instance first saw it so, and
//! only then is taken over.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::beat::read_beat;
use super::heartbeat::{channel_of, subscribers};
use crate::process_liveness::ProcessLiveness;
use crate::redis_conn::RedisConn;
use crate::session::{Holder, Holders, SessionRecord};

/// Most instances remembered as gone at once; beyond it the memory starts over (which only
/// delays a verdict).
const MAX_GONE: usize = 1024;

pub(super) struct Directory {
    redis: RedisConn,
    me: String,
    key_prefix: String,
    grace: Duration,
    /// Holders seen alive but not beating, and since when.
    silent_since: Mutex<HashMap<String, Instant>>,
    /// Whether a process is gone, for what cannot be taken over (`heartbeat_liveness.rs`).
    processes: Arc<dyn ProcessLiveness>,
    /// How long a stopping instance may keep its streams open after it withdrew from the
    /// fleet (its drain delay and grace period): until then its absence is no proof that its
    /// streams are gone.
    streams_outlive: Duration,
    /// Instances found gone (by `processes`), and since when.
    gone_since: Mutex<HashMap<String, Instant>>,
}

impl Directory {
    pub fn new(
        redis: RedisConn,
        me: &str,
        key_prefix: &str,
        grace: Duration,
        processes: Arc<dyn ProcessLiveness>,
        streams_outlive: Duration,
    ) -> Self {
        Self {
            redis,
            me: me.to_string(),
            key_prefix: key_prefix.to_string(),
            grace,
            silent_since: Mutex::new(HashMap::new()),
            processes,
            streams_outlive,
            gone_since: Mutex::new(HashMap::new()),
        }
    }

    /// A holder with no heartbeat: gone (take over now), or alive but silent (take over once
    /// the grace period has passed since this instance first saw it so).
    async fn without_heartbeat(&self, record: &SessionRecord) -> Holder {
        let holder = &record.holder;
        match subscribers(&self.redis, &channel_of(&self.key_prefix, holder)).await {
            Some(0) => {
                self.silent_since.lock().remove(holder);
                tracing::info!(session_id = %crate::session::LogId(&record.id), previous_node_id = %holder, "[HA] Session owner is gone — the session will be taken over");
                Holder::TakeOver(holder.clone())
            }
            _ => {
                let since = *self
                    .silent_since
                    .lock()
                    .entry(holder.clone())
                    .or_insert_with(Instant::now);
                if since.elapsed() < self.grace {
                    return Holder::Peer(holder.clone());
                }
                tracing::warn!(session_id = %crate::session::LogId(&record.id), previous_node_id = %holder, grace_ms = self.grace.as_millis() as u64, "[HA] Session owner stopped beating and the grace period passed — the session will be taken over");
                Holder::TakeOver(holder.clone())
            }
        }
    }
}

#[async_trait]
impl Holders for Directory {
    async fn holder(&self, record: &SessionRecord) -> Holder {
        if record.holder == self.me {
            return Holder::Here;
        }
        let key = format!("{}heartbeat:{}", self.key_prefix, record.holder);
        match read_beat(&self.redis, &key).await {
            Ok(Some(_)) => {
                self.silent_since.lock().remove(&record.holder);
                Holder::Peer(record.holder.clone())
            }
            Ok(None) => self.without_heartbeat(record).await,
            // Redis cannot say whether the holder lives: the relay tries it, and answers 503
            // with Retry-After if it does not answer, rather than risk two holders.
            Err(e) => {
                tracing::warn!(error = %e, holder = %record.holder, "[HA] cannot read the holder's heartbeat; relaying to it");
                Holder::Peer(record.holder.clone())
            }
        }
    }

    /// A stopping instance withdraws (heartbeat and subscription gone) at the start of its
    /// stop and keeps serving its streams through its drain and grace: only once it has been
    /// absent longer than that (`streams_outlive`, this instance's own, the fleet sharing its
    /// configuration) are its streams certainly gone.
    async fn process_gone(&self, machine_id: &str, since_ms: u64) -> bool {
        if machine_id == self.me || !self.processes.is_gone(machine_id, since_ms).await {
            self.gone_since.lock().remove(machine_id);
            return false;
        }
        let mut gone = self.gone_since.lock();
        if gone.len() >= MAX_GONE && !gone.contains_key(machine_id) {
            gone.clear();
        }
        let first = *gone
            .entry(machine_id.to_string())
            .or_insert_with(Instant::now);
        first.elapsed() >= self.streams_outlive
    }
}
