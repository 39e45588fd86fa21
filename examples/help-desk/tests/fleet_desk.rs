//! help-desk as a fleet app (issue 12, item 6): two instances in distributed mode on one real
//! `redis-server`, behind real nginx running `deploy/nginx/fleetmcp.conf`, show one desk. A
//! ticket opened in a session held by one instance is found in a session held by the other,
//! and a subscriber of the ticket on the first hears `notifications/resources/updated` when
//! the other closes it.
//!
//! Needs `redis-server` and nginx (`apt-get install redis-server nginx-light`). Every wait is
//! bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use fleet_client::*;
use serde_json::{Value, json};
use support::Nginx;
use support::raw_http::RawResponse;
use support_redis::RedisServer;

/// A `tools/call` message.
fn call(name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
}

/// `initialize` through `port`; the session id and the machine that created (holds) it.
fn initialize(port: u16) -> (String, String) {
    let (sid, machine) = open_session_held(port);
    let machine = machine.unwrap_or_else(|| panic!("initialize named no machine (session {sid})"));
    (sid, machine)
}

/// Sessions opened through the balancer on `port` until one is held by each of `machines`
/// (round robin gets there in a few); in the order of `machines`. Opening a session takes two
/// requests, so with two instances round robin would send every `initialize` to the same one:
/// a `/healthz` after a session that landed where one already is shifts the turn.
fn one_session_on_each(port: u16, machines: &[&str]) -> Vec<String> {
    let mut held: Vec<Option<String>> = vec![None; machines.len()];
    for _ in 0..12 {
        let (sid, machine) = initialize(port);
        match machines.iter().position(|m| *m == machine) {
            Some(i) if held[i].is_none() => held[i] = Some(sid),
            _ => {
                let resp = http(port, "GET", "/healthz", &[], None, HTTP_LIMIT);
                assert_eq!(resp.status, 200, "/healthz:\n{}", resp.describe());
            }
        }
        if held.iter().all(Option::is_some) {
            return held.into_iter().flatten().collect();
        }
    }
    panic!("12 sessions through the balancer did not land on every one of {machines:?}: {held:?}");
}

/// The structured content of a successful tool result.
fn structured(resp: &RawResponse, what: &str) -> Value {
    assert_tool_ok(resp, what);
    resp.json()["result"]["structuredContent"].clone()
}

#[test]
fn two_desks_behind_nginx_share_tickets_and_notify_each_others_subscribers() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let lb_port = support::free_port();
    let nginx = Nginx::start(&Nginx::fleet_conf(&[a.port(), b.port()], lb_port), lb_port);
    let lb = nginx.port();

    let sessions = one_session_on_each(lb, &["desk-a", "desk-b"]);
    let (sa, sb) = (&sessions[0], &sessions[1]);

    // Opened in A's session: the handler runs on A (whichever instance nginx picked relays
    // the request to the session's holder).
    let opened = structured(
        &post(
            lb,
            Some(sa),
            &call(
                "open_ticket",
                json!({"title": "Printer on fire", "priority": "high"}),
            ),
        ),
        "open a ticket in A's session",
    );
    let id = opened["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no ticket id in {opened}"));
    assert_eq!(
        redis.cli(&["HEXISTS", "mcp:helpdesk:tickets", &id.to_string()]),
        "1",
        "the ticket is stored in Redis"
    );

    // Found in B's session, that is by B, and on B's own port too.
    for port in [lb, b.port()] {
        let found = structured(
            &post(
                port,
                Some(sb),
                &call("find_tickets", json!({"query": "printer"})),
            ),
            "find the ticket in B's session",
        );
        let ids: Vec<u64> = found["tickets"]
            .as_array()
            .map(|ts| ts.iter().filter_map(|t| t["id"].as_u64()).collect())
            .unwrap_or_default();
        assert_eq!(ids, vec![id], "B's desk: {found}");
    }

    // A's session subscribes to the ticket (through nginx); its stream is on A, its holder.
    let uri = format!("helpdesk://tickets/{id}");
    let subscribe = json!({"jsonrpc": "2.0", "id": next_id(), "method": "resources/subscribe",
                           "params": {"uri": uri}});
    let resp = post(lb, Some(sa), &subscribe);
    assert_eq!(resp.status, 200, "subscribe:\n{}", resp.describe());
    let mut stream = open_get_stream(a.port(), sa);

    // B closes it.
    let closed = structured(
        &post(
            lb,
            Some(sb),
            &call(
                "close_ticket",
                json!({"id": id, "resolution": "extinguished"}),
            ),
        ),
        "close the ticket in B's session",
    );
    assert_eq!(closed["status"], "closed", "{closed}");
    read_stream_until(&mut stream, &["notifications/resources/updated", &uri]);

    // And A reads it closed.
    let read = json!({"jsonrpc": "2.0", "id": next_id(), "method": "resources/read",
                      "params": {"uri": uri}});
    let resp = post(lb, Some(sa), &read);
    assert_eq!(resp.status, 200, "read:\n{}", resp.describe());
    let text = resp.json()["result"]["contents"][0]["text"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| panic!("no text content:\n{}", resp.describe()));
    let ticket: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(ticket["resolution"], "extinguished", "{ticket}");
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

fn post(port: u16, sid: Option<&str>, msg: &Value) -> RawResponse {
    post_with(port, sid, &[], msg, HTTP_LIMIT)
}

/// F12 (found by the second 30-minute soak): nginx takes an instance out for `fail_timeout`
/// after one failure, and answers `502` "no live upstreams" without trying any instance while
/// every one is out, even one that is back: a restart (about 0.1 s) is much faster than the
/// `fail_timeout` (2 s). Here both instances are killed, a request finds both down (each
/// marked failed), both are started again on their ports, and a request comes within the
/// `fail_timeout`: before the fix nginx answered it `502` without trying them; with the
/// shipped file it reaches an instance that is up.
#[test]
fn nginx_tries_an_instance_that_came_back_before_its_fail_timeout_ran_out() {
    use std::time::{Duration, Instant};
    let redis = RedisServer::start();
    let url = redis.url();
    let env: Vec<(&str, &str)> = vec![
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_HOST", ""),
        ("REDIS_PORT", ""),
    ];
    let start = |machine: &str, port: u16| {
        let mut env = env.clone();
        env.push(("MACHINE_ID", machine));
        support::Instance::start_on(env!("CARGO_BIN_EXE_help-desk"), port, &env)
    };
    let (pa, pb) = (support::free_port(), support::free_port());
    let mut both = vec![start("desk-a", pa), start("desk-b", pb)];
    let lb_port = support::free_port();
    let nginx = Nginx::start(&Nginx::fleet_conf(&[pa, pb], lb_port), lb_port);
    let through = || http(lb_port, "GET", "/healthz", &[], None, HTTP_LIMIT);
    assert_eq!(through().status, 200, "through nginx, both up");
    // The restart must land within the fail_timeout for the test to say anything: on a loaded
    // machine two instances can take longer to start, and then the round is run again.
    for round in 1..=3 {
        for i in &mut both {
            assert!(i.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
        }
        let down = through();
        let failed_at = Instant::now();
        assert_eq!(down.status, 502, "both down:\n{}", down.describe());
        // Both started at once: each waits for its own health.
        both = std::thread::scope(|s| {
            let a = s.spawn(|| start("desk-a", pa));
            let b = s.spawn(|| start("desk-b", pb));
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        let back = through();
        let within = failed_at.elapsed();
        if within >= Duration::from_secs(2) {
            eprintln!("round {round}: the instances took {within:?} to come back; again");
            continue;
        }
        assert_eq!(
            back.status,
            200,
            "{within:?} after both were marked failed, both back:\n{}\nnginx:\n{}",
            back.describe(),
            nginx.error_log()
        );
        return;
    }
    panic!("in 3 rounds the instances never came back within the fail_timeout this tests");
}
