//! Distributed mode: everything that finds other instances, reaches them or judges them gone.
//!
//! - [`gate`]: what stands in front of every request (`transport::Gate`): the relay guard, then
//!   [`identity`], the machine-id header and affinity cookie on every answer;
//! - [`heartbeat`]: the heartbeat in Redis (with the address other instances relay to), the
//!   refusal to start under a machine id in use, and the `/readyz` probe;
//! - [`advertise`]: that address (`FLEETMCP_ADVERTISE_ADDRESS`, else the one this instance
//!   reaches Redis from) and the check that this instance reaches itself there (`/readyz`);
//! - [`directory`]: who serves a stored session (`session::Holders`): its live holder, or this
//!   instance, taking over from a stopped one;
//! - [`relay`]: how a request reaches its holder (`transport::Relay`): one direct HTTP hop;
//!   [`error_text`] writes a failed hop's error with its causes (as [`advertise`] does its own);
//! - [`relay_auth`]: the hop's crypto: an HMAC under a key derived from `MCP_SESSION_SECRET`
//!   over the whole request (source, target, timestamp, nonce, method, path, headers, body),
//!   credentials sealed with an AEAD;
//! - [`relay_guard`]: in front of every request, lets a relayed request through only if it
//!   verifies and is not a replay (else `403`, logged), with its credentials unsealed;
//! - [`fanout`]: list changes and resource updates to every instance (`app::Fanout`), signed;
//! - [`notify`]: notifications for a session held elsewhere, routed to its holder's channel;
//! - [`channel_auth`]: the HMAC of messages on an instance's channel (as a relayed request's);
//! - [`drain_request`]: the operator's request that an instance drain, on its channel, and the
//!   instance's answer (accepted or refused) on the request's reply channel;
//! - [`census`]: the operator's view of the fleet (instances, sessions, tasks) from the indexes;
//! - [`scanner`]: the orphan scanner, claiming dead instances' sessions (and failing their
//!   tasks) in the background from per-instance indexes (never `KEYS`);
//! - [`subscription`]: channel subscriptions kept for the instance's life;
//! - [`heartbeat_liveness`]: whether another instance's process is gone, judged from its
//!   heartbeat and its channel, for background tasks and for SSE answers kept for resumption
//!   (`process_liveness::ProcessLiveness`).
//!
//! The layers below know another instance only as a machine id (a session's holder, a task's
//! executor, a stream's writer) and through the seams this module fills: `session::Holders`
//! and `session::Lease`, `transport::Relay`, `transport::Probe` and `transport::Gate`,
//! `app::Fanout`, `process_liveness::ProcessLiveness`. `session::Sessions` acts on the seams'
//! answers (it claims a session, takes one over, and remembers for a second which peer holds
//! one), and
//! `tasks` reaches a task's executor through the task store (a cancel is published on the
//! task's channel). Holders and the relay are consulted only when a session is *not* held
//! here, so a request for a held session pays nothing for them; in distributed mode it reads
//! the lease (two atomic loads).
//!
//! # Fencing: when a holder stops serving a session it lost
//!
//! Every stored record carries its holder (`session.nodeId`) and an `epoch`, 1 at
//! `initialize` and one more at every claim. Every holder-side write is a Lua compare-and-set on
//! both (`session/redis/`): the claim of a takeover, recreation or scan (`CLAIM`), and the
//! per-request check of a held session with its TTL refresh (`CHECK`); so no write of an
//! instance that lost a session lands on its new holder's record or index. The holder finds
//! out on the first request after the claim: the check answers `Lost`, and the holder logs
//! `[HA] Another node took this session over while this node was unreachable — dropping it
//! here`, drops the session without ending it, and relays the request to the new holder.
//!
//! While the store cannot answer the check, a holder serves its sessions from memory only while
//! its **lease** holds: the lifetime of its last successfully written heartbeat, counted from
//! before that write was sent, minus a tenth (`session::Lease`, renewed by [`heartbeat`]).
//! Others take a session over only once that heartbeat has expired in Redis, which is later; so
//! a holder cut off from Redis answers `503` (`Retry-After: 1`) from then on, and two instances
//! never serve one session. A lease granted again after it ran out starts a new **term**
//! (`Lease::term`): a session confirmed in an earlier term is not served from memory in a later
//! outage until the store confirms it again. With Sentinel, that confirmation counts only from
//! the master the sentinels name (`SessionStore::confirm_current`, `RedisConn::confirm_master`):
//! a holder that slept through a failover may still be connected to the old master. Others also
//! take a session over at once when its holder's address refuses the relay and nothing holds
//! its channel (a crashed process); a live holder behind a refusing link whose Redis
//! connections were closed looks the same, so the lease holds only while the holder's channel
//! subscription is up (`Lease::set_present`). The one window left is a check that answered
//! `Mine` just before a claim landed: that one request is served by the old holder, and its
//! writes are fenced.
//!
//! A 2024-11-05 session is never taken over (its stream is here), but others call it gone once
//! they find this process gone and its drain and grace have passed (`directory.rs`,
//! `process_gone`); a holder cut off from Redis that long ends such sessions' streams itself
//! just before, once it has been absent that long (`Lease::absent_for`,
//! `heartbeat::watch_lease`), so no client is told its session is gone while its stream is
//! open.
//!
//! The holder's answer on the hop is not signed: an on-path attacker can neither run nor replay
//! a request, but could alter an answer (TLS between instances would cover both).
//!
//! Architecture invariant: only layer 7 imports this module (`server` starts it, `ops` reads the
//! census and sends drain requests); a single instance (standalone mode) starts none of it.

mod advertise;
mod beat;
pub(crate) mod census;
mod channel_auth;
mod directory;
mod drain_request;
mod error_text;
mod fanout;
mod gate;
mod heartbeat;
mod heartbeat_liveness;
mod identity;
mod notify;
mod record_form;
mod relay;
mod relay_auth;
mod relay_guard;
mod scanner;
mod subscription;

use std::sync::Arc;

use crate::app::App;
use crate::config::{Config, HaConfig};
use crate::redis_conn::RedisConn;
use crate::session::{Holders, Lease};
use crate::transport::{Gate, Probe, Relay};
use heartbeat::Heartbeat;

/// The two seams a request for a session not held here meets, as distributed mode fills them
/// with Redis: who serves a stored session, and how a request reaches its holder.
///
/// The relay's sockets take their places from `connections`, the budget the listener's
/// connections take theirs from, and its refusals are counted in `meters`. `lease` is this
/// instance's own (see [`process_liveness`]).
pub(crate) fn seams(
    redis: &RedisConn,
    machine_id: &str,
    config: &Config,
    closing: tokio_util::sync::CancellationToken,
    connections: &crate::limits::Connections,
    meters: &crate::telemetry::Meters,
    lease: &Arc<Lease>,
) -> Option<(Arc<dyn Holders>, Arc<dyn Relay>)> {
    let cfg = &config.ha;
    let relay = relay::HttpRelay::new(
        redis.clone(),
        machine_id,
        relay_auth::RelayKeys::from_config(config),
        &cfg.key_prefix,
        cfg.heartbeat_ttl_ms,
        closing,
        relay::Silence {
            limit: std::time::Duration::from_millis(cfg.heartbeat_ttl_ms),
            keepalive: crate::transport::sse_keepalive(&config.http),
            recheck: std::time::Duration::from_millis(cfg.heartbeat_interval_ms.max(100)),
        },
        relay::Bounds {
            in_flight: cfg.relay_cap(connections.max()),
            idle_per_holder: cfg.relay_max_idle_per_holder,
            connections: connections.clone(),
            meters: meters.clone(),
        },
    );
    let directory = directory::Directory::new(
        redis.clone(),
        machine_id,
        &cfg.key_prefix,
        std::time::Duration::from_millis(cfg.takeover_grace_ms),
        process_liveness(redis, cfg, lease),
        streams_outlive(config),
    );
    Some((Arc::new(directory), Arc::new(relay)))
}

/// How long a stopping instance may keep its streams open after it withdrew from the fleet:
/// its drain delay and grace period. Others take its absence for its streams' end only past
/// it (`directory.rs`), and a holder cut off from Redis ends its 2024-11-05 streams once it
/// has been absent that long (`heartbeat::watch_lease`).
fn streams_outlive(config: &Config) -> std::time::Duration {
    config.drain_delay() + std::time::Duration::from_millis(config.http.shutdown_grace_ms)
}

/// The liveness seam in distributed mode: whether another instance's process is gone (a task's
/// executor, an SSE answer's writer).
/// `lease`: this instance's own (it judges others by their absence only once it has held a
/// while).
pub(crate) fn process_liveness(
    redis: &RedisConn,
    cfg: &HaConfig,
    lease: &Arc<Lease>,
) -> Arc<dyn crate::process_liveness::ProcessLiveness> {
    Arc::new(heartbeat_liveness::HeartbeatLiveness::new(
        redis.clone(),
        &cfg.key_prefix,
        std::time::Duration::from_millis(cfg.takeover_grace_ms),
        lease.clone(),
    ))
}

/// Distributed mode on one instance, from start to a graceful stop.
pub(crate) struct Fleet {
    machine_id: String,
    heartbeat: Option<Arc<Heartbeat>>,
    /// The advertised address and its self-check (with Redis).
    advertiser: Option<Arc<advertise::Advertiser>>,
    /// Verifies relayed requests; installed with or without Redis, so that a request claiming
    /// to be relayed is never taken on its word.
    guard: Arc<relay_guard::Guard>,
    /// Set once the instance stopped advertising itself (the contract's HA shutdown, logged
    /// once).
    withdrawn: tokio::sync::OnceCell<()>,
    /// Cancelled by an authentic drain request from the operator (`drain_request.rs`).
    drain_requested: tokio_util::sync::CancellationToken,
}

pub(crate) use advertise::SELF_CHECK_PATH;
pub(crate) use drain_request::Drained;

/// Asks instance `target` of the fleet on `redis` to drain (stop gracefully, as on SIGTERM),
/// signed with `config`'s session secret, as `source`; whether it accepted the request.
pub(crate) async fn request_drain(
    redis: &RedisConn,
    config: &Config,
    source: &str,
    target: &str,
) -> Result<Drained, String> {
    drain_request::request(redis, config, source, target).await
}

impl Fleet {
    /// Starts distributed mode for `app`: with Redis, the heartbeat (refusing a machine id in
    /// use) and the fleet's change channel; without it, the instance still names itself in
    /// headers and cookies, but nothing is shared.
    pub async fn start(app: &App, redis: Option<RedisConn>) -> Result<Self, String> {
        let machine_id = app.sessions().machine_id().to_string();
        let cfg = &app.config().ha;
        // What advertises this instance to the others (its heartbeat, its channel subscription)
        // and what adopts their sessions (the scanner) stops as soon as a graceful stop begins:
        // from then on the others take its sessions over while it drains.
        let withdraw = app.phases().draining.clone();
        let process = advertise::process_token();
        let guard = guard_for(app, &machine_id, process.clone());
        let drain_requested = tokio_util::sync::CancellationToken::new();
        let Some(redis) = redis else {
            tracing::warn!(
                "distributed mode without Redis: sessions stay on the instance that created them"
            );
            return Ok(Self {
                machine_id,
                heartbeat: None,
                advertiser: None,
                guard,
                withdrawn: tokio::sync::OnceCell::new(),
                drain_requested,
            });
        };
        let advertiser = advertise::Advertiser::new(
            &machine_id,
            cfg.advertise_address.clone(),
            std::net::SocketAddr::new(app.config().effective_bind().ip(), app.config().port),
            redis.clone(),
            relay_auth::RelayKeys::from_config(app.config()),
            process,
        )
        .await;
        let hb = Heartbeat::start(
            redis.clone(),
            &machine_id,
            cfg,
            advertiser.clone(),
            app.sessions().lease().clone(),
            on_channel_message(app, &machine_id, &guard, &drain_requested, &redis),
            withdraw.clone(),
        )
        .await?;
        tracing::info!("[HA] Manager started for distributed deployment");
        app.install_fanout(Arc::new(fanout::RedisFanout::new(
            redis.clone(),
            &cfg.key_prefix,
            &machine_id,
            relay_auth::RelayKeys::from_config(app.config()),
        )));
        spawn_background(app, &redis, &machine_id, &hb, &advertiser, withdraw);
        Ok(Self {
            machine_id,
            heartbeat: Some(hb),
            advertiser: Some(advertiser),
            guard,
            withdrawn: tokio::sync::OnceCell::new(),
            drain_requested,
        })
    }

    /// Cancelled when the operator asked this instance to drain: the server then stops
    /// gracefully, as on SIGTERM.
    pub fn drain_requested(&self) -> tokio_util::sync::CancellationToken {
        self.drain_requested.clone()
    }

    /// What stands in front of every request: relayed requests are verified before anything
    /// else runs, and answers (refusals included) name this instance.
    pub fn gate(&self) -> Arc<dyn Gate> {
        Arc::new(gate::FleetGate {
            guard: self.guard.clone(),
            identity: identity::Identity::new(&self.machine_id),
        })
    }

    /// The readiness probes distributed mode adds to `/readyz`: the heartbeat's, and whether
    /// this instance reaches itself at the address it advertises.
    pub fn probes(&self) -> Vec<Arc<dyn Probe>> {
        let heartbeat = self.heartbeat.iter().map(|h| h.clone() as Arc<dyn Probe>);
        let advertised = self.advertiser.iter().map(|a| a.clone() as Arc<dyn Probe>);
        heartbeat.chain(advertised).collect()
    }

    /// The instance's listener is bound at `local`: unless `FLEETMCP_ADVERTISE_ADDRESS` is set,
    /// the advertised address takes its port (and its IP, when it is bound to one), and is
    /// checked at once.
    pub fn listening_on(&self, local: std::net::SocketAddr) {
        if let Some(a) = &self.advertiser {
            a.listening_on(local);
        }
    }

    /// The start of a graceful stop (the server's `draining` token has fired, which ended the
    /// scanner, the heartbeat's renewal and this instance's channel subscription): deletes the
    /// heartbeat, so the others take this instance's sessions over at once from now on, while
    /// it still serves what reaches it during the drain. Idempotent.
    pub async fn withdraw(&self) {
        self.withdrawn
            .get_or_init(|| async {
                if let Some(hb) = &self.heartbeat {
                    hb.stop().await;
                    tracing::info!("[HA] Services stopped for node {}", self.machine_id);
                }
            })
            .await;
    }

    /// A graceful stop: the heartbeat goes at once (if [`Fleet::withdraw`] has not already
    /// deleted it).
    pub async fn stop(&self) {
        self.withdraw().await;
    }
}

/// What verifies relayed requests on this instance (`process`: its answer to a verified
/// self-check).
fn guard_for(app: &App, machine_id: &str, process: String) -> Arc<relay_guard::Guard> {
    Arc::new(relay_guard::Guard {
        verifier: relay_auth::Verifier::new(
            relay_auth::RelayKeys::from_config(app.config()),
            machine_id,
            app.config().ha.relay_window_ms,
        )
        // A hop recorded before this process started is refused: the nonces it remembers
        // start empty, and a replay after a restart would otherwise run again.
        .started_at(crate::clock::unix_ms()),
        max_body: app.config().http.max_body_bytes,
        process,
        machine_id: machine_id.to_string(),
    })
}

/// What a message on this instance's channel is: the operator's drain request (which cancels
/// `drain`), else a notification for a session held here.
fn on_channel_message(
    app: &App,
    machine_id: &str,
    guard: &Arc<relay_guard::Guard>,
    drain: &tokio_util::sync::CancellationToken,
    redis: &RedisConn,
) -> impl Fn(&[u8]) + Send + 'static {
    let (inbox, me, guard) = (
        notify::Inbox::new(app.handle()),
        machine_id.to_string(),
        guard.clone(),
    );
    let drain = drain.clone();
    let (replies, prefix) = (
        drain_request::Replies::new(redis.clone()),
        app.config().ha.key_prefix.clone(),
    );
    move |payload: &[u8]| {
        if !drain_request::on_message(&guard.verifier, &me, payload, &drain, &replies, &prefix) {
            notify::on_message(&inbox, &me, &guard.verifier, payload)
        }
    }
}

/// What runs beside serving until `withdraw` (a graceful stop begins): the fleet's change
/// channel (until the shutdown), the orphan scanner, the watch on the advertised address, the
/// heartbeat's renewal and the watch on its lease (which ends the 2024-11-05 streams once this
/// instance has been absent from Redis too long).
fn spawn_background(
    app: &App,
    redis: &RedisConn,
    machine_id: &str,
    hb: &Arc<Heartbeat>,
    advertiser: &Arc<advertise::Advertiser>,
    withdraw: tokio_util::sync::CancellationToken,
) {
    let cfg = &app.config().ha;
    tokio::spawn(fanout::listen(
        redis.clone(),
        cfg.key_prefix.clone(),
        app.clone(),
        app.phases().shutdown.clone(),
    ));
    tokio::spawn(
        scanner::Scanner {
            app: app.clone(),
            redis: redis.clone(),
            store: crate::session::RedisSessionStore::on(redis.clone()),
            me: machine_id.to_string(),
            key_prefix: cfg.key_prefix.clone(),
            interval: std::time::Duration::from_millis(cfg.heartbeat_interval_ms),
            heartbeat_ttl: std::time::Duration::from_millis(cfg.heartbeat_ttl_ms),
            grace: std::time::Duration::from_millis(cfg.takeover_grace_ms),
        }
        .run(withdraw.clone()),
    );
    // A changed address is advertised at once, not at the next beat.
    let changed = {
        let (beats, held) = (hb.clone(), app.clone());
        move || -> futures_util::future::BoxFuture<'static, ()> {
            let (beats, held) = (beats.clone(), held.clone());
            Box::pin(async move {
                beats.beat(held.sessions().held()).await;
            })
        }
    };
    tokio::spawn(advertise::watch(
        advertiser.clone(),
        advertise::period(cfg.heartbeat_interval_ms),
        changed,
        withdraw.clone(),
    ));
    // Checked well within the tenth of the heartbeat's lifetime by which the lease runs out
    // before the key does (`session::Lease`): the margin the streams end within.
    let every = std::time::Duration::from_millis((cfg.heartbeat_ttl_ms / 40).clamp(10, 100));
    tokio::spawn(heartbeat::watch_lease(
        app.clone(),
        streams_outlive(app.config()),
        every,
        withdraw.clone(),
    ));
    let beats = hb.clone();
    let held = app.clone();
    tokio::spawn(async move {
        // A beat that failed is tried again within half a second, not an interval later: after
        // an outage that expired the key, the others must see this instance alive again well
        // before the takeover grace, after which they presume it gone (`heartbeat_liveness.rs`).
        let retry = beats.interval().min(std::time::Duration::from_millis(500));
        let mut wait = beats.interval();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {
                    let ok = beats.beat(held.sessions().held()).await;
                    wait = if ok { beats.interval() } else { retry };
                }
                _ = withdraw.cancelled() => return,
            }
        }
    });
}

/// An answer the fleet gives in place of a request's (a relay that could not reach the holder,
/// a relayed request refused): a JSON-RPC error `-32000` with `id: null`, since the request was
/// not read as JSON-RPC here, with `status`, and `Retry-After` when given.
fn refusal(
    status: http::StatusCode,
    message: &str,
    retry_s: Option<u64>,
) -> axum::response::Response {
    use http::{HeaderValue, header};
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}});
    let mut res = axum::response::Response::new(axum::body::Body::from(body.to_string()));
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(s) = retry_s {
        h.insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    res
}
