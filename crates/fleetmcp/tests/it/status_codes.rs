//! The HTTP status tables of the transport (mcp-transports.md §5, §6, §7, §13) and the
//! session errors of the contract (ha-contract.md §6.6) for requests that never reach a tool.

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_answers_200_json_with_a_visible_ascii_session_id() {
    let srv = start().await;
    let c = Client::bare(&srv.mcp, LATEST);
    let res = c.send(&initialize_body(LATEST, json!({}))).await;
    assert_eq!(res.status(), 200);
    assert_content_type(&res, "application/json");
    let sid = res
        .headers()
        .get("mcp-session-id")
        .expect("Mcp-Session-Id header")
        .to_str()
        .unwrap()
        .to_string();
    assert!(!sid.is_empty());
    assert!(
        sid.bytes().all(|b| (0x21..=0x7e).contains(&b)),
        "session id must be visible ASCII: {sid:?}"
    );
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["id"], 0);
    assert_eq!(v["result"]["protocolVersion"], LATEST);
    assert_eq!(v["result"]["serverInfo"]["name"], "fleetmcp-it");
    assert_eq!(v["result"]["serverInfo"]["version"], "9.9.9");
    assert_eq!(v["result"]["instructions"], "integration-test fixture");
    assert_eq!(v["result"]["capabilities"]["tools"]["listChanged"], true);

    // Two initializations get two different ids.
    let res = c.send(&initialize_body(LATEST, json!({}))).await;
    let other = res.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_ne!(sid, other, "session ids are unique");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_negotiates_known_versions_and_falls_back_to_the_latest() {
    let srv = start().await;
    let c = Client::bare(&srv.mcp, LATEST);
    for (asked, answered) in [
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2031-01-01", LATEST),
    ] {
        let v: Value = c
            .send(&initialize_body(asked, json!({})))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["result"]["protocolVersion"], answered, "asked {asked}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_and_client_response_are_202_with_an_empty_body() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .notify("notifications/roots/list_changed", json!({}))
        .await;
    assert_eq!(res.status(), 202);
    assert!(res.bytes().await.unwrap().is_empty(), "202 has no body");

    // A response to a request the server never sent is still accepted.
    let res = c
        .send(&json!({"jsonrpc": "2.0", "id": "fleetmcp-999", "result": {}}))
        .await;
    assert_eq!(res.status(), 202);
    assert!(res.bytes().await.unwrap().is_empty(), "202 has no body");

    // ... and an error response too.
    let res = c
        .send(&json!({"jsonrpc": "2.0", "id": "fleetmcp-998", "error": {"code": -1, "message": "no"}}))
        .await;
    assert_eq!(res.status(), 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_is_answered_200_with_json() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let v = c.call_json("ping", json!({})).await;
    assert_eq!(v["jsonrpc"], "2.0");
    assert_eq!(v["result"], json!({}));

    // String ids are echoed as strings.
    let res = c.request_with_id(json!("req-α"), "ping", json!({})).await;
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["id"], "req-α");
    assert_eq!(v["result"], json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_without_event_stream_in_accept_is_406() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .get()
        .set("accept", "application/json")
        .send()
        .await
        .unwrap();
    let v = expect_rpc_error(res, 406, -32000, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("text/event-stream"),
        "{v}"
    );

    // No Accept at all (reqwest always sends one, so raw TCP).
    let res = raw_http(
        srv.addr,
        "GET",
        &[("host", "127.0.0.1"), ("mcp-session-id", c.session_id())],
        "",
    )
    .await;
    assert_eq!(res.status, 406, "{res:?}");
    assert_eq!(res.json()["error"]["code"], -32000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_with_a_non_json_content_type_is_415() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .post()
        .set("content-type", "text/plain")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    let v = expect_rpc_error(res, 415, -32000, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("application/json"),
        "{v}"
    );

    // Parameters after the media type are fine.
    let res = c
        .post()
        .set("content-type", "application/json; charset=utf-8")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_accepting_only_html_is_406() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .post()
        .set("accept", "text/html")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    let v = expect_rpc_error(res, 406, -32000, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Not Acceptable"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_without_accept_is_served() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("host", "127.0.0.1"),
            ("content-type", "application/json"),
            ("mcp-session-id", c.session_id()),
            ("mcp-protocol-version", LATEST),
        ],
        r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
    )
    .await;
    assert_eq!(res.status, 200, "{res:?}");
    assert!(
        res.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert_eq!(res.json(), json!({"jsonrpc": "2.0", "id": 5, "result": {}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_protocol_version_header_is_400() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .post()
        .set("mcp-protocol-version", "1999-01-01")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    let v = expect_rpc_error(res, 400, -32000, Value::Null).await;
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("Unsupported protocol version: 1999-01-01"),
        "{v}"
    );
    assert!(msg.contains("2025-11-25"), "lists supported versions: {v}");

    // The same header on initialize is refused too.
    let res = Client::bare(&srv.mcp, LATEST)
        .post()
        .set("mcp-protocol-version", "1999-01-01")
        .json(&initialize_body(LATEST, json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert!(res.headers().get("mcp-session-id").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_without_a_session_id_is_400_with_the_contract_error() {
    let srv = start().await;
    let c = Client::bare(&srv.mcp, LATEST);
    let res = c.request_with_id(json!(3), "tools/list", json!({})).await;
    let v = expect_rpc_error(res, 400, -32600, json!(3)).await;
    assert_eq!(
        v["error"]["message"],
        "Session not initialized — send `initialize` first"
    );
    assert_eq!(
        v["error"]["data"],
        json!({"transport": "streamable-http", "expected": "initialize"})
    );

    // A notification without a session is refused the same way.
    let res = c.notify("notifications/initialized", json!({})).await;
    let v = expect_rpc_error(res, 400, -32600, Value::Null).await;
    assert_eq!(
        v["error"]["message"],
        "Session not initialized — send `initialize` first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_without_a_session_id_opens_no_stream() {
    // Session-era servers answer 400 (no session); a server that also speaks 2026-07-28 treats
    // a sessionless GET as a 2026 request and answers 405 with `Allow: POST`. Either way no
    // stream is opened.
    let srv = start().await;
    let c = Client::bare(&srv.mcp, LATEST);
    let res = c.get().send().await.unwrap();
    match res.status().as_u16() {
        400 => {
            let v = expect_rpc_error(res, 400, -32000, Value::Null).await;
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("Mcp-Session-Id"),
                "{v}"
            );
        }
        405 => {
            let allow = res.headers()["allow"].to_str().unwrap().to_string();
            assert!(allow.contains("POST"), "{allow}");
            assert_ne!(content_type(&res), "text/event-stream");
        }
        other => panic!("GET without a session id answered {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_without_a_session_id_is_400() {
    let srv = start().await;
    let c = Client::bare(&srv.mcp, LATEST);
    let res = c.delete().send().await.unwrap();
    let v = expect_rpc_error(res, 400, -32000, Value::Null).await;
    assert_eq!(v["error"]["message"], "No valid session ID provided");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_is_204_and_the_ended_session_answers_404_text() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    assert_eq!(srv.handle.session_count(), 1);
    let res = c.delete().send().await.unwrap();
    assert_eq!(res.status(), 204);
    assert!(res.bytes().await.unwrap().is_empty());
    assert_eq!(srv.handle.session_count(), 0);

    for res in [
        c.request_with_id(json!(1), "ping", json!({})).await,
        c.notify("notifications/initialized", json!({})).await,
        c.get().send().await.unwrap(),
        c.delete().send().await.unwrap(),
    ] {
        assert_eq!(res.status(), 404);
        assert_content_type(&res, "text/plain");
        assert_eq!(res.text().await.unwrap(), "Session not found");
    }

    // A new initialize (without the old id) starts over.
    let fresh = Client::connect(&srv).await;
    assert_ne!(fresh.session_id(), c.session_id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_method_is_200_method_not_found() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .request_with_id(json!(77), "tools/frobnicate", json!({}))
        .await;
    let v = expect_rpc_error(res, 200, -32601, json!(77)).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tools/frobnicate"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_origin_is_403_with_a_null_id_error() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    for origin in ["http://evil.example", "null", "http://localhost.evil.com"] {
        let res = c
            .post()
            .header("origin", origin)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .await
            .unwrap();
        let v = expect_rpc_error(res, 403, -32000, Value::Null).await;
        assert!(
            v["error"]["message"].as_str().unwrap().contains("Origin"),
            "{v}"
        );
    }
    // GET and DELETE are guarded as well; the session survives the refused DELETE.
    let res = c
        .get()
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let res = c
        .delete()
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    assert_eq!(srv.handle.session_count(), 1);
    // Even initialize.
    let res = Client::bare(&srv.mcp, LATEST)
        .post()
        .header("origin", "http://evil.example")
        .json(&initialize_body(LATEST, json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    assert!(res.headers().get("mcp-session-id").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_host_is_403_and_the_real_host_is_served() {
    // The conformance DNS-rebinding scenario: foreign Host and Origin, then the real ones.
    let srv = start().await;
    let init = initialize_body(LATEST, json!({})).to_string();
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("host", "evil.example.com"),
            ("origin", "http://evil.example.com"),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", LATEST),
        ],
        &init,
    )
    .await;
    assert_eq!(res.status, 403, "{res:?}");
    let v = res.json();
    assert_eq!(v["id"], Value::Null);
    assert_eq!(v["error"]["code"], -32000);
    assert!(res.header("mcp-session-id").is_none());

    // Foreign Host alone.
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("host", "evil.example.com:8080"),
            ("content-type", "application/json"),
        ],
        &init,
    )
    .await;
    assert_eq!(res.status, 403, "{res:?}");
    assert!(
        res.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Host"),
        "{res:?}"
    );

    let host = srv.addr.to_string();
    let origin = format!("http://{host}");
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("host", &host),
            ("origin", &origin),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", LATEST),
        ],
        &init,
    )
    .await;
    assert_eq!(res.status, 200, "{res:?}");
    assert!(res.header("mcp-session-id").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_origins_are_allowed() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    for origin in [
        "http://localhost:1234",
        "http://localhost",
        "https://127.0.0.1:9",
        "http://[::1]:3000",
    ] {
        let res = c
            .post()
            .header("origin", origin)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "origin {origin}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["result"], json!({}), "origin {origin}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_origins_and_hosts_are_allowed() {
    let srv = start_with(SECRET, |cfg| {
        cfg.http.allowed_origins = vec!["https://app.example".into()];
        cfg.http.allowed_hosts = vec!["mcp.internal".into()];
    })
    .await;
    let c = Client::connect(&srv).await;
    let res = c
        .post()
        .header("origin", "https://app.example")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = c
        .post()
        .header("origin", "https://app.example.evil")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("host", "mcp.internal:443"),
            ("content-type", "application/json"),
            ("mcp-session-id", c.session_id()),
        ],
        r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#,
    )
    .await;
    assert_eq!(res.status, 200, "{res:?}");
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("host", "other.internal"),
            ("content-type", "application/json"),
            ("mcp-session-id", c.session_id()),
        ],
        r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#,
    )
    .await;
    assert_eq!(res.status, 403, "{res:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_split_over_several_field_lines_is_understood() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let status = raw_status(
        srv.addr,
        "GET",
        &[
            ("host", "127.0.0.1"),
            ("accept", "application/json"),
            ("accept", "text/event-stream"),
            ("mcp-session-id", c.session_id()),
            ("mcp-protocol-version", LATEST),
        ],
    )
    .await;
    assert_eq!(status, 200, "GET with Accept over two field lines");
    let res = raw_http(
        srv.addr,
        "POST",
        &[
            ("host", "127.0.0.1"),
            ("content-type", "application/json"),
            ("accept", "text/html"),
            ("accept", "application/json"),
            ("mcp-session-id", c.session_id()),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    )
    .await;
    assert_eq!(res.status, 200, "{res:?}");
}
