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

/// What one write asked of an instance came to: acknowledged (with the key it must be under on
/// the new master), or refused with `503` and `Retry-After`.
enum Asked {
    Acknowledged(String),
    Refused,
}

/// Asks `ask` of both instances every few milliseconds from before a `SENTINEL FAILOVER` until
/// a second after it completes, and checks that every write acknowledged is on the new master
/// (no write is lost with the old master: RELIABILITY F8); `what` names the writes, `extra`
/// is the instances' own settings.
fn nothing_acknowledged_in_a_failover_window_is_lost(
    what: &str,
    extra: &[(&str, &str)],
    ask: fn(u16) -> Asked,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let set = SentinelSet::start(MASTER);
    let (new_master, sentinels) = (&set.replica, &set.sentinels);
    // Thousands of sessions from one address: the per-caller bound is not under test.
    let mut settings = vec![("FLEETMCP_MAX_SESSIONS_PER_KEY", "0")];
    settings.extend_from_slice(extra);
    let (a, b) = two_desks(&set, &settings);
    let stop = Arc::new(AtomicBool::new(false));
    let began = Instant::now();
    let openers: Vec<_> = [a.port(), b.port()]
        .into_iter()
        .map(|port| {
            let stop = stop.clone();
            thread::spawn(move || {
                let (mut acknowledged, mut refused) = (Vec::new(), 0usize);
                while !stop.load(Ordering::Acquire) {
                    match ask(port) {
                        Asked::Acknowledged(key) => acknowledged.push((key, began.elapsed())),
                        Asked::Refused => refused += 1,
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
        "{what} were acknowledged throughout ({})",
        acknowledged.len()
    );
    let lost: Vec<&(String, Duration)> = acknowledged
        .iter()
        .filter(|(key, _)| new_master.cli(&["EXISTS", key]) != "1")
        .collect();
    for (key, at) in lost.iter().take(5) {
        eprintln!("lost {key} acknowledged at {at:?} (failover asked at {failover_at:?})");
    }
    eprintln!(
        "{} {what} acknowledged, {refused} refused with 503 during the failover",
        acknowledged.len()
    );
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged {what} lost in the failover ({refused} refused)",
        lost.len(),
        acknowledged.len()
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
/// `Retry-After` instead. (With `FLEETMCP_REDIS_WAIT_REPLICAS=off` this fails: 5 to 50
/// sessions lost.)
#[test]
fn no_session_acknowledged_in_a_failover_window_is_lost() {
    nothing_acknowledged_in_a_failover_window_is_lost("sessions", &[], |port| {
        let init = json!({"jsonrpc": "2.0", "id": next_id(), "method": "initialize",
            "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                       "clientInfo": {"name": "failover", "version": "1"}}});
        let resp = post_with(port, None, &[], &init, HTTP_LIMIT);
        match resp.status {
            200 => Asked::Acknowledged(format!(
                "mcp:session:{}",
                resp.header("mcp-session-id")
                    .unwrap_or_else(|| panic!("no session id:\n{}", resp.describe()))
            )),
            503 if resp.header("retry-after").is_some() => Asked::Refused,
            _ => panic!("an undocumented answer to initialize:\n{}", resp.describe()),
        }
    });
}

/// A 2026-07-28 task acknowledged (its `CreateTaskResult` answered) is never lost in a
/// failover either: its record is confirmed by a replica before the answer, and in the window
/// where that cannot be, the task is refused with `503` and `Retry-After` and never runs
/// (RELIABILITY F8: before, a task created then was read `working`, then "unknown" for good).
#[test]
fn no_task_acknowledged_in_a_failover_window_is_lost() {
    // `stamp` appends to an effects file, which it needs to be offered.
    let effects = support::TempDir::new("failover-tasks");
    let file = effects.path().join("effects");
    let file = file.display().to_string();
    let extra = [
        ("HELP_DESK_EFFECTS_FILE", file.as_str()),
        // Hundreds of tasks from one address: the per-caller bound is not under test.
        ("FLEETMCP_MAX_TASKS_PER_CALLER", "100000"),
    ];
    nothing_acknowledged_in_a_failover_window_is_lost("tasks", &extra, |port| {
        let call = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
            "params": {"name": "stamp", "arguments": {"key": format!("f{}", next_id()), "delay_ms": 50},
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities":
                        {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                    "io.modelcontextprotocol/clientInfo": {"name": "failover", "version": "1"}}}});
        let headers = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "stamp"),
        ];
        let resp = post_with(port, None, &headers, &call, HTTP_LIMIT);
        match resp.status {
            200 => {
                let v = resp.json();
                assert_eq!(v["result"]["resultType"], "task", "{}", resp.describe());
                let id = v["result"]["taskId"]
                    .as_str()
                    .unwrap_or_else(|| panic!("no task id:\n{}", resp.describe()));
                Asked::Acknowledged(format!("mcp:task:records::{id}"))
            }
            503 if resp.header("retry-after").is_some() => Asked::Refused,
            _ => panic!("an undocumented answer to a task:\n{}", resp.describe()),
        }
    });
}

/// A takeover is served only once a replica has it (F8). A's session is taken over by B while
/// the replica is paused (it cannot confirm anything), then the master dies and the sentinels
/// promote the replica. Had B served the session under a claim only the dead master had, the
/// promoted replica would still name A, and the next claim would reuse B's epoch: two holders
/// under one epoch. So B refuses (`503` with `Retry-After`) until it can claim on the new
/// master, and every takeover it answered under is on the new master.
#[test]
fn a_takeover_no_replica_confirmed_is_not_served() {
    let mut set = SentinelSet::start(MASTER);
    let (mut a, b) = two_desks(&set, &[]);
    let sid = open_session(a.port());
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    set.replica.pause();
    let list = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/list"});
    let during = post_with(b.port(), Some(&sid), &[], &list, HTTP_LIMIT);
    assert!(
        during.status == 503 && during.header("retry-after").is_some(),
        "a takeover no replica confirmed was answered:\n{}",
        during.describe()
    );
    // The master dies; the sentinels promote the replica.
    set.master.kill();
    set.replica.resume();
    let deadline = Instant::now() + Duration::from_secs(20);
    while set
        .sentinels
        .iter()
        .any(|s| s.master_port(MASTER) != Some(set.replica.port))
    {
        assert!(Instant::now() < deadline, "the failover did not complete");
        thread::sleep(Duration::from_millis(50));
    }
    let key = format!("mcp:session:{sid}");
    assert!(
        set.replica.cli(&["GET", &key]).contains("desk-a"),
        "the refused claim did not survive: {}",
        set.replica.cli(&["GET", &key])
    );
    // Service comes back on the new master, under a claim it holds.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let after = post_with(b.port(), Some(&sid), &[], &list, HTTP_LIMIT);
        if after.status == 200 {
            break;
        }
        assert!(
            after.status == 503 && after.header("retry-after").is_some(),
            "{}",
            after.describe()
        );
        assert!(Instant::now() < deadline, "{}", after.describe());
        thread::sleep(Duration::from_millis(200));
    }
    let record = set.replica.cli(&["GET", &key]);
    assert!(record.contains("desk-b"), "{record}");
    b.assert_no_panic_logged();
}

/// A 2024-11-05 `initialize` refused because no replica confirmed the session's record (`503`
/// with `Retry-After`) can be sent again on the same stream, and then succeeds. Its id is its
/// stream's, so it cannot change: before the fix the refusal remembered the id as deleted and
/// every later POST, the retried `initialize` too, was answered `404` (the fault harness's
/// Sentinel runs: "session gone while Redis kept its data").
#[test]
fn a_2024_11_05_initialize_refused_for_want_of_a_replica_can_be_sent_again() {
    let mut set = SentinelSet::start(MASTER);
    let (a, _b) = two_desks(&set, &[]);
    let (mut stream, endpoint) = open_legacy_stream(a.port(), &[]);
    let init = json!({"jsonrpc": "2.0", "id": next_id(), "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}});
    set.replica.pause();
    let refused = legacy_post(a.port(), &endpoint, &init);
    set.replica.resume();
    assert!(
        refused.status == 503 && refused.header("retry-after").is_some(),
        "an initialize no replica confirmed:\n{}",
        refused.describe()
    );
    let again = legacy_post(a.port(), &endpoint, &init);
    assert_eq!(again.status, 202, "sent again:\n{}", again.describe());
    read_stream_until(&mut stream, &["\"protocolVersion\":\"2024-11-05\""]);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(legacy_post(a.port(), &endpoint, &note).status, 202);
    let call = tool_call("find_tickets", json!({}));
    let resp = legacy_post(a.port(), &endpoint, &call);
    assert_eq!(resp.status, 202, "a call after it:\n{}", resp.describe());
    read_stream_until(&mut stream, &["\"structuredContent\""]);
}

/// F8 (the Sentinel soak's remainder): a replica promoted by a failover the sentinels that
/// answer do not know of yet. Here the replica is made a master by hand (`REPLICAOF NO ONE`,
/// what the leading sentinel sends in a failover); the master is left without a replica,
/// and the sentinels, none failing it over, still name it master and list the replica as
/// replicating,
/// for seconds. Before the fix a majority naming the master was enough, and the session was
/// acknowledged on a master about to be demoted; now a master with no replica connected
/// while a sentinel sees one up is not written to durably: `503` with `Retry-After`. Once
/// the replica is back under the master, sessions open again.
#[test]
fn a_session_is_refused_while_the_sentinels_see_a_replica_the_master_lost() {
    let set = SentinelSet::start(MASTER);
    let (a, _b) = two_desks(&set, &[]);
    open_session(a.port());
    let init = || {
        json!({"jsonrpc": "2.0", "id": next_id(), "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "fleet-test", "version": "1"}}})
    };
    assert_eq!(set.replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    let resp = post_with(a.port(), None, &[], &init(), HTTP_LIMIT);
    assert!(
        resp.status == 503 && resp.header("retry-after").is_some(),
        "an initialize the master's lost replica cannot confirm:\n{}\n{}",
        resp.describe(),
        a.log()
    );
    assert!(
        a.log()
            .contains("a sentinel saw 1 of its replicas replicating"),
        "{}",
        a.log()
    );
    let master = set.master.port.to_string();
    assert_eq!(set.replica.cli(&["REPLICAOF", "127.0.0.1", &master]), "OK");
    let began = Instant::now();
    loop {
        let resp = post_with(a.port(), None, &[], &init(), HTTP_LIMIT);
        if resp.status == 200 {
            break;
        }
        assert!(
            resp.status == 503 && began.elapsed() < Duration::from_secs(15),
            "sessions open again once the replica is back:\n{}",
            resp.describe()
        );
        thread::sleep(Duration::from_millis(200));
    }
}
