//! `fleet-loadgen open | streams | calls`: the three load shapes of `bench/scale.sh`.
//!
//! A scale run opens many sessions on a fleet and then leaves most of them idle, so these modes
//! keep nothing per session but its id and the instance that opened it (one line of the ids
//! file), and no task per session:
//!
//! ```text
//! fleet-loadgen open --urls U0,U1,.. --machines M0,M1,.. --sessions N --out IDS
//!               [--concurrency 64] [--sources 1] [--source-base 127.1.0.0]
//! fleet-loadgen streams --urls .. --ids IDS --streams T [--hold 3600] [--ready FILE]
//! fleet-loadgen calls --urls .. --machines .. --ids IDS --calls N [--relay 0|1] [--concurrency 32]
//! ```
//!
//! `open` sends session i's `initialize` (and `notifications/initialized`) to `U[i % I]` and
//! checks that the answer's `X-FrontMCP-Machine-Id` is `M[i % I]`. With `--sources K` above 1
//! the sessions are spread over K source addresses (127.1.0.1 onwards), at most
//! `ceil(N / K)` each, so that a per-address session limit (`limits.max_sessions_per_key`,
//! 1,000 by default) is met and its sets are counted as a fleet of many clients makes them.
//! `streams` holds one `GET /mcp` SSE stream open on each of the first T sessions, at their
//! holders; once every one answered it writes `--ready` and holds them `--hold` seconds (or
//! until killed). `calls` sends one `tools/call` to each of N sessions spread over the ids
//! file, at the holder or (`--relay 1`) at the next instance, which relays it: an answer whose
//! `X-FrontMCP-Machine-Id` names the holder though another instance was asked was relayed.
//! Each prints one JSON line on stdout.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::PROTOCOL_VERSION;

/// Sessions a worker opens in a row from one shared client (no `--sources`): few enough that
/// the workers stay busy to the end.
const CHUNK: usize = 64;
/// No exchange but a held stream may take longer (a busy 2-core machine is slow, not stuck).
const TIMEOUT: Duration = Duration::from_secs(30);

struct Opts {
    urls: Vec<String>,
    machines: Vec<String>,
    sessions: usize,
    concurrency: usize,
    sources: usize,
    source_base: Ipv4Addr,
    out: Option<String>,
    ids: Option<String>,
    streams: usize,
    hold: Duration,
    ready: Option<String>,
    calls: usize,
    relay: bool,
}

fn parse(args: Vec<String>) -> Result<Opts, String> {
    let mut o = Opts {
        urls: Vec::new(),
        machines: Vec::new(),
        sessions: 0,
        concurrency: 64,
        sources: 1,
        source_base: Ipv4Addr::new(127, 1, 0, 0),
        out: None,
        ids: None,
        streams: 0,
        hold: Duration::from_secs(3600),
        ready: None,
        calls: 0,
        relay: false,
    };
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let val = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--urls" => o.urls = val.split(',').map(str::to_owned).collect(),
            "--machines" => o.machines = val.split(',').map(str::to_owned).collect(),
            "--sessions" => o.sessions = num(&val)?,
            "--concurrency" => o.concurrency = num(&val)?.max(1),
            "--sources" => o.sources = num(&val)?.clamp(1, 65_000),
            "--source-base" => {
                o.source_base = val.parse().map_err(|e| format!("{flag} {val}: {e}"))?
            }
            "--out" => o.out = Some(val),
            "--ids" => o.ids = Some(val),
            "--streams" => o.streams = num(&val)?,
            "--hold" => o.hold = Duration::from_secs(num(&val)? as u64),
            "--ready" => o.ready = Some(val),
            "--calls" => o.calls = num(&val)?,
            "--relay" => o.relay = matches!(val.as_str(), "1" | "true" | "yes"),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if o.urls.is_empty() {
        return Err("--urls is required".into());
    }
    Ok(o)
}

/// The i-th source address after `base` (127.1.0.0 by default: all of 127/8 is loopback on
/// Linux; `bench/scale.sh` with NETNS=1 makes 10.78/16 local).
fn source(base: Ipv4Addr, i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(u32::from(base).wrapping_add(i as u32 + 1)))
}

/// A client from `local` (or the kernel's pick); `timeout` bounds each whole exchange (none for
/// a stream held open).
fn client(
    local: Option<IpAddr>,
    idle: Duration,
    timeout: Option<Duration>,
) -> Result<reqwest::Client, String> {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let b = reqwest::Client::builder()
        .default_headers(headers)
        .http1_only()
        .tcp_nodelay(true)
        .no_proxy()
        .local_address(local)
        .pool_idle_timeout(idle);
    match timeout {
        Some(t) => b.timeout(t),
        None => b.connect_timeout(Duration::from_secs(30)),
    }
    .build()
    .map_err(|e| format!("HTTP client: {e}"))
}

/// Counts what went wrong, keeping the first few messages.
#[derive(Default)]
struct Errors {
    count: AtomicU64,
    first: std::sync::Mutex<Vec<String>>,
}

impl Errors {
    fn add(&self, e: String) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = self.first.lock()
            && f.len() < 5
        {
            f.push(e);
        }
    }
    fn report(&self) -> (u64, Vec<String>) {
        let first = self.first.lock().map(|f| f.clone()).unwrap_or_default();
        (self.count.load(Ordering::Relaxed), first)
    }
}

fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A latency histogram in microseconds (1 µs to 60 s, 3 significant digits).
fn histogram() -> Histogram<u64> {
    // Constant bounds that `new_with_bounds` accepts (low >= 1, high >= 2 * low).
    Histogram::new_with_bounds(1, crate::HIST_MAX_US, 3).expect("histogram bounds")
}

/// Records `took` into `h` (clamped into its range).
fn record(h: &mut Histogram<u64>, took: Duration) {
    h.saturating_record(took.as_micros().clamp(1, u128::from(crate::HIST_MAX_US)) as u64);
}

/// `p50_us, p90_us, p99_us, max_us` of `h`.
fn quantiles(h: &Histogram<u64>) -> Value {
    json!({"p50_us": h.value_at_quantile(0.5), "p90_us": h.value_at_quantile(0.9),
        "p99_us": h.value_at_quantile(0.99), "max_us": h.max()})
}

/// One session: `initialize`, then `notifications/initialized`; its id, the machine that
/// answered, and how long `initialize` took.
async fn open_one(c: &reqwest::Client, url: &str) -> Result<(String, String, Duration), String> {
    let t = Instant::now();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
        "clientInfo": {"name": "fleet-loadgen", "version": env!("CARGO_PKG_VERSION")}}});
    let resp = c
        .post(url)
        .body(init.to_string())
        .send()
        .await
        .map_err(|e| format!("initialize: {e}"))?;
    let status = resp.status();
    let sid = header(&resp, "mcp-session-id");
    let machine = header(&resp, "x-frontmcp-machine-id").unwrap_or_default();
    let body = resp
        .bytes()
        .await
        .map_err(|e| format!("initialize body: {e}"))?;
    let took = t.elapsed();
    let Some(sid) = sid.filter(|_| status.is_success()) else {
        return Err(format!(
            "initialize: HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ));
    };
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = c
        .post(url)
        .header("mcp-session-id", &sid)
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
    Ok((sid, machine, took))
}

async fn open(o: Opts) -> Result<Value, String> {
    let out = o.out.clone().ok_or("--out is required")?;
    let n = o.sessions;
    // Session i comes from source i / per_source: each source's share is contiguous, so the
    // workers, taking CHUNK sessions at a time from the front, use one or two sources each and
    // the connections of those behind them close (idle for 2 s).
    let per_source = n.div_ceil(o.sources);
    let clients: Vec<reqwest::Client> = (0..o.sources)
        .map(|i| {
            client(
                (o.sources > 1).then(|| source(o.source_base, i)),
                Duration::from_secs(2),
                Some(TIMEOUT),
            )
        })
        .collect::<Result<_, _>>()?;
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(Errors::default());
    let mismatched = Arc::new(AtomicU64::new(0));
    let urls = Arc::new(o.urls.clone());
    let machines = Arc::new(o.machines.clone());
    let clients = Arc::new(clients);
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..o.concurrency {
        let (next, errors, mismatched, urls, machines, clients) = (
            next.clone(),
            errors.clone(),
            mismatched.clone(),
            urls.clone(),
            machines.clone(),
            clients.clone(),
        );
        set.spawn(async move {
            let mut mine: Vec<(usize, String)> = Vec::new();
            let mut hist = histogram();
            loop {
                let first = next.fetch_add(CHUNK, Ordering::Relaxed);
                if first >= n {
                    return (mine, hist);
                }
                for i in first..(first + CHUNK).min(n) {
                    let at = i % urls.len();
                    let c = &clients[(i / per_source).min(clients.len() - 1)];
                    match open_one(c, &urls[at]).await {
                        Ok((sid, machine, took)) => {
                            record(&mut hist, took);
                            if machines.get(at).is_some_and(|m| *m != machine) {
                                mismatched.fetch_add(1, Ordering::Relaxed);
                            }
                            mine.push((at, sid));
                        }
                        Err(e) => errors.add(e),
                    }
                }
            }
        });
    }
    let mut lines = String::with_capacity(n * 72);
    let mut opened = vec![0u64; o.urls.len()];
    let mut latency = histogram();
    while let Some(r) = set.join_next().await {
        let (mine, hist) = r.map_err(|e| e.to_string())?;
        latency.add(hist).map_err(|e| e.to_string())?;
        for (at, sid) in mine {
            opened[at] += 1;
            lines.push_str(&format!("{at} {sid}\n"));
        }
    }
    let secs = started.elapsed().as_secs_f64();
    std::fs::write(&out, lines).map_err(|e| format!("{out}: {e}"))?;
    let (errs, first) = errors.report();
    let total: u64 = opened.iter().sum();
    Ok(json!({
        "opened": total, "errors": errs, "first_errors": first,
        "machine_mismatches": mismatched.load(Ordering::Relaxed),
        "by_instance": opened, "secs": secs, "per_s": total as f64 / secs.max(1e-9),
        "sources": o.sources, "per_source_max": per_source,
        "initialize": quantiles(&latency),
    }))
}

/// The ids file: (instance index, session id) per line.
fn read_ids(path: &str) -> Result<Vec<(usize, String)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, s)| {
            a.parse()
                .map(|a| (a, s.to_owned()))
                .map_err(|e| format!("{path}: {e}"))
        })
        .collect()
}

async fn streams(o: Opts) -> Result<Value, String> {
    let ids = read_ids(o.ids.as_deref().ok_or("--ids is required")?)?;
    let want = o.streams.min(ids.len());
    // A stream holds its connection; no idle pool needed.
    let c = client(None, Duration::from_secs(1), None)?;
    let opened = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let events = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let started = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(o.concurrency));
    let mut set = tokio::task::JoinSet::new();
    for (at, sid) in ids.into_iter().take(want) {
        let url = o.urls[at % o.urls.len()].clone();
        let (c, opened, answered, events, errors, gate) = (
            c.clone(),
            opened.clone(),
            answered.clone(),
            events.clone(),
            errors.clone(),
            gate.clone(),
        );
        set.spawn(async move {
            let permit = gate.acquire_owned().await;
            let sent = c
                .get(&url)
                .header(ACCEPT, "text/event-stream")
                .header("mcp-session-id", &sid)
                .header("mcp-protocol-version", PROTOCOL_VERSION)
                .send()
                .await;
            answered.fetch_add(1, Ordering::Relaxed);
            drop(permit);
            let mut resp = match sent {
                Ok(r) if r.status().is_success() => r,
                Ok(r) => return errors.add(format!("GET: HTTP {}", r.status())),
                Err(e) => return errors.add(format!("GET: {e}")),
            };
            opened.fetch_add(1, Ordering::Relaxed);
            // Read (and drop) whatever comes: keep-alive comments, notifications.
            loop {
                match resp.chunk().await {
                    Ok(Some(_)) => {
                        events.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(None) => return errors.add("stream ended".into()),
                    Err(e) => return errors.add(format!("stream: {e}")),
                }
            }
        });
    }
    // Every GET answered (a stream's head comes at once): ready.
    let deadline = Instant::now() + Duration::from_secs(120);
    while answered.load(Ordering::Relaxed) < want as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let open_now = opened.load(Ordering::Relaxed);
    let (errs, first) = errors.report();
    let head = json!({"streams": want, "opened": open_now, "errors": errs, "first_errors": first, "secs": secs});
    if let Some(r) = &o.ready {
        std::fs::write(r, format!("{head}\n")).map_err(|e| format!("{r}: {e}"))?;
    }
    eprintln!("fleet-loadgen streams: {head}");
    // Hold them; each task ends only when its stream does.
    let _ = tokio::time::timeout(o.hold, async { while set.join_next().await.is_some() {} }).await;
    let (errs, first) = errors.report();
    Ok(json!({
        "streams": want, "opened": open_now, "errors": errs, "first_errors": first,
        "chunks": events.load(Ordering::Relaxed), "open_secs": secs,
    }))
}

async fn calls(o: Opts) -> Result<Value, String> {
    let ids = read_ids(o.ids.as_deref().ok_or("--ids is required")?)?;
    if ids.is_empty() {
        return Err("no sessions in --ids".into());
    }
    let n = o.calls;
    // Spread over the whole list: every instance's sessions get calls.
    let step = (ids.len() / n.max(1)).max(1);
    let ids = Arc::new(ids);
    let c = client(None, Duration::from_secs(5), Some(TIMEOUT))?;
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let relayed = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let urls = Arc::new(o.urls.clone());
    let machines = Arc::new(o.machines.clone());
    let relay = o.relay;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..o.concurrency {
        let (ids, c, next, ok, relayed, errors, urls, machines) = (
            ids.clone(),
            c.clone(),
            next.clone(),
            ok.clone(),
            relayed.clone(),
            errors.clone(),
            urls.clone(),
            machines.clone(),
        );
        set.spawn(async move {
            let mut hist = histogram();
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= n {
                    return hist;
                }
                let (at, sid) = &ids[(k * step) % ids.len()];
                let to = if relay { (at + 1) % urls.len() } else { *at };
                let body = json!({"jsonrpc": "2.0", "id": k + 1, "method": "tools/call",
                    "params": {"name": "find_tickets", "arguments": {}}});
                let t = Instant::now();
                let sent = c
                    .post(&urls[to])
                    .header("mcp-session-id", sid)
                    .header("mcp-protocol-version", PROTOCOL_VERSION)
                    .body(body.to_string())
                    .send()
                    .await;
                let resp = match sent {
                    Ok(r) => r,
                    Err(e) => {
                        errors.add(format!("send: {e}"));
                        continue;
                    }
                };
                let machine = header(&resp, "x-frontmcp-machine-id");
                match crate::read_answer(resp, (k + 1) as u64).await {
                    Ok(_) => {
                        record(&mut hist, t.elapsed());
                        ok.fetch_add(1, Ordering::Relaxed);
                        // Answered by the holder, though another instance was asked.
                        if to != *at && machine.as_deref() == machines.get(*at).map(|m| m.as_str())
                        {
                            relayed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => errors.add(e),
                }
            }
        });
    }
    let mut latency = histogram();
    while let Some(h) = set.join_next().await {
        latency
            .add(h.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let secs = started.elapsed().as_secs_f64();
    let (errs, first) = errors.report();
    Ok(json!({
        "latency": quantiles(&latency),
        "calls": n, "ok": ok.load(Ordering::Relaxed), "relayed": relayed.load(Ordering::Relaxed),
        "errors": errs, "first_errors": first, "secs": secs,
        "per_s": ok.load(Ordering::Relaxed) as f64 / secs.max(1e-9),
    }))
}

/// `fleet-loadgen MODE ...` for MODE in open, streams, calls.
pub async fn main(mode: &str, args: Vec<String>) -> std::process::ExitCode {
    let result = match parse(args) {
        Ok(o) => match mode {
            "open" => open(o).await,
            "streams" => streams(o).await,
            _ => calls(o).await,
        },
        Err(e) => Err(e),
    };
    match result {
        Ok(v) => {
            println!("{v}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fleet-loadgen {mode}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
