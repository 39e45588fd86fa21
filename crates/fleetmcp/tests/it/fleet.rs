//! Two instances of one deployment: same secret, one shared session store (ha-contract.md
//! §6.2 recreation, §6.3 refresh, §6.4 existence check, §12.1 DELETE).

use std::sync::Arc;
use std::time::Duration;

use fleetmcp::internals::{MemorySessionStore, SessionStore};
use serde_json::{Value, json};

use crate::support::*;

fn on(srv: &TestServer, session: &str) -> Client {
    let mut c = Client::bare(&srv.mcp, LATEST);
    c.session = Some(session.to_string());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_created_on_one_instance_is_served_by_another() {
    let store: Arc<dyn SessionStore> = Arc::new(MemorySessionStore::new(Duration::from_secs(60)));
    let a = start_sharing(store.clone(), |_| {}).await;
    let b = start_sharing(store.clone(), |_| {}).await;
    let on_a = Client::connect(&a).await;
    let on_b = on(&b, on_a.session_id());
    assert_eq!(b.handle.session_count(), 0);

    on_b.call_json("ping", json!({})).await;
    assert_eq!(b.handle.session_count(), 1, "B recreated the session");
    let result = on_b.call_tool_json("echo", json!({"text": "via B"})).await;
    assert_eq!(result_text(&result), "via B");

    // The recreated session keeps the client's capabilities: sampling works through B.
    let res = on_b.start_tool(7, "sample", json!({})).await;
    let mut s = SseStream::new(res);
    let (_, request) = s.until_server_request().await;
    assert_eq!(request["method"], "sampling/createMessage");
    let res = on_b
        .send(&json!({"jsonrpc": "2.0", "id": request["id"], "result": {
            "role": "assistant", "content": {"type": "text", "text": "from B"}, "model": "m"
        }}))
        .await;
    assert_eq!(res.status(), 202);
    let (_, response) = s.until_response(&json!(7)).await;
    assert_eq!(result_text(&response["result"]), "sampled: from B");

    // And the record names B as the holder now.
    let record = store.get(on_a.session_id()).await.unwrap().unwrap();
    assert_eq!(record.protocol_version, LATEST);
    assert_eq!(record.client_capabilities["sampling"], json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_on_one_instance_is_seen_by_an_instance_that_never_held_the_session() {
    let store: Arc<dyn SessionStore> = Arc::new(MemorySessionStore::new(Duration::from_secs(60)));
    let a = start_sharing(store.clone(), |_| {}).await;
    let b = start_sharing(store.clone(), |_| {}).await;
    let c = start_sharing(store.clone(), |_| {}).await;
    let on_a = Client::connect(&a).await;
    let res = on_a.delete().send().await.unwrap();
    assert_eq!(res.status(), 204);
    assert!(store.get(on_a.session_id()).await.unwrap().is_none());
    // §12.1.6: an instance that never saw it finds no record.
    let res = on(&b, on_a.session_id())
        .request_with_id(json!(1), "ping", json!({}))
        .await;
    let v = expect_rpc_error(res, 404, -32000, json!(1)).await;
    assert_eq!(v["error"]["message"], "session not initialized");
    assert_eq!(c.handle.session_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_on_another_instance_ends_the_session_where_it_is_held() {
    let store: Arc<dyn SessionStore> = Arc::new(MemorySessionStore::new(Duration::from_secs(60)));
    let a = start_sharing(store.clone(), |_| {}).await;
    let b = start_sharing(store.clone(), |_| {}).await;
    let on_a = Client::connect(&a).await;
    let on_b = on(&b, on_a.session_id());
    let res = on_b.delete().send().await.unwrap();
    assert_eq!(res.status(), 204, "B deletes the session");
    // B itself answers 404 text from now on.
    let res = on_b.request_with_id(json!(1), "ping", json!({})).await;
    assert_eq!(res.status(), 404);
    assert_eq!(res.text().await.unwrap(), "Session not found");
    // A held it: it must notice the record is gone.
    let res = on_a.request_with_id(json!(2), "ping", json!({})).await;
    let v = expect_rpc_error(res, 404, -32001, json!(2)).await;
    assert_eq!(v["error"]["message"], "session expired");
    assert_eq!(a.handle.session_count(), 0, "A dropped its copy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_session_stays_stored_past_its_ttl() {
    const TTL_MS: u64 = 1200;
    let store: Arc<dyn SessionStore> =
        Arc::new(MemorySessionStore::new(Duration::from_millis(TTL_MS)));
    let a = start_sharing(store.clone(), |cfg| cfg.sessions.idle_ttl_ms = TTL_MS).await;
    let b = start_sharing(store.clone(), |cfg| cfg.sessions.idle_ttl_ms = TTL_MS).await;
    let on_a = Client::connect(&a).await;
    // Keep the session busy on A for one and a half TTLs.
    let until = tokio::time::Instant::now() + Duration::from_millis(TTL_MS * 3 / 2);
    while tokio::time::Instant::now() < until {
        on_a.call_json("ping", json!({})).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        store.exists(on_a.session_id()).await.unwrap(),
        "the record of an active session is still stored"
    );
    on(&b, on_a.session_id()).call_json("ping", json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_mode_names_the_instance_and_sets_the_affinity_cookie() {
    let srv = start_with(SECRET, |cfg| {
        cfg.deployment_mode = fleetmcp::config::DeploymentMode::Distributed;
        cfg.machine_id = Some("desk-a".into());
    })
    .await;
    let res = Client::bare(&srv.mcp, LATEST)
        .send(&initialize_body(LATEST, json!({})))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-frontmcp-machine-id"], "desk-a");
    let cookie = res.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("__frontmcp_node=desk-a;"), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    // Every answer carries the header, health endpoints and errors included.
    let res = http()
        .get(format!("{}/healthz", srv.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["x-frontmcp-machine-id"], "desk-a");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["runtime"]["deployment"], "distributed");
    let res = Client::bare(&srv.mcp, LATEST)
        .request_with_id(json!(1), "ping", json!({}))
        .await;
    assert_eq!(res.status(), 400);
    assert_eq!(res.headers()["x-frontmcp-machine-id"], "desk-a");
    // Bound for a load balancer: any Host is accepted, Origin is still checked.
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("host", "mcp.example.com"),
            ("content-type", "application/json"),
        ],
        &initialize_body(LATEST, json!({})).to_string(),
    )
    .await;
    assert_eq!(res.status, 200, "{res:?}");
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("host", "mcp.example.com"),
            ("origin", "http://evil.example"),
            ("content-type", "application/json"),
        ],
        &initialize_body(LATEST, json!({})).to_string(),
    )
    .await;
    assert_eq!(res.status, 403, "{res:?}");
}
