//! The shared test fixture of fleetmcp's integration tests, included by each test crate with
//! `mod support;` (from `tests/it/main.rs`: `#[path = "../support/mod.rs"] mod support;`):
//!
//! - starting a server on a free loopback port that stops when its [`TestServer`] is dropped
//!   ([`serve`]; the one place that builds a test server), with the fixed secrets and the
//!   configuration helper ([`config_with`]);
//! - the `it` crate's fixture tools ([`fixture_builder`], [`start`], [`start_with`], ...);
//! - an MCP client over reqwest ([`Client`], [`mcp_post`]) and an SSE frame reader
//!   ([`SseStream`]);
//! - async wrappers of the one raw HTTP/1.1 client ([`raw_http`], [`raw_status`], in
//!   `raw_http.rs`), for requests reqwest cannot express (no `Accept` header, a foreign `Host`).
//!
//! Redis processes are `tests/support_redis`. The `allow` below is this module's only one:
//! an including crate must not add another on its `mod support;` (clippy's
//! `duplicated_attributes`).

#![allow(dead_code)] // each test crate uses a different part of this module

pub mod raw_http;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use fleetmcp::{
    Config, LogLevel, NoArgs, RequestContext, Server, ServerBuilder, ServerHandle, tool,
};
use futures_util::{Stream, StreamExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// The secret every fixture server uses unless a test says otherwise.
pub const SECRET: &str = "integration-test-secret-0123456789";
pub const OTHER_SECRET: &str = "another-deployment-secret-9876543210";
pub const LATEST: &str = "2025-11-25";
/// Upper bound for any single await in a test.
pub const WAIT: Duration = Duration::from_secs(3);

/// Awaits `f`, failing the test (naming `what`) if it takes longer than [`WAIT`].
pub async fn within<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(WAIT, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {WAIT:?}: {what}"),
    }
}

/// Polls `cond` every 10 ms until it holds, failing after `limit`.
pub async fn eventually(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !cond() {
        if tokio::time::Instant::now() >= deadline {
            panic!("condition not reached within {limit:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls the future `f` makes every 50 ms until it yields true, failing after `limit`: for a
/// condition that has to be awaited (a store's read), where [`eventually`] takes a plain one.
pub async fn eventually_async<F, Fut>(what: &str, limit: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + limit;
    loop {
        if f().await {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not reached within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Fixture server
// ---------------------------------------------------------------------------------------------

/// What the `slow` tool's handlers did.
#[derive(Default, Debug)]
pub struct Counters {
    pub started: AtomicUsize,
    pub completed: AtomicUsize,
    pub cancelled: AtomicUsize,
}

impl Counters {
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }
    pub fn completed(&self) -> usize {
        self.completed.load(Ordering::SeqCst)
    }
    pub fn cancelled(&self) -> usize {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// Counts the handler as cancelled if it is dropped before finishing.
struct Guard {
    counters: Arc<Counters>,
    finished: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.finished {
            self.counters.completed.fetch_add(1, Ordering::SeqCst);
        } else {
            self.counters.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct EchoArgs {
    pub text: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct AddArgs {
    pub a: i64,
    pub b: i64,
}

#[derive(Deserialize, JsonSchema)]
pub struct ProgressArgs {
    /// How many progress notifications to send.
    pub count: u32,
    /// Pause after each one.
    pub delay_ms: u64,
}

#[derive(Deserialize, JsonSchema)]
pub struct SlowArgs {
    /// How long the handler runs before completing.
    pub ms: u64,
}

/// Config with a fixed secret (say [`SECRET`] or [`OTHER_SECRET`]), port 0, and whatever `edit`
/// changes.
pub fn config_with(secret: &str, edit: impl FnOnce(&mut Config)) -> Config {
    config_from(&[("MCP_SESSION_SECRET", secret)], edit)
}

/// Config from these environment variables (and nothing from the process's), port 0, and
/// whatever `edit` changes.
pub fn config_from(env: &[(&str, &str)], edit: impl FnOnce(&mut Config)) -> Config {
    let mut cfg =
        Config::from_sources(None, env.iter().copied()).expect("fixture configuration is valid");
    cfg.port = 0;
    edit(&mut cfg);
    cfg
}

/// Names of the fixture's tools, in declaration order.
pub const FIXTURE_TOOLS: &[&str] = &[
    "echo",
    "add",
    "progress",
    "log",
    "sample",
    "elicit",
    "slow",
    "poll",
    "poll_first",
];

/// The fixture server's builder, with every tool the `it` tests need, before its configuration
/// (to add a session store, say).
pub fn fixture_builder(counters: Arc<Counters>) -> ServerBuilder {
    let slow_counters = counters;
    Server::builder("fleetmcp-it", "9.9.9")
        .instructions("integration-test fixture")
        .tool(
            tool("echo")
                .description("Returns its text")
                .handler(|a: EchoArgs, _ctx| async move { Ok(a.text) }),
        )
        .tool(
            tool("add")
                .description("Adds two integers")
                .handler(|a: AddArgs, _ctx| async move { Ok(format!("{}", a.a + a.b)) }),
        )
        .tool(
            tool("progress")
                .description("Sends progress notifications")
                .handler(|a: ProgressArgs, ctx: RequestContext| async move {
                    for i in 0..a.count {
                        ctx.progress(f64::from(i), Some(f64::from(a.count)), Some("working"));
                        tokio::time::sleep(Duration::from_millis(a.delay_ms)).await;
                    }
                    Ok(format!("done {}", a.count))
                }),
        )
        .tool(
            tool("log")
                .description("Logs at info, then answers")
                .handler(|_: NoArgs, ctx: RequestContext| async move {
                    ctx.log(LogLevel::Info, json!("first line"));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    ctx.log(LogLevel::Info, json!({"line": 2}));
                    Ok("logged")
                }),
        )
        .tool(
            tool("sample")
                .description("Asks the client's model")
                .handler(|_: NoArgs, ctx: RequestContext| async move {
                    let text = sample(&ctx, "Say hi").await?;
                    Ok(format!("sampled: {text}"))
                }),
        )
        .tool(tool("elicit").description("Asks the user").handler(
            |_: NoArgs, ctx: RequestContext| async move {
                let question = serde_json::from_value(json!({
                    "message": "Your name?",
                    "requestedSchema": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                        "required": ["name"]
                    }
                }))?;
                let r = ctx.elicit(question).await?;
                let action = serde_json::to_value(&r.action)?;
                let name = r
                    .content
                    .as_ref()
                    .and_then(|c| c["name"].as_str())
                    .unwrap_or("<no name>");
                Ok(format!(
                    "elicited: {} {name}",
                    action.as_str().unwrap_or("<no action>")
                ))
            },
        ))
        .tool(
            tool("slow")
                .description("Runs for `ms` milliseconds; counts completions and cancellations")
                .handler(move |a: SlowArgs, ctx: RequestContext| {
                    let counters = slow_counters.clone();
                    async move {
                        counters.started.fetch_add(1, Ordering::SeqCst);
                        let mut guard = Guard {
                            counters,
                            finished: false,
                        };
                        ctx.progress(0.0, None, Some("started"));
                        let deadline = tokio::time::Instant::now() + Duration::from_millis(a.ms);
                        while tokio::time::Instant::now() < deadline {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        guard.finished = true;
                        Ok("slow done")
                    }
                }),
        )
        .tool(
            tool("poll")
                .description("Ends its SSE connection mid-call (SSE polling)")
                .handler(|_: NoArgs, ctx: RequestContext| async move {
                    ctx.progress(0.0, Some(2.0), Some("before the break"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    ctx.end_connection_for_polling();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    ctx.progress(1.0, Some(2.0), Some("after the break"));
                    Ok("polled")
                }),
        )
        .tool(
            tool("poll_first")
                .description("Ends its SSE connection before sending anything else")
                .handler(|_: NoArgs, ctx: RequestContext| async move {
                    ctx.end_connection_for_polling();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok("polled first")
                }),
        )
}

/// A server running in this test's runtime; stops when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:<port>`
    pub base: String,
    /// `http://127.0.0.1:<port>/mcp`
    pub mcp: String,
    pub handle: ServerHandle,
    pub counters: Arc<Counters>,
    /// Fires the stop future (dropping it does too).
    stop: Option<oneshot::Sender<()>>,
    /// `serve_on`, which returns once the server stopped.
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Sends the stop signal (as SIGTERM would): the graceful stop begins.
    pub fn begin_stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Waits, at most `limit`, for `serve_on` to return after [`TestServer::begin_stop`];
    /// panics if it did not, or returned an error.
    pub async fn stopped_within(&mut self, limit: Duration) {
        let served = self.served.take().expect("stopped_within called once");
        match tokio::time::timeout(limit, served).await {
            Ok(Ok(Ok(()))) => {}
            Ok(other) => panic!("serve_on ended badly: {other:?}"),
            Err(_) => panic!("the server had not stopped within {limit:?}"),
        }
    }
}

/// Builds `builder` with `cfg` and serves it on a free loopback port: the one place a test
/// server is built and started. The session and event stores the configuration names (Redis)
/// are connected first.
pub async fn serve(builder: ServerBuilder, cfg: Config) -> TestServer {
    serve_counting(builder, cfg, Arc::default()).await
}

/// [`serve`], for a builder whose tools count into `counters` (the fixture's `slow`).
pub async fn serve_counting(
    builder: ServerBuilder,
    cfg: Config,
    counters: Arc<Counters>,
) -> TestServer {
    let server = builder.config(cfg).build();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let handle = server.handle();
    let (tx, rx) = oneshot::channel::<()>();
    let served = tokio::spawn(server.serve_on(listener, async move {
        let _ = rx.await;
    }));
    TestServer {
        addr,
        base: format!("http://{addr}"),
        mcp: format!("http://{addr}/mcp"),
        handle,
        counters,
        stop: Some(tx),
        served: Some(served),
    }
}

/// The fixture server with [`SECRET`] and default limits.
pub async fn start() -> TestServer {
    start_with(SECRET, |_| {}).await
}

/// The fixture server using `store` for session records (instances of one fleet).
pub async fn start_sharing(
    store: Arc<dyn fleetmcp::internals::SessionStore>,
    edit: impl FnOnce(&mut Config),
) -> TestServer {
    let counters = Arc::new(Counters::default());
    let builder = fixture_builder(counters.clone()).session_store(store);
    serve_counting(builder, config_with(SECRET, edit), counters).await
}

/// The fixture server with another secret or config changes.
pub async fn start_with(secret: &str, edit: impl FnOnce(&mut Config)) -> TestServer {
    let counters = Arc::new(Counters::default());
    serve_counting(
        fixture_builder(counters.clone()),
        config_with(secret, edit),
        counters,
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// MCP client
// ---------------------------------------------------------------------------------------------

/// The HTTP client of every test request (no proxy: the servers are on loopback).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("reqwest client")
}

/// Adds the headers a conforming client sends with every POST of a JSON-RPC message.
pub fn conforming(post: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    post.header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
}

/// A POST to `url` with the headers a conforming client sends and nothing else (no session,
/// no protocol version): for tests that set those headers themselves.
pub fn mcp_post(url: &str) -> reqwest::RequestBuilder {
    conforming(http().post(url))
}

/// Client capabilities declaring sampling and elicitation.
pub fn full_capabilities() -> Value {
    json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}})
}

pub fn initialize_body(version: &str, capabilities: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": capabilities,
            "clientInfo": {"name": "fleetmcp-it", "version": "0.0.0"}
        }
    })
}

/// A raw MCP client of one session.
pub struct Client {
    pub http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    pub version: String,
    next_id: AtomicI64,
}

impl Client {
    /// A client with no session yet.
    pub fn bare(url: &str, version: &str) -> Self {
        Self {
            http: http(),
            url: url.to_string(),
            session: None,
            version: version.to_string(),
            next_id: AtomicI64::new(1),
        }
    }

    /// Initializes at the latest version with sampling and elicitation declared.
    pub async fn connect(server: &TestServer) -> Self {
        Self::connect_with(&server.mcp, LATEST, full_capabilities()).await
    }

    /// Initializes, checks the answer, and sends `notifications/initialized`.
    pub async fn connect_with(url: &str, version: &str, capabilities: Value) -> Self {
        let mut c = Self::bare(url, version);
        c.initialize(capabilities).await;
        let res = c
            .notify("notifications/initialized", json!({}))
            .await
            .status();
        assert_eq!(res, 202, "notifications/initialized");
        c
    }

    /// Sends `initialize` at the client's version, checks the answer (200, a session id, the
    /// version agreed), keeps the session id, and returns the JSON-RPC answer.
    pub async fn initialize(&mut self, capabilities: Value) -> Value {
        let res = within(
            "initialize",
            self.post()
                .json(&initialize_body(&self.version, capabilities))
                .send(),
        )
        .await
        .expect("initialize request");
        assert_eq!(res.status(), 200, "initialize status");
        let sid = res
            .headers()
            .get("mcp-session-id")
            .expect("initialize answers with Mcp-Session-Id")
            .to_str()
            .expect("session id is ASCII")
            .to_string();
        let body: Value = within("initialize body", res.json()).await.expect("json");
        assert_eq!(body["result"]["protocolVersion"], self.version, "{body}");
        self.session = Some(sid);
        body
    }

    pub fn session_id(&self) -> &str {
        self.session.as_deref().expect("client has a session")
    }

    /// A POST to the MCP endpoint with the headers a conforming client sends.
    pub fn post(&self) -> reqwest::RequestBuilder {
        let mut b = conforming(self.http.post(&self.url));
        if let Some(s) = &self.session {
            b = b.header("mcp-session-id", s);
        }
        if self.version.as_str() >= "2025-06-18" {
            b = b.header("mcp-protocol-version", &self.version);
        }
        b
    }

    /// A GET of the session's stream (standalone, or a resumption with `Last-Event-ID`).
    pub fn get(&self) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream");
        if let Some(s) = &self.session {
            b = b.header("mcp-session-id", s);
        }
        if self.version.as_str() >= "2025-06-18" {
            b = b.header("mcp-protocol-version", &self.version);
        }
        b
    }

    pub fn delete(&self) -> reqwest::RequestBuilder {
        let mut b = self.http.delete(&self.url);
        if let Some(s) = &self.session {
            b = b.header("mcp-session-id", s);
        }
        b
    }

    pub fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// POSTs any JSON body.
    pub async fn send(&self, body: &Value) -> reqwest::Response {
        within("POST", self.post().json(body).send())
            .await
            .expect("POST")
    }

    /// POSTs a request with the given id.
    pub async fn request_with_id(
        &self,
        id: Value,
        method: &str,
        params: Value,
    ) -> reqwest::Response {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
    }

    /// POSTs a request and expects a JSON answer; returns the JSON-RPC message.
    pub async fn call_json(&self, method: &str, params: Value) -> Value {
        let id = self.next_id();
        let res = self.request_with_id(json!(id), method, params).await;
        assert_eq!(res.status(), 200, "{method}");
        assert_content_type(&res, "application/json");
        let v: Value = within("JSON body", res.json()).await.expect("json body");
        assert_eq!(v["id"], json!(id), "{v}");
        v
    }

    /// `tools/call` answered as JSON; returns `result`.
    pub async fn call_tool_json(&self, name: &str, arguments: Value) -> Value {
        let v = self
            .call_json("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        assert!(v.get("error").is_none(), "unexpected error: {v}");
        v["result"].clone()
    }

    /// POSTs `tools/call` with a progress token; the caller decides how to read the answer.
    pub async fn start_tool(&self, id: i64, name: &str, arguments: Value) -> reqwest::Response {
        self.request_with_id(
            json!(id),
            "tools/call",
            json!({
                "name": name,
                "arguments": arguments,
                "_meta": {"progressToken": format!("tok-{id}")}
            }),
        )
        .await
    }

    pub async fn notify(&self, method: &str, params: Value) -> reqwest::Response {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await
    }

    /// GET with `Last-Event-ID`.
    pub async fn resume(&self, last_event_id: &str) -> reqwest::Response {
        within(
            "resume GET",
            self.get().header("last-event-id", last_event_id).send(),
        )
        .await
        .expect("GET")
    }
}

/// Sets a header, replacing any value already on the request (`RequestBuilder::header`
/// appends a second field line instead).
pub trait SetHeader {
    fn set(self, name: &'static str, value: &str) -> Self;
}

impl SetHeader for reqwest::RequestBuilder {
    fn set(self, name: &'static str, value: &str) -> Self {
        let mut map = reqwest::header::HeaderMap::new();
        map.insert(
            name,
            reqwest::header::HeaderValue::from_str(value).expect("valid header value"),
        );
        self.headers(map)
    }
}

pub fn content_type(res: &reqwest::Response) -> String {
    res.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

pub fn assert_content_type(res: &reqwest::Response, mime: &str) {
    let ct = content_type(res);
    assert!(
        ct.split(';').next().unwrap_or("").trim() == mime,
        "expected content-type {mime}, got {ct:?}"
    );
}

/// Reads a JSON-RPC error answer and checks status, code and id.
pub async fn expect_rpc_error(res: reqwest::Response, status: u16, code: i64, id: Value) -> Value {
    assert_eq!(res.status(), status, "HTTP status");
    assert_content_type(&res, "application/json");
    let v: Value = within("error body", res.json())
        .await
        .expect("json error body");
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["id"], id, "{v}");
    assert!(v.get("result").is_none(), "{v}");
    v
}

/// The text of the first content block of a tool result.
pub fn result_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {result}"))
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// SSE
// ---------------------------------------------------------------------------------------------

/// One SSE event as framed on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
    pub retry: Option<u64>,
}

impl SseEvent {
    /// The JSON-RPC message carried, or `None` for a priming event (empty data).
    pub fn json(&self) -> Option<Value> {
        if self.data.is_empty() {
            return None;
        }
        Some(serde_json::from_str(&self.data).unwrap_or_else(|e| {
            panic!("SSE data is not JSON ({e}): {:?}", self.data);
        }))
    }
    pub fn is_priming(&self) -> bool {
        self.data.is_empty()
    }
    pub fn id(&self) -> &str {
        self.id.as_deref().expect("event has an id")
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// Reads SSE events from a response body; dropping it drops the connection.
pub struct SseStream {
    body: ByteStream,
    buf: Vec<u8>,
    done: bool,
}

impl SseStream {
    pub fn new(res: reqwest::Response) -> Self {
        assert_eq!(res.status(), 200, "SSE answer status");
        assert_content_type(&res, "text/event-stream");
        Self {
            body: Box::pin(res.bytes_stream()),
            buf: Vec::new(),
            done: false,
        }
    }

    /// The next event, `None` when the server ended the stream. Fails the test if nothing
    /// arrives within [`WAIT`].
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(ev) = self.take_frame() {
                return Some(ev);
            }
            if self.done {
                return None;
            }
            match tokio::time::timeout(WAIT, self.body.next()).await {
                Err(_) => panic!("SSE stream stalled for {WAIT:?}"),
                Ok(None) | Ok(Some(Err(_))) => self.done = true,
                Ok(Some(Ok(bytes))) => self.buf.extend_from_slice(&bytes),
            }
        }
    }

    /// Every remaining event until the server ends the stream.
    pub async fn rest(mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        while let Some(ev) = self.next().await {
            out.push(ev);
        }
        out
    }

    /// Events up to and including the JSON-RPC response with `id`; fails if the stream ends
    /// first.
    pub async fn until_response(&mut self, id: &Value) -> (Vec<SseEvent>, Value) {
        let mut before = Vec::new();
        while let Some(ev) = self.next().await {
            if let Some(msg) = ev.json()
                && msg.get("method").is_none()
                && &msg["id"] == id
            {
                return (before, msg);
            }
            before.push(ev);
        }
        panic!("stream ended before the response to {id}; got {before:?}");
    }

    /// The JSON-RPC messages up to and including the first one `stop` accepts; fails if the
    /// stream ends first.
    pub async fn messages_until(&mut self, mut stop: impl FnMut(&Value) -> bool) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(ev) = self.next().await {
            if let Some(msg) = ev.json() {
                let done = stop(&msg);
                out.push(msg);
                if done {
                    return out;
                }
            }
        }
        panic!("stream ended before the awaited message; got {out:?}");
    }

    /// Events until a server-to-client request (a message with `method` and `id`).
    pub async fn until_server_request(&mut self) -> (Vec<SseEvent>, Value) {
        let mut before = Vec::new();
        while let Some(ev) = self.next().await {
            if let Some(msg) = ev.json()
                && msg.get("method").is_some()
                && msg.get("id").is_some()
            {
                return (before, msg);
            }
            before.push(ev);
        }
        panic!("stream ended before a server request; got {before:?}");
    }

    fn take_frame(&mut self) -> Option<SseEvent> {
        loop {
            let end = self.buf.windows(2).position(|w| w == b"\n\n")?;
            let block: Vec<u8> = self.buf.drain(..end + 2).collect();
            let text = String::from_utf8(block).expect("SSE is UTF-8");
            let mut ev = SseEvent {
                id: None,
                event: None,
                data: String::new(),
                retry: None,
            };
            let mut fields = 0;
            let mut data_lines: Vec<String> = Vec::new();
            for line in text.lines() {
                if line.is_empty() || line.starts_with(':') {
                    continue;
                }
                let (name, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                fields += 1;
                match name {
                    "id" => ev.id = Some(value.to_string()),
                    "event" => ev.event = Some(value.to_string()),
                    "data" => data_lines.push(value.to_string()),
                    "retry" => ev.retry = value.parse().ok(),
                    other => panic!("unknown SSE field {other:?} in {text:?}"),
                }
            }
            if fields == 0 {
                // A comment (keep-alive): not an event.
                continue;
            }
            ev.data = data_lines.join("\n");
            return Some(ev);
        }
    }
}

/// The JSON-RPC messages among `events` (priming events left out).
pub fn messages(events: &[SseEvent]) -> Vec<Value> {
    events.iter().filter_map(SseEvent::json).collect()
}

/// The `progress` values of the `notifications/progress` messages among `events`.
pub fn progress_values(events: &[SseEvent]) -> Vec<u64> {
    messages(events)
        .into_iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| {
            m["params"]["progress"]
                .as_f64()
                .expect("progress is a number") as u64
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP over TCP
// ---------------------------------------------------------------------------------------------

pub use raw_http::RawResponse;

/// Runs a blocking raw-HTTP exchange off the runtime (the server answering it runs on the
/// same runtime), passing its panic on.
async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

fn owned(headers: &[(&str, &str)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn borrowed(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Sends one HTTP/1.1 request to `/mcp` exactly as given (plus `Content-Length` and
/// `Connection: close`) and reads the whole answer within [`WAIT`].
pub async fn raw_http(
    addr: SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> RawResponse {
    let (method, headers, body) = (method.to_string(), owned(headers), body.to_string());
    off_runtime(move || {
        raw_http::send(
            addr,
            &method,
            "/mcp",
            &borrowed(&headers),
            Some(&body),
            WAIT,
        )
    })
    .await
}

/// Sends one HTTP/1.1 request to `/mcp` and reads only the status line (for answers that
/// stream).
pub async fn raw_status(addr: SocketAddr, method: &str, headers: &[(&str, &str)]) -> u16 {
    let (method, headers) = (method.to_string(), owned(headers));
    off_runtime(move || {
        let mut stream = raw_http::open(addr, &method, "/mcp", &borrowed(&headers), Some(""), WAIT)
            .unwrap_or_else(|e| panic!("{method} /mcp on {addr}: {e}"));
        raw_http::read_status(&mut stream).unwrap_or_else(|e| panic!("{method} /mcp: {e}"))
    })
    .await
}

/// Asks the client's model through the typed sampling API; the text of its answer.
#[allow(deprecated)] // sampling (SEP-2577) is still part of every session-era revision
async fn sample(ctx: &RequestContext, prompt: &str) -> Result<String, fleetmcp::ToolError> {
    use fleetmcp::model::{CreateMessageRequestParams, SamplingMessage};
    let params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], 20);
    let r = ctx.create_message(params).await?;
    Ok(r.message
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_else(|| "<no text>".into()))
}
