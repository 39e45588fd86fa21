//! Two `fleetmcp-gateway` instances in distributed mode on a real `redis-server`, each in front
//! of `everything` over stdio: a gateway session is a fleet session like any other. The holder
//! runs its upstream process and serves it; the other instance relays to it and runs none; when
//! the holder stops (SIGTERM) or dies (SIGKILL), the other takes the session over and starts a
//! new upstream, initialized with the session's stored `initialize`: the session goes on, and
//! what the old process kept in memory is gone (logged).
//!
//! Needs `redis-server` and `redis-cli` on PATH, and `cargo build -p everything`.

#[path = "../../../examples/e2e_support.rs"]
mod support;

#[path = "../../fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use support_redis::RedisServer;

const NEW_UPSTREAM: &str = "[gateway] starting a new upstream";

/// The `test://stats` counters of the session's upstream process.
fn stats(port: u16, sid: &str) -> Value {
    let read = json!({"jsonrpc": "2.0", "id": 9, "method": "resources/read", "params": {"uri": "test://stats"}});
    let resp = post(port, Some(sid), &read);
    let text = resp.json()["result"]["contents"][0]["text"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| panic!("{}", resp.describe()));
    serde_json::from_str(&text).expect("stats")
}

#[test]
fn a_request_on_the_other_instance_is_relayed_to_the_holder_and_its_process() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut a = fleet_gateway("gw-a", &url, &[]);
    let mut b = fleet_gateway("gw-b", &url, &[]);
    a.wait_ready(Duration::from_secs(20));
    b.wait_ready(Duration::from_secs(20));
    assert!(
        wait_children(b.pid(), 0, Duration::from_secs(10)),
        "B's probe process is reaped"
    );
    let sid = open_session(a.port());
    for name in ["one", "two", "three"] {
        let resp = call(b.port(), &sid, "greet", json!({"name": name}));
        assert_eq!(tool_text(&resp), format!("Hello, {name}!"));
        assert_eq!(machine_of(&resp), Some("gw-a"), "{}", resp.describe());
    }
    // One process, the holder's, served all of them: its counters are the session's.
    let done = call(b.port(), &sid, "test_cancellable", json!({"work_ms": 50}));
    assert_eq!(tool_text(&done), "finished");
    assert_eq!(stats(a.port(), &sid)["completed"], 1);
    assert_eq!(
        children_of(a.pid()).len(),
        1,
        "A runs the session's process"
    );
    assert_eq!(children_of(b.pid()).len(), 0, "B runs none");
    assert!(!b.log().contains(NEW_UPSTREAM), "{}", b.log());

    let resp = http(
        b.port(),
        "DELETE",
        "/mcp",
        &[("mcp-session-id", &sid)],
        None,
    );
    assert_eq!(resp.status, 204, "a relayed DELETE:\n{}", resp.describe());
    assert!(
        wait_children(a.pid(), 0, Duration::from_secs(10)),
        "the holder reaps the process"
    );
}

/// The holder stopped by `signal`: the session's next request, on the other instance, is
/// served there with a new upstream process; the old one's memory (its counters) is gone.
fn the_session_goes_on_after_its_holder(signal: &str) {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut a = fleet_gateway("gw-a", &url, &[("FLEETMCP_DRAIN_MS", "200")]);
    let mut b = fleet_gateway("gw-b", &url, &[]);
    a.wait_ready(Duration::from_secs(20));
    b.wait_ready(Duration::from_secs(20));
    let sid = open_session(a.port());
    let done = call(a.port(), &sid, "test_cancellable", json!({"work_ms": 50}));
    assert_eq!(tool_text(&done), "finished");
    assert_eq!(
        stats(b.port(), &sid)["completed"],
        1,
        "relayed to A's process"
    );
    let a_children = children_of(a.pid());
    assert!(
        a.signal_and_wait(signal, Duration::from_secs(15)).is_some(),
        "gw-a exits"
    );
    std::thread::sleep(Duration::from_millis(200));

    let resp = call(b.port(), &sid, "greet", json!({"name": "after"}));
    assert_eq!(tool_text(&resp), "Hello, after!");
    assert_eq!(machine_of(&resp), Some("gw-b"), "{}", resp.describe());
    assert!(
        b.log().contains(NEW_UPSTREAM),
        "B logs the new upstream:\n{}",
        b.log()
    );
    assert_eq!(
        stats(b.port(), &sid)["completed"],
        0,
        "a new process: the old one's memory is gone"
    );
    assert_eq!(
        children_of(b.pid()).len(),
        1,
        "B runs the session's process now"
    );
    // A's process does not outlive it: SIGTERM stops it with the drain, SIGKILL closes its
    // stdin (the pipe's other end died), and `everything` exits on EOF.
    for pid in a_children {
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        });
        assert!(gone, "gw-a's upstream process {pid} outlived it");
    }
    b.assert_alive();
    b.assert_no_panic_logged();
}

#[test]
fn the_holder_sigkilled_the_session_goes_on_with_a_new_upstream_on_the_other() {
    the_session_goes_on_after_its_holder("KILL");
}

#[test]
fn the_holder_sigtermed_the_session_goes_on_with_a_new_upstream_on_the_other() {
    the_session_goes_on_after_its_holder("TERM");
}

/// The official TypeScript client's session through two gateways behind nginx round robin, its
/// holder stopped by `signal` between two phases (`tools/clients/ts-v1/gateway-failover-
/// client.mjs`): the same session goes on, served by a new upstream process on the other
/// instance (calls, progress, sampling; a subscription made again).
fn a_client_session_goes_on_through_nginx_after_its_holder(signal: &str) {
    support::ensure_tooling();
    let redis = RedisServer::start();
    let url = redis.url();
    let drain = [("FLEETMCP_DRAIN_MS", "200")];
    let mut gateways = [
        fleet_gateway("gw-a", &url, &drain),
        fleet_gateway("gw-b", &url, &drain),
    ];
    for gw in gateways.iter_mut() {
        gw.wait_ready(Duration::from_secs(20));
    }
    let front = support::free_port();
    let ports = [gateways[0].port(), gateways[1].port()];
    let _nginx = support::Nginx::start(&support::Nginx::fleet_conf(&ports, front), front);
    let url = format!("http://127.0.0.1:{front}/mcp");
    let client = PausedClient::start(ts_client("gateway-failover-client.mjs", &url));

    // The holder is the instance running the session's process.
    let holder = gateways
        .iter()
        .position(|g| !children_of(g.pid()).is_empty())
        .expect("one instance runs the session's process");
    let other = 1 - holder;
    assert!(
        gateways[holder]
            .signal_and_wait(signal, Duration::from_secs(15))
            .is_some(),
        "the holder exits"
    );
    let survivor = &gateways[other];
    let out = client.resume(&[survivor]);
    assert_eq!(out.report["ok"], true, "{}", out.stdout);
    out.assert_steps(&["after: same session, greet, progress, sampling, subscribe again + update"]);
    assert!(survivor.log().contains(NEW_UPSTREAM), "{}", survivor.log());
    survivor.assert_no_panic_logged();
}

#[test]
fn a_typescript_client_session_goes_on_through_nginx_after_its_holder_is_sigkilled() {
    a_client_session_goes_on_through_nginx_after_its_holder("KILL");
}

#[test]
fn a_typescript_client_session_goes_on_through_nginx_after_its_holder_is_sigtermed() {
    a_client_session_goes_on_through_nginx_after_its_holder("TERM");
}
