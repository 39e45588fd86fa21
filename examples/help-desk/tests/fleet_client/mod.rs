//! What the fleet tests of help-desk share: instances in distributed mode, a session-era client
//! speaking raw HTTP/1.1, waits on an instance's log, and what a session's record and streams
//! look like in Redis. Each test file includes it with `mod fleet_client;` next to `mod support;`
//! and `mod support_redis;` (the e2e kit and the Redis kit it builds on).

#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::raw_http::{self, RawResponse};
use crate::support::{Instance, TempDir};
use crate::support_redis::RedisServer;

pub mod sentinel;

/// The protocol version of the session-era client these tests play.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// How long any one HTTP exchange may take before a test calls it a hang.
pub const HTTP_LIMIT: Duration = Duration::from_secs(15);
/// How long a log line may take to show up after the response that follows it.
pub const LOG_LIMIT: Duration = Duration::from_secs(3);
pub const ACCEPT: &str = "application/json, text/event-stream";

/// A quick failover for the tests that kill a holder: a beat every 300 ms, dead 1 s after its
/// last, its sessions claimed 500 ms after that.
pub const QUICK_FAILOVER: [(&str, &str); 3] = [
    ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
    ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1000"),
    ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "500"),
];

/// A `help-desk` in distributed mode on `redis`, bound to loopback (so it advertises
/// `127.0.0.1:<port>` to the others), with extra settings (the shared secret is
/// `support::SESSION_SECRET` unless they say otherwise). Redis variables from the developer's
/// shell are neutralised.
pub fn distributed_desk(machine: &str, redis: &str, extra: &[(&str, &str)]) -> Instance {
    let mut env: Vec<(&str, &str)> = vec![
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("MACHINE_ID", machine),
        ("REDIS_URL", redis),
        ("REDIS_HOST", ""),
        ("REDIS_PORT", ""),
    ];
    env.extend_from_slice(extra);
    Instance::start(env!("CARGO_BIN_EXE_help-desk"), &env)
}

/// Waits until `needle` is in the instance's log; false after `limit`.
pub fn log_has(instance: &Instance, needle: &str, limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        if instance.log().contains(needle) {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `needle` is in the instance's log; fails the test after [`LOG_LIMIT`].
pub fn assert_log_has(instance: &Instance, who: &str, needle: &str) {
    assert!(
        log_has(instance, needle, LOG_LIMIT),
        "{who}'s log lacks `{needle}`\n--- {who} log ---\n{}",
        instance.log()
    );
}

/// Waits until `ok()` holds, checking every 50 ms; fails the test after `limit`, saying `what`.
pub fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// The value of the series `series` (a name, with its labels if any) on the instance at
/// `port`'s `/metrics`; `None` when it is not there.
pub fn metric(port: u16, series: &str) -> Option<u64> {
    let resp = http(port, "GET", "/metrics", &[], None, HTTP_LIMIT);
    assert_eq!(resp.status, 200, "/metrics:\n{}", resp.describe());
    resp.body
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// How often `needle` is in the instance's log.
pub fn count(instance: &Instance, needle: &str) -> usize {
    instance.log().matches(needle).count()
}

/// Sends one request with its `Host` on a fresh connection (`Connection: close`) and reads the
/// whole answer, panicking if it takes longer than `limit`.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    limit: Duration,
) -> RawResponse {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let host = format!("127.0.0.1:{port}");
    let mut all = vec![("Host", host.as_str())];
    all.extend_from_slice(headers);
    raw_http::send(addr, method, path, &all, body, limit)
}

/// A JSON-RPC id no other request of this test process uses.
pub fn next_id() -> u64 {
    static ID: AtomicU64 = AtomicU64::new(1);
    ID.fetch_add(1, Ordering::Relaxed)
}

/// A POST of `msg` to `/mcp`, in session `sid` (if any), with `extra` headers.
pub fn post_with(
    port: u16,
    sid: Option<&str>,
    extra: &[(&str, &str)],
    msg: &Value,
    limit: Duration,
) -> RawResponse {
    let body = msg.to_string();
    let mut headers = vec![("Content-Type", "application/json"), ("Accept", ACCEPT)];
    if let Some(sid) = sid {
        headers.push(("mcp-session-id", sid));
        headers.push(("mcp-protocol-version", PROTOCOL_VERSION));
    }
    headers.extend_from_slice(extra);
    http(port, "POST", "/mcp", &headers, Some(&body), limit)
}

/// `initialize` and `notifications/initialized` on `port`; returns the session id.
pub fn open_session(port: u16) -> String {
    open_session_held(port).0
}

/// Like [`open_session`]; also the instance that made (holds) the session, as its answer to
/// `initialize` names it (`X-FrontMCP-Machine-Id`), if it does.
pub fn open_session_held(port: u16) -> (String, Option<String>) {
    open_session_held_with(port, &[])
}

/// Like [`open_session_held`], with `extra` headers on both requests (a `traceparent`).
pub fn open_session_held_with(port: u16, extra: &[(&str, &str)]) -> (String, Option<String>) {
    let init = json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "fleet-test", "version": "1.0.0"},
        },
    });
    let resp = post_with(port, None, extra, &init, HTTP_LIMIT);
    assert_eq!(resp.status, 200, "initialize:\n{}", resp.describe());
    let sid = resp
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("initialize without mcp-session-id:\n{}", resp.describe()))
        .to_string();
    assert!(
        resp.json().get("result").is_some(),
        "initialize:\n{}",
        resp.describe()
    );
    let machine = machine_of(&resp).map(String::from);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = post_with(port, Some(&sid), extra, &note, HTTP_LIMIT);
    assert!(
        resp.status == 202 || resp.status == 200,
        "notifications/initialized:\n{}",
        resp.describe()
    );
    (sid, machine)
}

/// A 200 with a successful tool result.
pub fn assert_tool_ok(resp: &RawResponse, what: &str) {
    assert_eq!(resp.status, 200, "{what}:\n{}", resp.describe());
    let msg = resp.json();
    let result = msg
        .get("result")
        .unwrap_or_else(|| panic!("{what}: no result:\n{}", resp.describe()));
    assert_ne!(
        result.get("isError"),
        Some(&Value::Bool(true)),
        "{what}: tool error:\n{}",
        resp.describe()
    );
}

/// The instance that answered, as its `X-FrontMCP-Machine-Id` says.
pub fn machine_of(resp: &RawResponse) -> Option<&str> {
    resp.header("x-frontmcp-machine-id")
}

/// Opens the standalone (`GET`) stream of session `sid` on `port`, reading with a short
/// timeout, and lets it start.
pub fn open_get_stream(port: u16, sid: &str) -> std::net::TcpStream {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let host = format!("127.0.0.1:{port}");
    let stream = raw_http::open(
        addr,
        "GET",
        "/mcp",
        &[
            ("Host", &host),
            ("Accept", "text/event-stream"),
            ("mcp-session-id", sid),
            ("mcp-protocol-version", PROTOCOL_VERSION),
        ],
        None,
        Duration::from_millis(300),
    )
    .expect("open the GET stream");
    // Let the stream start before anything is sent to it.
    thread::sleep(Duration::from_millis(200));
    stream
}

/// `GET /sse` on `port` with `extra` headers (a token): the open stream, and the endpoint
/// (`/message?sessionId=…`) its first event names.
pub fn open_legacy_stream(port: u16, extra: &[(&str, &str)]) -> (std::net::TcpStream, String) {
    let host = format!("127.0.0.1:{port}");
    let mut headers = vec![("Host", host.as_str()), ("Accept", "text/event-stream")];
    headers.extend_from_slice(extra);
    let mut stream = raw_http::open(
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        "GET",
        "/sse",
        &headers,
        None,
        Duration::from_millis(300),
    )
    .expect("GET /sse");
    let seen = read_stream_until(&mut stream, &["event: endpoint", "sessionId="]);
    let endpoint = seen
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("the endpoint event")
        .trim()
        .to_string();
    (stream, endpoint)
}

/// `POST <endpoint>` (`/message?sessionId=…`) on `port` with `body`.
pub fn legacy_post(port: u16, endpoint: &str, body: &Value) -> RawResponse {
    http(
        port,
        "POST",
        endpoint,
        &[("Content-Type", "application/json")],
        Some(&body.to_string()),
        HTTP_LIMIT,
    )
}

/// Reads `stream` until everything it carried contains every one of `needles`, for at most
/// 5 s; returns what it carried.
pub fn read_stream_until(stream: &mut std::net::TcpStream, needles: &[&str]) -> String {
    use std::io::Read;
    let mut seen = String::new();
    let began = Instant::now();
    let mut buf = [0u8; 4096];
    while !needles.iter().all(|n| seen.contains(n)) {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the stream did not carry {needles:?} within 5 s; it carried:\n{seen}"
        );
        match stream.read(&mut buf) {
            Ok(0) => panic!("the stream ended; it carried:\n{seen}"),
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            // The read timeout: nothing yet.
            Err(_) => {}
        }
    }
    seen
}

/// A `tools/call` message of `tool` with `arguments`, under an id of its own.
pub fn tool_call(tool: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    })
}

/// [`tool_call`] sent in session `sid` on `port`, with `extra` headers.
pub fn call_tool(
    port: u16,
    sid: &str,
    extra: &[(&str, &str)],
    tool: &str,
    arguments: Value,
) -> RawResponse {
    post_with(
        port,
        Some(sid),
        extra,
        &tool_call(tool, arguments),
        HTTP_LIMIT,
    )
}

/// A successful tool result, answered by instance `holder`.
pub fn assert_served_by(resp: &RawResponse, holder: &str, what: &str) {
    assert_tool_ok(resp, what);
    assert_eq!(
        machine_of(resp),
        Some(holder),
        "{what}: answered by another instance:\n{}",
        resp.describe()
    );
}

/// One answer seen under a [`LightLoad`].
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    pub status: u16,
    /// A `503` with `Retry-After`: the documented answer while Redis switches.
    pub documented: bool,
    pub at: Instant,
}

/// One client a session calling `find_tickets` through the given instances in turn, every
/// 20 ms (300 ms after a `503`), until [`LightLoad::stop`]. A `404` (a session lost) fails the
/// client, and so the test.
pub struct LightLoad {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Answer>>>,
    clients: Vec<thread::JoinHandle<()>>,
}

impl LightLoad {
    pub fn start(ports: &[u16], sessions: &[String]) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let clients = sessions
            .iter()
            .cloned()
            .enumerate()
            .map(|(c, sid)| {
                let (stop, seen, ports) = (stop.clone(), seen.clone(), ports.to_vec());
                thread::spawn(move || {
                    let mut n = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let port = ports[(c + n) % ports.len()];
                        let resp = call_tool(port, &sid, &[], "find_tickets", json!({}));
                        let answer = Answer {
                            status: resp.status,
                            documented: resp.status == 503 && resp.header("retry-after").is_some(),
                            at: Instant::now(),
                        };
                        seen.lock().unwrap_or_else(|e| e.into_inner()).push(answer);
                        assert_ne!(resp.status, 404, "session lost: {}", resp.describe());
                        let pause = if resp.status == 503 { 300 } else { 20 };
                        thread::sleep(Duration::from_millis(pause));
                    }
                })
            })
            .collect();
        Self {
            stop,
            seen,
            clients,
        }
    }

    /// Stops the clients; every answer they saw. Fails if one of them saw a session lost.
    pub fn stop(self) -> Vec<Answer> {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.join().expect("a client saw a session lost");
        }
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Checks the answers of a [`LightLoad`] through a switch of Redis that began at `began` and
/// took `switch`: every answer a success or the documented `503`, and more than 20 successes
/// from a second after the switch on. Prints the counts under `what`.
pub fn assert_only_documented_errors(
    what: &str,
    seen: &[Answer],
    began: Instant,
    switch: Duration,
) {
    let ok = seen.iter().filter(|a| a.status == 200).count();
    let documented = seen.iter().filter(|a| a.documented).count();
    let other: Vec<&Answer> = seen
        .iter()
        .filter(|a| a.status != 200 && !a.documented)
        .collect();
    let ok_after = seen
        .iter()
        .filter(|a| a.status == 200 && a.at > began + switch + Duration::from_secs(1))
        .count();
    eprintln!(
        "{what}: {} requests, {ok} ok, {documented} documented 503, {} other; the switch took {:.2} s",
        seen.len(),
        other.len(),
        switch.as_secs_f64()
    );
    assert!(other.is_empty(), "{what}: undocumented answers: {other:?}");
    assert!(ok_after > 20, "{what}: served after the switch: {ok_after}");
}

/// Sends `method /mcp` on `port` in session `sid` with `extra` headers and `body`, leaving the
/// answer (a stream, say) to the caller, who reads it with a short timeout.
pub fn open_in_session(
    port: u16,
    method: &str,
    sid: &str,
    extra: &[(&str, &str)],
    body: Option<&str>,
) -> std::net::TcpStream {
    let host = format!("127.0.0.1:{port}");
    let mut headers = vec![
        ("Host", host.as_str()),
        ("mcp-session-id", sid),
        ("mcp-protocol-version", PROTOCOL_VERSION),
    ];
    headers.extend_from_slice(extra);
    raw_http::open(
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        method,
        "/mcp",
        &headers,
        body,
        Duration::from_millis(300),
    )
    .unwrap_or_else(|e| panic!("{method} /mcp on {port}: {e}"))
}

/// Starts a `stamp` call on `port` in session `sid` (its effects file set) that answers
/// `delay_ms` after its progress event, reads its stream up to that event, and returns the
/// call's id and the last event id the client saw.
pub fn start_streamed_call(port: u16, sid: &str, delay_ms: u64) -> (u64, String) {
    let id = next_id();
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "stamp", "arguments": {"key": format!("k{id}"), "delay_ms": delay_ms},
        "_meta": {"progressToken": id}}});
    let body = call.to_string();
    let headers = [("Content-Type", "application/json"), ("Accept", ACCEPT)];
    let mut stream = open_in_session(port, "POST", sid, &headers, Some(&body));
    let seen = read_stream_until(&mut stream, &["notifications/progress"]);
    (id, last_event_id(&seen))
}

/// The id of the last event an SSE stream carried in `seen` (its progress event, in these
/// tests).
pub fn last_event_id(seen: &str) -> String {
    seen.lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .next_back()
        .expect("the progress event has an id")
        .trim()
        .to_string()
}

/// Whether `m` answers request `id` (not a notification or a request of its own).
pub fn is_answer_to(m: &Value, id: u64) -> bool {
    m.get("method").is_none() && m["id"] == json!(id)
}

/// The JSON-RPC messages of an SSE stream's `data:` lines.
pub fn stream_messages(seen: &str) -> Vec<Value> {
    seen.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Sessions on one redis-server: what fleet_sessions.rs, fleet_takeover.rs, fleet_notify.rs,
// fleet_legacy_sse.rs and fleet_resume.rs share (once all one file, fleet_redis.rs). Each of
// their tests starts its own `redis-server` (on a free loopback port, no persistence) and its
// own instances, and speaks raw HTTP/1.1 to them; they need `redis-server` and `redis-cli` on
// `PATH` (or `REDIS_SERVER` / `REDIS_CLI`).

/// The contract's log line of an instance serving a session it recreated from its record.
pub const RECREATING: &str = "[TransportService] Recreating transport from stored session";

/// Starts `help-desk` named `machine`, on `redis` (a URL) or with sessions in memory, with an
/// optional TOML configuration file. Redis variables from the developer's shell are neutralised
/// (an empty value sets nothing).
pub fn desk(machine: &str, redis: Option<&str>, config: Option<&PathBuf>) -> Instance {
    let config = config.map(|p| p.to_string_lossy().into_owned());
    let mut env: Vec<(&str, &str)> = vec![
        ("MACHINE_ID", machine),
        ("REDIS_URL", redis.unwrap_or("")),
        ("REDIS_HOST", ""),
        ("REDIS_PORT", ""),
    ];
    if let Some(path) = config.as_deref() {
        env.push(("FLEETMCP_CONFIG", path));
    }
    Instance::start(env!("CARGO_BIN_EXE_help-desk"), &env)
}

/// A TOML configuration file in `dir`.
pub fn config_file(dir: &TempDir, toml: &str) -> PathBuf {
    let path = dir.path().join("fleetmcp.toml");
    std::fs::write(&path, toml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// A POST of `msg` to `/mcp` in session `session` (if any), no other headers.
pub fn post(port: u16, session: Option<&str>, msg: &Value, limit: Duration) -> RawResponse {
    post_with(port, session, &[], msg, limit)
}

/// `tools/call find_tickets {}` on `port` in session `sid`.
pub fn find_tickets(port: u16, sid: &str) -> RawResponse {
    find_tickets_within(port, sid, HTTP_LIMIT)
}

/// [`find_tickets`], failing the test if it takes longer than `limit`.
pub fn find_tickets_within(port: u16, sid: &str, limit: Duration) -> RawResponse {
    let call = json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {}},
    });
    post(port, Some(sid), &call, limit)
}

/// `resources/read helpdesk://policies/sla` on `port` in session `sid`: a request whose handler
/// touches no Redis (help-desk's tickets are in Redis when it has one), for the tests of what
/// the session layer does while Redis is paused or down.
pub fn read_sla(port: u16, sid: &str) -> RawResponse {
    read_sla_within(port, sid, HTTP_LIMIT)
}

/// [`read_sla`], failing the test if it takes longer than `limit`.
pub fn read_sla_within(port: u16, sid: &str, limit: Duration) -> RawResponse {
    let read = json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "resources/read",
        "params": {"uri": "helpdesk://policies/sla"},
    });
    post(port, Some(sid), &read, limit)
}

/// A 200 with the service levels.
pub fn assert_read_ok(resp: &RawResponse, what: &str) {
    assert_eq!(resp.status, 200, "{what}:\n{}", resp.describe());
    let text = resp.json()["result"]["contents"][0]["text"]
        .as_str()
        .map(String::from);
    assert!(
        text.is_some_and(|t| t.contains("Service levels")),
        "{what}: not the service levels:\n{}",
        resp.describe()
    );
}

/// `DELETE /mcp` of session `sid` on `port`.
pub fn delete_session(port: u16, sid: &str) -> RawResponse {
    http(
        port,
        "DELETE",
        "/mcp",
        &[
            ("mcp-session-id", sid),
            ("mcp-protocol-version", PROTOCOL_VERSION),
        ],
        None,
        HTTP_LIMIT,
    )
}

/// A JSON-RPC error answer with this HTTP status, code and message.
pub fn assert_rpc_error(resp: &RawResponse, status: u16, code: i64, message: &str, what: &str) {
    assert_eq!(resp.status, status, "{what}:\n{}", resp.describe());
    let msg = resp.json();
    assert_eq!(
        msg["error"]["code"].as_i64(),
        Some(code),
        "{what}:\n{}",
        resp.describe()
    );
    assert_eq!(
        msg["error"]["message"].as_str(),
        Some(message),
        "{what}:\n{}",
        resp.describe()
    );
}

/// Now, in milliseconds since the Unix epoch (as heartbeats and records count time).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The Redis key of session `sid`'s record (the default `mcp:` prefix).
pub fn session_key(sid: &str) -> String {
    format!("mcp:session:{sid}")
}

/// Whether Redis holds the record of session `sid`.
pub fn key_exists(redis: &RedisServer, sid: &str) -> bool {
    redis.cli(&["EXISTS", &session_key(sid)]) == "1"
}

/// Every holder (`nodeId` value) anywhere in the stored record of `sid`.
pub fn stored_holders(redis: &RedisServer, sid: &str) -> Vec<String> {
    let raw = redis.cli(&["GET", &session_key(sid)]);
    let record: Value = serde_json::from_str(&raw)
        .unwrap_or_else(|e| panic!("record of {sid} is not JSON ({e}): {raw:?}"));
    let mut ids = Vec::new();
    collect_holders(&record, &mut ids);
    assert!(!ids.is_empty(), "no nodeId in the stored record: {record}");
    ids
}

fn collect_holders(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "nodeId" {
                    out.push(v.as_str().unwrap_or_default().to_string());
                }
                collect_holders(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_holders(v, out)),
        _ => {}
    }
}

/// The stored record of `sid` as Redis has it.
pub fn stored(redis: &RedisServer, sid: &str) -> Value {
    serde_json::from_str(&redis.cli(&["GET", &session_key(sid)])).unwrap_or(Value::Null)
}

/// A file for `stamp`'s effects (`HELP_DESK_EFFECTS_FILE`), in a directory kept as long as
/// the first value lives.
pub fn effects_file() -> (TempDir, String) {
    let dir = TempDir::new("effects");
    let file = dir.path().join("effects").to_string_lossy().into_owned();
    (dir, file)
}

/// Starts a `stamp` call on `port` in session `sid` that answers after 5 s, reads its stream up
/// to the progress event, and returns the call's id and the last event id the client saw.
pub fn start_slow_streamed_call(port: u16, sid: &str) -> (u64, String) {
    start_streamed_call(port, sid, 5000)
}

/// Calls of the stream-reading commands (`XRANGE`, `XREVRANGE`) Redis has served so far.
pub fn stream_reads(redis: &RedisServer) -> u64 {
    command_calls(redis, &["xrange", "xrevrange"])
}

/// Calls of `commands` (lower case) Redis has served so far.
pub fn command_calls(redis: &RedisServer, commands: &[&str]) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter(|l| {
            commands.iter().any(|c| {
                l.strip_prefix("cmdstat_")
                    .and_then(|r| r.strip_prefix(c))
                    .is_some_and(|r| r.starts_with(':'))
            })
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
