//! Who a request counts against for the limits: **the one place a principal becomes a key**
//! ([`of`]'s `principal`, when authorization identifies the caller); without one, the client's
//! address.
//!
//! The address is the connection's peer ([`peer_of`]: the listener serves each request within
//! [`with_peer`]), unless `limits.client_address_header` names the header the load balancer reports it in:
//! `X-Forwarded-For` gives the rightmost hop that is not one of `limits.trusted_proxies` (every
//! hop to its right was added by a proxy we trust, and the one it names is the first we
//! cannot), any other header (`X-Real-IP`) its one address. With `trusted_proxies` set, the
//! header is believed only from a peer in that list. A relayed request carries the relaying
//! instance's peer in a signed header, which the holder's relay guard turns back into its
//! [`PeerAddr`], so both instances find the same key.
//!
//! Every address is read in its canonical form: an IPv4-mapped IPv6 address (`::ffff:1.2.3.4`,
//! how a dual-stack listener or proxy sees an IPv4 client) is the IPv4 address it maps, for
//! the peer, for each hop of the header and for the match against `trusted_proxies`, so one
//! client is one key, and a proxy listed as `127.0.0.1` is trusted however its address comes.
//! An IPv6 client counts as its network of `limits.ipv6_prefix_len` bits ([`LimitKey::address`]).
//!
//! A request counted by its peer's address that names a client in `X-Forwarded-For` or
//! `X-Real-IP` the server does not believe (no header configured, or a peer not in
//! `trusted_proxies`) is the sign of a balancer left unconfigured: every client behind it
//! shares its key (`limits.max_sessions_per_key` sessions for all of them) and one limit set in
//! Redis. Each such request is counted (`fleetmcp_untrusted_forwarded_headers_total`), and the
//! first is logged, once per server, naming what to set ([`unbelieved`]).

use std::net::{IpAddr, SocketAddr};

use http::request::Parts;
use http::{HeaderMap, HeaderName};
use ipnet::IpNet;

use super::authorize;
use crate::app::App;
use crate::auth::Principal;
use crate::limits::LimitKey;

/// A request's peer address as an extension: a relayed request's client (the holder's relay
/// guard puts it there), which wins over the connection's peer ([`peer_of`]).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

tokio::task_local! {
    /// The peer of the connection whose request is being served ([`with_peer`]).
    static CONNECTION_PEER: SocketAddr;
}

/// `answer`, the answer to a request that came on a connection from `peer`, made with `peer`
/// as the connection's peer ([`peer_of`]). The listener serves every request so, rather than
/// putting a [`PeerAddr`] on it: the first extension a request gets costs three allocations
/// (the extension map, its table, the boxed value), most of what a call's extensions cost
/// (issue 40).
pub fn with_peer<F: Future>(peer: SocketAddr, answer: F) -> impl Future<Output = F::Output> {
    CONNECTION_PEER.scope(peer, answer)
}

/// The peer address of the request with `extensions`: its [`PeerAddr`] (a relayed request's
/// client), else the connection's peer, when served by the listener ([`with_peer`]).
pub(super) fn peer_of(extensions: &http::Extensions) -> Option<SocketAddr> {
    extensions
        .get::<PeerAddr>()
        .map(|p| p.0)
        .or_else(|| CONNECTION_PEER.try_with(|p| *p).ok())
}

/// The header a relayed request carries its client's peer address in (signed with the hop).
pub const RELAYED_PEER_HEADER: &str = "x-fleetmcp-relayed-peer";

pub(super) use crate::transport::core::Client;

/// How HTTP finds a request's [`Client`]: its principal from the request's extensions, where
/// [`authorize`] put it, and its key ([`of`]). Taken once in front of a route (its extractor
/// is in `edge.rs`).
impl Client {
    /// The client of the request with head `parts`.
    pub(super) fn of(app: &App, parts: &Parts) -> Self {
        let principal = authorize::principal(&parts.extensions);
        let key = of(app, parts, principal.as_deref().map(Principal::key));
        Self { principal, key }
    }

    /// Its principal's fingerprint, what a session records of who made it.
    pub(super) fn fingerprint(&self) -> Option<&str> {
        authorize::fingerprint(&self.principal)
    }
}

/// The key `parts` counts against: `principal` when authorization identified one, else the
/// client's address.
pub(super) fn of(app: &App, parts: &Parts, principal: Option<&str>) -> LimitKey {
    if let Some(p) = principal {
        return LimitKey::principal(p);
    }
    // An embedding app served by axum instead of our listener: its `ConnectInfo`, when it
    // serves with `into_make_service_with_connect_info`.
    let peer = peer_of(&parts.extensions).map(|p| p.ip()).or_else(|| {
        parts
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    });
    let cfg = &app.config().limits;
    let trusted = app.trusted_proxies();
    let header = cfg.client_address_header.as_deref();
    if let Some((seen, why)) = unbelieved(&parts.headers, peer, header, trusted) {
        app.meters().untrusted_forwarded();
        if app.first_forwarding_warning() {
            warn_unbelieved(seen, why, peer);
        }
    }
    let addr = client_address(&parts.headers, peer, header, trusted);
    // No peer and no header (an embedding app served without connect info): every caller
    // shares one key.
    LimitKey::address(
        addr.unwrap_or(IpAddr::from([0, 0, 0, 0])),
        cfg.ipv6_prefix_len,
    )
}

/// The client's address: from `header` when configured, present and believed, else the peer.
/// `trusted` comes canonical (`LimitsConfig::trusted_nets`: IPv4-mapped ranges as IPv4); the
/// peer and the header's hops are made so here, so a mapped address matches its IPv4 proxy
/// and counts under its IPv4 key.
fn client_address(
    headers: &HeaderMap,
    peer: Option<IpAddr>,
    header: Option<&str>,
    trusted: &[IpNet],
) -> Option<IpAddr> {
    let peer = peer.map(|ip| ip.to_canonical());
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    let believed = match peer {
        Some(p) => trusted.is_empty() || is_trusted(&p),
        None => true,
    };
    let from_header = header.filter(|_| believed).and_then(|name| {
        // Every value of the header, in order, as one list of hops.
        let hops: Vec<IpAddr> = headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(parse_hop)
            .collect();
        hops.iter()
            .rev()
            .find(|ip| !is_trusted(ip))
            .or(hops.first())
            .copied()
    });
    from_header.or(peer)
}

/// How many headers [`FORWARDING`] names.
const FORWARDING_HEADERS: usize = 2;

/// The headers a balancer names the client in, parsed once (not per request).
const FORWARDING: [(HeaderName, &str); FORWARDING_HEADERS] = [
    (
        HeaderName::from_static("x-forwarded-for"),
        "X-Forwarded-For",
    ),
    (HeaderName::from_static("x-real-ip"), "X-Real-IP"),
];

/// Why a forwarding header was not believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unbelieved {
    /// `limits.client_address_header` is unset.
    NoHeaderSet,
    /// The peer is not in `limits.trusted_proxies`.
    PeerNotTrusted,
}

/// The forwarding header (`X-Forwarded-For`, `X-Real-IP`) a request counted by address carries
/// without being believed, and why; `None` when it carries neither or is believed. A believed
/// peer costs no header lookup; the others two (a hash each).
fn unbelieved(
    headers: &HeaderMap,
    peer: Option<IpAddr>,
    header: Option<&str>,
    trusted: &[IpNet],
) -> Option<(&'static str, Unbelieved)> {
    let why = match (header, peer) {
        (None, _) => Unbelieved::NoHeaderSet,
        // Set, no list: believed from anyone (the start warns about that instead).
        (Some(_), _) if trusted.is_empty() => return None,
        (Some(_), Some(p)) if !trusted.iter().any(|n| n.contains(&p.to_canonical())) => {
            Unbelieved::PeerNotTrusted
        }
        (Some(_), _) => return None,
    };
    // One pass over the names the request has (a half-dozen), not a hashed lookup of each
    // forwarding header, which nearly every request lacks (issue 40: 320 instructions a call).
    let mut present = [false; FORWARDING_HEADERS];
    for name in headers.keys() {
        for (seen, (forwarding, _)) in present.iter_mut().zip(&FORWARDING) {
            *seen |= name == forwarding;
        }
    }
    FORWARDING
        .iter()
        .zip(present)
        .find(|(_, seen)| *seen)
        .map(|((_, shown), _)| (*shown, why))
}

/// The once-per-server warning: what was seen, and what to set.
fn warn_unbelieved(seen: &str, why: Unbelieved, peer: Option<IpAddr>) {
    let peer = peer.map_or_else(
        || "an unknown peer".to_string(),
        |p| p.to_canonical().to_string(),
    );
    match why {
        Unbelieved::NoHeaderSet => tracing::warn!(
            peer = %peer,
            header = seen,
            "requests from {peer} carry {seen}, but FLEETMCP_CLIENT_ADDRESS_HEADER (limits.client_address_header) is unset, so their limits count {peer} itself: behind a load balancer every client shares one key (limits.max_sessions_per_key sessions for all). Set FLEETMCP_CLIENT_ADDRESS_HEADER=x-forwarded-for and FLEETMCP_TRUSTED_PROXIES to the balancers' addresses (here {peer}). Logged once; every such request counts in fleetmcp_untrusted_forwarded_headers_total"
        ),
        Unbelieved::PeerNotTrusted => tracing::warn!(
            peer = %peer,
            header = seen,
            "requests from {peer} carry {seen}, but {peer} is not in FLEETMCP_TRUSTED_PROXIES (limits.trusted_proxies), so the header is ignored and their limits count {peer} itself: if {peer} is a load balancer, every client behind it shares one key. Add its address or network to FLEETMCP_TRUSTED_PROXIES. Logged once; every such request counts in fleetmcp_untrusted_forwarded_headers_total"
        ),
    }
}

/// One hop: an address, maybe with a port (`1.2.3.4:5`, `[::1]:5`), in canonical form
/// (`::ffff:1.2.3.4` is `1.2.3.4`).
fn parse_hop(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &'static str, values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(name, v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn without_a_configured_header_the_peer_counts() {
        let h = headers("x-forwarded-for", &["9.9.9.9"]);
        assert_eq!(
            client_address(&h, Some(ip("10.0.0.5")), None, &[]),
            Some(ip("10.0.0.5"))
        );
    }

    #[test]
    fn x_forwarded_for_gives_its_rightmost_untrusted_hop() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        // The client made up the first hop; the balancer appended the real one.
        let h = headers(
            "x-forwarded-for",
            &["6.6.6.6, 203.0.113.7", "10.0.0.2:8080"],
        );
        let got = client_address(&h, Some(ip("10.0.0.1")), Some("x-forwarded-for"), &trusted);
        assert_eq!(got, Some(ip("203.0.113.7")));
        // All hops trusted: the first one.
        let h = headers("x-forwarded-for", &["10.1.1.1, 10.2.2.2"]);
        let got = client_address(&h, Some(ip("10.0.0.1")), Some("x-forwarded-for"), &trusted);
        assert_eq!(got, Some(ip("10.1.1.1")));
    }

    #[test]
    fn the_header_is_believed_only_from_a_trusted_peer_when_proxies_are_listed() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let h = headers("x-real-ip", &["198.51.100.4"]);
        let from_lb = client_address(&h, Some(ip("10.0.0.1")), Some("x-real-ip"), &trusted);
        assert_eq!(from_lb, Some(ip("198.51.100.4")));
        let direct = client_address(&h, Some(ip("192.0.2.9")), Some("x-real-ip"), &trusted);
        assert_eq!(direct, Some(ip("192.0.2.9")));
        // No list: the operator says only the balancer reaches the instances.
        let any = client_address(&h, Some(ip("192.0.2.9")), Some("x-real-ip"), &[]);
        assert_eq!(any, Some(ip("198.51.100.4")));
        // A header that is not an address: the peer.
        let h = headers("x-real-ip", &["not an address"]);
        let bad = client_address(&h, Some(ip("10.0.0.1")), Some("x-real-ip"), &trusted);
        assert_eq!(bad, Some(ip("10.0.0.1")));
    }

    /// Forwarding headers not believed are reported when no header is set, or the peer is not
    /// a listed proxy; never when the header is believed, or the request has none.
    #[test]
    fn a_forwarding_header_not_believed_is_reported() {
        let trusted: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        let xff = headers("x-forwarded-for", &["203.0.113.7"]);
        let real = headers("x-real-ip", &["203.0.113.7"]);
        let none = headers("accept", &["*/*"]);
        let lb = Some(ip("127.0.0.1"));
        let other = Some(ip("192.0.2.9"));
        let h = Some("x-forwarded-for");
        // No header configured: any peer's forwarding header is ignored.
        for peer in [lb, other, None] {
            assert_eq!(
                unbelieved(&xff, peer, None, &trusted),
                Some(("X-Forwarded-For", Unbelieved::NoHeaderSet))
            );
            assert_eq!(
                unbelieved(&real, peer, None, &[]),
                Some(("X-Real-IP", Unbelieved::NoHeaderSet))
            );
            assert_eq!(unbelieved(&none, peer, None, &trusted), None);
        }
        // Configured, from a listed proxy (its IPv4-mapped form too): believed.
        assert_eq!(unbelieved(&xff, lb, h, &trusted), None);
        assert_eq!(
            unbelieved(&xff, Some(ip("::ffff:127.0.0.1")), h, &trusted),
            None
        );
        // Configured, from a peer not listed: ignored, whichever header it is.
        assert_eq!(
            unbelieved(&xff, other, h, &trusted),
            Some(("X-Forwarded-For", Unbelieved::PeerNotTrusted))
        );
        assert_eq!(
            unbelieved(&real, other, h, &trusted),
            Some(("X-Real-IP", Unbelieved::PeerNotTrusted))
        );
        assert_eq!(unbelieved(&none, other, h, &trusted), None);
        // Configured with no list: believed from anyone (the start warns instead).
        assert_eq!(unbelieved(&xff, other, h, &[]), None);
        // Both present, in either order: `X-Forwarded-For` is the one named.
        let mut both = real.clone();
        both.append("x-forwarded-for", "203.0.113.7".parse().unwrap());
        assert_eq!(
            unbelieved(&both, other, None, &[]),
            Some(("X-Forwarded-For", Unbelieved::NoHeaderSet))
        );
    }

    /// A dual-stack listener sees an IPv4 proxy as `::ffff:127.0.0.1`: still the proxy listed
    /// as `127.0.0.1` (its header believed, its hop skipped), and the other way round; a
    /// mapped client address is its IPv4 one.
    #[test]
    fn an_ipv4_mapped_address_is_its_ipv4_address() {
        let limits = |proxies: &[&str]| crate::config::LimitsConfig {
            trusted_proxies: proxies.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        };
        let xff = Some("x-forwarded-for");
        for listed in ["127.0.0.1", "::ffff:127.0.0.1", "::ffff:127.0.0.0/104"] {
            let trusted = limits(&[listed]).trusted_nets();
            let h = headers("x-forwarded-for", &["2001:db8::7, ::ffff:127.0.0.1"]);
            for peer in ["::ffff:127.0.0.1", "127.0.0.1"] {
                let got = client_address(&h, Some(ip(peer)), xff, &trusted);
                assert_eq!(got, Some(ip("2001:db8::7")), "{listed} from {peer}");
            }
            // A mapped peer not in the list is not believed, and counts as its IPv4 address.
            let got = client_address(&h, Some(ip("::ffff:192.0.2.1")), xff, &trusted);
            assert_eq!(got, Some(ip("192.0.2.1")), "{listed}");
        }
        let trusted = limits(&["10.0.0.0/8"]).trusted_nets();
        let h = headers("x-forwarded-for", &["::ffff:198.51.100.4"]);
        let got = client_address(&h, Some(ip("10.0.0.1")), xff, &trusted);
        assert_eq!(got, Some(ip("198.51.100.4")));
        let got = client_address(&h, Some(ip("::ffff:203.0.113.9")), None, &trusted);
        assert_eq!(got, Some(ip("203.0.113.9")));
    }
}
