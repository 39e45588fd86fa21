//! SIGTERM stops the server promptly and cleanly (exit 0), even with SSE streams open: the
//! streams end, running requests get the grace period, nothing waits on a client.

#[path = "../../e2e_support.rs"]
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::Instance;

/// A raw HTTP request whose connection stays open (for SSE); returns the socket.
fn open(port: u16, request: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn post(port: u16, sid: Option<&str>, body: &str) -> String {
    let sid = sid
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"))
        .unwrap_or_default();
    let mut s = open(
        port,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{sid}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn sigterm_with_open_streams_exits_zero_promptly() {
    let mut server = Instance::start(env!("CARGO_BIN_EXE_everything"), &[]);
    let port = server.port();
    let init = post(
        port,
        None,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
    );
    let sid = init
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("mcp-session-id: ")
                .map(|_| l[16..].trim().to_string())
        })
        .expect("a session id");
    // An open GET stream, and a long call streaming progress.
    let mut get = open(
        port,
        &format!(
            "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\n\r\n"
        ),
    );
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_cancellable","arguments":{"work_ms":60000},"_meta":{"progressToken":"p"}}}"#;
    let mut call = open(
        port,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    let mut buf = [0u8; 256];
    assert!(get.read(&mut buf).unwrap() > 0, "the GET stream is open");
    assert!(call.read(&mut buf).unwrap() > 0, "the call is streaming");

    let start = Instant::now();
    let status = server.signal_and_wait("TERM", Duration::from_secs(10));
    let took = start.elapsed();
    let status =
        status.unwrap_or_else(|| panic!("still running 10 s after SIGTERM:\n{}", server.log()));
    assert!(status.success(), "exit status {status:?}\n{}", server.log());
    // Streams end at once; only the running call may use the grace period (5 s by default).
    assert!(took < Duration::from_secs(7), "took {took:?}");
    assert!(server.log().contains("shutting down"), "{}", server.log());
}
