//! Limits shared by a fleet, end to end: `help-desk` processes in distributed mode on one real
//! `redis-server`, with `FLEETMCP_RATE_LIMIT`. A request relayed to its session's holder is
//! counted once, by the holder, against the client (its address as the relaying instance saw
//! it, carried signed with the hop), never against the relaying instance.
//!
//! Needs `redis-server` and `redis-cli` on `PATH` (or `REDIS_SERVER` / `REDIS_CLI`). Every wait
//! is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use fleet_client::*;
use serde_json::{Value, json};
use support_redis::RedisServer;

fn find_call() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {"query": "printer"}},
    })
}

/// POSTs `msg` in session `sid` to `port` from the loopback address `from` (127.0.0.2: another
/// client than the instances, which talk from 127.0.0.1); the status and the JSON-RPC answer.
fn post_from(from: Ipv4Addr, port: u16, sid: &str, msg: &Value) -> (u16, Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::from((from, 0)))
            .expect("bind the client's address");
        let mut stream = tokio::time::timeout(
            HTTP_LIMIT,
            socket.connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
        )
        .await
        .expect("connect in time")
        .expect("connect");
        let body = msg.to_string();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: {ACCEPT}\r\nmcp-session-id: {sid}\r\nmcp-protocol-version: {PROTOCOL_VERSION}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        tokio::time::timeout(HTTP_LIMIT, stream.read_to_end(&mut raw))
            .await
            .expect("answer in time")
            .expect("read");
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP answer: {text}"));
        let (_, body) = text.split_once("\r\n\r\n").expect("a body");
        let json = body
            .lines()
            .find_map(|l| serde_json::from_str::<Value>(l.trim_start_matches("data:").trim()).ok())
            .unwrap_or_else(|| panic!("no JSON in: {text}"));
        (status, json)
    })
}

/// Three calls a minute per client. The session lives on A; a client at 127.0.0.2 sends its
/// calls to B, which relays them: three are served by A, the fourth is refused with `429`
/// `-32010` (counted twice, by B and A, the second would have been). The count is the client's
/// (`{addr:127.0.0.2}`), not B's (`127.0.0.1`, which counts only the `initialize` sent from
/// there).
#[test]
fn a_relayed_request_is_counted_once_by_the_holder_against_the_client() {
    let redis = RedisServer::start();
    let url = redis.url();
    let limit = [("FLEETMCP_RATE_LIMIT", "3/60000")];
    let a = distributed_desk("desk-a", &url, &limit);
    let b = distributed_desk("desk-b", &url, &limit);
    let sid = open_session(a.port());
    let client = Ipv4Addr::new(127, 0, 0, 2);
    for i in 0..3 {
        let (status, answer) = post_from(client, b.port(), &sid, &find_call());
        assert_eq!(status, 200, "call {i} through B: {answer}");
        assert!(answer.get("result").is_some(), "call {i}: {answer}");
    }
    let call = find_call();
    let (status, answer) = post_from(client, b.port(), &sid, &call);
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["error"]["code"], -32010, "{answer}");
    assert_eq!(answer["id"], call["id"], "{answer}");
    assert_eq!(answer["error"]["data"]["limit"], "rate", "{answer}");

    // Each key's counter lives one interval (20 s) per request counted: three for the client,
    // one (the initialize, sent from 127.0.0.1) for the instances' address.
    let pttl = |key: &str| -> i64 { redis.cli(&["PTTL", key]).parse().expect("PTTL") };
    assert!(pttl("mcp:limits:{addr:127.0.0.2}:rate") > 40_000);
    let own = pttl("mcp:limits:{addr:127.0.0.1}:rate");
    assert!(
        (1..=20_000).contains(&own),
        "only the initialize counted against 127.0.0.1, nothing relayed: {own} ms"
    );
    // Health routes are never limited.
    for port in [a.port(), b.port()] {
        let res = http(port, "GET", "/healthz", &[], None, Duration::from_secs(5));
        assert_eq!(res.status, 200, "{}", res.describe());
    }
}
