//! `fleetmcp-gateway` in front of a real stdio MCP server (our own `everything` example, run as
//! `FLEETMCP_TRANSPORT=stdio everything`): the official TypeScript SDK client uses it through
//! the gateway (tools, progress, sampling, elicitation, roots, errors, a subscription and its
//! update, cancellation), and the gateway's own duties are checked from outside: one process
//! per session, reaped when the session ends or idles out, bounded in number, restarted when it
//! dies, and `/readyz` unready when the command cannot start.
//!
//! Needs `cargo build -p everything` (see `common::everything`), `node` on PATH, and the
//! TypeScript SDK in `tools/clients/ts-v1` and the Python SDK's venv (`tools/setup.sh`, run
//! here once).

#[path = "../../../examples/e2e_support.rs"]
mod support;

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use support::{TempDir, ensure_tooling};

const REAPED: &str = "[gateway] an upstream process ended with its session";

#[test]
fn the_typescript_client_uses_everything_through_the_gateway() {
    ensure_tooling();
    let mut gw = gateway(&[]);
    gw.wait_ready(Duration::from_secs(20));
    let pid = gw.pid();
    assert!(
        wait_children(pid, 0, Duration::from_secs(10)),
        "the startup probe's process is reaped"
    );
    let mut client = ts_client("gateway-client.mjs", &gw.mcp_url());
    client.env("KEEP_SESSION", "1");
    let out = run_client(client, Duration::from_secs(60), &[&gw]);
    for (step, expected) in out.steps.iter().zip([
        "connect: server everything",
        "listTools: ",
        "progress: 0,50,100",
        "sampling: LLM response: sampled by the client",
        "elicitation: User response: action=accept",
        "roots: answered by the client",
        "errors: tool error, then JSON-RPC",
        "subscribe: updated test://watched-resource",
        "cancel: upstream counted 1 cancelled",
    ]) {
        assert!(
            step.starts_with(expected),
            "{step:?} is not {expected:?}:\n{}",
            out.stdout
        );
    }
    assert_eq!(out.steps.len(), 9, "{}", out.stdout);
    assert_eq!(
        children_of(pid).len(),
        1,
        "one process for the client's session"
    );

    // The client went away without ending its session: DELETE ends it, and its process.
    let sid = out.report["sessionId"].as_str().expect("the session id");
    let resp = http(
        gw.port(),
        "DELETE",
        "/mcp",
        &[("mcp-session-id", sid)],
        None,
    );
    assert_eq!(resp.status, 204, "{}", resp.describe());
    assert!(
        wait_children(pid, 0, Duration::from_secs(10)),
        "the session's process is reaped"
    );
    assert!(log_has(&gw, REAPED, Duration::from_secs(5)), "{}", gw.log());
    gw.assert_alive();
    gw.assert_no_panic_logged();
}

/// The official Python SDK client (`tools/clients/python/gateway_client.py`): the checks
/// `stdio_client.py` makes of `everything` over stdio directly, through the gateway.
#[test]
fn the_python_client_uses_everything_through_the_gateway() {
    ensure_tooling();
    let mut gw = gateway(&[]);
    gw.wait_ready(Duration::from_secs(20));
    let out = run_client(
        python_client("gateway_client.py", &gw.mcp_url()),
        Duration::from_secs(60),
        &[&gw],
    );
    out.assert_steps(&[
        "connect: gateway, protocol 2025-11-25, server everything",
        "progress: 0,50,100",
        "logging: 3 messages",
        "subscribe: notifications/resources/updated test://watched-resource",
        "complete: 123,124",
        "sampling, elicitation and roots answered by the client",
        "notifications/tools/list_changed",
        "cancel: handler stopped",
        "ping",
    ]);
    // The SDK ends its session on close (DELETE): the process goes with it.
    assert!(
        wait_children(gw.pid(), 0, Duration::from_secs(10)),
        "{}",
        gw.log()
    );
    gw.assert_no_panic_logged();
}

/// The 2024-11-05 HTTP+SSE pair (`/sse` + `/message`) goes through the same code: the Python
/// SDK's SSE client (`tools/clients/python/gateway_sse_client.py`) through the gateway.
#[test]
fn the_2024_11_05_sse_transport_reaches_the_upstream_too() {
    ensure_tooling();
    let mut gw = gateway(&[]);
    gw.wait_ready(Duration::from_secs(20));
    let sse = format!("http://127.0.0.1:{}/sse", gw.port());
    let out = run_client(
        python_client("gateway_sse_client.py", &sse),
        Duration::from_secs(60),
        &[&gw],
    );
    out.assert_steps(&[
        "server everything",
        "progress: 0,50,100",
        "sampling: answered by the client",
    ]);
    gw.assert_no_panic_logged();
}

#[test]
fn a_command_that_cannot_start_makes_the_instance_unready_and_refuses_sessions_with_503() {
    let gw = gateway(&[(
        "FLEETMCP_UPSTREAM_COMMAND",
        "/nonexistent/mcp-server --stdio",
    )]);
    assert!(
        log_has(&gw, "cannot start", Duration::from_secs(10)),
        "{}",
        gw.log()
    );
    let ready = http(gw.port(), "GET", "/readyz", &[], None);
    assert_eq!(ready.status, 503, "{}", ready.describe());
    assert!(
        ready
            .body
            .contains("cannot start `/nonexistent/mcp-server --stdio`"),
        "{}",
        ready.describe()
    );
    let resp = post(gw.port(), None, &initialize_message());
    assert_eq!(resp.status, 503, "{}", resp.describe());
    assert!(resp.header("retry-after").is_some(), "{}", resp.describe());
    assert!(
        resp.body.contains("could not be started"),
        "{}",
        resp.describe()
    );
}

/// `/readyz` statuses sampled every 100 ms for `span`.
fn readiness_over(port: u16, span: Duration) -> Vec<u16> {
    let end = std::time::Instant::now() + span;
    let mut seen = Vec::new();
    while std::time::Instant::now() < end {
        seen.push(http(port, "GET", "/readyz", &[], None).status);
        std::thread::sleep(Duration::from_millis(100));
    }
    seen
}

/// Ready means the upstream answered the probe's `initialize` (issue 38: a server that never
/// answers was `200` for its first 20 s, and again while each retry ran, because a process
/// merely started counted as ready). Not yet probed is not ready.
#[test]
fn a_command_that_never_answers_leaves_the_instance_unready() {
    let gw = gateway(&[("FLEETMCP_UPSTREAM_COMMAND", "sleep 60")]);
    let seen = readiness_over(gw.port(), Duration::from_secs(6));
    assert!(
        seen.iter().all(|s| *s == 503),
        "/readyz answered {seen:?}:\n{}",
        gw.log()
    );
    let ready = http(gw.port(), "GET", "/readyz", &[], None);
    assert!(
        ready.body.contains("has not answered initialize yet"),
        "{}",
        ready.describe()
    );
}

/// A server that answers only after a while: `503` until it does, then `200`.
#[test]
fn a_command_that_answers_late_is_ready_only_once_it_answers() {
    let command = format!("sh -c 'sleep 3; exec {}'", everything_command());
    let mut gw = gateway(&[("FLEETMCP_UPSTREAM_COMMAND", &command)]);
    let seen = readiness_over(gw.port(), Duration::from_millis(2_000));
    assert!(
        seen.iter().all(|s| *s == 503),
        "/readyz before the answer: {seen:?}:\n{}",
        gw.log()
    );
    gw.wait_ready(Duration::from_secs(20));
    assert!(
        log_has(&gw, "answers initialize", Duration::from_secs(1)),
        "{}",
        gw.log()
    );
}

#[test]
fn sessions_past_the_process_bound_are_refused_with_503_until_one_ends() {
    let mut gw = gateway(&[("FLEETMCP_UPSTREAM_MAX_PROCESSES", "1")]);
    gw.wait_ready(Duration::from_secs(20));
    let pid = gw.pid();
    assert!(
        wait_children(pid, 0, Duration::from_secs(10)),
        "the probe's process is reaped"
    );
    let first = open_session(gw.port());
    let resp = post(gw.port(), None, &initialize_message());
    assert_eq!(resp.status, 503, "{}", resp.describe());
    assert!(resp.header("retry-after").is_some(), "{}", resp.describe());
    assert!(
        resp.body.contains("FLEETMCP_UPSTREAM_MAX_PROCESSES = 1"),
        "{}",
        resp.describe()
    );
    assert_eq!(
        tool_text(&call(gw.port(), &first, "greet", json!({"name": "A"}))),
        "Hello, A!"
    );
    let resp = http(
        gw.port(),
        "DELETE",
        "/mcp",
        &[("mcp-session-id", &first)],
        None,
    );
    assert_eq!(resp.status, 204, "{}", resp.describe());
    assert!(
        wait_children(pid, 0, Duration::from_secs(10)),
        "the first session's process is reaped"
    );
    let second = open_session(gw.port());
    assert_eq!(
        tool_text(&call(gw.port(), &second, "greet", json!({"name": "B"}))),
        "Hello, B!"
    );
}

/// The upstream from the TOML file's `[gateway]` section (and the servers' own `[sessions]`
/// next to it): a session idle past `idle_ttl_ms` ends, and its process with it.
#[test]
fn an_idle_session_ends_with_its_process_and_the_toml_section_configures_the_upstream() {
    let dir = TempDir::new("gateway-toml");
    let path = dir.path().join("gateway.toml");
    let toml = format!(
        "[gateway]\ncommand = [\"env\", \"FLEETMCP_TRANSPORT=stdio\", {:?}]\nmax_processes = 4\n\n[sessions]\nidle_ttl_ms = 1000\n",
        everything().display().to_string()
    );
    std::fs::write(&path, toml).expect("write the config");
    let config = path.to_string_lossy().into_owned();
    let mut gw = gateway(&[
        ("FLEETMCP_UPSTREAM_COMMAND", ""),
        ("FLEETMCP_CONFIG", &config),
    ]);
    gw.wait_ready(Duration::from_secs(20));
    let pid = gw.pid();
    let sid = open_session(gw.port());
    assert_eq!(
        tool_text(&call(gw.port(), &sid, "greet", json!({"name": "T"}))),
        "Hello, T!"
    );
    assert_eq!(children_of(pid).len(), 1);
    assert!(
        wait_children(pid, 0, Duration::from_secs(10)),
        "the idle session's process is reaped"
    );
    assert!(log_has(&gw, REAPED, Duration::from_secs(5)), "{}", gw.log());
    let resp = call(gw.port(), &sid, "greet", json!({"name": "T"}));
    assert_eq!(
        resp.status,
        404,
        "the idle session ended:\n{}",
        resp.describe()
    );
}

/// An upstream process that dies is replaced on the session's next request, initialized again
/// from the session's stored `initialize`; what it kept in memory is gone (its counters).
#[test]
fn an_upstream_that_dies_is_started_again_for_the_next_request() {
    let mut gw = gateway(&[]);
    gw.wait_ready(Duration::from_secs(20));
    let pid = gw.pid();
    assert!(
        wait_children(pid, 0, Duration::from_secs(10)),
        "the probe's process is reaped"
    );
    let sid = open_session(gw.port());
    let done = call(gw.port(), &sid, "test_cancellable", json!({"work_ms": 50}));
    assert_eq!(tool_text(&done), "finished", "{}", done.describe());
    let stats = |port| {
        let read = json!({"jsonrpc": "2.0", "id": 9, "method": "resources/read", "params": {"uri": "test://stats"}});
        let resp = post(port, Some(&sid), &read);
        let text = resp.json()["result"]["contents"][0]["text"]
            .as_str()
            .map(String::from);
        serde_json::from_str::<Value>(&text.unwrap_or_else(|| panic!("{}", resp.describe())))
            .expect("stats")
    };
    assert_eq!(stats(gw.port())["completed"], 1);
    let children = children_of(pid);
    assert_eq!(children.len(), 1);
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &children[0].to_string()])
        .status();
    assert!(
        log_has(
            &gw,
            "[gateway] the session's upstream stopped",
            Duration::from_secs(5)
        ),
        "{}",
        gw.log()
    );
    assert_eq!(
        tool_text(&call(gw.port(), &sid, "greet", json!({"name": "again"}))),
        "Hello, again!"
    );
    assert!(
        gw.log().contains("[gateway] starting a new upstream"),
        "{}",
        gw.log()
    );
    assert_eq!(
        stats(gw.port())["completed"],
        0,
        "a new process: the old one's memory is gone"
    );
    assert_eq!(children_of(pid).len(), 1);
}

/// An upstream that answers `initialize`, then reads nothing more and ignores `SIGTERM`: when
/// its session ends it is still stopped (`SIGKILL` after the grace, twice) and reaped.
#[test]
fn a_process_that_ignores_its_input_and_sigterm_is_killed_and_reaped() {
    let script = "import json, signal, sys, time\n\
signal.signal(signal.SIGTERM, signal.SIG_IGN)\n\
m = json.loads(sys.stdin.readline())\n\
r = {'protocolVersion': '2025-06-18', 'capabilities': {}, 'serverInfo': {'name': 'stuck', 'version': '0'}}\n\
print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)\n\
time.sleep(1000)\n";
    let dir = TempDir::new("stuck-upstream");
    let path = dir.path().join("stuck.py");
    std::fs::write(&path, script).expect("write the script");
    let command = format!("python3 {}", path.display());
    let mut gw = gateway(&[
        ("FLEETMCP_UPSTREAM_COMMAND", &command),
        ("FLEETMCP_UPSTREAM_STOP_GRACE_MS", "200"),
    ]);
    gw.wait_ready(Duration::from_secs(20));
    let pid = gw.pid();
    assert!(
        wait_children(pid, 0, Duration::from_secs(10)),
        "the probe's process is killed too"
    );
    let sid = open_session(gw.port());
    assert_eq!(children_of(pid).len(), 1);
    let resp = http(
        gw.port(),
        "DELETE",
        "/mcp",
        &[("mcp-session-id", &sid)],
        None,
    );
    assert_eq!(resp.status, 204, "{}", resp.describe());
    assert!(
        wait_children(pid, 0, Duration::from_secs(5)),
        "{}",
        gw.log()
    );
    assert!(
        log_has(
            &gw,
            "[gateway] an upstream process was killed",
            Duration::from_secs(2)
        ),
        "{}",
        gw.log()
    );
}

/// `fleetmcp_upstreams_open` on `/metrics`, once it reads `n` (its last reading after `limit`).
fn upstreams_open(port: u16, n: u32, limit: Duration) -> Option<u32> {
    let start = std::time::Instant::now();
    loop {
        let resp = http(port, "GET", "/metrics", &[], None);
        let value = resp
            .body
            .lines()
            .find_map(|l| l.strip_prefix("fleetmcp_upstreams_open "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u32);
        if value == Some(n) || start.elapsed() >= limit {
            return value;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The gauge of upstreams open counts each session's process while it runs: not the startup
/// probe's, one per session, down when a session ends and when its process dies.
#[test]
fn metrics_count_the_upstream_processes_of_the_sessions_held() {
    let mut gw = gateway(&[]);
    gw.wait_ready(Duration::from_secs(20));
    let (port, pid) = (gw.port(), gw.pid());
    assert!(wait_children(pid, 0, Duration::from_secs(10)));
    let limit = Duration::from_secs(5);
    assert_eq!(
        upstreams_open(port, 0, limit),
        Some(0),
        "none before a session"
    );
    let first = open_session(port);
    let second = open_session(port);
    assert_eq!(upstreams_open(port, 2, limit), Some(2), "one per session");
    assert_eq!(children_of(pid).len(), 2);

    let resp = http(port, "DELETE", "/mcp", &[("mcp-session-id", &first)], None);
    assert_eq!(resp.status, 204, "{}", resp.describe());
    assert_eq!(
        upstreams_open(port, 1, limit),
        Some(1),
        "the ended session's"
    );

    // The other session's process dies: its upstream is no longer open (until the session's
    // next request starts a new one).
    assert!(wait_children(pid, 1, Duration::from_secs(10)));
    for child in children_of(pid) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &child.to_string()])
            .status();
    }
    assert_eq!(upstreams_open(port, 0, limit), Some(0), "a dead process's");
    assert_eq!(
        tool_text(&call(port, &second, "greet", json!({"name": "again"}))),
        "Hello, again!"
    );
    assert_eq!(upstreams_open(port, 1, limit), Some(1), "its replacement's");
    gw.assert_no_panic_logged();
}

/// An upstream's request the client cannot be asked (its id is `null`, which MCP forbids) is
/// refused back up with `-32600`, so the upstream does not wait for an answer that never comes
/// (found by review: it was dropped, and the upstream's tool call hung on it). Its answer to
/// the call, with the call's id echoed as a number, still answers the call (it was dropped,
/// and the client waited for ever).
#[test]
fn an_upstream_request_with_a_null_id_is_refused_back_up() {
    let script = r#"import json, sys
m = json.loads(sys.stdin.readline())
r = {'protocolVersion': '2025-06-18', 'capabilities': {'tools': {}}, 'serverInfo': {'name': 'odd', 'version': '0'}}
print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)
for line in sys.stdin:
    m = json.loads(line)
    if m.get('method') != 'tools/call':
        continue
    print(json.dumps({'jsonrpc': '2.0', 'id': None, 'method': 'roots/list'}), flush=True)
    reply = json.loads(sys.stdin.readline())
    text = str(reply.get('error', {}).get('code'))
    # The answer's id echoed as a number (`1` for `"1"`): still this call's answer.
    print(json.dumps({'jsonrpc': '2.0', 'id': int(m['id']), 'result': {'content': [{'type': 'text', 'text': text}]}}), flush=True)
"#;
    let (_dir, gw) = gateway_over_python(script);
    let sid = open_session(gw.port());
    let resp = call(gw.port(), &sid, "anything", json!({}));
    assert_eq!(tool_text(&resp), "-32600", "{}", gw.log());
}

/// An HTTP upstream's answer or SSE event longer than `FLEETMCP_UPSTREAM_MAX_LINE_BYTES` is
/// not held whole: the call is answered `-32603` (found by review: both were read without
/// bound, and an SSE event's end was searched for again over the whole event at each chunk).
/// Answers within the bound pass, in JSON and in SSE.
#[test]
fn an_http_upstreams_answer_past_the_bound_is_refused_not_held() {
    let script = r#"import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
        if 'id' not in m:
            return self.send(202, None, b'')
        if m['method'] == 'initialize':
            r = {'protocolVersion': '2025-06-18', 'capabilities': {'tools': {}}, 'serverInfo': {'name': 'big', 'version': '0'}}
            body = json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}).encode()
            return self.send(200, 'application/json', body, [('Mcp-Session-Id', 's1')])
        name = m.get('params', {}).get('name', '')
        text = 'x' * (5000 if name.startswith('big') else 10)
        body = json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {'content': [{'type': 'text', 'text': text}]}}).encode()
        if name.endswith('sse'):
            self.send(200, 'text/event-stream', b'event: message\ndata: ' + body + b'\n\n')
        else:
            self.send(200, 'application/json', body)
ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
"#;
    let dir = TempDir::new("big-upstream");
    let path = dir.path().join("big.py");
    std::fs::write(&path, script).expect("write the script");
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
        ("FLEETMCP_UPSTREAM_MAX_LINE_BYTES", "2000"),
    ]);
    gw.wait_ready(Duration::from_secs(20));
    let sid = open_session(gw.port());
    for name in ["small_json", "small_sse"] {
        assert_eq!(
            tool_text(&call(gw.port(), &sid, name, json!({}))),
            "x".repeat(10)
        );
    }
    for name in ["big_json", "big_sse"] {
        let resp = call(gw.port(), &sid, name, json!({}));
        let v = resp.json();
        assert_eq!(
            v["error"]["code"].as_i64(),
            Some(-32603),
            "{name}: {}",
            resp.describe()
        );
    }
}

/// A question the upstream asks while no call runs (it goes on the session's standalone
/// stream) for a capability the client did not declare is refused at once, as a call's own
/// questions are (found by review: it waited the whole reply timeout, five minutes, for an
/// answer the client could not give, holding one of the upstream's places for questions).
#[test]
fn an_upstream_question_the_client_cannot_answer_is_refused_at_once() {
    // The first call is answered, then the question asked (no call runs then, so it goes on
    // the standalone stream); the second call is answered with what the question got back,
    // once it did (a call that comes first waits for it: lines may come in either order).
    let script = r#"import json, sys
def send(m):
    print(json.dumps(dict(m, jsonrpc='2.0')), flush=True)
def text(m, t):
    send({'id': m['id'], 'result': {'content': [{'type': 'text', 'text': t}]}})
m = json.loads(sys.stdin.readline())
send({'id': m['id'], 'result': {'protocolVersion': '2025-06-18', 'capabilities': {'tools': {}}, 'serverInfo': {'name': 'asks', 'version': '0'}}})
said, waiting = None, []
for line in sys.stdin:
    m = json.loads(line)
    if m.get('id') == 5 and 'method' not in m:
        said = str(m.get('error', {}).get('message'))
        for w in waiting:
            text(w, said)
    elif m.get('method') == 'tools/call' and m['params']['name'] == 'first':
        text(m, 'first')
        send({'id': 5, 'method': 'sampling/createMessage', 'params': {'messages': [], 'maxTokens': 1}})
    elif m.get('method') == 'tools/call':
        if said is None:
            waiting.append(m)
        else:
            text(m, said)
"#;
    let (_dir, gw) = gateway_over_python(script);
    let sid = open_session(gw.port());
    assert_eq!(
        tool_text(&call(gw.port(), &sid, "first", json!({}))),
        "first"
    );
    let said = tool_text(&call(gw.port(), &sid, "second", json!({})));
    assert!(said.contains("sampling"), "{said}\n{}", gw.log());
}

/// An upstream that prints its own chatter on stdout (not JSON-RPC) is told of once at WARN,
/// then at debug level, so it cannot flood the log (found by review: a WARN line per line);
/// its answers still arrive.
#[test]
fn an_upstreams_chatter_on_stdout_is_warned_of_once() {
    let script = r#"import json, sys
m = json.loads(sys.stdin.readline())
r = {'protocolVersion': '2025-06-18', 'capabilities': {'tools': {}}, 'serverInfo': {'name': 'chatty', 'version': '0'}}
print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)
for line in sys.stdin:
    m = json.loads(line)
    if m.get('method') == 'tools/call':
        for i in range(5):
            print('debug: working on it', i, flush=True)
        print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {'content': [{'type': 'text', 'text': 'done'}]}}), flush=True)
"#;
    let (_dir, gw) = gateway_over_python(script);
    let sid = open_session(gw.port());
    assert_eq!(tool_text(&call(gw.port(), &sid, "a", json!({}))), "done");
    assert_eq!(tool_text(&call(gw.port(), &sid, "b", json!({}))), "done");
    let warned = gw
        .log()
        .matches("the upstream sent something that is not a JSON-RPC message")
        .count();
    assert_eq!(warned, 1, "{}", gw.log());
}
