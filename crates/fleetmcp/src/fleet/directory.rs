//! Who serves a stored session this instance does not hold, in distributed mode: the
//! `session::Ownership` the fleet installs.
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

use super::heartbeat::{channel_of, read_beat, subscribers};
use crate::liveness::ProcessLiveness;
use crate::redis_conn::RedisConn;
use crate::session::{Owner, Ownership, SessionRecord};

pub(super) struct Directory {
    redis: RedisConn,
    me: String,
    key_prefix: String,
    grace: Duration,
    /// Holders seen alive but not beating, and since when.
    silent_since: Mutex<HashMap<String, Instant>>,
    /// Whether a process is gone, for what cannot be taken over (`liveness.rs`).
    processes: Arc<dyn ProcessLiveness>,
}

impl Directory {
    pub fn new(
        redis: RedisConn,
        me: &str,
        key_prefix: &str,
        grace: Duration,
        processes: Arc<dyn ProcessLiveness>,
    ) -> Self {
        Self {
            redis,
            me: me.to_string(),
            key_prefix: key_prefix.to_string(),
            grace,
            silent_since: Mutex::new(HashMap::new()),
            processes,
        }
    }

    /// A holder with no heartbeat: gone (take over now), or alive but silent (take over once
    /// the grace period has passed since this instance first saw it so).
    async fn without_heartbeat(&self, record: &SessionRecord) -> Owner {
        let node = &record.node_id;
        match subscribers(&self.redis, &channel_of(&self.key_prefix, node)).await {
            Some(0) => {
                self.silent_since.lock().remove(node);
                tracing::info!(session_id = %crate::session::LogId(&record.id), previous_node_id = %node, "[HA] Session owner is gone — the session will be taken over");
                Owner::TakeOver(node.clone())
            }
            _ => {
                let since = *self
                    .silent_since
                    .lock()
                    .entry(node.clone())
                    .or_insert_with(Instant::now);
                if since.elapsed() < self.grace {
                    return Owner::Peer(node.clone());
                }
                tracing::warn!(session_id = %crate::session::LogId(&record.id), previous_node_id = %node, grace_ms = self.grace.as_millis() as u64, "[HA] Session owner stopped beating and the grace period passed — the session will be taken over");
                Owner::TakeOver(node.clone())
            }
        }
    }
}

#[async_trait]
impl Ownership for Directory {
    async fn owner(&self, record: &SessionRecord) -> Owner {
        if record.node_id == self.me {
            return Owner::Here;
        }
        let key = format!("{}heartbeat:{}", self.key_prefix, record.node_id);
        match read_beat(&self.redis, &key).await {
            Ok(Some(_)) => {
                self.silent_since.lock().remove(&record.node_id);
                Owner::Peer(record.node_id.clone())
            }
            Ok(None) => self.without_heartbeat(record).await,
            // Redis cannot say whether the holder lives: the relay tries it, and answers 503
            // with Retry-After if it does not answer, rather than risk two holders.
            Err(e) => {
                tracing::warn!(error = %e, holder = %record.node_id, "[HA] cannot read the holder's heartbeat; relaying to it");
                Owner::Peer(record.node_id.clone())
            }
        }
    }

    async fn process_gone(&self, node: &str, since_ms: u64) -> bool {
        node != self.me && self.processes.is_gone(node, since_ms).await
    }
}
