//! Hardening against protocol abuse, against a real server on loopback: a panicking handler
//! (plain, batched, streamed, as a task in both eras), batch limits, malformed `Host`/`Origin`,
//! the right codes for odd version headers and `inputResponses`, and the per-session limit on
//! requests in flight.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fleetmcp::{Config, NoArgs, Server, TaskSupport, tool};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{
    Client, SECRET, SseStream, TestServer, assert_content_type, config_with, eventually,
    expect_rpc_error, mcp_post, raw_http, serve, within,
};
use tokio::sync::Semaphore;

/// What the `hold` tool shares with its test: how many calls started, and the permits that
/// let them finish.
#[derive(Clone)]
struct Holds {
    started: Arc<AtomicUsize>,
    release: Arc<Semaphore>,
}

impl Holds {
    fn new() -> Self {
        Self {
            started: Arc::new(AtomicUsize::new(0)),
            release: Arc::new(Semaphore::new(0)),
        }
    }
}

async fn start(holds: Holds, tweak: impl FnOnce(&mut Config)) -> TestServer {
    let builder = Server::builder("abuse-test", "1.0.0")
        .tool(
            tool("echo")
                .description("Returns its text")
                .handler(|a: support::EchoArgs, _| async move { Ok(a.text) }),
        )
        .tool(
            tool("boom")
                .description("Panics on purpose")
                .task_support(TaskSupport::Optional)
                .handler(|_: NoArgs, _| async move {
                    if std::hint::black_box(true) {
                        panic!("boom on purpose");
                    }
                    Ok("unreachable")
                }),
        )
        .tool(
            tool("progress_then_boom")
                .description("Sends progress, then panics")
                .handler(|_: NoArgs, ctx: fleetmcp::RequestContext| async move {
                    ctx.progress(0.0, Some(1.0), Some("about to fail"));
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    if std::hint::black_box(true) {
                        panic!("boom after progress");
                    }
                    Ok("unreachable")
                }),
        )
        .tool(tool("hold").description("Runs until the test releases it").handler(
            move |_: NoArgs, _| {
                let holds = holds.clone();
                async move {
                    holds.started.fetch_add(1, Ordering::SeqCst);
                    let permit = holds.release.acquire().await?;
                    permit.forget();
                    Ok("released")
                }
            },
        ))
        .tool(
            tool("two_questions")
                .description("Asks two questions over two rounds")
                .handler(|_: NoArgs, ctx: fleetmcp::RequestContext| async move {
                    let q = |m: &str, f: &str| {
                        json!({"message": m, "requestedSchema": {"type": "object", "properties": {f: {"type": "string"}}}})
                    };
                    let name = ctx.ask("name", "elicitation/create", q("Name?", "name")).await?;
                    let color = ctx
                        .ask("color", "elicitation/create", q("Color?", "color"))
                        .await?;
                    Ok(format!(
                        "{} likes {}",
                        name["content"]["name"].as_str().unwrap_or("?"),
                        color["content"]["color"].as_str().unwrap_or("?")
                    ))
                }),
        );
    serve(builder, config_with(SECRET, tweak)).await
}

/// A 2026-07-28 request with its mirrored headers, declaring elicitation and the tasks
/// extension; its status and JSON body.
async fn modern(url: &str, id: i64, method: &str, mut params: Value) -> (StatusCode, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
    });
    let mut req = mcp_post(url)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
    {
        req = req.header("mcp-name", n.to_string());
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let res = within(method, req.body(body.to_string()).send())
        .await
        .expect("POST");
    let status = res.status();
    (status, within("body", res.json()).await.expect("JSON body"))
}

/// A session at `version`, initialized.
async fn session(url: &str, version: &str) -> Client {
    Client::connect_with(url, version, json!({})).await
}

/// Asserts that the session still serves requests: `echo` answers 200 with its text.
async fn still_serves(c: &Client) {
    let r = c
        .call_tool_json("echo", json!({"text": "still here"}))
        .await;
    assert_eq!(r["content"][0]["text"], "still here", "{r}");
}

/// Polls a task with `poll` until its status is terminal; its last answer.
async fn until_terminal<F, Fut>(what: &str, mut poll: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Value>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let task = poll().await;
        if matches!(
            task["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the task never ended: {task}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (A) A panicking handler is one request's -32603, in every way a request can run; the
/// session, the batch's other items and the server go on.
#[tokio::test]
async fn a_panicking_handler_fails_only_its_own_request() {
    let s = start(Holds::new(), |_| {}).await;

    // A plain call: 200 with -32603 for its id, and the same session serves the next request.
    let c = session(&s.mcp, "2025-11-25").await;
    let res = c
        .request_with_id(
            json!(41),
            "tools/call",
            json!({"name": "boom", "arguments": {}}),
        )
        .await;
    let v = expect_rpc_error(res, 200, -32603, json!(41)).await;
    assert!(
        !v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("boom on purpose"),
        "the panic's message stays in the log: {v}"
    );
    still_serves(&c).await;

    // In a 2025-03-26 batch: the other item is answered.
    let old = session(&s.mcp, "2025-03-26").await;
    let res = old
        .send(&json!([
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "boom", "arguments": {}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "two"}}}
        ]))
        .await;
    assert_eq!(res.status(), 200);
    let answers: Vec<Value> = within("batch body", res.json()).await.expect("JSON array");
    assert_eq!(answers.len(), 2, "{answers:?}");
    let by_id = |id: i64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer for {id}: {answers:?}"))
    };
    assert_eq!(by_id(1)["error"]["code"], -32603, "{answers:?}");
    assert_eq!(
        by_id(2)["result"]["content"][0]["text"],
        "two",
        "{answers:?}"
    );
    still_serves(&old).await;

    // In an SSE answer: the progress arrives, then the stream ends with -32603 for the id.
    let res = c.start_tool(42, "progress_then_boom", json!({})).await;
    assert_eq!(res.status(), 200);
    assert_content_type(&res, "text/event-stream");
    let mut stream = SseStream::new(res);
    let (before, last) = within("SSE answer", stream.until_response(&json!(42))).await;
    assert!(
        before
            .iter()
            .filter_map(|e| e.json())
            .any(|m| m["method"] == "notifications/progress"),
        "the progress came first: {before:?}"
    );
    assert_eq!(last["error"]["code"], -32603, "{last}");
    still_serves(&c).await;

    // A stateless call: the same answer, 200.
    let (st, v) = modern(
        &s.mcp,
        43,
        "tools/call",
        json!({"name": "progress_then_boom", "arguments": {}}),
    )
    .await;
    assert_eq!(
        (st, v["id"].clone(), v["error"]["code"].clone()),
        (StatusCode::OK, json!(43), json!(-32603)),
        "{v}"
    );

    // A 2026-07-28 task: it fails (its record ends) instead of working for ever.
    let (st, v) = modern(
        &s.mcp,
        44,
        "tools/call",
        json!({"name": "boom", "arguments": {}}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    let id = v["result"]["taskId"].as_str().expect("taskId").to_string();
    let task = until_terminal("2026 task", || {
        let (url, id) = (s.mcp.clone(), id.clone());
        async move { modern(&url, 45, "tasks/get", json!({"taskId": id})).await.1["result"].clone() }
    })
    .await;
    assert_eq!(task["status"], "failed", "{task}");
    assert_eq!(task["error"]["code"], -32603, "{task}");

    // A 2025-11-25 session task: failed too, and the session goes on.
    let v = c
        .call_json(
            "tools/call",
            json!({"name": "boom", "arguments": {}, "task": {}}),
        )
        .await;
    let id = v["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {v}"))
        .to_string();
    let task = until_terminal("session task", || {
        let (c, id) = (&c, id.clone());
        async move { c.call_json("tasks/get", json!({"taskId": id})).await["result"].clone() }
    })
    .await;
    assert_eq!(task["status"], "failed", "{task}");
    still_serves(&c).await;
}

/// (B) A batch longer than `http.max_batch_len` is refused while it is parsed: the message
/// after the limit is not even read (a malformed one still gets the limit error).
#[tokio::test]
async fn a_batch_past_its_limit_is_refused_while_parsing() {
    let s = start(Holds::new(), |c| c.http.max_batch_len = 5).await;
    let c = session(&s.mcp, "2025-03-26").await;
    let ping = |id: usize| json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string();
    let batch = |n: usize, tail: &str| {
        let items: Vec<String> = (0..n).map(ping).collect();
        format!("[{}{tail}]", items.join(","))
    };
    let post = |body: String| c.post().body(body).send();

    // Many more items than the limit: 400 -32600, id null.
    let res = within("long batch", post(batch(10_000, "")))
        .await
        .expect("POST");
    let v = expect_rpc_error(res, 400, -32600, Value::Null).await;
    assert_eq!(v["error"]["data"]["maxBatchLen"], 5, "{v}");

    // Item 6 is not JSON at all: still the limit error, so the parse stopped before it.
    let res = within("long batch, bad tail", post(batch(5, ",{not json")))
        .await
        .expect("POST");
    expect_rpc_error(res, 400, -32600, Value::Null).await;

    // The same malformed item within the limit is a parse error (-32700): the two differ.
    let res = within("short batch, bad tail", post(batch(3, ",{not json")))
        .await
        .expect("POST");
    expect_rpc_error(res, 400, -32700, Value::Null).await;

    // Exactly the limit is served.
    let res = within("batch at the limit", post(batch(5, "")))
        .await
        .expect("POST");
    assert_eq!(res.status(), 200);
    let answers: Vec<Value> = within("batch body", res.json()).await.expect("JSON array");
    assert_eq!(answers.len(), 5, "{answers:?}");
}

/// (B) A batch is refused by the version: a header without batches before any session lookup
/// (a session id that does not exist is not even looked at), and a 2025-11-25 session that
/// claims 2025-03-26 in its header by its negotiated version.
#[tokio::test]
async fn batches_follow_the_sessions_version_not_the_header() {
    let s = start(Holds::new(), |_| {}).await;
    let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]).to_string();
    for version in ["2025-06-18", "2026-07-28"] {
        let res = within(
            "batch with a newer version header",
            mcp_post(&s.mcp)
                .header("mcp-session-id", "no-such-session")
                .header("mcp-protocol-version", version)
                .body(batch.clone())
                .send(),
        )
        .await
        .expect("POST");
        let v = expect_rpc_error(res, 400, -32600, Value::Null).await;
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(version),
            "{v}"
        );
    }
    let c = session(&s.mcp, "2025-11-25").await;
    let res = within(
        "batch on a 2025-11-25 session claiming 2025-03-26",
        conforming_with_session(&s.mcp, c.session_id())
            .header("mcp-protocol-version", "2025-03-26")
            .body(batch)
            .send(),
    )
    .await
    .expect("POST");
    let v = expect_rpc_error(res, 400, -32600, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("2025-11-25"),
        "{v}"
    );
    still_serves(&c).await;
}

fn conforming_with_session(url: &str, sid: &str) -> reqwest::RequestBuilder {
    mcp_post(url).header("mcp-session-id", sid)
}

/// (C) `Host` and `Origin` fail closed: a value that is not visible ASCII is `403`, like a
/// foreign one.
#[tokio::test]
async fn malformed_host_and_origin_are_forbidden() {
    let s = start(Holds::new(), |_| {}).await;
    let init = support::initialize_body("2025-11-25", json!({})).to_string();
    let base = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut h: Vec<(&str, &str)> = base.to_vec();
        h.extend_from_slice(extra);
        h
    };
    // The same request with a good Host is served, so the 403s below are the header's doing.
    let ok = raw_http(s.addr, "POST", &with(&[("Host", "localhost")]), &init).await;
    assert_eq!(ok.status, 200, "{}", ok.describe());
    for extra in [
        [("Host", "evil\u{ff}.example"), ("X-Case", "host")],
        [("Host", "localhost"), ("Origin", "http://localhost\u{ff}")],
    ] {
        let r = raw_http(s.addr, "POST", &with(&extra), &init).await;
        assert_eq!(r.status, 403, "{extra:?}: {}", r.describe());
        let v = r.json();
        assert_eq!(v["error"]["code"], -32000, "{v}");
        assert_eq!(v["id"], Value::Null, "{v}");
    }
}

/// (D) The right codes: GET with a session and an unknown version is 400 like POST; a response
/// sent as 2026-07-28 gets that era's refusal; `initialize` with an unknown version header is
/// the session era's unsupported version.
#[tokio::test]
async fn odd_version_headers_get_their_eras_answers() {
    let s = start(Holds::new(), |_| {}).await;
    let c = session(&s.mcp, "2025-11-25").await;

    let res = within(
        "GET with an unknown version",
        c.http
            .get(&s.mcp)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", c.session_id())
            .header("mcp-protocol-version", "1900-01-01")
            .send(),
    )
    .await
    .expect("GET");
    let v = expect_rpc_error(res, 400, -32000, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("Unsupported protocol version"),
        "{v}"
    );

    let res = within(
        "a response sent as 2026-07-28",
        mcp_post(&s.mcp)
            .header("mcp-protocol-version", "2026-07-28")
            .body(json!({"jsonrpc": "2.0", "id": 17, "result": {}}).to_string())
            .send(),
    )
    .await
    .expect("POST");
    let v = expect_rpc_error(res, 400, -32600, json!(17)).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("do not send responses"),
        "{v}"
    );

    let res = within(
        "initialize with an unknown version header",
        mcp_post(&s.mcp)
            .header("mcp-protocol-version", "1900-01-01")
            .body(support::initialize_body("2025-11-25", json!({})).to_string())
            .send(),
    )
    .await
    .expect("POST");
    let v = expect_rpc_error(res, 400, -32000, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("Unsupported protocol version: 1900-01-01"),
        "{v}"
    );
}

/// (D) `inputResponses` answers only what the previous round asked, and never replaces an
/// answer already sealed; what nobody asked for is not sealed into the next state.
#[tokio::test]
async fn input_responses_answer_only_what_was_asked() {
    let s = start(Holds::new(), |_| {}).await;
    let answer = |f: &str, v: &str| json!({"action": "accept", "content": {f: v}});
    let call = |id: i64, extra: Value| {
        let mut p = json!({"name": "two_questions", "arguments": {}});
        if let Value::Object(e) = extra {
            for (k, v) in e {
                p[k] = v;
            }
        }
        modern(&s.mcp, id, "tools/call", p)
    };
    let (st, v) = call(1, json!({})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(v["result"]["inputRequests"].get("name").is_some(), "{v}");
    let state1 = v["result"]["requestState"]
        .as_str()
        .expect("state")
        .to_string();

    // Round 2 answers `name` (asked), and also `color` and a big `junk` (not asked yet).
    let junk = "x".repeat(200_000);
    let (st, v) = call(
        2,
        json!({"requestState": state1, "inputResponses": {
            "name": answer("name", "Ada"),
            "color": answer("color", "green"),
            "junk": {"action": "accept", "content": {"junk": junk}}
        }}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // `color` was not asked in round 1, so it was ignored: the handler asks it now.
    assert_eq!(v["result"]["resultType"], "input_required", "{v}");
    assert!(v["result"]["inputRequests"].get("color").is_some(), "{v}");
    let state2 = v["result"]["requestState"]
        .as_str()
        .expect("state")
        .to_string();
    assert!(
        state2.len() < 4_096,
        "only asked answers are sealed; the state is {} bytes",
        state2.len()
    );

    // Round 3 tries to replace the sealed `name`: the sealed answer stands.
    let (st, v) = call(
        3,
        json!({"requestState": state2, "inputResponses": {
            "name": answer("name", "Eve"),
            "color": answer("color", "red")
        }}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["result"]["content"][0]["text"], "Ada likes red", "{v}");
}

/// (E) A session runs at most `limits.max_inflight_per_session` requests: one more is `429`
/// `-32010` with `Retry-After` and its id; the running ones finish normally, and the session
/// is served again once they have.
#[tokio::test]
async fn requests_in_flight_per_session_are_limited() {
    let holds = Holds::new();
    let s = start(holds.clone(), |c| c.limits.max_inflight_per_session = 2).await;
    let c = Arc::new(session(&s.mcp, "2025-11-25").await);
    let mut running = Vec::new();
    for id in [1, 2] {
        let c = c.clone();
        running.push(tokio::spawn(async move {
            let res = c
                .post()
                .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "hold", "arguments": {}}}))
                .send()
                .await
                .expect("POST");
            let status = res.status();
            let v: Value = res.json().await.expect("JSON");
            (status, v)
        }));
    }
    let started = holds.started.clone();
    eventually("both holds run", Duration::from_secs(3), || {
        started.load(Ordering::SeqCst) == 2
    })
    .await;

    let res = c
        .request_with_id(
            json!("third"),
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "3"}}),
        )
        .await;
    assert_eq!(
        res.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1"),
        "Retry-After"
    );
    let v = expect_rpc_error(res, 429, -32010, json!("third")).await;
    assert_eq!(v["error"]["data"]["maxInflightPerSession"], 2, "{v}");
    // Another session is not limited by this one.
    let other = session(&s.mcp, "2025-11-25").await;
    still_serves(&other).await;

    // Nothing else was lost: both held calls finish with their results.
    holds.release.add_permits(2);
    for (i, task) in running.into_iter().enumerate() {
        let (status, v) = within("held call", task).await.expect("join");
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["id"], json!(i + 1), "{v}");
        assert_eq!(v["result"]["content"][0]["text"], "released", "{v}");
    }
    still_serves(&c).await;
}
