//! Authenticated relay hops, end to end: `help-desk` processes in distributed mode on one real
//! `redis-server`. A request that claims to be relayed is served only if its MAC verifies under
//! the fleet's secret and it is not a replay; everything else is refused (`403`, a JSON-RPC
//! error with `id: null`, a warning in the holder's log) before the tool runs. A genuine hop,
//! recorded by a TCP proxy between the relaying instance and the holder, carries no credential
//! in clear, and replaying it is refused.
//!
//! The observable effect of a tool run is a ticket: `open_ticket` with a title no other call
//! uses, then `find_tickets` with that title on the holder.
//!
//! Needs `redis-server` and `redis-cli` on `PATH` (or `REDIS_SERVER` / `REDIS_CLI`). Every wait
//! is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support::raw_http::{self, RawResponse};
use support_redis::RedisServer;

/// The holder's warning for every refused relayed request.
const REFUSED: &str = "[HA] Refused a relayed request from";

// ---------------------------------------------------------------------------------------------
// Instances and a session-era client

/// A POST to `/mcp` in session `sid` (if any), with `extra` headers.
fn post(port: u16, sid: Option<&str>, extra: &[(&str, &str)], msg: &Value) -> RawResponse {
    post_with(port, sid, extra, msg, HTTP_LIMIT)
}

fn open_ticket_call(title: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "tools/call",
        "params": {"name": "open_ticket", "arguments": {"title": title}},
    })
}

/// How many tickets titled `title` the instance on `port` has: how often `open_ticket` ran
/// there with it.
fn tickets_titled(port: u16, sid: &str, title: &str) -> usize {
    let call = json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "tools/call",
        "params": {"name": "find_tickets", "arguments": {"query": title}},
    });
    let resp = post(port, Some(sid), &[], &call);
    assert_tool_ok(&resp, "find_tickets on the holder");
    let tickets = resp.json()["result"]["structuredContent"]["tickets"].clone();
    let tickets = tickets
        .as_array()
        .unwrap_or_else(|| panic!("no ticket list:\n{}", resp.describe()));
    tickets.iter().filter(|t| t["title"] == title).count()
}

/// The refusal of a relayed request: `403`, a JSON-RPC error with `id: null`.
fn assert_refused(resp: &RawResponse, why: &str, what: &str) {
    assert_refused_with(resp, 403, why, what);
}

/// [`assert_refused`] with another status (a hop signed before its holder started: `503`).
fn assert_refused_with(resp: &RawResponse, status: u16, why: &str, what: &str) {
    assert_eq!(resp.status, status, "{what}:\n{}", resp.describe());
    let msg = resp.json();
    assert_eq!(msg["id"], Value::Null, "{what}:\n{}", resp.describe());
    assert_eq!(msg["error"]["code"], -32000, "{what}:\n{}", resp.describe());
    let message = msg["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Relayed request refused: ") && message.contains(why),
        "{what}: {message:?} lacks {why:?}\n{}",
        resp.describe()
    );
}

/// A title no other call in this test process uses.
fn unique_title(what: &str) -> String {
    format!("{what}-{}-{}", std::process::id(), next_id())
}

// ---------------------------------------------------------------------------------------------
// A recording TCP proxy

/// What one proxied connection's connecting side sent.
type Recording = Arc<Mutex<Vec<u8>>>;

/// Forwards every connection it accepts to `127.0.0.1:<target>` (set once the holder runs) and
/// records what the connecting side sent, one buffer per connection.
struct Recorder {
    port: u16,
    target: Arc<AtomicU16>,
    sent: Arc<Mutex<Vec<Recording>>>,
}

impl Recorder {
    fn start() -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let target = Arc::new(AtomicU16::new(0));
        let sent: Arc<Mutex<Vec<Recording>>> = Arc::default();
        let (t, s) = (target.clone(), sent.clone());
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let port = t.load(Ordering::SeqCst);
                let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
                    continue;
                };
                let record = Arc::new(Mutex::new(Vec::new()));
                s.lock().unwrap().push(record.clone());
                let (c2, s2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                thread::spawn(move || pipe(client, server, Some(record)));
                thread::spawn(move || pipe(s2, c2, None));
            }
        });
        Self { port, target, sent }
    }

    /// Everything sent through the proxy so far, connection after connection.
    fn captured(&self) -> Vec<u8> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| r.lock().unwrap().clone())
            .collect()
    }
}

/// Copies `from` to `to` until either closes, recording the bytes if asked.
fn pipe(mut from: TcpStream, mut to: TcpStream, record: Option<Recording>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(r) = &record {
                    r.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// One HTTP/1.1 request read back from captured bytes.
struct Captured {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// The requests in `bytes` (keep-alive connections carry several), bodies by `Content-Length`.
fn requests_in(bytes: &[u8]) -> Vec<Captured> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(split) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&rest[..split]).into_owned();
        let mut lines = head.split("\r\n");
        let request_line: Vec<&str> = lines.next().unwrap_or_default().split(' ').collect();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        assert!(
            !headers.iter().any(|(k, _)| k == "transfer-encoding"),
            "the relay sends bodies with a length:\n{head}"
        );
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map_or(0, |(_, v)| v.parse().expect("a length"));
        let body_start = split + 4;
        let body = String::from_utf8_lossy(&rest[body_start..body_start + len]).into_owned();
        out.push(Captured {
            method: request_line[0].to_string(),
            path: request_line[1].to_string(),
            headers,
            body,
        });
        rest = &rest[body_start + len..];
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Tests

/// A request sent straight to the holder with the relay marker but without a MAC, or with one
/// made up, is refused before the tool runs, and the holder says so in its log; the same call
/// without the marker (a client's) runs.
#[test]
fn a_forged_relayed_request_is_refused_and_does_not_run() {
    let redis = RedisServer::start();
    let a = distributed_desk("desk-a", &redis.url(), &[]);
    let sid = open_session(a.port());

    let title = unique_title("forged");
    let no_mac = post(
        a.port(),
        Some(&sid),
        &[("x-fleetmcp-relayed-by", "desk-b")],
        &open_ticket_call(&title),
    );
    assert_refused(&no_mac, "relay headers are missing", "the marker alone");
    assert_eq!(
        no_mac.header("x-frontmcp-machine-id"),
        Some("desk-a"),
        "the refusal names the holder:\n{}",
        no_mac.describe()
    );
    assert_log_has(
        &a,
        "A",
        "[HA] Refused a relayed request from desk-b: relay headers are missing",
    );

    // Well formed, under no key of this fleet: 16 and 32 bytes of zeros, base64url.
    let made_up = format!(
        "v1;{};AAAAAAAAAAAAAAAAAAAAAA;accept,content-type,mcp-protocol-version,mcp-session-id;{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
        "A".repeat(43)
    );
    let wrong_mac = post(
        a.port(),
        Some(&sid),
        &[
            ("x-fleetmcp-relayed-by", "desk-mallory"),
            ("x-fleetmcp-relay-auth", &made_up),
        ],
        &open_ticket_call(&title),
    );
    assert_refused(&wrong_mac, "MAC does not verify", "a made-up MAC");
    assert_log_has(
        &a,
        "A",
        "[HA] Refused a relayed request from desk-mallory: its MAC does not verify",
    );

    assert_eq!(
        tickets_titled(a.port(), &sid, &title),
        0,
        "no refused call ran the tool"
    );
    // The control: the same call as a client's runs, and shows up.
    assert_tool_ok(
        &post(a.port(), Some(&sid), &[], &open_ticket_call(&title)),
        "the call without relay headers",
    );
    assert_eq!(tickets_titled(a.port(), &sid, &title), 1);
}

/// A genuine hop from B to the holder A, recorded by a proxy at A's advertised address, carries
/// the client's `Authorization` and `Cookie` sealed, not in clear; sent again to A, the recorded
/// request is refused as a replay and the tool runs only once.
#[test]
fn a_recorded_hop_carries_no_credential_in_clear_and_its_replay_is_refused() {
    let redis = RedisServer::start();
    let url = redis.url();
    let proxy = Recorder::start();
    let advertised = format!("127.0.0.1:{}", proxy.port);
    let a = distributed_desk(
        "desk-a",
        &url,
        &[("FLEETMCP_ADVERTISE_ADDRESS", advertised.as_str())],
    );
    proxy.target.store(a.port(), Ordering::SeqCst);
    let b = distributed_desk("desk-b", &url, &[]);
    let sid = open_session(a.port());

    let token = format!("Bearer relay-auth-token-{}", std::process::id());
    let cookie = format!("relay_auth_cookie={}", std::process::id());
    let title = unique_title("relayed");
    let resp = post(
        b.port(),
        Some(&sid),
        &[("Authorization", &token), ("Cookie", &cookie)],
        &open_ticket_call(&title),
    );
    assert_tool_ok(&resp, "a call for A's session, sent to B");
    assert_eq!(
        resp.header("x-frontmcp-machine-id"),
        Some("desk-a"),
        "served by A:\n{}",
        resp.describe()
    );

    let captured = proxy.captured();
    let wire = String::from_utf8_lossy(&captured);
    let requests = requests_in(&captured);
    let hop = requests
        .iter()
        .find(|r| r.body.contains(&title))
        .unwrap_or_else(|| panic!("the hop did not go through the proxy:\n{wire}"));
    assert!(
        !wire.contains(&token) && !wire.contains("relay-auth-token"),
        "the Authorization value is in clear on the hop:\n{wire}"
    );
    assert!(
        !wire.contains(&cookie),
        "the cookie is in clear on the hop:\n{wire}"
    );
    for name in ["authorization", "cookie"] {
        assert!(
            !hop.headers.iter().any(|(k, _)| k == name),
            "{name} on the hop:\n{wire}"
        );
    }
    for name in [
        "x-fleetmcp-relayed-by",
        "x-fleetmcp-relay-auth",
        "x-fleetmcp-relay-sealed",
    ] {
        assert!(
            hop.headers.iter().any(|(k, _)| k == name),
            "{name} missing on the hop:\n{wire}"
        );
    }

    // The recorded request, sent to A again (straight to its port) at once: well within the
    // replay window, with a MAC that verifies, and refused for its nonce.
    let headers: Vec<(&str, &str)> = hop
        .headers
        .iter()
        .filter(|(k, _)| k != "host" && k != "content-length")
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let body = (!hop.body.is_empty()).then_some(hop.body.as_str());
    let replayed = http(a.port(), &hop.method, &hop.path, &headers, body, HTTP_LIMIT);
    assert_refused(&replayed, "a replay", "the recorded hop, replayed");
    assert_log_has(
        &a,
        "A",
        "[HA] Refused a relayed request from desk-b: its nonce was already used (a replay)",
    );
    assert_eq!(
        tickets_titled(a.port(), &sid, &title),
        1,
        "the tool ran for the genuine hop only"
    );
    assert_eq!(
        a.log().matches(REFUSED).count(),
        1,
        "the genuine hop was not refused:\n{}",
        a.log()
    );
}

/// An instance whose current secret is another one (it still opens the fleet's session ids as
/// a previous secret) relays with a MAC the holder cannot verify: refused, the tool does not
/// run; an instance on the fleet's secret relays the same call fine.
#[test]
fn a_hop_signed_under_another_secret_is_refused() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let c = distributed_desk(
        "desk-c",
        &url,
        &[
            ("MCP_SESSION_SECRET", "another-fleets-secret-entirely"),
            ("MCP_SESSION_SECRET_PREVIOUS", support::SESSION_SECRET),
        ],
    );
    let sid = open_session(a.port());
    let title = unique_title("other-secret");

    let resp = post(c.port(), Some(&sid), &[], &open_ticket_call(&title));
    assert_refused(
        &resp,
        "MAC does not verify",
        "a hop signed under another secret",
    );
    assert_eq!(
        resp.header("x-frontmcp-machine-id"),
        Some("desk-a"),
        "refused by the holder, not by C:\n{}",
        resp.describe()
    );
    assert_log_has(
        &a,
        "A",
        "[HA] Refused a relayed request from desk-c: its MAC does not verify",
    );
    assert_eq!(
        tickets_titled(a.port(), &sid, &title),
        0,
        "the tool did not run"
    );

    let b = distributed_desk("desk-b", &url, &[]);
    assert_tool_ok(
        &post(b.port(), Some(&sid), &[], &open_ticket_call(&title)),
        "the same call through an instance on the fleet's secret",
    );
    assert_eq!(tickets_titled(a.port(), &sid, &title), 1);
}

/// Reads `stream` until `needle` shows up; everything read so far. Fails the test after
/// [`HTTP_LIMIT`] or if the stream ends first.
fn read_until(stream: &mut TcpStream, seen: &mut String, needle: &str) {
    let start = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    let mut buf = [0u8; 4096];
    while !seen.contains(needle) {
        assert!(
            start.elapsed() < HTTP_LIMIT,
            "no {needle:?} on the stream:\n{seen}"
        );
        match stream.read(&mut buf) {
            Ok(0) => panic!("the stream ended before {needle:?}:\n{seen}"),
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("reading the stream: {e}\n{seen}"),
        }
    }
}

/// The other shapes of a relayed request verify too: a bodiless GET (the session's stream)
/// and the 2024-11-05 `/message?sessionId=…` POST, whose query is part of the MAC; the
/// holder refuses none of them.
#[test]
fn a_relayed_get_stream_and_legacy_message_post_verify() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let b_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, b.port()));
    let b_host = format!("127.0.0.1:{}", b.port());

    let sid = open_session(a.port());
    let mut get = raw_http::open(
        b_addr,
        "GET",
        "/mcp",
        &[
            ("Host", &b_host),
            ("Accept", "text/event-stream"),
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", PROTOCOL_VERSION),
        ],
        None,
        HTTP_LIMIT,
    )
    .expect("open the GET stream through B");
    let mut seen = String::new();
    read_until(&mut get, &mut seen, "\r\n\r\n");
    assert!(seen.starts_with("HTTP/1.1 200"), "the relayed GET:\n{seen}");
    assert!(
        seen.to_ascii_lowercase()
            .contains("x-frontmcp-machine-id: desk-a"),
        "served by A:\n{seen}"
    );

    // A 2024-11-05 stream on A; its POSTs go to B, which relays them with their query.
    let a_host = format!("127.0.0.1:{}", a.port());
    let mut sse = raw_http::open(
        SocketAddr::from((Ipv4Addr::LOCALHOST, a.port())),
        "GET",
        "/sse",
        &[("Host", &a_host), ("Accept", "text/event-stream")],
        None,
        HTTP_LIMIT,
    )
    .expect("open /sse on A");
    let mut events = String::new();
    read_until(&mut sse, &mut events, "sessionId=");
    read_until(&mut sse, &mut events, "\n\n");
    let endpoint = events
        .lines()
        .find_map(|l| l.strip_prefix("data: /message?sessionId="))
        .unwrap_or_else(|| panic!("no endpoint event:\n{events}"))
        .trim()
        .to_string();
    let message_path = format!("/message?sessionId={endpoint}");
    let legacy_post = |port: u16, msg: &Value| {
        http(
            port,
            "POST",
            &message_path,
            &[("Content-Type", "application/json")],
            Some(&msg.to_string()),
            HTTP_LIMIT,
        )
    };
    // Initialized on A (where its stream is), so that the fleet knows where the session is.
    let init = json!({"jsonrpc": "2.0", "id": 4241, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "old", "version": "0"}}});
    assert_eq!(legacy_post(a.port(), &init).status, 202);
    read_until(&mut sse, &mut events, "\"id\":4241");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(legacy_post(a.port(), &note).status, 202);
    let list = json!({"jsonrpc": "2.0", "id": 4242, "method": "tools/list"});
    let resp = legacy_post(b.port(), &list);
    assert_eq!(
        resp.status,
        202,
        "the relayed /message POST:\n{}",
        resp.describe()
    );
    assert_eq!(resp.header("x-frontmcp-machine-id"), Some("desk-a"));
    read_until(&mut sse, &mut events, "\"id\":4242");
    assert_eq!(
        a.log().matches(REFUSED).count(),
        0,
        "nothing refused:\n{}",
        a.log()
    );
}

/// The `fleetmcp.toml` of `deploy/k8s/configmap.yaml` (its `[http] allowed_hosts`), written to
/// `dir`: the Host settings the Kubernetes manifests ship.
fn k8s_toml(dir: &support::TempDir) -> std::path::PathBuf {
    let manifest = support::repo_root().join("deploy/k8s/configmap.yaml");
    let text = std::fs::read_to_string(&manifest).expect("read deploy/k8s/configmap.yaml");
    let (_, block) = text
        .split_once("fleetmcp.toml: |\n")
        .expect("configmap.yaml has fleetmcp.toml");
    let toml: String = block
        .lines()
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    assert!(toml.contains("allowed_hosts"), "{toml}");
    let path = dir.path().join("fleetmcp.toml");
    std::fs::write(&path, toml).expect("write fleetmcp.toml");
    path
}

/// The shipped Kubernetes settings (`deploy/k8s`): bound to every interface, `allowed_hosts`
/// from the ConfigMap, each instance advertising an address no allow-list names (the pod's
/// `…fleetmcp-peers:3000`; here `127.0.0.2:<port>`, also loopback but not a loopback *name*).
/// A session held by A, a call sent to B with a `Host` the list allows: relayed and answered by
/// A (the hop's own `Host` is A's advertised address; the holder checks the client's). A `Host`
/// the list does not name is still refused, on B, before any relay.
#[test]
fn the_kubernetes_host_settings_relay_a_call_with_an_allowed_host() {
    let redis = RedisServer::start();
    let url = redis.url();
    let dir = support::TempDir::new("k8s-hosts");
    let toml = k8s_toml(&dir);
    let toml = toml.to_string_lossy().into_owned();
    let desk = |machine: &str| {
        let port = support::free_port();
        let advertised = format!("127.0.0.2:{port}");
        let env: Vec<(&str, &str)> = vec![
            ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
            ("FRONTMCP_BIND_ADDRESS", "all"),
            ("FLEETMCP_CONFIG", &toml),
            ("FLEETMCP_ADVERTISE_ADDRESS", &advertised),
            ("MACHINE_ID", machine),
            ("REDIS_URL", &url),
            ("REDIS_HOST", ""),
            ("REDIS_PORT", ""),
        ];
        support::Instance::start_on(env!("CARGO_BIN_EXE_help-desk"), port, &env)
    };
    let a = desk("fleetmcp-0");
    let b = desk("fleetmcp-1");
    let send = |port: u16, host: &str, sid: Option<&str>, msg: &Value| {
        let body = msg.to_string();
        let mut headers = vec![
            ("Host", host),
            ("Content-Type", "application/json"),
            ("Accept", ACCEPT),
        ];
        if let Some(sid) = sid {
            headers.push(("mcp-session-id", sid));
            headers.push(("mcp-protocol-version", PROTOCOL_VERSION));
        }
        raw_http::send(
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            "POST",
            "/mcp",
            &headers,
            Some(&body),
            HTTP_LIMIT,
        )
    };
    let init = json!({"jsonrpc": "2.0", "id": next_id(), "method": "initialize", "params": {
        "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
        "clientInfo": {"name": "k8s", "version": "0"}}});
    let opened = send(a.port(), "fleetmcp", None, &init);
    assert_eq!(
        opened.status,
        200,
        "initialize on A:\n{}",
        opened.describe()
    );
    let sid = opened
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(send(a.port(), "fleetmcp", Some(&sid), &note).status, 202);

    for host in ["fleetmcp", "mcp.example.com", "fleetmcp.default.svc:3000"] {
        let title = unique_title("k8s-host");
        let resp = send(b.port(), host, Some(&sid), &open_ticket_call(&title));
        assert_tool_ok(
            &resp,
            &format!("a call for A's session sent to B as Host {host}"),
        );
        assert_eq!(
            resp.header("x-frontmcp-machine-id"),
            Some("fleetmcp-0"),
            "relayed to and served by A:\n{}",
            resp.describe()
        );
    }
    let foreign = send(b.port(), "evil.example", Some(&sid), &open_ticket_call("x"));
    assert_eq!(foreign.status, 403, "{}", foreign.describe());
    assert_eq!(foreign.header("x-frontmcp-machine-id"), Some("fleetmcp-1"));
    assert!(
        !a.log().contains("is not allowed") && !a.log().contains("foreign Host"),
        "A refused a relayed Host:\n{}",
        a.log()
    );
}

/// A hop recorded on the wire, replayed after the holder restarted (SIGTERM, the same machine
/// id and address, within the replay window): the restarted holder remembers no nonce, and
/// refuses the hop anyway because it was signed before it started. The tool does not run again.
#[test]
fn a_recorded_hop_replayed_after_the_holder_restarts_is_refused() {
    let redis = RedisServer::start();
    let url = redis.url();
    let proxy = Recorder::start();
    let advertised = format!("127.0.0.1:{}", proxy.port);
    let a_env = [("FLEETMCP_ADVERTISE_ADDRESS", advertised.as_str())];
    let mut a = distributed_desk("desk-a", &url, &a_env);
    let a_port = a.port();
    proxy.target.store(a_port, Ordering::SeqCst);
    let b = distributed_desk("desk-b", &url, &[]);
    let sid = open_session(a_port);
    let title = unique_title("restart-replay");
    let resp = post(b.port(), Some(&sid), &[], &open_ticket_call(&title));
    assert_tool_ok(&resp, "a call for A's session, sent to B");
    let captured = proxy.captured();
    let hop = requests_in(&captured)
        .into_iter()
        .find(|r| r.body.contains(&title))
        .expect("the hop went through the proxy");

    // A restarts: SIGTERM, then the same machine id on the same port.
    assert!(
        a.signal_and_wait("TERM", Duration::from_secs(15)).is_some(),
        "A did not exit on SIGTERM"
    );
    let mut env: Vec<(&str, &str)> = vec![
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("MACHINE_ID", "desk-a"),
        ("REDIS_URL", &url),
        ("REDIS_HOST", ""),
        ("REDIS_PORT", ""),
    ];
    env.extend_from_slice(&a_env);
    let a2 = support::Instance::start_on(env!("CARGO_BIN_EXE_help-desk"), a_port, &env);

    let headers: Vec<(&str, &str)> = hop
        .headers
        .iter()
        .filter(|(k, _)| k != "host" && k != "content-length")
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let body = (!hop.body.is_empty()).then_some(hop.body.as_str());
    let replayed = http(
        a2.port(),
        &hop.method,
        &hop.path,
        &headers,
        body,
        HTTP_LIMIT,
    );
    // Refused without running; a 503 with Retry-After, as for a genuine request that crossed
    // the restart (its client retries it, signed anew).
    assert_refused_with(
        &replayed,
        503,
        "signed before this instance started",
        "the recorded hop, replayed on the restarted holder",
    );
    assert_eq!(replayed.header("retry-after"), Some("1"));
    assert_log_has(
        &a2,
        "A (restarted)",
        "[HA] Refused a relayed request from desk-b: it was signed before this instance started",
    );
    let reader = open_session(a2.port());
    assert_eq!(
        tickets_titled(a2.port(), &reader, &title),
        1,
        "the tool ran for the genuine hop only"
    );
}

/// The relay follows no redirect: a holder address that answers `307` to somewhere else gets
/// its `307` passed back to the client, and the signed request is not sent on (the tool does
/// not run).
#[test]
fn the_relay_follows_no_redirect() {
    let redis = RedisServer::start();
    let url = redis.url();
    // At A's advertised address: a server that redirects every request to A's own port.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let redirector = listener.local_addr().expect("address").port();
    let target = Arc::new(AtomicU16::new(0));
    let t = target.clone();
    thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 64 * 1024];
            let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
            let _ = conn.read(&mut buf);
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{}/mcp\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                t.load(Ordering::SeqCst)
            );
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    let advertised = format!("127.0.0.1:{redirector}");
    let a = distributed_desk(
        "desk-a",
        &url,
        &[("FLEETMCP_ADVERTISE_ADDRESS", advertised.as_str())],
    );
    target.store(a.port(), Ordering::SeqCst);
    let b = distributed_desk("desk-b", &url, &[]);
    let sid = open_session(a.port());
    let title = unique_title("redirected");
    let resp = post(b.port(), Some(&sid), &[], &open_ticket_call(&title));
    assert_eq!(
        resp.status,
        307,
        "the relay followed the redirect:\n{}",
        resp.describe()
    );
    assert_eq!(
        tickets_titled(a.port(), &sid, &title),
        0,
        "the redirected hop ran the tool"
    );
}

/// Messages on the fleet's changes channel (`mcp:ha:changes`) are signed like the other
/// channels': one published by anyone who can reach Redis, in the unsigned form or with a
/// made-up MAC, pushes no `resources/updated` into subscribed sessions (and is logged as
/// dropped); a genuine change from another instance still arrives.
#[test]
fn a_forged_message_on_the_changes_channel_reaches_no_session() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = distributed_desk("desk-a", &url, &[]);
    let b = distributed_desk("desk-b", &url, &[]);
    let forged_uri = "helpdesk://tickets/77";
    let real_uri = "helpdesk://tickets/1";
    let sa = open_session(a.port());
    for uri in [forged_uri, real_uri] {
        let subscribe = json!({"jsonrpc": "2.0", "id": next_id(), "method": "resources/subscribe", "params": {"uri": uri}});
        let resp = post(a.port(), Some(&sa), &[], &subscribe);
        assert_eq!(resp.status, 200, "subscribe:\n{}", resp.describe());
    }
    let mut stream = open_get_stream(a.port(), &sa);

    let unsigned = json!({"from": "desk-z", "change": "resourceUpdated", "uri": forged_uri});
    let made_up = json!({
        "from": "desk-z",
        "change": json!({"change": "resourceUpdated", "uri": forged_uri}).to_string(),
        "auth": format!("v1;{};AAAAAAAAAAAAAAAAAAAAAA;accept,x-fleetmcp-relayed-by;{}",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis(),
            "A".repeat(43)),
    });
    for forged in [unsigned, made_up] {
        let receivers = redis.cli(&["PUBLISH", "mcp:ha:changes", &forged.to_string()]);
        assert_ne!(receivers, "0", "nobody listens on mcp:ha:changes");
    }

    // The genuine change, published by B after the forged ones.
    let sb = open_session(b.port());
    let call = |name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
               "params": {"name": name, "arguments": arguments}})
    };
    assert_tool_ok(
        &post(
            b.port(),
            Some(&sb),
            &[],
            &call("open_ticket", json!({"title": "printer"})),
        ),
        "open ticket 1 on B",
    );
    assert_tool_ok(
        &post(
            b.port(),
            Some(&sb),
            &[],
            &call("close_ticket", json!({"id": 1, "resolution": "toner"})),
        ),
        "close ticket 1 on B",
    );
    let seen = read_stream_until(&mut stream, &["notifications/resources/updated", real_uri]);
    assert!(
        !seen.contains(forged_uri),
        "a forged change reached the session:\n{seen}"
    );
    assert_log_has(
        &a,
        "A",
        "[HA] Dropped a message on the changes channel from desk-z",
    );
}
