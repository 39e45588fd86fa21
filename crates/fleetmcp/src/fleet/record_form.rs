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

use super::beat::{Beat, nodes_key};
use crate::redis_conn::{CommandError, RedisConn};
use crate::session::RecordForm;

/// Beats between two readings of the fleet while this instance writes the full form (a minute
/// at the default 10 s interval).
pub(super) const READ_EVERY: u32 = 6;

/// After this instance's `beats`-th beat (counting from 1): reads the fleet when due and this
/// instance still writes the full form, and switches to the compact one when every running
/// instance reads it.
pub(super) async fn follow(
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
    match every_instance_reads_compact(redis, ha_prefix, heartbeat_ttl_ms, now).await {
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

/// Whether the heartbeat of every instance that may be running says it reads compact records.
async fn every_instance_reads_compact(
    redis: &RedisConn,
    ha_prefix: &str,
    heartbeat_ttl_ms: u64,
    now: u64,
) -> Result<bool, CommandError> {
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
    let reads = nodes.iter().map(|(node, _)| {
        redis.run::<Option<String>>(
            redis::cmd("GET")
                .arg(format!("{ha_prefix}heartbeat:{node}"))
                .clone(),
        )
    });
    let beats = futures_util::future::try_join_all(reads).await?;
    Ok(nodes
        .iter()
        .zip(beats)
        .all(|((_, last_beat), beat)| match beat {
            Some(raw) => serde_json::from_str::<Beat>(&raw).is_ok_and(|b| b.compact_records),
            None => (*last_beat as u64).saturating_add(heartbeat_ttl_ms) <= now,
        }))
}
