//! Background tasks across a fleet: two `everything` processes in distributed mode sharing a real
//! redis-server, driven through the 2026-07-28 tasks extension (stateless: any instance may
//! answer any request). A task started on A is read on B, cancelled through B (A's handler
//! stops), and, when A is SIGKILLed, ends on B as failed with a clear message instead of staying
//! `working`.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::Instance;
use support_redis::RedisServer;

const MODERN: &str = "2026-07-28";
/// `fleetmcp::EXECUTOR_GONE_MESSAGE`, as clients read it.
const EXECUTOR_GONE: &str = "The instance running this task stopped before it finished";

/// An instance of `everything` in distributed mode with a short heartbeat (300 ms, 1.2 s
/// lifetime), so that a crashed instance is known gone within about a second.
fn start(machine: &str, redis: &RedisServer) -> Instance {
    let url = redis.url();
    Instance::start(
        env!("CARGO_BIN_EXE_everything"),
        &[
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("FRONTMCP_BIND_ADDRESS", "loopback"),
            ("MACHINE_ID", machine),
            ("REDIS_URL", url.as_str()),
            ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
            ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1200"),
        ],
    )
}

/// One 2026-07-28 request declaring the tasks extension; the JSON-RPC answer.
async fn modern(http: &reqwest::Client, url: &str, method: &str, params: Value) -> Value {
    modern_http(http, url, method, params).await.2
}

/// [`modern`], with the HTTP status and `Retry-After` of the answer.
async fn modern_http(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    mut params: Value,
) -> (u16, Option<String>, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
    });
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
        .map(String::from);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let res = support::modern_post(http, url, method, name.as_deref(), &body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} to {url}: {e}"));
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let body = res
        .json()
        .await
        .unwrap_or_else(|e| panic!("{method} answer ({status}): {e}"));
    (status, retry, body)
}

/// Starts `tool` as a task through `url`; its id.
async fn start_task(http: &reqwest::Client, url: &str, tool: &str, args: Value) -> String {
    let v = modern(
        http,
        url,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    assert_eq!(v["result"]["status"], "working", "{v}");
    v["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no taskId: {v}"))
        .to_string()
}

async fn get(http: &reqwest::Client, url: &str, task: &str) -> Value {
    let v = modern(http, url, "tasks/get", json!({"taskId": task})).await;
    assert!(v.get("error").is_none(), "tasks/get failed: {v}");
    v["result"].clone()
}

/// The `test://stats` counters of one instance (test_cancellable_task's handler runs there).
async fn stats(http: &reqwest::Client, url: &str) -> Value {
    let v = modern(http, url, "resources/read", json!({"uri": "test://stats"})).await;
    let text = v["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no stats: {v}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("stats {text}: {e}"))
}

/// Polls `tasks/get` through `url` every 50 ms until the status is `status`, failing after
/// `limit`; the record then.
async fn wait_status(
    http: &reqwest::Client,
    url: &str,
    task: &str,
    status: &str,
    limit: Duration,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let r = get(http, url, task).await;
        if r["status"] == status {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "task {task} not {status} within {limit:?}: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_started_on_a_is_followed_on_b_until_its_result() {
    let redis = RedisServer::start();
    let a = start("node-a", &redis);
    let b = start("node-b", &redis);
    let http = reqwest::Client::new();

    let id = start_task(
        &http,
        &a.mcp_url(),
        "slow_compute",
        json!({"seconds": 1.5, "label": "fleet"}),
    )
    .await;
    // B has never seen the task: it reads the shared record.
    let seen = get(&http, &b.mcp_url(), &id).await;
    assert_eq!(seen["status"], "working", "{seen}");
    assert_eq!(seen["taskId"], id.as_str());
    // The record names its executor, under the contract's prefix (no session: empty segment).
    let raw = redis.cli(&["GET", &format!("mcp:task:records::{id}")]);
    let stored: Value = serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
    assert_eq!(stored["executor"]["nodeId"], "node-a", "{stored}");
    assert!(stored["executor"]["spawnedAt"].is_u64(), "{stored}");
    let ttl: i64 = redis
        .cli(&["PTTL", &format!("mcp:task:records::{id}")])
        .parse()
        .unwrap_or(-3);
    assert!(
        ttl > 3_000_000 && ttl <= 3_600_000,
        "lives ttlMs (1 h): {ttl}"
    );

    let done = wait_status(
        &http,
        &b.mcp_url(),
        &id,
        "completed",
        Duration::from_secs(10),
    )
    .await;
    let text = done["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert_eq!(text, "computed fleet after 1.5s", "{done}");
    // A finished task leaves the executor's index (the orphan scanner's list).
    assert_eq!(redis.cli(&["SCARD", "mcp:task:executor:node-a"]), "0");
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_through_b_stops_the_handler_running_on_a() {
    let redis = RedisServer::start();
    let a = start("node-a", &redis);
    let b = start("node-b", &redis);
    let http = reqwest::Client::new();

    let id = start_task(
        &http,
        &a.mcp_url(),
        "test_cancellable_task",
        json!({"work_ms": 30000}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while stats(&http, &a.mcp_url()).await["started"] != 1 {
        assert!(Instant::now() < deadline, "the handler never started on A");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let v = modern(&http, &b.mcp_url(), "tasks/cancel", json!({"taskId": id})).await;
    assert!(v.get("error").is_none(), "tasks/cancel on B: {v}");
    let r = get(&http, &b.mcp_url(), &id).await;
    assert_eq!(r["status"], "cancelled", "{r}");

    // A's handler was dropped (its guard counts it), well before its 30 s of work.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let s = stats(&http, &a.mcp_url()).await;
        if s["cancelled"] == 1 {
            assert_eq!(s["completed"], 0, "{s}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "A's handler still runs after the cancel: {s}\n{}",
            a.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        a.log()
            .contains("a task was cancelled through another instance"),
        "{}",
        a.log()
    );
    // A, once stopped, did not rewrite the record: both instances say cancelled.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get(&http, &a.mcp_url(), &id).await["status"], "cancelled");
    assert_eq!(get(&http, &b.mcp_url(), &id).await["status"], "cancelled");
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// Instances A and B, and a minute-long task running on A; its id.
async fn long_task_on_a(
    redis: &RedisServer,
    http: &reqwest::Client,
) -> (Instance, Instance, String) {
    let a = start("node-a", redis);
    let b = start("node-b", redis);
    let id = start_task(
        http,
        &a.mcp_url(),
        "test_cancellable_task",
        json!({"work_ms": 60000}),
    )
    .await;
    (a, b, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_instance_is_sigkilled_fails_on_b_with_a_clear_message() {
    let redis = RedisServer::start();
    let http = reqwest::Client::new();
    let (mut a, b, id) = long_task_on_a(&redis, &http).await;
    // Alive executor: B keeps reporting working (the heartbeat is there).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(get(&http, &b.mcp_url(), &id).await["status"], "working");

    assert!(
        a.signal_and_wait("KILL", Duration::from_secs(5)).is_some(),
        "A did not die"
    );
    let killed = Instant::now();
    let r = wait_status(&http, &b.mcp_url(), &id, "failed", Duration::from_secs(4)).await;
    let after = killed.elapsed();
    assert_eq!(r["error"]["message"], EXECUTOR_GONE, "{r}");
    assert_eq!(r["error"]["data"]["executor"], "node-a", "{r}");
    assert!(after < Duration::from_secs(4), "took {after:?}");
    // The failure is in the shared record, not only in B's answer.
    let raw = redis.cli(&["GET", &format!("mcp:task:records::{id}")]);
    assert!(raw.contains("\"status\":\"failed\""), "{raw}");
    assert!(raw.contains(EXECUTOR_GONE), "{raw}");
    b.assert_no_panic_logged();
}

/// Without anyone asking for it, the orphan scanner ends a SIGKILLed instance's running task as
/// failed in the shared record (the scanner's first run comes one heartbeat interval plus the
/// 5 s grace period after B started).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_scanner_fails_a_dead_instances_tasks_unasked() {
    let redis = RedisServer::start();
    let http = reqwest::Client::new();
    let (mut a, b, id) = long_task_on_a(&redis, &http).await;
    let key = format!("mcp:task:records::{id}");
    assert!(redis.cli(&["GET", &key]).contains("\"status\":\"working\""));
    assert!(
        a.signal_and_wait("KILL", Duration::from_secs(5)).is_some(),
        "A did not die"
    );
    let killed = Instant::now();
    loop {
        let raw = redis.cli(&["GET", &key]);
        if raw.contains("\"status\":\"failed\"") {
            assert!(raw.contains(EXECUTOR_GONE), "{raw}");
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "the scanner did not fail the task; record: {raw}\n--- B log ---\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "the scanner failed the dead instance's task {:?} after the kill",
        killed.elapsed()
    );
    b.assert_no_panic_logged();
}

/// The client's answer to a task's question reaches the instance running it wherever it lands:
/// `confirm_delete` runs on A and asks for a confirmation; `tasks/update` sent to B hands the
/// answer to A, whose handler finishes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_update_through_b_answers_the_question_of_a_task_running_on_a() {
    let redis = RedisServer::start();
    let a = start("node-a", &redis);
    let b = start("node-b", &redis);
    let http = reqwest::Client::new();
    let id = start_task(&http, &a.mcp_url(), "confirm_delete", json!({})).await;
    let r = wait_status(
        &http,
        &b.mcp_url(),
        &id,
        "input_required",
        Duration::from_secs(5),
    )
    .await;
    let key = r["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_else(|| panic!("no question: {r}"));
    assert_eq!(key, "confirm", "{r}");
    let v = modern(
        &http,
        &b.mcp_url(),
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
    )
    .await;
    assert!(v.get("error").is_none(), "tasks/update through B: {v}");
    let r = wait_status(
        &http,
        &b.mcp_url(),
        &id,
        "completed",
        Duration::from_secs(5),
    )
    .await;
    assert!(r.to_string().contains("delete: accept"), "{r}");
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// The refusal every request that needs a store that does not answer gets: `503` with
/// `Retry-After: 1`, JSON-RPC `-32000` with `retryAfterMs`.
fn assert_refused_for_the_store(what: &str, (status, retry, v): &(u16, Option<String>, Value)) {
    assert_eq!(*status, 503, "{what}: {v}");
    assert_eq!(retry.as_deref(), Some("1"), "{what}: {v}");
    assert_eq!(v["error"]["code"], -32000, "{what}: {v}");
    assert_eq!(v["error"]["data"]["retryAfterMs"], 1000, "{what}: {v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("task store is unavailable")),
        "{what}: {v}"
    );
}

/// While Redis does not answer (SIGSTOP), a task is neither "unknown" nor silently lost: every
/// task request (`tasks/get`, `tasks/update`, `tasks/cancel` of a task running on another
/// instance) and a new task are refused with `503` and `Retry-After` (RELIABILITY F5, F7;
/// before, `tasks/get` answered `-32602 Unknown task` and a new task `-32603` with `200`).
/// Once Redis answers again the task is there, still working. Then Redis is killed (its port
/// refusing connections, the other kind of outage): refused the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_task_store_is_paused_task_requests_are_refused_with_retry_after() {
    let mut redis = RedisServer::start();
    let http = reqwest::Client::new();
    let (a, b, id) = long_task_on_a(&redis, &http).await;
    redis.pause();
    for url in [a.mcp_url(), b.mcp_url()] {
        let got = modern_http(&http, &url, "tasks/get", json!({"taskId": id})).await;
        assert_refused_for_the_store("tasks/get", &got);
    }
    let cancel = modern_http(&http, &b.mcp_url(), "tasks/cancel", json!({"taskId": id})).await;
    assert_refused_for_the_store("tasks/cancel through B", &cancel);
    let update = modern_http(
        &http,
        &b.mcp_url(),
        "tasks/update",
        json!({"taskId": id, "inputResponses": {}}),
    )
    .await;
    assert_refused_for_the_store("tasks/update through B", &update);
    let create = modern_http(
        &http,
        &a.mcp_url(),
        "tools/call",
        json!({"name": "test_cancellable_task", "arguments": {"work_ms": 100}}),
    )
    .await;
    assert_refused_for_the_store("a new task", &create);
    redis.resume();
    let r = get(&http, &b.mcp_url(), &id).await;
    assert_eq!(r["status"], "working", "{r}");
    // The refused cancel changed nothing: the handler still runs on A.
    assert_eq!(stats(&http, &a.mcp_url()).await["cancelled"], 0);
    // The other kind of outage: Redis gone, its port refusing connections. Refused the same.
    redis.kill();
    let got = modern_http(&http, &b.mcp_url(), "tasks/get", json!({"taskId": id})).await;
    assert_refused_for_the_store("tasks/get with Redis down", &got);
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// Polls `tasks/get` through `url` until the task has ended; fails if it ever reads `failed`.
async fn wait_completed(http: &reqwest::Client, url: &str, task: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (status, _, v) = modern_http(http, url, "tasks/get", json!({"taskId": task})).await;
        if status == 200 {
            let r = &v["result"];
            assert_ne!(r["status"], "failed", "the task failed: {r}");
            if r["status"] == "completed" {
                return r.clone();
            }
        } else {
            assert_eq!(status, 503, "{v}");
        }
        assert!(
            Instant::now() < deadline,
            "task {task} not completed within {limit:?}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A task whose handler finishes while Redis does not answer ends `completed` once Redis is
/// back, with its result (RELIABILITY F6a: the end was dropped, the record stayed `working`,
/// and the instance then failed its own live task as one a previous process left behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_finishes_while_redis_is_paused_ends_completed() {
    let mut redis = RedisServer::start();
    let a = start("node-a", &redis);
    let http = reqwest::Client::new();
    let id = start_task(
        &http,
        &a.mcp_url(),
        "test_cancellable_task",
        json!({"work_ms": 1000}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.pause();
    // The handler ends at about 1 s, its end cannot be stored until the store answers.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(stats(&http, &a.mcp_url()).await["completed"], 1);
    redis.resume();
    wait_completed(&http, &a.mcp_url(), &id, Duration::from_secs(8)).await;
    let raw = redis.cli(&["GET", &format!("mcp:task:records::{id}")]);
    assert!(raw.contains("\"status\":\"completed\""), "{raw}");
    a.assert_no_panic_logged();
}

/// A's link to Redis is cut for 1.5 s (connections refused: its channel subscription drops,
/// its heartbeat key stays) while its task runs; B, polling the task all along, never fails it
/// as orphaned, and it ends `completed` (RELIABILITY F6b: "no subscriber" alone was taken as
/// proof that A was dead, at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_executor_is_cut_off_from_redis_for_a_moment_is_not_failed() {
    let redis = RedisServer::start();
    let proxy = support_redis::CuttableProxy::start(redis.port);
    let slow_beat = [
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "5000"),
    ];
    let via_proxy = proxy.url();
    let direct = redis.url();
    let mut a_env = slow_beat.to_vec();
    a_env.extend([("MACHINE_ID", "node-a"), ("REDIS_URL", via_proxy.as_str())]);
    let mut b_env = slow_beat.to_vec();
    b_env.extend([("MACHINE_ID", "node-b"), ("REDIS_URL", direct.as_str())]);
    let a = Instance::start(env!("CARGO_BIN_EXE_everything"), &a_env);
    let b = Instance::start(env!("CARGO_BIN_EXE_everything"), &b_env);
    let http = reqwest::Client::new();
    let id = start_task(
        &http,
        &a.mcp_url(),
        "test_cancellable_task",
        json!({"work_ms": 3000}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.cut();
    let cut_at = Instant::now();
    while cut_at.elapsed() < Duration::from_millis(1500) {
        let r = get(&http, &b.mcp_url(), &id).await;
        assert_eq!(r["status"], "working", "read on B during the cut: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.restore();
    let r = wait_completed(&http, &b.mcp_url(), &id, Duration::from_secs(10)).await;
    assert!(r["result"].is_object(), "{r}");
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// A is back from an outage that expired its heartbeat and dropped its subscription, and
/// has not beaten or subscribed again yet (here: its key deleted, its subscription killed and
/// refused by an ACL for the moment), when it starts a task; B reads the task at once. B must
/// not take the fresh task for one a dead instance left (the fault harness found one failed
/// 0.3 s after its live executor created it), and the task ends `completed` once A is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_started_just_after_its_executor_is_back_from_an_outage_is_not_failed() {
    let redis = RedisServer::start();
    let user = |rules: &[&str]| {
        let mut args = vec!["ACL", "SETUSER", "desk-a"];
        args.extend_from_slice(rules);
        assert_eq!(redis.cli(&args), "OK");
    };
    user(&["on", ">pw", "~*", "&*", "+@all"]);
    let url = format!("redis://desk-a:pw@127.0.0.1:{}", redis.port);
    // A beats every 1.5 s: without its key, it stays so until its next beat.
    let a = Instance::start(
        env!("CARGO_BIN_EXE_everything"),
        &[
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("FRONTMCP_BIND_ADDRESS", "loopback"),
            ("MACHINE_ID", "node-a"),
            ("REDIS_URL", url.as_str()),
            ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "1500"),
            ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "3000"),
        ],
    );
    let b = start("node-b", &redis);
    let http = reqwest::Client::new();
    let channel = "mcp:ha:notify:node-a";
    user(&["-subscribe", "-psubscribe", "-ssubscribe"]);
    redis.cli(&["CLIENT", "KILL", "USER", "desk-a", "TYPE", "pubsub"]);
    assert_eq!(
        redis.cli(&["PUBSUB", "NUMSUB", channel]),
        format!("{channel}\n0")
    );
    redis.cli(&["DEL", "mcp:ha:heartbeat:node-a"]);
    let id = start_task(
        &http,
        &a.mcp_url(),
        "test_cancellable_task",
        json!({"work_ms": 1500}),
    )
    .await;
    let r = get(&http, &b.mcp_url(), &id).await;
    assert_eq!(r["status"], "working", "read on B at once: {r}");
    // A subscribes again (within a second) and beats; the task lives on and ends.
    user(&["+@all"]);
    wait_completed(&http, &b.mcp_url(), &id, Duration::from_secs(10)).await;
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}
