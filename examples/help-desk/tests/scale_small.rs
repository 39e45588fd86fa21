//! The scale harness's small shape (issue 37): `bench/scale.sh` with 3 instances, 2,000
//! sessions, 50 idle streams and 200 calls held and 200 relayed, on one redis-server, against this
//! test run's help-desk and a debug `fleet-loadgen` (built here when missing: it is a bench
//! crate, outside the workspace's default members). The harness checks its own counts
//! (sessions opened = records in Redis = entries of the holders' indexes = entries of the
//! per-key limit sets; every call answered; every relayed call answered by its holder through
//! another instance; every stream open; the killed instance's sessions all claimed by the
//! others) and exits 1 when one is off; this test also reads its table and asserts that the
//! figures it prints are counted (nonzero where something must have happened). Counts, never
//! timings: the machine may be busy.
//!
//! Needs `redis-server` and `redis-cli`, as the fleet tests do.

#[path = "../../e2e_support.rs"]
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The debug `fleet-loadgen` beside this run's help-desk, built if it is not there.
fn loadgen(bin_dir: &Path) -> PathBuf {
    let path = bin_dir.join("fleet-loadgen");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "fleet-loadgen"])
            .current_dir(support::repo_root())
            .status()
            .expect("run cargo build -p fleet-loadgen");
        assert!(status.success(), "cargo build -p fleet-loadgen failed");
    }
    path
}

/// The table's rows: coefficient -> measured figure.
fn figures(out: &str) -> HashMap<String, f64> {
    out.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            // "| key | measured | predicted | ratio | how |"
            let value = cells.get(2)?.parse::<f64>().ok()?;
            Some((cells.get(1)?.to_string(), value))
        })
        .collect()
}

#[test]
fn the_small_scale_run_counts_what_it_made() {
    let help_desk = Path::new(env!("CARGO_BIN_EXE_help-desk"));
    let bin_dir = help_desk.parent().expect("the binary's directory");
    let loadgen = loadgen(bin_dir);
    let scratch = support::TempDir::new("scale-small");
    let mut cmd = Command::new("bash");
    cmd.arg(support::repo_root().join("bench/scale.sh"))
        .current_dir(support::repo_root())
        .env("HELP_DESK_BIN", help_desk)
        .env("LOADGEN_BIN", &loadgen)
        .env("SKIP_BUILD", "1")
        .env("INSTANCES", "3")
        .env("SESSIONS", "2000")
        .env("STREAMS", "50")
        .env("CALLS", "200")
        .env("WINDOW", "2")
        .env("HEARTBEAT_MS", "1000")
        .env("NOTIFY", "20")
        .env("BENCHMARK", "0")
        .env("CONCURRENCY", "16")
        .env("TMPDIR", scratch.path())
        .env_remove("REDIS_URL")
        .env_remove("MCP_SESSION_SECRET");
    let out = support::run(&mut cmd, Duration::from_secs(240), scratch.path());
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    assert!(
        out.status.is_some_and(|s| s.success()),
        "bench/scale.sh failed ({:?}):\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("Checks: all counts agree"),
        "the harness did not vouch for its counts:\n{stdout}\n{stderr}"
    );
    let f = figures(stdout);
    for key in [
        "idle_commands_per_instance_per_s",
        "redis_connections_per_instance",
        "commands_per_initialize",
        "redis_bytes_per_idle_session",
        "record_bytes",
        "node_index_bytes_per_entry",
        "limit_set_bytes_per_entry",
        "commands_per_relayed_call",
        "recovery_commands_per_session",
    ] {
        let v = f
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in the table:\n{stdout}"));
        assert!(*v > 0.0, "{key} = {v}: nothing counted\n{stdout}");
    }
    // A record holds at least its id (62 characters) and a JSON body; the index entry its id.
    assert!(f["record_bytes"] > 100.0, "{stdout}");
    assert!(f["node_index_bytes_per_entry"] > 62.0, "{stdout}");
    // `initialize` stores a record, indexes it and counts it in a limit set: several commands.
    assert!(f["commands_per_initialize"] >= 2.0, "{stdout}");
}
