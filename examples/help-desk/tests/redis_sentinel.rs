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
use support_redis::{CuttableProxy, RedisServer, SentinelSet};

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

    // What is written now lands on the new master: once the old master is a replica again
    // and has synced (until then no new session is acknowledged: a second failover would
    // promote the old master as it is, RELIABILITY F8).
    let fresh = open_session_once_a_replica_has_synced(a.port());
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

/// An `initialize` of the session era, under an id of its own.
fn initialize() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": next_id(), "method": "initialize", "params": {
        "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
        "clientInfo": {"name": "fleet-test", "version": "1"}}})
}

/// Opens a session on `port`, trying again while `initialize` is refused with `503` and
/// `Retry-After` because no replica confirms it (after a failover, until the old master has
/// been converted and has synced: about 16 s; on a busy machine, a replica slower than the
/// wait).
fn open_session_once_a_replica_has_synced(port: u16) -> String {
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
    wait_until_the_sentinels_name(&set, set.replica.port);
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
/// the replica is back under the master, sessions open again. The same for a standalone
/// stream (`GET`), whose priming event must be confirmed too.
#[test]
fn a_session_is_refused_while_the_sentinels_see_a_replica_the_master_lost() {
    let set = SentinelSet::start(MASTER);
    let (a, _b) = two_desks(&set, &[]);
    let sid = open_session(a.port());
    assert_eq!(set.replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    let resp = post_with(a.port(), None, &[], &initialize(), HTTP_LIMIT);
    assert!(
        resp.status == 503 && resp.header("retry-after").is_some(),
        "an initialize the master's lost replica cannot confirm:\n{}\n{}",
        resp.describe(),
        a.log()
    );
    assert!(a.log().contains("the sentinels count 1 up"), "{}", a.log());
    // Nor is a standalone stream opened: its priming event, whose id the client resumes
    // from, would be lost with the master (before, `200` and that event).
    let get = http(
        a.port(),
        "GET",
        "/mcp",
        &[
            ("Accept", "text/event-stream"),
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", PROTOCOL_VERSION),
        ],
        None,
        Duration::from_secs(5),
    );
    assert!(
        get.status == 503 && get.header("retry-after").is_some(),
        "a standalone stream no replica confirmed:\n{}",
        get.describe()
    );
    let master = set.master.port.to_string();
    assert_eq!(set.replica.cli(&["REPLICAOF", "127.0.0.1", &master]), "OK");
    let began = Instant::now();
    loop {
        let resp = post_with(a.port(), None, &[], &initialize(), HTTP_LIMIT);
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
    let mut stream = open_get_stream(a.port(), &sid);
    assert_eq!(
        support::raw_http::read_status(&mut stream).ok(),
        Some(200),
        "the standalone stream opens once the replica is back"
    );
}

/// Waits until every sentinel names the server on `port` master (20 s at most: a failover
/// starts after a second of silence).
fn wait_until_the_sentinels_name(set: &SentinelSet, port: u16) {
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

/// Kills the master and waits until every sentinel names the replica.
fn fail_over_to_the_replica(set: &mut SentinelSet) {
    set.master.kill();
    wait_until_the_sentinels_name(set, set.replica.port);
}

/// Two instances whose `stamp` tool appends to a file in `dir` (streamed calls need it).
fn two_stamping_desks(set: &SentinelSet, dir: &support::TempDir) -> (Instance, Instance) {
    let file = dir.path().join("effects").display().to_string();
    two_desks(set, &[("HELP_DESK_EFFECTS_FILE", file.as_str())])
}

/// Resumes the stream `last` names on `port` until it carries call `id`'s answer, or `limit`
/// passes: a documented refusal (`503` with `Retry-After`: the session's holder cannot confirm
/// it yet) is tried again. Returns the last answer (a stream that ends, on a connection the
/// server closes after it).
fn resume_until_answered(
    port: u16,
    sid: &str,
    id: u64,
    last: &str,
    limit: Duration,
) -> support::raw_http::RawResponse {
    let began = Instant::now();
    loop {
        let resumed = http(
            port,
            "GET",
            "/mcp",
            &[
                ("Accept", "text/event-stream"),
                ("mcp-session-id", sid),
                ("mcp-protocol-version", PROTOCOL_VERSION),
                ("Last-Event-ID", last),
            ],
            None,
            limit,
        );
        let answered = stream_messages(&resumed.body)
            .iter()
            .any(|m| is_answer_to(m, id));
        let refused = resumed.status == 503 && resumed.header("retry-after").is_some();
        if answered || !refused || began.elapsed() > limit {
            return resumed;
        }
        thread::sleep(Duration::from_millis(300));
    }
}

/// The resumed stream `resumed` carried call `id`'s answer: exactly once, its result.
fn assert_answered_once(resumed: &support::raw_http::RawResponse, id: u64, a: &Instance) {
    let seen = resumed.describe();
    assert_eq!(resumed.status, 200, "{seen}\n{}", a.log());
    let answers: Vec<serde_json::Value> = stream_messages(&resumed.body)
        .into_iter()
        .filter(|m| is_answer_to(m, id))
        .collect();
    assert_eq!(
        answers.len(),
        1,
        "one answer for call {id}:\n{seen}\n{}",
        a.log()
    );
    assert_eq!(
        answers[0]["result"]["structuredContent"]["key"],
        format!("k{id}"),
        "{seen}"
    );
}

/// A streamed `stamp` on a session of `desk-a`, the replica leaving the master
/// (`REPLICAOF NO ONE`, as a failover's leader makes it) before the call
/// (`leaves_before_the_call`) or once the stream's first two events are on it; the answer
/// comes 2 s after the progress event, the master is then killed and the replica promoted.
/// Checks that the client, resuming from the last event it saw, gets the answer once.
fn streamed_answer_resumed_after_a_failover(label: &str, leaves_before_the_call: bool) {
    let mut set = SentinelSet::start(MASTER);
    let effects = support::TempDir::new(label);
    let (a, _b) = two_stamping_desks(&set, &effects);
    // A busy machine may keep the replica's confirmation past its wait: refused, retried.
    let sid = open_session_once_a_replica_has_synced(a.port());
    if leaves_before_the_call {
        assert_eq!(set.replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    }
    // The client's connection is gone once the progress event is read.
    let (id, last) = start_streamed_call(a.port(), &sid, 2000);
    if !leaves_before_the_call {
        let stream = last
            .split('-')
            .nth(1)
            .expect("an event id names its stream");
        let key = format!("mcp:events:{{{sid}}}:{stream}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while set.replica.cli(&["XLEN", &key]) != "2" {
            assert!(Instant::now() < deadline, "the replica never had {key}");
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(set.replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    }
    // The answer is written before the failover, to the master alone.
    thread::sleep(Duration::from_millis(2500));
    fail_over_to_the_replica(&mut set);
    let resumed = resume_until_answered(a.port(), &sid, id, &last, Duration::from_secs(20));
    assert_answered_once(&resumed, id, &a);
}

/// F8 for streamed answers: a stream begun on a master a failover then replaces. The replica
/// leaves the master before the call, so nothing the master takes from then on survives the
/// failover. Before the fix the call's events were written to the master alone, its client
/// kept their ids, and its resume after the failover was refused `400` "Last-Event-ID does
/// not name an event of this session" (the Sentinel seeds' 10 such resumes). Now a stream's
/// first event is confirmed by a replica like a session: unconfirmed, the answer goes on over
/// its connection with the id of the stream's start, and is stored, confirmed, with the end
/// marker on the new master, where the resume finds it.
#[test]
fn a_streamed_answer_begun_on_a_master_a_failover_replaces_is_resumed_on_the_new_one() {
    streamed_answer_resumed_after_a_failover("failover-stream-begun", true);
}

/// F8 for streamed answers: the answer of a stream whose start the replica has, written after
/// the replica left the master. Before the fix the answer and the end marker went to the
/// master alone and the writer held them stored; the failover dropped them, and the client
/// that resumed after it found the stream (its first events had been replicated) but waited
/// for an answer that never came, its writer alive and done. Now the answer is stored with
/// the end marker in one step a replica confirms, tried again until one does: on the new
/// master, once the instance follows it.
#[test]
fn a_streamed_answer_written_as_the_replica_leaves_reaches_the_client_that_resumes() {
    streamed_answer_resumed_after_a_failover("failover-stream-answer", false);
}

/// F8 under Sentinel, the window after a failover: the old master is up but not yet a replica
/// (the sentinels convert it 8 s or more after the failover, and it syncs about 5 s after
/// that), and the new master has no replica connected. A second failover in that window (here:
/// the new master paused past the sentinels' `down-after`) promotes the old master as it is,
/// and what the new one took is thrown away. With `FLEETMCP_REDIS_WAIT_REPLICAS=1` a master
/// without a replica connected is not written to: those `initialize`s are refused with `503`
/// and `Retry-After` (about 16 s), and none is lost.
#[test]
fn no_session_acknowledged_before_the_old_master_has_synced_is_lost_in_the_next_failover() {
    let seen = sessions_in_the_window_before_the_old_master_has_synced("1");
    assert!(
        seen.acknowledged.is_empty(),
        "{} acknowledged",
        seen.acknowledged.len()
    );
    assert!(seen.lost.is_empty());
}

/// The same with `wait_replicas = "auto"` (the default, issue 38): new sessions are written to
/// the new master alone in that window, on the sentinels' word (the old master, re-pointed by
/// the failover and not synced yet, is not waited for), so they open within seconds of a
/// failover rather than 16 s; the price is this second failure inside the window, which loses
/// them. Each is logged as written alone (what the fault harness counts as Redis's own loss,
/// `alone.rs`), and the window closes once the old master has synced: measured here.
#[test]
fn sessions_written_alone_before_the_old_master_has_synced_are_told() {
    let seen = sessions_in_the_window_before_the_old_master_has_synced("auto");
    assert!(
        !seen.acknowledged.is_empty(),
        "new sessions opened on the new master"
    );
    assert!(
        seen.written_alone >= seen.lost.len(),
        "every session lost was logged as written alone ({} logged, {} lost)",
        seen.written_alone,
        seen.lost.len()
    );
}

struct WindowSeen {
    acknowledged: Vec<String>,
    lost: Vec<String>,
    /// Writes the instance logged as confirmed by the sentinels alone.
    written_alone: usize,
}

/// `SENTINEL FAILOVER`, `initialize` every 50 ms for a second on the new master, then the new
/// master paused until the sentinels promote the old one; with `wait_replicas`.
fn sessions_in_the_window_before_the_old_master_has_synced(wait_replicas: &str) -> WindowSeen {
    let mut set = SentinelSet::start(MASTER);
    let (a, _b) = two_desks(
        &set,
        &[
            ("FLEETMCP_MAX_SESSIONS_PER_KEY", "0"),
            ("FLEETMCP_REDIS_WAIT_REPLICAS", wait_replicas),
            ("RUST_LOG", "info,fleetmcp::redis_conn::durable=debug"),
        ],
    );
    let failover_at = Instant::now();
    assert_eq!(
        set.sentinels[0].cli(&["SENTINEL", "FAILOVER", MASTER]),
        "OK"
    );
    wait_until_the_sentinels_name(&set, set.replica.port);
    // A second, once the instances follow the new master.
    thread::sleep(Duration::from_secs(1));
    let alone_before = count(&a, "confirmed by the sentinels");
    let (mut acknowledged, mut refused) = (Vec::new(), 0);
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(1) {
        let resp = post_with(a.port(), None, &[], &initialize(), HTTP_LIMIT);
        match resp.status {
            200 => acknowledged.push(
                resp.header("mcp-session-id")
                    .unwrap_or_default()
                    .to_string(),
            ),
            503 if resp.header("retry-after").is_some() => refused += 1,
            _ => panic!("an undocumented answer to initialize:\n{}", resp.describe()),
        }
        thread::sleep(Duration::from_millis(50));
    }
    let written_alone = count(&a, "confirmed by the sentinels") - alone_before;
    assert_eq!(
        set.master.cli(&["ROLE"]).lines().next(),
        Some("master"),
        "the old master is not converted yet: the window under test"
    );
    // The second failover: the new master paused past the sentinels' `down-after`.
    set.replica.pause();
    wait_until_the_sentinels_name(&set, set.master.port);
    set.replica.resume();
    let lost: Vec<String> = acknowledged
        .iter()
        .filter(|sid| set.master.cli(&["EXISTS", &format!("mcp:session:{sid}")]) != "1")
        .cloned()
        .collect();
    eprintln!(
        "wait_replicas={wait_replicas}: {} sessions acknowledged ({written_alone} written alone), {refused} refused, {} lost in the second failover",
        acknowledged.len(),
        lost.len()
    );
    // Service comes back once a replica has synced again.
    let began = Instant::now();
    open_session_once_a_replica_has_synced(a.port());
    eprintln!(
        "sessions open again {:?} after the second failover ({:?} after the first began)",
        began.elapsed(),
        failover_at.elapsed()
    );
    WindowSeen {
        acknowledged,
        lost,
        written_alone,
    }
}

/// A client that resumes a streamed answer on the instance writing it, before its answer,
/// while the replicas confirm nothing (the replica has left the master, `REPLICAOF NO ONE`,
/// and the sentinels still list it): the stream's first event was not confirmed, so its
/// answer goes over its connection (gone) and is stored with the end marker by a script the
/// writer tries again until the replicas confirm it. Each try writes the answer to the master
/// all the same; but the reader, which reads a stream its own process writes only when that
/// process tells it of a write, was told of none whose confirmation failed, and waited for
/// the confirmation, seconds after the answer was there (the Sentinel seed 6: a resume on the
/// writer's instance carried nothing for its 25 s). Now it reads the answer at once.
#[test]
fn a_resumed_answer_is_delivered_while_its_end_awaits_the_replicas() {
    let set = SentinelSet::start(MASTER);
    let effects = support::TempDir::new("failover-stream-unconfirmed");
    let (a, _b) = two_stamping_desks(&set, &effects);
    // A busy machine may keep the replica's confirmation past its wait: refused, retried.
    let sid = open_session_once_a_replica_has_synced(a.port());
    assert_eq!(set.replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    let (id, last) = start_streamed_call(a.port(), &sid, 1500);
    // Resumed before the answer comes (1.5 s after the progress event); the sentinels set the
    // replica back under the master only 8 s or more later.
    let began = Instant::now();
    let resumed = resume_until_answered(a.port(), &sid, id, &last, Duration::from_secs(5));
    assert_answered_once(&resumed, id, &a);
    eprintln!("the answer came {:?} after the resume", began.elapsed());
}

/// Whether sentinel `i` flags the server on `port` down (`s_down`), in `SENTINEL <list>`'s
/// answer (`masters` or `replicas <name>`): redis-cli prints one field per line.
fn flagged_down(set: &SentinelSet, i: usize, list: &[&str], port: u16) -> bool {
    let answer = set.sentinels[i].cli(list);
    let lines: Vec<&str> = answer.lines().map(str::trim).collect();
    // Each server's fields follow its `port` line, up to the next server's `name`.
    lines.windows(2).enumerate().any(|(at, w)| {
        w[0] == "port"
            && w[1] == port.to_string()
            && lines[at..]
                .iter()
                .skip(2)
                .take_while(|l| **l != "name")
                .collect::<Vec<_>>()
                .windows(2)
                .any(|f| *f[0] == "flags" && f[1].split(',').any(|x| x == "s_down"))
    })
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The check's other branch (RELIABILITY.md, F8): a master written to alone (its replica is
/// down, so no failover can promote one without the write) is not written to while one
/// sentinel finds it down, however well this instance reaches it: that sentinel may be voting
/// for a failover, and once the replica is back, a promotion would lose the write. One of the
/// three sentinels is made to find the master down (it reaches the master as a user of its
/// own, whose `PING` is then refused: the instances' commands are not), too few for a failover
/// (quorum 2), so the sentinels' answers differ only in that flag.
#[test]
fn a_master_written_alone_is_not_written_while_a_sentinel_finds_it_down() {
    let mut set = SentinelSet::start(MASTER);
    let (a, _b) = two_desks(&set, &[]);
    let master = set.master.port;
    let replica = set.replica.port;
    // Sentinel 0 reaches the master as a user of its own.
    assert_eq!(
        set.master.cli(&[
            "ACL",
            "SETUSER",
            "watcher",
            "on",
            ">pw",
            "allcommands",
            "allkeys",
            "allchannels"
        ]),
        "OK"
    );
    for (field, value) in [("auth-user", "watcher"), ("auth-pass", "pw")] {
        assert_eq!(
            set.sentinels[0].cli(&["SENTINEL", "SET", MASTER, field, value]),
            "OK"
        );
    }
    set.replica.kill();
    wait_for(
        "every sentinel finds the replica down",
        Duration::from_secs(15),
        || (0..3).all(|i| flagged_down(&set, i, &["SENTINEL", "replicas", MASTER], replica)),
    );
    let open = || post_with(a.port(), None, &[], &initialize(), HTTP_LIMIT);
    let resp = open();
    assert_eq!(
        resp.status,
        200,
        "a master whose replicas are all down is written to alone:\n{}\n{}",
        resp.describe(),
        a.log()
    );

    wait_for(
        "sentinel 0 reaches the master as its user",
        Duration::from_secs(10),
        || set.master.cli(&["CLIENT", "LIST"]).contains("user=watcher"),
    );
    // Its pings refused (an error is no valid reply: the master is down to it after a second).
    assert_eq!(
        set.master.cli(&["ACL", "SETUSER", "watcher", "-ping"]),
        "OK"
    );
    wait_for(
        "sentinel 0 finds the master down",
        Duration::from_secs(15),
        || flagged_down(&set, 0, &["SENTINEL", "masters"], master),
    );
    assert!(
        !flagged_down(&set, 1, &["SENTINEL", "masters"], master),
        "only sentinel 0 finds it down"
    );
    let resp = open();
    assert!(
        resp.status == 503 && resp.header("retry-after").is_some(),
        "an initialize while a sentinel finds the master down:\n{}\n{}",
        resp.describe(),
        a.log()
    );
    assert!(
        a.log().contains("a sentinel finds the master written to"),
        "refused for the sentinel's flag:\n{}",
        a.log()
    );

    assert_eq!(
        set.master.cli(&["ACL", "SETUSER", "watcher", "+ping"]),
        "OK"
    );
    wait_for("sessions open again", Duration::from_secs(15), || {
        open().status == 200
    });
}

/// The scene of the tests of a holder that slept through a failover: two desks, a session
/// opened and served on desk-a, desk-a paused (SIGSTOP), the master put out of the way by
/// `depose` until the sentinels name the replica, and desk-b, its lease outliving desk-a's,
/// holding the session on the new master. Returns desk-a (still paused), desk-b and the session.
fn a_holder_asleep_through_a_failover(
    set: &mut SentinelSet,
    extra: &[(&str, &str)],
    depose: impl FnOnce(&mut RedisServer),
) -> (Instance, Instance, String) {
    let (a, b) = two_desks(set, extra);
    let sid = open_session(a.port());
    let call = |port: u16| call_tool(port, &sid, &[], "find_tickets", json!({}));
    assert_served_by(&call(a.port()), "desk-a", "before the failover");

    a.signal("STOP");
    depose(&mut set.master);
    wait_until_the_sentinels_name(set, set.replica.port);
    // desk-a's lease has run out: desk-b takes the session over, on the new master.
    wait_for(
        "desk-b takes the session over",
        Duration::from_secs(15),
        || {
            let resp = call(b.port());
            resp.status == 200 && machine_of(&resp) == Some("desk-b")
        },
    );
    (a, b, sid)
}

/// Found by Sentinel seed 9: a holder that slept through a failover (SIGSTOP) came back to a
/// connection still open to the old master, which the sentinels had deposed but not yet turned
/// into a replica, and which still named it holder; it served the session from there, while
/// another instance had taken the session over on the new master: two holders. A holder whose
/// lease ran out serves again only after the store confirms it on the master the sentinels name.
#[test]
fn a_holder_that_slept_through_a_failover_does_not_serve_from_the_deposed_master() {
    let mut set = SentinelSet::start(MASTER);
    let (a, _b, sid) = a_holder_asleep_through_a_failover(&mut set, &[], |master| master.pause());
    let call = |port: u16| call_tool(port, &sid, &[], "find_tickets", json!({}));
    set.master.resume();
    assert!(
        set.master.cli(&["ROLE"]).starts_with("master"),
        "the old master is back as a master (the window this test is about)"
    );

    a.signal("CONT");
    let resp = call(a.port());
    assert!(
        !(resp.status == 200 && machine_of(&resp) == Some("desk-a")),
        "desk-a served the session from the deposed master, desk-b holding it:\n{}\n{}",
        resp.describe(),
        a.log()
    );
    assert!(
        resp.status == 200 || (resp.status == 503 && resp.header("retry-after").is_some()),
        "served by the holder, or refused for now:\n{}",
        resp.describe()
    );
    // desk-a follows the sentinels to the new master and finds desk-b holding the session
    // there. It may instead take it over, at a higher epoch, when desk-b's heartbeat (1.5 s
    // here) has not been written to the new master yet: a claim the store fences, not a stale
    // holder, but refused until the old master has synced as a replica (about 16 s).
    wait_for(
        "the session served again on desk-a's side",
        Duration::from_secs(30),
        || call(a.port()).status == 200,
    );
    assert!(
        a.log().contains("the sentinels name a new master") && a.log().contains("not serving it"),
        "{}",
        a.log()
    );
}

/// A 2026-07-28 request (`tools/call` as a task, or `tasks/get`) on `port`, `name` its
/// `Mcp-Name` header.
fn modern_call(
    port: u16,
    method: &str,
    name: &str,
    params: serde_json::Value,
) -> support::raw_http::RawResponse {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "asleep", "version": "1"}});
    let msg = json!({"jsonrpc": "2.0", "id": next_id(), "method": method, "params": params});
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
        ("mcp-name", name),
    ];
    post_with(port, None, &headers, &msg, HTTP_LIMIT)
}

/// What an instance that slept through a failover is asked first when it wakes.
#[derive(Clone, Copy, PartialEq)]
enum AskedFirst {
    /// `tasks/get` for a task started on the new master.
    Task,
    /// A call in a session opened on the new master.
    Session,
}

/// Found by the two-replica Sentinel seed 2: an instance that slept through a failover
/// (SIGSTOP) woke to a connection still open to the deposed master and answered a `tasks/get`
/// for a task started on the new master as "unknown task" (a session opened there would have
/// been answered as gone, `404`). A read that finds nothing is believed only once the
/// sentinels confirm the master it came from: until then the answer is `503` with
/// `Retry-After`, and the connection moves to the master they name. The first read after the
/// wake is the one that meets the deposed master (its confirmation moves the connection for
/// every later one), hence one test for each kind of read.
fn woken_after_a_failover(first: AskedFirst) {
    let effects = support::TempDir::new("asleep-tasks");
    let file = effects.path().join("effects").display().to_string();
    let mut set = SentinelSet::start(MASTER);
    let (a, b, _) = a_holder_asleep_through_a_failover(
        &mut set,
        &[("HELP_DESK_EFFECTS_FILE", file.as_str())],
        |master| master.pause(),
    );
    // Opened on the new master while desk-a sleeps: the deposed one never sees either.
    let sid = open_session(b.port());
    let started = modern_call(
        b.port(),
        "tools/call",
        "stamp",
        json!({"name": "stamp", "arguments": {"key": "asleep-1", "delay_ms": 50}}),
    );
    assert_eq!(started.status, 200, "{}", started.describe());
    let task = started.json()["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id:\n{}", started.describe()))
        .to_string();
    set.master.resume();
    assert!(
        set.master.cli(&["ROLE"]).starts_with("master"),
        "the old master is back as a master (the window this test is about)"
    );
    let get = |port: u16| modern_call(port, "tasks/get", &task, json!({"taskId": task}));
    let call = |port: u16| call_tool(port, &sid, &[], "find_tickets", json!({}));

    a.signal("CONT");
    let (resp, what) = match first {
        AskedFirst::Task => (get(a.port()), "tasks/get"),
        AskedFirst::Session => (call(a.port()), "a call in the session opened on desk-b"),
    };
    assert!(
        resp.status == 200 || (resp.status == 503 && resp.header("retry-after").is_some()),
        "desk-a answered {what} from the deposed master (neither found nor refused for now):\n{}\n{}",
        resp.describe(),
        a.log()
    );
    if first == AskedFirst::Task {
        assert!(
            resp.status != 200 || resp.json()["result"]["taskId"] == json!(task),
            "tasks/get answered, but not with the task:\n{}",
            resp.describe()
        );
    }
    // Then both are found, through the master the sentinels name.
    wait_for("desk-a finds the task", Duration::from_secs(30), || {
        let r = get(a.port());
        r.status == 200 && r.json()["result"]["taskId"] == json!(task)
    });
    wait_for("desk-a serves the session", Duration::from_secs(30), || {
        call(a.port()).status == 200
    });
}

#[test]
fn an_instance_that_slept_through_a_failover_does_not_answer_unknown_task_from_the_deposed_master()
{
    woken_after_a_failover(AskedFirst::Task);
}

#[test]
fn an_instance_that_slept_through_a_failover_does_not_answer_session_gone_from_the_deposed_master()
{
    woken_after_a_failover(AskedFirst::Session);
}

/// The same sleep, with the other kind of fault on the holder's link: the old master is killed
/// (its connections reset, new ones refused) rather than paused, and started again on its
/// port, empty and a master, before the holder wakes. The holder finds its connection broken;
/// it must reopen it where the sentinels say, not at the address it knew: there the empty
/// master would answer that the session is gone (a `404` for a session another instance holds),
/// or, had it kept its data, that the holder still holds it.
#[test]
fn a_holder_that_slept_while_its_master_was_killed_and_started_empty_follows_the_sentinels() {
    let mut set = SentinelSet::start(MASTER);
    let (a, _b, sid) = a_holder_asleep_through_a_failover(&mut set, &[], |master| master.kill());
    let call = |port: u16| call_tool(port, &sid, &[], "find_tickets", json!({}));
    set.master.start_again();
    assert!(
        set.master.cli(&["ROLE"]).starts_with("master") && set.master.cli(&["DBSIZE"]) == "0",
        "the old port answers as an empty master (the window this test is about)"
    );

    a.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp = call(a.port());
        assert!(
            resp.status == 200 || (resp.status == 503 && resp.header("retry-after").is_some()),
            "desk-a answers the session it lost from the holder, or refuses for now; never \
             as gone, nor from an empty master:\n{}\n{}",
            resp.describe(),
            a.log()
        );
        if resp.status == 200 {
            // By desk-b, relayed; or by desk-a having claimed it back at a higher epoch when
            // desk-b's heartbeat had not reached the new master yet (fenced, as above).
            assert_tool_ok(&resp, "the session after desk-a woke");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the session was not served again through desk-a within 30 s:\n{}",
            a.log()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// What [`sessions_survive_two_failovers`] saw.
struct TwoFailovers {
    acknowledged: usize,
    lost: usize,
    refused: usize,
    /// The longest stretch, from the `SENTINEL FAILOVER` on, with no session acknowledged: new
    /// sessions refused while the fleet follows the failover.
    refused_for: Duration,
}

/// The production shape (issue 38): a master and `replicas` replicas, three sentinels (quorum
/// 2), two instances found through them, six clients opening sessions through both without a
/// pause. `SENTINEL FAILOVER`; once the old master is a synced replica of the new one, the new
/// master is SIGKILLed, so the next promotion picks a replica. Every session answered `200`
/// must still be served (a call on it answers `200`, not `404`) after both.
fn sessions_survive_two_failovers(replicas: usize) -> TwoFailovers {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let mut set = SentinelSet::start_with(MASTER, replicas);
    let old = set.master.port;
    let (a, b) = two_desks(&set, &[("FLEETMCP_MAX_SESSIONS_PER_KEY", "0")]);
    let ports = [a.port(), b.port()];
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::<(String, Instant)>::new()));
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..6)
        .map(|c| {
            let (stop, acknowledged, refused) =
                (stop.clone(), acknowledged.clone(), refused.clone());
            thread::spawn(move || {
                let mut turn = c;
                while !stop.load(Ordering::Acquire) {
                    turn += 1;
                    let resp = post_with(ports[turn % 2], None, &[], &initialize(), HTTP_LIMIT);
                    match resp.status {
                        200 => {
                            let sid = resp.header("mcp-session-id").unwrap_or_default();
                            assert!(!sid.is_empty(), "no session id:\n{}", resp.describe());
                            acknowledged
                                .lock()
                                .unwrap()
                                .push((sid.to_string(), Instant::now()));
                        }
                        503 if resp.header("retry-after").is_some() => {
                            refused.fetch_add(1, Ordering::AcqRel);
                        }
                        _ => panic!("an undocumented answer to initialize:\n{}", resp.describe()),
                    }
                    thread::sleep(Duration::from_millis(60));
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(800));
    let failover_at = Instant::now();
    assert_eq!(
        set.sentinels[0].cli(&["SENTINEL", "FAILOVER", MASTER]),
        "OK"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let new = loop {
        let named: Vec<Option<u16>> = set
            .sentinels
            .iter()
            .map(|s| s.master_port(MASTER))
            .collect();
        if let Some(Some(p)) = named.first()
            && *p != old
            && named.iter().all(|n| *n == Some(*p))
        {
            break *p;
        }
        assert!(Instant::now() < deadline, "the failover did not complete");
        thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "failover to {new} complete after {:?}",
        failover_at.elapsed()
    );
    // The old master converted into a replica of the new one, and synced.
    wait_for(
        "the old master synced as a replica",
        Duration::from_secs(30),
        || {
            let info = set.master.cli(&["INFO", "replication"]);
            info.contains("role:slave")
                && info.contains(&format!("master_port:{new}"))
                && info.contains("master_link_status:up")
        },
    );
    eprintln!("old master synced after {:?}", failover_at.elapsed());
    thread::sleep(Duration::from_millis(500));
    let refused_for = {
        let mut times: Vec<Instant> = acknowledged
            .lock()
            .unwrap()
            .iter()
            .map(|(_, at)| *at)
            .filter(|at| *at > failover_at)
            .collect();
        times.sort();
        let mut last = failover_at;
        let mut longest = Duration::ZERO;
        for at in times {
            if at.duration_since(last) > longest {
                longest = at.duration_since(last);
                eprintln!(
                    "no session acknowledged from {:?} to {:?} after the failover began",
                    last.duration_since(failover_at),
                    at.duration_since(failover_at)
                );
            }
            last = at;
        }
        longest.max(Instant::now().duration_since(last))
    };
    // The second failover: the new master killed.
    set.servers_mut()
        .into_iter()
        .find(|s| s.port == new)
        .expect("the new master is one of the set")
        .kill();
    let killed_at = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(25);
    let next = loop {
        let named: Vec<Option<u16>> = set
            .sentinels
            .iter()
            .map(|s| s.master_port(MASTER))
            .collect();
        if let Some(Some(p)) = named.first()
            && *p != new
            && named.iter().all(|n| *n == Some(*p))
        {
            break *p;
        }
        assert!(
            Instant::now() < deadline,
            "the second failover did not complete"
        );
        thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "second failover to {next} complete {:?} after the kill",
        killed_at.elapsed()
    );
    thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Release);
    for c in clients {
        c.join().expect("a client panicked");
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    // Every session acknowledged is served: a call on it through either instance answers 200
    // (503 while the instances follow the switch: asked again).
    let mut lost = Vec::new();
    for (n, (sid, at)) in acknowledged.iter().enumerate() {
        let list = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/list"});
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let resp = post_with(ports[n % 2], Some(sid), &[], &list, HTTP_LIMIT);
            match resp.status {
                200 => break,
                404 => {
                    lost.push(at.saturating_duration_since(failover_at));
                    break;
                }
                503 if Instant::now() < deadline => thread::sleep(Duration::from_millis(200)),
                _ => panic!("a call on an acknowledged session:\n{}", resp.describe()),
            }
        }
    }
    let refused = refused.load(Ordering::Acquire);
    eprintln!(
        "{replicas} replica(s): {} sessions acknowledged, {} lost (acknowledged at {:?} after the failover began), {refused} refused; no session acknowledged for {refused_for:?} at most after the failover began",
        acknowledged.len(),
        lost.len(),
        lost.iter().take(12).collect::<Vec<_>>(),
    );
    // Why sessions were refused, as the instances logged it.
    let mut why = std::collections::BTreeMap::<String, usize>::new();
    for line in a.log().lines().chain(b.log().lines()) {
        if line.contains("initialize refused") {
            let reason = line.split("error=").nth(1).unwrap_or(line);
            let reason: String = reason
                .chars()
                .filter(|c| !c.is_ascii_digit())
                .take(160)
                .collect();
            *why.entry(reason).or_default() += 1;
        }
    }
    for (reason, n) in &why {
        eprintln!("{n:5} refused: {reason}");
    }
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
    TwoFailovers {
        acknowledged: acknowledged.len(),
        lost: lost.len(),
        refused,
        refused_for,
    }
}

/// Issue 38: with two replicas, sessions opened between the promotion and the fleet following
/// it were acknowledged on the old master (confirmed by the replica still attached to it) and
/// thrown away when it became a replica.
#[test]
fn with_two_replicas_no_session_acknowledged_is_lost_in_two_failovers() {
    let seen = sessions_survive_two_failovers(2);
    assert!(
        seen.acknowledged >= 50,
        "sessions opened throughout: {}",
        seen.acknowledged
    );
    assert_eq!(
        seen.lost, 0,
        "acknowledged sessions lost ({} refused)",
        seen.refused
    );
    assert!(
        seen.refused_for < Duration::from_secs(5),
        "new sessions refused for {:?}",
        seen.refused_for
    );
}

/// The same with one replica (the shape of the other tests): nothing lost, and new sessions on
/// the new master within 5 s of the failover's start.
#[test]
fn with_one_replica_no_session_acknowledged_is_lost_in_two_failovers() {
    let seen = sessions_survive_two_failovers(1);
    assert!(
        seen.acknowledged >= 50,
        "sessions opened throughout: {}",
        seen.acknowledged
    );
    assert_eq!(
        seen.lost, 0,
        "acknowledged sessions lost ({} refused)",
        seen.refused
    );
    assert!(
        seen.refused_for < Duration::from_secs(5),
        "new sessions refused for {:?}",
        seen.refused_for
    );
}

/// A partition that leaves an instance with a minority of the sentinels (issue 38): the
/// majority may be failing the master over without it hearing of it (their events do not reach
/// it, and the master and its replicas may still answer it). A durable write needs a majority
/// of the sentinels naming its master in views under 2 s old, so the instance stops
/// acknowledging new sessions within that bound of the cut: measured here. Two of the three
/// sentinels are reached through proxies, cut.
#[test]
fn an_instance_cut_off_from_a_majority_of_the_sentinels_stops_acknowledging() {
    let set = SentinelSet::start(MASTER);
    let proxies: Vec<CuttableProxy> = set.sentinels[1..]
        .iter()
        .map(|s| CuttableProxy::start(s.port))
        .collect();
    let addresses = format!(
        "{},127.0.0.1:{},127.0.0.1:{}",
        set.sentinels[0].address(),
        proxies[0].port,
        proxies[1].port
    );
    let a = distributed_desk(
        "desk-a",
        "",
        &[
            ("REDIS_SENTINELS", addresses.as_str()),
            ("REDIS_SENTINEL_MASTER", MASTER),
            ("FLEETMCP_MAX_SESSIONS_PER_KEY", "0"),
        ],
    );
    assert_log_has(
        &a,
        "desk-a",
        "[TransportService] Session store connection validated successfully",
    );
    open_session_once_a_replica_has_synced(a.port());
    for p in &proxies {
        p.cut();
    }
    let cut_at = Instant::now();
    let mut acknowledged = 0;
    loop {
        let resp = post_with(a.port(), None, &[], &initialize(), HTTP_LIMIT);
        match resp.status {
            200 => acknowledged += 1,
            503 if resp.header("retry-after").is_some() => break,
            _ => panic!("an undocumented answer to initialize:\n{}", resp.describe()),
        }
        assert!(
            cut_at.elapsed() < Duration::from_secs(10),
            "still acknowledging sessions 10 s after the cut"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let window = cut_at.elapsed();
    eprintln!("{acknowledged} sessions acknowledged in the {window:?} after the cut");
    assert!(
        window < Duration::from_secs(3),
        "sessions acknowledged for {window:?} after the cut"
    );
    let resp = post_with(a.port(), None, &[], &initialize(), HTTP_LIMIT);
    assert_eq!(
        resp.status,
        503,
        "refused while cut off:\n{}",
        resp.describe()
    );
    for p in &proxies {
        p.restore();
    }
    let healed = Instant::now();
    wait_for("sessions open again", Duration::from_secs(15), || {
        post_with(a.port(), None, &[], &initialize(), HTTP_LIMIT).status == 200
    });
    eprintln!("sessions open again {:?} after the heal", healed.elapsed());
    a.assert_no_panic_logged();
}

/// What a durable write costs on the happy path (issue 38): `initialize` one after another on
/// one instance, master and `SENTINEL_COST_REPLICAS` replicas (2), nothing failing; prints the
/// latency's median and 99th percentile. Ignored: a measurement (`-- --ignored --nocapture`).
#[test]
#[ignore]
fn the_cost_of_a_durable_write() {
    let replicas = std::env::var("SENTINEL_COST_REPLICAS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let set = SentinelSet::start_with(MASTER, replicas);
    let (a, _b) = two_desks(&set, &[("FLEETMCP_MAX_SESSIONS_PER_KEY", "0")]);
    open_session_once_a_replica_has_synced(a.port());
    let mut took: Vec<Duration> = (0..500)
        .map(|_| {
            let began = Instant::now();
            let resp = post_with(a.port(), None, &[], &initialize(), HTTP_LIMIT);
            assert_eq!(resp.status, 200, "{}", resp.describe());
            began.elapsed()
        })
        .collect();
    took.sort();
    eprintln!(
        "{replicas} replica(s): initialize p50 {:?}, p99 {:?} (500 in a row)",
        took[took.len() / 2],
        took[took.len() * 99 / 100]
    );
}

/// Connections every sentinel has accepted so far (`INFO stats`).
fn connections_received(set: &SentinelSet) -> Vec<u64> {
    set.sentinels
        .iter()
        .map(|s| {
            s.cli(&["INFO", "stats"])
                .lines()
                .find_map(|l| l.strip_prefix("total_connections_received:"))
                .and_then(|n| n.trim().parse().ok())
                .expect("a sentinel's INFO stats counts its connections")
        })
        .collect()
}

/// An instance asks the sentinels on connections it keeps, not on a new one per question:
/// it asked which server is master every 250 ms and each sentinel's view every second, each
/// time on a new connection (about 7 a second an instance with three sentinels: thousands a
/// second at each sentinel for a fleet of hundreds). Two instances, 3 s: before, 61 new
/// connections at the first sentinel (asked first for the master) and 13 at each other; now
/// none but the test's own `INFO`.
#[test]
fn the_sentinels_are_asked_on_kept_connections() {
    let mut set = SentinelSet::start(MASTER);
    // The sentinels connect to each other once they have heard of each other (a second or
    // two after they start): not counted.
    wait_for(
        "the sentinels to know each other",
        Duration::from_secs(10),
        || {
            set.sentinels.iter().all(|s| {
                let others = s.cli(&["SENTINEL", "SENTINELS", MASTER]);
                others.lines().filter(|l| l.trim() == "runid").count() == 2
            })
        },
    );
    let (a, _b) = two_desks(&set, &[]);
    thread::sleep(Duration::from_secs(1));
    let before = connections_received(&set);
    thread::sleep(Duration::from_secs(3));
    let after = connections_received(&set);
    let opened: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    eprintln!("new connections at each sentinel in 3 s: {opened:?}");
    // The test's own `INFO` is one at each.
    assert!(
        opened.iter().all(|n| *n <= 1),
        "new connections at each sentinel in 3 s: {opened:?}"
    );
    // Still current: a failover is followed.
    fail_over_to_the_replica(&mut set);
    let sid = open_session_once_a_replica_has_synced(a.port());
    let key = format!("mcp:session:{sid}");
    assert_eq!(set.replica.cli(&["EXISTS", &key]), "1", "{}", a.log());
}
