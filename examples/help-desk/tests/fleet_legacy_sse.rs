//! 2024-11-05 sessions (`GET /sse`, `POST /message`) in a distributed fleet on one real
//! `redis-server`: a first POST that lands on another instance, a holder that cannot confirm
//! the session (`503`, not `404`), the orphan scanner leaving the session to its stream, the
//! session ending with its killed holder (never taken over) but not with a draining one,
//! answers going straight to the stream, an `initialize` sent again after a relay gave up, and
//! a holder cut off from Redis ending its stream before another instance calls it gone.
//!
//! Each test starts its own `redis-server` and instances, and waits for nothing unbounded; what
//! these tests share is in `fleet_client`.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::io::ErrorKind;
use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support::raw_http::RawResponse;
use support::{Instance, TempDir};
use support_redis::{CuttableProxy, RedisServer};

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

/// F16 (found by the fault harness's seed 3): a 2024-11-05 session's holder cut off from Redis
/// (its link refused: A keeps running and answers HTTP) ends the session's stream before
/// another instance may call the session gone. Others take A's absence from Redis for its
/// death, and answer `404` for the session once A has been absent for its drain and grace
/// (0.5 s here); A's lease ran out as its subscription dropped, and A ends its streams once
/// the lease has been out that long. So B answers `503` (retry) while the stream is open, and
/// `404` only once it ended. Before the fix A kept the stream open: B answered `404`
/// "session expired" 2.5 s after the cut while A's stream was still open, two views of one
/// session.
#[test]
fn a_2024_11_05_holder_cut_off_from_redis_ends_its_stream_before_a_peer_calls_it_gone() {
    holder_cut_off_ends_its_stream_first(CuttableProxy::cut, &[503], true);
}

/// The same with A's link to Redis silent rather than refused (every byte held: A's
/// subscription stays up, Redis still counts it): A's lease runs out a tenth of the
/// heartbeat's lifetime before its key expires, and A ends its stream half a second later,
/// before a peer could find A gone (once the key expired and the grace passed). The relay
/// never does (it finds A's subscription still counted, and answers `503`); A cannot tell
/// that from a subscription Redis dropped, so it ends the stream all the same. Until its lease
/// runs out A serves the session from memory (`202`).
#[test]
fn a_2024_11_05_holder_whose_redis_link_is_silent_ends_its_stream_before_a_peer_calls_it_gone() {
    holder_cut_off_ends_its_stream_first(CuttableProxy::hold, &[202, 503], false);
}

/// A 2024-11-05 session on A, A's link to Redis cut by `cut_link`, and B asked for the session
/// every 100 ms: B answers one of `before` until A's stream has ended, and `404` only after
/// (`peers_say_gone`: B comes to say it, else B may never). A's stream ends within 2 s of the
/// cut, before any peer could call the session gone, and A refuses a new `GET /sse` (`503`)
/// until its lease holds again.
fn holder_cut_off_ends_its_stream_first(
    cut_link: fn(&CuttableProxy),
    before: &[u16],
    peers_say_gone: bool,
) {
    let redis = RedisServer::start();
    let proxy = CuttableProxy::start(redis.port);
    let timings = [
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1000"),
        ("FRONTMCP_HA_TAKEOVER_GRACE_MS", "500"),
        ("FLEETMCP_DRAIN_MS", "0"),
        ("FLEETMCP_SHUTDOWN_GRACE_MS", "500"),
    ];
    let a = distributed_desk("desk-a", &proxy.url(), &timings);
    let b = distributed_desk("desk-b", &redis.url(), &timings);
    let (mut stream, endpoint) = open_legacy_session(a.port());
    let (call, id) = legacy_find();
    assert_eq!(legacy_post(b.port(), &endpoint, &call).status, 202);
    read_stream_until(&mut stream, &[&format!("\"id\":{id},")]);

    // When the stream ended, as its client sees it (the end of its chunks, or of the
    // connection); read on its own thread while B is asked.
    let ended = std::sync::Arc::new(std::sync::Mutex::new(None::<Instant>));
    let reader = {
        let ended = ended.clone();
        thread::spawn(move || {
            use std::io::Read;
            // What was read before ended with a chunk's `\r\n`: the last chunk (`0`) may come
            // alone.
            let mut tail = b"\r\n".to_vec();
            let mut buf = [0u8; 4096];
            let began = Instant::now();
            while began.elapsed() < Duration::from_secs(20) {
                match stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        tail.extend_from_slice(&buf[..n]);
                        if tail.ends_with(b"\r\n0\r\n\r\n") {
                            break;
                        }
                        let keep = tail.len().saturating_sub(16);
                        tail.drain(..keep);
                    }
                    // The read timeout: nothing yet.
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
            if began.elapsed() < Duration::from_secs(20) {
                *ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            }
        })
    };
    let cut = Instant::now();
    cut_link(&proxy);
    // A notices its subscription dropped in a moment; until then it may still serve a POST.
    thread::sleep(Duration::from_millis(200));
    let stream_end = || *ended.lock().unwrap_or_else(|e| e.into_inner());
    let mut gone_at = None;
    loop {
        let (call, _) = legacy_find();
        let resp = legacy_post(b.port(), &endpoint, &call);
        if resp.status == 404 {
            gone_at = Some(Instant::now());
            break;
        }
        assert!(
            before.contains(&resp.status),
            "B, while A's stream is open:\n{}",
            resp.describe()
        );
        // A silent holder is never found gone by the relay (Redis still counts its
        // subscription): the stream's end is enough.
        if !peers_say_gone && stream_end().is_some_and(|e| e.elapsed() > Duration::from_secs(1)) {
            break;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(15),
            "no 404 from B in 15 s (and A's stream ended {:?} after the cut):\nB:\n{}",
            stream_end().map(|e| e - cut),
            b.log()
        );
        thread::sleep(Duration::from_millis(100));
    }
    let end = stream_end();
    assert!(
        end.is_some_and(|e| gone_at.is_none_or(|g| e <= g)),
        "B answered 404 {:?} after A lost Redis, while A's stream was open (ended: {:?} after the cut)\nA:\n{}",
        gone_at.map(|g| g - cut),
        end.map(|e| e - cut),
        a.log()
    );
    // Before any peer could call it gone: A's key expires within a heartbeat's lifetime (1 s)
    // of the cut, and a peer waits the grace (0.5 s) and the drain and grace (0.5 s) more.
    let ended_after = end.map(|e| e - cut).unwrap_or_default();
    assert!(
        ended_after < Duration::from_secs(2),
        "A's stream ended {ended_after:?} after the cut"
    );
    assert_log_has(
        &a,
        "desk-a",
        "[HA] lease out past what peers wait; ending 1 2024-11-05 streams",
    );
    // Its lease still out: a new stream is refused (the others would call it gone at once),
    // and taken again once Redis answers.
    assert_eq!(
        sse_status(a.port()),
        Some(503),
        "GET /sse on A while cut off"
    );
    proxy.restore();
    wait_until(
        "A takes a new stream again",
        Duration::from_secs(10),
        || sse_status(a.port()) == Some(200),
    );
    let _ = reader.join();
}

/// The status `GET /sse` on `port` is answered with (`None`: no answer).
fn sse_status(port: u16) -> Option<u16> {
    let host = format!("127.0.0.1:{port}");
    let mut stream = support::raw_http::open(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        "GET",
        "/sse",
        &[("Host", host.as_str()), ("Accept", "text/event-stream")],
        None,
        Duration::from_secs(2),
    )
    .ok()?;
    support::raw_http::read_status(&mut stream).ok()
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
