//! The 2024-11-05 HTTP+SSE transport: `GET /sse` announces the POST endpoint, every answer
//! arrives on that one stream, and the session ends with the stream.

mod support;

use std::time::Duration;

use fleetmcp::{LogLevel, NoArgs, Server, tool};
use serde_json::{Value, json};
use support::{SECRET, SseStream, TestServer, config_with, mcp_post, serve, within};

async fn start() -> TestServer {
    let builder = Server::builder("legacy", "1.0.0")
        .tool(
            tool("echo")
                .description("Echoes")
                .raw_handler(|a: Value, _| async move { Ok(a.to_string()) }),
        )
        .tool(tool("chatty").description("Logs, then answers").handler(
            |_: NoArgs, ctx| async move {
                ctx.log(LogLevel::Warning, "first");
                Ok("second")
            },
        ));
    serve(builder, config_with(SECRET, |_| {})).await
}

/// The next SSE event on the open stream, as `(event, data)` (`event` defaults to `message`).
async fn next(events: &mut SseStream) -> (String, String) {
    let ev = events.next().await.expect("the stream is open");
    (ev.event.unwrap_or_else(|| "message".into()), ev.data)
}

async fn post(url: &str, body: Value) -> reqwest::Response {
    within("POST", mcp_post(url).body(body.to_string()).send())
        .await
        .unwrap()
}

/// A stream opened on `base`'s `/sse` and its session initialized: the stream (the answer to
/// `initialize` read off it), the session's `/message` URL and its id.
async fn open_initialized(base: &str) -> (SseStream, String, String) {
    let get = support::http()
        .get(format!("{base}/sse"))
        .header("accept", "text/event-stream");
    let res = within("GET /sse", get.send()).await.unwrap();
    let mut events = SseStream::new(res);
    let (_, endpoint) = next(&mut events).await;
    let sid = endpoint
        .strip_prefix("/message?sessionId=")
        .unwrap_or_else(|| panic!("endpoint {endpoint}"))
        .to_string();
    let url = format!("{base}{endpoint}");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}});
    assert_eq!(post(&url, init).await.status(), 202);
    let (_, data) = next(&mut events).await;
    assert_eq!(serde_json::from_str::<Value>(&data).unwrap()["id"], 1);
    (events, url, sid)
}

#[tokio::test]
async fn an_old_client_talks_through_one_stream() {
    let server = start().await;
    let base = &server.base;
    let get = support::http()
        .get(format!("{base}/sse"))
        .header("accept", "text/event-stream");
    let res = within("GET /sse", get.send()).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut events = SseStream::new(res);
    let (event, endpoint) = next(&mut events).await;
    assert_eq!(event, "endpoint");
    assert!(endpoint.starts_with("/message?sessionId="), "{endpoint}");
    let url = format!("{base}{endpoint}");

    let res = post(&url, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}}))
    .await;
    assert_eq!(res.status(), 202, "answers travel on the stream");
    let (event, data) = next(&mut events).await;
    assert_eq!(event, "message");
    let init: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(init["id"], 1);
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05");
    assert_eq!(
        post(
            &url,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .await
        .status(),
        202
    );

    // A request's messages come before its answer, in order.
    assert_eq!(post(&url, json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "chatty", "arguments": {}}})).await.status(), 202);
    let (_, log) = next(&mut events).await;
    let (_, answer) = next(&mut events).await;
    let log: Value = serde_json::from_str(&log).unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(log["method"], "notifications/message");
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["result"]["content"][0]["text"], "second");

    // Errors answer on the stream too.
    assert_eq!(
        post(
            &url,
            json!({"jsonrpc": "2.0", "id": 3, "method": "no/such"})
        )
        .await
        .status(),
        202
    );
    let (_, err) = next(&mut events).await;
    let err: Value = serde_json::from_str(&err).unwrap();
    assert_eq!(
        (err["id"].as_i64(), err["error"]["code"].as_i64()),
        (Some(3), Some(-32601))
    );

    // Bad POSTs.
    let res = post(
        &format!("{base}/message"),
        json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}),
    )
    .await;
    assert_eq!(res.status(), 400, "no sessionId");
    let res = post(
        &format!("{url}&sessionId=other"),
        json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}),
    )
    .await;
    assert_eq!(res.status(), 400, "two sessionIds name no session");
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body["error"]["message"], "Bad Request: sessionId is repeated",
        "{body}"
    );
    let res = within(
        "POST text/plain",
        support::http()
            .post(&url)
            .header("content-type", "text/plain")
            .body(json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}).to_string())
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 415, "the body must be JSON, as on /mcp");
    let res = post(&format!("{base}/message?sessionId=forged"), json!({"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}}))
    .await;
    assert_eq!(res.status(), 404, "an id this server did not mint");

    // The session ends with its stream.
    drop(events);
    let mut gone = false;
    for _ in 0..50 {
        let res = post(&url, json!({"jsonrpc": "2.0", "id": 6, "method": "ping"})).await;
        if res.status() == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "closing the stream ends the session");
}

/// A 2024-11-05 session answers on its own stream only, and a Streamable HTTP session never
/// on one: `/mcp` refuses the first's id (served there, its answers went to whoever read
/// `GET /mcp`, and the stream got none), and `/message` the second's.
#[tokio::test]
async fn each_transport_serves_only_its_own_sessions() {
    let server = start().await;
    let base = &server.base;
    let (mut events, url, legacy) = open_initialized(base).await;

    // The legacy id on `/mcp`: POST and GET are 404, as for an id no session has there.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"via": "mcp"}}});
    let res = within(
        "POST /mcp",
        mcp_post(&server.mcp)
            .header("mcp-session-id", legacy.as_str())
            .header("mcp-protocol-version", "2024-11-05")
            .body(call.to_string())
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(
        res.status(),
        404,
        "POST /mcp with a 2024-11-05 session's id"
    );
    let res = within(
        "GET /mcp",
        support::http()
            .get(&server.mcp)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", legacy.as_str())
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 404, "GET /mcp with a 2024-11-05 session's id");
    // The session itself still answers, on its stream.
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    assert_eq!(post(&url, ping).await.status(), 202);
    let (_, data) = next(&mut events).await;
    assert_eq!(serde_json::from_str::<Value>(&data).unwrap()["id"], 3);

    // A Streamable HTTP session's id on `/message`: 404.
    let init = json!({"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "new", "version": "0"}}});
    let res = within(
        "initialize",
        mcp_post(&server.mcp).body(init.to_string()).send(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    let modern = res.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let res = post(
        &format!("{base}/message?sessionId={modern}"),
        json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}),
    )
    .await;
    assert_eq!(
        res.status(),
        404,
        "/message with a Streamable HTTP session's id"
    );
}

/// The stream ends when its session ends another way than by the stream closing (here, idle
/// past `sessions.idle_ttl_ms`): a client left on an open stream would never learn that its
/// `/message` now answers 404, nor open `/sse` again.
#[tokio::test]
async fn the_stream_ends_when_its_session_expires() {
    let builder = Server::builder("legacy", "1.0.0").tool(
        tool("echo")
            .description("Echoes")
            .raw_handler(|a: Value, _| async move { Ok(a.to_string()) }),
    );
    let server = serve(
        builder,
        config_with(SECRET, |c| c.sessions.idle_ttl_ms = 1000),
    )
    .await;
    let (mut events, url, _) = open_initialized(&server.base).await;
    // Idle for a second, swept within a quarter of that: the stream ends, with nothing more.
    let ended = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
    match ended {
        Ok(None) => {}
        Ok(Some(ev)) => panic!("an event instead of the end: {:?}", ev.data),
        Err(_) => panic!("the stream outlived its expired session by 10 s"),
    }
    let res = post(&url, json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).await;
    assert_eq!(res.status(), 404, "the session is gone");
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        (
            body["error"]["code"].as_i64(),
            body["error"]["message"].as_str(),
            body["id"].as_i64()
        ),
        (Some(-32001), Some("session expired"), Some(2)),
        "the contract's answer for an expired session: {body}"
    );
}

/// A graceful stop ends a 2024-11-05 stream only once the requests running on it answered
/// (contract 13.1: they finish within the grace period): the answer comes on the stream, and
/// then the stream ends. Its answers had nowhere to go once the stream ended at the stop.
#[tokio::test]
async fn a_graceful_stop_answers_the_running_requests_before_the_stream_ends() {
    let builder = Server::builder("legacy", "1.0.0").tool(
        tool("slow")
            .description("Answers after half a second")
            .handler(|_: NoArgs, _| async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok("done")
            }),
    );
    let mut server = serve(
        builder,
        config_with(SECRET, |c| {
            c.http.drain_ms = Some(0);
            c.http.shutdown_grace_ms = 5000;
        }),
    )
    .await;
    let (mut events, url, _) = open_initialized(&server.base).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "slow", "arguments": {}}});
    assert_eq!(post(&url, call).await.status(), 202);
    server.begin_stop();
    let stop_began = std::time::Instant::now();
    let answer = match tokio::time::timeout(Duration::from_secs(5), events.next()).await {
        Ok(Some(ev)) => serde_json::from_str::<Value>(&ev.data).unwrap(),
        Ok(None) => panic!("the stream ended before the running call answered"),
        Err(_) => panic!("no answer within 5 s of the stop"),
    };
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
    match tokio::time::timeout(Duration::from_secs(5), events.next()).await {
        Ok(None) => {}
        Ok(Some(ev)) => panic!("an event instead of the end: {:?}", ev.data),
        Err(_) => panic!("the stream outlived the stop's last answer by 5 s"),
    }
    server.stopped_within(Duration::from_secs(5)).await;
    assert!(
        stop_began.elapsed() < Duration::from_secs(3),
        "stopped once the call answered, not at the grace's end"
    );
}
