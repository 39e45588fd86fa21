//! Whom the limits count against, end to end over IPv6 loopback: a `help-desk` listening
//! dual-stack (`FRONTMCP_BIND_ADDRESS=all6`, `::`), with `FLEETMCP_MAX_SESSIONS_PER_KEY=2` and
//! `X-Forwarded-For` believed from the proxy `127.0.0.1` only.
//!
//! - A connection from 127.0.0.1 reaches the dual-stack listener as `::ffff:127.0.0.1`: it is
//!   still the trusted proxy, so its header names the client.
//! - Clients in one IPv6 /64 (`limits.ipv6_prefix_len`, 64 by default) are one key: a third
//!   session from a third address of the /64 is refused 429 `-32010`, another /64 is not.
//! - `::ffff:198.51.100.4` and `198.51.100.4` are one key.
//! - A client connecting over `[::1]` (not a proxy) counts as its own /64, whatever it says.
//!
//! Needs IPv6 loopback (`::1`): the test fails, saying so, on a machine without it.
//!
//! And a balancer left unconfigured: forwarding headers the server ignores (no header set, or
//! a peer not listed) are warned about once and counted
//! (`fleetmcp_untrusted_forwarded_headers_total`).

#[path = "../../e2e_support.rs"]
mod support;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use serde_json::{Value, json};
use support::Instance;
use support::raw_http::{self, RawResponse};

const LIMIT: Duration = Duration::from_secs(15);

/// An `initialize` to `to` (any family), its `Host` the address it was sent to, claiming to be
/// `forwarded_for` in `X-Forwarded-For` when given.
fn initialize(to: SocketAddr, forwarded_for: Option<&str>) -> RawResponse {
    let body = initialize_body();
    let host = to.to_string();
    let mut headers = vec![
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(xff) = forwarded_for {
        headers.push(("X-Forwarded-For", xff));
    }
    raw_http::send(to, "POST", "/mcp", &headers, Some(&body), LIMIT)
}

fn initialize_body() -> String {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "limit-keys-test", "version": "1.0.0"},
        },
    })
    .to_string()
}

fn assert_admitted(resp: &RawResponse, what: &str) {
    assert_eq!(resp.status, 200, "{what}:\n{}", resp.describe());
    assert!(
        resp.header("mcp-session-id").is_some(),
        "{what}:\n{}",
        resp.describe()
    );
}

fn assert_refused(resp: &RawResponse, what: &str) {
    assert_eq!(resp.status, 429, "{what}:\n{}", resp.describe());
    let error: &Value = &resp.json()["error"];
    assert_eq!(error["code"], -32010, "{what}:\n{}", resp.describe());
    assert_eq!(
        error["data"]["limit"],
        "sessionsPerKey",
        "{what}:\n{}",
        resp.describe()
    );
}

#[test]
fn clients_of_one_ipv6_network_share_a_key_and_a_mapped_proxy_is_trusted() {
    // The machine must have IPv6 loopback for this test to mean anything.
    if let Err(e) = std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)) {
        panic!("this test needs IPv6 loopback (::1), which this machine lacks: {e}");
    }
    let desk = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[
            ("FRONTMCP_BIND_ADDRESS", "all6"),
            ("FLEETMCP_MAX_SESSIONS_PER_KEY", "2"),
            ("FLEETMCP_CLIENT_ADDRESS_HEADER", "x-forwarded-for"),
            ("FLEETMCP_TRUSTED_PROXIES", "127.0.0.1"),
        ],
    );
    let port = desk.port();
    let via_proxy = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let over_v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    assert!(
        desk.log()
            .contains(&format!("listening on http://[::]:{port}/mcp")),
        "not on the dual-stack address:\n{}",
        desk.log()
    );

    // Two addresses of 2001:db8:1:2::/64: the key's two places. A third address of that /64
    // is over the bound (were each address a key of its own, it would be admitted).
    assert_admitted(
        &initialize(via_proxy, Some("2001:db8:1:2::1")),
        "first of the /64",
    );
    assert_admitted(
        &initialize(via_proxy, Some("203.0.113.50, 2001:db8:1:2::2")),
        "second of the /64",
    );
    assert_refused(
        &initialize(via_proxy, Some("2001:db8:1:2:ffff:ffff:ffff:fffe")),
        "third of the /64",
    );
    // Another /64 is another key: the proxy (seen as ::ffff:127.0.0.1) was believed (were it
    // not, every session above would count against the proxy and this one be refused).
    assert_admitted(
        &initialize(via_proxy, Some("2001:db8:1:3::1")),
        "another /64",
    );

    // An IPv4 client, written either way, is one key.
    assert_admitted(&initialize(via_proxy, Some("198.51.100.4")), "198.51.100.4");
    assert_admitted(
        &initialize(via_proxy, Some("::ffff:198.51.100.4")),
        "::ffff:198.51.100.4",
    );
    assert_refused(
        &initialize(via_proxy, Some("198.51.100.4")),
        "198.51.100.4 a third time",
    );

    // Over [::1] directly: not a proxy, so its header is not believed; it counts as ::/64.
    for n in 1..=2 {
        assert_admitted(
            &initialize(over_v6, Some(&format!("2001:db8:9::{n}"))),
            "over [::1]",
        );
    }
    assert_refused(
        &initialize(over_v6, Some("2001:db8:9::3")),
        "over [::1], a third",
    );
    desk.assert_no_panic_logged();
}

/// What `fleetmcp_untrusted_forwarded_headers_total` says on `desk`.
fn untrusted_forwarded(desk: &Instance) -> Option<u64> {
    let resp = support::http_get(desk.port(), "/metrics").expect("GET /metrics");
    resp.body
        .lines()
        .find_map(|l| l.strip_prefix("fleetmcp_untrusted_forwarded_headers_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// A balancer left unconfigured (issue 37, item 4): requests arrive with `X-Forwarded-For` or
/// `X-Real-IP` the server ignores, counting every client as the peer. The first such request
/// is logged, once, naming what to set; every one is counted in
/// `fleetmcp_untrusted_forwarded_headers_total`. The same from a peer not in
/// `FLEETMCP_TRUSTED_PROXIES`; nothing from a trusted one, or without the headers.
#[test]
fn forwarding_headers_not_believed_are_warned_once_and_counted() {
    let bin = env!("CARGO_BIN_EXE_help-desk");
    let unset = "FLEETMCP_CLIENT_ADDRESS_HEADER (limits.client_address_header) is unset";
    let untrusted = "is not in FLEETMCP_TRUSTED_PROXIES";

    // No header configured (what every shipped balancer setting lacked).
    let desk = Instance::start(bin, &[]);
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, desk.port()));
    assert_eq!(untrusted_forwarded(&desk), Some(0), "before any request");
    assert_admitted(&initialize(to, None), "without a forwarding header");
    assert_eq!(untrusted_forwarded(&desk), Some(0), "without the headers");
    for n in 1..=3 {
        assert_admitted(&initialize(to, Some("203.0.113.7")), &format!("XFF {n}"));
    }
    let body = initialize_body();
    let host = to.to_string();
    let real_ip = raw_http::send(
        to,
        "POST",
        "/mcp",
        &[
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("X-Real-IP", "203.0.113.8"),
        ],
        Some(&body),
        LIMIT,
    );
    assert_admitted(&real_ip, "X-Real-IP");
    assert_eq!(untrusted_forwarded(&desk), Some(4), "{}", desk.log());
    let log = desk.log();
    assert_eq!(log.matches(unset).count(), 1, "one warning:\n{log}");
    let line = log.lines().find(|l| l.contains(unset)).unwrap_or_default();
    for needle in [
        " WARN ",
        "requests from 127.0.0.1 carry X-Forwarded-For",
        "Set FLEETMCP_CLIENT_ADDRESS_HEADER=x-forwarded-for and FLEETMCP_TRUSTED_PROXIES",
        "fleetmcp_untrusted_forwarded_headers_total",
    ] {
        assert!(line.contains(needle), "`{needle}` in: {line}");
    }
    desk.assert_no_panic_logged();

    // Configured, but the peer (127.0.0.1) is not a listed proxy.
    let desk = Instance::start(
        bin,
        &[
            ("FLEETMCP_CLIENT_ADDRESS_HEADER", "x-forwarded-for"),
            ("FLEETMCP_TRUSTED_PROXIES", "10.0.0.0/8"),
        ],
    );
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, desk.port()));
    for n in 1..=2 {
        assert_admitted(&initialize(to, Some("203.0.113.7")), &format!("XFF {n}"));
    }
    assert_eq!(untrusted_forwarded(&desk), Some(2), "{}", desk.log());
    let log = desk.log();
    assert_eq!(log.matches(untrusted).count(), 1, "one warning:\n{log}");
    assert!(!log.contains(unset), "{log}");

    // Configured, from a listed proxy: believed, nothing said.
    let desk = Instance::start(
        bin,
        &[
            ("FLEETMCP_CLIENT_ADDRESS_HEADER", "x-forwarded-for"),
            ("FLEETMCP_TRUSTED_PROXIES", "127.0.0.1"),
        ],
    );
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, desk.port()));
    assert_admitted(&initialize(to, Some("203.0.113.7")), "from the proxy");
    assert_eq!(untrusted_forwarded(&desk), Some(0), "{}", desk.log());
    let log = desk.log();
    assert!(!log.contains(unset) && !log.contains(untrusted), "{log}");
}
