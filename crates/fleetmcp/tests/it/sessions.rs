//! Session ids: forged, sealed under another secret, sealed under ours by an instance that
//! never saw them (ha-contract.md §5.4, §5.5, §6.6).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::support::*;

fn with_session(srv: &TestServer, id: &str) -> Client {
    let mut c = Client::bare(&srv.mcp, LATEST);
    c.session = Some(id.to_string());
    c
}

/// `id`: the request's JSON-RPC id, which the answer echoes (null for notifications, GET
/// and DELETE).
async fn expect_invalid_session_id(res: reqwest::Response, id: Value) {
    let v = expect_rpc_error(res, 404, -32000, id).await;
    assert_eq!(v["error"]["message"], "invalid session id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_session_ids_are_404_invalid_session_id() {
    let srv = start().await;
    let random: [u8; 120] = std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
    let forged = URL_SAFE_NO_PAD.encode(random);
    for id in [forged.as_str(), "not-a-session", "AAAA", "x.y.z"] {
        let c = with_session(&srv, id);
        let res = c.request_with_id(json!(1), "ping", json!({})).await;
        expect_invalid_session_id(res, json!(1)).await;
        let res = c.notify("notifications/initialized", json!({})).await;
        expect_invalid_session_id(res, Value::Null).await;
        let res = c.delete().send().await.unwrap();
        expect_invalid_session_id(res, Value::Null).await;
        let res = c.get().send().await.unwrap();
        expect_invalid_session_id(res, Value::Null).await;
    }
    assert_eq!(srv.handle.session_count(), 0, "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_id_altered_by_one_character_is_invalid() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let mut bytes = c.session_id().as_bytes().to_vec();
    let i = bytes.len() / 2;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).unwrap();
    let res = with_session(&srv, &tampered)
        .request_with_id(json!(1), "ping", json!({}))
        .await;
    expect_invalid_session_id(res, json!(1)).await;
    // The real one still works.
    c.call_json("ping", json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_minted_under_another_secret_is_404_invalid_session_id() {
    let a = start_with(SECRET, |_| {}).await;
    let b = start_with(OTHER_SECRET, |_| {}).await;
    let on_a = Client::connect(&a).await;
    let on_b = with_session(&b, on_a.session_id());
    let res = on_b.request_with_id(json!(1), "ping", json!({})).await;
    expect_invalid_session_id(res, json!(1)).await;
    let res = on_b.get().send().await.unwrap();
    expect_invalid_session_id(res, Value::Null).await;
    let res = on_b.delete().send().await.unwrap();
    expect_invalid_session_id(res, Value::Null).await;
    assert_eq!(b.handle.session_count(), 0);
    // A still serves it.
    on_a.call_json("ping", json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_sealed_with_our_secret_but_unknown_here_is_404_session_not_initialized() {
    // Same secret, separate processes' memory stores: the id opens but no record exists.
    let a = start_with(SECRET, |_| {}).await;
    let a2 = start_with(SECRET, |_| {}).await;
    let on_a = Client::connect(&a).await;
    let on_a2 = with_session(&a2, on_a.session_id());

    let res = on_a2.request_with_id(json!(1), "ping", json!({})).await;
    let v = expect_rpc_error(res, 404, -32000, json!(1)).await;
    assert_eq!(v["error"]["message"], "session not initialized");
    let res = on_a2.notify("notifications/initialized", json!({})).await;
    let v = expect_rpc_error(res, 404, -32000, Value::Null).await;
    assert_eq!(v["error"]["message"], "session not initialized");

    // A GET stream request without a transport: text/plain `Session not found` (§6.6).
    let res = on_a2.get().send().await.unwrap();
    assert_eq!(res.status(), 404);
    assert_content_type(&res, "text/plain");
    assert_eq!(res.text().await.unwrap(), "Session not found");

    assert_eq!(a2.handle.session_count(), 0, "nothing was recreated");
    on_a.call_json("ping", json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_header_name_is_case_insensitive() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .http
        .post(&c.url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Session-Id", c.session_id())
        .header("MCP-Protocol-Version", LATEST)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // And over raw TCP, where the header keeps its spelling on the wire.
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("Host", "127.0.0.1"),
            ("Content-Type", "application/json"),
            ("MCP-SESSION-ID", c.session_id()),
        ],
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    )
    .await;
    assert_eq!(res.status, 200, "{res:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_isolated_from_each_other() {
    let srv = start().await;
    let a = Client::connect(&srv).await;
    let b = Client::connect(&srv).await;
    assert_ne!(a.session_id(), b.session_id());
    assert_eq!(srv.handle.session_count(), 2);
    assert_eq!(a.delete().send().await.unwrap().status(), 204);
    // B is unaffected by A's DELETE.
    b.call_json("ping", json!({})).await;
    assert_eq!(srv.handle.session_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_with_404_session_expired() {
    let srv = start_with(SECRET, |cfg| cfg.sessions.idle_ttl_ms = 1000).await;
    let c = Client::connect(&srv).await;
    let busy = Client::connect(&srv).await;
    // Keep one session busy while the other idles past its TTL.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    while srv.handle.session_count() == 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle session was not dropped"
        );
        busy.call_json("ping", json!({})).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let res = c.request_with_id(json!(1), "ping", json!({})).await;
    let v = expect_rpc_error(res, 404, -32001, json!(1)).await;
    assert_eq!(v["error"]["message"], "session expired");
    busy.call_json("ping", json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_beyond_max_sessions_is_503_with_retry_after() {
    let srv = start_with(SECRET, |cfg| cfg.sessions.max_sessions = 1).await;
    let first = Client::connect(&srv).await;
    let res = Client::bare(&srv.mcp, LATEST)
        .send(&initialize_body(LATEST, json!({})))
        .await;
    assert_eq!(
        res.headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("5")
    );
    assert!(res.headers().get("mcp-session-id").is_none());
    let v = expect_rpc_error(res, 503, -32000, json!(0)).await;
    assert!(
        v["error"]["message"].as_str().unwrap().contains("maximum"),
        "{v}"
    );
    // Once the first session ends there is room again.
    assert_eq!(first.delete().send().await.unwrap().status(), 204);
    Client::connect(&srv).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn production_without_a_secret_refuses_initialize_with_500() {
    let cfg = fleetmcp::Config::from_sources(None, [("NODE_ENV", "production")]).unwrap();
    let srv = serve(fixture_builder(Default::default()), cfg).await;
    let res = Client::bare(&srv.mcp, LATEST)
        .send(&initialize_body(LATEST, json!({})))
        .await;
    assert!(res.headers().get("mcp-session-id").is_none());
    let v = expect_rpc_error(res, 500, -32603, json!(0)).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("MCP_SESSION_SECRET"),
        "{v}"
    );
    // Any id is refused: nothing can be opened without a key.
    let res = with_session(&srv, "whatever")
        .request_with_id(json!(1), "ping", json!({}))
        .await;
    expect_invalid_session_id(res, json!(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_server_ends_open_streams() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let mut s = SseStream::new(within("GET", c.get().send()).await.unwrap());
    assert!(s.next().await.unwrap().is_priming());
    drop(srv); // completes the stop future
    let rest = s.rest().await;
    assert!(rest.is_empty(), "{rest:?}");
}
