//! The experimental core tasks of 2025-11-25 (session era): `tools/call` with a `task` param,
//! then `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`, bound to the session.
//! With authorization on, the session is bound to its principal (`transport/http/locate.rs` answers
//! anyone else as for an unknown session), so its tasks are that principal's too; the record
//! also names the principal, as every task's does.

use std::sync::Arc;

use futures_util::FutureExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::super::{Reply, paging, params, reply_of};
use super::{launch, unknown};
use crate::app::App;
use crate::catalog::ToolDef;
use crate::context::{Caller, RequestContext};
use crate::protocol::{ErrorCode, ErrorData, errors};
use crate::session::Session;
use crate::tasks::{TaskRecord, TaskStatus};

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

/// Starts a session's tool call as a task; the answer is a `CreateTaskResult`. The task talks
/// to the client through the session (its standalone stream), as any message not tied to a
/// live request does, and ends with the session.
pub(crate) async fn create(
    app: &App,
    session: &Arc<Session>,
    tool: Arc<ToolDef>,
    args: Value,
    req: &RequestContext,
) -> Reply {
    let principal = req.principal_arc();
    let cancel = session.closed().child_token();
    let ctx = RequestContext::new(
        app.clone(),
        Caller::Session(session.clone()),
        false,
        None,
        Some(cancel.clone()),
        principal.clone(),
    );
    let name = tool.name().to_string();
    let held = crate::tasks::json_len(&args);
    let record = launch(
        app,
        req,
        &name,
        Some(session.id.to_string()),
        principal.as_deref(),
        held,
        cancel,
        move |_, _| async move { tool.call(args, ctx).await }.boxed(),
    )
    .await?;
    reply_of(&json!({"task": session_task(&record)}))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionTaskParams {
    task_id: String,
}

/// The task `p` names, if it belongs to this session.
async fn owned(
    app: &App,
    session: &Session,
    p: Option<&RawValue>,
) -> Result<TaskRecord, ErrorData> {
    let SessionTaskParams { task_id } = params(p)?;
    match app.tasks().get(Some(&*session.id), &task_id).await? {
        Some(r) if r.owner.as_deref() == Some(&*session.id) => Ok(r),
        _ => Err(unknown(&task_id)),
    }
}

pub(crate) async fn get(app: &App, session: &Session, p: Option<&RawValue>) -> Reply {
    let r = owned(app, session, p).await?;
    reply_of(&session_task(&r))
}

/// Waits until the task is terminal, then answers exactly what the call would have.
pub(crate) async fn result(
    app: &App,
    ctx: &RequestContext,
    session: &Session,
    p: Option<&RawValue>,
) -> Reply {
    let mut r = owned(app, session, p).await?;
    while !r.status.is_terminal() {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
            _ = ctx.cancellation().cancelled() => return Err(errors::internal("cancelled")),
        }
        // A store that does not answer is waited out like a task still working.
        r = match app.tasks().get(r.owner.as_deref(), &r.task_id).await {
            Ok(Some(next)) => next,
            Ok(None) => return Err(unknown(&r.task_id)),
            Err(_) => r,
        };
    }
    let related = json!({RELATED_TASK: {"taskId": r.task_id}});
    match (r.status, r.result, r.error) {
        (TaskStatus::Completed, Some(Value::Object(mut result)), _) => {
            result.insert("_meta".into(), related);
            reply_of(&Value::Object(result))
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

pub(crate) async fn list(app: &App, session: &Session, p: Option<&RawValue>) -> Reply {
    let all = app.tasks().list(&session.id).await?;
    let (page, next) = paging::page(&all, p, app.config().page_size)?;
    let tasks: Vec<Value> = page.iter().map(session_task).collect();
    let mut result = json!({"tasks": tasks});
    if let Some(c) = next {
        result["nextCursor"] = json!(c);
    }
    reply_of(&result)
}

pub(crate) async fn cancel(app: &App, session: &Session, p: Option<&RawValue>) -> Reply {
    let r = owned(app, session, p).await?;
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
    let r = app.tasks().cancel(r).await?;
    reply_of(&session_task(&r))
}
