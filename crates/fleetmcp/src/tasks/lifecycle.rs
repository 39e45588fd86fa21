//! [`Tasks`]: the tasks of this server, from the start of a task to its end. Their records go
//! through a [`TaskStore`] (shared by a fleet); what only the instance running a task holds
//! (its cancel token, the questions it waits on) stays here in [`RunningTask`]. In a fleet it also
//! ends as `failed` the tasks whose executor is gone ([`ProcessLiveness`]), and follows the
//! cancels and answers other instances send to the tasks running here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

#[cfg(feature = "redis")]
use super::CancelSignal;
use super::memory::serialized_len;
use super::{
    EXECUTOR_GONE_MESSAGE, Executor, ProcessLiveness, TaskQuota, TaskRecord, TaskStatus, TaskStore,
    TaskStoreError, TaskStoreFull,
};
use crate::config::TaskConfig;
use crate::protocol::{ErrorCode, ErrorData, errors};

/// What the instance running a task holds for it.
pub(crate) struct RunningTask {
    pub cancel: CancellationToken,
    /// Questions waiting for `tasks/update`, by key.
    pub waiting: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// The session the task belongs to (where its record is filed).
    pub owner: Option<String>,
}

/// How often clients should poll a task.
const POLL_INTERVAL_MS: u64 = 500;

/// This instance among those sharing the store: what it stamps on the tasks it runs, and how
/// it tells whether another task's executor is gone.
struct Shared {
    node: String,
    liveness: Option<Arc<dyn ProcessLiveness>>,
}

/// The tasks of this server: their records (shared through the store) and those running on
/// this instance.
pub(crate) struct Tasks {
    store: Arc<dyn TaskStore>,
    running: Mutex<HashMap<String, Arc<RunningTask>>>,
    /// `ttlMs` of every task.
    ttl_ms: u64,
    /// Largest record a finished task may leave (`tasks.max_result_bytes`).
    max_result_bytes: usize,
    /// Set when the store is shared with other instances.
    shared: Option<Shared>,
}

impl Tasks {
    pub fn new(store: Arc<dyn TaskStore>, cfg: &TaskConfig) -> Self {
        Self {
            store,
            running: Mutex::new(HashMap::new()),
            ttl_ms: cfg.ttl_ms,
            max_result_bytes: cfg.max_result_bytes,
            shared: None,
        }
    }

    /// The store is shared with other instances: tasks started here name `node` as their
    /// executor, and `liveness` (when the fleet provides it) tells when another task's
    /// executor is gone.
    pub fn shared(mut self, node: &str, liveness: Option<Arc<dyn ProcessLiveness>>) -> Self {
        self.shared = Some(Shared {
            node: node.to_string(),
            liveness,
        });
        self
    }

    /// Creates a working task (bound to `owner`, a session, when given, and to `principal`, the
    /// fingerprint of its caller, with authorization on), stores its record before anyone can
    /// ask for it, and registers it as running here until [`Tasks::end`]. A store with no room
    /// for it refuses it: the caller answers the error and nothing runs.
    #[cfg(test)]
    pub async fn begin(
        &self,
        owner: Option<String>,
        principal: Option<String>,
        cancel: CancellationToken,
    ) -> Result<(TaskRecord, Arc<RunningTask>), ErrorData> {
        self.begin_for(owner, principal, TaskQuota::default(), cancel)
            .await
    }

    /// `Tasks::begin`, counting the task against its caller's bounds and charging what its
    /// handler holds ([`TaskQuota`]).
    pub async fn begin_for(
        &self,
        owner: Option<String>,
        principal: Option<String>,
        quota: TaskQuota,
        cancel: CancellationToken,
    ) -> Result<(TaskRecord, Arc<RunningTask>), ErrorData> {
        let now = crate::clock::iso_now();
        let record = TaskRecord {
            task_id: uuid::Uuid::new_v4().to_string(),
            status: TaskStatus::Working,
            created_at: now.clone(),
            last_updated_at: now,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: POLL_INTERVAL_MS,
            result: None,
            error: None,
            input_requests: Map::new(),
            owner: owner.clone(),
            executor: self.shared.as_ref().map(|f| Executor {
                machine_id: f.node.clone(),
                spawned_at: crate::clock::unix_ms(),
            }),
            principal,
        };
        // Registered before the record is visible, so a cancel signal from another instance
        // that follows the record at once finds the task here.
        let running = Arc::new(RunningTask {
            cancel,
            waiting: Mutex::new(HashMap::new()),
            owner,
        });
        self.running
            .lock()
            .insert(record.task_id.clone(), running.clone());
        if let Err(e) = self.store.create_for(&record, &quota).await {
            self.running.lock().remove(&record.task_id);
            return Err(match e {
                TaskStoreError::Full(full) => {
                    tracing::warn!(
                        limit = full.limit,
                        max = full.max,
                        "a new task was refused: the task store is full"
                    );
                    too_many_tasks(&full)
                }
                TaskStoreError::Unavailable(why) => {
                    tracing::warn!(error = %why, "a new task was refused: the task store is unavailable");
                    unavailable()
                }
            });
        }
        Ok((record, running))
    }

    /// Records how a task ended (unless it already had, e.g. cancelled) and forgets it here.
    ///
    /// A store that does not answer is asked again (100 ms doubling to 2 s) until it does, for
    /// as long as the record may live: the end is the one write of a task that must not be
    /// lost. Until it is stored the task stays registered as running here, so that no reader
    /// takes its record for one a previous process left under this machine id and fails it.
    pub async fn end(
        &self,
        owner: Option<&str>,
        task_id: &str,
        outcome: impl FnOnce(&mut TaskRecord),
    ) {
        let read = self
            .until_stored(task_id, "end", None, || self.store.get(owner, task_id))
            .await
            .flatten();
        if let Some(mut record) = read
            && !record.status.is_terminal()
        {
            record.input_requests.clear();
            outcome(&mut record);
            self.cap_result(&mut record);
            record.last_updated_at = crate::clock::iso_now();
            self.until_stored(task_id, "end", None, || self.store.put(&record))
                .await;
        }
        self.running.lock().remove(task_id);
    }

    /// Runs `op` until the store answers it: on `Unavailable`, again after 100 ms doubling to
    /// 2 s, until the task's record would have expired or `stop` fires. `None`: given up.
    async fn until_stored<T, F, Fut>(
        &self,
        task_id: &str,
        what: &str,
        stop: Option<&CancellationToken>,
        mut op: F,
    ) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, TaskStoreError>>,
    {
        let deadline = Instant::now() + Duration::from_millis(self.ttl_ms);
        let mut wait = Duration::from_millis(100);
        let mut warned = false;
        loop {
            let e = match op().await {
                Ok(v) => return Some(v),
                Err(e) => e,
            };
            if !warned {
                tracing::warn!(task = %task_id, error = %e, "a task's {what} could not be stored; retrying until the task store answers");
                warned = true;
            }
            if Instant::now() + wait >= deadline {
                tracing::error!(task = %task_id, "a task's {what} could not be stored before its record expired; given up");
                return None;
            }
            match stop {
                Some(stop) => tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => return None,
                },
                None => tokio::time::sleep(wait).await,
            }
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }

    /// A result too large to keep becomes the task's failure, naming the bound, so that one
    /// task cannot fill the store (and the client learns why there is no result).
    fn cap_result(&self, record: &mut TaskRecord) {
        let size = serialized_len(record);
        if size <= self.max_result_bytes {
            return;
        }
        tracing::warn!(task = %record.task_id, bytes = size, limit = self.max_result_bytes, "a task's result exceeds tasks.max_result_bytes and was not kept");
        record.result = None;
        record.status = TaskStatus::Failed;
        let e = ErrorData::new(
            ErrorCode::INTERNAL_ERROR,
            format!(
                "The task's result ({size} bytes) exceeds tasks.max_result_bytes ({}) and was not kept",
                self.max_result_bytes
            ),
            Some(
                serde_json::json!({"limit": "tasks.max_result_bytes", "max": self.max_result_bytes}),
            ),
        );
        record.error = serde_json::to_value(&e).ok();
    }

    /// Parks a task on questions for the client: registers a waiter per question and shows
    /// them on the record (`input_required`). Returns the receivers of the answers, in order.
    pub async fn park(
        &self,
        task_id: &str,
        running: &RunningTask,
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
        // Retried like the end: a lost write would leave the client never asked.
        let owner = running.owner.as_deref();
        let stop = Some(&running.cancel);
        let read = self
            .until_stored(task_id, "questions", stop, || {
                self.store.get(owner, task_id)
            })
            .await
            .flatten();
        if let Some(mut record) = read
            && !record.status.is_terminal()
        {
            record.status = TaskStatus::InputRequired;
            record.input_requests.extend(shown);
            record.last_updated_at = crate::clock::iso_now();
            self.until_stored(task_id, "questions", stop, || self.store.put(&record))
                .await;
        }
        receivers
    }

    /// A task's record (filed under `owner`, its session, if any). A task whose executor is
    /// found gone is ended as `failed` first. A store that does not answer is the refusal a
    /// client retries ([`errors::unavailable`]), never "unknown task": the task may well exist.
    pub async fn get(
        &self,
        owner: Option<&str>,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, ErrorData> {
        let Some(record) = self.store.get(owner, task_id).await.map_err(refused)? else {
            return Ok(None);
        };
        let mut gone = HashMap::new();
        Ok(Some(self.settle_orphan(record, &mut gone).await))
    }

    /// [`Tasks::get`] on behalf of `caller` (a principal's fingerprint; `None`: anonymous):
    /// `None` for a task another principal started, exactly as for one that does not exist,
    /// and checked before anything else, so another principal's read changes nothing (not
    /// even the end of an orphaned task).
    pub async fn get_as(
        &self,
        owner: Option<&str>,
        caller: Option<&str>,
        task_id: &str,
    ) -> Result<Option<TaskRecord>, ErrorData> {
        let Some(record) = self.store.get(owner, task_id).await.map_err(refused)? else {
            return Ok(None);
        };
        if !record.is_visible_to(caller) {
            tracing::warn!(task = %task_id, "a task was asked for by a principal other than the one that started it; answered as unknown");
            return Ok(None);
        }
        let mut gone = HashMap::new();
        Ok(Some(self.settle_orphan(record, &mut gone).await))
    }

    /// The live tasks of a session, oldest first (orphaned ones ended as in [`Tasks::get`]).
    pub async fn list(&self, owner: &str) -> Result<Vec<TaskRecord>, ErrorData> {
        let records = self.store.list(owner).await.map_err(refused)?;
        let mut gone = HashMap::new();
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(self.settle_orphan(r, &mut gone).await);
        }
        Ok(out)
    }

    /// Whether the executor of a task not ended is gone. `known`: answers already obtained
    /// in this call, by `(node, spawned_at)`, so a list asks once per executor.
    async fn executor_gone(
        &self,
        record: &TaskRecord,
        known: &mut HashMap<(String, u64), bool>,
    ) -> bool {
        let (Some(shared), Some(ex)) = (&self.shared, &record.executor) else {
            return false;
        };
        if record.status.is_terminal() {
            return false;
        }
        if ex.machine_id == shared.node {
            // Our machine id: a task runs here from before its record exists until after its
            // end is written, so one not running here was left by a previous process under
            // this id, or ended without its end being recorded (Redis failed then).
            return !self.running.lock().contains_key(&record.task_id);
        }
        let Some(liveness) = &shared.liveness else {
            return false;
        };
        let key = (ex.machine_id.clone(), ex.spawned_at);
        if let Some(&g) = known.get(&key) {
            return g;
        }
        let g = liveness.is_gone(&ex.machine_id, ex.spawned_at).await;
        known.insert(key, g);
        g
    }

    /// Ends `record` as `failed` if its executor is gone, with a compare-and-set so that a
    /// write that came first (the executor finishing, a cancel) is kept; the record as stored.
    async fn settle_orphan(
        &self,
        record: TaskRecord,
        known: &mut HashMap<(String, u64), bool>,
    ) -> TaskRecord {
        if !self.executor_gone(&record, known).await {
            return record;
        }
        let failed = orphan_failed(&record);
        // A store that does not answer decides nothing: the record is shown as read.
        if let Ok(true) = self.store.replace_if_unchanged(&record, &failed).await {
            tracing::warn!(
                task = %record.task_id,
                executor = record.executor.as_ref().map(|e| e.machine_id.as_str()).unwrap_or(""),
                "a task's executor is gone; the task failed"
            );
            return failed;
        }
        // Something was written first (or the store did not answer): show what is stored.
        match self
            .store
            .get(record.owner.as_deref(), &record.task_id)
            .await
        {
            Ok(Some(stored)) => stored,
            _ => record,
        }
    }

    /// Ends as `failed` every task not ended yet that instance `node` started before
    /// `spawned_before` (Unix ms), with [`EXECUTOR_GONE_MESSAGE`]; how many were ended.
    ///
    /// For the orphan scanner (in `fleet`): call it once `node` is known to be gone (no
    /// heartbeat and no subscriber on its channel, or no heartbeat for the takeover grace),
    /// with `spawned_before` = the time it was found gone, so that tasks of a new process
    /// started under the same machine id since are left alone. Each record is ended with a
    /// compare-and-set, so a task that ended meanwhile keeps its end; calling it twice, or on
    /// several instances at once, is harmless. Without a shared store it does nothing.
    pub async fn fail_tasks_of(&self, node: &str, spawned_before: u64) -> usize {
        let error = executor_gone_error(node);
        let n = self.store.fail_tasks_of(node, spawned_before, &error).await;
        if n > 0 {
            tracing::warn!(
                executor = node,
                tasks = n,
                "the tasks of a stopped instance failed"
            );
        }
        n
    }

    /// Writes a changed record, stamping `lastUpdatedAt`.
    async fn update(&self, mut record: TaskRecord) -> Result<(), ErrorData> {
        record.last_updated_at = crate::clock::iso_now();
        self.store.put(&record).await.map_err(refused)
    }

    /// Cancels a task that has not ended: stops it if it runs here, records it cancelled, and
    /// otherwise asks its executor (through the store) to stop it. The record as stored after.
    /// A store that does not answer refuses the cancel of a task running elsewhere (the client
    /// asks again); one running here is stopped all the same, and its end records it.
    pub async fn cancel(&self, mut r: TaskRecord) -> Result<TaskRecord, ErrorData> {
        let here = self.running(&r.task_id);
        if let Some(running) = &here {
            running.cancel.cancel();
        }
        r.status = TaskStatus::Cancelled;
        r.input_requests.clear();
        match self.update(r.clone()).await {
            Ok(()) => {}
            Err(_) if here.is_some() => return Ok(r),
            Err(e) => return Err(e),
        }
        if self.shared.is_none() {
            return Ok(r);
        }
        if here.is_none() {
            // Written first, so the executor, once stopped, finds the task ended already.
            self.store.signal_cancel(&r.task_id).await;
        }
        // A shared record may have ended another way first (that end is kept).
        match self.store.get(r.owner.as_deref(), &r.task_id).await {
            Ok(Some(stored)) => Ok(stored),
            _ => Ok(r),
        }
    }

    /// Takes the client's answers to a task's questions (`tasks/update`): hands them to the
    /// questions waiting here and records the task working again once none is left; for a task
    /// running on another instance, sends them to it (its executor does the same there). A
    /// store that does not answer refuses them, and the client sends them again: a question
    /// answered already is no longer waiting, so an answer is never taken twice, and the record
    /// then drops it.
    pub async fn answer(
        &self,
        mut r: TaskRecord,
        answers: Map<String, Value>,
    ) -> Result<(), ErrorData> {
        let Some(running) = self.running(&r.task_id) else {
            if self.shared.is_some() && !r.status.is_terminal() {
                return self
                    .store
                    .signal_answers(&r.task_id, &answers)
                    .await
                    .map_err(refused);
            }
            return Ok(());
        };
        {
            let mut waiting = running.waiting.lock();
            for (key, answer) in answers {
                if let Some(tx) = waiting.remove(&key) {
                    let _ = tx.send(answer);
                }
            }
            // The record shows exactly the questions still waiting.
            r.input_requests.retain(|key, _| waiting.contains_key(key));
        }
        if r.status == TaskStatus::InputRequired && r.input_requests.is_empty() {
            r.status = TaskStatus::Working;
        }
        self.update(r).await
    }

    /// What this instance holds for a task running here.
    pub fn running(&self, task_id: &str) -> Option<Arc<RunningTask>> {
        self.running.lock().get(task_id).cloned()
    }

    /// Follows the cancel signals of a shared store until they end: stops the tasks they name
    /// that run here, and after every (re)subscription stops those whose record has ended
    /// elsewhere meanwhile (a signal sent while the subscription was down is lost).
    #[cfg(feature = "redis")]
    pub async fn follow(&self, mut signals: tokio::sync::mpsc::Receiver<CancelSignal>) {
        while let Some(signal) = signals.recv().await {
            match signal {
                CancelSignal::Cancel(task_id) => {
                    if let Some(running) = self.running(&task_id) {
                        tracing::info!(task = %task_id, "a task was cancelled through another instance; stopping it");
                        running.cancel.cancel();
                    }
                }
                CancelSignal::Answers(task_id, answers) => {
                    if self.running(&task_id).is_none() {
                        continue;
                    }
                    let owner = self.running(&task_id).and_then(|r| r.owner.clone());
                    if let Ok(Some(r)) = self.store.get(owner.as_deref(), &task_id).await {
                        tracing::debug!(task = %task_id, "a task's answers arrived through another instance");
                        // The answers reached their questions even if the record's change
                        // could not be stored; the task's next write shows it.
                        let _ = self.answer(r, answers).await;
                    }
                }
                CancelSignal::Resync => {
                    let here: Vec<(String, Arc<RunningTask>)> = self
                        .running
                        .lock()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    for (id, running) in here {
                        if let Ok(Some(r)) = self.store.get(running.owner.as_deref(), &id).await
                            && r.status.is_terminal()
                        {
                            tracing::info!(task = %id, "a task ended elsewhere while cancel signals were not received; stopping it");
                            running.cancel.cancel();
                        }
                    }
                }
            }
        }
    }
}

/// How long a client refused because the task store did not answer waits before it asks again.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(1);

/// The refusal of a task request the store could not serve (`503` with `Retry-After` over
/// HTTP): nothing changed, and the client asks again.
fn unavailable() -> ErrorData {
    errors::unavailable(
        "The task store is unavailable; retry shortly",
        UNAVAILABLE_RETRY,
    )
}

/// [`unavailable`], for a store error of a request that creates nothing (a full store only
/// refuses new tasks, so it cannot come here).
fn refused(e: TaskStoreError) -> ErrorData {
    tracing::debug!(error = %e, "a task request was refused: the task store did not answer");
    unavailable()
}

/// The error of a task whose executor is gone.
fn executor_gone_error(node: &str) -> Value {
    let e = ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        EXECUTOR_GONE_MESSAGE,
        Some(serde_json::json!({"executor": node})),
    );
    serde_json::to_value(&e).unwrap_or(Value::Null)
}

/// `record` ended as `failed` because its executor is gone.
fn orphan_failed(record: &TaskRecord) -> TaskRecord {
    let mut failed = record.clone();
    failed.status = TaskStatus::Failed;
    failed.input_requests.clear();
    failed.result = None;
    let node = record
        .executor
        .as_ref()
        .map(|e| e.machine_id.as_str())
        .unwrap_or("");
    failed.error = Some(executor_gone_error(node));
    failed.last_updated_at = crate::clock::iso_now();
    failed
}

/// The JSON-RPC error a refused task answers: the bound reached, named.
fn too_many_tasks(full: &TaskStoreFull) -> ErrorData {
    ErrorData::new(
        ErrorCode(-32000),
        format!(
            "Too many tasks: {} ({}) reached; retry once a task has finished",
            full.limit, full.max
        ),
        Some(serde_json::json!({"limit": full.limit, "max": full.max})),
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::rec;
    use super::*;
    use crate::tasks::MemoryTaskStore;
    use async_trait::async_trait;

    /// A fleet's view in miniature: a memory store that records cancel signals, and a
    /// liveness that says whatever the test sets.
    #[derive(Default)]
    struct Spy {
        inner: MemoryTaskStore,
        signals: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl TaskStore for Spy {
        async fn put(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
            self.inner.put(record).await
        }
        async fn get(
            &self,
            owner: Option<&str>,
            task_id: &str,
        ) -> Result<Option<TaskRecord>, TaskStoreError> {
            self.inner.get(owner, task_id).await
        }
        async fn list(&self, owner: &str) -> Result<Vec<TaskRecord>, TaskStoreError> {
            self.inner.list(owner).await
        }
        async fn signal_cancel(&self, task_id: &str) {
            self.signals.lock().push(task_id.to_string());
        }
    }

    struct Gone(
        std::sync::atomic::AtomicBool,
        std::sync::atomic::AtomicUsize,
    );

    #[async_trait]
    impl ProcessLiveness for Gone {
        async fn is_gone(&self, _node: &str, _spawned_at: u64) -> bool {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    fn fleet(store: Arc<Spy>, gone: Arc<Gone>) -> Tasks {
        Tasks::new(store, &TaskConfig::default()).shared("me", Some(gone))
    }

    fn foreign(id: &str, owner: Option<&str>, node: &str, spawned_at: u64) -> TaskRecord {
        let mut r = rec(id, owner, TaskStatus::Working, 0);
        r.executor = Some(Executor {
            machine_id: node.into(),
            spawned_at,
        });
        r
    }

    #[tokio::test]
    async fn a_task_whose_executor_is_gone_fails_once_read_and_an_alive_one_stays() {
        let store = Arc::new(Spy::default());
        let gone = Arc::new(Gone(false.into(), 0.into()));
        let tasks = fleet(store.clone(), gone.clone());
        store
            .put(&foreign("t", Some("s"), "other", 1))
            .await
            .unwrap();
        store
            .put(&foreign("u", Some("s"), "other", 1))
            .await
            .unwrap();

        let r = tasks.get(Some("s"), "t").await.unwrap().unwrap();
        assert_eq!(r.status, TaskStatus::Working, "alive executor");

        gone.0.store(true, std::sync::atomic::Ordering::SeqCst);
        let before = gone.1.load(std::sync::atomic::Ordering::SeqCst);
        let listed = tasks.list("s").await.unwrap();
        assert!(listed.iter().all(|r| r.status == TaskStatus::Failed));
        assert_eq!(
            gone.1.load(std::sync::atomic::Ordering::SeqCst) - before,
            1,
            "a list asks once per executor"
        );
        let stored = store.get(Some("s"), "t").await.unwrap().unwrap();
        assert_eq!(stored.status, TaskStatus::Failed, "written to the store");
        let e = stored.error.unwrap();
        assert_eq!(e["message"], EXECUTOR_GONE_MESSAGE);
        assert_eq!(e["data"]["executor"], "other");
    }

    #[tokio::test]
    async fn a_task_of_a_previous_process_under_our_id_fails_and_ours_do_not() {
        let store = Arc::new(Spy::default());
        // Liveness is never asked about our own id: it would say gone.
        let gone = Arc::new(Gone(true.into(), 0.into()));
        let tasks = fleet(store.clone(), gone.clone());
        store.put(&foreign("old", None, "me", 1)).await.unwrap();
        assert_eq!(
            tasks.get(None, "old").await.unwrap().unwrap().status,
            TaskStatus::Failed
        );
        let (mine, _) = tasks
            .begin(None, None, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(mine.executor.as_ref().unwrap().machine_id, "me");
        assert_eq!(
            tasks
                .get(None, &mine.task_id)
                .await
                .unwrap()
                .unwrap()
                .status,
            TaskStatus::Working
        );
        assert_eq!(gone.1.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn an_ended_task_is_not_failed_by_a_late_reader() {
        let store = Arc::new(Spy::default());
        let gone = Arc::new(Gone(true.into(), 0.into()));
        let tasks = fleet(store.clone(), gone);
        let mut done = foreign("t", None, "other", 1);
        done.status = TaskStatus::Completed;
        done.result = Some(serde_json::json!({"content": []}));
        store.put(&done).await.unwrap();
        assert_eq!(tasks.get(None, "t").await.unwrap(), Some(done));
    }

    #[tokio::test]
    async fn cancel_signals_the_executor_only_for_a_task_running_elsewhere() {
        let store = Arc::new(Spy::default());
        let tasks = fleet(store.clone(), Arc::new(Gone(false.into(), 0.into())));
        let token = CancellationToken::new();
        let (here, _) = tasks.begin(None, None, token.clone()).await.unwrap();
        let r = tasks.cancel(here.clone()).await.unwrap();
        assert_eq!(r.status, TaskStatus::Cancelled);
        assert!(token.is_cancelled(), "stopped here");
        store.put(&foreign("far", None, "other", 1)).await.unwrap();
        let far = tasks.get(None, "far").await.unwrap().unwrap();
        assert_eq!(
            tasks.cancel(far).await.unwrap().status,
            TaskStatus::Cancelled
        );
        assert_eq!(*store.signals.lock(), vec!["far".to_string()]);
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn follow_stops_tasks_cancelled_elsewhere_and_resyncs_after_a_gap() {
        let store = Arc::new(Spy::default());
        let tasks = Arc::new(fleet(store.clone(), Arc::new(Gone(false.into(), 0.into()))));
        let (a_token, b_token) = (CancellationToken::new(), CancellationToken::new());
        let (a, _) = tasks.begin(None, None, a_token.clone()).await.unwrap();
        let (b, _) = tasks.begin(None, None, b_token.clone()).await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let follower = tokio::spawn({
            let tasks = tasks.clone();
            async move { tasks.follow(rx).await }
        });
        tx.send(CancelSignal::Cancel(a.task_id.clone()))
            .await
            .unwrap();
        tx.send(CancelSignal::Cancel("unknown".into()))
            .await
            .unwrap();
        // b was cancelled elsewhere while no signal could arrive: the resync finds its record.
        let mut cancelled = b.clone();
        cancelled.status = TaskStatus::Cancelled;
        store.put(&cancelled).await.unwrap();
        tx.send(CancelSignal::Resync).await.unwrap();
        drop(tx);
        tokio::time::timeout(Duration::from_secs(5), follower)
            .await
            .expect("follow ends with its signals")
            .unwrap();
        assert!(a_token.is_cancelled());
        assert!(b_token.is_cancelled());
    }

    #[tokio::test]
    async fn a_task_is_seen_only_by_the_principal_that_started_it() {
        let store = Arc::new(Spy::default());
        let tasks = fleet(store.clone(), Arc::new(Gone(false.into(), 0.into())));
        let (mine, _) = tasks
            .begin(None, Some("fp-p".into()), CancellationToken::new())
            .await
            .unwrap();
        let (anon, _) = tasks
            .begin(None, None, CancellationToken::new())
            .await
            .unwrap();
        let id = mine.task_id.as_str();
        assert_eq!(
            tasks.get_as(None, Some("fp-p"), id).await.unwrap(),
            Some(mine.clone())
        );
        assert_eq!(tasks.get_as(None, Some("fp-q"), id).await.unwrap(), None);
        assert_eq!(
            tasks.get_as(None, None, id).await.unwrap(),
            None,
            "not to anonymous"
        );
        assert_eq!(
            tasks.get_as(None, None, &anon.task_id).await.unwrap(),
            Some(anon.clone())
        );
        assert_eq!(
            tasks
                .get_as(None, Some("fp-p"), &anon.task_id)
                .await
                .unwrap(),
            None
        );
        // Another principal's read does not settle an orphan either: nothing is written.
        store
            .put(&{
                let mut r = foreign("far", None, "other", 1);
                r.principal = Some("fp-p".into());
                r
            })
            .await
            .unwrap();
        let gone = Arc::new(Gone(true.into(), 0.into()));
        let tasks = fleet(store.clone(), gone.clone());
        assert_eq!(tasks.get_as(None, Some("fp-q"), "far").await.unwrap(), None);
        assert_eq!(gone.1.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(
            store.get(None, "far").await.unwrap().unwrap().status,
            TaskStatus::Working
        );
    }

    #[tokio::test]
    async fn fail_tasks_of_is_a_no_op_in_memory() {
        let tasks = Tasks::new(Arc::new(MemoryTaskStore::default()), &TaskConfig::default());
        let (r, _) = tasks
            .begin(None, None, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(r.executor, None, "a single instance names no executor");
        assert_eq!(tasks.fail_tasks_of("me", u64::MAX).await, 0);
        assert_eq!(
            tasks.get(None, &r.task_id).await.unwrap().unwrap().status,
            TaskStatus::Working
        );
    }
}
