//! SIGTERM stops the server promptly and cleanly (exit 0), even with SSE streams open: the
//! streams end, running requests get the grace period, nothing waits on a client. And the exit
//! codes of a server that does not start (`fleetmcp::run`, the binary's whole `main`).

#[path = "../../e2e_support.rs"]
mod support;

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::raw_http::{self, RawResponse};
use support::{Instance, TempDir};

const JSON_HEADERS: [(&str, &str); 3] = [
    ("Host", "127.0.0.1"),
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A raw HTTP request to `/mcp` whose connection stays open (for SSE); returns the socket.
fn open(port: u16, method: &str, headers: &[(&str, &str)], body: Option<&str>) -> TcpStream {
    raw_http::open(
        addr(port),
        method,
        "/mcp",
        headers,
        body,
        Duration::from_secs(5),
    )
    .unwrap()
}

fn post(port: u16, sid: Option<&str>, body: &str) -> RawResponse {
    let mut headers = JSON_HEADERS.to_vec();
    if let Some(sid) = sid {
        headers.push(("Mcp-Session-Id", sid));
        headers.push(("MCP-Protocol-Version", "2025-11-25"));
    }
    raw_http::send(
        addr(port),
        "POST",
        "/mcp",
        &headers,
        Some(body),
        Duration::from_secs(5),
    )
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
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    // An open GET stream, and a long call streaming progress.
    let stream_headers = [
        ("Host", "127.0.0.1"),
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", sid.as_str()),
    ];
    let mut get = open(port, "GET", &stream_headers, None);
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_cancellable","arguments":{"work_ms":60000},"_meta":{"progressToken":"p"}}}"#;
    let mut call_headers = JSON_HEADERS.to_vec();
    call_headers.push(("Mcp-Session-Id", &sid));
    let mut call = open(port, "POST", &call_headers, Some(body));
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

/// `everything` with `env`, until it exits (10 s at most).
fn exits(env: &[(&str, &str)]) -> support::Output {
    let scratch = TempDir::new("everything-exit");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_everything"));
    cmd.envs(env.iter().copied()).env_remove("FLEETMCP_CONFIG");
    support::run(&mut cmd, Duration::from_secs(10), scratch.path())
}

#[test]
fn a_bad_configuration_exits_2_and_a_taken_port_1_each_saying_why() {
    let bad = exits(&[("PORT", "notaport")]);
    assert_eq!(
        bad.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        bad.describe()
    );
    assert!(
        bad.stderr
            .contains("everything: configuration: PORT = \"notaport\" is not valid"),
        "{}",
        bad.describe()
    );

    let taken = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let busy = exits(&[("PORT", port.as_str())]);
    assert_eq!(
        busy.status.and_then(|s| s.code()),
        Some(1),
        "{}",
        busy.describe()
    );
    let why = format!("everything: cannot listen on 127.0.0.1:{port}");
    assert!(busy.stderr.contains(&why), "{}", busy.describe());
}

/// The test kit's own check: a `200` from `/healthz` counts only from the process it started.
/// Another process answering on the port (a test that took the same free port first) must not
/// make an instance that failed to bind look started.
#[test]
fn the_kit_takes_health_only_from_the_process_it_started() {
    use std::io::Write;
    let taken = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    assert!(support::listens_on(std::process::id(), port));
    std::thread::spawn(move || {
        for stream in taken.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    assert_eq!(support::http_get(port, "/healthz").unwrap().status, 200);
    let started = std::panic::catch_unwind(|| {
        Instance::start_on(env!("CARGO_BIN_EXE_everything"), port, &[])
    });
    let Err(why) = started else {
        panic!("an instance that could not bind its port was taken for started")
    };
    let why = why.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        why.contains("exited before it was healthy") && why.contains("cannot listen on"),
        "{why}"
    );
}
