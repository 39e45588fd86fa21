//! A 2026-07-28 multi-round request (`InputRequiredResult` rounds carrying a sealed
//! `requestState`) whose rounds land on different instances: two `everything` processes in
//! distributed mode on one real redis-server, configured as a fleet is at the least, with
//! `MCP_SESSION_SECRET` and neither `VAULT_SECRET` nor `JWT_SECRET`. The state sealed by one
//! instance opens on the other (its key comes from the session secret), and neither warns at
//! start that it seals with a per-process key.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

use serde_json::{Value, json};
use support::Instance;
use support_redis::RedisServer;

const MODERN: &str = "2026-07-28";
const TOOL: &str = "test_input_required_result_multi_round";

/// An instance of `everything` in distributed mode: `MCP_SESSION_SECRET` (set by
/// [`Instance::start`]) is its only secret.
fn start(machine: &str, redis: &RedisServer) -> Instance {
    let url = redis.url();
    Instance::start(
        env!("CARGO_BIN_EXE_everything"),
        &[
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("FRONTMCP_BIND_ADDRESS", "loopback"),
            ("MACHINE_ID", machine),
            ("REDIS_URL", url.as_str()),
        ],
    )
}

/// One round of the multi-round call through `url`, with `extra` params (`inputResponses`,
/// `requestState`); the HTTP status and the JSON-RPC answer.
async fn round(http: &reqwest::Client, url: &str, id: u64, extra: Value) -> (u16, Value) {
    let mut params = json!({
        "name": TOOL,
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        },
    });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            params[k] = v;
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let res = support::modern_post(http, url, "tools/call", Some(TOOL), &body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("round {id} to {url}: {e}"));
    let status = res.status().as_u16();
    let v = res
        .json()
        .await
        .unwrap_or_else(|e| panic!("round {id} answer: {e}"));
    (status, v)
}

fn answer(field: &str, value: &str) -> Value {
    json!({"action": "accept", "content": {field: value}})
}

/// The round's `requestState`, after checking it asks exactly `key`.
fn asks(v: &Value, key: &str) -> String {
    let r = &v["result"];
    assert_eq!(r["resultType"], "input_required", "{v}");
    assert!(r["inputRequests"].get(key).is_some(), "asks {key}: {v}");
    r["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("no requestState: {v}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rounds_of_one_request_land_on_different_instances_with_only_the_session_secret() {
    let redis = RedisServer::start();
    let a = start("mrtr-a", &redis);
    let b = start("mrtr-b", &redis);
    let http = reqwest::Client::new();

    // Round 1 on A: the first question, and A's state.
    let (status, v) = round(&http, &a.mcp_url(), 1, json!({})).await;
    assert_eq!(status, 200, "{v}");
    let state1 = asks(&v, "step1");

    // Round 2 on B: B opens A's state, and asks the second question.
    let (status, v) = round(
        &http,
        &b.mcp_url(),
        2,
        json!({"inputResponses": {"step1": answer("name", "Ada")}, "requestState": state1}),
    )
    .await;
    assert_eq!(
        status, 200,
        "B could not open the state A sealed (with no VAULT_SECRET or JWT_SECRET, the key must come from MCP_SESSION_SECRET): {v}"
    );
    let state2 = asks(&v, "step2");

    // Round 3 back on A: A opens B's state; the first answer came through both.
    let (status, v) = round(
        &http,
        &a.mcp_url(),
        3,
        json!({"inputResponses": {"step2": answer("color", "green")}, "requestState": state2}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    assert_eq!(v["result"]["content"][0]["text"], "Ada likes green", "{v}");

    // A state that is not one of the fleet's is still refused, on either instance.
    let (status, v) = round(
        &http,
        &b.mcp_url(),
        4,
        json!({"inputResponses": {"step1": answer("name", "Eve")}, "requestState": "bm90LWEtc3RhdGUtb2YtdGhpcy1mbGVldC0wMTIzNDU2Nzg5"}),
    )
    .await;
    assert_eq!((status, &v["error"]["code"]), (400, &json!(-32602)), "{v}");

    for (who, instance) in [("A", &a), ("B", &b)] {
        let log = instance.log();
        assert!(
            !log.contains("per-process key"),
            "{who} warned of a per-process requestState key though MCP_SESSION_SECRET is set:\n{log}"
        );
        instance.assert_no_panic_logged();
    }
}

/// With no shared secret at all (no `MCP_SESSION_SECRET`, `VAULT_SECRET` or `JWT_SECRET`) an
/// instance that shares Redis still warns at start: its states open nowhere else.
#[test]
fn an_instance_sharing_redis_with_no_secret_at_all_warns() {
    let redis = RedisServer::start();
    let url = redis.url();
    let lone = Instance::start(
        env!("CARGO_BIN_EXE_everything"),
        &[("MCP_SESSION_SECRET", ""), ("REDIS_URL", url.as_str())],
    );
    let log = lone.log();
    assert!(
        log.contains("requestState is signed with a per-process key"),
        "no warning without any shared secret:\n{log}"
    );
    lone.assert_no_panic_logged();
}
