//! Memory bounds against a real `everything` process, measured from `/proc/<pid>/status`: what a
//! hostile client sends is refused or bounded before it costs memory.
//!
//! Each figure is the growth of the process's peak resident memory (`VmHWM`) across the abuse,
//! with a bound far below what the unbounded code used (in brackets, from the hardening issue).

#[path = "../../e2e_support.rs"]
mod support;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde_json::{Value, json};
use support::Instance;
use support::raw_http::{self, RawResponse};

/// `VmHWM` (peak resident set) of `pid`, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in /proc status")
}

fn post(port: u16, headers: &[(&str, &str)], body: &str) -> RawResponse {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let host = format!("127.0.0.1:{port}");
    let mut all = vec![
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    raw_http::send(
        addr,
        "POST",
        "/mcp",
        &all,
        Some(body),
        Duration::from_secs(30),
    )
}

fn error_code(r: &RawResponse) -> Option<i64> {
    r.json()["error"]["code"].as_i64()
}

/// A 4 MB batch of 1.39 M empty items `[{},{},…]` is refused while it is read: no list of a
/// million items is built [+153 MB peak per request before].
#[test]
fn a_huge_batch_costs_no_memory() {
    let server = Instance::start(env!("CARGO_BIN_EXE_everything"), &[]);
    let before = peak_kib(server.pid());
    let body = format!("[{}{{}}]", "{},".repeat(1_390_000));
    assert!(body.len() > 4_000_000);
    for _ in 0..3 {
        let r = post(server.port(), &[], &body);
        assert_eq!(r.status, 400, "{}", r.describe());
        assert_eq!(error_code(&r), Some(-32600), "{}", r.describe());
    }
    let grown = peak_kib(server.pid()).saturating_sub(before);
    eprintln!("three refused 4 MB batches: peak +{grown} KiB");
    assert!(
        grown < 48 * 1024,
        "peak memory grew by {grown} KiB for three refused 4 MB batches"
    );
}

/// Sessions whose `initialize` carries a 2 MB `clientInfo` are refused before anything is kept
/// [4.5 MB kept per session before].
#[test]
fn oversized_client_info_is_refused_and_not_kept() {
    let server = Instance::start(env!("CARGO_BIN_EXE_everything"), &[]);
    let before = peak_kib(server.pid());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "x".repeat(2_000_000), "version": "1"}}})
    .to_string();
    for _ in 0..20 {
        let r = post(server.port(), &[], &init);
        assert_eq!(r.status, 400, "{}", r.describe());
        assert_eq!(error_code(&r), Some(-32602), "{}", r.describe());
        assert!(
            r.header("mcp-session-id").is_none(),
            "no session was opened"
        );
    }
    let grown = peak_kib(server.pid()).saturating_sub(before);
    eprintln!("20 refused 2 MB initializes: peak +{grown} KiB");
    assert!(
        grown < 48 * 1024,
        "peak memory grew by {grown} KiB for 20 refused 2 MB initializes"
    );
}

/// 2026-07-28 background tasks with a 200 KB label each: records are bounded in bytes (here
/// `tasks.max_bytes` = 16 MiB), so hundreds of calls do not pile up [12,928 calls took the
/// process from 120 MB to 2.7 GB before].
#[test]
fn background_task_records_are_bounded() {
    let dir = support::TempDir::new("task-bounds");
    let config = dir.path().join("fleetmcp.toml");
    std::fs::write(
        &config,
        "[tasks]\nmax_bytes = 16777216\nmax_bytes_per_owner = 16777216\nmax_result_bytes = 1048576\n",
    )
    .expect("write the configuration");
    let server = Instance::start(
        env!("CARGO_BIN_EXE_everything"),
        &[("FLEETMCP_CONFIG", config.to_str().expect("utf-8 path"))],
    );
    let label = "y".repeat(200_000);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "slow_compute"),
    ];
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "slow_compute", "arguments": {"seconds": 0, "label": label}, "_meta": meta}})
        .to_string()
    };
    // Warm up, so the allocator's first growth is not counted.
    for id in 0..50 {
        let _ = post(server.port(), &headers, &call(id));
    }
    let before = peak_kib(server.pid());
    let mut created = 0;
    let mut refused = 0;
    for id in 50..650 {
        let r = post(server.port(), &headers, &call(id));
        assert_eq!(r.status, 200, "{}", r.describe());
        let v: Value = r.json();
        if v["result"]["taskId"].is_string() {
            created += 1;
        } else {
            assert_eq!(error_code(&r), Some(-32000), "{}", r.describe());
            refused += 1;
        }
    }
    assert!(created > 0, "tasks were created ({refused} refused)");
    let grown = peak_kib(server.pid()).saturating_sub(before);
    eprintln!("600 task calls: peak +{grown} KiB ({created} created, {refused} refused)");
    // 600 records of ~200 KB would be ~120 MB; the bound keeps them under 16 MiB.
    assert!(
        grown < 48 * 1024,
        "peak memory grew by {grown} KiB over 600 task calls ({created} created, {refused} refused)"
    );
}
