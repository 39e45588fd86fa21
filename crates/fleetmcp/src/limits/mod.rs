//! Fair use: request-rate limits (per key, globally and per tool) and the limit on requests
//! in flight per key, counted in Redis when the server has Redis (so a fleet shares them) and
//! in memory otherwise. The limit on requests in flight per *session* is not here: only the
//! session's holder serves it, so its in-flight table counts it (`session/live.rs`).
//!
//! A key is a string: the caller's principal once authorization identifies one, else the
//! client's address (`transport/http/client_key.rs` decides which). Every check is one call,
//! [`Limits::admit`], which either admits the request (with a [`Place`] that frees its place in
//! flight when dropped) or says which limit refused it and for how long. It checks
//! `limits.rate`, the tool's `limits.tools.<name>` and `limits.max_inflight_per_key`
//! together, all or nothing: with Redis one Lua script (`redis.rs`: GCRA on Redis's clock, and
//! a sorted set of leased places in flight, so a crashed instance's places free themselves),
//! without it the same GCRA in memory (`memory.rs`). [`Limits::admit_session`] bounds a key's
//! sessions (`limits.max_sessions_per_key`): in memory a place the session keeps for its life,
//! with Redis one field of a hash many keys share (`session_counts.rs`, ~25 to 40 bytes a key).
//! When Redis does not answer within its command timeout, `limits.on_store_error` decides:
//! serve uncounted with a warning, or refuse (`503`). No `KEYS`, no `SCAN`.
//!
//! `places.rs` counts what callers hold open in this process (listen streams, sessions) per
//! key and in total ([`Places`]), and the bytes of client data the instance keeps ([`Budget`],
//! a [`Charge`] each); it holds [`Place`], the one type of a place held under a limit, given
//! back when it drops. `connections.rs` is the instance's budget of connections
//! ([`Connections`], `http.max_connections`): the listener's client connections and the relay's
//! sockets to other instances take their places from it.
//!
//! Architecture invariant: knows nothing of HTTP, sessions or JSON-RPC; one check costs at
//! most one Redis round trip (one script), bounded by the Redis command timeout.

mod connections;
mod memory;
mod places;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod session_counts;

pub use connections::Connections;
#[cfg(any(test, feature = "testkit"))]
pub use places::PlacesSnapshot;
pub use places::{Budget, Charge, Place, PlaceRefusal, Places};

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

#[cfg(feature = "redis")]
use crate::config::OnStoreError;
use crate::config::{LimitsConfig, RateLimit};
#[cfg(feature = "redis")]
use crate::redis_conn::RedisConn;

/// Who a request counts against: `principal:<key>`, `addr:<ip>`, or `stdio` (the one client of
/// a stdio server).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LimitKey(Arc<str>);

impl LimitKey {
    /// The key of a caller authorization identified (its stable key: issuer and subject, or
    /// the token's fingerprint).
    pub fn principal(key: &str) -> Self {
        Self(format!("principal:{key}").into())
    }

    /// The key of an anonymous caller: its address, IPv4 whole, IPv6 as its network of
    /// `v6_prefix_len` bits (`limits.ipv6_prefix_len`, 1 to 128): one host usually has a whole
    /// /64 to pick addresses from, so keyed by address it would escape every per-key limit by
    /// rotating them. An IPv4-mapped address (`::ffff:1.2.3.4`, the peer of a dual-stack
    /// listener or a proxy's header) is its IPv4 address, so a client has one key whichever
    /// way it is written. Keys read `addr:1.2.3.4` and `addr:2001:db8:1:2::/64`.
    ///
    /// Every request asks for its caller's key, and consecutive ones on a thread mostly come
    /// from one address (a load balancer, a client's pool): the last key made on the thread is
    /// reused for the same network rather than formatted and allocated again (issue 23).
    pub fn address(ip: std::net::IpAddr, v6_prefix_len: u8) -> Self {
        thread_local! {
            static LAST: std::cell::RefCell<Option<(std::net::IpAddr, u8, LimitKey)>> =
                const { std::cell::RefCell::new(None) };
        }
        let (ip, len) = network_of(ip, v6_prefix_len);
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            if let Some((seen, seen_len, key)) = last.as_ref()
                && (*seen, *seen_len) == (ip, len)
            {
                return key.clone();
            }
            let key = match ip {
                std::net::IpAddr::V4(_) => Self(format!("addr:{ip}").into()),
                std::net::IpAddr::V6(_) => Self(format!("addr:{ip}/{len}").into()),
            };
            *last = Some((ip, len, key.clone()));
            key
        })
    }

    /// The key of a stdio server's client: the process that started it, the only one there is.
    pub fn stdio() -> Self {
        Self(Arc::from("stdio"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The network an address is keyed by, with its length: an IPv4 (or IPv4-mapped) address
/// whole (32), an IPv6 address with every bit past `v6_prefix_len` cleared (the length is
/// kept within 1 to 128, as the configuration's check does).
fn network_of(ip: std::net::IpAddr, v6_prefix_len: u8) -> (std::net::IpAddr, u8) {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => (std::net::IpAddr::V4(v4), 32),
        std::net::IpAddr::V6(v6) => {
            let len = v6_prefix_len.clamp(1, 128);
            let mask = u128::MAX << (128 - u32::from(len));
            let net = std::net::Ipv6Addr::from(u128::from(v6) & mask);
            (std::net::IpAddr::V6(net), len)
        }
    }
}

/// The limit a request exceeded, with its configured value (for the error's `data`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exceeded {
    /// `limits.rate`.
    Rate(RateLimit),
    /// `limits.tools.<name>`.
    Tool(String, RateLimit),
    /// `limits.max_inflight_per_key`.
    InflightPerKey(usize),
    /// `limits.max_sessions_per_key`.
    SessionsPerKey(usize),
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Over a limit: retry after this long.
    Over {
        which: Exceeded,
        retry_after: Duration,
    },
    /// The shared counters did not answer and `limits.on_store_error` is `closed`.
    StoreUnavailable,
}

impl Exceeded {
    /// What the JSON-RPC error's `data` says about the limit.
    pub fn describe(&self) -> Value {
        let rate = |r: &RateLimit| json!({"requests": r.requests, "windowMs": r.window_ms, "burst": r.burst()});
        match self {
            Self::Rate(r) => json!({"limit": "rate", "rate": rate(r)}),
            Self::Tool(name, r) => json!({"limit": "toolRate", "tool": name, "rate": rate(r)}),
            Self::InflightPerKey(max) => {
                json!({"limit": "inflightPerKey", "maxInflightPerKey": max})
            }
            Self::SessionsPerKey(max) => {
                json!({"limit": "sessionsPerKey", "maxSessionsPerKey": max})
            }
        }
    }
}

/// How long a caller refused a session should wait: sessions end by `DELETE` or idle expiry,
/// not within seconds.
const SESSION_RETRY_AFTER: Duration = Duration::from_secs(60);

/// One rule a check applies: its name for refusals, and its rate.
#[derive(Clone)]
struct Rule {
    which: Exceeded,
    /// The key suffix it is counted under.
    key_suffix: String,
    rate: RateLimit,
}

/// The emission interval and burst tolerance of a rate, in microseconds (GCRA's `T` and
/// `T * burst`).
fn gcra_params(rate: &RateLimit) -> (u64, u64) {
    let interval = (rate.window_ms * 1000 / rate.requests).max(1);
    (interval, interval * rate.burst())
}

/// Where the counters live.
enum Store {
    Memory(memory::MemoryLimits),
    #[cfg(feature = "redis")]
    Redis(redis::RedisLimits),
}

/// The limits of one server.
pub struct Limits {
    cfg: LimitsConfig,
    store: Store,
    /// Sessions per key held by this process (without Redis).
    sessions: Places,
}

impl Limits {
    /// Counted in this process's memory.
    pub fn in_memory(cfg: &LimitsConfig) -> Self {
        Self::with(cfg, Store::Memory(memory::MemoryLimits::default()))
    }

    /// Counted in Redis, shared by every instance using it; `instance` names this instance's
    /// places in flight, renewed by a task started with the first one and stopped by `stop`.
    #[cfg(feature = "redis")]
    pub fn in_redis(
        cfg: &LimitsConfig,
        conn: RedisConn,
        instance: &str,
        stop: tokio_util::sync::CancellationToken,
    ) -> Self {
        Self::with(
            cfg,
            Store::Redis(redis::RedisLimits::new(conn, cfg, instance, stop)),
        )
    }

    fn with(cfg: &LimitsConfig, store: Store) -> Self {
        Self {
            cfg: cfg.clone(),
            store,
            sessions: Places::new(
                cfg.max_sessions_per_key.max(1),
                usize::MAX,
                Budget::new(usize::MAX),
            ),
        }
    }

    /// Takes a place for a new session of `key` under `limits.max_sessions_per_key`: in this
    /// process without Redis, across the fleet with it (one script: a per-key count of
    /// sessions by when they stop counting, `ttl_ms` from now, trimmed on every check). The
    /// place is kept by the session (memory: given back when dropped) or expires with its
    /// record (Redis: the [`Place`] holds nothing);
    /// [`Limits::end_session`] gives it back early. When Redis does not answer,
    /// `limits.on_store_error` decides, as for every limit.
    // Without the `redis` feature the place is only in memory: `ttl_ms` is Redis's.
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub async fn admit_session(&self, key: &LimitKey, ttl_ms: u64) -> Result<Place, Refusal> {
        let max = self.cfg.max_sessions_per_key;
        if max == 0 {
            return Ok(Place::none());
        }
        let over = || Refusal::Over {
            which: Exceeded::SessionsPerKey(max),
            retry_after: SESSION_RETRY_AFTER,
        };
        match &self.store {
            Store::Memory(_) => self.sessions.try_take(key, 0).map_err(|_| over()),
            #[cfg(feature = "redis")]
            Store::Redis(r) => match r.admit_session(key, max, ttl_ms).await {
                Ok(true) => Ok(Place::none()),
                Ok(false) => Err(over()),
                Err(e) => match self.cfg.on_store_error {
                    OnStoreError::Open => {
                        r.warn_open(&e);
                        Ok(Place::none())
                    }
                    OnStoreError::Closed => Err(Refusal::StoreUnavailable),
                },
            },
        }
    }

    /// Gives back the place under `key` of a session of lifetime `ttl_ms` admitted at
    /// `admitted_ms` (Unix ms; it ended). Best effort in Redis: a place not given back stops
    /// counting when the session's record would have expired.
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub async fn end_session(&self, key: &LimitKey, admitted_ms: u64, ttl_ms: u64) {
        if self.cfg.max_sessions_per_key == 0 {
            return;
        }
        match &self.store {
            // Kept by the session, given back when it drops.
            Store::Memory(_) => {}
            #[cfg(feature = "redis")]
            Store::Redis(r) => r.end_session(key, admitted_ms, ttl_ms).await,
        }
    }

    /// Whether any limit besides the per-session one is configured (no check at all otherwise).
    pub fn is_on(&self) -> bool {
        self.cfg.rate.is_some()
            || !self.cfg.tools.is_empty()
            || self.cfg.max_inflight_per_key.is_some()
    }

    /// Whether `tools/call` of `tool` has a limit of its own (so callers parse the name only
    /// when it matters).
    pub fn limits_tools(&self) -> bool {
        !self.cfg.tools.is_empty()
    }

    /// Admits one request of `key` (a `tools/call` of `tool`, when it is one), or says why not.
    /// The [`Place`] holds its place in flight until dropped.
    pub async fn admit(&self, key: &LimitKey, tool: Option<&str>) -> Result<Place, Refusal> {
        if !self.is_on() {
            return Ok(Place::none());
        }
        let mut rules = Vec::with_capacity(2);
        if let Some(rate) = self.cfg.rate {
            rules.push(Rule {
                which: Exceeded::Rate(rate),
                key_suffix: "rate".into(),
                rate,
            });
        }
        if let Some(name) = tool
            && let Some(rate) = self.cfg.tools.get(name)
        {
            rules.push(Rule {
                which: Exceeded::Tool(name.to_string(), *rate),
                key_suffix: format!("tool:{name}"),
                rate: *rate,
            });
        }
        let max_inflight = self.cfg.max_inflight_per_key;
        match &self.store {
            Store::Memory(m) => m.admit(key, &rules, max_inflight),
            #[cfg(feature = "redis")]
            Store::Redis(r) => match r.admit(key, &rules, max_inflight).await {
                Ok(verdict) => verdict,
                Err(e) => match self.cfg.on_store_error {
                    OnStoreError::Open => {
                        r.warn_open(&e);
                        Ok(Place::none())
                    }
                    OnStoreError::Closed => {
                        tracing::warn!(error = %e, "refused a request: the rate-limit store cannot be reached (limits.on_store_error = closed)");
                        Err(Refusal::StoreUnavailable)
                    }
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn key(ip: &str, len: u8) -> String {
        LimitKey::address(ip.parse::<IpAddr>().unwrap(), len)
            .as_str()
            .to_string()
    }

    /// Two addresses of one /64 are one key at the default length (a client rotating its
    /// addresses keeps its limits); another /64 is another key; 128 keys each address.
    #[test]
    fn an_ipv6_client_is_keyed_by_its_network() {
        let a = key("2001:db8:1:2::1", 64);
        assert_eq!(a, "addr:2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:2:ffff:ffff:ffff:ffff", 64), a);
        assert_ne!(key("2001:db8:1:3::1", 64), a);
        // Alternating keeps answering right (the thread's last key is per network).
        assert_eq!(key("2001:db8:1:2::1", 64), a);
        assert_eq!(key("2001:db8:1:2::1", 128), "addr:2001:db8:1:2::1/128");
        assert_ne!(key("2001:db8:1:2::2", 128), key("2001:db8:1:2::1", 128));
        assert_eq!(key("2001:db8:1:2::1", 48), "addr:2001:db8:1::/48");
        assert_eq!(key("ffff::1", 1), "addr:8000::/1");
        // Out of range (the configuration refuses it): kept within 1 to 128.
        assert_eq!(key("ffff::1", 0), "addr:8000::/1");
    }

    /// `::ffff:1.2.3.4` is `1.2.3.4`, whatever the IPv6 length; IPv4 is keyed whole.
    #[test]
    fn an_ipv4_mapped_address_is_its_ipv4_key() {
        assert_eq!(key("::ffff:192.0.2.7", 64), "addr:192.0.2.7");
        assert_eq!(key("::ffff:192.0.2.7", 64), key("192.0.2.7", 64));
        assert_ne!(key("192.0.2.7", 1), key("192.0.2.8", 1));
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::testing::prop_config(256))]

        /// Any two IPv6 addresses agreeing on their first `len` bits are one key; changing
        /// a bit within those makes another; an IPv4 address and its mapped form are one.
        #[test]
        fn addresses_of_one_network_and_only_they_share_a_key(
            a in any::<u128>(),
            b in any::<u128>(),
            len in 1u8..=128,
            bit in 0u32..128,
            v4 in any::<u32>(),
        ) {
            let v6 = |n: u128| IpAddr::V6(std::net::Ipv6Addr::from(n));
            // `b` with `a`'s first `len` bits (keeping `a` unless `len` is 128).
            let host_mask = u128::MAX.checked_shr(u32::from(len)).unwrap_or(0);
            let same_net = (a & !host_mask) | (b & host_mask);
            // Skip IPv4-mapped networks (they are keyed as IPv4).
            prop_assume!(v6(a).to_canonical().is_ipv6() && v6(same_net).to_canonical().is_ipv6());
            let key = |ip: IpAddr| LimitKey::address(ip, len).as_str().to_string();
            prop_assert_eq!(key(v6(a)), key(v6(same_net)));
            let flipped = a ^ (1u128 << (127 - (bit % u32::from(len))));
            prop_assume!(v6(flipped).to_canonical().is_ipv6());
            prop_assert_ne!(key(v6(a)), key(v6(flipped)));
            let ip4 = std::net::Ipv4Addr::from(v4);
            prop_assert_eq!(key(IpAddr::V4(ip4)), key(IpAddr::V6(ip4.to_ipv6_mapped())));
        }
    }
}
