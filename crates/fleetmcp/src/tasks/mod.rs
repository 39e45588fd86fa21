//! Background tasks (the `io.modelcontextprotocol/tasks` extension of 2026-07-28): a tool
//! that supports tasks answers `tools/call` at once with a task id; the client polls
//! `tasks/get`, answers the task's questions with `tasks/update`, and may `tasks/cancel` it.
//!
//! The record of a task (status, result or error, pending questions) lives behind
//! [`TaskStore`] so that a fleet can share it (Redis comes with the HA work); what only the
//! running instance can hold (the handler's cancel token, the channels its questions wait
//! on) lives in [`Running`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// The extension's identifier in `capabilities.extensions`.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Whether a tool runs as a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// Always answers synchronously.
    #[default]
    Forbidden,
    /// Runs as a task when the client declared the extension, synchronously otherwise.
    Optional,
    /// Only as a task: a client without the extension gets `-32021`.
    Required,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    pub task_id: String,
    pub status: TaskStatus,
    /// ISO 8601.
    pub created_at: String,
    pub last_updated_at: String,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    /// The tool's result, once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The protocol error, once failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// Questions waiting for the client, by key, while `input_required`.
    #[serde(skip_serializing_if = "Map::is_empty", default)]
    pub input_requests: Map<String, Value>,
    /// The session that created it (2025-11-25 tasks are bound to their session).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub owner: Option<String>,
}

/// Where task records live.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    async fn put(&self, record: &TaskRecord);
    async fn get(&self, task_id: &str) -> Option<TaskRecord>;
    /// The live tasks of an owner (a session), oldest first.
    async fn list(&self, owner: &str) -> Vec<TaskRecord>;
}

/// Task records in memory, each dropped `ttl_ms` after its creation.
#[derive(Default)]
pub struct MemoryTaskStore {
    records: Mutex<HashMap<String, (TaskRecord, Instant)>>,
}

#[async_trait]
impl TaskStore for MemoryTaskStore {
    async fn put(&self, record: &TaskRecord) {
        let mut map = self.records.lock();
        let now = Instant::now();
        map.retain(|_, (_, expires)| *expires > now);
        let expires = map
            .get(&record.task_id)
            .map(|(_, e)| *e)
            .unwrap_or_else(|| now + Duration::from_millis(record.ttl_ms));
        map.insert(record.task_id.clone(), (record.clone(), expires));
    }

    async fn get(&self, task_id: &str) -> Option<TaskRecord> {
        let map = self.records.lock();
        map.get(task_id)
            .filter(|(_, e)| *e > Instant::now())
            .map(|(r, _)| r.clone())
    }

    async fn list(&self, owner: &str) -> Vec<TaskRecord> {
        let now = Instant::now();
        let mut out: Vec<TaskRecord> = self
            .records
            .lock()
            .values()
            .filter(|(r, e)| *e > now && r.owner.as_deref() == Some(owner))
            .map(|(r, _)| r.clone())
            .collect();
        out.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.task_id.cmp(&b.task_id))
        });
        out
    }
}

/// What the instance running a task holds for it.
pub(crate) struct Running {
    pub cancel: CancellationToken,
    /// Questions waiting for `tasks/update`, by key.
    pub waiting: Mutex<HashMap<String, oneshot::Sender<Value>>>,
}

/// Tasks running on this instance.
#[derive(Default)]
pub(crate) struct Runner {
    running: Mutex<HashMap<String, Arc<Running>>>,
}

impl Runner {
    pub fn start(&self, task_id: &str, cancel: CancellationToken) -> Arc<Running> {
        let r = Arc::new(Running {
            cancel,
            waiting: Mutex::new(HashMap::new()),
        });
        self.running.lock().insert(task_id.to_string(), r.clone());
        r
    }
    pub fn get(&self, task_id: &str) -> Option<Arc<Running>> {
        self.running.lock().get(task_id).cloned()
    }
    pub fn finish(&self, task_id: &str) {
        self.running.lock().remove(task_id);
    }
}

pub(crate) fn now_iso() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    iso8601(d.as_secs(), d.subsec_millis())
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` from Unix seconds (civil-from-days, proleptic Gregorian).
fn iso8601(secs: u64, millis: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_798_502_400, 5), "2026-12-29T00:00:00.005Z");
        assert_eq!(iso8601(951_782_400, 0), "2000-02-29T00:00:00.000Z");
    }

    #[tokio::test]
    async fn records_round_trip_until_their_ttl() {
        let store = MemoryTaskStore::default();
        let rec = TaskRecord {
            task_id: "t".into(),
            status: TaskStatus::Working,
            created_at: now_iso(),
            last_updated_at: now_iso(),
            ttl_ms: 50,
            poll_interval_ms: 100,
            result: None,
            error: None,
            input_requests: Map::new(),
            owner: Some("s".into()),
        };
        store.put(&rec).await;
        assert_eq!(store.list("s").await.len(), 1);
        assert!(store.list("other").await.is_empty());
        assert_eq!(store.get("t").await, Some(rec));
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(store.get("t").await, None);
    }
}
