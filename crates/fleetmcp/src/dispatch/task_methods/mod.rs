//! Tool calls that run as background tasks, in both eras:
//!
//! - this file: starting a task (one way for every kind) and recording how it ends;
//! - [`extension`]: the `io.modelcontextprotocol/tasks` extension of 2026-07-28
//!   (`tasks/get`, `tasks/update`, `tasks/cancel`, and a call that escalates to a task);
//! - [`session_era`]: the experimental core tasks of 2025-11-25, bound to their session
//!   (`task` on `tools/call`, `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`).

pub(super) mod extension;
pub(super) mod session_era;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::outcome::{Outcome, outcome};
use crate::app::App;
use crate::auth::Principal;
use crate::catalog::ToolError;
use crate::catalog::tool::ToolOutput;
use crate::context::RequestContext;
use crate::protocol::ErrorData;
use crate::protocol::errors;
use crate::tasks::{RunningTask, TaskQuota, TaskRecord, TaskStatus};
use crate::telemetry::Limit;

/// Starts a task: stores its record (before the client can ask for it), registers it as
/// running here, and runs the work `start` returns in the background until it ends or `cancel`
/// fires, recording the outcome. Every kind of task starts here. A task the store has no room
/// for is refused with the error the caller answers, and its work never starts. `tool` names the
/// tool, for the log of a task whose handler panicked: it fails like a tool that returned
/// `-32603`, so its record still ends and its running entry is still removed. `principal` is
/// the caller's, if authorization named one: the task is that principal's alone.
///
/// `req` is the context of the request that starts the task: the task counts against its
/// caller's key (`tasks.max_*_per_caller`), with `held_bytes` (what its handler holds: the
/// arguments) charged until it ends, and takes over the request's place in flight
/// (`limits.max_inflight_per_key`), holding it while it works.
#[allow(clippy::too_many_arguments)]
pub(super) async fn launch(
    app: &App,
    req: &RequestContext,
    tool: &str,
    owner: Option<String>,
    principal: Option<&Principal>,
    held_bytes: usize,
    cancel: CancellationToken,
    start: impl FnOnce(&str, Arc<RunningTask>) -> BoxFuture<'static, Result<ToolOutput, ToolError>>,
) -> Result<TaskRecord, ErrorData> {
    let quota = TaskQuota {
        caller: req.limit_key().map(|k| k.as_str().to_string()),
        held_bytes,
    };
    let (record, running) = match app
        .tasks()
        .begin_for(
            owner.clone(),
            principal.map(|p| p.fingerprint().to_string()),
            quota,
            cancel.clone(),
        )
        .await
    {
        Ok(started) => started,
        Err(e) => {
            if e.data.as_ref().is_some_and(|d| d.get("limit").is_some()) {
                app.meters().limit_rejected(Limit::Tasks);
            }
            return Err(e);
        }
    };
    // Held by the task's own future: freed when it ends, whichever way.
    let place = req.take_place();
    // `AssertUnwindSafe`: after a panic the work is dropped, never polled again.
    let work = AssertUnwindSafe(start(&record.task_id, running)).catch_unwind();
    let app = app.clone();
    let id = record.task_id.clone();
    let tool = tool.to_string();
    tokio::spawn(async move {
        let _place = place;
        let ended = tokio::select! {
            r = work => Some(match r {
                Ok(r) => outcome(r),
                Err(panic) => {
                    tracing::error!(
                        task = %id,
                        tool,
                        panic = super::panic_message(&*panic),
                        "a task's handler panicked; the task failed with -32603"
                    );
                    Outcome::Error(errors::handler_panicked())
                }
            }),
            _ = cancel.cancelled() => None,
        };
        app.tasks()
            .end(owner.as_deref(), &id, |record| {
                record_outcome(record, ended)
            })
            .await;
    });
    Ok(record)
}

/// How a task's record shows the way its tool call ended (`None`: cancelled).
fn record_outcome(record: &mut TaskRecord, ended: Option<Outcome>) {
    match ended {
        None => record.status = TaskStatus::Cancelled,
        // A tool that reported an error still completed: its result says so.
        Some(Outcome::Result(result)) => {
            record.status = TaskStatus::Completed;
            record.result = serde_json::to_value(&result).ok();
        }
        Some(Outcome::Error(e)) => fail(record, &e),
        Some(Outcome::InputRequired) => fail(
            record,
            &errors::internal("the task asked for input it could not wait for"),
        ),
    }
}

fn fail(record: &mut TaskRecord, e: &ErrorData) {
    record.status = TaskStatus::Failed;
    record.error = serde_json::to_value(e).ok();
}

/// Aborts a spawned tool call when the task that awaits it is dropped (cancelled).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The fields every 2026-07-28 task answer shares.
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

/// The answer for a task that does not exist, or that the caller may not see (another
/// principal's: the same answer, so a task id is never confirmed to anyone but its principal).
fn unknown(task_id: &str) -> ErrorData {
    errors::invalid_params_with(
        format!("Unknown task: {task_id}"),
        json!({"taskId": task_id}),
    )
}
