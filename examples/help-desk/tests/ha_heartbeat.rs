//! Distributed mode's heartbeat, with real help-desk processes and a real redis-server: each
//! instance keeps `mcp:ha:heartbeat:<id>` alive, deletes it on SIGTERM, leaves it to expire on
//! SIGKILL, and an instance refuses to start under a machine id a running one already uses.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Instance, http_get};
use support_redis::RedisServer;

fn distributed<'a>(machine: &'a str, redis_url: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("MACHINE_ID", machine),
        ("REDIS_URL", redis_url),
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "300"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "1200"),
        // A short drain keeps SIGTERM quick (the drain itself: chaos.rs).
        ("FLEETMCP_DRAIN_MS", "200"),
    ]
}

fn heartbeat(redis: &RedisServer, machine: &str) -> Option<Value> {
    let raw = redis.cli(&["GET", &format!("mcp:ha:heartbeat:{machine}")]);
    serde_json::from_str(raw.trim()).ok()
}

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn instances_beat_delete_on_sigterm_and_expire_on_sigkill() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut a = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &distributed("node-a", &url),
    );
    let mut b = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &distributed("node-b", &url),
    );

    let first = heartbeat(&redis, "node-a").expect("node-a beats");
    assert_eq!(first["nodeId"], "node-a");
    assert!(
        first["startedAt"].is_u64() && first["sessionCount"].is_u64(),
        "{first}"
    );
    wait_until("the heartbeat is rewritten", Duration::from_secs(3), || {
        heartbeat(&redis, "node-a").is_some_and(|h| h["lastBeat"] != first["lastBeat"])
    });
    let ttl: i64 = redis
        .cli(&["PTTL", "mcp:ha:heartbeat:node-a"])
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 0 && ttl <= 1200, "PX is the configured TTL: {ttl}");
    for log in [
        "[HA] Manager started for distributed deployment",
        "[HA] Heartbeat started for node node-a",
    ] {
        assert!(a.log().contains(log), "{log}\n{}", a.log());
    }
    // Readiness reports the heartbeat; every response names the instance.
    let ready = http_get(a.port(), "/readyz").unwrap();
    assert_eq!(ready.status, 200, "{}", ready.describe());
    assert_eq!(
        ready.header("x-frontmcp-machine-id"),
        Some("node-a"),
        "{}",
        ready.describe()
    );
    assert!(
        ready.body.contains("\"heartbeatActive\":true"),
        "{}",
        ready.describe()
    );

    // SIGTERM: exit 0 and the heartbeat is gone at once.
    let status = a
        .signal_and_wait("TERM", Duration::from_secs(10))
        .expect("node-a exits");
    assert!(status.success(), "{status:?}");
    assert!(
        heartbeat(&redis, "node-a").is_none(),
        "deleted on a graceful stop"
    );
    assert!(
        a.log().contains("[HA] Services stopped for node node-a"),
        "{}",
        a.log()
    );

    // SIGKILL: the key stays until its TTL runs out.
    assert!(b.signal_and_wait("KILL", Duration::from_secs(5)).is_some());
    assert!(
        heartbeat(&redis, "node-b").is_some(),
        "a crash leaves the heartbeat behind"
    );
    wait_until(
        "the crashed instance's heartbeat expires",
        Duration::from_secs(3),
        || heartbeat(&redis, "node-b").is_none(),
    );
}

#[test]
fn a_second_instance_with_a_machine_id_in_use_refuses_to_start() {
    let redis = RedisServer::start();
    let url = redis.url();
    let _a = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &distributed("node-a", &url),
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_help-desk"));
    cmd.envs(distributed("node-a", &url))
        .env("PORT", support::free_port().to_string())
        .env("MCP_SESSION_SECRET", support::SESSION_SECRET)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = cmd.output().expect("help-desk runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "it must not start:\n{text}");
    assert!(
        text.contains("another running instance already uses machine id node-a"),
        "{text}"
    );
}

/// Distributed mode never derives the session key from the machine id (every response publishes
/// it): without `MCP_SESSION_SECRET` the instance refuses to start and says why.
#[test]
fn distributed_mode_without_a_session_secret_refuses_to_start() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_help-desk"));
    cmd.env("FRONTMCP_DEPLOYMENT_MODE", "distributed")
        .env("FRONTMCP_BIND_ADDRESS", "loopback")
        .env("MACHINE_ID", "node-s")
        .env("MCP_SESSION_SECRET", "")
        .env("REDIS_URL", "")
        .env("PORT", support::free_port().to_string());
    let scratch = support::TempDir::new("no-secret");
    let out = support::run(&mut cmd, Duration::from_secs(20), scratch.path());
    assert!(!out.success(), "it must not start:\n{}", out.describe());
    assert!(
        out.describe().contains("MCP_SESSION_SECRET")
            && out.describe().contains("required in distributed mode"),
        "{}",
        out.describe()
    );
}

/// At the default timings (a heartbeat every 10 s, 30 s lifetime): an instance restarted under
/// its own machine id after a SIGKILL is serving long before a heartbeat interval has passed
/// (the crashed process holds no subscription on its channel any more), and a second instance
/// under the id of a running one is refused just as fast.
#[test]
fn a_restart_after_sigkill_serves_at_once_and_a_live_twin_is_refused_at_once() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("MACHINE_ID", "node-k"),
        ("REDIS_URL", url.as_str()),
    ];
    let mut first = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &env);
    let interval = Duration::from_secs(10);

    // A live twin: refused without waiting an interval.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_help-desk"));
    cmd.envs(env)
        .env("PORT", support::free_port().to_string())
        .env("MCP_SESSION_SECRET", support::SESSION_SECRET);
    let scratch = support::TempDir::new("twin");
    let began = Instant::now();
    let out = support::run(&mut cmd, Duration::from_secs(30), scratch.path());
    let refused_after = began.elapsed();
    assert!(!out.success(), "a twin must not start:\n{}", out.describe());
    assert!(
        out.describe().contains("already uses machine id node-k"),
        "{}",
        out.describe()
    );
    assert!(
        refused_after < interval / 2,
        "refused after {refused_after:?}, not after a heartbeat interval"
    );

    // A crash leaves the heartbeat behind; the restarted instance takes its place at once.
    assert!(
        first
            .signal_and_wait("KILL", Duration::from_secs(5))
            .is_some()
    );
    assert!(
        heartbeat(&redis, "node-k").is_some(),
        "left behind by the crash"
    );
    let began = Instant::now();
    let second = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &env);
    let serving_after = began.elapsed();
    assert!(
        serving_after < interval / 2,
        "healthy {serving_after:?} after the restart, not after a heartbeat interval\n{}",
        second.log()
    );
    assert!(
        second
            .log()
            .contains("A stopped instance left its heartbeat under machine id node-k"),
        "{}",
        second.log()
    );
    let hb = heartbeat(&redis, "node-k").expect("the new instance beats");
    assert_ne!(
        hb["startedAt"],
        Value::Null,
        "the key is the new instance's: {hb}"
    );
}

/// The port is bound only once the instance is ready: while distributed mode's start waits on a
/// paused Redis, connections are refused (a load balancer moves on) rather than accepted and
/// left unanswered; once Redis answers, the instance serves.
#[test]
fn the_port_opens_only_when_the_instance_is_ready() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    redis.pause();
    let port = support::free_port();
    let scratch = support::TempDir::new("late-listen");
    let log = std::fs::File::create(scratch.path().join("log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_help-desk"))
        .envs(distributed("node-late", &url))
        .env("PORT", port.to_string())
        .env("MCP_SESSION_SECRET", support::SESSION_SECRET)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // Connecting to Redis alone is bounded by 1 s + 0.5 s here, so for the first 0.8 s the
    // instance is certainly not ready.
    let began = Instant::now();
    while began.elapsed() < Duration::from_millis(800) {
        let c = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100));
        assert!(
            c.is_err(),
            "connected {:?} after spawning, before the instance was ready",
            began.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    redis.resume();
    wait_until(
        "the instance serves once Redis answers",
        Duration::from_secs(20),
        || http_get(port, "/healthz").is_ok_and(|r| r.status == 200),
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// An instance back from a Redis outage that expired its heartbeat key is seen alive again at
/// once, not up to an interval later (others presume an instance without a heartbeat and a
/// subscriber gone): a beat that could not be written is tried again within half a second.
/// Here the interval is 4 s; after a cut of the instance's link past the 8 s lifetime, its key
/// is back within 1.5 s of the link's return.
#[test]
fn a_failed_beat_is_tried_again_within_half_a_second() {
    let redis = RedisServer::start();
    let proxy = support_redis::CuttableProxy::start(redis.port);
    let url = proxy.url();
    let mut env = distributed("node-a", &url);
    env.retain(|(k, _)| !k.starts_with("FRONTMCP_HA_HEARTBEAT"));
    env.extend([
        ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "4000"),
        ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "8000"),
    ]);
    // Its address set, so that nothing but the beat loop writes the key (a found address
    // that changes is advertised at once, with a beat of its own).
    let port = support::free_port();
    let address = format!("127.0.0.1:{port}");
    env.push(("FLEETMCP_ADVERTISE_ADDRESS", &address));
    let a = Instance::start_on(env!("CARGO_BIN_EXE_help-desk"), port, &env);
    assert!(heartbeat(&redis, "node-a").is_some(), "node-a beats");
    proxy.cut();
    wait_until("the key expires", Duration::from_secs(10), || {
        heartbeat(&redis, "node-a").is_none()
    });
    proxy.restore();
    let back = Instant::now();
    wait_until("the key is back", Duration::from_millis(1500), || {
        heartbeat(&redis, "node-a").is_some()
    });
    eprintln!("the heartbeat was back {:?} after the link", back.elapsed());
    a.assert_no_panic_logged();
}

/// Calls of `command` since the last `CONFIG RESETSTAT` (`INFO commandstats`, where commands run
/// inside scripts count too).
fn calls(redis: &RedisServer, command: &str) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// An idle fleet runs one orphan scan per interval, not one per instance, and its scans ask
/// nothing of instances whose score in `mcp:ha:nodes` is recent: the fleet's idle load grows
/// with its size, not with its square (every instance checking every other's heartbeat each
/// interval made 6 instances send 30 `EXISTS` an interval). A stopped instance is still found
/// at once: its stop scores it 0.
#[test]
fn an_idle_fleet_runs_one_orphan_scan_per_interval() {
    let redis = RedisServer::start();
    let url = redis.url();
    let ids: Vec<String> = (0..6).map(|i| format!("idle-{i}")).collect();
    let mut fleet: Vec<Instance> = ids
        .iter()
        .map(|id| {
            let mut env = distributed(id, &url);
            env.push(("FRONTMCP_HA_TAKEOVER_GRACE_MS", "300"));
            Instance::start(env!("CARGO_BIN_EXE_help-desk"), &env)
        })
        .collect();
    // Every scanner has begun (an interval plus the grace after its start).
    std::thread::sleep(Duration::from_millis(1500));
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let window = Duration::from_secs(3);
    std::thread::sleep(window);
    let (scans, checks) = (calls(&redis, "zrange"), calls(&redis, "exists"));
    // One scan per 300 ms interval: 10 in the window, one more at its edges, and a margin for
    // a slow timer; one scan per instance per interval would be 60.
    assert!(
        (5..=14).contains(&scans),
        "{scans} scans of mcp:ha:nodes in {window:?}"
    );
    assert_eq!(checks, 0, "heartbeats checked though every score is recent");

    // A graceful stop scores the instance 0, and the next scan finds it gone.
    let mut stopped = fleet.pop().expect("six instances");
    assert!(
        stopped
            .signal_and_wait("TERM", Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    let score = redis.cli(&["ZSCORE", "mcp:ha:nodes", "idle-5"]);
    assert!(
        matches!(score.trim(), "" | "0"),
        "a stopped instance is scored 0 (or already claimed): {score:?}"
    );
    wait_until(
        "a scanner claims the stopped instance's (empty) index",
        Duration::from_secs(3),
        || {
            !redis
                .cli(&["ZRANGE", "mcp:ha:nodes", "0", "-1"])
                .contains("idle-5")
        },
    );
    for mut i in fleet {
        i.assert_alive();
    }
}
