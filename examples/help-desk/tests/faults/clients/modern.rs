//! The 2026-07-28 clients: a client of the tasks extension, one answering the questions of
//! multi-round calls, and one sending stateless requests; each records what it saw as the
//! session-era clients of [`super`] do.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{
    ACCEPT, Loot, ROUND_RETRIES, Shared, TASK_DELAY_MS, TASK_POLL, TASK_WINDOW, TASKS_EXTENSION,
    answer_to, any_answer_to, backoff, exchange, finish, is_unknown_task, next_id,
};
use crate::history::{Kind, Op, Outcome, Route, TaskView, truncate};

fn modern_meta(name: &str) -> Value {
    modern_meta_with(name, json!({}))
}

pub(super) fn modern_meta_with(name: &str, capabilities: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1"}})
}

/// What a task record (a `CreateTaskResult` or a `tasks/get` result) says, and whether it
/// carries a result that is not an error (a completed task's answer).
pub fn task_view(r: &Value) -> Option<(TaskView, bool)> {
    let view = match r["status"].as_str()? {
        "working" => TaskView::Working,
        "input_required" => TaskView::InputRequired,
        "completed" => TaskView::Completed,
        "failed" => TaskView::Failed {
            gone: r["error"]["message"] == json!(fleetmcp::EXECUTOR_GONE_MESSAGE),
            executor: r["error"]["data"]["executor"].as_str().map(String::from),
        },
        "cancelled" => TaskView::Cancelled,
        _ => return None,
    };
    let ok = view == TaskView::Completed
        && r.get("result").is_some_and(|x| x.is_object())
        && r["result"]["isError"] != json!(true);
    Some((view, ok))
}

/// A 2026-07-28 client of the tasks extension: `stamp` as a background task, each polled with
/// `tasks/get` until it ends (or [`TASK_WINDOW`] passed).
pub async fn task_client(sh: Arc<Shared>, name: String, route: Route, base: String) {
    let meta = modern_meta_with(&name, json!({"extensions": {TASKS_EXTENSION: {}}}));
    let mut n = 0u64;
    while !sh.stopped() {
        n += 1;
        let key = format!("{name}-{n}");
        let rpc = next_id();
        let body = json!({"jsonrpc": "2.0", "id": rpc, "method": "tools/call", "params": {
            "name": "stamp", "arguments": {"key": key, "delay_ms": TASK_DELAY_MS},
            "_meta": meta}});
        let mut op = Op::new(&name, Kind::TaskStart, route.clone(), sh.rec.now());
        op.rpc_id = Some(rpc);
        op.stamp = Some(key);
        let got = exchange(
            modern_post(&sh.http, &base, "tools/call", Some("stamp"), &body),
            Some(rpc),
        )
        .await;
        finish(&mut op, &got, sh.rec.now());
        let created = answer_to(&got, rpc).and_then(|a| a.get("result").cloned());
        let task_id = created
            .as_ref()
            .filter(|r| r["resultType"] == json!("task"))
            .and_then(|r| r["taskId"].as_str().map(String::from));
        op.task = created.as_ref().and_then(task_view).map(|(v, _)| v);
        if op.outcome == Outcome::Ok && task_id.is_none() {
            op.outcome = Outcome::Error {
                status: 200,
                detail: format!(
                    "not a task: {}",
                    truncate(&created.unwrap_or_default().to_string(), 200)
                ),
            };
        }
        let index = sh.rec.op(op);
        let Some(task_id) = task_id else {
            backoff(&got).await;
            continue;
        };
        Loot::keep(&mut sh.loot.lock().tasks, &task_id);
        let until = sh.rec.now() + TASK_WINDOW;
        let mut acked = false;
        while sh.rec.now() < until {
            tokio::time::sleep(TASK_POLL).await;
            let prpc = next_id();
            let body = json!({"jsonrpc": "2.0", "id": prpc, "method": "tasks/get",
                "params": {"taskId": task_id, "_meta": meta}});
            let mut p = Op::new(
                &name,
                Kind::TaskPoll { of: index },
                route.clone(),
                sh.rec.now(),
            );
            p.rpc_id = Some(prpc);
            let got = exchange(
                modern_post(&sh.http, &base, "tasks/get", Some(&task_id), &body),
                Some(prpc),
            )
            .await;
            finish(&mut p, &got, sh.rec.now());
            let answer = answer_to(&got, prpc);
            if any_answer_to(&got, prpc).is_some_and(is_unknown_task) {
                p.outcome = Outcome::TaskUnknown;
            }
            let seen = answer
                .as_ref()
                .and_then(|a| a.get("result"))
                .and_then(task_view);
            let ended = seen.as_ref().is_some_and(|(v, _)| v.is_terminal());
            if let Some((v, ok)) = seen {
                acked = ok;
                p.task = Some(v);
            }
            sh.rec.op(p);
            if ended {
                break;
            }
        }
        sh.rec.update(index, |o| o.acked = acked);
    }
}

/// A 2026-07-28 multi-round client: `stamp_confirmed`, whose first round asks to confirm
/// (`InputRequiredResult`), then the round that answers it with the `requestState`.
pub async fn confirm_client(sh: Arc<Shared>, name: String, route: Route, base: String) {
    let meta = modern_meta_with(&name, json!({"elicitation": {}}));
    let confirm =
        |body: &Value| modern_post(&sh.http, &base, "tools/call", Some("stamp_confirmed"), body);
    let mut n = 0u64;
    while !sh.stopped() {
        n += 1;
        let key = format!("{name}-{n}");
        let rpc = next_id();
        let params = json!({"name": "stamp_confirmed", "arguments": {"key": key}, "_meta": meta});
        let body = json!({"jsonrpc": "2.0", "id": rpc, "method": "tools/call", "params": params});
        let mut op = Op::new(&name, Kind::Confirm, route.clone(), sh.rec.now());
        op.rpc_id = Some(rpc);
        op.stamp = Some(key);
        let got = exchange(confirm(&body), Some(rpc)).await;
        finish(&mut op, &got, sh.rec.now());
        let first = answer_to(&got, rpc).and_then(|a| a.get("result").cloned());
        let state = first
            .as_ref()
            .filter(|r| {
                r["resultType"] == json!("input_required")
                    && r["inputRequests"].get("confirm").is_some()
            })
            .and_then(|r| r["requestState"].as_str().map(String::from));
        if op.outcome == Outcome::Ok && state.is_none() {
            op.outcome = Outcome::Error {
                status: 200,
                detail: format!(
                    "not an InputRequiredResult asking to confirm: {}",
                    truncate(&first.unwrap_or_default().to_string(), 200)
                ),
            };
        }
        let index = sh.rec.op(op);
        let Some(state) = state else {
            backoff(&got).await;
            continue;
        };
        let mut answer_params = params.clone();
        answer_params["inputResponses"] =
            json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
        answer_params["requestState"] = json!(state);
        let mut acked = false;
        for _ in 0..=ROUND_RETRIES {
            let rpc = next_id();
            let body = json!({"jsonrpc": "2.0", "id": rpc, "method": "tools/call",
                "params": answer_params});
            let mut r = Op::new(
                &name,
                Kind::ConfirmAnswer { of: index },
                route.clone(),
                sh.rec.now(),
            );
            r.rpc_id = Some(rpc);
            let got = exchange(confirm(&body), Some(rpc)).await;
            finish(&mut r, &got, sh.rec.now());
            let last = answer_to(&got, rpc).and_then(|a| a.get("result").cloned());
            if r.outcome == Outcome::Ok {
                match &last {
                    Some(x) if x["resultType"] == json!("complete") => acked = true,
                    other => {
                        r.outcome = Outcome::Error {
                            status: 200,
                            detail: format!(
                                "the answering round did not complete: {}",
                                truncate(&other.clone().unwrap_or_default().to_string(), 200)
                            ),
                        }
                    }
                }
            }
            let refused = matches!(r.outcome, Outcome::Refused { .. });
            sh.rec.op(r);
            if !refused || sh.stopped() {
                break;
            }
            backoff(&got).await;
        }
        sh.rec.update(index, |o| o.acked = acked);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(super) fn modern_post(
    http: &reqwest::Client,
    base: &str,
    method: &str,
    tool: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut r = http
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(body.to_string());
    if let Some(t) = tool {
        r = r.header("mcp-name", t);
    }
    r
}

/// A 2026-07-28 client: `server/discover`, then `stamp` calls, no session.
pub async fn stateless_client(sh: Arc<Shared>, name: String, route: Route, base: String) {
    let mut discovered = false;
    let mut n = 0u64;
    while !sh.stopped() {
        if !discovered {
            let rpc = next_id();
            let body = json!({"jsonrpc": "2.0", "id": rpc, "method": "server/discover",
                "params": {"_meta": modern_meta(&name)}});
            let mut op = Op::new(&name, Kind::Discover, route.clone(), sh.rec.now());
            op.rpc_id = Some(rpc);
            let got = exchange(
                modern_post(&sh.http, &base, "server/discover", None, &body),
                Some(rpc),
            )
            .await;
            finish(&mut op, &got, sh.rec.now());
            discovered = op.outcome == Outcome::Ok;
            sh.rec.op(op);
            backoff(&got).await;
            continue;
        }
        n += 1;
        let key = format!("{name}-{n}");
        let rpc = next_id();
        let body = json!({"jsonrpc": "2.0", "id": rpc, "method": "tools/call", "params": {
            "name": "stamp", "arguments": {"key": key}, "_meta": modern_meta(&name)}});
        let mut op = Op::new(&name, Kind::StatelessStamp, route.clone(), sh.rec.now());
        op.rpc_id = Some(rpc);
        op.stamp = Some(key);
        let got = exchange(
            modern_post(&sh.http, &base, "tools/call", Some("stamp"), &body),
            Some(rpc),
        )
        .await;
        finish(&mut op, &got, sh.rec.now());
        op.acked = op.outcome == Outcome::Ok
            && got
                .as_ref()
                .ok()
                .and_then(|g| g.answer.as_ref())
                .is_some_and(|a| a.get("result").is_some());
        sh.rec.op(op);
        backoff(&got).await;
    }
}
