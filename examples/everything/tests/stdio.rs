//! `everything` over stdio (`FLEETMCP_TRANSPORT=stdio`), started by the official clients as their
//! child process, with what a session offers: progress, logging, resources, subscriptions and
//! `notifications/resources/updated`, templates and completion, prompts, sampling, elicitation and
//! roots answered by the client, `notifications/tools/list_changed`, cancellation, a 2025-11-25
//! task (TypeScript SDK), ping, and the server exiting 0 once the client closes its stdin. Then MCP
//! Inspector's CLI running many calls at once over one stdio session, and the same on the raw
//! pipes: every line whole, every call's progress before its answer.
//!
//! Needs the tooling installed by `tools/setup.sh` (run here once per test process).

#[path = "../../stdio_support.rs"]
mod stdio;
#[path = "../../e2e_support.rs"]
mod support;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use stdio::{CLIENT_DEADLINE, RawServer, inspector, python_client, steps_passed, ts_client};
use support::{TempDir, ensure_tooling, run};

const BIN: &str = env!("CARGO_BIN_EXE_everything");

/// The steps both SDK scripts report for `everything`, in order (prefixes).
const STEPS: &[&str] = &[
    "connect: stdio",
    "list",
    "progress: 0,50,100",
    "logging: 3 messages",
    "subscribe: notifications/resources/updated test://watched-resource",
    "complete: 123,124",
    "get", // getPrompt / get_prompt
    "sampling, elicitation and roots answered by the client",
    "notifications/tools/list_changed",
    "cancel: handler stopped",
];

#[test]
fn typescript_sdk_stdio_client_drives_everything() {
    ensure_tooling();
    let scratch = TempDir::new("stdio-ts-everything");
    let out = run(
        &mut ts_client("everything", BIN),
        CLIENT_DEADLINE,
        scratch.path(),
    );
    let tail: &[&str] = &[
        "task: taskCreated",
        "ping",
        "close: stdin closed, server exited 0",
        "logs on stderr only",
    ];
    let steps = steps_passed(&out, &[STEPS, tail].concat());
    eprintln!("steps: {steps:#?}");
}

/// The Python SDK does not say how its child ended, so the server runs under `sh`, which writes
/// its exit code to a file once it exits: the SDK closes the child's stdin and waits 2 s before
/// it terminates it, so a code there (0) means the server exited on EOF by itself.
#[test]
fn python_sdk_stdio_client_drives_everything() {
    ensure_tooling();
    let scratch = TempDir::new("stdio-py-everything");
    let exit_file = scratch.path().join("server-exit");
    let exit_path = exit_file.to_string_lossy().into_owned();
    let wrapped = [
        "/bin/sh",
        "-c",
        r#""$0"; echo $? > "$1""#,
        BIN,
        exit_path.as_str(),
    ];
    let out = run(
        &mut python_client("everything", &wrapped),
        CLIENT_DEADLINE,
        scratch.path(),
    );
    let steps = steps_passed(&out, &[STEPS, &["ping", "logs on stderr only"]].concat());
    eprintln!("steps: {steps:#?}");
    let code = std::fs::read_to_string(&exit_file).unwrap_or_default();
    assert_eq!(
        code.trim(),
        "0",
        "the server's exit code\n{}",
        out.describe()
    );
}

/// The Inspector's load mode: 200 calls of a tool that streams progress, 20 at a time, over one
/// stdio session; every one answered.
#[test]
fn inspector_cli_runs_concurrent_calls_over_one_stdio_session() {
    ensure_tooling();
    let home = TempDir::new("stdio-inspector-home");
    let scratch = TempDir::new("stdio-inspector-load");
    let args = [
        "--method",
        "tools/call",
        "--tool-name",
        "test_tool_with_progress",
        "--load",
        "--load-requests",
        "200",
        "--load-concurrency",
        "20",
    ];
    let out = run(
        &mut inspector(BIN, home.path(), &args),
        CLIENT_DEADLINE,
        scratch.path(),
    );
    let report = out.describe();
    assert!(out.success(), "{report}");
    let v: Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}:\n{report}"));
    let load = &v["result"];
    assert_eq!(
        (&load["ok"], &load["errors"]),
        (&json!(200), &json!(0)),
        "{report}"
    );
}

/// Forty calls written at once, then EOF: every line on stdout is one JSON message, each call's
/// progress comes in order and before its answer, all forty are answered within the grace
/// period, and the server exits 0.
#[test]
fn concurrent_calls_on_raw_pipes_come_back_whole_and_in_order() {
    let scratch = TempDir::new("stdio-raw-everything");
    let mut s = RawServer::start(BIN, &[("FLEETMCP_TRANSPORT", "stdio")], scratch.path());
    s.initialize();
    s.send(
        r#"{"jsonrpc":"2.0","id":"level","method":"logging/setLevel","params":{"level":"info"}}"#,
    );
    s.answer(&json!("level"));
    for id in 1..=40 {
        let tool = if id % 2 == 0 {
            "test_tool_with_progress"
        } else {
            "test_tool_with_logging"
        };
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}, "_meta": {"progressToken": id}}});
        s.send(&call.to_string());
    }
    s.close_stdin();
    let mut progress: HashMap<u64, Vec<f64>> = HashMap::new();
    let mut answered = 0;
    let mut logs = 0;
    for m in s.rest() {
        if m["method"] == "notifications/progress" {
            let token = m["params"]["progressToken"].as_u64().unwrap_or(0);
            progress
                .entry(token)
                .or_default()
                .push(m["params"]["progress"].as_f64().unwrap_or(-1.0));
        } else if m["method"] == "notifications/message" {
            logs += 1;
        } else if let Some(id) = m["id"].as_u64() {
            let seen = progress.get(&id).cloned().unwrap_or_default();
            let want: Vec<f64> = if id % 2 == 0 {
                vec![0.0, 50.0, 100.0]
            } else {
                vec![]
            };
            assert_eq!(seen, want, "call {id}'s progress before its answer: {m}");
            assert_eq!(m["result"]["isError"], false, "{m}");
            answered += 1;
        }
    }
    assert_eq!(
        (answered, logs),
        (40, 60),
        "every call answered, every log line sent"
    );
    let status = s.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "stderr:\n{}", s.stderr());
}
