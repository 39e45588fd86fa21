//! Redis Cluster (issue 12): two distributed `help-desk` processes on a real three-master
//! cluster (`redis-cli --cluster create`, `REDIS_CLUSTER_NODES`). Sessions opened on either
//! instance are served through both (the relay), the tickets are one desk, the fleet's keys
//! are spread over the masters, the operator's `status` reads the fleet, and a holder killed
//! with SIGKILL has its sessions served again by the other within two seconds.
//!
//! The same flows on one server are in `fleet_redis.rs` and `fleet_desk.rs`; the library's own
//! tests (`crates/fleetmcp/tests/redis_store.rs`, `redis_tasks.rs`, `limits.rs`) run their
//! session, SSE-resumption, task and limit tests on a cluster too.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::process::Command;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support_redis::RedisCluster;

const VALIDATED: &str = "[TransportService] Session store connection validated successfully";

/// The text of a tool result's first content block.
fn text_of(resp: &support::raw_http::RawResponse) -> String {
    resp.json()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_fleet_on_a_three_master_cluster_serves_sessions_everywhere_and_survives_a_killed_holder() {
    let cluster = RedisCluster::start(3, 0);
    let nodes = cluster.nodes_env();
    let env = [
        ("REDIS_CLUSTER_NODES", nodes.as_str()),
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1500"),
    ];
    let mut a = distributed_desk("desk-a", "", &env);
    let b = distributed_desk("desk-b", "", &env);
    for (i, who) in [(&a, "desk-a"), (&b, "desk-b")] {
        assert_log_has(i, who, VALIDATED);
    }

    // Sessions made on both instances, each called through both: the holder answers (a call
    // on the other is relayed to it).
    let mut held_by_a = Vec::new();
    for n in 0..8 {
        let (port, maker) = if n % 2 == 0 {
            (a.port(), "desk-a")
        } else {
            (b.port(), "desk-b")
        };
        let (sid, holder) = open_session_held(port);
        assert_eq!(
            holder.as_deref(),
            Some(maker),
            "initialize answered by its maker"
        );
        for other in [a.port(), b.port()] {
            let resp = call_tool(other, &sid, &[], "find_tickets", json!({}));
            assert_served_by(&resp, maker, "a call through either instance");
        }
        assert_eq!(
            cluster.cli(&["EXISTS", &format!("mcp:session:{sid}")]),
            "1",
            "the record is in the cluster"
        );
        if maker == "desk-a" {
            held_by_a.push(sid);
        }
    }
    // The holders' indexes name their sessions (each index lives in its own slot).
    let index_a = cluster.cli(&["ZRANGE", "mcp:node:desk-a:sessions:0", "0", "-1"]);
    for sid in &held_by_a {
        assert!(
            index_a.contains(sid.as_str()),
            "{sid} in A's index: {index_a}"
        );
    }

    // One desk: a ticket opened through A is found through B.
    let sid = open_session(a.port());
    let sid_b = open_session(b.port());
    let opened = call_tool(
        a.port(),
        &sid,
        &[],
        "open_ticket",
        json!({"title": "cluster printer"}),
    );
    assert_tool_ok(&opened, "open a ticket");
    let found = call_tool(
        b.port(),
        &sid_b,
        &[],
        "find_tickets",
        json!({"query": "cluster printer"}),
    );
    assert_tool_ok(&found, "find it elsewhere");
    assert!(
        text_of(&found).contains("cluster printer"),
        "{}",
        found.describe()
    );

    // The keys are spread over the masters: the cluster is really sharding them.
    let holding: Vec<u16> = cluster
        .nodes
        .iter()
        .filter(|n| n.cli(&["DBSIZE"]).parse::<u64>().unwrap_or(0) > 0)
        .map(|n| n.port)
        .collect();
    assert!(
        holding.len() >= 2,
        "keys on {} of 3 masters only",
        holding.len()
    );

    // The operator's view reads the fleet from the cluster.
    let scratch = support::TempDir::new("cluster-ctl");
    let mut ctl = Command::new(env!("CARGO_BIN_EXE_help-desk"));
    ctl.args(["fleet", "status"])
        .env("REDIS_CLUSTER_NODES", &nodes)
        .env("MCP_SESSION_SECRET", support::SESSION_SECRET)
        .env_remove("REDIS_URL")
        .env_remove("REDIS_HOST")
        .env_remove("REDIS_PORT")
        .env_remove("FLEETMCP_CONFIG")
        .env_remove("FRONTMCP_HA_KEY_PREFIX");
    let out = support::run(&mut ctl, Duration::from_secs(15), scratch.path());
    assert!(
        out.success() && out.stdout.contains("desk-a") && out.stdout.contains("desk-b"),
        "`help-desk fleet status` on a cluster:\n{}",
        out.describe()
    );

    // A is killed: its sessions are served by B within two seconds of the first request.
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    let began = Instant::now();
    for sid in &held_by_a {
        let deadline = Instant::now() + Duration::from_secs(5);
        let resp = loop {
            let resp = call_tool(b.port(), sid, &[], "find_tickets", json!({}));
            if resp.status != 503 || Instant::now() > deadline {
                break resp;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_served_by(&resp, "desk-b", "a killed holder's session, on B");
    }
    let served_after = began.elapsed();
    eprintln!(
        "cluster: {} sessions of a SIGKILLed holder served again within {served_after:?}",
        held_by_a.len()
    );
    assert!(
        served_after < Duration::from_secs(2),
        "served again after {served_after:?}"
    );
    for sid in &held_by_a {
        let raw = cluster.cli(&["GET", &format!("mcp:session:{sid}")]);
        let stored: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        assert_eq!(stored["session"]["nodeId"], "desk-b", "{raw}");
    }
    b.assert_no_panic_logged();
}

/// A master of a cluster with replicas is killed (SIGKILL) under a light load: the cluster
/// promotes its replica, both instances follow the new slot map without a restart, no session
/// is lost, and every answer meanwhile is a success or the documented `503` with
/// `Retry-After`.
#[test]
fn a_cluster_master_killed_under_load_is_followed_without_a_restart_and_loses_no_session() {
    let mut cluster = RedisCluster::start(3, 1);
    let nodes = cluster.nodes_env();
    let env = [
        ("REDIS_CLUSTER_NODES", nodes.as_str()),
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1500"),
    ];
    let a = distributed_desk("desk-a", "", &env);
    let b = distributed_desk("desk-b", "", &env);
    for (i, who) in [(&a, "desk-a"), (&b, "desk-b")] {
        assert_log_has(i, who, VALIDATED);
    }
    let ports = [a.port(), b.port()];
    let sessions: Vec<String> = (0..6).map(|c| open_session(ports[c % 2])).collect();

    let load = LightLoad::start(&ports, &sessions);

    std::thread::sleep(Duration::from_secs(1));
    // The master of the first session's record.
    let killed_at = Instant::now();
    let killed = cluster.kill_master_of(&format!("mcp:session:{}", sessions[0]));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let info = cluster.cli(&["CLUSTER", "INFO"]);
        let slots = cluster.cli(&["CLUSTER", "SLOTS"]);
        if info.contains("cluster_state:ok") && !slots.contains(&killed.to_string()) {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster never failed over");
        std::thread::sleep(Duration::from_millis(50));
    }
    let switched = killed_at.elapsed();
    // Light load on the new topology for a while.
    std::thread::sleep(Duration::from_secs(3));
    let seen = load.stop();
    assert_only_documented_errors("cluster failover", &seen, killed_at, switched);
    for sid in &sessions {
        assert_eq!(
            cluster.cli(&["EXISTS", &format!("mcp:session:{sid}")]),
            "1",
            "no session lost in the failover"
        );
    }
    // A session opened now lands on the new topology.
    let fresh = open_session(a.port());
    assert_tool_ok(
        &call_tool(b.port(), &fresh, &[], "find_tickets", json!({})),
        "a session opened after the failover",
    );
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}
