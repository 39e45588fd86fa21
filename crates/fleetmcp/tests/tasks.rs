//! Background tasks in both eras: the 2026-07-28 extension (create, poll, answer, cancel, and
//! the request-then-task composition) and 2025-11-25's experimental core tasks, bound to
//! their session.

mod support;

use std::time::Duration;

use fleetmcp::{NoArgs, Server, TaskSupport, ToolError, tool};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Client, SECRET, TestServer, config_with, mcp_post, serve, within};

async fn start() -> TestServer {
    let builder = Server::builder("tasks-test", "1.0.0")
        .tool(tool("quick").description("Sync only").handler(|_: NoArgs, _| async { Ok("quick") }))
        .tool(
            tool("slow")
                .description("Half a second, as a task")
                .task_support(TaskSupport::Optional)
                .handler(|_: NoArgs, _| async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok("slow done")
                }),
        )
        .tool(
            tool("forever")
                .description("Runs until cancelled")
                .task_support(TaskSupport::Required)
                .handler(|_: NoArgs, _| async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok("never")
                }),
        )
        .tool(
            tool("broken")
                .description("Fails as a tool")
                .task_support(TaskSupport::Optional)
                .handler(|_: NoArgs, _| async { Err::<&str, _>(ToolError::failed("it broke")) }),
        )
        .tool(
            tool("ask_then_task")
                .description("Asks a name, then runs as a task")
                .escalates_to_task()
                .handler(|_: NoArgs, ctx| async move {
                    let r = ctx
                        .ask("who", "elicitation/create", json!({"message": "Name?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}))
                        .await?;
                    ctx.escalate();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok(format!("hi {}", r["content"]["name"].as_str().unwrap_or("?")))
                }),
        )
        .tool(
            tool("ask_in_task")
                .description("Asks a question while running as a task")
                .task_support(TaskSupport::Optional)
                .handler(|_: NoArgs, ctx| async move {
                    let r = ctx
                        .ask("ok", "elicitation/create", json!({"message": "Proceed?", "requestedSchema": {"type": "object", "properties": {"go": {"type": "boolean"}}}}))
                        .await?;
                    Ok(format!("answered {}", r["action"].as_str().unwrap_or("?")))
                }),
        );
    serve(builder, config_with(SECRET, |_| {})).await
}

/// A 2026-07-28 request declaring the tasks extension (and elicitation).
async fn modern(url: &str, method: &str, mut params: Value) -> (StatusCode, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
    });
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(String::from);
    let mut req = mcp_post(url)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = name {
        req = req.header("mcp-name", n);
    }
    let req = req
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string());
    let res = within(method, req.send()).await.unwrap();
    let status = res.status();
    (status, within("answer body", res.json()).await.unwrap())
}

async fn poll_until_terminal(url: &str, task_id: &str) -> Value {
    for _ in 0..100 {
        let (_, v) = modern(url, "tasks/get", json!({"taskId": task_id})).await;
        let r = v["result"].clone();
        if matches!(
            r["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {task_id} never finished");
}

#[tokio::test]
async fn stateless_tasks_are_created_polled_answered_and_cancelled() {
    let s = start().await;
    // A task-supporting tool answers with a flat CreateTaskResult at once.
    let (_, v) = modern(
        &s.mcp,
        "tools/call",
        json!({"name": "slow", "arguments": {}}),
    )
    .await;
    let created = &v["result"];
    assert_eq!(created["resultType"], "task", "{v}");
    let id = created["taskId"].as_str().unwrap().to_string();
    assert!(created["ttlMs"].is_u64() && created["pollIntervalMs"].is_u64());
    assert!(created.get("result").is_none() && created.get("task").is_none());
    let done = poll_until_terminal(&s.mcp, &id).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["content"][0]["text"], "slow done");

    // A tool error is a completed task whose result says so.
    let (_, v) = modern(
        &s.mcp,
        "tools/call",
        json!({"name": "broken", "arguments": {}}),
    )
    .await;
    let done = poll_until_terminal(&s.mcp, v["result"]["taskId"].as_str().unwrap()).await;
    assert_eq!(
        (done["status"].as_str(), done["result"]["isError"].as_bool()),
        (Some("completed"), Some(true))
    );

    // A question from inside a task parks it in input_required until tasks/update answers.
    let (_, v) = modern(
        &s.mcp,
        "tools/call",
        json!({"name": "ask_in_task", "arguments": {}}),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_string();
    let mut parked = Value::Null;
    for _ in 0..50 {
        let (_, g) = modern(&s.mcp, "tasks/get", json!({"taskId": id})).await;
        if g["result"]["status"] == "input_required" {
            parked = g["result"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        parked["inputRequests"]["ok"]["method"], "elicitation/create",
        "{parked}"
    );
    let (_, ack) = modern(&s.mcp, "tasks/update", json!({"taskId": id, "inputResponses": {"ok": {"action": "accept", "content": {"go": true}}}})).await;
    assert_eq!(ack["result"]["resultType"], "complete");
    let done = poll_until_terminal(&s.mcp, &id).await;
    assert_eq!(done["result"]["content"][0]["text"], "answered accept");

    // Cancel: an empty ack, the task settles to cancelled; unknown ids are -32602.
    let (_, v) = modern(
        &s.mcp,
        "tools/call",
        json!({"name": "forever", "arguments": {}}),
    )
    .await;
    let id = v["result"]["taskId"].as_str().unwrap().to_string();
    let (_, ack) = modern(&s.mcp, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack["result"]["resultType"], "complete");
    assert!(ack["result"].get("taskId").is_none());
    assert_eq!(
        poll_until_terminal(&s.mcp, &id).await["status"],
        "cancelled"
    );
    let (st, v) = modern(&s.mcp, "tasks/get", json!({"taskId": "nope"})).await;
    assert_eq!(
        (st, v["error"]["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(-32602)),
        "{v}"
    );
}

#[tokio::test]
async fn a_request_gathers_input_then_escalates_to_a_task() {
    let s = start().await;
    let (_, v) = modern(
        &s.mcp,
        "tools/call",
        json!({"name": "ask_then_task", "arguments": {}}),
    )
    .await;
    let r1 = &v["result"];
    assert_eq!(r1["resultType"], "input_required", "{v}");
    assert!(r1.get("taskId").is_none());
    let state = r1["requestState"].as_str().unwrap();
    let (_, v) = modern(
        &s.mcp,
        "tools/call",
        json!({"name": "ask_then_task", "arguments": {}, "requestState": state,
               "inputResponses": {"who": {"action": "accept", "content": {"name": "Ada"}}}}),
    )
    .await;
    let r2 = &v["result"];
    assert_eq!(r2["resultType"], "task", "{v}");
    assert!(r2.get("requestState").is_none());
    let done = poll_until_terminal(&s.mcp, r2["taskId"].as_str().unwrap()).await;
    assert_eq!(done["result"]["content"][0]["text"], "hi Ada");
}

/// Opens a session at `version` (no `notifications/initialized`), checking that only 2025-11-25
/// announces tasks.
async fn open_session(url: &str, version: &str) -> Client {
    let mut c = Client::bare(url, version);
    let init = c.initialize(json!({})).await;
    if version == "2025-11-25" {
        assert!(
            init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(),
            "{init}"
        );
    } else {
        assert!(
            init["result"]["capabilities"].get("tasks").is_none(),
            "{init}"
        );
    }
    c
}

/// A request in the session; its JSON-RPC answer.
async fn call(c: &Client, method: &str, params: Value) -> Value {
    let res = c.request_with_id(json!(9), method, params).await;
    within("answer body", res.json()).await.unwrap()
}

#[tokio::test]
async fn session_era_tasks_follow_2025_11_25() {
    let s = start().await;
    let a = open_session(&s.mcp, "2025-11-25").await;
    let v = call(
        &a,
        "tools/call",
        json!({"name": "slow", "arguments": {}, "task": {"ttl": 60000}}),
    )
    .await;
    let task = &v["result"]["task"];
    assert_eq!(task["status"], "working", "{v}");
    let id = task["taskId"].as_str().unwrap().to_string();
    // tasks/result blocks until the task is done, then is exactly the call's result.
    let v = call(&a, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(v["result"]["content"][0]["text"], "slow done", "{v}");
    assert_eq!(
        v["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    let v = call(&a, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(v["result"]["status"], "completed");
    let v = call(&a, "tasks/list", json!({})).await;
    assert_eq!(v["result"]["tasks"].as_array().unwrap().len(), 1);
    // Cancelling a finished task is an error; cancelling a running one ends it.
    assert_eq!(
        call(&a, "tasks/cancel", json!({"taskId": id})).await["error"]["code"],
        -32602
    );
    let v = call(
        &a,
        "tools/call",
        json!({"name": "forever", "arguments": {}, "task": {}}),
    )
    .await;
    let id2 = v["result"]["task"]["taskId"].as_str().unwrap().to_string();
    assert_eq!(
        call(&a, "tasks/cancel", json!({"taskId": id2})).await["result"]["status"],
        "cancelled"
    );
    // The declaration rules: a sync-only tool as a task, or a task-only tool without one: -32601.
    assert_eq!(
        call(
            &a,
            "tools/call",
            json!({"name": "quick", "arguments": {}, "task": {}})
        )
        .await["error"]["code"],
        -32601
    );
    assert_eq!(
        call(
            &a,
            "tools/call",
            json!({"name": "forever", "arguments": {}})
        )
        .await["error"]["code"],
        -32601
    );
    // Tasks belong to their session.
    let b = open_session(&s.mcp, "2025-11-25").await;
    assert_eq!(
        call(&b, "tasks/get", json!({"taskId": id})).await["error"]["code"],
        -32602
    );
    assert!(
        call(&b, "tasks/list", json!({})).await["result"]["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Older sessions have no tasks at all.
    let old = open_session(&s.mcp, "2025-06-18").await;
    assert_eq!(
        call(&old, "tasks/list", json!({})).await["error"]["code"],
        -32601
    );
}
