//! Metrics, JSON logs and traces, end to end: `help-desk` processes (two in distributed mode on
//! one real `redis-server` for the relay), scraped on `/metrics`, their logs read as JSON.
//!
//! * a scrape taken after a mixed run (both eras, errors, a notification, a DELETE) passes
//!   `promtool check metrics` (Debian's `prometheus` package; `PROMTOOL` names another);
//! * a call relayed from B to the holder A shows in both instances' metrics (the relay on B,
//!   the `tools/call` on A) and in both instances' JSON logs under one trace id: the client's
//!   `traceparent` when it sent one, else the one B started; no credential of the call is
//!   logged.
//!
//! Every wait is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::io::Write;
use std::process::{Command, Stdio};

use fleet_client::*;
use serde_json::{Value, json};
use support::Instance;
use support_redis::RedisServer;

/// Logs as JSON, with each request's "request answered" line (debug) on.
const JSON_LOGS: [(&str, &str); 2] = [
    ("LOG_FORMAT", "json"),
    ("RUST_LOG", "info,fleetmcp::transport::observe=debug"),
];

fn scrape(port: u16) -> String {
    let resp = http(port, "GET", "/metrics", &[], None, HTTP_LIMIT);
    assert_eq!(resp.status, 200, "/metrics:\n{}", resp.describe());
    assert!(
        resp.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{}",
        resp.describe()
    );
    resp.body
}

/// The value of the series `series` (name and labels exactly as rendered), 0 when absent.
fn value(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Every line of the instance's log, each parsed as one JSON object.
fn json_lines(instance: &Instance, who: &str) -> Vec<Value> {
    instance
        .log()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{who}: a log line is not JSON ({e}): {l}"));
            assert!(v.is_object(), "{who}: not an object: {l}");
            v
        })
        .collect()
}

/// The lines logged in the span of a request of trace `trace_id`.
fn in_trace<'a>(lines: &'a [Value], trace_id: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["span"]["trace_id"] == trace_id)
        .collect()
}

fn promtool() -> String {
    std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into())
}

#[test]
fn a_scrape_after_a_mixed_run_passes_promtool_check_metrics() {
    let desk = Instance::start(env!("CARGO_BIN_EXE_help-desk"), &[]);
    let port = desk.port();
    let sid = open_session(port);
    let ok = post_with(
        port,
        Some(&sid),
        &[],
        &tool_call("open_ticket", json!({"title": "metrics"})),
        HTTP_LIMIT,
    );
    assert_tool_ok(&ok, "open_ticket");
    let list = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/list"});
    assert_eq!(
        post_with(port, Some(&sid), &[], &list, HTTP_LIMIT).status,
        200
    );
    let unknown = json!({"jsonrpc": "2.0", "id": next_id(), "method": "no/such"});
    assert_eq!(
        post_with(port, Some(&sid), &[], &unknown, HTTP_LIMIT).status,
        200
    );
    // Refused before the body is parsed: 415.
    let bad = http(
        port,
        "POST",
        "/mcp",
        &[("Content-Type", "text/plain"), ("Accept", ACCEPT)],
        Some("x"),
        HTTP_LIMIT,
    );
    assert_eq!(bad.status, 415, "{}", bad.describe());
    // The stateless era.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let discover = json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "server/discover",
        "params": {"_meta": meta},
    });
    let modern = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ];
    let resp = post_with(port, None, &modern, &discover, HTTP_LIMIT);
    assert_eq!(resp.status, 200, "{}", resp.describe());
    let del = http(
        port,
        "DELETE",
        "/mcp",
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", PROTOCOL_VERSION),
        ],
        None,
        HTTP_LIMIT,
    );
    assert!(del.status == 200 || del.status == 204, "{}", del.describe());

    let text = scrape(port);
    for series in [
        r#"fleetmcp_requests_total{method="initialize",era="session",status="200"}"#,
        r#"fleetmcp_requests_total{method="tools/call",era="session",status="200"}"#,
        r#"fleetmcp_requests_total{method="other",era="session",status="200"}"#,
        r#"fleetmcp_requests_total{method="notification",era="session",status="202"}"#,
        r#"fleetmcp_requests_total{method="unparsed",era="unknown",status="415"}"#,
        r#"fleetmcp_requests_total{method="server/discover",era="stateless",status="200"}"#,
    ] {
        assert_eq!(value(&text, series), 1.0, "{series} in\n{text}");
    }
    assert!(
        text.contains("fleetmcp_request_duration_seconds_bucket{method=\"tools/call\""),
        "{text}"
    );
    assert!(
        text.contains("# TYPE fleetmcp_sessions_held gauge"),
        "{text}"
    );

    let mut check = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): install Debian's `prometheus` package or set PROMTOOL"
            )
        });
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the scrape to promtool");
    let out = check.wait_with_output().expect("promtool ran");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- scrape ---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The same Host check as /mcp.
    let foreign = support::raw_http::send(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        "GET",
        "/metrics",
        &[("Host", "evil.example")],
        None,
        HTTP_LIMIT,
    );
    assert_eq!(foreign.status, 403, "{}", foreign.describe());

    // Switched off: no route, nothing recorded.
    let off = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[("FLEETMCP_METRICS", "off")],
    );
    let resp = http(off.port(), "GET", "/metrics", &[], None, HTTP_LIMIT);
    assert_eq!(resp.status, 404, "{}", resp.describe());
}

#[test]
fn a_relayed_call_shows_in_both_instances_metrics_and_json_logs_under_one_trace_id() {
    let redis = RedisServer::start();
    let a = distributed_desk("desk-a", &redis.url(), &JSON_LOGS);
    let b = distributed_desk("desk-b", &redis.url(), &JSON_LOGS);
    let sid = open_session(a.port());

    // With the client's traceparent, and credentials that must not be logged.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    let token = "Bearer observability-secret-token";
    let resp = call_tool(
        b.port(),
        &sid,
        &[("traceparent", &traceparent), ("authorization", token)],
        "open_ticket",
        json!({"title": "traced"}),
    );
    assert_served_by(&resp, "desk-a", "the relayed call");
    // Without one: B starts the trace, and A logs under it.
    let resp = call_tool(
        b.port(),
        &sid,
        &[],
        "find_tickets",
        json!({"query": "traced"}),
    );
    assert_served_by(&resp, "desk-a", "the second relayed call");

    let (on_a, on_b) = (scrape(a.port()), scrape(b.port()));
    assert_eq!(
        value(&on_b, r#"fleetmcp_relays_total{outcome="answered"}"#),
        2.0,
        "B:\n{on_b}"
    );
    assert_eq!(
        value(
            &on_b,
            r#"fleetmcp_requests_total{method="relayed",era="session",status="200"}"#
        ),
        2.0,
        "B:\n{on_b}"
    );
    assert_eq!(
        value(
            &on_b,
            r#"fleetmcp_requests_total{method="tools/call",era="session",status="200"}"#
        ),
        0.0,
        "B:\n{on_b}"
    );
    assert_eq!(
        value(
            &on_a,
            r#"fleetmcp_requests_total{method="tools/call",era="session",status="200"}"#
        ),
        2.0,
        "A:\n{on_a}"
    );
    assert_eq!(
        value(&on_a, r#"fleetmcp_relays_total{outcome="answered"}"#),
        0.0,
        "A:\n{on_a}"
    );
    assert!(
        value(&on_a, "fleetmcp_redis_command_duration_seconds_count") > 0.0,
        "A:\n{on_a}"
    );
    assert_eq!(value(&on_a, "fleetmcp_sessions_held"), 1.0, "A:\n{on_a}");

    // The access lines are written once the answer's head is ready: wait (bounded) for A's.
    let answered = |lines: &[Value], method: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l["message"] == "request answered" && l["method"] == method)
            .filter_map(|l| l["span"]["trace_id"].as_str().map(String::from))
            .collect()
    };
    let mut lines_a = json_lines(&a, "A");
    for _ in 0..60 {
        if answered(&lines_a, "tools/call").len() >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        lines_a = json_lines(&a, "A");
    }
    let lines_b = json_lines(&b, "B");
    assert!(
        !in_trace(&lines_a, trace).is_empty(),
        "A logged nothing under {trace}:\n{}",
        a.log()
    );
    assert!(
        !in_trace(&lines_b, trace).is_empty(),
        "B logged nothing under {trace}:\n{}",
        b.log()
    );
    // B's trace for the call without a traceparent reached A.
    let started_on_b: Vec<String> = answered(&lines_b, "relayed")
        .into_iter()
        .filter(|t| t != trace)
        .collect();
    assert_eq!(started_on_b.len(), 1, "B:\n{}", b.log());
    assert_eq!(started_on_b[0].len(), 32);
    assert!(
        answered(&lines_a, "tools/call").contains(&started_on_b[0]),
        "A has no line under B's trace {}:\n{}",
        started_on_b[0],
        a.log()
    );
    // The contract's messages are unchanged in `message`.
    assert!(
        lines_a.iter().any(|l| l["message"]
            == "[TransportService] Session store connection validated successfully"),
        "{}",
        a.log()
    );
    for (who, log) in [("A", a.log()), ("B", b.log())] {
        assert!(
            !log.contains("observability-secret-token"),
            "{who} logged the token:\n{log}"
        );
        assert!(
            !log.contains(support::SESSION_SECRET),
            "{who} logged the secret"
        );
    }
}
