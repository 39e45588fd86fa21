//! Who serves a stored session this instance does not hold, in distributed mode: the
//! `session::Ownership` the cluster installs.
//!
//! The record names its holder (`session.nodeId`). A holder whose heartbeat is in Redis is alive:
//! its requests are relayed to it. A holder whose heartbeat is gone (it stopped, or its key
//! expired after a crash) is taken over here at once: the contract's on-demand takeover, with
//! its log lines.

use async_trait::async_trait;

use super::heartbeat::read_beat;
use crate::redis_conn::RedisConn;
use crate::session::{Owner, Ownership, SessionRecord};

pub(super) struct Directory {
    redis: RedisConn,
    me: String,
    /// `<prefix>heartbeat:`
    heartbeat_prefix: String,
}

impl Directory {
    pub fn new(redis: RedisConn, me: &str, key_prefix: &str) -> Self {
        Self {
            redis,
            me: me.to_string(),
            heartbeat_prefix: format!("{key_prefix}heartbeat:"),
        }
    }
}

#[async_trait]
impl Ownership for Directory {
    async fn owner(&self, record: &SessionRecord) -> Owner {
        if record.node_id == self.me {
            return Owner::Here;
        }
        let key = format!("{}{}", self.heartbeat_prefix, record.node_id);
        match read_beat(&self.redis, &key).await {
            Ok(Some(_)) => Owner::Peer(record.node_id.clone()),
            Ok(None) => {
                tracing::info!(session_id = %record.id, previous_node_id = %record.node_id, "[HA] Session owner is gone — the session will be taken over");
                Owner::TakeOver(record.node_id.clone())
            }
            // Redis cannot say whether the holder lives: the relay tries it, and answers 503
            // with Retry-After if it does not answer, rather than risk two holders.
            Err(e) => {
                tracing::warn!(error = %e, holder = %record.node_id, "[HA] cannot read the holder's heartbeat; relaying to it");
                Owner::Peer(record.node_id.clone())
            }
        }
    }
}
