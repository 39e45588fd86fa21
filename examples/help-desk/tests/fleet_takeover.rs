//! Distributed mode on one real `redis-server`: a session's holder serves it and the other
//! instances relay to it (also while Redis is paused; a retried call opens one ticket wherever
//! it lands); a holder that stops, crashes, pauses or falls silent is taken over when, and only
//! when, it should be; a holder cut off from Redis stops serving and never writes over its
//! successor; the orphan scanner claims a dead holder's sessions, never a live one's.
//!
//! Each test starts its own `redis-server` and instances, and waits for nothing unbounded; what
//! these tests share is in `fleet_client`.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support::raw_http::RawResponse;
use support_redis::{CuttableProxy, Monitor, RedisServer};

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
    let now = unix_ms();
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
    assert_eq!(stored_holders(&redis, &on_c), ["desk-a"], "C's session");
    // B was back well before A could judge: its session stays its own.
    thread::sleep(Duration::from_secs(2));
    assert_eq!(
        count(&a, "dead_node_id=desk-b"),
        0,
        "A took live B for dead:\n{}",
        a.log()
    );
    assert_eq!(stored_holders(&redis, &on_b), ["desk-b"], "B's session");
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

/// Issue 37, a rolling upgrade. While an instance of an earlier version beats (its heartbeat,
/// written here as main writes it, has no `compactRecords`), records are written in the full
/// form, which that version requires (`session.id`, the key's id: it deletes a record
/// without); once it has stopped, the next reading of the fleet's heartbeats switches each
/// instance to the compact form (no `session.id`, 64 bytes less in Redis), which the others
/// read: a compact session is relayed to its holder, then taken over when the holder crashes,
/// and a full one too.
#[test]
fn records_stay_full_while_an_older_instance_beats_then_turn_compact() {
    let redis = RedisServer::start();
    let url = redis.url();
    let now = unix_ms();
    let old = json!({"nodeId": "desk-old", "startedAt": now, "lastBeat": now,
        "sessionCount": 0, "address": "127.0.0.1:9"});
    redis.cli(&[
        "SET",
        "mcp:ha:heartbeat:desk-old",
        &old.to_string(),
        "PX",
        "120000",
    ]);
    redis.cli(&["ZADD", "mcp:ha:nodes", &now.to_string(), "desk-old"]);
    let mut a = distributed_desk("desk-a", &url, &QUICK_FAILOVER);
    let b = distributed_desk("desk-b", &url, &QUICK_FAILOVER);
    let usage = |sid: &str| -> u64 {
        let used = redis.cli(&["MEMORY", "USAGE", &session_key(sid)]);
        used.trim().parse().unwrap_or(0)
    };
    let full = open_session(a.port());
    // Past a second reading of the fleet (every 6 beats of 300 ms), still the full form.
    thread::sleep(Duration::from_millis(2_500));
    let also_full = open_session(a.port());
    for sid in [&full, &also_full] {
        assert_eq!(
            stored(&redis, sid)["session"]["id"],
            sid.as_str(),
            "{}",
            a.log()
        );
        assert!(usage(sid) > 376, "{} B", usage(sid));
    }

    // The older instance stops gracefully (as it does: its heartbeat deleted, scored 0).
    redis.cli(&["DEL", "mcp:ha:heartbeat:desk-old"]);
    redis.cli(&["ZADD", "mcp:ha:nodes", "0", "desk-old"]);
    const SWITCHED: &str = "[HA] every running instance reads compact session records";
    assert_log_has(&a, "desk-a", SWITCHED);
    assert_log_has(&b, "desk-b", SWITCHED);
    let compact = open_session(a.port());
    let raw = stored(&redis, &compact);
    assert!(raw["session"].get("id").is_none(), "{raw}");
    assert_eq!(raw["session"]["nodeId"], "desk-a");
    assert!(usage(&compact) <= 376, "{} B: {raw}", usage(&compact));
    let resp = find_tickets(b.port(), &compact);
    assert_tool_ok(&resp, "a compact session of A's, sent to B");
    assert_eq!(machine_of(&resp), Some("desk-a"), "{}", resp.describe());

    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    for sid in [&compact, &full] {
        let resp = find_tickets_within(b.port(), sid, Duration::from_secs(5));
        assert_tool_ok(&resp, "the crashed holder's session, on B");
        assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
        assert_eq!(stored(&redis, sid)["session"]["nodeId"], "desk-b");
    }
    assert!(stored(&redis, &compact)["session"].get("id").is_none());
}

/// While older instances beat, an instance reads the whole fleet's heartbeats once, then only
/// the heartbeat of one older instance it remembers, not every heartbeat at every reading (a
/// rolling upgrade of I instances would otherwise cost the fleet I² reads a minute); once no
/// older instance is left, it still switches.
#[test]
fn while_older_instances_beat_a_reading_asks_one_of_them_not_the_fleet() {
    const OLDER: usize = 100;
    let redis = RedisServer::start();
    let url = redis.url();
    // Scored in the future, so that the orphan scanner leaves them alone for the test's length.
    let later = (unix_ms() + 600_000).to_string();
    for i in 0..OLDER {
        let node = format!("desk-old-{i}");
        let beat = json!({"nodeId": node, "startedAt": 1, "lastBeat": 1, "sessionCount": 0});
        let key = format!("mcp:ha:heartbeat:{node}");
        redis.cli(&["SET", &key, &beat.to_string(), "PX", "600000"]);
        redis.cli(&["ZADD", "mcp:ha:nodes", &later, &node]);
    }
    let a = distributed_desk("desk-a", &url, &QUICK_FAILOVER);
    // The first reading (at the first beat) read every heartbeat; the next ones come every 6
    // beats of 300 ms: about three in the window.
    thread::sleep(Duration::from_millis(1_000));
    redis.cli(&["CONFIG", "RESETSTAT"]);
    thread::sleep(Duration::from_millis(5_500));
    let stats = redis.cli(&["INFO", "commandstats"]);
    let gets: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    // Every reading of the whole fleet would be 100 GETs; a reading of the one remembered is 1,
    // besides the instance's own beat's read (one a beat, about 18 here).
    assert!(
        gets < OLDER as u64,
        "{gets} GETs in 5.5 s with {OLDER} older instances beating: {stats}"
    );
    assert!(
        !a.log().contains("reads compact session records"),
        "{}",
        a.log()
    );

    for i in 0..OLDER {
        let node = format!("desk-old-{i}");
        redis.cli(&["DEL", &format!("mcp:ha:heartbeat:{node}")]);
        redis.cli(&["ZADD", "mcp:ha:nodes", "0", &node]);
    }
    assert_log_has(
        &a,
        "desk-a",
        "[HA] every running instance reads compact session records",
    );
}
