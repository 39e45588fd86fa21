//! `tools/list` and `tools/call`: results, argument validation, pagination, list changes, and
//! notifications sent during a call.

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_return_text_results() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let result = c.call_tool_json("echo", json!({"text": "hello"})).await;
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "hello"}])
    );
    assert_ne!(result["isError"], true);
    assert!(
        result.get("resultType").is_none(),
        "no 2026 fields: {result}"
    );
    let result = c.call_tool_json("add", json!({"a": 2, "b": 3})).await;
    assert_eq!(result_text(&result), "5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_describes_every_tool_with_its_schema() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let v = c.call_json("tools/list", json!({})).await;
    let tools = v["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, FIXTURE_TOOLS);
    assert!(v["result"].get("nextCursor").is_none());
    let echo = &tools[0];
    assert_eq!(echo["description"], "Returns its text");
    assert_eq!(echo["inputSchema"]["type"], "object");
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));
}

/// Before 2025-11-25, arguments that fail the input schema are a protocol error: `-32602`.
const BEFORE_SEP_1303: &str = "2025-06-18";

/// A `tools/call` answer that is a result with `isError: true` (SEP-1303, 2025-11-25 on); its
/// text.
async fn tool_execution_error(res: reqwest::Response, id: Value) -> String {
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.expect("a JSON answer");
    assert_eq!(v["id"], id, "{v}");
    assert!(
        v.get("error").is_none(),
        "a result, not a protocol error: {v}"
    );
    assert_eq!(v["result"]["isError"], true, "{v}");
    result_text(&v["result"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_required_argument_is_a_tool_error_naming_it_from_2025_11_25() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    for args in [json!({}), json!({"txt": "typo"})] {
        let res = c
            .request_with_id(
                json!(1),
                "tools/call",
                json!({"name": "echo", "arguments": args}),
            )
            .await;
        let text = tool_execution_error(res, json!(1)).await;
        assert!(text.contains("echo") && text.contains("text"), "{text}");
    }
    // Omitting `arguments` altogether is the same as `{}`.
    let res = c
        .request_with_id(json!(2), "tools/call", json!({"name": "echo"}))
        .await;
    let text = tool_execution_error(res, json!(2)).await;
    assert!(text.contains("\"text\" is a required property"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_required_argument_is_invalid_params_naming_it_before_2025_11_25() {
    let srv = start().await;
    let c = Client::connect_with(&srv.mcp, BEFORE_SEP_1303, full_capabilities()).await;
    for args in [json!({}), json!({"txt": "typo"})] {
        let res = c
            .request_with_id(
                json!(1),
                "tools/call",
                json!({"name": "echo", "arguments": args}),
            )
            .await;
        let v = expect_rpc_error(res, 200, -32602, json!(1)).await;
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("echo") && msg.contains("text"), "{v}");
        assert_eq!(v["error"]["data"]["errors"][0]["field"], "text", "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_of_the_wrong_type_is_named_in_either_form() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .request_with_id(
            json!(1),
            "tools/call",
            json!({"name": "add", "arguments": {"a": "one", "b": "two"}}),
        )
        .await;
    // Every offending field, so the model can correct them all at once.
    let text = tool_execution_error(res, json!(1)).await;
    assert!(text.contains("add: a:") && text.contains("/b:"), "{text}");
    // Arguments that are not an object at all are not valid params.
    let res = c
        .request_with_id(
            json!(2),
            "tools/call",
            json!({"name": "add", "arguments": [1, 2]}),
        )
        .await;
    expect_rpc_error(res, 200, -32602, json!(2)).await;

    let old = Client::connect_with(&srv.mcp, BEFORE_SEP_1303, full_capabilities()).await;
    let res = old
        .request_with_id(
            json!(3),
            "tools/call",
            json!({"name": "add", "arguments": {"a": 1, "b": "two"}}),
        )
        .await;
    let v = expect_rpc_error(res, 200, -32602, json!(3)).await;
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("add: b:"), "{v}");
    assert_eq!(v["error"]["data"]["tool"], "add");
    assert_eq!(v["error"]["data"]["errors"][0]["field"], "b");
    assert_eq!(v["error"]["data"]["errors"][0]["path"], "/b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_invalid_params() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .request_with_id(json!(1), "tools/call", json!({"name": "nope"}))
        .await;
    let v = expect_rpc_error(res, 200, -32602, json!(1)).await;
    assert_eq!(v["error"]["message"], "Unknown tool: nope");
    // Missing name.
    let res = c
        .request_with_id(json!(2), "tools/call", json!({"arguments": {}}))
        .await;
    expect_rpc_error(res, 200, -32602, json!(2)).await;
}

async fn paged_server() -> TestServer {
    let mut b = fleetmcp::Server::builder("paged", "1.0.0");
    for i in 1..=5 {
        b = b.tool(
            fleetmcp::tool(format!("t{i}"))
                .description("paged tool")
                .handler(|_: fleetmcp::NoArgs, _ctx| async { Ok("x") }),
        );
    }
    serve(b, config_with(SECRET, |cfg| cfg.page_size = 2)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_walks_every_tool_exactly_once() {
    let srv = paged_server().await;
    let c = Client::connect(&srv).await;
    let mut names = Vec::new();
    let mut sizes = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let v = c.call_json("tools/list", params).await;
        let page = v["result"]["tools"].as_array().unwrap();
        sizes.push(page.len());
        names.extend(page.iter().map(|t| t["name"].as_str().unwrap().to_string()));
        match v["result"].get("nextCursor") {
            Some(Value::String(next)) => cursor = Some(next.clone()),
            None => {
                cursor = None;
                break;
            }
            Some(other) => panic!("nextCursor must be a string: {other}"),
        }
    }
    assert!(cursor.is_none(), "the walk ends");
    assert_eq!(sizes, vec![2, 2, 1]);
    assert_eq!(names, vec!["t1", "t2", "t3", "t4", "t5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_cursor_is_invalid_params() {
    use base64::Engine;
    let srv = paged_server().await;
    let c = Client::connect(&srv).await;
    let past_end = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("o99");
    for cursor in ["!!!", "bogus-cursor", past_end.as_str()] {
        let res = c
            .request_with_id(json!(1), "tools/list", json!({"cursor": cursor}))
            .await;
        let v = expect_rpc_error(res, 200, -32602, json!(1)).await;
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Invalid cursor"),
            "{cursor}: {v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_reaches_the_get_stream() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let mut s = SseStream::new(within("GET", c.get().send()).await.unwrap());
    assert!(
        s.next().await.unwrap().is_priming(),
        "the GET stream is attached"
    );

    srv.handle
        .add_tool(
            fleetmcp::tool("late")
                .description("added at runtime")
                .handler(|_: fleetmcp::NoArgs, _ctx| async { Ok("late result") }),
        )
        .await
        .expect("no state needed");
    let ev = s.next().await.expect("a notification");
    let msg = ev.json().unwrap();
    assert_eq!(msg["method"], "notifications/tools/list_changed");
    assert!(msg.get("id").is_none(), "a notification, not a request");
    assert!(srv.handle.has_tool("late"));
    let v = c.call_json("tools/list", json!({})).await;
    assert!(
        v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "late")
    );
    assert_eq!(
        result_text(&c.call_tool_json("late", json!({})).await),
        "late result"
    );

    srv.handle.remove_tool("late").await;
    let msg = s.next().await.unwrap().json().unwrap();
    assert_eq!(msg["method"], "notifications/tools/list_changed");
    assert!(!srv.handle.has_tool("late"));
    let res = c
        .request_with_id(json!(9), "tools/call", json!({"name": "late"}))
        .await;
    expect_rpc_error(res, 200, -32602, json!(9)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_messages_go_out_on_the_call_stream_and_respect_the_level() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c.start_tool(1, "log", json!({})).await;
    let events = SseStream::new(res).rest().await;
    let msgs = messages(&events);
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert_eq!(msgs[0]["method"], "notifications/message");
    assert_eq!(msgs[0]["params"]["level"], "info");
    assert_eq!(msgs[0]["params"]["data"], "first line");
    assert_eq!(msgs[1]["params"]["data"], json!({"line": 2}));
    assert_eq!(result_text(&msgs[2]["result"]), "logged");

    // Above the handler's level, nothing is sent and the answer is plain JSON.
    let v = c
        .call_json("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(v["result"], json!({}));
    let result = c.call_tool_json("log", json!({})).await;
    assert_eq!(result_text(&result), "logged");

    let res = c
        .request_with_id(json!(5), "logging/setLevel", json!({"level": "loud"}))
        .await;
    expect_rpc_error(res, 200, -32602, json!(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_progress_token_progress_is_not_sent_and_the_answer_is_json() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let result = c
        .call_tool_json("progress", json!({"count": 3, "delay_ms": 1}))
        .await;
    assert_eq!(result_text(&result), "done 3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_accepting_only_json_gets_json_even_when_the_tool_sends_progress() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .post()
        .set("accept", "application/json")
        .json(&json!({
            "jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "progress", "arguments": {"count": 2, "delay_ms": 1},
                       "_meta": {"progressToken": "t"}}
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_content_type(&res, "application/json");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["id"], 8);
    assert_eq!(result_text(&v["result"]), "done 2");
}

/// A server whose `call_key` tool answers the key its context names (null for none).
async fn serving_call_keys() -> TestServer {
    let builder = fixture_builder(Default::default()).tool(fleetmcp::tool("call_key").handler(
        |_: fleetmcp::NoArgs, ctx| async move {
            Ok::<_, fleetmcp::ToolError>(ctx.call_key().map_or("null".to_string(), str::to_string))
        },
    ));
    serve(builder, config_with(SECRET, |_| {})).await
}

/// The key `call_key` answers for a call with request id `id` and `_meta` `meta`.
async fn key_of(c: &Client, id: Value, meta: Value) -> String {
    let res = c
        .request_with_id(
            id.clone(),
            "tools/call",
            json!({"name": "call_key", "arguments": {}, "_meta": meta}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.expect("json");
    assert_eq!(v["id"], id, "{v}");
    result_text(&v["result"])
}

/// A handler gets a stable key for its call (issue 18: a tool can make its effect idempotent):
/// without a client key, the session (as a digest, never the id itself, a credential) and the
/// request id, so a call sent again under the same id has the same key, another call another
/// key, and another session's call with the same id another key; with the client's key under
/// `_meta` `io.fleetmcp/idempotency-key`, that key, scoped to the session, whatever the
/// request id. A key longer than 256 bytes is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_gets_a_stable_key_for_its_call() {
    let srv = serving_call_keys().await;
    let a = Client::connect(&srv).await;
    let b = Client::connect(&srv).await;
    let first = key_of(&a, json!(7), json!({})).await;
    assert!(first.starts_with("s/") && first.ends_with("/7"), "{first}");
    assert!(
        !first.contains(a.session_id()),
        "the session id is a credential: {first}"
    );
    assert_eq!(
        key_of(&a, json!(7), json!({})).await,
        first,
        "the same call again"
    );
    assert_ne!(key_of(&a, json!(8), json!({})).await, first, "another call");
    assert_ne!(
        key_of(&b, json!(7), json!({})).await,
        first,
        "another session"
    );
    assert_eq!(
        key_of(&a, json!("7"), json!({})).await,
        // Only the id at the end: the session's digest before it may contain "/7" too.
        format!("{}\"7\"", &first[..first.len() - 1]),
        "a string id is another id than the number"
    );

    let mine = json!({fleetmcp::IDEMPOTENCY_KEY_META: "order-42"});
    let k1 = key_of(&a, json!(20), mine.clone()).await;
    assert!(k1.starts_with("k/s:") && k1.ends_with("/order-42"), "{k1}");
    assert_eq!(
        key_of(&a, json!(21), mine.clone()).await,
        k1,
        "a retry under a new id"
    );
    assert_ne!(
        key_of(&b, json!(20), mine).await,
        k1,
        "scoped to the session"
    );
    let long = "x".repeat(fleetmcp::MAX_IDEMPOTENCY_KEY + 1);
    assert_eq!(
        key_of(&a, json!(22), json!({fleetmcp::IDEMPOTENCY_KEY_META: long})).await,
        "null",
        "an over-long key is ignored"
    );
}
