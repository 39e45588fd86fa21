//! DNS-rebinding protection: `Host` and `Origin` must name this server.
//!
//! A browser page on `evil.example` whose name now resolves to 127.0.0.1 sends its own host
//! name in both headers; a loopback-bound server answers such requests `403`. A server bound
//! to every interface sits behind load balancers that send any `Host`, so there only `Origin`
//! is checked unless `http.allowed_hosts` lists names. A `Host` is a name and an optional port,
//! nothing else: `[::1]evil.example` names no loopback host. A relayed request carries its
//! client's `Host` (restored by the relay guard), so the holder judges what the client sent.
//! A request in absolute form (`POST http://evil.example/mcp`) names its host in the target
//! too, and RFC 9112 3.2.2 makes that name the one that counts: it is judged like `Host`, and
//! both must pass.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::{HeaderMap, StatusCode, Uri};

use super::request_headers::only;
use super::{Endpoint, respond};

/// The guard as a layer of its own, for the routes outside the MCP ones (`/metrics`).
pub(super) async fn check(State(ep): State<Arc<Endpoint>>, req: Request, next: Next) -> Response {
    match admit(&ep, req.uri(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(refused) => refused,
    }
}

/// `403` for a request whose `Host` (or, in absolute form, target), or `Origin`, does not
/// name this server. The MCP routes run it in their one layer (`mod.rs`), the other guarded
/// routes through [`check`].
pub(super) fn admit(ep: &Endpoint, uri: &Uri, headers: &HeaderMap) -> Result<(), Response> {
    let cfg = ep.app.config();
    let check_host = !cfg.http.allowed_hosts.is_empty() || cfg.effective_bind().is_loopback();
    if check_host {
        // The target's authority first (absolute form only; an origin-form target has none),
        // then `Host`. A value that is not one visible-ASCII line cannot be compared: refused,
        // like a foreign one (fail closed).
        let target = uri.authority().map(|a| Some(a.as_str()));
        for host in [target, single_value(headers, http::header::HOST)]
            .into_iter()
            .flatten()
        {
            if !host.is_some_and(|h| host_allowed(h, &cfg.http.allowed_hosts)) {
                let shown = host.unwrap_or("<malformed>");
                tracing::warn!(
                    host = shown,
                    "rejected a request for a foreign Host (DNS rebinding protection)"
                );
                return Err(forbidden(format!("Forbidden: Host {shown} is not allowed")));
            }
        }
    }
    if let Some(origin) = single_value(headers, http::header::ORIGIN) {
        let allowed = origin.is_some_and(|o| origin_allowed(o, &cfg.http.allowed_origins));
        if !allowed {
            let shown = origin.unwrap_or("<malformed>");
            tracing::warn!(origin = shown, "rejected a request from a foreign Origin");
            return Err(forbidden(format!(
                "Forbidden: Origin {shown} is not allowed"
            )));
        }
    }
    Ok(())
}

fn forbidden(message: String) -> Response {
    respond::rpc_error(
        StatusCode::FORBIDDEN,
        None,
        &crate::protocol::errors::server(message),
    )
}

/// The header's value when present: `Some(Some(v))` for one value of visible ASCII only
/// (0x21 to 0x7E), `Some(None)` for anything else (bytes outside that range, spaces, or the
/// header repeated, where which value counts is ambiguous), `None` when absent. Borrowed: this
/// runs on every request (a `String` per call before issue 23).
fn single_value(headers: &HeaderMap, name: http::HeaderName) -> Option<Option<&str>> {
    let Some(first) = only(headers, name)? else {
        return Some(None);
    };
    // `to_str` passes visible ASCII, spaces and tabs (without a second check of the bytes as
    // UTF-8, which cost 150 instructions a request: issue 40); spaces and tabs are refused here.
    let visible = first
        .to_str()
        .ok()
        .filter(|v| !v.is_empty() && !v.bytes().any(|b| b == b' ' || b == b'\t'));
    Some(visible)
}

/// The host name without its port (`[::1]:3000` → `[::1]`); `None` when what follows the name
/// is not a port (`[::1]evil.example`, `localhost:3000:x`, an unclosed `[`): such a value names
/// no host, and comparing only its start would let a foreign one pass as loopback.
fn host_name(host: &str) -> Option<&str> {
    // Found byte by byte: a few bytes, shorter than the set-up of `str::find`'s search (issue
    // 40). Both bytes are ASCII, so both sides are on character boundaries.
    let at = |sep: u8| host.bytes().position(|b| b == sep);
    let (name, rest) = if host.starts_with('[') {
        host.split_at(at(b']')? + 1)
    } else {
        host.split_at(at(b':').unwrap_or(host.len()))
    };
    let port_ok = rest.is_empty()
        || rest
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    port_ok.then_some(name)
}

fn is_loopback_name(name: &str) -> bool {
    matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let Some(name) = host_name(host) else {
        return false;
    };
    is_loopback_name(name)
        || allowed
            .iter()
            .any(|a| a == "*" || a.eq_ignore_ascii_case(name))
}

fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    if allowed.iter().any(|a| a == "*" || a == origin) {
        return true;
    }
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    rest.and_then(host_name).is_some_and(is_loopback_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_pass_and_foreign_ones_do_not() {
        assert!(host_allowed("localhost:3000", &[]));
        assert!(host_allowed("127.0.0.1", &[]));
        assert!(host_allowed("[::1]:8080", &[]));
        assert!(!host_allowed("evil.example.com", &[]));
        assert!(!host_allowed("localhost.evil.com:3000", &[]));
        // What follows the name must be a port: `[::1]` is not the start of any name.
        for foreign in [
            "[::1]evil.example",
            "[::1]evil.example:3000",
            "[::1].evil.example",
            "[::1",
            "localhost:3000:evil.example",
            "localhost:evil.example",
            "127.0.0.1:80@evil.example",
        ] {
            assert!(!host_allowed(foreign, &[]), "{foreign}");
            assert!(
                !origin_allowed(&format!("http://{foreign}"), &[]),
                "{foreign}"
            );
        }
        assert!(!host_allowed("[::1]evil.example", &["[::1]".into()]));
        assert!(host_allowed("mcp.internal:80", &["mcp.internal".into()]));
        assert!(origin_allowed("http://localhost:5173", &[]));
        assert!(!origin_allowed("http://evil.example.com", &[]));
        assert!(!origin_allowed("null", &[]));
        assert!(origin_allowed(
            "https://app.example",
            &["https://app.example".into()]
        ));
    }

    #[test]
    fn malformed_or_repeated_values_are_not_read() {
        let mut h = HeaderMap::new();
        let name = http::header::HOST;
        assert_eq!(single_value(&h, name.clone()), None);
        h.insert(
            name.clone(),
            http::HeaderValue::from_static("localhost:3000"),
        );
        assert_eq!(single_value(&h, name.clone()), Some(Some("localhost:3000")));
        let bad = http::HeaderValue::from_bytes(b"evil\xff.example").expect("obs-text is allowed");
        h.insert(name.clone(), bad);
        assert_eq!(single_value(&h, name.clone()), Some(None));
        h.insert(name.clone(), http::HeaderValue::from_static("local host"));
        assert_eq!(single_value(&h, name.clone()), Some(None));
        h.insert(name.clone(), http::HeaderValue::from_static("localhost"));
        h.append(name.clone(), http::HeaderValue::from_static("evil.example"));
        assert_eq!(single_value(&h, name), Some(None));
    }
}

/// Property tests of `Host`/`Origin`: any header bytes are read or refused without a panic,
/// and with no allow-list only loopback names pass.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::prop_config as config;

    /// Host names a browser could put in `Host`/`Origin`: loopback ones, look-alikes, others.
    fn host() -> impl Strategy<Value = (String, bool)> {
        prop_oneof![
            prop::sample::select(vec!["localhost", "127.0.0.1", "[::1]"])
                .prop_map(|h| (h.to_string(), true)),
            prop::sample::select(vec![
                "localhost.evil.example",
                "127.0.0.1.nip.io",
                "evil.example",
                "[::2]",
                "127.0.0.2",
                "locaLhost",
                "0.0.0.0",
            ])
            .prop_map(|h| (h.to_string(), false)),
            "[a-z0-9.-]{1,20}".prop_map(|h| {
                let loopback = matches!(h.as_str(), "localhost" | "127.0.0.1");
                (h, loopback)
            }),
        ]
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// A value is read only when it is one non-empty run of visible ASCII, and then exactly.
        #[test]
        fn single_value_reads_only_one_visible_value(
            values in prop::collection::vec(
                prop::collection::vec(prop_oneof![0x20u8..=0x7e, Just(b'\t'), 0x80u8..=0xff], 0..12),
                0..3,
            ),
        ) {
            let mut h = HeaderMap::new();
            for v in &values {
                h.append(http::header::HOST, http::HeaderValue::from_bytes(v).expect("valid header bytes"));
            }
            let got = single_value(&h, http::header::HOST);
            match values.as_slice() {
                [] => prop_assert_eq!(got, None),
                [one] => {
                    let visible = !one.is_empty() && one.iter().all(|b| (0x21..=0x7e).contains(b));
                    let want = visible.then(|| String::from_utf8(one.clone()).expect("ASCII"));
                    prop_assert_eq!(got, Some(want.as_deref()));
                }
                _ => prop_assert_eq!(got, Some(None)),
            }
        }

        /// With no allow-list, a Host passes exactly when its name is a loopback one, whatever
        /// port follows; the same for an http(s) Origin.
        #[test]
        fn only_loopback_names_pass_without_an_allow_list(
            (name, loopback) in host(),
            port in prop::option::of(any::<u16>()),
            https in any::<bool>(),
        ) {
            let hostport = match port {
                Some(p) => format!("{name}:{p}"),
                None => name.clone(),
            };
            prop_assert_eq!(host_allowed(&hostport, &[]), loopback, "{}", hostport);
            let scheme = if https { "https" } else { "http" };
            let origin = format!("{scheme}://{hostport}");
            prop_assert_eq!(origin_allowed(&origin, &[]), loopback, "{}", origin);
            // Another scheme, or no scheme, is never a loopback origin.
            let file = format!("file://{hostport}");
            prop_assert!(!origin_allowed(&file, &[]));
            prop_assert!(!origin_allowed(&hostport, &[]));
            // A listed name passes, case-insensitively for Host, exactly for Origin.
            let listed = vec![name.to_ascii_uppercase()];
            prop_assert!(host_allowed(&hostport, &listed));
            prop_assert!(origin_allowed(&origin, std::slice::from_ref(&origin)));
        }

        /// Arbitrary text never panics (the name split works on any bytes).
        #[test]
        fn arbitrary_text_never_panics(text in any::<String>(), list in prop::collection::vec(".{0,8}", 0..2)) {
            if let Some(name) = host_name(&text) {
                prop_assert!(text.starts_with(name));
            }
            let _ = host_allowed(&text, &list);
            let _ = origin_allowed(&text, &list);
        }
    }
}
