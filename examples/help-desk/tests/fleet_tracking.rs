//! Client-side caching by holder (issue 37): each `help-desk` instance's tracking connection
//! is told of the records of the sessions it holds, not of the fleet's. Ids an instance mints
//! start with its tag, and its tracking connection subscribes to that prefix alone; a session
//! it comes to hold under another tag (claimed by the orphan scanner, taken over on demand) is
//! tracked once its prefix is added, and still seen deleted at once.
//!
//! Real `redis-server` and real `help-desk` processes; needs `redis-server` and `redis-cli` on
//! `PATH` (or `REDIS_SERVER` / `REDIS_CLI`). Every wait is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::json;
use support::Instance;
use support::raw_http::RawResponse;
use support_redis::{Monitor, RedisCluster, RedisServer};

/// `resources/read` of the service levels in session `sid`: a request whose handler touches
/// no Redis, so that whatever it costs in Redis is the session's check.
fn read_sla(port: u16, sid: &str) -> RawResponse {
    let read = json!({"jsonrpc": "2.0", "id": next_id(), "method": "resources/read",
        "params": {"uri": "helpdesk://policies/sla"}});
    post_with(port, Some(sid), &[], &read, HTTP_LIMIT)
}

/// A field of `INFO` (`tracking_clients`, `tracking_total_prefixes`).
fn info(redis: &RedisServer, field: &str) -> u64 {
    let all = redis.cli(&["INFO", "everything"]);
    all.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO has no {field}:\n{all}"))
}

/// Waits until `INFO` says `field` is `want`.
fn wait_info(redis: &RedisServer, field: &str, want: u64) {
    wait_until(&format!("{field} {want}"), Duration::from_secs(10), || {
        info(redis, field) == want
    });
}

/// `fleetmcp_session_invalidations_total` of the instance at `port`.
fn invalidations(port: u16) -> u64 {
    metric(port, "fleetmcp_session_invalidations_total").expect("the invalidation counter")
}

/// Two instances in distributed mode on `redis`, both tracking (each its own prefix).
fn two_desks(redis: &RedisServer, extra: &[(&str, &str)]) -> (Instance, Instance) {
    let a = distributed_desk("desk-a", &redis.url(), extra);
    let b = distributed_desk("desk-b", &redis.url(), extra);
    wait_info(redis, "tracking_clients", 2);
    (a, b)
}

/// A record write of a session minted and held by B is pushed to B alone: 20 writes from
/// outside reach B's tracking connection, none A's. Before, every instance subscribed to every
/// record (`mcp:session:`, one prefix for the fleet) and A got all 20.
#[test]
fn a_record_write_of_a_session_held_elsewhere_is_not_pushed_here() {
    let redis = RedisServer::start();
    let (a, b) = two_desks(&redis, &[]);
    let held_by_b = [open_session(b.port()), open_session(b.port())];
    let held_by_a = open_session(a.port());
    assert_eq!(
        held_by_b[0][..4],
        held_by_b[1][..4],
        "one instance, one tag"
    );
    assert_ne!(held_by_b[0][..4], held_by_a[..4], "two instances, two tags");
    // Let the creations' pushes land before counting.
    thread::sleep(Duration::from_millis(300));
    let (a0, b0) = (invalidations(a.port()), invalidations(b.port()));
    let key = format!("mcp:session:{}", held_by_b[0]);
    for _ in 0..20 {
        redis.cli(&["PEXPIRE", &key, "3600000"]);
    }
    wait_until("B told of the 20 writes", Duration::from_secs(5), || {
        invalidations(b.port()) - b0 >= 20
    });
    thread::sleep(Duration::from_millis(200));
    let told_a = invalidations(a.port()) - a0;
    eprintln!(
        "20 writes of a record of B's: B told {}, A told {told_a}",
        invalidations(b.port()) - b0
    );
    assert_eq!(
        told_a, 0,
        "A was told of writes to a record it does not hold"
    );
    // One prefix per instance: its tag.
    assert_eq!(info(&redis, "tracking_total_prefixes"), 2);
}

/// Calls on session `sid` held by the instance at `port` are served without checking its
/// record once it is tracked (MONITOR sees no command on its key), and a `DEL` of the record
/// from outside is seen by the very next calls: 404 within a second, not at the next refresh.
fn cached_and_still_sees_a_delete(redis: &RedisServer, port: u16, sid: &str, what: &str) {
    let key = format!("mcp:session:{sid}");
    // Until the check that confirms it ran on the tracking connection: then 5 calls, not one
    // command on the record's key (MONITOR wrote every command before the marker after them).
    wait_until(
        &format!("{what}: 5 calls served without checking the record"),
        Duration::from_secs(5),
        || {
            let monitor = Monitor::start(redis);
            for _ in 0..5 {
                assert_eq!(read_sla(port, sid).status, 200, "{what}");
            }
            let marker = format!("calls-done-{}", next_id());
            redis.cli(&["ECHO", &marker]);
            wait_until("MONITOR writes the marker", Duration::from_secs(5), || {
                monitor.commands().contains(&marker)
            });
            !monitor.commands().lines().any(|l| l.contains(&key))
        },
    );
    redis.cli(&["DEL", &key]);
    let began = Instant::now();
    let status = loop {
        let status = read_sla(port, sid).status;
        if status != 200 || began.elapsed() > Duration::from_secs(1) {
            break status;
        }
        thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        status, 404,
        "{what}: the record deleted by hand was not seen"
    );
}

/// A session held by the instance that minted it: cached, and its deletion seen at once.
#[test]
fn an_own_session_is_cached_and_its_deletion_seen_at_once() {
    let redis = RedisServer::start();
    let (_a, b) = two_desks(&redis, &[]);
    let sid = open_session(b.port());
    cached_and_still_sees_a_delete(&redis, b.port(), &sid, "B's own session");
}

/// A session taken over on demand from a killed holder is tracked at its new holder under the
/// old holder's tag (its prefix added to the tracking connection): cached, and its deletion
/// seen at once.
#[test]
fn a_session_taken_over_on_demand_is_cached_and_its_deletion_seen_at_once() {
    let redis = RedisServer::start();
    let (mut a, b) = two_desks(&redis, &[]);
    let sid = open_session(a.port());
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    wait_info(&redis, "tracking_clients", 1);
    let resp = read_sla(b.port(), &sid);
    assert_eq!(resp.status, 200, "{}", resp.describe());
    assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
    cached_and_still_sees_a_delete(&redis, b.port(), &sid, "a session taken over");
    // B's own tag and A's (A is gone: its prefix was the only other).
    assert_eq!(info(&redis, "tracking_total_prefixes"), 2);
}

/// A session the orphan scanner claimed from a killed holder: the same.
#[test]
fn a_session_claimed_by_the_scanner_is_cached_and_its_deletion_seen_at_once() {
    let redis = RedisServer::start();
    let (mut a, b) = two_desks(&redis, &QUICK_FAILOVER);
    let sid = open_session(a.port());
    let key = format!("mcp:session:{sid}");
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    wait_until(
        "the scanner claims A's session",
        Duration::from_secs(10),
        || redis.cli(&["GET", &key]).contains("\"nodeId\":\"desk-b\""),
    );
    cached_and_still_sees_a_delete(&redis, b.port(), &sid, "a session claimed by the scanner");
}

/// On a three-master cluster, where the tracker keeps one connection per master: sessions of a
/// killed holder, taken over on demand, are tracked at their new holder on whichever master
/// serves their record (the old holder's prefix added on every master), cached, and their
/// deletion seen at once.
#[test]
fn on_a_cluster_sessions_taken_over_are_cached_and_their_deletion_seen_at_once() {
    let cluster = RedisCluster::start(3, 0);
    let nodes = cluster.nodes_env();
    let env = [("REDIS_CLUSTER_NODES", nodes.as_str())];
    let mut a = distributed_desk("desk-a", "", &env);
    let b = distributed_desk("desk-b", "", &env);
    let sids: Vec<String> = (0..6).map(|_| open_session(a.port())).collect();
    let masters: std::collections::BTreeSet<u16> = sids
        .iter()
        .map(|sid| cluster.master_of(&format!("mcp:session:{sid}")).port)
        .collect();
    assert!(masters.len() >= 2, "6 records on one master: {masters:?}");
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    for sid in &sids {
        wait_until("B takes the session over", Duration::from_secs(5), || {
            read_sla(b.port(), sid).status == 200
        });
        let master = cluster.master_of(&format!("mcp:session:{sid}"));
        cached_and_still_sees_a_delete(master, b.port(), sid, "a session taken over");
    }
}
