//! End-to-end test support shared by the example packages' integration tests, included with
//! `#[path = "../../e2e_support.rs"] mod support;` (std and `serde_json` only).
//!
//! - [`ensure_tooling`] runs `tools/setup.sh` once per test process.
//! - [`Instance`] runs a server binary on a free loopback port until dropped.
//! - [`run`] runs an external command (suite, client) with a deadline, killing its whole process
//!   group if it overruns.
//! - [`TempDir`] is a scratch directory under `target/tmp`, kept (and its path printed) when the
//!   test fails.
//! - [`raw_http`] is the test suites' one raw HTTP/1.1 client (`crates/fleetmcp/tests/support/
//!   raw_http.rs`); [`http_get`] is a GET with it.
#![allow(dead_code)] // each test crate uses a different part of this file

#[path = "../crates/fleetmcp/tests/support/raw_http.rs"]
pub mod raw_http;

use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The secret every test instance seals its session ids with (>= 16 characters).
pub const SESSION_SECRET: &str = "fleetmcp-e2e-test-session-secret";
/// How long a server may take to answer `/healthz` after it is spawned.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(20);
/// How long `tools/setup.sh` may take. When everything is installed it takes well under a
/// second; the long deadline only matters on a fresh checkout, where it downloads Node 22, the
/// suite, the TypeScript SDK and the Python SDK.
pub const SETUP_DEADLINE: Duration = Duration::from_secs(600);

/// Environment variables the server reads that must not leak in from the developer's shell.
const SERVER_ENV_CLEARED: &[&str] = &[
    "FLEETMCP_CONFIG",
    "NODE_ENV",
    "MACHINE_ID",
    "FRONTMCP_BIND_ADDRESS",
    "FRONTMCP_DEPLOYMENT_MODE",
    // The requestState secrets: a test that wants one sets it (fleet_mrtr.rs relies on there
    // being none, so that the key comes from MCP_SESSION_SECRET).
    "VAULT_SECRET",
    "JWT_SECRET",
    "MCP_SESSION_SECRET_PREVIOUS",
    // A developer's collector does not get the tests' spans; tests/otlp.rs sets its own.
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
];

/// The workspace root (both example packages sit two levels below it).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..");
    root.canonicalize()
        .unwrap_or_else(|e| panic!("workspace root {}: {e}", root.display()))
}

/// Runs `tools/setup.sh` once per test process; every caller fails with its output if it failed.
pub fn ensure_tooling() {
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    let result = SETUP.get_or_init(|| {
        let script = repo_root().join("tools/setup.sh");
        let scratch = TempDir::new("setup");
        let mut cmd = Command::new("bash");
        cmd.arg(&script).current_dir(repo_root());
        let out = run(&mut cmd, SETUP_DEADLINE, scratch.path());
        if out.success() {
            Ok(())
        } else {
            Err(format!("{} failed: {}", script.display(), out.describe()))
        }
    });
    if let Err(why) = result {
        panic!("{why}");
    }
}

/// A scratch directory under Cargo's per-target temp dir; removed on drop unless the thread is
/// panicking, in which case it is kept for inspection and its path printed (with `E2E_KEEP=1`,
/// every one is kept: the logs of instances a test restarted, too).
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> Self {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("e2e")
            .join(format!("{label}-{}-{seq}", std::process::id()));
        let _ = fs::remove_dir_all(&path); // a leftover from an earlier run with the same pid
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if thread::panicking() || std::env::var_os("E2E_KEEP").is_some_and(|v| v == "1") {
            eprintln!("kept for inspection: {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// Waits until something listens on loopback `port` (`what`, named if it does not within
/// `limit`, which fails the test).
pub fn wait_listening(port: u16, limit: Duration, what: &str) {
    let began = Instant::now();
    while std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        assert!(began.elapsed() < limit, "{what} did not listen on {port}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// A running server binary, killed (and reaped) on drop.
pub struct Instance {
    child: Child,
    port: u16,
    log: PathBuf,
    name: String,
    _dir: TempDir,
}

impl Instance {
    /// Spawns `bin` on a free port with `MCP_SESSION_SECRET` set and waits for `/healthz`.
    /// `extra_env` is applied last, so it can override `RUST_LOG` or the secret.
    pub fn start(bin: &str, extra_env: &[(&str, &str)]) -> Self {
        let name = Path::new(bin)
            .file_name()
            .map_or_else(|| bin.to_string(), |n| n.to_string_lossy().into_owned());
        // The port is picked by binding :0 and letting go, so another process can grab it in
        // between; the server then exits on its bind error and the next attempt takes a new port.
        let mut failures = String::new();
        for attempt in 1..=3 {
            let dir = TempDir::new(&name);
            let port = free_port();
            let log = dir.path().join("server.log");
            let child = spawn_server(bin, port, &log, extra_env);
            let mut instance = Self {
                child,
                port,
                log,
                name: name.clone(),
                _dir: dir,
            };
            match instance.wait_healthy(STARTUP_DEADLINE) {
                Ok(()) => return instance,
                Err(why) => {
                    let _ = write!(
                        failures,
                        "attempt {attempt} (port {port}): {why}\n--- {name} log ---\n{}\n",
                        instance.log()
                    );
                    // Only losing the port race is worth another try.
                    let exited = instance.child.try_wait().ok().flatten().is_some();
                    if !(exited && instance.log().contains("Address already in use")) {
                        break;
                    }
                }
            }
        }
        panic!("{name} did not become healthy:\n{failures}");
    }

    /// Spawns `bin` on `port` (a restart on the port of an instance that exited), like
    /// [`Instance::start`] otherwise, and waits for `/healthz`; panics with its log if it is
    /// not healthy within [`STARTUP_DEADLINE`].
    pub fn start_on(bin: &str, port: u16, extra_env: &[(&str, &str)]) -> Self {
        let name = Path::new(bin)
            .file_name()
            .map_or_else(|| bin.to_string(), |n| n.to_string_lossy().into_owned());
        let dir = TempDir::new(&name);
        let log = dir.path().join("server.log");
        let child = spawn_server(bin, port, &log, extra_env);
        let mut instance = Self {
            child,
            port,
            log,
            name: name.clone(),
            _dir: dir,
        };
        if let Err(why) = instance.wait_healthy(STARTUP_DEADLINE) {
            panic!(
                "{name} did not become healthy on port {port}: {why}\n--- {name} log ---\n{}",
                instance.log()
            );
        }
        instance
    }

    /// Waits until `/readyz` answers 200, for at most `limit`; panics with the log if not.
    pub fn wait_ready(&mut self, limit: Duration) {
        let start = Instant::now();
        loop {
            self.assert_alive();
            match http_get(self.port, "/readyz") {
                Ok(resp) if resp.status == 200 => return,
                Ok(resp) if start.elapsed() >= limit => {
                    panic!(
                        "{} not ready within {limit:?}:\n{}",
                        self.name,
                        resp.describe()
                    )
                }
                Err(e) if start.elapsed() >= limit => {
                    panic!("{} not ready within {limit:?}: {e}", self.name)
                }
                _ => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id (for `/proc/<pid>/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`TERM`, `INT`, `KILL`) and waits up to `within` for the process to
    /// exit; its exit status, or `None` if it is still running.
    pub fn signal_and_wait(
        &mut self,
        signal: &str,
        within: Duration,
    ) -> Option<std::process::ExitStatus> {
        self.signal(signal);
        self.wait_exit(within)
    }

    /// Sends `signal` (`TERM`, `INT`, `KILL`) and returns at once.
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status();
    }

    /// Waits up to `within` for the process to exit; its exit status, or `None` if it is still
    /// running.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// `http://127.0.0.1:PORT/mcp`
    pub fn mcp_url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Everything the server wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|e| format!("<cannot read {}: {e}>", self.log.display()))
    }

    /// Panics (with the log) if the server has exited.
    pub fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited unexpectedly ({status})\n--- {} log ---\n{}",
                self.name,
                self.name,
                self.log()
            );
        }
    }

    /// Panics (with the log) if the server logged a panic: tokio survives a panicking task, so a
    /// handler bug would otherwise only show as a failed request.
    pub fn assert_no_panic_logged(&self) {
        let log = self.log();
        assert!(
            !log.contains("panicked at"),
            "{} logged a panic\n--- {} log ---\n{log}",
            self.name,
            self.name
        );
    }

    fn wait_healthy(&mut self, deadline: Duration) -> Result<(), String> {
        let start = Instant::now();
        let mut last = String::from("no attempt");
        while start.elapsed() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited before it was healthy ({status})"));
            }
            match http_get(self.port, "/healthz") {
                // Another test's server may hold the port (the free port was taken between
                // our pick and the child's bind): its 200 says nothing of the child, which
                // then exits on its bind error and is seen above on the next round.
                Ok(resp) if resp.status == 200 && listens_on(self.child.id(), self.port) => {
                    return Ok(());
                }
                Ok(resp) if resp.status == 200 => {
                    last = format!("HTTP 200 from another process on port {}", self.port)
                }
                Ok(resp) => last = format!("HTTP {}", resp.status),
                Err(e) => last = e.to_string(),
            }
            thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "GET /healthz not 200 within {deadline:?} (last: {last})"
        ))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!(
                "--- {} log (port {}) ---\n{}",
                self.name,
                self.port,
                self.log()
            );
        }
    }
}

/// Whether process `pid` holds the socket listening on loopback TCP `port`: the socket's
/// inode, from `/proc/net/tcp` and `tcp6` (state `0A` is LISTEN), among the process's open
/// file descriptors.
pub fn listens_on(pid: u32, port: u16) -> bool {
    let wanted = format!(":{port:04X}");
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 9 && fields[3] == "0A" && fields[1].ends_with(&wanted) {
                inodes.push(format!("socket:[{}]", fields[9]));
            }
        }
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|target| {
            inodes
                .iter()
                .any(|inode| target.as_os_str() == inode.as_str())
        })
    })
}

fn spawn_server(bin: &str, port: u16, log: &Path, extra_env: &[(&str, &str)]) -> Child {
    let out = File::create(log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
    let err = out.try_clone().expect("clone log file handle");
    let mut cmd = Command::new(bin);
    for name in SERVER_ENV_CLEARED {
        cmd.env_remove(name);
    }
    cmd.env("PORT", port.to_string())
        .env("MCP_SESSION_SECRET", SESSION_SECRET)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .envs(extra_env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    cmd.spawn().unwrap_or_else(|e| panic!("spawn {bin}: {e}"))
}

/// A bare HTTP/1.1 GET on 127.0.0.1:`port` (a `Host` and nothing else), answered within 2 s.
pub fn http_get(port: u16, path: &str) -> std::io::Result<raw_http::RawResponse> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let host = format!("127.0.0.1:{port}");
    raw_http::try_send(
        addr,
        "GET",
        path,
        &[("Host", &host)],
        None,
        Duration::from_secs(2),
    )
}

/// The outcome of [`run`].
pub struct Output {
    pub command: String,
    /// `None`: killed at the deadline.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// The command, how it ended and everything it printed, for failure messages.
    pub fn describe(&self) -> String {
        let ended = match self.status {
            Some(s) => s.to_string(),
            None => "killed at the deadline".to_string(),
        };
        format!(
            "`{}` -> {ended} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` in its own process group with stdin closed and stdout/stderr captured to files in
/// `scratch`; at `deadline` the whole group is SIGKILLed (npx and the like spawn grandchildren).
/// Proxy variables are neutralised for loopback so an HTTP(S)_PROXY in the shell cannot
/// intercept the clients' requests to the test servers.
pub fn run(cmd: &mut Command, deadline: Duration, scratch: &Path) -> Output {
    let command = format!("{cmd:?}");
    let out_path = scratch.join("stdout");
    let err_path = scratch.join("stderr");
    let out = File::create(&out_path).expect("create stdout capture");
    let err = File::create(&err_path).expect("create stderr capture");
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env("NO_COLOR", "1")
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command}: {e}"));
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() >= deadline => {
                // The child leads its own group (process_group(0)), so -PID is that group.
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("wait for {command}: {e}"),
        }
    };
    let read = |p: &Path| {
        fs::read(p)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    Output {
        command,
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
        elapsed: start.elapsed(),
    }
}

/// A real nginx (`/usr/sbin/nginx`), stopped on drop, running an `http`-context configuration
/// (such as the repository's `deploy/nginx/fleetmcp.conf`, see [`Nginx::fleet_conf`]) inside a
/// minimal main configuration of its own: its files in a scratch directory, and an access log
/// that names the upstreams each request went to (`$upstream_addr`: several, comma-separated,
/// when nginx retried on the next one).
pub struct Nginx {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Nginx {
    /// The repository's `deploy/nginx/fleetmcp.conf`, listening on loopback `port` in front of
    /// `upstreams`; panics if the file no longer has the lines it replaces (one `listen`, three
    /// `server 127.0.0.1:…` lines), so the test cannot silently run another configuration.
    pub fn fleet_conf(upstreams: &[u16], port: u16) -> String {
        let path = repo_root().join("deploy/nginx/fleetmcp.conf");
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut out = String::new();
        let (mut servers, mut backups, mut listens) = (0, 0, 0);
        for line in text.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("server 127.0.0.1:") {
                // The options of the file's first line of each kind (the instances, then the
                // same again as backups), for every upstream.
                let options = trimmed
                    .split_once(' ')
                    .and_then(|(_, rest)| rest.split_once(' '))
                    .map_or("", |(_, opts)| opts.trim_end_matches(';'));
                let seen = if options.contains("backup") {
                    &mut backups
                } else {
                    &mut servers
                };
                *seen += 1;
                if *seen == 1 {
                    for p in upstreams {
                        let _ = writeln!(out, "    server 127.0.0.1:{p} {options};");
                    }
                }
                continue;
            }
            if trimmed.starts_with("listen ") {
                listens += 1;
                let _ = writeln!(out, "    listen 127.0.0.1:{port};");
                continue;
            }
            out.push_str(line);
            out.push('\n');
        }
        assert_eq!(
            (servers, backups, listens),
            (3, 3, 1),
            "{} changed shape: update Nginx::fleet_conf",
            path.display()
        );
        out
    }

    /// Starts nginx with `http_conf` (which listens on `port`) and waits until it accepts.
    pub fn start(http_conf: &str, port: u16) -> Self {
        let dir = TempDir::new("nginx");
        let d = dir.path().display();
        fs::write(dir.path().join("fleet.conf"), http_conf).expect("write fleet.conf");
        let main = format!(
            "worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 1024; }}
http {{
  log_format upstreams '$msec $request_method $status $upstream_addr $upstream_status';
  access_log {d}/access.log upstreams;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  include {d}/fleet.conf;
}}
"
        );
        let path = dir.path().join("nginx.conf");
        fs::write(&path, main).expect("write nginx.conf");
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
        let mut nginx = Self { child, port, dir };
        let began = Instant::now();
        // Listening by itself, not anything on the port (another test may hold it: nginx then
        // exits on its bind error, and says so below).
        while !listens_on(nginx.child.id(), port) {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                panic!("nginx exited ({status}):\n{}", nginx.error_log());
            }
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "nginx did not listen on {port}:\n{}",
                nginx.error_log()
            );
            thread::sleep(Duration::from_millis(50));
        }
        nginx
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn error_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// One line per request: method, status, upstream addresses, upstream statuses.
    pub fn access_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, nginx's fast shutdown, stops its worker too; SIGKILL would leave the worker
        // orphaned, still listening on the test's port. SIGKILL only if it is not gone in 3 s.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("--- nginx error log ---\n{}", self.error_log());
        }
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

/// A 2026-07-28 POST of JSON-RPC `body` (a request for `method`) to `url`, an instance's
/// `/mcp`, with the headers the era asks for: its protocol version, `Mcp-Method`, and
/// `Mcp-Name` when the request names a tool, resource or prompt; bounded by 10 s. The caller
/// sends it and reads the answer as it needs.
pub fn modern_post(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    name: Option<&str>,
    body: &serde_json::Value,
) -> reqwest::RequestBuilder {
    let req = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .timeout(Duration::from_secs(10))
        .body(body.to_string());
    match name {
        Some(n) => req.header("mcp-name", n),
        None => req,
    }
}
