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
use support_redis::SentinelSet;

const MASTER: &str = "desk-master";

#[test]
fn a_sentinel_failover_is_followed_without_a_restart_and_loses_no_session() {
    let set = SentinelSet::start(MASTER);
    let (master, replica, sentinels) = (&set.master, &set.replica, &set.sentinels);
    let addresses = set.addresses();
    let env = [
        ("REDIS_SENTINELS", addresses.as_str()),
        ("REDIS_SENTINEL_MASTER", MASTER),
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1500"),
    ];
    let a = distributed_desk("desk-a", "", &env);
    let b = distributed_desk("desk-b", "", &env);
    for (i, who) in [(&a, "desk-a"), (&b, "desk-b")] {
        assert_log_has(
            i,
            who,
            "[TransportService] Session store connection validated successfully",
        );
    }
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
