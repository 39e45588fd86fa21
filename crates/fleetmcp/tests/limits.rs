//! Rate and concurrency limits (`[limits]`) against real servers on loopback and real
//! `redis-server` processes: a rate shared by two instances, the request in flight past the
//! limit refused while the others finish, a tool's own rate, a paused Redis (fail open with a
//! warning, or fail closed with `503`), memory mode without Redis, a 2026-07-28 request, the
//! client address from a trusted header, and health routes never limited.

mod support;
mod support_redis;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fleetmcp::config::{OnStoreError, RateLimit};
use fleetmcp::{Config, NoArgs, Server, tool};
use serde_json::{Value, json};
use support::{
    Client, LATEST, SECRET, TestServer, config_from, eventually, expect_rpc_error, serve,
};
use support_redis::{RedisServer, SharedRedis};
use tokio::sync::Semaphore;

/// The rate-limit code: in the range MCP 2026-07-28 leaves to implementations.
const RATE_LIMITED: i64 = -32010;

/// What the `hold` tool shares with its test: how many calls started, and the permits that
/// let them finish.
#[derive(Clone)]
struct Holds {
    started: Arc<AtomicUsize>,
    release: Arc<Semaphore>,
}

impl Holds {
    fn new() -> Self {
        Self {
            started: Arc::new(AtomicUsize::new(0)),
            release: Arc::new(Semaphore::new(0)),
        }
    }
}

/// A server with `echo`, `add` and `hold`, on Redis when `redis` is given.
async fn start(
    redis: Option<&RedisServer>,
    holds: Holds,
    edit: impl FnOnce(&mut Config),
) -> TestServer {
    start_with(redis.map(|r| vec![("REDIS_URL", r.url())]), holds, edit).await
}

/// [`start`] on the Redis the variables `redis` name (`REDIS_URL`, `REDIS_CLUSTER_NODES`, ...).
async fn start_with(
    redis: Option<Vec<(&'static str, String)>>,
    holds: Holds,
    edit: impl FnOnce(&mut Config),
) -> TestServer {
    let mut env = vec![("MCP_SESSION_SECRET", SECRET)];
    for (var, value) in redis.iter().flatten() {
        env.push((var, value.as_str()));
    }
    let builder = Server::builder("limits-test", "1.0.0")
        .tool(
            tool("echo")
                .description("Returns its text")
                .handler(|a: support::EchoArgs, _| async move { Ok(a.text) }),
        )
        .tool(
            tool("add")
                .description("Adds two numbers")
                .handler(|a: support::AddArgs, _| async move { Ok((a.a + a.b).to_string()) }),
        )
        .tool(
            tool("hold")
                .description("Runs until the test releases it")
                .handler(move |_: NoArgs, _| {
                    let holds = holds.clone();
                    async move {
                        holds.started.fetch_add(1, Ordering::SeqCst);
                        let permit = holds.release.acquire().await?;
                        permit.forget();
                        Ok("released")
                    }
                }),
        );
    serve(builder, config_from(&env, edit)).await
}

fn rate(requests: u64, window_ms: u64) -> Option<RateLimit> {
    Some(RateLimit {
        requests,
        window_ms,
        burst: None,
    })
}

async fn echo(c: &Client, id: &str) -> reqwest::Response {
    c.request_with_id(
        json!(id),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": id}}),
    )
    .await
}

/// `Retry-After` of `res`, in seconds.
fn retry_after(res: &reqwest::Response) -> u64 {
    res.headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a refusal carries Retry-After in whole seconds")
}

/// A header of `res` as text.
fn header(res: &reqwest::Response, name: &str) -> Option<String> {
    res.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

/// Checks a refusal over a limit: 429, `Retry-After` within `retry`, code, id, and `data`,
/// whose `retryAfterMs` is the wait `Retry-After` rounds up. A rate's refusal (`data.limit`
/// `rate` or `toolRate`) also names its quota policy in the structured fields of
/// draft-ietf-httpapi-ratelimit-headers, `RateLimit-Policy: "<limit>";q=<requests>;w=<window
/// s>` and `RateLimit: "<limit>";r=0;t=<Retry-After>`; any other limit sends neither.
async fn expect_over(
    res: reqwest::Response,
    id: &str,
    retry: std::ops::RangeInclusive<u64>,
) -> Value {
    let after = retry_after(&res);
    assert!(
        retry.contains(&after),
        "Retry-After {after}, expected {retry:?}"
    );
    let (policy, left) = (header(&res, "ratelimit-policy"), header(&res, "ratelimit"));
    let v = expect_rpc_error(res, 429, RATE_LIMITED, json!(id)).await;
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(
        msg,
        format!("Rate limit exceeded. Retry after {after} seconds"),
        "{v}"
    );
    let data = &v["error"]["data"];
    let ms = data["retryAfterMs"]
        .as_u64()
        .unwrap_or_else(|| panic!("no retryAfterMs in the error's data: {v}"));
    assert!(ms >= 1, "{v}");
    assert_eq!(
        ms.div_ceil(1000),
        after,
        "retryAfterMs against Retry-After: {v}"
    );
    match data["limit"].as_str() {
        Some(limit @ ("rate" | "toolRate")) => {
            let q = data["rate"]["requests"]
                .as_u64()
                .expect("the rate's requests");
            let w = data["rate"]["windowMs"]
                .as_u64()
                .expect("the rate's window")
                .div_ceil(1000);
            assert_eq!(
                policy.as_deref(),
                Some(format!("\"{limit}\";q={q};w={w}").as_str()),
                "RateLimit-Policy of {v}"
            );
            assert_eq!(
                left.as_deref(),
                Some(format!("\"{limit}\";r=0;t={after}").as_str()),
                "RateLimit of {v}"
            );
        }
        _ => assert_eq!(
            (policy, left),
            (None, None),
            "no quota policy for a limit on what is held at once: {v}"
        ),
    }
    v
}

/// N requests per window across two instances sharing Redis, not N each: an `initialize` on
/// each and three calls alternating between them (three requests on one, two on the other),
/// and the sixth request is refused on the instance that served only two. A 2026-07-28
/// request from the same client then gets the same refusal, and so does an `initialize`; the
/// counter is one key with an expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_is_shared_by_two_instances() {
    rate_shared_on(SharedRedis::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_rate_limit_is_shared_by_two_instances() {
    rate_shared_on(SharedRedis::cluster()).await;
}

async fn rate_shared_on(redis: SharedRedis) {
    let limit = |c: &mut Config| c.limits.rate = rate(5, 60_000);
    let a = start_with(Some(redis.env()), Holds::new(), limit).await;
    let b = start_with(Some(redis.env()), Holds::new(), limit).await;
    let ca = Client::connect(&a).await;
    let cb = Client::connect(&b).await;
    for i in 0..3 {
        let (c, id) = if i % 2 == 0 {
            (&ca, format!("a{i}"))
        } else {
            (&cb, format!("b{i}"))
        };
        let res = echo(c, &id).await;
        assert_eq!(
            res.status(),
            200,
            "request {} of 5 is within the shared limit",
            i + 3
        );
    }
    // One request per 12 s: the next is due in 12 s.
    let res = echo(&cb, "sixth").await;
    assert_eq!(
        header(&res, "ratelimit-policy").as_deref(),
        Some(r#""rate";q=5;w=60"#)
    );
    let v = expect_over(res, "sixth", 11..=12).await;
    assert_eq!(v["error"]["data"]["limit"], "rate", "{v}");
    assert_eq!(
        v["error"]["data"]["rate"],
        json!({"requests": 5, "windowMs": 60000, "burst": 5}),
        "{v}"
    );
    let res = echo(&ca, "seventh").await;
    expect_over(res, "seventh", 11..=12).await;

    // The stateless era gets the same answer.
    let body = json!({"jsonrpc": "2.0", "id": "modern", "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "x"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    }});
    let res = support::mcp_post(&a.mcp)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "echo")
        .body(body.to_string())
        .send()
        .await
        .expect("POST");
    expect_over(res, "modern", 11..=12).await;
    let init = support::mcp_post(&b.mcp)
        .json(&support::initialize_body(LATEST, json!({})))
        .send()
        .await
        .expect("POST");
    let after = retry_after(&init);
    assert!((11..=12).contains(&after), "Retry-After {after}");
    assert_eq!(
        header(&init, "ratelimit").as_deref(),
        Some(format!(r#""rate";r=0;t={after}"#).as_str())
    );
    let v = expect_rpc_error(init, 429, RATE_LIMITED, json!(0)).await;
    assert!(v["error"]["data"]["retryAfterMs"].as_u64().is_some(), "{v}");

    let key = "mcp:limits:{addr:127.0.0.1}:rate";
    let pttl: i64 = redis.cli(&["PTTL", key]).parse().expect("PTTL");
    assert!(
        (1..=60_000).contains(&pttl),
        "the counter expires on its own: {pttl}"
    );
}

/// The (N+1)th request in flight of one key is refused with 429 while the N running finish,
/// across two instances sharing Redis; once they finish, the key is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_in_flight_past_the_key_limit_is_refused_and_the_others_finish() {
    inflight_shared_on(SharedRedis::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_request_in_flight_past_the_key_limit_is_refused_and_the_others_finish() {
    inflight_shared_on(SharedRedis::cluster()).await;
}

async fn inflight_shared_on(redis: SharedRedis) {
    let holds = Holds::new();
    let limit = |c: &mut Config| c.limits.max_inflight_per_key = Some(2);
    let a = start_with(Some(redis.env()), holds.clone(), limit).await;
    let b = start_with(Some(redis.env()), holds.clone(), limit).await;
    inflight_limit_holds(&[&a, &b], &holds).await;
    let set = "mcp:limits:{addr:127.0.0.1}:inflight";
    let left = || redis.cli(&["ZCARD", set]);
    let deadline = Instant::now() + Duration::from_secs(3);
    while left() != "0" {
        assert!(
            Instant::now() < deadline,
            "places in flight freed in Redis: {}",
            left()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The same limit counted in memory, without Redis.
#[tokio::test]
async fn the_request_in_flight_past_the_key_limit_is_refused_in_memory_too() {
    let holds = Holds::new();
    let s = start(None, holds.clone(), |c| {
        c.limits.max_inflight_per_key = Some(2)
    })
    .await;
    inflight_limit_holds(&[&s, &s], &holds).await;
}

/// Two `hold` calls (one per server in `servers`), a third refused, the two finish, and a
/// new call is served.
async fn inflight_limit_holds(servers: &[&TestServer; 2], holds: &Holds) {
    let mut clients = Vec::new();
    for s in servers {
        clients.push(Arc::new(Client::connect(s).await));
    }
    let mut running = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let c = c.clone();
        running.push(tokio::spawn(async move {
            let res = c
                .post()
                .json(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "hold", "arguments": {}}}))
                .send()
                .await
                .expect("POST");
            let status = res.status();
            let v: Value = res.json().await.expect("JSON");
            (status, v)
        }));
    }
    let started = holds.started.clone();
    eventually("both holds run", Duration::from_secs(3), || {
        started.load(Ordering::SeqCst) == 2
    })
    .await;
    let v = expect_over(echo(&clients[0], "third").await, "third", 1..=1).await;
    assert_eq!(
        v["error"]["data"],
        json!({"limit": "inflightPerKey", "maxInflightPerKey": 2, "retryAfterMs": 1000}),
        "{v}"
    );
    holds.release.add_permits(2);
    for task in running {
        let (status, v) = task.await.expect("task");
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["result"]["content"][0]["text"], "released", "{v}");
    }
    // Freed: served again (the Redis place is removed in the background, so allow a moment).
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let res = echo(&clients[1], "again").await;
        if res.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after the holds finished: {}",
            res.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A tool's own rate: `echo` twice a minute; the third `echo` is refused naming the tool,
/// while `add` (no limit of its own) is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_has_its_own_rate() {
    let redis = RedisServer::start();
    let s = start(Some(&redis), Holds::new(), |c| {
        c.limits.tools.insert(
            "echo".into(),
            RateLimit {
                requests: 2,
                window_ms: 60_000,
                burst: None,
            },
        );
    })
    .await;
    let c = Client::connect(&s).await;
    for id in ["1", "2"] {
        assert_eq!(echo(&c, id).await.status(), 200);
    }
    let res = echo(&c, "3").await;
    assert_eq!(
        header(&res, "ratelimit-policy").as_deref(),
        Some(r#""toolRate";q=2;w=60"#)
    );
    let v = expect_over(res, "3", 29..=30).await;
    assert_eq!(v["error"]["data"]["limit"], "toolRate", "{v}");
    assert_eq!(v["error"]["data"]["tool"], "echo", "{v}");
    for _ in 0..5 {
        let r = c.call_tool_json("add", json!({"a": 1, "b": 2})).await;
        assert_eq!(r["content"][0]["text"], "3", "{r}");
    }
}

/// Lines the servers of this test binary logged (one subscriber for the whole binary).
fn logs() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<Mutex<Vec<u8>>> = OnceLock::new();
    let buf = LOGS.get_or_init(|| Mutex::new(Vec::new()));
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        struct W;
        impl Write for W {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if let Ok(mut l) = logs().lock() {
                    l.extend_from_slice(buf);
                }
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let _ = tracing_subscriber::fmt()
            .with_writer(|| W)
            .with_ansi(false)
            .with_env_filter("warn")
            .try_init();
    });
    buf
}

fn logged(text: &str) -> bool {
    logs()
        .lock()
        .map(|l| String::from_utf8_lossy(&l).contains(text))
        .unwrap_or(false)
}

/// Redis paused (SIGSTOP) with `on_store_error = open`: the request is served uncounted, within
/// the Redis timeout, and a warning says so. The limit (two requests a minute, spent) would
/// refuse it if it were counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_fails_open_with_a_warning() {
    logs();
    let mut redis = RedisServer::start();
    let s = start(Some(&redis), Holds::new(), |c| {
        // The initialize and one call.
        c.limits.rate = rate(2, 60_000);
        c.limits.on_store_error = OnStoreError::Open;
    })
    .await;
    let c = Client::connect(&s).await;
    assert_eq!(echo(&c, "first").await.status(), 200);
    expect_over(echo(&c, "second").await, "second", 29..=30).await;
    redis.pause();
    let t = Instant::now();
    let res = echo(&c, "paused").await;
    let took = t.elapsed();
    redis.resume();
    assert_eq!(
        res.status(),
        200,
        "served while the counters cannot be read"
    );
    let v: Value = res.json().await.expect("JSON");
    assert_eq!(v["result"]["content"][0]["text"], "paused", "{v}");
    assert!(
        took < Duration::from_secs(3),
        "bounded by the Redis timeout: {took:?}"
    );
    assert!(
        logged("served a request without counting it: the rate-limit store cannot be reached"),
        "the warning is logged"
    );
    // Redis back: counted again.
    expect_over(echo(&c, "after").await, "after", 1..=60).await;
}

/// Redis paused with `on_store_error = closed`: `503` with `Retry-After: 1` and the contract's
/// `-32603` message, within the Redis timeout; served again once Redis answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_fails_closed_with_503() {
    let mut redis = RedisServer::start();
    let s = start(Some(&redis), Holds::new(), |c| {
        c.limits.rate = rate(1000, 60_000);
        c.limits.on_store_error = OnStoreError::Closed;
    })
    .await;
    let c = Client::connect(&s).await;
    assert_eq!(echo(&c, "first").await.status(), 200);
    redis.pause();
    let t = Instant::now();
    let res = echo(&c, "paused").await;
    let took = t.elapsed();
    redis.resume();
    assert_eq!(retry_after(&res), 1);
    let v = expect_rpc_error(res, 503, -32603, json!("paused")).await;
    assert_eq!(
        v["error"]["message"],
        "Service temporarily unavailable: the rate-limit store cannot be reached",
        "{v}"
    );
    assert!(
        took < Duration::from_secs(3),
        "bounded by the Redis timeout: {took:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while echo(&c, "after").await.status() != 200 {
        assert!(Instant::now() < deadline, "served again once Redis answers");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Without Redis the limits are counted in memory: the key's rate, a 429 past it; health
/// routes are never limited; with a trusted `X-Forwarded-For`, each client address has its own
/// count (and a hop the client made up does not change it).
#[tokio::test]
async fn memory_mode_counts_per_client_address_and_never_limits_health() {
    let s = start(None, Holds::new(), |c| {
        c.limits.rate = rate(3, 60_000);
        c.limits.client_address_header = Some("x-forwarded-for".into());
        c.limits.trusted_proxies = vec!["127.0.0.1".into()];
    })
    .await;
    let c = Client::connect(&s).await;
    let from = |ip: &'static str, id: &'static str| {
        c.post()
            .header("x-forwarded-for", ip)
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": id}}}))
            .send()
    };
    for id in ["1", "2", "3"] {
        assert_eq!(from("203.0.113.1", id).await.expect("POST").status(), 200);
    }
    // The client prepends a hop of its own; the balancer's (rightmost) one still counts.
    let res = from("198.51.100.99, 203.0.113.1", "4").await.expect("POST");
    let v = expect_over(res, "4", 19..=20).await;
    assert_eq!(v["error"]["data"]["limit"], "rate", "{v}");
    for id in ["5", "6", "7"] {
        assert_eq!(
            from("203.0.113.2", id).await.expect("POST").status(),
            200,
            "another address"
        );
    }
    for path in ["/healthz", "/readyz", "/health"] {
        for _ in 0..5 {
            let res = support::http()
                .get(format!("{}{path}", s.base))
                .send()
                .await
                .expect("GET");
            assert_eq!(res.status(), 200, "{path} is never limited");
        }
    }
}

/// A place in flight left by an instance that crashed (written here as it would have: a member
/// of the key's set, scored by its lease end) refuses the next request until its lease ends,
/// then frees itself; a live instance renews the places of its long calls, so a call running
/// longer than the lease keeps its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_instances_places_lapse_and_a_live_ones_are_renewed() {
    let redis = RedisServer::start();
    let holds = Holds::new();
    let s = start(Some(&redis), holds.clone(), |c| {
        c.limits.max_inflight_per_key = Some(1);
        c.limits.inflight_lease_ms = 1000;
    })
    .await;
    let c = Arc::new(Client::connect(&s).await);
    let set = "mcp:limits:{addr:127.0.0.1}:inflight";
    let time = redis.cli(&["TIME"]);
    let secs: u64 = time
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("TIME");
    let lease_end = (secs * 1000 + 1000).to_string();
    redis.cli(&["ZADD", set, &lease_end, "crashed-desk:7"]);
    expect_over(echo(&c, "blocked").await, "blocked", 1..=1).await;
    let deadline = Instant::now() + Duration::from_secs(4);
    while echo(&c, "freed").await.status() != 200 {
        assert!(
            Instant::now() < deadline,
            "the crashed instance's place did not lapse"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        redis.cli(&["ZSCORE", set, "crashed-desk:7"]),
        "",
        "dropped by a check"
    );

    let holder = c.clone();
    let running = tokio::spawn(async move {
        let res = holder
            .post()
            .json(&json!({"jsonrpc": "2.0", "id": "long", "method": "tools/call", "params": {"name": "hold", "arguments": {}}}))
            .send()
            .await
            .expect("POST");
        res.status()
    });
    let started = holds.started.clone();
    eventually("the hold runs", Duration::from_secs(3), || {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    // Past two leases: still held, because this instance renews it.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    expect_over(echo(&c, "still").await, "still", 1..=1).await;
    holds.release.add_permits(1);
    assert_eq!(running.await.expect("task"), 200);
}

/// `GET /sse` on `s`: the response (a stream, or a refusal).
async fn open_sse(s: &TestServer) -> reqwest::Response {
    support::http()
        .get(format!("{}/sse", s.base))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("GET /sse")
}

/// Checks a stream refused over a limit: 429, `Retry-After`, the rate-limit code, no id, and
/// the limit `data` names.
async fn expect_stream_over(res: reqwest::Response, limit: &str) {
    assert_eq!(res.status(), 429);
    assert!(retry_after(&res) >= 1);
    let v: Value = res.json().await.expect("a JSON-RPC error");
    assert_eq!(v["error"]["code"], RATE_LIMITED, "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
    assert_eq!(v["error"]["data"]["limit"], limit, "{v}");
}

/// `GET /sse` (the 2024-11-05 stream) holds a place in flight for as long as it is open: with
/// three places, the fourth stream is refused (429, `Retry-After`, the rate-limit code, no
/// id); once one closes, a new one opens. Before, one client held a thousand streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2024_11_05_stream_holds_a_place_in_flight_while_open() {
    let s = start(None, Holds::new(), |c| {
        c.limits.max_inflight_per_key = Some(3);
        // The server sees a closed stream at its next write: a keep-alive each second.
        c.http.sse_keepalive_secs = 1;
    })
    .await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        let res = open_sse(&s).await;
        assert_eq!(res.status(), 200);
        streams.push(res);
    }
    expect_stream_over(open_sse(&s).await, "inflightPerKey").await;
    drop(streams.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let res = open_sse(&s).await;
        if res.status() == 200 {
            streams.push(res);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a closed stream's place is never freed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    expect_stream_over(open_sse(&s).await, "inflightPerKey").await;
}

/// `GET /sse` counts against the key's rate like any request: two a minute, the third is
/// refused. Before, one client opened a thousand under a rate of ten a minute.
#[tokio::test]
async fn a_2024_11_05_stream_counts_against_the_rate() {
    let s = start(None, Holds::new(), |c| c.limits.rate = rate(2, 60_000)).await;
    let first = open_sse(&s).await;
    let second = open_sse(&s).await;
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    expect_stream_over(open_sse(&s).await, "rate").await;
}
