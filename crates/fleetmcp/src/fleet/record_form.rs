//! Whether every running instance of the fleet reads session records in the compact form
//! (without `session.id`: `session/redis/form.rs`), from their heartbeats. Each instance of
//! this version says so in its own (`compactRecords: true`); an earlier version's heartbeat
//! has no such field, and that version deletes a compact record it reads. So an instance writes
//! the full form until a reading of the fleet finds no heartbeat without it, then the compact
//! one for the rest of its life (a switch back would not rewrite the records already compact).
//!
//! A reading: one `ZRANGEBYSCORE` of `<haPrefix>nodes` (every instance not stopped gracefully:
//! those score 0 there), then one `GET` of each one's heartbeat, sent together (different slots
//! of a cluster). An instance without a heartbeat is stopped or crashed and reads nothing,
//! unless it beat within the heartbeat's lifetime (its key should still be there: not known
//! yet, so not yet). Any failure answers "not yet". Made at this instance's first beat, then
//! every [`READ_EVERY`] beats until it switches, and never after: once a fleet of this version
//! is all there, it costs nothing.
//!
//! While older instances still beat (a rolling upgrade of I instances can take an hour), a full
//! reading costs 1 + I commands, and every new instance makes one each [`READ_EVERY`] beats: I²
//! over the fleet. So a reading that finds older instances remembers one of them, picked at
//! random (so that the fleet does not watch the same one), and the next reading first reads that
//! one's heartbeat alone: while it still beats without the field, that one `GET` is the answer.
//! Only when it is gone does an instance read the whole fleet again (about ln I times over an
//! upgrade, not once a minute).

use parking_lot::Mutex;
use rand::seq::IndexedRandom;

use super::beat::{heartbeat_key, nodes_key, read_beat};
use crate::redis_conn::{CommandError, RedisConn};
use crate::session::RecordForm;

/// Beats between two readings of the fleet while this instance writes the full form (a minute
/// at the default 10 s interval).
pub(super) const READ_EVERY: u32 = 6;

/// This instance's following of the fleet's record form: which older instance it saw last.
#[derive(Default)]
pub(super) struct Follower {
    /// The machine id of an instance whose heartbeat lacked `compactRecords` at the last
    /// reading: read first, alone, at the next.
    older: Mutex<Option<String>>,
}

impl Follower {
    /// After this instance's `beats`-th beat (counting from 1): reads the fleet when due and
    /// this instance still writes the full form, and switches to the compact one when every
    /// running instance reads it.
    pub(super) async fn follow(
        &self,
        redis: &RedisConn,
        ha_prefix: &str,
        heartbeat_ttl_ms: u64,
        beats: u32,
        now: u64,
    ) {
        let form = redis.shared::<RecordForm>();
        if form.compact() || beats % READ_EVERY != 1 % READ_EVERY {
            return;
        }
        match self
            .every_instance_reads_compact(redis, ha_prefix, heartbeat_ttl_ms, now)
            .await
        {
            Ok(true) => {
                form.write_compact();
                tracing::info!(
                    "[HA] every running instance reads compact session records; writing them from now on"
                );
            }
            Ok(false) => {}
            Err(e) => {
                tracing::debug!(error = %e, "[HA] the fleet's heartbeats were not read; session records stay in the full form")
            }
        }
    }

    /// Whether the heartbeat of every instance that may be running says it reads compact
    /// records: the older instance seen last first, alone, then the whole fleet.
    async fn every_instance_reads_compact(
        &self,
        redis: &RedisConn,
        ha_prefix: &str,
        heartbeat_ttl_ms: u64,
        now: u64,
    ) -> Result<bool, CommandError> {
        let seen = self.older.lock().clone();
        if let Some(node) = seen
            && read_beat(redis, &heartbeat_key(ha_prefix, &node))
                .await?
                .is_some_and(|b| !b.compact_records)
        {
            return Ok(false);
        }
        let nodes: Vec<(String, f64)> = redis
            .run(
                redis::cmd("ZRANGEBYSCORE")
                    .arg(nodes_key(ha_prefix))
                    .arg("(0")
                    .arg("+inf")
                    .arg("WITHSCORES")
                    .clone(),
            )
            .await?;
        let keys: Vec<String> = nodes
            .iter()
            .map(|(node, _)| heartbeat_key(ha_prefix, node))
            .collect();
        let reads = keys.iter().map(|key| read_beat(redis, key));
        let beats = futures_util::future::try_join_all(reads).await?;
        let mut older = Vec::new();
        let mut all = true;
        for ((node, last_beat), beat) in nodes.iter().zip(beats) {
            match beat {
                Some(beat) if !beat.compact_records => {
                    older.push(node);
                    all = false;
                }
                Some(_) => {}
                // Stopped or crashed, unless it beat within the heartbeat's lifetime.
                None => all &= (*last_beat as u64).saturating_add(heartbeat_ttl_ms) <= now,
            }
        }
        *self.older.lock() = older.choose(&mut rand::rng()).map(|n| n.to_string());
        Ok(all)
    }
}
