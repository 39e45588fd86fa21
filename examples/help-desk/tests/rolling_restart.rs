//! A rolling restart no client notices (issue 10 item 2): three distributed `help-desk`
//! instances on one real `redis-server`, behind a real nginx running the repository's
//! `deploy/nginx/fleetmcp.conf` (its ports replaced), with session-era clients calling tools in
//! a loop and each holding its GET stream open, while every instance in turn is stopped
//! (SIGTERM), waited for (exit 0, within its drain delay plus grace period), started again on
//! the same port under the same machine id, and waited for (`/readyz` 200).
//!
//! Asserted: no answer other than 2xx reached a client, no session was lost (no 404, on a POST
//! or a GET), every GET stream that ended was resumed (`Last-Event-ID`) with a 200, every
//! instance exited 0 within the bound, `/readyz` answered 503 and the heartbeat was gone while
//! it drained, and each logged the phases of its stop (the contract's
//! `[HA] Services stopped for node <id>` among them).
//!
//! The clients do what an MCP SDK does on a `503` with `Retry-After`: retry after the delay.
//! Such a retried answer is counted and reported (nginx passes a `503` to the client rather
//! than replaying a POST, see the configuration), but it is not a failure; any other non-2xx
//! answer, or a 503 without `Retry-After`, is. None is expected: a stopping instance serves
//! everything during its drain delay and refuses connections after it, which nginx retries.
//!
//! help-desk answers `tools/call` as JSON (none of its tools streams), so the SSE side is the
//! GET streams, which the stop ends and the clients resume on another instance from the events
//! in Redis. Needs `redis-server` and nginx. Every wait is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support::raw_http::{self, RawResponse};
use support::{Instance, Nginx, free_port};
use support_redis::RedisServer;

/// The drain delay of the instances: above the configuration's upstream `keepalive_timeout`
/// (3 s), as `deploy/nginx/fleetmcp.conf` requires.
const DRAIN_MS: u64 = 3500;
/// The grace period for requests in flight once the listener closed.
const GRACE_MS: u64 = 3000;
/// The longest a stop may take: drain, grace, and the second a cancelled request's connection
/// gets to close, plus a second for process exit and Redis.
const EXIT_BOUND: Duration = Duration::from_millis(DRAIN_MS + GRACE_MS + 2000);
/// Concurrent clients, each with a calling thread and a GET-stream thread.
const CLIENTS: usize = 4;
/// How long a restarted instance may take to be ready.
const READY_LIMIT: Duration = Duration::from_secs(15);

fn desk(machine: &str, port: u16, redis: &str) -> Instance {
    let drain = DRAIN_MS.to_string();
    let grace = GRACE_MS.to_string();
    Instance::start_on(
        env!("CARGO_BIN_EXE_help-desk"),
        port,
        &[
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("FRONTMCP_BIND_ADDRESS", "loopback"),
            ("MACHINE_ID", machine),
            ("REDIS_URL", redis),
            ("REDIS_HOST", ""),
            ("REDIS_PORT", ""),
            ("FLEETMCP_DRAIN_MS", &drain),
            ("FLEETMCP_SHUTDOWN_GRACE_MS", &grace),
        ],
    )
}

/// Distinct free loopback ports.
fn ports(n: usize) -> Vec<u16> {
    let mut out: Vec<u16> = Vec::new();
    while out.len() < n {
        let p = free_port();
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// One POST through nginx, on a fresh connection.
fn post(port: u16, session: Option<&str>, msg: &Value) -> RawResponse {
    post_with(port, session, &[], msg, HTTP_LIMIT)
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    /// Tool calls answered 200 with a result.
    calls_ok: u64,
    /// 503s with `Retry-After`, retried as an SDK does (not failures; reported).
    retried_503: u64,
    /// The first of them, for the report.
    first_503: Option<String>,
    /// Anything else: non-2xx answers, JSON-RPC errors, 404s (lost sessions), broken streams.
    failures: Vec<String>,
    /// GET streams opened (first ones and resumptions) with a 200.
    streams_opened: u64,
    /// GET streams resumed with `Last-Event-ID` after the server ended them.
    streams_resumed: u64,
}

/// Calls `find_tickets` until `stop`, retrying a `503` with `Retry-After` as an SDK does.
fn call_loop(port: u16, sid: String, stop: Arc<AtomicBool>, tally: Arc<Mutex<Tally>>) {
    while !stop.load(Ordering::Relaxed) {
        let call = json!({
            "jsonrpc": "2.0",
            "id": next_id(),
            "method": "tools/call",
            "params": {"name": "find_tickets", "arguments": {}},
        });
        let resp = post(port, Some(&sid), &call);
        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
        match resp.status {
            200 if resp.json().get("result").is_some() => t.calls_ok += 1,
            503 if resp.header("retry-after").is_some() => {
                t.retried_503 += 1;
                if t.first_503.is_none() {
                    t.first_503 = Some(resp.describe());
                }
                drop(t);
                let wait = resp
                    .header("retry-after")
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(1)
                    .min(2);
                thread::sleep(Duration::from_secs(wait));
            }
            _ => t
                .failures
                .push(format!("tools/call in {sid}:\n{}", resp.describe())),
        }
    }
}

/// Holds the session's GET stream open through nginx until `stop`; whenever the server ends
/// it, resumes it with the last event id seen.
fn stream_loop(port: u16, sid: String, stop: Arc<AtomicBool>, tally: Arc<Mutex<Tally>>) {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let host = format!("127.0.0.1:{port}");
    let mut last_id: Option<String> = None;
    let fail = |why: String| {
        tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failures
            .push(why)
    };
    while !stop.load(Ordering::Relaxed) {
        let mut headers = vec![
            ("Host", host.as_str()),
            ("Accept", "text/event-stream"),
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", PROTOCOL_VERSION),
            // So nginx closes the connection when the stream ends, which the reader sees.
            ("Connection", "close"),
        ];
        if let Some(id) = last_id.as_deref() {
            headers.push(("Last-Event-ID", id));
        }
        // Reads time out every 300 ms, so the stop flag is seen.
        let opened = raw_http::open(
            addr,
            "GET",
            "/mcp",
            &headers,
            None,
            Duration::from_millis(300),
        )
        .and_then(|mut s| {
            // The head may take a moment (a relayed stream); the read timeout repeats.
            let began = Instant::now();
            loop {
                match raw_http::read_status(&mut s) {
                    Ok(status) => return Ok((s, status)),
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) && began.elapsed() < HTTP_LIMIT => {}
                    Err(e) => return Err(e),
                }
            }
        });
        let (mut stream, status) = match opened {
            Ok(pair) => pair,
            Err(e) => {
                fail(format!("GET stream of {sid} (after {last_id:?}): {e}"));
                return;
            }
        };
        if status != 200 {
            let mut rest = String::new();
            let _ = stream.read_to_string(&mut rest);
            fail(format!(
                "GET stream of {sid} (after {last_id:?}): HTTP {status}\n{rest}"
            ));
            return;
        }
        {
            let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
            t.streams_opened += 1;
            if last_id.is_some() {
                t.streams_resumed += 1;
            }
        }
        // Read until the server ends the stream (end of file), keeping the last `id:`.
        let mut pending = String::new();
        let mut buf = [0u8; 4096];
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                    while let Some(end) = pending.find('\n') {
                        let line: String = pending.drain(..=end).collect();
                        if let Some(id) = line.trim_end().strip_prefix("id:") {
                            last_id = Some(id.trim().to_string());
                        }
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                // A reset: the stream broke; resume it like an ended one.
                Err(_) => break,
            }
        }
        if last_id.is_none() {
            fail(format!(
                "the GET stream of {sid} ended before its priming event"
            ));
            return;
        }
    }
}

#[test]
fn a_rolling_restart_behind_nginx_loses_no_request_and_no_session() {
    let began = Instant::now();
    let redis = RedisServer::start();
    let url = redis.url();
    let machines = ["desk-1", "desk-2", "desk-3"];
    let upstreams = ports(3);
    let mut fleet: Vec<Instance> = machines
        .iter()
        .zip(&upstreams)
        .map(|(m, p)| desk(m, *p, &url))
        .collect();
    for i in &mut fleet {
        i.wait_ready(READY_LIMIT);
    }
    let front = free_port();
    let nginx = Nginx::start(&Nginx::fleet_conf(&upstreams, front), front);

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut threads = Vec::new();
    for _ in 0..CLIENTS {
        let sid = open_session(front);
        for run in [call_loop, stream_loop] {
            let (sid, stop, tally) = (sid.clone(), stop.clone(), tally.clone());
            threads.push(thread::spawn(move || run(front, sid, stop, tally)));
        }
    }
    thread::sleep(Duration::from_millis(500));
    let before_roll = tally.lock().unwrap_or_else(|e| e.into_inner()).calls_ok;
    assert!(before_roll > 0, "the clients are calling");

    let mut stop_times = Vec::new();
    let mut stopped_logs = Vec::new();
    for (i, machine) in machines.iter().enumerate() {
        let port = upstreams[i];
        let sent = Instant::now();
        fleet[i].signal("TERM");
        // While it drains: not ready, and no longer advertised (its sessions move at once).
        let mut drained_seen = false;
        while sent.elapsed() < Duration::from_millis(DRAIN_MS / 2) {
            let ready = support::http_get(port, "/readyz").map(|r| r.status);
            let beat = redis.cli(&["EXISTS", &format!("mcp:ha:heartbeat:{machine}")]);
            if ready.as_ref().is_ok_and(|s| *s == 503) && beat.trim() == "0" {
                drained_seen = true;
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        assert!(
            drained_seen,
            "{machine}: /readyz 503 and heartbeat gone during the drain\n{}",
            fleet[i].log()
        );
        let status = fleet[i].wait_exit(EXIT_BOUND).unwrap_or_else(|| {
            panic!(
                "{machine} still running {EXIT_BOUND:?} after SIGTERM\n{}",
                fleet[i].log()
            )
        });
        let took = sent.elapsed();
        assert!(
            status.success(),
            "{machine} exited {status:?}\n{}",
            fleet[i].log()
        );
        assert!(
            took >= Duration::from_millis(DRAIN_MS),
            "{machine} kept serving for its drain delay: {took:?}"
        );
        stop_times.push(took);
        let restarted = desk(machine, port, &url);
        let old = std::mem::replace(&mut fleet[i], restarted);
        stopped_logs.push((machine, old.log()));
        fleet[i].wait_ready(READY_LIMIT);
        // nginx takes a refused instance out for `fail_timeout` (2 s): let traffic reach the
        // restarted one before the next is stopped.
        thread::sleep(Duration::from_millis(2500));
    }
    let rolled_at = began.elapsed();
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a client thread panicked");
    }

    let t = tally.lock().unwrap_or_else(|e| e.into_inner());
    let log = nginx.access_log();
    let retried_by_nginx = log.lines().filter(|l| l.contains(", ")).count();
    let posts = log.lines().filter(|l| l.starts_with("POST ")).count();
    eprintln!(
        "rolled 3 instances in {rolled_at:?}; stops took {stop_times:?} (bound {EXIT_BOUND:?}); \
         {} tool calls ok ({posts} POSTs through nginx, {retried_by_nginx} requests retried on \
         the next instance by nginx), {} 503s retried by the clients, {} GET streams opened, \
         {} resumed with Last-Event-ID",
        t.calls_ok, t.retried_503, t.streams_opened, t.streams_resumed
    );
    if let Some(first) = &t.first_503 {
        eprintln!("the first 503 the clients retried:\n{first}");
    }
    let nginx_errors = nginx.error_log();
    let upstream_errors: Vec<&str> = nginx_errors
        .lines()
        .filter(|l| l.contains("[error]") || l.contains("[warn]"))
        .collect();
    eprintln!("nginx's upstream errors:\n{}", upstream_errors.join("\n"));
    for (machine, log) in &stopped_logs {
        let notable: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR ") || l.contains("relay"))
            .collect();
        eprintln!(
            "{machine}'s warnings before its restart:\n{}",
            notable.join("\n")
        );
    }
    assert!(
        t.failures.is_empty(),
        "{} failures, first ones:\n{}",
        t.failures.len(),
        t.failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    assert!(
        t.calls_ok > before_roll + 50,
        "calls went on: {}",
        t.calls_ok
    );
    assert!(
        t.streams_resumed >= CLIENTS as u64,
        "the GET streams were ended by the stops and resumed: {}",
        t.streams_resumed
    );
    for (machine, log) in &stopped_logs {
        for line in [
            format!("shutting down: draining for {DRAIN_MS} ms"),
            format!("[HA] Services stopped for node {machine}"),
            "drain delay over: closing".to_string(),
            "stopped accepting connections".to_string(),
            "stopped shutdown_ms=".to_string(),
        ] {
            assert!(
                log.contains(&line),
                "{machine}'s log lacks `{line}`:\n{log}"
            );
        }
        assert!(!log.contains("panicked at"), "{machine} panicked:\n{log}");
    }
    for i in &mut fleet {
        i.assert_alive();
        i.assert_no_panic_logged();
    }
    assert!(
        began.elapsed() < Duration::from_secs(60),
        "the test took {:?}",
        began.elapsed()
    );
}
