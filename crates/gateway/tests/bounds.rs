//! Issue 36, the gateway's part: what a client or an upstream sends is bounded in bytes as well
//! as in count, and a side that stops reading makes the other wait instead of growing a queue;
//! the gateway fits its processes' pipes under the open-files limit; one client key cannot take
//! every process. Each test drives the real `fleetmcp-gateway` binary over a real stdio
//! upstream (a Python program), and states the figure it bounds.

#[path = "../../../examples/e2e_support.rs"]
mod support;

mod common;

#[path = "../../fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use support::raw_http::{self, RawResponse};
use support::{Instance, TempDir};

/// The `initialize` answer of the Python upstreams below, then what each does.
const PYTHON_INIT: &str = r#"import json, os, sys, time
m = json.loads(sys.stdin.readline())
r = {'protocolVersion': '2025-06-18', 'capabilities': {'tools': {}}, 'serverInfo': {'name': 'py', 'version': '0'}}
print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)
"#;

/// A POST of `msg` in session `sid`, answered within `limit`.
fn post_within(port: u16, sid: &str, msg: &Value, limit: Duration) -> RawResponse {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let host = format!("127.0.0.1:{port}");
    let body = msg.to_string();
    let headers = [
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("mcp-session-id", sid),
        ("mcp-protocol-version", PROTOCOL_VERSION),
    ];
    raw_http::send(addr, "POST", "/mcp", &headers, Some(&body), limit)
}

/// The process's resident memory, in MiB (`VmRSS` of `/proc/<pid>/status`).
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Waits until `path` exists; false after `limit`.
fn wait_file(path: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// A client's notifications sent while its upstream does not read (issue 36: 380 POSTs of
/// 3 MB were each answered 202, each given a task of its own, and the gateway reached 1.2 GB):
/// the queue holds at most `gateway.max_line_bytes` (here 2 MiB) of them, then a POST waits
/// for room and, the upstream still not reading, is refused `503` with `Retry-After` and a
/// JSON-RPC error saying it was not delivered; past four waiting at once, one is refused at
/// once. The gateway's memory stays within a few queues' worth.
#[test]
fn a_clients_notifications_wait_for_a_busy_upstream_and_are_refused_not_piled_up() {
    let script = format!(
        "{PYTHON_INIT}{}",
        r#"busy = __file__ + '.busy'
for line in sys.stdin:
    m = json.loads(line)
    if m.get('method') == 'tools/call':
        open(busy, 'w').close()
        time.sleep(300)
"#
    );
    let (dir, gw) =
        gateway_over_python_with(&script, &[("FLEETMCP_UPSTREAM_MAX_LINE_BYTES", "2097152")]);
    let port = gw.port();
    let sid = open_session(port);
    let before = rss_mib(gw.pid());
    // A call the upstream takes and then reads nothing more.
    let caller = {
        let sid = sid.clone();
        std::thread::spawn(move || {
            let msg = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "busy", "arguments": {}}});
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let _ = raw_http::try_send(
                addr,
                "POST",
                "/mcp",
                &[
                    ("Host", "127.0.0.1"),
                    ("Content-Type", "application/json"),
                    ("Accept", "application/json, text/event-stream"),
                    ("mcp-session-id", &sid),
                    ("mcp-protocol-version", PROTOCOL_VERSION),
                ],
                Some(&msg.to_string()),
                Duration::from_secs(40),
            );
        })
    };
    assert!(
        wait_file(
            &dir.path().join("upstream.py.busy"),
            Duration::from_secs(20)
        ),
        "the upstream took the call:\n{}",
        gw.log()
    );
    // Notifications of 1 MiB each, one after another.
    let pad = "x".repeat(1 << 20);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed", "params": {"_meta": {"pad": pad}}});
    let mut accepted = 0;
    let mut refused = None;
    let mut peak = before;
    for _ in 0..30 {
        let resp = post_within(port, &sid, &note, Duration::from_secs(30));
        peak = peak.max(rss_mib(gw.pid()));
        match resp.status {
            202 => accepted += 1,
            _ => {
                refused = Some(resp);
                break;
            }
        }
    }
    let refused = refused.unwrap_or_else(|| {
        panic!(
            "30 notifications of 1 MiB to an upstream that reads nothing were all accepted:\n{}",
            gw.log()
        )
    });
    assert_eq!(refused.status, 503, "{}", refused.describe());
    assert!(
        refused.header("retry-after").is_some(),
        "{}",
        refused.describe()
    );
    let error = refused.json();
    assert_eq!(error["error"]["code"], -32000, "{}", refused.describe());
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not delivered"), "{message}");
    // 2 MiB queued, one message being written (the pipe's 64 KiB and Python's buffer).
    assert!(accepted <= 4, "{accepted} accepted before the refusal");

    // Eight at once: four wait (and are refused once the wait is over), the rest are refused
    // at once; none is accepted.
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let (sid, note) = (sid.clone(), note.clone());
            std::thread::spawn(move || post_within(port, &sid, &note, Duration::from_secs(30)))
        })
        .collect();
    let answers: Vec<RawResponse> = senders
        .into_iter()
        .map(|t| t.join().expect("a sender"))
        .collect();
    peak = peak.max(rss_mib(gw.pid()));
    assert!(
        answers.iter().all(|r| r.status == 503),
        "{:?}",
        answers.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    let at_once = answers
        .iter()
        .filter(|r| r.body.contains("notifications wait already"))
        .count();
    assert!(
        at_once >= 4,
        "{at_once} refused for the waiting ones' bound:\n{}",
        answers[0].describe()
    );
    eprintln!("gateway VmRSS: {before} MiB before, {peak} MiB at most during the flood");
    assert!(
        peak < before + 200,
        "the gateway grew from {before} to {peak} MiB"
    );

    let resp = http(port, "DELETE", "/mcp", &[("mcp-session-id", &sid)], None);
    assert_eq!(resp.status, 204, "{}", resp.describe());
    let _ = caller.join();
    assert!(
        wait_children(gw.pid(), 0, Duration::from_secs(20)),
        "{}",
        gw.log()
    );
    eprintln!(
        "gateway VmRSS after the session ended: {} MiB",
        rss_mib(gw.pid())
    );
    gw.assert_no_panic_logged();
}

/// An upstream that sends requests and never reads the answers (issue 36: a million
/// `roots/list` queued 999,968 refusals, 623 MB): the refusals are written with backpressure,
/// so while they cannot be written the gateway stops reading the upstream, and the upstream's
/// own writes block. It writes a few hundred of its 200,000 requests, not all of them.
#[test]
fn an_upstream_that_asks_without_reading_is_stopped_by_its_own_pipe() {
    let script = format!(
        "{PYTHON_INIT}{}",
        r#"sys.stdin.readline()  # notifications/initialized
sent = __file__ + '.sent'
pad = 'x' * 1000
for i in range(200000):
    sys.stdout.write('{"jsonrpc":"2.0","id":%d,"method":"roots/list","params":{"_meta":{"pad":"%s"}}}\n' % (i, pad))
    sys.stdout.flush()
    if i % 100 == 0:
        with open(sent + '.tmp', 'w') as f:
            f.write(str(i))
        os.replace(sent + '.tmp', sent)
with open(sent, 'w') as f:
    f.write('all')
time.sleep(300)
"#
    );
    let (dir, gw) = gateway_over_python(&script);
    let before = rss_mib(gw.pid());
    let sid = open_session(gw.port());
    let sent = dir.path().join("upstream.py.sent");
    let read = || std::fs::read_to_string(&sent).unwrap_or_default();
    // Until what it wrote stops growing for two seconds (at most 60 s).
    let start = Instant::now();
    let (mut last, mut since) = (String::new(), Instant::now());
    let mut peak = before;
    while start.elapsed() < Duration::from_secs(60) && since.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(100));
        peak = peak.max(rss_mib(gw.pid()));
        let now = read();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    let written: u64 = last.trim().parse().unwrap_or(u64::MAX);
    eprintln!(
        "the upstream wrote {last:?} requests; gateway VmRSS {before} MiB before, {peak} MiB at most"
    );
    assert!(
        written < 5_000,
        "the upstream wrote {last:?} of its 200,000 requests: the gateway kept reading\n{}",
        gw.log()
    );
    assert!(
        peak < before + 100,
        "the gateway grew from {before} to {peak} MiB"
    );
    // The gateway serves on, and the session's end stops the stuck upstream.
    let health = http(gw.port(), "GET", "/healthz", &[], None);
    assert_eq!(health.status, 200, "{}", health.describe());
    let resp = http(
        gw.port(),
        "DELETE",
        "/mcp",
        &[("mcp-session-id", &sid)],
        None,
    );
    assert_eq!(resp.status, 204, "{}", resp.describe());
    assert!(
        wait_children(gw.pid(), 0, Duration::from_secs(20)),
        "{}",
        gw.log()
    );
    gw.assert_no_panic_logged();
}

/// One client key cannot take every upstream process (issue 36: 1,000 sessions per key
/// against 100 processes): past `gateway.max_processes_per_key` (here the default, a quarter
/// of 8), a session is refused `503` naming the bound; a process given back is a place again.
#[test]
fn one_key_holds_at_most_its_share_of_the_processes() {
    let script = format!("{PYTHON_INIT}for line in sys.stdin:\n    pass\n");
    let (_dir, gw) = gateway_over_python_with(&script, &[("FLEETMCP_UPSTREAM_MAX_PROCESSES", "8")]);
    let port = gw.port();
    let a = open_session(port);
    let _b = open_session(port);
    let third = post(port, None, &initialize_message());
    assert_eq!(third.status, 503, "{}", third.describe());
    assert!(
        third.header("retry-after").is_some(),
        "{}",
        third.describe()
    );
    assert!(
        third
            .body
            .contains("FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY = 2"),
        "{}",
        third.describe()
    );
    let resp = http(port, "DELETE", "/mcp", &[("mcp-session-id", &a)], None);
    assert_eq!(resp.status, 204, "{}", resp.describe());
    assert!(
        wait_children(gw.pid(), 1, Duration::from_secs(20)),
        "{}",
        gw.log()
    );
    open_session(port);
}

/// The gateway under `ulimit -n 256` (issue 36: 60 sessions and 134 idle connections used
/// every descriptor; sessions failed with "Too many open files", `/healthz` and `/readyz`
/// stopped answering, and `/readyz` stayed 503 after): its processes and connections are
/// fitted under the limit at start (said at WARN), a session past them is refused by the
/// bound, not by the kernel, the health routes answer while idle connections hold every place,
/// and `/readyz` is 200 again once they are gone.
#[test]
fn the_processes_pipes_and_the_connections_fit_under_the_open_files_limit() {
    let dir = TempDir::new("ulimit-gateway");
    let script = dir.path().join("upstream.py");
    std::fs::write(
        &script,
        format!("{PYTHON_INIT}for line in sys.stdin:\n    pass\n"),
    )
    .expect("write the upstream");
    let wrapper = dir.path().join("fleetmcp-gateway");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nulimit -n 256 || exit 9\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_fleetmcp-gateway")
        ),
    )
    .expect("write the wrapper");
    let mut perms = std::fs::metadata(&wrapper)
        .expect("the wrapper")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&wrapper, perms).expect("chmod the wrapper");
    let command = format!("python3 {}", script.display());
    let mut gw = Instance::start(
        &wrapper.to_string_lossy(),
        &[
            ("FLEETMCP_UPSTREAM_COMMAND", &command),
            ("FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY", "1000"),
            ("REDIS_URL", ""),
            ("REDIS_HOST", ""),
            ("REDIS_PORT", ""),
        ],
    );
    gw.wait_ready(Duration::from_secs(20));
    let port = gw.port();
    assert!(
        gw.log().contains("the open-files limit cannot hold"),
        "{}",
        gw.log()
    );
    // Sessions until one is refused: by the fitted bound, not for want of descriptors.
    let mut sessions = Vec::new();
    let refused = loop {
        let resp = post(port, None, &initialize_message());
        if resp.status != 200 {
            break resp;
        }
        sessions.push(resp.header("mcp-session-id").expect("an id").to_string());
        assert!(sessions.len() <= 100, "no bound on the processes");
    };
    assert_eq!(refused.status, 503, "{}", refused.describe());
    assert!(
        refused.body.contains("FLEETMCP_UPSTREAM_MAX_PROCESSES ="),
        "refused for another reason than the bound:\n{}\n{}",
        refused.describe(),
        gw.log()
    );
    assert!(!gw.log().contains("Too many open files"), "{}", gw.log());
    // Idle connections, more than there are descriptors; the health routes still answer.
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let idle: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
        .collect();
    for path in ["/healthz", "/readyz"] {
        let answered = answered_within(port, path, Duration::from_secs(15));
        assert_eq!(
            answered,
            Some(200),
            "{path} with {} idle connections:\n{}",
            idle.len(),
            gw.log()
        );
    }
    drop(idle);
    for sid in &sessions {
        http(port, "DELETE", "/mcp", &[("mcp-session-id", sid)], None);
    }
    assert!(
        wait_children(gw.pid(), 0, Duration::from_secs(30)),
        "{}",
        gw.log()
    );
    assert_eq!(
        answered_within(port, "/readyz", Duration::from_secs(15)),
        Some(200),
        "{}",
        gw.log()
    );
    assert_eq!(
        post(port, None, &initialize_message()).status,
        200,
        "{}",
        gw.log()
    );
    assert!(!gw.log().contains("Too many open files"), "{}", gw.log());
    gw.assert_no_panic_logged();
}

/// The status `path` answers with, tried every 200 ms within `limit` until it is 200.
fn answered_within(port: u16, path: &str, limit: Duration) -> Option<u16> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < limit {
        if let Ok(resp) = support::http_get(port, path) {
            last = Some(resp.status);
            if resp.status == 200 {
                return last;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    last
}

/// `/readyz` comes back by itself after processes could not start (issue 36: it stayed `503`
/// once descriptors were free again, until a new session happened to start one, which a
/// balancer that follows `/readyz` never sent): here the command cannot be run for a while
/// (its file taken away), a session is refused and `/readyz` is `503`; once it can run
/// again, `/readyz` is `200` with no session asked for meanwhile.
#[test]
fn readiness_comes_back_by_itself_once_processes_can_start_again() {
    let dir = TempDir::new("flaky-command");
    let script = dir.path().join("upstream.py");
    std::fs::write(
        &script,
        format!("#!/usr/bin/env python3\n{PYTHON_INIT}for line in sys.stdin:\n    pass\n"),
    )
    .expect("write the upstream");
    let mut perms = std::fs::metadata(&script)
        .expect("the script")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).expect("chmod the script");
    let command = script.display().to_string();
    let mut gw = gateway(&[("FLEETMCP_UPSTREAM_COMMAND", &command)]);
    gw.wait_ready(Duration::from_secs(20));
    // The startup probe succeeded: `/readyz` is 200 only once it did.
    assert!(
        log_has(&gw, "answers initialize", Duration::from_secs(20)),
        "{}",
        gw.log()
    );
    let port = gw.port();
    let hidden = dir.path().join("away.py");
    std::fs::rename(&script, &hidden).expect("take the script away");
    // It cannot be started: the session is refused, and the command is unhealthy.
    let refused = post(port, None, &initialize_message());
    assert_eq!(refused.status, 503, "{}", refused.describe());
    assert_ne!(
        answered_within(port, "/readyz", Duration::from_secs(15)),
        Some(200),
        "a command that fails leaves /readyz at 503:\n{}",
        gw.log()
    );
    std::fs::rename(&hidden, &script).expect("bring the script back");
    assert_eq!(
        answered_within(port, "/readyz", Duration::from_secs(30)),
        Some(200),
        "{}",
        gw.log()
    );
    gw.assert_no_panic_logged();
}

/// An HTTP upstream's requests are POSTed side by side, each in a task of its own: a client
/// that sends calls and drops them (cancelled: the upstream never answers) left a task and a
/// connection to the upstream behind per call, without bound (found with issue 36). At most
/// 100 of a session's request POSTs are open at once; the next waits.
#[test]
fn an_http_upstreams_requests_in_flight_are_bounded() {
    let script = r#"import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
lock = threading.Lock()
state = {'now': 0, 'most': 0}
most = sys.argv[2]
class H(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a):
        pass
    def send(self, status, kind, body, extra=()):
        self.send_response(status)
        if kind:
            self.send_header('Content-Type', kind)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_DELETE(self):
        self.send(204, None, b'')
    def do_GET(self):
        self.send(405, None, b'')
    def do_POST(self):
        m = json.loads(self.rfile.read(int(self.headers.get('Content-Length', 0))))
        if 'id' not in m or 'method' not in m:
            return self.send(202, None, b'')
        if m['method'] == 'initialize':
            r = {'protocolVersion': '2025-06-18', 'capabilities': {'tools': {}}, 'serverInfo': {'name': 'slow', 'version': '0'}}
            body = json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}).encode()
            return self.send(200, 'application/json', body, [('Mcp-Session-Id', 's1')])
        with lock:
            state['now'] += 1
            state['most'] = max(state['most'], state['now'])
            open(most, 'w').write(str(state['most']))
        time.sleep(120)
ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
"#;
    let dir = TempDir::new("slow-http-upstream");
    let path = dir.path().join("slow.py");
    std::fs::write(&path, script).expect("write the script");
    let most = dir.path().join("most");
    let port = support::free_port();
    /// Stops the upstream whatever the test's outcome.
    struct Upstream(std::process::Child);
    impl Drop for Upstream {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _upstream = Upstream(
        std::process::Command::new("python3")
            .arg(&path)
            .arg(port.to_string())
            .arg(&most)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 runs"),
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    support::wait_listening(port, Duration::from_secs(10), "the upstream");
    let mut gw = gateway(&[
        ("FLEETMCP_UPSTREAM_COMMAND", ""),
        ("FLEETMCP_UPSTREAM_URL", &url),
    ]);
    gw.wait_ready(Duration::from_secs(20));
    let sid = open_session(gw.port());
    let addr = SocketAddr::from(([127, 0, 0, 1], gw.port()));
    let host = format!("127.0.0.1:{}", gw.port());
    // 150 calls, each dropped (its connection closed) once sent: cancelled.
    for i in 0..150 {
        let msg = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "slow", "arguments": {}}});
        let stream = raw_http::open(
            addr,
            "POST",
            "/mcp",
            &[
                ("Host", host.as_str()),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                ("mcp-session-id", &sid),
                ("mcp-protocol-version", PROTOCOL_VERSION),
            ],
            Some(&msg.to_string()),
            Duration::from_secs(5),
        )
        .expect("a POST");
        std::thread::sleep(Duration::from_millis(30));
        drop(stream);
    }
    // Until the most the upstream saw at once stops growing for two seconds (at most 30 s).
    let read = || std::fs::read_to_string(&most).unwrap_or_default();
    let start = Instant::now();
    let (mut last, mut since) = (String::new(), Instant::now());
    while start.elapsed() < Duration::from_secs(30) && since.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(100));
        let now = read();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    let seen: u32 = last.trim().parse().unwrap_or(0);
    assert!(
        (90..=100).contains(&seen),
        "the upstream had {seen} of the session's requests open at once:\n{}",
        gw.log()
    );
    gw.assert_no_panic_logged();
}

/// A 2025-03-26 batch's notifications cannot make their POST wait (the batch's answer has no
/// place for their refusal): with the upstream's queue full they are dropped, said once at
/// WARN, instead of each given a task of its own that holds it until the upstream reads.
#[test]
fn a_batchs_notifications_to_an_upstream_that_does_not_read_are_dropped_and_said() {
    let script = r#"import json, sys, time
m = json.loads(sys.stdin.readline())
r = {'protocolVersion': m['params']['protocolVersion'], 'capabilities': {'tools': {}}, 'serverInfo': {'name': 'py', 'version': '0'}}
print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)
for line in sys.stdin:
    m = json.loads(line)
    if m.get('method') == 'tools/call':
        time.sleep(300)
"#;
    let (_dir, gw) =
        gateway_over_python_with(script, &[("FLEETMCP_UPSTREAM_MAX_LINE_BYTES", "2097152")]);
    let port = gw.port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let host = format!("127.0.0.1:{port}");
    let old = "2025-03-26";
    let send = |sid: Option<&str>, body: &str, limit: Duration| {
        let mut headers = vec![
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        if let Some(sid) = sid {
            headers.push(("mcp-session-id", sid));
            headers.push(("mcp-protocol-version", old));
        }
        raw_http::send(addr, "POST", "/mcp", &headers, Some(body), limit)
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": old, "capabilities": {}, "clientInfo": {"name": "batch", "version": "1"}}});
    let resp = send(None, &init.to_string(), HTTP_LIMIT);
    assert_eq!(resp.status, 200, "{}", resp.describe());
    let sid = resp
        .header("mcp-session-id")
        .expect("a session")
        .to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(send(Some(&sid), &note.to_string(), HTTP_LIMIT).status, 202);
    // A call the upstream takes, then it reads nothing more.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "busy", "arguments": {}}});
    let stream = raw_http::open(
        addr,
        "POST",
        "/mcp",
        &[
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", old),
        ],
        Some(&call.to_string()),
        Duration::from_secs(60),
    )
    .expect("the call");
    std::thread::sleep(Duration::from_millis(500));
    let pad = "x".repeat(1 << 20);
    let batch = json!([{"jsonrpc": "2.0", "method": "notifications/roots/list_changed", "params": {"_meta": {"pad": pad}}}]).to_string();
    for _ in 0..12 {
        let resp = send(Some(&sid), &batch, HTTP_LIMIT);
        assert_eq!(resp.status, 202, "{}", resp.describe());
    }
    let dropped = "a client notification (batch, 2024-11-05 or stdio) was dropped";
    assert!(
        log_has(&gw, dropped, Duration::from_secs(10)),
        "{}",
        gw.log()
    );
    assert_eq!(
        gw.log().matches(dropped).count(),
        1,
        "said once:\n{}",
        gw.log()
    );
    drop(stream);
    gw.assert_no_panic_logged();
}

/// An upstream that floods a running call's stream with progress faster than the event store
/// takes it (Redis: a round trip a message): the gateway stops reading it while the request's
/// outbox holds its most (found with issue 36: 300,000 progress lines of 1 KB took the gateway
/// from 29 to 341 MiB, the outbox unbounded).
#[test]
fn an_upstreams_progress_flood_waits_for_the_event_store() {
    let redis = support_redis::RedisServer::start();
    let script = format!(
        "{PYTHON_INIT}{}",
        r#"sent = __file__ + '.sent'
for line in sys.stdin:
    m = json.loads(line)
    if m.get('method') == 'tools/call':
        tok = json.dumps(m['params']['_meta']['progressToken'])
        pad = 'x' * 1000
        for i in range(300000):
            sys.stdout.write('{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":%d,"message":"%s"}}\n' % (tok, i, pad))
            if i % 1000 == 0:
                sys.stdout.flush()
                with open(sent, 'w') as f:
                    f.write(str(i))
        sys.stdout.flush()
        time.sleep(300)
"#
    );
    let url = redis.url();
    let (dir, gw) = gateway_over_python_with(
        &script,
        &[
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("FRONTMCP_BIND_ADDRESS", "loopback"),
            ("MACHINE_ID", "gw-progress"),
            ("REDIS_URL", &url),
        ],
    );
    let sid = open_session(gw.port());
    let before = rss_mib(gw.pid());
    let msg = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "flood", "arguments": {}, "_meta": {"progressToken": "t"}}});
    let host = format!("127.0.0.1:{}", gw.port());
    let call = raw_http::open(
        SocketAddr::from(([127, 0, 0, 1], gw.port())),
        "POST",
        "/mcp",
        &[
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", PROTOCOL_VERSION),
        ],
        Some(&msg.to_string()),
        Duration::from_secs(60),
    )
    .expect("the call");
    let sent = dir.path().join("upstream.py.sent");
    assert!(wait_file(&sent, Duration::from_secs(20)), "{}", gw.log());
    // Twenty seconds of the flood.
    let mut peak = before;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
        peak = peak.max(rss_mib(gw.pid()));
    }
    let written = std::fs::read_to_string(&sent).unwrap_or_default();
    eprintln!(
        "the upstream wrote {written} progress lines; gateway VmRSS {before} MiB before, {peak} MiB at most"
    );
    assert!(
        peak < before + 100,
        "the gateway grew from {before} to {peak} MiB ({written} lines written)"
    );
    drop(call);
    gw.assert_no_panic_logged();
}
