//! The official clients as the gateway's tests run them: a script of `tools/clients/` against a
//! URL, run to its end ([`run_client`]) or paused mid-session while the test stops an instance
//! ([`PausedClient`]), its report (the last JSON line it prints, `{"ok": ..., "steps": [...]}`)
//! read back, and the gateways' logs shown when it fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Instance, TempDir, repo_root, run};

/// `tools/clients/ts-v1/<script>` on `node`, against `url`.
pub fn ts_client(script: &str, url: &str) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(repo_root().join("tools/clients/ts-v1").join(script))
        .arg(url);
    cmd
}

/// `tools/clients/python/<script>` on the Python SDK's venv, against `url`.
pub fn python_client(script: &str, url: &str) -> Command {
    let root = repo_root();
    let mut cmd = Command::new(root.join("tools/clients/python/venv/bin/python"));
    cmd.arg(root.join("tools/clients/python").join(script))
        .arg(url);
    cmd
}

/// What a client printed, and the steps its report lists.
pub struct ClientRun {
    pub stdout: String,
    pub report: Value,
    pub steps: Vec<String>,
}

impl ClientRun {
    fn read(stdout: String, describe: impl Fn() -> String) -> Self {
        let report: Value = stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no report:\n{}", describe()));
        let steps = report["steps"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        Self {
            stdout,
            report,
            steps,
        }
    }

    /// Fails the test unless each of `expected` is in one of the steps.
    pub fn assert_steps(&self, expected: &[&str]) {
        for e in expected {
            assert!(
                self.steps.iter().any(|s| s.contains(e)),
                "no step {e:?} in {:#?}",
                self.steps
            );
        }
    }
}

/// The gateways' logs, for a failure's message.
fn logs(instances: &[&Instance]) -> String {
    instances
        .iter()
        .map(|i| i.log())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Runs a client to its end (killed past `limit`); fails the test unless it exited 0 with a
/// report.
pub fn run_client(mut cmd: Command, limit: Duration, instances: &[&Instance]) -> ClientRun {
    let scratch = TempDir::new("gateway-client");
    let out = run(&mut cmd, limit, scratch.path());
    let describe = || format!("{}\n--- gateways ---\n{}", out.describe(), logs(instances));
    assert!(out.success(), "client failed:\n{}", describe());
    ClientRun::read(out.stdout.clone(), describe)
}

/// A client that runs its first phase, prints `READY`, and waits for a line on its stdin
/// before its second: the test stops an instance in between.
pub struct PausedClient {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl PausedClient {
    /// Starts the client and waits until it is ready (fails the test if it is not).
    pub fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let Some(out) = child.stdout.take() else {
            panic!("the client has no stdout");
        };
        let mut stdout = BufReader::new(out);
        let mut first = String::new();
        let _ = stdout.read_line(&mut first);
        if !first.starts_with("READY") {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the client's first phase failed: {first}");
        }
        Self { child, stdout }
    }

    /// Lets it go on, and waits for its end; fails the test unless it exited 0 with a report.
    pub fn resume(mut self, instances: &[&Instance]) -> ClientRun {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = writeln!(stdin, "GO");
        }
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        let status = self.child.wait();
        let describe = || format!("{rest}\n--- gateways ---\n{}", logs(instances));
        assert!(
            status.as_ref().is_ok_and(|s| s.success()),
            "the client failed in its second phase ({status:?}):\n{}",
            describe()
        );
        ClientRun::read(rest.clone(), describe)
    }
}

impl Drop for PausedClient {
    fn drop(&mut self) {
        // A test that fails before `resume` leaves no client behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
