//! SSE answers, priming events, resumption with `Last-Event-ID`, and SSE polling
//! (mcp-transports.md §5.5, §7, §11).

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::support::*;

/// Checks that `events` carry the progress values `0..n` exactly once, in order, and exactly
/// one response to `id`, which comes last.
fn assert_complete_once(events: &[SseEvent], n: u64, id: i64) -> Value {
    assert_eq!(
        progress_values(events),
        (0..n).collect::<Vec<_>>(),
        "each progress value exactly once, in order"
    );
    let msgs = messages(events);
    let responses: Vec<&Value> = msgs.iter().filter(|m| m.get("method").is_none()).collect();
    assert_eq!(responses.len(), 1, "exactly one response: {responses:?}");
    assert_eq!(responses[0]["id"], json!(id));
    assert_eq!(
        msgs.last().unwrap(),
        responses[0],
        "the response is the last message"
    );
    let ids: Vec<&str> = events.iter().map(SseEvent::id).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "event ids are unique: {ids:?}");
    responses[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_answered_as_sse_starts_with_a_priming_event() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .start_tool(4, "progress", json!({"count": 3, "delay_ms": 5}))
        .await;
    assert_eq!(res.headers()["cache-control"].to_str().unwrap(), "no-cache");
    let events = SseStream::new(res).rest().await;
    let priming = &events[0];
    assert!(priming.is_priming(), "{priming:?}");
    assert!(priming.id.is_some(), "the priming event has an id");
    assert_eq!(priming.retry, Some(3000), "retry hint = http.sse_retry_ms");
    assert_eq!(
        events.iter().filter(|e| e.is_priming()).count(),
        1,
        "one priming event"
    );
    for e in &events[1..] {
        assert_eq!(e.event.as_deref(), Some("message"), "{e:?}");
        assert!(e.id.is_some(), "{e:?}");
    }
    let response = assert_complete_once(&events[1..], 3, 4);
    assert_eq!(result_text(&response["result"]), "done 3");
    let p = &messages(&events)[0];
    assert_eq!(p["params"]["progressToken"], "tok-4");
    assert_eq!(p["params"]["total"], 3.0);
    assert_eq!(p["params"]["message"], "working");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_before_2025_11_25_get_no_priming_event() {
    let srv = start().await;
    for version in ["2025-06-18", "2025-03-26"] {
        let c = Client::connect_with(&srv.mcp, version, full_capabilities()).await;
        let res = c
            .start_tool(1, "progress", json!({"count": 2, "delay_ms": 5}))
            .await;
        let events = SseStream::new(res).rest().await;
        assert!(
            events.iter().all(|e| !e.is_priming()),
            "{version}: {events:?}"
        );
        assert_complete_once(&events, 2, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_a_dropped_stream_delivers_every_event_exactly_once() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .start_tool(10, "progress", json!({"count": 10, "delay_ms": 30}))
        .await;
    let mut s = SseStream::new(res);
    let priming = s.next().await.expect("priming event");
    assert!(priming.is_priming());
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(s.next().await.expect("an event"));
    }
    assert_eq!(progress_values(&seen), vec![0, 1, 2]);
    let last = seen.last().unwrap().id().to_string();
    drop(s); // the connection breaks mid-call

    let res = c.resume(&last).await;
    let rest = SseStream::new(res).rest().await;
    assert!(
        rest.iter().all(|e| !e.is_priming()),
        "a resumption does not re-send the priming event: {rest:?}"
    );
    seen.extend(rest);
    let response = assert_complete_once(&seen, 10, 10);
    assert_eq!(result_text(&response["result"]), "done 10");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_from_the_priming_event_replays_the_whole_stream() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c
        .start_tool(2, "progress", json!({"count": 4, "delay_ms": 20}))
        .await;
    let mut s = SseStream::new(res);
    let priming = s.next().await.unwrap();
    drop(s);
    let events = SseStream::new(c.resume(priming.id()).await).rest().await;
    assert_complete_once(&events, 4, 2);

    // The stream is complete now; resuming from its last event yields nothing, and ends.
    let last = events.last().unwrap().id().to_string();
    let again = SseStream::new(c.resume(&last).await).rest().await;
    assert!(again.is_empty(), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_tool_ends_the_connection_and_the_resumption_gets_the_result() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c.start_tool(5, "poll", json!({})).await;
    let first = SseStream::new(res).rest().await;
    assert!(first[0].is_priming());
    assert_eq!(first[0].retry, Some(3000));
    assert!(
        messages(&first).iter().all(|m| m.get("result").is_none()),
        "the first connection ends without the result: {first:?}"
    );
    assert_eq!(progress_values(&first), vec![0]);

    let last = first.last().unwrap().id().to_string();
    let rest = SseStream::new(c.resume(&last).await).rest().await;
    let mut all = first;
    all.extend(rest);
    let response = assert_complete_once(&all[1..], 2, 5);
    assert_eq!(result_text(&response["result"]), "polled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_before_any_other_message_still_ends_the_connection() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let res = c.start_tool(6, "poll_first", json!({})).await;
    let first = SseStream::new(res).rest().await;
    assert!(first[0].is_priming(), "{first:?}");
    assert!(
        messages(&first).is_empty(),
        "the connection should end after the priming event, without the result: {first:?}"
    );
    let rest = SseStream::new(c.resume(first[0].id()).await).rest().await;
    let msgs = messages(&rest);
    assert_eq!(msgs.len(), 1, "{rest:?}");
    assert_eq!(msgs[0]["id"], 6);
    assert_eq!(result_text(&msgs[0]["result"]), "polled first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_that_is_not_of_this_session_is_400() {
    let srv = start().await;
    let a = Client::connect(&srv).await;
    let events = SseStream::new(
        a.start_tool(1, "progress", json!({"count": 2, "delay_ms": 5}))
            .await,
    )
    .rest()
    .await;
    let a_id = events[1].id().to_string();

    // B has no stream of that name.
    let b = Client::connect(&srv).await;
    let res = b.resume(&a_id).await;
    let v = expect_rpc_error(res, 400, -32000, Value::Null).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Last-Event-ID"),
        "{v}"
    );
    // Garbage, and an id past the end of A's own stream.
    for bad in ["garbage", "", "1-999999", "999-1", "-1"] {
        let res = a.resume(bad).await;
        expect_rpc_error(res, 400, -32000, Value::Null).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_of_another_session_never_replays_its_events() {
    let srv = start().await;
    let a = Client::connect(&srv).await;
    let b = Client::connect(&srv).await;
    let a_events = SseStream::new(
        a.start_tool(100, "progress", json!({"count": 3, "delay_ms": 5}))
            .await,
    )
    .rest()
    .await;
    let b_events = SseStream::new(
        b.start_tool(200, "progress", json!({"count": 3, "delay_ms": 5}))
            .await,
    )
    .rest()
    .await;
    assert_complete_once(&a_events[1..], 3, 100);
    assert_complete_once(&b_events[1..], 3, 200);
    let res = b.resume(a_events[0].id()).await;
    if res.status() == 200 {
        let replay = SseStream::new(res).rest().await;
        for m in messages(&replay) {
            assert_ne!(m["params"]["progressToken"], "tok-100", "A's event leaked");
            assert_ne!(m["id"], 100, "A's response leaked");
        }
    } else {
        assert_eq!(res.status(), 400);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_of_another_session_is_refused_even_when_stream_numbers_collide() {
    let srv = start().await;
    let a = Client::connect(&srv).await;
    let b = Client::connect(&srv).await;
    let a_events = SseStream::new(
        a.start_tool(100, "progress", json!({"count": 3, "delay_ms": 5}))
            .await,
    )
    .rest()
    .await;
    let b_events = SseStream::new(
        b.start_tool(200, "progress", json!({"count": 3, "delay_ms": 5}))
            .await,
    )
    .rest()
    .await;
    let res = b.resume(a_events[0].id()).await;
    expect_rpc_error(res, 400, -32000, Value::Null).await;
    assert_ne!(
        a_events[0].id(),
        b_events[0].id(),
        "event ids should name their session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_get_stream_starts_with_a_priming_event_and_can_be_resumed() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let mut s = SseStream::new(within("GET", c.get().send()).await.unwrap());
    let priming = s.next().await.unwrap();
    assert!(priming.is_priming());
    assert_eq!(priming.retry, Some(3000));
    drop(s);

    // While no GET is open, a list change is stored; resuming from the priming id gets it.
    srv.handle
        .add_tool(
            fleetmcp::tool("late")
                .description("added late")
                .handler(|_: fleetmcp::NoArgs, _ctx| async { Ok("late") }),
        )
        .await
        .expect("no state needed");
    let mut s = SseStream::new(c.resume(priming.id()).await);
    let ev = s.next().await.expect("the stored notification");
    assert_eq!(
        ev.json().unwrap()["method"],
        "notifications/tools/list_changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_get_stream_takes_over_and_messages_are_not_broadcast() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let mut first = SseStream::new(within("GET 1", c.get().send()).await.unwrap());
    assert!(first.next().await.unwrap().is_priming());
    let mut second = SseStream::new(within("GET 2", c.get().send()).await.unwrap());
    assert!(second.next().await.unwrap().is_priming());
    // The older connection ends once the new one claims the stream.
    let rest = first.rest().await;
    assert!(rest.is_empty(), "{rest:?}");
    srv.handle.remove_tool("echo").await;
    let ev = second.next().await.unwrap();
    assert_eq!(
        ev.json().unwrap()["method"],
        "notifications/tools/list_changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_only_client_receives_server_requests_on_its_get_stream() {
    let srv = start().await;
    let c = Client::connect(&srv).await;
    let mut get = SseStream::new(within("GET", c.get().send()).await.unwrap());
    assert!(get.next().await.unwrap().is_priming());
    let call = c
        .post()
        .set("accept", "application/json")
        .json(&json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call",
                      "params": {"name": "elicit", "arguments": {}}}))
        .send();
    let call = tokio::spawn(call);
    let (_, request) = get.until_server_request().await;
    assert_eq!(request["method"], "elicitation/create");
    let res = c
        .send(&json!({"jsonrpc": "2.0", "id": request["id"],
                      "result": {"action": "accept", "content": {"name": "Grace"}}}))
        .await;
    assert_eq!(res.status(), 202);
    let res = within("tool answer", call).await.unwrap().unwrap();
    assert_eq!(res.status(), 200);
    assert_content_type(&res, "application/json");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["id"], 12);
    assert_eq!(result_text(&v["result"]), "elicited: accept Grace");
}
