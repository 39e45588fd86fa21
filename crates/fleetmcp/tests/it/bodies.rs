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
