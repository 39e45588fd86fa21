//! With authorization on, a task and a `requestState` belong to the principal that made them
//! (issue 18, hole 3). Another principal, with a valid token of its own, gets for a 2026-07-28
//! task exactly what it would get for an unknown task id (`tasks/get`, `tasks/update`,
//! `tasks/cancel`), in memory and through a second instance sharing a real `redis-server`; its
//! principal's task is untouched. A `requestState` replayed by another principal is refused as
//! an invalid one is. Session-era (2025-11-25) tasks stay with their session, which another
//! principal cannot reach either.
//!
//! The authorization server is a loopback introspection endpoint (RFC 7662): the opaque token
//! `tok-<name>` is active for subject `<name>`, so each test names its principals freely.

mod support;
mod support_issuer;
mod support_redis;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fleetmcp::{NoArgs, Server, TaskSupport, tool};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Client, SECRET, TestServer, config_from, mcp_post, serve, within};
use support_redis::SharedRedis;

const P: &str = "tok-alice";
const Q: &str = "tok-mallory";

/// Starts the introspection endpoint on loopback (it lives as long as the test's runtime);
/// its base URL, the issuer.
async fn issuer() -> String {
    support_issuer::start(None).await
}

/// The environment that turns authorization on against `issuer`.
fn auth_env(issuer: &str) -> Vec<(&'static str, String)> {
    let mut env = vec![("MCP_SESSION_SECRET", SECRET.to_string())];
    env.extend(support_issuer::env(issuer));
    env
}

/// Handlers of `forever` dropped (cancelled), per instance.
#[derive(Default)]
struct Stopped(AtomicUsize);

struct CountDrop(Arc<Stopped>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// An instance with authorization on (and `extra` configuration: Redis, its machine id), a
/// task that runs until cancelled, one that asks a question from inside the task, and a
/// multi-round tool.
async fn instance(
    issuer: &str,
    extra: Vec<(&'static str, String)>,
    stopped: Arc<Stopped>,
) -> TestServer {
    let mut env = auth_env(issuer);
    env.extend(extra);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cfg = config_from(&env, |_| {});
    let builder = Server::builder("task-principals", "1.0.0")
        .tool(
            tool("forever")
                .description("Runs until cancelled")
                .task_support(TaskSupport::Optional)
                .handler(move |_: NoArgs, _| {
                    let guard = CountDrop(stopped.clone());
                    async move {
                        let _guard = guard;
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok("never")
                    }
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
        )
        .tool(
            tool("greet")
                .description("Asks a name, then greets (multi-round, no task)")
                .handler(|_: NoArgs, ctx| async move {
                    let r = ctx
                        .ask("who", "elicitation/create", json!({"message": "Name?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}))
                        .await?;
                    Ok(format!("hi {}", r["content"]["name"].as_str().unwrap_or("?")))
                }),
        );
    serve(builder, cfg).await
}

/// A 2026-07-28 request with `token`, declaring the tasks extension and elicitation; the
/// HTTP status and the JSON-RPC answer.
async fn modern(url: &str, token: &str, method: &str, mut params: Value) -> (StatusCode, Value) {
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
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = name {
        req = req.header("mcp-name", n);
    }
    let req = req
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string());
    let res = within(method, req.send()).await.expect("request");
    let status = res.status();
    (
        status,
        within("answer body", res.json()).await.expect("json"),
    )
}

/// Starts `tool` as a task for `token`; its id.
async fn start_task(url: &str, token: &str, tool: &str) -> String {
    let (st, v) = modern(
        url,
        token,
        "tools/call",
        json!({"name": tool, "arguments": {}}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    v["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_string()
}

/// The task as `token` reads it (`tasks/get`'s result).
async fn status(url: &str, token: &str, id: &str) -> Value {
    let (st, v) = modern(url, token, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["result"].clone()
}

/// Polls (bounded) until `token` sees task `id` in `want`; the task.
async fn wait_for(url: &str, token: &str, id: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let t = status(url, token, id).await;
        if t["status"] == want {
            return t;
        }
        assert!(Instant::now() < deadline, "task {id} never {want}: {t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `method` on task `id` by `token` is answered exactly as on a task id nobody ever had:
/// the same HTTP status and the same JSON-RPC error, naming the id asked for.
async fn assert_answered_as_unknown(url: &str, token: &str, method: &str, id: &str) {
    let params = |task: &str| match method {
        "tasks/update" => {
            json!({"taskId": task, "inputResponses": {"ok": {"action": "accept", "content": {"go": true}}}})
        }
        _ => json!({"taskId": task}),
    };
    let never = uuid_like();
    let (st_unknown, unknown) = modern(url, token, method, params(&never)).await;
    let (st, got) = modern(url, token, method, params(id)).await;
    assert_eq!(
        (st_unknown, unknown["error"]["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(-32602)),
        "an unknown task: {unknown}"
    );
    assert_eq!(st, st_unknown, "{method} by another principal: {got}");
    let expected: Value =
        serde_json::from_str(&unknown.to_string().replace(&never, id)).expect("json");
    assert_eq!(got, expected, "{method} by another principal");
    assert_eq!(got["error"]["message"], format!("Unknown task: {id}"));
}

/// A fresh task id that no store holds.
fn uuid_like() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_gets_an_unknown_task_in_memory() {
    let issuer = issuer().await;
    let stopped = Arc::new(Stopped::default());
    let s = instance(&issuer, vec![], stopped.clone()).await;

    // P's task, running until cancelled.
    let id = start_task(&s.mcp, P, "forever").await;
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        assert_answered_as_unknown(&s.mcp, Q, method, &id).await;
    }
    // Untouched: still working for P, its handler still running.
    assert_eq!(status(&s.mcp, P, &id).await["status"], "working");
    assert_eq!(stopped.0.load(Ordering::SeqCst), 0, "Q's cancel stopped it");
    // 2026-07-28 has no tasks/list (nor tasks/result) to leak it through.
    let (st, v) = modern(&s.mcp, Q, "tasks/list", json!({})).await;
    assert_eq!(
        (st, v["error"]["code"].as_i64()),
        (StatusCode::NOT_FOUND, Some(-32601))
    );
    // P still manages it.
    let (st, v) = modern(&s.mcp, P, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        wait_for(&s.mcp, P, &id, "cancelled").await["status"],
        "cancelled"
    );

    // A task waiting on P's answer: Q's answer does not reach it.
    let id = start_task(&s.mcp, P, "ask_in_task").await;
    let parked = wait_for(&s.mcp, P, &id, "input_required").await;
    assert_eq!(
        parked["inputRequests"]["ok"]["method"],
        "elicitation/create"
    );
    assert_answered_as_unknown(&s.mcp, Q, "tasks/update", &id).await;
    assert_answered_as_unknown(&s.mcp, Q, "tasks/get", &id).await;
    let still = status(&s.mcp, P, &id).await;
    assert_eq!(still["status"], "input_required", "{still}");
    assert!(still["inputRequests"]["ok"].is_object(), "{still}");
    let (_, ack) = modern(
        &s.mcp,
        P,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"ok": {"action": "decline"}}}),
    )
    .await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let done = wait_for(&s.mcp, P, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "answered decline");
    // Completed: its result is P's alone too.
    assert_answered_as_unknown(&s.mcp, Q, "tasks/get", &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_gets_an_unknown_task_on_every_instance_with_redis() {
    let issuer = issuer().await;
    let redis = SharedRedis::single();
    let (stopped_a, stopped_b) = (Arc::new(Stopped::default()), Arc::new(Stopped::default()));
    let with = |machine: &str| {
        let mut env = redis.env();
        env.push(("MACHINE_ID", machine.to_string()));
        env
    };
    let a = instance(&issuer, with("node-a"), stopped_a.clone()).await;
    let b = instance(&issuer, with("node-b"), stopped_b.clone()).await;

    let id = start_task(&a.mcp, P, "forever").await;
    // P reads it anywhere; Q nowhere.
    assert_eq!(status(&b.mcp, P, &id).await["status"], "working");
    for url in [&a.mcp, &b.mcp] {
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            assert_answered_as_unknown(url, Q, method, &id).await;
        }
    }
    assert_eq!(status(&b.mcp, P, &id).await["status"], "working");
    assert_eq!(status(&a.mcp, P, &id).await["status"], "working");
    assert_eq!(
        stopped_a.0.load(Ordering::SeqCst),
        0,
        "Q's cancel stopped it"
    );

    // The record names P by fingerprint, never by token.
    let raw = redis.cli(&["GET", &format!("mcp:task:records::{id}")]);
    let stored: Value = serde_json::from_str(&raw).expect("a JSON record");
    let fingerprint = stored["principal"].as_str().unwrap_or("");
    assert_eq!(fingerprint.len(), 22, "{stored}");
    assert!(!raw.contains(P) && !raw.contains("alice"), "{raw}");

    // P's cancel through B still reaches the handler on A.
    let (st, v) = modern(&b.mcp, P, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let deadline = Instant::now() + Duration::from_secs(3);
    while stopped_a.0.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "A's handler still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status(&a.mcp, P, &id).await["status"], "cancelled");
    assert_eq!(stopped_b.0.load(Ordering::SeqCst), 0, "it never ran on B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_replayed_by_another_principal_is_refused_as_invalid() {
    let issuer = issuer().await;
    let s = instance(&issuer, vec![], Arc::default()).await;
    let greet = |state: Option<&str>| {
        let mut p = json!({"name": "greet", "arguments": {}});
        if let Some(state) = state {
            p["requestState"] = json!(state);
            p["inputResponses"] = json!({"who": {"action": "accept", "content": {"name": "Eve"}}});
        }
        p
    };
    let (_, v) = modern(&s.mcp, P, "tools/call", greet(None)).await;
    assert_eq!(v["result"]["resultType"], "input_required", "{v}");
    let state = v["result"]["requestState"]
        .as_str()
        .expect("a requestState")
        .to_string();

    // What a tampered state gets (to compare with).
    let mut tampered = state.clone();
    let last = if tampered.ends_with('A') { "B" } else { "A" };
    tampered.replace_range(tampered.len() - 1.., last);
    let (st_bad, bad) = modern(&s.mcp, Q, "tools/call", greet(Some(&tampered))).await;
    assert_eq!(
        (st_bad, bad["error"]["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(-32602)),
        "{bad}"
    );

    let (st, replayed) = modern(&s.mcp, Q, "tools/call", greet(Some(&state))).await;
    assert_eq!(
        (st, &replayed),
        (st_bad, &bad),
        "Q replaying P's requestState"
    );
    // P continues its own request.
    let (_, v) = modern(&s.mcp, P, "tools/call", greet(Some(&state))).await;
    assert_eq!(v["result"]["content"][0]["text"], "hi Eve", "{v}");
}

/// A 2025-11-25 session opened with `token`.
async fn session_of(url: &str, token: &str) -> Client {
    let mut c = Client::bare(url, "2025-11-25");
    c.http = {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            "authorization",
            format!("Bearer {token}").parse().expect("header value"),
        );
        reqwest::Client::builder()
            .no_proxy()
            .default_headers(headers)
            .build()
            .expect("client")
    };
    c.initialize(json!({})).await;
    c
}

async fn call(c: &Client, method: &str, params: Value) -> (u16, Value) {
    let res = c.request_with_id(json!(5), method, params).await;
    let st = res.status().as_u16();
    (st, within("answer body", res.json()).await.expect("json"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_era_tasks_stay_with_their_principals_session() {
    let issuer = issuer().await;
    let stopped = Arc::new(Stopped::default());
    let s = instance(&issuer, vec![], stopped.clone()).await;
    let p = session_of(&s.mcp, P).await;
    let (_, v) = call(
        &p,
        "tools/call",
        json!({"name": "forever", "arguments": {}, "task": {}}),
    )
    .await;
    let id = v["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {v}"))
        .to_string();

    // Q, in its own session: the task is unknown there, the list empty.
    let q = session_of(&s.mcp, Q).await;
    let never = uuid_like();
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let (st_unknown, unknown) = call(&q, method, json!({"taskId": never})).await;
        let (st, got) = call(&q, method, json!({"taskId": id})).await;
        assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
        assert_eq!(st, st_unknown, "{method}: {got}");
        let expected: Value =
            serde_json::from_str(&unknown.to_string().replace(&never, &id)).expect("json");
        assert_eq!(got, expected, "{method}");
    }
    let (_, v) = call(&q, "tasks/list", json!({})).await;
    assert_eq!(v["result"]["tasks"], json!([]), "{v}");
    // A 2026-07-28 request names no session: a session's task is not its to touch, its own
    // principal's included, as with the Redis store, which files it under its session (found
    // by review: the memory store found it by id alone).
    for token in [P, Q] {
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            assert_answered_as_unknown(&s.mcp, token, method, &id).await;
        }
    }

    // Q with P's session id: the session is unknown to Q.
    let mut in_ps = session_of(&s.mcp, Q).await;
    in_ps.session = p.session.clone();
    let (st, v) = call(&in_ps, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(st, 404, "{v}");

    let (_, v) = call(&p, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(v["result"]["status"], "working", "{v}");
    assert_eq!(stopped.0.load(Ordering::SeqCst), 0);
    let (_, v) = call(&p, "tasks/list", json!({})).await;
    assert_eq!(v["result"]["tasks"][0]["taskId"], id.as_str(), "{v}");
}
