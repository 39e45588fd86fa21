//! `[stateless]`: the 2026-07-28 era's settings, and which era answers a request that says
//! nothing about its version. Apart from `[sessions]` because the two eras share no state:
//! a stateless request opens nothing that these settings would bound for later.

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid_value};

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
    /// `stateless.default_era`: which era answers a request that says nothing of its version.
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

impl StatelessConfig {
    /// Refuses a listen-stream bound of zero (no client could ever listen).
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.max_listen_streams == 0 {
            return invalid_value(
                "stateless.max_listen_streams",
                "0".into(),
                "must be at least 1",
            );
        }
        Ok(())
    }
}
