//! The relay in distributed mode: a request whose session another live instance holds is sent
//! to that instance over HTTP, at the address its heartbeat advertises, as it was received, and
//! the holder's answer (JSON or an SSE stream of any length) is streamed back as it comes, with
//! the holder's `X-FrontMCP-Machine-Id`.
//!
//! Redis is only the directory (who holds a session, where each instance listens); the request
//! and its answer take one direct hop. One hop at most: a relayed request carries
//! [`RELAYED_BY`], and an instance never relays such a request again. When the holder cannot be
//! reached, the answer is the contract's `503` with `Retry-After` set to the heartbeat lifetime,
//! never a 500 and never a hang. A client that goes away drops the hop, which ends the request
//! on the holder.

use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::response::Response;
use http::{HeaderName, HeaderValue, StatusCode, header};
use serde_json::json;

use super::heartbeat::read_beat;
use crate::redis_conn::RedisConn;
use crate::transport::{Relay, RelayRequest};

/// Marks a relayed request with the instance that relayed it.
pub(super) const RELAYED_BY: &str = "x-fleetmcp-relayed-by";

/// How long connecting to the holder may take before it counts as not answering.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

pub(super) struct HttpRelay {
    redis: RedisConn,
    me: HeaderValue,
    heartbeat_prefix: String,
    ttl_s: u64,
    client: reqwest::Client,
}

impl HttpRelay {
    pub fn new(
        redis: RedisConn,
        me: &str,
        key_prefix: &str,
        heartbeat_ttl_ms: u64,
    ) -> Option<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .no_proxy()
            .build()
            .inspect_err(
                |e| tracing::error!(error = %e, "[HA] the relay's HTTP client could not be built"),
            )
            .ok()?;
        Some(Self {
            redis,
            me: HeaderValue::from_str(me).ok()?,
            heartbeat_prefix: format!("{key_prefix}heartbeat:"),
            ttl_s: heartbeat_ttl_ms.div_ceil(1000),
            client,
        })
    }

    /// The contract's answer when the holder does not answer the relayed request.
    fn unavailable(&self, holder: &str, why: &str) -> Response {
        tracing::warn!(
            owner_node_id = holder,
            "[HA] Relay to session owner failed: {why}"
        );
        let message = format!(
            "This MCP session is served by another instance of the server, which did not answer the relayed request. Retry after {}s; if that instance has stopped, the session is taken over by another instance once its heartbeat expires.",
            self.ttl_s
        );
        let body =
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}});
        let mut res = Response::new(Body::from(body.to_string()));
        *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let h = res.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(v) = HeaderValue::from_str(&self.ttl_s.to_string()) {
            h.insert(header::RETRY_AFTER, v);
        }
        res
    }
}

/// Headers that belong to one connection, not to the request (RFC 9110 7.6.1), plus the ones
/// the client library sets itself.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

#[async_trait]
impl Relay for HttpRelay {
    async fn forward(&self, holder: &str, req: RelayRequest) -> Response {
        if req.headers.contains_key(RELAYED_BY) {
            return self.unavailable(holder, "the request was already relayed once");
        }
        let key = format!("{}{holder}", self.heartbeat_prefix);
        let address = match read_beat(&self.redis, &key).await {
            Ok(Some(beat)) => match beat.address {
                Some(a) => a,
                None => return self.unavailable(holder, "its heartbeat advertises no address"),
            },
            Ok(None) => return self.unavailable(holder, "its heartbeat is gone"),
            Err(e) => return self.unavailable(holder, &e.to_string()),
        };
        let path = req.uri.path_and_query().map_or("/mcp", |p| p.as_str());
        let mut headers = http::HeaderMap::with_capacity(req.headers.len() + 1);
        for (name, value) in &req.headers {
            if !hop_by_hop(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        headers.insert(RELAYED_BY, self.me.clone());
        let sent = self
            .client
            .request(req.method, format!("http://{address}{path}"))
            .headers(headers)
            .body(req.body)
            .send()
            .await;
        let answer = match sent {
            Ok(a) => a,
            Err(e) => return self.unavailable(holder, &e.to_string()),
        };
        let status = answer.status();
        let mut headers = http::HeaderMap::with_capacity(answer.headers().len());
        for (name, value) in answer.headers() {
            if !hop_by_hop(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        let mut res = Response::new(Body::from_stream(answer.bytes_stream()));
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        res
    }
}
