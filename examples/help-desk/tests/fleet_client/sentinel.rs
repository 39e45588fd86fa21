//! The set-up of the Redis Sentinel tests (`redis_sentinel.rs`, `redis_sentinel_durability.rs`):
//! two distributed instances finding Redis through a [`SentinelSet`], the sessions they open
//! once a replica confirms them, and waits on what the sentinels name.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    HTTP_LIMIT, PROTOCOL_VERSION, assert_log_has, distributed_desk, next_id, open_session,
    post_with,
};
use crate::support::Instance;
use crate::support_redis::SentinelSet;

/// The name the sentinels know the master by.
pub const MASTER: &str = "desk-master";

/// Two distributed instances, `desk-a` and `desk-b`, finding Redis through `set`'s sentinels,
/// with a short heartbeat and `extra` settings; returned once both are connected.
pub fn two_desks(set: &SentinelSet, extra: &[(&str, &str)]) -> (Instance, Instance) {
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

/// An `initialize` of the session era, under an id of its own.
pub fn initialize() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": next_id(), "method": "initialize", "params": {
        "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
        "clientInfo": {"name": "fleet-test", "version": "1"}}})
}

/// Opens a session on `port`, trying again while `initialize` is refused with `503` and
/// `Retry-After` because no replica confirms it (after a failover, until the old master has
/// been converted and has synced: about 16 s; on a busy machine, a replica slower than the
/// wait).
pub fn open_session_once_a_replica_has_synced(port: u16) -> String {
    let began = Instant::now();
    loop {
        let resp = post_with(port, None, &[], &initialize(), HTTP_LIMIT);
        if resp.status == 200 {
            return open_session(port);
        }
        assert!(
            resp.status == 503
                && resp.header("retry-after").is_some()
                && began.elapsed() < Duration::from_secs(45),
            "sessions open again once a replica has synced:\n{}",
            resp.describe()
        );
        thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until every sentinel names the server on `port` master (20 s at most: a failover
/// starts after a second of silence).
pub fn wait_until_the_sentinels_name(set: &SentinelSet, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while set
        .sentinels
        .iter()
        .any(|s| s.master_port(MASTER) != Some(port))
    {
        assert!(
            Instant::now() < deadline,
            "the failover to {port} did not complete"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `done()` holds, checking every 100 ms; fails the test after `limit`, saying
/// `what`.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        thread::sleep(Duration::from_millis(100));
    }
}
