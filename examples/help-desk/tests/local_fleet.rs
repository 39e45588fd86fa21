//! `deploy/local-fleet.sh`, the README's "fleet on your machine", run as a newcomer runs it
//! (issue 20, part 2): it starts Redis, three help-desks and nginx, a session opened through
//! nginx is served by its holder from every instance, and Ctrl-C (SIGINT to the script's whole
//! process group, as a terminal sends it) stops the instances first, each draining while Redis
//! and nginx still serve it, then nginx and Redis: no instance logs a warning. Before, Ctrl-C
//! reached Redis and nginx at the same moment as the instances, and every instance logged lost
//! subscriptions and a lost tracking connection while it drained.
//!
//! Needs `redis-server`, `nginx` and `setsid` (util-linux), as the script does. The binaries are
//! this test run's (`FLEET_BIN_DIR`): the script builds nothing.

#[path = "../../e2e_support.rs"]
mod support;

mod fleet_client;

use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::json;

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

#[test]
fn the_local_fleet_serves_and_ctrl_c_drains_the_instances_before_redis_and_nginx_stop() {
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
    // `setsid`: the script leads a process group of its own, like a terminal's foreground job.
    let mut script = Command::new("setsid")
        .arg("bash")
        .arg(support::repo_root().join("deploy/local-fleet.sh"))
        .current_dir(support::repo_root())
        .env("LB_PORT", lb.to_string())
        .env("FIRST_PORT", first.to_string())
        .env("FLEET_REDIS_PORT", redis.to_string())
        .env("FLEET_BIN_DIR", &bin_dir)
        .env_remove("MCP_SESSION_SECRET")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("start deploy/local-fleet.sh");
    let pid = script.id();
    let output = || std::fs::read_to_string(&out_path).unwrap_or_default();
    let stop_all = |why: &str| -> ! {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{pid}")])
            .status();
        panic!("{why}\n--- script output ---\n{}", output());
    };
    let start = Instant::now();
    while !output().contains("Ctrl-C stops the fleet.") {
        if start.elapsed() > Duration::from_secs(60) {
            stop_all("the fleet did not come up within 60 s");
        }
        if let Ok(Some(status)) = script.try_wait() {
            panic!("the script exited ({status}):\n{}", output());
        }
        thread::sleep(Duration::from_millis(100));
    }
    let printed = output();
    assert!(
        printed.contains(&format!("MCP endpoint:   http://127.0.0.1:{lb}/mcp")),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("{}/fleetmcp-ctl status", bin_dir.display())),
        "{printed}"
    );
    let logs = printed
        .lines()
        .find_map(|l| l.trim().strip_prefix("logs:"))
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| stop_all("no logs folder printed"));

    // A session opened through nginx, called on every instance: served by its holder.
    let (sid, holder) = open_session_held(lb);
    let holder = holder.unwrap_or_else(|| stop_all("initialize named no instance"));
    for port in [lb, first, first + 1, first + 2] {
        let resp = call_tool(port, &sid, &[], "open_ticket", json!({"title": "fleet"}));
        assert_served_by(&resp, &holder, &format!("open_ticket on port {port}"));
    }

    // Ctrl-C: SIGINT to the whole process group.
    Command::new("kill")
        .args(["-INT", "--", &format!("-{pid}")])
        .status()
        .expect("send SIGINT");
    let stopped = Instant::now();
    loop {
        if let Ok(Some(_)) = script.try_wait() {
            break;
        }
        if stopped.elapsed() > Duration::from_secs(20) {
            stop_all("the script did not stop within 20 s of Ctrl-C");
        }
        thread::sleep(Duration::from_millis(100));
    }
    let printed = output();
    assert!(printed.contains("stopped; logs were in"), "{printed}");
    for i in 1..=3 {
        let log = std::fs::read_to_string(Path::new(&logs).join(format!("desk-{i}.log")))
            .unwrap_or_else(|e| panic!("desk-{i}.log: {e}"));
        assert!(log.contains("shutting down: draining"), "desk-{i}:\n{log}");
        assert!(log.contains("stopped shutdown_ms="), "desk-{i}:\n{log}");
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
        assert!(
            warnings.is_empty(),
            "desk-{i} logged warnings while the fleet stopped:\n{}",
            warnings.join("\n")
        );
    }
    let redis_log = std::fs::read_to_string(Path::new(&logs).join("redis.log")).unwrap_or_default();
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
    let _ = std::fs::remove_dir_all(&logs);
}
