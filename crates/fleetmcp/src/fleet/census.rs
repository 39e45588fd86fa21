//! The operator's view of the fleet, read from Redis: every instance that beat, whether it is
//! alive, when it started, how old its last beat is, where it is reached, the sessions its
//! index holds (orphaned when it is gone) and the unfinished background tasks it runs.
//!
//! Read-only, and from the indexes only (never `KEYS`, no `SCAN` of the keyspace): one
//! `ZREVRANGE` of `<haPrefix>nodes` (the [`MAX_NODES`] most recent), then one pipeline with, per
//! instance, a `GET` of its heartbeat, a `GET` of its session index's bucket count and an
//! `SCARD` of its task index, then one with a `ZCARD` of each bucket of each session index (and
//! of the single index of versions before the buckets: `session/index.rs`). Each call is
//! bounded by the connection's command timeout.

use super::beat::{Beat, nodes_key};
use crate::clock::unix_ms;
use crate::config::Config;
use crate::redis_conn::{CommandError, RedisConn};

/// Most instances read (the most recently beating first).
pub const MAX_NODES: usize = 1000;

/// One instance of the fleet, as Redis knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub machine_id: String,
    /// Its heartbeat is there: it is running (a stopped or crashed one's heartbeat is gone).
    pub alive: bool,
    /// When its process started (Unix ms), from its heartbeat; `None` once it is gone.
    pub started_at: Option<u64>,
    /// Its last beat (Unix ms): from its heartbeat, else its score in `<haPrefix>nodes`;
    /// `None` once it stopped gracefully (its stop scores it 0 there, see `scanner.rs`).
    pub last_beat: Option<u64>,
    /// `host:port` where the others relay to it, from its heartbeat.
    pub address: Option<String>,
    /// Sessions in its index (`<prefix>node:<nodeId>:sessions:<n>`): held if it is alive, orphaned
    /// (waiting for the orphan scanner, or a takeover) if it is gone.
    pub sessions: u64,
    /// Unfinished background tasks it runs (`<prefix>task:executor:<nodeId>`).
    pub tasks: u64,
}

/// The fleet at one moment.
#[derive(Debug, Clone)]
pub struct Census {
    /// When it was read (Unix ms).
    pub at: u64,
    /// Alive first, then by machine id.
    pub instances: Vec<Instance>,
}

impl Census {
    /// Sessions whose holder is gone.
    pub fn orphaned_sessions(&self) -> u64 {
        self.instances
            .iter()
            .filter(|i| !i.alive)
            .map(|i| i.sessions)
            .sum()
    }
}

/// Reads the fleet that shares `redis` under `config`'s key prefixes.
pub(crate) async fn read(redis: &RedisConn, config: &Config) -> Result<Census, CommandError> {
    let ha_prefix = &config.ha.key_prefix;
    let key_prefix = &redis.config().key_prefix;
    let nodes: Vec<(String, f64)> = redis
        .run(
            redis::cmd("ZREVRANGE")
                .arg(nodes_key(ha_prefix))
                .arg(0)
                .arg(MAX_NODES - 1)
                .arg("WITHSCORES")
                .clone(),
        )
        .await?;
    let mut instances = Vec::with_capacity(nodes.len());
    if !nodes.is_empty() {
        // One command per key (each in its own slot of a cluster), all sent together.
        let reads = nodes.iter().map(|(node, _)| async move {
            let mut beat = redis::cmd("GET");
            beat.arg(format!("{ha_prefix}heartbeat:{node}"));
            let mut sessions = redis::cmd("GET");
            sessions.arg(redis.config().node_index_buckets_key(node));
            let mut tasks = redis::cmd("SCARD");
            tasks.arg(crate::tasks::executor_index_key(key_prefix, node));
            futures_util::try_join!(
                redis.run::<redis::Value>(beat),
                redis.run::<redis::Value>(sessions),
                redis.run::<redis::Value>(tasks)
            )
        });
        let answers = futures_util::future::try_join_all(reads).await?;
        let counts = nodes
            .iter()
            .zip(&answers)
            .map(|((node, _), (_, buckets, _))| {
                let buckets = redis::from_redis_value_ref::<Option<u32>>(buckets)
                    .ok()
                    .flatten()
                    .unwrap_or(1)
                    .clamp(1, crate::session::index::MAX_BUCKETS);
                let cards = crate::session::index::keys(redis, node, buckets)
                    .into_iter()
                    .map(|key| redis.run::<u64>(redis::cmd("ZCARD").arg(key).clone()));
                futures_util::future::try_join_all(cards)
            });
        let counts = futures_util::future::try_join_all(counts).await?;
        for (((machine_id, score), (beat, _, tasks)), cards) in
            nodes.into_iter().zip(&answers).zip(counts)
        {
            let beat: Option<Beat> = redis::from_redis_value_ref::<Option<String>>(beat)
                .ok()
                .flatten()
                .and_then(|b| serde_json::from_str(&b).ok());
            let sessions = cards.iter().sum();
            let tasks = redis::from_redis_value_ref::<u64>(tasks).unwrap_or(0);
            instances.push(Instance {
                alive: beat.is_some(),
                started_at: beat.as_ref().map(|b| b.started_at),
                last_beat: beat
                    .as_ref()
                    .map(|b| b.last_beat)
                    .or((score > 0.0).then_some(score as u64)),
                address: beat.and_then(|b| b.address),
                machine_id,
                sessions,
                tasks,
            });
        }
    }
    instances.sort_by(|a, b| {
        b.alive
            .cmp(&a.alive)
            .then_with(|| a.machine_id.cmp(&b.machine_id))
    });
    Ok(Census {
        at: unix_ms(),
        instances,
    })
}
