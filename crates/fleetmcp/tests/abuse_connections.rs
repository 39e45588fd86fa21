//! Hardening against connection abuse, with real TCP connections against a real server on
//! loopback: a request head that stops half-way, a body that stops half-way, an idle kept-alive
//! connection, a client that stops reading its answer, and more stalled connections than
//! `http.max_connections` (health still answers; the excess is closed; service resumes).

mod support;

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fleetmcp::{Config, Server, tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use support::raw_http::{self, RawResponse};
use support::{Client, LATEST, SECRET, TestServer, config_with, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Slack for a timer that fires on a busy 2-core machine.
const MARGIN: Duration = Duration::from_millis(1500);

#[derive(Deserialize, JsonSchema)]
struct BigArgs {
    /// Length of the text answered.
    bytes: usize,
}

async fn start(edit: impl FnOnce(&mut Config)) -> TestServer {
    let builder = Server::builder("abuse-connections", "1.0.0")
        .tool(tool("echo").handler(|a: support::EchoArgs, _ctx| async move { Ok(a.text) }))
        .tool(
            tool("big")
                .description("Answers `bytes` bytes of text")
                .handler(|a: BigArgs, _ctx| async move { Ok("x".repeat(a.bytes)) }),
        );
    serve(builder, config_with(SECRET, edit)).await
}

/// Connects and sends `bytes`, then stops.
async fn stalled(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = tokio::time::timeout(MARGIN, TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .expect("connect");
    s.write_all(bytes).await.expect("write");
    s
}

/// Reads until the server closes the connection (end of stream or reset), failing the test if
/// it is still open after `limit`; the time it took and what was read.
async fn closed_within(s: &mut TcpStream, limit: Duration, what: &str) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let left = limit.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => panic!(
                "{what}: still open after {limit:?}; read so far: {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) => return (start.elapsed(), got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(e)) if e.kind() == ErrorKind::ConnectionReset => {
                return (start.elapsed(), got);
            }
            Ok(Err(e)) => panic!("{what}: read failed: {e}"),
        }
    }
}

/// One request on a fresh connection, read whole (blocking client, off the runtime).
async fn send(
    addr: SocketAddr,
    method: &'static str,
    path: &'static str,
    body: Option<&'static str>,
) -> std::io::Result<RawResponse> {
    let host = addr.to_string();
    tokio::task::spawn_blocking(move || {
        let headers = [
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        raw_http::try_send(addr, method, path, &headers, body, MARGIN * 2)
    })
    .await
    .expect("blocking request task")
}

async fn healthz(addr: SocketAddr) -> u16 {
    match send(addr, "GET", "/healthz", None).await {
        Ok(r) => r.status,
        Err(e) => panic!("/healthz: {e}"),
    }
}

#[tokio::test]
async fn a_request_head_that_stops_is_closed_at_the_header_timeout() {
    let server = start(|c| c.http.header_read_timeout_ms = 300).await;
    let mut s = stalled(server.addr, b"GET /hea").await;
    let (took, _) = closed_within(&mut s, Duration::from_millis(300) + MARGIN, "half a head").await;
    assert!(
        took >= Duration::from_millis(250),
        "closed after {took:?}, before the header timeout"
    );
    // A connection that never sends a byte is bounded the same way.
    let mut silent = stalled(server.addr, b"").await;
    closed_within(
        &mut silent,
        Duration::from_millis(300) + MARGIN,
        "a silent connection",
    )
    .await;
    assert_eq!(healthz(server.addr).await, 200, "the server still serves");
}

#[tokio::test]
async fn a_body_that_stops_half_way_gets_408_at_the_body_timeout() {
    let server = start(|c| c.http.body_read_timeout_ms = 400).await;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 200\r\n\r\n",
        server.addr
    );
    let mut s = stalled(server.addr, head.as_bytes()).await;
    s.write_all(&[b' '; 100]).await.expect("half the body");
    let (took, answer) =
        closed_within(&mut s, Duration::from_millis(400) + MARGIN, "half a body").await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "expected 408, got: {answer:?}"
    );
    assert!(
        answer.contains("\"id\":null") && answer.contains("-32000"),
        "a JSON-RPC error: {answer:?}"
    );
    assert!(
        took >= Duration::from_millis(350),
        "answered after {took:?}, before the body timeout"
    );
    // A whole body sent slowly but within the deadline is served.
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        server.addr,
        body.len()
    );
    let mut s = stalled(server.addr, head.as_bytes()).await;
    s.write_all(&body.as_bytes()[..10]).await.expect("part");
    tokio::time::sleep(Duration::from_millis(150)).await;
    s.write_all(&body.as_bytes()[10..]).await.expect("rest");
    let (_, answer) = closed_within(&mut s, MARGIN * 2, "a slow, complete body").await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.starts_with("HTTP/1.1 408"),
        "a body complete in time is not a timeout: {answer:?}"
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout() {
    // The header timeout is far longer: what closes the connection is the idle timeout.
    let server = start(|c| {
        c.http.header_read_timeout_ms = 10_000;
        c.http.idle_timeout_ms = 400;
    })
    .await;
    let req = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    let mut s = stalled(server.addr, req.as_bytes()).await;
    // The answer is complete once its declared length has arrived; then the connection idles.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + MARGIN;
    let answered = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, s.read(&mut buf))
            .await
            .expect("the /healthz answer in time")
            .expect("read");
        assert!(n > 0, "closed before answering");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(usize::MAX))
                })
                .expect("a Content-Length");
            if body.len() >= len {
                break text;
            }
        }
    };
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered:?}");
    let (took, rest) = closed_within(
        &mut s,
        Duration::from_millis(400) + MARGIN,
        "an idle connection",
    )
    .await;
    assert!(rest.is_empty(), "nothing more was sent: {rest:?}");
    assert!(
        took >= Duration::from_millis(300),
        "closed after {took:?}, before the idle timeout"
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_is_closed_at_the_write_timeout() {
    let server = start(|c| c.http.write_timeout_ms = 300).await;
    let client = Client::connect_with(&server.mcp, LATEST, json!({})).await;
    let size = 16 * 1024 * 1024;
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "big", "arguments": {"bytes": size}}
    })
    .to_string();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json\r\n\
         mcp-session-id: {}\r\nmcp-protocol-version: {LATEST}\r\nContent-Length: {}\r\n\r\n{body}",
        server.addr,
        client.session_id(),
        body.len()
    );
    // A small receive buffer, so the server's writes block long before the answer is out.
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut s = tokio::time::timeout(MARGIN, socket.connect(server.addr))
        .await
        .expect("connect in time")
        .expect("connect");
    s.write_all(req.as_bytes()).await.expect("request");
    // The stall under test: read nothing for much longer than the write timeout (the answer is
    // built first: 16 MiB of JSON).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, got) = closed_within(&mut s, Duration::from_secs(10), "a stalled reader").await;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "the answer had started: {:?}",
        String::from_utf8_lossy(&got[..got.len().min(200)])
    );
    assert!(
        got.len() < size,
        "the connection was closed before the whole answer ({} of more than {size} bytes)",
        got.len()
    );
    // The session and the server are unaffected.
    let echoed = client
        .call_tool_json("echo", json!({"text": "still here"}))
        .await;
    assert_eq!(echoed["content"][0]["text"], "still here", "{echoed}");
}

#[tokio::test]
async fn past_max_connections_health_answers_the_excess_is_closed_and_service_resumes() {
    const CAP: usize = 8;
    const RESERVE: usize = 16; // server/listener.rs HEALTH_RESERVE
    let server = start(|c| {
        c.http.max_connections = CAP;
        c.http.header_read_timeout_ms = 5000;
    })
    .await;
    let addr = server.addr;
    let held_since = Instant::now();
    let mut held = Vec::new();
    for _ in 0..CAP {
        held.push(stalled(addr, b"GET /hea").await);
    }
    // The cap is reached: MCP requests get 503 at once, health still answers.
    let busy = send(addr, "POST", "/mcp", Some("{}"))
        .await
        .expect("an answer over the cap");
    assert_eq!(busy.status, 503, "{}", busy.describe());
    assert_eq!(busy.header("retry-after"), Some("1"));
    assert_eq!(busy.json()["error"]["code"], -32000, "{}", busy.describe());
    assert!(busy.elapsed < MARGIN, "answered in {:?}", busy.elapsed);
    assert_eq!(healthz(addr).await, 200, "/healthz over the cap");
    let ready = send(addr, "GET", "/readyz", None).await.expect("/readyz");
    assert_eq!(ready.status, 200, "{}", ready.describe());

    // Stalled clients that take the health reserve too: the next connection is closed at once,
    // and the stalled ones within the short head wait over the cap (2 s).
    let mut reserve = Vec::new();
    for _ in 0..RESERVE {
        reserve.push(stalled(addr, b"GET /hea").await);
    }
    let mut refused = stalled(addr, b"GET /healthz HTTP/1.1\r\n\r\n").await;
    let (took, got) = closed_within(&mut refused, MARGIN, "a connection past the reserve").await;
    assert!(got.is_empty(), "no answer past the reserve: {got:?}");
    assert!(took < Duration::from_millis(500), "closed after {took:?}");
    for (i, s) in reserve.iter_mut().enumerate() {
        closed_within(
            s,
            Duration::from_secs(2) + MARGIN,
            &format!("stalled connection {i} over the cap"),
        )
        .await;
    }
    // The reserve is free again while the cap is still held: health answers, MCP does not.
    assert!(
        held_since.elapsed() < Duration::from_millis(4500),
        "the held connections may have timed out already ({:?}); the test is too slow to tell",
        held_since.elapsed()
    );
    assert_eq!(healthz(addr).await, 200, "/healthz with the reserve freed");
    let busy = send(addr, "POST", "/mcp", Some("{}")).await.expect("503");
    assert_eq!(busy.status, 503, "still over the cap: {}", busy.describe());

    // The held connections end at their header timeout; then the server serves as usual.
    for (i, s) in held.iter_mut().enumerate() {
        closed_within(s, Duration::from_secs(5) + MARGIN, &format!("held {i}")).await;
    }
    let client = Client::connect_with(&server.mcp, LATEST, json!({})).await;
    let mut calls = Vec::new();
    for i in 0..CAP {
        let c = &client;
        calls.push(async move {
            c.call_tool_json("echo", json!({"text": format!("n{i}")}))
                .await
        });
    }
    let answers = futures_util::future::join_all(calls).await;
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["content"][0]["text"], format!("n{i}"), "{a}");
    }
    assert_eq!(healthz(addr).await, 200);
}
