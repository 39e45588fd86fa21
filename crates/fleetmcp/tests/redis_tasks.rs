//! The Redis task store against a real `redis-server`: the key layout and TTLs, a task's end
//! being final, the compare-and-set that ends an orphaned task, the per-session bound, the
//! orphan scanner's entry point, the cancel signal, and a paused Redis; and 2025-11-25 session
//! tasks followed and cancelled through a second in-process instance sharing the Redis.

mod support;
mod support_redis;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fleetmcp::config::RedisConfig;
use fleetmcp::internals::{
    Executor, RedisTaskStore, TaskLimits, TaskRecord, TaskStatus, TaskStore, TaskStoreError,
};
use fleetmcp::redis_conn::RedisConn;
use fleetmcp::{NoArgs, Server, TaskSupport, tool};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use support::{Client, SECRET, TestServer, config_from, serve, within};
use support_redis::{RedisServer, SharedRedis};

fn limits(per_owner: usize) -> TaskLimits {
    TaskLimits {
        max_tasks_per_owner: per_owner,
        ..TaskLimits::default()
    }
}

async fn store_on(redis: &RedisServer, per_owner: usize) -> RedisTaskStore {
    let conn = RedisConn::connect(RedisConfig::from_url(redis.url()))
        .await
        .expect("connects");
    RedisTaskStore::new(conn, "mcp:", limits(per_owner))
}

async fn store_on_shared(redis: &SharedRedis, per_owner: usize) -> RedisTaskStore {
    let conn = RedisConn::connect(redis.config()).await.expect("connects");
    RedisTaskStore::new(conn, "mcp:", limits(per_owner))
}

/// The key of session `s`'s task `id`: the contract's, with the session as a hash tag on a
/// cluster.
fn session_task_key(redis: &SharedRedis, s: &str, id: &str) -> String {
    if redis.is_cluster() {
        format!("mcp:task:records:{{{s}}}:{id}")
    } else {
        format!("mcp:task:records:{s}:{id}")
    }
}

fn rec(id: &str, owner: Option<&str>, node: Option<(&str, u64)>) -> TaskRecord {
    TaskRecord {
        task_id: id.into(),
        status: TaskStatus::Working,
        created_at: format!("2026-01-01T00:00:00.{:0>3}Z", id.len()),
        last_updated_at: "2026-01-01T00:00:00.000Z".into(),
        ttl_ms: 60_000,
        poll_interval_ms: 500,
        result: None,
        error: None,
        input_requests: Map::new(),
        owner: owner.map(Into::into),
        executor: node.map(|(n, at)| Executor {
            machine_id: n.into(),
            spawned_at: at,
        }),
        principal: None,
    }
}

fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis.cli(&["PTTL", key]).parse().unwrap_or(-3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_use_the_contract_layout_and_live_their_ttl() {
    let redis = RedisServer::start();
    let store = store_on(&redis, 100).await;
    let session_task = rec("t1", Some("sess"), Some(("node-a", 10)));
    let free_task = rec("t2", None, Some(("node-a", 11)));
    store.create(&session_task).await.unwrap();
    store.create(&free_task).await.unwrap();

    // The contract's key for a session's task; an empty session segment for a task of none.
    let raw = redis.cli(&["GET", "mcp:task:records:sess:t1"]);
    let stored: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(
        stored["executor"],
        json!({"nodeId": "node-a", "spawnedAt": 10})
    );
    assert_eq!(stored["status"], "working");
    assert!(
        redis
            .cli(&["GET", "mcp:task:records::t2"])
            .contains("\"t2\"")
    );
    let ttl = pttl(&redis, "mcp:task:records:sess:t1");
    assert!(ttl > 55_000 && ttl <= 60_000, "PX ttlMs: {ttl}");
    // Indexes: the session's tasks, the executor's tasks not ended.
    assert_eq!(redis.cli(&["ZCARD", "mcp:task:session:sess"]), "1");
    assert_eq!(redis.cli(&["SCARD", "mcp:task:executor:node-a"]), "2");

    // Found by id alone (no session) and under its session.
    assert_eq!(
        store.get(None, "t2").await.unwrap(),
        Some(free_task.clone())
    );
    assert_eq!(
        store.get(Some("sess"), "t1").await.unwrap(),
        Some(session_task.clone())
    );
    assert_eq!(
        store.get(None, "t1").await.unwrap(),
        None,
        "filed under its session"
    );
    assert_eq!(store.get(None, "nope").await.unwrap(), None);

    // An update keeps the record's expiry (KEEPTTL), it does not extend it.
    redis.cli(&["PEXPIRE", "mcp:task:records:sess:t1", "5000"]);
    let mut parked = session_task.clone();
    parked.status = TaskStatus::InputRequired;
    parked
        .input_requests
        .insert("q".into(), json!({"method": "elicitation/create"}));
    store.put(&parked).await.unwrap();
    assert_eq!(store.get(Some("sess"), "t1").await.unwrap(), Some(parked));
    let ttl = pttl(&redis, "mcp:task:records:sess:t1");
    assert!(ttl > 0 && ttl <= 5000, "kept: {ttl}");

    // Ending removes the task from its executor's index.
    let mut done = free_task.clone();
    done.status = TaskStatus::Completed;
    done.result = Some(json!({"content": []}));
    store.put(&done).await.unwrap();
    assert_eq!(redis.cli(&["SCARD", "mcp:task:executor:node-a"]), "1");

    // A write to a record that expired does not bring it back (with no TTL).
    redis.cli(&["DEL", "mcp:task:records::t2"]);
    store.put(&done).await.unwrap();
    assert_eq!(redis.cli(&["EXISTS", "mcp:task:records::t2"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_reads_a_sessions_live_tasks_oldest_first() {
    let redis = RedisServer::start();
    let store = store_on(&redis, 100).await;
    // `created_at` grows with the id's length (see `rec`).
    for id in ["ccc", "a", "bb"] {
        store.create(&rec(id, Some("s"), None)).await.unwrap();
    }
    store.create(&rec("other", Some("t"), None)).await.unwrap();
    let ids: Vec<String> = store
        .list("s")
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.task_id)
        .collect();
    assert_eq!(ids, ["a", "bb", "ccc"]);
    // An expired record drops out of the list.
    redis.cli(&["DEL", "mcp:task:records:s:bb"]);
    assert_eq!(store.list("s").await.unwrap().len(), 2);
    assert!(store.list("nobody").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_task_is_never_rewritten() {
    let redis = RedisServer::start();
    let store = store_on(&redis, 100).await;
    let working = rec("t", None, Some(("node-a", 1)));
    store.create(&working).await.unwrap();
    let mut cancelled = working.clone();
    cancelled.status = TaskStatus::Cancelled;
    store.put(&cancelled).await.unwrap();
    // The executor's late writes: its result, or a question.
    let mut completed = working.clone();
    completed.status = TaskStatus::Completed;
    completed.result = Some(json!({"content": [{"type": "text", "text": "late"}]}));
    store.put(&completed).await.unwrap();
    let mut parked = working.clone();
    parked.status = TaskStatus::InputRequired;
    store.put(&parked).await.unwrap();
    assert_eq!(store.get(None, "t").await.unwrap(), Some(cancelled));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_if_unchanged_is_a_compare_and_set() {
    let redis = RedisServer::start();
    let store = store_on(&redis, 100).await;
    let seen = rec("t", None, Some(("node-a", 1)));
    store.create(&seen).await.unwrap();
    let mut failed = seen.clone();
    failed.status = TaskStatus::Failed;
    failed.error = Some(json!({"code": -32603, "message": "gone"}));
    failed.last_updated_at = "2026-01-01T00:00:09.000Z".into();

    // The executor wrote in between (a newer lastUpdatedAt): refused.
    let mut moved = seen.clone();
    moved.status = TaskStatus::InputRequired;
    moved.last_updated_at = "2026-01-01T00:00:05.000Z".into();
    store.put(&moved).await.unwrap();
    assert!(!store.replace_if_unchanged(&seen, &failed).await.unwrap());
    assert_eq!(store.get(None, "t").await.unwrap(), Some(moved.clone()));

    // Unchanged since read: written.
    assert!(store.replace_if_unchanged(&moved, &failed).await.unwrap());
    assert_eq!(store.get(None, "t").await.unwrap(), Some(failed.clone()));

    // Ended: never replaced, even by a reader that saw the same record.
    let mut again = failed.clone();
    again.error = Some(json!({"code": -32603, "message": "other"}));
    assert!(!store.replace_if_unchanged(&failed, &again).await.unwrap());
    assert_eq!(store.get(None, "t").await.unwrap(), Some(failed));

    // A different executor than the one seen: refused.
    let other = rec("u", None, Some(("node-b", 1)));
    store.create(&other).await.unwrap();
    let mut claimed = other.clone();
    claimed.executor = Some(Executor {
        machine_id: "node-a".into(),
        spawned_at: 1,
    });
    let mut next = claimed.clone();
    next.status = TaskStatus::Failed;
    assert!(!store.replace_if_unchanged(&claimed, &next).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_session_drops_its_oldest_ended_task_and_never_a_working_one() {
    full_session_on(SharedRedis::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_full_session_drops_its_oldest_ended_task_and_never_a_working_one() {
    full_session_on(SharedRedis::cluster()).await;
}

async fn full_session_on(redis: SharedRedis) {
    let store = store_on_shared(&redis, 2).await;
    store.create(&rec("a", Some("s"), None)).await.unwrap();
    store.create(&rec("b", Some("s"), None)).await.unwrap();
    let refused = store.create(&rec("c", Some("s"), None)).await;
    assert!(
        matches!(&refused, Err(TaskStoreError::Full(f)) if f.limit == "tasks.max_tasks_per_owner" && f.max == 2),
        "{refused:?}"
    );
    assert_eq!(
        redis.cli(&["EXISTS", &session_task_key(&redis, "s", "c")]),
        "0"
    );
    assert_eq!(
        redis.cli(&["EXISTS", &session_task_key(&redis, "s", "a")]),
        "1"
    );
    // Another session is not affected; a task of no session has no such bound.
    store.create(&rec("x", Some("t"), None)).await.unwrap();
    for i in 0..3 {
        store
            .create(&rec(&format!("free{i}"), None, None))
            .await
            .unwrap();
    }
    // b ends: room is made by dropping it (the oldest ended), a stays.
    let mut b = rec("b", Some("s"), None);
    b.status = TaskStatus::Completed;
    store.put(&b).await.unwrap();
    store.create(&rec("c", Some("s"), None)).await.unwrap();
    assert_eq!(store.get(Some("s"), "b").await.unwrap(), None);
    assert!(store.get(Some("s"), "a").await.unwrap().is_some());
    assert_eq!(store.list("s").await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_tasks_of_ends_a_dead_executors_tasks_and_nothing_else() {
    fail_tasks_of_on(SharedRedis::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_fail_tasks_of_ends_a_dead_executors_tasks_and_nothing_else() {
    fail_tasks_of_on(SharedRedis::cluster()).await;
}

async fn fail_tasks_of_on(redis: SharedRedis) {
    let store = store_on_shared(&redis, 100).await;
    let old = rec("old", None, Some(("node-x", 100)));
    let parked = {
        let mut r = rec("parked", Some("s"), Some(("node-x", 150)));
        r.status = TaskStatus::InputRequired;
        r
    };
    let newer = rec("newer", None, Some(("node-x", 500)));
    let elsewhere = rec("elsewhere", None, Some(("node-y", 100)));
    let ended = rec("ended", None, Some(("node-x", 100)));
    for r in [&old, &parked, &newer, &elsewhere, &ended] {
        store.create(r).await.unwrap();
    }
    let mut completed = ended.clone();
    completed.status = TaskStatus::Completed;
    completed.result = Some(json!({"content": []}));
    store.put(&completed).await.unwrap();

    let error = json!({"code": -32603, "message": fleetmcp::EXECUTOR_GONE_MESSAGE});
    // node-x was found gone at 400: tasks a newer process under that id started since stay.
    assert_eq!(store.fail_tasks_of("node-x", 400, &error).await, 2);
    for (owner, id) in [(None, "old"), (Some("s"), "parked")] {
        let r = store.get(owner, id).await.unwrap().unwrap();
        assert_eq!(r.status, TaskStatus::Failed, "{id}");
        assert_eq!(r.error.as_ref(), Some(&error), "{id}");
        assert!(r.input_requests.is_empty());
    }
    assert_eq!(
        store.get(None, "newer").await.unwrap().unwrap().status,
        TaskStatus::Working
    );
    assert_eq!(
        store.get(None, "elsewhere").await.unwrap().unwrap().status,
        TaskStatus::Working
    );
    assert_eq!(store.get(None, "ended").await.unwrap(), Some(completed));
    // Only the newer task is left to scan; a second call ends nothing.
    assert_eq!(
        redis.cli(&["SMEMBERS", "mcp:task:executor:node-x"]),
        "mcp:task:records::newer"
    );
    assert_eq!(store.fail_tasks_of("node-x", 400, &error).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_cancel_publishes_1_on_the_tasks_cancel_channel() {
    let redis = RedisServer::start();
    let store = store_on(&redis, 100).await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe("mcp:task:cancel:t9").await.unwrap();
    let mut messages = pubsub.into_on_message();
    store.signal_cancel("t9").await;
    let m = tokio::time::timeout(Duration::from_secs(3), messages.next())
        .await
        .expect("a message within 3 s")
        .expect("the subscription is open");
    assert_eq!(m.get_channel_name(), "mcp:task:cancel:t9");
    assert_eq!(m.get_payload::<String>().unwrap(), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_bounds_every_call() {
    let mut redis = RedisServer::start();
    let mut cfg = RedisConfig::from_url(redis.url());
    cfg.command_timeout_ms = 300;
    let conn = RedisConn::connect(cfg).await.unwrap();
    let store = RedisTaskStore::new(conn, "mcp:", limits(100));
    store.create(&rec("t", None, None)).await.unwrap();
    redis.pause();
    let began = Instant::now();
    let created = store.create(&rec("u", None, None)).await;
    assert!(
        matches!(created, Err(TaskStoreError::Unavailable(_))),
        "{created:?}"
    );
    // Every call says the store did not answer, never "no such task" or "written".
    let read = store.get(None, "t").await;
    assert!(
        matches!(read, Err(TaskStoreError::Unavailable(_))),
        "{read:?}"
    );
    let written = store.put(&rec("t", None, None)).await;
    assert!(
        matches!(written, Err(TaskStoreError::Unavailable(_))),
        "{written:?}"
    );
    let listed = store.list("s").await;
    assert!(
        matches!(listed, Err(TaskStoreError::Unavailable(_))),
        "{listed:?}"
    );
    let took = began.elapsed();
    assert!(took < Duration::from_secs(3), "four calls took {took:?}");
    redis.resume();
}

/// Dropped handlers of `forever`, per instance.
#[derive(Default)]
struct Stopped(AtomicUsize);

struct CountDrop(Arc<Stopped>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// An instance whose stores come from its configuration (`REDIS_URL`, default mode: sessions
/// move between instances by recreation), with a slow task tool and one that runs until
/// cancelled.
async fn instance(machine: &str, redis: &SharedRedis, stopped: Arc<Stopped>) -> TestServer {
    let redis_env = redis.env();
    let mut env = vec![("MCP_SESSION_SECRET", SECRET)];
    env.extend(redis_env.iter().map(|(var, value)| (*var, value.as_str())));
    let cfg = config_from(&env, |c| c.machine_id = Some(machine.into()));
    let builder = Server::builder("redis-tasks", "1.0.0")
        .tool(
            tool("slow")
                .description("Half a second, as a task")
                .task_support(TaskSupport::Optional)
                .handler(|_: NoArgs, _| async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok("slow done")
                }),
        )
        .tool(
            tool("forever")
                .description("Runs until cancelled")
                .task_support(TaskSupport::Required)
                .handler(move |_: NoArgs, _| {
                    let guard = CountDrop(stopped.clone());
                    async move {
                        let _guard = guard;
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok("never")
                    }
                }),
        );
    serve(builder, cfg).await
}

async fn call(c: &Client, method: &str, params: Value) -> Value {
    let res = c.request_with_id(json!(7), method, params).await;
    within("answer body", res.json()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_tasks_started_on_a_are_read_and_cancelled_through_b() {
    through_b_on(SharedRedis::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_session_tasks_started_on_a_are_read_and_cancelled_through_b() {
    through_b_on(SharedRedis::cluster()).await;
}

async fn through_b_on(redis: SharedRedis) {
    let (stopped_a, stopped_b) = (Arc::new(Stopped::default()), Arc::new(Stopped::default()));
    let a = instance("node-a", &redis, stopped_a.clone()).await;
    let b = instance("node-b", &redis, stopped_b.clone()).await;
    let mut on_a = Client::bare(&a.mcp, "2025-11-25");
    on_a.initialize(json!({})).await;
    let v = call(
        &on_a,
        "tools/call",
        json!({"name": "slow", "arguments": {}, "task": {}}),
    )
    .await;
    let id = v["result"]["task"]["taskId"].as_str().unwrap().to_string();
    let sid = on_a.session_id().to_string();
    assert!(
        redis
            .cli(&["EXISTS", &session_task_key(&redis, &sid, &id)])
            .ends_with('1'),
        "filed under its session"
    );

    // The same session on B (recreated there from the store).
    let mut on_b = Client::bare(&b.mcp, "2025-11-25");
    on_b.session = Some(sid.clone());
    let v = call(&on_b, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(v["result"]["status"], "working", "{v}");
    let v = call(&on_b, "tasks/list", json!({})).await;
    assert_eq!(v["result"]["tasks"][0]["taskId"], id.as_str(), "{v}");
    let v = call(&on_b, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(v["result"]["content"][0]["text"], "slow done", "{v}");

    // A task running on A, cancelled through B: A's handler is dropped.
    let v = call(
        &on_a,
        "tools/call",
        json!({"name": "forever", "arguments": {}, "task": {}}),
    )
    .await;
    let id2 = v["result"]["task"]["taskId"].as_str().unwrap().to_string();
    let v = call(&on_b, "tasks/cancel", json!({"taskId": id2})).await;
    assert_eq!(v["result"]["status"], "cancelled", "{v}");
    let deadline = Instant::now() + Duration::from_secs(3);
    while stopped_a.0.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "A's handler still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stopped_b.0.load(Ordering::SeqCst), 0, "it never ran on B");
    let v = call(&on_a, "tasks/get", json!({"taskId": id2})).await;
    assert_eq!(v["result"]["status"], "cancelled", "{v}");
}
