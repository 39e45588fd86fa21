//! The operator's command (issue 12, item 5), run as `help-desk fleet ...` against real
//! instances in distributed mode on a real `redis-server`: `status` lists them with their
//! sessions, and orphaned sessions and tasks from the indexes (never `KEYS` or `SCAN`);
//! `drain <machine-id>` makes the named instance stop gracefully (exit 0) while the other
//! serves on, and a request not signed with the fleet's secret is dropped.
//!
//! Needs `redis-server` and `redis-cli`. Every wait is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::process::Command;
use std::time::Duration;

use fleet_client::*;
use serde_json::json;
use support::{Output, TempDir};
use support_redis::{Monitor, RedisServer};

/// `help-desk fleet <args>` with the fleet's environment (`redis`, `secret`), within 15 s.
fn ctl(redis: &str, secret: &str, args: &[&str]) -> Output {
    let scratch = TempDir::new("fleet-ctl");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_help-desk"));
    cmd.arg("fleet")
        .args(args)
        .env("REDIS_URL", redis)
        .env("MCP_SESSION_SECRET", secret)
        .env_remove("REDIS_HOST")
        .env_remove("REDIS_PORT")
        .env_remove("FLEETMCP_CONFIG")
        .env_remove("FRONTMCP_HA_KEY_PREFIX");
    support::run(&mut cmd, Duration::from_secs(15), scratch.path())
}

/// `status`, which must succeed; its output.
fn status(redis: &str) -> String {
    let out = ctl(redis, support::SESSION_SECRET, &["status"]);
    assert!(out.success(), "status failed:\n{}", out.describe());
    out.stdout
}

/// The row of `machine` in a `status` table, split on whitespace (the start time has spaces,
/// so: machine id, state, ..., sessions, tasks).
fn row<'a>(table: &'a str, machine: &str) -> Option<Vec<&'a str>> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(machine))
        .map(|l| l.split_whitespace().collect())
}

/// `tools/call find_tickets` on `port` in session `sid`, which must succeed.
fn find_ok(port: u16, sid: &str, what: &str) {
    let call = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
                      "params": {"name": "find_tickets", "arguments": {}}});
    assert_tool_ok(&post_with(port, Some(sid), &[], &call, HTTP_LIMIT), what);
}

#[test]
fn status_lists_the_fleet_and_drain_stops_the_named_instance_gracefully() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("ctl-a", &url, &[]);
    let mut b = distributed_desk(
        "ctl-b",
        &url,
        &[
            ("FLEETMCP_DRAIN_MS", "300"),
            ("FLEETMCP_SHUTDOWN_GRACE_MS", "1000"),
        ],
    );
    let on_a = [open_session(a.port()), open_session(a.port())];
    let on_b = open_session(b.port());

    let table = status(&url);
    assert!(
        table.starts_with("2 instance(s) alive, 0 gone; 0 orphaned session(s)\n"),
        "{table}"
    );
    for (machine, port, sessions) in [("ctl-a", a.port(), "2"), ("ctl-b", b.port(), "1")] {
        let cells = row(&table, machine).unwrap_or_else(|| panic!("no {machine} in:\n{table}"));
        assert_eq!(cells[1], "alive", "{table}");
        assert!(
            cells.contains(&format!("127.0.0.1:{port}").as_str()),
            "{machine}'s address in:\n{table}"
        );
        assert_eq!(cells[cells.len() - 2..], [sessions, "0"], "{table}");
    }

    // Signed with another secret: B drops it and serves on, and the command says B refused it
    // (exit 1), not that the request went out.
    let forged = ctl(&url, "not-the-fleet-secret-at-all", &["drain", "ctl-b"]);
    assert_eq!(
        forged.status.and_then(|s| s.code()),
        Some(1),
        "{}",
        forged.describe()
    );
    assert!(
        forged
            .stderr
            .contains("ctl-b refused the drain request: its MAC does not verify"),
        "{}",
        forged.describe()
    );
    assert!(
        !forged.stdout.contains("drain requested"),
        "{}",
        forged.describe()
    );
    assert_log_has(
        &b,
        "B",
        "Dropped a drain request on this instance's channel",
    );
    std::thread::sleep(Duration::from_millis(500));
    b.assert_alive();
    find_ok(b.port(), &on_b, "B after a forged drain request");

    // No such instance.
    let nobody = ctl(&url, support::SESSION_SECRET, &["drain", "ctl-z"]);
    assert_eq!(
        nobody.status.and_then(|s| s.code()),
        Some(1),
        "{}",
        nobody.describe()
    );
    assert!(
        nobody
            .stderr
            .contains("no running instance listens as ctl-z"),
        "{}",
        nobody.describe()
    );

    // The real request: B drains (300 ms) and exits 0; A serves its own sessions and B's.
    let drain = ctl(&url, support::SESSION_SECRET, &["drain", "ctl-b"]);
    assert!(drain.success(), "{}", drain.describe());
    assert!(
        drain.stdout.contains("ctl-b: drain requested"),
        "{}",
        drain.describe()
    );
    let exit = b.wait_exit(Duration::from_secs(10));
    assert!(
        exit.is_some_and(|s| s.success()),
        "B did not exit 0 after the drain request ({exit:?}):\n{}",
        b.log()
    );
    assert_log_has(&b, "B", "Drain requested by the operator");
    for sid in &on_a {
        find_ok(a.port(), sid, "A's session after B drained");
    }
    find_ok(a.port(), &on_b, "B's session through A after B drained");

    let table = status(&url);
    assert_eq!(row(&table, "ctl-a").map(|c| c[1]), Some("alive"), "{table}");
    assert_ne!(row(&table, "ctl-b").map(|c| c[1]), Some("alive"), "{table}");
    a.assert_no_panic_logged();
}

/// A fleet written into Redis by hand (no instance runs, so no orphan scanner claims anything
/// meanwhile): one instance alive, with the single index of a version before the buckets, one
/// gone with three sessions in two buckets of its index and a task in its indexes.
#[test]
fn status_counts_orphaned_sessions_and_tasks_from_the_indexes_without_keys_or_scan() {
    let redis = RedisServer::start();
    let url = redis.url();
    let now = unix_ms();
    let (long_ago, started) = ((now - 60_000).to_string(), (now - 600_000).to_string());
    let beat = json!({"nodeId": "live", "startedAt": now - 600_000, "lastBeat": now,
                      "sessionCount": 1, "address": "10.0.0.7:3000"});
    for cmd in [
        vec!["SET", "mcp:ha:heartbeat:live", &beat.to_string()],
        vec!["ZADD", "mcp:ha:nodes", &started, "live"],
        vec!["ZADD", "mcp:node:live:sessions", &long_ago, "s0"],
        vec!["ZADD", "mcp:ha:nodes", &long_ago, "ghost"],
        vec!["SET", "mcp:node:ghost:buckets", "2"],
        vec![
            "ZADD",
            "mcp:node:ghost:sessions:0",
            &long_ago,
            "s1",
            &long_ago,
            "s2",
        ],
        vec!["ZADD", "mcp:node:ghost:sessions:1", &long_ago, "s3"],
        vec!["SADD", "mcp:task:executor:ghost", "mcp:task:records:s1:t1"],
        // A graceful stop scores an instance 0 (its sessions already claimed: no index).
        vec!["ZADD", "mcp:ha:nodes", "0", "stopped"],
    ] {
        redis.cli(&cmd);
    }
    let monitor = Monitor::start(&redis);
    let table = status(&url);
    assert!(
        table.starts_with("1 instance(s) alive, 2 gone; 3 orphaned session(s)\n"),
        "{table}"
    );
    let live = row(&table, "live").unwrap_or_else(|| panic!("no live row:\n{table}"));
    assert_eq!(live[1], "alive", "{table}");
    assert!(live.contains(&"10.0.0.7:3000"), "{table}");
    assert_eq!(live[live.len() - 2..], ["1", "0"], "{table}");
    let ghost = row(&table, "ghost").unwrap_or_else(|| panic!("no ghost row:\n{table}"));
    assert_eq!(ghost[1], "gone", "{table}");
    assert_eq!(ghost[ghost.len() - 3..], ["3", "orphaned", "1"], "{table}");
    // The ghost's beat is a minute old (plus the time the command took to start).
    let age: f64 = ghost[3]
        .parse()
        .unwrap_or_else(|e| panic!("beat age {:?}: {e}\n{table}", ghost[3]));
    assert!((60.0..70.0).contains(&age), "{table}");
    let stopped = row(&table, "stopped").unwrap_or_else(|| panic!("no stopped row:\n{table}"));
    assert_eq!(stopped[1..4], ["gone", "-", "stopped"], "{table}");

    let commands = monitor.commands().to_uppercase();
    assert!(commands.contains("\"ZREVRANGE\""), "{commands}");
    for banned in ["\"KEYS\"", "\"SCAN\""] {
        assert!(
            !commands.contains(banned),
            "status ran {banned}:\n{commands}"
        );
    }
}
