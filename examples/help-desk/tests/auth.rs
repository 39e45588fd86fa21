//! Authorization (issue 11): help-desk as an OAuth 2.1 resource server, against a real
//! authorization server (`tools/auth/server.mjs`, oauth2-mock-server) that issues RS256 JWTs
//! through its JWKS. Raw HTTP/1.1 to the real binary; the session binding across two
//! instances of a fleet sharing a real `redis-server`.
//!
//! Needs `node` and the tooling of `tools/setup.sh` (run here once per test process); the fleet
//! test needs `redis-server` and `redis-cli` on `PATH`. Every wait is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod auth_server;
mod fleet_client;

use std::time::Duration;

use auth_server::*;
use fleet_client::*;
use serde_json::{Value, json};
use support::raw_http::RawResponse;
use support::{SESSION_SECRET, TempDir};
use support_redis::RedisServer;

const BOTH: &str = "tickets:read tickets:write";

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `initialize` with `token` (if any); the response.
fn initialize(port: u16, token: Option<&str>, id: u64) -> RawResponse {
    let init = json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                   "clientInfo": {"name": "auth-test", "version": "1"}},
    });
    let auth = token.map(bearer);
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    post_with(port, None, &headers, &init, HTTP_LIMIT)
}

/// A session opened with `token`.
fn open_with(port: u16, token: &str) -> String {
    let resp = initialize(port, Some(token), next_id());
    assert_eq!(resp.status, 200, "initialize:\n{}", resp.describe());
    let sid = resp
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session id:\n{}", resp.describe()))
        .to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let auth = bearer(token);
    let resp = post_with(
        port,
        Some(&sid),
        &[("Authorization", &auth)],
        &note,
        HTTP_LIMIT,
    );
    assert_eq!(resp.status, 202, "initialized:\n{}", resp.describe());
    sid
}

/// `tools/call name args` in session `sid` with `token` (if any), id `id`.
fn call(
    port: u16,
    sid: &str,
    token: Option<&str>,
    id: u64,
    name: &str,
    args: Value,
) -> RawResponse {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                     "params": {"name": name, "arguments": args}});
    let auth = token.map(bearer);
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    post_with(port, Some(sid), &headers, &msg, HTTP_LIMIT)
}

/// A `401` naming the metadata of resource `resource`, with the request's id echoed.
fn assert_unauthorized(resp: &RawResponse, port: u16, id: Option<u64>, invalid: bool, what: &str) {
    assert_eq!(resp.status, 401, "{what}:\n{}", resp.describe());
    let challenge = resp
        .header("www-authenticate")
        .unwrap_or_else(|| panic!("{what}: no WWW-Authenticate:\n{}", resp.describe()));
    let metadata = format!(
        "resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp\""
    );
    assert!(challenge.starts_with("Bearer "), "{what}: {challenge}");
    assert!(challenge.contains(&metadata), "{what}: {challenge}");
    assert!(
        challenge.contains(&format!("scope=\"{BOTH}\"")),
        "{what}: {challenge}"
    );
    assert_eq!(
        challenge.contains("error=\"invalid_token\""),
        invalid,
        "{what}: {challenge}"
    );
    let body = resp.json();
    assert_eq!(body["jsonrpc"], "2.0", "{what}:\n{}", resp.describe());
    assert_eq!(
        body["error"]["code"],
        -32001,
        "{what}:\n{}",
        resp.describe()
    );
    assert_eq!(
        body["id"],
        id.map_or(Value::Null, Value::from),
        "{what}:\n{}",
        resp.describe()
    );
}

#[test]
fn tokens_are_checked_on_every_route_and_scopes_per_tool() {
    let auth = AuthServer::start();
    let dir = TempDir::new("auth-single");
    let desk = desk_with_auth(&auth, &dir, None, &[]);
    let port = desk.port();
    let resource = resource_for(port);
    let claims = |sub: &str, scope: &str| json!({"sub": sub, "aud": resource, "scope": scope});

    // The metadata, at both well-known paths, names the authorization server and the scopes.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let resp = http(port, "GET", path, &[], None, HTTP_LIMIT);
        assert_eq!(resp.status, 200, "{path}:\n{}", resp.describe());
        let doc = resp.json();
        assert_eq!(doc["resource"], resource.as_str(), "{path}: {doc}");
        assert_eq!(
            doc["authorization_servers"],
            json!([auth.issuer()]),
            "{path}: {doc}"
        );
        assert_eq!(
            doc["scopes_supported"],
            json!(["tickets:read", "tickets:write"]),
            "{path}: {doc}"
        );
    }
    // Health stays open.
    assert_eq!(
        http(port, "GET", "/healthz", &[], None, HTTP_LIMIT).status,
        200
    );

    // No token: 401 on every MCP route, before any session is looked up.
    let id = next_id();
    assert_unauthorized(
        &initialize(port, None, id),
        port,
        Some(id),
        false,
        "initialize without a token",
    );
    let resp = http(
        port,
        "GET",
        "/mcp",
        &[
            ("Accept", "text/event-stream"),
            ("mcp-session-id", "made-up"),
        ],
        None,
        HTTP_LIMIT,
    );
    assert_unauthorized(&resp, port, None, false, "GET /mcp without a token");
    let resp = http(
        port,
        "GET",
        "/sse",
        &[("Accept", "text/event-stream")],
        None,
        HTTP_LIMIT,
    );
    assert_unauthorized(&resp, port, None, false, "GET /sse without a token");
    let discover = json!({"jsonrpc": "2.0", "id": 7, "method": "server/discover", "params": {}});
    let resp = post_with(
        port,
        None,
        &[("mcp-protocol-version", "2026-07-28")],
        &discover,
        HTTP_LIMIT,
    );
    assert_unauthorized(
        &resp,
        port,
        Some(7),
        false,
        "a 2026-07-28 request without a token",
    );

    // A token with both scopes: the call goes through, and the handler sees the subject.
    let writer = auth.token(claims("alice", BOTH), 3600);
    let sid = open_with(port, &writer);
    let resp = call(
        port,
        &sid,
        Some(&writer),
        next_id(),
        "open_ticket",
        json!({"title": "Printer on fire", "priority": "high"}),
    );
    assert_tool_ok(&resp, "open_ticket with tickets:write");
    assert_eq!(
        resp.json()["result"]["structuredContent"]["opened_by"],
        "alice",
        "{}",
        resp.describe()
    );

    // `Authorization` twice names no one principal (which one counts would depend on who
    // reads it): 400 invalid_request, the call not run, even with the same valid token twice.
    let stranger = auth.token(claims("mallory", BOTH), 3600);
    for (second, what) in [
        (&writer, "the same token twice"),
        (&stranger, "two principals"),
    ] {
        let id = next_id();
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": "open_ticket",
                                    "arguments": {"title": "twice", "priority": "low"}}});
        let (first, second) = (bearer(&writer), bearer(second));
        let resp = post_with(
            port,
            Some(&sid),
            &[("Authorization", &first), ("Authorization", &second)],
            &msg,
            HTTP_LIMIT,
        );
        assert_eq!(resp.status, 400, "{what}:\n{}", resp.describe());
        let challenge = resp.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.contains("error=\"invalid_request\""),
            "{what}: {challenge}"
        );
        assert_eq!(resp.json()["id"], id, "{what}:\n{}", resp.describe());
        assert_eq!(
            resp.json()["error"]["code"],
            -32001,
            "{what}:\n{}",
            resp.describe()
        );
    }
    let resp = call(
        port,
        &sid,
        Some(&writer),
        next_id(),
        "find_tickets",
        json!({}),
    );
    assert_tool_ok(&resp, "find_tickets after the refused calls");
    let titles = resp.json()["result"]["structuredContent"].to_string();
    assert!(!titles.contains("twice"), "a refused call ran: {titles}");

    // The same subject with a token lacking tickets:write: reading works (same principal, same
    // session), writing gets 403 insufficient_scope.
    let reader = auth.token(claims("alice", "tickets:read"), 3600);
    assert_tool_ok(
        &call(
            port,
            &sid,
            Some(&reader),
            next_id(),
            "find_tickets",
            json!({}),
        ),
        "find_tickets with tickets:read",
    );
    let id = next_id();
    let resp = call(
        port,
        &sid,
        Some(&reader),
        id,
        "close_ticket",
        json!({"id": 1, "resolution": "x"}),
    );
    assert_eq!(
        resp.status,
        403,
        "close_ticket without tickets:write:\n{}",
        resp.describe()
    );
    let challenge = resp.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"tickets:write\""), "{challenge}");
    assert_eq!(resp.json()["id"], id, "{}", resp.describe());
    assert_eq!(resp.json()["error"]["code"], -32001, "{}", resp.describe());
    // A resource read and a prompt need their scope too.
    let read = json!({"jsonrpc": "2.0", "id": next_id(), "method": "resources/read", "params": {"uri": "helpdesk://policies/sla"}});
    let nothing = auth.token(claims("alice", "profile"), 3600);
    let resp = post_with(
        port,
        Some(&sid),
        &[("Authorization", &bearer(&nothing))],
        &read,
        HTTP_LIMIT,
    );
    assert_eq!(
        resp.status,
        403,
        "resources/read without tickets:read:\n{}",
        resp.describe()
    );
    let resp = post_with(
        port,
        Some(&sid),
        &[("Authorization", &bearer(&reader))],
        &read,
        HTTP_LIMIT,
    );
    assert_eq!(
        resp.status,
        200,
        "resources/read with tickets:read:\n{}",
        resp.describe()
    );
    // So do watching a resource and completing a template's argument (found by review: a
    // completer listed every ticket id to a token without tickets:read, and a subscription
    // told it when tickets changed).
    let watch = json!({"jsonrpc": "2.0", "id": next_id(), "method": "resources/subscribe", "params": {"uri": "helpdesk://policies/sla"}});
    let complete = json!({"jsonrpc": "2.0", "id": next_id(), "method": "completion/complete", "params": {
        "ref": {"type": "ref/resource", "uri": "helpdesk://tickets/{id}"},
        "argument": {"name": "id", "value": ""}}});
    for msg in [&watch, &complete] {
        for (token, status) in [(&nothing, 403), (&reader, 200)] {
            let resp = post_with(
                port,
                Some(&sid),
                &[("Authorization", &bearer(token))],
                msg,
                HTTP_LIMIT,
            );
            assert_eq!(resp.status, status, "{msg}:\n{}", resp.describe());
        }
    }

    // The 2026-07-28 era (no session): the same scope rules.
    let stateless = |token: &str, name: &str, args: Value, id: u64| {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": name, "arguments": args, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "auth-test", "version": "1"}}}});
        let auth = bearer(token);
        let headers = [
            ("Authorization", auth.as_str()),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", name),
        ];
        post_with(port, None, &headers, &msg, HTTP_LIMIT)
    };
    let resp = stateless(&reader, "find_tickets", json!({}), next_id());
    assert_tool_ok(&resp, "a 2026-07-28 find_tickets with tickets:read");
    let id = next_id();
    let resp = stateless(
        &reader,
        "open_ticket",
        json!({"title": "t", "priority": "low"}),
        id,
    );
    assert_eq!(
        resp.status,
        403,
        "a 2026-07-28 open_ticket without tickets:write:\n{}",
        resp.describe()
    );
    assert_eq!(resp.json()["id"], id, "{}", resp.describe());
    // Listening to a resource's changes needs the scope reading it does.
    let listen = |token: &str| {
        let msg = json!({"jsonrpc": "2.0", "id": next_id(), "method": "subscriptions/listen", "params": {
            "notifications": {"resourceSubscriptions": ["helpdesk://policies/sla"]},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}});
        let auth = bearer(token);
        let headers = [
            ("Authorization", auth.as_str()),
            ("Accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "subscriptions/listen"),
        ];
        post_with(port, None, &headers, &msg, Duration::from_secs(2))
    };
    let resp = listen(&nothing);
    assert_eq!(
        resp.status,
        403,
        "listen without tickets:read:\n{}",
        resp.describe()
    );

    // Tokens that must not verify: 401 invalid_token, the id echoed.
    let refused = [
        ("expired", auth.token(claims("alice", BOTH), -300)),
        (
            "for another audience",
            auth.token(
                json!({"sub": "alice", "aud": "http://127.0.0.1:1/mcp", "scope": BOTH}),
                3600,
            ),
        ),
        (
            "signed by an unknown key",
            auth.foreign_token(claims("alice", BOTH)),
        ),
        (
            "unsigned (alg none)",
            unsigned_token(
                &json!({"iss": auth.issuer(), "sub": "alice", "aud": resource, "scope": BOTH, "exp": 4_102_444_800u64}),
            ),
        ),
        ("not a JWT", "opaque-garbage".to_string()),
    ];
    for (what, token) in &refused {
        let id = next_id();
        let resp = call(port, &sid, Some(token), id, "find_tickets", json!({}));
        assert_unauthorized(&resp, port, Some(id), true, what);
    }
    // And the session still serves its principal.
    assert_tool_ok(
        &call(
            port,
            &sid,
            Some(&writer),
            next_id(),
            "find_tickets",
            json!({}),
        ),
        "after the refusals",
    );
    // No token was logged.
    let log = desk.log();
    for (what, token) in refused.iter().chain([("writer", writer.clone())].iter()) {
        assert!(
            !log.contains(token.as_str()),
            "the {what} token is in the log"
        );
    }
}

#[test]
fn a_rotated_signing_key_is_followed_without_a_restart() {
    let auth = AuthServer::start();
    let dir = TempDir::new("auth-rotate");
    let desk = desk_with_auth(&auth, &dir, None, &[]);
    let port = desk.port();
    let resource = resource_for(port);
    let before = auth.token(json!({"sub": "bob", "aud": resource, "scope": BOTH}), 3600);
    let sid = open_with(port, &before);
    assert_tool_ok(
        &call(
            port,
            &sid,
            Some(&before),
            next_id(),
            "find_tickets",
            json!({}),
        ),
        "before the rotation",
    );

    let kid = auth.rotate();
    let after = auth.token(json!({"sub": "bob", "aud": resource, "scope": BOTH}), 3600);
    assert_eq!(
        kid_of(&after),
        kid,
        "the new token is signed with the new key"
    );
    assert_ne!(kid_of(&before), kid);
    // The refetch for an unknown kid is rate-bounded (200 ms here): the first call after the
    // rotation may come within it of the server's last fetch, so give it that long, once.
    std::thread::sleep(Duration::from_millis(250));
    let resp = call(
        port,
        &sid,
        Some(&after),
        next_id(),
        "find_tickets",
        json!({}),
    );
    assert_tool_ok(&resp, "with a token signed by the rotated-in key");
    // The old key is still published, so older tokens still work.
    assert_tool_ok(
        &call(
            port,
            &sid,
            Some(&before),
            next_id(),
            "find_tickets",
            json!({}),
        ),
        "with the older token",
    );
}

#[test]
fn a_session_serves_only_its_principal_on_every_instance() {
    let auth = AuthServer::start();
    let redis = RedisServer::start();
    let url = redis.url();
    // One fleet, one resource URI (the load balancer's), whichever instance answers.
    let resource = "http://desk.fleet.test/mcp";
    let dir = TempDir::new("auth-fleet");
    let common = [
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_HOST", ""),
        ("REDIS_PORT", ""),
        ("MCP_SESSION_SECRET", SESSION_SECRET),
    ];
    let mut a_env = common.to_vec();
    a_env.push(("MACHINE_ID", "desk-a"));
    let mut b_env = common.to_vec();
    b_env.push(("MACHINE_ID", "desk-b"));
    let a = desk_with_auth(&auth, &dir, Some(resource), &a_env);
    let b = desk_with_auth(&auth, &dir, Some(resource), &b_env);

    let p = auth.token(json!({"sub": "pat", "aud": resource, "scope": BOTH}), 3600);
    let q = auth.token(
        json!({"sub": "quinn", "aud": resource, "scope": BOTH}),
        3600,
    );
    let sid = open_with(a.port(), &p);

    // The stored record names its principal by a short fingerprint, never a token.
    let stored = redis.cli(&["GET", &format!("mcp:session:{sid}")]);
    let record: Value =
        serde_json::from_str(&stored).unwrap_or_else(|e| panic!("record {stored:?}: {e}"));
    let fingerprint = record["authorizationId"]
        .as_str()
        .unwrap_or_else(|| panic!("no authorizationId: {record}"));
    assert_eq!(fingerprint.len(), 22, "{record}");
    assert!(!stored.contains(&p) && !stored.contains("pat"), "{stored}");

    // P's session with Q's token: the answer of an unknown session, on the instance that holds
    // it and on the other (which relays it to the holder).
    for (who, port) in [("desk-a", a.port()), ("desk-b", b.port())] {
        let id = next_id();
        let resp = call(port, &sid, Some(&q), id, "find_tickets", json!({}));
        assert_eq!(resp.status, 404, "{who}, Q's token:\n{}", resp.describe());
        let body = resp.json();
        assert_eq!(body["error"]["code"], -32000, "{who}:\n{}", resp.describe());
        assert_eq!(
            body["error"]["message"],
            "session not initialized",
            "{who}:\n{}",
            resp.describe()
        );
        assert_eq!(body["id"], id, "{who}:\n{}", resp.describe());
        // No token at all: 401 before any lookup.
        let id = next_id();
        assert_unauthorized_fleet(&call(port, &sid, None, id, "find_tickets", json!({})), who);
        // P's own, refreshed token (same subject): served.
        let refreshed = auth.token(json!({"sub": "pat", "aud": resource, "scope": BOTH}), 1800);
        assert_ne!(refreshed, p);
        assert_tool_ok(
            &call(
                port,
                &sid,
                Some(&refreshed),
                next_id(),
                "find_tickets",
                json!({}),
            ),
            &format!("{who}, P's refreshed token"),
        );
    }
    assert!(
        a.log()
            .contains("[TransportService] Session token mismatch during lookup"),
        "desk-a's log lacks the mismatch line:\n{}",
        a.log()
    );

    // desk-a killed: its session is desk-b's to take over, for P only. Q's request (which the
    // fault harness's intruder sends) is answered as a stranger's and moves nothing: before,
    // desk-b took the session over for Q and only then refused Q.
    let mut a = a;
    assert!(a.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    let key = format!("mcp:session:{sid}");
    let before = redis.cli(&["GET", &key]);
    for _ in 0..2 {
        let resp = call(
            b.port(),
            &sid,
            Some(&q),
            next_id(),
            "find_tickets",
            json!({}),
        );
        assert_eq!(resp.status, 404, "Q, desk-a gone:\n{}", resp.describe());
    }
    assert_eq!(
        redis.cli(&["GET", &key]),
        before,
        "a stranger's request changed the stored session (taken over for it)"
    );
    let resp = call(
        b.port(),
        &sid,
        Some(&p),
        next_id(),
        "find_tickets",
        json!({}),
    );
    assert_tool_ok(&resp, "P, desk-a gone");
    assert_eq!(machine_of(&resp), Some("desk-b"), "{}", resp.describe());
    assert_ne!(
        redis.cli(&["GET", &key]),
        before,
        "P's request took it over"
    );
}

fn assert_unauthorized_fleet(resp: &RawResponse, who: &str) {
    assert_eq!(resp.status, 401, "{who}, no token:\n{}", resp.describe());
    let challenge = resp.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains(
            "resource_metadata=\"http://desk.fleet.test/.well-known/oauth-protected-resource/mcp\""
        ),
        "{who}: {challenge}"
    );
}

/// The official TypeScript SDK client: no token at first, the server's 401 leads it to the
/// metadata, the authorization server and a client-credentials token for this resource; then
/// it calls a tool that needs `tickets:write`, as its client id.
#[test]
fn the_typescript_sdk_client_follows_the_401_to_a_token_and_calls_a_tool() {
    let auth = AuthServer::start();
    let dir = TempDir::new("auth-ts");
    let desk = desk_with_auth(&auth, &dir, None, &[]);
    let mut cmd = std::process::Command::new("node");
    cmd.arg(support::repo_root().join("tools/clients/ts-v1/auth-client.mjs"))
        .arg(desk.mcp_url())
        .arg("desk-client");
    let out = support::run(&mut cmd, Duration::from_secs(60), dir.path());
    assert!(out.success(), "auth-client.mjs failed:\n{}", out.describe());
    let report: Value = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "auth-client.mjs printed no report ({e}):\n{}",
            out.describe()
        )
    });
    assert_eq!(report["ok"], true, "{report}");
    let steps = report["steps"].to_string();
    assert!(steps.contains("opened by desk-client"), "{steps}");
    eprintln!("steps: {steps}");
}

/// Opaque tokens, with an introspection endpoint configured: an active token for this resource
/// is served (and its answer reused, not asked again per call), an unknown one or one for
/// another resource refused.
#[test]
fn opaque_tokens_are_introspected_and_the_answer_kept() {
    let auth = AuthServer::start();
    let dir = TempDir::new("auth-opaque");
    let endpoint = auth.introspection_endpoint();
    let desk = desk_with_auth(
        &auth,
        &dir,
        None,
        &[
            ("FLEETMCP_AUTH_INTROSPECTION_ENDPOINT", endpoint.as_str()),
            ("FLEETMCP_AUTH_INTROSPECTION_CLIENT_ID", "help-desk"),
            (
                "FLEETMCP_AUTH_INTROSPECTION_CLIENT_SECRET",
                "introspection-secret",
            ),
        ],
    );
    let port = desk.port();
    let resource = resource_for(port);
    let token = auth.opaque_token(json!({"sub": "olga", "aud": resource, "scope": BOTH}));
    let sid = open_with(port, &token);
    let before = auth.introspections();
    for _ in 0..3 {
        assert_tool_ok(
            &call(
                port,
                &sid,
                Some(&token),
                next_id(),
                "find_tickets",
                json!({}),
            ),
            "an opaque token",
        );
    }
    assert_eq!(
        auth.introspections(),
        before,
        "the introspection answer is kept"
    );
    let resp = call(
        port,
        &sid,
        Some(&token),
        next_id(),
        "open_ticket",
        json!({"title": "t", "priority": "low"}),
    );
    assert_tool_ok(&resp, "open_ticket with an opaque token");
    assert_eq!(
        resp.json()["result"]["structuredContent"]["opened_by"],
        "olga"
    );

    let elsewhere =
        auth.opaque_token(json!({"sub": "olga", "aud": "http://127.0.0.1:1/mcp", "scope": BOTH}));
    for (what, t) in [
        ("unknown opaque token", "never-issued-token"),
        ("opaque token for another resource", elsewhere.as_str()),
    ] {
        let id = next_id();
        assert_unauthorized(
            &call(port, &sid, Some(t), id, "find_tickets", json!({})),
            port,
            Some(id),
            true,
            what,
        );
    }
    assert!(
        !desk.log().contains("introspection-secret"),
        "the client secret is in the log"
    );
}

/// The 2024-11-05 transport under the same rules: `GET /sse` and `POST /message` need a token,
/// a tool needs its scope (the POST itself answers `403`, nothing reaches the stream), and the
/// session serves only the principal that opened it.
#[test]
fn the_2024_11_05_transport_follows_the_same_rules() {
    let auth = AuthServer::start();
    let dir = TempDir::new("auth-legacy");
    let desk = desk_with_auth(&auth, &dir, None, &[]);
    let port = desk.port();
    let resource = resource_for(port);
    let reader = auth.token(
        json!({"sub": "carol", "aud": resource, "scope": "tickets:read"}),
        3600,
    );
    let stranger = auth.token(
        json!({"sub": "mallory", "aud": resource, "scope": BOTH}),
        3600,
    );
    let carol = bearer(&reader);
    let (mut stream, endpoint) = open_legacy_stream(port, &[("Authorization", &carol)]);
    assert!(endpoint.starts_with("/message?sessionId="), "{endpoint}");
    let message = |token: Option<&str>, body: &Value| {
        let auth = token.map(bearer);
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(a) = &auth {
            headers.push(("Authorization", a.as_str()));
        }
        http(
            port,
            "POST",
            &endpoint,
            &headers,
            Some(&body.to_string()),
            HTTP_LIMIT,
        )
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}});
    assert_eq!(message(Some(&reader), &init).status, 202);
    read_stream_until(&mut stream, &["\"protocolVersion\":\"2024-11-05\""]);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(message(Some(&reader), &initialized).status, 202);

    // Her scope lets her read: the answer comes on the stream.
    let find = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {}}});
    assert_eq!(message(Some(&reader), &find).status, 202);
    read_stream_until(&mut stream, &["\"id\":2", "\"tickets\""]);

    // Not write: the POST answers 403 naming the scope.
    let open = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "open_ticket", "arguments": {"title": "printer on fire"}}});
    let resp = message(Some(&reader), &open);
    assert_eq!(resp.status, 403, "{}", resp.describe());
    let challenge = resp.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("insufficient_scope") && challenge.contains("tickets:write"),
        "{challenge}"
    );

    // No token: 401. Another principal's token: the session is not theirs.
    assert_unauthorized(
        &message(None, &find),
        port,
        Some(2),
        false,
        "POST /message without a token",
    );
    let resp = message(Some(&stranger), &find);
    assert_eq!(resp.status, 404, "{}", resp.describe());
    // The refusal is logged, with a digest of the session id: the id itself is a credential.
    let sid = endpoint.trim_start_matches("/message?sessionId=");
    assert!(
        log_has(&desk, "Session token mismatch during lookup", LOG_LIMIT),
        "{}",
        desk.log()
    );
    assert!(
        !desk.log().contains(sid),
        "the session id in full in the log:\n{}",
        desk.log()
    );
    // Nothing of those reached the stream; carol's next call still does.
    let again = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {}}});
    assert_eq!(message(Some(&reader), &again).status, 202);
    let seen = read_stream_until(&mut stream, &["\"id\":4"]);
    assert!(!seen.contains("\"id\":3"), "{seen}");
    assert!(!desk.log().contains(&reader), "a token was logged");
}

/// Scopes are separated by the space character only (RFC 6749 3.3): a token whose `scope` joins
/// `tickets:read` and `tickets:write` with a no-break space, a tab or a newline has one odd
/// scope, neither of the two, so it can neither read nor write; with a plain space it does both.
#[test]
fn scopes_are_separated_by_the_space_character_only() {
    let auth = AuthServer::start();
    let dir = TempDir::new("auth-scope-split");
    let desk = desk_with_auth(&auth, &dir, None, &[]);
    let port = desk.port();
    let resource = resource_for(port);
    for sep in ["\u{a0}", "\t", "\n"] {
        let token = auth.token(
            json!({"sub": "eve", "aud": resource, "scope": format!("tickets:read{sep}tickets:write")}),
            3600,
        );
        let sid = open_with(port, &token);
        let resp = call(
            port,
            &sid,
            Some(&token),
            next_id(),
            "open_ticket",
            json!({"title": "split on the wrong separator"}),
        );
        assert_eq!(
            resp.status,
            403,
            "scope joined with {sep:?} granted tickets:write:\n{}",
            resp.describe()
        );
    }
    let token = auth.token(json!({"sub": "eve", "aud": resource, "scope": BOTH}), 3600);
    let sid = open_with(port, &token);
    let resp = call(
        port,
        &sid,
        Some(&token),
        next_id(),
        "open_ticket",
        json!({"title": "a plain space"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.describe());
}

/// A 2024-11-05 stream belongs to the principal that opened it: another principal who learns
/// its session id cannot `initialize` it through `/message` (404, nothing on its principal's
/// stream), and that principal then initializes and uses it as usual.
#[test]
fn a_2024_11_05_stream_is_bound_to_the_principal_that_opened_it() {
    let auth = AuthServer::start();
    let dir = TempDir::new("auth-legacy-bound");
    let desk = desk_with_auth(&auth, &dir, None, &[]);
    let port = desk.port();
    let resource = resource_for(port);
    let carol = auth.token(
        json!({"sub": "carol", "aud": resource, "scope": BOTH}),
        3600,
    );
    let mallory = auth.token(
        json!({"sub": "mallory", "aud": resource, "scope": BOTH}),
        3600,
    );
    let carol_auth = bearer(&carol);
    let (mut stream, endpoint) = open_legacy_stream(port, &[("Authorization", &carol_auth)]);
    let message = |token: &str, body: &Value| {
        let auth = bearer(token);
        http(
            port,
            "POST",
            &endpoint,
            &[
                ("Content-Type", "application/json"),
                ("Authorization", &auth),
            ],
            Some(&body.to_string()),
            HTTP_LIMIT,
        )
    };
    let init = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}})
    };
    let resp = message(&mallory, &init(7101));
    assert_eq!(
        resp.status,
        404,
        "another principal initialized carol's stream:\n{}",
        resp.describe()
    );
    let resp = message(&carol, &init(7102));
    assert_eq!(resp.status, 202, "{}", resp.describe());
    let seen = read_stream_until(&mut stream, &["\"id\":7102"]);
    assert!(!seen.contains("\"id\":7101"), "{seen}");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(message(&carol, &note).status, 202);
    let find = json!({"jsonrpc": "2.0", "id": 7103, "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {}}});
    assert_eq!(message(&carol, &find).status, 202);
    read_stream_until(&mut stream, &["\"id\":7103"]);
    assert_eq!(message(&mallory, &find).status, 404);
}
