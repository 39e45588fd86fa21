//! `deploy/local-fleet.sh`, the README's "fleet on your machine", run as a newcomer runs it
//! (issue 20, part 2): it starts Redis, three help-desks and nginx, a session opened through
//! nginx is served by its holder from every instance, and Ctrl-C (SIGINT to the script's whole
//! process group, as a terminal sends it) stops the instances first, each draining while Redis
//! and nginx still serve it, then nginx and Redis: no instance logs a warning. Before, Ctrl-C
//! reached Redis and nginx at the same moment as the instances, and every instance logged lost
//! subscriptions and a lost tracking connection while it drained.
//!
//! Many clients through either balancer (issue 37, item 4): twelve clients, each on its own
//! loopback address, open 100 sessions each through nginx, then through HAProxy
//! (`--haproxy`), 1,200 in all, and call a tool in each: every answer is 200. Before, every
//! client counted as the balancer's address, and the fleet took 1,000 sessions in all (the
//! next 200 refused 429). Each client is still held to its own `limits.max_sessions_per_key`
//! (its 1,001st session refused 429), and a client naming another in its own
//! `X-Forwarded-For` or `X-Real-IP` still counts as itself.
//!
//! Needs `redis-server`, `nginx`, `haproxy` and `setsid` (util-linux), as the script does. The
//! binaries are this test run's (`FLEET_BIN_DIR`): the script builds nothing.

#[path = "../../e2e_support.rs"]
mod support;

// Not used here, but fleet_client builds on it (its Redis inspection helpers).
#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use futures_util::StreamExt;
use serde_json::{Value, json};

/// Five consecutive free loopback ports (nginx's, the script's `FIRST_PORT` and the two after
/// it, Redis's), below the kernel's ephemeral range (`ip_local_port_range`, 32768 and up here): every other
/// port a test uses is one the kernel handed out there (`free_port`, outgoing connections),
/// so none can take one of these between this check and the script's start (it did, once in
/// five full runs, when they were picked from that range).
fn five_free_ports() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let below = ephemeral_low.saturating_sub(5).max(10_005);
    // Spread by the process id, so two runs at once try different places first.
    let mut first = 10_000 + (std::process::id() as u16 % (below - 10_000));
    for _ in 0..200 {
        if (0..5).all(|i| std::net::TcpListener::bind(("127.0.0.1", first + i)).is_ok()) {
            return first;
        }
        first = if first + 7 < below { first + 7 } else { 10_000 };
    }
    panic!("no five consecutive free ports below {ephemeral_low}");
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// `deploy/local-fleet.sh` running with `args`, as a newcomer starts it, up ("Ctrl-C stops the
/// fleet." printed). Dropped, it stops the script's whole process group, whatever happened.
struct LocalFleet {
    script: Child,
    out_path: PathBuf,
    lb: u16,
    first: u16,
    redis: u16,
    bin_dir: PathBuf,
    /// The folder the script keeps its logs in (it prints it).
    logs: PathBuf,
    _dir: support::TempDir,
    /// One fleet at a time in this process: two picking their ports at once would pick the
    /// same ones (free until either binds them), and two fleets would share two cores.
    /// Released last, after `drop` stopped the script.
    _one_at_a_time: MutexGuard<'static, ()>,
}

static ONE_FLEET: Mutex<()> = Mutex::new(());

impl LocalFleet {
    fn start(args: &[&str]) -> Self {
        // A test that failed holding it left nothing running (its fleet was dropped).
        let one_at_a_time = ONE_FLEET.lock().unwrap_or_else(|e| e.into_inner());
        let dir = support::TempDir::new("local-fleet");
        let out_path = dir.path().join("script.out");
        let out = std::fs::File::create(&out_path).expect("create the script's output file");
        let err = out.try_clone().expect("clone the output file");
        let base = five_free_ports();
        let (lb, first, redis) = (base, base + 1, base + 4);
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_help-desk"))
            .parent()
            .expect("the binary's directory")
            .to_path_buf();
        // `setsid`: the script leads a process group of its own, like a terminal's foreground
        // job. Nothing of the developer's shell reaches it that a newcomer's would not have:
        // that includes SIGINT ignored, which `cargo test` run from a script or in the
        // background (`&`) inherits and bash cannot trap (issue 38), so it is reset to its
        // default, as a terminal's job has it.
        let mut script = Command::new("setsid");
        // SAFETY: `signal` is async-signal-safe, and nothing else runs between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut script, || {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        let script = script
            .arg("bash")
            .arg(support::repo_root().join("deploy/local-fleet.sh"))
            .args(args)
            .current_dir(support::repo_root())
            .env("LB_PORT", lb.to_string())
            .env("FIRST_PORT", first.to_string())
            .env("FLEET_REDIS_PORT", redis.to_string())
            .env("FLEET_BIN_DIR", &bin_dir)
            .env_remove("MCP_SESSION_SECRET")
            .env_remove("REDIS_URL")
            .env_remove("FLEETMCP_CLIENT_ADDRESS_HEADER")
            .env_remove("FLEETMCP_TRUSTED_PROXIES")
            .env_remove("FLEETMCP_MAX_SESSIONS_PER_KEY")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start deploy/local-fleet.sh");
        let mut fleet = Self {
            script,
            out_path,
            lb,
            first,
            redis,
            bin_dir,
            logs: PathBuf::new(),
            _dir: dir,
            _one_at_a_time: one_at_a_time,
        };
        let start = Instant::now();
        while !fleet.output().contains("Ctrl-C stops the fleet.") {
            if start.elapsed() > Duration::from_secs(60) {
                fleet.fail("the fleet did not come up within 60 s");
            }
            if let Ok(Some(status)) = fleet.script.try_wait() {
                panic!("the script exited ({status}):\n{}", fleet.output());
            }
            thread::sleep(Duration::from_millis(100));
        }
        let logs = fleet
            .output()
            .lines()
            .find_map(|l| l.trim().strip_prefix("logs:"))
            .map(|l| PathBuf::from(l.trim()));
        match logs {
            Some(logs) => fleet.logs = logs,
            None => fleet.fail("no logs folder printed"),
        }
        fleet
    }

    /// What the script printed so far.
    fn output(&self) -> String {
        std::fs::read_to_string(&self.out_path).unwrap_or_default()
    }

    /// The instances' ports.
    fn instances(&self) -> [u16; 3] {
        [self.first, self.first + 1, self.first + 2]
    }

    /// Instance `i`'s log (1 to 3).
    fn desk_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.logs.join(format!("desk-{i}.log")))
            .unwrap_or_else(|e| panic!("desk-{i}.log: {e}"))
    }

    /// Stops everything and fails the test, with the script's output.
    fn fail(&self, why: &str) -> ! {
        self.signal("TERM");
        panic!("{why}\n--- script output ---\n{}", self.output());
    }

    /// `signal` to the script's whole process group.
    fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([
                &format!("-{signal}"),
                "--",
                &format!("-{}", self.script.id()),
            ])
            .status();
    }

    /// Ctrl-C (SIGINT to the whole process group, as a terminal sends it), and the script's end.
    fn ctrl_c(&mut self) {
        self.signal("INT");
        let stopped = Instant::now();
        loop {
            if let Ok(Some(_)) = self.script.try_wait() {
                return;
            }
            if stopped.elapsed() > Duration::from_secs(20) {
                self.fail("the script did not stop within 20 s of Ctrl-C");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for LocalFleet {
    fn drop(&mut self) {
        if let Ok(None) = self.script.try_wait() {
            self.signal("TERM");
            let _ = self.script.wait();
        }
        if !self.logs.as_os_str().is_empty() && !thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.logs);
        }
    }
}

#[test]
fn the_local_fleet_serves_and_ctrl_c_drains_the_instances_before_redis_and_nginx_stop() {
    let mut fleet = LocalFleet::start(&[]);
    let (lb, first, redis) = (fleet.lb, fleet.first, fleet.redis);
    let printed = fleet.output();
    assert!(
        printed.contains(&format!("MCP endpoint:   http://127.0.0.1:{lb}/mcp")),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("{}/fleetmcp-ctl status", fleet.bin_dir.display())),
        "{printed}"
    );

    // A session opened through nginx, called on every instance: served by its holder.
    let (sid, holder) = open_session_held(lb);
    let holder = holder.unwrap_or_else(|| fleet.fail("initialize named no instance"));
    for port in [lb, first, first + 1, first + 2] {
        let resp = call_tool(port, &sid, &[], "open_ticket", json!({"title": "fleet"}));
        assert_served_by(&resp, &holder, &format!("open_ticket on port {port}"));
    }

    // The README's walkthrough, as pasted: its script against this fleet (issue 38: the steps
    // as written ended the session before sending it elsewhere, and hid the header to look at).
    let walk = Command::new("bash")
        .arg(support::repo_root().join("deploy/walkthrough.sh"))
        .env("LB_PORT", lb.to_string())
        .env("FIRST_PORT", first.to_string())
        .output()
        .expect("run deploy/walkthrough.sh");
    let said = String::from_utf8_lossy(&walk.stdout).to_string();
    assert!(
        walk.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&walk.stderr)
    );
    let walk_holder = said
        .lines()
        .find_map(|l| l.split("session held by ").nth(1))
        .unwrap_or_else(|| fleet.fail(&format!("the walkthrough named no holder:\n{said}")))
        .trim()
        .to_string();
    let calls: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("tools/call"))
        .collect();
    assert_eq!(calls.len(), 4, "{said}");
    for line in calls {
        assert!(
            line.ends_with(&format!("-> 200, served by {walk_holder}")),
            "{said}"
        );
    }
    assert!(said.contains("-> 204 (the session ends)"), "{said}");
    assert!(!said.contains("has 0 fleetmcp_ samples"), "{said}");

    fleet.ctrl_c();
    let printed = fleet.output();
    assert!(printed.contains("stopped; logs were in"), "{printed}");
    for i in 1..=3 {
        let log = fleet.desk_log(i);
        assert!(log.contains("shutting down: draining"), "desk-{i}:\n{log}");
        assert!(log.contains("stopped shutdown_ms="), "desk-{i}:\n{log}");
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
        assert!(
            warnings.is_empty(),
            "desk-{i} logged warnings while the fleet stopped:\n{}",
            warnings.join("\n")
        );
    }
    let redis_log = std::fs::read_to_string(fleet.logs.join("redis.log")).unwrap_or_default();
    assert!(
        redis_log.contains("Received SIGTERM") && !redis_log.contains("Received SIGINT"),
        "Redis is stopped by the script, not by the terminal's SIGINT:\n{redis_log}"
    );
    // Everything is gone: its ports are free again.
    wait_for("the fleet's ports are free", Duration::from_secs(5), || {
        [lb, first, first + 1, first + 2, redis]
            .iter()
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
    });
}

/// The clients, each on its own loopback address (127.0.0.2 and up), and the sessions each
/// opens: 1,200 in all, above the default `limits.max_sessions_per_key` (1,000), which all of
/// them would share if they counted as the balancer.
const CLIENTS: u8 = 12;
const SESSIONS_EACH: usize = 100;

/// An HTTP client whose every connection leaves from `addr` (bound before connecting).
fn client_on(addr: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(addr))
        .no_proxy()
        .timeout(HTTP_LIMIT)
        .build()
        .expect("an HTTP client")
}

/// One answer: its status, session id, and JSON-RPC message (from a JSON or SSE body).
struct Answer {
    status: u16,
    sid: Option<String>,
    message: Value,
    body: String,
}

impl Answer {
    fn describe(&self) -> String {
        format!("{} {}", self.status, self.body)
    }
}

/// A POST of `msg` to the balancer's `/mcp`, in session `sid` if given, with `extra` headers.
async fn post(
    client: &reqwest::Client,
    lb: u16,
    sid: Option<&str>,
    extra: &[(&str, &str)],
    msg: &Value,
) -> Result<Answer, String> {
    let mut req = client
        .post(format!("http://127.0.0.1:{lb}/mcp"))
        .header("Content-Type", "application/json")
        .header("Accept", ACCEPT)
        .body(msg.to_string());
    if let Some(sid) = sid {
        req = req
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", PROTOCOL_VERSION);
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.map_err(|e| format!("{msg}: {e}"))?;
    let status = resp.status().as_u16();
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let body = resp.text().await.map_err(|e| format!("{msg}: {e}"))?;
    // The JSON-RPC answer: the body, or the last `data:` of an SSE stream.
    let message = serde_json::from_str(&body).unwrap_or_else(|_| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .rfind(|v| v.get("result").is_some() || v.get("error").is_some())
            .unwrap_or(Value::Null)
    });
    Ok(Answer {
        status,
        sid,
        message,
        body,
    })
}

fn initialize_msg() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "many-clients", "version": "1.0.0"},
        },
    })
}

/// `initialize` through the balancer: the session's id when answered 200 with a result, else
/// what came back.
async fn initialize(
    client: &reqwest::Client,
    lb: u16,
    extra: &[(&str, &str)],
) -> Result<String, Answer> {
    let answer = match post(client, lb, None, extra, &initialize_msg()).await {
        Ok(a) => a,
        Err(e) => {
            return Err(Answer {
                status: 0,
                sid: None,
                message: Value::Null,
                body: e,
            });
        }
    };
    match (&answer.sid, answer.status, answer.message.get("result")) {
        (Some(sid), 200, Some(_)) => Ok(sid.clone()),
        _ => Err(answer),
    }
}

/// A session opened through the balancer (`initialize`, `notifications/initialized`) and one
/// tool called in it; `Err` says which step was not answered as it should be.
async fn session_with_a_call(client: &reqwest::Client, lb: u16, who: &str) -> Result<(), String> {
    let sid = initialize(client, lb, &[])
        .await
        .map_err(|a| format!("{who}: initialize: {}", a.describe()))?;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let a = post(client, lb, Some(&sid), &[], &note).await?;
    if a.status != 202 && a.status != 200 {
        return Err(format!("{who}: initialized: {}", a.describe()));
    }
    let call = tool_call("open_ticket", json!({"title": who}));
    let a = post(client, lb, Some(&sid), &[], &call).await?;
    let ok = a.status == 200 && a.message["result"]["isError"] != json!(true);
    if !ok || a.message.get("result").is_none() {
        return Err(format!("{who}: tools/call: {}", a.describe()));
    }
    Ok(())
}

/// What `fleetmcp_untrusted_forwarded_headers_total` says on the instance at `port`.
fn untrusted_forwarded(port: u16) -> Option<u64> {
    metric(port, "fleetmcp_untrusted_forwarded_headers_total")
}

/// Twelve clients x 100 sessions through the balancer `deploy/local-fleet.sh` starts with
/// `args`, each session initialized and called: all answered 200. Then one client is filled to
/// the per-key limit (its 1,001st session refused), and a thirteenth client naming it in its own
/// `X-Forwarded-For` or `X-Real-IP` is still admitted, as itself.
fn many_clients_through(args: &[&str], balancer: &str) {
    let started = Instant::now();
    let fleet = LocalFleet::start(args);
    let lb = fleet.lb;
    assert!(fleet.output().contains(&format!("fleet up ({balancer} ")));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let address = |n: u8| Ipv4Addr::new(127, 0, 0, n);
    let failures: Vec<String> = runtime.block_on(async {
        let mut clients = tokio::task::JoinSet::new();
        for n in 2..2 + CLIENTS {
            clients.spawn(async move {
                let client = client_on(address(n));
                let who = format!("client {}", address(n));
                let mut failed = Vec::new();
                for _ in 0..SESSIONS_EACH {
                    if let Err(e) = session_with_a_call(&client, lb, &who).await {
                        failed.push(e);
                    }
                }
                failed
            });
        }
        let mut all = Vec::new();
        while let Some(done) = clients.join_next().await {
            all.extend(done.unwrap_or_else(|e| vec![format!("a client's task failed: {e}")]));
        }
        all
    });
    if !failures.is_empty() {
        let shown: Vec<&String> = failures.iter().take(5).collect();
        fleet.fail(&format!(
            "{} of {} sessions through {balancer} not opened and called (the first: {shown:#?})",
            failures.len(),
            usize::from(CLIENTS) * SESSIONS_EACH
        ));
    }
    let opened = started.elapsed();

    // The per-client limit still holds: the first client's sessions up to 1,000 (the default
    // `limits.max_sessions_per_key`), then one more, refused.
    let first = client_on(address(2));
    let spoofer = client_on(address(2 + CLIENTS));
    let (filled, over, spoofed) = runtime.block_on(async {
        let more = 1000 - SESSIONS_EACH;
        let filled: Vec<Result<String, Answer>> = futures_util::stream::iter(0..more)
            .map(|_| initialize(&first, lb, &[]))
            .buffer_unordered(8)
            .collect()
            .await;
        let over = initialize(&first, lb, &[]).await;
        // A client naming the first in its own forwarding headers: admitted as itself (as the
        // first, it would be refused too).
        let mut spoofed = Vec::new();
        for header in ["X-Forwarded-For", "X-Real-IP"] {
            let claim = address(2).to_string();
            let got = initialize(&spoofer, lb, &[(header, &claim)]).await;
            spoofed.push((header, got));
        }
        (filled, over, spoofed)
    });
    let refused: Vec<String> = filled
        .iter()
        .filter_map(|r| r.as_ref().err().map(Answer::describe))
        .collect();
    if !refused.is_empty() {
        fleet.fail(&format!(
            "the first client's sessions 101 to 1,000 through {balancer}: {} refused (the first: {})",
            refused.len(),
            refused[0]
        ));
    }
    match over {
        Ok(sid) => fleet.fail(&format!(
            "the first client's 1,001st session through {balancer} admitted ({sid}): the per-client limit does not hold"
        )),
        Err(a) => {
            assert_eq!(a.status, 429, "the 1,001st session: {}", a.describe());
            assert_eq!(
                a.message["error"]["data"]["limit"],
                "sessionsPerKey",
                "the 1,001st session: {}",
                a.describe()
            );
        }
    }
    for (header, got) in spoofed {
        if let Err(a) = got {
            fleet.fail(&format!(
                "a client on {} claiming {} in {header} through {balancer} counted as that client: {}",
                address(2 + CLIENTS),
                address(2),
                a.describe()
            ));
        }
    }

    // The instances believed the balancer: none warned or counted a forwarding header it
    // ignored.
    for (i, port) in fleet.instances().into_iter().enumerate() {
        assert_eq!(
            untrusted_forwarded(port),
            Some(0),
            "desk-{} counted forwarding headers it ignored",
            i + 1
        );
        let log = fleet.desk_log(i + 1);
        assert!(
            !log.contains("FLEETMCP_CLIENT_ADDRESS_HEADER"),
            "desk-{}:\n{log}",
            i + 1
        );
    }
    eprintln!(
        "{balancer}: {} sessions opened and called in {opened:?}; all in {:?}",
        usize::from(CLIENTS) * SESSIONS_EACH,
        started.elapsed()
    );
}

#[test]
fn twelve_clients_hold_1200_sessions_through_nginx_each_counted_as_itself() {
    many_clients_through(&[], "nginx");
}

#[test]
fn twelve_clients_hold_1200_sessions_through_haproxy_each_counted_as_itself() {
    many_clients_through(&["--haproxy"], "haproxy");
}
