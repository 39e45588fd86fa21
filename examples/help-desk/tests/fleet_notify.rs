//! Notifications across a distributed fleet on one real `redis-server`: a resource update or a
//! page raised on one instance reaches the session's stream on its holder, authenticated, also
//! while the holder withdraws; a page the store did not take is not reported delivered; idle
//! standalone streams cost Redis no command, or few.
//!
//! Each test starts its own `redis-server` and instances, and waits for nothing unbounded; what
//! these tests share is in `fleet_client`.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::net::{Ipv4Addr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support::raw_http;
use support_redis::{Monitor, RedisServer};

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
