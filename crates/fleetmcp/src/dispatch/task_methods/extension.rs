//! The `io.modelcontextprotocol/tasks` extension of 2026-07-28: a tool call answered at once
//! with a task the client polls (`tasks/get`), answers (`tasks/update`) and may cancel
//! (`tasks/cancel`); and a call that runs as a plain request until its handler escalates.
//! With authorization on, a task is its starter's: every task request checks the caller's
//! principal against the record, and another principal's task is answered as an unknown one.

use std::sync::Arc;

use futures_util::FutureExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use super::super::outcome::answer;
use super::super::{Reply, params, respond};
use super::{AbortOnDrop, launch, task_envelope, unknown};
use crate::app::App;
use crate::catalog::{ToolDef, ToolError};
use crate::context::{Caller, RequestContext, TaskCall};
use crate::protocol::{ErrorCode, ErrorData, errors};
use crate::stateless::RequestMeta;
use crate::tasks::{TASKS_EXTENSION, TaskRecord, TaskStatus};

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

/// The `CreateTaskResult` of a task just started.
fn created(app: &App, ctx: &RequestContext, record: &TaskRecord) -> Reply {
    let mut created = task_envelope(record);
    created.insert("resultType".into(), json!("task"));
    respond(app, ctx, &Value::Object(created), None)
}

/// Starts `tool` as a background task and answers with the `CreateTaskResult`.
pub(crate) async fn create(
    app: &App,
    ctx: &RequestContext,
    tool: Arc<ToolDef>,
    args: Value,
    meta: RequestMeta,
) -> Reply {
    let cancel = app.phases().shutdown.child_token();
    let task_app = app.clone();
    let task_cancel = cancel.clone();
    let name = tool.name().to_string();
    let principal = ctx.principal_arc();
    let held = crate::tasks::json_len(&args);
    let record = launch(
        app,
        ctx,
        &name,
        None,
        ctx.principal(),
        held,
        cancel,
        move |task_id, running| {
            let caller = Caller::Task(Arc::new(TaskCall {
                task_id: task_id.to_string(),
                meta,
                running,
            }));
            let ctx =
                RequestContext::new(task_app, caller, false, None, Some(task_cancel), principal);
            async move { tool.call(args, ctx).await }.boxed()
        },
    )
    .await?;
    created(app, ctx, &record)
}

/// Runs a tool that may escalate: as a plain request until its handler calls
/// `ctx.escalate()`; from then on as a background task, while the client gets the
/// `CreateTaskResult`.
pub(crate) async fn run_escalating(
    app: &App,
    ctx: &RequestContext,
    tool: Arc<ToolDef>,
    args: Value,
) -> Reply {
    let (tx, escalated) = oneshot::channel();
    ctx.arm_escalation(tx);
    let name = tool.name().to_string();
    let held = crate::tasks::json_len(&args);
    let mut work = tokio::spawn({
        let ctx = ctx.clone();
        async move { tool.call(args, ctx).await }
    });
    tokio::select! {
        done = &mut work => {
            let outcome = done.map_err(|e| stopped(&name, e))?;
            answer(app, ctx, outcome)
        }
        Ok(()) = escalated => {
            let work = AbortOnDrop(work);
            let task_tool = name.clone();
            // The task is the caller's, as the request was.
            let who = ctx.principal();
            let record = launch(app, ctx, &name, None, who, held, app.phases().shutdown.child_token(), move |_, _| {
                async move {
                    let mut work = work;
                    (&mut work.0)
                        .await
                        .unwrap_or_else(|e| Err(ToolError::Protocol(stopped(&task_tool, e))))
                }
                .boxed()
            })
            .await?;
            created(app, ctx, &record)
        }
    }
}

/// The `-32603` of a spawned tool call that did not return: it panicked (logged here, once,
/// with the panic's message) or was aborted.
fn stopped(tool: &str, e: tokio::task::JoinError) -> ErrorData {
    if e.is_panic() {
        let panic = e.into_panic();
        tracing::error!(
            tool,
            panic = super::super::panic_message(&*panic),
            "a tool's handler panicked; the request is answered -32603"
        );
        errors::handler_panicked()
    } else {
        errors::internal(format!("the tool stopped: {e}"))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskParams {
    task_id: String,
    #[serde(default)]
    input_responses: Option<Map<String, Value>>,
}

fn gate(ctx: &RequestContext) -> Result<(), ErrorData> {
    match ctx.caller() {
        Caller::Stateless(round) if declared(&round.meta) => Ok(()),
        _ => Err(missing_extension()),
    }
}

/// The task `task_id`, if the caller may see it: a task of no session (filed under no owner)
/// that the caller's principal started (authorization on), or an anonymous one (off). Another
/// principal's task is answered as unknown, so `tasks/get`, `tasks/update` and `tasks/cancel`
/// cannot read, answer or stop it.
async fn record(app: &App, ctx: &RequestContext, task_id: &str) -> Result<TaskRecord, ErrorData> {
    let caller = ctx.principal().map(|p| p.fingerprint());
    app.tasks()
        .get_as(None, caller, task_id)
        .await?
        .ok_or_else(|| unknown(task_id))
}

pub(crate) async fn get(app: &App, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    gate(ctx)?;
    let TaskParams { task_id, .. } = params(p)?;
    let r = record(app, ctx, &task_id).await?;
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
    respond(app, ctx, &Value::Object(m), None)
}

pub(crate) async fn update(app: &App, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    gate(ctx)?;
    let TaskParams {
        task_id,
        input_responses,
    } = params(p)?;
    let r = record(app, ctx, &task_id).await?;
    app.tasks()
        .answer(r, input_responses.unwrap_or_default())
        .await?;
    respond(app, ctx, &json!({}), None)
}

pub(crate) async fn cancel(app: &App, ctx: &RequestContext, p: Option<&RawValue>) -> Reply {
    gate(ctx)?;
    let TaskParams { task_id, .. } = params(p)?;
    let r = record(app, ctx, &task_id).await?;
    // Cancelling a finished task is a no-op with the same answer.
    if !r.status.is_terminal() {
        app.tasks().cancel(r).await?;
    }
    respond(app, ctx, &json!({}), None)
}
