//! The instance's machine id, resolved once at start in the contract's order:
//! `MACHINE_ID`, then (distributed mode) `HOSTNAME` or the OS host name, then a random id.
//!
//! It names the instance in session records, and (distributed mode) in the
//! `X-FrontMCP-Machine-Id` header and the affinity cookie. Resolving it once and passing the
//! value around means every use sees the same id (the reference implementation let a late
//! override split the header from the heartbeat).

use crate::config::{Config, DeploymentMode};

/// Where the id came from, for the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineIdSource {
    Configured,
    Hostname,
    Random,
}

pub fn resolve(cfg: &Config) -> (String, MachineIdSource) {
    if let Some(id) = &cfg.machine_id {
        return (id.clone(), MachineIdSource::Configured);
    }
    if cfg.deployment_mode == DeploymentMode::Distributed {
        let host = cfg.hostname.clone().or_else(|| {
            hostname::get()
                .ok()
                .and_then(|h| h.into_string().ok())
                .filter(|h| !h.is_empty())
        });
        if let Some(host) = host {
            return (host, MachineIdSource::Hostname);
        }
    }
    (uuid::Uuid::new_v4().to_string(), MachineIdSource::Random)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_follows_the_contract() {
        let cfg =
            Config::from_sources(None, [("MACHINE_ID", "desk-a"), ("HOSTNAME", "pod-1")]).unwrap();
        assert_eq!(
            resolve(&cfg),
            ("desk-a".into(), MachineIdSource::Configured)
        );
        let cfg = Config::from_sources(
            None,
            [
                ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
                ("HOSTNAME", "pod-1"),
                ("MCP_SESSION_SECRET", "a fleet secret of some length"),
            ],
        )
        .unwrap();
        assert_eq!(resolve(&cfg), ("pod-1".into(), MachineIdSource::Hostname));
        let cfg = Config::from_sources(None, [("HOSTNAME", "pod-1")]).unwrap();
        let (a, src) = resolve(&cfg);
        assert_eq!(src, MachineIdSource::Random);
        assert_ne!(a, resolve(&cfg).0, "standalone ids are new on every start");
    }
}
