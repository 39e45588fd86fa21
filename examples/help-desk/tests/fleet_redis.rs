//! Several `help-desk` processes sharing one real `redis-server` (issue 4, "Acceptance"): a
//! session-era client's session moves between instances through Redis, survives a restart,
//! outlives a paused or late Redis, ends everywhere on `DELETE`, and its key's TTL slides while
//! it is used.
//!
//! Each test starts its own `redis-server` (on a free loopback port, no persistence) and its own
//! instances, and speaks raw HTTP/1.1 to them. Needs `redis-server` and `redis-cli` on `PATH`
//! (or `REDIS_SERVER` / `REDIS_CLI`). Every wait is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support::raw_http::{self, RawResponse};
use support::{Instance, TempDir};
use support_redis::{CuttableProxy, Monitor, RedisServer};

const RECREATING: &str = "[TransportService] Recreating transport from stored session";
const VALIDATED: &str = "[TransportService] Session store connection validated successfully";
const NO_ANSWER_500: &str = "The session store did not answer within 500 ms";
const NO_ANSWER_2000: &str = "The session store did not answer within 2000 ms";
const SERVING_HERE: &str =
    "[TransportService] Could not confirm the session is still stored — serving it here";
const GONE: &str = "[TransportService] The stored session is gone — dropping its transport here";

// ---------------------------------------------------------------------------------------------
// Instances

/// Starts `help-desk` named `machine`, on `redis` (a URL) or with sessions in memory, with an
/// optional TOML configuration file. Redis variables from the developer's shell are neutralised
/// (an empty value sets nothing).
fn desk(machine: &str, redis: Option<&str>, config: Option<&PathBuf>) -> Instance {
    let config = config.map(|p| p.to_string_lossy().into_owned());
    let mut env: Vec<(&str, &str)> = vec![
        ("MACHINE_ID", machine),
        ("REDIS_URL", redis.unwrap_or("")),
        ("REDIS_HOST", ""),
        ("REDIS_PORT", ""),
    ];
    if let Some(path) = config.as_deref() {
        env.push(("FLEETMCP_CONFIG", path));
    }
    Instance::start(env!("CARGO_BIN_EXE_help-desk"), &env)
}

/// A TOML configuration file in `dir`.
fn config_file(dir: &TempDir, toml: &str) -> PathBuf {
    let path = dir.path().join("fleetmcp.toml");
    std::fs::write(&path, toml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP/1.1

// ---------------------------------------------------------------------------------------------
// A session-era MCP client

fn post(port: u16, session: Option<&str>, msg: &Value, limit: Duration) -> RawResponse {
    post_with(port, session, &[], msg, limit)
}

/// `tools/call find_tickets {}` on `port` in session `sid`.
fn find_tickets(port: u16, sid: &str) -> RawResponse {
    find_tickets_within(port, sid, HTTP_LIMIT)
}

fn find_tickets_within(port: u16, sid: &str, limit: Duration) -> RawResponse {
    let call = json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {}},
    });
    post(port, Some(sid), &call, limit)
}

/// `resources/read helpdesk://policies/sla` on `port` in session `sid`: a request whose handler
/// touches no Redis (help-desk's tickets are in Redis when it has one), for the tests of what
/// the session layer does while Redis is paused or down.
fn read_sla(port: u16, sid: &str) -> RawResponse {
    read_sla_within(port, sid, HTTP_LIMIT)
}

fn read_sla_within(port: u16, sid: &str, limit: Duration) -> RawResponse {
    let read = json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "resources/read",
        "params": {"uri": "helpdesk://policies/sla"},
    });
    post(port, Some(sid), &read, limit)
}

/// A 200 with the service levels.
fn assert_read_ok(resp: &RawResponse, what: &str) {
    assert_eq!(resp.status, 200, "{what}:\n{}", resp.describe());
    let text = resp.json()["result"]["contents"][0]["text"]
        .as_str()
        .map(String::from);
    assert!(
        text.is_some_and(|t| t.contains("Service levels")),
        "{what}: not the service levels:\n{}",
        resp.describe()
    );
}

fn delete_session(port: u16, sid: &str) -> RawResponse {
    http(
        port,
        "DELETE",
        "/mcp",
        &[
            ("mcp-session-id", sid),
            ("mcp-protocol-version", PROTOCOL_VERSION),
        ],
        None,
        HTTP_LIMIT,
    )
}

/// A JSON-RPC error answer with this HTTP status, code and message.
fn assert_rpc_error(resp: &RawResponse, status: u16, code: i64, message: &str, what: &str) {
    assert_eq!(resp.status, status, "{what}:\n{}", resp.describe());
    let msg = resp.json();
    assert_eq!(
        msg["error"]["code"].as_i64(),
        Some(code),
        "{what}:\n{}",
        resp.describe()
    );
    assert_eq!(
        msg["error"]["message"].as_str(),
        Some(message),
        "{what}:\n{}",
        resp.describe()
    );
}

fn readyz(port: u16) -> RawResponse {
    http(port, "GET", "/readyz", &[], None, HTTP_LIMIT)
}

// ---------------------------------------------------------------------------------------------
// Redis inspection

fn session_key(sid: &str) -> String {
    format!("mcp:session:{sid}")
}

fn key_exists(redis: &RedisServer, sid: &str) -> bool {
    redis.cli(&["EXISTS", &session_key(sid)]) == "1"
}

/// Every `nodeId` value anywhere in the stored record of `sid`.
fn stored_node_ids(redis: &RedisServer, sid: &str) -> Vec<String> {
    let raw = redis.cli(&["GET", &session_key(sid)]);
    let record: Value = serde_json::from_str(&raw)
        .unwrap_or_else(|e| panic!("record of {sid} is not JSON ({e}): {raw:?}"));
    let mut ids = Vec::new();
    collect_node_ids(&record, &mut ids);
    assert!(!ids.is_empty(), "no nodeId in the stored record: {record}");
    ids
}

fn collect_node_ids(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "nodeId" {
                    out.push(v.as_str().unwrap_or_default().to_string());
                }
                collect_node_ids(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_node_ids(v, out)),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// 1. A session moves between instances

#[test]
fn a_session_opened_on_a_is_served_by_b_through_redis() {
    let redis = RedisServer::start();
    let a = desk("desk-a", Some(&redis.url()), None);
    let b = desk("desk-b", Some(&redis.url()), None);
    assert_log_has(&a, "A", VALIDATED);
    assert_log_has(&b, "B", VALIDATED);

    let sid = open_session(a.port());
    assert!(
        key_exists(&redis, &sid),
        "initialize on A stored no session key"
    );
    assert_eq!(stored_node_ids(&redis, &sid), ["desk-a"], "holder before B");

    let resp = find_tickets(b.port(), &sid);
    assert_tool_ok(&resp, "tools/call on B for a session opened on A");
    assert_log_has(&b, "B", RECREATING);
    assert_eq!(
        stored_node_ids(&redis, &sid),
        ["desk-b"],
        "B writes the record back naming itself"
    );

    // B now holds it: a second call is served without recreating it again.
    assert_tool_ok(&find_tickets(b.port(), &sid), "second call on B");
    assert_eq!(count(&b, RECREATING), 1, "B recreated the session twice");
    // And A still serves it.
    assert_tool_ok(&find_tickets(a.port(), &sid), "call back on A");
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

#[test]
fn without_redis_b_does_not_know_a_session_opened_on_a() {
    let a = desk("desk-a", None, None);
    let b = desk("desk-b", None, None);
    let sid = open_session(a.port());
    let resp = find_tickets(b.port(), &sid);
    assert_rpc_error(
        &resp,
        404,
        -32000,
        "session not initialized",
        "tools/call on B without Redis",
    );
    assert!(!b.log().contains(RECREATING), "B recreated without Redis");
    assert_tool_ok(&find_tickets(a.port(), &sid), "A still serves its session");
}

// ---------------------------------------------------------------------------------------------
// 2. A restarted instance

#[test]
fn a_restarted_instance_serves_the_sessions_of_its_previous_life() {
    let redis = RedisServer::start();
    let first = desk("desk-a", Some(&redis.url()), None);
    let sid = open_session(first.port());
    assert_tool_ok(&find_tickets(first.port(), &sid), "call before the restart");
    drop(first); // SIGKILL: the process is gone, its memory with it

    let second = desk("desk-a", Some(&redis.url()), None);
    let resp = find_tickets(second.port(), &sid);
    assert_tool_ok(&resp, "call on the restarted instance");
    assert_log_has(&second, "restarted A", RECREATING);
    assert_tool_ok(
        &find_tickets(second.port(), &sid),
        "second call after the restart",
    );
    second.assert_no_panic_logged();
}

// ---------------------------------------------------------------------------------------------
// 3. Redis paused (SIGSTOP)

/// How long after SIGCONT the calls on a held session may stay slow. A call that cannot confirm
/// the session waits the check timeout (500 ms by default, 2000 ms configured) and then serves
/// it anyway; once Redis answers again the check takes milliseconds (in practice the first
/// call after SIGCONT is already fast). Ten seconds is five 2000 ms check timeouts.
const FAST_AGAIN_LIMIT: Duration = Duration::from_secs(10);

/// Calls on a held session while Redis is paused. A session whose record Redis confirmed and
/// tracks is answered at once (no round trip: nobody can change its record while Redis is
/// paused). A session whose record changed just before the pause (here another connection
/// rewrote its expiry, so Redis pushed an invalidation) must be checked: each call answers 200
/// within `bounds`, and `line` (the contract's log line for the timed-out check) is logged next
/// to [`SERVING_HERE`]. Once Redis resumes, calls are fast again (under 250 ms) within
/// [`FAST_AGAIN_LIMIT`] and the session is still stored.
fn held_session_survives_pause(check_timeout: Option<u64>, bounds: (f64, f64), line: &str) {
    let dir = TempDir::new("fleet-redis-pause");
    let config = check_timeout
        .map(|ms| config_file(&dir, &format!("[sessions]\ncheck_timeout_ms = {ms}\n")));
    let mut redis = RedisServer::start();
    let a = desk("desk-a", Some(&redis.url()), config.as_ref());
    let sid = open_session(a.port());
    let tracked = open_session(a.port());
    assert!(key_exists(&redis, &sid), "session not stored");
    assert_read_ok(&read_sla(a.port(), &sid), "call before the pause");
    assert_read_ok(&read_sla(a.port(), &tracked), "call before the pause");
    let pttl = redis.cli(&["PTTL", &session_key(&sid)]);
    redis.cli(&["PEXPIRE", &session_key(&sid), &pttl]);
    // Let the invalidation reach A.
    thread::sleep(Duration::from_millis(100));

    redis.pause();
    let resp = read_sla(a.port(), &tracked);
    assert_read_ok(&resp, "a tracked session with Redis paused");
    assert!(
        resp.elapsed < Duration::from_millis(250),
        "a tracked session waited {:?} for a paused Redis",
        resp.elapsed
    );
    let paused_at = Instant::now();
    let mut took = Vec::new();
    // Three calls, about five seconds of pause with the default bound.
    for n in 1..=3 {
        let resp = read_sla(a.port(), &sid);
        assert_read_ok(&resp, &format!("call {n} on A with Redis paused"));
        let secs = resp.elapsed.as_secs_f64();
        took.push(secs);
        assert!(
            (bounds.0..=bounds.1).contains(&secs),
            "call {n} with Redis paused answered after {secs:.2} s, expected {:.1}-{:.1} s \
             (check timeout {check_timeout:?} ms)\n--- A log ---\n{}",
            bounds.0,
            bounds.1,
            a.log()
        );
    }
    assert_log_has(&a, "A", SERVING_HERE);
    assert_log_has(&a, "A", line);
    // Keep Redis paused about five seconds, as in the acceptance, then let it go.
    if let Some(rest) = Duration::from_secs(5).checked_sub(paused_at.elapsed()) {
        thread::sleep(rest);
    }
    redis.resume();
    eprintln!("calls with Redis paused took {took:.2?} s");

    // Redis is back: the session is still served, fast again, and still stored.
    let resumed_at = Instant::now();
    let mut slow = Vec::new();
    loop {
        let resp = read_sla(a.port(), &sid);
        assert_read_ok(&resp, "call after SIGCONT");
        if resp.elapsed < Duration::from_millis(250) {
            break;
        }
        slow.push(resp.elapsed);
        assert!(
            resumed_at.elapsed() < FAST_AGAIN_LIMIT,
            "calls on A still take 250 ms or more {:.1?} after Redis resumed (took {slow:.2?}; \
             check timeout {check_timeout:?} ms)\n--- A log ---\n{}",
            resumed_at.elapsed(),
            a.log()
        );
        thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "fast again {:.2?} after SIGCONT (slow calls before: {slow:.2?})",
        resumed_at.elapsed()
    );
    assert!(
        key_exists(&redis, &sid),
        "session key lost across the pause"
    );
    a.assert_no_panic_logged();
}

/// With the default check timeout (500 ms), each call answers 0.3-3.0 s into the pause, and the
/// contract's own line, `The session store did not answer within 500 ms`, is logged next to
/// `Could not confirm the session is still stored — serving it here`.
#[test]
fn paused_redis_logs_the_session_store_did_not_answer_within_500_ms() {
    held_session_survives_pause(None, (0.3, 3.0), NO_ANSWER_500);
}

/// The same with `check_timeout_ms = 2000`: each call answers 1.5-5.0 s into the pause.
#[test]
fn paused_redis_logs_the_session_store_did_not_answer_within_2000_ms() {
    held_session_survives_pause(Some(2000), (1.5, 5.0), NO_ANSWER_2000);
}

/// A session A does not hold, with Redis paused: a bounded wait, then `503` with
/// `Retry-After`, never a hang; once Redis is back the same call answers 200.
#[test]
fn paused_redis_a_session_not_held_gets_503_with_retry_after_then_200() {
    let dir = TempDir::new("fleet-redis-wait");
    let config = config_file(&dir, "[sessions]\nstore_wait_ms = 1500\n");
    let mut redis = RedisServer::start();
    let a = desk("desk-a", Some(&redis.url()), Some(&config));
    let b = desk("desk-b", Some(&redis.url()), Some(&config));
    let sid = open_session(b.port());
    assert!(key_exists(&redis, &sid), "session not stored");

    redis.pause();
    let resp = find_tickets_within(a.port(), &sid, Duration::from_secs(10));
    let secs = resp.elapsed.as_secs_f64();
    assert_eq!(
        resp.status,
        503,
        "call on A for a session it does not hold, Redis paused:\n{}\n--- A log ---\n{}",
        resp.describe(),
        a.log()
    );
    let retry = resp
        .header("retry-after")
        .unwrap_or_else(|| panic!("503 without Retry-After:\n{}", resp.describe()));
    assert!(
        retry.parse::<u64>().is_ok_and(|s| s >= 1),
        "Retry-After {retry:?}"
    );
    let msg = resp.json();
    assert!(
        msg["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "503 without a JSON-RPC error message:\n{}",
        resp.describe()
    );
    assert!(
        secs <= 4.0,
        "the 503 came after {secs:.2} s; store_wait_ms is 1500"
    );
    eprintln!("503 after {secs:.2} s: {}", resp.body);

    redis.resume();
    let resp = find_tickets(a.port(), &sid);
    assert_tool_ok(&resp, "the same call on A after SIGCONT");
    assert_log_has(&a, "A", RECREATING);
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

/// The other half of that acceptance line: a request for a session the instance does not hold
/// waits for Redis, so when Redis comes back before `store_wait_ms` runs out the request is
/// answered (200), not refused.
#[test]
fn paused_redis_a_session_not_held_is_answered_when_redis_comes_back_within_the_wait() {
    let dir = TempDir::new("fleet-redis-comeback");
    let config = config_file(&dir, "[sessions]\nstore_wait_ms = 3000\n");
    let mut redis = RedisServer::start();
    let a = desk("desk-a", Some(&redis.url()), Some(&config));
    let b = desk("desk-b", Some(&redis.url()), Some(&config));
    let sid = open_session(b.port());

    redis.pause();
    let port = a.port();
    let call = {
        let sid = sid.clone();
        thread::spawn(move || find_tickets_within(port, &sid, Duration::from_secs(10)))
    };
    thread::sleep(Duration::from_millis(1000));
    redis.resume();
    let resp = call.join().expect("the call thread");
    assert_tool_ok(
        &resp,
        &format!(
            "call on A (session held by B) while Redis was paused for 1 s, store_wait_ms 3000\n--- A log ---\n{}",
            a.log()
        ),
    );
    let secs = resp.elapsed.as_secs_f64();
    assert!(
        (0.8..=3.5).contains(&secs),
        "answered after {secs:.2} s; Redis came back after 1 s"
    );
    assert_log_has(&a, "A", RECREATING);
}

// ---------------------------------------------------------------------------------------------
// 4. Redis not running at start

#[test]
fn redis_down_at_start_then_started_is_used_without_a_restart() {
    let port = support_redis::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let mut a = desk("desk-a", Some(&url), None);

    let resp = readyz(a.port());
    assert_eq!(
        resp.status,
        503,
        "/readyz with Redis down:\n{}",
        resp.describe()
    );
    assert!(
        !a.log().contains(VALIDATED),
        "validated a Redis that is not running"
    );

    // Sessions work in memory meanwhile.
    let early = open_session(a.port());
    assert_read_ok(&read_sla(a.port(), &early), "call with Redis down");

    let redis = RedisServer::start_on(port);
    let started = Instant::now();
    let limit = Duration::from_secs(40);
    loop {
        let resp = readyz(a.port());
        if resp.status == 200 {
            break;
        }
        assert!(
            started.elapsed() < limit,
            "/readyz still {} {:?} after Redis ran for {limit:?}\n--- A log ---\n{}",
            resp.status,
            resp.body,
            a.log()
        );
        thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "/readyz 200 {:.1?} after redis-server started",
        started.elapsed()
    );
    assert_log_has(&a, "A", VALIDATED);
    a.assert_alive(); // the same process: no restart

    let fresh = open_session(a.port());
    assert!(
        key_exists(&redis, &fresh),
        "a session opened after Redis came up is not in Redis"
    );
    assert_eq!(stored_node_ids(&redis, &fresh), ["desk-a"]);
    assert_read_ok(&read_sla(a.port(), &fresh), "call on the new session");
    assert_read_ok(
        &read_sla(a.port(), &early),
        "call on the session opened while Redis was down",
    );
    a.assert_no_panic_logged();
}

// ---------------------------------------------------------------------------------------------
// 5. DELETE on one instance

#[test]
fn delete_on_a_expires_the_session_on_b_which_served_it() {
    let redis = RedisServer::start();
    let a = desk("desk-a", Some(&redis.url()), None);
    let b = desk("desk-b", Some(&redis.url()), None);
    let sid = open_session(a.port());
    assert_tool_ok(&find_tickets(b.port(), &sid), "call on B before the DELETE");
    assert_log_has(&b, "B", RECREATING);

    let resp = delete_session(a.port(), &sid);
    assert_eq!(resp.status, 204, "DELETE on A:\n{}", resp.describe());
    assert!(!key_exists(&redis, &sid), "DELETE left the key in Redis");

    let resp = find_tickets(b.port(), &sid);
    assert_rpc_error(
        &resp,
        404,
        -32001,
        "session expired",
        "call on B after the DELETE on A",
    );
    assert_log_has(&b, "B", GONE);

    // On A, the contract's answer for a session deleted there.
    let resp = find_tickets(a.port(), &sid);
    assert_eq!(
        (resp.status, resp.body.as_str()),
        (404, "Session not found"),
        "call on A after its DELETE:\n{}",
        resp.describe()
    );
    assert!(!key_exists(&redis, &sid), "the deleted session came back");
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}

// ---------------------------------------------------------------------------------------------
// 6. The session TTL slides

#[test]
fn the_session_ttl_slides_while_used_and_runs_out_when_idle() {
    let dir = TempDir::new("fleet-redis-ttl");
    let config = config_file(
        &dir,
        "[sessions]\nidle_ttl_ms = 3000\n[redis]\ndefault_ttl_ms = 3000\n",
    );
    let redis = RedisServer::start();
    let a = desk("desk-a", Some(&redis.url()), Some(&config));
    let sid = open_session(a.port());
    let ttl: i64 = redis.cli(&["PTTL", &session_key(&sid)]).parse().unwrap();
    assert!(
        (1..=3000).contains(&ttl),
        "a fresh session's key lives {ttl} ms, expected at most 3000"
    );

    // Used every 500 ms for 5 s: longer than the 3 s TTL.
    let start = Instant::now();
    let mut calls = 0;
    while start.elapsed() < Duration::from_secs(5) {
        let resp = find_tickets(a.port(), &sid);
        calls += 1;
        assert_tool_ok(&resp, &format!("call {calls} at {:.1?}", start.elapsed()));
        thread::sleep(Duration::from_millis(500));
    }
    assert_tool_ok(&find_tickets(a.port(), &sid), "call after 5 s of use");
    assert!(
        key_exists(&redis, &sid),
        "the key expired although the session was used every 500 ms"
    );

    // Idle for 4 s: past the TTL.
    thread::sleep(Duration::from_secs(4));
    assert!(
        !key_exists(&redis, &sid),
        "the key outlived its 3 s TTL by a second"
    );
    let resp = find_tickets(a.port(), &sid);
    assert_rpc_error(
        &resp,
        404,
        -32001,
        "session expired",
        "call after the session idled past its TTL",
    );
    a.assert_no_panic_logged();
}

// ---------------------------------------------------------------------------------------------
// Rotating MCP_SESSION_SECRET

/// The secret a rotation moves to (the old one is `support::SESSION_SECRET`).
const NEW_SECRET: &str = "fleetmcp-e2e-the-secret-after-the-rotation";

/// A rolling change of the secret: an instance given the new secret with the old one as
/// previous serves sessions opened under the old one and seals new ids under the new one, so no
/// session is dropped while instances are restarted one by one; once the old secret is removed
/// everywhere, its ids stop opening.
#[test]
fn a_rolling_secret_change_drops_no_session() {
    let redis = RedisServer::start();
    let url = redis.url();
    let old = desk("desk-a", Some(&url), None);
    let sid = open_session(old.port());
    let rotating = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[
            ("MACHINE_ID", "desk-b"),
            ("REDIS_URL", &url),
            ("MCP_SESSION_SECRET", NEW_SECRET),
            ("MCP_SESSION_SECRET_PREVIOUS", support::SESSION_SECRET),
        ],
    );
    assert_tool_ok(
        &find_tickets(rotating.port(), &sid),
        "an id sealed under the old secret, on an instance rotating to the new one",
    );
    let new_sid = open_session(rotating.port());
    assert_rpc_error(
        &find_tickets(old.port(), &new_sid),
        404,
        -32000,
        "invalid session id",
        "an id sealed under the new secret, on an instance that knows only the old one",
    );
    let rotated = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[
            ("MACHINE_ID", "desk-c"),
            ("REDIS_URL", &url),
            ("MCP_SESSION_SECRET", NEW_SECRET),
            ("MCP_SESSION_SECRET_PREVIOUS", ""),
        ],
    );
    assert_tool_ok(
        &find_tickets(rotated.port(), &new_sid),
        "a new id, once the rotation is over",
    );
    assert_rpc_error(
        &find_tickets(rotated.port(), &sid),
        404,
        -32000,
        "invalid session id",
        "an old id, once the old secret is gone",
    );
}

// ---------------------------------------------------------------------------------------------
// Distributed mode: the holder serves, the others relay to it, a stopped holder is taken over

/// A session opened on A and used on B is served by A through the relay (A's tool output and
/// A's machine id, no recreation on B); a DELETE sent to B is answered 204 by A and ends the
/// session everywhere; A keeps serving.
#[test]
fn the_holder_serves_and_the_others_relay_to_it() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let sid = open_session(a.port());
    for _ in 0..3 {
        let resp = find_tickets(b.port(), &sid);
        assert_tool_ok(&resp, "a call for A's session, sent to B");
        assert_eq!(machine_of(&resp), Some("desk-a"), "{}", resp.describe());
    }
    assert_eq!(count(&b, RECREATING), 0, "B never holds it:\n{}", b.log());
    assert_eq!(
        count(&a, RECREATING),
        0,
        "A held it all along:\n{}",
        a.log()
    );

    let resp = delete_session(b.port(), &sid);
    assert_eq!(resp.status, 204, "a relayed DELETE:\n{}", resp.describe());
    assert_eq!(machine_of(&resp), Some("desk-a"), "{}", resp.describe());
    assert!(!key_exists(&redis, &sid), "the session is gone from Redis");
    assert_eq!(
        find_tickets(a.port(), &sid).status,
        404,
        "and from its holder"
    );
    assert_eq!(
        find_tickets(b.port(), &sid).status,
        404,
        "and from the others"
    );
    let health = support::http_get(a.port(), "/healthz").expect("A answers");
    assert_eq!(health.status, 200, "{}", health.describe());
}

/// After its holder stops gracefully (SIGTERM: exit 0, heartbeat deleted), the session's next
/// request on another instance is served at once, with the contract's log lines.
#[test]
fn a_stopped_holders_session_is_taken_over_at_once() {
    let redis = RedisServer::start();
    let url = redis.url();
    // A short drain keeps SIGTERM quick (the drain itself: chaos.rs).
    let mut a = distributed_desk("desk-a", &url, &[("FLEETMCP_DRAIN_MS", "200")]);
    let b = distributed_desk("desk-b", &url, &[]);
    let sid = open_session(a.port());
    // B has just relayed for this session, so it remembers A as the holder.
    let resp = find_tickets(b.port(), &sid);
    assert_eq!(machine_of(&resp), Some("desk-a"), "{}", resp.describe());
    let status = a
        .signal_and_wait("TERM", Duration::from_secs(10))
        .expect("desk-a exits");
    assert!(status.success(), "{status:?}");
    thread::sleep(Duration::from_millis(100));
    let resp = find_tickets(b.port(), &sid);
    assert_tool_ok(&resp, "the stopped holder's session, on B");
    assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
    for line in [
        "[HA] Session owner is gone — the session will be taken over",
        RECREATING,
        "[HA] Took over session from a stopped node",
        "previous_node_id=desk-a",
    ] {
        assert_log_has(&b, "desk-b", line);
    }
    assert_eq!(
        redis.cli(&["EXISTS", "mcp:ha:heartbeat:desk-a"]).trim(),
        "0",
        "only B's heartbeat is left"
    );
    assert_eq!(
        redis.cli(&["EXISTS", "mcp:ha:heartbeat:desk-b"]).trim(),
        "1"
    );
    // B holds it now: its next request is served there without another takeover.
    assert_tool_ok(&find_tickets(b.port(), &sid), "served by its new holder");
    assert_eq!(count(&b, "[HA] Took over session from a stopped node"), 1);
}

/// A holder killed with SIGKILL leaves its heartbeat behind, but its address refuses
/// connections and it holds no subscription on its channel: the session's next request on
/// another instance takes it over at once, long before the heartbeat (30 s) expires.
#[test]
fn a_crashed_holders_session_is_served_again_within_two_seconds() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let sid = open_session(a.port());
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    assert_eq!(
        redis.cli(&["EXISTS", "mcp:ha:heartbeat:desk-a"]).trim(),
        "1",
        "the crash left the heartbeat behind"
    );
    let began = Instant::now();
    let resp = find_tickets_within(b.port(), &sid, Duration::from_secs(5));
    let served_after = began.elapsed();
    assert_tool_ok(&resp, "the crashed holder's session, on B");
    assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
    assert!(
        served_after < Duration::from_secs(2),
        "served {served_after:?} after the first request"
    );
    eprintln!(
        "SIGKILLed holder: its session was served again {served_after:?} after the first request"
    );
    for line in [
        "[HA] Session owner is gone — the session will be taken over",
        RECREATING,
        "[HA] Took over session from a stopped node",
    ] {
        assert_log_has(&b, "desk-b", line);
    }
}

/// A holder that is alive but does not answer (SIGSTOP) is not taken over: its session's
/// requests get the contract's 503 with `Retry-After` = the heartbeat lifetime within the relay's
/// answer timeout, never a hang; once it resumes, they are relayed to it again.
#[test]
fn a_paused_holder_gives_503_with_retry_after_and_keeps_its_session() {
    let redis = RedisServer::start();
    let url = redis.url();
    let timings = [
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "2000"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "6000"),
    ];
    let mut a = distributed_desk("desk-a", &url, &timings);
    let b = distributed_desk("desk-b", &url, &timings);
    let sid = open_session(a.port());
    assert!(
        a.signal_and_wait("STOP", Duration::from_millis(200))
            .is_none(),
        "paused, not gone"
    );
    let began = Instant::now();
    let resp = find_tickets_within(b.port(), &sid, Duration::from_secs(10));
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "answered, not hung"
    );
    assert_rpc_error(
        &resp,
        503,
        -32000,
        "This MCP session is served by another instance of the server, which did not answer the relayed request. Retry after 6s; if that instance has stopped, the session is taken over by another instance once its heartbeat expires.",
        "a paused holder's session",
    );
    assert_eq!(resp.header("retry-after"), Some("6"), "{}", resp.describe());
    assert_log_has(&b, "desk-b", "[HA] Relay to session owner failed");
    assert!(
        a.signal_and_wait("CONT", Duration::from_millis(200))
            .is_none()
    );
    let resp = find_tickets(b.port(), &sid);
    assert_tool_ok(&resp, "relayed to the holder once it resumed");
    assert_eq!(machine_of(&resp), Some("desk-a"), "{}", resp.describe());
    assert_eq!(
        count(&b, "[HA] Took over session"),
        0,
        "never taken over:\n{}",
        b.log()
    );
}

/// A resource update raised on one instance reaches a session subscribed to it on another: B
/// closes ticket 1 (its handler announces `helpdesk://tickets/1` as updated) and the GET
/// stream of a session held by A, subscribed to that URI, carries the notification.
#[test]
fn a_resource_update_raised_on_one_instance_reaches_subscribers_on_another() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let uri = "helpdesk://tickets/1";

    let sa = open_session(a.port());
    let subscribe = json!({"jsonrpc": "2.0", "id": next_id(), "method": "resources/subscribe", "params": {"uri": uri}});
    let resp = post(a.port(), Some(&sa), &subscribe, HTTP_LIMIT);
    assert_eq!(resp.status, 200, "subscribe:\n{}", resp.describe());
    let mut stream = open_get_stream(a.port(), &sa);

    let sb = open_session(b.port());
    let call = |name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
               "params": {"name": name, "arguments": arguments}})
    };
    assert_tool_ok(
        &post(
            b.port(),
            Some(&sb),
            &call("open_ticket", json!({"title": "printer"})),
            HTTP_LIMIT,
        ),
        "open ticket 1 on B",
    );
    assert_tool_ok(
        &post(
            b.port(),
            Some(&sb),
            &call("close_ticket", json!({"id": 1, "resolution": "toner"})),
            HTTP_LIMIT,
        ),
        "close ticket 1 on B",
    );

    read_stream_until(&mut stream, &["notifications/resources/updated", uri]);
}

/// A holder that stops beating while its process lives (SIGSTOP past its heartbeat lifetime)
/// keeps its sessions for `FRONTMCP_HA_TAKEOVER_GRACE_MS` (503 with `Retry-After` meanwhile,
/// answered at once), and only then is taken over; a holder known gone is not made to wait
/// (see the SIGKILL test).
#[test]
fn a_silent_holder_is_taken_over_only_after_the_grace_period() {
    let redis = RedisServer::start();
    let url = redis.url();
    let timings = [
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "500"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1000"),
        ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "3000"),
    ];
    let mut a = distributed_desk("desk-a", &url, &timings);
    let b = distributed_desk("desk-b", &url, &timings);
    let sid = open_session(a.port());
    assert!(
        a.signal_and_wait("STOP", Duration::from_millis(100))
            .is_none()
    );
    let expired = Instant::now();
    while redis.cli(&["EXISTS", "mcp:ha:heartbeat:desk-a"]).trim() == "1" {
        assert!(
            expired.elapsed() < Duration::from_secs(5),
            "A's heartbeat expires"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let first = Instant::now();
    let resp = find_tickets_within(b.port(), &sid, Duration::from_secs(5));
    assert_eq!(
        resp.status,
        503,
        "within the grace period:\n{}",
        resp.describe()
    );
    assert!(first.elapsed() < Duration::from_secs(2), "answered at once");
    let taken = loop {
        thread::sleep(Duration::from_millis(250));
        let resp = find_tickets_within(b.port(), &sid, Duration::from_secs(6));
        if resp.status == 200 {
            assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
            break first.elapsed();
        }
        assert_eq!(
            resp.status,
            503,
            "only 503 until then:\n{}",
            resp.describe()
        );
        assert!(
            first.elapsed() < Duration::from_secs(10),
            "taken over after the grace period"
        );
    };
    assert!(
        taken >= Duration::from_millis(2900),
        "taken over {taken:?} after B first saw A silent, before the 3 s grace period"
    );
    // Taken over by the request past the grace period, or by B's orphan scanner, whose own
    // grace (the heartbeat lifetime plus the grace period, from A's last beat) runs out at
    // about the same moment: either way, not before.
    assert!(
        log_has(&b, "the grace period passed", LOG_LIMIT)
            || log_has(&b, "[HA] Adopted an orphaned session", LOG_LIMIT),
        "B took the session over: {}",
        b.log()
    );
    assert!(
        a.signal_and_wait("CONT", Duration::from_millis(100))
            .is_none()
    );
}

/// The stored record of `sid` as Redis has it.
fn stored(redis: &RedisServer, sid: &str) -> Value {
    serde_json::from_str(&redis.cli(&["GET", &session_key(sid)])).unwrap_or(Value::Null)
}

/// The members of `node`'s index of held sessions (a handful: one bucket, `session/index.rs`).
fn index_of(redis: &RedisServer, node: &str) -> Vec<String> {
    redis
        .cli(&["ZRANGE", &format!("mcp:node:{node}:sessions:0"), "0", "-1"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Fencing under a partition: A, holding a session, is cut off from Redis (a proxy between
/// them closes every connection) while B is not. By the time A's heartbeat has expired, and so
/// before anyone can take the session over, A has stopped serving it from memory (503, its
/// heartbeat lease ran out). B takes it over. When A is back, it finds it lost the session
/// (the record names B under a later epoch), drops it, and relays its requests to B; the record
/// is exactly as B wrote it, and A's index does not name the session.
#[test]
fn a_holder_cut_off_from_redis_stops_serving_and_never_writes_over_its_successor() {
    let redis = RedisServer::start();
    let proxy = CuttableProxy::start(redis.port);
    let timings = [
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1500"),
        ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "1000"),
    ];
    let a = distributed_desk("desk-a", &proxy.url(), &timings);
    let b = distributed_desk("desk-b", &redis.url(), &timings);
    let sid = open_session(a.port());
    let resp = find_tickets(a.port(), &sid);
    assert_tool_ok(&resp, "served by its holder");
    assert_eq!(machine_of(&resp), Some("desk-a"));
    // Its first epoch, 1, which the record leaves out (issue 23: a byte less per session).
    assert_eq!(stored(&redis, &sid).get("epoch"), None);

    proxy.cut();
    let cut_at = Instant::now();
    while redis.cli(&["EXISTS", "mcp:ha:heartbeat:desk-a"]).trim() == "1" {
        assert!(
            cut_at.elapsed() < Duration::from_secs(5),
            "A's heartbeat expires"
        );
        thread::sleep(Duration::from_millis(20));
    }
    // The moment anyone could take it over, A no longer serves it from memory.
    let resp = find_tickets_within(a.port(), &sid, Duration::from_secs(10));
    assert_eq!(
        resp.status,
        503,
        "A, cut off past its lease:\n{}",
        resp.describe()
    );
    assert!(resp.header("retry-after").is_some(), "{}", resp.describe());
    assert_log_has(&a, "desk-a", "its heartbeat lease ran out — not serving it");

    let resp = find_tickets(b.port(), &sid);
    assert_tool_ok(&resp, "taken over by B");
    assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
    let record = stored(&redis, &sid);
    assert_eq!(record["session"]["nodeId"], "desk-b");
    assert!(record["epoch"].as_u64() >= Some(2), "{record}");

    proxy.restore();
    let back = Instant::now();
    while redis.cli(&["EXISTS", "mcp:ha:heartbeat:desk-a"]).trim() != "1" {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "A beats again once the proxy forwards again"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let before = redis.cli(&["GET", &session_key(&sid)]);
    for _ in 0..3 {
        let resp = find_tickets(a.port(), &sid);
        assert_tool_ok(&resp, "sent to A once it is back");
        assert_eq!(
            machine_of(&resp),
            Some("desk-b"),
            "A relays to the new holder:\n{}",
            resp.describe()
        );
    }
    assert_log_has(
        &a,
        "desk-a",
        "[HA] Another node took this session over while this node was unreachable — dropping it here",
    );
    // A few of A's beats later, nothing of A's has landed on B's record or index.
    thread::sleep(Duration::from_millis(1000));
    assert_eq!(redis.cli(&["GET", &session_key(&sid)]), before);
    assert!(!index_of(&redis, "desk-a").contains(&sid));
    assert!(index_of(&redis, "desk-b").contains(&sid));
}

fn as_args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The orphan scanner claims a dead instance's whole index: its buckets, and the single sorted
/// set a version before the buckets kept (a rolling upgrade); the claimer's own index is then
/// in buckets Redis keeps compact (listpack), and nothing of the dead instance is left.
#[test]
fn the_orphan_scanner_claims_every_bucket_and_an_old_versions_single_index() {
    let redis = RedisServer::start();
    let url = redis.url();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let ids: Vec<String> = (0..300).map(|i| format!("ghost-session-{i:04}")).collect();
    let mut records = vec!["MSET".to_string()];
    for id in &ids {
        let record = json!({"session": {"id": id, "protocol": "streamable-http",
            "createdAt": now, "nodeId": "ghost"}, "createdAt": now, "lastAccessedAt": now,
            "initialized": true, "protocolVersion": "2025-11-25"});
        records.extend([session_key(id), record.to_string()]);
    }
    redis.cli(&as_args(&records));
    // 200 in four buckets (the bucket a session is in matters to no reader), 100 in the
    // single index of an earlier version.
    for (n, chunk) in ids[..200].chunks(50).enumerate() {
        let mut add = vec!["ZADD".to_string(), format!("mcp:node:ghost:sessions:{n}")];
        for id in chunk {
            add.extend([now.to_string(), id.clone()]);
        }
        redis.cli(&as_args(&add));
    }
    let mut old = vec!["ZADD".to_string(), "mcp:node:ghost:sessions".to_string()];
    for id in &ids[200..] {
        old.extend([now.to_string(), id.clone()]);
    }
    redis.cli(&as_args(&old));
    redis.cli(&["SET", "mcp:node:ghost:buckets", "4"]);
    redis.cli(&["ZADD", "mcp:ha:nodes", &(now - 60_000).to_string(), "ghost"]);

    let b = distributed_desk("desk-b", &url, &QUICK_FAILOVER);
    let started = Instant::now();
    while !ids
        .iter()
        .all(|id| stored(&redis, id)["session"]["nodeId"] == "desk-b")
    {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the scanner claims the ghost's sessions:\n{}",
            b.log()
        );
        thread::sleep(Duration::from_millis(100));
    }
    // Nothing of the ghost is left: its index, its bucket count, its entry in the fleet's list.
    let ghost_left = || {
        let keys = redis.cli(&[
            "EXISTS",
            "mcp:node:ghost:sessions",
            "mcp:node:ghost:sessions:0",
            "mcp:node:ghost:sessions:3",
            "mcp:node:ghost:buckets",
        ]);
        let listed = redis.cli(&["ZSCORE", "mcp:ha:nodes", "ghost"]);
        format!("{keys} keys, listed {listed:?}")
    };
    while ghost_left() != "0 keys, listed \"\"" {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the ghost is gone: {}",
            ghost_left()
        );
        thread::sleep(Duration::from_millis(100));
    }
    let buckets: u32 = redis
        .cli(&["GET", "mcp:node:desk-b:buckets"])
        .parse()
        .unwrap_or(1);
    assert!(buckets >= 4, "{buckets} buckets for 300 sessions");
    let mut held = 0;
    for n in 0..buckets {
        let key = format!("mcp:node:desk-b:sessions:{n}");
        held += redis.cli(&["ZCARD", &key]).parse::<u64>().unwrap_or(0);
        let encoding = redis.cli(&["OBJECT", "ENCODING", &key]);
        assert!(
            matches!(encoding.as_str(), "listpack" | ""),
            "{key} is {encoding}"
        );
    }
    assert_eq!(held, 300, "desk-b's index names every claimed session once");
    assert_eq!(redis.cli(&["EXISTS", "mcp:node:desk-b:sessions"]), "0");
}

/// The orphan scanner claims a SIGKILLed holder's sessions in the background, with no request
/// for them, reading the holder's index and never listing the keyspace (`MONITOR` sees no
/// `KEYS` or `SCAN`); the claimer then serves them.
#[test]
fn the_orphan_scanner_claims_a_dead_holders_sessions_without_keys() {
    let redis = RedisServer::start();
    let url = redis.url();
    let timings = QUICK_FAILOVER;
    let mut a = distributed_desk("desk-a", &url, &timings);
    let b = distributed_desk("desk-b", &url, &timings);
    let sids: Vec<String> = (0..3).map(|_| open_session(a.port())).collect();
    let mut held_by_a = index_of(&redis, "desk-a");
    held_by_a.sort();
    let mut expected = sids.clone();
    expected.sort();
    assert_eq!(held_by_a, expected, "A's index names its sessions");

    let monitor = Monitor::start(&redis);
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    let killed = Instant::now();
    while !sids
        .iter()
        .all(|sid| stored(&redis, sid)["session"]["nodeId"] == "desk-b")
    {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "the scanner claims A's sessions:\n{}",
            b.log()
        );
        thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "the scanner claimed the SIGKILLed holder's sessions {:?} after the kill",
        killed.elapsed()
    );
    assert_log_has(
        &b,
        "desk-b",
        "[HA] Orphan scanner started (interval: 300ms)",
    );
    for sid in &sids {
        let short: String = sid.chars().take(20).collect();
        assert_log_has(
            &b,
            "desk-b",
            &format!("[HA] Orphan scan: claimed session {short} from desk-a"),
        );
        assert_eq!(stored(&redis, sid)["reassignedFrom"], "desk-a");
    }
    assert_log_has(
        &b,
        "desk-b",
        "[HA] Adopted an orphaned session — this node now serves it",
    );
    let commands = monitor.commands();
    assert!(
        commands.contains("\"ZRANGE\" \"mcp:node:desk-a:sessions:0\""),
        "MONITOR recorded the scan:\n{commands}"
    );
    for listing in ["\"KEYS\"", "\"SCAN\""] {
        assert!(
            !commands.contains(listing),
            "the scan listed the keyspace with {listing}"
        );
    }
    drop(monitor);
    // A left the fleet's list once its sessions were claimed.
    assert!(
        !redis
            .cli(&["ZRANGE", "mcp:ha:nodes", "0", "-1"])
            .contains("desk-a")
    );
    for sid in &sids {
        let resp = find_tickets(b.port(), sid);
        assert_tool_ok(&resp, "a claimed session, on its claimer");
        assert_eq!(machine_of(&resp), Some("desk-b"));
    }
    assert_eq!(count(&b, "[HA] Took over session from a stopped node"), 0);
}

/// A notification for one session raised on another instance reaches the session's stream on
/// its holder (ha-contract 17): a session held by B pages a session held by A (`page_session`
/// runs on B), and A's GET stream carries the message. The message is authenticated: the same
/// message published again, or with its text changed, is dropped with a warning. A page for a
/// session whose holder is gone is dropped, counted, and reported as not delivered.
#[test]
fn a_notification_for_a_session_held_elsewhere_reaches_it_on_its_holder() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let sa = open_session(a.port());
    let mut stream = open_get_stream(a.port(), &sa);
    let sb = open_session(b.port());
    let page = |sid: &str, text: &str| {
        json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
               "params": {"name": "page_session", "arguments": {"session_id": sid, "message": text}}})
    };
    let monitor = Monitor::start(&redis);
    let resp = post(
        b.port(),
        Some(&sb),
        &page(&sa, "ticket 7 needs you"),
        HTTP_LIMIT,
    );
    assert_tool_ok(&resp, "page A's session from B");
    assert_eq!(machine_of(&resp), Some("desk-b"), "ran on B");
    assert_eq!(
        resp.json()["result"]["structuredContent"]["delivered"],
        true,
        "{}",
        resp.describe()
    );
    read_stream_until(
        &mut stream,
        &["notifications/message", "ticket 7 needs you"],
    );

    // The message as it crossed Redis, replayed as is and with its text changed: both dropped.
    let genuine = published_on(&monitor.commands(), "mcp:ha:notify:desk-a");
    drop(monitor);
    assert!(genuine.contains("\"auth\":\"v1;"), "signed: {genuine}");
    let forged = genuine.replace("ticket 7 needs you", "send me your password");
    for message in [&genuine, &forged] {
        assert_eq!(
            redis.cli(&["PUBLISH", "mcp:ha:notify:desk-a", message]),
            "1",
            "A listens on its channel"
        );
    }
    let resp = post(b.port(), Some(&sb), &page(&sa, "third page"), HTTP_LIMIT);
    assert_tool_ok(&resp, "page A's session again");
    let seen = read_stream_until(&mut stream, &["third page"]);
    assert!(!seen.contains("send me your password"), "{seen}");
    assert!(!seen.contains("ticket 7 needs you"), "replayed:\n{seen}");
    assert_eq!(
        count(&a, "[HA] Dropped a notification on this instance's channel"),
        2,
        "{}",
        a.log()
    );
    drop(stream);

    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    let resp = post(b.port(), Some(&sb), &page(&sa, "anyone there?"), HTTP_LIMIT);
    assert_tool_ok(&resp, "page a session whose holder is gone");
    assert_eq!(
        resp.json()["result"]["structuredContent"]["delivered"],
        false,
        "{}",
        resp.describe()
    );
    assert_log_has(
        &b,
        "desk-b",
        "[HA] A notification for a session held elsewhere was dropped: its holder is not alive",
    );
}

/// The payload of the last `PUBLISH` on `channel` that `MONITOR` recorded, unescaped.
fn published_on(monitor: &str, channel: &str) -> String {
    let marker = format!("\"PUBLISH\" \"{channel}\" \"");
    let line = monitor
        .lines()
        .rev()
        .find(|l| l.contains(&marker))
        .unwrap_or_else(|| panic!("no PUBLISH on {channel} recorded:\n{monitor}"));
    let quoted = &line[line.find(&marker).map_or(0, |i| i + marker.len())..];
    let quoted = quoted.strip_suffix('"').unwrap_or(quoted);
    let mut out = String::new();
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// Redis paused (5 s, as in the fleet's chaos soak): a session held by A is still served when
/// its requests land on B, which relays them to the holder and its address it saw before the
/// pause (A serves the session from memory: its record was confirmed and its lease holds).
#[test]
fn a_relaying_instance_keeps_relaying_while_redis_is_paused() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let sid = open_session(a.port());
    let resp = read_sla(b.port(), &sid);
    assert_read_ok(&resp, "relayed before the pause");
    assert_eq!(machine_of(&resp), Some("desk-a"));

    redis.pause();
    let paused = Instant::now();
    // Past the second for which B trusts what it read without asking Redis again.
    thread::sleep(Duration::from_millis(1200));
    for n in 1..=3 {
        let resp = read_sla_within(b.port(), &sid, Duration::from_secs(10));
        assert_read_ok(&resp, &format!("relayed call {n} with Redis paused"));
        assert_eq!(machine_of(&resp), Some("desk-a"), "{}", resp.describe());
        assert!(
            resp.elapsed < Duration::from_secs(3),
            "call {n} took {:?}",
            resp.elapsed
        );
    }
    assert!(paused.elapsed() < Duration::from_secs(10));
    assert_log_has(&b, "desk-b", "relaying to the holder last seen");
    redis.resume();
    assert_read_ok(&read_sla(b.port(), &sid), "relayed after the pause");
}

/// Pages sent to a holder's channel while it withdraws from the fleet (SIGTERM): each page its
/// sender was told reached a live holder is in the session's stream. The holder leaves its
/// channel by unsubscribing and handling what Redis sent before confirming it, rather than by
/// dropping the connection with those messages unread.
#[test]
fn pages_sent_to_a_holder_as_it_withdraws_all_reach_the_session() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut a = distributed_desk("desk-a", &url, &[("FLEETMCP_DRAIN_MS", "1500")]);
    let b = distributed_desk("desk-b", &url, &[]);
    let sa = open_session(a.port());
    // The stream's priming event: everything after it is read back at the end.
    let mut stream = open_get_stream(a.port(), &sa);
    let primed = read_stream_until(&mut stream, &["id: "]);
    let first_id = primed
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .expect("a priming event id")
        .trim()
        .to_string();
    drop(stream);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pagers: Vec<_> = (0..3)
        .map(|p| {
            let stop = stop.clone();
            let sa = sa.clone();
            let port = b.port();
            thread::spawn(move || {
                let own = open_session(port);
                let mut delivered = Vec::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let text = format!("page {p}-{n}.");
                    let call = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
                        "params": {"name": "page_session", "arguments": {"session_id": sa, "message": text}}});
                    let resp = post(port, Some(&own), &call, HTTP_LIMIT);
                    assert_tool_ok(&resp, "page A's session from B");
                    if resp.json()["result"]["structuredContent"]["delivered"] == true {
                        delivered.push(text);
                    }
                }
                delivered
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    a.signal("TERM");
    assert_log_has(&a, "desk-a", "[HA] Services stopped for node desk-a");
    // Pages sent after the withdrawal find nobody on A's channel (not delivered).
    thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let delivered: Vec<String> = pagers
        .into_iter()
        .flat_map(|p| p.join().expect("pager"))
        .collect();
    assert!(delivered.len() > 20, "pages delivered: {}", delivered.len());

    // The whole stream, resumed on B (which takes the session over).
    let mut resumed = {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, b.port()));
        let host = format!("127.0.0.1:{}", b.port());
        raw_http::open(
            addr,
            "GET",
            "/mcp",
            &[
                ("Host", &host),
                ("Accept", "text/event-stream"),
                ("mcp-session-id", &sa),
                ("mcp-protocol-version", PROTOCOL_VERSION),
                ("Last-Event-ID", &first_id),
            ],
            None,
            Duration::from_millis(300),
        )
        .expect("resume the stream on B")
    };
    let last = delivered.last().map(String::as_str).unwrap_or_default();
    let needles: Vec<&str> = vec![last];
    let seen = read_stream_until(&mut resumed, &needles);
    // Everything stored is read by now: the stream is read until a quiet 300 ms.
    let seen = {
        use std::io::Read;
        let mut seen = seen;
        let mut buf = [0u8; 4096];
        let mut quiet_since = Instant::now();
        while quiet_since.elapsed() < Duration::from_millis(300) {
            match resumed.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    seen.push_str(&String::from_utf8_lossy(&buf[..n]));
                    quiet_since = Instant::now();
                }
                Err(_) => {}
            }
        }
        seen
    };
    let missing: Vec<&String> = delivered
        .iter()
        .filter(|t| !seen.contains(t.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} delivered pages missing from the stream: {missing:?}",
        missing.len(),
        delivered.len()
    );
    assert!(a.wait_exit(Duration::from_secs(10)).is_some(), "A exits");
}

/// The JSON-RPC ids of the answers a 2024-11-05 stream carried so far (its `data:` lines), in
/// the order they came.
fn answer_ids(seen: &str) -> Vec<Value> {
    seen.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|m| m.get("result").is_some() || m.get("error").is_some())
        .map(|m| m["id"].clone())
        .collect()
}

/// A 2024-11-05 client behind a balancer without affinity: `GET /sse` lands on A, and every
/// POST, the first (`initialize`) included, may land on either instance. Before the fix the
/// `initialize` that reached B was refused (`404`; its stream was not open there, and no store
/// named A until `initialize`), so the session never started and every later POST failed.
/// Now B hands it to A, the instance that minted the id: all twelve POSTs are accepted, and
/// each answer comes once, on A's stream.
#[test]
fn a_2024_11_05_session_whose_first_post_lands_on_the_other_instance() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let (mut stream, endpoint) = open_legacy_stream(a.port(), &[]);
    let message = |port: u16, body: &Value| legacy_post(port, &endpoint, body);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}});
    let resp = message(b.port(), &init);
    assert_eq!(resp.status, 202, "initialize on B:\n{}", resp.describe());
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = message(a.port(), &initialized);
    assert_eq!(resp.status, 202, "initialized on A:\n{}", resp.describe());
    let mut expected = vec![json!(1)];
    for i in 0..10u64 {
        let id = 2 + i;
        let port = if i % 2 == 0 { b.port() } else { a.port() };
        let find = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "find_tickets", "arguments": {}}});
        let resp = message(port, &find);
        assert_eq!(resp.status, 202, "call {id}:\n{}", resp.describe());
        expected.push(json!(id));
    }
    let seen = read_stream_until(&mut stream, &["\"id\":11,"]);
    // The stream may still be writing the last frames: read until all eleven are in.
    let mut seen = seen;
    let began = Instant::now();
    while answer_ids(&seen).len() < expected.len() {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the stream carried {:?}, not every answer of {expected:?}",
            answer_ids(&seen)
        );
        seen.push_str(&read_stream_until(&mut stream, &["data: "]));
    }
    let mut ids = answer_ids(&seen);
    assert_eq!(ids[0], json!(1), "the initialize answer comes first");
    ids.sort_by_key(|v| v.as_u64());
    assert_eq!(ids, expected, "each answer once:\n{seen}");
    assert!(
        seen.contains("\"protocolVersion\":\"2024-11-05\""),
        "{seen}"
    );
    assert_eq!(
        count(&b, "its /sse stream is not open on this instance"),
        0,
        "{}",
        b.log()
    );
}

/// A client that retries `open_ticket` after an error (which may have come after the ticket
/// was stored) opens one ticket: the call's key (`RequestContext::call_key`) is the session and
/// request id, the same whether the request reached the holder straight or through the relay,
/// or the client's own key under `_meta` `io.fleetmcp/idempotency-key`, the same under a new
/// request id. A different call opens a different ticket.
#[test]
fn a_retried_open_ticket_opens_one_ticket_wherever_it_lands() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let sid = open_session(a.port());
    let title = format!("printer jam {}", next_id());
    let open = |id: u64, meta: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "open_ticket", "arguments": {"title": title}, "_meta": meta}})
    };
    let ticket_of = |resp: &RawResponse, what: &str| {
        assert_tool_ok(resp, what);
        resp.json()["result"]["structuredContent"]["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("{what}: no ticket id\n{}", resp.describe()))
    };
    let rid = next_id();
    let relayed = post(b.port(), Some(&sid), &open(rid, json!({})), HTTP_LIMIT);
    assert_eq!(
        machine_of(&relayed),
        Some("desk-a"),
        "relayed to the holder"
    );
    let first = ticket_of(&relayed, "the call, through B");
    let again = ticket_of(
        &post(a.port(), Some(&sid), &open(rid, json!({})), HTTP_LIMIT),
        "the same call again, on A",
    );
    assert_eq!(again, first, "a retried call opens no second ticket");
    let other = ticket_of(
        &post(
            a.port(),
            Some(&sid),
            &open(next_id(), json!({})),
            HTTP_LIMIT,
        ),
        "another call",
    );
    assert_ne!(other, first);

    let mine = json!({"io.fleetmcp/idempotency-key": "retry-me-1"});
    let keyed = ticket_of(
        &post(
            a.port(),
            Some(&sid),
            &open(next_id(), mine.clone()),
            HTTP_LIMIT,
        ),
        "a call with the client's key",
    );
    let keyed_again = ticket_of(
        &post(b.port(), Some(&sid), &open(next_id(), mine), HTTP_LIMIT),
        "its retry under a new request id, through B",
    );
    assert_eq!(keyed_again, keyed);
    assert!(![first, other].contains(&keyed));

    let found = post(
        a.port(),
        Some(&sid),
        &tool_call("find_tickets", json!({"query": title})),
        HTTP_LIMIT,
    );
    assert_tool_ok(&found, "find_tickets");
    let tickets = found.json()["result"]["structuredContent"]["tickets"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(
        tickets,
        3,
        "three calls, three tickets:\n{}",
        found.describe()
    );
}

/// Never two holders, across two outages (the fault harness's finding F3): A, holding a
/// session, is cut off from Redis past its lease, and B takes the session over. A's link comes
/// back and its lease is granted again, but no request for the session reaches A, so A still
/// has it in memory. Then Redis pauses: a request for the session sent to A cannot be checked,
/// and A's lease is valid again. Before the fix A served it from memory, at the epoch B had
/// replaced. Now a lease granted again after it ran out starts a new term, and a session the
/// store has not confirmed in this term is not served from memory: `503` with `Retry-After`.
#[test]
fn a_session_taken_over_in_an_earlier_outage_is_not_served_from_memory_in_the_next() {
    let mut redis = RedisServer::start();
    let proxy = CuttableProxy::start(redis.port);
    let timings = [
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "3000"),
        ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "500"),
    ];
    let a = distributed_desk("desk-a", &proxy.url(), &timings);
    let b = distributed_desk("desk-b", &redis.url(), &timings);
    let sid = open_session(a.port());
    assert_eq!(machine_of(&find_tickets(a.port(), &sid)), Some("desk-a"));

    proxy.cut();
    let cut_at = Instant::now();
    while redis.cli(&["EXISTS", "mcp:ha:heartbeat:desk-a"]).trim() == "1" {
        assert!(
            cut_at.elapsed() < Duration::from_secs(8),
            "A's heartbeat expires"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let resp = find_tickets(b.port(), &sid);
    assert_tool_ok(&resp, "taken over by B");
    assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
    let taken = stored(&redis, &sid);
    assert!(taken["epoch"].as_u64() >= Some(2), "{taken}");

    proxy.restore();
    let back = Instant::now();
    while redis.cli(&["EXISTS", "mcp:ha:heartbeat:desk-a"]).trim() != "1" {
        assert!(back.elapsed() < Duration::from_secs(10), "A beats again");
        thread::sleep(Duration::from_millis(50));
    }
    // A few beats: A's lease holds again, for seconds.
    thread::sleep(Duration::from_millis(700));

    redis.pause();
    let resp = find_tickets_within(a.port(), &sid, Duration::from_secs(10));
    redis.resume();
    assert_eq!(
        resp.status,
        503,
        "A must not serve a session B took over, from memory:\n{}",
        resp.describe()
    );
    assert!(resp.header("retry-after").is_some(), "{}", resp.describe());

    // Once Redis answers, A finds the session is B's and relays to it.
    let resp = find_tickets(a.port(), &sid);
    assert_tool_ok(&resp, "sent to A after the pause");
    assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
    assert_eq!(stored(&redis, &sid)["epoch"], taken["epoch"]);
}

/// A 2024-11-05 session opened on `port`: its stream and endpoint, initialized.
fn open_legacy_session(port: u16) -> (std::net::TcpStream, String) {
    let (mut stream, endpoint) = open_legacy_stream(port, &[]);
    let init = json!({"jsonrpc": "2.0", "id": next_id(), "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}});
    assert_eq!(legacy_post(port, &endpoint, &init).status, 202);
    read_stream_until(&mut stream, &["\"protocolVersion\":\"2024-11-05\""]);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(legacy_post(port, &endpoint, &note).status, 202);
    (stream, endpoint)
}

/// A `find_tickets` call under its own id, and that id.
fn legacy_find() -> (Value, u64) {
    let id = next_id();
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {}}});
    (call, id)
}

/// A 2024-11-05 session's holder that cannot confirm it (Redis paused past its lease) answers
/// its POSTs `503` with `Retry-After`, as the session era does, not `404`: the session is not
/// gone, its stream is open (the fault harness's finding F1). Once Redis answers, the next
/// POST is served and its answer comes on the stream.
#[test]
fn a_2024_11_05_post_the_holder_cannot_confirm_is_503_not_404() {
    let mut redis = RedisServer::start();
    let timings = [
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1000"),
    ];
    let a = distributed_desk("desk-a", &redis.url(), &timings);
    let (mut stream, endpoint) = open_legacy_session(a.port());
    redis.pause();
    // Past A's lease (a tenth short of the heartbeat's lifetime).
    thread::sleep(Duration::from_millis(1200));
    let (call, _) = legacy_find();
    let resp = legacy_post(a.port(), &endpoint, &call);
    redis.resume();
    assert_eq!(resp.status, 503, "{}", resp.describe());
    assert!(resp.header("retry-after").is_some(), "{}", resp.describe());
    assert_log_has(&a, "desk-a", "its heartbeat lease ran out — not serving it");

    let (call, id) = legacy_find();
    let began = Instant::now();
    let resp = loop {
        let resp = legacy_post(a.port(), &endpoint, &call);
        if resp.status != 503 || began.elapsed() > Duration::from_secs(5) {
            break resp;
        }
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(resp.status, 202, "{}", resp.describe());
    read_stream_until(&mut stream, &[&format!("\"id\":{id},")]);
}

/// A 2024-11-05 session lives in its stream: while its holder is paused past its heartbeat,
/// the orphan scanner of another instance leaves it alone (claimed, it could be served nowhere:
/// the fault harness's finding F2), and once the holder is back its POSTs are served there and
/// answered on its stream. A session-era session of the same holder is claimed as before.
#[test]
fn the_orphan_scanner_leaves_a_2024_11_05_session_to_its_stream() {
    let redis = RedisServer::start();
    let timings = QUICK_FAILOVER;
    let a = distributed_desk("desk-a", &redis.url(), &timings);
    let b = distributed_desk("desk-b", &redis.url(), &timings);
    let (mut stream, endpoint) = open_legacy_session(a.port());
    let sid = endpoint
        .split_once("sessionId=")
        .map(|(_, s)| s.to_string())
        .expect("the session id in the endpoint");
    let modern = open_session(a.port());
    a.signal("STOP");
    let stopped = Instant::now();
    while stored(&redis, &modern)["session"]["nodeId"] != "desk-b" {
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "B's scanner claims the session-era session:\n{}",
            b.log()
        );
        thread::sleep(Duration::from_millis(50));
    }
    // A scan or two more: the 2024-11-05 session stays A's.
    thread::sleep(Duration::from_millis(700));
    a.signal("CONT");
    assert_eq!(stored(&redis, &sid)["session"]["nodeId"], "desk-a");
    let (call, id) = legacy_find();
    let resp = legacy_post(a.port(), &endpoint, &call);
    assert_eq!(resp.status, 202, "{}", resp.describe());
    read_stream_until(&mut stream, &[&format!("\"id\":{id},")]);
}

/// Two distributed desks, A and B, whose heartbeats expire in a second, with a drain of
/// `drain_ms` and a half-second grace (a stopping holder keeps its streams through both: only
/// past them is its absence taken for its streams' end), and a 2024-11-05 session opened on
/// A: Redis, A, B, the session's stream and its endpoint.
fn legacy_session_on_a(
    drain_ms: &str,
) -> (RedisServer, Instance, Instance, std::net::TcpStream, String) {
    let redis = RedisServer::start();
    let timings = [
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1000"),
        ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "500"),
        ("FLEETMCP_DRAIN_MS", drain_ms),
        ("FLEETMCP_SHUTDOWN_GRACE_MS", "500"),
    ];
    let a = distributed_desk("desk-a", &redis.url(), &timings);
    let b = distributed_desk("desk-b", &redis.url(), &timings);
    let (stream, endpoint) = open_legacy_session(a.port());
    (redis, a, b, stream, endpoint)
}

/// POSTs a `find_tickets` for the 2024-11-05 session at `endpoint` to `b` every 100 ms until
/// it is answered `404` naming the call; each other answer must pass `other` (given it and
/// the call's id). The `404`'s body, and how long after `since` it came; fails the test after
/// 15 s.
fn posts_until_404(
    b: &Instance,
    endpoint: &str,
    since: Instant,
    other: impl Fn(&RawResponse, u64),
) -> (Value, Duration) {
    loop {
        let (call, id) = legacy_find();
        let resp = legacy_post(b.port(), endpoint, &call);
        if resp.status == 404 {
            let body: Value = serde_json::from_str(&resp.body).unwrap_or(Value::Null);
            assert_eq!(body["id"], id, "{}", resp.describe());
            return (body, since.elapsed());
        }
        other(&resp, id);
        assert!(
            since.elapsed() < Duration::from_secs(15),
            "still not 404 15 s on:\n{}",
            b.log()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// A 2024-11-05 session dies with the process that has its stream, and is never taken over:
/// its holder SIGKILLed, its POSTs to another instance are `503` (with `Retry-After` and the
/// request's id) while that instance cannot tell the holder is gone, then `404` `-32001`
/// `session expired` (the client opens a new stream), never `202` (a copy would accept
/// requests whose answers reach no one); its id on `/mcp` is refused, and its record is never
/// claimed. Before, `/message` answered `503` for ever. The holder's session-era session is
/// taken over as usual.
#[test]
fn a_2024_11_05_session_ends_with_its_killed_holder_and_is_never_taken_over() {
    let (redis, mut a, b, _stream, endpoint) = legacy_session_on_a("0");
    let sid = endpoint
        .split_once("sessionId=")
        .map(|(_, s)| s.to_string())
        .expect("the session id in the endpoint");
    let modern = open_session(a.port());
    // Relayed to A while it lives: accepted there, answered on A's stream.
    let (call, _) = legacy_find();
    assert_eq!(legacy_post(b.port(), &endpoint, &call).status, 202);

    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    let (ended, _) = posts_until_404(&b, &endpoint, Instant::now(), |resp, id| {
        assert_eq!(
            resp.status,
            503,
            "a killed holder's 2024-11-05 session must not be served:\n{}",
            resp.describe()
        );
        assert!(resp.header("retry-after").is_some(), "{}", resp.describe());
        let body: Value = serde_json::from_str(&resp.body).unwrap_or(Value::Null);
        assert_eq!(
            body["id"],
            id,
            "the 503 names the request: {}",
            resp.describe()
        );
    });
    assert_eq!(
        (
            ended["error"]["code"].as_i64(),
            ended["error"]["message"].as_str()
        ),
        (Some(-32001), Some("session expired")),
        "{ended}"
    );
    let on_mcp = find_tickets(b.port(), &sid);
    assert_eq!(on_mcp.status, 404, "{}", on_mcp.describe());
    assert_ne!(
        stored(&redis, &sid)["session"]["nodeId"],
        "desk-b",
        "never claimed"
    );
    let resp = find_tickets(b.port(), &modern);
    assert_tool_ok(&resp, "the session-era session is taken over");
    assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
}

/// A holder stopping gracefully withdraws from the fleet at once (heartbeat and subscription
/// gone) but keeps its 2024-11-05 streams through its drain: a POST landing on another
/// instance meanwhile is `503` (retry), never the `404` "session expired" that would make a
/// client drop a stream that is open (found by review: the first version of the rule above
/// took the withdrawal for the stream's end). Once the drain and grace are past, `404`.
#[test]
fn a_draining_holders_2024_11_05_session_is_not_called_expired() {
    let (_redis, a, b, _stream, endpoint) = legacy_session_on_a("2500");
    a.signal("TERM");
    let (_, ended) = posts_until_404(&b, &endpoint, Instant::now(), |resp, _| {
        assert!(matches!(resp.status, 202 | 503), "{}", resp.describe());
    });
    assert!(
        ended >= Duration::from_millis(2500),
        "called expired {ended:?} after the stop began, within the holder's 2.5 s drain"
    );
}

/// Never two holders when a live holder looks dead (the 30-minute soak's finding): another
/// instance takes a session over at once when the holder's address refuses the relay and
/// nothing holds the holder's channel, which is also what a live holder looks like behind a
/// link that refuses, once its Redis connections were closed. Here A advertises an address
/// nothing listens on, and its link to Redis is cut (its subscription closes): B takes A's
/// session over at once. A's lease, by its clock, still holds for seconds; before the fix A
/// served the session from memory meanwhile, at the epoch B had replaced. Now A's lease holds
/// only while its subscription is up: `503` with `Retry-After`.
#[test]
fn a_holder_whose_subscription_is_gone_does_not_serve_from_memory() {
    let redis = RedisServer::start();
    let proxy = CuttableProxy::start(redis.port);
    let nowhere = format!("127.0.0.1:{}", support::free_port());
    let timings = [
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "6000"),
    ];
    let mut a_env = timings.to_vec();
    a_env.push(("FLEETMCP_ADVERTISE_ADDRESS", nowhere.as_str()));
    let a = distributed_desk("desk-a", &proxy.url(), &a_env);
    let b = distributed_desk("desk-b", &redis.url(), &timings);
    let sid = open_session(a.port());
    assert_eq!(machine_of(&find_tickets(a.port(), &sid)), Some("desk-a"));

    proxy.cut();
    let cut_at = Instant::now();
    loop {
        let resp = find_tickets(b.port(), &sid);
        if resp.status == 200 {
            assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
            break;
        }
        assert!(
            cut_at.elapsed() < Duration::from_secs(5),
            "B takes the session over once A's subscription is gone:\n{}",
            resp.describe()
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        cut_at.elapsed() < Duration::from_secs(5),
        "taken over before A's lease would have run out by its clock"
    );
    let resp = find_tickets_within(a.port(), &sid, Duration::from_secs(10));
    assert_eq!(
        resp.status,
        503,
        "A must not serve from memory a session B took over:\n{}",
        resp.describe()
    );
    assert!(resp.header("retry-after").is_some(), "{}", resp.describe());
}

/// The error a reader writes for a call whose instance died before it answered
/// (`fleetmcp::WRITER_GONE_MESSAGE`).
const WRITER_GONE: &str = "The instance running this request stopped before it answered; whether it took effect is unknown";

/// Starts a `stamp` call on `port` in session `sid` that answers after 5 s, reads its stream up
/// to the progress event, and returns the call's id and the last event id the client saw.
fn start_slow_streamed_call(port: u16, sid: &str) -> (u64, String) {
    start_streamed_call(port, sid, 5000)
}

/// Resumes the stream `last` names on `port` and reads it to its end (its last chunk); fails
/// the test if it has not ended within `limit`. Returns what it carried and how long it took.
fn resume_to_the_end(port: u16, sid: &str, last: &str, limit: Duration) -> (String, Duration) {
    use std::io::Read;
    let began = Instant::now();
    let headers = [("Accept", "text/event-stream"), ("Last-Event-ID", last)];
    let mut stream = open_in_session(port, "GET", sid, &headers, None);
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            began.elapsed() < limit,
            "the resumed stream did not end within {limit:?}; it carried:\n{seen}"
        );
        match stream.read(&mut buf) {
            Ok(0) => return (seen, began.elapsed()),
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => {}
        }
        // The chunked body's last chunk: the response is complete (the connection may stay).
        if seen.ends_with("\r\n0\r\n\r\n") {
            return (seen, began.elapsed());
        }
    }
}

/// A file for `stamp`'s effects (`HELP_DESK_EFFECTS_FILE`), in a directory kept as long as
/// the first value lives.
fn effects_file() -> (TempDir, String) {
    let dir = TempDir::new("effects");
    let file = dir.path().join("effects").to_string_lossy().into_owned();
    (dir, file)
}

/// The resumed stream carries exactly one answer for `id`: the writer-gone error.
fn assert_ended_for_the_gone_writer(seen: &str, id: u64) {
    let answers: Vec<Value> = stream_messages(seen)
        .into_iter()
        .filter(|m| is_answer_to(m, id))
        .collect();
    assert_eq!(answers.len(), 1, "one answer for call {id}:\n{seen}");
    assert_eq!(answers[0]["error"]["code"], -32603, "{seen}");
    assert_eq!(answers[0]["error"]["message"], WRITER_GONE, "{seen}");
}

/// A streamed call whose holder is SIGKILLed while its handler runs: the client resumes the
/// stream on another instance, which takes the session over. The answer can never come, so
/// the stream is ended with an error for the call (its outcome unknown) within seconds of the
/// resume, instead of keep-alives forever (harness finding F4). The killed holder's heartbeat
/// outlives it, so its readers wait out the takeover grace (1.5 s here) before they judge it
/// gone: as long, a live writer whose subscription dropped has to come back (F6b).
#[test]
fn a_resumed_answer_whose_writer_was_killed_ends_with_an_error_on_the_next_holder() {
    let redis = RedisServer::start();
    let url = redis.url();
    let (_effects, file) = effects_file();
    let env = [
        ("HELP_DESK_EFFECTS_FILE", file.as_str()),
        ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "1500"),
    ];
    let mut a = distributed_desk("desk-a", &url, &env);
    let b = distributed_desk("desk-b", &url, &env);
    let sid = open_session(a.port());
    let (id, last) = start_slow_streamed_call(a.port(), &sid);
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());

    let (seen, took) = resume_to_the_end(b.port(), &sid, &last, Duration::from_secs(10));
    assert_ended_for_the_gone_writer(&seen, id);
    assert!(
        took < Duration::from_secs(5),
        "ended {took:?} after the resume"
    );
    eprintln!("the answer of a killed holder's call ended with an error {took:?} after the resume");
    // Ended for good: a second resume reads the same error and the end at once.
    let (again, took) = resume_to_the_end(b.port(), &sid, &last, Duration::from_secs(5));
    assert_ended_for_the_gone_writer(&again, id);
    assert!(took < Duration::from_secs(1), "{took:?}");
}

/// The same when the killed holder is started again under its machine id and the resume lands
/// on it: the stream was written by its previous process.
#[test]
fn a_resumed_answer_whose_writer_was_killed_ends_with_an_error_on_its_restarted_instance() {
    let redis = RedisServer::start();
    let url = redis.url();
    let (_effects, file) = effects_file();
    let env = [
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("MACHINE_ID", "desk-a"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_HOST", ""),
        ("REDIS_PORT", ""),
        ("HELP_DESK_EFFECTS_FILE", file.as_str()),
    ];
    let mut a = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &env);
    let port = a.port();
    let sid = open_session(port);
    let (id, last) = start_slow_streamed_call(port, &sid);
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    let again = Instance::start_on(env!("CARGO_BIN_EXE_help-desk"), port, &env);

    let (seen, took) = resume_to_the_end(again.port(), &sid, &last, Duration::from_secs(10));
    assert_ended_for_the_gone_writer(&seen, id);
    assert!(
        took < Duration::from_secs(5),
        "ended {took:?} after the resume"
    );
}

/// A streamed call whose writer lives is not ended for it: resumed on another instance while
/// its holder still runs it (the resume is relayed to the holder), the stream carries the
/// real answer.
#[test]
fn a_resumed_answer_whose_writer_lives_carries_its_real_answer() {
    let redis = RedisServer::start();
    let url = redis.url();
    let (_effects, file) = effects_file();
    let env = [("HELP_DESK_EFFECTS_FILE", file.as_str())];
    let a = distributed_desk("desk-a", &url, &env);
    let b = distributed_desk("desk-b", &url, &env);
    let sid = open_session(a.port());
    let (id, last) = start_slow_streamed_call(a.port(), &sid);
    let (seen, _) = resume_to_the_end(b.port(), &sid, &last, Duration::from_secs(10));
    let answers: Vec<Value> = stream_messages(&seen)
        .into_iter()
        .filter(|m| is_answer_to(m, id))
        .collect();
    assert_eq!(answers.len(), 1, "{seen}");
    assert_eq!(
        answers[0]["result"]["structuredContent"]["key"],
        format!("k{id}"),
        "{seen}"
    );
}

/// Two distributed instances stamping to one effects file, `desk-a` advertising a proxy in
/// front of it: whatever `desk-b` relays to it goes through `link`, which a test cuts or holds.
struct LinkedPair {
    _redis: RedisServer,
    _effects: TempDir,
    link: CuttableProxy,
    a: Instance,
    b: Instance,
}

/// A `stamp` call that asks for progress (so its answer is an SSE stream), taking `delay_ms`
/// after its event: its id and its body.
fn streamed_stamp(delay_ms: u64) -> (u64, String) {
    let id = next_id();
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "stamp", "arguments": {"key": format!("k{id}"), "delay_ms": delay_ms},
        "_meta": {"progressToken": id}}});
    (id, call.to_string())
}

impl LinkedPair {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// The same, both instances also given `extra`.
    fn start_with(extra: &[(&str, &str)]) -> Self {
        let redis = RedisServer::start();
        let url = redis.url();
        let (effects, file) = effects_file();
        let a_port = support::free_port();
        let link = CuttableProxy::start(a_port);
        let advertised = format!("127.0.0.1:{}", link.port);
        let mut a_env = vec![
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("FRONTMCP_BIND_ADDRESS", "loopback"),
            ("MACHINE_ID", "desk-a"),
            ("REDIS_URL", url.as_str()),
            ("REDIS_HOST", ""),
            ("REDIS_PORT", ""),
            ("HELP_DESK_EFFECTS_FILE", file.as_str()),
            ("FLEETMCP_ADVERTISE_ADDRESS", advertised.as_str()),
        ];
        a_env.extend_from_slice(extra);
        let a = Instance::start_on(env!("CARGO_BIN_EXE_help-desk"), a_port, &a_env);
        let mut b_env = vec![("HELP_DESK_EFFECTS_FILE", file.as_str())];
        b_env.extend_from_slice(extra);
        let b = distributed_desk("desk-b", &url, &b_env);
        Self {
            _redis: redis,
            _effects: effects,
            link,
            a,
            b,
        }
    }
}

/// A relayed streamed answer whose link to the holder breaks (the holder lives) ends cleanly on
/// the relaying instance, its last chunk sent, so the client resumes it; then, resumed on the
/// holder, it carries the real answer. Before, the relaying instance cut the response off in the
/// middle, which a client takes for a failed request, not one to resume.
#[test]
fn a_relayed_stream_whose_holder_link_breaks_ends_cleanly_and_resumes() {
    let pair = LinkedPair::start();
    let (link, a, b) = (&pair.link, &pair.a, &pair.b);
    let sid = open_session(a.port());
    // The call goes to B, which relays it to A through the link.
    let (id, body) = streamed_stamp(3000);
    let host = format!("127.0.0.1:{}", b.port());
    let mut stream = raw_http::open(
        SocketAddr::from((Ipv4Addr::LOCALHOST, b.port())),
        "POST",
        "/mcp",
        &[
            ("Host", &host),
            ("Content-Type", "application/json"),
            ("Accept", ACCEPT),
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", PROTOCOL_VERSION),
        ],
        Some(&body),
        Duration::from_millis(300),
    )
    .expect("start the relayed call");
    let mut seen = read_stream_until(&mut stream, &["notifications/progress"]);
    assert!(seen.contains("x-frontmcp-machine-id: desk-a"), "{seen}");
    let last = last_event_id(&seen);

    link.cut();
    let cut_at = Instant::now();
    {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        loop {
            assert!(
                cut_at.elapsed() < Duration::from_secs(5),
                "the relayed stream neither ended nor broke within 5 s:\n{seen}"
            );
            match stream.read(&mut buf) {
                Ok(0) => panic!("the relayed stream was cut off, not ended:\n{seen}"),
                Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    panic!("the relayed stream was reset, not ended:\n{seen}")
                }
                Err(_) => {}
            }
            if seen.ends_with("\r\n0\r\n\r\n") {
                break;
            }
        }
    }
    assert!(
        !seen.contains(&format!("\"id\":{id},\"jsonrpc\"")) && !seen.contains("structuredContent"),
        "the answer cannot have come through a cut link:\n{seen}"
    );
    // Resumed on the holder, the stream carries the real answer.
    let (resumed, _) = resume_to_the_end(a.port(), &sid, &last, Duration::from_secs(10));
    let answers: Vec<Value> = stream_messages(&resumed)
        .into_iter()
        .filter(|m| is_answer_to(m, id))
        .collect();
    assert_eq!(answers.len(), 1, "{resumed}");
    assert_eq!(
        answers[0]["result"]["structuredContent"]["key"],
        format!("k{id}"),
        "{resumed}"
    );
}

/// F14: a relayed streamed answer whose link to the holder breaks after the holder's head came
/// but before its first event is refused `503` with `Retry-After`, not passed on as a `200`
/// stream that ends with nothing: the client got no event id to resume from, and a refusal is
/// what it retries. Before, the relaying instance sent the head on at once, and the client got
/// a `200` stream, ended cleanly, without an id or an answer.
#[test]
fn a_relayed_stream_whose_link_breaks_before_its_first_event_is_refused() {
    let pair = LinkedPair::start();
    let (link, a, b) = (&pair.link, &pair.a, &pair.b);
    let sid = open_session(a.port());
    let (id, body) = streamed_stamp(200);
    let host = format!("127.0.0.1:{}", b.port());
    let b_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, b.port()));
    let send = {
        let (host, sid, body) = (host.clone(), sid.clone(), body.clone());
        move || {
            raw_http::try_send(
                b_addr,
                "POST",
                "/mcp",
                &[
                    ("Host", &host),
                    ("Content-Type", "application/json"),
                    ("Accept", ACCEPT),
                    ("mcp-session-id", &sid),
                    ("mcp-protocol-version", PROTOCOL_VERSION),
                ],
                Some(&body),
                Duration::from_secs(15),
            )
        }
    };
    // The holder's head goes through the link to B; its events are held there.
    link.hold_after_head();
    let first = thread::spawn(send.clone());
    let began = Instant::now();
    while !link.holding() {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "no answer's head came through the link within 5 s"
        );
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(300));
    link.cut();
    let first = first
        .join()
        .expect("the first try's thread")
        .expect("an answer to the first try");
    assert_eq!(first.status, 503, "{}", first.describe());
    assert!(
        first.header("retry-after").is_some(),
        "{}",
        first.describe()
    );
    assert_eq!(
        first.json()["error"]["code"],
        -32000,
        "{}",
        first.describe()
    );
    // The client retries the call, and gets its answer.
    link.restore();
    let again = send().unwrap_or_else(|e| panic!("the retry: {e}"));
    assert_eq!(again.status, 200, "{}", again.describe());
    let answers: Vec<Value> = stream_messages(&again.body)
        .into_iter()
        .filter(|m| is_answer_to(m, id))
        .collect();
    assert_eq!(answers.len(), 1, "{}", again.describe());
    assert_eq!(
        answers[0]["result"]["structuredContent"]["key"],
        format!("k{id}"),
        "{}",
        again.describe()
    );
}

/// F14's other kind of fault: the link goes silent (held, not cut) between the holder's head
/// and its first event, while the holder lives. The relaying instance, which judges the silence
/// after the heartbeat lifetime (1.5 s here) and finds the holder's heartbeat there, neither
/// refuses nor ends the answer: once the link carries again, the client gets the whole answer.
#[test]
fn a_relayed_stream_whose_link_goes_silent_before_its_first_event_is_answered_once_it_heals() {
    let pair = LinkedPair::start_with(&[
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1500"),
    ]);
    let (link, a, b) = (&pair.link, &pair.a, &pair.b);
    let sid = open_session(a.port());
    let (id, body) = streamed_stamp(0);
    let host = format!("127.0.0.1:{}", b.port());
    let b_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, b.port()));
    link.hold_after_head();
    let call = thread::spawn(move || {
        raw_http::try_send(
            b_addr,
            "POST",
            "/mcp",
            &[
                ("Host", &host),
                ("Content-Type", "application/json"),
                ("Accept", ACCEPT),
                ("mcp-session-id", &sid),
                ("mcp-protocol-version", PROTOCOL_VERSION),
            ],
            Some(&body),
            Duration::from_secs(15),
        )
    });
    let began = Instant::now();
    while !link.holding() {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "no answer's head came through the link within 5 s"
        );
        thread::sleep(Duration::from_millis(10));
    }
    // Longer than the heartbeat lifetime: the silence is judged at least once.
    thread::sleep(Duration::from_millis(2500));
    link.restore();
    let answer = call
        .join()
        .expect("the call's thread")
        .expect("an answer to the call");
    assert_eq!(answer.status, 200, "{}", answer.describe());
    let answers: Vec<Value> = stream_messages(&answer.body)
        .into_iter()
        .filter(|m| is_answer_to(m, id))
        .collect();
    assert_eq!(answers.len(), 1, "{}", answer.describe());
}

/// Calls of the stream-reading commands (`XRANGE`, `XREVRANGE`) Redis has served so far.
fn stream_reads(redis: &RedisServer) -> u64 {
    command_calls(redis, &["xrange", "xrevrange"])
}

/// Calls of `commands` (lower case) Redis has served so far.
fn command_calls(redis: &RedisServer, commands: &[&str]) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter(|l| {
            commands.iter().any(|c| {
                l.strip_prefix("cmdstat_")
                    .and_then(|r| r.strip_prefix(c))
                    .is_some_and(|r| r.starts_with(':'))
            })
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Idle SSE streams cost no Redis command when this instance writes them: in distributed
/// mode, 20 open standalone streams and the resumed answer of a call still running here read
/// nothing from Redis while nothing happens (each reader is woken by the local append), and
/// an event still reaches them at once. Before, every reader read Redis every 50 ms (about 800
/// reads in these two seconds).
#[test]
fn idle_streams_written_here_cost_no_redis_command() {
    let redis = RedisServer::start();
    let url = redis.url();
    let (_effects, file) = effects_file();
    let a = distributed_desk("desk-a", &url, &[("HELP_DESK_EFFECTS_FILE", &file)]);
    let sessions: Vec<String> = (0..20).map(|_| open_session(a.port())).collect();
    let mut streams: Vec<_> = sessions
        .iter()
        .map(|sid| open_get_stream(a.port(), sid))
        .collect();
    let (_, last) = start_slow_streamed_call(a.port(), &sessions[0]);
    let host = format!("127.0.0.1:{}", a.port());
    let _resumed = raw_http::open(
        SocketAddr::from((Ipv4Addr::LOCALHOST, a.port())),
        "GET",
        "/mcp",
        &[
            ("Host", &host),
            ("Accept", "text/event-stream"),
            ("mcp-session-id", &sessions[0]),
            ("mcp-protocol-version", PROTOCOL_VERSION),
            ("Last-Event-ID", &last),
        ],
        None,
        Duration::from_millis(300),
    )
    .expect("resume the call's stream");
    thread::sleep(Duration::from_millis(500));

    let before = stream_reads(&redis);
    thread::sleep(Duration::from_secs(2));
    let idle = stream_reads(&redis) - before;
    eprintln!("21 idle streams written here: {idle} stream reads in 2 s");
    assert!(
        idle <= 2,
        "{idle} reads of Redis streams while nothing happened"
    );

    // Still live: a page to one session reaches its stream at once.
    let pager = open_session(a.port());
    let call = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
        "params": {"name": "page_session", "arguments": {"session_id": sessions[7], "message": "wake up"}}});
    assert_tool_ok(&post(a.port(), Some(&pager), &call, HTTP_LIMIT), "page");
    read_stream_until(&mut streams[7], &["wake up"]);
}

/// Without distributed mode any instance may write a session's standalone stream, so its
/// reader looks in Redis, but less often while nothing comes (up to every 500 ms): 20 idle
/// streams read Redis about 80 times in two seconds, not 800; a page written on another
/// instance still reaches the stream.
#[test]
fn idle_streams_another_instance_may_write_are_read_less_often() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = desk("desk-a", Some(&url), None);
    let b = desk("desk-b", Some(&url), None);
    let sessions: Vec<String> = (0..20).map(|_| open_session(a.port())).collect();
    let mut streams: Vec<_> = sessions
        .iter()
        .map(|sid| open_get_stream(a.port(), sid))
        .collect();
    thread::sleep(Duration::from_secs(2));
    let before = stream_reads(&redis);
    thread::sleep(Duration::from_secs(2));
    let idle = stream_reads(&redis) - before;
    eprintln!("20 idle streams another instance may write: {idle} stream reads in 2 s");
    assert!(
        idle <= 120,
        "{idle} reads of Redis streams while nothing happened"
    );

    // B serves the session too (it recreates it from the store), so it writes its stream.
    assert_tool_ok(&find_tickets(b.port(), &sessions[3]), "the session on B");
    let pager = open_session(b.port());
    let call = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
        "params": {"name": "page_session", "arguments": {"session_id": sessions[3], "message": "from b"}}});
    let began = Instant::now();
    assert_tool_ok(
        &post(b.port(), Some(&pager), &call, HTTP_LIMIT),
        "page from B",
    );
    read_stream_until(&mut streams[3], &["from b"]);
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
}

/// A 2024-11-05 session's answers go straight to its stream, not through Redis: 20 calls
/// answered on the stream, no `XADD` and no stream read. The stream is on this instance and
/// this transport has no resumption, so a stored answer served nobody else; and stored, it was
/// a write no replica confirms, lost when a failover came between its `XADD` and the reader's
/// `XRANGE` (the Sentinel seed with two replicas, issue 38: a `POST /message` accepted and its
/// answer never seen). Before the fix: 21 `XADD`s (the `initialize` answer too) and 40 reads.
#[test]
fn a_2024_11_05_answer_goes_to_its_stream_without_redis() {
    let redis = RedisServer::start();
    let a = distributed_desk("desk-a", &redis.url(), &[]);
    let writes = || command_calls(&redis, &["xadd"]);
    let before_writes = writes();
    let (mut stream, endpoint) = open_legacy_session(a.port());
    // The stream's reader looks at the session's stream in Redis once as it opens.
    let before_reads = stream_reads(&redis);
    for _ in 0..20 {
        let (call, id) = legacy_find();
        assert_eq!(legacy_post(a.port(), &endpoint, &call).status, 202);
        read_stream_until(&mut stream, &[&format!("\"id\":{id},")]);
    }
    let (added, read) = (
        writes() - before_writes,
        stream_reads(&redis) - before_reads,
    );
    eprintln!("a 2024-11-05 initialize and 20 calls: {added} XADD, {read} stream reads");
    assert_eq!(
        (added, read),
        (0, 0),
        "Redis stream commands for 2024-11-05 answers"
    );
}

/// A streamed answer the store failed under (Redis paused as the answer was written) whose
/// client connection had broken: the answer is kept for the client all the same, stored once
/// Redis is back, and a resume gets it, once. Before, it went only to the broken connection,
/// and the resumed stream ended without it (found by fault seed 6).
#[test]
fn an_answer_the_store_failed_under_reaches_the_client_that_resumes() {
    let took = answer_unstored_then_resumed(Duration::from_millis(500));
    eprintln!("the answer the store failed under came {took:?} after the resume");
}

/// The same through a long outage (Redis paused 19 s after the answer's append failed): the
/// writer keeps trying to store the answer, and stores it within about 2 s of Redis answering
/// again, so a client that resumes then is not kept waiting. Before, its tries were spaced up
/// to 10 s apart, and a resume accepted once Redis was back carried nothing for up to 10 s
/// (F11: the 30-minute soak's client gave up after 16 s of a resumed stream with nothing).
#[test]
fn an_answer_unstored_through_a_long_outage_is_stored_soon_after_it() {
    let took = answer_unstored_then_resumed(Duration::from_secs(19));
    assert!(
        took < Duration::from_millis(3500),
        "the answer came {took:?} after Redis was back"
    );
}

/// A streamed call whose answer comes 1.5 s after its progress event, Redis paused 0.8 s in
/// (so the answer's append fails) and resumed `outage` after that failure; the stream is then
/// resumed from its last event and read to its end. Checks that the answer came once, with
/// its result; returns how long after Redis was back the resumed stream took.
fn answer_unstored_then_resumed(outage: Duration) -> Duration {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let (_effects, file) = effects_file();
    let a = distributed_desk("desk-a", &url, &[("HELP_DESK_EFFECTS_FILE", &file)]);
    let sid = open_session(a.port());
    // The client's connection is gone by the time the answer comes.
    let (id, last) = start_streamed_call(a.port(), &sid, 1500);
    thread::sleep(Duration::from_millis(800));
    redis.pause();
    assert!(
        log_has(
            &a,
            "an SSE event could not be stored",
            Duration::from_secs(5)
        ),
        "the answer's append fails while Redis is paused:\n{}",
        a.log()
    );
    thread::sleep(outage);
    redis.resume();
    let (seen, took) = resume_to_the_end(a.port(), &sid, &last, Duration::from_secs(15));
    let answers: Vec<Value> = stream_messages(&seen)
        .into_iter()
        .filter(|m| is_answer_to(m, id))
        .collect();
    assert_eq!(answers.len(), 1, "{seen}\n{}", a.log());
    assert_eq!(
        answers[0]["result"]["structuredContent"]["key"],
        format!("k{id}"),
        "{seen}"
    );
    took
}

/// A page its holder could not store (Redis paused) is not reported delivered: `page_session`
/// says `delivered: false`, so a caller never counts a message that may be lost as taken.
/// Before, the holder said `true` whatever its event store answered (the chaos soak then
/// counted such a page as lost).
#[test]
fn a_page_the_store_did_not_take_is_not_reported_delivered() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let target = open_session(a.port());
    let pager = open_session(a.port());
    let page = |text: &str| {
        let call = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
            "params": {"name": "page_session", "arguments": {"session_id": target, "message": text}}});
        let resp = post(a.port(), Some(&pager), &call, HTTP_LIMIT);
        assert_tool_ok(&resp, "page");
        resp.json()["result"]["structuredContent"]["delivered"].clone()
    };
    assert_eq!(page("before"), json!(true));
    redis.pause();
    let during = page("during");
    redis.resume();
    assert_eq!(
        during,
        json!(false),
        "a page whose append timed out is not delivered:\n{}",
        a.log()
    );
    assert_log_has(&a, "desk-a", "could not queue a notification");
}

/// An answer whose store failed before it stored anything (Redis paused from the start): its
/// messages come straight over the connection, each with the id of the stream's start, so a
/// client whose connection then breaks resumes from there and gets the final answer, stored
/// once Redis is back. Before, those messages carried no id, and the client had nothing to
/// resume from (the 30-minute soak, seed 2026, at 856 s: Redis restarted as the call began).
#[test]
fn an_answer_whose_store_failed_from_the_start_can_be_resumed() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let (_effects, file) = effects_file();
    let a = distributed_desk("desk-a", &url, &[("HELP_DESK_EFFECTS_FILE", &file)]);
    let sid = open_session(a.port());
    // Recently confirmed, the session is served from memory while Redis is paused.
    assert_tool_ok(&find_tickets(a.port(), &sid), "the session, held");
    redis.pause();
    let (id, last) = start_streamed_call(a.port(), &sid, 1500);
    assert!(
        last.ends_with("-0"),
        "a direct message names the stream's start: {last}"
    );
    redis.resume();
    let (seen, took) = resume_to_the_end(a.port(), &sid, &last, Duration::from_secs(15));
    let answers: Vec<Value> = stream_messages(&seen)
        .into_iter()
        .filter(|m| is_answer_to(m, id))
        .collect();
    assert_eq!(answers.len(), 1, "{seen}");
    assert_eq!(
        answers[0]["result"]["structuredContent"]["key"],
        format!("k{id}"),
        "{seen}"
    );
    eprintln!("resumed from the stream's start, the answer came {took:?} after the resume");
}

/// After an outage of Redis as a whole past the heartbeat's lifetime, every instance's
/// heartbeat and subscription are gone at once. The first instance back must not take the
/// others for dead before they could show themselves again (the fault harness, seed 8, found
/// a scanner failing a live instance's task 0.3 s after Redis came back): A is back 1.2 s
/// before B and claims none of B's sessions; C, killed during the outage, is still found
/// dead, once A has been back a moment, and its session claimed.
#[test]
fn after_an_outage_the_first_instance_back_does_not_take_the_others_for_dead() {
    let redis = RedisServer::start();
    let links: Vec<CuttableProxy> = (0..3).map(|_| CuttableProxy::start(redis.port)).collect();
    let timing = [
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "1000"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "3000"),
        ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "1000"),
    ];
    let a = distributed_desk("desk-a", &links[0].url(), &timing);
    let b = distributed_desk("desk-b", &links[1].url(), &timing);
    let mut c = distributed_desk("desk-c", &links[2].url(), &timing);
    let on_b = open_session(b.port());
    let on_c = open_session(c.port());
    // The scanners start an interval plus the grace after their instance.
    thread::sleep(Duration::from_secs(3));
    for link in &links {
        link.cut();
    }
    assert!(c.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    // Past the lifetime: every heartbeat has expired.
    wait_until_gone(&redis, "mcp:ha:heartbeat:desk-b", Duration::from_secs(6));
    links[0].restore();
    thread::sleep(Duration::from_millis(1200));
    links[1].restore();
    let claimed_c = "dead_node_id=desk-c";
    assert!(
        log_has(&a, claimed_c, Duration::from_secs(10)),
        "A claims the sessions of C, killed in the outage:\n{}",
        a.log()
    );
    assert_eq!(stored_node_ids(&redis, &on_c), ["desk-a"], "C's session");
    // B was back well before A could judge: its session stays its own.
    thread::sleep(Duration::from_secs(2));
    assert_eq!(
        count(&a, "dead_node_id=desk-b"),
        0,
        "A took live B for dead:\n{}",
        a.log()
    );
    assert_eq!(stored_node_ids(&redis, &on_b), ["desk-b"], "B's session");
    assert_served_by(
        &find_tickets(b.port(), &on_b),
        "desk-b",
        "B's session, on B",
    );
}

/// Waits until `key` no longer exists in `redis`; fails the test after `limit`.
fn wait_until_gone(redis: &RedisServer, key: &str, limit: Duration) {
    let start = Instant::now();
    while redis.cli(&["EXISTS", key]).trim() == "1" {
        assert!(start.elapsed() < limit, "{key} gone within {limit:?}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// F13 (found by the second 30-minute soak): a 2024-11-05 `initialize` relayed to a holder
/// whose store is silent is answered `503` by the relaying instance once its wait (5 s) is
/// over. The holder had got as far as opening the session (its store commands bounded at
/// 1.5 s, its read of an unknown session at 2.5 s) when the relay's connection closed and the
/// request stopped there: the session open, its answer never sent. The client, told `503`,
/// sends `initialize` again: before the fix, `400` "already initialized", and the client's
/// session could never start. Now, until the client sends anything else, a second
/// `initialize` is answered again (the same result, on the stream), or refused `503` with
/// `Retry-After` while the store cannot say; once the client went on, one more is `400`.
#[test]
fn a_2024_11_05_initialize_sent_again_after_a_relay_gave_up_is_answered() {
    let redis = RedisServer::start();
    let proxy = CuttableProxy::start(redis.port);
    let dir = TempDir::new("legacy-initialize-again");
    let config = config_file(
        &dir,
        "[sessions]\ncheck_timeout_ms = 1500\nstore_wait_ms = 2500\n",
    );
    let config = config.to_string_lossy().into_owned();
    let a = distributed_desk("desk-a", &proxy.url(), &[("FLEETMCP_CONFIG", &config)]);
    let b = distributed_desk("desk-b", &redis.url(), &[]);
    let (mut stream, endpoint) = open_legacy_stream(a.port(), &[]);
    let init = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "old", "version": "0"}}})
    };
    let refused = |resp: &RawResponse, what: &str| {
        assert_eq!(
            resp.status,
            503,
            "{what}:\n{}\nA:\n{}",
            resp.describe(),
            a.log()
        );
        assert!(
            resp.header("retry-after").is_some(),
            "{what}: {}",
            resp.describe()
        );
    };
    proxy.hold();
    refused(
        &legacy_post(b.port(), &endpoint, &init(1)),
        "the relay gives up on a holder whose store is silent",
    );
    // Sent again, first while the store is still silent, then once it answers: refused
    // (`503`, `Retry-After`) or answered, never `400`.
    let began = Instant::now();
    let mut id = 2;
    loop {
        let resp = legacy_post(b.port(), &endpoint, &init(id));
        proxy.restore();
        if resp.status == 202 {
            break;
        }
        refused(&resp, "initialize sent again");
        assert!(
            began.elapsed() < Duration::from_secs(15),
            "initialize never accepted again:\nA:\n{}",
            a.log()
        );
        thread::sleep(Duration::from_millis(300));
        id += 1;
    }
    let seen = read_stream_until(&mut stream, &[&format!("\"id\":{id},")]);
    assert!(
        seen.contains("\"protocolVersion\":\"2024-11-05\""),
        "{seen}"
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(legacy_post(a.port(), &endpoint, &initialized).status, 202);
    let (call, call_id) = legacy_find();
    assert_eq!(legacy_post(b.port(), &endpoint, &call).status, 202);
    read_stream_until(&mut stream, &[&format!("\"id\":{call_id},")]);
    let late = legacy_post(a.port(), &endpoint, &init(1000));
    assert_eq!(
        late.status,
        400,
        "an initialize after the session went on:\n{}",
        late.describe()
    );
    assert!(
        late.body.contains("already initialized"),
        "{}",
        late.describe()
    );
}
