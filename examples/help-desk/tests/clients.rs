//! Real MCP clients drive the help-desk example end to end: the TypeScript SDK v1
//! (`tools/clients/ts-v1/client.mjs`) and the Python SDK (`tools/clients/python/client.py`).
//! Each script checks the server's answers itself and prints `{"ok":true,"steps":[...]}`; these
//! tests also check that every expected step ran, in order, and that the server stayed up.
//!
//! Needs the tooling installed by `tools/setup.sh` (run here once per test process) and `node`
//! (>= 18; the TypeScript SDK 1.32.2 client runs on the system Node 20) on PATH.

#[path = "../../e2e_support.rs"]
mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{Instance, Output, TempDir, ensure_tooling, free_port, repo_root, run};

/// A client run takes 1-3 s here; generous for a loaded 2-core machine.
const CLIENT_DEADLINE: Duration = Duration::from_secs(60);

/// Steps `client.mjs` reports, in order: each is a prefix of the printed step.
const TS_STEPS: &[&str] = &[
    "connect: session ",
    "listTools: 4 tools",
    "open_ticket: id ",
    "close_ticket: id ",
    "readResource helpdesk://tickets/",
    "readResource helpdesk://policies/sla: non-empty",
    "listResourceTemplates: helpdesk://tickets/{id}",
    "getPrompt triage_ticket: ",
    "close_ticket without resolution: ",
    "terminateSession: DELETE ",
];

/// Steps `client.py` reports, in order: each is a prefix of the printed step.
const PY_STEPS: &[&str] = &[
    "connect: session ",
    "list_tools: 4 tools",
    "open_ticket: id ",
    "close_ticket: id ",
    "read_resource helpdesk://tickets/",
    "read_resource helpdesk://policies/sla: non-empty",
    "list_resource_templates: helpdesk://tickets/{id}",
    "get_prompt triage_ticket: ",
    "close_ticket without resolution: ",
    "terminate session: DELETE ",
];

fn ts_client(url: &str) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(repo_root().join("tools/clients/ts-v1/client.mjs"))
        .arg(url);
    cmd
}

fn python_client(url: &str) -> Command {
    let root = repo_root();
    let python: PathBuf = root.join("tools/clients/python/venv/bin/python");
    let mut cmd = Command::new(python);
    cmd.arg(root.join("tools/clients/python/client.py"))
        .arg(url);
    cmd
}

/// Checks a successful client run: exit 0, `ok: true` and every step of `expected` in order.
/// Returns the steps.
fn assert_client_passed(out: &Output, expected: &[&str]) -> Vec<String> {
    let report = out.describe();
    assert!(out.success(), "client failed:\n{report}");
    let line = out
        .stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_else(|| panic!("client printed nothing:\n{report}"));
    let json: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("client's last line is not JSON ({e}):\n{report}"));
    assert_eq!(
        json["ok"],
        Value::Bool(true),
        "client did not report ok:\n{report}"
    );
    let steps: Vec<String> = json["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps array:\n{report}"))
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        steps.len(),
        expected.len(),
        "expected steps {expected:#?}, got {steps:#?}\n{report}"
    );
    for (step, prefix) in steps.iter().zip(expected) {
        assert!(
            step.starts_with(prefix),
            "step {step:?} should start with {prefix:?}; all steps {steps:#?}\n{report}"
        );
    }
    // Both clients run the legacy (2025-11-25) session path.
    assert!(
        steps[0].contains("protocol 2025-11-25, server help-desk"),
        "connect step: {:?}\n{report}",
        steps[0]
    );
    // The TS SDK does not check the DELETE's status (a 405 also "succeeds"); insist on 2xx.
    let delete = steps
        .last()
        .and_then(|s| s.rsplit(' ').next())
        .unwrap_or("");
    assert!(
        matches!(delete, "200" | "202" | "204"),
        "DELETE answered {delete:?}, expected 200/202/204\n{report}"
    );
    steps
}

/// Checks a client run that must fail: non-zero exit, and the failure came from the script's
/// own error path (not, say, a missing module), so the success tests' checks are not vacuous.
fn assert_client_failed(out: &Output, marker: &str) {
    let report = out.describe();
    assert!(
        out.status.is_some(),
        "client hung instead of failing:\n{report}"
    );
    assert!(
        !out.success(),
        "client succeeded against nothing:\n{report}"
    );
    assert!(
        out.stderr.contains(marker)
            && out.stderr.contains("\"ok\"")
            && out.stderr.contains("false"),
        "client failed, but not through its own error report ({marker:?}):\n{report}"
    );
}

fn drive_help_desk(client: fn(&str) -> Command, expected: &[&str]) {
    ensure_tooling();
    let mut server = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &[]);
    let scratch = TempDir::new("client");
    let out = run(
        &mut client(&server.mcp_url()),
        CLIENT_DEADLINE,
        scratch.path(),
    );
    eprintln!("client finished in {:.1?}", out.elapsed);
    let steps = assert_client_passed(&out, expected);
    eprintln!("steps: {steps:#?}");
    server.assert_alive();
    server.assert_no_panic_logged();
}

#[test]
fn typescript_sdk_client_drives_help_desk() {
    drive_help_desk(ts_client, TS_STEPS);
}

#[test]
fn python_sdk_client_drives_help_desk() {
    drive_help_desk(python_client, PY_STEPS);
}

/// Nothing listens on the port: the client must exit non-zero through its own error report.
#[test]
fn ts_client_fails_against_a_closed_port() {
    ensure_tooling();
    let scratch = TempDir::new("client-closed");
    let url = format!("http://127.0.0.1:{}/mcp", free_port());
    let out = run(&mut ts_client(&url), CLIENT_DEADLINE, scratch.path());
    assert_client_failed(&out, "ts-v1 client failed");
}

/// Nothing listens on the port: the client must exit non-zero through its own error report.
#[test]
fn python_client_fails_against_a_closed_port() {
    ensure_tooling();
    let scratch = TempDir::new("client-closed");
    let url = format!("http://127.0.0.1:{}/mcp", free_port());
    let out = run(&mut python_client(&url), CLIENT_DEADLINE, scratch.path());
    assert_client_failed(&out, "python client failed");
}

/// The official Python client over the 2024-11-05 HTTP+SSE transport (`GET /sse`).
#[test]
fn python_sdk_sse_client_drives_help_desk() {
    ensure_tooling();
    let mut server = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &[]);
    let scratch = TempDir::new("sse-client");
    let root = repo_root();
    let mut cmd = Command::new(root.join("tools/clients/python/venv/bin/python"));
    cmd.arg(root.join("tools/clients/python/sse_client.py"))
        .arg(format!("http://127.0.0.1:{}/sse", server.port()));
    let out = run(&mut cmd, CLIENT_DEADLINE, scratch.path());
    let report = out.describe();
    assert!(out.success(), "{report}");
    let line = out.stdout.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {report}"));
    assert_eq!(v["ok"], true, "{report}");
    let steps: Vec<String> = v["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let expected = [
        "initialize: protocol",
        "list_tools: 4 tools",
        "open_ticket: id",
        "read_resource helpdesk://policies/sla",
    ];
    assert_eq!(steps.len(), expected.len(), "{report}");
    for (step, want) in steps.iter().zip(expected) {
        assert!(
            step.starts_with(want),
            "step {step:?} should start with {want:?}\n{report}"
        );
    }
    eprintln!("steps: {steps:#?}");
    server.assert_alive();
    server.assert_no_panic_logged();
}
