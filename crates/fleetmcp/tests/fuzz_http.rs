//! Property-style fuzzing of `/mcp` over real HTTP: a fixed-seed stream of random and mutated
//! requests (bodies, session ids, `Last-Event-ID`, `Accept`, `Content-Type`,
//! `MCP-Protocol-Version`) against a server on loopback. Every request must get a well-formed
//! answer with an expected status, JSON answers must be valid JSON-RPC, the documented codes
//! must come where the rules fix them, and the server must still be healthy afterwards.
//!
//! The seed is fixed (`TestRunner::deterministic`), so a failure names its case number and
//! reproduces on every run.

mod support;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use support::{Client, SECRET, SseStream, config_with, http, serve, within};

use fleetmcp::{Server, ServerBuilder, tool};

/// How many requests one run sends: enough to reach every branch of the generators many
/// times, few enough that the test takes about a second.
const CASES: usize = 500;
/// The body limit of the server under test, small so that some generated bodies pass it.
const BODY_LIMIT: usize = 2048;

fn builder() -> ServerBuilder {
    Server::builder("fuzz-test", "1.0.0")
        .tool(
            tool("echo")
                .description("Returns its text")
                .handler(|a: support::EchoArgs, _| async move { Ok(a.text) }),
        )
        .tool(
            tool("add")
                .description("Adds two integers")
                .handler(|a: support::AddArgs, _| async move { Ok(format!("{}", a.a + a.b)) }),
        )
}

/// Which session id a case sends.
#[derive(Debug, Clone)]
enum Sid {
    None,
    /// The live 2025-11-25 session.
    Live,
    /// The live 2025-03-26 session (batches).
    Batches,
    /// The live id with one character replaced.
    Mutated(prop::sample::Index, u8),
    Random(String),
    Bytes(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Case {
    method: &'static str,
    sid: Sid,
    version: Option<Vec<u8>>,
    content_type: Option<Vec<u8>>,
    accept: Option<Vec<u8>>,
    last_event_id: Option<LastEventId>,
    body: Vec<u8>,
}

#[derive(Debug, Clone)]
enum LastEventId {
    /// The live session's tag with these numbers.
    Own(u64, u64),
    Random(Vec<u8>),
}

/// Bytes a header value may carry (reqwest refuses control characters).
fn header_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![0x20u8..=0x7e, Just(b'\t'), 0x80u8..=0xff],
        0..max,
    )
}

fn one_of(values: &[&'static str]) -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(values.to_vec()).prop_map(|v| v.as_bytes().to_vec())
}

fn json_id() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        4 => any::<i32>().prop_map(|i| Some(json!(i))),
        3 => "[a-z0-9-]{0,8}".prop_map(|s| Some(json!(s))),
        1 => Just(Some(Value::Null)),
        1 => Just(Some(json!({"nested": [1, 2]}))),
        1 => Just(Some(json!(1.5))),
        1 => Just(None),
    ]
}

/// A valid-looking JSON-RPC message of either era.
fn message() -> impl Strategy<Value = Value> {
    let params = prop_oneof![
        Just(json!({})),
        Just(json!({"name": "echo", "arguments": {"text": "hi"}})),
        ".{0,12}".prop_map(|t| json!({"name": "echo", "arguments": {"text": t}})),
        (any::<i64>(), any::<i64>())
            .prop_map(|(a, b)| json!({"name": "add", "arguments": {"a": a, "b": b}})),
        Just(json!({"name": "add", "arguments": {"a": "x"}})),
        Just(json!({"name": "missing"})),
        Just(
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "f", "version": "0"}})
        ),
        Just(
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}})
        ),
        Just(json!([1, 2])),
        Just(Value::Null),
    ];
    let method = prop::sample::select(vec![
        "ping",
        "tools/list",
        "tools/call",
        "initialize",
        "notifications/initialized",
        "notifications/cancelled",
        "resources/list",
        "prompts/get",
        "server/discover",
        "no/such/method",
    ]);
    (json_id(), method, params, any::<bool>()).prop_map(|(id, method, params, response)| {
        let mut m = serde_json::Map::new();
        m.insert("jsonrpc".into(), json!("2.0"));
        if let Some(id) = id {
            m.insert("id".into(), id);
        }
        if response {
            // A response to a request the server never sent.
            m.insert("result".into(), params);
        } else {
            m.insert("method".into(), json!(method));
            m.insert("params".into(), params);
        }
        Value::Object(m)
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let valid = || message().prop_map(|m| m.to_string().into_bytes());
    prop_oneof![
        6 => valid(),
        // A batch, sometimes of non-objects.
        2 => prop::collection::vec(prop_oneof![
            3 => message(),
            1 => Just(json!(1)),
            1 => Just(json!(["2.0", 1, "ping"])),
        ], 0..5)
            .prop_map(|v| Value::Array(v).to_string().into_bytes()),
        // Cut short.
        2 => (valid(), any::<prop::sample::Index>())
            .prop_map(|(b, at)| b[..at.index(b.len())].to_vec()),
        // Bytes replaced or inserted.
        3 => (valid(), prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..4))
            .prop_map(|(mut b, edits)| {
                for (at, byte, insert) in edits {
                    let i = at.index(b.len() + 1);
                    if insert || i == b.len() {
                        b.insert(i, byte);
                    } else {
                        b[i] = byte;
                    }
                }
                b
            }),
        // JSON-ish soup.
        2 => "[\\[\\]{}\",: 0-9a-z.\\\\-]{0,80}".prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        // Over the body limit.
        1 => (BODY_LIMIT..BODY_LIMIT + 600).prop_map(|n| {
            let mut b = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
            b.resize(n, b'x');
            b.extend_from_slice(br#""}}"#);
            b
        }),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let sid = prop_oneof![
        3 => Just(Sid::None),
        4 => Just(Sid::Live),
        1 => Just(Sid::Batches),
        2 => (any::<prop::sample::Index>(), prop::sample::select(b"AZaz09_-".to_vec()))
            .prop_map(|(i, c)| Sid::Mutated(i, c)),
        1 => "[A-Za-z0-9_-]{0,80}".prop_map(Sid::Random),
        1 => header_bytes(40).prop_map(Sid::Bytes),
    ];
    let version = prop_oneof![
        6 => Just(None),
        3 => one_of(&["2025-11-25", "2025-03-26", "2025-06-18", "2024-11-05", "2026-07-28", "1999-01-01", ""]).prop_map(Some),
        1 => header_bytes(16).prop_map(Some),
    ];
    let content_type = prop_oneof![
        12 => one_of(&["application/json"]).prop_map(Some),
        2 => one_of(&["Application/JSON; charset=utf-8", "text/plain", "application/jsonx", ""]).prop_map(Some),
        1 => Just(None),
        1 => header_bytes(24).prop_map(Some),
    ];
    let accept = prop_oneof![
        12 => one_of(&["application/json, text/event-stream"]).prop_map(Some),
        1 => Just(None),
        2 => one_of(&["application/json", "text/event-stream", "*/*", "Application/*", "text/html", "image/png;q=0.1"]).prop_map(Some),
        1 => header_bytes(24).prop_map(Some),
    ];
    let last_event_id = prop_oneof![
        3 => Just(None),
        2 => (0u64..3, 0u64..4).prop_map(|(s, q)| Some(LastEventId::Own(s, q))),
        1 => header_bytes(30).prop_map(|b| Some(LastEventId::Random(b))),
    ];
    let method = prop::sample::select(vec![
        "POST", "POST", "POST", "POST", "POST", "POST", "GET", "DELETE",
    ]);
    (
        method,
        sid,
        version,
        content_type,
        accept,
        last_event_id,
        body(),
    )
        .prop_map(
            |(method, sid, version, content_type, accept, last_event_id, body)| Case {
                method,
                // The live sessions must survive the run: a DELETE gets a foreign id instead.
                sid: match (method, sid) {
                    ("DELETE", Sid::Live | Sid::Batches) => Sid::Random("not-a-session".into()),
                    (_, sid) => sid,
                },
                version,
                content_type,
                accept,
                last_event_id,
                body,
            },
        )
}

/// Fails unless `v` is one JSON-RPC answer: `jsonrpc` 2.0, an `id`, and exactly one of a
/// `result` or an `error` with an integer code and a string message.
fn assert_envelope(v: &Value, what: &str) {
    assert_eq!(v["jsonrpc"], "2.0", "{what}: {v}");
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not an object: {v}"));
    assert!(o.contains_key("id"), "{what}: no id: {v}");
    match (o.get("result"), o.get("error")) {
        (Some(_), None) => {}
        (None, Some(e)) => {
            assert!(e["code"].is_i64(), "{what}: error code: {v}");
            assert!(e["message"].is_string(), "{what}: error message: {v}");
        }
        _ => panic!("{what}: not exactly one of result and error: {v}"),
    }
}

/// Every status `/mcp` documents for a request it could not or would not serve, plus success.
const ALLOWED: &[u16] = &[200, 202, 400, 404, 405, 406, 409, 413, 415, 429];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_and_mutated_requests_get_well_formed_answers() {
    let srv = serve(
        builder(),
        config_with(SECRET, |c| c.http.max_body_bytes = BODY_LIMIT),
    )
    .await;
    let live = Client::connect(&srv).await;
    let batches = Client::connect_with(&srv.mcp, "2025-03-26", json!({})).await;
    // A real event id of the live session, for its tag (the standalone stream's priming event).
    let mut standalone = SseStream::new(within("GET", live.get().send()).await.expect("GET"));
    let primed = within("priming event", standalone.next())
        .await
        .expect("a priming event");
    let tag = primed.id().split('-').next().expect("a tag").to_string();
    drop(standalone);

    let mut runner = TestRunner::deterministic();
    let strategy = case();
    let client = http();
    let mut seen = std::collections::BTreeMap::<u16, usize>::new();
    // How often each exact rule of `check_documented_codes` was checked.
    let mut applied = (0, 0);
    for n in 0..CASES {
        let case = strategy.new_tree(&mut runner).expect("a case").current();
        let what = format!("case {n}: {case:?}");
        let mut headers = HeaderMap::new();
        let mut set = |name: &'static str, bytes: &[u8]| {
            // Values reqwest refuses are sent without that header.
            if let Ok(v) = HeaderValue::from_bytes(bytes) {
                headers.insert(HeaderName::from_static(name), v);
            }
        };
        match &case.sid {
            Sid::None => {}
            Sid::Live => set("mcp-session-id", live.session_id().as_bytes()),
            Sid::Batches => set("mcp-session-id", batches.session_id().as_bytes()),
            Sid::Mutated(at, c) => {
                let mut id = live.session_id().as_bytes().to_vec();
                let i = at.index(id.len());
                id[i] = if id[i] == *c { b'.' } else { *c };
                set("mcp-session-id", &id);
            }
            Sid::Random(s) => set("mcp-session-id", s.as_bytes()),
            Sid::Bytes(b) => set("mcp-session-id", b),
        }
        for (name, value) in [
            ("mcp-protocol-version", &case.version),
            ("content-type", &case.content_type),
            ("accept", &case.accept),
        ] {
            if let Some(v) = value {
                set(name, v);
            }
        }
        match &case.last_event_id {
            Some(LastEventId::Own(stream, seq)) => {
                set("last-event-id", format!("{tag}-{stream}-{seq}").as_bytes())
            }
            Some(LastEventId::Random(b)) => set("last-event-id", b),
            None => {}
        }
        let sent_headers = headers.clone();
        let request = match case.method {
            "GET" => client.get(&srv.mcp),
            "DELETE" => client.delete(&srv.mcp),
            _ => client.post(&srv.mcp).body(case.body.clone()),
        };
        let res = within(&what, request.headers(headers).send())
            .await
            .unwrap_or_else(|e| panic!("{what}: no HTTP answer: {e}"));
        let status = res.status().as_u16();
        *seen.entry(status).or_default() += 1;
        assert!(ALLOWED.contains(&status), "{what}: status {status}");
        let content_type = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        if content_type.starts_with("text/event-stream") {
            // A stream (a resumption, the standalone stream) may stay open: its head is the
            // answer; dropping it closes the connection.
            assert_eq!(status, 200, "{what}: a stream that is not 200");
            continue;
        }
        let body = within(&what, res.bytes())
            .await
            .unwrap_or_else(|e| panic!("{what}: body: {e}"));
        if status == 202 {
            assert!(body.is_empty(), "{what}: a 202 with a body");
            continue;
        }
        if content_type.starts_with("text/plain") {
            assert!(matches!(status, 404 | 405), "{what}: text/plain {status}");
            continue;
        }
        assert!(
            content_type.starts_with("application/json"),
            "{what}: content type {content_type:?} for {status}"
        );
        let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "{what}: answer is not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        });
        match &v {
            Value::Array(items) => {
                assert_eq!(status, 200, "{what}: a batch answer with {status}");
                for item in items {
                    assert_envelope(item, &what);
                }
            }
            _ => {
                assert_envelope(&v, &what);
                if status >= 400 {
                    assert!(
                        v.get("error").is_some(),
                        "{what}: {status} without an error"
                    );
                }
            }
        }
        let (parse, served) = check_documented_codes(&case, &sent_headers, status, &v, &what);
        applied.0 += parse;
        applied.1 += served;
    }
    eprintln!("statuses over {CASES} cases: {seen:?}; exact rules checked: {applied:?}");
    assert!(
        applied.0 > 0 && applied.1 > 0,
        "exact rules checked: {applied:?}"
    );
    // Every class of answer was reached, so the generators are not stuck on one path.
    for status in [200, 202, 400, 404, 406, 413, 415] {
        assert!(
            seen.get(&status).is_some_and(|&n| n > 0),
            "no {status} among {seen:?}"
        );
    }
    // Still healthy, and the live session still serves.
    let health = within(
        "healthz",
        client.get(format!("{}/healthz", srv.base)).send(),
    )
    .await
    .expect("healthz");
    assert_eq!(health.status(), 200);
    let ping = live.call_json("ping", json!({})).await;
    assert!(ping.get("result").is_some(), "{ping}");
}

/// Where the rules fix the answer exactly, it is that answer. Returns how many of the two
/// rules applied to this case (parse error, served request).
fn check_documented_codes(
    case: &Case,
    sent: &HeaderMap,
    status: u16,
    v: &Value,
    what: &str,
) -> (usize, usize) {
    if case.method != "POST" {
        return (0, 0);
    }
    let header = |name: &str| sent.get(name).map(HeaderValue::as_bytes);
    let conforming = header("content-type") == Some(b"application/json")
        && header("accept") == Some(b"application/json, text/event-stream")
        && header("mcp-protocol-version").is_none();
    if !conforming || case.body.len() > BODY_LIMIT {
        return (0, 0);
    }
    let mut applied = (0, 0);
    let code = v["error"]["code"].as_i64();
    let is_json = serde_json::from_slice::<serde::de::IgnoredAny>(&case.body).is_ok();
    // A body that is not JSON, with no session to look up first: 400 -32700, id null.
    if !is_json && header("mcp-session-id").is_none() {
        assert_eq!((status, code), (400, Some(-32700)), "{what}: {v}");
        assert_eq!(v["id"], Value::Null, "{what}: {v}");
        applied.0 = 1;
    }
    // A well-formed request on the live session: answered 200, naming its id.
    if let Sid::Live = case.sid
        && let Ok(m) = serde_json::from_slice::<Value>(&case.body)
        && m.is_object()
        && m["jsonrpc"] == "2.0"
        && m["method"]
            .as_str()
            .is_some_and(|method| matches!(method, "ping" | "tools/list" | "tools/call"))
        && (m["id"].is_i64() || m["id"].is_string())
        && m.get("result").is_none()
        && !m["params"].is_array()
    {
        assert_eq!(status, 200, "{what}: {v}");
        assert_eq!(v["id"], m["id"], "{what}: {v}");
        applied.1 = 1;
    }
    applied
}

/// The bug the property tests found, end to end: a JSON array inside a batch is not a
/// message (it was read positionally and served as a ping).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_inside_a_batch_is_not_a_message() {
    let srv = serve(builder(), config_with(SECRET, |_| {})).await;
    let c = Client::connect_with(&srv.mcp, "2025-03-26", json!({})).await;
    let res = within("batch", c.post().body(r#"[["2.0",1,"ping"]]"#).send())
        .await
        .expect("POST");
    support::expect_rpc_error(res, 400, -32700, Value::Null).await;
}
