//! Multi-round requests of the 2026-07-28 era against a real server on loopback: the answers
//! of earlier rounds carried in a sealed `requestState`, the first round's key kept, a typed
//! form and a confirmation asked in rounds, and rounds moving between servers that share the
//! session secret. The rest of the era is in `stateless.rs`; the server both run is
//! `support_stateless`.

mod support;
mod support_stateless;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::SECRET;
use support_stateless::*;

fn elicit_meta() -> Value {
    let mut m = meta();
    m["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
    m
}

/// A 2026-07-28 `tools/call` of `tool` from a client that declares elicitation, with the
/// params in `extra` (`inputResponses`, `requestState`) added.
fn asking_call(tool: &str, extra: Value) -> (Vec<(String, String)>, Value) {
    let mut p = json!({"name": tool, "arguments": {}, "_meta": elicit_meta()});
    if let Value::Object(e) = extra {
        for (k, v) in e {
            p[k] = v;
        }
    }
    modern("tools/call", p)
}

#[tokio::test]
async fn multi_round_requests_carry_answers_in_a_sealed_state() {
    let s = start(|c| c.stateless.request_state_ttl_ms = 1_000).await;
    let call = |extra: Value| asking_call("two_questions", extra);
    // Round 1: the first question.
    let (h, b1) = call(json!({}));
    let (st, _, b) = post(&s.mcp, &h, &b1).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let r1 = result(&b);
    assert_eq!(r1["resultType"], "input_required", "{r1}");
    assert_eq!(r1["inputRequests"]["name"]["method"], "elicitation/create");
    assert!(
        r1["inputRequests"].get("color").is_none(),
        "one question at a time"
    );
    let state1 = r1["requestState"].as_str().unwrap().to_string();

    // Round 2: answers the first, gets the second with a new state.
    let answer = |f: &str, v: &str| json!({"action": "accept", "content": {f: v}});
    let (h, b2) = call(
        json!({"inputResponses": {"name": answer("name", "Ada")}, "requestState": state1.clone()}),
    );
    let (_, _, b) = post(&s.mcp, &h, &b2).await;
    let r2 = result(&b);
    assert_eq!(r2["resultType"], "input_required", "{r2}");
    assert!(r2["inputRequests"].get("color").is_some(), "{r2}");
    let state2 = r2["requestState"].as_str().unwrap().to_string();

    // Round 3: only the second answer is sent; the first comes back from the state. This one
    // says `status` where the spec says `action`: accepted as the same (contract 20.5).
    let by_status = json!({"status": "accept", "content": {"color": "green"}});
    let (h, b3) =
        call(json!({"inputResponses": {"color": by_status}, "requestState": state2.clone()}));
    let (_, _, b) = post(&s.mcp, &h, &b3).await;
    let r3 = result(&b);
    assert_eq!(r3["resultType"], "complete", "{r3}");
    assert_eq!(r3["content"][0]["text"], "Ada likes green");

    // A retried round's result carries no caching hints (mcp-transports.md 8.5), even a
    // resource read's, which the first round's complete answer would.
    let (h, r1) = modern(
        "resources/read",
        json!({"uri": "test://asks", "_meta": elicit_meta()}),
    );
    let (_, _, b) = post(&s.mcp, &h, &r1).await;
    let state = state_asking(&b, "who");
    let mut retry = r1.clone();
    retry["params"]["inputResponses"] =
        json!({"who": {"action": "accept", "content": {"who": "Ada"}}});
    retry["params"]["requestState"] = json!(state);
    let (st, _, b) = post(&s.mcp, &h, &retry).await;
    let read = result(&b);
    assert_eq!(
        (st, &read["contents"][0]["text"]),
        (StatusCode::OK, &json!("for Ada")),
        "{b}"
    );
    assert_eq!(read["resultType"], "complete", "{read}");
    assert!(
        read.get("ttlMs").is_none() && read.get("cacheScope").is_none(),
        "a retry is not cacheable: {read}"
    );

    // A tampered state, or one moved to another request, is refused.
    let (h, bt) = call(
        json!({"inputResponses": {"color": answer("color", "red")}, "requestState": format!("{state2}-TAMPERED")}),
    );
    let (st, _, b) = post(&s.mcp, &h, &bt).await;
    assert_eq!(
        (st, error_code(&b)),
        (StatusCode::BAD_REQUEST, -32602),
        "{b}"
    );
    let mut moved = json!({"name": "two_questions", "arguments": {"x": 1}, "_meta": elicit_meta(), "requestState": state2.clone()});
    moved["inputResponses"] = json!({"color": answer("color", "red")});
    let (h, bm) = modern("tools/call", moved);
    let (st, _, b) = post(&s.mcp, &h, &bm).await;
    assert_eq!(
        (st, error_code(&b)),
        (StatusCode::BAD_REQUEST, -32602),
        "{b}"
    );
    // An answer of the wrong shape is refused; so is an expired state. (With the state of the
    // round that asked: an answer to a question nobody asked is ignored, not checked.)
    let (h, bw) = call(json!({"inputResponses": {"name": 12345}, "requestState": state1}));
    let (st, _, b) = post(&s.mcp, &h, &bw).await;
    assert_eq!(
        (st, error_code(&b)),
        (StatusCode::BAD_REQUEST, -32602),
        "{b}"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (st, _, b) = post(&s.mcp, &h, &b3).await;
    assert_eq!(
        (st, error_code(&b)),
        (StatusCode::BAD_REQUEST, -32602),
        "expired: {b}"
    );
}

/// A multi-round call keeps the key of its first round (`RequestContext::call_key`) in every
/// later one, sealed in the `requestState`: the answering round sent again (the protocol does
/// not make a `requestState` single-use), with its `_meta` key changed or not, names the same
/// call, so a handler taking its effect once per key takes it once; a new exchange is a new
/// call. Without a client key the exchange gets a random one; with one, it is the client's
/// (scoped), as the session era's is.
#[tokio::test]
async fn a_multi_round_call_keeps_its_first_rounds_key() {
    let s = start(|_| {}).await;
    let round = |meta: Value, extra: Value| {
        let mut p = json!({"name": "confirm_key", "arguments": {}, "_meta": meta});
        if let Value::Object(e) = extra {
            for (k, v) in e {
                p[k] = v;
            }
        }
        modern("tools/call", p)
    };
    let with_key = |k: &str| {
        let mut m = elicit_meta();
        m[fleetmcp::IDEMPOTENCY_KEY_META] = json!(k);
        m
    };
    let first = |meta: Value| {
        let (h, b) = round(meta, json!({}));
        let url = s.mcp.clone();
        async move { state_asking(&post(&url, &h, &b).await.2, "ok") }
    };
    let answered = |meta: Value, state: &str| {
        let (h, b) = round(
            meta,
            json!({"inputResponses": {"ok": {"action": "accept", "content": {"ok": true}}}, "requestState": state}),
        );
        let url = s.mcp.clone();
        async move {
            let (st, _, body) = post(&url, &h, &b).await;
            assert_eq!(st, StatusCode::OK, "{body}");
            let r = result(&body);
            assert_eq!(r["resultType"], "complete", "{r}");
            r["content"][0]["text"].as_str().unwrap().to_string()
        }
    };
    let state = first(elicit_meta()).await;
    let key = answered(elicit_meta(), &state).await;
    assert!(key.starts_with("x/") && key.len() > 20, "{key}");
    assert_eq!(answered(elicit_meta(), &state).await, key, "sent again");
    assert_eq!(
        answered(with_key("a-new-key"), &state).await,
        key,
        "sent again under a key of its own"
    );
    let other = first(elicit_meta()).await;
    assert_ne!(answered(elicit_meta(), &other).await, key, "a new exchange");

    // The client's own key, from the first round on; a later round cannot change it.
    let state = first(with_key("order-1")).await;
    assert_eq!(
        answered(with_key("order-1"), &state).await,
        "k/anonymous/order-1"
    );
    assert_eq!(
        answered(with_key("order-2"), &state).await,
        "k/anonymous/order-1"
    );
    assert_eq!(answered(elicit_meta(), &state).await, "k/anonymous/order-1");
}

/// One `two_questions` round: the request with `extra` params (`inputResponses`,
/// `requestState`).
fn two_questions_round(extra: Value) -> (Vec<(String, String)>, Value) {
    let mut p = json!({"name": "two_questions", "arguments": {}, "_meta": elicit_meta()});
    if let Value::Object(e) = extra {
        for (k, v) in e {
            p[k] = v;
        }
    }
    modern("tools/call", p)
}

/// The `requestState` of an `InputRequiredResult` asking `key`.
/// Issue 41: in 2026-07-28 `elicit_form` and `confirm` become `InputRequiredResult`
/// questions, the handler runs again with each answer, and the answer comes back typed.
#[tokio::test]
async fn a_typed_form_and_a_confirmation_are_asked_in_rounds() {
    let s = start(|_| {}).await;
    let call = |extra: Value| asking_call("typed_form", extra);
    let (h, b) = call(json!({}));
    let (_, _, body) = post(&s.mcp, &h, &b).await;
    let state = state_asking(&body, "elicitation-1");
    let asked = &result(&body)["inputRequests"]["elicitation-1"];
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(
        asked["params"]["requestedSchema"],
        json!({"type": "object", "required": ["name"],
               "properties": {"name": {"type": "string", "description": "Your name."}}})
    );

    // Declined: the handler runs again and sees it.
    let declined = json!({"elicitation-1": {"action": "decline"}});
    let (h, b) = call(json!({"inputResponses": declined, "requestState": state.clone()}));
    let (_, _, body) = post(&s.mcp, &h, &b).await;
    let r = result(&body);
    assert_eq!(r["resultType"], "complete", "{r}");
    assert_eq!(r["content"][0]["text"], "no name");

    // Accepted: the name comes back typed, and the confirmation is the next question.
    let named = json!({"elicitation-1": {"action": "accept", "content": {"name": "Ada"}}});
    let (h, b) = call(json!({"inputResponses": named, "requestState": state}));
    let (_, _, body) = post(&s.mcp, &h, &b).await;
    let state = state_asking(&body, "elicitation-2");
    assert_eq!(
        result(&body)["inputRequests"]["elicitation-2"]["params"]["message"],
        "Sign as Ada?"
    );
    let yes = json!({"elicitation-2": {"action": "accept", "content": {}}});
    let (h, b) = call(json!({"inputResponses": yes, "requestState": state}));
    let (_, _, body) = post(&s.mcp, &h, &b).await;
    let r = result(&body);
    assert_eq!(r["content"][0]["text"], "Ada signed=true", "{r}");
}

fn state_asking(body: &str, key: &str) -> String {
    let r = result(body);
    assert_eq!(r["resultType"], "input_required", "{r}");
    assert!(r["inputRequests"].get(key).is_some(), "asks {key}: {r}");
    r["requestState"].as_str().unwrap().to_string()
}

/// With `MCP_SESSION_SECRET` and neither `VAULT_SECRET` nor `JWT_SECRET` (the fixture's
/// configuration: no variable is read from the process), two servers seal `requestState` with
/// the same key, so each round of one request may land on either. A rotation of the session
/// secret keeps the states sealed under the previous one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rounds_of_a_request_move_between_servers_sharing_the_session_secret() {
    let a = start(|_| {}).await;
    let b = start(|_| {}).await;
    let answer = |f: &str, v: &str| json!({"action": "accept", "content": {f: v}});

    let (h, r1) = two_questions_round(json!({}));
    let (_, _, body) = post(&a.mcp, &h, &r1).await;
    let state1 = state_asking(&body, "name");
    let (h, r2) = two_questions_round(
        json!({"inputResponses": {"name": answer("name", "Ada")}, "requestState": state1.clone()}),
    );
    let (st, _, body) = post(&b.mcp, &h, &r2).await;
    assert_eq!(st, StatusCode::OK, "B opens A's state: {body}");
    let state2 = state_asking(&body, "color");
    let (h, r3) = two_questions_round(
        json!({"inputResponses": {"color": answer("color", "green")}, "requestState": state2}),
    );
    let (st, _, body) = post(&a.mcp, &h, &r3).await;
    assert_eq!(st, StatusCode::OK, "A opens B's state: {body}");
    assert_eq!(result(&body)["content"][0]["text"], "Ada likes green");

    // Another deployment's secret does not open it.
    let other = start(|c| c.session_secret = Some(support::OTHER_SECRET.into())).await;
    let (st, _, body) = post(&other.mcp, &h, &r2).await;
    assert_eq!(
        (st, error_code(&body)),
        (StatusCode::BAD_REQUEST, -32602),
        "{body}"
    );
    // Rotated to that secret with the old one previous: the old state still opens, and the
    // next state is sealed under the new secret, which alone opens it.
    let rotated = start(|c| {
        c.session_secret = Some(support::OTHER_SECRET.into());
        c.previous_session_secrets = vec![SECRET.into()];
    })
    .await;
    let (st, _, body) = post(&rotated.mcp, &h, &r2).await;
    assert_eq!(st, StatusCode::OK, "the previous secret opens: {body}");
    let sealed_new = state_asking(&body, "color");
    let (h, r3) = two_questions_round(
        json!({"inputResponses": {"color": answer("color", "red")}, "requestState": sealed_new}),
    );
    let (st, _, body) = post(&other.mcp, &h, &r3).await;
    assert_eq!(st, StatusCode::OK, "sealed under the new secret: {body}");
    assert_eq!(result(&body)["content"][0]["text"], "Ada likes red");
    let (st, _, body) = post(&a.mcp, &h, &r3).await;
    assert_eq!(
        (st, error_code(&body)),
        (StatusCode::BAD_REQUEST, -32602),
        "the old secret alone does not open the new state: {body}"
    );
}
