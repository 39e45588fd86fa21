//! `[limits]`: fair use, as request rates per key (globally and per tool), requests in flight
//! per session and per key, and how a caller's key is found behind a load balancer. One file
//! because the limits are only as good as the key they count under: the header and proxies
//! that name a client are checked with the rates they key.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid_value};

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
    /// hops are skipped in `X-Forwarded-For`. An IPv4 proxy matches its IPv4-mapped form too
    /// (`127.0.0.1` is the peer `::ffff:127.0.0.1` of a dual-stack listener), and the reverse.
    pub trusted_proxies: Vec<String>,
    /// `FLEETMCP_IPV6_PREFIX_LEN` (1 to 128): an anonymous IPv6 client's key is its address's
    /// network of this length, not the whole address: a client given a /64 (what one host or
    /// one customer line usually gets) holds 2^64 addresses, and rotating among them would
    /// escape every per-key limit. 128 keys each address apart. IPv4 addresses (and
    /// IPv4-mapped IPv6 ones, `::ffff:1.2.3.4`, read as `1.2.3.4`) are keyed whole.
    pub ipv6_prefix_len: u8,
    /// How long a place of `max_inflight_per_key` held by an instance that stopped renewing it
    /// (crashed) lasts in Redis; a live instance renews its places every third of it.
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
            ipv6_prefix_len: 64,
            inflight_lease_ms: 60_000,
            key_prefix: "mcp:limits:".into(),
        }
    }
}

impl LimitsConfig {
    /// `trusted_proxies`, parsed (validated at start, so nothing is dropped here). An
    /// IPv4-mapped range (`::ffff:10.0.0.0/104`) is given as the IPv4 range it maps
    /// (`10.0.0.0/8`): addresses are compared in their canonical form (see
    /// `transport/http/client_key.rs`), where a mapped address is an IPv4 one.
    pub fn trusted_nets(&self) -> Vec<ipnet::IpNet> {
        self.trusted_proxies
            .iter()
            .filter_map(|p| parse_net(p))
            .map(canonical_net)
            .collect()
    }

    pub(super) fn check(&self) -> Result<(), ConfigError> {
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
        if !(1..=128).contains(&self.ipv6_prefix_len) {
            return invalid_value(
                "limits.ipv6_prefix_len",
                self.ipv6_prefix_len.to_string(),
                "must be from 1 to 128 (64: one key per /64 network)",
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

/// An address (`10.0.0.1`) or a range (`10.0.0.0/8`).
fn parse_net(text: &str) -> Option<ipnet::IpNet> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(ipnet::IpNet::from))
}

/// `net` with an IPv4-mapped IPv6 range (`::ffff:0:0/96` and within) given as its IPv4 range;
/// any other range as it is.
fn canonical_net(net: ipnet::IpNet) -> ipnet::IpNet {
    match net {
        ipnet::IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96)
                .map_or(net, |n| ipnet::IpNet::V4(n.trunc())),
            None => net,
        },
        _ => net,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

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

    /// IPv6 clients are keyed by their /64 unless told otherwise; 1 to 128 only.
    #[test]
    fn the_ipv6_prefix_length_is_64_by_default_and_from_1_to_128() {
        assert_eq!(Config::default().limits.ipv6_prefix_len, 64);
        for (value, want) in [("48", 48), ("128", 128), ("1", 1), ("", 64)] {
            let cfg = Config::from_sources(None, [("FLEETMCP_IPV6_PREFIX_LEN", value)]).unwrap();
            assert_eq!(cfg.limits.ipv6_prefix_len, want, "{value:?}");
        }
        for bad in ["0", "129", "256", "/64", "sixty-four"] {
            let e = Config::from_sources(None, [("FLEETMCP_IPV6_PREFIX_LEN", bad)])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("FLEETMCP_IPV6_PREFIX_LEN") || e.contains("limits.ipv6_prefix_len"),
                "{bad}: {e}"
            );
        }
    }

    /// A proxy listed in its IPv4-mapped form is its IPv4 range; other ranges stay as listed.
    #[test]
    fn mapped_trusted_proxies_are_their_ipv4_ranges() {
        let l = LimitsConfig {
            trusted_proxies: ["::ffff:10.1.2.3", "::ffff:10.0.0.0/104", "::/0", "fd00::/8"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        };
        let nets: Vec<String> = l.trusted_nets().iter().map(|n| n.to_string()).collect();
        assert_eq!(nets, ["10.1.2.3/32", "10.0.0.0/8", "::/0", "fd00::/8"]);
    }
}
