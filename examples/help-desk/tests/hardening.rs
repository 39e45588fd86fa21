//! Small hardening checks on the real binary (issue 19, item 9): a `Host` that merely starts
//! with a loopback name is refused, and so is a foreign host named in an absolute-form target;
//! a repeated `Mcp-Session-Id` names no session, a repeated version header no version; and a client-address header believed from
//! anyone is warned about at start.

#[path = "../../e2e_support.rs"]
mod support;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use support::Instance;
use support::raw_http;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"0"}}}"#;

/// A POST of `initialize` to `port` with `host` as its `Host`.
fn initialize_as(port: u16, host: &str) -> raw_http::RawResponse {
    initialize_at(port, "/mcp", host)
}

/// The same with `target` as the request target (`/mcp`, or an absolute form).
fn initialize_at(port: u16, target: &str, host: &str) -> raw_http::RawResponse {
    raw_http::send(
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        "POST",
        target,
        &[
            ("Host", host),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        Some(INITIALIZE),
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

/// A request in absolute form names its host in the target, and that name is the one that
/// counts (RFC 9112 3.2.2): `POST http://evil.example/mcp` with a loopback `Host` is refused on
/// a loopback-bound server; the same form naming this server is served.
#[test]
fn an_absolute_form_target_naming_a_foreign_host_is_refused() {
    let desk = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &[]);
    let port = desk.port();
    let local = format!("127.0.0.1:{port}");
    for target in [
        "http://evil.example/mcp".to_string(),
        format!("http://evil.example:{port}/mcp"),
        format!("http://[::1]evil.example:{port}/mcp"),
    ] {
        let resp = initialize_at(port, &target, &local);
        assert_eq!(resp.status, 403, "target {target}:\n{}", resp.describe());
        let message = resp.json()["error"]["message"].as_str().map(str::to_owned);
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("evil.example")),
            "target {target}: {message:?}"
        );
    }
    for target in [
        format!("http://{local}/mcp"),
        format!("http://localhost:{port}/mcp"),
    ] {
        let resp = initialize_at(port, &target, &local);
        assert_eq!(resp.status, 200, "target {target}:\n{}", resp.describe());
    }
    // The target names this server but `Host` does not: both must name it.
    let resp = initialize_at(port, &format!("http://{local}/mcp"), "evil.example");
    assert_eq!(resp.status, 403, "{}", resp.describe());
}

/// `Mcp-Session-Id` sent twice names no one session: whichever value a server picked, a proxy
/// in front may have picked the other. The request is answered like one whose id does not
/// open (`404 invalid session id`, as the reference answers the two values it joins into one),
/// even when both values are the same live session's, and the session itself is untouched.
/// `MCP-Protocol-Version` sent twice is refused the same way a version we do not speak is.
#[test]
fn a_repeated_session_id_or_version_names_neither() {
    let desk = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &[]);
    let port = desk.port();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let opened = initialize_as(port, &format!("127.0.0.1:{port}"));
    assert_eq!(opened.status, 200, "{}", opened.describe());
    let sid = opened
        .header("mcp-session-id")
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no session id:\n{}", opened.describe()));
    let list = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#;
    let post = |ids: &[&str]| {
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        headers.extend(ids.iter().map(|id| ("Mcp-Session-Id", *id)));
        raw_http::send(
            addr,
            "POST",
            "/mcp",
            &headers,
            Some(list),
            Duration::from_secs(10),
        )
    };
    for ids in [
        [sid.as_str(), sid.as_str()],
        [sid.as_str(), "another-session"],
    ] {
        let resp = post(&ids);
        assert_eq!(resp.status, 404, "ids {ids:?}:\n{}", resp.describe());
        let body = resp.json();
        assert_eq!(body["error"]["code"], -32000, "{body}");
        assert_eq!(body["error"]["message"], "invalid session id", "{body}");
        assert_eq!(body["id"], 7, "the request's id is echoed: {body}");
    }
    // GET and DELETE read the header the same way.
    for method in ["GET", "DELETE"] {
        let resp = raw_http::send(
            addr,
            method,
            "/mcp",
            &[
                ("Accept", "text/event-stream"),
                ("Mcp-Session-Id", &sid),
                ("Mcp-Session-Id", &sid),
            ],
            None,
            Duration::from_secs(10),
        );
        assert_eq!(resp.status, 404, "{method}:\n{}", resp.describe());
    }
    // `MCP-Protocol-Version` twice names no one version (here, two eras): 400.
    let resp = raw_http::send(
        addr,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", &sid),
            ("MCP-Protocol-Version", "2025-11-25"),
            ("MCP-Protocol-Version", "2026-07-28"),
        ],
        Some(list),
        Duration::from_secs(10),
    );
    assert_eq!(resp.status, 400, "{}", resp.describe());
    assert_eq!(
        resp.json()["error"]["message"],
        "Bad Request: the MCP-Protocol-Version header is repeated",
        "{}",
        resp.describe()
    );
    // Sent once, the id still serves: nothing above ended the session.
    let resp = post(&[sid.as_str()]);
    assert_eq!(resp.status, 200, "{}", resp.describe());
    assert!(
        resp.json()["result"]["tools"].is_array(),
        "{}",
        resp.describe()
    );
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
