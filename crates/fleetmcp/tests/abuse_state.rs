//! State a client can make the server keep, and state that must not come back: task records
//! are bounded (count and bytes), an SSE answer survives its event store dying under it, client
//! data kept per session is bounded, and an ended session stays ended on every path.

mod support;
mod support_redis;

use std::time::{Duration, Instant};

use fleetmcp::{NoArgs, Server, TaskSupport, tool};
use serde::Deserialize;
use serde_json::{Value, json};
use support::{
    Client, LATEST, OTHER_SECRET, SECRET, SseStream, TestServer, config_from, config_with,
    expect_rpc_error, mcp_post, serve, start, start_with, within,
};
use support_redis::RedisServer;

// ---------------------------------------------------------------------------------------------
// (1) Task records
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize, schemars::JsonSchema)]
struct LabelArgs {
    /// Echoed back as the result.
    label: String,
}

async fn task_server() -> TestServer {
    let builder = Server::builder("abuse-tasks", "1.0.0")
        .tool(
            tool("label")
                .description("Answers its label at once, as a task")
                .task_support(TaskSupport::Required)
                .handler(|a: LabelArgs, _| async move { Ok(a.label) }),
        )
        .tool(
            tool("hold")
                .description("Works until cancelled, as a task")
                .task_support(TaskSupport::Required)
                .handler(|_: NoArgs, _| async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok("never")
                }),
        );
    let cfg = config_with(SECRET, |c| {
        c.tasks.max_tasks = 3;
        c.tasks.max_tasks_per_owner = 3;
        c.tasks.max_result_bytes = 4096;
        c.tasks.max_bytes_per_owner = 64 * 1024;
        c.tasks.max_bytes = 64 * 1024;
    });
    serve(builder, cfg).await
}

/// A 2026-07-28 request declaring the tasks extension; the status and the JSON-RPC answer,
/// whose id is checked against `id`.
async fn modern(url: &str, id: i64, method: &str, mut params: Value) -> (u16, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    });
    let mut req = mcp_post(url)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    let name = params.get("name").or_else(|| params.get("taskId"));
    if let Some(n) = name.and_then(Value::as_str) {
        req = req.header("mcp-name", n);
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let res = within(method, req.body(body.to_string()).send())
        .await
        .expect("POST");
    let status = res.status().as_u16();
    let v: Value = within("answer body", res.json()).await.expect("json");
    assert_eq!(v["id"], id, "{v}");
    (status, v)
}

async fn start_task(url: &str, id: i64, name: &str, args: Value) -> String {
    let (status, v) = modern(
        url,
        id,
        "tools/call",
        json!({"name": name, "arguments": args}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    v["result"]["taskId"].as_str().expect("taskId").to_string()
}

/// `tasks/get`: the task's result, or the JSON-RPC error.
async fn task_get(url: &str, id: i64, task: &str) -> Value {
    modern(url, id, "tasks/get", json!({"taskId": task}))
        .await
        .1
}

async fn until_finished(url: &str, task: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = task_get(url, 900, task).await;
        let status = v["result"]["status"].as_str().unwrap_or("");
        if matches!(status, "completed" | "failed" | "cancelled") {
            return v["result"].clone();
        }
        assert!(Instant::now() < deadline, "task {task} did not finish: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn is_unknown_task(v: &Value) -> bool {
    v["error"]["code"] == -32602
        && v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Unknown task"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_records_are_bounded_and_a_store_full_of_working_tasks_refuses_new_ones() {
    let s = task_server().await;
    let url = &s.mcp;

    // Three finished tasks fill the store (tasks.max_tasks = 3).
    let mut done = Vec::new();
    for i in 0..3 {
        let t = start_task(url, 10 + i, "label", json!({"label": format!("l{i}")})).await;
        assert_eq!(until_finished(url, &t).await["status"], "completed");
        done.push(t);
    }
    // A fourth pushes the oldest finished one out; the others stay readable.
    let fourth = start_task(url, 20, "label", json!({"label": "l3"})).await;
    until_finished(url, &fourth).await;
    assert!(is_unknown_task(&task_get(url, 21, &done[0]).await));
    for t in [&done[1], &done[2], &fourth] {
        let v = task_get(url, 22, t).await;
        assert_eq!(v["result"]["status"], "completed", "{v}");
    }

    // Working tasks take every slot, pushing the finished ones out, oldest first...
    let mut holds = Vec::new();
    for i in 0..3 {
        holds.push(start_task(url, 30 + i, "hold", json!({})).await);
    }
    for t in [&done[1], &done[2], &fourth] {
        assert!(is_unknown_task(&task_get(url, 33, t).await));
    }
    // ...and are never dropped: a new task is refused with an error naming the bound.
    let (status, v) = modern(
        url,
        40,
        "tools/call",
        json!({"name": "label", "arguments": {"label": "refused"}}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["error"]["code"], -32000, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("tasks.max_tasks (3)")),
        "{v}"
    );
    for t in &holds {
        let v = task_get(url, 41, t).await;
        assert_eq!(v["result"]["status"], "working", "{v}");
    }

    // Cancelling one frees its slot once the cancelled record is the oldest finished.
    let (_, v) = modern(url, 50, "tasks/cancel", json!({"taskId": holds[0]})).await;
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(until_finished(url, &holds[0]).await["status"], "cancelled");
    // A result larger than tasks.max_result_bytes is not kept: the task fails, naming it.
    let big = start_task(url, 51, "label", json!({"label": "x".repeat(10_000)})).await;
    let r = until_finished(url, &big).await;
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r.get("result").is_none(), "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("tasks.max_result_bytes")),
        "{r}"
    );
    assert!(is_unknown_task(&task_get(url, 52, &holds[0]).await));
}

// ---------------------------------------------------------------------------------------------
// (2) An SSE answer whose event store dies under it
// ---------------------------------------------------------------------------------------------

/// The writer of a degraded answer keeps trying to write its end marker: Redis is paused while
/// an SSE answer is written (the answer goes straight to the client), killed with the end
/// marker still unread in its socket, and started again with its data (append-only file). A
/// client that resumes the stream with `Last-Event-ID` then gets the end once the writer's retry
/// lands it; a writer that tried once would leave that reader waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_marker_lost_with_redis_is_written_again() {
    let mut redis = RedisServer::start_persistent();
    let url = redis.url();
    let s = ticker_server(&url, |_| {}).await;
    let c = Client::connect_with(&s.mcp, LATEST, json!({})).await;
    let mut events = SseStream::new(c.start_tool(7, "ticker", json!({})).await);
    let mut last_stored = None;
    while last_stored.is_none() {
        let ev = events.next().await.expect("the answer is streaming");
        if ev.json().is_some() {
            last_stored = ev.id.clone();
        }
    }
    redis.pause();
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let ev = events
                .next()
                .await
                .expect("the stream ended without an answer");
            if ev.json().is_some_and(|m| m["id"] == 7) {
                break;
            }
        }
    })
    .await;
    assert!(
        answered.is_ok(),
        "the answer reached the client while Redis was paused"
    );
    // The writer's first try at the end marker is queued on the paused server; it dies unread.
    tokio::time::sleep(COMMAND_TIMEOUT * 3).await;
    redis.kill_paused();
    redis.start_again();
    let last = last_stored.expect("a stored event");
    // The whole body: it is complete only when the stream ends.
    let resumed = tokio::time::timeout(Duration::from_secs(20), async {
        c.resume(&last).await.bytes().await
    })
    .await;
    assert!(
        resumed.is_ok(),
        "the resumed stream ended: the end marker was written again once Redis was back"
    );
}

/// A reader of a stream in Redis does not wait on a Redis that does not answer: with Redis
/// paused, an open GET stream ends after `sessions.stream_read_outage_ms` (the client resumes it
/// later with `Last-Event-ID`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reader_ends_when_redis_stays_unreadable() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let outage = Duration::from_millis(1000);
    let cfg = config_from(
        &[("MCP_SESSION_SECRET", SECRET), ("REDIS_URL", url.as_str())],
        |c| {
            c.sessions.stream_read_outage_ms = outage.as_millis() as u64;
            c.redis
                .as_mut()
                .expect("REDIS_URL configures redis")
                .command_timeout_ms = COMMAND_TIMEOUT.as_millis() as u64;
        },
    );
    let s = serve(Server::builder("abuse-redis-outage", "1.0.0"), cfg).await;
    let c = Client::connect_with(&s.mcp, LATEST, json!({})).await;
    let res = within("GET", c.get().send()).await.unwrap();
    assert_eq!(res.status(), 200);
    redis.pause();
    let paused = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), res.bytes()).await;
    let after = paused.elapsed();
    redis.resume();
    assert!(ended.is_ok(), "the GET stream ended while Redis was paused");
    assert!(
        after >= outage && after <= outage + COMMAND_TIMEOUT * 2 + Duration::from_secs(2),
        "it ended {after:?} after the pause (outage bound {outage:?})"
    );
}

/// The same on the 2024-11-05 transport, whose every answer travels on its `/sse` stream
/// through the event store: with Redis SIGKILLed while a call runs, its answer still reaches
/// the open stream (straight, not stored) within the command timeout plus 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_answer_reaches_its_stream_when_redis_is_killed_under_it() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let s = ticker_server(&url, |_| {}).await;
    let base = s.mcp.trim_end_matches("/mcp").to_string();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let sse = within("GET /sse", http.get(format!("{base}/sse")).send())
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    let mut events = SseStream::new(sse);
    let endpoint = within("the endpoint event", events.next())
        .await
        .expect("an endpoint event");
    assert_eq!(endpoint.event.as_deref(), Some("endpoint"), "{endpoint:?}");
    let post_url = format!("{base}{}", endpoint.data.trim());
    let post = |body: Value| {
        let req = http
            .post(&post_url)
            .header("content-type", "application/json")
            .body(body.to_string());
        async move { within("POST /message", req.send()).await.unwrap().status() }
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    assert_eq!(post(init).await, 202);
    assert_eq!(
        post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await,
        202
    );
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "ticker", "arguments": {}, "_meta": {"progressToken": "t"}}});
    assert_eq!(post(call).await, 202);
    let started = Instant::now();
    // Progress arrives through the store first...
    let mut progress = 0;
    while progress < 3 {
        let ev = within("progress", events.next())
            .await
            .expect("the stream is open");
        if ev
            .json()
            .is_some_and(|m| m["method"] == "notifications/progress")
        {
            progress += 1;
        }
    }
    // ...then Redis dies while the call still runs.
    redis.kill();
    let killed = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let ev = events
                .next()
                .await
                .expect("the stream ended without the answer");
            if let Some(m) = ev.json()
                && m["id"] == 7
            {
                break m;
            }
        }
    })
    .await
    .expect("the answer reached the stream");
    assert_eq!(answer["result"]["content"][0]["text"], "ticked", "{answer}");
    let tool_left = TICKING.saturating_sub(killed - started);
    let elapsed = killed.elapsed();
    assert!(
        elapsed <= tool_left + COMMAND_TIMEOUT + Duration::from_secs(1),
        "the answer took {elapsed:?} after the kill ({tool_left:?} of work was left)"
    );
}

/// A server on the Redis at `url` (commands bounded by [`COMMAND_TIMEOUT`]) with one tool,
/// `ticker`: progress every 100 ms for [`TICKING`], then `ticked`.
async fn ticker_server(url: &str, edit: impl FnOnce(&mut fleetmcp::Config)) -> TestServer {
    let cfg = config_from(&[("MCP_SESSION_SECRET", SECRET), ("REDIS_URL", url)], |c| {
        c.redis
            .as_mut()
            .expect("REDIS_URL configures redis")
            .command_timeout_ms = COMMAND_TIMEOUT.as_millis() as u64;
        edit(c);
    });
    let builder = Server::builder("abuse-redis", "1.0.0").tool(
        tool("ticker")
            .description("Progress every 100 ms for two seconds")
            .handler(|_: NoArgs, ctx| async move {
                let steps = (TICKING.as_millis() / 100) as u32;
                for i in 0..steps {
                    ctx.progress(f64::from(i), Some(f64::from(steps)), None);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok("ticked")
            }),
    );
    serve(builder, cfg).await
}

/// How long the `ticker` tool runs, sending progress every 100 ms.
const TICKING: Duration = Duration::from_secs(2);
/// `redis.command_timeout_ms` (the default).
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_answer_reaches_its_client_when_redis_is_killed_under_it() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let s = ticker_server(&url, |c| {
        c.machine_id = Some("desk-a".into());
    })
    .await;
    let c = Client::connect_with(&s.mcp, LATEST, json!({})).await;

    let started = Instant::now();
    let res = c.start_tool(7, "ticker", json!({})).await;
    let mut events = SseStream::new(res);
    // A few progress events arrive from the store (they carry event ids)...
    let mut stored = 0;
    while stored < 3 {
        let ev = events.next().await.expect("the answer is still streaming");
        if let Some(msg) = ev.json() {
            assert_eq!(msg["method"], "notifications/progress", "{msg}");
            assert!(ev.id.is_some(), "stored events are resumable: {ev:?}");
            stored += 1;
        }
    }
    // ...then Redis dies while the answer is being written.
    redis.kill();
    let killed = Instant::now();
    let answer = loop {
        let ev = events
            .next()
            .await
            .expect("the stream ended without an answer");
        if let Some(msg) = ev.json()
            && msg.get("method").is_none()
        {
            break (ev, msg);
        }
    };
    let elapsed = killed.elapsed();
    let (ev, msg) = answer;
    assert_eq!(msg["id"], 7, "{msg}");
    assert_eq!(msg["result"]["content"][0]["text"], "ticked", "{msg}");
    assert!(
        ev.id.is_none(),
        "an answer the store could not keep is not resumable: {ev:?}"
    );
    // The answer is due when the tool ends; it may be late by one command timeout, plus 1 s.
    let tool_left = TICKING.saturating_sub(killed - started);
    assert!(
        elapsed <= tool_left + COMMAND_TIMEOUT + Duration::from_secs(1),
        "the answer took {elapsed:?} after the kill ({tool_left:?} of work was left)"
    );
    // And the stream ends: nothing waits for an end marker that cannot come.
    let rest = within("the end of the stream", async {
        let mut n = 0;
        while events.next().await.is_some() {
            n += 1;
        }
        n
    })
    .await;
    assert_eq!(rest, 0, "nothing follows the answer");
}

// ---------------------------------------------------------------------------------------------
// (3) Client data kept per session
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_info_and_subscriptions_are_bounded_and_nothing_is_kept_past_them() {
    let s = start_with(SECRET, |c| {
        c.sessions.max_client_info_bytes = 4096;
        c.sessions.max_subscriptions = 3;
        c.sessions.max_subscription_uri_bytes = 256;
    })
    .await;

    // A 2 MB clientInfo: refused with the limit named, and no session is opened.
    let big = json!({"name": "x".repeat(2 * 1024 * 1024), "version": "1"});
    let body = json!({"jsonrpc": "2.0", "id": "init-1", "method": "initialize", "params": {
        "protocolVersion": LATEST, "capabilities": {}, "clientInfo": big}});
    let res = within("initialize", mcp_post(&s.mcp).body(body.to_string()).send())
        .await
        .expect("POST");
    assert!(res.headers().get("mcp-session-id").is_none());
    let v = expect_rpc_error(res, 400, -32602, json!("init-1")).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("sessions.max_client_info_bytes (4096)")),
        "{v}"
    );
    // Capabilities count too.
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": LATEST, "capabilities": {"experimental": {"pad": "y".repeat(5000)}},
        "clientInfo": {"name": "c", "version": "1"}}});
    let res = within("initialize", mcp_post(&s.mcp).body(body.to_string()).send())
        .await
        .expect("POST");
    expect_rpc_error(res, 400, -32602, json!(2)).await;
    assert_eq!(
        s.handle.session_count(),
        0,
        "a refused initialize holds no session"
    );

    // Subscriptions: three fit; a fourth is refused and not stored.
    let c = Client::connect_with(&s.mcp, LATEST, json!({})).await;
    for i in 0..3 {
        let v = c
            .call_json(
                "resources/subscribe",
                json!({"uri": format!("test://r/{i}")}),
            )
            .await;
        assert!(v.get("error").is_none(), "{v}");
    }
    for attempt in 0..2 {
        let res = c
            .request_with_id(
                json!(100 + attempt),
                "resources/subscribe",
                json!({"uri": "test://r/3"}),
            )
            .await;
        let v = expect_rpc_error(res, 200, -32602, json!(100 + attempt)).await;
        // Refused both times: had the first been stored, the second would be accepted as
        // a subscription the session already has.
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("sessions.max_subscriptions (3)")),
            "{v}"
        );
    }
    // A URI over the length bound, even with room.
    let v = c
        .call_json("resources/unsubscribe", json!({"uri": "test://r/0"}))
        .await;
    assert!(v.get("error").is_none(), "{v}");
    let long = format!("test://r/{}", "u".repeat(1024 * 1024));
    let res = c
        .request_with_id(json!("long"), "resources/subscribe", json!({"uri": long}))
        .await;
    let v = expect_rpc_error(res, 200, -32602, json!("long")).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("sessions.max_subscription_uri_bytes (256)")),
        "{v}"
    );
    // The freed slot is still free (the long URI took nothing), and the session still works.
    let v = c
        .call_json("resources/subscribe", json!({"uri": "test://r/3"}))
        .await;
    assert!(v.get("error").is_none(), "{v}");
    let v = c.call_json("ping", json!({})).await;
    assert_eq!(v["result"], json!({}), "{v}");
}

// ---------------------------------------------------------------------------------------------
// (4) Ended sessions stay ended
// ---------------------------------------------------------------------------------------------

fn legacy_initialize(id: i64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}})
    .to_string()
}

async fn post_message(base: &str, sid: &str, body: String) -> reqwest::Response {
    within(
        "POST /message",
        mcp_post(&format!("{base}/message?sessionId={sid}"))
            .body(body)
            .send(),
    )
    .await
    .expect("POST /message")
}

/// Opens `GET /sse`; the stream and the session id its endpoint event announces.
async fn open_sse(base: &str) -> (SseStream, String) {
    let res = within(
        "GET /sse",
        support::http()
            .get(format!("{base}/sse"))
            .header("accept", "text/event-stream")
            .send(),
    )
    .await
    .expect("GET /sse");
    let mut events = SseStream::new(res);
    let ev = events.next().await.expect("endpoint event");
    assert_eq!(ev.event.as_deref(), Some("endpoint"));
    let sid = ev
        .data
        .strip_prefix("/message?sessionId=")
        .expect("endpoint names the session")
        .to_string();
    (events, sid)
}

async fn assert_not_found(res: reqwest::Response, what: &str) {
    assert_eq!(res.status(), 404, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_session_never_comes_back_and_legacy_initialize_needs_its_stream_here() {
    // The reported sequence: initialize, DELETE, then a 2024-11-05 initialize of the same id.
    let a = start().await;
    let c = Client::connect(&a).await;
    let sid = c.session_id().to_string();
    let res = within("DELETE", c.delete().send()).await.expect("DELETE");
    assert_eq!(res.status(), 204);
    assert_not_found(
        post_message(&a.base, &sid, legacy_initialize(1)).await,
        "/message initialize of a deleted session",
    )
    .await;
    let res = c.request_with_id(json!(2), "tools/list", json!({})).await;
    assert_not_found(res, "/mcp after the revival attempt").await;

    // An id minted by a stream open on another instance (same secret) does not open here...
    let b = start().await;
    let (stream_on_b, sid_b) = open_sse(&b.base).await;
    assert_not_found(
        post_message(&a.base, &sid_b, legacy_initialize(3)).await,
        "/message initialize for a stream open elsewhere",
    )
    .await;
    // ...but does where its stream is open.
    let res = post_message(&b.base, &sid_b, legacy_initialize(4)).await;
    assert_eq!(res.status(), 202);
    // Once the stream closes the session is over, and initialize does not reopen it.
    drop(stream_on_b);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let res = post_message(&b.base, &sid_b, legacy_initialize(5)).await;
        if res.status() == 404 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a closed stream's session still initializes: {}",
            res.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An /sse stream opened but never initialized, then closed: its id is refused too.
    let (never_used, sid_c) = open_sse(&b.base).await;
    drop(never_used);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_not_found(
        post_message(&b.base, &sid_c, legacy_initialize(6)).await,
        "/message initialize after the stream closed",
    )
    .await;
    // A foreign deployment's id is still `invalid session id`, not opened.
    let other = start_with(OTHER_SECRET, |_| {}).await;
    let (_stream, foreign) = open_sse(&other.base).await;
    let res = post_message(&a.base, &foreign, legacy_initialize(7)).await;
    expect_rpc_error(res, 404, -32000, json!(7)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_deleted_on_one_instance_is_not_revived_on_another_sharing_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let instance = |machine: &'static str| {
        let cfg = config_from(
            &[("MCP_SESSION_SECRET", SECRET), ("REDIS_URL", url.as_str())],
            |c| c.machine_id = Some(machine.into()),
        );
        serve(
            Server::builder("abuse-fleet", "1.0.0").tool(
                tool("hi")
                    .description("Hi")
                    .handler(|_: NoArgs, _| async { Ok("hi") }),
            ),
            cfg,
        )
    };
    let a = instance("desk-a").await;
    let b = instance("desk-b").await;
    let c = Client::connect_with(&a.mcp, LATEST, json!({})).await;
    let sid = c.session_id().to_string();
    // Served by the other instance while it lives (the shared store knows it).
    let mut on_b = Client::bare(&b.mcp, LATEST);
    on_b.session = Some(sid.clone());
    let v = on_b.call_json("tools/list", json!({})).await;
    assert!(v.get("error").is_none(), "{v}");
    let res = within("DELETE", c.delete().send()).await.expect("DELETE");
    assert_eq!(res.status(), 204);
    assert_eq!(
        redis.cli(&["EXISTS", &format!("mcp:session:{sid}")]),
        "0",
        "the record is gone"
    );
    // B held it once, so B's copy must not survive either; nor may a legacy initialize on
    // either instance write it back.
    for s in [&b, &a] {
        assert_not_found(
            post_message(&s.base, &sid, legacy_initialize(1)).await,
            "/message initialize of an id deleted elsewhere",
        )
        .await;
    }
    assert_eq!(
        redis.cli(&["EXISTS", &format!("mcp:session:{sid}")]),
        "0",
        "nothing wrote the record back"
    );
    for s in [&b, &a] {
        let res = within(
            "POST /mcp",
            mcp_post(&s.mcp)
                .header("mcp-session-id", &sid)
                .header("mcp-protocol-version", LATEST)
                .body(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}).to_string())
                .send(),
        )
        .await
        .expect("POST /mcp");
        assert_not_found(res, "/mcp after the delete").await;
    }
}
