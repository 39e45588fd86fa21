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
//! counted as [`FaultKind::RedisLostAloneWrites`], at the switch, lasting until the last
//! instance logged that it follows the new master: until then an instance may still hold (and
//! serve under) a claim the switch lost.

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

/// How long a master switched away from must stay away before it can have resynced from the
/// new one: the sentinels convert it into a replica 8 s or more after the switch, and it syncs
/// after `repl-diskless-sync-delay` (5 s by default). Back as master sooner, it still holds
/// what it took alone in its earlier tenure, and a switch away from it loses that again.
const RESYNC_AFTER: Duration = Duration::from_secs(13);

/// The switches away from a master that had confirmed a write alone while it was master (in
/// this tenure, or an earlier one it came back from too soon to have resynced in between): the
/// time of each (when the next master was first seen) and the master left. The one-replica
/// seed 1 saw a claim taken alone on a master, lost at the next switch, back when that master
/// was promoted again 5 s later, and lost again at the switch after.
pub fn lossy_switches(
    masters: &[(Duration, u16)],
    alone: &[(Duration, u16)],
) -> Vec<(Duration, u16)> {
    (1..masters.len())
        .filter(|&i| {
            let ((since, port), (until, _)) = (masters[i - 1], masters[i]);
            // Back through the earlier tenures of `port` it still holds the data of.
            let (mut from, mut k) = (since, i - 1);
            while let Some(x) = (0..k).rev().find(|&x| masters[x].1 == port) {
                if masters[k].0.saturating_sub(masters[x + 1].0) >= RESYNC_AFTER {
                    break;
                }
                (from, k) = (masters[x].0, x);
            }
            alone
                .iter()
                .any(|(at, p)| *p == port && from <= *at && *at <= until)
        })
        .map(|i| (masters[i].0, masters[i - 1].1))
        .collect()
}

/// What an instance logs when its connection moves to the master the sentinels name.
const FOLLOWS: &str = "the sentinels name a new master";

/// How long an instance may take to follow a switch and still be counted as following it
/// (beyond this, a line is about a later switch, or the instance was paused or restarted).
const FOLLOW_WITHIN: Duration = Duration::from_secs(10);

/// When (on the run's time line) an instance logged that it follows a new master, from its
/// JSON log.
pub fn follows(rec: &Recorder, log: &str) -> Vec<Duration> {
    log.lines()
        .filter(|l| l.contains(FOLLOWS))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["message"].as_str().is_some_and(|m| m.contains(FOLLOWS)))
        .filter_map(|v| rec.at_log_time(v["timestamp"].as_str()?))
        .collect()
}

/// How long after a switch at `at` the last instance followed it: per instance (its log's
/// times in `each`), its first line in [`FOLLOW_WITHIN`] after the switch; zero when none
/// logged one (each connected after the switch, to the new master).
pub fn followed_within(at: Duration, each: &[Vec<Duration>]) -> Duration {
    each.iter()
        .filter_map(|times| {
            times
                .iter()
                .find(|t| **t >= at && **t <= at + FOLLOW_WITHIN)
                .map(|t| *t - at)
        })
        .max()
        .unwrap_or(Duration::ZERO)
}

/// Adds a [`FaultKind::RedisLostAloneWrites`] to the history for each such switch.
pub fn record(rec: &Recorder, masters: &[(Duration, u16)], logs: &[String]) {
    let alone: Vec<(Duration, u16)> = logs.iter().flat_map(|l| alone_writes(rec, l)).collect();
    let each: Vec<Vec<Duration>> = logs.iter().map(|l| follows(rec, l)).collect();
    for (at, port) in lossy_switches(masters, &alone) {
        let followed_within = followed_within(at, &each);
        rec.fault_at(
            at,
            FaultKind::RedisLostAloneWrites {
                port,
                followed_within,
            },
        );
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
    fn a_master_back_before_it_could_resync_brings_its_writes_alone_back_to_lose_again() {
        // 7001 alone at 1 s, lost at 3 s; master again at 9 s (6 s away: not resynced), so
        // the switch away at 12 s loses that write again.
        let masters = [
            (s(0.0), 7001),
            (s(3.0), 7002),
            (s(9.0), 7001),
            (s(12.0), 7002),
        ];
        assert_eq!(
            lossy_switches(&masters, &[(s(1.0), 7001)]),
            [(s(3.0), 7001), (s(12.0), 7001)]
        );
        // Away 20 s: it resynced, and lost what it took alone for good.
        let masters = [
            (s(0.0), 7001),
            (s(3.0), 7002),
            (s(23.0), 7001),
            (s(26.0), 7002),
        ];
        assert_eq!(
            lossy_switches(&masters, &[(s(1.0), 7001)]),
            [(s(3.0), 7001)]
        );
    }

    #[test]
    fn a_loss_lasts_until_the_last_instance_follows_the_switch() {
        // Switch at 3 s: one instance follows at 3.2 s, another at 3.9 s, a third logged only
        // before the switch and 20 s after it (another switch): the loss lasts 0.9 s.
        let each = [vec![s(3.2)], vec![s(1.0), s(3.9)], vec![s(2.5), s(23.0)]];
        let lasts = followed_within(s(3.0), &each);
        assert!((lasts.as_secs_f64() - 0.9).abs() < 1e-9, "{lasts:?}");
        assert_eq!(
            followed_within(s(3.0), &[vec![s(1.0)], vec![]]),
            Duration::ZERO
        );
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
