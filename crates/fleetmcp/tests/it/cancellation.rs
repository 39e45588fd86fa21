//! `notifications/cancelled` stops a running handler; a dropped connection does not.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

async fn cancel_and_check(c: &Client, srv: &TestServer, id: Value) {
    let res = c
        .request_with_id(
            id.clone(),
            "tools/call",
            json!({"name": "slow", "arguments": {"ms": 4000}, "_meta": {"progressToken": "slow"}}),
        )
        .await;
    let mut s = SseStream::new(res);
    assert!(s.next().await.unwrap().is_priming());
    let started = s.next().await.unwrap().json().unwrap();
    assert_eq!(started["method"], "notifications/progress");
    assert_eq!(srv.counters.started(), 1);

    let res = c
        .notify(
            "notifications/cancelled",
            json!({"requestId": id, "reason": "test cancels"}),
        )
        .await;
    assert_eq!(res.status(), 202);
    assert!(res.bytes().await.unwrap().is_empty());

    eventually("the handler is dropped", Duration::from_secs(1), || {
        srv.counters.cancelled() == 1
    })
    .await;
    let rest = s.rest().await;
    assert!(
        messages(&rest).iter().all(|m| m.get("method").is_some()),
        "no response after cancellation: {rest:?}"
    );
    assert_eq!(srv.counters.completed(), 0);
    assert_eq!(srv.counters.cancelled(), 1);
    // The session carries on.
    c.call_json("ping", json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_notification_stops_the_handler_and_ends_the_stream() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    cancel_and_check(&c, &srv, json!(9)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_matches_string_request_ids() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    cancel_and_check(&c, &srv, json!("slow-call-1")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_unknown_or_other_request_changes_nothing() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c.start_tool(1, "slow", json!({"ms": 200})).await;
    let mut s = SseStream::new(res);
    assert!(s.next().await.unwrap().is_priming());
    // A different id, the same id as a string, and garbage params: all accepted, none cancel.
    for params in [
        json!({"requestId": 2}),
        json!({"requestId": "1"}),
        json!({"reason": "no id"}),
    ] {
        let res = c.notify("notifications/cancelled", params).await;
        assert_eq!(res.status(), 202);
    }
    let (_, response) = s.until_response(&json!(1)).await;
    assert_eq!(result_text(&response["result"]), "slow done");
    assert_eq!(srv.counters.completed(), 1);
    assert_eq!(srv.counters.cancelled(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_not_a_cancellation() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c.start_tool(3, "slow", json!({"ms": 300})).await;
    let mut s = SseStream::new(res);
    assert!(s.next().await.unwrap().is_priming());
    let progress = s.next().await.unwrap();
    let last = progress.id().to_string();
    drop(s);

    eventually("the handler completes", Duration::from_secs(2), || {
        srv.counters.completed() == 1
    })
    .await;
    assert_eq!(srv.counters.cancelled(), 0);
    let rest = SseStream::new(c.resume(&last).await).rest().await;
    let msgs = messages(&rest);
    assert_eq!(msgs.len(), 1, "{rest:?}");
    assert_eq!(msgs[0]["id"], 3);
    assert_eq!(result_text(&msgs[0]["result"]), "slow done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_session_stops_its_running_handlers() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c.start_tool(4, "slow", json!({"ms": 4000})).await;
    let mut s = SseStream::new(res);
    assert!(s.next().await.unwrap().is_priming());
    assert_eq!(srv.counters.started(), 1);
    assert_eq!(c.delete().send().await.unwrap().status(), 204);
    eventually("the handler is dropped", Duration::from_secs(1), || {
        srv.counters.cancelled() == 1
    })
    .await;
    let rest = s.rest().await;
    assert!(
        messages(&rest).iter().all(|m| m.get("result").is_none()),
        "{rest:?}"
    );
    assert_eq!(srv.counters.completed(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_session_cannot_cancel_a_request() {
    let srv = start().await;
    let a = Client::connect(&srv).await;
    let b = Client::connect(&srv).await;
    let res = a.start_tool(1, "slow", json!({"ms": 200})).await;
    let mut s = SseStream::new(res);
    assert!(s.next().await.unwrap().is_priming());
    let res = b
        .notify("notifications/cancelled", json!({"requestId": 1}))
        .await;
    assert_eq!(res.status(), 202);
    let (_, response) = s.until_response(&json!(1)).await;
    assert_eq!(result_text(&response["result"]), "slow done");
    assert_eq!(srv.counters.cancelled(), 0);
    assert_eq!(srv.counters.completed(), 1);
}
