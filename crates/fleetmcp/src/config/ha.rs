//! `[ha]`: distributed mode's tuning (heartbeats, takeover of a silent holder's sessions, the
//! relay of requests between instances). The fleet stays correct only while these hold
//! certain ratios (a heartbeat outlives its jitter, a relay's window outlives clock skew), so
//! the check that enforces them lives with the numbers.

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid_value};

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

    /// Refuses settings under which live instances would look dead, or relays be refused or
    /// replayable. Named by variable: these are tuned from the environment.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.heartbeat_ttl_ms < 2 * self.heartbeat_interval_ms {
            return invalid_value(
                "FRONTMCP_HA_HEARTBEAT_TTL_MS",
                self.heartbeat_ttl_ms.to_string(),
                "must be at least twice FRONTMCP_HA_HEARTBEAT_INTERVAL_MS, or jitter makes live instances look dead",
            );
        }
        if !(1000..=600_000).contains(&self.relay_window_ms) {
            return invalid_value(
                "FLEETMCP_RELAY_WINDOW_MS",
                self.relay_window_ms.to_string(),
                "must be 1000 to 600000: shorter, ordinary clock skew between instances refuses genuine relays; longer, a captured request stays replayable (and its nonce remembered) that long",
            );
        }
        if self.relay_max_connections == Some(0) {
            return invalid_value(
                "ha.relay_max_connections (FLEETMCP_RELAY_MAX_CONNECTIONS)",
                "0".into(),
                "must be at least 1 (unset: a quarter of http.max_connections)",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

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
    fn the_takeover_grace_period_follows_the_contract() {
        assert_eq!(Config::default().ha.takeover_grace_ms, 5_000);
        let cfg = Config::from_sources(None, [("FRONTMCP_HA_TAKEOVER_GRACE_MS", "750")]).unwrap();
        assert_eq!(cfg.ha.takeover_grace_ms, 750);
        // Not a positive integer: ignored, as the contract says.
        let cfg = Config::from_sources(None, [("FRONTMCP_HA_TAKEOVER_GRACE_MS", "-1")]).unwrap();
        assert_eq!(cfg.ha.takeover_grace_ms, 5_000);
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
}
