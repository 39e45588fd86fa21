//! The official conformance suites through a real nginx running the repository's
//! `deploy/nginx/fleetmcp.conf` (round robin, no affinity), over two
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

use std::process::Command;
use std::time::Duration;

use support::{Instance, Nginx, TempDir, ensure_tooling, free_port, repo_root, run};
use support_redis::RedisServer;

const SUITE_DEADLINE: Duration = Duration::from_secs(180);

/// How many requests nginx sent to `upstream` (its access log names the upstreams).
fn answered_by(nginx: &Nginx, upstream: u16) -> usize {
    let addr = format!("127.0.0.1:{upstream}");
    nginx
        .access_log()
        .lines()
        .filter(|l| l.contains(&addr))
        .count()
}

fn url_of(nginx: &Nginx) -> String {
    format!("http://127.0.0.1:{}/mcp", nginx.port())
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
    let front = free_port();
    let nginx = Nginx::start(&Nginx::fleet_conf(&[a.port(), b.port()], front), front);
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
        let n = answered_by(&f.nginx, i.port());
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
    cmd.arg(url_of(&f.nginx)).arg("-o").arg(results.path());
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
        .arg(url_of(&f.nginx))
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
