//! The official MCP conformance suites against the `everything` fixture: 0.1.16 `--suite all`,
//! and 0.2.0-alpha.12 with the requirement sets of 2025-11-25 and 2026-07-28.
//!
//! Needs the tooling installed by `tools/setup.sh` (run here once per test process): Node 22 and
//! both suite versions under `tools/conformance/`.

#[path = "../../e2e_support.rs"]
mod support;

use std::process::Command;
use std::time::Duration;

use support::{Instance, TempDir, ensure_tooling, repo_root, run};

/// Checks the suite reported for 0.1.16 `--suite all` (32 scenarios) when everything passed.
const MIN_PASSED: u32 = 46;
/// The suite takes a few seconds here; the rest is head-room for a loaded 2-core machine while
/// keeping the whole test under two minutes (startup may take up to 20 s).
const SUITE_DEADLINE: Duration = Duration::from_secs(90);

/// Parses the suite's summary line `Total: N passed, M failed` (the last one, if several).
fn totals(output: &str) -> Option<(u32, u32)> {
    let line = output.lines().rev().find_map(|l| {
        let at = l.find("Total:")?;
        Some(&l[at + "Total:".len()..])
    })?;
    let mut passed = None;
    let mut failed = None;
    let words: Vec<&str> = line
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .collect();
    for pair in words.windows(2) {
        match pair[1] {
            "passed" => passed = pair[0].parse().ok(),
            "failed" => failed = pair[0].parse().ok(),
            _ => {}
        }
    }
    Some((passed?, failed?))
}

#[test]
fn totals_parses_the_summary_line() {
    assert_eq!(totals("x\n\nTotal: 46 passed, 0 failed\n"), Some((46, 0)));
    assert_eq!(totals("Total: 40 passed, 6 failed"), Some((40, 6)));
    assert_eq!(totals("no summary"), None);
    assert_eq!(totals("Total: many passed"), None);
}

#[test]
fn conformance_0_1_16_suite_all_passes() {
    ensure_tooling();
    let server = Instance::start(env!("CARGO_BIN_EXE_everything"), &[]);
    let results = TempDir::new("conformance-results");
    let scratch = TempDir::new("conformance-run");

    // 127.0.0.1, not a name: the dns-rebinding-protection scenario needs a loopback URL.
    let mut cmd = Command::new(repo_root().join("tools/conformance/run-suite.sh"));
    cmd.arg(server.mcp_url()).arg("-o").arg(results.path());
    let out = run(&mut cmd, SUITE_DEADLINE, scratch.path());
    let report = out.describe();
    eprintln!("conformance suite finished in {:.1?}", out.elapsed);

    assert!(out.success(), "conformance suite failed:\n{report}");
    let Some((passed, failed)) = totals(&out.stdout) else {
        panic!("no `Total: N passed, M failed` line in the suite output:\n{report}");
    };
    assert_eq!(failed, 0, "{failed} conformance check(s) failed:\n{report}");
    assert!(
        passed >= MIN_PASSED,
        "only {passed} conformance checks passed, expected at least {MIN_PASSED}:\n{report}"
    );
    let saved = std::fs::read_dir(results.path())
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(saved > 0, "the suite saved no results under -o:\n{report}");
    server.assert_no_panic_logged();
}

/// Runs the 0.2.0-alpha.12 requirement set of `revision`. The script passes only when every
/// scored scenario passes and the only failures are those of `baseline-<revision>.yml`.
fn requirement_set_passes(revision: &str, min_passed: u32) {
    ensure_tooling();
    let server = Instance::start(env!("CARGO_BIN_EXE_everything"), &[]);
    let results = TempDir::new(&format!("conformance-{revision}"));
    let scratch = TempDir::new(&format!("conformance-run-{revision}"));
    let mut cmd = Command::new(repo_root().join("tools/conformance/run-requirements.sh"));
    cmd.arg(revision)
        .arg(server.mcp_url())
        .arg("-o")
        .arg(results.path());
    let out = run(&mut cmd, SUITE_DEADLINE * 2, scratch.path());
    let report = out.describe();
    eprintln!("requirement set {revision} finished in {:.1?}", out.elapsed);
    assert!(
        out.success(),
        "requirement set {revision} failed:\n{report}"
    );
    let Some((passed, failed)) = totals(&out.stdout) else {
        panic!("no `Total: N passed, M failed` line in the suite output:\n{report}");
    };
    assert!(
        passed >= min_passed,
        "only {passed} checks passed at {revision}, expected at least {min_passed}:\n{report}"
    );
    // Without a baseline nothing may fail; with one, the script has checked the failures
    // are exactly the listed ones.
    let baseline = repo_root().join(format!("tools/conformance/baseline-{revision}.yml"));
    let has_baseline = std::fs::metadata(&baseline).is_ok_and(|m| m.len() > 0);
    assert!(
        has_baseline || failed == 0,
        "{failed} check(s) failed at {revision}:\n{report}"
    );
    server.assert_no_panic_logged();
}

#[test]
fn conformance_0_2_requirements_2025_11_25_pass() {
    requirement_set_passes("2025-11-25", 83);
}

#[test]
fn conformance_0_2_requirements_2026_07_28_pass() {
    requirement_set_passes("2026-07-28", 196);
}
