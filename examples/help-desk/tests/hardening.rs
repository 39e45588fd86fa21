//! Small hardening checks on the real binary (issue 19, item 9): a `Host` that merely starts
//! with a loopback name is refused, and a client-address header believed from anyone is
//! warned about at start.

#[path = "../../e2e_support.rs"]
mod support;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use support::Instance;
use support::raw_http;

/// A POST of `initialize` to `port` with `host` as its `Host`.
fn initialize_as(port: u16, host: &str) -> raw_http::RawResponse {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"0"}}}"#;
    raw_http::send(
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        "POST",
        "/mcp",
        &[
            ("Host", host),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        Some(body),
        Duration::from_secs(10),
    )
}

/// On a loopback-bound server, a `Host` is a loopback name with an optional port, nothing else:
/// `[::1]evil.example` (a foreign name after the bracket) is refused like any foreign name.
#[test]
fn a_host_that_only_starts_with_a_loopback_name_is_refused() {
    let desk = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &[]);
    let port = desk.port();
    for host in [
        "[::1]evil.example",
        "[::1]evil.example:80",
        "localhost:80:evil.example",
    ] {
        let resp = initialize_as(port, host);
        assert_eq!(resp.status, 403, "Host {host}:\n{}", resp.describe());
    }
    for host in [
        "[::1]",
        "[::1]:3000",
        "localhost",
        &format!("127.0.0.1:{port}"),
    ] {
        let resp = initialize_as(port, host);
        assert_eq!(resp.status, 200, "Host {host}:\n{}", resp.describe());
    }
}

/// `FLEETMCP_CLIENT_ADDRESS_HEADER` without `FLEETMCP_TRUSTED_PROXIES` believes the header from
/// any peer: the server says so at start; with the proxies listed, it does not.
#[test]
fn a_client_address_header_without_trusted_proxies_is_warned_about_at_start() {
    const WARNING: &str = "FLEETMCP_CLIENT_ADDRESS_HEADER is set without FLEETMCP_TRUSTED_PROXIES";
    let open = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[("FLEETMCP_CLIENT_ADDRESS_HEADER", "x-forwarded-for")],
    );
    assert!(open.log().contains(WARNING), "{}", open.log());
    let closed = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[
            ("FLEETMCP_CLIENT_ADDRESS_HEADER", "x-forwarded-for"),
            ("FLEETMCP_TRUSTED_PROXIES", "127.0.0.1"),
        ],
    );
    assert!(!closed.log().contains(WARNING), "{}", closed.log());
}
