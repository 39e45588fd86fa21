//! Metrics, JSON logs and traces, end to end: `help-desk` processes (two in distributed mode on
//! one real `redis-server` for the relay), scraped on `/metrics`, their logs read as JSON.
//!
//! * a scrape taken after a mixed run (both eras, errors, a notification, a DELETE) passes
//!   `promtool check metrics` (Debian's `prometheus` package; `PROMTOOL` names another);
//! * a call relayed from B to the holder A shows in both instances' metrics (the relay on B,
//!   the `tools/call` on A) and in both instances' JSON logs under one trace id: the client's
//!   `traceparent` when it sent one, else the one B started; no credential of the call is
//!   logged;
//! * when B records no span (`RUST_LOG=warn`), it reads and makes no trace context, and A still
//!   logs the relayed calls under the client's trace, from the header or from `_meta`.
//!
//! Every wait is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::io::Write;
use std::path::Path;
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

/// The trace ids of the "request answered" lines for `method`.
fn answered(lines: &[Value], method: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["message"] == "request answered" && l["method"] == method)
        .filter_map(|l| l["span"]["trace_id"].as_str().map(String::from))
        .collect()
}

/// `instance`'s log lines once it has logged `count` answers to `method` (a bounded wait: the
/// access lines are written once the answer's head is ready, after the client has it).
fn once_answered(instance: &Instance, who: &str, method: &str, count: usize) -> Vec<Value> {
    let mut lines = json_lines(instance, who);
    for _ in 0..60 {
        if answered(&lines, method).len() >= count {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        lines = json_lines(instance, who);
    }
    lines
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

    let lines_a = once_answered(&a, "A", "tools/call", 2);
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

/// A relaying instance whose request spans nobody records (`RUST_LOG=warn`) reads no
/// `traceparent` and makes no trace for them (issue 40: the body was read for `_meta` on every
/// POST); what it relays carries the client's own headers and body, and the holder, whose spans
/// are logged, still puts each call under the client's trace: from the `traceparent` header,
/// and from `params._meta.traceparent` without one. Red if the relaying instance sends a trace
/// of its own (the holder takes the header over `_meta`).
#[test]
fn a_relaying_instance_that_records_no_span_leaves_the_clients_trace_to_the_holder() {
    let redis = RedisServer::start();
    let a = distributed_desk("desk-a", &redis.url(), &JSON_LOGS);
    let quiet = [("LOG_FORMAT", "json"), ("RUST_LOG", "warn")];
    let b = distributed_desk("desk-b", &redis.url(), &quiet);
    let sid = open_session(a.port());

    let in_header = "0af7651916cd43dd8448eb211c80319c";
    let traceparent = format!("00-{in_header}-b7ad6b7169203331-01");
    let resp = call_tool(
        b.port(),
        &sid,
        &[("traceparent", &traceparent)],
        "find_tickets",
        json!({"query": "header"}),
    );
    assert_served_by(&resp, "desk-a", "the call with a traceparent header");
    let in_meta = "4bf92f3577b34da6a3ce929d0e0e4736";
    let call = json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "tools/call",
        "params": {
            "name": "find_tickets",
            "arguments": {"query": "meta"},
            "_meta": {"traceparent": format!("00-{in_meta}-00f067aa0ba902b7-01")},
        },
    });
    let resp = post_with(b.port(), Some(&sid), &[], &call, HTTP_LIMIT);
    assert_served_by(&resp, "desk-a", "the call with a traceparent in _meta");

    let lines_a = once_answered(&a, "A", "tools/call", 2);
    let traces = answered(&lines_a, "tools/call");
    for (where_, trace) in [("header", in_header), ("_meta", in_meta)] {
        assert!(
            traces.iter().any(|t| t == trace),
            "A logged the call whose trace is in its {where_} under {traces:?}, not {trace}:\n{}",
            a.log()
        );
    }
    // B relayed both, and logged no access line (its request spans are off).
    let on_b = scrape(b.port());
    assert_eq!(
        value(&on_b, r#"fleetmcp_relays_total{outcome="answered"}"#),
        2.0,
        "B:\n{on_b}"
    );
    assert!(
        answered(&json_lines(&b, "B"), "relayed").is_empty(),
        "B:\n{}",
        b.log()
    );
}

// ---------------------------------------------------------------------------------------------
// deploy/grafana/fleetmcp.json and deploy/prometheus/alerts.yml
// ---------------------------------------------------------------------------------------------

/// Runs promtool with `args` in `dir`; whether it succeeded, and what it printed. Fails the test
/// when promtool cannot be run, like the `check metrics` test above.
fn run_promtool(args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): install Debian's `prometheus` package or set PROMTOOL"
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// What a scrape serves: each sample's name and labels.
struct Served(Vec<(String, Vec<(String, String)>)>);

impl Served {
    fn of(scrapes: &[&str]) -> Self {
        let mut samples = Vec::new();
        for line in scrapes.iter().flat_map(|s| s.lines()) {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let name = line[..name_end].to_string();
            let mut labels = Vec::new();
            if line[name_end..].starts_with('{') {
                let end = line.rfind('}').unwrap_or(line.len());
                labels = matchers(&line[name_end + 1..end])
                    .into_iter()
                    .map(|(k, _, v)| (k, v))
                    .collect();
            }
            samples.push((name, labels));
        }
        Self(samples)
    }

    fn has_name(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }

    fn has(&self, name: &str, label: &str, value: &str) -> bool {
        self.0
            .iter()
            .any(|(n, l)| n == name && l.iter().any(|(k, v)| k == label && v == value))
    }

    fn has_label(&self, label: &str) -> bool {
        self.0
            .iter()
            .any(|(_, l)| l.iter().any(|(k, _)| k == label))
    }
}

/// What a PromQL expression names: the metrics it selects (each with its exact `=` label
/// matchers) and the labels it groups or matches on (`by`, `without`, `on`, `ignoring`,
/// `group_left`, `group_right`). A small lexer, enough for the expressions of deploy/: strings,
/// ranges (`[5m]`, `[$__rate_interval]`), numbers and durations are skipped; a word followed by
/// `(` is a function; PromQL's keywords and aggregation operators are not metrics.
#[derive(Default, Debug)]
struct Refs {
    selectors: Vec<(String, Vec<(String, String)>)>,
    grouping: Vec<String>,
}

fn promql_refs(expr: &str, refs: &mut Refs) {
    const GROUPING: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    // Keywords, and the aggregations (which may be followed by `by (...)` before their `(`).
    const KEYWORDS: &[&str] = &[
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
        "atan2",
        "start",
        "end",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    let b = expr.as_bytes();
    let next_non_space = |from: usize| (from..b.len()).find(|&j| !b[j].is_ascii_whitespace());
    let mut i = 0;
    // The selector an identifier just read started (its matchers may follow).
    let mut open: Option<usize> = None;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' || c == b'`' {
            i = string_end(b, i);
            open = None;
        } else if c == b'[' {
            i += b[i..]
                .iter()
                .position(|&x| x == b']')
                .map_or(b.len() - i, |p| p + 1);
        } else if c == b'{' {
            let end = i + string_aware_find(&b[i..], b'}')
                .unwrap_or_else(|| panic!("unclosed {{ in {expr}"));
            let Some(at) = open.take() else {
                panic!("a selector without a metric name in {expr}");
            };
            for (k, op, v) in matchers(&expr[i + 1..end]) {
                if op == "=" {
                    refs.selectors[at].1.push((k, v));
                }
            }
            i = end + 1;
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            let word = &expr[start..i];
            let next = next_non_space(i);
            open = None;
            if GROUPING.contains(&word) {
                if let Some(j) = next.filter(|&j| b[j] == b'(') {
                    let end = j + b[j..]
                        .iter()
                        .position(|&x| x == b')')
                        .unwrap_or(b.len() - j);
                    refs.grouping.extend(
                        expr[j + 1..end]
                            .split(',')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(String::from),
                    );
                    i = end + 1;
                }
            } else if next.is_some_and(|j| b[j] == b'(')
                || KEYWORDS.contains(&word.to_ascii_lowercase().as_str())
            {
                // A function, an aggregation or a keyword.
            } else {
                refs.selectors.push((word.to_string(), Vec::new()));
                open = Some(refs.selectors.len() - 1);
            }
        } else if c.is_ascii_digit() || c == b'.' || c == b'$' {
            // A number, a duration, a template variable outside a string.
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_' || b[i] == b'$')
            {
                i += 1;
            }
            open = None;
        } else {
            if !c.is_ascii_whitespace() {
                open = None;
            }
            i += 1;
        }
    }
}

/// The index just past the string literal starting at `start` (backslash escapes in `"` and
/// `'` strings).
fn string_end(b: &[u8], start: usize) -> usize {
    let quote = b[start];
    let mut i = start + 1;
    while i < b.len() {
        if b[i] == b'\\' && quote != b'`' {
            i += 2;
            continue;
        }
        if b[i] == quote {
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

/// The first `target` outside a string literal.
fn string_aware_find(b: &[u8], target: u8) -> Option<usize> {
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' || b[i] == b'\'' || b[i] == b'`' {
            i = string_end(b, i);
            continue;
        }
        if b[i] == target {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// `name op "value"` matchers (or a sample's `name="value"` labels), comma-separated.
fn matchers(text: &str) -> Vec<(String, String, String)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
            i += 1;
        }
        if i >= b.len() {
            return out;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let name = text[start..i].to_string();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let op_start = i;
        while i < b.len() && matches!(b[i], b'=' | b'!' | b'~') {
            i += 1;
        }
        let op = text[op_start..i].to_string();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        assert!(
            i < b.len() && matches!(b[i], b'"' | b'\'' | b'`'),
            "a matcher without a quoted value in {{{text}}}"
        );
        let end = string_end(b, i);
        let value = text[i + 1..end - 1].replace("\\\"", "\"");
        out.push((name, op, value));
        i = end;
    }
}

#[test]
fn the_lexer_finds_metrics_matchers_and_grouping() {
    let mut r = Refs::default();
    promql_refs(
        r#"histogram_quantile(0.99, sum by (le, method) (rate(a_bucket{x="1", y=~"$v", z!="2"}[$__rate_interval])))
           / ignoring(z) b_total offset 5m or vector(0) > bool 1 unless c {q="r"}"#,
        &mut r,
    );
    let names: Vec<&str> = r.selectors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a_bucket", "b_total", "c"], "{r:?}");
    assert_eq!(r.selectors[0].1, [("x".to_string(), "1".to_string())]);
    assert_eq!(r.selectors[2].1, [("q".to_string(), "r".to_string())]);
    assert_eq!(r.grouping, ["le", "method", "z"]);
}

/// Every metric a served-metrics check may see, with one takeover and a failed relay among them:
/// two help-desks in distributed mode on one Redis (A advertising an address nothing listens
/// on, so B's relay to A fails while A is alive, and A is unready), and one whose Redis is
/// unreachable (unready).
struct Fleet {
    _redis: RedisServer,
    a: Instance,
    b: Instance,
    unready: Instance,
}

fn fleet_with_traffic() -> Fleet {
    let redis = RedisServer::start();
    let nowhere = format!("127.0.0.1:{}", support::free_port());
    let a = distributed_desk(
        "desk-a",
        &redis.url(),
        &[("FLEETMCP_ADVERTISE_ADDRESS", nowhere.as_str())],
    );
    let b = distributed_desk("desk-b", &redis.url(), &[]);
    let sid = open_session(a.port());
    assert_tool_ok(
        &call_tool(a.port(), &sid, &[], "open_ticket", json!({"title": "dash"})),
        "open_ticket",
    );
    // B cannot reach A, which is alive: the relay fails and the client gets 503.
    let failed = call_tool(
        b.port(),
        &sid,
        &[],
        "find_tickets",
        json!({"query": "dash"}),
    );
    assert_eq!(failed.status, 503, "{}", failed.describe());
    // A 2026-07-28 request on B, served there.
    let discover = json!({"jsonrpc": "2.0", "id": next_id(), "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let modern = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ];
    let resp = post_with(b.port(), None, &modern, &discover, HTTP_LIMIT);
    assert_eq!(resp.status, 200, "{}", resp.describe());
    let dead = format!("redis://127.0.0.1:{}", support::free_port());
    let unready = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[("REDIS_URL", dead.as_str())],
    );
    Fleet {
        _redis: redis,
        a,
        b,
        unready,
    }
}

/// The scrape serves `fleetmcp_ready` (what /readyz answers) and counts a relay that failed
/// apart from those answered; alerts.yml passes `promtool check rules` and its unit tests
/// (alerts_test.yml) pass `promtool test rules`; the dashboard is well formed, each of its
/// queries parses (`promtool check rules` on a rule file made of them), and it charts every
/// metric the server serves; the dashboard, the rules and the rules' tests name only metrics
/// (and exact label values) the server serves.
#[test]
fn the_dashboard_and_the_alerts_check_out_and_name_only_served_metrics() {
    let fleet = fleet_with_traffic();
    let (on_a, on_b, on_unready) = (
        scrape(fleet.a.port()),
        scrape(fleet.b.port()),
        scrape(fleet.unready.port()),
    );
    // A advertises an address nothing listens on: its self-check fails, so it is not ready.
    assert_eq!(value(&on_a, "fleetmcp_ready"), 0.0, "A:\n{on_a}");
    assert_eq!(value(&on_b, "fleetmcp_ready"), 1.0, "B:\n{on_b}");
    assert!(
        on_unready.contains("\nfleetmcp_ready 0"),
        "an instance whose Redis is unreachable:\n{on_unready}"
    );
    let readyz = http(
        fleet.unready.port(),
        "GET",
        "/readyz",
        &[],
        None,
        HTTP_LIMIT,
    );
    assert_eq!(readyz.status, 503, "{}", readyz.describe());
    assert_eq!(
        value(&on_b, r#"fleetmcp_relays_total{outcome="failed"}"#),
        1.0,
        "B:\n{on_b}"
    );
    assert_eq!(
        value(&on_b, r#"fleetmcp_relays_total{outcome="answered"}"#),
        0.0,
        "B:\n{on_b}"
    );
    assert_eq!(
        value(
            &on_b,
            r#"fleetmcp_requests_total{method="relayed",era="session",status="503"}"#
        ),
        1.0,
        "B:\n{on_b}"
    );
    let served = Served::of(&[&on_a, &on_b, &on_unready]);

    // The rules, and their unit tests.
    let deploy = support::repo_root().join("deploy");
    let rules_dir = deploy.join("prometheus");
    let (ok, out) = run_promtool(&["check", "rules", "alerts.yml"], &rules_dir);
    assert!(ok, "promtool check rules alerts.yml:\n{out}");
    let (ok, out) = run_promtool(&["test", "rules", "alerts_test.yml"], &rules_dir);
    assert!(ok, "promtool test rules alerts_test.yml:\n{out}");
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(rules_dir.join("alerts.yml")).expect("read alerts.yml"),
    )
    .expect("alerts.yml is YAML");
    let mut alert_refs = Refs::default();
    let mut alerts = Vec::new();
    for rule in rules["groups"]
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_sequence().into_iter().flatten())
    {
        alerts.push(rule["alert"].as_str().unwrap_or_default().to_string());
        promql_refs(
            rule["expr"].as_str().expect("every rule has an expr"),
            &mut alert_refs,
        );
    }
    for wanted in [
        "FleetmcpInstanceUnready",
        "FleetmcpTakeoverSpike",
        "FleetmcpRedisTimeouts",
        "FleetmcpRelayFailures",
        "FleetmcpHigh5xxRatio",
    ] {
        assert!(
            alerts.iter().any(|a| a == wanted),
            "no {wanted} in {alerts:?}"
        );
    }
    // The unit tests' synthetic series are series the server serves (names and label names).
    let tests: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(rules_dir.join("alerts_test.yml")).expect("read alerts_test.yml"),
    )
    .expect("alerts_test.yml is YAML");
    let mut test_refs = Refs::default();
    for series in tests["tests"]
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|t| t["input_series"].as_sequence().into_iter().flatten())
    {
        let text = series["series"].as_str().expect("a series");
        promql_refs(text, &mut test_refs);
        let open = text.find('{').unwrap_or(text.len());
        let close = text.rfind('}').unwrap_or(text.len());
        if open < close {
            test_refs.grouping.extend(
                matchers(&text[open + 1..close])
                    .into_iter()
                    .map(|(k, _, _)| k),
            );
        }
    }

    // Their label values are made up (statuses, instances): only the names count here.
    for (_, exact) in &mut test_refs.selectors {
        exact.clear();
    }

    // The dashboard.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy.join("grafana/fleetmcp.json")).expect("read the dashboard"),
    )
    .expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "fleetmcp", "a stable uid for links");
    let vars = dashboard["templating"]["list"]
        .as_array()
        .expect("templating");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name} variable"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    let mut exprs: Vec<(String, String)> = Vec::new();
    for name in ["job", "instance"] {
        let q = var(name)["definition"].as_str().expect("a query variable");
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.rsplit_once(','))
            .map(|(sel, label)| (sel.trim(), label.trim_end_matches(')').trim()))
            .unwrap_or_else(|| panic!("${name}: not label_values(selector, label): {q}"));
        assert_eq!(inner.1, name, "{q}");
        exprs.push((format!("variable {name}"), inner.0.to_string()));
    }
    let mut ids = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let id = panel["id"].as_u64().expect("a panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        let grid = &panel["gridPos"];
        let (x, w) = (
            grid["x"].as_u64().unwrap_or(99),
            grid["w"].as_u64().unwrap_or(99),
        );
        assert!(
            x + w <= 24 && grid["h"].as_u64().unwrap_or(0) > 0,
            "panel {id}: {grid}"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "panel {id}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {id} has no query");
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "panel {id}: an empty query");
            exprs.push((format!("panel {id} {}", t["refId"]), expr.to_string()));
        }
    }
    // Each query parses: as a recording rule, with Grafana's variables given values.
    let recorded: Vec<Value> = exprs
        .iter()
        .enumerate()
        .map(|(n, (_, e))| {
            let e = e
                .replace("$__rate_interval", "5m")
                .replace("$job", ".*")
                .replace("$instance", ".*");
            json!({"record": format!("dashboard:query_{n}"), "expr": e})
        })
        .collect();
    let scratch = support::TempDir::new("dashboard-rules");
    let file = scratch.path().join("dashboard_queries.yml");
    let doc = json!({"groups": [{"name": "dashboard", "rules": recorded}]});
    std::fs::write(&file, serde_yaml::to_string(&doc).expect("YAML")).expect("write rules");
    let (ok, out) = run_promtool(&["check", "rules", "dashboard_queries.yml"], scratch.path());
    assert!(ok, "a dashboard query does not parse:\n{out}\n{exprs:#?}");
    let mut dash_refs = Refs::default();
    for (_, e) in &exprs {
        promql_refs(e, &mut dash_refs);
    }

    // Only what the server serves.
    for (what, refs) in [
        ("the dashboard", &dash_refs),
        ("alerts.yml", &alert_refs),
        ("alerts_test.yml", &test_refs),
    ] {
        assert!(!refs.selectors.is_empty(), "{what} names no metric");
        for (name, exact) in &refs.selectors {
            assert!(
                served.has_name(name),
                "{what} names {name}, which the server does not serve"
            );
            for (label, v) in exact {
                assert!(
                    served.has(name, label, v),
                    "{what} selects {name}{{{label}=\"{v}\"}}, which the server does not serve"
                );
            }
        }
        for label in &refs.grouping {
            assert!(
                ["job", "instance"].contains(&label.as_str()) || served.has_label(label),
                "{what} uses the label {label}, which no served series has"
            );
        }
    }
    // And the dashboard charts every metric the server serves.
    let families: Vec<&str> = on_a
        .lines()
        .chain(on_b.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(families.len() >= 12, "{families:?}");
    for family in families {
        assert!(
            dash_refs.selectors.iter().any(|(n, _)| n == family
                || n.strip_prefix(family)
                    .is_some_and(|s| ["_bucket", "_count", "_sum"].contains(&s))),
            "the dashboard does not chart {family}"
        );
    }
    for instance in [&fleet.a, &fleet.b, &fleet.unready] {
        instance.assert_no_panic_logged();
    }
}
