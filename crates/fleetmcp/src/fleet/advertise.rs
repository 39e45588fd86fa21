//! Where the other instances reach this one (the address its heartbeat advertises, which they
//! relay its sessions' requests to), and the check that this instance reaches itself there.
//!
//! The address is `FLEETMCP_ADVERTISE_ADDRESS` when set. Otherwise it is made of an IP and the
//! port this instance listens on: the listener's own IP when it is bound to one (loopback:
//! `127.0.0.1`), and when it listens on every interface, the address this instance reaches
//! Redis from (the local address the kernel's routing picks toward Redis: whoever shares that
//! Redis reaches this instance there), or `127.0.0.1` when Redis is on a Unix socket (so on
//! this host). Only when that cannot be found (Redis's name does not resolve) is it
//! `<machine id>:<port>`, as before (a pod's name, where DNS resolves it). Recomputed every
//! [`period`]; a change is advertised at once.
//!
//! The check: a request to `http://<advertised>/.fleetmcp/self-check`, signed for this
//! instance like a relayed request (`relay_auth/`), which the relay guard answers, once it
//! verified it, with this process's random token (`relay_guard.rs`). Only this process can
//! answer with that token; another instance at that address refuses the signature (it was
//! signed for another machine id). Run once the instance listens, whenever the address
//! changes, every [`period`], and by `/readyz` when no check has judged the current address
//! yet. A failed check makes `/readyz` answer `503` (probe `advertised-address`) and is
//! logged once, as a warning naming `FLEETMCP_ADVERTISE_ADDRESS` and what failed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::relay_auth::{RelayKeys, Subject};
use crate::redis_conn::RedisConn;
use crate::transport::{MACHINE_ID_HEADER, Probe, ProbeReport};

/// The path of the self-check, answered by the relay guard to a verified request only (and
/// served in the listener's health reserve, like `/readyz`).
pub(crate) const SELF_CHECK_PATH: &str = "/.fleetmcp/self-check";
/// How long the self-check may take, connecting included.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// When a check fails at an address that passed before, it is tried again after this.
const RETRY_AFTER: Duration = Duration::from_millis(250);
/// Largest self-check answer read.
const MAX_ANSWER: usize = 4096;

/// How often the address is recomputed and checked: the heartbeat interval, between 1 s and
/// 30 s.
pub(super) fn period(heartbeat_interval_ms: u64) -> Duration {
    Duration::from_millis(heartbeat_interval_ms)
        .clamp(Duration::from_secs(1), Duration::from_secs(30))
}

/// A random token naming this process, answered by the self-check.
pub(super) fn process_token() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>())
}

/// The self-check's answer: this instance's machine id and process token.
pub(super) fn answer(machine_id: &str, process: &str) -> serde_json::Value {
    json!({"machineId": machine_id, "process": process})
}

/// Where the advertised address came from, for logs and `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `FLEETMCP_ADVERTISE_ADDRESS`.
    Configured,
    /// The IP the listener is bound to.
    Listener,
    /// The local address toward Redis.
    RedisRoute,
    /// Redis is on a Unix socket: this host.
    UnixSocket,
    /// The machine id: nothing better was found.
    MachineId,
}

impl Source {
    fn describe(self) -> &'static str {
        match self {
            Self::Configured => "set by FLEETMCP_ADVERTISE_ADDRESS",
            Self::Listener => {
                "the address this instance listens on; FLEETMCP_ADVERTISE_ADDRESS is unset"
            }
            Self::RedisRoute => {
                "the address this instance reaches Redis from; FLEETMCP_ADVERTISE_ADDRESS is unset"
            }
            Self::UnixSocket => {
                "loopback, since Redis is on a Unix socket of this host; FLEETMCP_ADVERTISE_ADDRESS is unset"
            }
            Self::MachineId => {
                "the machine id, since the address this instance reaches Redis from could not be found; FLEETMCP_ADVERTISE_ADDRESS is unset"
            }
        }
    }

    fn key(self) -> &'static str {
        match self {
            Self::Configured => "FLEETMCP_ADVERTISE_ADDRESS",
            Self::Listener => "listener",
            Self::RedisRoute => "redis-route",
            Self::UnixSocket => "unix-socket",
            Self::MachineId => "machine-id",
        }
    }
}

/// What a check found for one address.
struct Verdict {
    address: String,
    outcome: Result<(), String>,
}

/// The advertised address of one instance and its self-check.
pub(crate) struct Advertiser {
    me: String,
    configured: Option<String>,
    redis: RedisConn,
    keys: RelayKeys,
    /// This process's token (the self-check's expected answer).
    process: String,
    /// The IP and port this instance listens on (from the configuration, then the listener).
    listen: parking_lot::Mutex<SocketAddr>,
    /// The address advertised now and where it came from.
    current: parking_lot::Mutex<(String, Source)>,
    /// The last check's outcome, for the address it checked.
    verdict: parking_lot::Mutex<Option<Verdict>>,
    /// One check at a time.
    checking: tokio::sync::Mutex<()>,
    /// Wakes [`watch`] at once (the listener is up: check now).
    wake: tokio::sync::Notify,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Advertiser {
    /// An advertiser for instance `me` listening on `listen` (as configured: the listener is
    /// not bound yet), with `configured` (`FLEETMCP_ADVERTISE_ADDRESS`) if set; the address is
    /// computed at once.
    pub async fn new(
        me: &str,
        configured: Option<String>,
        listen: SocketAddr,
        redis: RedisConn,
        keys: RelayKeys,
        process: String,
    ) -> Arc<Self> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CHECK_TIMEOUT));
        http.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(http);
        let me = me.to_string();
        let first = match &configured {
            Some(a) => (a.clone(), Source::Configured),
            None => {
                let (address, source, unresolved) = compute(&me, listen, &redis).await;
                if let Some(e) = unresolved {
                    warn_unresolved(&address, &e);
                }
                (address, source)
            }
        };
        tracing::info!(
            address = %first.0,
            source = first.1.key(),
            "[HA] Advertising {} to the other instances ({})",
            first.0,
            first.1.describe()
        );
        Arc::new(Self {
            me,
            configured,
            redis,
            keys,
            process,
            listen: parking_lot::Mutex::new(listen),
            current: parking_lot::Mutex::new(first),
            verdict: parking_lot::Mutex::new(None),
            checking: tokio::sync::Mutex::new(()),
            wake: tokio::sync::Notify::new(),
            client,
        })
    }

    /// The address advertised now.
    pub fn current(&self) -> String {
        self.current.lock().0.clone()
    }

    /// The instance listens on `local` (its listener is bound): the address is made from it
    /// from now on (unless configured), and checked at once.
    pub fn listening_on(&self, local: SocketAddr) {
        *self.listen.lock() = local;
        self.wake.notify_one();
    }

    /// Recomputes the address (unless configured); whether it changed.
    async fn refresh(&self) -> bool {
        if self.configured.is_some() {
            return false;
        }
        let listen = *self.listen.lock();
        let (address, source, unresolved) = compute(&self.me, listen, &self.redis).await;
        let next = (address, source);
        let mut current = self.current.lock();
        if current.0 == next.0 {
            return false;
        }
        if let Some(e) = unresolved {
            if current.1 != Source::MachineId && listen.port() == port_of(&current.0) {
                // A name that resolved before and does not now (DNS failing for a moment): the
                // address found then still holds, and a worse one is not advertised.
                tracing::debug!(error = %e, "[HA] Redis's name did not resolve; keeping the advertised address");
                return false;
            }
            warn_unresolved(&next.0, &e);
        }
        tracing::info!(
            previous = %current.0,
            address = %next.0,
            source = next.1.key(),
            "[HA] The advertised address changed from {} to {} ({})",
            current.0,
            next.0,
            next.1.describe()
        );
        *current = next;
        true
    }

    /// Checks the current address, records the outcome and logs a change of it (a failure as
    /// a warning naming `FLEETMCP_ADVERTISE_ADDRESS`, once per distinct failure).
    async fn check_now(&self) -> Result<(), String> {
        let _one = self.checking.lock().await;
        let (address, source) = self.current.lock().clone();
        let before = self
            .verdict
            .lock()
            .as_ref()
            .filter(|v| v.address == address)
            .map(|v| v.outcome.clone());
        let mut outcome = self.reach(&address).await;
        if outcome.is_err() && matches!(before, Some(Ok(()))) {
            // It reached itself there before: a blip (a connection lost on the way) does not
            // make the instance unready; a second failure does.
            tokio::time::sleep(RETRY_AFTER).await;
            outcome = self.reach(&address).await;
        }
        let outcome = outcome.map_err(|why| failure(&address, source, &why));
        let mut verdict = self.verdict.lock();
        match (&outcome, before) {
            (Err(e), Some(Err(was))) if *e == was => {}
            (Err(e), _) => tracing::warn!(address = %address, source = source.key(), "[HA] {e}"),
            (Ok(()), Some(Err(_))) => tracing::info!(
                address = %address,
                "[HA] This instance reaches itself at its advertised address {address} again"
            ),
            (Ok(()), _) => tracing::debug!(
                address = %address,
                "[HA] This instance reaches itself at its advertised address {address}"
            ),
        }
        *verdict = Some(Verdict {
            address,
            outcome: outcome.clone(),
        });
        outcome
    }

    /// The outcome for the current address: the last check's if it judged this address, else a
    /// check now.
    async fn outcome(&self) -> Result<(), String> {
        let address = self.current();
        let known = self
            .verdict
            .lock()
            .as_ref()
            .filter(|v| v.address == address)
            .map(|v| v.outcome.clone());
        match known {
            Some(o) => o,
            None => self.check_now().await,
        }
    }

    /// One self-check request to `address`: `Ok` only if this process answered.
    async fn reach(&self, address: &str) -> Result<(), String> {
        let uri: http::Uri = format!("http://{address}{SELF_CHECK_PATH}")
            .parse()
            .map_err(|e| format!("it makes no URL: {e}"))?;
        let mut headers = HeaderMap::new();
        let subject = Subject {
            source: self.me.as_bytes(),
            target: self.me.as_bytes(),
            method: &Method::GET,
            path: SELF_CHECK_PATH,
            body: b"",
        };
        self.keys
            .sign(&subject, &mut headers, crate::clock::unix_ms())
            .map_err(String::from)?;
        let mut req = http::Request::new(Full::new(Bytes::new()));
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        let exchange = async {
            let res = self
                .client
                .request(req)
                .await
                .map_err(|e| super::error_text::describe(&e))?;
            let status = res.status();
            let machine = res
                .headers()
                .get(MACHINE_ID_HEADER)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let body = Limited::new(res.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok::<_, String>((status, machine, body))
        };
        let (status, machine, body) = tokio::time::timeout(CHECK_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("no answer within {} ms", CHECK_TIMEOUT.as_millis()))??;
        let token = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("process")?.as_str().map(String::from));
        match machine {
            _ if status == StatusCode::OK && token.as_deref() == Some(self.process.as_str()) => {
                Ok(())
            }
            Some(m) if m != self.me => Err(format!(
                "another instance answered there (machine id {m}, HTTP {})",
                status.as_u16()
            )),
            Some(_) if status == StatusCode::OK => {
                Err("another process under this machine id answered there".into())
            }
            Some(_) => Err(format!(
                "an instance under this machine id answered HTTP {} instead",
                status.as_u16()
            )),
            None => Err(format!(
                "something other than a fleetmcp instance answered there (HTTP {}, no {MACHINE_ID_HEADER})",
                status.as_u16()
            )),
        }
    }
}

/// The warning and `/readyz` error for a failed check of `address`.
fn failure(address: &str, source: Source, why: &str) -> String {
    format!(
        "This instance does not reach itself at the address it advertises to the other instances, {address} ({}): {why}. Requests the others relay to it there fail (503); set FLEETMCP_ADVERTISE_ADDRESS to a host:port where the other instances reach this one",
        source.describe()
    )
}

/// The default address for an instance listening on `listen` (see the module's documentation),
/// where it came from, and why the route to Redis was not found when it was not.
async fn compute(
    me: &str,
    listen: SocketAddr,
    redis: &RedisConn,
) -> (String, Source, Option<String>) {
    let port = listen.port();
    if !listen.ip().is_unspecified() {
        let address = SocketAddr::new(listen.ip(), port).to_string();
        return (address, Source::Listener, None);
    }
    match redis.local_address().await {
        Ok(Some(ip)) => (
            SocketAddr::new(ip, port).to_string(),
            Source::RedisRoute,
            None,
        ),
        Ok(None) => (
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port).to_string(),
            Source::UnixSocket,
            None,
        ),
        Err(e) => (format!("{me}:{port}"), Source::MachineId, Some(e)),
    }
}

/// The port of a `host:port` address (0 if it has none).
fn port_of(address: &str) -> u16 {
    address
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(0)
}

fn warn_unresolved(address: &str, error: &str) {
    tracing::warn!(
        error = %error,
        "[HA] The address this instance reaches Redis from could not be found ({error}); advertising {address}, which works only where the machine id resolves to this instance: set FLEETMCP_ADVERTISE_ADDRESS"
    );
}

/// Recomputes and checks the address every [`period`] (at once when the listener comes up),
/// calling `changed` when it changed (so the heartbeat advertises it at once), until `stop`.
pub(super) async fn watch(
    advertiser: Arc<Advertiser>,
    period: Duration,
    changed: impl Fn() -> futures_util::future::BoxFuture<'static, ()> + Send + 'static,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = advertiser.wake.notified() => {}
            _ = stop.cancelled() => return,
        }
        if advertiser.refresh().await {
            changed().await;
        }
        tokio::select! {
            _ = advertiser.check_now() => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// `/readyz`'s `advertised-address` probe: ready while this instance reaches itself at the
/// address it advertises.
#[async_trait]
impl Probe for Advertiser {
    fn name(&self) -> &'static str {
        "advertised-address"
    }

    async fn check(&self) -> ProbeReport {
        let outcome = self.outcome().await;
        let (address, source) = self.current.lock().clone();
        let details = json!({"address": address, "source": source.key()});
        match outcome {
            Ok(()) => ProbeReport {
                healthy: true,
                detail: json!({"status": "healthy", "details": details}),
            },
            Err(e) => ProbeReport {
                healthy: false,
                detail: json!({"status": "unhealthy", "error": e, "details": details}),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_config::RedisConfig;

    fn redis(url: &str) -> RedisConn {
        RedisConn::new(RedisConfig::from_url(url)).expect("a valid configuration")
    }

    #[tokio::test]
    async fn the_default_address_is_the_listeners_ip_or_the_route_to_redis() {
        let on = redis("redis://127.0.0.1:1");
        // Bound to one IP: that IP, whatever Redis is.
        let listen: SocketAddr = "127.0.0.1:4100".parse().unwrap();
        assert_eq!(
            compute("desk-a", listen, &on).await,
            ("127.0.0.1:4100".into(), Source::Listener, None)
        );
        // Bound to every interface: the address the route to Redis leaves from (Redis need not
        // answer: nothing is sent).
        let all: SocketAddr = "0.0.0.0:4100".parse().unwrap();
        assert_eq!(
            compute("desk-a", all, &on).await,
            ("127.0.0.1:4100".into(), Source::RedisRoute, None)
        );
        // A Redis whose name does not resolve: the machine id, as before.
        let nowhere = redis("redis://fleetmcp-no-such-host.invalid:6379");
        let (address, source, why) = compute("desk-a", all, &nowhere).await;
        assert_eq!(
            (address.as_str(), source),
            ("desk-a:4100", Source::MachineId)
        );
        assert!(
            why.is_some_and(|w| w.contains("fleetmcp-no-such-host.invalid")),
            "the error names the host"
        );
    }

    /// With Sentinel the route goes toward the sentinels (until a master is in use), with a
    /// cluster toward its first node that resolves: the instance binds every interface, and
    /// finds the address it reaches them from without any of them answering.
    #[tokio::test]
    async fn sentinel_and_cluster_configurations_route_toward_their_nodes() {
        let all: SocketAddr = "0.0.0.0:4100".parse().unwrap();
        let sentinel = RedisConfig {
            sentinels: vec!["127.0.0.1:1".into()],
            sentinel_master: Some("mymaster".into()),
            ..RedisConfig::default()
        };
        let cluster = RedisConfig {
            cluster_nodes: vec![
                "fleetmcp-no-such-host.invalid:7000".into(),
                "127.0.0.1:7001".into(),
            ],
            ..RedisConfig::default()
        };
        for cfg in [sentinel, cluster] {
            let conn = RedisConn::new(cfg).expect("a valid configuration");
            let (address, source, why) = compute("desk-a", all, &conn).await;
            assert_eq!(
                (address.as_str(), source, why),
                ("127.0.0.1:4100", Source::RedisRoute, None)
            );
        }
    }

    #[test]
    fn the_check_runs_every_heartbeat_interval_within_bounds() {
        assert_eq!(period(300), Duration::from_secs(1));
        assert_eq!(period(10_000), Duration::from_secs(10));
        assert_eq!(period(120_000), Duration::from_secs(30));
    }
}
