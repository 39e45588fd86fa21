//! fleet-loadgen: a closed-loop MCP `tools/call` load generator for `bench/run.sh`.
//!
//! For one Streamable HTTP endpoint it opens N sessions concurrently (`initialize` with protocol
//! 2025-11-25, then `notifications/initialized`), then drives each session from its own task in a
//! closed loop of `tools/call` for a warm-up and a measured period. Every request carries
//! `Mcp-Session-Id` and `MCP-Protocol-Version`; every answer is read in full (JSON or SSE) and
//! checked to be a JSON-RPC result for the request's id. Latencies go into an HDR histogram.
//!
//! ```text
//! fleet-loadgen --url http://127.0.0.1:3000/mcp [--sessions 64] [--duration 10] [--warmup 1]
//!               [--tool find_tickets] [--args '{}'] [--label NAME] [--pid PID] [--json]
//!               [--bearer TOKEN] [--connections 1]
//! fleet-loadgen table [--baseline LABEL] RESULTS.jsonl   # the markdown table of bench/run.sh
//! fleet-loadgen free-port                                # prints a free loopback TCP port
//! fleet-loadgen open | streams | calls ...                # bench/scale.sh's shapes (scale.rs)
//! fleet-loadgen delay --listen A --to B --one-way-us N    # a delaying TCP relay (delay.rs)
//! fleet-loadgen rtt --redis A | --url U                   # round trips, to show it (rtt.rs)
//! ```
//!
//! Output: one human-readable summary on stderr and, with `--json`, one JSON line on stdout
//! (`label, sessions, requests, errors, rps, p50_ms, p90_ms, p99_ms, max_ms, rss_kib`). With
//! `--pid`, `rss_kib` is the VmRSS of that process read from `/proc/PID/status` after the run.
//! Every phase is bounded in time: the run stops by itself.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod delay;
mod rtt;
mod scale;
mod table;

use hdrhistogram::Histogram;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};

const PROTOCOL_VERSION: &str = "2025-11-25";
/// The stateless revision (`--stateless`): no session, metadata on every request.
const STATELESS_VERSION: &str = "2026-07-28";
/// No single request may take longer than this; a stuck server counts as errors, not a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound for opening all sessions.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Latencies are recorded in microseconds, from 1 µs to 60 s, 3 significant digits.
const HIST_MAX_US: u64 = 60_000_000;
/// Request ids each loop of one session may use (far more than a run sends).
const LANE_IDS: u64 = 1_000_000_000;

struct Args {
    url: String,
    /// A second instance: calls alternate between `url` and this one (round-robin, no
    /// affinity), while sessions are opened on `url`.
    url2: Option<String>,
    /// Every call goes to `url2` (sessions are still opened on `url`): in distributed mode, every
    /// call is relayed to the session's holder.
    only_url2: bool,
    sessions: usize,
    /// Closed loops per session, each on its own connection: `--sessions 1 --connections 32`
    /// is one session's 32 calls in flight at once (a client multiplexing one session, the
    /// shape of issue 23's comparison), where the default is one call in flight per session.
    connections: usize,
    duration: Duration,
    warmup: Duration,
    tool: String,
    tool_args: Value,
    label: String,
    pid: Option<u32>,
    json: bool,
    /// 2026-07-28: no session; every call carries `_meta` and the mirrored headers.
    stateless: bool,
    /// Every call carries the affinity cookie `__frontmcp_node` naming the instance that
    /// answered `initialize` (its `X-FrontMCP-Machine-Id`), as a browser would send it back.
    affinity: bool,
    /// An access token sent as `Authorization: Bearer` on every request (authorization on).
    bearer: Option<String>,
}

fn usage() -> &'static str {
    "usage: fleet-loadgen --url URL [--url2 URL [--only-url2 1]] [--sessions N] [--duration SECS] [--warmup SECS] \
     [--tool NAME] [--args JSON] [--label NAME] [--pid PID] [--json] [--stateless] [--affinity 1] [--bearer TOKEN] [--connections N]"
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        url: String::new(),
        url2: None,
        only_url2: false,
        sessions: 64,
        connections: 1,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(1),
        tool: "find_tickets".into(),
        tool_args: json!({}),
        label: String::new(),
        pid: None,
        json: false,
        stateless: false,
        affinity: false,
        bearer: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--json" {
            a.json = true;
            continue;
        }
        if flag == "--stateless" {
            a.stateless = true;
            continue;
        }
        if flag == "-h" || flag == "--help" {
            return Err(usage().into());
        }
        let val = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))?;
        let secs = |v: &str| -> Result<Duration, String> {
            let s: f64 = v.parse().map_err(|e| format!("{flag} {v}: {e}"))?;
            if !(0.0..=3600.0).contains(&s) {
                return Err(format!("{flag} {v}: out of range"));
            }
            Ok(Duration::from_secs_f64(s))
        };
        match flag.as_str() {
            "--url" => a.url = val,
            "--url2" => a.url2 = Some(val),
            "--only-url2" => a.only_url2 = matches!(val.as_str(), "1" | "true" | "yes"),
            "--affinity" => a.affinity = matches!(val.as_str(), "1" | "true" | "yes"),
            "--bearer" => a.bearer = Some(val),
            "--sessions" => {
                a.sessions = val.parse().map_err(|e| format!("--sessions {val}: {e}"))?;
                if a.sessions == 0 || a.sessions > 10_000 {
                    return Err(format!("--sessions {val}: out of range"));
                }
            }
            "--connections" => {
                a.connections = val
                    .parse()
                    .map_err(|e| format!("--connections {val}: {e}"))?;
                if a.connections == 0 || a.connections > 1_000 {
                    return Err(format!("--connections {val}: out of range"));
                }
            }
            "--duration" => a.duration = secs(&val)?,
            "--warmup" => a.warmup = secs(&val)?,
            "--tool" => a.tool = val,
            "--args" => {
                a.tool_args = serde_json::from_str(&val).map_err(|e| format!("--args: {e}"))?
            }
            "--label" => a.label = val,
            "--pid" => a.pid = Some(val.parse().map_err(|e| format!("--pid {val}: {e}"))?),
            _ => return Err(format!("unknown flag {flag}\n{}", usage())),
        }
    }
    if a.url.is_empty() {
        return Err(format!("--url is required\n{}", usage()));
    }
    if a.label.is_empty() {
        a.label = a.url.clone();
    }
    Ok(a)
}

/// Why one exchange failed; only counted, the first few are printed.
type Failure = String;

/// Reads a response body in full and returns the JSON-RPC message answering `id`.
///
/// A body is either one JSON object (`application/json`) or an SSE stream; in the latter we read
/// events until the `data:` of the message whose `id` matches (priming events, notifications and
/// comments are skipped). The rest of the stream is drained so that the connection can be reused.
async fn read_answer(resp: reqwest::Response, id: u64) -> Result<Value, Failure> {
    let status = resp.status();
    let is_sse = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        return Err(format!("HTTP {status}: {}", truncate(&body)));
    }
    if !is_sse {
        let body = resp.bytes().await.map_err(|e| format!("body: {e}"))?;
        let msg: Value = serde_json::from_slice(&body).map_err(|e| format!("JSON body: {e}"))?;
        return check_id(msg, id);
    }
    sse_answer(resp, id).await
}

async fn sse_answer(mut resp: reqwest::Response, id: u64) -> Result<Value, Failure> {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut data: Vec<u8> = Vec::new();
    let mut found: Option<Value> = None;
    loop {
        // Process every complete line in `buf`.
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = buf.drain(..=nl).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.is_empty() {
                // End of event: dispatch its data.
                if !data.is_empty()
                    && found.is_none()
                    && let Ok(msg) = serde_json::from_slice::<Value>(&data)
                    && msg.get("id").and_then(Value::as_u64) == Some(id)
                {
                    found = Some(msg);
                }
                data.clear();
            } else if let Some(rest) = line.strip_prefix(b"data:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                if !data.is_empty() {
                    data.push(b'\n');
                }
                data.extend_from_slice(rest);
            }
        }
        if let Some(msg) = found.take() {
            // The server closes a request stream after its answer; drain what is left (bounded
            // by the request timeout) so the keep-alive connection can be reused.
            while let Ok(Some(_)) = resp.chunk().await {}
            return check_id(msg, id);
        }
        match resp.chunk().await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
            Ok(None) => {
                // A final event without a trailing blank line.
                if !data.is_empty()
                    && let Ok(msg) = serde_json::from_slice::<Value>(&data)
                    && msg.get("id").and_then(Value::as_u64) == Some(id)
                {
                    return check_id(msg, id);
                }
                return Err("SSE stream ended without the answer".into());
            }
            Err(e) => return Err(format!("SSE body: {e}")),
        }
    }
}

fn check_id(msg: Value, id: u64) -> Result<Value, Failure> {
    if msg.get("id").and_then(Value::as_u64) != Some(id) {
        return Err(format!(
            "answer for another id: {}",
            truncate(&msg.to_string())
        ));
    }
    if let Some(err) = msg.get("error") {
        return Err(format!("JSON-RPC error: {}", truncate(&err.to_string())));
    }
    match msg.get("result") {
        Some(r) if r.get("isError").and_then(Value::as_bool) == Some(true) => {
            Err(format!("tool error: {}", truncate(&r.to_string())))
        }
        Some(r) => Ok(r.clone()),
        None => Err(format!("not a result: {}", truncate(&msg.to_string()))),
    }
}

fn truncate(s: &str) -> String {
    let mut out: String = s.chars().take(300).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// A client: a session id (session era), or none (2026-07-28, stateless).
#[derive(Clone)]
struct Session {
    id: Option<HeaderValue>,
    /// `__frontmcp_node=<machine id>`, when calls carry the affinity cookie.
    cookie: Option<HeaderValue>,
}

async fn open_session(client: &reqwest::Client, url: &str) -> Result<Session, Failure> {
    let init = json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "fleet-loadgen", "version": env!("CARGO_PKG_VERSION")}
        }
    });
    let resp = client
        .post(url)
        .body(init.to_string())
        .send()
        .await
        .map_err(|e| format!("initialize: {e}"))?;
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .cloned()
        .ok_or_else(|| format!("initialize: no Mcp-Session-Id (HTTP {})", resp.status()))?;
    let cookie = resp
        .headers()
        .get("x-frontmcp-machine-id")
        .and_then(|m| m.to_str().ok())
        .and_then(|m| HeaderValue::from_str(&format!("__frontmcp_node={m}")).ok());
    let result = read_answer(resp, 0)
        .await
        .map_err(|e| format!("initialize: {e}"))?;
    let version = result.get("protocolVersion").and_then(Value::as_str);
    if version != Some(PROTOCOL_VERSION) {
        return Err(format!("initialize: server negotiated {version:?}"));
    }
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = client
        .post(url)
        .header("mcp-session-id", sid.clone())
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .body(note.to_string())
        .send()
        .await
        .map_err(|e| format!("notifications/initialized: {e}"))?;
    let status = resp.status();
    let _ = resp.bytes().await;
    if !status.is_success() {
        return Err(format!("notifications/initialized: HTTP {status}"));
    }
    Ok(Session {
        id: Some(sid),
        cookie,
    })
}

async fn close_session(client: &reqwest::Client, url: &str, s: &Session) {
    let Some(id) = &s.id else {
        return;
    };
    if let Ok(resp) = client
        .delete(url)
        .header("mcp-session-id", id.clone())
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .send()
        .await
    {
        let _ = resp.bytes().await;
    }
}

#[derive(Default)]
struct Tally {
    hist: Option<Histogram<u64>>,
    requests: u64,
    errors: u64,
    first_errors: Vec<String>,
}

/// What every session loop shares.
struct Plan {
    client: reqwest::Client,
    url: String,
    url2: Option<String>,
    only_url2: bool,
    affinity: bool,
    tool: String,
    tool_args: Value,
    /// Calls started before this are warm-up, not recorded.
    measure_from: Instant,
    /// No call starts after this.
    stop: Instant,
    aborted: AtomicBool,
}

/// One closed loop of a session: warm-up until `measure_from`, then measured until `stop`.
/// Loop `lane` of a session's several (`--connections`) numbers its requests from
/// `lane * LANE_IDS + 1`, so that calls in flight at once in one session never share an id.
async fn run_session(plan: Arc<Plan>, session: Session, lane: u64) -> (Tally, Session) {
    let Plan {
        client,
        url,
        url2,
        only_url2,
        affinity,
        tool,
        tool_args,
        measure_from,
        stop,
        aborted,
    } = &*plan;
    let (measure_from, stop) = (*measure_from, *stop);
    let mut t = Tally {
        hist: Some(Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("histogram bounds")),
        ..Tally::default()
    };
    let mut next_id: u64 = lane * LANE_IDS + 1;
    loop {
        let now = Instant::now();
        if now >= stop || aborted.load(Ordering::Relaxed) {
            break;
        }
        let id = next_id;
        next_id += 1;
        let mut params = json!({"name": tool, "arguments": tool_args});
        if session.id.is_none() {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "fleet-loadgen", "version": env!("CARGO_PKG_VERSION")}
            });
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
            .to_string();
        let start = Instant::now();
        let outcome = async {
            // Round-robin over two instances when asked: every other call goes to the second.
            let target = match url2 {
                Some(u2) if *only_url2 || id.is_multiple_of(2) => u2.as_str(),
                _ => url.as_str(),
            };
            let req = client.post(target);
            let req = match (&session.cookie, *affinity) {
                (Some(c), true) => req.header("cookie", c.clone()),
                _ => req,
            };
            let req = match &session.id {
                Some(sid) => req
                    .header("mcp-session-id", sid.clone())
                    .header("mcp-protocol-version", PROTOCOL_VERSION),
                None => req
                    .header("mcp-protocol-version", STATELESS_VERSION)
                    .header("mcp-method", "tools/call")
                    .header("mcp-name", tool.as_str()),
            };
            let resp = req
                .body(body)
                .send()
                .await
                .map_err(|e| format!("send: {e}"))?;
            read_answer(resp, id).await
        }
        .await;
        let elapsed = start.elapsed();
        if start < measure_from {
            continue; // warm-up
        }
        t.requests += 1;
        match outcome {
            Ok(_) => {
                let us = (elapsed.as_micros() as u64).clamp(1, HIST_MAX_US);
                if let Some(h) = t.hist.as_mut() {
                    h.saturating_record(us);
                }
            }
            Err(e) => {
                t.errors += 1;
                if t.first_errors.len() < 3 {
                    t.first_errors.push(e);
                }
                // Do not spin on a server that answers errors instantly.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    (t, session)
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// CPU time (user + system, all threads) the process has used, in seconds, from
/// `/proc/PID/stat` (fields 14 and 15, in clock ticks; USER_HZ is 100 on Linux).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; count fields after its closing paren.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11); // fields 3..=13
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1);
    match argv.next().as_deref() {
        Some("table") => return table::main(argv.collect()),
        Some(mode @ ("open" | "streams" | "calls")) => {
            let mode = mode.to_owned();
            return scale::main(&mode, argv.collect()).await;
        }
        Some("delay") => return delay::main(argv.collect()).await,
        Some("rtt") => return rtt::main(argv.collect()).await,
        Some("free-port") => {
            return match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
                Ok(a) => {
                    println!("{}", a.port());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("fleet-loadgen free-port: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {}
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet-loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(token) = &args.bearer {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|e| format!("--bearer: {e}"))?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    // One pool shared by all sessions: HTTP/1.1 keep-alive, at most one request in flight per
    // connection, so N busy sessions settle on about N connections.
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .http1_only()
        .tcp_nodelay(true)
        .no_proxy()
        .pool_max_idle_per_host(args.sessions * args.connections * 2)
        .pool_idle_timeout(Duration::from_secs(30))
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;

    // Open every session concurrently.
    let setup = async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..args.sessions {
            let client = client.clone();
            let url = args.url.clone();
            let stateless = args.stateless;
            set.spawn(async move {
                if stateless {
                    Ok(Session {
                        id: None,
                        cookie: None,
                    })
                } else {
                    open_session(&client, &url).await
                }
            });
        }
        let mut sessions = Vec::with_capacity(args.sessions);
        while let Some(r) = set.join_next().await {
            sessions.push(r.map_err(|e| e.to_string())??);
        }
        Ok::<_, String>(sessions)
    };
    let sessions = tokio::time::timeout(SETUP_TIMEOUT, setup)
        .await
        .map_err(|_| {
            format!(
                "opening {} sessions took over {SETUP_TIMEOUT:?}",
                args.sessions
            )
        })??;

    // Closed loops.
    let measure_from = Instant::now() + args.warmup;
    let stop = measure_from + args.duration;
    let plan = Arc::new(Plan {
        client: client.clone(),
        url: args.url.clone(),
        url2: args.url2.clone(),
        only_url2: args.only_url2,
        affinity: args.affinity,
        tool: args.tool.clone(),
        tool_args: args.tool_args.clone(),
        measure_from,
        stop,
        aborted: AtomicBool::new(false),
    });
    // The server's CPU use over the measured window (with --pid).
    let cpu_probe = args.pid.map(|pid| {
        tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(measure_from)).await;
            let a = cpu_seconds(pid);
            tokio::time::sleep_until(tokio::time::Instant::from_std(stop)).await;
            let b = cpu_seconds(pid);
            a.zip(b).map(|(a, b)| b - a)
        })
    });
    let mut set = tokio::task::JoinSet::new();
    for s in sessions {
        for lane in 1..args.connections {
            set.spawn(run_session(plan.clone(), s.clone(), lane as u64));
        }
        set.spawn(run_session(plan.clone(), s, 0));
    }
    // Each loop stops at `stop`; the last request may run up to REQUEST_TIMEOUT beyond it.
    let deadline = tokio::time::Instant::from_std(stop) + REQUEST_TIMEOUT + Duration::from_secs(2);
    let mut total = Tally {
        hist: Some(Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("histogram bounds")),
        ..Tally::default()
    };
    let mut finished = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, set.join_next()).await {
            Ok(Some(Ok((t, s)))) => {
                total.requests += t.requests;
                total.errors += t.errors;
                for e in t.first_errors {
                    if total.first_errors.len() < 5 {
                        total.first_errors.push(e);
                    }
                }
                if let (Some(all), Some(h)) = (total.hist.as_mut(), t.hist.as_ref()) {
                    all.add(h).map_err(|e| format!("histogram: {e}"))?;
                }
                // A session's other loops hold the same id: it is deleted once.
                if !finished
                    .iter()
                    .any(|f: &Session| f.id.is_some() && f.id == s.id)
                {
                    finished.push(s);
                }
            }
            Ok(Some(Err(e))) => return Err(format!("session task: {e}")),
            Ok(None) => break,
            Err(_) => {
                plan.aborted.store(true, Ordering::Relaxed);
                set.abort_all();
                eprintln!("fleet-loadgen: some sessions did not stop in time; aborted");
                break;
            }
        }
    }
    let measured = args.duration.as_secs_f64();
    let rss = args.pid.and_then(vm_rss_kib);
    let server_cpu_s = match cpu_probe {
        Some(p) => p.await.ok().flatten(),
        None => None,
    };

    // Polite cleanup, bounded: DELETE each session (after the RSS sample).
    let cleanup = async {
        let mut set = tokio::task::JoinSet::new();
        for s in finished {
            let client = client.clone();
            let url = args.url.clone();
            set.spawn(async move { close_session(&client, &url, &s).await });
        }
        while set.join_next().await.is_some() {}
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), cleanup).await;

    let h = total.hist.as_ref().expect("histogram");
    let ok = total.requests - total.errors;
    let rps = ok as f64 / measured.max(1e-9);
    let (p50, p90, p99, max) = if h.is_empty() {
        (0.0, 0.0, 0.0, 0.0)
    } else {
        (
            ms(h.value_at_quantile(0.50)),
            ms(h.value_at_quantile(0.90)),
            ms(h.value_at_quantile(0.99)),
            ms(h.max()),
        )
    };
    eprintln!(
        "{}: {} sessions x {} connections, {:.1} s: {} requests, {} errors, {:.0} req/s, p50 {:.2} ms, p90 {:.2} ms, \
         p99 {:.2} ms, max {:.2} ms{}",
        args.label,
        args.sessions,
        args.connections,
        measured,
        total.requests,
        total.errors,
        rps,
        p50,
        p90,
        p99,
        max,
        rss.map(|k| format!(", server RSS {:.1} MiB", k as f64 / 1024.0))
            .unwrap_or_default()
    );
    if let Some(c) = server_cpu_s {
        eprintln!(
            "  server CPU {:.2} s over the measured window ({:.0}% of one core), {:.0} µs per call",
            c,
            100.0 * c / measured.max(1e-9),
            1e6 * c / (ok.max(1) as f64)
        );
    }
    for e in &total.first_errors {
        eprintln!("  error: {e}");
    }
    if args.json {
        println!(
            "{}",
            json!({
                "label": args.label,
                "sessions": args.sessions,
                "connections": args.connections,
                "duration_s": measured,
                "requests": total.requests,
                "errors": total.errors,
                "rps": (rps * 10.0).round() / 10.0,
                "p50_ms": p50,
                "p90_ms": p90,
                "p99_ms": p99,
                "max_ms": max,
                "rss_kib": rss,
                "server_cpu_s": server_cpu_s,
            })
        );
    }
    Ok(())
}
