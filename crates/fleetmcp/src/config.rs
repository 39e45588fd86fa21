//! The one configuration type, read from an optional TOML file and the environment variables
//! of the deployment contract, validated once at start.
//!
//! Precedence, lowest first: built-in defaults, the TOML file (`FLEETMCP_CONFIG` or an explicit
//! path), then the contract's environment variables (`PORT`, `MCP_SESSION_SECRET`, ...). Nothing
//! else in the crate reads the environment.
//!
//! ```
//! let cfg = fleetmcp::Config::from_sources(None, [("PORT", "4001"), ("MACHINE_ID", "desk-a")]).unwrap();
//! assert_eq!(cfg.port, 4001);
//! assert_eq!(cfg.machine_id.as_deref(), Some("desk-a"));
//! ```

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// Where the HTTP listener binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BindAddress {
    /// 127.0.0.1 only (the default outside distributed mode).
    #[default]
    Loopback,
    /// Every interface (0.0.0.0).
    All,
}

impl BindAddress {
    pub fn ip(self) -> IpAddr {
        match self {
            Self::Loopback => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Self::All => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        }
    }
}

/// `FRONTMCP_DEPLOYMENT_MODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentMode {
    /// One instance; sessions live in its memory unless Redis is configured.
    #[default]
    Standalone,
    /// A fleet of instances behind a load balancer (binds every interface by default).
    Distributed,
}

impl DeploymentMode {
    /// The value as written in `FRONTMCP_DEPLOYMENT_MODE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standalone => "standalone",
            Self::Distributed => "distributed",
        }
    }
}

/// HTTP transport settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Largest accepted request body; larger bodies get `413`.
    pub max_body_bytes: usize,
    /// Extra `Origin` values accepted besides loopback ones (exact match, e.g. `https://app.example`).
    pub allowed_origins: Vec<String>,
    /// Extra `Host` names accepted besides loopback ones (without port). `*` accepts any host,
    /// which is what a server behind a load balancer usually wants.
    pub allowed_hosts: Vec<String>,
    /// The SSE `retry:` hint, in milliseconds, sent with priming events.
    pub sse_retry_ms: u64,
    /// Interval of SSE keep-alive comments, in seconds.
    pub sse_keepalive_secs: u64,
    /// `FLEETMCP_SHUTDOWN_GRACE_MS`: how long a graceful stop waits for requests still running
    /// once the drain delay is over and the listener closed; past it they are cancelled and
    /// the process exits. A stop takes at most `drain_ms` plus this (plus a moment).
    pub shutdown_grace_ms: u64,
    /// `FLEETMCP_DRAIN_MS`: how long a stopping instance (SIGTERM, SIGINT) keeps serving, with
    /// `/readyz` answering `503` and every response closing its connection, before it stops
    /// accepting connections: the time a load balancer needs to notice and send it nothing
    /// new. Unset: [`DEFAULT_DRAIN_MS`] when the instance is likely behind one (sessions in
    /// Redis, distributed mode, or production), else 0 (a lone development server stops at
    /// once). See [`Config::drain_delay`].
    pub drain_ms: Option<u64>,
    /// Most messages in one JSON-RPC batch (2025-03-26); a longer batch is refused with `400`
    /// `-32600` while it is parsed, before its items are read.
    pub max_batch_len: usize,
    /// How long a client may take to send a request's head (request line and headers). Past
    /// it the connection is closed. On HTTP/1.1 hyper also runs this timer while a kept-alive
    /// connection waits for its next request, so there an idle connection closes after the
    /// smaller of this and `idle_timeout_ms`.
    pub header_read_timeout_ms: u64,
    /// How long a request's whole body may take to arrive, counted from its head; past it the
    /// request is answered `408` and the connection closed.
    pub body_read_timeout_ms: u64,
    /// A connection with no request in flight for this long is closed (a kept-alive
    /// connection waiting for its next request, or one that never sent a byte).
    pub idle_timeout_ms: u64,
    /// How long one write to a client may stay blocked (the client stopped reading: an SSE
    /// stream nobody drains); past it the connection is closed.
    pub write_timeout_ms: u64,
    /// Most connections served at once. Past it a small reserve answers only `/healthz` and
    /// `/readyz` (anything else `503`), and beyond that reserve a connection is closed as soon
    /// as it is accepted. Lowered at start to fit the open-files limit.
    pub max_connections: usize,
    /// `FLEETMCP_METRICS`: serve `/metrics` (Prometheus text format) behind the same `Host` and
    /// `Origin` checks as `/mcp`, and record what it shows. On by default: it shows only
    /// counts under fixed labels (no id, no header), and a fleet is scraped without extra
    /// configuration; off, nothing is recorded.
    pub metrics: bool,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 * 1024 * 1024,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            sse_retry_ms: 3000,
            sse_keepalive_secs: 15,
            shutdown_grace_ms: 5000,
            drain_ms: None,
            max_batch_len: 100,
            // Above the 60 s idle timeout load balancers keep upstream connections for
            // (nginx, ALB): hyper runs this timer between kept-alive requests too, and a server
            // that closes first races the balancer's next request into a 502.
            header_read_timeout_ms: 65_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 65_000,
            write_timeout_ms: 30_000,
            max_connections: 10_000,
            metrics: true,
        }
    }
}

/// Session settings (session-era clients only).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// A session unused for this long is dropped (clients rarely send `DELETE`).
    pub idle_ttl_ms: u64,
    /// Most sessions one instance holds; `initialize` beyond it answers `503`.
    pub max_sessions: usize,
    /// Most SSE events kept per stream for resumption.
    pub max_events_per_stream: usize,
    /// Most streams whose events are kept per session.
    pub max_streams_per_session: usize,
    /// How long a stream's events outlive its last event in a shared (Redis) event store.
    pub event_ttl_ms: u64,
    /// A reader of an SSE stream that cannot read the shared (Redis) event store for this long
    /// ends its response (the client resumes with `Last-Event-ID`) instead of waiting.
    pub stream_read_outage_ms: u64,
    /// Bound on the per-request check that a held session's record still exists
    /// (`transport.persistence.sessionCheckTimeoutMs` in the contract); past it the session is
    /// served from memory.
    pub check_timeout_ms: u64,
    /// Bound on reading a session this instance does not hold; past it the request gets `503`
    /// with `Retry-After` instead of hanging.
    pub store_wait_ms: u64,
    /// Most bytes of `clientInfo` and `capabilities` together (as sent) that `initialize` may
    /// carry; both are kept for the session's life, in memory and in the store. Beyond it,
    /// `initialize` answers `400` `-32602` and nothing is opened.
    pub max_client_info_bytes: usize,
    /// Most resources one session may be subscribed to at once (`resources/subscribe` beyond
    /// it answers `-32602`).
    pub max_subscriptions: usize,
    /// Longest URI `resources/subscribe` accepts, in bytes.
    pub max_subscription_uri_bytes: usize,
    /// `FLEETMCP_MAX_CLIENT_DATA_BYTES`: most bytes of client data this instance keeps at once
    /// for its sessions and listen streams (subscribed URIs, the URIs a `subscriptions/listen` filters on): a subscription
    /// or a listen request that would pass it is refused (`503` for a listen, `-32603` for a
    /// subscription), so a crowd of callers cannot exhaust memory within their own bounds.
    pub max_client_data_bytes: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            idle_ttl_ms: 3_600_000,
            max_sessions: 100_000,
            max_events_per_stream: 1024,
            max_streams_per_session: 64,
            event_ttl_ms: 300_000,
            stream_read_outage_ms: 30_000,
            check_timeout_ms: 500,
            store_wait_ms: 5000,
            max_client_info_bytes: 16 * 1024,
            max_subscriptions: 1000,
            max_subscription_uri_bytes: 4096,
            max_client_data_bytes: 256 * 1024 * 1024,
        }
    }
}

/// Background tasks (the 2026-07-28 tasks extension and 2025-11-25 experimental tasks): how
/// long their records are kept, and how many and how large they may be. Working tasks count
/// against the bounds but are never evicted; finished ones are, oldest first, when a new task
/// needs room. A new task that finds no room answers a JSON-RPC error.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskConfig {
    /// How long a task's record stays readable after it was created (`ttlMs`).
    pub ttl_ms: u64,
    /// Most task records kept at once, working or finished.
    pub max_tasks: usize,
    /// Most bytes of task records kept at once (records as serialised).
    pub max_bytes: usize,
    /// Most task records one session keeps (2025-11-25 tasks belong to their session).
    pub max_tasks_per_owner: usize,
    /// Most bytes of task records one session keeps.
    pub max_bytes_per_owner: usize,
    /// Largest record one task may leave; a larger result fails the task with an error that
    /// names this limit instead of being stored.
    pub max_result_bytes: usize,
    /// `FLEETMCP_MAX_TASKS_PER_CALLER`: most task records one caller (its limit key: the
    /// principal with authorization on, else the client's address) keeps, so that one client cannot fill the table for
    /// everyone else (above `max_tasks` it never binds).
    pub max_tasks_per_caller: usize,
    /// `FLEETMCP_MAX_TASK_BYTES_PER_CALLER`: most bytes of task records (plus the arguments its
    /// running handlers hold) one caller keeps (above `max_bytes` it never binds).
    pub max_bytes_per_caller: usize,
}

impl Default for TaskConfig {
    fn default() -> Self {
        Self {
            ttl_ms: 3_600_000,
            max_tasks: 1000,
            max_bytes: 128 * 1024 * 1024,
            max_tasks_per_owner: 100,
            max_bytes_per_owner: 32 * 1024 * 1024,
            max_result_bytes: 8 * 1024 * 1024,
            max_tasks_per_caller: 100,
            max_bytes_per_caller: 32 * 1024 * 1024,
        }
    }
}

/// Tuning of distributed mode's HA manager (`FRONTMCP_HA_*`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HaConfig {
    /// How often each instance rewrites its heartbeat.
    pub heartbeat_interval_ms: u64,
    /// Lifetime of a heartbeat key; an instance whose key expired is presumed gone.
    pub heartbeat_ttl_ms: u64,
    /// Prefix of heartbeat keys and relay channels.
    pub key_prefix: String,
    /// `FRONTMCP_HA_TAKEOVER_GRACE_MS`: how long a holder whose heartbeat expired but whose
    /// process still holds its channel subscription (alive but slow or paused) keeps its sessions
    /// before another instance takes them over. A holder known to be gone (no subscription) is
    /// taken over at once.
    pub takeover_grace_ms: u64,
    /// `FLEETMCP_ADVERTISE_ADDRESS`: `host:port` where the other instances reach this one to relay
    /// a session's requests to it (written in the heartbeat). Unset: with the port the instance
    /// listens on, `127.0.0.1` when bound to loopback, else the address it reaches Redis from
    /// (`<machine id>` only when that cannot be found). Either way the instance checks that it
    /// reaches itself there, and is not ready while it does not.
    pub advertise_address: Option<String>,
    /// `FLEETMCP_RELAY_WINDOW_MS`: how far a relayed request's timestamp may be from the
    /// holder's clock (either way) before it is refused as stale; the holder remembers nonces
    /// for twice this long to refuse replays. Bounds the clock skew the fleet tolerates.
    pub relay_window_ms: u64,
    /// `FLEETMCP_RELAY_MAX_CONNECTIONS`: most requests this instance relays to other instances
    /// at once (a relayed stream counts until it ends). One more waits up to a second for a
    /// place, then is answered `503` with `Retry-After: 1`. Besides, every socket the relay
    /// opens takes a place of `http.max_connections`, like a client's connection. Unset: a
    /// quarter of `http.max_connections` (as fitted to the open-files limit), so relayed
    /// requests, which hold two sockets each here, hold at most half the connections.
    pub relay_max_connections: Option<usize>,
    /// Most idle connections the relay keeps open to each other instance, for the next relayed
    /// request (an idle one is closed after 30 s). Each is counted in `http.max_connections`.
    pub relay_max_idle_per_holder: usize,
}

impl Default for HaConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 10_000,
            heartbeat_ttl_ms: 30_000,
            key_prefix: "mcp:ha:".into(),
            takeover_grace_ms: 5_000,
            advertise_address: None,
            relay_window_ms: 30_000,
            relay_max_connections: None,
            relay_max_idle_per_holder: 32,
        }
    }
}

impl HaConfig {
    /// The relayed requests allowed in flight at once, given the connection budget
    /// (`http.max_connections` as fitted to the open-files limit): `relay_max_connections`, or a
    /// quarter of the budget.
    pub fn relay_cap(&self, connections: usize) -> usize {
        self.relay_max_connections.unwrap_or(connections / 4).max(1)
    }
}

/// Which era serves a request that carries no version information at all (no `_meta`
/// protocol version, no version header, no session, not `initialize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DefaultEra {
    /// Answer `400 session required`, so dual-era clients fall back to `initialize`.
    #[default]
    Session,
    /// Validate it as a 2026-07-28 request (it then needs its `_meta`).
    Stateless,
}

/// Settings of the stateless era (MCP 2026-07-28).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatelessConfig {
    pub default_era: DefaultEra,
    /// `ttlMs` of `server/discover` and list results. Lists can change at runtime
    /// (`subscriptions/listen` announces it), so the default lets clients cache nothing.
    pub list_ttl_ms: u64,
    /// How long a `requestState` handed to a client stays valid.
    pub request_state_ttl_ms: u64,
    /// `FLEETMCP_MAX_LISTEN_STREAMS`: most `subscriptions/listen` streams this instance keeps
    /// open at once (beyond: `503` with `Retry-After`).
    pub max_listen_streams: usize,
}

impl Default for StatelessConfig {
    fn default() -> Self {
        Self {
            default_era: DefaultEra::Session,
            list_ttl_ms: 0,
            request_state_ttl_ms: 600_000,
            max_listen_streams: 10_000,
        }
    }
}

/// Authorization (`[auth]`): this server as an OAuth 2.1 resource server (MCP authorization,
/// RFC 9728 metadata, RFC 8707 audience). Off unless `enabled`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// `FLEETMCP_AUTH_ENABLED`: require a bearer token on every MCP request.
    pub enabled: bool,
    /// `FLEETMCP_AUTH_ISSUER`: the `iss` every token must carry.
    pub issuer: String,
    /// `FLEETMCP_AUTH_RESOURCE`: this server's resource URI (e.g. `https://mcp.example.com/mcp`),
    /// the `aud` every token must carry (RFC 8707) and the `resource` of the metadata.
    pub resource: String,
    /// `FLEETMCP_AUTH_JWKS_URI`: where the issuer publishes its signing keys.
    pub jwks_uri: String,
    /// The authorization servers named in the metadata (unset: the issuer).
    pub authorization_servers: Vec<String>,
    /// Signature algorithms accepted (public-key ones only; `none` never is).
    pub algorithms: Vec<String>,
    /// Scopes every request needs, whatever it calls (besides a tool's own).
    pub required_scopes: Vec<String>,
    /// `scopes_supported` of the metadata (unset: every scope the catalog declares, plus
    /// `required_scopes`).
    pub scopes_supported: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// Bound on one JWKS fetch.
    pub jwks_timeout_ms: u64,
    /// How long fetched keys are used before they are fetched again.
    pub jwks_ttl_ms: u64,
    /// Least time between two fetches caused by a token with an unknown `kid`, so a flood of
    /// forged kids cannot hammer the issuer.
    pub jwks_min_refetch_ms: u64,
    /// `FLEETMCP_AUTH_INTROSPECTION_ENDPOINT`: the issuer's token introspection endpoint
    /// (RFC 7662), for opaque (non-JWT) tokens. Unset: only JWTs are accepted.
    pub introspection_endpoint: String,
    /// `FLEETMCP_AUTH_INTROSPECTION_CLIENT_ID`: this server's client id at the endpoint (HTTP
    /// Basic; unset: no client authentication).
    pub introspection_client_id: String,
    /// `FLEETMCP_AUTH_INTROSPECTION_CLIENT_SECRET`: its secret.
    pub introspection_client_secret: Option<String>,
    /// Bound on one introspection call.
    pub introspection_timeout_ms: u64,
    /// How long a checked token (a verified JWT, an introspected opaque token) is accepted
    /// again without being checked in full (never past its `exp`).
    pub token_cache_ttl_ms: u64,
    /// Most checked tokens kept (0: every request's token is checked in full).
    pub token_cache_max: usize,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            issuer: String::new(),
            resource: String::new(),
            jwks_uri: String::new(),
            authorization_servers: Vec::new(),
            algorithms: [
                "RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA",
            ]
            .map(String::from)
            .to_vec(),
            required_scopes: Vec::new(),
            scopes_supported: Vec::new(),
            leeway_secs: 30,
            jwks_timeout_ms: 3000,
            jwks_ttl_ms: 600_000,
            jwks_min_refetch_ms: 10_000,
            introspection_endpoint: String::new(),
            introspection_client_id: String::new(),
            introspection_client_secret: None,
            introspection_timeout_ms: 3000,
            token_cache_ttl_ms: 60_000,
            token_cache_max: 10_000,
        }
    }
}

/// One request-rate limit: `requests` per `window_ms` on average, of which up to `burst` may
/// come at once (GCRA: a request is admitted when its key's theoretical arrival time, pushed
/// `window_ms / requests` further by each admitted request, is at most `burst` intervals ahead
/// of now).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Requests allowed per window.
    pub requests: u64,
    /// The window, in milliseconds.
    pub window_ms: u64,
    /// Requests allowed at once after a quiet spell. Unset: `requests` (a whole window's worth).
    #[serde(default)]
    pub burst: Option<u64>,
}

impl RateLimit {
    /// The burst in effect.
    pub fn burst(&self) -> u64 {
        self.burst.unwrap_or(self.requests)
    }

    /// Parses `<requests>/<window_ms>[/<burst>]`, as written in `FLEETMCP_RATE_LIMIT`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('/').map(|p| p.trim().parse::<u64>());
        let requests = parts.next()?.ok()?;
        let window_ms = parts.next()?.ok()?;
        let burst = match parts.next() {
            None => None,
            Some(b) => Some(b.ok()?),
        };
        parts.next().is_none().then_some(Self {
            requests,
            window_ms,
            burst,
        })
    }

    fn check(&self, name: &'static str) -> Result<(), ConfigError> {
        if self.requests == 0 || self.window_ms == 0 || self.burst() == 0 {
            return invalid_value(
                name,
                format!("{}/{}/{}", self.requests, self.window_ms, self.burst()),
                "requests, window_ms and burst must each be at least 1",
            );
        }
        // Kept in whole microseconds per request (the Redis script's unit).
        if self.window_ms.saturating_mul(1000) < self.requests {
            return invalid_value(
                name,
                format!("{}/{}", self.requests, self.window_ms),
                "at most 1000 requests per millisecond",
            );
        }
        Ok(())
    }
}

/// What a limit check does when the shared (Redis) counters do not answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreError {
    /// Serve the request uncounted, with a warning in the log.
    #[default]
    Open,
    /// Answer `503` with `Retry-After: 1`.
    Closed,
}

/// Fair use (`[limits]`): request-rate limits per key, globally and per tool, and limits on
/// requests in flight per session and per key. A key is the caller's principal once
/// authorization identifies one, else the client's address (see `client_address_header`).
/// Counted in Redis when the server has Redis (shared by the fleet), else in memory. Everything
/// but `max_inflight_per_session` is off by default.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// `FLEETMCP_RATE_LIMIT`: every request run, per key. Unset: no limit.
    pub rate: Option<RateLimit>,
    /// `tools/call` of each named tool, per key, on top of `rate` (`[limits.tools.<name>]`).
    pub tools: std::collections::BTreeMap<String, RateLimit>,
    /// `FLEETMCP_MAX_INFLIGHT_PER_SESSION`: requests one session may have running at once; one
    /// more is answered `429` with `Retry-After`, and the running ones go on. Counted by the
    /// session's holder (only it serves the session).
    pub max_inflight_per_session: usize,
    /// `FLEETMCP_MAX_INFLIGHT_PER_KEY`: requests one key may have running at once across the
    /// fleet (background tasks included, while they work). Unset or 0: no limit.
    pub max_inflight_per_key: Option<usize>,
    /// `FLEETMCP_MAX_LISTEN_STREAMS_PER_KEY`: `subscriptions/listen` streams one key may keep
    /// open on an instance (one more: `429` with `Retry-After`).
    pub max_listen_streams_per_key: usize,
    /// `FLEETMCP_MAX_SESSIONS_PER_KEY`: sessions one key may hold, across the fleet when the
    /// server has Redis (one more `initialize`: `429` with `Retry-After`). 0: no limit.
    pub max_sessions_per_key: usize,
    /// `FLEETMCP_LIMITS_ON_STORE_ERROR`: `open` or `closed`.
    pub on_store_error: OnStoreError,
    /// `FLEETMCP_CLIENT_ADDRESS_HEADER`: the header the load balancer reports the client's
    /// address in (`x-forwarded-for`: the rightmost address not in `trusted_proxies`;
    /// `x-real-ip`, or any other: its one address). Unset: the connection's peer address.
    pub client_address_header: Option<String>,
    /// `FLEETMCP_TRUSTED_PROXIES` (comma-separated addresses or CIDR ranges): the load
    /// balancers. When set, the header is believed only from a peer in this list, and these
    /// hops are skipped in `X-Forwarded-For`.
    pub trusted_proxies: Vec<String>,
    /// How long a slot of `max_inflight_per_key` held by an instance that stopped renewing it
    /// (crashed) lasts in Redis; a live instance renews its slots every third of it.
    pub inflight_lease_ms: u64,
    /// Prefix of the limit keys in Redis.
    pub key_prefix: String,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            rate: None,
            tools: Default::default(),
            max_inflight_per_session: 100,
            max_inflight_per_key: None,
            max_listen_streams_per_key: 16,
            max_sessions_per_key: 1000,
            on_store_error: OnStoreError::Open,
            client_address_header: None,
            trusted_proxies: Vec::new(),
            inflight_lease_ms: 60_000,
            key_prefix: "mcp:limits:".into(),
        }
    }
}

/// The algorithms `[auth] algorithms` may name: signatures by a key the issuer publishes.
/// Shared-secret (`HS*`) algorithms are left out: a JWKS public key must never be usable as
/// an HMAC secret.
pub const AUTH_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

impl LimitsConfig {
    /// `trusted_proxies`, parsed (validated at start, so nothing is dropped here).
    pub fn trusted_nets(&self) -> Vec<ipnet::IpNet> {
        self.trusted_proxies
            .iter()
            .filter_map(|p| parse_net(p))
            .collect()
    }

    fn check(&self) -> Result<(), ConfigError> {
        if let Some(r) = &self.rate {
            r.check("limits.rate")?;
        }
        for r in self.tools.values() {
            r.check("limits.tools")?;
        }
        if self.max_inflight_per_session == 0 {
            return invalid_value(
                "limits.max_inflight_per_session",
                "0".into(),
                "must be at least 1",
            );
        }
        if self.max_listen_streams_per_key == 0 {
            return invalid_value(
                "limits.max_listen_streams_per_key",
                "0".into(),
                "must be at least 1",
            );
        }
        if let Some(h) = &self.client_address_header
            // A header name is an RFC 9110 token.
            && (h.is_empty()
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)))
        {
            return invalid_value(
                "limits.client_address_header",
                h.clone(),
                "must be a header name (e.g. x-forwarded-for or x-real-ip)",
            );
        }
        if let Some(bad) = self.trusted_proxies.iter().find(|p| parse_net(p).is_none()) {
            return invalid_value(
                "limits.trusted_proxies",
                bad.clone(),
                "each entry must be an IP address or a CIDR range (10.0.0.0/8)",
            );
        }
        if self.inflight_lease_ms < 1000 {
            return invalid_value(
                "limits.inflight_lease_ms",
                self.inflight_lease_ms.to_string(),
                "must be at least 1000",
            );
        }
        if self.key_prefix.is_empty() {
            return invalid_value("limits.key_prefix", String::new(), "must not be empty");
        }
        Ok(())
    }
}

fn invalid_value(name: &'static str, value: String, why: &'static str) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid { name, value, why })
}

/// An address (`10.0.0.1`) or a range (`10.0.0.0/8`).
fn parse_net(text: &str) -> Option<ipnet::IpNet> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(ipnet::IpNet::from))
}

/// Everything a fleetmcp server is configured with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `PORT`: the listen port (0 picks a free one).
    pub port: u16,
    /// `FRONTMCP_BIND_ADDRESS`: `loopback` or `all`. Unset: loopback, or all in distributed mode.
    pub bind_address: Option<BindAddress>,
    /// `MCP_SESSION_SECRET`: key material for session ids, shared by every instance. Required in
    /// distributed mode. Also the key material of 2026 `requestState` when neither
    /// `VAULT_SECRET` nor `JWT_SECRET` is set (a key of its own, under another label).
    pub session_secret: Option<String>,
    /// `MCP_SESSION_SECRET_PREVIOUS` (comma-separated): secrets rotated out. Ids sealed under them
    /// still open; new ids are sealed under `session_secret` only, so a rolling change of the
    /// secret drops no session: first give every instance the new secret with the old one here,
    /// then, once no instance mints under the old one, remove it.
    pub previous_session_secrets: Vec<String>,
    /// `MACHINE_ID`: this instance's id.
    pub machine_id: Option<String>,
    /// `HOSTNAME`: the machine id in distributed mode when `MACHINE_ID` is unset.
    pub hostname: Option<String>,
    /// `NODE_ENV`: `production` switches on production rules (secret required).
    pub node_env: Option<String>,
    /// `VAULT_SECRET`: first choice for the key of 2026 `requestState`.
    pub vault_secret: Option<String>,
    /// `JWT_SECRET`: second choice for the key of 2026 `requestState` (the third is
    /// `MCP_SESSION_SECRET`).
    pub jwt_secret: Option<String>,
    /// `FRONTMCP_DEPLOYMENT_MODE`.
    pub deployment_mode: DeploymentMode,
    /// Items per page of every list method.
    pub page_size: usize,
    pub http: HttpConfig,
    pub sessions: SessionConfig,
    /// Background task records.
    pub tasks: TaskConfig,
    pub stateless: StatelessConfig,
    /// Redis, shared by every instance of a fleet (`REDIS_URL`, `REDIS_HOST`, `REDIS_PORT`, or a
    /// `[redis]` section). Unset: sessions live in this process's memory.
    pub redis: Option<crate::redis_config::RedisConfig>,
    /// Distributed mode's HA manager.
    pub ha: HaConfig,
    /// Authorization (off by default).
    pub auth: AuthConfig,
    /// Rate and concurrency limits.
    pub limits: LimitsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            port: 3000,
            bind_address: None,
            session_secret: None,
            previous_session_secrets: Vec::new(),
            machine_id: None,
            hostname: None,
            node_env: None,
            deployment_mode: DeploymentMode::Standalone,
            page_size: 100,
            http: HttpConfig::default(),
            sessions: SessionConfig::default(),
            tasks: TaskConfig::default(),
            vault_secret: None,
            jwt_secret: None,
            stateless: StatelessConfig::default(),
            redis: None,
            ha: HaConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
        }
    }
}

/// The drain delay of an instance likely behind a load balancer when `http.drain_ms` is unset:
/// long enough for a balancer that probes `/readyz` every few seconds to see it fail, and for
/// nginx to let its idle upstream connections go (keep its `keepalive_timeout` below this);
/// short enough for a rolling restart and Kubernetes' default 30 s termination grace period.
pub const DEFAULT_DRAIN_MS: u64 = 5000;

/// A configuration value that cannot be used, with the name the operator set it under.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Parse(String),
    #[error("configuration: {name} = {value:?} is not valid: {why}")]
    Invalid {
        name: &'static str,
        value: String,
        why: &'static str,
    },
}

/// The other variables the configuration reads, each with its own parsing.
const OTHER_ENV: &[&str] = &[
    "MCP_SESSION_SECRET_PREVIOUS",
    "FRONTMCP_BIND_ADDRESS",
    "FRONTMCP_DEPLOYMENT_MODE",
    "REDIS_URL",
    "REDIS_HOST",
    "REDIS_PORT",
    "REDIS_SENTINELS",
    "REDIS_SENTINEL_MASTER",
    "REDIS_SENTINEL_PASSWORD",
    "REDIS_CLUSTER_NODES",
    "FLEETMCP_REDIS_WAIT_REPLICAS",
    "FRONTMCP_HA_HEARTBEAT_INTERVAL_MS",
    "FRONTMCP_HA_HEARTBEAT_TTL_MS",
    "FRONTMCP_HA_KEY_PREFIX",
    "FRONTMCP_HA_TAKEOVER_GRACE_MS",
    "FLEETMCP_ADVERTISE_ADDRESS",
    "FLEETMCP_RELAY_WINDOW_MS",
    "FLEETMCP_RELAY_MAX_CONNECTIONS",
    "FLEETMCP_DRAIN_MS",
    "FLEETMCP_SHUTDOWN_GRACE_MS",
    "FLEETMCP_AUTH_ENABLED",
    "FLEETMCP_AUTH_ISSUER",
    "FLEETMCP_AUTH_RESOURCE",
    "FLEETMCP_AUTH_JWKS_URI",
    "FLEETMCP_AUTH_INTROSPECTION_ENDPOINT",
    "FLEETMCP_AUTH_INTROSPECTION_CLIENT_ID",
    "FLEETMCP_AUTH_INTROSPECTION_CLIENT_SECRET",
    "FLEETMCP_RATE_LIMIT",
    "FLEETMCP_MAX_INFLIGHT_PER_SESSION",
    "FLEETMCP_MAX_INFLIGHT_PER_KEY",
    "FLEETMCP_MAX_LISTEN_STREAMS_PER_KEY",
    "FLEETMCP_MAX_SESSIONS_PER_KEY",
    "FLEETMCP_MAX_TASKS_PER_CALLER",
    "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
    "FLEETMCP_MAX_LISTEN_STREAMS",
    "FLEETMCP_MAX_CLIENT_DATA_BYTES",
    "FLEETMCP_LIMITS_ON_STORE_ERROR",
    "FLEETMCP_CLIENT_ADDRESS_HEADER",
    "FLEETMCP_TRUSTED_PROXIES",
    "FLEETMCP_METRICS",
];

/// A comma-separated list of `host:port` addresses (`REDIS_SENTINELS`, `REDIS_CLUSTER_NODES`),
/// blanks dropped; each is checked by [`RedisConfig::validate`](crate::redis_config::RedisConfig::validate).
fn split_addresses(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect()
}

fn positive(value: &str) -> Option<u64> {
    value.trim().parse::<u64>().ok().filter(|v| *v > 0)
}

/// Environment variables of the contract that each set one field as they are.
const ENV_KEYS: &[&str] = &[
    "PORT",
    "MCP_SESSION_SECRET",
    "MACHINE_ID",
    "HOSTNAME",
    "NODE_ENV",
    "VAULT_SECRET",
    "JWT_SECRET",
];

/// Every environment variable a fleetmcp server reads: the configuration's (see
/// [`Config::from_sources`]), `FLEETMCP_CONFIG` (the TOML file, read by [`Config::load`]) and
/// those read by [`crate::init_tracing`] ([`TRACING_ENV`]). Deployment files are checked
/// against it (`tests/deploy_k8s.rs`).
pub fn environment_variables() -> impl Iterator<Item = &'static str> {
    ENV_KEYS
        .iter()
        .chain(OTHER_ENV)
        .chain(&["FLEETMCP_CONFIG"])
        .chain(TRACING_ENV)
        .copied()
}

/// The variables [`crate::init_tracing`] reads, not the configuration: the log filter and
/// format, and (with the cargo feature `otlp`) where spans are exported and under which
/// service name. The OTLP exporter also reads the other standard `OTEL_*` variables.
pub const TRACING_ENV: &[&str] = &[
    "RUST_LOG",
    "LOG_FORMAT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
];

impl Config {
    /// `[auth]`, checked only when enabled: the URLs parse, the algorithms are allowed.
    fn validate_auth(&self) -> Result<(), ConfigError> {
        let a = &self.auth;
        if !a.enabled {
            return Ok(());
        }
        let invalid = |name, value: &str, why| {
            Err(ConfigError::Invalid {
                name,
                value: value.to_string(),
                why,
            })
        };
        let is_url =
            |v: &str| reqwest::Url::parse(v).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
        if !is_url(&a.issuer) {
            return invalid(
                "auth.issuer (FLEETMCP_AUTH_ISSUER)",
                &a.issuer,
                "expected the issuer's http(s) URL",
            );
        }
        if !is_url(&a.resource) || a.resource.contains('#') {
            return invalid(
                "auth.resource (FLEETMCP_AUTH_RESOURCE)",
                &a.resource,
                "expected this server's http(s) resource URI, without a fragment",
            );
        }
        if !is_url(&a.jwks_uri) {
            return invalid(
                "auth.jwks_uri (FLEETMCP_AUTH_JWKS_URI)",
                &a.jwks_uri,
                "expected the http(s) URL of the issuer's JWKS",
            );
        }
        if let Some(bad) = a.authorization_servers.iter().find(|s| !is_url(s)) {
            return invalid("auth.authorization_servers", bad, "expected http(s) URLs");
        }
        if a.algorithms.is_empty() {
            return invalid("auth.algorithms", "[]", "name at least one algorithm");
        }
        if let Some(bad) = a
            .algorithms
            .iter()
            .find(|alg| !AUTH_ALGORITHMS.contains(&alg.as_str()))
        {
            return invalid(
                "auth.algorithms",
                bad,
                "expected public-key algorithms: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA",
            );
        }
        if !a.introspection_endpoint.is_empty() && !is_url(&a.introspection_endpoint) {
            return invalid(
                "auth.introspection_endpoint (FLEETMCP_AUTH_INTROSPECTION_ENDPOINT)",
                &a.introspection_endpoint,
                "expected the http(s) URL of the issuer's introspection endpoint",
            );
        }
        if a.introspection_timeout_ms < 100 {
            return invalid(
                "auth.introspection_timeout_ms",
                &a.introspection_timeout_ms.to_string(),
                "must be at least 100",
            );
        }
        if a.leeway_secs > 300 {
            return invalid(
                "auth.leeway_secs",
                &a.leeway_secs.to_string(),
                "must be at most 300",
            );
        }
        if a.jwks_timeout_ms < 100 || a.jwks_ttl_ms < 1000 {
            return invalid(
                "auth.jwks_timeout_ms",
                &a.jwks_timeout_ms.to_string(),
                "must be at least 100 (and auth.jwks_ttl_ms at least 1000)",
            );
        }
        Ok(())
    }

    /// Reads `FLEETMCP_CONFIG` (a TOML file, optional) and the process environment.
    pub fn load() -> Result<Self, ConfigError> {
        let file = std::env::var("FLEETMCP_CONFIG").ok();
        Self::from_sources(file.as_deref().map(Path::new), std::env::vars())
    }

    /// Builds the configuration from a TOML file and a set of environment variables.
    pub fn from_sources<K, V>(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, ConfigError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::Parse(format!(
                    "config file {} does not exist",
                    path.display()
                )));
            }
            fig = fig.merge(Toml::file(path));
        }
        let mut cfg: Config = fig
            .extract()
            .map_err(|e| ConfigError::Parse(e.to_string()))?;
        for (k, v) in env {
            cfg.apply_env(k.as_ref(), v.as_ref())?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    fn apply_env(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |name: &'static str, why: &'static str| ConfigError::Invalid {
            name,
            value: value.to_string(),
            why,
        };
        if !ENV_KEYS.contains(&name) && !OTHER_ENV.contains(&name) {
            return Ok(());
        }
        let value_opt = (!value.is_empty()).then(|| value.to_string());
        match name {
            "PORT" => {
                self.port = value
                    .parse()
                    .map_err(|_| invalid("PORT", "expected a port number 0-65535"))?
            }
            "MCP_SESSION_SECRET" => self.session_secret = value_opt,
            "MCP_SESSION_SECRET_PREVIOUS" => {
                self.previous_session_secrets = value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            }
            "MACHINE_ID" => self.machine_id = value_opt,
            "HOSTNAME" => self.hostname = value_opt,
            "NODE_ENV" => self.node_env = value_opt,
            // The contract: a value that is not a positive integer is ignored (the default
            // applies), and so is a blank prefix.
            "FRONTMCP_HA_HEARTBEAT_INTERVAL_MS" => {
                if let Some(v) = positive(value) {
                    self.ha.heartbeat_interval_ms = v;
                }
            }
            "FRONTMCP_HA_HEARTBEAT_TTL_MS" => {
                if let Some(v) = positive(value) {
                    self.ha.heartbeat_ttl_ms = v;
                }
            }
            "FRONTMCP_HA_TAKEOVER_GRACE_MS" => {
                if let Some(v) = positive(value) {
                    self.ha.takeover_grace_ms = v;
                }
            }
            "FLEETMCP_RELAY_WINDOW_MS" => {
                if let Some(v) = positive(value) {
                    self.ha.relay_window_ms = v;
                }
            }
            "FLEETMCP_RELAY_MAX_CONNECTIONS" => {
                self.ha.relay_max_connections = match value.trim() {
                    "" => None,
                    v => Some(v.parse().map_err(|_| {
                        invalid(
                            "FLEETMCP_RELAY_MAX_CONNECTIONS",
                            "expected a number of relayed requests (1 or more), or nothing for a quarter of http.max_connections",
                        )
                    })?),
                }
            }
            "FLEETMCP_DRAIN_MS" if !value.trim().is_empty() => {
                self.http.drain_ms = Some(value.trim().parse().map_err(|_| {
                    invalid("FLEETMCP_DRAIN_MS", "expected milliseconds (0 or more)")
                })?)
            }
            "FLEETMCP_SHUTDOWN_GRACE_MS" if !value.trim().is_empty() => {
                self.http.shutdown_grace_ms = value.trim().parse().map_err(|_| {
                    invalid(
                        "FLEETMCP_SHUTDOWN_GRACE_MS",
                        "expected milliseconds (0 or more)",
                    )
                })?
            }
            "FLEETMCP_RATE_LIMIT" => self.limits.rate = match value.trim() {
                "" | "off" => None,
                v => Some(RateLimit::parse(v).ok_or_else(|| {
                    invalid(
                        "FLEETMCP_RATE_LIMIT",
                        "expected <requests>/<window_ms>[/<burst>], e.g. 100/60000/20, or `off`",
                    )
                })?),
            },
            "FLEETMCP_MAX_INFLIGHT_PER_SESSION" if !value.trim().is_empty() => {
                self.limits.max_inflight_per_session = value.trim().parse().map_err(|_| {
                    invalid(
                        "FLEETMCP_MAX_INFLIGHT_PER_SESSION",
                        "expected a number of requests (1 or more)",
                    )
                })?
            }
            "FLEETMCP_MAX_INFLIGHT_PER_KEY" => {
                let n: usize = match value.trim() {
                    "" => 0,
                    v => v.parse().map_err(|_| {
                        invalid(
                            "FLEETMCP_MAX_INFLIGHT_PER_KEY",
                            "expected a number of requests (0 for no limit)",
                        )
                    })?,
                };
                self.limits.max_inflight_per_key = (n > 0).then_some(n);
            }
            "FLEETMCP_MAX_LISTEN_STREAMS_PER_KEY" if !value.trim().is_empty() => {
                self.limits.max_listen_streams_per_key = value.trim().parse().map_err(|_| {
                    invalid(
                        "FLEETMCP_MAX_LISTEN_STREAMS_PER_KEY",
                        "expected a number of streams (1 or more)",
                    )
                })?
            }
            "FLEETMCP_MAX_SESSIONS_PER_KEY" if !value.trim().is_empty() => {
                self.limits.max_sessions_per_key = value.trim().parse().map_err(|_| {
                    invalid(
                        "FLEETMCP_MAX_SESSIONS_PER_KEY",
                        "expected a number of sessions (0 for no limit)",
                    )
                })?
            }
            "FLEETMCP_MAX_TASKS_PER_CALLER" if !value.trim().is_empty() => {
                self.tasks.max_tasks_per_caller = value.trim().parse().map_err(|_| {
                    invalid(
                        "FLEETMCP_MAX_TASKS_PER_CALLER",
                        "expected a number of task records (1 or more)",
                    )
                })?
            }
            "FLEETMCP_MAX_TASK_BYTES_PER_CALLER" if !value.trim().is_empty() => {
                self.tasks.max_bytes_per_caller = value.trim().parse().map_err(|_| {
                    invalid(
                        "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
                        "expected a number of bytes (at least tasks.max_result_bytes)",
                    )
                })?
            }
            "FLEETMCP_MAX_LISTEN_STREAMS" if !value.trim().is_empty() => {
                self.stateless.max_listen_streams = value.trim().parse().map_err(|_| {
                    invalid(
                        "FLEETMCP_MAX_LISTEN_STREAMS",
                        "expected a number of streams (1 or more)",
                    )
                })?
            }
            "FLEETMCP_MAX_CLIENT_DATA_BYTES" if !value.trim().is_empty() => {
                self.sessions.max_client_data_bytes = value.trim().parse().map_err(|_| {
                    invalid(
                        "FLEETMCP_MAX_CLIENT_DATA_BYTES",
                        "expected a number of bytes (at least 1 MiB)",
                    )
                })?
            }
            "FLEETMCP_LIMITS_ON_STORE_ERROR" => {
                self.limits.on_store_error = match value.trim().to_ascii_lowercase().as_str() {
                    "" | "open" => OnStoreError::Open,
                    "closed" => OnStoreError::Closed,
                    _ => {
                        return Err(invalid(
                            "FLEETMCP_LIMITS_ON_STORE_ERROR",
                            "expected `open` (serve uncounted, with a warning) or `closed` (answer 503)",
                        ));
                    }
                }
            }
            "FLEETMCP_CLIENT_ADDRESS_HEADER" => {
                self.limits.client_address_header =
                    (!value.trim().is_empty()).then(|| value.trim().to_ascii_lowercase())
            }
            "FLEETMCP_TRUSTED_PROXIES" => {
                self.limits.trusted_proxies = value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            }
            "FLEETMCP_METRICS" if !value.trim().is_empty() => {
                self.http.metrics = match value.trim().to_ascii_lowercase().as_str() {
                    "1" | "true" | "on" => true,
                    "0" | "false" | "off" => false,
                    _ => return Err(invalid("FLEETMCP_METRICS", "expected on or off")),
                }
            }
            "FLEETMCP_ADVERTISE_ADDRESS" => {
                self.ha.advertise_address = (!value.trim().is_empty()).then(|| value.trim().into())
            }
            "FRONTMCP_HA_KEY_PREFIX" if !value.trim().is_empty() => {
                self.ha.key_prefix = value.trim().to_string()
            }
            "REDIS_URL" if !value.is_empty() => {
                self.redis.get_or_insert_with(Default::default).url = value_opt;
            }
            "REDIS_HOST" if !value.is_empty() => {
                self.redis.get_or_insert_with(Default::default).host = value_opt;
            }
            "REDIS_PORT" if !value.is_empty() => {
                let port = value
                    .parse()
                    .map_err(|_| invalid("REDIS_PORT", "expected a port number 1-65535"))?;
                self.redis.get_or_insert_with(Default::default).port = Some(port);
            }
            "REDIS_SENTINELS" if !value.trim().is_empty() => {
                self.redis.get_or_insert_with(Default::default).sentinels = split_addresses(value);
            }
            "FLEETMCP_REDIS_WAIT_REPLICAS" if !value.trim().is_empty() => {
                self.redis
                    .get_or_insert_with(Default::default)
                    .wait_replicas = value.trim().to_string();
            }
            "REDIS_CLUSTER_NODES" if !value.trim().is_empty() => {
                self.redis
                    .get_or_insert_with(Default::default)
                    .cluster_nodes = split_addresses(value);
            }
            "REDIS_SENTINEL_MASTER" if !value.trim().is_empty() => {
                self.redis
                    .get_or_insert_with(Default::default)
                    .sentinel_master = Some(value.trim().to_string());
            }
            "REDIS_SENTINEL_PASSWORD" if !value.is_empty() => {
                self.redis
                    .get_or_insert_with(Default::default)
                    .sentinel_password = value_opt;
            }
            "FLEETMCP_AUTH_ENABLED" if !value.trim().is_empty() => {
                self.auth.enabled = match value.trim().to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => true,
                    "0" | "false" | "no" | "off" => false,
                    _ => return Err(invalid("FLEETMCP_AUTH_ENABLED", "expected true or false")),
                }
            }
            "FLEETMCP_AUTH_ISSUER" if !value.is_empty() => self.auth.issuer = value.trim().into(),
            "FLEETMCP_AUTH_RESOURCE" if !value.is_empty() => {
                self.auth.resource = value.trim().into()
            }
            "FLEETMCP_AUTH_JWKS_URI" if !value.is_empty() => {
                self.auth.jwks_uri = value.trim().into()
            }
            "FLEETMCP_AUTH_INTROSPECTION_ENDPOINT" if !value.is_empty() => {
                self.auth.introspection_endpoint = value.trim().into()
            }
            "FLEETMCP_AUTH_INTROSPECTION_CLIENT_ID" if !value.is_empty() => {
                self.auth.introspection_client_id = value.trim().into()
            }
            "FLEETMCP_AUTH_INTROSPECTION_CLIENT_SECRET" => {
                self.auth.introspection_client_secret = value_opt
            }
            "VAULT_SECRET" => self.vault_secret = value_opt,
            "JWT_SECRET" => self.jwt_secret = value_opt,
            "FRONTMCP_BIND_ADDRESS" => {
                self.bind_address = match value.to_ascii_lowercase().as_str() {
                    "" => None,
                    "loopback" | "127.0.0.1" | "localhost" => Some(BindAddress::Loopback),
                    "all" | "0.0.0.0" => Some(BindAddress::All),
                    _ => {
                        return Err(invalid(
                            "FRONTMCP_BIND_ADDRESS",
                            "expected `loopback` or `all`",
                        ));
                    }
                }
            }
            "FRONTMCP_DEPLOYMENT_MODE" => {
                self.deployment_mode = match value.to_ascii_lowercase().as_str() {
                    "" | "standalone" => DeploymentMode::Standalone,
                    "distributed" => DeploymentMode::Distributed,
                    // Named on its own: it is a mode of the contract fleetmcp does not offer,
                    // not a typo, and starting as standalone instead would mislead.
                    "serverless" => {
                        return Err(invalid(
                            "FRONTMCP_DEPLOYMENT_MODE",
                            "serverless mode is not supported; expected `standalone` or `distributed` (or unset)",
                        ));
                    }
                    _ => {
                        return Err(invalid(
                            "FRONTMCP_DEPLOYMENT_MODE",
                            "expected `standalone` or `distributed` (or unset)",
                        ));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |name, value: String, why| Err(ConfigError::Invalid { name, value, why });
        self.validate_auth()?;
        if let Some(id) = &self.machine_id
            && (!id.bytes().all(|b| (0x21..=0x7e).contains(&b)) || id.len() > 128)
        {
            return invalid(
                "MACHINE_ID",
                id.clone(),
                "must be 1-128 visible ASCII characters (it goes into headers and cookies)",
            );
        }
        if self.http.max_body_bytes < 1024 {
            return invalid(
                "http.max_body_bytes",
                self.http.max_body_bytes.to_string(),
                "must be at least 1024",
            );
        }
        let h = &self.http;
        for (name, ms) in [
            ("http.header_read_timeout_ms", h.header_read_timeout_ms),
            ("http.body_read_timeout_ms", h.body_read_timeout_ms),
            ("http.idle_timeout_ms", h.idle_timeout_ms),
            ("http.write_timeout_ms", h.write_timeout_ms),
        ] {
            if ms < 100 {
                return invalid(name, ms.to_string(), "must be at least 100");
            }
        }
        if h.max_connections == 0 {
            return invalid("http.max_connections", "0".into(), "must be at least 1");
        }
        if self.page_size == 0 {
            return invalid("page_size", "0".into(), "must be at least 1");
        }
        if self.sessions.idle_ttl_ms < 1000 {
            return invalid(
                "sessions.idle_ttl_ms",
                self.sessions.idle_ttl_ms.to_string(),
                "must be at least 1000",
            );
        }
        if self.sessions.stream_read_outage_ms < 100 {
            return invalid(
                "sessions.stream_read_outage_ms",
                self.sessions.stream_read_outage_ms.to_string(),
                "must be at least 100",
            );
        }
        if self.sessions.max_events_per_stream == 0 || self.sessions.max_streams_per_session == 0 {
            return invalid(
                "sessions.max_events_per_stream",
                self.sessions.max_events_per_stream.to_string(),
                "event limits must be at least 1",
            );
        }
        if self.sessions.max_client_info_bytes < 256
            || self.sessions.max_subscription_uri_bytes < 64
        {
            return invalid(
                "sessions.max_client_info_bytes",
                self.sessions.max_client_info_bytes.to_string(),
                "must be at least 256 (and sessions.max_subscription_uri_bytes at least 64)",
            );
        }
        if self.stateless.max_listen_streams == 0 {
            return invalid(
                "stateless.max_listen_streams",
                "0".into(),
                "must be at least 1",
            );
        }
        // A session must be able to hold its subscriptions, and a listen its URIs.
        let one_filter = self
            .sessions
            .max_subscriptions
            .saturating_mul(self.sessions.max_subscription_uri_bytes);
        if self.sessions.max_client_data_bytes < one_filter.min(1024 * 1024) {
            return invalid(
                "sessions.max_client_data_bytes",
                self.sessions.max_client_data_bytes.to_string(),
                "must be at least 1 MiB (or one full set of subscriptions, if smaller)",
            );
        }
        let t = &self.tasks;
        if t.ttl_ms < 1000 {
            return invalid(
                "tasks.ttl_ms",
                t.ttl_ms.to_string(),
                "must be at least 1000",
            );
        }
        if t.max_tasks == 0 || t.max_tasks_per_owner == 0 || t.max_tasks_per_owner > t.max_tasks {
            return invalid(
                "tasks.max_tasks_per_owner",
                t.max_tasks_per_owner.to_string(),
                "must be at least 1 and at most tasks.max_tasks",
            );
        }
        // A per-caller bound above the total never binds (the total does, and is named): a server
        // that lowers `max_tasks` or `max_bytes` need not lower the per-caller defaults too.
        if t.max_tasks_per_caller == 0 {
            return invalid(
                "tasks.max_tasks_per_caller",
                t.max_tasks_per_caller.to_string(),
                "must be at least 1",
            );
        }
        // A record must fit wherever it is kept, or a finished task could never be stored.
        if t.max_result_bytes < 1024
            || t.max_result_bytes > t.max_bytes_per_owner
            || t.max_bytes_per_owner > t.max_bytes
            || t.max_result_bytes > t.max_bytes_per_caller
        {
            return invalid(
                "tasks.max_result_bytes",
                t.max_result_bytes.to_string(),
                "must be at least 1024, and max_result_bytes <= max_bytes_per_owner (and max_bytes_per_caller) <= max_bytes",
            );
        }
        self.limits.check()?;
        if let Some(redis) = &self.redis
            && let Err(e) = redis.validate()
        {
            return Err(ConfigError::Parse(format!("redis: {e}")));
        }
        if self.ha.heartbeat_ttl_ms < 2 * self.ha.heartbeat_interval_ms {
            return invalid(
                "FRONTMCP_HA_HEARTBEAT_TTL_MS",
                self.ha.heartbeat_ttl_ms.to_string(),
                "must be at least twice FRONTMCP_HA_HEARTBEAT_INTERVAL_MS, or jitter makes live instances look dead",
            );
        }
        if !(1000..=600_000).contains(&self.ha.relay_window_ms) {
            return invalid(
                "FLEETMCP_RELAY_WINDOW_MS",
                self.ha.relay_window_ms.to_string(),
                "must be 1000 to 600000: shorter, ordinary clock skew between instances refuses genuine relays; longer, a captured request stays replayable (and its nonce remembered) that long",
            );
        }
        if self.ha.relay_max_connections == Some(0) {
            return invalid(
                "ha.relay_max_connections (FLEETMCP_RELAY_MAX_CONNECTIONS)",
                "0".into(),
                "must be at least 1 (unset: a quarter of http.max_connections)",
            );
        }
        if let Some(secret) = &self.session_secret
            && secret.len() < 16
        {
            return invalid(
                "MCP_SESSION_SECRET",
                "<redacted>".into(),
                "must be at least 16 characters",
            );
        }
        if self.previous_session_secrets.iter().any(|s| s.len() < 16) {
            return invalid(
                "MCP_SESSION_SECRET_PREVIOUS",
                "<redacted>".into(),
                "every previous secret must be at least 16 characters",
            );
        }
        if self.deployment_mode == DeploymentMode::Distributed && self.session_secret.is_none() {
            return invalid(
                "MCP_SESSION_SECRET",
                "<unset>".into(),
                "is required in distributed mode: every instance must open the others' session ids, and a key made from the machine id would be public (every response names it)",
            );
        }
        Ok(())
    }

    /// How long a graceful stop keeps serving before it stops accepting connections:
    /// `http.drain_ms` when set; else [`DEFAULT_DRAIN_MS`] for an instance likely behind a load
    /// balancer (sessions in Redis, distributed mode, or production), which must not drop the
    /// requests the balancer still sends it, and 0 for a lone development server (sessions in
    /// memory), which nothing else could take over and which Ctrl-C should stop at once.
    pub fn drain_delay(&self) -> std::time::Duration {
        let fleet = self.redis.is_some()
            || self.deployment_mode == DeploymentMode::Distributed
            || self.is_production();
        let ms = self
            .http
            .drain_ms
            .unwrap_or(if fleet { DEFAULT_DRAIN_MS } else { 0 });
        std::time::Duration::from_millis(ms)
    }

    /// `NODE_ENV=production`.
    pub fn is_production(&self) -> bool {
        self.node_env.as_deref() == Some("production")
    }

    /// The effective bind address (distributed mode binds every interface unless told otherwise).
    pub fn effective_bind(&self) -> BindAddress {
        self.bind_address.unwrap_or(match self.deployment_mode {
            DeploymentMode::Distributed => BindAddress::All,
            _ => BindAddress::Loopback,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_is_off_by_default_and_checked_once_on() {
        let cfg = Config::from_sources(None, Vec::<(String, String)>::new()).unwrap();
        assert!(!cfg.auth.enabled);
        let on = [
            ("FLEETMCP_AUTH_ENABLED", "true"),
            ("FLEETMCP_AUTH_ISSUER", "https://as.example.com"),
            ("FLEETMCP_AUTH_RESOURCE", "https://mcp.example.com/mcp"),
            ("FLEETMCP_AUTH_JWKS_URI", "https://as.example.com/jwks"),
        ];
        let cfg = Config::from_sources(None, on).unwrap();
        assert!(cfg.auth.enabled);
        assert_eq!(cfg.auth.resource, "https://mcp.example.com/mcp");
        // Each required value missing, or not a URL, stops the start naming it.
        for i in 1..on.len() {
            let mut env = on.to_vec();
            env[i].1 = "not a url";
            let err = Config::from_sources(None, env).unwrap_err().to_string();
            assert!(err.contains(on[i].0), "{err}");
        }
        let err = Config::from_sources(None, [("FLEETMCP_AUTH_ENABLED", "maybe")]).unwrap_err();
        assert!(err.to_string().contains("FLEETMCP_AUTH_ENABLED"), "{err}");
    }

    #[test]
    fn shared_secret_algorithms_are_refused() {
        let mut cfg = Config {
            auth: AuthConfig {
                enabled: true,
                issuer: "https://as".into(),
                resource: "https://mcp/mcp".into(),
                jwks_uri: "https://as/jwks".into(),
                algorithms: vec!["RS256".into(), "HS256".into()],
                ..AuthConfig::default()
            },
            ..Config::default()
        };
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("auth.algorithms") && err.contains("HS256"),
            "{err}"
        );
        cfg.auth.algorithms = vec!["none".into()];
        assert!(cfg.validate().is_err());
        cfg.auth.algorithms = vec!["ES256".into()];
        assert!(cfg.validate().is_ok());
    }

    #[test]
    fn environment_overrides_file_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.toml");
        std::fs::write(
            &path,
            "port = 5000\npage_size = 2\n[http]\nmax_body_bytes = 2048\n",
        )
        .unwrap();
        let cfg = Config::from_sources(Some(&path), [("PORT", "6000")]).unwrap();
        assert_eq!(cfg.port, 6000);
        assert_eq!(cfg.page_size, 2);
        assert_eq!(cfg.http.max_body_bytes, 2048);
        assert_eq!(cfg.effective_bind(), BindAddress::Loopback);
    }

    #[test]
    fn redis_cluster_nodes_come_from_the_environment() {
        let cfg = Config::from_sources(
            None,
            [("REDIS_CLUSTER_NODES", " 10.0.0.1:7000, ,10.0.0.2:7001 ")],
        )
        .unwrap();
        let redis = cfg.redis.expect("Redis configured");
        assert_eq!(redis.cluster_nodes, ["10.0.0.1:7000", "10.0.0.2:7001"]);
        assert!(redis.is_cluster());
        // With a fixed server too, the configuration is refused at start.
        let both = Config::from_sources(
            None,
            [
                ("REDIS_CLUSTER_NODES", "10.0.0.1:7000"),
                ("REDIS_URL", "redis://10.0.0.9:6379"),
            ],
        );
        assert!(both.is_err(), "{both:?}");
    }

    #[test]
    fn the_drain_delay_defaults_by_deployment_and_is_configurable() {
        let ms = |cfg: &Config| cfg.drain_delay().as_millis() as u64;
        let none = Vec::<(String, String)>::new();
        // A lone development server stops at once; one likely behind a balancer drains.
        assert_eq!(ms(&Config::from_sources(None, none.clone()).unwrap()), 0);
        for env in [
            ("REDIS_URL", "redis://127.0.0.1:6379"),
            ("NODE_ENV", "production"),
        ] {
            let cfg = Config::from_sources(None, [env]).unwrap();
            assert_eq!(ms(&cfg), DEFAULT_DRAIN_MS, "{env:?}");
        }
        let cfg = Config::from_sources(
            None,
            [
                ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
                ("MCP_SESSION_SECRET", "0123456789abcdef"),
            ],
        )
        .unwrap();
        assert_eq!(ms(&cfg), DEFAULT_DRAIN_MS);
        // Set explicitly, in TOML or the environment (which wins), 0 included.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drain.toml");
        std::fs::write(&path, "[http]\ndrain_ms = 1500\nshutdown_grace_ms = 700\n").unwrap();
        let cfg = Config::from_sources(Some(&path), [("NODE_ENV", "production")]).unwrap();
        assert_eq!((ms(&cfg), cfg.http.shutdown_grace_ms), (1500, 700));
        let cfg = Config::from_sources(
            Some(&path),
            [
                ("FLEETMCP_DRAIN_MS", "0"),
                ("FLEETMCP_SHUTDOWN_GRACE_MS", "250"),
            ],
        )
        .unwrap();
        assert_eq!((ms(&cfg), cfg.http.shutdown_grace_ms), (0, 250));
        let err = Config::from_sources(None, [("FLEETMCP_DRAIN_MS", "5s")]).unwrap_err();
        assert!(err.to_string().contains("FLEETMCP_DRAIN_MS"), "{err}");
    }

    #[test]
    fn metrics_are_on_unless_switched_off() {
        assert!(Config::default().http.metrics);
        let off = Config::from_sources(None, [("FLEETMCP_METRICS", "off")]).unwrap();
        assert!(!off.http.metrics);
        let err = Config::from_sources(None, [("FLEETMCP_METRICS", "maybe")]).unwrap_err();
        assert!(err.to_string().contains("FLEETMCP_METRICS"), "{err}");
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = Config::from_sources(None, [("PORT", "seventy")]).unwrap_err();
        assert!(err.to_string().contains("PORT"), "{err}");
        let err = Config::from_sources(None, [("FRONTMCP_BIND_ADDRESS", "moon")]).unwrap_err();
        assert!(err.to_string().contains("FRONTMCP_BIND_ADDRESS"), "{err}");
        let err = Config::from_sources(None, [("MCP_SESSION_SECRET", "short")]).unwrap_err();
        assert!(err.to_string().contains("MCP_SESSION_SECRET"), "{err}");
        assert!(
            !err.to_string().contains("short"),
            "secrets are never echoed"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "prot = 1\n").unwrap();
        assert!(Config::from_sources(Some(&path), Vec::<(String, String)>::new()).is_err());
    }

    #[test]
    fn ha_variables_follow_the_contract() {
        let cfg = Config::from_sources(
            None,
            [
                ("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "2000"),
                ("FRONTMCP_HA_HEARTBEAT_TTL_MS", "6000"),
                ("FRONTMCP_HA_KEY_PREFIX", "  "),
            ],
        )
        .unwrap();
        assert_eq!(
            (cfg.ha.heartbeat_interval_ms, cfg.ha.heartbeat_ttl_ms),
            (2000, 6000)
        );
        let cfg =
            Config::from_sources(None, [("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "-5")]).unwrap();
        assert_eq!(
            cfg.ha.heartbeat_interval_ms, 10_000,
            "not a positive integer: ignored"
        );
        assert_eq!(cfg.ha.key_prefix, "mcp:ha:", "blank: ignored");
        let err = Config::from_sources(None, [("FRONTMCP_HA_HEARTBEAT_INTERVAL_MS", "20000")])
            .unwrap_err();
        assert!(
            err.to_string().contains("FRONTMCP_HA_HEARTBEAT_TTL_MS"),
            "{err}"
        );
    }

    #[test]
    fn unsupported_deployment_modes_are_refused_by_name() {
        for value in ["serverless", "Serverless", "lambda"] {
            let err =
                Config::from_sources(None, [("FRONTMCP_DEPLOYMENT_MODE", value)]).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("FRONTMCP_DEPLOYMENT_MODE"), "{msg}");
            assert!(msg.contains(value), "{msg}");
            assert!(
                msg.contains("`standalone`") && msg.contains("`distributed`"),
                "{msg}"
            );
        }
        let err =
            Config::from_sources(None, [("FRONTMCP_DEPLOYMENT_MODE", "serverless")]).unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
        for (value, mode) in [
            ("", DeploymentMode::Standalone),
            ("standalone", DeploymentMode::Standalone),
            ("Distributed", DeploymentMode::Distributed),
        ] {
            let env = [
                ("FRONTMCP_DEPLOYMENT_MODE", value),
                ("MCP_SESSION_SECRET", "a fleet secret of some length"),
            ];
            let cfg = Config::from_sources(None, env).unwrap();
            assert_eq!(cfg.deployment_mode, mode, "{value:?}");
        }
    }

    #[test]
    fn distributed_mode_binds_everywhere_unless_told() {
        const SECRET: (&str, &str) = ("MCP_SESSION_SECRET", "a fleet secret of some length");
        let cfg = Config::from_sources(None, [("FRONTMCP_DEPLOYMENT_MODE", "distributed"), SECRET])
            .unwrap();
        assert_eq!(cfg.effective_bind(), BindAddress::All);
        let cfg = Config::from_sources(
            None,
            [
                ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
                ("FRONTMCP_BIND_ADDRESS", "loopback"),
                SECRET,
            ],
        )
        .unwrap();
        assert_eq!(cfg.effective_bind(), BindAddress::Loopback);
    }

    #[test]
    fn the_relay_window_is_30_s_and_bounded() {
        assert_eq!(Config::default().ha.relay_window_ms, 30_000);
        let cfg = Config::from_sources(None, [("FLEETMCP_RELAY_WINDOW_MS", "5000")]).unwrap();
        assert_eq!(cfg.ha.relay_window_ms, 5_000);
        for bad in ["999", "600001"] {
            let err = Config::from_sources(None, [("FLEETMCP_RELAY_WINDOW_MS", bad)]).unwrap_err();
            assert!(
                err.to_string().contains("FLEETMCP_RELAY_WINDOW_MS"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn relays_are_capped_by_default_at_a_quarter_of_the_connections() {
        let cfg = Config::default();
        assert_eq!(cfg.ha.relay_max_connections, None);
        assert_eq!(cfg.ha.relay_max_idle_per_holder, 32);
        assert_eq!(cfg.ha.relay_cap(cfg.http.max_connections), 2500);
        assert_eq!(cfg.ha.relay_cap(432), 108, "as fitted to 512 open files");
        assert_eq!(cfg.ha.relay_cap(2), 1, "never none");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.toml");
        std::fs::write(
            &path,
            "[ha]\nrelay_max_connections = 64\nrelay_max_idle_per_holder = 4\n",
        )
        .unwrap();
        let cfg = Config::from_sources(Some(&path), Vec::<(String, String)>::new()).unwrap();
        assert_eq!(
            (
                cfg.ha.relay_max_connections,
                cfg.ha.relay_max_idle_per_holder
            ),
            (Some(64), 4)
        );
        assert_eq!(cfg.ha.relay_cap(10_000), 64);
        let cfg =
            Config::from_sources(Some(&path), [("FLEETMCP_RELAY_MAX_CONNECTIONS", " 8 ")]).unwrap();
        assert_eq!(cfg.ha.relay_cap(10_000), 8);
        let cfg =
            Config::from_sources(Some(&path), [("FLEETMCP_RELAY_MAX_CONNECTIONS", "")]).unwrap();
        assert_eq!(cfg.ha.relay_max_connections, None, "blank: the default");
        for bad in ["0", "many", "-3"] {
            let err = Config::from_sources(None, [("FLEETMCP_RELAY_MAX_CONNECTIONS", bad)])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("FLEETMCP_RELAY_MAX_CONNECTIONS"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn the_takeover_grace_period_follows_the_contract() {
        assert_eq!(Config::default().ha.takeover_grace_ms, 5_000);
        let cfg = Config::from_sources(None, [("FRONTMCP_HA_TAKEOVER_GRACE_MS", "750")]).unwrap();
        assert_eq!(cfg.ha.takeover_grace_ms, 750);
        // Not a positive integer: ignored, as the contract says.
        let cfg = Config::from_sources(None, [("FRONTMCP_HA_TAKEOVER_GRACE_MS", "-1")]).unwrap();
        assert_eq!(cfg.ha.takeover_grace_ms, 5_000);
    }

    #[test]
    fn limits_are_off_by_default_and_set_by_toml_or_environment() {
        let cfg = Config::default();
        assert_eq!(cfg.limits.rate, None);
        assert!(cfg.limits.tools.is_empty());
        assert_eq!(cfg.limits.max_inflight_per_key, None);
        assert_eq!(cfg.limits.max_inflight_per_session, 100);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limits.toml");
        std::fs::write(
            &path,
            "[limits]\nrate = { requests = 100, window_ms = 60000, burst = 20 }\non_store_error = \"closed\"\n[limits.tools.search]\nrequests = 5\nwindow_ms = 1000\n",
        )
        .unwrap();
        let cfg = Config::from_sources(Some(&path), Vec::<(String, String)>::new()).unwrap();
        let rate = cfg.limits.rate.unwrap();
        assert_eq!(
            (rate.requests, rate.window_ms, rate.burst()),
            (100, 60_000, 20)
        );
        assert_eq!(
            cfg.limits.tools["search"].burst(),
            5,
            "burst defaults to requests"
        );
        assert_eq!(cfg.limits.on_store_error, OnStoreError::Closed);
        let cfg = Config::from_sources(
            Some(&path),
            [
                ("FLEETMCP_RATE_LIMIT", "10/1000"),
                ("FLEETMCP_MAX_INFLIGHT_PER_KEY", "4"),
                ("FLEETMCP_MAX_INFLIGHT_PER_SESSION", "8"),
                ("FLEETMCP_LIMITS_ON_STORE_ERROR", "open"),
                ("FLEETMCP_CLIENT_ADDRESS_HEADER", "X-Real-IP"),
                ("FLEETMCP_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.1"),
            ],
        )
        .unwrap();
        let l = &cfg.limits;
        assert_eq!(l.rate.map(|r| (r.requests, r.window_ms)), Some((10, 1000)));
        assert_eq!(
            (l.max_inflight_per_key, l.max_inflight_per_session),
            (Some(4), 8)
        );
        assert_eq!(l.on_store_error, OnStoreError::Open);
        assert_eq!(l.client_address_header.as_deref(), Some("x-real-ip"));
        assert_eq!(l.trusted_nets().len(), 2);
        let cfg = Config::from_sources(Some(&path), [("FLEETMCP_RATE_LIMIT", "off")]).unwrap();
        assert_eq!(cfg.limits.rate, None);
        for (name, bad) in [
            ("FLEETMCP_RATE_LIMIT", "100 per minute"),
            ("FLEETMCP_RATE_LIMIT", "0/1000"),
            ("FLEETMCP_MAX_INFLIGHT_PER_KEY", "many"),
            ("FLEETMCP_MAX_INFLIGHT_PER_SESSION", "0"),
            ("FLEETMCP_LIMITS_ON_STORE_ERROR", "maybe"),
            ("FLEETMCP_TRUSTED_PROXIES", "10.0.0.0/99"),
            ("FLEETMCP_CLIENT_ADDRESS_HEADER", "x forwarded"),
        ] {
            let e = Config::from_sources(None, [(name, bad)])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(name) || e.contains("limits."),
                "{name}={bad}: {e}"
            );
        }
    }

    #[test]
    fn per_caller_and_per_instance_bounds_come_from_the_environment() {
        let cfg = Config::default();
        assert_eq!(
            (
                cfg.tasks.max_tasks_per_caller,
                cfg.tasks.max_bytes_per_caller
            ),
            (100, 32 * 1024 * 1024)
        );
        assert_eq!(cfg.stateless.max_listen_streams, 10_000);
        assert_eq!(cfg.sessions.max_client_data_bytes, 256 * 1024 * 1024);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bounds.toml");
        std::fs::write(
            &path,
            "[tasks]\nmax_tasks_per_caller = 7\n[stateless]\nmax_listen_streams = 9\n",
        )
        .unwrap();
        let cfg = Config::from_sources(Some(&path), Vec::<(String, String)>::new()).unwrap();
        assert_eq!(cfg.tasks.max_tasks_per_caller, 7);
        assert_eq!(cfg.stateless.max_listen_streams, 9);
        // The environment wins over the file; blank sets nothing.
        let cfg = Config::from_sources(
            Some(&path),
            [
                ("FLEETMCP_MAX_TASKS_PER_CALLER", " 20 "),
                ("FLEETMCP_MAX_TASK_BYTES_PER_CALLER", "16777216"),
                ("FLEETMCP_MAX_LISTEN_STREAMS", "500"),
                ("FLEETMCP_MAX_CLIENT_DATA_BYTES", "67108864"),
            ],
        )
        .unwrap();
        assert_eq!(
            (
                cfg.tasks.max_tasks_per_caller,
                cfg.tasks.max_bytes_per_caller
            ),
            (20, 16 * 1024 * 1024)
        );
        assert_eq!(cfg.stateless.max_listen_streams, 500);
        assert_eq!(cfg.sessions.max_client_data_bytes, 64 * 1024 * 1024);
        let cfg =
            Config::from_sources(Some(&path), [("FLEETMCP_MAX_LISTEN_STREAMS", " ")]).unwrap();
        assert_eq!(cfg.stateless.max_listen_streams, 9);
        // Not a number: refused naming the variable; out of bounds: refused naming the key.
        for (name, bad, names) in [
            (
                "FLEETMCP_MAX_TASKS_PER_CALLER",
                "many",
                "FLEETMCP_MAX_TASKS_PER_CALLER",
            ),
            (
                "FLEETMCP_MAX_TASKS_PER_CALLER",
                "0",
                "tasks.max_tasks_per_caller",
            ),
            (
                "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
                "32MiB",
                "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
            ),
            (
                "FLEETMCP_MAX_TASK_BYTES_PER_CALLER",
                "1000",
                "tasks.max_result_bytes",
            ),
            (
                "FLEETMCP_MAX_LISTEN_STREAMS",
                "-1",
                "FLEETMCP_MAX_LISTEN_STREAMS",
            ),
            (
                "FLEETMCP_MAX_LISTEN_STREAMS",
                "0",
                "stateless.max_listen_streams",
            ),
            (
                "FLEETMCP_MAX_CLIENT_DATA_BYTES",
                "lots",
                "FLEETMCP_MAX_CLIENT_DATA_BYTES",
            ),
            (
                "FLEETMCP_MAX_CLIENT_DATA_BYTES",
                "1024",
                "sessions.max_client_data_bytes",
            ),
        ] {
            let e = Config::from_sources(None, [(name, bad)])
                .unwrap_err()
                .to_string();
            assert!(e.contains(names), "{name}={bad}: {e}");
        }
    }

    #[test]
    fn distributed_mode_requires_the_session_secret() {
        let e = Config::from_sources(None, [("FRONTMCP_DEPLOYMENT_MODE", "distributed")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MCP_SESSION_SECRET") && e.contains("required in distributed mode"),
            "{e}"
        );
    }

    #[test]
    fn previous_secrets_are_a_comma_separated_list_of_long_enough_secrets() {
        let cfg = Config::from_sources(
            None,
            [(
                "MCP_SESSION_SECRET_PREVIOUS",
                " the first old secret , ,the second old secret",
            )],
        )
        .unwrap();
        assert_eq!(
            cfg.previous_session_secrets,
            ["the first old secret", "the second old secret"].map(String::from)
        );
        let e = Config::from_sources(None, [("MCP_SESSION_SECRET_PREVIOUS", "short")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("MCP_SESSION_SECRET_PREVIOUS"), "{e}");
    }
}
