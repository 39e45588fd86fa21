//! The 2024-11-05 HTTP+SSE transport: `GET /sse` announces the POST endpoint, every answer
//! arrives on that one stream, and the session ends with the stream.

use std::time::Duration;

use fleetmcp::{Config, LogLevel, NoArgs, Server, tool};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Value, json};

async fn start() -> (String, tokio::sync::oneshot::Sender<()>) {
    let cfg = Config::from_sources(
        None,
        [("MCP_SESSION_SECRET", "legacy-sse-test-secret-01234")],
    )
    .unwrap();
    let server = Server::builder("legacy", "1.0.0")
        .config(cfg)
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
        ))
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve_on(listener, async move {
        let _ = rx.await;
    }));
    (base, tx)
}

/// SSE events `(event, data)` of a response body.
struct Events {
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

impl Events {
    async fn next(&mut self) -> (String, String) {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..end + 2).collect();
                if frame.starts_with(':') {
                    continue;
                }
                let event = frame
                    .lines()
                    .find_map(|l| l.strip_prefix("event: "))
                    .unwrap_or("message");
                let data = frame
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap_or("");
                return (event.to_string(), data.to_string());
            }
            let chunk = tokio::time::timeout(Duration::from_secs(5), self.body.next())
                .await
                .expect("an event within 5 s")
                .expect("the stream is open")
                .unwrap();
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

async fn post(url: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_old_client_talks_through_one_stream() {
    let (base, _stop) = start().await;
    let res = reqwest::Client::new()
        .get(format!("{base}/sse"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut events = Events {
        body: res.bytes_stream().boxed(),
        buf: String::new(),
    };
    let (event, endpoint) = events.next().await;
    assert_eq!(event, "endpoint");
    assert!(endpoint.starts_with("/message?sessionId="), "{endpoint}");
    let url = format!("{base}{endpoint}");

    let res = post(&url, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}}))
    .await;
    assert_eq!(res.status(), 202, "answers travel on the stream");
    let (event, data) = events.next().await;
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
    let (_, log) = events.next().await;
    let (_, answer) = events.next().await;
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
    let (_, err) = events.next().await;
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
