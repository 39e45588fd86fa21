//! Two in-process instances sharing one real `redis-server` (also a Cluster and Sentinel): a
//! session opened on one is served by the other, an SSE stream cut on one is resumed on the
//! other, a held session costs no Redis command yet sees a delete made elsewhere, the holder's
//! index names only live sessions, and a burst of changes while Redis is paused makes no task
//! per change. The store itself against Redis is in `redis_store.rs`.

mod support;
mod support_redis;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetmcp::internals::RedisSessionStore;
use fleetmcp::{Config, NoArgs, Server, tool};
use serde_json::{Value, json};
use support::{
    LATEST, SECRET, TestServer, config_from, config_with, eventually_async, http, serve,
};
use support_redis::SharedRedis;

async fn instance(machine: &str, store: RedisSessionStore) -> TestServer {
    let cfg = config_with(SECRET, |c| c.machine_id = Some(machine.into()));
    let builder = Server::builder("redis-it", "1.0.0")
        .tool(
            tool("hello")
                .description("Says hello")
                .handler(|_: NoArgs, _ctx| async { Ok("Hello!") }),
        )
        .session_store(Arc::new(store));
    serve(builder, cfg).await
}

fn post(c: &reqwest::Client, url: &str, sid: Option<&str>, body: Value) -> reqwest::RequestBuilder {
    let mut b = support::conforming(c.post(url))
        .header("mcp-protocol-version", LATEST)
        .json(&body);
    if let Some(s) = sid {
        b = b.header("mcp-session-id", s);
    }
    b
}

/// Sends what `request` builds, again after a `503` with `Retry-After` (a write the replicas
/// did not confirm in time: a loaded machine's Sentinel set can be that slow), as a client
/// does, at most five times; a `503` without `Retry-After` is answered as it is.
async fn send_retrying(request: impl Fn() -> reqwest::RequestBuilder) -> reqwest::Response {
    for _ in 0..4 {
        let res = request().send().await.unwrap();
        if res.status() != 503 || res.headers().get("retry-after").is_none() {
            return res;
        }
        let body = res.text().await.unwrap_or_default();
        eprintln!("503 with Retry-After, asked again: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    request().send().await.unwrap()
}

/// `initialize` on `url` with the client's `capabilities`; the session id.
async fn initialize(c: &reqwest::Client, url: &str, capabilities: Value) -> String {
    let res = send_retrying(|| {
        post(
            c,
            url,
            None,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": LATEST,
                "capabilities": capabilities,
                "clientInfo": {"name": "it", "version": "0"}
            }}),
        )
    })
    .await;
    assert_eq!(res.status(), 200);
    res.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string()
}

/// Instances `desk-a` and `desk-b`, each with its own connection to `redis`.
async fn two_instances(redis: &SharedRedis) -> (TestServer, TestServer) {
    let store = || async { RedisSessionStore::connect(redis.config()).await.unwrap() };
    (
        instance("desk-a", store().await).await,
        instance("desk-b", store().await).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_opened_on_one_instance_is_served_by_another() {
    served_by_another_on(SharedRedis::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_session_opened_on_one_instance_is_served_by_another() {
    served_by_another_on(SharedRedis::cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_a_session_opened_on_one_instance_is_served_by_another() {
    served_by_another_on(SharedRedis::sentinel()).await;
}

async fn served_by_another_on(redis: SharedRedis) {
    let (a, b) = two_instances(&redis).await;
    let c = http();

    let sid = initialize(&c, &a.mcp, json!({"elicitation": {}})).await;
    let res = post(
        &c,
        &a.mcp,
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(res.status(), 202);

    // The record is in Redis, held by A (the write may land just after the answer).
    let key = format!("mcp:session:{sid}");
    eventually_async("A stored the session", Duration::from_secs(3), || {
        let v = redis.cli(&["GET", &key]);
        async move { v.contains("\"nodeId\":\"desk-a\"") }
    })
    .await;

    // B serves it.
    let res = send_retrying(|| {
        post(
            &c,
            &b.mcp,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "hello", "arguments": {}}}),
        )
    })
    .await;
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    assert!(text.contains("Hello!"), "{text}");
    let stored: Value = serde_json::from_str(&redis.cli(&["GET", &key])).unwrap();
    assert_eq!(
        stored["session"]["nodeId"], "desk-b",
        "B wrote it back naming itself"
    );
    assert_eq!(stored["clientCapabilities"], json!({"elicitation": {}}));
    // Outside distributed mode nothing indexes sessions by holder (nothing would prune it).
    assert_eq!(redis.keys("mcp:node:*"), "");

    // DELETE on A ends it in Redis; B then answers `session expired`.
    let res = c
        .delete(&a.mcp)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", LATEST)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    assert_eq!(redis.cli(&["EXISTS", &key]), "0");
    let res = post(
        &c,
        &b.mcp,
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "hello", "arguments": {}}}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(res.status(), 404);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32001, "{body}");
    assert_eq!(body["error"]["message"], "session expired");
}

/// An instance whose stores come from its configuration (`redis.url`): sessions and SSE
/// events in Redis, as a binary sets them up.
async fn configured_instance(machine: &str, redis: &SharedRedis) -> TestServer {
    configured_instance_with(machine, redis, |_| {}).await
}

async fn configured_instance_with(
    machine: &str,
    redis: &SharedRedis,
    tweak: impl FnOnce(&mut Config),
) -> TestServer {
    let redis_env = redis.env();
    let mut env = vec![("MCP_SESSION_SECRET", SECRET)];
    env.extend(redis_env.iter().map(|(var, value)| (*var, value.as_str())));
    let cfg = config_from(&env, |c| {
        c.machine_id = Some(machine.into());
        tweak(c);
    });
    let builder = Server::builder("redis-it", "1.0.0").tool(
        tool("count")
            .description("Counts to 10 with progress")
            .handler(|_: NoArgs, ctx| async move {
                for i in 0..10 {
                    ctx.progress(i as f64, Some(10.0), None);
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
                Ok("counted")
            }),
    );
    serve(builder, cfg).await
}

/// Opens a session with `initialize`; returns its id.
async fn open_session(c: &reqwest::Client, url: &str) -> String {
    let res = post(
        c,
        url,
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}}),
    )
    .send()
    .await
    .unwrap();
    res.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string()
}

/// `GET` with `Last-Event-ID`: resumes a session's stream after `last`.
async fn resume(c: &reqwest::Client, url: &str, sid: &str, last: &str) -> reqwest::Response {
    c.get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", sid)
        .header("mcp-protocol-version", LATEST)
        .header("last-event-id", last)
        .send()
        .await
        .unwrap()
}

/// Reads SSE events `(id, data)` until `n` events were read or the stream ended.
async fn read_events(res: reqwest::Response, n: usize) -> Vec<(String, String)> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    let mut buf = String::new();
    let mut body = res.bytes_stream();
    while out.len() < n {
        let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(5), body.next()).await
        else {
            break;
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let id = frame
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .map(String::from);
            let data = frame
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("")
                .to_string();
            if let Some(id) = id {
                out.push((id, data));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_cut_on_one_instance_is_resumed_on_another() {
    resumed_on_another_on(SharedRedis::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_an_sse_stream_cut_on_one_instance_is_resumed_on_another() {
    resumed_on_another_on(SharedRedis::cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_an_sse_stream_cut_on_one_instance_is_resumed_on_another() {
    resumed_on_another_on(SharedRedis::sentinel()).await;
}

async fn resumed_on_another_on(redis: SharedRedis) {
    let a = configured_instance("desk-a", &redis).await;
    let b = configured_instance("desk-b", &redis).await;
    let c = http();
    let sid = open_session(&c, &a.mcp).await;

    let res = post(
        &c,
        &a.mcp,
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
               "params": {"name": "count", "arguments": {}, "_meta": {"progressToken": "p"}}}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    // The priming event and the first three progress notifications, then the cut.
    let first = read_events(res, 4).await;
    assert_eq!(first.len(), 4, "{first:?}");
    assert!(first[0].1.is_empty(), "priming event first: {first:?}");
    let last_id = first.last().unwrap().0.clone();

    // Resume on B, which never held the session.
    let res = resume(&c, &b.mcp, &sid, &last_id).await;
    assert_eq!(res.status(), 200);
    let rest = read_events(res, 100).await;
    let mut progress = Vec::new();
    let mut results = 0;
    for (_, data) in first
        .iter()
        .chain(rest.iter())
        .filter(|(_, d)| !d.is_empty())
    {
        let v: Value = serde_json::from_str(data).unwrap();
        if v["method"] == "notifications/progress" {
            progress.push(v["params"]["progress"].as_f64().unwrap() as u32);
        } else if v["id"] == 5 {
            assert_eq!(v["result"]["content"][0]["text"], "counted");
            results += 1;
        }
    }
    assert_eq!(
        progress,
        (0..10).collect::<Vec<_>>(),
        "every event exactly once, in order"
    );
    assert_eq!(results, 1, "one answer");
    // The events live in a Redis stream scoped to the session.
    let keys = redis.keys(&format!("mcp:events:{{{sid}}}*"));
    assert!(keys.contains(&format!("mcp:events:{{{sid}}}:")), "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_copy_idles_out_leaves_the_shared_streams_alone() {
    let redis = SharedRedis::single();
    let a = configured_instance("desk-a", &redis).await;
    // B forgets sessions it has not used for a second.
    let b = configured_instance_with("desk-b", &redis, |c| c.sessions.idle_ttl_ms = 1000).await;
    let c = http();
    let sid = open_session(&c, &a.mcp).await;
    let res = post(
        &c,
        &a.mcp,
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
               "params": {"name": "count", "arguments": {}, "_meta": {"progressToken": "p"}}}),
    )
    .send()
    .await
    .unwrap();
    let all = read_events(res, 100).await;
    let first = all[1].0.clone();
    // B serves the session once (a resumption), then lets its copy idle out.
    let res = resume(&c, &b.mcp, &sid, &first).await;
    assert_eq!(res.status(), 200);
    let _ = read_events(res, 100).await;
    let pattern = format!("mcp:events:{{{sid}}}*");
    assert!(!redis.cli(&["KEYS", &pattern]).trim().is_empty());
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(
        !redis.cli(&["KEYS", &pattern]).trim().is_empty(),
        "B dropping its idle copy must not delete the streams A still serves"
    );
    // A still resumes from the start of the stream.
    let res = resume(&c, &a.mcp, &sid, &first).await;
    assert_eq!(res.status(), 200);
    assert!(read_events(res, 100).await.len() >= 10);
}

/// Client-side caching: once Redis confirmed a held session's record and tracks it, calls on the
/// session run no Redis command at all; a DELETE on another instance is still seen by the
/// holder's very next request (Redis pushes the invalidation), and so is a record that another
/// connection deleted behind everyone's back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_session_costs_no_redis_command_and_still_sees_a_delete_elsewhere() {
    held_costs_nothing_on(SharedRedis::single()).await;
}

/// The same on a three-master cluster, where the holder tracks each record on the connection
/// to the master that serves its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_held_session_costs_no_redis_command_and_still_sees_a_delete_elsewhere() {
    held_costs_nothing_on(SharedRedis::cluster()).await;
}

async fn held_costs_nothing_on(redis: SharedRedis) {
    let (a, b) = two_instances(&redis).await;
    let c = http();
    let open = |url: String| {
        let c = c.clone();
        async move { initialize(&c, &url, json!({})).await }
    };
    let call = |url: String, sid: String, id: u64| {
        let c = c.clone();
        async move {
            post(
                &c,
                &url,
                Some(&sid),
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "hello", "arguments": {}}}),
            )
            .send()
            .await
            .unwrap()
        }
    };
    let sid = open(a.mcp.clone()).await;
    // A call checks the record, and once A's tracking connection is up (it connects in the
    // background as A starts), Redis tracks it for A: from then on a call runs no command.
    let began = Instant::now();
    loop {
        redis.reset_stats();
        assert_eq!(call(a.mcp.clone(), sid.clone(), 1).await.status(), 200);
        assert_eq!(call(a.mcp.clone(), sid.clone(), 2).await.status(), 200);
        if redis.commands_run() == 0 {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "calls on a held session still run Redis commands after 5 s:\n{}",
            redis.cli(&["INFO", "commandstats"])
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    redis.reset_stats();
    for i in 0..50 {
        let res = call(a.mcp.clone(), sid.clone(), 10 + i).await;
        assert_eq!(res.status(), 200);
    }
    let stats = redis.cli(&["INFO", "commandstats"]);
    assert_eq!(
        redis.commands_run(),
        0,
        "50 calls on a held, tracked session ran Redis commands:\n{stats}"
    );

    // A DELETE sent to B (which does not hold it) reaches A's next request.
    let res = c
        .delete(&b.mcp)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", LATEST)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    // Redis pushes the invalidation to A before it answers B, but A reads it on its tracking
    // connection's own task: on a starved machine a request may get in first. Seen within a
    // second at worst (about a millisecond when the machine is idle), and never forgotten.
    let began = std::time::Instant::now();
    let res = loop {
        let res = call(a.mcp.clone(), sid.clone(), 99).await;
        if res.status() != 200 || began.elapsed() > Duration::from_secs(1) {
            break res;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(res.status(), 404, "A saw the DELETE made on B");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["message"], "session expired");

    // A record deleted by hand (another connection) is seen the same way.
    let sid = open(a.mcp.clone()).await;
    assert_eq!(call(a.mcp.clone(), sid.clone(), 1).await.status(), 200);
    assert_eq!(call(a.mcp.clone(), sid.clone(), 2).await.status(), 200);
    redis.cli(&["DEL", &format!("mcp:session:{sid}")]);
    let began = std::time::Instant::now();
    let status = loop {
        let status = call(a.mcp.clone(), sid.clone(), 3).await.status();
        if status != 200 || began.elapsed() > Duration::from_secs(1) {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(status, 404, "A saw the record deleted by hand");
}

/// Issue 36 (gap 10): a DELETE takes its session out of the holder's index with the record, in
/// the same pipeline. Before, an `initialize`/`DELETE` loop left one index entry per session
/// until the heartbeat pruned it a session TTL later: the index grew with the loop, not with the
/// sessions alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_index_holds_only_live_sessions_through_an_initialize_delete_loop() {
    index_through_a_loop_on(SharedRedis::single()).await;
}

/// The same on a cluster, where the record and the index are in different slots (two commands
/// sent together).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_node_index_holds_only_live_sessions_through_an_initialize_delete_loop() {
    index_through_a_loop_on(SharedRedis::cluster()).await;
}

async fn index_through_a_loop_on(redis: SharedRedis) {
    let a = configured_instance_with("desk-a", &redis, |c| {
        c.deployment_mode = fleetmcp::config::DeploymentMode::Distributed;
    })
    .await;
    let c = http();
    let index = "mcp:node:desk-a:sessions:0";
    let zcard = || redis.cli(&["ZCARD", index]).trim().parse::<u64>().unwrap();
    let mut kept = Vec::new();
    for _ in 0..3 {
        kept.push(open_session(&c, &a.mcp).await);
    }
    assert_eq!(zcard(), 3, "distributed mode indexes each new session");
    const LOOPS: usize = 500;
    for i in 0..LOOPS {
        let sid = open_session(&c, &a.mcp).await;
        let res = c
            .delete(&a.mcp)
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", LATEST)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 204, "DELETE {i}");
    }
    assert_eq!(
        zcard(),
        3,
        "after {LOOPS} initialize/DELETE, the index holds the live sessions only"
    );
    let members = redis.cli(&["ZRANGE", index, "0", "-1"]);
    for sid in &kept {
        assert!(members.contains(sid.as_str()), "{sid} not in {members}");
    }
}

/// Issue 36 (gap 7): the changes an instance publishes to its fleet go through one worker fed by
/// a bounded queue. Before, each change was a task of its own waiting on Redis: a burst while
/// Redis did not answer made one task per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_changes_while_redis_is_paused_makes_no_task_per_change() {
    let mut redis = SharedRedis::single();
    let a = configured_instance_with("desk-a", &redis, |c| {
        c.deployment_mode = fleetmcp::config::DeploymentMode::Distributed;
        // Long enough that a command waiting on the paused server outlives the burst.
        c.redis
            .as_mut()
            .expect("redis configured")
            .command_timeout_ms = 10_000;
    })
    .await;
    let c = http();
    open_session(&c, &a.mcp).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let SharedRedis::Single(server) = &mut redis else {
        unreachable!("a single server")
    };
    server.pause();
    let before = metrics.num_alive_tasks();
    const BURST: usize = 5_000;
    for i in 0..BURST {
        a.handle
            .notify_resource_updated(&format!("file:///tickets/{i}"))
            .await;
    }
    let grown = metrics.num_alive_tasks().saturating_sub(before);
    eprintln!("tasks grown by {grown} after a burst of {BURST}");
    server.resume();
    assert!(
        grown < 100,
        "{grown} more tasks after a burst of {BURST} changes with Redis paused"
    );
}
