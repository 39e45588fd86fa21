//! The upstream as a Streamable HTTP MCP server (`FLEETMCP_UPSTREAM_URL`): one upstream
//! session per client session, opened by the client's own `initialize` and ended (`DELETE`)
//! when the client session leaves this instance. Each message of the link is one POST; an
//! answer in JSON or as an SSE stream comes back on the link, and so does the upstream
//! session's GET stream (what it sends on no request's behalf).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fleetmcp::{MessageReceiver, MessageSender, Upstream, UpstreamLink};
use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::http_client::{self, HttpClient};

// Messages queued each way per upstream session (`QUEUE`), and at most
// `gateway.max_line_bytes` bytes of them, as for a process.
use crate::child::QUEUE;
/// Requests of one session POSTed at once (each its own task, as an answer may take long):
/// past it, the next waits, and so does the session's queue behind it. A request the client
/// cancelled runs until the upstream ends it; without this bound a client that sends and
/// cancels in a loop would leave a task and a connection behind per request.
const MAX_REQUESTS: usize = 100;
/// How long the upstream has to send an answer's head (an SSE answer's body may take longer).
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Resuming a request's stream the upstream ended before its answer: the delay when it named
/// none (`retry`), the longest it may name, and how many resumptions in a row may fail or
/// bring no event before the request is answered with an error.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(10);
const MAX_FAILED_RESUMES: u32 = 10;
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// Opens upstream sessions on one Streamable HTTP MCP server. Cheap to clone.
#[derive(Clone)]
pub struct HttpUpstream {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    http: HttpClient,
    /// The longest answer or SSE event read from the server (`gateway.max_line_bytes`): a
    /// longer one is not held whole.
    max_message: usize,
    /// Whether the server serves: `Ok` once the probe's `initialize` was answered; why not
    /// otherwise (a failed attempt, or not probed yet).
    health: parking_lot::Mutex<Result<(), String>>,
}

impl HttpUpstream {
    /// `Err`: the CA file (`ca_file`, for an https:// URL) cannot be used.
    /// `max_message`: the longest answer or SSE event read whole.
    pub fn new(
        url: String,
        ca_file: Option<&std::path::Path>,
        max_message: usize,
    ) -> Result<Self, String> {
        let http = HttpClient::new(ca_file)?;
        Ok(Self {
            inner: Arc::new(Inner {
                url,
                http,
                max_message,
                health: parking_lot::Mutex::new(Err(crate::probe::NOT_YET.to_string())),
            }),
        })
    }

    pub fn url(&self) -> &str {
        &self.inner.url
    }

    pub fn set_health(&self, health: Result<(), String>) {
        *self.inner.health.lock() = health;
    }
}

#[async_trait]
impl Upstream for HttpUpstream {
    async fn connect(&self, session: &str, _key: &str) -> Result<UpstreamLink, String> {
        let max = self.inner.max_message;
        let (to_upstream, to_rx) = UpstreamLink::channel(QUEUE, max);
        let (from_tx, from_upstream) = UpstreamLink::channel(QUEUE, max);
        let session = Arc::new(UpSession {
            inner: self.inner.clone(),
            log: session.into(),
            id: OnceLock::new(),
            version: OnceLock::new(),
            from: from_tx,
            gone: CancellationToken::new(),
            requests: Arc::new(Semaphore::new(MAX_REQUESTS)),
        });
        tokio::spawn(session.run(to_rx));
        Ok(UpstreamLink {
            to_upstream,
            from_upstream,
        })
    }

    fn ready(&self) -> Result<(), String> {
        self.inner.health.lock().clone()
    }
}

/// One upstream session.
struct UpSession {
    inner: Arc<Inner>,
    log: Arc<str>,
    /// Its `Mcp-Session-Id`, once `initialize` answered with one.
    id: OnceLock<String>,
    /// The protocol version the upstream answered `initialize` with.
    version: OnceLock<String>,
    /// The link's receiving end: closed (dropped with the last sender) when the session ends.
    from: MessageSender,
    /// Fires when the upstream session ends (the link dropped, or the upstream forgot it).
    gone: CancellationToken,
    /// One permit per request POSTed and not yet answered ([`MAX_REQUESTS`]).
    requests: Arc<Semaphore>,
}

/// What the link's messages are, read without the rest of them.
#[derive(Deserialize)]
struct Envelope {
    id: Option<Box<RawValue>>,
    method: Option<String>,
}

enum Posted {
    Ok,
    /// The upstream no longer knows the session (`404`): the link ends, and the client
    /// session's next request opens a new one.
    SessionGone,
}

impl UpSession {
    async fn run(self: Arc<Self>, mut messages: MessageReceiver) {
        loop {
            let message = tokio::select! {
                m = messages.recv() => m,
                _ = self.gone.cancelled() => None,
            };
            let Some(message) = message else { break };
            let envelope: Option<Envelope> = serde_json::from_slice(&message).ok();
            let (id, method) = envelope.map_or((None, None), |e| (e.id, e.method));
            match (id, method.as_deref()) {
                (Some(id), Some("initialize")) => {
                    if matches!(self.post(message, Some(id)).await, Posted::SessionGone) {
                        break;
                    }
                    if self.id.get().is_some() {
                        tokio::spawn(self.clone().listen());
                    }
                }
                // Requests run side by side (an answer may take long); notifications and
                // answers go in order, each once the one before it was taken.
                (Some(id), Some(_)) => {
                    let permit = tokio::select! {
                        p = self.requests.clone().acquire_owned() => p,
                        _ = self.gone.cancelled() => break,
                    };
                    let Ok(permit) = permit else { break };
                    let me = self.clone();
                    tokio::spawn(async move {
                        if matches!(me.post(message, Some(id)).await, Posted::SessionGone) {
                            me.gone.cancel();
                        }
                        drop(permit);
                    });
                }
                _ => {
                    if matches!(self.post(message, None).await, Posted::SessionGone) {
                        break;
                    }
                }
            }
        }
        self.gone.cancel();
        if let Some(id) = self.id.get() {
            let headers = [(SESSION_HEADER, id.as_str())];
            let delete =
                self.inner
                    .http
                    .send(Method::DELETE, &self.inner.url, &headers, Bytes::new());
            let _ = tokio::time::timeout(Duration::from_secs(5), delete).await;
        }
        tracing::debug!(session = %self.log, "[gateway] ended an upstream session");
    }

    /// POSTs one message; an answer (JSON, or each message of an SSE stream) goes on the link.
    /// `id`: the request's, which a failure answers with an error in the upstream's place.
    async fn post(&self, message: Bytes, id: Option<Box<RawValue>>) -> Posted {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        headers.extend(self.session_headers());
        let req = self
            .inner
            .http
            .send(Method::POST, &self.inner.url, &headers, message);
        // A request's answer may take as long as its tool does, and a server that answers in
        // JSON sends even its head only then: it is waited for while the session lasts (a
        // client that gives up cancels the call). Anything else has `HEAD_TIMEOUT`.
        let answered = match id {
            Some(_) => tokio::select! {
                res = req => Some(res),
                _ = self.gone.cancelled() => return Posted::Ok,
            },
            None => tokio::time::timeout(HEAD_TIMEOUT, req).await.ok(),
        };
        let res = match answered {
            Some(Ok(res)) => res,
            Some(Err(e)) => {
                return self
                    .failed(id, &format!("cannot reach {}: {e}", self.inner.url))
                    .await;
            }
            None => {
                return self
                    .failed(
                        id,
                        &format!("{} did not answer within {HEAD_TIMEOUT:?}", self.inner.url),
                    )
                    .await;
            }
        };
        if res.status() == StatusCode::NOT_FOUND && self.id.get().is_some() {
            tracing::warn!(session = %self.log, "[gateway] the upstream server no longer knows this session; the next request opens a new one");
            self.failed(id, "the upstream server ended this session")
                .await;
            return Posted::SessionGone;
        }
        if let Some(sid) = res
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            let _ = self.id.set(sid.to_string());
        }
        let sse = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let status = res.status();
        if sse {
            self.read_stream(res, id).await;
        } else if status == StatusCode::ACCEPTED {
        } else {
            match http_client::bytes(res, self.inner.max_message).await {
                Ok(body) if status.is_success() && !body.is_empty() => {
                    self.note_version(&body);
                    self.deliver(body).await;
                }
                Ok(body) if id.is_some() && !status.is_success() => {
                    // An HTTP error's body is usually a JSON-RPC error for this request.
                    if serde_json::from_slice::<Value>(&body)
                        .is_ok_and(|v| v.get("error").is_some())
                    {
                        self.deliver(body).await;
                    } else {
                        self.failed(id, &format!("the upstream server answered HTTP {status}"))
                            .await;
                    }
                }
                Ok(_) => {}
                Err(e) => return self.failed(id, &format!("reading its answer: {e}")).await,
            }
        }
        Posted::Ok
    }

    /// Passes an SSE answer's messages on. A request's stream that ends without its answer
    /// after an event id is resumed (SEP-1699 polling: the server ended the connection, not
    /// the stream): a GET with `Last-Event-ID` after the server's `retry` delay, as a client
    /// does. A request whose answer cannot come so is answered with an error (nothing else
    /// would answer it).
    async fn read_stream(
        &self,
        res: http::Response<hyper::body::Incoming>,
        id: Option<Box<RawValue>>,
    ) {
        let Some(id) = id else {
            let mut events = Events::new(res, self.inner.max_message);
            while let Some(data) = events.next().await {
                self.deliver(Bytes::from(data)).await;
            }
            return;
        };
        let mut events = Events::new(res, self.inner.max_message);
        let mut failed_resumes = 0;
        loop {
            while let Some(data) = events.next().await {
                failed_resumes = 0;
                let answer = serde_json::from_str::<Value>(&data).is_ok_and(|m| {
                    m.get("method").is_none()
                        && m.get("id").map(Value::to_string).as_deref() == Some(id.get())
                });
                if answer {
                    self.note_version(data.as_bytes());
                }
                self.deliver(Bytes::from(data)).await;
                if answer {
                    return;
                }
            }
            let Some(last) = events.last_id.clone() else {
                break;
            };
            if failed_resumes >= MAX_FAILED_RESUMES || self.gone.is_cancelled() {
                break;
            }
            let wait = events.retry.unwrap_or(DEFAULT_RETRY).min(MAX_RETRY);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.gone.cancelled() => break,
            }
            // Reset by the next event: resumptions that bring none count as failed (a
            // cancelled request's stream may never bring its answer).
            failed_resumes += 1;
            if let Some(res) = self.resume(&last).await {
                events = events.resumed(res);
            }
        }
        self.failed(
            Some(id),
            "the upstream server's stream ended before its answer",
        )
        .await;
    }

    /// A GET resuming a stream after event `last`; `None` unless it answered with a stream.
    async fn resume(&self, last: &str) -> Option<http::Response<hyper::body::Incoming>> {
        let mut headers = vec![("accept", "text/event-stream"), ("last-event-id", last)];
        headers.extend(self.session_headers());
        let req = self
            .inner
            .http
            .send(Method::GET, &self.inner.url, &headers, Bytes::new());
        match tokio::time::timeout(HEAD_TIMEOUT, req).await {
            Ok(Ok(res)) if res.status().is_success() => Some(res),
            Ok(Ok(res)) => {
                tracing::warn!(session = %self.log, status = %res.status(), "[gateway] the upstream server refused to resume a stream");
                None
            }
            _ => None,
        }
    }

    /// Follows the upstream session's GET stream until the session ends; reopened after a
    /// second when it breaks (a server without one answers `405`: nothing to follow).
    async fn listen(self: Arc<Self>) {
        while !self.gone.is_cancelled() {
            if self.id.get().is_none() {
                return;
            }
            let mut headers = vec![("accept", "text/event-stream")];
            headers.extend(self.session_headers());
            let req = self
                .inner
                .http
                .send(Method::GET, &self.inner.url, &headers, Bytes::new());
            let res = tokio::select! {
                r = req => r,
                _ = self.gone.cancelled() => return,
            };
            match res {
                Ok(res) if res.status().is_success() => {
                    let mut events = Events::new(res, self.inner.max_message);
                    loop {
                        tokio::select! {
                            data = events.next() => match data {
                                Some(data) => self.deliver(Bytes::from(data)).await,
                                None => break,
                            },
                            _ = self.gone.cancelled() => return,
                        }
                    }
                }
                Ok(res) if res.status() == StatusCode::METHOD_NOT_ALLOWED => return,
                Ok(res) if res.status() == StatusCode::NOT_FOUND => return,
                _ => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = self.gone.cancelled() => return,
            }
        }
    }

    /// The upstream session's id and protocol version, once known, as request headers.
    fn session_headers(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let id = self.id.get().map(|v| (SESSION_HEADER, v.as_str()));
        let version = self.version.get().map(|v| (VERSION_HEADER, v.as_str()));
        id.into_iter().chain(version)
    }

    /// Keeps the protocol version an `initialize` answer names (later requests send it in
    /// `MCP-Protocol-Version`).
    fn note_version(&self, answer: &[u8]) {
        if self.version.get().is_none()
            && let Ok(m) = serde_json::from_slice::<Value>(answer)
            && let Some(v) = m.pointer("/result/protocolVersion").and_then(Value::as_str)
        {
            let _ = self.version.set(v.to_string());
        }
    }

    async fn deliver(&self, message: Bytes) {
        let _ = self.from.send(message).await;
    }

    /// Answers request `id` (if any) with an error in the upstream's place.
    async fn failed(&self, id: Option<Box<RawValue>>, why: &str) -> Posted {
        tracing::warn!(session = %self.log, "[gateway] upstream request failed: {why}");
        if let Some(id) = id {
            let error =
                json!({"code": -32603, "message": format!("The upstream server failed: {why}")});
            let text = format!(r#"{{"jsonrpc":"2.0","id":{},"error":{error}}}"#, id.get());
            self.deliver(Bytes::from(text)).await;
        }
        Posted::Ok
    }
}

/// The `data` of each SSE event of a response (empty ones, such as priming events, skipped),
/// and what resuming the stream needs: the last event id, the server's `retry` delay.
struct Events {
    body: futures_util::stream::BoxStream<'static, Bytes>,
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no event's end: the next search starts there, so a
    /// long event is searched once, not once per chunk.
    searched: usize,
    /// The longest event held: a longer one ends the stream.
    max: usize,
    last_id: Option<String>,
    retry: Option<Duration>,
}

impl Events {
    fn new(res: http::Response<hyper::body::Incoming>, max: usize) -> Self {
        Self {
            body: http_client::stream(res),
            buf: Vec::new(),
            searched: 0,
            max,
            last_id: None,
            retry: None,
        }
    }

    /// The same stream, resumed on `res` (the last id and delay carried over).
    fn resumed(self, res: http::Response<hyper::body::Incoming>) -> Self {
        Self {
            last_id: self.last_id,
            retry: self.retry,
            ..Self::new(res, self.max)
        }
    }

    async fn next(&mut self) -> Option<String> {
        loop {
            // An end may straddle the last chunk's edge: the search backs up over it.
            while let Some(end) = find_event_end(&self.buf, self.searched.saturating_sub(3)) {
                if end.0 > self.max {
                    return self.too_long();
                }
                let event: Vec<u8> = self.buf.drain(..end.1).collect();
                self.searched = 0;
                if let Some(data) = self.read_event(&String::from_utf8_lossy(&event[..end.0])) {
                    return Some(data);
                }
            }
            self.searched = self.buf.len();
            if self.buf.len() > self.max {
                return self.too_long();
            }
            match futures_util::StreamExt::next(&mut self.body).await {
                Some(bytes) => self.buf.extend_from_slice(&bytes),
                None => return None,
            }
        }
    }
}

impl Events {
    /// An event longer than the limit ends the stream, unread.
    fn too_long(&mut self) -> Option<String> {
        tracing::warn!(
            limit = self.max,
            "[gateway] an upstream SSE event is longer than the limit; its stream is ended"
        );
        self.buf = Vec::new();
        None
    }

    /// One event's data (`None` when it has none), noting its id and `retry`.
    fn read_event(&mut self, text: &str) -> Option<String> {
        let field = |l: &'_ str, name: &str| -> Option<String> {
            let value = l.strip_prefix(name)?;
            Some(value.strip_prefix(' ').unwrap_or(value).to_string())
        };
        let mut data = Vec::new();
        for line in text.lines() {
            if let Some(d) = field(line, "data:") {
                data.push(d);
            } else if let Some(id) = field(line, "id:") {
                self.last_id = Some(id).filter(|id| !id.is_empty());
            } else if let Some(ms) = field(line, "retry:").and_then(|v| v.trim().parse().ok()) {
                self.retry = Some(Duration::from_millis(ms));
            }
        }
        (data.iter().any(|d| !d.is_empty())).then(|| data.join("\n"))
    }
}

/// Where the first event in `buf` ends, searching from `from` (before it, none does): (its
/// text's end, after its blank line).
fn find_event_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let rest = buf.get(from..)?;
    let lf = rest
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (from + i, from + i + 2));
    let crlf = rest
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (from + i, from + i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::find_event_end;

    #[test]
    fn events_end_at_a_blank_line_either_way() {
        assert_eq!(find_event_end(b"data: x\n\nrest", 0), Some((7, 9)));
        assert_eq!(find_event_end(b"data: x\r\n\r\n", 0), Some((7, 11)));
        assert_eq!(find_event_end(b"data: x\n", 0), None);
    }

    /// The search resumes where the last one stopped, backed up over an end that may
    /// straddle it, so a long event is searched once rather than once per chunk.
    #[test]
    fn a_search_resumes_where_it_stopped() {
        let buf = b"data: x\r\n\r\nrest";
        assert_eq!(find_event_end(buf, 7 - 3 + 2), Some((7, 11)));
        assert_eq!(find_event_end(buf, 12), None);
        assert_eq!(find_event_end(buf, 99), None);
    }
}
