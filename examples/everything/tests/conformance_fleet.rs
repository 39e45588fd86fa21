//! The official conformance suites through a real nginx, round robin (no affinity), over two
//! `everything` instances in distributed mode sharing a real redis-server: every request may
//! land on the instance that does not hold its session, so this passes only if the relay
//! carries it to the holder (answers to sampling and elicitation, resumed SSE streams, the GET
//! stream, DELETE).
//!
//! Needs nginx (`apt-get install nginx-light`; `.ci/run` installs it) and the tooling of
//! `tools/setup.sh`.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{Instance, TempDir, ensure_tooling, free_port, repo_root, run};
use support_redis::RedisServer;

const SUITE_DEADLINE: Duration = Duration::from_secs(180);

/// A real nginx in front of `upstreams`, round robin, streaming both ways; stopped on drop.
struct Nginx {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Nginx {
    fn start(upstreams: &[u16]) -> Self {
        let dir = TempDir::new("nginx");
        let port = free_port();
        let servers: String = upstreams
            .iter()
            .map(|p| format!("server 127.0.0.1:{p};"))
            .collect();
        let d = dir.path().display();
        let conf = format!(
            "worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
  log_format upstream '$upstream_addr $status';
  access_log {d}/access.log upstream;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream fleet {{ {servers} keepalive 16; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://fleet;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
    }}
  }}
}}
"
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).expect("write nginx.conf");
        let child = Command::new(nginx_binary())
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx runs (apt-get install nginx-light)");
        let nginx = Self { child, port, dir };
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let began = Instant::now();
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "nginx did not listen on {port}:\n{}",
                nginx.error_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        nginx
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// How many requests nginx sent to `upstream` (its access log names the upstream).
    fn answered_by(&self, upstream: u16) -> usize {
        let log = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        let addr = format!("127.0.0.1:{upstream} ");
        log.lines().filter(|l| l.starts_with(&addr)).count()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_binary() -> &'static Path {
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(p).exists() {
            return Path::new(p);
        }
    }
    Path::new("nginx")
}

/// Two distributed `everything` instances on one Redis behind nginx.
struct Fleet {
    a: Instance,
    b: Instance,
    nginx: Nginx,
    _redis: RedisServer,
}

fn fleet() -> Fleet {
    let redis = RedisServer::start();
    let url = redis.url();
    let node = |id: &'static str| {
        Instance::start(
            env!("CARGO_BIN_EXE_everything"),
            &[
                ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
                ("FRONTMCP_BIND_ADDRESS", "loopback"),
                ("MACHINE_ID", id),
                ("REDIS_URL", url.as_str()),
                ("VAULT_SECRET", "fleetmcp-e2e-vault-secret-0123456789"),
            ],
        )
    };
    let a = node("everything-a");
    let b = node("everything-b");
    let nginx = Nginx::start(&[a.port(), b.port()]);
    Fleet {
        a,
        b,
        nginx,
        _redis: redis,
    }
}

/// `Total: N passed, M failed` (the last one).
fn totals(output: &str) -> Option<(u32, u32)> {
    let line = output.lines().rev().find(|l| l.contains("Total:"))?;
    let nums: Vec<u32> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    match nums.as_slice() {
        [passed, failed, ..] => Some((*passed, *failed)),
        _ => None,
    }
}

/// Round robin spread the suite over both instances (so requests were relayed both ways), and
/// neither panicked.
fn assert_both_served(f: &Fleet) {
    for (who, i) in [("everything-a", &f.a), ("everything-b", &f.b)] {
        assert!(
            i.log().contains("[HA] Heartbeat started"),
            "{who} ran in distributed mode:\n{}",
            i.log()
        );
        let n = f.nginx.answered_by(i.port());
        assert!(n > 10, "nginx sent {who} only {n} requests");
        i.assert_no_panic_logged();
    }
}

#[test]
fn conformance_0_1_16_suite_all_through_nginx_round_robin() {
    ensure_tooling();
    let f = fleet();
    let results = TempDir::new("fleet-conformance-results");
    let scratch = TempDir::new("fleet-conformance-run");
    let mut cmd = Command::new(repo_root().join("tools/conformance/run-suite.sh"));
    cmd.arg(f.nginx.url()).arg("-o").arg(results.path());
    let out = run(&mut cmd, SUITE_DEADLINE, scratch.path());
    let report = format!(
        "{}\n--- everything-a ---\n{}\n--- everything-b ---\n{}\n--- nginx ---\n{}",
        out.describe(),
        f.a.log(),
        f.b.log(),
        f.nginx.error_log()
    );
    let Some((passed, failed)) = totals(&out.stdout) else {
        panic!("no `Total:` line:\n{report}");
    };
    assert_eq!(
        failed, 0,
        "{failed} check(s) failed through the fleet:\n{report}"
    );
    assert!(passed >= 46, "only {passed} checks passed:\n{report}");
    assert!(out.success(), "the suite failed:\n{report}");
    assert_both_served(&f);
}

#[test]
fn conformance_0_2_requirements_2025_11_25_through_nginx_round_robin() {
    ensure_tooling();
    let f = fleet();
    let results = TempDir::new("fleet-conformance-2025");
    let scratch = TempDir::new("fleet-conformance-run-2025");
    let mut cmd = Command::new(repo_root().join("tools/conformance/run-requirements.sh"));
    cmd.arg("2025-11-25")
        .arg(f.nginx.url())
        .arg("-o")
        .arg(results.path());
    let out = run(&mut cmd, SUITE_DEADLINE, scratch.path());
    let report = format!(
        "{}\n--- everything-a ---\n{}\n--- everything-b ---\n{}",
        out.describe(),
        f.a.log(),
        f.b.log()
    );
    let Some((passed, failed)) = totals(&out.stdout) else {
        panic!("no `Total:` line:\n{report}");
    };
    assert_eq!(
        failed, 0,
        "{failed} check(s) failed through the fleet:\n{report}"
    );
    assert!(passed >= 83, "only {passed} checks passed:\n{report}");
    assert!(out.success(), "the requirement set failed:\n{report}");
    assert_both_served(&f);
}
