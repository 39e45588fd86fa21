//! `notifications/cancelled` stops a running handler, silent or streaming, from its first poll
//! on; a dropped connection does not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use fleetmcp::{NoArgs, RequestContext, tool};
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

/// Counts a handler dropped before it finished.
struct Dropped(Arc<AtomicUsize>, bool);

impl Drop for Dropped {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The fixture server with `gated`, a silent tool (it sends nothing before its answer) whose
/// first poll blocks until `gate` opens (at most 5 s), then waits 4 s: started and dropped
/// counts.
async fn gated_server(
    gate: Arc<(Mutex<bool>, Condvar)>,
) -> (TestServer, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (started, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (s, d) = (started.clone(), dropped.clone());
    let gated = tool("gated").handler(move |_: NoArgs, _ctx: RequestContext| {
        let (gate, started, dropped) = (gate.clone(), s.clone(), d.clone());
        async move {
            started.fetch_add(1, Ordering::SeqCst);
            let mut guard = Dropped(dropped, false);
            {
                // Blocks the first poll, so that what the test sends meanwhile comes while the
                // handler has not waited yet.
                let (open, opened) = &*gate;
                let open = open.lock().unwrap_or_else(PoisonError::into_inner);
                let _open = opened.wait_timeout_while(open, Duration::from_secs(5), |o| !*o);
            }
            tokio::time::sleep(Duration::from_secs(4)).await;
            guard.1 = true;
            Ok("gated done")
        }
    });
    let counters = Arc::new(Counters::default());
    let builder = fixture_builder(counters.clone()).tool(gated);
    let srv = serve_counting(builder, config_with(SECRET, |_| {}), counters).await;
    (srv, started, dropped)
}

fn open(gate: &(Mutex<bool>, Condvar)) {
    *gate.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
    gate.1.notify_all();
}

/// A request's cancellation token and its entry in the session's in-flight table are made
/// only when its handler first waits (issue 40): a silent handler still stops on
/// `notifications/cancelled` sent while it waits, and on one sent during its first poll, before
/// it was entered (kept until it is, so it starts cancelled).
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_silent_handler_is_cancelled_while_it_waits_and_during_its_first_poll() {
    for during_first_poll in [false, true] {
        let gate = Arc::new((Mutex::new(!during_first_poll), Condvar::new()));
        let (srv, started, dropped) = gated_server(gate.clone()).await;
        let c = Client::connect(&srv).await;
        let call = c.post().json(&json!({
            "jsonrpc": "2.0", "id": 21, "method": "tools/call",
            "params": {"name": "gated", "arguments": {}}
        }));
        let answer = tokio::spawn(call.send());
        eventually("the handler runs", Duration::from_secs(2), || {
            started.load(Ordering::SeqCst) == 1
        })
        .await;
        if !during_first_poll {
            // Waiting in its sleep by now, well past its first poll.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let res = c
            .notify("notifications/cancelled", json!({"requestId": 21}))
            .await;
        assert_eq!(res.status(), 202);
        open(&gate);
        eventually("the handler is dropped", Duration::from_secs(2), || {
            dropped.load(Ordering::SeqCst) == 1
        })
        .await;
        answer.abort();
        // The session carries on, and its count of running requests is back to none.
        c.call_json("ping", json!({})).await;
    }
}

/// The same with the cancellation that comes before the entry kept no longer than requests
/// run: an id cancelled while nothing ran under it does not stop a later request that takes
/// it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_of_nothing_running_is_not_kept() {
    let gate = Arc::new((Mutex::new(true), Condvar::new()));
    let (srv, _, dropped) = gated_server(gate).await;
    let c = Client::connect(&srv).await;
    let res = c
        .notify("notifications/cancelled", json!({"requestId": 22}))
        .await;
    assert_eq!(res.status(), 202);
    let started = std::time::Instant::now();
    let body: Value = c
        .post()
        .json(&json!({
            "jsonrpc": "2.0", "id": 22, "method": "tools/call",
            "params": {"name": "gated", "arguments": {}}
        }))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(result_text(&body["result"]), "gated done", "{body}");
    assert!(started.elapsed() >= Duration::from_secs(4));
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
}

/// Work a handler spawns with its context, asking for the token only after the request
/// ended (the token made late, issue 40), is still stopped by the server's stop, as the
/// request's own token would have been.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_spawned_by_a_handler_is_cancelled_by_the_servers_stop() {
    let stopped = Arc::new(AtomicUsize::new(0));
    let seen = stopped.clone();
    let spawns = tool("spawns").handler(move |_: NoArgs, ctx: RequestContext| {
        let seen = seen.clone();
        async move {
            tokio::spawn(async move {
                // Well after the answer: the request has ended by now.
                tokio::time::sleep(Duration::from_millis(200)).await;
                let cancelled = ctx.cancellation().cancelled();
                if tokio::time::timeout(Duration::from_secs(20), cancelled)
                    .await
                    .is_ok()
                {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            });
            Ok("spawned")
        }
    });
    let counters = Arc::new(Counters::default());
    let builder = fixture_builder(counters.clone()).tool(spawns);
    let mut srv = serve_counting(builder, config_with(SECRET, |_| {}), counters).await;
    let c = Client::connect(&srv).await;
    let body = c
        .call_json("tools/call", json!({"name": "spawns", "arguments": {}}))
        .await;
    assert_eq!(result_text(&body["result"]), "spawned", "{body}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(stopped.load(Ordering::SeqCst), 0, "nothing stopped it yet");
    srv.begin_stop();
    eventually(
        "the spawned work sees the stop",
        Duration::from_secs(10),
        || stopped.load(Ordering::SeqCst) == 1,
    )
    .await;
}
