//! Redis Sentinel (issue 12): two distributed `help-desk` instances find their Redis through
//! three real sentinels watching a real master and its replica, and ride out a failover
//! (`SENTINEL FAILOVER`) under a light load without a restart: no session is lost, every answer
//! is a success or the documented `503` with `Retry-After`, and what is written after the switch
//! lands on the new master.

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
use support_redis::SentinelSet;

const MASTER: &str = "desk-master";

/// Two distributed instances, `desk-a` and `desk-b`, finding Redis through `set`'s sentinels,
/// with a short heartbeat and `extra` settings; returned once both are connected.
fn two_desks(set: &SentinelSet, extra: &[(&str, &str)]) -> (Instance, Instance) {
    let addresses = set.addresses();
    let mut env = vec![
        ("REDIS_SENTINELS", addresses.as_str()),
        ("REDIS_SENTINEL_MASTER", MASTER),
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1500"),
    ];
    env.extend_from_slice(extra);
    let a = distributed_desk("desk-a", "", &env);
    let b = distributed_desk("desk-b", "", &env);
    for (i, who) in [(&a, "desk-a"), (&b, "desk-b")] {
        assert_log_has(
            i,
            who,
            "[TransportService] Session store connection validated successfully",
        );
    }
    (a, b)
}

#[test]
fn a_sentinel_failover_is_followed_without_a_restart_and_loses_no_session() {
    let set = SentinelSet::start(MASTER);
    let (master, replica, sentinels) = (&set.master, &set.replica, &set.sentinels);
    let (a, b) = two_desks(&set, &[]);
    let ports = [a.port(), b.port()];
    // Four clients, their sessions opened on either instance, each calling through both.
    let sessions: Vec<String> = (0..4).map(|c| open_session(ports[c % 2])).collect();
    for sid in &sessions {
        assert_eq!(
            master.cli(&["EXISTS", &format!("mcp:session:{sid}")]),
            "1",
            "stored on the master the sentinels named"
        );
    }

    let load = LightLoad::start(&ports, &sessions);

    thread::sleep(Duration::from_secs(1));
    let switched_at = Instant::now();
    assert_eq!(sentinels[0].cli(&["SENTINEL", "FAILOVER", MASTER]), "OK");
    let deadline = Instant::now() + Duration::from_secs(15);
    while sentinels
        .iter()
        .any(|s| s.master_port(MASTER) != Some(replica.port))
    {
        assert!(Instant::now() < deadline, "the failover did not complete");
        thread::sleep(Duration::from_millis(50));
    }
    let switched = switched_at.elapsed();
    // Light load on the new master for a while.
    thread::sleep(Duration::from_secs(3));
    let seen = load.stop();
    assert_only_documented_errors("sentinel failover", &seen, switched_at, switched);

    // What is written now lands on the new master.
    let fresh = open_session(a.port());
    assert_eq!(
        replica.cli(&["EXISTS", &format!("mcp:session:{fresh}")]),
        "1",
        "a session opened after the failover is on the new master"
    );
    for sid in &sessions {
        assert_eq!(
            replica.cli(&["EXISTS", &format!("mcp:session:{sid}")]),
            "1",
            "no session lost in the switch"
        );
    }
    assert!(
        log_has(&a, "the sentinels name a new master", LOG_LIMIT)
            && log_has(&b, "the sentinels name a new master", LOG_LIMIT),
        "both instances moved to the new master: {}\n{}",
        a.log(),
        b.log()
    );
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// A session acknowledged is never lost in a failover. Between the replica's promotion and the
/// moment the old master is told to follow it (about a second), a write to the old master is
/// taken and answered, then thrown away when it resyncs: before the fix, sessions opened in
/// that window were answered `200` and gone a second later. Now `initialize` waits for a
/// replica to confirm the record (`FLEETMCP_REDIS_WAIT_REPLICAS`, `auto`: one with Sentinel),
/// and in that window, where the old master has no replica left, answers `503` with
/// `Retry-After` instead. Sessions are opened every few milliseconds on both instances from
/// before the failover until a second after it; every one answered `200` must be on the new
/// master. (With `FLEETMCP_REDIS_WAIT_REPLICAS=off` this fails: 5 to 50 sessions lost.)
#[test]
fn no_session_acknowledged_in_a_failover_window_is_lost() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let set = SentinelSet::start(MASTER);
    let (new_master, sentinels) = (&set.replica, &set.sentinels);
    // Thousands of sessions from one address: the per-caller bound is not under test.
    let (a, b) = two_desks(&set, &[("FLEETMCP_MAX_SESSIONS_PER_KEY", "0")]);
    let stop = Arc::new(AtomicBool::new(false));
    let began = Instant::now();
    let openers: Vec<_> = [a.port(), b.port()]
        .into_iter()
        .map(|port| {
            let stop = stop.clone();
            thread::spawn(move || {
                let (mut acknowledged, mut refused) = (Vec::new(), 0usize);
                while !stop.load(Ordering::Acquire) {
                    let init = json!({"jsonrpc": "2.0", "id": next_id(), "method": "initialize",
                        "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                   "clientInfo": {"name": "failover", "version": "1"}}});
                    let resp = post_with(port, None, &[], &init, HTTP_LIMIT);
                    match resp.status {
                        200 => acknowledged.push((
                            resp.header("mcp-session-id")
                                .unwrap_or_else(|| panic!("no session id:\n{}", resp.describe()))
                                .to_string(),
                            began.elapsed(),
                        )),
                        503 if resp.header("retry-after").is_some() => refused += 1,
                        _ => panic!("an undocumented answer to initialize:\n{}", resp.describe()),
                    }
                    thread::sleep(Duration::from_millis(5));
                }
                (acknowledged, refused)
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(500));
    let failover_at = began.elapsed();
    assert_eq!(sentinels[0].cli(&["SENTINEL", "FAILOVER", MASTER]), "OK");
    let deadline = Instant::now() + Duration::from_secs(15);
    while sentinels
        .iter()
        .any(|s| s.master_port(MASTER) != Some(new_master.port))
    {
        assert!(Instant::now() < deadline, "the failover did not complete");
        thread::sleep(Duration::from_millis(20));
    }
    // On the new master for a while (it has no replica until the old one is turned into one).
    thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Release);
    let (mut acknowledged, mut refused) = (Vec::new(), 0);
    for o in openers {
        let (ack, r) = o.join().expect("an opener panicked");
        acknowledged.extend(ack);
        refused += r;
    }
    assert!(
        acknowledged.len() >= 20,
        "sessions were opened throughout ({} acknowledged)",
        acknowledged.len()
    );
    let lost: Vec<&(String, Duration)> = acknowledged
        .iter()
        .filter(|(sid, _)| new_master.cli(&["EXISTS", &format!("mcp:session:{sid}")]) != "1")
        .collect();
    for (sid, at) in lost.iter().take(5) {
        eprintln!("lost {sid} acknowledged at {at:?} (failover asked at {failover_at:?})");
    }
    eprintln!(
        "{} sessions acknowledged, {refused} refused with 503 during the failover",
        acknowledged.len()
    );
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged sessions lost in the failover ({refused} refused)",
        lost.len(),
        acknowledged.len()
    );
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}
