//! What an instance's heartbeat says (`<prefix>heartbeat:<nodeId>`) and where every instance's
//! last beat is kept (`<haPrefix>nodes`): read by the heartbeat that writes them, by the orphan
//! scanner, the census and `record_form.rs`, so it sits apart from all of them.

use serde::{Deserialize, Serialize};

use crate::redis_conn::{CommandError, RedisConn};

/// The heartbeat record: `{nodeId, startedAt, lastBeat, sessionCount, address, compactRecords}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Beat {
    /// The beating instance's machine id (`nodeId` in the contract's record).
    #[serde(rename = "nodeId")]
    pub(super) machine_id: String,
    /// When the beating process started (Unix ms): a newer one under the same id has a later one.
    pub(super) started_at: u64,
    pub(super) last_beat: u64,
    pub(super) session_count: usize,
    /// `host:port` where other instances relay this one's sessions' requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// This instance reads session records without `session.id` (always `true` here; absent,
    /// hence `false`, in an earlier version's heartbeat: `record_form.rs`).
    #[serde(default)]
    pub(super) compact_records: bool,
}

/// `<haPrefix>nodes`: a sorted set of every instance that beat, scored by its last beat (Unix
/// ms), or 0 once it stopped gracefully. An instance stays in it after it stops, until the
/// orphan scanner has claimed its sessions.
pub(super) fn nodes_key(key_prefix: &str) -> String {
    format!("{key_prefix}nodes")
}

/// The heartbeat at `key` (`<prefix>heartbeat:<nodeId>`): `None` when the instance stopped or
/// its key expired; an error when Redis did not answer.
pub(super) async fn read_beat(redis: &RedisConn, key: &str) -> Result<Option<Beat>, CommandError> {
    let raw: Option<String> = redis.run(redis::cmd("GET").arg(key).clone()).await?;
    Ok(raw.and_then(|r| serde_json::from_str(&r).ok()))
}

/// `<haPrefix>heartbeat:<node>`: instance `node`'s heartbeat.
pub(super) fn heartbeat_key(ha_prefix: &str, node: &str) -> String {
    format!("{ha_prefix}heartbeat:{node}")
}
