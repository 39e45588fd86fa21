//! What a Sentinel switch may have lost: writes the instances confirmed on a master alone.
//!
//! With `wait_replicas = "auto"`, a master with no replica connected is written to when every
//! sentinel finds each of its replicas down. RELIABILITY.md documents the limit: if that master
//! then fails while a replica comes back before it has synced, the sentinels promote the
//! replica as it is, and what the master took alone is lost. That is Redis losing data, as a
//! restart without persistence is, and the checker must know it happened to tell it from a
//! loss of ours. From outside, it is found in two records: the instances log each write they
//! confirmed alone (`a durable write to a master without replicas was confirmed by the
//! sentinels`, with the master's address), and a watcher here notes every change of the master
//! the sentinels name. A switch away from a master after a write confirmed on it alone is
//! counted as [`FaultKind::RedisLostAloneWrites`], at the switch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::history::{FaultKind, Recorder};

/// The message an instance logs (debug) for a write confirmed on a master without replicas.
const ALONE: &str = "a durable write to a master without replicas was confirmed by the sentinels";

/// Notes, every 50 ms, the master port a sentinel names, and when it changed.
pub struct MasterWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<(Duration, u16)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MasterWatch {
    /// Watches `master_of`: the port the sentinels name now (`None` when they do not answer).
    pub fn start(rec: Recorder, master_of: impl Fn() -> Option<u16> + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen: Arc<Mutex<Vec<(Duration, u16)>>> = Arc::default();
        let thread = {
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(port) = master_of() {
                        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                        if seen.last().is_none_or(|(_, p)| *p != port) {
                            seen.push((rec.now(), port));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        Self {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// Stops watching: the masters named, each from when it was first seen.
    pub fn finish(mut self) -> Vec<(Duration, u16)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// When (on the run's time line) and to which master port an instance confirmed a write alone,
/// from its JSON log.
pub fn alone_writes(rec: &Recorder, log: &str) -> Vec<(Duration, u16)> {
    log.lines()
        .filter(|l| l.contains(ALONE))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["message"] == ALONE)
        .filter_map(|v| {
            let at = rec.at_log_time(v["timestamp"].as_str()?)?;
            let port = v["server"].as_str()?.rsplit_once(':')?.1.parse().ok()?;
            Some((at, port))
        })
        .collect()
}

/// The switches away from a master that had confirmed a write alone while it was master: the
/// time of each (when the next master was first seen) and the master left.
pub fn lossy_switches(
    masters: &[(Duration, u16)],
    alone: &[(Duration, u16)],
) -> Vec<(Duration, u16)> {
    masters
        .windows(2)
        .filter(|w| {
            let ((since, port), (until, _)) = (w[0], w[1]);
            alone
                .iter()
                .any(|(at, p)| *p == port && since <= *at && *at <= until)
        })
        .map(|w| (w[1].0, w[0].1))
        .collect()
}

/// Adds a [`FaultKind::RedisLostAloneWrites`] to the history for each such switch.
pub fn record(rec: &Recorder, masters: &[(Duration, u16)], logs: &[String]) {
    let alone: Vec<(Duration, u16)> = logs.iter().flat_map(|l| alone_writes(rec, l)).collect();
    for (at, port) in lossy_switches(masters, &alone) {
        rec.fault_at(at, FaultKind::RedisLostAloneWrites(port));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    #[test]
    fn only_a_switch_after_a_write_alone_on_the_master_left_counts() {
        // 7001 master from 0 s, 7002 from 3 s, 7001 again from 9 s.
        let masters = [(s(0.0), 7001), (s(3.0), 7002), (s(9.0), 7001)];
        assert!(lossy_switches(&masters, &[]).is_empty());
        // Alone on 7001 before the first switch: that switch may have lost it.
        assert_eq!(
            lossy_switches(&masters, &[(s(1.0), 7001)]),
            [(s(3.0), 7001)]
        );
        // Alone on 7002 while it was master: the switch back at 9 s.
        assert_eq!(
            lossy_switches(&masters, &[(s(5.0), 7002)]),
            [(s(9.0), 7002)]
        );
        // On 7001 after it became master again: no switch followed.
        assert!(lossy_switches(&masters, &[(s(10.0), 7001)]).is_empty());
        // On a server while it was not the master: not a write it took as master.
        assert!(lossy_switches(&masters, &[(s(5.0), 7001)]).is_empty());
    }

    #[test]
    fn log_lines_are_placed_on_the_runs_time_line() {
        let rec = Recorder::new();
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
            + 2;
        let (h, m, sec) = ((wall / 3600) % 24, (wall / 60) % 60, wall % 60);
        let line = format!(
            r#"{{"timestamp":"2026-12-04T{h:02}:{m:02}:{sec:02}.500000Z","level":"DEBUG","message":"{ALONE}","server":"127.0.0.1:7001","agreeing":3}}"#
        );
        let found = alone_writes(&rec, &format!("{{\"message\":\"other\"}}\n{line}\n"));
        assert_eq!(found.len(), 1, "{found:?}");
        let (at, port) = found[0];
        assert_eq!(port, 7001);
        assert!(at > s(1.0) && at < s(3.5), "{at:?}");
    }
}
