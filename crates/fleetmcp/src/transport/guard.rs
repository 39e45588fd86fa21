//! DNS-rebinding protection: `Host` and `Origin` must name this server.
//!
//! A browser page on `evil.example` whose name now resolves to 127.0.0.1 sends its own host
//! name in both headers; a loopback-bound server answers such requests `403`. A server bound
//! to every interface sits behind load balancers that send any `Host`, so there only `Origin`
//! is checked unless `http.allowed_hosts` lists names.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::StatusCode;

use super::{Endpoint, reply};
use crate::config::BindAddress;

pub(super) async fn check(State(ep): State<Arc<Endpoint>>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let cfg = ep.app.config();
    if let Some(host) = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
    {
        let check_host =
            !cfg.http.allowed_hosts.is_empty() || cfg.effective_bind() == BindAddress::Loopback;
        if check_host && !host_allowed(host, &cfg.http.allowed_hosts) {
            tracing::warn!(
                host,
                "rejected a request for a foreign Host (DNS rebinding protection)"
            );
            return reply::rpc_error(
                StatusCode::FORBIDDEN,
                None,
                &crate::protocol::errors::server(format!("Forbidden: Host {host} is not allowed")),
            );
        }
    }
    if let Some(origin) = headers.get(http::header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, &cfg.http.allowed_origins) {
            tracing::warn!(origin, "rejected a request from a foreign Origin");
            return reply::rpc_error(
                StatusCode::FORBIDDEN,
                None,
                &crate::protocol::errors::server(format!(
                    "Forbidden: Origin {origin} is not allowed"
                )),
            );
        }
    }
    next.run(req).await
}

/// The host name without its port (`[::1]:3000` → `[::1]`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| &host[..h.len() + 1]);
    }
    host.split(':').next().unwrap_or(host)
}

fn is_loopback_name(name: &str) -> bool {
    matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = host_name(host);
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
    rest.is_some_and(|hostport| is_loopback_name(host_name(hostport)))
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
        assert!(host_allowed("mcp.internal:80", &["mcp.internal".into()]));
        assert!(origin_allowed("http://localhost:5173", &[]));
        assert!(!origin_allowed("http://evil.example.com", &[]));
        assert!(!origin_allowed("null", &[]));
        assert!(origin_allowed(
            "https://app.example",
            &["https://app.example".into()]
        ));
    }
}
