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

/// A `GET /sse` on a raw socket whose receive buffer is 4 KB, read only when the test says
/// so: a client that stops reading its stream.
struct RawStream {
    socket: tokio::net::TcpStream,
    /// What was read, still chunked.
    raw: Vec<u8>,
}

impl RawStream {
    async fn open(addr: std::net::SocketAddr) -> Self {
        use tokio::io::AsyncWriteExt;
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        // Set before connecting, so the kernel does not grow it (receive-buffer autotuning).
        socket.set_recv_buffer_size(4096).unwrap();
        let mut socket = within("connect", socket.connect(addr)).await.unwrap();
        let head =
            format!("GET /sse HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
        socket.write_all(head.as_bytes()).await.unwrap();
        Self {
            socket,
            raw: Vec::new(),
        }
    }

    /// Reads until the body holds an event for which `done` holds, or the stream stalls for
    /// 3 s (a failure); every event's data (`event: endpoint`'s too).
    async fn read_until(&mut self, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let events = sse_data(&self.raw);
            if done(&events) {
                return events;
            }
            let n = within("the stream's next bytes", self.socket.read(&mut buf))
                .await
                .unwrap();
            assert!(n > 0, "the server closed the stream");
            self.raw.extend_from_slice(&buf[..n]);
        }
    }
}

/// The `data` of every whole SSE event in `raw`, a chunked HTTP response as read so far.
fn sse_data(raw: &[u8]) -> Vec<String> {
    let Some(head_end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Vec::new();
    };
    let mut rest = &raw[head_end + 4..];
    let mut body = Vec::new();
    // Whole chunks only: `<hex size>\r\n<bytes>\r\n`.
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .expect("a chunk size");
        if rest.len() < eol + 2 + size + 2 {
            break;
        }
        body.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
        rest = &rest[eol + 2 + size + 2..];
    }
    let body = String::from_utf8(body).expect("UTF-8 events");
    let mut frames: Vec<&str> = body.split("\n\n").collect();
    frames.pop(); // what follows the last blank line is not a whole event yet
    frames
        .iter()
        .filter_map(|f| f.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(String::from)
        .collect()
}

/// The ids of the JSON-RPC answers among `events`.
fn answered(events: &[String]) -> Vec<i64> {
    events
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|m| m.get("method").is_none())
        .filter_map(|m| m["id"].as_i64())
        .collect()
}

/// A server whose tool `big` answers 20 KB, configured by `edit`, and a session of it on a
/// [`RawStream`], initialized: the server, the stream and the session's `/message` URL.
async fn unread_session(
    edit: impl FnOnce(&mut fleetmcp::Config),
) -> (support::TestServer, RawStream, String) {
    let big = "x".repeat(20_000);
    let builder =
        Server::builder("legacy", "1.0.0").tool(tool("big").description("Answers 20 KB").handler(
            move |_: NoArgs, _| {
                let big = big.clone();
                async move { Ok(big) }
            },
        ));
    let server = serve(builder, config_with(SECRET, edit)).await;
    let mut stream = RawStream::open(server.addr).await;
    let endpoint = stream.read_until(|ev| !ev.is_empty()).await.remove(0);
    let url = format!("{}{endpoint}", server.base);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}});
    assert_eq!(post(&url, init).await.status(), 202);
    stream.read_until(|ev| answered(ev) == [0]).await;
    (server, stream, url)
}

/// Calls `big` (ids 1, 2, ...) while nobody reads the stream, until a call is not accepted (at
/// most 2000): the ids accepted, and the first refused with its answer.
async fn fill(url: &str) -> (Vec<i64>, Option<(i64, reqwest::Response)>) {
    let mut accepted = Vec::new();
    for id in 1..=2000_i64 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "big", "arguments": {}}});
        let res = post(url, call).await;
        if res.status() != 202 {
            return (accepted, Some((id, res)));
        }
        accepted.push(id);
    }
    (accepted, None)
}

/// Issue 36, item 3: a client that does not read its `/sse` stream cannot make the server
/// buffer answers without limit. Past `http.max_unread_bytes` a request is refused `429`
/// `-32010` naming the bound, and not run; every request accepted before is answered, in
/// full, once the client reads.
#[tokio::test]
async fn a_stream_nobody_reads_holds_at_most_its_unread_bound() {
    let (_server, mut stream, url) = unread_session(|c| c.http.max_unread_bytes = 64 * 1024).await;
    // From now on the client reads nothing. The kernel's buffers take some answers; then the
    // stream's bound is reached and requests are refused.
    let (accepted, refusal) = fill(&url).await;
    let (refused_id, res) = refusal.expect("2000 answers of 20 KB were all accepted unread");
    eprintln!("{} requests accepted unread, then refused", accepted.len());
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["retry-after"], "1");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["id"], refused_id, "{body}");
    assert_eq!(body["error"]["code"], -32010, "{body}");
    assert_eq!(
        body["error"]["data"]["limit"], "http.max_unread_bytes",
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("tools/call was not run"), "{message}");

    // The client reads again: every accepted request is answered, whole, and the refused one
    // never ran; the stream takes requests again.
    let events = stream
        .read_until(|ev| answered(ev).len() > accepted.len())
        .await;
    let mut ids = answered(&events);
    ids.retain(|id| *id != 0);
    ids.sort_unstable();
    assert_eq!(ids, accepted, "each accepted request answered once");
    for m in events
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
    {
        if m["id"].as_i64().is_some_and(|id| id > 0) {
            let text = m["result"]["content"][0]["text"].as_str();
            assert_eq!(text.map(str::len), Some(20_000), "{}", m["id"]);
        }
    }
    let again = json!({"jsonrpc": "2.0", "id": refused_id, "method": "ping"});
    assert_eq!(post(&url, again).await.status(), 202);
    let events = stream
        .read_until(|ev| answered(ev).contains(&refused_id))
        .await;
    assert_eq!(
        answered(&events)
            .iter()
            .filter(|id| **id == refused_id)
            .count(),
        1
    );
}

/// A stream left unread (the kernel's buffers full, and the stream's bound) is closed once a
/// write stays blocked `http.write_timeout_ms`, and its session ends with it: nothing it holds
/// outlives the client's patience.
#[tokio::test]
async fn a_stream_left_unread_is_closed_at_the_write_timeout() {
    let (_server, _stream, url) = unread_session(|c| {
        c.http.max_unread_bytes = 64 * 1024;
        c.http.write_timeout_ms = 300;
    })
    .await;
    let (_, refusal) = fill(&url).await;
    let (_, res) = refusal.expect("2000 answers of 20 KB were all accepted unread");
    // Refused for its unread bound, or, when the write timed out first, for its session.
    assert!(
        [429, 404].contains(&res.status().as_u16()),
        "{}",
        res.status()
    );
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    let closed = async {
        while post(&url, ping.clone()).await.status() != 404 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), closed)
        .await
        .expect("the session outlived its unread stream's write timeout by 10 s");
}
