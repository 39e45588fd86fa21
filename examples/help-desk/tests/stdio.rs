//! help-desk over stdio (`FLEETMCP_TRANSPORT=stdio`, or `transport = "stdio"` in its TOML file),
//! started by the official clients as their child process: the TypeScript SDK v1's
//! `StdioClientTransport` (`tools/clients/ts-v1/stdio-client.mjs`), the Python SDK's
//! `stdio_client` (`tools/clients/python/stdio_client.py`) and MCP Inspector's CLI
//! (`mcp-inspector --cli`, one process per method, as a shell script or CI job runs it). Then the
//! edge cases on the binary's own stdin and stdout: malformed and over-long lines, EOF, a signal.
//!
//! Needs the tooling installed by `tools/setup.sh` (run here once per test process).

#[path = "../../stdio_support.rs"]
mod stdio;
#[path = "../../e2e_support.rs"]
mod support;

use std::time::Duration;

use serde_json::{Value, json};
use stdio::{CLIENT_DEADLINE, RawServer, inspector, python_client, steps_passed, ts_client};
use support::{TempDir, ensure_tooling, run};

const BIN: &str = env!("CARGO_BIN_EXE_help-desk");

/// The steps both SDK scripts report for help-desk, in order (prefixes).
const DESK_STEPS: &[&str] = &[
    "connect: stdio",
    "list",
    "open_ticket: id 1",
    "find_tickets with progress: 1 notification",
    "subscribe + close_ticket: updated helpdesk://tickets/1",
    "complete: 1",
    "get", // getPrompt / get_prompt
];

#[test]
fn typescript_sdk_stdio_client_drives_help_desk() {
    ensure_tooling();
    let scratch = TempDir::new("stdio-ts-desk");
    let out = run(
        &mut ts_client("help-desk", BIN),
        CLIENT_DEADLINE,
        scratch.path(),
    );
    let expected = [
        DESK_STEPS,
        &[
            "close: stdin closed, server exited 0",
            "logs on stderr only",
        ],
    ];
    let steps = steps_passed(&out, &expected.concat());
    eprintln!("steps: {steps:#?}");
}

#[test]
fn python_sdk_stdio_client_drives_help_desk() {
    ensure_tooling();
    let scratch = TempDir::new("stdio-py-desk");
    let out = run(
        &mut python_client("help-desk", &[BIN]),
        CLIENT_DEADLINE,
        scratch.path(),
    );
    let steps = steps_passed(&out, &[DESK_STEPS, &["logs on stderr only"]].concat());
    // The SDK's default mode probes server/discover first; the refusal sends it to initialize.
    assert!(steps[0].contains("protocol 2025-11-25"), "{steps:#?}");
}

/// One Inspector CLI run: exit 0 and its JSON result.
fn inspect(home: &TempDir, args: &[&str]) -> Value {
    let scratch = TempDir::new("stdio-inspector-run");
    let out = run(
        &mut inspector(BIN, home.path(), args),
        CLIENT_DEADLINE,
        scratch.path(),
    );
    let report = out.describe();
    assert!(out.success(), "{report}");
    let v: Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON result ({e}):\n{report}"));
    assert!(
        out.stderr.contains("serving MCP on stdio"),
        "the server's log reaches the Inspector on stderr:\n{report}"
    );
    v["result"].clone()
}

#[test]
fn inspector_cli_in_stdio_mode_drives_help_desk() {
    ensure_tooling();
    let home = TempDir::new("stdio-inspector-home");
    let tools = inspect(&home, &["--method", "tools/list"]);
    assert_eq!(tools["tools"].as_array().map(Vec::len), Some(4), "{tools}");
    let args = r#"{"title":"Printer on fire","priority":"high"}"#;
    let opened = inspect(
        &home,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "open_ticket",
            "--tool-args-json",
            args,
        ],
    );
    assert_eq!(
        opened["structuredContent"]["title"], "Printer on fire",
        "{opened}"
    );
    let sla = inspect(
        &home,
        &[
            "--method",
            "resources/read",
            "--uri",
            "helpdesk://policies/sla",
        ],
    );
    assert!(
        sla["contents"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("Service levels")
    );
    let templates = inspect(&home, &["--method", "resources/templates/list"]);
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        "helpdesk://tickets/{id}"
    );
    let prompts = inspect(&home, &["--method", "prompts/list"]);
    assert_eq!(prompts["prompts"][0]["name"], "triage_ticket");
    let level = inspect(
        &home,
        &["--method", "logging/setLevel", "--log-level", "debug"],
    );
    assert_eq!(level, json!({}));
}

/// `transport = "stdio"` in the TOML file, no variable: a line that is not JSON gets `-32700`
/// with id `null`, one longer than `http.max_body_bytes` `-32600`, and the session goes on; at
/// EOF the server exits 0, having written only JSON-RPC on stdout and its logs on stderr.
#[test]
fn a_stdio_server_answers_bad_lines_and_exits_0_at_eof() {
    let scratch = TempDir::new("stdio-raw-desk");
    let toml = scratch.path().join("desk.toml");
    std::fs::write(
        &toml,
        "transport = \"stdio\"\n[http]\nmax_body_bytes = 2048\n",
    )
    .unwrap();
    let config = toml.to_string_lossy().into_owned();
    let mut s = RawServer::start(BIN, &[("FLEETMCP_CONFIG", config.as_str())], scratch.path());
    let init = s.initialize();
    assert_eq!(init["result"]["serverInfo"]["name"], "help-desk", "{init}");
    s.send("this is not JSON");
    let v = s.recv();
    assert_eq!(
        (&v["id"], &v["error"]["code"]),
        (&Value::Null, &json!(-32700)),
        "{v}"
    );
    s.send(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","pad":"{}"}}"#,
        "x".repeat(4096)
    ));
    let v = s.recv();
    assert_eq!(
        (&v["id"], &v["error"]["code"]),
        (&Value::Null, &json!(-32600)),
        "{v}"
    );
    s.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let (_, tools) = s.answer(&json!(2));
    assert_eq!(
        tools["result"]["tools"].as_array().map(Vec::len),
        Some(4),
        "{tools}"
    );
    s.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"open_ticket","arguments":{"title":"last words"}}}"#);
    s.close_stdin();
    // Sent just before EOF: still answered.
    let rest = s.rest();
    assert!(rest.iter().any(|m| m["id"] == json!(3)), "{rest:?}");
    let status = s.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "stderr:\n{}", s.stderr());
    let log = s.stderr();
    assert!(
        log.contains("serving MCP on stdio") && log.contains("stdin closed"),
        "{log}"
    );
}

/// SIGTERM while stdin is still open (a terminal, or a client that signals first): the server
/// stops at once and exits 0, not waiting for a line that may never come.
#[test]
fn sigterm_stops_a_stdio_server_whose_stdin_is_open() {
    let scratch = TempDir::new("stdio-raw-term");
    let mut s = RawServer::start(BIN, &[("FLEETMCP_TRANSPORT", "stdio")], scratch.path());
    s.initialize();
    s.signal("TERM");
    let status = s.wait(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "stderr:\n{}", s.stderr());
    assert!(s.stderr().contains("stop signal"), "{}", s.stderr());
}

/// `VmRSS` of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Issue 36, item 5: a client that writes requests and does not read its answers is no longer
/// read. 50,000 `ping` lines (3 MB) written by a thread while nobody reads stdout: the write
/// never completes (the server stopped reading stdin once its answers were not taken), the
/// process stays small, and once the client reads, every ping is answered, once.
#[test]
fn a_client_that_does_not_read_its_answers_stops_being_read() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const PINGS: usize = 50_000;
    let scratch = TempDir::new("stdio-unread");
    let log = std::fs::File::create(scratch.path().join("server.stderr")).unwrap();
    let mut child = Command::new(BIN)
        .env_clear()
        .env("RUST_LOG", "warn")
        .env("FLEETMCP_TRANSPORT", "stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    // Lines are read by a thread only once `read` is sent; each waits at most 20 s.
    let (read_tx, read_rx) = std::sync::mpsc::channel::<usize>();
    let (line_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut out = BufReader::new(stdout).lines();
        while let Ok(n) = read_rx.recv() {
            for _ in 0..n {
                let Some(Ok(line)) = out.next() else { return };
                if line_tx.send(line).is_err() {
                    return;
                }
            }
        }
    });
    let next = || -> Value {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("a line on stdout");
        serde_json::from_str(&line).unwrap()
    };
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"raw","version":"1"}}}}}}"#).unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    read_tx.send(1).unwrap();
    assert_eq!(next()["id"], 0);
    let written = Arc::new(AtomicUsize::new(0));
    let total: usize = (1..=PINGS).map(|i| ping(i).len()).sum();
    let progress = written.clone();
    let writer = std::thread::spawn(move || {
        for i in 1..=PINGS {
            let line = ping(i);
            stdin.write_all(line.as_bytes()).expect("write a ping");
            progress.fetch_add(line.len(), Ordering::Relaxed);
        }
        stdin
    });
    // Nobody reads stdout: the writer stalls (no progress for 2 s; within a minute).
    let mut last = (0, std::time::Instant::now());
    let start = std::time::Instant::now();
    loop {
        assert!(
            !writer.is_finished(),
            "all {total} bytes of pings were read while stdout was not ({} KiB resident)",
            rss_kib(pid)
        );
        let now = written.load(Ordering::Relaxed);
        if now != last.0 {
            last = (now, std::time::Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(2) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the writer never stalled"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let held = rss_kib(pid);
    eprintln!(
        "stdin stopped being read after {} of {total} bytes; the server holds {held} KiB",
        last.0
    );
    assert!(
        held < 100 * 1024,
        "{held} KiB resident while stdout is unread"
    );
    // The client reads: every ping is answered, once, and the writer finishes.
    read_tx.send(PINGS).unwrap();
    let mut ids: Vec<u64> = (0..PINGS).map(|_| next()["id"].as_u64().unwrap()).collect();
    let out_of_order = ids.windows(2).filter(|w| w[0] > w[1]).count();
    ids.sort_unstable();
    assert_eq!(ids, (1..=PINGS as u64).collect::<Vec<_>>());
    eprintln!(
        "all answered ({out_of_order} answers after a later one); {} KiB resident",
        rss_kib(pid)
    );
    drop(
        writer
            .join()
            .expect("the writer finishes once stdout is read"),
    );
    // EOF: the server exits.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server did not exit at EOF");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
}

fn ping(i: usize) -> String {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}\n")
}
