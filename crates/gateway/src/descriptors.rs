//! Fitting the gateway under the process's open-files limit (`ulimit -n`, `RLIMIT_NOFILE`).
//!
//! fleetmcp fits `http.max_connections` under the limit, keeping descriptors aside for Redis,
//! the listener, logs and the connections that may still ask `/healthz` and `/readyz`. A
//! gateway also holds descriptors for its upstream processes, which that budget does not see:
//! with `ulimit -n 256`, 60 sessions and 134 idle connections used every descriptor, new
//! sessions failed with "Too many open files" and the health routes stopped answering (issue
//! 36). So, at start, connections plus processes times [`PER_PROCESS`] are fitted under the
//! limit (less fleetmcp's own reserve), with a WARN line saying what was lowered.

use crate::config::GatewayConfig;

/// Descriptors one upstream process costs the gateway: its stdin, stdout and stderr pipes,
/// and the pidfd tokio reaps it with.
pub const PER_PROCESS: usize = 4;

/// What fleetmcp keeps aside of the limit besides connections (its `FD_HEADROOM`, 64, for
/// Redis, the listener and files; and its health reserve, 16 connections), plus a margin for
/// the pipes of processes being started (each holds its child's ends a moment too).
const RESERVED: usize = 64 + 16 + 16;

/// The limits as fitted: `(max_connections, max_processes)`.
pub type Fitted = (usize, usize);

/// Lowers `http.max_connections` and `gateway.max_processes` (and with it
/// `max_processes_per_key`) so that both fit under the open-files limit; says so at WARN.
pub fn fit(config: &mut fleetmcp::Config, gateway: &mut GatewayConfig) {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let Some(soft) = soft.and_then(|s| usize::try_from(s).ok()) else {
        return; // No limit.
    };
    let (connections, processes) = (config.http.max_connections, gateway.max_processes);
    let (fit_connections, fit_processes) = fitted(soft, connections, processes);
    if (fit_connections, fit_processes) == (connections, processes) {
        return;
    }
    tracing::warn!(
        open_files_limit = soft,
        max_connections = connections,
        max_processes = processes,
        "[gateway] the open-files limit cannot hold http.max_connections connections and gateway.max_processes processes ({PER_PROCESS} descriptors each) besides its reserve: serving at most {fit_connections} connections and {fit_processes} upstream processes (raise `ulimit -n` for more)"
    );
    config.http.max_connections = fit_connections;
    gateway.max_processes = fit_processes;
    gateway.max_processes_per_key = gateway.max_processes_per_key.min(fit_processes);
}

/// Connections and processes fitted under `soft` descriptors: unchanged when they fit, else
/// processes take at most half of the room (sessions need connections to be used) and
/// connections the rest.
pub fn fitted(soft: usize, connections: usize, processes: usize) -> Fitted {
    let room = soft.saturating_sub(RESERVED).max(2);
    if connections.saturating_add(processes.saturating_mul(PER_PROCESS)) <= room {
        return (connections, processes);
    }
    let processes = processes.min(room / 2 / PER_PROCESS).max(1);
    let connections = connections
        .min(room.saturating_sub(processes * PER_PROCESS))
        .max(1);
    (connections, processes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_and_processes_fit_under_the_limit_together() {
        // Plenty of descriptors: nothing changes.
        assert_eq!(fitted(20_000, 10_000, 100), (10_000, 100));
        // The default `ulimit -n` and the defaults: processes keep their 100, connections
        // take what is left.
        let (c, p) = fitted(1024, 10_000, 100);
        assert_eq!(p, 100);
        assert_eq!(c + p * PER_PROCESS + RESERVED, 1024);
        // The case: 256 descriptors.
        let (c, p) = fitted(256, 10_000, 100);
        assert!(c + p * PER_PROCESS + RESERVED <= 256, "{c} {p}");
        assert!(p >= 1 && c >= p, "{c} {p}");
        // A limit below the reserve still serves something.
        assert_eq!(fitted(10, 10_000, 100), (1, 1));
    }
}
