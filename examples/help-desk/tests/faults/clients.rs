//! The clients: tokio tasks over reqwest, each recording every request it makes.
//!
//! - Session era (2025-11-25): `initialize`, `notifications/initialized`, then `stamp` calls,
//!   every other one with a `progressToken` so that its answer is an SSE stream; a stream that
//!   ends before the answer is resumed with `GET` + `Last-Event-ID` ([`RESUMES`] times at most,
//!   not counting resumes refused with 503 or that could not connect, within
//!   [`RESUME_WINDOW`]).
//!   A 404 opens a new session.
//! - 2026-07-28: `server/discover`, then `stamp` calls with `_meta`, no session.
//! - 2026-07-28, tasks extension: `stamp` started as a background task, then `tasks/get`
//!   every [`TASK_POLL`] (through nginx: each poll may land on any instance) until the task
//!   ends, within [`TASK_WINDOW`].
//! - 2026-07-28, multi-round: `stamp_confirmed` (first round: an `InputRequiredResult` asking
//!   to confirm), then the answering round with its `requestState` (on whichever instance
//!   nginx picks; retried with the same state after a documented refusal).
//! - 2024-11-05: `GET /sse`, then `POST /message?sessionId=` (`initialize`, `stamp`), the
//!   answers read from the stream; a broken stream opens a new one.
//!
//! Every request has a deadline ([`CLIENT_DEADLINE`]); past it, it is recorded as a hang.
//! After a documented refusal a client waits as an SDK does (`Retry-After`, at most 2 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::history::{Kind, Op, Outcome, Recorder, Route, session_hash, truncate};

// The 2026-07-28 clients (the tasks extension, multi-round calls, stateless requests).
mod modern;
pub use modern::{confirm_client, stateless_client, task_client};
use modern::{modern_meta_with, modern_post};

/// Past it, a request is a hang (above the checker's bound, so a slow answer shows as slow).
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(25);
/// How long a streamed `stamp` waits between its progress event and its answer.
const STREAM_DELAY_MS: u64 = 400;
/// Resumes of one answer stream that a server took (a resume refused with 503 and
/// `Retry-After` is tried again, as the refusal asks, and so is one that could not connect,
/// within [`RESUME_WINDOW`]).
pub const RESUMES: usize = 5;
/// How long after its first resume a client goes on resuming an answer stream.
const RESUME_WINDOW: Duration = Duration::from_secs(30);
const SESSION_VERSION: &str = "2025-11-25";
/// How long a task's `stamp` waits after its effect before it completes: a window in which a
/// fault can kill its instance.
const TASK_DELAY_MS: u64 = 600;
/// How often the task client polls `tasks/get`.
const TASK_POLL: Duration = Duration::from_millis(250);
/// How long after its start the task client goes on polling a task that has not ended.
pub const TASK_WINDOW: Duration = Duration::from_secs(30);
/// Answering rounds of a multi-round call refused (503 with `Retry-After`, 429) and tried
/// again with the same `requestState`, at most.
const ROUND_RETRIES: usize = 5;
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
const ACCEPT: &str = "application/json, text/event-stream";

pub struct Shared {
    pub rec: Recorder,
    pub stop: AtomicBool,
    /// Every client's HTTP client: with authorization on, it sends the clients' principal's
    /// token ([`OWNER_TOKEN`]).
    pub http: reqwest::Client,
    /// With authorization on, the [`intruder`]'s: another principal's token
    /// ([`INTRUDER_TOKEN`]).
    pub intruder: Option<reqwest::Client>,
    /// Session and task ids the clients were given, for the [`intruder`] to try.
    pub loot: parking_lot::Mutex<Loot>,
    /// Deliberately broken client: after an acknowledged `stamp`, send the same key once more
    /// (unrecorded), as a client retrying a call it already got an answer to.
    pub double_stamp: bool,
}

/// The clients' principal's token, when authorization is on (the harness's issuer makes
/// `tok-<name>` a valid token of subject `<name>`).
pub const OWNER_TOKEN: &str = "tok-alice";
/// The intruder's: valid, another principal's.
pub const INTRUDER_TOKEN: &str = "tok-mallory";

/// What the clients were given lately: session ids and task ids (the newest few).
#[derive(Default)]
pub struct Loot {
    pub sessions: std::collections::VecDeque<String>,
    pub tasks: std::collections::VecDeque<String>,
}

impl Loot {
    const KEPT: usize = 16;

    fn keep(list: &mut std::collections::VecDeque<String>, id: &str) {
        if list.len() == Self::KEPT {
            list.pop_front();
        }
        list.push_back(id.to_string());
    }
}

/// An HTTP client for the harness, sending `token` as a bearer token when given.
fn http_client(token: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(t) = token
        && let Ok(v) = reqwest::header::HeaderValue::from_str(&format!("Bearer {t}"))
    {
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .connect_timeout(Duration::from_secs(3))
        .default_headers(headers)
        .build()
        .expect("reqwest client")
}

impl Shared {
    /// `principals`: authorization is on; the clients send [`OWNER_TOKEN`], and the intruder
    /// runs with [`INTRUDER_TOKEN`] (or, deliberately broken, `intruder_token`).
    pub fn new(
        rec: Recorder,
        double_stamp: bool,
        principals: bool,
        intruder_token: &str,
    ) -> Arc<Self> {
        Arc::new(Self {
            rec,
            stop: AtomicBool::new(false),
            http: http_client(principals.then_some(OWNER_TOKEN)),
            intruder: principals.then(|| http_client(Some(intruder_token))),
            loot: parking_lot::Mutex::new(Loot::default()),
            double_stamp,
        })
    }
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A JSON-RPC id no other request of the run uses (the instances log it; the checker matches
/// on it).
pub fn next_id() -> u64 {
    static ID: AtomicU64 = AtomicU64::new(1000);
    ID.fetch_add(1, Ordering::Relaxed)
}

/// An SSE parser fed with chunks: complete events as (id, data).
#[derive(Default)]
struct Sse {
    buf: String,
    id: Option<String>,
    data: String,
}

impl Sse {
    fn push(&mut self, chunk: &[u8]) -> Vec<(Option<String>, String)> {
        self.buf.push_str(&String::from_utf8_lossy(chunk));
        let mut out = Vec::new();
        while let Some(nl) = self.buf.find('\n') {
            let line: String = self.buf.drain(..=nl).collect();
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() || self.id.is_some() {
                    out.push((self.id.take(), std::mem::take(&mut self.data)));
                }
            } else if let Some(v) = line.strip_prefix("id:") {
                self.id = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("data:") {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(v.trim_start());
            }
        }
        out
    }
}

/// What one exchange gave.
struct Got {
    status: u16,
    machine: Option<String>,
    refused: bool,
    session_header: Option<String>,
    /// The JSON body, or the answer (result or error with our id) found on the SSE stream.
    answer: Option<Value>,
    events: Vec<String>,
    /// The last SSE event id, for a resume.
    last_event: Option<String>,
    /// The SSE stream ended (cleanly, or with an error: `Some`) before the answer.
    stream_cut: Option<Option<String>>,
    body: String,
}

/// How a transport failure that never reached a server begins: no connection could be made
/// (the instance is down, or a cut link refuses).
const CONNECT: &str = "connect: ";

/// Whether `outcome` is a request no server received (see [`CONNECT`]).
fn never_connected(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Transport(d) if d.starts_with(CONNECT))
}

/// Sends `req`, reads the whole answer (SSE until the answer with `rpc_id`), bounded by
/// [`CLIENT_DEADLINE`]; `Err(outcome)` for a transport failure or a hang.
async fn exchange(req: reqwest::RequestBuilder, rpc_id: Option<u64>) -> Result<Got, Outcome> {
    match tokio::time::timeout(CLIENT_DEADLINE, exchange_inner(req, rpc_id)).await {
        Ok(r) => r,
        Err(_) => Err(Outcome::Hung),
    }
}

async fn exchange_inner(req: reqwest::RequestBuilder, rpc_id: Option<u64>) -> Result<Got, Outcome> {
    let resp = req.send().await.map_err(|e| {
        let how = if e.is_connect() { CONNECT } else { "" };
        Outcome::Transport(format!("{how}{e:?}"))
    })?;
    let status = resp.status().as_u16();
    let h = resp.headers();
    let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(String::from);
    let machine = header("x-frontmcp-machine-id");
    let refused = (status == 503 && header("retry-after").is_some()) || status == 429;
    let session_header = header("mcp-session-id");
    let sse = header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
    let mut got = Got {
        status,
        machine,
        refused,
        session_header,
        answer: None,
        events: Vec::new(),
        last_event: None,
        stream_cut: None,
        body: String::new(),
    };
    if !sse {
        let body = resp
            .text()
            .await
            .map_err(|e| Outcome::Transport(format!("body: {e:?}")))?;
        got.answer = serde_json::from_str(&body).ok();
        got.body = body;
        return Ok(got);
    }
    let mut stream = resp.bytes_stream();
    let mut parser = Sse::default();
    loop {
        match stream.next().await {
            None => {
                got.stream_cut = Some(None);
                return Ok(got);
            }
            Some(Err(e)) => {
                got.stream_cut = Some(Some(format!("{e:?}")));
                return Ok(got);
            }
            Some(Ok(chunk)) => {
                for (id, data) in parser.push(&chunk) {
                    if let Some(id) = &id {
                        got.events.push(id.clone());
                        got.last_event = Some(id.clone());
                    }
                    let Ok(msg) = serde_json::from_str::<Value>(&data) else {
                        continue;
                    };
                    let ours = rpc_id.is_some_and(|r| msg["id"] == json!(r));
                    if ours && (msg.get("result").is_some() || msg.get("error").is_some()) {
                        got.answer = Some(msg);
                        return Ok(got);
                    }
                }
            }
        }
    }
}

/// The outcome of an answered exchange: `Ok` for a result (or 202), the documented refusals,
/// 404 as a gone session.
fn classify(got: &Got) -> Outcome {
    if got.refused {
        return Outcome::Refused { status: got.status };
    }
    if got.status == 404 {
        if std::env::var_os("FAULTS_VERBOSE").is_some() {
            eprintln!("404: {}", truncate(&got.body, 300));
        }
        return Outcome::SessionGone;
    }
    if got.status == 202 {
        return Outcome::Ok;
    }
    // A resume of an answer stream never stored, whose writer is gone: like the writer-gone
    // answer, the call's outcome is unknown.
    if got.status == 410 && got.body.contains(fleetmcp::STREAM_LOST_MESSAGE) {
        return Outcome::Abandoned;
    }
    if got.status != 200 {
        return Outcome::Error {
            status: got.status,
            detail: truncate(&got.body, 300),
        };
    }
    match &got.answer {
        Some(a) if a.get("result").is_some() => {
            if a["result"]["isError"] == json!(true) {
                Outcome::ToolError(truncate(&a["result"].to_string(), 200))
            } else {
                Outcome::Ok
            }
        }
        Some(a) if is_abandoned(a) => Outcome::Abandoned,
        Some(a) => Outcome::Error {
            status: 200,
            detail: truncate(&a.to_string(), 300),
        },
        None => match &got.stream_cut {
            Some(Some(e)) => Outcome::Transport(format!("stream broke: {}", truncate(e, 200))),
            // The server ended the stream before the answer: documented (the client resumes);
            // the call's own outcome says whether the answer came.
            Some(None) => Outcome::Ok,
            None => Outcome::Error {
                status: 200,
                detail: format!("not JSON: {}", truncate(&got.body, 200)),
            },
        },
    }
}

async fn backoff(got: &Result<Got, Outcome>) {
    let wait = match got {
        Ok(g) if g.refused => Duration::from_millis(500),
        Ok(_) => Duration::from_millis(20),
        Err(_) => Duration::from_millis(300),
    };
    tokio::time::sleep(wait).await;
}

fn finish(op: &mut Op, got: &Result<Got, Outcome>, now: Duration) {
    op.end = now;
    match got {
        Ok(g) => {
            op.machine = g.machine.clone();
            op.outcome = classify(g);
            op.events = g.events.clone();
        }
        Err(o) => op.outcome = o.clone(),
    }
}

fn session_post(
    http: &reqwest::Client,
    base: &str,
    sid: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut r = http
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .body(body.to_string());
    if let Some(sid) = sid {
        r = r
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", SESSION_VERSION);
    }
    r
}

/// Opens a session: its id, or `None` (recorded) when it was not opened.
async fn open_session(sh: &Shared, name: &str, route: &Route, base: &str) -> Option<String> {
    let rpc = next_id();
    let init = json!({"jsonrpc": "2.0", "id": rpc, "method": "initialize", "params": {
        "protocolVersion": SESSION_VERSION, "capabilities": {},
        "clientInfo": {"name": name, "version": "1"}}});
    let mut op = Op::new(name, Kind::Initialize, route.clone(), sh.rec.now());
    op.rpc_id = Some(rpc);
    let got = exchange(session_post(&sh.http, base, None, &init), Some(rpc)).await;
    finish(&mut op, &got, sh.rec.now());
    let sid = match &got {
        Ok(g) if op.outcome == Outcome::Ok => g.session_header.clone(),
        _ => None,
    };
    if op.outcome == Outcome::Ok && sid.is_none() {
        op.outcome = Outcome::Error {
            status: 200,
            detail: "initialize without Mcp-Session-Id".into(),
        };
    }
    op.session = sid.as_deref().map(session_hash);
    sh.rec.op(op);
    let Some(sid) = sid else {
        backoff(&got).await;
        return None;
    };
    Loot::keep(&mut sh.loot.lock().sessions, &sid);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let mut op = Op::new(name, Kind::Initialized, route.clone(), sh.rec.now());
    op.session = Some(session_hash(&sid));
    let got = exchange(session_post(&sh.http, base, Some(&sid), &note), None).await;
    finish(&mut op, &got, sh.rec.now());
    let ok = op.outcome == Outcome::Ok;
    sh.rec.op(op);
    if !ok {
        backoff(&got).await;
    }
    // A refused notification still leaves a session the next requests may use.
    Some(sid)
}

/// A session-era client on `base` (nginx, or one instance).
pub async fn session_client(sh: Arc<Shared>, name: String, route: Route, base: String) {
    let mut session: Option<String> = None;
    let mut n = 0u64;
    while !sh.stopped() {
        let Some(sid) = session.clone() else {
            session = open_session(&sh, &name, &route, &base).await;
            continue;
        };
        n += 1;
        let sse = n.is_multiple_of(2);
        let key = format!("{name}-{n}");
        let rpc = next_id();
        let mut params = json!({"name": "stamp", "arguments": {"key": key}});
        if sse {
            // Streamed, and slow after its first event: a fault can break the stream between
            // the progress event and the answer, and the client resumes it.
            params["_meta"] = json!({"progressToken": rpc});
            params["arguments"]["delay_ms"] = json!(STREAM_DELAY_MS);
        }
        let call = json!({"jsonrpc": "2.0", "id": rpc, "method": "tools/call", "params": params});
        let mut op = Op::new(&name, Kind::Stamp { sse }, route.clone(), sh.rec.now());
        op.rpc_id = Some(rpc);
        op.session = Some(session_hash(&sid));
        op.stamp = Some(key.clone());
        let got = exchange(session_post(&sh.http, &base, Some(&sid), &call), Some(rpc)).await;
        finish(&mut op, &got, sh.rec.now());
        let mut answer = answer_to(&got, rpc);
        op.results = usize::from(answer.is_some());
        let cut = got
            .as_ref()
            .ok()
            .filter(|g| g.answer.is_none() && g.stream_cut.is_some())
            .and_then(|g| g.last_event.clone());
        let index = sh.rec.op(op.clone());
        // A resume answered that the stream was never stored (`410`): the call is abandoned.
        let mut abandoned = false;
        if let Some(mut last) = cut {
            // Resume the answer stream where it broke.
            let (mut tries, until) = (0, sh.rec.now() + RESUME_WINDOW);
            while tries < RESUMES && sh.rec.now() < until {
                let mut r = Op::new(
                    &name,
                    Kind::Resume { of: index },
                    route.clone(),
                    sh.rec.now(),
                );
                r.session = op.session.clone();
                let req = sh
                    .http
                    .get(format!("{base}/mcp"))
                    .header("accept", "text/event-stream")
                    .header("mcp-session-id", &sid)
                    .header("mcp-protocol-version", SESSION_VERSION)
                    .header("last-event-id", &last);
                let got = exchange(req, Some(rpc)).await;
                finish(&mut r, &got, sh.rec.now());
                let found = answer_to(&got, rpc);
                r.results = usize::from(found.is_some());
                if r.outcome == Outcome::Abandoned && found.is_none() {
                    abandoned = true;
                }
                if let Some(l) = got.as_ref().ok().and_then(|g| g.last_event.clone()) {
                    last = l;
                }
                // A hang is not tried again (a client would give up too).
                let gone = matches!(r.outcome, Outcome::SessionGone | Outcome::Hung);
                let done = found.is_some() || abandoned;
                // A resume refused with 503, or that found no instance to connect to (its
                // instance down while it restarts), is tried again within the window, as a
                // client retries what no server took: only resumes a server took count.
                if !matches!(r.outcome, Outcome::Refused { .. }) && !never_connected(&r.outcome) {
                    tries += 1;
                }
                sh.rec.op(r);
                if found.is_some() {
                    answer = found;
                }
                if done || gone {
                    break;
                }
                // Long enough, over the resumes, for a killed instance to be started again.
                tokio::time::sleep(Duration::from_millis(1200)).await;
            }
        }
        let acked = answer
            .as_ref()
            .is_some_and(|a| a.get("result").is_some() && a["result"]["isError"] != json!(true));
        // The call's outcome is where it ended: its answer, even when it came on a resumed
        // stream after the first one broke (documented: resume with `Last-Event-ID`); the
        // broken stream's error otherwise.
        let final_outcome = match &answer {
            Some(a) => Some(classify_answer(Some(a))),
            None if abandoned => Some(Outcome::Abandoned),
            None if op.outcome == Outcome::Ok => Some(Outcome::Transport(format!(
                "the answer never came (stream ended, {RESUMES} resumes at most)"
            ))),
            None => None,
        };
        sh.rec.update(index, |o| {
            o.acked = acked;
            if let Some(f) = final_outcome {
                o.outcome = f;
            }
        });
        if acked && sh.double_stamp {
            let again = json!({"jsonrpc": "2.0", "id": next_id(), "method": "tools/call",
                "params": {"name": "stamp", "arguments": {"key": key}}});
            let _ = exchange(session_post(&sh.http, &base, Some(&sid), &again), None).await;
        }
        let gone = op.outcome == Outcome::SessionGone;
        if gone {
            session = None;
        }
        backoff(&got).await;
    }
}

/// The JSON-RPC answer to `rpc` a 200 carried (JSON body or SSE), if any: not the body of a
/// refusal.
fn answer_to(got: &Result<Got, Outcome>, rpc: u64) -> Option<Value> {
    got.as_ref()
        .ok()
        .filter(|g| g.status == 200)
        .and_then(|g| g.answer.clone())
        .filter(|a| {
            a["id"] == json!(rpc) && (a.get("result").is_some() || a.get("error").is_some())
        })
}

/// The JSON-RPC answer to `rpc`, whatever the HTTP status it came with (a 2026-07-28
/// `-32602` may come with 400).
fn any_answer_to(got: &Result<Got, Outcome>, rpc: u64) -> Option<&Value> {
    got.as_ref()
        .ok()
        .and_then(|g| g.answer.as_ref())
        .filter(|a| a["id"] == json!(rpc))
}

/// Whether `answer` is the "Unknown task" error.
fn is_unknown_task(answer: &Value) -> bool {
    answer["error"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("Unknown task"))
}

fn classify_answer(a: Option<&Value>) -> Outcome {
    match a {
        Some(a) if a.get("result").is_some() => {
            if a["result"]["isError"] == json!(true) {
                Outcome::ToolError(truncate(&a["result"].to_string(), 200))
            } else {
                Outcome::Ok
            }
        }
        Some(a) if is_abandoned(a) => Outcome::Abandoned,
        Some(a) => Outcome::Error {
            status: 200,
            detail: truncate(&a.to_string(), 300),
        },
        None => Outcome::Ok,
    }
}

/// The error a resumed answer stream carries when the instance running the call died.
fn is_abandoned(answer: &Value) -> bool {
    answer["error"]["message"] == json!(fleetmcp::WRITER_GONE_MESSAGE)
}

/// A 2024-11-05 client: `GET /sse` on `base`, then its `POST /message` requests, answers read
/// from the stream.
pub async fn legacy_client(sh: Arc<Shared>, name: String, route: Route, base: String) {
    let mut n = 0u64;
    while !sh.stopped() {
        // Open the stream; its reader sends every JSON message it carries.
        let mut op = Op::new(&name, Kind::LegacyStream, route.clone(), sh.rec.now());
        let resp = tokio::time::timeout(
            CLIENT_DEADLINE,
            sh.http
                .get(format!("{base}/sse"))
                .header("accept", "text/event-stream")
                .send(),
        )
        .await;
        let resp = match resp {
            Err(_) => {
                op.end = sh.rec.now();
                op.outcome = Outcome::Hung;
                sh.rec.op(op);
                continue;
            }
            Ok(Err(e)) => {
                op.end = sh.rec.now();
                op.outcome = Outcome::Transport(format!("{e:?}"));
                sh.rec.op(op);
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
            Ok(Ok(r)) => r,
        };
        op.machine = resp
            .headers()
            .get("x-frontmcp-machine-id")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let status = resp.status().as_u16();
        if status != 200 {
            op.end = sh.rec.now();
            op.outcome = if status == 503 || status == 429 {
                Outcome::Refused { status }
            } else {
                Outcome::Error {
                    status,
                    detail: String::new(),
                }
            };
            sh.rec.op(op);
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<Result<Value, String>>();
        let (etx, mut erx) = mpsc::unbounded_channel::<String>();
        let reader = tokio::spawn(async move {
            let mut stream = resp.bytes_stream();
            let mut parser = Sse::default();
            let mut endpoint_sent = false;
            while let Some(chunk) = stream.next().await {
                let Ok(chunk) = chunk else {
                    let _ = tx.send(Err("stream broke".into()));
                    return;
                };
                for (_, data) in parser.push(&chunk) {
                    if !endpoint_sent && data.starts_with('/') {
                        endpoint_sent = true;
                        let _ = etx.send(data);
                    } else if let Ok(v) = serde_json::from_str::<Value>(&data) {
                        let _ = tx.send(Ok(v));
                    }
                }
            }
            let _ = tx.send(Err("stream ended".into()));
        });
        let endpoint = tokio::time::timeout(Duration::from_secs(10), erx.recv()).await;
        let Ok(Some(endpoint)) = endpoint else {
            op.end = sh.rec.now();
            op.outcome = Outcome::Error {
                status: 200,
                detail: "no endpoint event within 10 s".into(),
            };
            sh.rec.op(op);
            reader.abort();
            continue;
        };
        let stream_index = sh.rec.op(op.clone());
        let url = format!("{base}{endpoint}");
        let session = endpoint
            .split("sessionId=")
            .nth(1)
            .map(|s| session_hash(s.split('&').next().unwrap_or(s)));
        // initialize, initialized, then stamps until the stream ends or the run does.
        let mut step = 0u64;
        let mut alive = true;
        while alive && !sh.stopped() {
            step += 1;
            let rpc = next_id();
            let (msg, stamp) = match step {
                1 => (
                    json!({"jsonrpc": "2.0", "id": rpc, "method": "initialize", "params": {
                        "protocolVersion": "2024-11-05", "capabilities": {},
                        "clientInfo": {"name": name, "version": "1"}}}),
                    None,
                ),
                2 => (
                    json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                    None,
                ),
                _ => {
                    n += 1;
                    let key = format!("{name}-{n}");
                    (
                        json!({"jsonrpc": "2.0", "id": rpc, "method": "tools/call",
                            "params": {"name": "stamp", "arguments": {"key": key}}}),
                        Some(key),
                    )
                }
            };
            let expects_answer = step != 2;
            let mut op = Op::new(&name, Kind::LegacyPost, route.clone(), sh.rec.now());
            op.rpc_id = expects_answer.then_some(rpc);
            op.session = session.clone();
            op.stamp = stamp;
            let got = exchange(
                sh.http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(msg.to_string()),
                None,
            )
            .await;
            finish(&mut op, &got, sh.rec.now());
            if op.outcome == Outcome::Ok && expects_answer {
                // The answer comes on the stream.
                let deadline = tokio::time::Instant::now() + CLIENT_DEADLINE;
                loop {
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Err(_) => {
                            op.outcome = Outcome::Hung;
                            break;
                        }
                        Ok(None) | Ok(Some(Err(_))) => {
                            op.outcome =
                                Outcome::Transport("the stream ended before the answer".into());
                            alive = false;
                            break;
                        }
                        Ok(Some(Ok(v))) if v["id"] == json!(rpc) => {
                            op.outcome = classify_answer(Some(&v));
                            op.acked = op.stamp.is_some() && op.outcome == Outcome::Ok;
                            op.results = 1;
                            break;
                        }
                        Ok(Some(Ok(_))) => {}
                    }
                }
                op.end = sh.rec.now();
            }
            let outcome = op.outcome.clone();
            sh.rec.op(op);
            match outcome {
                Outcome::Ok => {}
                Outcome::Refused { .. } => {
                    backoff(&got).await;
                    // A refused `initialize` or `initialized` is sent again, as a client
                    // would: without it the session never starts. A refused `stamp` is not
                    // (its key may have taken effect: the next call gets a key of its own).
                    if step <= 2 {
                        step -= 1;
                    }
                }
                _ => alive = false,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        reader.abort();
        let end = sh.rec.now();
        sh.rec.update(stream_index, |o| {
            o.end = end;
            o.outcome = Outcome::Ok;
        });
    }
}

/// Another principal, with a valid token of its own ([`INTRUDER_TOKEN`]), trying what the
/// clients were given: `tools/list` in their sessions, `tasks/get` and `tasks/cancel` on
/// their tasks, through the balancer (any instance, relayed or not). Each must be answered
/// as a stranger to the id is: `404` for a session, "Unknown task" for a task (or refused:
/// `503`, `429`). One served as its principal would be is recorded as `reached`.
pub async fn intruder(sh: Arc<Shared>, name: String, route: Route, base: String) {
    let Some(http) = sh.intruder.clone() else {
        return;
    };
    let meta = modern_meta_with(&name, json!({"extensions": {TASKS_EXTENSION: {}}}));
    let mut n = 0usize;
    while !sh.stopped() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        n += 1;
        let (session, task) = {
            let loot = sh.loot.lock();
            let pick = |l: &std::collections::VecDeque<String>| {
                (!l.is_empty()).then(|| l[n % l.len()].clone())
            };
            (pick(&loot.sessions), pick(&loot.tasks))
        };
        let rpc = next_id();
        let mut op = Op::new(&name, Kind::Intrude, route.clone(), sh.rec.now());
        op.rpc_id = Some(rpc);
        let (req, what) = match (n % 3, session, task) {
            (0, Some(sid), _) | (_, Some(sid), None) => {
                let body = json!({"jsonrpc": "2.0", "id": rpc, "method": "tools/list"});
                (
                    session_post(&http, &base, Some(&sid), &body),
                    "tools/list in another principal's session",
                )
            }
            (k, _, Some(task_id)) => {
                let method = if k == 1 { "tasks/get" } else { "tasks/cancel" };
                let body = json!({"jsonrpc": "2.0", "id": rpc, "method": method,
                    "params": {"taskId": task_id, "_meta": meta}});
                (
                    modern_post(&http, &base, method, Some(&task_id), &body),
                    if k == 1 {
                        "tasks/get of another principal's task"
                    } else {
                        "tasks/cancel of another principal's task"
                    },
                )
            }
            (_, None, None) => continue,
        };
        let got = exchange(req, Some(rpc)).await;
        finish(&mut op, &got, sh.rec.now());
        op.outcome = match (&op.outcome, any_answer_to(&got, rpc)) {
            // What a stranger to the id is told: the documented answer here.
            (Outcome::SessionGone, _) => Outcome::Ok,
            (_, Some(a)) if is_unknown_task(a) => Outcome::Ok,
            (Outcome::Ok, Some(a)) if a.get("result").is_some() => {
                op.reached = Some(what.to_string());
                Outcome::Ok
            }
            (other, _) => other.clone(),
        };
        sh.rec.op(op);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_are_parsed_across_chunks() {
        let mut p = Sse::default();
        assert!(
            p.push(b"id: 1-1\nretry: 3000\ndata: \n\n: keep\n\nid: 1-2\nevent: mess")
                .len()
                == 1
        );
        let got = p.push(b"age\ndata: {\"a\":1}\n\n");
        assert_eq!(
            got,
            vec![(Some("1-2".to_string()), "{\"a\":1}".to_string())]
        );
    }
}
