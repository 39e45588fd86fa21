//! What a [`Verdict`] says to a reader: the findings known and not fixed yet, the report of the
//! broken promises with a timeline around the first violation, and the per-promise table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::{Promise, Verdict, Violation};
use crate::history::{FaultKind, History, Kind, Op, Outcome, TaskView};

/// Violations the harness found, reported, and not fixed yet (see `docs/RELIABILITY.md`): the
/// report marks them, and the CI seeds do not fail on them unless `FAULTS_STRICT=1`. Each is
/// matched narrowly (promise, request kind, the fault around it), so anything else still fails.
///
/// F1, F2 and F3 were fixed (a 2024-11-05 POST its holder cannot confirm is 503, the scanner
/// leaves 2024-11-05 sessions alone, a session confirmed in an earlier lease term is not served
/// from memory), and F4 too (the resumed answer of a call killed with its instance ends with
/// [`Outcome::Abandoned`], checked in [`answered`]). A new finding is added here, with its
/// test, while its fix is under way.
///
/// None is open now: F5, F6 and F7 (task requests while the task store did not answer) were
/// fixed too (see `docs/RELIABILITY.md`).
pub fn known_finding(_h: &History, _x: &Violation) -> Option<&'static str> {
    None
}

/// The violations not explained by a known finding.
pub fn unknown<'a>(h: &History, verdict: &'a Verdict) -> Vec<&'a Violation> {
    verdict
        .violations
        .iter()
        .filter(|x| known_finding(h, x).is_none())
        .collect()
}

/// The report: each broken promise, its first violations, and a short timeline of the faults
/// and the requests around the first one.
pub fn report(h: &History, verdict: &Verdict, seed: u64) -> String {
    let mut out = String::new();
    if verdict.violations.is_empty() {
        let _ = writeln!(out, "seed {seed}: every promise held");
        return out;
    }
    for p in verdict.broken() {
        let vs: Vec<&Violation> = verdict
            .violations
            .iter()
            .filter(|x| x.promise == p)
            .collect();
        let _ = writeln!(
            out,
            "BROKEN: {} (seed {seed}, FAULTS_SEED={seed} replays): {} violation(s)",
            p.title(),
            vs.len()
        );
        for x in vs.iter().take(5) {
            let _ = writeln!(
                out,
                "  [{:>7.2} s] {}{}{}",
                x.at.as_secs_f64(),
                x.detail,
                known_finding(h, x)
                    .map(|k| format!(" [known {k}]"))
                    .unwrap_or_default(),
                x.op.map(|i| format!("\n      {}", h.ops[i].describe()))
                    .unwrap_or_default()
            );
        }
        let first = vs[0];
        let _ = writeln!(out, "  timeline around the first:");
        out.push_str(&timeline(h, first));
    }
    out
}

fn timeline(h: &History, x: &Violation) -> String {
    let around = Duration::from_secs(4);
    let (from, to) = (
        x.op.map_or(x.at, |i| h.ops[i].start).saturating_sub(around),
        x.at + Duration::from_secs(1),
    );
    let mut lines: Vec<(Duration, String)> = h
        .faults
        .iter()
        .filter(|f| f.at >= from && f.at <= to)
        .map(|f| (f.at, format!("FAULT {:?}", f.kind)))
        .collect();
    let op = x.op.map(|i| &h.ops[i]);
    let mut related: Vec<&Op> = h
        .ops
        .iter()
        .filter(|o| o.end >= from && o.start <= to)
        .filter(|o| match op {
            Some(op) => {
                o.index == op.index
                    || o.client == op.client
                    || (o.session.is_some() && o.session == op.session)
            }
            None => o.outcome != Outcome::Ok,
        })
        .collect();
    // The dozen closest to the violation.
    let centre = x.op.map_or(x.at, |i| h.ops[i].start);
    related.sort_by_key(|o| o.start.abs_diff(centre));
    related.truncate(12);
    for o in related {
        lines.push((o.start, format!("op   {}", o.describe())));
    }
    lines.sort_by_key(|(t, _)| *t);
    let mut out = String::new();
    for (t, l) in lines {
        let _ = writeln!(out, "    {:>7.2} s  {l}", t.as_secs_f64());
    }
    out
}

/// The table of a run (or a soak): faults injected by kind, promises checked and broken.
pub fn table(h: &History, verdict: &Verdict) -> String {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for f in &h.faults {
        let k = match &f.kind {
            FaultKind::Kill(_) => "instance SIGKILL".to_string(),
            FaultKind::Restart(_) => "instance restart (same MACHINE_ID)".to_string(),
            FaultKind::Stop(_) => "instance SIGSTOP".to_string(),
            FaultKind::Cont(_) => continue,
            FaultKind::RedisStop => "redis SIGSTOP".to_string(),
            FaultKind::RedisCont => continue,
            FaultKind::RedisDataLoss => "redis data lost".to_string(),
            FaultKind::RedisLostAloneWrites { .. } => {
                "sentinel switched from a master written alone".to_string()
            }
            FaultKind::RedisRestart => "redis restart".to_string(),
            FaultKind::Link { link, mode } => {
                if mode == "pass" {
                    continue;
                }
                let side = if link.ends_with("redis") {
                    "instance->redis"
                } else {
                    "instance->instance"
                };
                let m = mode.split_whitespace().next().unwrap_or(mode);
                format!("link {side} {m}")
            }
            FaultKind::SentinelFailover => "sentinel failover (SENTINEL FAILOVER)".to_string(),
            FaultKind::SentinelSwitched(_) => continue,
            FaultKind::HarnessProblem(_) => "harness problem".to_string(),
        };
        *kinds.entry(k).or_insert(0) += 1;
    }
    let mut out = String::new();
    let _ = writeln!(out, "{:<44} {:>8}", "fault injected", "count");
    for (k, n) in &kinds {
        let _ = writeln!(out, "{k:<44} {n:>8}");
    }
    let mut per_kind: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for op in &h.ops {
        let k = match op.kind {
            Kind::Stamp { sse: true } => "session stamp (SSE)",
            Kind::Stamp { sse: false } => "session stamp (JSON)",
            Kind::Resume { .. } => "resume (Last-Event-ID)",
            Kind::Initialize | Kind::Initialized => "initialize",
            Kind::Discover => "2026 server/discover",
            Kind::StatelessStamp => "2026 stamp",
            Kind::LegacyStream => "2024-11-05 GET /sse",
            Kind::LegacyPost => "2024-11-05 POST /message",
            Kind::TaskStart => "2026 stamp as a task (tools/call)",
            Kind::TaskPoll { .. } => "2026 tasks/get",
            Kind::Confirm => "2026 stamp_confirmed round 1 (input)",
            Kind::ConfirmAnswer { .. } => "2026 stamp_confirmed answering round",
            Kind::Intrude => "another principal's try (refused as a stranger's)",
        };
        let e = per_kind.entry(k.to_string()).or_insert((0, 0));
        e.0 += 1;
        if op.outcome == Outcome::Ok {
            e.1 += 1;
        }
    }
    let _ = writeln!(out, "\n{:<44} {:>8} {:>8}", "request", "sent", "ok");
    for (k, (n, ok)) in &per_kind {
        let _ = writeln!(out, "{k:<44} {n:>8} {ok:>8}");
    }
    let _ = writeln!(out, "\n{:<64} {:>8} {:>8}", "promise", "checked", "broken");
    for p in Promise::ALL {
        let n = verdict.checked.per_promise.get(&p).copied().unwrap_or(0);
        let b = verdict.violations.iter().filter(|x| x.promise == p).count();
        let _ = writeln!(out, "{:<64} {n:>8} {b:>8}", p.title());
    }
    let _ = writeln!(
        out,
        "requests excused (in flight on a SIGKILLed instance, or sent to a dead one): {}",
        verdict.checked.excused
    );
    // How the tasks ended, as their last poll saw them.
    let mut ends: BTreeMap<String, usize> = BTreeMap::new();
    for op in h.ops.iter().filter(|o| o.kind == Kind::TaskStart) {
        let last = h
            .ops
            .iter()
            .filter(|p| p.kind == Kind::TaskPoll { of: op.index } && p.task.is_some())
            .filter_map(|p| p.task.as_ref())
            .next_back()
            .or(op.task.as_ref());
        let k = match last {
            None => "not started (no task in the answer)".to_string(),
            Some(TaskView::Failed { gone: true, .. }) => "failed: its instance stopped".into(),
            Some(t) => format!("{t:?}").to_lowercase(),
        };
        *ends.entry(k).or_insert(0) += 1;
    }
    if !ends.is_empty() {
        let list: Vec<String> = ends.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(out, "tasks, as last seen: {}", list.join(", "));
    }
    out
}
