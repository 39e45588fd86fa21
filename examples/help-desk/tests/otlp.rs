//! Spans exported over OTLP/HTTP (the feature `otlp`, on by default in help-desk), end to end:
//! real `help-desk` processes export to an OTLP/HTTP receiver this test runs on loopback (the
//! measuring instrument: it decodes the protobuf requests and keeps every span it gets).
//!
//! * a client's `traceparent` gives the exported `request` spans its trace id and their parent,
//!   the service is named after the binary, and the spans still batched when SIGTERM arrives are
//!   flushed before the process exits (the batch delay is set far beyond the test);
//! * a trace context in a request's `_meta` (SEP-414) does the same when no header names one,
//!   in both eras; with both, the header wins;
//! * a call relayed from B to the session's holder A shows as one trace: B's span (child of the
//!   client's) is the parent of A's; a call without `traceparent` starts its trace on B, and A's
//!   span is still B's child.
//!
//! Every wait is bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use fleet_client::*;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::json;
use support::Instance;
use support_redis::RedisServer;

/// The client's trace and span, as the task's example `traceparent` has them.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
/// The batch delay of the instances: far longer than a test, so only the flush at shutdown
/// can have sent their spans.
const BATCH_DELAY_MS: &str = "600000";
/// How long the spans may take to arrive once the instance exited.
const ARRIVAL_LIMIT: Duration = Duration::from_secs(10);

fn traceparent() -> String {
    format!("00-{TRACE}-{CLIENT_SPAN}-01")
}

/// One exported span as received (ids as lower-case hex; no parent is "").
#[derive(Clone, Debug)]
struct Received {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
}

impl fmt::Display for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} trace={} span={} parent={}",
            self.service, self.name, self.trace_id, self.span_id, self.parent
        )
    }
}

#[derive(Default)]
struct Seen {
    spans: Vec<Received>,
    /// Requests that were not valid OTLP protobuf (each one fails the test).
    errors: Vec<String>,
}

/// An OTLP/HTTP receiver on 127.0.0.1: `POST /v1/traces`, protobuf, everything kept.
struct Receiver {
    port: u16,
    seen: Arc<Mutex<Seen>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind the receiver");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("local_addr").port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = seen.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("receiver runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                let app = axum::Router::new()
                    .route("/v1/traces", axum::routing::post(receive))
                    .with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("receiver serves");
            });
        });
        Self {
            port,
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The value of `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter appends `/v1/traces`).
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spans(&self) -> Vec<Received> {
        let seen = self.seen.lock().expect("receiver state");
        assert!(
            seen.errors.is_empty(),
            "the receiver got invalid OTLP requests: {:?}",
            seen.errors
        );
        seen.spans.clone()
    }

    /// The spans once `done` holds for them; fails with every span received if it does not
    /// within `limit`.
    fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let start = Instant::now();
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if start.elapsed() >= limit {
                panic!(
                    "the receiver did not get {what} within {limit:?}; it got {} spans:\n{}",
                    spans.len(),
                    describe(&spans)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn receive(
    State(seen): State<Arc<Mutex<Seen>>>,
    body: axum::body::Bytes,
) -> (StatusCode, Vec<u8>) {
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(r) => r,
        Err(e) => {
            seen.lock()
                .expect("receiver state")
                .errors
                .push(e.to_string());
            return (StatusCode::BAD_REQUEST, Vec::new());
        }
    };
    let mut spans = Vec::new();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
            .map(|v| match v {
                AnyValue::StringValue(s) => s.clone(),
                other => format!("{other:?}"),
            })
            .unwrap_or_default();
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            spans.push(Received {
                service: service.clone(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
            });
        }
    }
    seen.lock().expect("receiver state").spans.extend(spans);
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn describe(spans: &[Received]) -> String {
    spans.iter().map(|s| format!("  {s}\n")).collect::<String>()
}

/// The `request` spans of `service` in `trace`.
fn requests<'a>(spans: &'a [Received], service: &str, trace: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|s| s.name == "request" && s.service == service && s.trace_id == trace)
        .collect()
}

/// SIGTERM, and the exit (0) within a bound: the flush happens on the way out.
fn stop(instance: &mut Instance, who: &str) {
    let status = instance
        .signal_and_wait("TERM", Duration::from_secs(15))
        .unwrap_or_else(|| {
            panic!(
                "{who} did not exit within 15 s of SIGTERM:\n{}",
                instance.log()
            )
        });
    assert!(
        status.success(),
        "{who} exited with {status:?}:\n{}",
        instance.log()
    );
}

#[test]
fn a_request_span_is_exported_under_the_clients_trace_and_flushed_at_shutdown() {
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let mut desk = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", BATCH_DELAY_MS),
        ],
    );
    let port = desk.port();
    let tp = traceparent();
    let headers = [("traceparent", tp.as_str())];
    let (sid, _) = open_session_held_with(port, &headers);
    let resp = post_with(
        port,
        Some(&sid),
        &headers,
        &tool_call("open_ticket", json!({"title": "exported"})),
        HTTP_LIMIT,
    );
    assert_tool_ok(&resp, "open_ticket");
    // The batch is far from due: nothing may have been sent yet, or the flush is not what the
    // rest of this test shows.
    let early = receiver.spans();
    assert!(
        early.is_empty(),
        "spans were exported before the batch delay:\n{}",
        describe(&early)
    );

    stop(&mut desk, "help-desk");
    // initialize, notifications/initialized and tools/call, each with the client's header.
    let spans = receiver.wait_for(
        "three request spans of the client's trace",
        ARRIVAL_LIMIT,
        |s| requests(s, "help-desk", TRACE).len() >= 3,
    );
    let traced = requests(&spans, "help-desk", TRACE);
    assert_eq!(traced.len(), 3, "spans:\n{}", describe(&spans));
    for span in &traced {
        assert_eq!(span.parent, CLIENT_SPAN, "{span}");
        assert_eq!(span.span_id.len(), 16, "{span}");
        assert_ne!(span.span_id, CLIENT_SPAN, "{span}");
    }
    let mut ids: Vec<&str> = traced.iter().map(|s| s.span_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "one span per request:\n{}", describe(&spans));
    desk.assert_no_panic_logged();
}

/// SEP-414: a request's trace context in `params._meta` (`traceparent`) gives its span the
/// client's trace and parent when the request has no valid `traceparent` header, in both eras;
/// with both, the header's (the caller's own hop) wins; an invalid `_meta` value starts a new
/// trace.
#[test]
fn a_trace_context_in_meta_is_the_request_spans_parent() {
    // Three traces of the client's: in `_meta` alone (session era, then 2026-07-28), in the
    // header beside another one in `_meta`.
    const META_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const META_SPAN: &str = "b7ad6b7169203331";
    const MODERN_TRACE: &str = "5b8aa5a2d2c872e8321cf37308d69df2";
    const MODERN_SPAN: &str = "051581bf3cb55c13";
    const LOSING_TRACE: &str = "9e107d9d372bb6826bd81d3542a419d6";
    let tp = |trace: &str, span: &str| format!("00-{trace}-{span}-01");
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let mut desk = Instance::start(
        env!("CARGO_BIN_EXE_help-desk"),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", BATCH_DELAY_MS),
        ],
    );
    let port = desk.port();
    let (sid, _) = open_session_held_with(port, &[]);

    // Session era: `_meta` only.
    let mut call = tool_call("open_ticket", json!({"title": "traced in _meta"}));
    call["params"]["_meta"] = json!({"traceparent": tp(META_TRACE, META_SPAN)});
    assert_tool_ok(
        &post_with(port, Some(&sid), &[], &call, HTTP_LIMIT),
        "open_ticket",
    );
    // 2026-07-28: `_meta` carries the trace beside the era's own keys.
    let discover = json!({
        "jsonrpc": "2.0",
        "id": next_id(),
        "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "traceparent": tp(MODERN_TRACE, MODERN_SPAN),
            "tracestate": "vendor=opaque",
        }},
    });
    let modern = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ];
    let resp = post_with(port, None, &modern, &discover, HTTP_LIMIT);
    assert_eq!(resp.status, 200, "{}", resp.describe());
    // Both: the header wins.
    let header = traceparent();
    let mut call = tool_call("find_tickets", json!({"query": "traced"}));
    call["params"]["_meta"] = json!({"traceparent": tp(LOSING_TRACE, META_SPAN)});
    let resp = post_with(
        port,
        Some(&sid),
        &[("traceparent", &header)],
        &call,
        HTTP_LIMIT,
    );
    assert_tool_ok(&resp, "find_tickets");
    // An invalid value (upper-case hex) is no context: a new trace.
    let mut call = tool_call("find_tickets", json!({"query": "untraced"}));
    call["params"]["_meta"] = json!({"traceparent": tp(&LOSING_TRACE.to_uppercase(), META_SPAN)});
    assert_tool_ok(
        &post_with(port, Some(&sid), &[], &call, HTTP_LIMIT),
        "find_tickets",
    );

    stop(&mut desk, "help-desk");
    let spans = receiver.wait_for("the spans of the three client traces", ARRIVAL_LIMIT, |s| {
        !requests(s, "help-desk", META_TRACE).is_empty()
            && !requests(s, "help-desk", MODERN_TRACE).is_empty()
            && !requests(s, "help-desk", TRACE).is_empty()
    });
    let all = describe(&spans);
    for (trace, parent, what) in [
        (META_TRACE, META_SPAN, "the session-era call with _meta"),
        (
            MODERN_TRACE,
            MODERN_SPAN,
            "the 2026-07-28 request with _meta",
        ),
        (TRACE, CLIENT_SPAN, "the call with the header and _meta"),
    ] {
        let traced = requests(&spans, "help-desk", trace);
        assert_eq!(
            traced.len(),
            1,
            "{what}: spans of {trace}:
{all}"
        );
        assert_eq!(
            traced[0].parent, parent,
            "{what}: its parent:
{all}"
        );
        assert_ne!(
            traced[0].span_id, parent,
            "{what}:
{all}"
        );
    }
    let lost = spans
        .iter()
        .filter(|s| s.trace_id.eq_ignore_ascii_case(LOSING_TRACE))
        .count();
    assert_eq!(
        lost, 0,
        "a span joined the _meta trace the header overrode, or an invalid one:
{all}"
    );
    // initialize, notifications/initialized and the invalid one: traces of their own, roots.
    let roots: Vec<&Received> = spans
        .iter()
        .filter(|s| {
            s.name == "request" && ![META_TRACE, MODERN_TRACE, TRACE].contains(&s.trace_id.as_str())
        })
        .collect();
    assert_eq!(roots.len(), 3, "{all}");
    assert!(roots.iter().all(|s| s.parent.is_empty()), "{all}");
    desk.assert_no_panic_logged();
}

#[test]
fn a_relayed_call_is_one_trace_across_both_instances() {
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let redis = RedisServer::start();
    // The access line ("request answered", debug) shows the request span's trace id in the log.
    let log = "info,fleetmcp::transport::observe=debug";
    let env = |service| {
        [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", BATCH_DELAY_MS),
            ("OTEL_SERVICE_NAME", service),
            ("RUST_LOG", log),
            // No load balancer to drain from: stop at once.
            ("FLEETMCP_DRAIN_MS", "0"),
        ]
    };
    let mut a = distributed_desk("desk-a", &redis.url(), &env("desk-a"));
    let mut b = distributed_desk("desk-b", &redis.url(), &env("desk-b"));
    let sid = open_session(a.port());

    // With the client's traceparent, relayed by B to A.
    let tp = traceparent();
    let resp = call_tool(
        b.port(),
        &sid,
        &[("traceparent", &tp)],
        "open_ticket",
        json!({"title": "traced"}),
    );
    assert_served_by(&resp, "desk-a", "the relayed call");
    // Without one: the trace starts on B.
    let resp = call_tool(
        b.port(),
        &sid,
        &[],
        "find_tickets",
        json!({"query": "traced"}),
    );
    assert_served_by(&resp, "desk-a", "the second relayed call");

    stop(&mut b, "desk-b");
    stop(&mut a, "desk-a");
    let spans = receiver.wait_for(
        "the relayed call's spans from both instances",
        ARRIVAL_LIMIT,
        |s| !requests(s, "desk-a", TRACE).is_empty() && !requests(s, "desk-b", TRACE).is_empty(),
    );
    let all = describe(&spans);

    // The client's trace: client -> B -> A.
    let on_b = requests(&spans, "desk-b", TRACE);
    assert_eq!(on_b.len(), 1, "B's spans of the client's trace:\n{all}");
    assert_eq!(on_b[0].parent, CLIENT_SPAN, "B's span:\n{all}");
    let on_a = requests(&spans, "desk-a", TRACE);
    assert_eq!(on_a.len(), 1, "A's spans of the client's trace:\n{all}");
    assert_eq!(
        on_a[0].parent, on_b[0].span_id,
        "A's span is not the child of B's:\n{all}"
    );

    // B started the other trace: its span is a root, and A's span of that trace its child.
    let roots_on_b: Vec<&Received> = spans
        .iter()
        .filter(|s| s.service == "desk-b" && s.name == "request" && s.trace_id != TRACE)
        .collect();
    assert_eq!(roots_on_b.len(), 1, "B's other spans:\n{all}");
    let root = roots_on_b[0];
    assert_eq!(
        root.parent, "",
        "B's span of its own trace has a parent:\n{all}"
    );
    assert_eq!(root.trace_id.len(), 32, "{root}");
    let child = requests(&spans, "desk-a", &root.trace_id);
    assert_eq!(
        child.len(),
        1,
        "A's spans of B's trace {}:\n{all}",
        root.trace_id
    );
    assert_eq!(
        child[0].parent, root.span_id,
        "A's span is not the child of B's:\n{all}"
    );
    // Both logged under the trace id B exported (the request span's `trace_id` field).
    for (who, instance) in [("A", &a), ("B", &b)] {
        assert!(
            instance
                .log()
                .contains(&format!("trace_id={}", root.trace_id)),
            "{who}'s log does not name the exported trace {}:\n{}",
            root.trace_id,
            instance.log()
        );
    }
    a.assert_no_panic_logged();
    b.assert_no_panic_logged();
}
