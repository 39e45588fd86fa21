//! The official conformance suite 0.1.16 `--suite all` against our `everything` over stdio
//! behind the gateway: through one gateway, and through two gateways of a fleet on a real
//! `redis-server` behind nginx round robin (`deploy/nginx/fleetmcp.conf`), where any request may
//! land on the instance that does not hold its session.
//!
//! `everything` served directly passes 46 checks (`examples/everything/tests/conformance.rs`).
//! One of them, `server-sse-disconnect-resume` (scenario `server-sse-polling`, SEP-1699), is
//! made only when the server ends the connection of a request's SSE stream before its answer
//! and the client then gets the answer by resuming with `Last-Event-ID`: `everything`'s
//! `test_reconnection` asks for that with `ctx.end_connection_for_polling()`, which stdio has
//! no message for, so an upstream behind the gateway cannot ask. The gateway can poll by time
//! instead (`FLEETMCP_UPSTREAM_POLL_AFTER_MS`): with it at 200 ms (`test_reconnection` runs for
//! 300 ms upstream), the fleet passes the check and scores 46, as `everything` served directly;
//! without it (the default), one gateway answers on the first connection, the suite records the
//! check as `INFO`, and the score is 45 with nothing failed.
//!
//! Needs nginx, `redis-server`, the tooling of `tools/setup.sh` and `cargo build -p everything`.

#[path = "../../../examples/e2e_support.rs"]
mod support;

#[path = "../../fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;
use support::{Instance, TempDir, ensure_tooling, repo_root, run};
use support_redis::RedisServer;

const SUITE_DEADLINE: Duration = Duration::from_secs(180);
/// Every check `everything` passes served directly.
const DIRECT: u32 = 46;
/// The one check only SSE polling makes (see the top of the file).
const POLLING_CHECK: &str = "server-sse-disconnect-resume";

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

/// The status of check `id` in `scenario` (the suite writes its results in
/// `server-<scenario>-<time>/checks.json`).
fn check_status(results: &Path, scenario: &str, id: &str) -> Option<String> {
    let dir = std::fs::read_dir(results).ok()?.flatten().find(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.strip_prefix("server-")
            .and_then(|n| n.strip_prefix(scenario))
            .is_some_and(|rest| rest.starts_with("-2"))
    })?;
    let text = std::fs::read_to_string(dir.path().join("checks.json")).ok()?;
    let checks: Value = serde_json::from_str(&text).ok()?;
    checks
        .as_array()?
        .iter()
        .find(|c| c["id"] == id)
        .and_then(|c| c["status"].as_str())
        .map(String::from)
}

/// Runs the suite against `url`; fails the test unless nothing failed and exactly `passed`
/// checks passed, the polling check with `polling` status.
fn suite_scores(url: &str, instances: &[&Instance], passed: u32, polling: &str) {
    let results = TempDir::new("gateway-conformance-results");
    let scratch = TempDir::new("gateway-conformance-run");
    let mut cmd = Command::new(repo_root().join("tools/conformance/run-suite.sh"));
    cmd.arg(url).arg("-o").arg(results.path());
    let out = run(&mut cmd, SUITE_DEADLINE, scratch.path());
    let logs: Vec<String> = instances.iter().map(|i| i.log()).collect();
    let report = format!(
        "{}\n--- gateways ---\n{}",
        out.describe(),
        logs.join("\n---\n")
    );
    let Some((got, failed)) = totals(&out.stdout) else {
        panic!("no `Total:` line:\n{report}");
    };
    assert_eq!(failed, 0, "{failed} check(s) failed:\n{report}");
    assert!(out.success(), "the suite failed:\n{report}");
    let status = check_status(results.path(), "server-sse-polling", POLLING_CHECK);
    assert_eq!(
        status.as_deref(),
        Some(polling),
        "{POLLING_CHECK}:\n{report}"
    );
    assert_eq!(got, passed, "checks passed:\n{report}");
    for i in instances {
        i.assert_no_panic_logged();
    }
}

/// Polling off (the default): every check the suite makes passes, 45, one short of `everything`
/// served directly, the one being the polling check, made only as `INFO`.
#[test]
fn conformance_0_1_16_suite_all_through_the_gateway() {
    ensure_tooling();
    // The suite opens a session per scenario (32) from one address and ends none: more than a
    // key's default share of the processes (a quarter of 100).
    let mut gw = gateway(&[("FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY", "100")]);
    gw.wait_ready(Duration::from_secs(20));
    suite_scores(&gw.mcp_url(), &[&gw], DIRECT - 1, "INFO");
}

/// Polling on: the fleet scores what `everything` scores served directly, the polling check
/// included (its resumption may land on either instance, and reads the stream from Redis).
#[test]
fn conformance_0_1_16_suite_all_through_a_gateway_fleet_behind_nginx_round_robin() {
    ensure_tooling();
    let redis = RedisServer::start();
    let url = redis.url();
    let polling = [("FLEETMCP_UPSTREAM_POLL_AFTER_MS", "200")];
    let (a, b, nginx, front) = two_behind_nginx(&url, &polling, Duration::from_secs(20));
    suite_scores(&front, &[&a, &b], DIRECT, "SUCCESS");
    for gw in [&a, &b] {
        let n = sent_to(&nginx, gw);
        assert!(n > 10, "nginx sent {} only {n} requests", gw.port());
    }
}

/// `everything` served over Streamable HTTP as the gateway's upstream: its `test_reconnection`
/// ends its own stream's connection mid-answer, and the gateway resumes that stream upstream
/// with `Last-Event-ID` as a client would, so the client gets the tool's result, not an error.
/// Without the gateway's own polling the client gets it on its first connection (`INFO`, 45);
/// with it, after resuming (`SUCCESS`, 46, as `everything` served directly).
#[test]
fn conformance_0_1_16_suite_all_through_a_gateway_in_front_of_everything_over_http() {
    ensure_tooling();
    let dir = TempDir::new("everything-over-http");
    let config = dir.path().join("everything.toml");
    // A shorter `retry` than the default 3 s, so that the gateway's resumption upstream ends
    // well within the 5 s the suite reads its own resumed stream for.
    std::fs::write(&config, "[http]\nsse_retry_ms = 300\n").expect("write the config");
    let config = config.to_string_lossy().into_owned();
    let upstream = everything_over_http(&[("FLEETMCP_CONFIG", &config)]);
    let url = upstream.mcp_url();
    let http_upstream = [
        ("FLEETMCP_UPSTREAM_COMMAND", ""),
        ("FLEETMCP_UPSTREAM_URL", url.as_str()),
    ];
    let mut plain = gateway(&http_upstream);
    plain.wait_ready(Duration::from_secs(20));
    suite_scores(&plain.mcp_url(), &[&plain], DIRECT - 1, "INFO");
    let mut polling = http_upstream.to_vec();
    polling.push(("FLEETMCP_UPSTREAM_POLL_AFTER_MS", "200"));
    let mut polled = gateway(&polling);
    polled.wait_ready(Duration::from_secs(20));
    suite_scores(&polled.mcp_url(), &[&polled], DIRECT, "SUCCESS");
}
