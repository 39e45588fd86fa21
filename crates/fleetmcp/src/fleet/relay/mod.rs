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
//! resumes with `Last-Event-ID` on an instance that takes the session over. A streamed answer
//! to a request reaches the client only from its first event on (head and event together): one
//! that breaks before it is a `503` the client retries, since a client with no event id has
//! nothing to resume from.
//!
//! The hop carries the client's `Host`, signed (the connection's own `Host` is the holder's
//! advertised address, which an `allowed_hosts` list does not name); it follows no redirect.
//!
//! Relaying is bounded: at most `ha.relay_max_connections` relayed requests are in flight at
//! once (a relayed stream until it ends), and every socket the relay opens to a holder, in use
//! or idle in the pool (at most `ha.relay_max_idle_per_holder` per holder, each closed after
//! [`pool::IDLE_TIMEOUT`]), takes a place of the connection budget the listener's client
//! connections take theirs from (`http.max_connections`, fitted to the open-files limit), since
//! a relayed request holds two descriptors here. A request that gets no place within
//! [`PLACE_WAIT`] (for each of the two) is answered `503` with `Retry-After: 1`, naming the
//! bound, and counted as a limit rejection (`relay_connections`); so a flood of relayed streams
//! never runs the process out of descriptors, and the health reserve stays reachable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::beat::read_beat;
use super::error_text::describe;

mod answer;
mod connector;
mod pool;

use super::relay_auth::{RELAY_HOST_NAME, RELAYED_BY_NAME, RelayKeys, Subject, hop_by_hop};
use crate::limits::Connections;
use crate::redis_conn::RedisConn;
use crate::telemetry::{Limit, Meters};
use crate::transport::{Relay, RelayRequest, Relayed};
use answer::{Answer, Watch, first_event};
use connector::{CountedConnector, no_place};
use pool::{InUse, Pool};

/// How long connecting to the holder may take before it counts as not answering.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the holder may take to start answering (its response head) before it counts as
/// not answering: a paused or wedged holder gives a `503`, not a hang (the contract's ack
/// timeout). The answer's body, an SSE stream of any length, has no bound here.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a relayed request waits for a place under `ha.relay_max_connections`, and then, when
/// it needs a new socket, for a place under `http.max_connections`, before it is refused.
const PLACE_WAIT: Duration = Duration::from_secs(1);
/// Refusals for want of a place are logged at most this often (a flood would flood the log).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// What bounds the relay (see the module's documentation).
pub(super) struct Bounds {
    /// Relayed requests in flight at once (`ha.relay_max_connections`, or its default).
    pub in_flight: usize,
    /// Idle connections kept per holder (`ha.relay_max_idle_per_holder`).
    pub idle_per_holder: usize,
    /// The connection budget (`http.max_connections`) every socket takes a place of.
    pub connections: Connections,
    /// Where refusals are counted.
    pub meters: Meters,
}

pub(super) struct HttpRelay {
    redis: RedisConn,
    me: String,
    /// Signs every hop (and seals the client's credentials).
    keys: RelayKeys,
    /// Shared with every relayed answer's [`Watch`], which reads a heartbeat only when its
    /// holder goes silent.
    heartbeat_prefix: std::sync::Arc<str>,
    key_prefix: String,
    ttl_s: u64,
    /// The hop's HTTP/1.1 connections, kept per holder: no proxy, no redirect, no TLS.
    pool: std::sync::Arc<Pool>,
    /// Places for relayed requests in flight (`ha.relay_max_connections`).
    in_flight: Connections,
    /// The connection budget the client's sockets take their places from.
    connections: Connections,
    meters: Meters,
    /// When a refusal for want of a place was last logged, and how many were not since.
    refusals_logged: parking_lot::Mutex<Option<std::time::Instant>>,
    refusals_unlogged: AtomicU64,
    /// Holders' addresses read a moment ago, so a busy relay does not read a heartbeat per
    /// request (an instance keeps its address for its whole life); kept parsed and as the hop's
    /// `Host`, so nothing is parsed or copied per request.
    addresses: parking_lot::Mutex<std::collections::HashMap<String, (Address, std::time::Instant)>>,
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

/// A holder's advertised address, as the hop uses it.
#[derive(Clone)]
struct Address {
    /// Where its connections go (the pool's key).
    authority: Authority,
    /// The hop's `Host` (the same, as a header).
    host: HeaderValue,
}

impl Address {
    fn parse(advertised: &str) -> Result<Self, String> {
        let authority = Authority::try_from(advertised)
            .map_err(|e| format!("its address {advertised:?} makes no URI: {e}"))?;
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|e| format!("its address {advertised:?} is no Host: {e}"))?;
        Ok(Self { authority, host })
    }
}

/// Whether the connection was refused (somewhere in the error's chain).
fn refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
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

/// Which bound refused a relayed request.
#[derive(Clone, Copy)]
enum Bound {
    /// `ha.relay_max_connections`.
    InFlight,
    /// `http.max_connections`.
    Connections,
}

impl HttpRelay {
    #[allow(clippy::too_many_arguments)] // one call site, every argument distinct
    pub fn new(
        redis: RedisConn,
        me: &str,
        keys: RelayKeys,
        key_prefix: &str,
        heartbeat_ttl_ms: u64,
        closing: CancellationToken,
        silence: Silence,
        bounds: Bounds,
    ) -> Self {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        // hyper's HTTP/1.1 connection follows no redirect and knows no proxy: a hop goes to the
        // address a heartbeat advertises and nowhere else (a redirect, from whatever answers
        // there, would send the client's request, signed, elsewhere).
        let pool = Pool::new(
            CountedConnector {
                http,
                connections: bounds.connections.clone(),
            },
            bounds.idle_per_holder,
        );
        Self {
            redis,
            me: me.to_string(),
            keys,
            heartbeat_prefix: format!("{key_prefix}heartbeat:").into(),
            key_prefix: key_prefix.to_string(),
            ttl_s: heartbeat_ttl_ms.div_ceil(1000),
            pool,
            in_flight: Connections::new(bounds.in_flight),
            connections: bounds.connections,
            meters: bounds.meters,
            refusals_logged: parking_lot::Mutex::new(None),
            refusals_unlogged: AtomicU64::new(0),
            addresses: parking_lot::Mutex::new(std::collections::HashMap::new()),
            closing,
            silence,
        }
    }

    /// The answer to a relayed request refused for want of a place under `bound`: `503` with
    /// `Retry-After: 1` (this instance is busy; the holder was not asked), counted as a limit
    /// rejection, logged at most every [`LOG_EVERY`].
    fn busy(&self, holder: &str, bound: Bound) -> Response {
        self.meters.limit_rejected(Limit::RelayConnections);
        let message = match bound {
            Bound::InFlight => format!(
                "This instance is relaying as many requests as it may at once (ha.relay_max_connections = {}); retry after 1s.",
                self.in_flight.max()
            ),
            Bound::Connections => format!(
                "This instance has no connection left to relay the request to the instance serving its session (http.max_connections = {}, client connections and relayed requests' sockets together); retry after 1s.",
                self.connections.max()
            ),
        };
        let now = std::time::Instant::now();
        let due = {
            let mut last = self.refusals_logged.lock();
            let due = last.is_none_or(|at| now.duration_since(at) >= LOG_EVERY);
            if due {
                *last = Some(now);
            }
            due
        };
        if due {
            tracing::warn!(
                owner_node_id = holder,
                relay_max_connections = self.in_flight.max(),
                max_connections = self.connections.max(),
                connections_in_use = self.connections.in_use(),
                since_last_log = self.refusals_unlogged.swap(0, Ordering::Relaxed),
                "[HA] Relay refused: {message}"
            );
        } else {
            self.refusals_unlogged.fetch_add(1, Ordering::Relaxed);
        }
        answer_503(message, 1)
    }

    /// What judges the holder's silence under a relayed answer (see [`Silence`]), keeping the
    /// request's `place` in flight until the answer ends or is dropped (the client went away).
    fn watch(&self, holder: &str, place: OwnedSemaphorePermit) -> Watch {
        Watch {
            redis: self.redis.clone(),
            heartbeat_prefix: self.heartbeat_prefix.clone(),
            holder: holder.to_string(),
            silence: self.silence,
            _place: place,
        }
    }

    /// Whether `holder` is certainly gone: its address refused the connection (no process
    /// listens there: a paused or partitioned one would accept or time out) and it holds no
    /// subscription on its channel (the kernel closed a dead process's connections).
    async fn gone(&self, holder: &str, refused: bool) -> bool {
        if !refused {
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
        answer_503(message, self.ttl_s)
    }
}

/// The relay's `503`: a JSON-RPC error (`-32000`, `id: null`) with `Retry-After: retry_s`.
fn answer_503(message: String, retry_s: u64) -> Response {
    super::refusal(StatusCode::SERVICE_UNAVAILABLE, &message, Some(retry_s))
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
        // Held until the answer ends (or, refused or handed back, until this returns).
        // A free place is taken at once; only a full bound waits (with its timer).
        let place = match self.in_flight.try_take() {
            Some(place) => Some(place),
            None => self.in_flight.take_within(PLACE_WAIT).await,
        };
        let Some(place) = place else {
            return Relayed::Answered(self.busy(holder, Bound::InFlight));
        };
        let address = match self.address_of(holder).await {
            Ok(address) => address,
            Err(NoAddress::Gone) => return Relayed::HolderGone(req),
            Err(NoAddress::Failed(why)) => return fail(&why),
        };
        let hop = match self.hop(holder, &address, &req) {
            Ok(hop) => hop,
            Err(why) => return fail(&why),
        };
        let sent = self.pool.send(&address.authority, hop);
        let (answer, conn) = match tokio::time::timeout(ANSWER_TIMEOUT, sent).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) if no_place(&*e) => {
                return Relayed::Answered(self.busy(holder, Bound::Connections));
            }
            Ok(Err(e)) if self.gone(holder, refused(&*e)).await => {
                self.addresses.lock().remove(holder);
                tracing::info!(
                    previous_node_id = holder,
                    "[HA] Session owner is gone — the session will be taken over"
                );
                return Relayed::HolderGone(req);
            }
            Ok(Err(e)) => return fail(&describe(&*e)),
            Err(_) => {
                return fail(&format!("no answer within {} s", ANSWER_TIMEOUT.as_secs()));
            }
        };
        if answer.status() == StatusCode::SERVICE_UNAVAILABLE
            && answer.headers().contains_key(&MOVED)
        {
            // Not served there (see above): look again here; the caller takes the session
            // over only while its record still names `holder`, else finds its new holder.
            self.addresses.lock().remove(holder);
            return Relayed::HolderGone(req);
        }
        let get = req.method == http::Method::GET;
        match self.relayed_answer(holder, answer, conn, get, place).await {
            Ok(res) => Relayed::Answered(res),
            Err(refused) => Relayed::Failed(refused),
        }
    }
}

/// Why a holder's address is not known.
enum NoAddress {
    /// Its heartbeat went and it holds no subscription: gone, its session is taken over here.
    Gone,
    /// Anything else: the request is answered `503`, this said in the log.
    Failed(String),
}

/// The steps of [`HttpRelay::forward`]: where the holder is, the hop's request, and the answer
/// as the client gets it.
impl HttpRelay {
    /// The address `holder` advertises (`host:port`): read a moment ago, else from its heartbeat,
    /// else (Redis does not answer) the one read last.
    async fn address_of(&self, holder: &str) -> Result<Address, NoAddress> {
        let known = self
            .addresses
            .lock()
            .get(holder)
            .filter(|(_, at)| at.elapsed() < ADDRESS_TTL)
            .map(|(a, _)| a.clone());
        if let Some(address) = known {
            return Ok(address);
        }
        let key = format!("{}{holder}", self.heartbeat_prefix);
        let address = match read_beat(&self.redis, &key).await {
            Ok(Some(beat)) => match beat.address {
                Some(a) => Address::parse(&a).map_err(NoAddress::Failed)?,
                None => {
                    return Err(NoAddress::Failed(
                        "its heartbeat advertises no address".to_string(),
                    ));
                }
            },
            // Its heartbeat went between the directory's look and ours: gone if it holds no
            // subscription (take it over), else alive but silent (the directory's grace period
            // decides, on a later request).
            Ok(None) => {
                return match super::heartbeat::subscribers(
                    &self.redis,
                    &super::heartbeat::channel_of(&self.key_prefix, holder),
                )
                .await
                {
                    Some(0) => Err(NoAddress::Gone),
                    _ => Err(NoAddress::Failed(
                        "its heartbeat expired while it still runs".to_string(),
                    )),
                };
            }
            // Redis does not answer: an instance keeps its address for its whole life, so the
            // one read before still holds (the holder checks the session itself).
            Err(e) => match self.addresses.lock().get(holder) {
                Some((stale, _)) => stale.clone(),
                None => return Err(NoAddress::Failed(e.to_string())),
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
        Ok(address)
    }

    /// The request as it goes to `holder` at `address`: the client's, less its hop-by-hop
    /// headers, with the client's `Host` carried signed, signed for the holder.
    fn hop(
        &self,
        holder: &str,
        address: &Address,
        req: &RelayRequest,
    ) -> Result<http::Request<Full<Bytes>>, String> {
        // The path and query go on as the client sent them (this instance parsed them already,
        // and sending them unchanged is what the signature says): the holder checks the path
        // it receives. Origin-form, as HTTP/1.1 sends it to a server, with the holder's address
        // as the connection's `Host`.
        let path = req
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/mcp"));
        let uri = http::Uri::from(path);
        let sent_path = uri.path_and_query().map_or("/", PathAndQuery::as_str);
        let mut headers = http::HeaderMap::with_capacity(req.headers.len() + 6);
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
            path: sent_path,
            body: &req.body,
        };
        self.keys
            .sign(&subject, &mut headers, crate::clock::unix_ms())?;
        // Not signed (the holder puts the client's back in its place).
        headers.insert(header::HOST, address.host.clone());
        let mut hop = http::Request::new(Full::new(req.body.clone()));
        *hop.method_mut() = req.method.clone();
        *hop.uri_mut() = uri;
        *hop.headers_mut() = headers;
        Ok(hop)
    }

    /// The holder's answer as the client gets it: less its hop-by-hop headers, its body watched
    /// (see [`Answer`]) and keeping the request's `place` in flight.
    ///
    /// A streamed answer to a request (not a session's GET stream) is passed on only once its
    /// first event came (see [`first_event`]): a client that received no event has no
    /// `Last-Event-ID` to resume from, so a link that breaks, or a holder that stops sending,
    /// before then is answered `503` with `Retry-After` (F14), which the client retries, rather
    /// than a `200` stream that ends with nothing. Its head reaches the client with that event.
    async fn relayed_answer(
        &self,
        holder: &str,
        answer: http::Response<Incoming>,
        conn: InUse,
        get: bool,
        place: OwnedSemaphorePermit,
    ) -> Result<Response, Response> {
        let status = answer.status();
        let (answer, body) = answer.into_parts();
        let mut headers = http::HeaderMap::with_capacity(answer.headers.len());
        for (name, value) in &answer.headers {
            if !hop_by_hop(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        let sse = answer
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let watch = self.watch(holder, place);
        let mut upstream = body;
        let first = if sse && !get {
            match first_event(&mut upstream, &watch).await {
                Ok(first) => Some(first),
                Err(why) => return Err(self.unavailable(holder, &why)),
            }
        } else {
            None
        };
        // A relayed GET is a session's stream, open as long as its client wants: like the
        // streams this instance serves itself, it ends when a graceful stop closes this
        // instance, and the client resumes elsewhere with `Last-Event-ID`. Any other relayed
        // answer is a request in flight, which the stop lets finish.
        let closing = get.then(|| Box::pin(self.closing.clone().cancelled_owned()));
        let body = Answer::new(first, upstream, conn, watch, sse, closing);
        let mut res = Response::new(Body::new(body));
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        Ok(res)
    }
}
