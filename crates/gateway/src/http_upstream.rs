//! The upstream as a Streamable HTTP MCP server (`FLEETMCP_UPSTREAM_URL`): one upstream
//! session per client session, opened by the client's own `initialize` and ended (`DELETE`)
//! when the client session leaves this instance. Each message of the link is one POST; an
//! answer in JSON or as an SSE stream comes back on the link, and so does the upstream
//! session's GET stream (what it sends on no request's behalf).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fleetmcp::{Upstream, UpstreamLink};
use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::http_client::{self, HttpClient};

/// Messages queued each way per upstream session.
const QUEUE: usize = 64;
/// How long the upstream has to send an answer's head (an SSE answer's body may take longer).
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
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
    /// Why the server cannot serve, when the last attempt (or the startup probe) failed.
    health: parking_lot::Mutex<Result<(), String>>,
}

impl HttpUpstream {
    /// `Err`: the CA file (`ca_file`, for an https:// URL) cannot be used.
    pub fn new(url: String, ca_file: Option<&std::path::Path>) -> Result<Self, String> {
        let http = HttpClient::new(ca_file)?;
        Ok(Self {
            inner: Arc::new(Inner {
                url,
                http,
                health: parking_lot::Mutex::new(Ok(())),
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
    async fn connect(&self, session: &str) -> Result<UpstreamLink, String> {
        let (to_upstream, to_rx) = mpsc::channel(QUEUE);
        let (from_tx, from_upstream) = mpsc::channel(QUEUE);
        let session = Arc::new(UpSession {
            inner: self.inner.clone(),
            log: session.into(),
            id: OnceLock::new(),
            version: OnceLock::new(),
            from: from_tx,
            gone: CancellationToken::new(),
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
    from: mpsc::Sender<Bytes>,
    /// Fires when the upstream session ends (the link dropped, or the upstream forgot it).
    gone: CancellationToken,
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
    async fn run(self: Arc<Self>, mut messages: mpsc::Receiver<Bytes>) {
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
                    let me = self.clone();
                    tokio::spawn(async move {
                        if matches!(me.post(message, Some(id)).await, Posted::SessionGone) {
                            me.gone.cancel();
                        }
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
        let res = match tokio::time::timeout(HEAD_TIMEOUT, req).await {
            Ok(Ok(res)) => res,
            Ok(Err(e)) => {
                return self
                    .failed(id, &format!("cannot reach {}: {e}", self.inner.url))
                    .await;
            }
            Err(_) => {
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
            match http_client::bytes(res).await {
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

    /// Passes an SSE answer's messages on; a request whose stream ends without its answer is
    /// answered with an error (nothing else would answer it).
    async fn read_stream(
        &self,
        res: http::Response<hyper::body::Incoming>,
        id: Option<Box<RawValue>>,
    ) {
        let mut answered = id.is_none();
        let mut events = Events::new(res);
        while let Some(data) = events.next().await {
            if let Some(id) = &id
                && let Ok(m) = serde_json::from_str::<Value>(&data)
                && m.get("method").is_none()
                && m.get("id").map(Value::to_string).as_deref() == Some(id.get())
            {
                answered = true;
                self.note_version(data.as_bytes());
            }
            self.deliver(Bytes::from(data)).await;
        }
        if !answered {
            self.failed(id, "the upstream server's stream ended before its answer")
                .await;
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
                    let mut events = Events::new(res);
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

/// The `data` of each SSE event of a response (empty ones, such as priming events, skipped).
struct Events {
    body: futures_util::stream::BoxStream<'static, Bytes>,
    buf: Vec<u8>,
}

impl Events {
    fn new(res: http::Response<hyper::body::Incoming>) -> Self {
        Self {
            body: http_client::stream(res),
            buf: Vec::new(),
        }
    }

    async fn next(&mut self) -> Option<String> {
        loop {
            while let Some(end) = find_event_end(&self.buf) {
                let event: Vec<u8> = self.buf.drain(..end.1).collect();
                let text = String::from_utf8_lossy(&event[..end.0]);
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if !data.is_empty() && data.iter().any(|d| !d.is_empty()) {
                    return Some(data.join("\n"));
                }
            }
            match futures_util::StreamExt::next(&mut self.body).await {
                Some(bytes) => self.buf.extend_from_slice(&bytes),
                None => return None,
            }
        }
    }
}

/// Where the first event in `buf` ends: (its text's end, after its blank line).
fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
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
        assert_eq!(find_event_end(b"data: x\n\nrest"), Some((7, 9)));
        assert_eq!(find_event_end(b"data: x\r\n\r\n"), Some((7, 11)));
        assert_eq!(find_event_end(b"data: x\n"), None);
    }
}
