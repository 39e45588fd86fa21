//! `[http]`: how this instance serves HTTP, from body sizes to timeouts, connection counts and
//! the stop sequence. These bounds are what keeps one slow or hostile client from holding the
//! listener, so they sit together with the checks that refuse values too small to serve with.
//!
//! The TOML section and [`HttpConfig`] keep the name `http`; the file is named after its type
//! (as `redis_config.rs` is), not `http.rs`, so that no path in this layer reads as the `http`
//! crate, which nothing below transport may name.

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid_value};

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
    /// new. Unset: 5 s (`DEFAULT_DRAIN_MS`) when the instance is likely behind one (sessions in
    /// Redis, distributed mode, or production), else 0 (a lone development server stops at
    /// once). See [`Config::drain_delay`](super::Config::drain_delay).
    pub drain_ms: Option<u64>,
    /// Most messages in one JSON-RPC batch (2025-03-26); a longer batch is refused with `400`
    /// `-32600` while it is parsed, before its items are read.
    pub max_batch_len: usize,
    /// How long a client may take to send a request's head (request line and headers). Past
    /// it the connection is closed. As hyper's own timer does on HTTP/1.1, it also runs while a
    /// kept-alive connection waits for its next request, so there an idle connection closes
    /// after the smaller of this and `idle_timeout_ms`.
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
    /// Bytes of messages written to a client and not yet taken by it: on a 2024-11-05 `/sse`
    /// stream (answers stored for it and not yet sent on its connection; past it its requests'
    /// messages wait, and `POST /message` refuses a request `429` `-32010`), and on the stdio
    /// transport's output (past it the writers wait and stdin is not read), and on a streamed
    /// answer's direct line once its event store failed (past it its writer waits). Kept below the
    /// session's event budget, so that the event store never drops an answer a 2024-11-05
    /// client has not read.
    pub max_unread_bytes: usize,
    /// Messages and bytes one running request's handler may have sent (progress, log lines,
    /// requests to the client) that its answer's stream has not yet taken (the event store
    /// slow, or its client not reading): past either, the oldest progress and log
    /// notifications queued are dropped, counted in
    /// `fleetmcp_outbox_notifications_dropped_total`; requests to the client and the answer
    /// never are.
    pub max_outbox_messages: usize,
    /// The bytes of those messages, bounded the same way (see `max_outbox_messages`).
    pub max_outbox_bytes: usize,
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
            max_unread_bytes: 4 * 1024 * 1024,
            // A burst of a thousand notes rides out a slow store; more than that is a handler
            // producing faster than anyone reads, whose oldest notes are worth the least.
            max_outbox_messages: 1024,
            max_outbox_bytes: 1024 * 1024,
            metrics: true,
        }
    }
}

impl HttpConfig {
    /// Refuses the bounds under which no request could be served.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.max_body_bytes < 1024 {
            return invalid_value(
                "http.max_body_bytes",
                self.max_body_bytes.to_string(),
                "must be at least 1024",
            );
        }
        for (name, ms) in [
            ("http.header_read_timeout_ms", self.header_read_timeout_ms),
            ("http.body_read_timeout_ms", self.body_read_timeout_ms),
            ("http.idle_timeout_ms", self.idle_timeout_ms),
            ("http.write_timeout_ms", self.write_timeout_ms),
        ] {
            if ms < 100 {
                return invalid_value(name, ms.to_string(), "must be at least 100");
            }
        }
        // A semaphore of this many permits bounds the stdio output (u32 permits).
        if !(1024..=1 << 30).contains(&self.max_unread_bytes) {
            return invalid_value(
                "http.max_unread_bytes",
                self.max_unread_bytes.to_string(),
                "must be between 1024 and 1073741824 (1 GiB)",
            );
        }
        if self.max_outbox_messages == 0 {
            return invalid_value("http.max_outbox_messages", "0".into(), "must be at least 1");
        }
        if !(1024..=1 << 30).contains(&self.max_outbox_bytes) {
            return invalid_value(
                "http.max_outbox_bytes",
                self.max_outbox_bytes.to_string(),
                "must be between 1024 and 1073741824 (1 GiB)",
            );
        }
        if self.max_connections == 0 {
            return invalid_value("http.max_connections", "0".into(), "must be at least 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn unread_bytes_are_at_least_a_kibibyte_and_at_most_a_gibibyte() {
        let http = &Config::default().http;
        assert_eq!(http.max_unread_bytes, 4 * 1024 * 1024);
        assert!(http.check().is_ok());
        for bad in [1023, (1 << 30) + 1] {
            let mut http = http.clone();
            http.max_unread_bytes = bad;
            let err = http.check().unwrap_err().to_string();
            assert!(err.contains("http.max_unread_bytes"), "{err}");
        }
    }

    #[test]
    fn metrics_are_on_unless_switched_off() {
        assert!(Config::default().http.metrics);
        let off = Config::from_sources(None, [("FLEETMCP_METRICS", "off")]).unwrap();
        assert!(!off.http.metrics);
        let err = Config::from_sources(None, [("FLEETMCP_METRICS", "maybe")]).unwrap_err();
        assert!(err.to_string().contains("FLEETMCP_METRICS"), "{err}");
    }
}
