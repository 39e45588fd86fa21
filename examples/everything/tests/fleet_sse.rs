//! An SSE stream cut on one instance and resumed with `Last-Event-ID` on another: two
//! `everything` processes sharing a real redis-server, every event delivered exactly once.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use support::Instance;
use support_redis::RedisServer;

const VERSION: &str = "2025-11-25";

/// SSE events `(id, data)` until `n` were read, the stream ended, or 10 s passed.
async fn events(res: reqwest::Response, n: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut buf = String::new();
    let mut body = res.bytes_stream();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, body.next()).await else {
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

/// Session-era POSTs to `everything` instances, as one client.
struct Client(reqwest::Client);

impl Client {
    fn new() -> Self {
        Self(reqwest::Client::new())
    }

    /// POSTs `body` to `to` in session `sid` (if any).
    async fn post(&self, to: &str, sid: Option<&str>, body: Value) -> reqwest::Response {
        let mut r = self
            .0
            .post(to)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .body(body.to_string());
        if let Some(s) = sid {
            r = r.header("mcp-session-id", s);
        }
        r.send().await.unwrap()
    }

    /// A new session on `to`: its id.
    async fn open(&self, to: &str) -> String {
        let res = self
            .post(
                to,
                None,
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}}),
            )
            .await;
        res.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_on_a_is_resumed_on_b_with_every_event_once() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = |machine: &'static str| vec![("MACHINE_ID", machine), ("REDIS_URL", url.as_str())];
    let a = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-a"));
    let b = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-b"));
    let client = Client::new();
    let http = &client.0;
    let sid = client.open(&a.mcp_url()).await;

    // A call that reports progress 20 times over a second, on A.
    let res = client.post(
        &a.mcp_url(),
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "test_cancellable", "arguments": {"work_ms": 1000}, "_meta": {"progressToken": "t"}}}),
    ).await;
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let first = events(res, 6).await;
    assert_eq!(
        first.len(),
        6,
        "priming and five progress events: {first:?}"
    );
    assert!(first[0].1.is_empty(), "a priming event first");
    let last = first.last().unwrap().0.clone();

    // The connection is gone; the client comes back through the load balancer, to B.
    let res = http
        .get(b.mcp_url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", VERSION)
        .header("last-event-id", &last)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "B resumes A's stream");
    let rest = events(res, 1000).await;

    let mut progress = Vec::new();
    let mut answers = 0;
    for (_, data) in first
        .iter()
        .chain(rest.iter())
        .filter(|(_, d)| !d.is_empty())
    {
        let v: Value = serde_json::from_str(data).unwrap();
        if v["method"] == "notifications/progress" {
            progress.push(v["params"]["progress"].as_f64().unwrap() as u64);
        } else if v["id"] == 7 {
            assert_eq!(v["result"]["content"][0]["text"], "finished", "{v}");
            answers += 1;
        }
    }
    assert_eq!(
        progress,
        (0..20).collect::<Vec<_>>(),
        "each event exactly once, in order"
    );
    assert_eq!(answers, 1);
    assert!(
        b.log().contains("Recreating transport from stored session"),
        "{}",
        b.log()
    );
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// A call streaming its answer on A while A drains: B takes the session over (A withdrew its
/// heartbeat), then a request for the session reaches A, which finds it lost and drops it. The
/// call A was running when the session moved still ends on A's connection with its answer, and
/// the answer is in the shared store for a client that resumes on B: a session moving never
/// cancels work the old holder admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_running_on_a_holder_that_loses_its_session_still_answers() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = |machine: &'static str| {
        vec![
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("FRONTMCP_BIND_ADDRESS", "loopback"),
            ("MACHINE_ID", machine),
            ("REDIS_URL", url.as_str()),
            ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
            ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1200"),
            ("FLEETMCP_DRAIN_MS", "4000"),
        ]
    };
    let mut a = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-a"));
    let b = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-b"));
    let client = Client::new();
    let http = &client.0;
    let sid = client.open(&a.mcp_url()).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // Held and confirmed on A.
    assert_eq!(
        client
            .post(&a.mcp_url(), Some(&sid), list.clone())
            .await
            .status(),
        200
    );

    // Two seconds of work with progress, on A.
    let res = client.post(
        &a.mcp_url(),
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "test_cancellable", "arguments": {"work_ms": 2000}, "_meta": {"progressToken": "t"}}}),
    ).await;
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let running = tokio::spawn(events(res, 1000));

    // A starts draining: it withdraws from the fleet but still serves what reaches it.
    a.signal("TERM");
    let withdrawn = Instant::now();
    while !a.log().contains("[HA] Services stopped for node node-a") {
        assert!(
            withdrawn.elapsed() < Duration::from_secs(3),
            "A never withdrew: {}",
            a.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The next request through B takes the session over; the one after, through A, finds it
    // lost on A and is relayed to B.
    let on_b = client.post(&b.mcp_url(), Some(&sid), list.clone()).await;
    assert_eq!(on_b.status(), 200, "B took the session over");
    let on_a = client.post(&a.mcp_url(), Some(&sid), list.clone()).await;
    assert_eq!(on_a.status(), 200, "A relays to the new holder");
    assert_eq!(on_a.headers()["x-frontmcp-machine-id"], "node-b");
    assert!(
        a.log().contains("Another node took this session over"),
        "A found the session lost: {}",
        a.log()
    );

    let got = running.await.unwrap();
    let answers: Vec<&String> = got
        .iter()
        .map(|(_, d)| d)
        .filter(|d| d.contains("\"id\":7"))
        .collect();
    assert_eq!(
        answers.len(),
        1,
        "the call A admitted answers on A's connection: {got:?}"
    );
    assert!(answers[0].contains("finished"), "{}", answers[0]);
    let progress = got
        .iter()
        .filter(|(_, d)| d.contains("notifications/progress"))
        .count();
    assert_eq!(progress, 40, "every progress event once: {got:?}");

    // And a client that lost A's connection finds the answer in the shared store, through B.
    let first_id = &got[0].0;
    let res = http
        .get(b.mcp_url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", VERSION)
        .header("last-event-id", first_id)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "B resumes A's stream");
    let rest = events(res, 1000).await;
    assert!(
        rest.iter()
            .any(|(_, d)| d.contains("\"id\":7") && d.contains("finished")),
        "resumed on B: {rest:?}"
    );
    assert!(a.wait_exit(Duration::from_secs(15)).is_some(), "A exits");
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// Two instances serving one session at once (Redis without distributed mode, round robin):
/// each answers its own streamed call, never the other's. Stream ids are counted per instance,
/// so each incarnation of a session counts from its own random base; counted from 1, B's first
/// answer would read A's first answer from the shared store and end there, without its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_serving_one_session_never_answer_on_each_others_streams() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = |machine: &'static str| vec![("MACHINE_ID", machine), ("REDIS_URL", url.as_str())];
    let a = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-a"));
    let b = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-b"));
    let client = Client::new();
    let sid = client.open(&a.mcp_url()).await;
    for (n, to) in [(11, &a), (12, &b), (13, &a), (14, &b)] {
        let res = client.post(
            &to.mcp_url(),
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                   "params": {"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": n}}}),
        ).await;
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        let got = events(res, 1000).await;
        let answers: Vec<Value> = got
            .iter()
            .filter(|(_, d)| !d.is_empty())
            .map(|(_, d)| serde_json::from_str::<Value>(d).unwrap())
            .filter(|v| v.get("id").is_some())
            .collect();
        assert_eq!(answers.len(), 1, "call {n}: one answer, its own: {got:?}");
        assert_eq!(answers[0]["id"], n, "call {n}: {got:?}");
        let tokens: Vec<Value> = got
            .iter()
            .filter(|(_, d)| d.contains("notifications/progress"))
            .map(|(_, d)| serde_json::from_str::<Value>(d).unwrap())
            .map(|v| v["params"]["progressToken"].clone())
            .collect();
        assert_eq!(
            tokens,
            vec![json!(n); 3],
            "call {n}: its own three progress events: {got:?}"
        );
    }
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// Reads `body` until it ends; how long that took, or `None` if it was still open at `limit`.
async fn ends_within(res: reqwest::Response, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut body = res.bytes_stream();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, body.next()).await {
            Err(_) => return None,
            Ok(None | Some(Err(_))) => return Some(start.elapsed()),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// A holder paused for real (SIGSTOP) in the middle of two relayed streams, a POST answer (a
/// long call) and the session's GET stream: B ends both within the heartbeat lifetime (plus
/// one heartbeat interval) of the pause, instead of leaving them open without a byte, so the
/// client resumes with `Last-Event-ID`. The session's id never shows in full in B's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_streams_of_a_paused_holder_end_within_the_heartbeat_lifetime() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = |machine: &'static str| {
        vec![
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("FRONTMCP_BIND_ADDRESS", "loopback"),
            ("MACHINE_ID", machine),
            ("REDIS_URL", url.as_str()),
            ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "500"),
            ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "2000"),
            ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "500"),
        ]
    };
    let a = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-a"));
    let b = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-b"));
    let client = Client::new();
    let http = &client.0;
    let sid = client.open(&a.mcp_url()).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    assert_eq!(
        client.post(&a.mcp_url(), Some(&sid), list).await.status(),
        200
    );

    // A minute of work on A, asked through B; and the session's stream, through B.
    let call = client.post(
        &b.mcp_url(),
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "test_cancellable", "arguments": {"work_ms": 60000}, "_meta": {"progressToken": "t"}}}),
    ).await;
    assert_eq!(call.status(), 200);
    assert_eq!(call.headers()["x-frontmcp-machine-id"], "node-a");
    assert_eq!(call.headers()["content-type"], "text/event-stream");
    let stream = http
        .get(b.mcp_url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", VERSION)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["x-frontmcp-machine-id"], "node-a");

    a.signal("STOP");
    // The heartbeat lifetime, one heartbeat interval, and a second of slack for a busy machine.
    let limit = Duration::from_millis(2000 + 500 + 1000);
    let (post_end, get_end) = tokio::join!(ends_within(call, limit), ends_within(stream, limit));
    a.signal("CONT");
    eprintln!(
        "after SIGSTOP of the holder: POST stream ended after {post_end:?}, GET stream after {get_end:?}"
    );
    assert!(
        post_end.is_some() && get_end.is_some(),
        "relayed streams still open {limit:?} after the holder was paused: POST {post_end:?}, GET {get_end:?}\n--- B log ---\n{}",
        b.log()
    );
    assert!(
        !b.log().contains(&sid),
        "the session id in full in B's log:\n{}",
        b.log()
    );
    b.assert_no_panic_logged();
}
