//! The repository's HAProxy configuration (`deploy/haproxy/fleetmcp.cfg`, its `bind` and
//! `server` lines replaced by loopback ports) in front of three help-desk instances on one real
//! `redis-server` (issue 12, item 4): sessions spread round robin, each session's requests go to
//! its holder by the `__frontmcp_node` cookie, and when one instance is stopped with SIGTERM
//! while clients call tools, no client sees an error and the instance exits 0.
//!
//! Needs `redis-server` and `haproxy` (`apt-get install redis-server haproxy`). Every wait is
//! bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::fmt::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::json;
use support::TempDir;
use support_redis::RedisServer;

/// A real haproxy running the repository's file, stopped on drop.
struct Haproxy {
    child: Child,
    dir: TempDir,
}

impl Haproxy {
    /// `deploy/haproxy/fleetmcp.cfg` listening on loopback `port` in front of `servers`
    /// (machine id, port); panics if the file no longer has the lines it replaces.
    fn fleet_conf(servers: &[(&str, u16)], port: u16) -> String {
        let path = support::repo_root().join("deploy/haproxy/fleetmcp.cfg");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (mut binds, mut lines) = (0, 0);
        let mut out = String::new();
        for line in text.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("bind ") {
                binds += 1;
                let _ = writeln!(out, "    bind 127.0.0.1:{port}");
            } else if trimmed.starts_with("server ") {
                lines += 1;
                if lines == 1 {
                    for (machine, p) in servers {
                        let _ =
                            writeln!(out, "    server {machine} 127.0.0.1:{p} cookie {machine}");
                    }
                }
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        assert_eq!(
            (binds, lines),
            (1, 3),
            "{} changed shape: update this test",
            path.display()
        );
        out
    }

    fn start(conf: &str, port: u16) -> Self {
        let dir = TempDir::new("haproxy");
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, conf).expect("write haproxy.cfg");
        let log = std::fs::File::create(dir.path().join("haproxy.log")).expect("haproxy.log");
        let err = log.try_clone().expect("haproxy.log");
        let child = Command::new(haproxy_binary())
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("haproxy runs (apt-get install haproxy)");
        let mut haproxy = Self { child, dir };
        let began = Instant::now();
        // Listening by itself, not anything on the port (another test may hold it: haproxy then
        // exits on its bind error, and says so below).
        while !support::listens_on(haproxy.child.id(), port) {
            if let Ok(Some(status)) = haproxy.child.try_wait() {
                panic!("haproxy exited ({status}):\n{}", haproxy.log());
            }
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "haproxy did not listen on {port}:\n{}",
                haproxy.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        haproxy
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("haproxy.log")).unwrap_or_default()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- haproxy log ---\n{}", self.log());
        }
    }
}

fn haproxy_binary() -> &'static str {
    ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("haproxy")
}

/// A client's session through the balancer: its id, its holder, and the affinity cookie.
struct Client {
    sid: String,
    holder: String,
    cookie: String,
}

/// `initialize` (no cookie: round robin) and `notifications/initialized` (with the cookie it set).
fn open(port: u16) -> Client {
    let init = json!({
        "jsonrpc": "2.0", "id": next_id(), "method": "initialize",
        "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                   "clientInfo": {"name": "haproxy-test", "version": "1.0.0"}},
    });
    let resp = post_with(port, None, &[], &init, HTTP_LIMIT);
    assert_eq!(resp.status, 200, "initialize:\n{}", resp.describe());
    let field = |v: Option<&str>| {
        v.map(String::from)
            .unwrap_or_else(|| panic!("initialize:\n{}", resp.describe()))
    };
    let sid = field(resp.header("mcp-session-id"));
    let holder = field(machine_of(&resp));
    let cookie = field(
        resp.header("set-cookie")
            .and_then(|c| c.split(';').next())
            .filter(|c| c.starts_with("__frontmcp_node=")),
    );
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = post_with(port, Some(&sid), &[("Cookie", &cookie)], &note, HTTP_LIMIT);
    assert!(
        resp.status == 202 || resp.status == 200,
        "{}",
        resp.describe()
    );
    Client {
        sid,
        holder,
        cookie,
    }
}

/// `find_tickets` in the client's session, with its cookie; must succeed. The machine that
/// answered.
fn call(port: u16, c: &Client, what: &str) -> String {
    let msg = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
                     "params": {"name": "find_tickets", "arguments": {}}});
    let resp = post_with(
        port,
        Some(&c.sid),
        &[("Cookie", &c.cookie)],
        &msg,
        HTTP_LIMIT,
    );
    assert_tool_ok(&resp, what);
    machine_of(&resp).unwrap_or_default().to_string()
}

#[test]
fn haproxy_spreads_sessions_keeps_affinity_and_a_sigterm_costs_no_client_an_error() {
    let redis = RedisServer::start();
    let url = redis.url();
    // A drain above HAProxy's detection time (inter 1 s x fall 2).
    let env = [
        ("FLEETMCP_DRAIN_MS", "3000"),
        ("FLEETMCP_SHUTDOWN_GRACE_MS", "2000"),
    ];
    let a = distributed_desk("hx-a", &url, &env);
    let b = distributed_desk("hx-b", &url, &env);
    let mut c = distributed_desk("hx-c", &url, &env);
    let port = support::free_port();
    let conf = Haproxy::fleet_conf(
        &[("hx-a", a.port()), ("hx-b", b.port()), ("hx-c", c.port())],
        port,
    );
    let haproxy = Haproxy::start(&conf, port);

    // Round robin: six sessions, two on each instance.
    let clients: Vec<Client> = (0..6).map(|_| open(port)).collect();
    for m in ["hx-a", "hx-b", "hx-c"] {
        let n = clients.iter().filter(|c| c.holder == m).count();
        assert_eq!(
            n,
            2,
            "sessions on {m}: {:?}",
            clients.iter().map(|c| &c.holder).collect::<Vec<_>>()
        );
    }
    // Affinity: every request reaches its session's holder.
    for cl in &clients {
        assert_eq!(call(port, cl, "before the stop"), cl.holder, "affinity");
    }

    // SIGTERM C while every client keeps calling; none may see an error.
    c.signal("TERM");
    let began = Instant::now();
    let mut calls = 0;
    let exit = loop {
        for cl in &clients {
            call(
                port,
                cl,
                &format!("during C's stop, {:?} in", began.elapsed()),
            );
            calls += 1;
        }
        if let Some(status) = c.wait_exit(Duration::from_millis(20)) {
            break status;
        }
        assert!(
            began.elapsed() < Duration::from_secs(15),
            "C did not exit within 15 s:\n{}",
            c.log()
        );
    };
    assert!(exit.success(), "C exited {exit}:\n{}", c.log());
    // After it: C's sessions are served by the others, still without an error.
    for cl in &clients {
        let by = call(port, cl, "after C's exit");
        assert_ne!(by, "hx-c", "answered by the stopped instance");
        calls += 1;
    }
    assert!(calls > 12, "only {calls} calls while C stopped");
    // Taken out of rotation by the health check on `/readyz`, during the drain (503), before
    // its listener closed.
    let log = haproxy.log();
    assert!(
        log.contains("Server fleetmcp/hx-c is DOWN, reason: Layer7 wrong status, code: 503"),
        "{log}"
    );
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
    drop(haproxy);
}
