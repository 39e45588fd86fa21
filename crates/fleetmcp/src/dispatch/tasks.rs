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
    let record = new_record(&task_id);
    shared.tasks.put(&record).await;
    let cancel = shared.shutdown.child_token();
    let running = shared.runner.start(&task_id, cancel.clone());
    let call = Arc::new(TaskCall {
        task_id: task_id.clone(),
        meta,
        running,
    });
    spawn(shared, &task_id, tool, args, Caller::Task(call), cancel);
    let mut created = task_envelope(&record);
    created.insert("resultType".into(), json!("task"));
    respond(shared, ctx, &Value::Object(created), None)
}

/// Runs a tool that may escalate: as a plain request until its handler calls
/// `ctx.escalate()`; from then on as a background task, while the client gets the
/// `CreateTaskResult`.
pub(crate) async fn run_escalating(
    shared: &Arc<Shared>,
    ctx: &RequestContext,
    tool: Arc<ToolDef>,
    args: Value,
) -> Reply {
    let (tx, escalated) = oneshot::channel();
    ctx.arm_escalation(tx);
    let mut work = tokio::spawn({
        let ctx = ctx.clone();
        async move { tool.call(args, ctx).await }
    });
    tokio::select! {
        done = &mut work => {
            let outcome = done.map_err(|e| errors::internal(format!("the tool stopped: {e}")))?;
            let mut result = match outcome {
                Ok(r) => r,
                Err(ToolError::Failed(msg)) => CallToolResult::error(vec![ContentBlock::text(msg)]),
                Err(ToolError::Protocol(e)) => return Err(e),
                Err(ToolError::InputRequired) => {
                    return match ctx.caller() {
                        Caller::Stateless(round) => super::input_required(shared, round),
                        _ => Err(errors::internal("input required outside a multi-round request")),
                    };
                }
            };
            result.result_type = None;
            respond(shared, ctx, &result, None)
        }
        Ok(()) = escalated => {
            let task_id = uuid::Uuid::new_v4().to_string();
            let record = new_record(&task_id);
            shared.tasks.put(&record).await;
            let cancel = shared.shutdown.child_token();
            shared.runner.start(&task_id, cancel.clone());
            let bg = shared.clone();
            let id = task_id.clone();
            tokio::spawn(async move {
                let outcome = tokio::select! {
                    r = &mut work => r.ok(),
                    _ = cancel.cancelled() => {
                        work.abort();
                        None
                    }
                };
                finish(&bg, &id, outcome).await;
                bg.runner.finish(&id);
            });
            let mut created = task_envelope(&record);
            created.insert("resultType".into(), json!("task"));
            respond(shared, ctx, &Value::Object(created), None)
        }
    }
}

fn new_record(task_id: &str) -> TaskRecord {
    let now = now_iso();
    TaskRecord {
        task_id: task_id.to_string(),
        status: TaskStatus::Working,
        created_at: now.clone(),
        last_updated_at: now,
        ttl_ms: TASK_TTL_MS,
        poll_interval_ms: POLL_INTERVAL_MS,
        result: None,
        error: None,
        input_requests: Map::new(),
        owner: None,
    }
}

/// Runs a task's tool in the background, recording how it ends.
fn spawn(
    shared: &Arc<Shared>,
    task_id: &str,
    tool: Arc<ToolDef>,
    args: Value,
    caller: Caller,
    cancel: tokio_util::sync::CancellationToken,
) {
    let ctx = RequestContext::new(shared.clone(), caller, None, None, cancel.clone());
    let shared = shared.clone();
    let id = task_id.to_string();
    tokio::spawn(async move {
        let outcome = tokio::select! {
            r = tool.call(args, ctx) => Some(r),
            _ = cancel.cancelled() => None,
        };
        finish(&shared, &id, outcome).await;
        shared.runner.finish(&id);
    });
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

// -------------------------------------------------------------------------------------------
// The experimental core tasks of 2025-11-25 (session era): `tools/call` with a `task` param,
// then `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`, bound to the session.
// -------------------------------------------------------------------------------------------

const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The 2025-11-25 `Task` object.
fn session_task(r: &TaskRecord) -> Value {
    json!({
        "taskId": r.task_id,
        "status": r.status,
        "createdAt": r.created_at,
        "lastUpdatedAt": r.last_updated_at,
        "ttl": r.ttl_ms,
        "pollInterval": r.poll_interval_ms,
    })
}

/// Starts a session's tool call as a task; the answer is a `CreateTaskResult`.
pub(crate) async fn create_for_session(
    shared: &Arc<Shared>,
    session: &Arc<crate::session::Session>,
    tool: Arc<ToolDef>,
    args: Value,
) -> Reply {
    let task_id = uuid::Uuid::new_v4().to_string();
    let mut record = new_record(&task_id);
    record.owner = Some(session.id.to_string());
    shared.tasks.put(&record).await;
    let cancel = session.closed.child_token();
    shared.runner.start(&task_id, cancel.clone());
    // The task talks to the client through the session (its standalone stream), as any
    // message not tied to a live request does.
    spawn(
        shared,
        &task_id,
        tool,
        args,
        Caller::Session(session.clone()),
        cancel,
    );
    super::raw(&json!({"task": session_task(&record)}))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionTaskParams {
    task_id: String,
}

async fn owned(
    shared: &Shared,
    session: &crate::session::Session,
    p: Option<&RawValue>,
) -> Result<TaskRecord, ErrorData> {
    let SessionTaskParams { task_id } = params(p)?;
    match shared.tasks.get(&task_id).await {
        Some(r) if r.owner.as_deref() == Some(&*session.id) => Ok(r),
        _ => Err(unknown(&task_id)),
    }
}

pub(super) async fn session_get(
    shared: &Shared,
    session: &crate::session::Session,
    p: Option<&RawValue>,
) -> Reply {
    let r = owned(shared, session, p).await?;
    super::raw(&session_task(&r))
}

/// Waits until the task is terminal, then answers exactly what the call would have.
pub(super) async fn session_result(
    shared: &Shared,
    ctx: &RequestContext,
    session: &crate::session::Session,
    p: Option<&RawValue>,
) -> Reply {
    let mut r = owned(shared, session, p).await?;
    while !r.status.is_terminal() {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
            _ = ctx.cancellation().cancelled() => return Err(errors::internal("cancelled")),
        }
        r = shared
            .tasks
            .get(&r.task_id)
            .await
            .ok_or_else(|| unknown(&r.task_id))?;
    }
    let related = json!({RELATED_TASK: {"taskId": r.task_id}});
    match (r.status, r.result, r.error) {
        (TaskStatus::Completed, Some(Value::Object(mut result)), _) => {
            result.insert("_meta".into(), related);
            super::raw(&Value::Object(result))
        }
        (TaskStatus::Failed, _, Some(error)) => {
            Err(serde_json::from_value(error)
                .unwrap_or_else(|_| errors::internal("the task failed")))
        }
        _ => Err(ErrorData::new(
            ErrorCode::INTERNAL_ERROR,
            "The task was cancelled",
            Some(related),
        )),
    }
}

pub(super) async fn session_list(
    shared: &Shared,
    session: &crate::session::Session,
    p: Option<&RawValue>,
) -> Reply {
    let all = shared.tasks.list(&session.id).await;
    let (page, next) = super::paging::page(&all, p, shared.config.page_size)?;
    let tasks: Vec<Value> = page.iter().map(session_task).collect();
    let mut result = json!({"tasks": tasks});
    if let Some(c) = next {
        result["nextCursor"] = json!(c);
    }
    super::raw(&result)
}

pub(super) async fn session_cancel(
    shared: &Shared,
    session: &crate::session::Session,
    p: Option<&RawValue>,
) -> Reply {
    let mut r = owned(shared, session, p).await?;
    if r.status.is_terminal() {
        return Err(errors::invalid_params(format!(
            "Task {} is already {}",
            r.task_id,
            serde_json::to_value(r.status)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        )));
    }
    if let Some(running) = shared.runner.get(&r.task_id) {
        running.cancel.cancel();
    }
    r.status = TaskStatus::Cancelled;
    r.input_requests.clear();
    r.last_updated_at = now_iso();
    shared.tasks.put(&r).await;
    super::raw(&session_task(&r))
}
