//! An SSE stream cut on one instance and resumed with `Last-Event-ID` on another: two
//! `everything` processes sharing a real redis-server, every event delivered exactly once.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

use std::time::Duration;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_on_a_is_resumed_on_b_with_every_event_once() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = |machine: &'static str| vec![("MACHINE_ID", machine), ("REDIS_URL", url.as_str())];
    let a = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-a"));
    let b = Instance::start(env!("CARGO_BIN_EXE_everything"), &env("node-b"));
    let http = reqwest::Client::new();
    let post = |to: &str, sid: Option<&str>, body: Value| {
        let mut r = http
            .post(to)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .body(body.to_string());
        if let Some(s) = sid {
            r = r.header("mcp-session-id", s);
        }
        r.send()
    };
    let res = post(
        &a.mcp_url(),
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}}),
    )
    .await
    .unwrap();
    let sid = res.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();

    // A call that reports progress 20 times over a second, on A.
    let res = post(
        &a.mcp_url(),
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "test_cancellable", "arguments": {"work_ms": 1000}, "_meta": {"progressToken": "t"}}}),
    )
    .await
    .unwrap();
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
