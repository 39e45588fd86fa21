//! Redis Sentinel (issue 12), what a failover must not lose: nothing acknowledged in a
//! failover window is lost (sessions, tasks), a takeover or a session no replica confirmed is
//! not served or is refused, sessions written on an old master before it has synced are told,
//! a master written alone is not written while a sentinel finds it down, and an instance cut off
//! from a majority of the sentinels stops acknowledging. Two distributed `help-desk` instances
//! find their Redis through three real sentinels watching a real master and its replicas.
//!
//! The failovers themselves (followed without a restart, streamed answers resumed, two in a
//! row) are in `redis_sentinel.rs`; the set-up both share is in `fleet_client/sentinel.rs`.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::thread;
use std::time::{Duration, Instant};

use fleet_client::sentinel::*;
use fleet_client::*;
use serde_json::json;
use support_redis::{CuttableProxy, SentinelSet};

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
