//! The hop's connections to holders, kept and reused: one HTTP/1.1 connection per relayed
//! request in flight, given back to its holder's idle list by the relayed answer's body when it
//! has read the holder's body to its end (see [`InUse`]), at most `ha.relay_max_idle_per_holder`
//! kept per holder, each closed after [`IDLE_TIMEOUT`] unused.
//!
//! Made of hyper's own `client::conn::http1` rather than hyper-util's pooled client, which
//! runs a task per response to give its connection back to the pool, plus a checkout and a
//! channel per request (about 29,000 instructions of a relayed call, callgrind: see
//! docs/BENCHMARKS.md); here a connection's one task is the connection itself, spawned when it
//! is opened. What that client did and the relay needs is kept: a request that a kept connection
//! did not send (the holder closed it meanwhile) goes again on another one, and every socket
//! holds its place of the connection budget while it is open (`connector.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::Authority;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;

use super::connector::{BoxError, CountedConnector};

/// How long a connection to a holder is kept idle for the next relayed request: well below the
/// holder's own idle bound (`http.idle_timeout_ms`, 65 s by default), so the relay seldom sends
/// on a connection the holder is closing.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection's sending half.
type Sender = http1::SendRequest<Full<Bytes>>;

/// The relay's connections to holders, by the holder's address.
pub(super) struct Pool {
    connector: CountedConnector,
    idle_per_holder: usize,
    /// Idle connections per holder, the most recently used last, with when each was given back.
    idle: parking_lot::Mutex<HashMap<Authority, Vec<(Sender, Instant)>>>,
}

/// The connection a relayed request went on, while its answer is read: given back to the pool
/// ([`InUse::give_back`]) only once the holder's body has been read to its end (the connection
/// is then free for the next request); dropped before that, it is closed, since what is left of
/// an answer would come first on it.
pub(super) struct InUse {
    pool: Arc<Pool>,
    holder: Authority,
    sender: Sender,
}

impl Pool {
    /// A pool that opens its connections with `connector` and keeps at most `idle_per_holder`
    /// idle per holder. In a runtime, one task closes the connections idle too long (it ends
    /// with the pool).
    pub fn new(connector: CountedConnector, idle_per_holder: usize) -> Arc<Self> {
        let pool = Arc::new(Self {
            connector,
            idle_per_holder,
            idle: parking_lot::Mutex::new(HashMap::new()),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(close_idle(Arc::downgrade(&pool)));
        }
        pool
    }

    /// Sends `req` (origin-form URI, `Host` set) to the holder at `holder`, on a connection kept
    /// for it or, when none is, a new one; the holder's answer, and the connection it came on.
    pub async fn send(
        self: &Arc<Self>,
        holder: &Authority,
        mut req: http::Request<Full<Bytes>>,
    ) -> Result<(http::Response<Incoming>, InUse), BoxError> {
        while let Some(mut sender) = self.take_idle(holder) {
            // Ready once it finished reading the last answer; an error: it closed meanwhile.
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(res) => return Ok((res, self.in_use(holder, sender))),
                Err(mut e) => match e.take_message() {
                    // Not sent (the holder closed the connection as it was taken): it goes on
                    // another one, as nothing of it reached the holder.
                    Some(unsent) => req = unsent,
                    None => return Err(e.into_error().into()),
                },
            }
        }
        let mut sender = self.open(holder).await?;
        let res = sender.send_request(req).await?;
        Ok((res, self.in_use(holder, sender)))
    }

    fn in_use(self: &Arc<Self>, holder: &Authority, sender: Sender) -> InUse {
        InUse {
            pool: self.clone(),
            holder: holder.clone(),
            sender,
        }
    }

    /// The most recently used connection kept for `holder`, if one is still open and not idle
    /// too long.
    fn take_idle(&self, holder: &Authority) -> Option<Sender> {
        let mut idle = self.idle.lock();
        let list = idle.get_mut(holder)?;
        while let Some((sender, since)) = list.pop() {
            if !sender.is_closed() && since.elapsed() < IDLE_TIMEOUT {
                return Some(sender);
            }
        }
        None
    }

    /// A new connection to `holder`: its socket (holding a place of the connection budget),
    /// the HTTP/1.1 handshake, and its task, which runs it until it closes.
    async fn open(&self, holder: &Authority) -> Result<Sender, BoxError> {
        let io = self.connector.connect(holder).await?;
        let (sender, connection) = http1::handshake(io).await?;
        tokio::spawn(async move {
            // An error here is the link's, and the request on it, if any, gets it too.
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a relay connection ended");
            }
        });
        Ok(sender)
    }
}

impl InUse {
    /// Gives the connection back for the next request to its holder, once its answer's body was
    /// read to the end (kept unless the holder's idle list is full or it closed).
    pub fn give_back(self) {
        let Self {
            pool,
            holder,
            sender,
        } = self;
        if sender.is_closed() || pool.idle_per_holder == 0 {
            return;
        }
        let mut idle = pool.idle.lock();
        let list = idle.entry(holder).or_default();
        if list.len() < pool.idle_per_holder {
            list.push((sender, Instant::now()));
        }
    }
}

/// Closes the connections kept idle longer than [`IDLE_TIMEOUT`] (dropping a sender ends its
/// connection, which gives its place back), until the pool is gone.
async fn close_idle(pool: Weak<Pool>) {
    let mut every = tokio::time::interval(IDLE_TIMEOUT / 2);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let closed: Vec<Sender> = {
            let mut idle = pool.idle.lock();
            let mut closed = Vec::new();
            idle.retain(|_, list| {
                let (keep, old): (Vec<_>, Vec<_>) = list
                    .drain(..)
                    .partition(|(s, since)| !s.is_closed() && since.elapsed() < IDLE_TIMEOUT);
                *list = keep;
                closed.extend(old.into_iter().map(|(s, _)| s));
                !list.is_empty()
            });
            closed
        };
        // Dropped outside the lock.
        drop(closed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioIo;

    use super::super::answer::{Answer, Watch};
    use super::super::{Silence, connector::CountedConnector};
    use super::*;
    use crate::limits::Connections;
    use crate::redis_config::RedisConfig;
    use crate::redis_conn::RedisConn;

    /// A holder on loopback answering every request with `body` (its length known), counting
    /// the connections it accepted; `keep_alive: false` closes each after one answer.
    async fn holder(keep_alive: bool, body: &'static [u8]) -> (Authority, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = Authority::try_from(listener.local_addr().unwrap().to_string()).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let answer = hyper::service::service_fn(move |_req| async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from_static(body),
                        )))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(keep_alive)
                        .serve_connection(TokioIo::new(socket), answer)
                        .await;
                });
            }
        });
        (address, accepted)
    }

    fn pool() -> Arc<Pool> {
        Pool::new(
            CountedConnector {
                http: HttpConnector::new(),
                connections: Connections::new(16),
            },
            4,
        )
    }

    fn request(holder: &Authority) -> http::Request<Full<Bytes>> {
        let mut req = http::Request::new(Full::new(Bytes::from_static(b"{}")));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = http::Uri::from_static("/mcp");
        req.headers_mut().insert(
            http::header::HOST,
            http::HeaderValue::from_str(holder.as_str()).unwrap(),
        );
        req
    }

    /// The relayed answer's body as the relay makes it, for a plain (JSON) answer.
    fn answer(res: http::Response<Incoming>, conn: InUse) -> Answer {
        let place = Connections::new(1).try_take().unwrap();
        let watch = Watch {
            redis: RedisConn::new(RedisConfig::from_url("redis://127.0.0.1:1")).unwrap(),
            heartbeat_prefix: "hb:".into(),
            holder: "holder".into(),
            silence: Silence {
                limit: Duration::from_secs(5),
                keepalive: Duration::from_secs(15),
                recheck: Duration::from_secs(1),
            },
            _place: place,
        };
        Answer::new(None, res.into_body(), conn, watch, false, None)
    }

    /// One relayed call through `pool`, its answer read to the end.
    async fn call(pool: &Arc<Pool>, holder: &Authority) -> Bytes {
        let (res, conn) = pool.send(holder, request(holder)).await.unwrap();
        answer(res, conn).collect().await.unwrap().to_bytes()
    }

    /// The connections a holder (see [`holder`]) accepted for three calls, one after another.
    async fn connections_for_three_calls(keep_alive: bool, body: &'static [u8]) -> usize {
        let (address, accepted) = holder(keep_alive, body).await;
        let pool = pool();
        for _ in 0..3 {
            assert_eq!(&call(&pool, &address).await[..], body);
        }
        accepted.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn answers_read_to_their_end_leave_their_connection_for_the_next_request() {
        let accepted = connections_for_three_calls(true, b"{\"ok\":true}").await;
        assert_eq!(accepted, 1, "one connection, reused");
    }

    #[tokio::test]
    async fn an_answer_dropped_before_its_end_takes_its_connection_with_it() {
        let (address, accepted) = holder(true, b"{\"ok\":true}").await;
        let pool = pool();
        let (res, conn) = pool.send(&address, request(&address)).await.unwrap();
        drop(answer(res, conn));
        assert_eq!(&call(&pool, &address).await[..], b"{\"ok\":true}");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "the unread one was not reused"
        );
    }

    #[tokio::test]
    async fn a_connection_the_holder_closes_is_not_sent_on_again() {
        assert_eq!(connections_for_three_calls(false, b"{}").await, 3);
    }
}
