//! What one hostile client can take from the fleet (issue 19): background tasks, listen
//! streams and sessions are bounded per caller and per instance (and, with Redis, across the
//! fleet), and what a closed stream held is given back.

mod support;
mod support_redis;

use std::time::Duration;

use serde_json::{Value, json};
use support::{TestServer, eventually, mcp_post, start_with, within};

// ---------------------------------------------------------------------------------------------
// subscriptions/listen
// ---------------------------------------------------------------------------------------------

/// A 2026-07-28 `subscriptions/listen` following `uris`, from client address `from` (the
/// servers below believe `X-Forwarded-For`).
async fn listen(url: &str, id: i64, from: &str, uris: &[String]) -> reqwest::Response {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}},
            "notifications": {"resourceSubscriptions": uris},
        }
    });
    within(
        "listen POST",
        mcp_post(url)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .header("x-forwarded-for", from)
            .body(body.to_string())
            .send(),
    )
    .await
    .expect("POST")
}

fn uris(n: usize, len: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let head = format!("notes://{i}/");
            format!("{head}{}", "u".repeat(len.saturating_sub(head.len())))
        })
        .collect()
}

/// The JSON-RPC error of a refused listen, with its status and `Retry-After`.
async fn refusal(res: reqwest::Response) -> (u16, Option<String>, Value) {
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let v: Value = within("error body", res.json()).await.expect("json");
    (status, retry, v)
}

async fn listen_server() -> TestServer {
    start_with(support::SECRET, |c| {
        c.limits.client_address_header = Some("x-forwarded-for".into());
    })
    .await
}

/// With the defaults: a listen may follow what a session may subscribe to (1000 URIs of at most
/// 4096 bytes), and one caller may keep 16 streams open; beyond, a clear error and nothing kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_is_bounded_like_a_session_and_per_caller() {
    let s = listen_server().await;
    let url = &s.mcp;

    let (status, _, v) = refusal(listen(url, 1, "192.0.2.1", &uris(1001, 16)).await).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(
        v["error"]["data"]["limit"], "sessions.max_subscriptions",
        "{v}"
    );
    let (status, _, v) = refusal(listen(url, 2, "192.0.2.1", &uris(1, 4097)).await).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        v["error"]["data"]["limit"], "sessions.max_subscription_uri_bytes",
        "{v}"
    );

    let mut open = Vec::new();
    for i in 0..16 {
        let res = listen(url, 10 + i, "192.0.2.1", &uris(10, 64)).await;
        assert_eq!(res.status(), 200, "stream {i}");
        open.push(res);
    }
    let (status, retry, v) = refusal(listen(url, 30, "192.0.2.1", &uris(10, 64)).await).await;
    assert_eq!(status, 429, "{v}");
    assert!(retry.is_some(), "Retry-After");
    assert_eq!(v["id"], 30, "{v}");
    assert_eq!(v["error"]["code"], -32010, "{v}");
    assert_eq!(v["error"]["data"]["limit"], "listenStreamsPerKey", "{v}");
    let secs = retry.as_deref().and_then(|r| r.parse::<u64>().ok());
    assert_eq!(
        v["error"]["data"]["retryAfterMs"].as_u64(),
        secs.map(|s| s * 1000),
        "{v}"
    );
    // Another caller is not affected by this one's bound.
    let other = listen(url, 31, "192.0.2.2", &uris(10, 64)).await;
    assert_eq!(other.status(), 200);
}

/// The instance's total of streams and of client-data bytes answer `503` with `Retry-After`;
/// every place and byte a stream held is given back when it closes, so nothing is left in the
/// table (no entry per caller, no bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_streams_are_bounded_per_instance_and_leave_nothing_when_closed() {
    let s = start_with(support::SECRET, |c| {
        c.limits.client_address_header = Some("x-forwarded-for".into());
        c.limits.max_listen_streams_per_key = 2;
        c.stateless.max_listen_streams = 3;
        c.sessions.max_client_data_bytes = 3 * 1024 * 1024;
    })
    .await;
    let url = &s.mcp;
    let mut open = Vec::new();
    for (i, from) in ["192.0.2.1", "192.0.2.1", "192.0.2.2"].iter().enumerate() {
        let res = listen(url, i as i64, from, &uris(200, 4000)).await;
        assert_eq!(res.status(), 200, "stream {i}");
        open.push(res);
    }
    let held = s.handle.listen_streams();
    assert_eq!((held.keys, held.held), (2, 3), "{held:?}");
    assert!(held.bytes >= 3 * 200 * 4000, "{held:?}");
    let (status, retry, v) = refusal(listen(url, 9, "192.0.2.3", &uris(1, 10)).await).await;
    assert_eq!(status, 503, "{v}");
    assert!(retry.is_some());
    assert_eq!(
        v["error"]["data"]["limit"], "stateless.max_listen_streams",
        "{v}"
    );

    // Close one: the instance has a place again, but not the bytes for 500 URIs of 4000.
    drop(open.pop());
    eventually(
        "a closed stream frees its place",
        Duration::from_secs(5),
        || s.handle.listen_streams().held == 2,
    )
    .await;
    let (status, _, v) = refusal(listen(url, 10, "192.0.2.3", &uris(500, 4000)).await).await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(
        v["error"]["data"]["limit"], "sessions.max_client_data_bytes",
        "{v}"
    );

    drop(open);
    eventually(
        "closed streams leave nothing",
        Duration::from_secs(5),
        || {
            s.handle.listen_streams() == fleetmcp::internals::PlacesSnapshot::default()
                && s.handle.client_data_bytes() == 0
        },
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Background tasks
// ---------------------------------------------------------------------------------------------

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct HoldArgs {
    /// Padding the handler holds while it works.
    #[serde(default)]
    pad: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct LabelArgs {
    /// Echoed back as the result.
    label: String,
}

/// A server with a task that works until cancelled (`hold`) and one that ends at once
/// (`label`), believing `X-Forwarded-For`, with `edit` applied to its configuration.
async fn task_server(env: &[(&str, &str)], edit: impl FnOnce(&mut fleetmcp::Config)) -> TestServer {
    let builder = fleetmcp::Server::builder("bounds-tasks", "1.0.0")
        .tool(
            fleetmcp::tool("hold")
                .description("Works until cancelled, as a task")
                .task_support(fleetmcp::TaskSupport::Required)
                .handler(|a: HoldArgs, _| async move {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(a.pad.len().to_string())
                }),
        )
        .tool(
            fleetmcp::tool("label")
                .description("Answers its label at once, as a task")
                .task_support(fleetmcp::TaskSupport::Required)
                .handler(|a: LabelArgs, _| async move { Ok(a.label) }),
        );
    let mut vars = vec![("MCP_SESSION_SECRET", support::SECRET)];
    vars.extend_from_slice(env);
    let cfg = support::config_from(&vars, |c| {
        c.limits.client_address_header = Some("x-forwarded-for".into());
        edit(c);
    });
    support::serve(builder, cfg).await
}

/// A 2026-07-28 `tools/call` of `name` as a task, from client address `from`: the status and
/// the JSON-RPC answer.
async fn call_task(url: &str, id: i64, from: &str, name: &str, args: Value) -> (u16, Value) {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {
            "name": name, "arguments": args,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
            }
        }
    });
    let res = within(
        "tools/call",
        mcp_post(url)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", name)
            .header("x-forwarded-for", from)
            .body(body.to_string())
            .send(),
    )
    .await
    .expect("POST");
    let status = res.status().as_u16();
    let v: Value = within("answer", res.json()).await.expect("json");
    (status, v)
}

/// Starts a task; its id.
async fn started(url: &str, id: i64, from: &str, name: &str, args: Value) -> String {
    let (status, v) = call_task(url, id, from, name, args).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    v["result"]["taskId"].as_str().expect("taskId").to_string()
}

/// A task refused by the bound `limit`.
async fn refused_by(url: &str, id: i64, from: &str, name: &str, args: Value, limit: &str) {
    let (_, v) = call_task(url, id, from, name, args).await;
    assert_eq!(v["error"]["code"], -32000, "{v}");
    assert_eq!(v["error"]["data"]["limit"], limit, "{v}");
}

/// Without Redis: one caller fills only its own share of the task table (count and bytes,
/// its handlers' arguments included); every other caller still gets tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_cannot_fill_the_task_table_for_everyone() {
    let s = task_server(&[], |c| {
        c.tasks.max_tasks = 10;
        c.tasks.max_tasks_per_caller = 3;
        c.tasks.max_bytes_per_caller = 64 * 1024;
    })
    .await;
    let url = &s.mcp;
    for i in 0..3 {
        started(url, i, "192.0.2.1", "hold", json!({})).await;
    }
    refused_by(
        url,
        9,
        "192.0.2.1",
        "hold",
        json!({}),
        "tasks.max_tasks_per_caller",
    )
    .await;
    started(url, 10, "192.0.2.2", "hold", json!({})).await;
    // What a working handler holds counts: two of 40 KB pass 64 KB.
    let pad = json!({"pad": "p".repeat(40_000)});
    started(url, 11, "192.0.2.3", "hold", pad.clone()).await;
    refused_by(
        url,
        12,
        "192.0.2.3",
        "hold",
        pad,
        "tasks.max_bytes_per_caller",
    )
    .await;
    // Finished tasks make room for their caller: quick ones never run out.
    for i in 0..6 {
        started(url, 20 + i, "192.0.2.4", "label", json!({"label": "x"})).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

/// A working task holds its caller's place in flight (`limits.max_inflight_per_key`) until it
/// ends, as the request that started it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn working_tasks_count_against_max_inflight_per_key() {
    let s = task_server(&[("FLEETMCP_MAX_INFLIGHT_PER_KEY", "3")], |_| {}).await;
    let url = &s.mcp;
    for i in 0..3 {
        started(url, i, "192.0.2.1", "hold", json!({})).await;
    }
    let (status, v) = call_task(url, 9, "192.0.2.1", "hold", json!({})).await;
    assert_eq!(status, 429, "{v}");
    assert_eq!(v["error"]["code"], -32010, "{v}");
    assert_eq!(v["error"]["data"]["limit"], "inflightPerKey", "{v}");
    // Quick tasks give their place back when they end.
    started(url, 10, "192.0.2.2", "label", json!({"label": "a"})).await;
    started(url, 11, "192.0.2.2", "label", json!({"label": "b"})).await;
    started(url, 12, "192.0.2.2", "label", json!({"label": "c"})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    started(url, 13, "192.0.2.2", "label", json!({"label": "d"})).await;
}

/// With Redis the bounds hold across the fleet: tasks started on two instances sharing a Redis
/// count together, overall, per caller, and in bytes (working handlers' arguments included);
/// finished records are dropped to make room, so quick tasks keep Redis bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_bounds_hold_across_a_fleet_in_redis() {
    let redis = support_redis::RedisServer::start();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let bounds = |c: &mut fleetmcp::Config| {
        c.tasks.max_tasks = 6;
        c.tasks.max_tasks_per_caller = 2;
        c.tasks.max_result_bytes = 4096;
        c.tasks.max_bytes_per_owner = 64 * 1024;
        c.tasks.max_bytes_per_caller = 64 * 1024;
        c.tasks.max_bytes = 256 * 1024;
    };
    let a = task_server(&env, |c| {
        bounds(c);
        c.machine_id = Some("bounds-a".into());
    })
    .await;
    let b = task_server(&env, |c| {
        bounds(c);
        c.machine_id = Some("bounds-b".into());
    })
    .await;
    started(&a.mcp, 1, "192.0.2.1", "hold", json!({})).await;
    started(&b.mcp, 2, "192.0.2.1", "hold", json!({})).await;
    refused_by(
        &a.mcp,
        3,
        "192.0.2.1",
        "hold",
        json!({}),
        "tasks.max_tasks_per_caller",
    )
    .await;
    refused_by(
        &b.mcp,
        4,
        "192.0.2.1",
        "hold",
        json!({}),
        "tasks.max_tasks_per_caller",
    )
    .await;
    // Bytes: a handler holding 40 KB of arguments, twice, passes the caller's 64 KB.
    let pad = json!({"pad": "p".repeat(40_000)});
    started(&a.mcp, 5, "192.0.2.2", "hold", pad.clone()).await;
    refused_by(
        &b.mcp,
        6,
        "192.0.2.2",
        "hold",
        pad,
        "tasks.max_bytes_per_caller",
    )
    .await;
    // The fleet's total: 6 working tasks, whoever started them.
    started(&b.mcp, 7, "192.0.2.3", "hold", json!({})).await;
    started(&a.mcp, 8, "192.0.2.3", "hold", json!({})).await;
    started(&b.mcp, 9, "192.0.2.4", "hold", json!({})).await;
    refused_by(
        &a.mcp,
        10,
        "192.0.2.5",
        "hold",
        json!({}),
        "tasks.max_tasks",
    )
    .await;
    let records = redis.cli(&[
        "EVAL",
        "return #redis.call('KEYS', 'mcp:task:records:*')",
        "0",
    ]);
    assert_eq!(records.trim(), "6", "records in Redis");
}

/// With Redis, finished records make room (oldest first) instead of piling up for their
/// lifetime: a caller running quick tasks keeps at most its share of records in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_task_records_do_not_pile_up_in_redis() {
    let redis = support_redis::RedisServer::start();
    let url = redis.url();
    let s = task_server(&[("REDIS_URL", url.as_str())], |c| {
        c.tasks.max_tasks = 10;
        c.tasks.max_tasks_per_caller = 3;
    })
    .await;
    for i in 0..12 {
        started(
            &s.mcp,
            i,
            "192.0.2.1",
            "label",
            json!({"label": "l".repeat(1000)}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    eventually("the last task ends", Duration::from_secs(5), || {
        let n = redis.cli(&[
            "EVAL",
            "return #redis.call('KEYS', 'mcp:task:records:*')",
            "0",
        ]);
        n.trim().parse::<usize>().unwrap_or(99) <= 3
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Sessions per caller
// ---------------------------------------------------------------------------------------------

/// `initialize` from client address `from`: the response.
async fn initialize_from(url: &str, from: &str) -> reqwest::Response {
    within(
        "initialize",
        mcp_post(url)
            .header("x-forwarded-for", from)
            .body(support::initialize_body(support::LATEST, json!({})).to_string())
            .send(),
    )
    .await
    .expect("POST")
}

fn session_id(res: &reqwest::Response) -> String {
    res.headers()["mcp-session-id"]
        .to_str()
        .expect("session id")
        .to_string()
}

async fn delete_session(url: &str, from: &str, sid: &str) {
    let res = within(
        "DELETE",
        support::http()
            .delete(url)
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", support::LATEST)
            .header("x-forwarded-for", from)
            .send(),
    )
    .await
    .expect("DELETE");
    assert_eq!(res.status(), 204);
}

/// The refusal of an `initialize` over `limits.max_sessions_per_key`.
async fn assert_sessions_per_key_refusal(res: reqwest::Response, max: u64) {
    let (status, retry, v) = refusal(res).await;
    assert_eq!(status, 429, "{v}");
    assert!(retry.is_some(), "Retry-After");
    assert_eq!(v["error"]["code"], -32010, "{v}");
    assert_eq!(v["error"]["data"]["limit"], "sessionsPerKey", "{v}");
    assert_eq!(v["error"]["data"]["maxSessionsPerKey"], max, "{v}");
    let ms = v["error"]["data"]["retryAfterMs"].as_u64().unwrap_or(0);
    assert_eq!(
        Some(ms.div_ceil(1000).to_string()),
        retry,
        "retryAfterMs: {v}"
    );
}

/// Without Redis: one caller opens at most `limits.max_sessions_per_key` sessions; the others
/// still open theirs, and an ended session gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_cannot_take_every_session() {
    let s = start_with(support::SECRET, |c| {
        c.limits.client_address_header = Some("x-forwarded-for".into());
        c.limits.max_sessions_per_key = 3;
    })
    .await;
    let url = &s.mcp;
    let mut sids = Vec::new();
    for _ in 0..3 {
        let res = initialize_from(url, "192.0.2.1").await;
        assert_eq!(res.status(), 200);
        sids.push(session_id(&res));
    }
    assert_sessions_per_key_refusal(initialize_from(url, "192.0.2.1").await, 3).await;
    assert_eq!(
        s.handle.session_count(),
        3,
        "a refused initialize holds nothing"
    );
    let other = initialize_from(url, "192.0.2.2").await;
    assert_eq!(other.status(), 200, "another caller is not affected");
    delete_session(url, "192.0.2.1", &sids[0]).await;
    assert_eq!(initialize_from(url, "192.0.2.1").await.status(), 200);
}

/// With Redis the bound is the fleet's: sessions opened on two instances sharing a Redis count
/// together, and a `DELETE` (on either) gives the place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_per_key_are_counted_across_the_fleet_in_redis() {
    let redis = support_redis::RedisServer::start();
    let redis_url = redis.url();
    let instance = |machine: &'static str| {
        let redis_url = redis_url.clone();
        async move {
            let cfg = support::config_from(
                &[
                    ("MCP_SESSION_SECRET", support::SECRET),
                    ("REDIS_URL", redis_url.as_str()),
                    ("FLEETMCP_MAX_SESSIONS_PER_KEY", "3"),
                ],
                |c| {
                    c.limits.client_address_header = Some("x-forwarded-for".into());
                    c.machine_id = Some(machine.into());
                },
            );
            support::serve(support::fixture_builder(Default::default()), cfg).await
        }
    };
    let a = instance("sessions-a").await;
    let b = instance("sessions-b").await;
    let mut sids = Vec::new();
    for url in [&a.mcp, &b.mcp, &a.mcp] {
        let res = initialize_from(url, "192.0.2.1").await;
        assert_eq!(res.status(), 200);
        sids.push(session_id(&res));
    }
    assert_sessions_per_key_refusal(initialize_from(&b.mcp, "192.0.2.1").await, 3).await;
    assert_eq!(initialize_from(&b.mcp, "192.0.2.2").await.status(), 200);
    // Ended through the other instance: the place comes back fleet-wide.
    delete_session(&b.mcp, "192.0.2.1", &sids[0]).await;
    assert_eq!(initialize_from(&a.mcp, "192.0.2.1").await.status(), 200);
    assert_sessions_per_key_refusal(initialize_from(&a.mcp, "192.0.2.1").await, 3).await;
    // One field per key in a hash many keys share: counts by granule (no session id, nothing
    // per session), in Redis's compact encoding, with an expiry.
    let found = count_of(&redis, "addr:192.0.2.1");
    assert_eq!(found.len(), 1, "{found:?}");
    let (hash, value) = &found[0];
    assert_eq!(sessions_in(value), 3, "{value}");
    assert!(value.len() <= 4, "three sessions in {value:?}");
    assert!(sids.iter().all(|s| !value.contains(s.as_str())), "{value}");
    assert_eq!(redis.cli(&["OBJECT", "ENCODING", hash]).trim(), "listpack");
    let ttl: i64 = redis.cli(&["PTTL", hash]).trim().parse().expect("pttl");
    assert!(ttl > 0, "the count expires: {ttl}");
}

/// A server on `redis` believing `X-Forwarded-For`, each client key held to `max` sessions,
/// its configuration then edited by `edit`.
async fn counting_in(
    redis: &support_redis::RedisServer,
    max: &str,
    edit: impl FnOnce(&mut fleetmcp::Config),
) -> TestServer {
    let redis_url = redis.url();
    let cfg = support::config_from(
        &[
            ("MCP_SESSION_SECRET", support::SECRET),
            ("REDIS_URL", redis_url.as_str()),
            ("FLEETMCP_MAX_SESSIONS_PER_KEY", max),
        ],
        |c| {
            c.limits.client_address_header = Some("x-forwarded-for".into());
            edit(c);
        },
    );
    support::serve(support::fixture_builder(Default::default()), cfg).await
}

/// The hashes counting `field`'s sessions (the client key, or its digest) and its value in
/// each. A test may SCAN: nothing else runs on its Redis.
fn count_of(redis: &support_redis::RedisServer, field: &str) -> Vec<(String, String)> {
    let script = "local out, cursor = {}, '0' \
        repeat local r = redis.call('SCAN', cursor, 'MATCH', 'mcp:limits:*', 'COUNT', 1000) \
        cursor = r[1] for _, k in ipairs(r[2]) do local v = redis.call('HGET', k, ARGV[1]) \
        if v then out[#out + 1] = k out[#out + 1] = v end end until cursor == '0' return out";
    let lines: Vec<String> = redis
        .cli(&["EVAL", script, "0", field])
        .lines()
        .map(str::to_string)
        .collect();
    lines
        .chunks(2)
        .filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone())))
        .collect()
}

/// The sessions a count's value holds: a letter a granule, then its count unless 1.
fn sessions_in(value: &str) -> u64 {
    let mut total = 0;
    for run in value.split(|c: char| c.is_ascii_alphabetic()).skip(1) {
        total += if run.is_empty() {
            1
        } else {
            run.parse::<u64>().expect("a count")
        };
    }
    total
}

/// How many keys Redis keeps under `mcp:limits:` and their `MEMORY USAGE`, summed.
fn limit_keys_bytes(redis: &support_redis::RedisServer) -> (u64, u64) {
    let script = "local n, bytes, cursor = 0, 0, '0' \
        repeat local r = redis.call('SCAN', cursor, 'MATCH', 'mcp:limits:*', 'COUNT', 1000) \
        cursor = r[1] for _, k in ipairs(r[2]) do n = n + 1 \
        bytes = bytes + redis.call('MEMORY', 'USAGE', k, 'SAMPLES', '0') end \
        until cursor == '0' return {n, bytes}";
    let out = redis.cli(&["EVAL", script, "0"]);
    let mut it = out
        .lines()
        .map(|l| l.trim().parse::<u64>().expect("a number"));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// A key's count in Redis stays a short value however many sessions it holds (issue 37: a
/// sorted set with an entry per session cost about 115 bytes a session), and a session that
/// ended without a `DELETE` stops counting once its record's lifetime (and at most one
/// granule, a thirtieth of it) has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_session_count_in_redis_is_small_and_forgets_expired_sessions() {
    let redis = support_redis::RedisServer::start();
    let server = counting_in(&redis, "200", |c| {
        if let Some(r) = c.redis.as_mut() {
            // A granule of one second: the count forgets within the test's time.
            r.default_ttl_ms = 3_000;
        }
    })
    .await;
    for _ in 0..200 {
        assert_eq!(
            initialize_from(&server.mcp, "192.0.2.7").await.status(),
            200
        );
    }
    assert_sessions_per_key_refusal(initialize_from(&server.mcp, "192.0.2.7").await, 200).await;
    // In one epoch's hash, or two when the sessions were opened across an epoch's edge.
    let found = count_of(&redis, "addr:192.0.2.7");
    let total: u64 = found.iter().map(|(_, value)| sessions_in(value)).sum();
    assert_eq!(total, 200, "{found:?}");
    assert!(
        (1..=2).contains(&found.len()) && found.iter().all(|(_, v)| v.len() <= 20),
        "200 sessions in {found:?}"
    );
    let bytes: usize = found
        .iter()
        .map(|(hash, _)| {
            let used = redis.cli(&["MEMORY", "USAGE", hash]);
            used.trim().parse::<usize>().expect("memory usage")
        })
        .sum();
    assert!(bytes < 1_000, "200 sessions' count takes {bytes} bytes");
    // Past the lifetime and a granule, the sessions (never deleted) no longer count.
    tokio::time::sleep(std::time::Duration::from_millis(4_200)).await;
    assert_eq!(
        initialize_from(&server.mcp, "192.0.2.7").await.status(),
        200
    );
}

/// Clients holding one session each, the commonest shape behind a balancer, cost Redis a few
/// tens of bytes each for their counts, not a hash each (issue 37: ~190 B a client), and a
/// client at its most sessions is still refused and gets a place back when one ends; a long
/// client key (an IPv6 address whole) is counted under its digest, the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_clients_cost_a_few_tens_of_bytes_each_in_redis() {
    use futures_util::StreamExt;
    const CLIENTS: usize = 5_000;
    let redis = support_redis::RedisServer::start();
    let server = counting_in(&redis, "2", |c| c.limits.ipv6_prefix_len = 128).await;
    let url = server.mcp.clone();
    let opened = futures_util::stream::iter(0..CLIENTS)
        .map(|i| {
            let url = url.clone();
            async move {
                let from = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
                initialize_from(&url, &from).await.status().as_u16()
            }
        })
        .buffer_unordered(16)
        .filter(|status| std::future::ready(*status == 200))
        .count()
        .await;
    assert_eq!(opened, CLIENTS);
    let (keys, bytes) = limit_keys_bytes(&redis);
    let per_client = bytes / CLIENTS as u64;
    println!("{CLIENTS} one-session clients: {bytes} B in {keys} keys, {per_client} B a client");
    assert!(
        per_client < 60,
        "{CLIENTS} one-session clients' counts take {bytes} B in {keys} keys: {per_client} B a client"
    );
    for (hash, _) in count_of(&redis, "addr:10.0.0.7") {
        assert_eq!(redis.cli(&["OBJECT", "ENCODING", &hash]).trim(), "listpack");
    }
    // At its most (2), a client is refused until one of its sessions ends; a long key too.
    for from in ["10.0.0.7", "2001:db8:1234:5678:9abc:def0:1234:5678"] {
        let first = initialize_from(&url, from).await;
        assert_eq!(first.status(), 200);
        let sid = session_id(&first);
        if from.contains(':') {
            assert_eq!(initialize_from(&url, from).await.status(), 200);
            let raw = format!("addr:{from}/128");
            assert!(count_of(&redis, &raw).is_empty(), "the long key, digested");
        }
        assert_sessions_per_key_refusal(initialize_from(&url, from).await, 2).await;
        delete_session(&url, from, &sid).await;
        assert_eq!(initialize_from(&url, from).await.status(), 200);
        assert_sessions_per_key_refusal(initialize_from(&url, from).await, 2).await;
    }
}
