//! The fault harness's tools (`tests/faults`), behind `HELP_DESK_EFFECTS_FILE`: `stamp` as a
//! 2026-07-28 background task (tasks extension), and `stamp_confirmed`, a multi-round call whose
//! effect is taken only once the client has answered its question. Without the variable
//! neither tool exists.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Instance, TempDir};

const MODERN: &str = "2026-07-28";

/// One 2026-07-28 request with `capabilities`; the JSON-RPC answer.
async fn modern(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    capabilities: Value,
) -> Value {
    // Added to the `_meta` the params may carry (an idempotency key).
    let meta = params["_meta"].take();
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    if let Value::Object(extra) = meta {
        params["_meta"]
            .as_object_mut()
            .expect("an object")
            .extend(extra);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let res = support::modern_post(http, url, method, name, &body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"));
    let text = res
        .text()
        .await
        .unwrap_or_else(|e| panic!("{method} answer: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} answer {text}: {e}"))
}

fn effects(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[tokio::test]
async fn stamp_runs_as_a_task_and_stamp_confirmed_takes_its_effect_after_the_answer() {
    let dir = TempDir::new("effects-tools");
    let file = dir.path().join("effects");
    let file_s = file.display().to_string();
    let desk = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[("HELP_DESK_EFFECTS_FILE", file_s.as_str())],
    );
    let (http, url) = (reqwest::Client::new(), desk.mcp_url());
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});

    // A task: answered at once, then polled until it completes with its result.
    let v = modern(
        &http,
        &url,
        "tools/call",
        Some("stamp"),
        json!({"name": "stamp", "arguments": {"key": "task-1", "delay_ms": 300}}),
        tasks.clone(),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    let id = v["result"]["taskId"].as_str().expect("taskId").to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    let done = loop {
        let r = modern(
            &http,
            &url,
            "tasks/get",
            Some(&id),
            json!({"taskId": id}),
            tasks.clone(),
        )
        .await;
        if r["result"]["status"] == "completed" {
            break r;
        }
        assert_eq!(r["result"]["status"], "working", "{r}");
        assert!(Instant::now() < deadline, "the task never completed: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        done["result"]["result"]["structuredContent"]["key"], "task-1",
        "{done}"
    );
    assert_eq!(effects(&file), ["task-1"]);

    // Without the extension, the same tool answers at once.
    let v = modern(
        &http,
        &url,
        "tools/call",
        Some("stamp"),
        json!({"name": "stamp", "arguments": {"key": "plain-1"}}),
        json!({}),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");

    // Multi-round: the first round asks, and takes no effect.
    let elicit = json!({"elicitation": {}});
    let call = json!({"name": "stamp_confirmed", "arguments": {"key": "confirmed-1"}});
    let v = modern(
        &http,
        &url,
        "tools/call",
        Some("stamp_confirmed"),
        call.clone(),
        elicit.clone(),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "input_required", "{v}");
    assert_eq!(
        v["result"]["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    let state = v["result"]["requestState"].as_str().expect("requestState");
    assert_eq!(effects(&file), ["task-1", "plain-1"]);
    // A declined question: no effect, a tool error.
    let mut declined = call.clone();
    declined["inputResponses"] = json!({"confirm": {"action": "decline"}});
    declined["requestState"] = json!(state);
    let v = modern(
        &http,
        &url,
        "tools/call",
        Some("stamp_confirmed"),
        declined,
        elicit.clone(),
    )
    .await;
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert_eq!(effects(&file), ["task-1", "plain-1"]);
    // The answer: the effect, once.
    let mut answer = call.clone();
    answer["inputResponses"] =
        json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    answer["requestState"] = json!(state);
    let v = modern(
        &http,
        &url,
        "tools/call",
        Some("stamp_confirmed"),
        answer,
        elicit,
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    assert_eq!(v["result"]["structuredContent"]["key"], "confirmed-1");
    assert_eq!(effects(&file), ["task-1", "plain-1", "confirmed-1"]);
    desk.assert_no_panic_logged();
}

/// The 2026-07-28 `requestState` is not single-use (the protocol leaves that to the server):
/// the answering round sent again within its lifetime runs the handler again. The handler
/// takes its effect once per call key, which the first round sealed in the state: the round
/// sent again, with or without another `_meta` idempotency key, takes no second effect; a new
/// exchange is a new call. Memory desk and Redis desk alike (the claim is in the desk's store).
#[tokio::test]
async fn stamp_confirmed_sent_again_takes_its_effect_once() {
    let redis = support_redis::RedisServer::start();
    for store in ["memory", "redis"] {
        let dir = TempDir::new("effects-once");
        let file = dir.path().join("effects");
        let file_s = file.display().to_string();
        let mut env = vec![("HELP_DESK_EFFECTS_FILE", file_s.as_str())];
        let url = redis.url();
        if store == "redis" {
            env.extend([
                ("REDIS_URL", url.as_str()),
                ("REDIS_HOST", ""),
                ("REDIS_PORT", ""),
            ]);
        }
        let desk = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &env);
        let (http, mcp) = (reqwest::Client::new(), desk.mcp_url());
        let elicit = json!({"elicitation": {}});
        let confirm = |params: Value| {
            let (http, mcp, elicit) = (&http, &mcp, &elicit);
            async move {
                modern(
                    http,
                    mcp,
                    "tools/call",
                    Some("stamp_confirmed"),
                    params,
                    elicit.clone(),
                )
                .await
            }
        };
        let call = json!({"name": "stamp_confirmed", "arguments": {"key": "once-1"}});
        let first_round = |call: Value| async move {
            let v = confirm(call).await;
            assert_eq!(v["result"]["resultType"], "input_required", "{store}: {v}");
            v["result"]["requestState"]
                .as_str()
                .expect("requestState")
                .to_string()
        };
        let state = first_round(call.clone()).await;
        let mut answer = call.clone();
        answer["inputResponses"] =
            json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
        answer["requestState"] = json!(state);
        let mut other_key = answer.clone();
        other_key["_meta"] = json!({"io.fleetmcp/idempotency-key": "a-new-key"});
        for (n, round) in [&answer, &answer, &other_key].into_iter().enumerate() {
            let v = confirm(round.clone()).await;
            assert_eq!(v["result"]["resultType"], "complete", "{store} #{n}: {v}");
            assert_eq!(v["result"]["isError"], false, "{store} #{n}: {v}");
            assert_eq!(
                effects(&file),
                ["once-1"],
                "{store}: the round sent again (#{n}) took the effect again"
            );
        }
        // A new exchange (a new first round) is another call: its effect is taken.
        let state = first_round(call.clone()).await;
        answer["requestState"] = json!(state);
        let v = confirm(answer).await;
        assert_eq!(v["result"]["isError"], false, "{store}: {v}");
        assert_eq!(effects(&file), ["once-1", "once-1"], "{store}");
        desk.assert_no_panic_logged();
    }
}

#[tokio::test]
async fn without_the_effects_file_there_is_no_stamp_tool() {
    let desk = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &[]);
    let v = modern(
        &reqwest::Client::new(),
        &desk.mcp_url(),
        "tools/list",
        None,
        json!({}),
        json!({}),
    )
    .await;
    let names: Vec<&str> = v["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"open_ticket"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("stamp")), "{names:?}");
}
