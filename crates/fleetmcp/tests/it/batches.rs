//! JSON-RPC batches: allowed only in sessions negotiated at 2025-03-26 (mcp-transports.md §5.2,
//! §5.7, §6).

use serde_json::{Value, json};

use crate::support::*;

fn by_id(answers: &[Value], id: Value) -> &Value {
    answers
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no answer with id {id} in {answers:?}"))
}

async fn batch_answers(res: reqwest::Response) -> Vec<Value> {
    assert_eq!(res.status(), 200);
    assert_content_type(&res, "application/json");
    let v: Value = res.json().await.unwrap();
    v.as_array()
        .unwrap_or_else(|| panic!("a batch answers with an array: {v}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_03_26_session_gets_one_answer_per_request() {
    let srv = start().await;
    let c = Client::connect_with(&srv.mcp, "2025-03-26", full_capabilities()).await;
    let res = c
        .send(&json!([
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "id": "two", "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
        ]))
        .await;
    let answers = batch_answers(res).await;
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(by_id(&answers, json!(1))["result"], json!({}));
    let tools = by_id(&answers, json!("two"))["result"]["tools"]
        .as_array()
        .unwrap();
    assert_eq!(tools.len(), FIXTURE_TOOLS.len());

    // Tool calls run inside a batch too; an invalid member gets its own error.
    let res = c
        .send(&json!([
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "in a batch"}}},
            {"jsonrpc": "1.0", "id": 4, "method": "ping"},
            {"jsonrpc": "2.0", "id": 5, "method": "no/such/method"}
        ]))
        .await;
    let answers = batch_answers(res).await;
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(
        result_text(&by_id(&answers, json!(3))["result"]),
        "in a batch"
    );
    assert_eq!(by_id(&answers, json!(4))["error"]["code"], -32600);
    assert_eq!(by_id(&answers, json!(5))["error"]["code"], -32601);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_notifications_only_is_202() {
    let srv = start().await;
    let c = Client::connect_with(&srv.mcp, "2025-03-26", full_capabilities()).await;
    let res = c
        .send(&json!([
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
        ]))
        .await;
    assert_eq!(res.status(), 202);
    assert!(res.bytes().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_versions_refuse_batches() {
    let srv = start().await;
    for version in ["2025-06-18", "2025-11-25"] {
        let c = Client::connect_with(&srv.mcp, version, full_capabilities()).await;
        let res = c
            .send(&json!([
                {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            ]))
            .await;
        let v = expect_rpc_error(res, 400, -32600, Value::Null).await;
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("batch") && msg.contains(version), "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_inside_a_batch_is_400() {
    let srv = start().await;
    let init = initialize_body("2025-03-26", json!({}));
    // Without a session ...
    let res = Client::bare(&srv.mcp, "2025-03-26")
        .send(&json!([init.clone(), {"jsonrpc": "2.0", "id": 1, "method": "ping"}]))
        .await;
    let v = expect_rpc_error(res, 400, -32600, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("initialize"),
        "{v}"
    );
    assert_eq!(srv.handle.session_count(), 0);
    // ... and within a 2025-03-26 session.
    let c = Client::connect_with(&srv.mcp, "2025-03-26", full_capabilities()).await;
    let res = c.send(&json!([init])).await;
    expect_rpc_error(res, 400, -32600, Value::Null).await;
    assert_eq!(srv.handle.session_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_batch_is_400() {
    let srv = start().await;
    let c = Client::connect_with(&srv.mcp, "2025-03-26", full_capabilities()).await;
    let res = c.post().body("[]").send().await.unwrap();
    expect_rpc_error(res, 400, -32600, Value::Null).await;
}
