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
use std::time::{Duration, Instant};

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

/// How long a finished task stays readable, and how often clients should poll.
const TASK_TTL_MS: u64 = 3_600_000;
const POLL_INTERVAL_MS: u64 = 500;

/// The tasks of this server: their records (shared through the store) and those running on
/// this instance.
pub(crate) struct Tasks {
    store: Arc<dyn TaskStore>,
    running: Mutex<HashMap<String, Arc<Running>>>,
}

impl Tasks {
    pub fn new(store: Arc<dyn TaskStore>) -> Self {
        Self {
            store,
            running: Mutex::new(HashMap::new()),
        }
    }

    /// Creates a working task (bound to `owner`, a session, when given), stores its record
    /// before anyone can ask for it, and registers it as running here until [`Tasks::end`].
    pub async fn begin(
        &self,
        owner: Option<String>,
        cancel: CancellationToken,
    ) -> (TaskRecord, Arc<Running>) {
        let now = crate::clock::iso_now();
        let record = TaskRecord {
            task_id: uuid::Uuid::new_v4().to_string(),
            status: TaskStatus::Working,
            created_at: now.clone(),
            last_updated_at: now,
            ttl_ms: TASK_TTL_MS,
            poll_interval_ms: POLL_INTERVAL_MS,
            result: None,
            error: None,
            input_requests: Map::new(),
            owner,
        };
        self.store.put(&record).await;
        let running = Arc::new(Running {
            cancel,
            waiting: Mutex::new(HashMap::new()),
        });
        self.running
            .lock()
            .insert(record.task_id.clone(), running.clone());
        (record, running)
    }

    /// Records how a task ended (unless it already had, e.g. cancelled) and forgets it here.
    pub async fn end(&self, task_id: &str, outcome: impl FnOnce(&mut TaskRecord)) {
        if let Some(mut record) = self.store.get(task_id).await
            && !record.status.is_terminal()
        {
            record.input_requests.clear();
            outcome(&mut record);
            self.update(record).await;
        }
        self.running.lock().remove(task_id);
    }

    /// Parks a task on questions for the client: registers a waiter per question and shows
    /// them on the record (`input_required`). Returns the receivers of the answers, in order.
    pub async fn park(
        &self,
        task_id: &str,
        running: &Running,
        questions: Vec<(String, String, Value)>,
    ) -> Vec<oneshot::Receiver<Value>> {
        let mut receivers = Vec::with_capacity(questions.len());
        let mut shown = Map::new();
        {
            let mut waiting = running.waiting.lock();
            for (key, method, params) in questions {
                let (tx, rx) = oneshot::channel();
                waiting.insert(key.clone(), tx);
                shown.insert(key, serde_json::json!({"method": method, "params": params}));
                receivers.push(rx);
            }
        }
        if let Some(mut record) = self.store.get(task_id).await
            && !record.status.is_terminal()
        {
            record.status = TaskStatus::InputRequired;
            record.input_requests.extend(shown);
            self.update(record).await;
        }
        receivers
    }

    /// A task's record.
    pub async fn get(&self, task_id: &str) -> Option<TaskRecord> {
        self.store.get(task_id).await
    }

    /// The live tasks of a session, oldest first.
    pub async fn list(&self, owner: &str) -> Vec<TaskRecord> {
        self.store.list(owner).await
    }

    /// Writes a changed record, stamping `lastUpdatedAt`.
    pub async fn update(&self, mut record: TaskRecord) {
        record.last_updated_at = crate::clock::iso_now();
        self.store.put(&record).await;
    }

    /// What this instance holds for a task running here.
    pub fn running(&self, task_id: &str) -> Option<Arc<Running>> {
        self.running.lock().get(task_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_round_trip_until_their_ttl() {
        let store = MemoryTaskStore::default();
        let rec = TaskRecord {
            task_id: "t".into(),
            status: TaskStatus::Working,
            created_at: crate::clock::iso_now(),
            last_updated_at: crate::clock::iso_now(),
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
