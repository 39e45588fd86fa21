//! A POST to `/mcp` served the direct way (`transport::Routes`, the listener's path while
//! nothing wraps the routes) is answered exactly as the axum routes answer it: the same
//! status, headers and body, for answers and for every kind of refusal, on one server whose
//! two ways share its sessions.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::transport::{self, Gate, Routes, Seams};
use crate::{Config, NoArgs, Server, tool};

const SECRET: &str = "routes-test-secret-0123456789abcdef";

/// What the comparison reads of an answer: its status, its headers (sorted, the new session's
/// id blanked: each `initialize` opens another) and its body.
type Seen = (StatusCode, Vec<(String, String)>, Vec<u8>);

/// A request to send both ways: what it is, its headers, its body.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String);

async fn seen(routes: &Routes, req: Request<Body>) -> Seen {
    let res = routes.serve(req).await;
    let status = res.status();
    let mut headers: Vec<(String, String)> = res
        .headers()
        .iter()
        .map(|(k, v)| {
            let v = if k == "mcp-session-id" {
                "<id>".to_string()
            } else {
                String::from_utf8_lossy(v.as_bytes()).into_owned()
            };
            (k.to_string(), v)
        })
        .collect();
    let exact = http_body::Body::size_hint(res.body()).exact();
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    // axum's router writes a body's known length into the head; hyper writes the same line on
    // the wire when the head has none (a body of known length), so the client sees it both ways.
    if !headers.iter().any(|(k, _)| k == "content-length")
        && let Some(len) = exact
    {
        assert_eq!(len, body.len() as u64);
        headers.push(("content-length".into(), len.to_string()));
    }
    headers.sort();
    (status, headers, body)
}

/// A POST to `path` with `headers` and `body`.
fn post(path: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
    let mut req = Request::post(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Body::from(body.to_string())).unwrap()
}

const JSON: (&str, &str) = ("content-type", "application/json");
const BOTH: (&str, &str) = ("accept", "application/json, text/event-stream");

fn message(id: i64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

#[tokio::test]
async fn a_post_to_mcp_is_answered_alike_directly_and_through_the_routes() {
    let config = Config {
        session_secret: Some(SECRET.into()),
        ..Config::default()
    };
    let running = Server::builder("routes-test", "1.0.0")
        .tool(tool("echo").handler(|_: NoArgs, _| async { Ok("echoed") }))
        .tool(tool("fails").handler(|_: NoArgs, _| async {
            Err::<String, _>(crate::ToolError::failed("on purpose"))
        }))
        .config(config)
        .build()
        .start()
        .await
        .unwrap();
    let direct = running.routes.clone();
    let routed = running.routes.clone().routed_only();

    let init = message(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "t", "version": "0"}}),
    );
    let opened = routed.serve(post("/mcp", &[JSON, BOTH], &init)).await;
    assert_eq!(opened.status(), StatusCode::OK);
    let sid = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let session = ("mcp-session-id", sid.as_str());
    let version = ("mcp-protocol-version", "2025-11-25");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let answered = routed
        .serve(post("/mcp", &[JSON, BOTH, session, version], &initialized))
        .await;
    assert_eq!(answered.status(), StatusCode::ACCEPTED);

    let call = |id, name: &str| message(id, "tools/call", json!({"name": name, "arguments": {}}));
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut h = vec![JSON, BOTH, session, version];
        h.extend_from_slice(extra);
        h
    };
    let stateless = message(
        15,
        "tools/list",
        json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}}}),
    );
    let cases: Vec<Case> = vec![
        ("another initialize", vec![JSON, BOTH], init.clone()),
        ("a tool call", with(&[]), call(2, "echo")),
        ("a failing tool", with(&[]), call(3, "fails")),
        ("an unknown tool", with(&[]), call(4, "nope")),
        ("a query string", with(&[]), call(5, "echo")),
        ("a batch", with(&[]), format!("[{}]", call(6, "echo"))),
        ("no session", vec![JSON, BOTH, version], call(7, "echo")),
        (
            "an unknown session",
            vec![JSON, BOTH, ("mcp-session-id", "nope"), version],
            call(8, "echo"),
        ),
        (
            "another version",
            vec![JSON, BOTH, session, ("mcp-protocol-version", "1999-01-01")],
            call(9, "echo"),
        ),
        (
            "not JSON",
            vec![("content-type", "text/plain"), BOTH, session, version],
            call(10, "echo"),
        ),
        (
            "no SSE accepted",
            vec![JSON, ("accept", "application/json"), session, version],
            call(11, "echo"),
        ),
        (
            "nothing accepted",
            vec![JSON, ("accept", "text/html"), session, version],
            call(12, "echo"),
        ),
        (
            "a foreign origin",
            with(&[("origin", "http://evil.example")]),
            call(13, "echo"),
        ),
        (
            "a body that does not parse",
            with(&[]),
            "{\"jsonrpc\":".into(),
        ),
        (
            "no method",
            with(&[]),
            json!({"jsonrpc": "2.0", "id": 14}).to_string(),
        ),
        (
            "a 2026-07-28 request",
            vec![
                JSON,
                BOTH,
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
            ],
            stateless,
        ),
    ];
    // The same routes behind a gate, as distributed mode puts its own in front of them.
    let gated = transport::routes(
        running.app.clone(),
        Seams {
            gate: Some(Arc::new(TestGate)),
            ..Seams::default()
        },
    );
    let gated_routed = gated.clone().routed_only();
    let gated_cases: Vec<Case> = vec![
        ("a call behind the gate", with(&[]), call(17, "echo")),
        (
            "a call the gate checks and passes",
            with(&[("x-test-stop", "pass")]),
            call(18, "echo"),
        ),
        (
            "a call the gate refuses",
            with(&[("x-test-stop", "refuse")]),
            call(19, "echo"),
        ),
        (
            "a refusal behind the gate",
            vec![JSON, ("accept", "text/html"), session, version],
            call(20, "echo"),
        ),
    ];
    let both_ways = cases
        .into_iter()
        .map(|c| (&direct, &routed, c))
        .chain(gated_cases.into_iter().map(|c| (&gated, &gated_routed, c)));
    for (direct, routed, (what, headers, body)) in both_ways {
        let path = if what == "a query string" {
            "/mcp?x=1"
        } else {
            "/mcp"
        };
        let a = seen(direct, post(path, &headers, &body)).await;
        let b = seen(routed, post(path, &headers, &body)).await;
        assert_eq!(
            a,
            b,
            "{what}: directly {} {}, through the routes {} {}",
            a.0,
            String::from_utf8_lossy(&a.2),
            b.0,
            String::from_utf8_lossy(&b.2)
        );
        eprintln!("{what}: {} {}", a.0, String::from_utf8_lossy(&a.2));
    }
    // Not only refusals were compared: calls were answered, and the gate saw the requests it
    // was to see (directly; the routes answered the same above).
    let (status, _, body) = seen(&direct, post("/mcp", &with(&[]), &call(16, "echo"))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("echoed"));
    let passed = post("/mcp", &with(&[("x-test-stop", "pass")]), &call(21, "echo"));
    let (status, headers, body) = seen(&gated, passed).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("echoed"));
    assert!(headers.contains(&("x-test-marked".into(), "false".into())));
    let refused = post(
        "/mcp",
        &with(&[("x-test-stop", "refuse")]),
        &call(22, "echo"),
    );
    let (status, headers, _) = seen(&gated, refused).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(headers.contains(&("x-test-marked".into(), "false".into())));
}

/// Checks requests with `x-test-stop`: passes them (the header dropped, as the relay guard
/// drops the relay headers) or refuses them with `403`; marks every answer.
struct TestGate;

#[async_trait::async_trait]
impl Gate for TestGate {
    fn stops(&self, headers: &http::HeaderMap) -> bool {
        headers.contains_key("x-test-stop")
    }

    async fn check(&self, mut req: Request<Body>) -> Result<Request<Body>, Response> {
        let stop = req.headers_mut().remove("x-test-stop");
        if stop.is_some_and(|v| v == "refuse") {
            let mut res = Response::new(Body::from("refused"));
            *res.status_mut() = StatusCode::FORBIDDEN;
            return Err(res);
        }
        Ok(req)
    }

    fn mark(&self, opens_stream: bool, res: &mut Response) {
        let v = if opens_stream { "true" } else { "false" };
        res.headers_mut()
            .insert("x-test-marked", http::HeaderValue::from_static(v));
    }
}
