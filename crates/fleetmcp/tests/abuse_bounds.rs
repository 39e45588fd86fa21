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
            s.handle.listen_streams() == fleetmcp::HoldingsSnapshot::default()
                && s.handle.client_data_bytes() == 0
        },
    )
    .await;
}
