//! The 2026-07-28 era against a real server on loopback: validation order and codes, mirrored
//! headers, `subscriptions/listen`, and a session-era client served next to a stateless one.
//! Multi-round requests with a sealed `requestState` are in `stateless_rounds.rs`; the server
//! both run is `support_stateless`.

mod support;
mod support_stateless;

use std::sync::atomic::Ordering;
use std::time::Duration;

use fleetmcp::{NoArgs, prompt, tool};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{SseStream, eventually, within};
use support_stateless::*;

/// A `400` `-32021` answer naming `capabilities` as the ones required.
fn assert_requires(status: StatusCode, body: &str, capabilities: Value) {
    assert_eq!(
        (status, error_code(body)),
        (StatusCode::BAD_REQUEST, -32021),
        "{body}"
    );
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        v["error"]["data"]["requiredCapabilities"], capabilities,
        "{body}"
    );
}

fn set(headers: &mut Vec<(String, String)>, name: &str, value: Option<&str>) {
    headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
    if let Some(v) = value {
        headers.push((name.to_string(), v.to_string()));
    }
}

#[tokio::test]
async fn every_header_mismatch_is_400_with_minus_32020() {
    let s = start(|_| {}).await;
    let (good_h, body) = modern("tools/call", json!({"name": "echo", "arguments": {}}));
    let (st, _, b) = post(&s.mcp, &good_h, &body).await;
    assert_eq!(st, StatusCode::OK, "{b}");

    type Edit = Box<dyn Fn(&mut Vec<(String, String)>)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "no version header",
            Box::new(|h| set(h, "MCP-Protocol-Version", None)),
        ),
        ("no Mcp-Method", Box::new(|h| set(h, "Mcp-Method", None))),
        (
            "other Mcp-Method",
            Box::new(|h| set(h, "Mcp-Method", Some("tools/list"))),
        ),
        (
            "Mcp-Method in other case",
            Box::new(|h| set(h, "Mcp-Method", Some("TOOLS/CALL"))),
        ),
        ("no Mcp-Name", Box::new(|h| set(h, "Mcp-Name", None))),
        (
            "other Mcp-Name",
            Box::new(|h| set(h, "Mcp-Name", Some("other"))),
        ),
        (
            "bad base64 Mcp-Name",
            Box::new(|h| set(h, "Mcp-Name", Some("=?base64?***?="))),
        ),
        // Repeated, a mirrored header names no one value: a gateway reading another copy
        // would see another call than the one that runs. Even the same value twice.
        (
            "Mcp-Name repeated",
            Box::new(|h| h.push(("Mcp-Name".into(), "other".into()))),
        ),
        (
            "Mcp-Name repeated with the same value",
            Box::new(|h| h.push(("Mcp-Name".into(), "echo".into()))),
        ),
        (
            "Mcp-Method repeated",
            Box::new(|h| h.push(("Mcp-Method".into(), "tools/list".into()))),
        ),
        (
            "MCP-Protocol-Version repeated",
            Box::new(|h| h.push(("MCP-Protocol-Version".into(), "2025-11-25".into()))),
        ),
    ];
    for (what, edit) in cases {
        let mut h = good_h.clone();
        edit(&mut h);
        let (st, _, b) = post(&s.mcp, &h, &body).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{what}: {b}");
        assert_eq!(error_code(&b), -32020, "{what}: {b}");
    }
    // Encoded and padded values that match are fine; names are case-insensitive.
    let mut h = good_h.clone();
    set(&mut h, "Mcp-Name", Some("=?base64?ZWNobw==?="));
    set(&mut h, "mcp-method", Some("  tools/call "));
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(st, StatusCode::OK, "{b}");

    // The header says 2026-07-28 but the body another version: a mismatch, not a bad version.
    let mut m = meta();
    m["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let (h, body) = modern("tools/list", json!({"_meta": m}));
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(
        (st, error_code(&b)),
        (StatusCode::BAD_REQUEST, -32020),
        "{b}"
    );
}

#[tokio::test]
async fn mcp_param_headers_mirror_annotated_arguments() {
    let s = start(|_| {}).await;
    let (base, body) = modern(
        "tools/call",
        json!({"name": "regional", "arguments": {"region": "eu-west1", "count": 3}}),
    );
    let with = |extra: &[(&str, &str)]| {
        let mut h = base.clone();
        for (k, v) in extra {
            h.push((k.to_string(), v.to_string()));
        }
        h
    };
    let (st, _, b) = post(
        &s.mcp,
        &with(&[("Mcp-Param-Region", "eu-west1"), ("Mcp-Param-Count", "3")]),
        &body,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let (st, _, b) = post(
        &s.mcp,
        &with(&[
            ("Mcp-Param-Region", "=?base64?ZXUtd2VzdDE=?="),
            ("Mcp-Param-Count", "3.0"),
        ]),
        &body,
    )
    .await;
    assert_eq!(
        st,
        StatusCode::OK,
        "encoded string, integer compared numerically: {b}"
    );
    for bad in [
        vec![("Mcp-Param-Count", "3")],
        vec![("Mcp-Param-Region", "us-east1"), ("Mcp-Param-Count", "3")],
        vec![("Mcp-Param-Region", "eu-west1"), ("Mcp-Param-Count", "4")],
    ] {
        let (st, _, b) = post(&s.mcp, &with(&bad), &body).await;
        assert_eq!(
            (st, error_code(&b)),
            (StatusCode::BAD_REQUEST, -32020),
            "{bad:?}: {b}"
        );
    }
    // An absent argument needs no header, and must not have one.
    let (h, body) = modern("tools/call", json!({"name": "regional", "arguments": {}}));
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let mut h2 = h.clone();
    h2.push(("Mcp-Param-Region".into(), "eu".into()));
    let (st, _, b) = post(&s.mcp, &h2, &body).await;
    assert_eq!(
        (st, error_code(&b)),
        (StatusCode::BAD_REQUEST, -32020),
        "{b}"
    );
}

#[tokio::test]
async fn meta_version_capability_and_method_errors() {
    let s = start(|_| {}).await;
    // _meta missing, or missing a required field: -32602 (even though the headers are there).
    for m in [
        json!(null),
        json!({"io.modelcontextprotocol/clientCapabilities": {}}),
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
    ] {
        let params = if m.is_null() {
            json!({})
        } else {
            json!({"_meta": m})
        };
        let mut body =
            json!({"jsonrpc": "2.0", "id": 7, "method": "server/discover", "params": params});
        if m.is_null() {
            body["params"] = json!({});
        }
        let h = vec![
            ("MCP-Protocol-Version".into(), "2026-07-28".into()),
            ("Mcp-Method".into(), "server/discover".into()),
        ];
        let (st, _, b) = post(&s.mcp, &h, &body).await;
        assert_eq!(
            (st, error_code(&b)),
            (StatusCode::BAD_REQUEST, -32602),
            "{m}: {b}"
        );
    }
    // clientInfo is optional.
    let (h, body) = modern("server/discover", json!({}));
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let r = result(&b);
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert!(r["capabilities"]["tools"].is_object() && r["capabilities"]["prompts"].is_object());
    assert!(r["ttlMs"].is_u64() && r["cacheScope"].is_string(), "{r}");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "stateless-test"
    );

    // Unsupported version in header and body: -32022 naming what is supported.
    let mut m = meta();
    m["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let (mut h, body) = modern("server/discover", json!({"_meta": m}));
    set(&mut h, "MCP-Protocol-Version", Some("2099-01-01"));
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(
        (st, error_code(&b)),
        (StatusCode::BAD_REQUEST, -32022),
        "{b}"
    );
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(
        v["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "2099-01-01"})
    );

    // Removed and unknown methods: 404 -32601.
    for method in [
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "initialize",
        "no/such/method",
    ] {
        let (h, body) = modern(method, json!({}));
        let (st, _, b) = post(&s.mcp, &h, &body).await;
        assert_eq!(
            (st, error_code(&b)),
            (StatusCode::NOT_FOUND, -32601),
            "{method}: {b}"
        );
    }

    // A tool that needs a capability the request did not declare: -32021 with an object.
    let (h, body) = modern(
        "tools/call",
        json!({"name": "needs_sampling", "arguments": {}}),
    );
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_requires(st, &b, json!({"sampling": {}}));
    let mut m = meta();
    m["io.modelcontextprotocol/clientCapabilities"] = json!({"sampling": {}});
    let (h, body) = modern(
        "tools/call",
        json!({"name": "needs_sampling", "arguments": {}, "_meta": m}),
    );
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    assert_eq!(result(&b)["resultType"], "complete");

    // Resource not found is -32602 with the URI in this era.
    let (h, body) = modern("resources/read", json!({"uri": "test://nope"}));
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(error_code(&b), -32602, "{st}: {b}");
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["error"]["data"]["uri"], "test://nope");
}

/// 2026-07-28 has no resumption: a client that closes an SSE answer cancels the request, even
/// while the handler sends nothing.
#[tokio::test]
async fn closing_a_streamed_answer_cancels_a_silent_handler() {
    let s = start(|_| {}).await;
    let mut m = meta();
    m["io.modelcontextprotocol/logLevel"] = json!("info");
    let (h, body) = modern(
        "tools/call",
        json!({"name": "log_then_wait", "arguments": {}, "_meta": m}),
    );
    let res = within("POST", request(&s.mcp, &h, &body).send())
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut stream = SseStream::new(res);
    let first = within("the log event", stream.next())
        .await
        .expect("an event");
    assert_eq!(
        first.json().expect("JSON")["method"],
        "notifications/message"
    );
    let before = DROPPED_WAITING.load(Ordering::SeqCst);
    drop(stream);
    eventually(
        "the handler is dropped once its client closed the stream",
        Duration::from_secs(3),
        || DROPPED_WAITING.load(Ordering::SeqCst) > before,
    )
    .await;
}

#[tokio::test]
async fn log_messages_only_when_the_request_asks() {
    let s = start(|_| {}).await;
    let (h, body) = modern("tools/call", json!({"name": "chatty", "arguments": {}}));
    let (st, hdrs, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        hdrs["content-type"], "application/json",
        "no log level: a plain answer, no messages: {b}"
    );
    let mut m = meta();
    m["io.modelcontextprotocol/logLevel"] = json!("info");
    let (h, body) = modern(
        "tools/call",
        json!({"name": "chatty", "arguments": {}, "_meta": m}),
    );
    let res = within("POST", request(&s.mcp, &h, &body).send())
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let msgs = SseStream::new(res)
        .messages_until(|v| v.get("result").is_some())
        .await;
    assert_eq!(msgs[0]["method"], "notifications/message");
    assert_eq!(msgs.last().unwrap()["result"]["resultType"], "complete");
    assert!(
        msgs.iter()
            .all(|m| m.get("id").is_none() || m.get("result").is_some()),
        "no requests on the stream"
    );
}

#[tokio::test]
async fn listen_streams_are_acknowledged_tagged_and_filtered() {
    let s = start(|_| {}).await;
    let open = |filter: Value| {
        let url = s.mcp.clone();
        async move {
            let (h, mut body) = modern("subscriptions/listen", json!({"notifications": filter}));
            body["id"] = json!("sub-1");
            let res = within("listen POST", request(&url, &h, &body).send());
            SseStream::new(res.await.unwrap())
        }
    };
    let mut tools = open(json!({"toolsListChanged": true})).await;
    let mut prompts = open(json!({"promptsListChanged": true})).await;
    let reader = tokio::spawn(async move {
        tools
            .messages_until(|v| v["method"] == "notifications/tools/list_changed")
            .await
    });
    let prompt_reader = tokio::spawn(async move {
        prompts
            .messages_until(|v| v["method"] == "notifications/prompts/list_changed")
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.handle
        .add_tool(
            tool("late")
                .description("Added later")
                .handler(|_: NoArgs, _| async { Ok("late") }),
        )
        .await
        .expect("no state needed");
    s.handle
        .add_prompt(
            prompt("late")
                .description("Added later")
                .get(|_: NoArgs, _| async { Ok(Vec::<fleetmcp::model::PromptMessage>::new()) }),
        )
        .await
        .expect("no state needed");
    let msgs = reader.await.unwrap();
    assert_eq!(
        msgs[0]["method"], "notifications/subscriptions/acknowledged",
        "{msgs:?}"
    );
    assert_eq!(
        msgs[0]["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    assert!(
        msgs.iter()
            .all(|m| m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub-1"),
        "{msgs:?}"
    );
    assert_eq!(
        msgs.last().unwrap()["method"],
        "notifications/tools/list_changed"
    );
    let pmsgs = prompt_reader.await.unwrap();
    assert!(
        pmsgs
            .iter()
            .all(|m| m["method"] != "notifications/tools/list_changed"),
        "filtered: {pmsgs:?}"
    );
    assert_eq!(
        pmsgs.last().unwrap()["method"],
        "notifications/prompts/list_changed"
    );
}

#[tokio::test]
async fn a_session_client_and_a_stateless_client_side_by_side() {
    let s = start(|_| {}).await;
    let client = support::http();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}});
    let res = within("initialize", request(&s.mcp, &[], &init).send())
        .await
        .unwrap();
    let sid = res.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        result(&res.text().await.unwrap())["protocolVersion"],
        "2025-06-18"
    );
    for i in 0..3 {
        let legacy = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {"i": i}}});
        let h = vec![
            ("mcp-session-id".to_string(), sid.clone()),
            ("mcp-protocol-version".into(), "2025-06-18".into()),
        ];
        let (st, hdrs, b) = post(&s.mcp, &h, &legacy).await;
        assert_eq!(st, StatusCode::OK, "{b}");
        let r = result(&b);
        assert!(
            r.get("resultType").is_none(),
            "session-era results have no resultType: {r}"
        );
        assert!(hdrs.get("mcp-session-id").is_none());

        let (h, body) = modern("tools/call", json!({"name": "echo", "arguments": {"i": i}}));
        let mut h = h;
        h.push(("Mcp-Session-Id".into(), "ignored-in-this-era".into()));
        let (st, hdrs, b) = post(&s.mcp, &h, &body).await;
        assert_eq!(
            st,
            StatusCode::OK,
            "a 2026 request ignores any session id: {b}"
        );
        assert_eq!(result(&b)["resultType"], "complete");
        assert!(
            hdrs.get("mcp-session-id").is_none(),
            "never minted in this era"
        );
    }
    // GET and DELETE without a session are 405 in the new era.
    let res = client
        .get(&s.mcp)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(res.headers()["allow"], "POST");
    let res = client
        .delete(&s.mcp)
        .header("mcp-protocol-version", "2026-07-28")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
    // Nor with a session: a 2026 DELETE that names a live session is 405 and ends nothing
    // (it used to end it); with a version header of no era it is a bad session-era one.
    for (version, status) in [
        ("2026-07-28", StatusCode::METHOD_NOT_ALLOWED),
        ("2099-01-01", StatusCode::BAD_REQUEST),
    ] {
        let res = client
            .delete(&s.mcp)
            .header("mcp-protocol-version", version)
            .header("mcp-session-id", sid.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), status, "DELETE with version {version}");
    }
    let legacy = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let h = vec![
        ("mcp-session-id".to_string(), sid.clone()),
        ("mcp-protocol-version".into(), "2025-06-18".into()),
    ];
    let (st, _, b) = post(&s.mcp, &h, &legacy).await;
    assert_eq!(
        st,
        StatusCode::OK,
        "the session outlived the refused DELETEs: {b}"
    );
    // A request with no version, no session and no initialize gets the session era's 400,
    // with no modern error code, so a dual-era client falls back to initialize.
    let bare = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let (st, _, b) = post(&s.mcp, &[], &bare).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&b), -32600);
}

#[tokio::test]
async fn the_default_era_switch_validates_bare_requests_as_stateless() {
    let s = start(|c| c.stateless.default_era = fleetmcp::config::DefaultEra::Stateless).await;
    let bare = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let (st, _, b) = post(&s.mcp, &[], &bare).await;
    assert_eq!(
        (st, error_code(&b)),
        (StatusCode::BAD_REQUEST, -32602),
        "{b}"
    );
}

/// What a message says is taken at its word, never guessed: a request's id is a string or an
/// integer (a `null` one made it a notification, answered `202` and dropped; a fraction, a
/// boolean or an object was served and echoed); a notification whose `_meta` declares
/// 2026-07-28 must carry the version header, like a request (contract 20.3); and a request
/// with a 2026-07-28 version header is of that era whatever `Mcp-Session-Id` it carries
/// (contract 20.2), so a missing `_meta` is what is wrong with it, not its version. A handler
/// needing a capability the request did not declare ends the request with `-32021`.
#[tokio::test]
async fn ids_notifications_and_eras_are_read_as_the_message_says() {
    let s = start(|_| {}).await;
    for id in [
        Value::Null,
        json!(1.5),
        json!(true),
        json!({"a": 1}),
        json!([1]),
    ] {
        let (h, mut body) = modern("tools/list", json!({}));
        body["id"] = id.clone();
        let (st, _, b) = post(&s.mcp, &h, &body).await;
        let v: Value = serde_json::from_str(&b).unwrap_or_else(|_| panic!("id {id}: {b}"));
        assert_eq!(
            (st, v["error"]["code"].as_i64(), &v["id"]),
            (StatusCode::BAD_REQUEST, Some(-32600), &Value::Null),
            "id {id}: {b}"
        );
    }
    for id in [json!("a"), json!(-3), json!(0)] {
        let (h, mut body) = modern("tools/list", json!({}));
        body["id"] = id.clone();
        let (st, _, b) = post(&s.mcp, &h, &body).await;
        let v: Value = serde_json::from_str(&b).unwrap();
        assert_eq!((st, &v["id"]), (StatusCode::OK, &id), "{b}");
    }

    let (mut h, mut body) = modern("notifications/cancelled", json!({"requestId": 1}));
    body.as_object_mut().unwrap().remove("id");
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    set(&mut h, "MCP-Protocol-Version", None);
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    let v: Value = serde_json::from_str(&b).unwrap_or_else(|_| panic!("not JSON: {b}"));
    assert_eq!(
        (st, v["error"]["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(-32020)),
        "{b}"
    );

    // A handler that asks the client for what this request did not declare (here, without
    // declaring `requires_client_capability`): the request is refused with `-32021` and the
    // capability it needed, not answered as a failed tool. A `null` capability is none.
    for caps in [json!({}), json!({"elicitation": null})] {
        let mut m = meta();
        m["io.modelcontextprotocol/clientCapabilities"] = caps.clone();
        let (h, body) = modern(
            "tools/call",
            json!({"name": "two_questions", "arguments": {}, "_meta": m}),
        );
        let (st, _, b) = post(&s.mcp, &h, &body).await;
        assert_requires(st, &b, json!({"elicitation": {}}));
    }

    let (mut h, mut body) = modern("tools/list", json!({}));
    body["params"].as_object_mut().unwrap().remove("_meta");
    h.push(("Mcp-Session-Id".into(), "any-session".into()));
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(
        (st, error_code(&b)),
        (StatusCode::BAD_REQUEST, -32602),
        "{b}"
    );
}

/// SEP-1303: in this era, arguments that fail the input schema are a tool execution error
/// (`isError: true`, the field named), which the model can correct, not `-32602`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_fail_the_schema_are_a_tool_execution_error() {
    let s = start(|_| {}).await;
    for arguments in [json!({}), json!({"count": "three"})] {
        let (h, body) = modern(
            "tools/call",
            json!({"name": "count", "arguments": arguments}),
        );
        let (st, _, b) = post(&s.mcp, &h, &body).await;
        assert_eq!(st, StatusCode::OK, "{b}");
        let v: Value = serde_json::from_str(&b).expect("JSON");
        assert!(v.get("error").is_none(), "{b}");
        assert_eq!(v["result"]["isError"], true, "{b}");
        assert!(
            v["result"]["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("count")),
            "{b}"
        );
    }
    let (h, body) = modern(
        "tools/call",
        json!({"name": "count", "arguments": {"count": 3}}),
    );
    let (st, _, b) = post(&s.mcp, &h, &body).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    assert!(b.contains("count=3"), "{b}");
}
