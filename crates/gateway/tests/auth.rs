//! Authorization in front of an upstream (`[auth]` plus `FLEETMCP_UPSTREAM_TOOL_SCOPES`): the
//! gateway checks every request's bearer token against a real authorization server
//! (`tools/auth/server.mjs`, oauth2-mock-server issuing RS256 JWTs through its JWKS), and a
//! call of an upstream tool needs the scope configured for it: without it, `403`
//! `insufficient_scope` before anything goes up.
//!
//! Needs `node`, the tooling of `tools/setup.sh` and `cargo build -p everything`.

#[path = "../../../examples/e2e_support.rs"]
mod support;

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use support::raw_http::RawResponse;
use support::{ensure_tooling, free_port, repo_root};

/// `tools/auth/server.mjs` on a free port, killed on drop.
struct AuthServer {
    child: Child,
    issuer: String,
    port: u16,
}

impl AuthServer {
    fn start() -> Self {
        let mut child = Command::new("node")
            .arg(repo_root().join("tools/auth/server.mjs"))
            .arg("0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node tools/auth/server.mjs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the authorization server's first line");
        let issuer = line
            .trim()
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_string();
        let port = issuer
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port in the issuer");
        Self {
            child,
            issuer,
            port,
        }
    }

    /// A token with `scope` for `audience`, valid for an hour.
    fn token(&self, audience: &str, scope: &str) -> String {
        let body = json!({"claims": {"sub": "alice", "aud": audience, "scope": scope}, "expires_in": 3600});
        let resp = http_on(
            self.port,
            "POST",
            "/control/token",
            &[("Content-Type", "application/json")],
            Some(&body.to_string()),
        );
        assert_eq!(resp.status, 200, "{}", resp.describe());
        resp.json()["access_token"]
            .as_str()
            .expect("access_token")
            .to_string()
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_on(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> RawResponse {
    http(port, method, path, headers, body)
}

/// POSTs `msg` with `token` (and the session, if any).
fn post_as(port: u16, token: &str, sid: Option<&str>, msg: &Value) -> RawResponse {
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", auth.as_str()),
    ];
    if let Some(sid) = sid {
        headers.push(("mcp-session-id", sid));
        headers.push(("mcp-protocol-version", PROTOCOL_VERSION));
    }
    http(port, "POST", "/mcp", &headers, Some(&msg.to_string()))
}

fn call_as(port: u16, token: &str, sid: &str, tool: &str) -> RawResponse {
    let args = if tool == "greet" {
        json!({"name": "alice"})
    } else {
        json!({})
    };
    let msg = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    post_as(port, token, Some(sid), &msg)
}

fn assert_insufficient(resp: &RawResponse, scope: &str) {
    assert_eq!(resp.status, 403, "{}", resp.describe());
    let challenge = resp.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(
        challenge.contains(&format!("scope=\"{scope}\"")),
        "{challenge}"
    );
    assert_eq!(resp.json()["error"]["code"], -32001, "{}", resp.describe());
}

#[test]
fn each_upstream_tool_needs_the_scope_configured_for_it() {
    ensure_tooling();
    let auth = AuthServer::start();
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let jwks = format!("{}/jwks", auth.issuer);
    let command = everything_command();
    let env = [
        ("FLEETMCP_UPSTREAM_COMMAND", command.as_str()),
        (
            "FLEETMCP_UPSTREAM_TOOL_SCOPES",
            "greet=greet:run,*=mcp:tools",
        ),
        ("FLEETMCP_AUTH_ENABLED", "true"),
        ("FLEETMCP_AUTH_ISSUER", auth.issuer.as_str()),
        ("FLEETMCP_AUTH_RESOURCE", resource.as_str()),
        ("FLEETMCP_AUTH_JWKS_URI", jwks.as_str()),
        ("REDIS_URL", ""),
    ];
    let mut gw = support::Instance::start_on(env!("CARGO_BIN_EXE_fleetmcp-gateway"), port, &env);
    gw.wait_ready(Duration::from_secs(20));

    // No token: 401 before anything else.
    let resp = post(port, None, &initialize_message());
    assert_eq!(resp.status, 401, "{}", resp.describe());

    let greeter = auth.token(&resource, "greet:run");
    let caller = auth.token(&resource, "mcp:tools");
    let resp = post_as(port, &greeter, None, &initialize_message());
    assert_eq!(resp.status, 200, "{}", resp.describe());
    assert_eq!(resp.json()["result"]["serverInfo"]["name"], "everything");
    let sid = resp
        .header("mcp-session-id")
        .expect("a session")
        .to_string();

    assert_eq!(
        tool_text(&call_as(port, &greeter, &sid, "greet")),
        "Hello, alice!"
    );
    assert_insufficient(
        &call_as(port, &greeter, &sid, "test_simple_text"),
        "mcp:tools",
    );
    let resp = call_as(port, &caller, &sid, "test_simple_text");
    assert_eq!(resp.status, 200, "{}", resp.describe());
    assert_insufficient(&call_as(port, &caller, &sid, "greet"), "greet:run");
    // Listing needs no tool's scope.
    let list = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"});
    assert_eq!(post_as(port, &caller, Some(&sid), &list).status, 200);
    gw.assert_no_panic_logged();
}
