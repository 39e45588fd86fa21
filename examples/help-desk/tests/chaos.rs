//! The chaos soak, short version (issue 10 item 5): three distributed `help-desk` instances on
//! one real `redis-server`, behind a real nginx running `deploy/nginx/fleetmcp.conf`, while
//! session-era clients call a tool in a loop (every other call asking for progress, so that its
//! answer is an SSE stream, which must carry the result, resumed with `Last-Event-ID` as a client
//! does when it ends without one) and hold their GET stream (resumed with `Last-Event-ID`
//! whenever it ends), a pager pages every client's session (each page numbered,
//! so the streams show any event lost or repeated), and 2026-07-28 clients call without a
//! session. Meanwhile: a SIGTERM of one instance (started again), a SIGKILL of another (started
//! again), Redis paused 5 s, a SIGTERM of the third and of the second (so every instance is
//! rolled), and finally Redis restarted empty. Each SIGTERM is checked: `/readyz` 503 and the
//! heartbeat gone while it drains, exit 0 after the drain delay and within its bound, the phases
//! of its stop logged.
//!
//! Before the empty Redis, asserted: every answer 2xx or the documented 503 with `Retry-After`
//! (followed by the clients, as an SDK does), except requests in flight on the killed instance at
//! the instant it died; no session lost (no 404); no request unanswered after 10 s; no session
//! more than 6 s without a 2xx (the session store's wait, `sessions.store_wait_ms`, 5 s, plus a
//! second: an instance that has not seen a session's holder waits that long for Redis during
//! the pause, by design, rather than answer 503); no page that its holder took missing from, or repeated in, its
//! session's stream. After it: sessions are gone (expected: their records were in Redis), which
//! is counted and reported. Counts and a timeline picture (`chaos.svg`: requests per second per
//! instance, failures, fault events) are written to `target/chaos/`.
//!
//! `CHAOS_SCALE` (default 1) stretches every phase for a longer soak:
//! `CHAOS_SCALE=10 cargo test -p help-desk --test chaos -- --nocapture`.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::json;
use support::raw_http::{self, RawResponse};
use support::{Instance, Nginx, free_port, repo_root};
use support_redis::RedisServer;

const DRAIN_MS: u64 = 3500;
const GRACE_MS: u64 = 3000;
const CLIENTS: usize = 4;
const MODERN_CLIENTS: usize = 2;
/// No request may stay unanswered longer.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);
/// No session may go longer without a 2xx (before the empty Redis).
/// `sessions.store_wait_ms` (5 s) plus a second: see the top of the file.
const GAP_LIMIT: Duration = Duration::from_secs(6);
const READY_LIMIT: Duration = Duration::from_secs(15);

fn scale() -> u32 {
    std::env::var("CHAOS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

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
            ("VAULT_SECRET", "fleetmcp-chaos-vault-secret-0123456789"),
        ],
    )
}

/// One exchange as a client saw it.
#[derive(Debug, Clone)]
struct Seen {
    /// When it started and ended, since the soak began.
    start: Duration,
    end: Duration,
    /// Which client (session-era `0..CLIENTS`, then the modern ones, then the pager).
    client: usize,
    status: u16,
    /// The instance that answered (its `X-FrontMCP-Machine-Id`).
    machine: Option<String>,
    /// A 503 with `Retry-After`.
    documented: bool,
    detail: String,
}

/// What happened, shared by every client thread.
struct Soak {
    began: Instant,
    stop: AtomicBool,
    seen: Mutex<Vec<Seen>>,
    /// Pages the pager saw delivered, by client: their numbers, and when.
    paged: Mutex<HashMap<usize, Vec<(u64, Duration)>>>,
    /// Pages each client's stream carried, in order.
    received: Mutex<HashMap<usize, Vec<u64>>>,
    /// Stream problems (a 404 or an unexpected status on resumption).
    /// With when they happened.
    stream_failures: Mutex<Vec<(Duration, String)>>,
    streams_resumed: Mutex<u64>,
    /// Tool calls answered as an SSE stream, and those whose stream ended before the answer
    /// and was resumed for it.
    sse_answers: Mutex<(u64, u64)>,
    /// Fault events, for the picture and the report.
    events: Mutex<Vec<(Duration, String)>>,
}

impl Soak {
    fn now(&self) -> Duration {
        self.began.elapsed()
    }
    fn event(&self, what: impl Into<String>) {
        let what = what.into();
        eprintln!("[{:>6.2} s] {what}", self.now().as_secs_f64());
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((self.now(), what));
    }
    fn record(&self, client: usize, start: Duration, resp: &RawResponse) {
        let seen = Seen {
            start,
            end: self.now(),
            client,
            status: resp.status,
            machine: machine_of(resp).map(String::from),
            documented: resp.status == 503 && resp.header("retry-after").is_some(),
            detail: if (200..300).contains(&resp.status) {
                String::new()
            } else {
                resp.describe()
            },
        };
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(seen);
    }
}

/// A POST to `/mcp` through nginx; a transport failure (no answer within [`ANSWER_LIMIT`], a
/// reset) comes back as status 0 with the error, to be counted rather than end the soak.
fn exchange(front: u16, headers: &[(&str, &str)], body: Option<&str>) -> RawResponse {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, front));
    let host = format!("127.0.0.1:{front}");
    let mut all = vec![("Host", host.as_str())];
    all.extend_from_slice(headers);
    let began = Instant::now();
    raw_http::try_send(addr, "POST", "/mcp", &all, body, ANSWER_LIMIT).unwrap_or_else(|e| {
        RawResponse {
            status: 0,
            headers: Vec::new(),
            body: format!("no answer: {e}"),
            elapsed: began.elapsed(),
        }
    })
}

/// A session-era POST of `msg` in session `sid` (if any); see [`exchange`].
fn post(
    front: u16,
    sid: Option<&str>,
    extra: &[(&str, &str)],
    msg: &serde_json::Value,
) -> RawResponse {
    let mut headers = vec![("Content-Type", "application/json"), ("Accept", ACCEPT)];
    if let Some(sid) = sid {
        headers.push(("mcp-session-id", sid));
        headers.push(("mcp-protocol-version", PROTOCOL_VERSION));
    }
    headers.extend_from_slice(extra);
    exchange(front, &headers, Some(&msg.to_string()))
}

/// Waits as an SDK does after a documented 503.
fn follow_retry_after(resp: &RawResponse) {
    if resp.status == 503 {
        let s = resp
            .header("retry-after")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1)
            .min(2);
        thread::sleep(Duration::from_secs(s));
    }
}

fn call_loop(soak: &Soak, front: u16, client: usize, sid: &str) {
    let mut n: u64 = 0;
    while !soak.stop.load(Ordering::Relaxed) {
        n += 1;
        // Every other call asks for progress: its answer is an SSE stream (progress, result).
        let mut params = json!({"name": "find_tickets", "arguments": {}});
        if n.is_multiple_of(2) {
            params["_meta"] = json!({"progressToken": n});
        }
        let call =
            json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call", "params": params});
        let start = soak.now();
        let mut resp = post(front, Some(sid), &[], &call);
        let sse = resp
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if sse {
            let mut counts = soak.sse_answers.lock().unwrap_or_else(|e| e.into_inner());
            counts.0 += 1;
            drop(counts);
            if resp.status == 200 && !resp.body.contains("\"result\"") {
                // The stream ended before the answer: resume it, as a client does.
                resp = resume_answer(front, sid, &resp);
                if resp.status == 200 {
                    soak.sse_answers.lock().unwrap_or_else(|e| e.into_inner()).1 += 1;
                }
            }
        }
        soak.record(client, start, &resp);
        follow_retry_after(&resp);
    }
}

/// Resumes an SSE answer that ended without its result, from its last event id, through the
/// front; the resumed answer (status 599 when it still carries no result: a lost answer).
fn resume_answer(front: u16, sid: &str, cut: &RawResponse) -> RawResponse {
    let Some(last) = cut
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .map(str::trim)
        .next_back()
    else {
        return RawResponse {
            status: 599,
            headers: Vec::new(),
            body: format!(
                "an SSE answer with no event id to resume from:\n{}",
                cut.body
            ),
            elapsed: cut.elapsed,
        };
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, front));
    let host = format!("127.0.0.1:{front}");
    let headers = [
        ("Host", host.as_str()),
        ("Accept", "text/event-stream"),
        ("mcp-session-id", sid),
        ("mcp-protocol-version", PROTOCOL_VERSION),
        ("Last-Event-ID", last),
    ];
    let began = Instant::now();
    let mut resumed =
        raw_http::try_send(addr, "GET", "/mcp", &headers, None, Duration::from_secs(4))
            .unwrap_or_else(|e| RawResponse {
                status: 0,
                headers: Vec::new(),
                body: format!("no answer: {e}"),
                elapsed: began.elapsed(),
            });
    if resumed.status == 200 && !resumed.body.contains("\"result\"") {
        resumed.body = format!(
            "an SSE answer lost: cut after\n{}\nresumed as\n{}",
            cut.body, resumed.body
        );
        resumed.status = 599;
    }
    resumed
}

/// A 2026-07-28 client: no session, metadata on every request.
fn modern_loop(soak: &Soak, front: u16, client: usize) {
    while !soak.stop.load(Ordering::Relaxed) {
        let call = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
            "params": {"name": "find_tickets", "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "chaos-modern", "version": "1"}}}});
        let start = soak.now();
        let resp = exchange(
            front,
            &[
                ("Content-Type", "application/json"),
                ("Accept", ACCEPT),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "find_tickets"),
            ],
            Some(&call.to_string()),
        );
        soak.record(client, start, &resp);
        follow_retry_after(&resp);
    }
}

/// Pages every client's session in turn, each page numbered per client.
fn pager_loop(soak: &Soak, front: u16, pager: usize, sids: &[String]) {
    let own = open_session(front);
    let mut n: u64 = 0;
    while !soak.stop.load(Ordering::Relaxed) {
        n += 1;
        for (client, sid) in sids.iter().enumerate() {
            let text = format!("page {client}-{n}");
            let call = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
                "params": {"name": "page_session", "arguments": {"session_id": sid, "message": text}}});
            let start = soak.now();
            let resp = post(front, Some(&own), &[], &call);
            soak.record(pager, start, &resp);
            if resp.status == 200 && resp.json()["result"]["structuredContent"]["delivered"] == true
            {
                soak.paged
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(client)
                    .or_default()
                    .push((n, start));
            }
            follow_retry_after(&resp);
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Holds the session's GET stream, resuming it with the last event id whenever it ends, and
/// notes the pages it carries.
fn stream_loop(soak: &Soak, front: u16, client: usize, sid: &str) {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, front));
    let host = format!("127.0.0.1:{front}");
    let mut last_id: Option<String> = None;
    let marker = format!("page {client}-");
    while !soak.stop.load(Ordering::Relaxed) {
        let mut headers = vec![
            ("Host", host.as_str()),
            ("Accept", "text/event-stream"),
            ("mcp-session-id", sid),
            ("mcp-protocol-version", PROTOCOL_VERSION),
            ("Connection", "close"),
        ];
        if let Some(id) = last_id.as_deref() {
            headers.push(("Last-Event-ID", id));
        }
        let opened = raw_http::open(
            addr,
            "GET",
            "/mcp",
            &headers,
            None,
            Duration::from_millis(300),
        )
        .and_then(|mut s| {
            let began = Instant::now();
            loop {
                match raw_http::read_status(&mut s) {
                    Ok(status) => return Ok((s, status)),
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) && began.elapsed() < ANSWER_LIMIT => {}
                    Err(e) => return Err(e),
                }
            }
        });
        let fail = |why: String| {
            soak.stream_failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((soak.now(), why))
        };
        let (mut stream, status) = match opened {
            Ok(pair) => pair,
            Err(e) => {
                fail(format!("GET stream of client {client}: {e}"));
                thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        if status != 200 {
            let mut rest = String::new();
            let _ = stream.read_to_string(&mut rest);
            if status == 503 {
                thread::sleep(Duration::from_secs(1));
                continue;
            }
            fail(format!(
                "GET stream of client {client}: HTTP {status}\n{rest}"
            ));
            return;
        }
        if last_id.is_some() {
            *soak
                .streams_resumed
                .lock()
                .unwrap_or_else(|e| e.into_inner()) += 1;
        }
        let mut pending = String::new();
        let mut buf = [0u8; 8192];
        loop {
            if soak.stop.load(Ordering::Relaxed) {
                return;
            }
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                    while let Some(end) = pending.find('\n') {
                        let line: String = pending.drain(..=end).collect();
                        let line = line.trim_end();
                        if let Some(id) = line.strip_prefix("id:") {
                            last_id = Some(id.trim().to_string());
                        } else if let Some(i) = line.find(&marker) {
                            let digits: String = line[i + marker.len()..]
                                .chars()
                                .take_while(char::is_ascii_digit)
                                .collect();
                            if let Ok(n) = digits.parse() {
                                soak.received
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .entry(client)
                                    .or_default()
                                    .push(n);
                            }
                        }
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
    }
}

/// Stops instance `i` with SIGTERM and checks its stop: while it drains, `/readyz` answers 503
/// and its heartbeat is gone (its sessions move at once); it exits 0 after its drain delay and
/// within the bound, having logged the phases of its stop. Then starts it again.
fn roll(
    soak: &Soak,
    fleet: &mut [Instance],
    i: usize,
    machine: &str,
    port: u16,
    redis: &RedisServer,
) {
    soak.event(format!("SIGTERM {machine}"));
    let sent = Instant::now();
    fleet[i].signal("TERM");
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
    let bound = Duration::from_millis(DRAIN_MS + GRACE_MS + 2000);
    let status = fleet[i]
        .wait_exit(bound)
        .unwrap_or_else(|| panic!("{machine} still running {bound:?} after SIGTERM"));
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
    let log = fleet[i].log();
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
    fleet[i] = desk(machine, port, &redis.url());
    fleet[i].wait_ready(READY_LIMIT);
    soak.event(format!(
        "{machine} back after a {:.2} s stop",
        took.as_secs_f64()
    ));
}

/// The picture: requests per second answered by each instance, failures, fault events.
fn timeline_svg(seen: &[Seen], events: &[(Duration, String)], machines: &[&str]) -> String {
    let end = seen.iter().map(|s| s.end.as_secs()).max().unwrap_or(0) + 1;
    let mut per: BTreeMap<(String, u64), u64> = BTreeMap::new();
    let mut bad: BTreeMap<u64, u64> = BTreeMap::new();
    for s in seen {
        let sec = s.end.as_secs();
        if (200..300).contains(&s.status) {
            let m = s.machine.clone().unwrap_or_else(|| "?".into());
            *per.entry((m, sec)).or_default() += 1;
        } else {
            *bad.entry(sec).or_default() += 1;
        }
    }
    let top = per.values().copied().max().unwrap_or(1).max(1) as f64;
    let (w, h, left, bottom) = (900.0, 360.0, 50.0, 40.0);
    let x = |t: f64| left + t / end as f64 * (w - left - 20.0);
    let y = |v: f64| h - bottom - v / top * (h - bottom - 30.0);
    let colors = ["#1f77b4", "#2ca02c", "#9467bd"];
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"16\">2xx answers per second by instance (lines), non-2xx (red bars), faults (grey)</text>\n"
    );
    for (i, m) in machines.iter().enumerate() {
        let points: Vec<String> = (0..end)
            .map(|s| {
                let v = per.get(&(m.to_string(), s)).copied().unwrap_or(0) as f64;
                format!("{:.1},{:.1}", x(s as f64 + 0.5), y(v))
            })
            .collect();
        let c = colors[i % colors.len()];
        svg += &format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\" points=\"{}\"/>\n<text x=\"{}\" y=\"30\" fill=\"{c}\">{m}</text>\n",
            points.join(" "),
            left + 10.0 + i as f64 * 80.0
        );
    }
    for (sec, n) in &bad {
        let bh = (*n as f64 / top * (h - bottom - 30.0)).max(2.0);
        svg += &format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"4\" height=\"{bh:.1}\" fill=\"red\"/>\n",
            x(*sec as f64 + 0.5),
            h - bottom - bh
        );
    }
    for (i, (t, what)) in events.iter().enumerate() {
        let xx = x(t.as_secs_f64());
        svg += &format!(
            "<line x1=\"{xx:.1}\" y1=\"30\" x2=\"{xx:.1}\" y2=\"{}\" stroke=\"#999\" stroke-dasharray=\"3,3\"/>\n<text x=\"{:.1}\" y=\"{}\" fill=\"#555\" transform=\"rotate(-90 {:.1} {})\">{what}</text>\n",
            h - bottom,
            xx + 3.0,
            h - bottom - 4.0 - (i % 2) as f64 * 0.0,
            xx + 3.0,
            h - bottom - 4.0
        );
    }
    svg += &format!(
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<text x=\"{}\" y=\"{}\">{end} s</text>\n<text x=\"4\" y=\"{:.1}\">{top}/s</text>\n</svg>\n",
        h - bottom,
        w - 20.0,
        h - bottom,
        w - 60.0,
        h - 10.0,
        y(top) + 4.0
    );
    svg
}

#[test]
fn a_fleet_rides_out_restarts_a_crash_and_a_paused_redis() {
    let k = scale();
    let soak = Arc::new(Soak {
        began: Instant::now(),
        stop: AtomicBool::new(false),
        seen: Mutex::new(Vec::new()),
        paged: Mutex::new(HashMap::new()),
        received: Mutex::new(HashMap::new()),
        stream_failures: Mutex::new(Vec::new()),
        streams_resumed: Mutex::new(0),
        sse_answers: Mutex::new((0, 0)),
        events: Mutex::new(Vec::new()),
    });
    let mut redis = RedisServer::start();
    let url = redis.url();
    let machines = ["desk-1", "desk-2", "desk-3"];
    let mut upstreams = Vec::new();
    while upstreams.len() < 3 {
        let p = free_port();
        if !upstreams.contains(&p) {
            upstreams.push(p);
        }
    }
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

    let sids: Vec<String> = (0..CLIENTS).map(|_| open_session(front)).collect();
    let mut threads = Vec::new();
    for (client, sid) in sids.iter().enumerate() {
        let (s1, s2) = (soak.clone(), soak.clone());
        let (a, b) = (sid.clone(), sid.clone());
        threads.push(thread::spawn(move || call_loop(&s1, front, client, &a)));
        threads.push(thread::spawn(move || stream_loop(&s2, front, client, &b)));
    }
    for m in 0..MODERN_CLIENTS {
        let s = soak.clone();
        threads.push(thread::spawn(move || modern_loop(&s, front, CLIENTS + m)));
    }
    {
        let (s, all) = (soak.clone(), sids.clone());
        let pager = CLIENTS + MODERN_CLIENTS;
        threads.push(thread::spawn(move || pager_loop(&s, front, pager, &all)));
    }
    let calm = |secs: u64| thread::sleep(Duration::from_secs(secs * u64::from(k)));

    calm(2);
    roll(&soak, &mut fleet, 0, machines[0], upstreams[0], &redis);
    calm(3);
    soak.event("SIGKILL desk-2");
    let killed_at = soak.now();
    assert!(
        fleet[1]
            .signal_and_wait("KILL", Duration::from_secs(5))
            .is_some()
    );
    let died_at = soak.now();
    calm(1);
    fleet[1] = desk(machines[1], upstreams[1], &url);
    fleet[1].wait_ready(READY_LIMIT);
    soak.event("desk-2 back");
    calm(3);
    soak.event("Redis paused");
    redis.pause();
    thread::sleep(Duration::from_secs(5));
    redis.resume();
    soak.event("Redis resumed");
    calm(3);
    roll(&soak, &mut fleet, 2, machines[2], upstreams[2], &redis);
    calm(3);
    roll(&soak, &mut fleet, 1, machines[1], upstreams[1], &redis);
    calm(3);
    let before_empty = soak.now();
    soak.event("Redis restarted empty");
    redis.restart();
    calm(3);
    soak.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a client thread panicked");
    }

    // Counting.
    let seen = soak.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let events = soak
        .events
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let (early, late): (Vec<&Seen>, Vec<&Seen>) = seen.iter().partition(|s| s.end < before_empty);
    let ok = early
        .iter()
        .filter(|s| (200..300).contains(&s.status))
        .count();
    let documented = early.iter().filter(|s| s.documented).count();
    // Requests in flight on the killed instance when it died (nginx answers those 502).
    // (nginx does not replay a POST that reached an instance.)
    // A transport failure (status 0: an answer cut off) counts the same way, and so does an SSE
    // answer whose handler died with the instance (599: resumed, it has no result).
    let at_kill =
        |s: &Seen| s.start <= died_at && s.end >= killed_at && matches!(s.status, 0 | 502 | 599);
    let killed_in_flight = early.iter().filter(|s| at_kill(s)).count();
    let unexpected: Vec<&&Seen> = early
        .iter()
        .filter(|s| !(200..300).contains(&s.status) && !s.documented && !at_kill(s))
        .collect();
    let lost_sessions = early.iter().filter(|s| s.status == 404).count();
    let slow: Vec<&&Seen> = early
        .iter()
        .filter(|s| s.end - s.start > ANSWER_LIMIT)
        .collect();
    let mut longest_gap = Duration::ZERO;
    let mut gap_client = 0;
    let mut gap_from = Duration::ZERO;
    for client in 0..CLIENTS + MODERN_CLIENTS + 1 {
        let mut last_ok = Duration::ZERO;
        for s in early.iter().filter(|s| s.client == client) {
            if (200..300).contains(&s.status) {
                if s.end - last_ok > longest_gap && last_ok > Duration::ZERO {
                    longest_gap = s.end - last_ok;
                    gap_client = client;
                    gap_from = last_ok;
                }
                last_ok = s.end;
            }
        }
    }
    let paged = soak.paged.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let received = soak
        .received
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut lost_pages = 0;
    let mut repeated_pages = 0;
    for (client, sent) in &paged {
        let got = received.get(client).cloned().unwrap_or_default();
        let mut counts: HashMap<u64, usize> = HashMap::new();
        for n in &got {
            *counts.entry(*n).or_default() += 1;
        }
        repeated_pages += counts.values().filter(|c| **c > 1).count();
        // Pages taken before the empty Redis must all arrive (the last second's may still be
        // on their way when the clients stop).
        lost_pages += sent
            .iter()
            .filter(|(n, _)| !counts.contains_key(n))
            .filter(|(n, _)| *n + 20 < sent.last().map_or(0, |(l, _)| *l))
            // A page its holder took just before it was killed dies with it (it was in that
            // process's memory, on its way to the event store): in flight on the killed one.
            .filter(|(_, at)| {
                *at + Duration::from_millis(500) < killed_at
                    || *at > died_at + Duration::from_millis(500)
            })
            .count();
    }
    let late_lost = late.iter().filter(|s| s.status == 404).count();
    let stream_failures = soak
        .stream_failures
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let resumed = *soak
        .streams_resumed
        .lock()
        .unwrap_or_else(|e| e.into_inner());

    let (sse_answers, sse_resumed) = *soak.sse_answers.lock().unwrap_or_else(|e| e.into_inner());

    let dir = repo_root().join("target/chaos");
    let _ = std::fs::create_dir_all(&dir);
    let counts = format!(
        "| requests | 2xx | documented 503 | in flight on the killed instance | other statuses | sessions lost | unanswered after 10 s | longest no-2xx window | pages delivered | pages lost | pages repeated | streams resumed | calls answered as SSE (resumed for their answer) | after the empty Redis: requests, 404s |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--|\n| {} | {ok} | {documented} | {killed_in_flight} | {} | {lost_sessions} | {} | {:.2} s (client {gap_client}) | {} | {lost_pages} | {repeated_pages} | {resumed} | {sse_answers} ({sse_resumed}) | {}, {late_lost} |\n",
        early.len(),
        unexpected.len(),
        slow.len(),
        longest_gap.as_secs_f64(),
        paged.values().map(Vec::len).sum::<usize>(),
        late.len(),
    );
    let _ = std::fs::write(dir.join("counts.md"), &counts);
    let _ = std::fs::write(
        dir.join("chaos.svg"),
        timeline_svg(&seen, &events, &machines),
    );
    eprintln!("{counts}\n(picture: {})", dir.join("chaos.svg").display());
    eprintln!("nginx errors:\n{}", nginx.error_log());

    assert!(
        unexpected.is_empty(),
        "{} unexpected answers, first:\n{}",
        unexpected.len(),
        unexpected
            .iter()
            .take(3)
            .map(|s| format!(
                "client {} from {:?} to {:?} ({:?}), HTTP {}:\n{}",
                s.client, s.start, s.end, s.machine, s.status, s.detail
            ))
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    let lost: Vec<String> = early
        .iter()
        .filter(|s| s.status == 404)
        .take(3)
        .map(|s| {
            format!(
                "client {} from {:?} to {:?}:\n{}",
                s.client, s.start, s.end, s.detail
            )
        })
        .collect();
    assert_eq!(
        lost_sessions,
        0,
        "sessions lost before the empty Redis:\n{}",
        lost.join("\n---\n")
    );
    assert!(slow.is_empty(), "requests unanswered after 10 s: {slow:?}");
    let in_gap: Vec<&&Seen> = early
        .iter()
        .filter(|s| {
            s.client == gap_client && s.end >= gap_from && s.start <= gap_from + longest_gap
        })
        .collect();
    assert!(
        longest_gap < GAP_LIMIT,
        "client {gap_client} went {longest_gap:?} without a 2xx, from {gap_from:?}: {in_gap:#?}"
    );
    let stream_failures: Vec<&(Duration, String)> = stream_failures
        .iter()
        .filter(|(at, _)| *at < before_empty)
        .collect();
    assert!(stream_failures.is_empty(), "{stream_failures:?}");
    assert_eq!(
        lost_pages, 0,
        "pages lost: sent {paged:?}, received {received:?}"
    );
    assert_eq!(repeated_pages, 0, "pages repeated: {received:?}");
    assert!(ok > 1000, "the clients were served: {ok}");
    assert!(resumed >= CLIENTS as u64, "streams resumed: {resumed}");
    assert!(
        sse_answers > 100,
        "tool calls answered as SSE: {sse_answers}"
    );
    for i in &mut fleet {
        i.assert_alive();
        i.assert_no_panic_logged();
    }
}
