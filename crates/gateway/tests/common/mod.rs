//! What the gateway's tests share: the gateway binary in front of our own `everything` example
//! over stdio, raw HTTP to it, and the processes it runs.
#![allow(dead_code)] // each test crate uses a different part of this file

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::raw_http::{self, RawResponse};
use crate::support::{Instance, Nginx, TempDir, free_port};

mod clients;
#[allow(unused_imports)] // as dead_code above: not every test crate runs a client
pub use clients::*;

pub const PROTOCOL_VERSION: &str = "2025-06-18";
pub const HTTP_LIMIT: Duration = Duration::from_secs(10);
const ACCEPT: &str = "application/json, text/event-stream";

/// The `everything` example's binary, next to the gateway's. Cargo builds a test's own package
/// only: `cargo build -p everything` first (the workspace's `cargo test` builds it too).
pub fn everything() -> PathBuf {
    let gateway = PathBuf::from(env!("CARGO_BIN_EXE_fleetmcp-gateway"));
    let path = gateway.with_file_name("everything");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p everything` before these tests",
        path.display()
    );
    path
}

/// `everything` over stdio, as a gateway's upstream command.
pub fn everything_command() -> String {
    format!("env FLEETMCP_TRANSPORT=stdio {}", everything().display())
}

/// A gateway in front of `everything` (unless `extra` names another command), ready.
pub fn gateway(extra: &[(&str, &str)]) -> Instance {
    let command = everything_command();
    let mut env: Vec<(&str, &str)> = vec![
        ("FLEETMCP_UPSTREAM_COMMAND", &command),
        ("REDIS_URL", ""),
        ("REDIS_HOST", ""),
        ("REDIS_PORT", ""),
    ];
    env.extend_from_slice(extra);
    Instance::start(env!("CARGO_BIN_EXE_fleetmcp-gateway"), &env)
}

/// Our `everything` served over Streamable HTTP itself (sessions in memory), ready: an HTTP
/// upstream.
pub fn everything_over_http(extra: &[(&str, &str)]) -> Instance {
    let path = everything();
    let mut env = vec![("REDIS_URL", ""), ("REDIS_HOST", ""), ("REDIS_PORT", "")];
    env.extend_from_slice(extra);
    let mut upstream = Instance::start(&path.to_string_lossy(), &env);
    upstream.wait_ready(Duration::from_secs(20));
    upstream
}

/// A gateway of a fleet on `redis`, named `machine`.
pub fn fleet_gateway(machine: &str, redis: &str, extra: &[(&str, &str)]) -> Instance {
    let mut env: Vec<(&str, &str)> = vec![
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("MACHINE_ID", machine),
        ("REDIS_URL", redis),
    ];
    env.extend_from_slice(extra);
    gateway(&env)
}

/// Two gateways of a fleet on `redis` (`gw-a` and `gw-b`, with `extra`), ready within `ready`,
/// behind nginx round robin running `deploy/nginx/fleetmcp.conf`; and nginx's `/mcp` URL.
pub fn two_behind_nginx(
    redis: &str,
    extra: &[(&str, &str)],
    ready: Duration,
) -> (Instance, Instance, Nginx, String) {
    let mut a = fleet_gateway("gw-a", redis, extra);
    let mut b = fleet_gateway("gw-b", redis, extra);
    a.wait_ready(ready);
    b.wait_ready(ready);
    let front = free_port();
    let nginx = Nginx::start(&Nginx::fleet_conf(&[a.port(), b.port()], front), front);
    let url = format!("http://127.0.0.1:{front}/mcp");
    (a, b, nginx, url)
}

/// How many requests nginx sent to `gw` (its access log names the upstream of each).
pub fn sent_to(nginx: &Nginx, gw: &Instance) -> usize {
    let addr = format!("127.0.0.1:{}", gw.port());
    nginx
        .access_log()
        .lines()
        .filter(|l| l.contains(&addr))
        .count()
}

pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> RawResponse {
    let addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let host = format!("127.0.0.1:{port}");
    let mut all = vec![("Host", host.as_str())];
    all.extend_from_slice(headers);
    raw_http::send(addr, method, path, &all, body, HTTP_LIMIT)
}

pub fn post(port: u16, sid: Option<&str>, msg: &Value) -> RawResponse {
    let body = msg.to_string();
    let mut headers = vec![("Content-Type", "application/json"), ("Accept", ACCEPT)];
    if let Some(sid) = sid {
        headers.push(("mcp-session-id", sid));
        headers.push(("mcp-protocol-version", PROTOCOL_VERSION));
    }
    http(port, "POST", "/mcp", &headers, Some(&body))
}

pub fn initialize_message() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "gateway-test", "version": "1.0.0"},
        },
    })
}

/// `initialize` and `notifications/initialized`; the session id.
pub fn open_session(port: u16) -> String {
    let resp = post(port, None, &initialize_message());
    assert_eq!(resp.status, 200, "initialize:\n{}", resp.describe());
    let sid = resp
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session id:\n{}", resp.describe()))
        .to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = post(port, Some(&sid), &note);
    assert_eq!(resp.status, 202, "initialized:\n{}", resp.describe());
    sid
}

/// `tools/call` of `name` with `arguments`; the answer.
pub fn call(port: u16, sid: &str, name: &str, arguments: Value) -> RawResponse {
    let msg = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    post(port, Some(sid), &msg)
}

/// The text of a successful tool result.
pub fn tool_text(resp: &RawResponse) -> String {
    assert_eq!(resp.status, 200, "{}", resp.describe());
    let v = resp.json();
    v.pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("not a tool result:\n{}", resp.describe()))
        .to_string()
}

pub fn machine_of(resp: &RawResponse) -> Option<&str> {
    resp.header("x-frontmcp-machine-id")
}

/// The processes whose parent is `pid` (from `/proc/*/stat`).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces, so read after its last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Waits until `pid` has `n` children; false after `limit`.
pub fn wait_children(pid: u32, n: usize, limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        if children_of(pid).len() == n {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `needle` is in the instance's log; false after `limit`.
pub fn log_has(instance: &Instance, needle: &str, limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        if instance.log().contains(needle) {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A gateway, ready, whose upstream is the Python program `script` over stdio, and the
/// directory that holds the script.
pub fn gateway_over_python(script: &str) -> (TempDir, Instance) {
    gateway_over_python_with(script, &[])
}

/// [`gateway_over_python`], with more of the gateway's environment (`extra`).
pub fn gateway_over_python_with(script: &str, extra: &[(&str, &str)]) -> (TempDir, Instance) {
    let dir = TempDir::new("python-upstream");
    let path = dir.path().join("upstream.py");
    std::fs::write(&path, script).expect("write the script");
    let command = format!("python3 {}", path.display());
    let mut env = vec![("FLEETMCP_UPSTREAM_COMMAND", command.as_str())];
    env.extend_from_slice(extra);
    let mut gw = gateway(&env);
    gw.wait_ready(Duration::from_secs(20));
    (dir, gw)
}
