//! Bodies that are not valid JSON-RPC, and bodies over `http.max_body_bytes`.

use std::convert::Infallible;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::support::*;

const LIMIT: usize = 4096;

async fn small_limit_server() -> TestServer {
    start_with(SECRET, |cfg| cfg.http.max_body_bytes = LIMIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_is_400_parse_error_with_a_null_id() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
        "not json at all",
        "",
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},"#,
    ] {
        let res = c.post().body(body).send().await.unwrap();
        let v = expect_rpc_error(res, 400, -32700, Value::Null).await;
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Parse error"),
            "{body:?}: {v}"
        );
    }
    // Without a session the parse error comes first, too.
    let res = Client::bare(&srv.mcp, LATEST)
        .post()
        .body("{oops")
        .send()
        .await
        .unwrap();
    expect_rpc_error(res, 400, -32700, Value::Null).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_jsonrpc_version_is_400_invalid_request_echoing_the_id() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .send(&json!({"jsonrpc": "1.0", "id": 42, "method": "ping"}))
        .await;
    let v = expect_rpc_error(res, 400, -32600, json!(42)).await;
    assert!(
        v["error"]["message"].as_str().unwrap().contains("2.0"),
        "{v}"
    );
    let res = c
        .send(&json!({"jsonrpc": "1.0", "id": "abc", "method": "ping"}))
        .await;
    expect_rpc_error(res, 400, -32600, json!("abc")).await;
    // No jsonrpc member at all.
    let res = c.send(&json!({"id": 7, "method": "ping"})).await;
    expect_rpc_error(res, 400, -32600, json!(7)).await;
    // Neither method nor result/error.
    let res = c.send(&json!({"jsonrpc": "2.0", "id": 8})).await;
    expect_rpc_error(res, 400, -32600, json!(8)).await;
}

/// A ping whose body is exactly `len` bytes long.
fn ping_of_len(len: usize) -> String {
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#;
    let tail = r#""}}"#;
    let pad = len - head.len() - tail.len();
    let body = format!("{head}{}{tail}", "x".repeat(pad));
    assert_eq!(body.len(), len);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_limit_with_content_length_is_413() {
    let srv = small_limit_server().await;
    let c = Client::connect(&srv).await;
    // At the limit: served.
    let res = c.post().body(ping_of_len(LIMIT)).send().await.unwrap();
    assert_eq!(res.status(), 200, "a body of exactly the limit is accepted");
    // One byte over: refused.
    let res = c.post().body(ping_of_len(LIMIT + 1)).send().await.unwrap();
    let v = expect_rpc_error(res, 413, -32600, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&LIMIT.to_string()),
        "{v}"
    );
    // Well over, and without a session: the size check comes first.
    let res = Client::bare(&srv.mcp, LATEST)
        .post()
        .body(ping_of_len(3 * LIMIT))
        .send()
        .await
        .unwrap();
    expect_rpc_error(res, 413, -32600, Value::Null).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_body_over_the_limit_is_413() {
    let srv = small_limit_server().await;
    let c = Client::connect(&srv).await;
    let body = ping_of_len(2 * LIMIT).into_bytes();
    let chunks: Vec<Result<Bytes, Infallible>> = body
        .chunks(1000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let res = c
        .post()
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    let v = expect_rpc_error(res, 413, -32600, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&LIMIT.to_string()),
        "{v}"
    );

    // A chunked body under the limit is served.
    let body = ping_of_len(LIMIT - 10).into_bytes();
    let chunks: Vec<Result<Bytes, Infallible>> = body
        .chunks(700)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let res = c
        .post()
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["result"], json!({}));
}

/// The status line of the answer to a `POST /mcp` whose head declares a body of 64 bytes that
/// is never sent (the client waits with the body, as one that sent `Expect: 100-continue`
/// does); an error when none comes within [`WAIT`] (the server waits for the body).
async fn status_without_the_body(
    addr: std::net::SocketAddr,
    headers: &[(&str, &str)],
) -> std::io::Result<u16> {
    let mut headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    headers.extend([
        ("content-type".into(), "application/json".into()),
        (
            "accept".into(),
            "application/json, text/event-stream".into(),
        ),
        ("content-length".into(), "64".into()),
    ]);
    tokio::task::spawn_blocking(move || {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut stream = raw_http::open(addr, "POST", "/mcp", &headers, None, WAIT)?;
        raw_http::read_status(&mut stream)
    })
    .await
    .expect("the raw client ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_guard_refuses_is_answered_without_its_body_being_read() {
    // The body wait is far longer than the client's: only an answer that needs no body comes.
    let srv = start_with(SECRET, |cfg| cfg.http.body_read_timeout_ms = 30_000).await;
    let status = status_without_the_body(srv.addr, &[("origin", "http://evil.example")]).await;
    assert_eq!(
        status.ok(),
        Some(403),
        "a foreign Origin is refused from the head alone"
    );
    // The same head from an allowed origin is waited on: its body is read (for its trace
    // context and its request), so the test's wait would show a refusal that read it too.
    let status = status_without_the_body(srv.addr, &[]).await;
    assert!(
        status.is_err(),
        "an admitted request waits for its body: {status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_authorization_refuses_is_answered_before_its_body_is_sent() {
    // No token: refused from the head, without asking the issuer (which is not there).
    let env = [
        ("MCP_SESSION_SECRET", SECRET),
        ("FLEETMCP_AUTH_ENABLED", "true"),
        ("FLEETMCP_AUTH_ISSUER", "http://127.0.0.1:9"),
        ("FLEETMCP_AUTH_RESOURCE", "http://127.0.0.1/mcp"),
        ("FLEETMCP_AUTH_JWKS_URI", "http://127.0.0.1:9/jwks"),
    ];
    let cfg = config_from(&env, |cfg| cfg.http.body_read_timeout_ms = 30_000);
    let srv = serve(fixture_builder(Default::default()), cfg).await;
    // A client waiting on `Expect: 100-continue` is answered `401` at once, never asked for
    // its body (a `100 Continue` first would mean the body was being read).
    let status = status_without_the_body(srv.addr, &[("expect", "100-continue")]).await;
    assert_eq!(status.ok(), Some(401), "refused from the head alone");
}
