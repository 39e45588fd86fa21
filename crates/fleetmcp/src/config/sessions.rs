//! `[sessions]`: what a session-era session may hold and for how long. Every bound here caps
//! memory a client makes this instance keep, in its own process and in the shared store, so
//! each comes with the check that refuses a value that would leave a session unusable.

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid_value};

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
    /// Most bytes of SSE events one session keeps for resumption, all its streams together:
    /// past it the oldest closed streams are dropped (those read to their end first; one being
    /// delivered never), then the older events of its open streams (each keeps its newest).
    /// In the Redis store, counted by the instance that writes them.
    pub max_event_bytes_per_session: usize,
    /// Most bytes of SSE events all sessions keep together on this instance (in memory, or
    /// written by this instance to Redis and not yet expired), dropped in the same order.
    pub max_event_bytes: usize,
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
            max_event_bytes_per_session: 8 * 1024 * 1024,
            max_event_bytes: 256 * 1024 * 1024,
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

impl SessionConfig {
    /// Refuses the bounds under which a session could not work.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.idle_ttl_ms < 1000 {
            return invalid_value(
                "sessions.idle_ttl_ms",
                self.idle_ttl_ms.to_string(),
                "must be at least 1000",
            );
        }
        if self.stream_read_outage_ms < 100 {
            return invalid_value(
                "sessions.stream_read_outage_ms",
                self.stream_read_outage_ms.to_string(),
                "must be at least 100",
            );
        }
        if self.max_events_per_stream == 0 || self.max_streams_per_session == 0 {
            return invalid_value(
                "sessions.max_events_per_stream",
                self.max_events_per_stream.to_string(),
                "event limits must be at least 1",
            );
        }
        if self.max_event_bytes_per_session < 64 * 1024
            || self.max_event_bytes < self.max_event_bytes_per_session
        {
            return invalid_value(
                "sessions.max_event_bytes_per_session",
                self.max_event_bytes_per_session.to_string(),
                "must be at least 65536, and sessions.max_event_bytes at least as large",
            );
        }
        if self.max_client_info_bytes < 256 || self.max_subscription_uri_bytes < 64 {
            return invalid_value(
                "sessions.max_client_info_bytes",
                self.max_client_info_bytes.to_string(),
                "must be at least 256 (and sessions.max_subscription_uri_bytes at least 64)",
            );
        }
        Ok(())
    }

    /// Refuses a client-data budget too small to be useful. The budget is shared with the
    /// stateless era's listen streams, so `Config::validate` runs this after
    /// both sections' own checks.
    pub(super) fn check_client_data(&self) -> Result<(), ConfigError> {
        // A session must be able to hold its subscriptions, and a listen its URIs.
        let one_filter = self
            .max_subscriptions
            .saturating_mul(self.max_subscription_uri_bytes);
        if self.max_client_data_bytes < one_filter.min(1024 * 1024) {
            return invalid_value(
                "sessions.max_client_data_bytes",
                self.max_client_data_bytes.to_string(),
                "must be at least 1 MiB (or one full set of subscriptions, if smaller)",
            );
        }
        Ok(())
    }
}
