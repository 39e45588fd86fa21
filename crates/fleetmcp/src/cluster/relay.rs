//! The relay in distributed mode: a request whose session another live instance holds is sent
//! to that instance over HTTP, at the address its heartbeat advertises, as it was received, and
//! the holder's answer (JSON or an SSE stream of any length) is streamed back as it comes, with
//! the holder's `X-FrontMCP-Machine-Id`.
//!
//! Redis is only the directory (who holds a session, where each instance listens); the request
//! and its answer take one direct hop. One hop at most: a relayed request carries
//! [`RELAYED_BY`](super::relay_auth::RELAYED_BY), and an instance never relays such a request
//! again. Every hop is signed for its holder, the client's credentials sealed
//! ([`super::relay_auth`]); the holder checks it before anything runs ([`super::relay_guard`]).
//! A holder that crashed (its address refuses connections and it holds no subscription on its
//! channel) is taken over at once, long before its heartbeat expires; one that does not answer
//! otherwise (paused, partitioned, wedged) gets the contract's `503` with `Retry-After` set to
//! the heartbeat lifetime, never a 500 and never a hang. A client that goes away drops the hop,
//! which ends the request on the holder. A holder that stops sending in the middle of an answer
//! (paused, partitioned) has the relayed stream ended within the heartbeat lifetime: every stream
//! the holder serves carries a keep-alive, so silence longer than that lifetime means it no
//! longer sends (or, when the keep-alive is the longer, its heartbeat is read), and the client
//! resumes with `Last-Event-ID` on an instance that takes the session over.
//!
//! The hop carries the client's `Host`, signed (the connection's own `Host` is the holder's
//! advertised address, which an `allowed_hosts` list does not name); it follows no redirect.

use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;
use http::{HeaderValue, StatusCode, header};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::heartbeat::read_beat;
use super::relay_auth::{RELAY_HOST_NAME, RELAYED_BY_NAME, RelayKeys, Subject, hop_by_hop};
use crate::redis_conn::RedisConn;
use crate::transport::{Relay, RelayRequest, Relayed};

/// How long connecting to the holder may take before it counts as not answering.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the holder may take to start answering (its response head) before it counts as
/// not answering: a paused or wedged holder gives a `503`, not a hang (the contract's ack
/// timeout). The answer's body, an SSE stream of any length, has no bound here.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct HttpRelay {
    redis: RedisConn,
    me: String,
    /// Signs every hop (and seals the client's credentials).
    keys: RelayKeys,
    heartbeat_prefix: String,
    key_prefix: String,
    ttl_s: u64,
    client: reqwest::Client,
    /// Holders' addresses read a moment ago, so a busy relay does not read a heartbeat per
    /// request (an instance keeps its address for its whole life).
    addresses: parking_lot::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
    /// The server's `closing` phase: relayed streams end with it.
    closing: CancellationToken,
    /// How a relayed answer's silence is judged (see [`Silence`]).
    silence: Silence,
}

/// When a relayed answer that stopped sending is ended: after `limit` (the heartbeat lifetime)
/// without a byte, at once if the holder's keep-alive (sent every `keepalive` on every stream) is
/// shorter, since it missed one; otherwise when its heartbeat is gone, read then and every
/// `recheck` (the heartbeat interval) after.
#[derive(Clone, Copy)]
pub(super) struct Silence {
    pub limit: Duration,
    pub keepalive: Duration,
    pub recheck: Duration,
}

/// Marks a holder's refusal of a request relayed to it for a session it no longer holds: the
/// relaying instance looks the session up again instead of passing the `503` on.
static MOVED: http::HeaderName = http::HeaderName::from_static("x-fleetmcp-relay-moved");

/// How long a holder's address is remembered.
const ADDRESS_TTL: Duration = Duration::from_secs(1);

/// Whether the connection was refused (somewhere in the error's chain).
fn refused(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = e.source();
    }
    false
}

impl HttpRelay {
    pub fn new(
        redis: RedisConn,
        me: &str,
        keys: RelayKeys,
        key_prefix: &str,
        heartbeat_ttl_ms: u64,
        closing: CancellationToken,
        silence: Silence,
    ) -> Option<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .no_proxy()
            // A hop goes to the address a heartbeat advertises and nowhere else: a redirect (from
            // whatever answers there) would send the client's request, signed, elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .inspect_err(
                |e| tracing::error!(error = %e, "[HA] the relay's HTTP client could not be built"),
            )
            .ok()?;
        Some(Self {
            redis,
            me: me.to_string(),
            keys,
            heartbeat_prefix: format!("{key_prefix}heartbeat:"),
            key_prefix: key_prefix.to_string(),
            ttl_s: heartbeat_ttl_ms.div_ceil(1000),
            client,
            addresses: parking_lot::Mutex::new(std::collections::HashMap::new()),
            closing,
            silence,
        })
    }

    /// The answer's body, ended when the holder stops sending (see [`Silence`]) and, for a GET,
    /// when this instance closes.
    fn watched(&self, holder: &str, answer: reqwest::Response, get: bool) -> Body {
        let watch = Watch {
            redis: self.redis.clone(),
            key: format!("{}{holder}", self.heartbeat_prefix),
            holder: holder.to_string(),
            silence: self.silence,
        };
        let stream = futures_util::stream::unfold(
            (answer.bytes_stream().boxed(), watch),
            |(mut upstream, watch)| async move {
                let mut wait = watch.silence.limit;
                loop {
                    match tokio::time::timeout(wait, upstream.next()).await {
                        Ok(Some(chunk)) => return Some((chunk, (upstream, watch))),
                        Ok(None) => return None,
                        Err(_) if watch.holder_stalled().await => return None,
                        Err(_) => wait = watch.silence.recheck,
                    }
                }
            },
        );
        // A relayed GET is a session's stream, open as long as its client wants: like the
        // streams this instance serves itself, it ends when a graceful stop closes this
        // instance, and the client resumes elsewhere with `Last-Event-ID`. Any other relayed
        // answer is a request in flight, which the stop lets finish.
        if get {
            Body::from_stream(stream.take_until(self.closing.clone().cancelled_owned()))
        } else {
            Body::from_stream(stream)
        }
    }

    /// Whether `holder` is certainly gone: its address refused the connection (no process
    /// listens there: a paused or partitioned one would accept or time out) and it holds no
    /// subscription on its channel (the kernel closed a dead process's connections).
    async fn gone(&self, holder: &str, error: &reqwest::Error) -> bool {
        if !refused(error) {
            return false;
        }
        super::heartbeat::subscribers(
            &self.redis,
            &super::heartbeat::channel_of(&self.key_prefix, holder),
        )
        .await
            == Some(0)
    }

    /// The contract's answer when the holder does not answer the relayed request.
    fn unavailable(&self, holder: &str, why: &str) -> Response {
        tracing::warn!(
            owner_node_id = holder,
            "[HA] Relay to session owner failed: {why}"
        );
        self.unavailable_response()
    }

    fn unavailable_response(&self) -> Response {
        let message = format!(
            "This MCP session is served by another instance of the server, which did not answer the relayed request. Retry after {}s; if that instance has stopped, the session is taken over by another instance once its heartbeat expires.",
            self.ttl_s
        );
        let body =
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}});
        let mut res = Response::new(Body::from(body.to_string()));
        *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let h = res.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(v) = HeaderValue::from_str(&self.ttl_s.to_string()) {
            h.insert(header::RETRY_AFTER, v);
        }
        res
    }
}

#[async_trait]
impl Relay for HttpRelay {
    async fn forward(&self, holder: &str, req: RelayRequest) -> Relayed {
        let fail = |why: &str| Relayed::Failed(self.unavailable(holder, why));
        if req.headers.contains_key(&RELAYED_BY_NAME) {
            // This instance was the holder when the relaying one looked, and is no longer (it
            // found the session taken over: during a rolling restart, often by the relaying
            // instance itself). A request is relayed once at most, so it goes back, unserved,
            // marked, and the relaying instance looks the session up again.
            tracing::info!(
                owner_node_id = holder,
                "[HA] A relayed request's session moved meanwhile; the relaying instance looks again"
            );
            let mut res = self.unavailable_response();
            res.headers_mut()
                .insert(MOVED.clone(), HeaderValue::from_static("1"));
            return Relayed::Answered(res);
        }
        let known = self
            .addresses
            .lock()
            .get(holder)
            .filter(|(_, at)| at.elapsed() < ADDRESS_TTL)
            .map(|(a, _)| a.clone());
        let address = match known {
            Some(a) => a,
            None => {
                let key = format!("{}{holder}", self.heartbeat_prefix);
                let address = match read_beat(&self.redis, &key).await {
                    Ok(Some(beat)) => match beat.address {
                        Some(a) => a,
                        None => return fail("its heartbeat advertises no address"),
                    },
                    // Its heartbeat went between the directory's look and ours: gone if it holds
                    // no subscription (take it over), else alive but silent (the directory's
                    // grace period decides, on a later request).
                    Ok(None) => {
                        return match super::heartbeat::subscribers(
                            &self.redis,
                            &super::heartbeat::channel_of(&self.key_prefix, holder),
                        )
                        .await
                        {
                            Some(0) => Relayed::HolderGone(req),
                            _ => fail("its heartbeat expired while it still runs"),
                        };
                    }
                    // Redis does not answer: an instance keeps its address for its whole life, so
                    // the one read before still holds (the holder checks the session itself).
                    Err(e) => match self.addresses.lock().get(holder) {
                        Some((stale, _)) => stale.clone(),
                        None => return fail(&e.to_string()),
                    },
                };
                let mut map = self.addresses.lock();
                if map.len() > 4096 {
                    map.clear();
                }
                map.insert(
                    holder.to_string(),
                    (address.clone(), std::time::Instant::now()),
                );
                address
            }
        };
        let path = req.uri.path_and_query().map_or("/mcp", |p| p.as_str());
        let url = match reqwest::Url::parse(&format!("http://{address}{path}")) {
            Ok(u) => u,
            Err(e) => return fail(&format!("its address {address:?} makes no URL: {e}")),
        };
        // Signed as it goes on the wire: parsing the URL may normalise the path (percent-
        // encoding, dot segments), and the holder checks the path it receives.
        let sent_path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        let mut headers = http::HeaderMap::with_capacity(req.headers.len() + 2);
        for (name, value) in &req.headers {
            if !hop_by_hop(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        // The client's `Host` (checked here already) goes signed, for the holder's own check:
        // the connection's `Host` names the holder's advertised address. A value the client
        // sent under that name is not its `Host`.
        headers.remove(&RELAY_HOST_NAME);
        for host in req.headers.get_all(header::HOST) {
            headers.append(RELAY_HOST_NAME.clone(), host.clone());
        }
        let subject = Subject {
            source: self.me.as_bytes(),
            target: holder.as_bytes(),
            method: &req.method,
            path: &sent_path,
            body: &req.body,
        };
        if let Err(why) = self
            .keys
            .sign(&subject, &mut headers, crate::clock::unix_ms())
        {
            return fail(why);
        }
        let sent = self
            .client
            .request(req.method.clone(), url)
            .headers(headers)
            .body(req.body.clone())
            .send();
        let answer = match tokio::time::timeout(ANSWER_TIMEOUT, sent).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) if self.gone(holder, &e).await => {
                self.addresses.lock().remove(holder);
                tracing::info!(
                    previous_node_id = holder,
                    "[HA] Session owner is gone — the session will be taken over"
                );
                return Relayed::HolderGone(req);
            }
            Ok(Err(e)) => return fail(&e.to_string()),
            Err(_) => {
                return fail(&format!("no answer within {} s", ANSWER_TIMEOUT.as_secs()));
            }
        };
        let status = answer.status();
        if status == StatusCode::SERVICE_UNAVAILABLE && answer.headers().contains_key(&MOVED) {
            // Not served there (see above): look again here; the caller takes the session
            // over only while its record still names `holder`, else finds its new holder.
            self.addresses.lock().remove(holder);
            return Relayed::HolderGone(req);
        }
        let mut headers = http::HeaderMap::with_capacity(answer.headers().len());
        for (name, value) in answer.headers() {
            if !hop_by_hop(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        let body = self.watched(holder, answer, req.method == http::Method::GET);
        let mut res = Response::new(body);
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        Relayed::Answered(res)
    }
}

/// What a relayed answer's body needs to judge its holder's silence.
struct Watch {
    redis: RedisConn,
    /// The holder's heartbeat key.
    key: String,
    holder: String,
    silence: Silence,
}

impl Watch {
    /// Whether the holder, silent for the limit (or a recheck since), no longer sends: it missed
    /// a keep-alive, or its heartbeat is gone. A heartbeat that cannot be read (Redis does not
    /// answer) proves nothing, and the stream goes on.
    async fn holder_stalled(&self) -> bool {
        let stalled = if self.silence.keepalive < self.silence.limit {
            true
        } else {
            matches!(read_beat(&self.redis, &self.key).await, Ok(None))
        };
        if stalled {
            tracing::warn!(
                owner_node_id = %self.holder,
                "[HA] Relay to session owner failed: it sent nothing for {} ms; the relayed stream ends, and the client resumes it",
                self.silence.limit.as_millis()
            );
        }
        stalled
    }
}
