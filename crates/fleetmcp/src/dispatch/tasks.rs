//! `tasks/get`, `tasks/update`, `tasks/cancel`, and turning a `tools/call` into a task
//! (the `io.modelcontextprotocol/tasks` extension of 2026-07-28).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use super::{Reply, params, respond};
use crate::catalog::{ToolDef, ToolError};
use crate::context::{Caller, RequestContext, TaskCall};
use crate::protocol::model::{CallToolResult, ContentBlock};
use crate::protocol::{ErrorCode, ErrorData, errors};
use crate::server::Shared;
use crate::stateless::RequestMeta;
use crate::tasks::{TASKS_EXTENSION, TaskRecord, TaskStatus, now_iso};

/// How long a finished task stays readable, and how often clients should poll.
const TASK_TTL_MS: u64 = 3_600_000;
const POLL_INTERVAL_MS: u64 = 500;

/// Whether the client declared the tasks extension in this request's capabilities.
pub(crate) fn declared(meta: &RequestMeta) -> bool {
    meta.client_capabilities
        .get("extensions")
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_some()
}

pub(crate) fn missing_extension() -> ErrorData {
    ErrorData::new(
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!("This request needs the client capability extensions.{TASKS_EXTENSION}"),
        Some(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})),
    )
}

/// Starts `tool` as a background task and answers with the `CreateTaskResult`. The record is
/// stored before the answer, so an immediate `tasks/get` finds it.
pub(crate) async fn create(
    shared: &Arc<Shared>,
    ctx: &RequestContext,
    tool: Arc<ToolDef>,
    args: Value,
    meta: RequestMeta,
) -> Reply {
    let task_id = uuid::Uuid::new_v4().to_string();
    let now = now_iso();
    let record = TaskRecord {
        task_id: task_id.clone(),
        status: TaskStatus::Working,
        created_at: now.clone(),
        last_updated_at: now,
        ttl_ms: TASK_TTL_MS,
        poll_interval_ms: POLL_INTERVAL_MS,
        result: None,
        error: None,
        input_requests: Map::new(),
    };
    shared.tasks.put(&record).await;
    let cancel = shared.shutdown.child_token();
    let running = shared.runner.start(&task_id, cancel.clone());
    let call = Arc::new(TaskCall {
        task_id: task_id.clone(),
        meta,
        running,
    });
    let task_ctx = RequestContext::new(
        shared.clone(),
        Caller::Task(call),
        None,
        None,
        cancel.clone(),
    );
    let bg = shared.clone();
    let id = task_id.clone();
    tokio::spawn(async move {
        let outcome = tokio::select! {
            r = tool.call(args, task_ctx) => Some(r),
            _ = cancel.cancelled() => None,
        };
        finish(&bg, &id, outcome).await;
        bg.runner.finish(&id);
    });
    let mut created = task_envelope(&record);
    created.insert("resultType".into(), json!("task"));
    respond(shared, ctx, &Value::Object(created), None)
}

/// Records how a task ended.
async fn finish(
    shared: &Shared,
    task_id: &str,
    outcome: Option<Result<CallToolResult, ToolError>>,
) {
    let Some(mut record) = shared.tasks.get(task_id).await else {
        return;
    };
    if record.status.is_terminal() {
        return;
    }
    record.input_requests.clear();
    match outcome {
        None => record.status = TaskStatus::Cancelled,
        Some(Ok(mut result)) => {
            result.result_type = None;
            record.status = TaskStatus::Completed;
            record.result = serde_json::to_value(&result).ok();
        }
        // The tool ran and reported an error: a completed task whose result says so.
        Some(Err(ToolError::Failed(msg))) => {
            record.status = TaskStatus::Completed;
            record.result =
                serde_json::to_value(CallToolResult::error(vec![ContentBlock::text(msg)])).ok();
        }
        Some(Err(ToolError::Protocol(e))) => {
            record.status = TaskStatus::Failed;
            record.error = serde_json::to_value(&e).ok();
        }
        Some(Err(ToolError::InputRequired)) => {
            record.status = TaskStatus::Failed;
            record.error = serde_json::to_value(errors::internal(
                "the task asked for input it could not wait for",
            ))
            .ok();
        }
    }
    record.last_updated_at = now_iso();
    shared.tasks.put(&record).await;
}

/// The fields every task answer shares.
fn task_envelope(r: &TaskRecord) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("taskId".into(), json!(r.task_id));
    m.insert("status".into(), json!(r.status));
    m.insert("createdAt".into(), json!(r.created_at));
    m.insert("lastUpdatedAt".into(), json!(r.last_updated_at));
    m.insert("ttlMs".into(), json!(r.ttl_ms));
    m.insert("pollIntervalMs".into(), json!(r.poll_interval_ms));
    m
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskParams {
    task_id: String,
    #[serde(default)]
    input_responses: Option<Map<String, Value>>,
}

fn unknown(task_id: &str) -> ErrorData {
    errors::invalid_params_with(
        format!("Unknown task: {task_id}"),
        json!({"taskId": task_id}),
    )
}

fn gate(ctx: &RequestContext) -> Result<(), ErrorData> {
    match ctx.caller() {
        Caller::Stateless(round) if declared(&round.meta) => Ok(()),
        _ => Err(missing_extension()),
    }
}

pub(super) async fn get(shared: &Shared, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    gate(ctx)?;
    let TaskParams { task_id, .. } = params(p)?;
    let r = shared
        .tasks
        .get(&task_id)
        .await
        .ok_or_else(|| unknown(&task_id))?;
    let mut m = task_envelope(&r);
    match r.status {
        TaskStatus::Completed => {
            if let Some(result) = r.result {
                m.insert("result".into(), result);
            }
        }
        TaskStatus::Failed => {
            if let Some(error) = r.error {
                m.insert("error".into(), error);
            }
        }
        TaskStatus::InputRequired => {
            m.insert("inputRequests".into(), Value::Object(r.input_requests));
        }
        TaskStatus::Working | TaskStatus::Cancelled => {}
    }
    respond(shared, ctx, &Value::Object(m), None)
}

pub(super) async fn update(shared: &Shared, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    gate(ctx)?;
    let TaskParams {
        task_id,
        input_responses,
    } = params(p)?;
    let mut record = shared
        .tasks
        .get(&task_id)
        .await
        .ok_or_else(|| unknown(&task_id))?;
    if let Some(running) = shared.runner.get(&task_id) {
        for (key, answer) in input_responses.unwrap_or_default() {
            if let Some(tx) = running.waiting.lock().remove(&key) {
                let _ = tx.send(answer);
                record.input_requests.remove(&key);
            }
        }
        if record.status == TaskStatus::InputRequired && record.input_requests.is_empty() {
            record.status = TaskStatus::Working;
        }
        record.last_updated_at = now_iso();
        shared.tasks.put(&record).await;
    }
    respond(shared, ctx, &json!({}), None)
}

pub(super) async fn cancel(shared: &Shared, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    gate(ctx)?;
    let TaskParams { task_id, .. } = params(p)?;
    let mut record = shared
        .tasks
        .get(&task_id)
        .await
        .ok_or_else(|| unknown(&task_id))?;
    // Cancelling a finished task is a no-op with the same answer.
    if !record.status.is_terminal() {
        if let Some(running) = shared.runner.get(&task_id) {
            running.cancel.cancel();
        }
        record.status = TaskStatus::Cancelled;
        record.input_requests.clear();
        record.last_updated_at = now_iso();
        shared.tasks.put(&record).await;
    }
    respond(shared, ctx, &json!({}), None)
}

/// Parks a task on questions for the client: registers a waiter per question and shows them
/// on the record (`input_required`). Returns the receivers of the answers, in order.
pub(crate) async fn ask(
    shared: &Shared,
    task: &TaskCall,
    questions: Vec<(String, String, Value)>,
) -> Vec<oneshot::Receiver<Value>> {
    let mut receivers = Vec::with_capacity(questions.len());
    let mut shown = Map::new();
    {
        let mut waiting = task.running.waiting.lock();
        for (key, method, params) in questions {
            let (tx, rx) = oneshot::channel();
            waiting.insert(key.clone(), tx);
            shown.insert(key, json!({"method": method, "params": params}));
            receivers.push(rx);
        }
    }
    if let Some(mut record) = shared.tasks.get(&task.task_id).await
        && !record.status.is_terminal()
    {
        record.status = TaskStatus::InputRequired;
        record.input_requests.extend(shown);
        record.last_updated_at = now_iso();
        shared.tasks.put(&record).await;
    }
    receivers
}
