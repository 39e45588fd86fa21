//! The checker: pure functions over a [`History`], saying which of the fleet's promises broke.
//!
//! - [`Promise::OneHolder`]: for each session, no epoch served by two instances; once a request
//!   served at epoch `e` has ended, no request started later is served at an epoch below `e`.
//! - [`Promise::Effects`]: an acknowledged `stamp` key is in the effects file exactly once; an
//!   unacknowledged one at most once; nothing is there that no request asked for.
//! - [`Promise::Answered`]: every request is answered within [`Bounds::answer`] (plus the time
//!   the instance it went to was paused), with success or a documented refusal (503 with
//!   `Retry-After`, 429); never a hang or another error, except requests in flight on an
//!   instance that was SIGKILLed, and connections refused by an instance that is down.
//! - [`Promise::SessionKept`]: no request finds its session gone, unless Redis lost its data
//!   before it (or, for a 2024-11-05 session, its instance died: such a session lives in its
//!   stream).
//! - [`Promise::StreamOnce`]: the SSE events of an answer (across resumes) arrive once each, in
//!   order, and the answer itself exactly once.
//! - [`Promise::TaskEnds`]: a task the client was given (2026-07-28 tasks extension) is never
//!   answered as unknown unless Redis lost its data, and ends, as its polls see it, `completed`,
//!   or `failed` with the executor-gone message when its executor was SIGKILLed while it ran
//!   (the documented outcome, like [`Outcome::Abandoned`] for a stream); never `failed` so
//!   otherwise, never `cancelled`, never still running after the client's window. Its effect
//!   is checked with the others: a task completed with a result is an acknowledged call, one
//!   that failed or was not seen to end an unacknowledged one.
//! - [`Promise::Isolated`]: with authorization on, another principal's requests on the clients'
//!   sessions and tasks (`clients::intruder`) are answered as a stranger's to the id: none is
//!   served.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::history::{FaultKind, History, Kind, Op, Outcome, Route, TaskView};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Promise {
    OneHolder,
    Effects,
    Answered,
    SessionKept,
    StreamOnce,
    TaskEnds,
    Isolated,
}

impl Promise {
    pub const ALL: [Promise; 7] = [
        Promise::OneHolder,
        Promise::Effects,
        Promise::Answered,
        Promise::SessionKept,
        Promise::StreamOnce,
        Promise::TaskEnds,
        Promise::Isolated,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Promise::OneHolder => "never two holders",
            Promise::Effects => "no acknowledged call lost or doubled",
            Promise::Answered => "every request answered in bound, success or documented refusal",
            Promise::SessionKept => "no session lost unless Redis lost it",
            Promise::StreamOnce => "every SSE event once, in order, after resumes",
            Promise::TaskEnds => "every task ends (failed only if killed), never lost",
            Promise::Isolated => "no principal reaches another's session or task",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub promise: Promise,
    /// When it shows (an op's end, mostly).
    pub at: Duration,
    /// The op it is about, if one.
    pub op: Option<usize>,
    pub detail: String,
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The longest a request may take (plus the time its instance was paused).
    pub answer: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            answer: Duration::from_secs(15),
        }
    }
}

/// How much each promise was exercised.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    pub per_promise: BTreeMap<Promise, usize>,
    /// Requests excused (in flight on a killed instance, or sent to a dead one).
    pub excused: usize,
}

pub struct Verdict {
    pub violations: Vec<Violation>,
    pub checked: Checked,
}

impl Verdict {
    pub fn broken(&self) -> BTreeSet<Promise> {
        self.violations.iter().map(|v| v.promise).collect()
    }
}

pub fn check(h: &History, bounds: Bounds) -> Verdict {
    let mut v = Vec::new();
    let mut checked = Checked::default();
    one_holder(h, &mut v, &mut checked);
    effects(h, &mut v, &mut checked);
    answered(h, bounds, &mut v, &mut checked);
    sessions_kept(h, &mut v, &mut checked);
    streams(h, &mut v, &mut checked);
    tasks_end(h, &mut v, &mut checked);
    isolated(h, &mut v, &mut checked);
    v.sort_by_key(|x| (x.promise, x.at));
    Verdict {
        violations: v,
        checked,
    }
}

/// Every request of another principal on the clients' sessions and tasks was answered as a
/// stranger's (or refused, or failed, which `answered` judges): none was served.
fn isolated(h: &History, v: &mut Vec<Violation>, c: &mut Checked) {
    for op in h.ops.iter().filter(|o| o.kind == Kind::Intrude) {
        bump(c, Promise::Isolated, 1);
        if let Some(what) = &op.reached {
            v.push(Violation {
                promise: Promise::Isolated,
                at: op.end,
                op: Some(op.index),
                detail: format!("{what} was served (by {:?})", op.machine),
            });
        }
    }
}

fn bump(c: &mut Checked, p: Promise, n: usize) {
    *c.per_promise.entry(p).or_insert(0) += n;
}

fn one_holder(h: &History, v: &mut Vec<Violation>, c: &mut Checked) {
    let by_rpc: HashMap<u64, &Op> = h
        .ops
        .iter()
        .filter_map(|o| o.rpc_id.map(|id| (id, o)))
        .collect();
    // Epochs are counted in Redis: where Redis lost data, they may start again lower (a claim
    // lost, an older one kept), so two serves are compared only when no loss lies between the
    // first one's start and the second one's end (a request's epoch is read somewhere in
    // between its start and its end). A loss in a Sentinel switch lasts until every instance
    // follows the switch: until then one may serve under the lost claim it still holds.
    let losses: Vec<(Duration, Duration)> = h
        .faults
        .iter()
        .filter(|f| f.kind.loses_data())
        .map(|f| (f.at, f.at + f.kind.loss_lasts()))
        .collect();
    let comparable = |a: &Op, b: &Op| {
        let (from, to) = (a.start.min(b.start), a.end.max(b.end));
        !losses
            .iter()
            .any(|(begins, ends)| from <= *ends && *begins <= to)
    };
    // (session, epoch) -> (machine, op) of each serve
    let mut holders: BTreeMap<(&str, u64), Vec<(&str, &Op)>> = BTreeMap::new();
    for s in &h.served {
        if let Some(op) = by_rpc.get(&s.rpc_id) {
            holders
                .entry((s.session.as_str(), s.epoch))
                .or_default()
                .push((s.machine.as_str(), op));
        }
    }
    bump(c, Promise::OneHolder, h.served.len());
    for ((session, epoch), serves) in &holders {
        let two = serves.iter().enumerate().find_map(|(i, (ma, a))| {
            serves[i + 1..]
                .iter()
                .find(|(mb, b)| mb != ma && comparable(a, b))
                .map(|(mb, b)| (*ma, *mb, a.end.max(b.end)))
        });
        if let Some((ma, mb, at)) = two {
            v.push(Violation {
                promise: Promise::OneHolder,
                at,
                op: None,
                detail: format!(
                    "session {} epoch {epoch} served by {ma} and {mb}",
                    &session[..8.min(session.len())],
                ),
            });
        }
    }
    // Per session, the served requests with their ops' times.
    let mut per_session: BTreeMap<&str, Vec<(&Op, u64, &str)>> = BTreeMap::new();
    for s in &h.served {
        if let Some(op) = by_rpc.get(&s.rpc_id) {
            per_session.entry(s.session.as_str()).or_default().push((
                op,
                s.epoch,
                s.machine.as_str(),
            ));
        }
    }
    for (session, mut list) in per_session {
        list.sort_by_key(|(op, _, _)| op.end);
        // The highest epoch of requests that ended before each start.
        for (i, (b, eb, mb)) in list.iter().enumerate() {
            let before = list[..i]
                .iter()
                .filter(|(a, _, _)| a.end < b.start && comparable(a, b))
                .max_by_key(|(_, e, _)| *e);
            if let Some((a, ea, ma)) = before
                && ea > eb
            {
                v.push(Violation {
                    promise: Promise::OneHolder,
                    at: b.end,
                    op: Some(b.index),
                    detail: format!(
                        "session {}: #{} served by {mb} at epoch {eb}, after #{} was served by {ma} at epoch {ea} (a stale holder answered)",
                        &session[..8.min(session.len())],
                        b.index,
                        a.index
                    ),
                });
            }
        }
    }
}

fn effects(h: &History, v: &mut Vec<Violation>, c: &mut Checked) {
    let mut asked: BTreeSet<&str> = BTreeSet::new();
    for op in &h.ops {
        let Some(key) = op.stamp.as_deref() else {
            continue;
        };
        asked.insert(key);
        bump(c, Promise::Effects, 1);
        let n = h.effects.get(key).copied().unwrap_or(0);
        let bad = if op.acked { n != 1 } else { n > 1 };
        if bad {
            v.push(Violation {
                promise: Promise::Effects,
                at: op.end,
                op: Some(op.index),
                detail: format!(
                    "key {key}: {} and in the effects file {n} time(s){}",
                    if op.acked {
                        "acknowledged"
                    } else {
                        "not acknowledged"
                    },
                    if n == 0 { " (lost)" } else { " (doubled)" }
                ),
            });
        }
    }
    for (key, n) in &h.effects {
        if !asked.contains(key.as_str()) {
            v.push(Violation {
                promise: Promise::Effects,
                at: h.duration,
                op: None,
                detail: format!("key {key} in the effects file {n} time(s), never asked for"),
            });
        }
    }
}

/// Windows `[from, to)` during which `pred` held, from the fault log (an open one runs to the
/// end of the run).
fn windows(
    h: &History,
    starts: impl Fn(&FaultKind) -> Option<String>,
    ends: impl Fn(&FaultKind) -> Option<String>,
) -> Vec<(String, Duration, Duration)> {
    let mut open: HashMap<String, Duration> = HashMap::new();
    let mut out = Vec::new();
    for f in &h.faults {
        if let Some(m) = starts(&f.kind) {
            open.entry(m).or_insert(f.at);
        } else if let Some(m) = ends(&f.kind)
            && let Some(from) = open.remove(&m)
        {
            out.push((m, from, f.at));
        }
    }
    for (m, from) in open {
        out.push((m, from, h.duration.max(from)));
    }
    out
}

fn overlap(a: (Duration, Duration), b: (Duration, Duration)) -> Duration {
    let from = a.0.max(b.0);
    let to = a.1.min(b.1);
    to.saturating_sub(from)
}

/// Time instances were paused (SIGSTOP): per machine.
fn stops(h: &History) -> Vec<(String, Duration, Duration)> {
    windows(
        h,
        |k| match k {
            FaultKind::Stop(m) => Some(m.clone()),
            _ => None,
        },
        |k| match k {
            FaultKind::Cont(m) | FaultKind::Kill(m) => Some(m.clone()),
            _ => None,
        },
    )
}

/// Time instances were dead (SIGKILL until restarted): per machine.
fn deaths(h: &History) -> Vec<(String, Duration, Duration)> {
    windows(
        h,
        |k| match k {
            FaultKind::Kill(m) => Some(m.clone()),
            _ => None,
        },
        |k| match k {
            FaultKind::Restart(m) => Some(m.clone()),
            _ => None,
        },
    )
}

/// The time `op` may have waited on a paused instance it depended on.
fn paused_for(op: &Op, stops: &[(String, Duration, Duration)]) -> Duration {
    let span = (op.start, op.end);
    stops
        .iter()
        .filter(|(m, _, _)| match &op.route {
            Route::Direct(d) => d == m,
            // Through the balancer, or relayed: any instance may have been on the path.
            Route::Balancer => true,
        })
        .map(|(_, a, b)| overlap(span, (*a, *b)))
        .sum()
}

/// How long before a request every instance must have been down for a `502` from nginx to
/// be excused. Since F12's fix nginx tries the instances again as backups when it has marked
/// them all failed (`deploy/nginx/fleetmcp.conf`), so it answers `502` only when every one of
/// them failed for this very request: all down at about that time. The margin covers a
/// restart recorded a moment after the process answers, and nginx's pool: its kept-alive
/// connections to a SIGKILLed process are dead, and a POST sent on one just as the process
/// died is not retried. (Before the fix this was 3.5 s: nginx's `fail_timeout` and more, in
/// which nginx answered `502` even with an instance back.)
const BALANCER_FAIL_TIMEOUT: Duration = Duration::from_millis(1500);

/// A `502` from the balancer when it had no instance left to try: every instance was down at
/// some moment of [`BALANCER_FAIL_TIMEOUT`] before the request. The fleet cannot answer
/// through a balancer that has nowhere to send the request.
fn no_live_upstream(
    op: &Op,
    deaths: &[(String, Duration, Duration)],
    machines: &std::collections::BTreeSet<&str>,
) -> bool {
    let from_balancer = matches!(op.outcome, Outcome::Error { status: 502, .. });
    if op.route != Route::Balancer || !from_balancer || machines.is_empty() {
        return false;
    }
    let since = op.start.saturating_sub(BALANCER_FAIL_TIMEOUT);
    machines.iter().all(|m| {
        deaths
            .iter()
            .any(|(d, a, b)| d == m && *a <= op.start && *b >= since)
    })
}

/// How long before a request's start a kill may be recorded and still have hit it in flight.
const KILL_SLACK: Duration = Duration::from_millis(300);

/// Whether an instance `op` went to (any, through the balancer or a relay) was killed between
/// its start and end. The kill is recorded just before the signal is sent, and the process dies
/// a few milliseconds later: a request that started in between was in flight too.
fn killed_in_flight(kills: &[(String, Duration)], op: &Op) -> bool {
    killed_before(kills, op, op.end)
}

/// Whether an instance `op` may have run on was killed between its start and `until`.
fn killed_before(kills: &[(String, Duration)], op: &Op, until: Duration) -> bool {
    kills.iter().any(|(m, at)| {
        *at + KILL_SLACK >= op.start
            && *at <= until + Duration::from_millis(50)
            && match &op.route {
                Route::Direct(d) => d == m || op.machine.as_deref() == Some(m),
                Route::Balancer => true,
            }
    })
}

fn answered(h: &History, bounds: Bounds, v: &mut Vec<Violation>, c: &mut Checked) {
    let stops = stops(h);
    let deaths = deaths(h);
    let kills: Vec<(String, Duration)> = h
        .faults
        .iter()
        .filter_map(|f| match &f.kind {
            FaultKind::Kill(m) => Some((m.clone(), f.at)),
            _ => None,
        })
        .collect();
    let machines: std::collections::BTreeSet<&str> = deaths
        .iter()
        .map(|(m, _, _)| m.as_str())
        .chain(h.ops.iter().filter_map(|o| o.machine.as_deref()))
        .collect();
    for op in &h.ops {
        // A 2024-11-05 stream lasts until it breaks: only how it opened is checked (its
        // answers are checked as LegacyPost ops).
        let stream = op.kind == Kind::LegacyStream;
        bump(c, Promise::Answered, 1);
        // In flight on an instance that was SIGKILLed.
        let killed_under = killed_in_flight(&kills, op);
        // Sent straight to an instance that was down.
        let sent_to_dead = match &op.route {
            Route::Direct(d) => deaths
                .iter()
                .any(|(m, a, b)| m == d && *a <= op.start && op.start <= *b),
            Route::Balancer => false,
        };
        let infra = matches!(
            op.outcome,
            Outcome::Transport(_) | Outcome::Error { status: 502, .. }
        );
        // A 2024-11-05 POST whose answer was to come on a stream its holder ended, cut off
        // from Redis past its drain and grace (F16): lost with that stream, as with a killed
        // holder.
        let stream_ended = op.kind == Kind::LegacyPost && infra && {
            let (holder, since) = legacy_stream_of(h, op);
            holder.is_some_and(|m| absent_past_streams(h, m, since, op.end))
        };
        if infra
            && (killed_under
                || sent_to_dead
                || stream_ended
                || no_live_upstream(op, &deaths, &machines))
        {
            c.excused += 1;
            continue;
        }
        if (infra && events_lost(h, op)) || resumed_stream_lost(h, op) {
            c.excused += 1;
            continue;
        }
        let limit = bounds.answer + paused_for(op, &stops);
        let took = op.end.saturating_sub(op.start);
        let bad = match &op.outcome {
            // An unknown task is judged by `tasks_end` (it knows whether Redis lost it).
            Outcome::Ok | Outcome::Refused { .. } | Outcome::SessionGone | Outcome::TaskUnknown => {
                None
            }
            // Documented for a call whose instance was killed while it ran (the outcome of a
            // resume is its call's), and for nothing else.
            // A streamed call runs on after its stream broke: in flight until the resume that
            // found it abandoned (the writer-gone answer, or 410 for a stream never stored).
            Outcome::Abandoned => {
                let (call, until) = match op.kind {
                    Kind::Resume { of } => (&h.ops[of], op.end),
                    _ => (op, last_resume_end(h, op)),
                };
                (!killed_before(&kills, call, until))
                    .then(|| "abandoned, but its instance was not killed under it".to_string())
            }
            Outcome::Hung => Some(format!("no answer after {took:.1?}")),
            other => Some(format!("undocumented: {}", other.short())),
        };
        let slow = (took > limit && !stream)
            .then(|| format!("answered after {took:.1?} (bound {limit:.1?})"));
        if let Some(why) = bad.or(slow) {
            v.push(Violation {
                promise: Promise::Answered,
                at: op.end,
                op: Some(op.index),
                detail: why,
            });
        }
    }
}

/// Whether `op` is a resume refused `400` (its `Last-Event-ID` names no event) because Redis
/// lost the stream's data between the call and the resume's answer: Redis's loss, as a
/// session's is. A loss while the resume was in flight counts: the server reads the stream
/// when it answers, which is after the loss when Redis was paused across it (seed 6 with two
/// replicas: a resume sent while Redis was stopped, answered once it was back on a master
/// that had lost the writes taken alone).
fn resumed_stream_lost(h: &History, op: &Op) -> bool {
    let Kind::Resume { of } = op.kind else {
        return false;
    };
    matches!(op.outcome, Outcome::Error { status: 400, .. })
        && h.faults
            .iter()
            .any(|f| f.kind.loses_data() && h.ops[of].start <= f.at && f.at <= op.end)
}

/// When the last resume of `op`'s answer stream ended (`op`'s own end if none).
fn last_resume_end(h: &History, op: &Op) -> Duration {
    h.ops
        .iter()
        .filter(|r| r.kind == (Kind::Resume { of: op.index }))
        .map(|r| r.end)
        .max()
        .unwrap_or(op.end)
}

/// Whether `op` is a streamed answer that never came whose stored events Redis lost (its data
/// lost between the call and its last resume): gone with Redis's data, as a session can be.
fn events_lost(h: &History, op: &Op) -> bool {
    if !matches!(op.kind, Kind::Stamp { sse: true }) {
        return false;
    }
    let last = last_resume_end(h, op);
    h.faults
        .iter()
        .any(|f| f.kind.loses_data() && op.start <= f.at && f.at <= last)
}

fn sessions_kept(h: &History, v: &mut Vec<Violation>, c: &mut Checked) {
    let first_loss = h
        .faults
        .iter()
        .filter(|f| f.kind.loses_data())
        .map(|f| f.at)
        .min();
    for op in &h.ops {
        if op.session.is_none() && !matches!(op.kind, Kind::LegacyPost) {
            continue;
        }
        bump(c, Promise::SessionKept, 1);
        if op.outcome != Outcome::SessionGone {
            continue;
        }
        if first_loss.is_some_and(|at| at <= op.end) {
            continue;
        }
        if op.kind == Kind::LegacyPost {
            // A 2024-11-05 session lives in its stream: gone with the instance that had it
            // (the one that answered the client's latest `GET /sse`), wherever the POST went.
            let (holder, since) = legacy_stream_of(h, op);
            let died = h.faults.iter().any(|f| {
                f.at <= op.end
                    && matches!(&f.kind, FaultKind::Kill(m)
                        if (f.at >= since && holder == Some(m))
                            || op.route == Route::Direct(m.clone()))
            });
            // Or ended by it, cut off from Redis: for the others it was stopped (F16).
            let ended = holder.is_some_and(|m| absent_past_streams(h, m, since, op.end));
            if died || ended {
                continue;
            }
        }
        v.push(Violation {
            promise: Promise::SessionKept,
            at: op.end,
            op: Some(op.index),
            detail: "the session was gone while Redis kept its data".to_string(),
        });
    }
}

/// `stream-seq` event ids: the stream and the sequence number.
fn parse_event_id(id: &str) -> Option<(&str, u64)> {
    let (stream, seq) = id.rsplit_once('-')?;
    Some((stream, seq.parse().ok()?))
}

fn streams(h: &History, v: &mut Vec<Violation>, c: &mut Checked) {
    // A call's events and results, with those of its resumes.
    let mut events: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut results: BTreeMap<usize, usize> = BTreeMap::new();
    for op in &h.ops {
        let owner = match op.kind {
            Kind::Resume { of } => of,
            Kind::Stamp { sse: true } => op.index,
            _ => continue,
        };
        events
            .entry(owner)
            .or_default()
            .extend(op.events.iter().cloned());
        *results.entry(owner).or_insert(0) += op.results;
    }
    for (owner, list) in &events {
        bump(c, Promise::StreamOnce, 1);
        let op = &h.ops[*owner];
        let mut seen = BTreeSet::new();
        let mut last: HashMap<&str, u64> = HashMap::new();
        let mut problems = Vec::new();
        for id in list {
            if !seen.insert(id.as_str()) {
                problems.push(format!("event {id} delivered twice"));
                continue;
            }
            if let Some((stream, seq)) = parse_event_id(id) {
                if let Some(prev) = last.get(stream)
                    && *prev >= seq
                {
                    problems.push(format!("event {id} after {stream}-{prev}"));
                }
                last.insert(stream, seq);
            }
        }
        let n = results.get(owner).copied().unwrap_or(0);
        if n > 1 {
            problems.push(format!("the answer delivered {n} times"));
        }
        if op.acked && n == 0 {
            problems.push("acknowledged, but no answer on its stream".into());
        }
        if !problems.is_empty() {
            v.push(Violation {
                promise: Promise::StreamOnce,
                at: op.end,
                op: Some(*owner),
                detail: format!("{} (events {list:?})", problems.join("; ")),
            });
        }
    }
}

fn tasks_end(h: &History, v: &mut Vec<Violation>, c: &mut Checked) {
    let first_loss = h
        .faults
        .iter()
        .filter(|f| f.kind.loses_data())
        .map(|f| f.at)
        .min();
    let kills: Vec<(&str, Duration)> = h
        .faults
        .iter()
        .filter_map(|f| match &f.kind {
            FaultKind::Kill(m) => Some((m.as_str(), f.at)),
            _ => None,
        })
        .collect();
    let mut polls: BTreeMap<usize, Vec<&Op>> = BTreeMap::new();
    for op in &h.ops {
        if let Kind::TaskPoll { of } = op.kind {
            polls.entry(of).or_default().push(op);
        }
    }
    for op in h
        .ops
        .iter()
        .filter(|o| o.kind == Kind::TaskStart && o.task.is_some())
    {
        bump(c, Promise::TaskEnds, 1);
        let ps = polls.get(&op.index).map(Vec::as_slice).unwrap_or_default();
        let mut problems = Vec::new();
        if let Some(p) = ps
            .iter()
            .find(|p| p.outcome == Outcome::TaskUnknown && first_loss.is_none_or(|at| at > p.end))
        {
            // Of its own (its op is the poll): a known finding is matched on each part.
            v.push(Violation {
                promise: Promise::TaskEnds,
                at: p.end,
                op: Some(p.index),
                detail: format!(
                    "task of #{} answered \"unknown task\" while Redis kept its data",
                    op.index
                ),
            });
        }
        let ended = ps
            .iter()
            .find_map(|p| p.task.as_ref().filter(|t| t.is_terminal()).map(|t| (*p, t)));
        let at = ended.map_or(op.end, |(p, _)| p.end);
        // Redis lost its data after the task was created: its record may be gone with it.
        let record_lost = h
            .faults
            .iter()
            .any(|f| f.kind.loses_data() && f.at >= op.start);
        // The fleet could not say at the end of the client's window (its last poll was
        // refused: Redis failing): whether the task ended is unknown, not wrong. A dead
        // executor's task is failed only once Redis answers steadily
        // (`fleet/heartbeat_liveness.rs`).
        let unknowable = ps
            .last()
            .is_some_and(|p| matches!(p.outcome, Outcome::Refused { .. }));
        match ended {
            None if record_lost || unknowable => {}
            None => problems.push("not seen to end within the client's window".into()),
            Some((_, TaskView::Completed)) => {}
            Some((
                p,
                TaskView::Failed {
                    gone: true,
                    executor,
                },
            )) => {
                // Documented when its executor (any instance, if the error does not name it)
                // was SIGKILLed between the call and the poll that saw it failed.
                let killed = kills.iter().any(|(m, k)| {
                    *k + KILL_SLACK >= op.start
                        && *k <= p.end
                        && executor.as_deref().is_none_or(|e| e == *m)
                });
                // Documented too when its executor was without Redis for a heartbeat's
                // lifetime, or its link to Redis refused for the takeover grace, while it
                // ran: the fleet then takes it for dead, as it must.
                let presumed_dead = executor.as_deref().is_some_and(|e| {
                    silent_for_a_lifetime(h, e, op.start, p.end)
                        || refused_for_the_grace(h, e, op.start, p.end)
                });
                if !killed && !presumed_dead {
                    problems.push(format!(
                        "failed as its instance stopped, but {} was neither killed nor cut off from Redis for a heartbeat's lifetime while it ran",
                        executor.as_deref().unwrap_or("no instance")
                    ));
                }
            }
            Some((_, other)) => problems.push(format!("ended {other:?}")),
        }
        if !problems.is_empty() {
            v.push(Violation {
                promise: Promise::TaskEnds,
                at,
                op: Some(op.index),
                detail: problems.join("; "),
            });
        }
    }
}

/// Whether `machine`'s link to Redis was refused (its connections closed, so its channel
/// subscription too) for the takeover grace at a stretch within `[from, to]`: others then see
/// its heartbeat without a subscriber for the grace and presume it gone, the documented rule
/// (nothing tells a refused link from a crash).
fn refused_for_the_grace(h: &History, machine: &str, from: Duration, to: Duration) -> bool {
    let own_link = format!("{machine}->redis");
    // From the refusal on: the subscription drops with the connection, and a reader may see
    // it gone at once and start the grace's clock.
    let grace = Duration::from_millis(crate::fleet::TAKEOVER_GRACE_MS);
    windows(
        h,
        |k| match k {
            FaultKind::Link { link, mode } if *link == own_link && mode == "refuse" => {
                Some("link".to_string())
            }
            _ => None,
        },
        |k| match k {
            FaultKind::Link { link, mode } if *link == own_link && mode != "refuse" => {
                Some("link".to_string())
            }
            _ => None,
        },
    )
    .into_iter()
    .any(|(_, a, b)| b.min(to).saturating_sub(a.max(from)) >= grace)
}

/// A delay on an instance's link to Redis at which its beats fail: a round trip then takes
/// longer than Redis's command timeout (500 ms), and its lease runs out as on a silent link.
const SLOW: Duration = Duration::from_millis(250);

/// The delay of a link mode `delay <n> ms`.
fn link_delay(mode: &str) -> Option<Duration> {
    let ms = mode.strip_prefix("delay ")?.strip_suffix(" ms")?;
    ms.parse().ok().map(Duration::from_millis)
}

/// The instance holding the 2024-11-05 stream a POST `op` belongs to (the one that answered
/// its client's latest `GET /sse` before it), and when that stream opened.
fn legacy_stream_of<'h>(h: &'h History, op: &Op) -> (Option<&'h str>, Duration) {
    let stream = h
        .ops
        .iter()
        .filter(|s| s.kind == Kind::LegacyStream && s.client == op.client && s.start <= op.start)
        .max_by_key(|s| s.start);
    (
        stream.and_then(|s| s.machine.as_deref()),
        stream.map_or(Duration::ZERO, |s| s.start),
    )
}

/// Whether `machine`, the holder of a 2024-11-05 stream opened at `since`, may have ended it
/// by `until` because its lease was out for as long as the others wait before they call its
/// streams gone (its drain and grace: `fleet/heartbeat.rs`, `watch_lease`; F16). Its lease
/// goes out as soon as its subscription drops (its own link refused, Redis restarted), and a
/// lease's length after its last beat (an interval at most before the stretch began) when
/// Redis only stops answering it (its link blackholed or delayed by [`SLOW`] or more, Redis
/// or itself paused). A lease granted again before that (within [`RECONNECT`] of the stretch's end) keeps the streams,
/// and a stream opened while the lease was out past it ends at once. Anything else (a delay,
/// another instance's link, a shorter stretch) excuses nothing: such a stream ended for
/// nothing.
fn absent_past_streams(h: &History, machine: &str, since: Duration, until: Duration) -> bool {
    use crate::fleet::{DRAIN_MS, HEARTBEAT_INTERVAL_MS, HEARTBEAT_TTL_MS, SHUTDOWN_GRACE_MS};
    let own_link = format!("{machine}->redis");
    let outlive = Duration::from_millis(DRAIN_MS + SHUTDOWN_GRACE_MS);
    // The lease a beat grants, less the interval it may have come before the stretch.
    let silent = Duration::from_millis(HEARTBEAT_TTL_MS * 9 / 10 - HEARTBEAT_INTERVAL_MS);
    // The moments its subscription dropped.
    let drops: Vec<Duration> = h
        .faults
        .iter()
        .filter(|f| match &f.kind {
            FaultKind::RedisRestart => true,
            FaultKind::Link { link, mode } => *link == own_link && mode == "refuse",
            _ => false,
        })
        .map(|f| f.at)
        .collect();
    without_redis(h, machine, (Duration::ZERO, until), Some(SLOW))
        .into_iter()
        .any(|(x, y)| {
            let out = drops
                .iter()
                .copied()
                .filter(|d| (x..=y).contains(d))
                .fold(x + silent, Duration::min);
            (out + outlive).max(since) <= (y + RECONNECT).min(until)
        })
}

/// The stretches `machine` was without Redis (Redis stopped or restarting, its link to Redis
/// blackholed or refused, or itself paused) within `[from, to]`, those less than
/// [`RECONNECT`] apart as one. With `slow`, its link delayed by at least that much counts too.
fn without_redis(
    h: &History,
    machine: &str,
    (from, to): (Duration, Duration),
    slow: Option<Duration>,
) -> Vec<(Duration, Duration)> {
    let own_link = format!("{machine}->redis");
    let cut = |mode: &str| {
        mode == "blackhole"
            || mode == "refuse"
            || slow.is_some_and(|slow| link_delay(mode).is_some_and(|d| d >= slow))
    };
    let mut spans: Vec<(Duration, Duration)> = windows(
        h,
        |k| match k {
            FaultKind::RedisStop | FaultKind::RedisRestart => Some("redis".to_string()),
            FaultKind::Stop(m) if m == machine => Some("stop".to_string()),
            FaultKind::Link { link, mode } if *link == own_link && cut(mode) => {
                Some("link".to_string())
            }
            _ => None,
        },
        |k| match k {
            FaultKind::RedisCont => Some("redis".to_string()),
            FaultKind::Cont(m) | FaultKind::Kill(m) if m == machine => Some("stop".to_string()),
            // Any other mode ends the cut (a shorter delay still passes).
            FaultKind::Link { link, mode } if *link == own_link && !cut(mode) => {
                Some("link".to_string())
            }
            _ => None,
        },
    )
    .into_iter()
    .map(|(_, a, b)| (a.max(from), b.min(to)))
    .filter(|(a, b)| a < b)
    .collect();
    spans.sort();
    let mut merged: Vec<(Duration, Duration)> = Vec::new();
    for (a, b) in spans {
        match merged.last_mut() {
            // Back to back, or nearly: Redis up again for less than a beat's interval may have
            // seen no beat (the soaks' cases: a restart a microsecond after a restart, a
            // pause then a restart 0.7 s apart).
            Some((_, y)) if a <= *y + RECONNECT => *y = (*y).max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// Less than this between two stretches without Redis may hold no beat (one comes every
/// interval; a failed one is tried again half a second later, after its own timeout), so the
/// two count as one stretch for the heartbeat.
const RECONNECT: Duration = Duration::from_millis(crate::fleet::HEARTBEAT_INTERVAL_MS);

/// Whether `machine` was without Redis (Redis stopped or restarting, its link to Redis
/// blackholed or refused, or itself paused) at a stretch within `[from, to]` long enough for
/// its heartbeat to expire (the lifetime less an interval, since its last beat may have come
/// an interval before): the fleet then presumes it dead (the orphan scanner and task readers
/// fail its tasks), which is the documented rule for a silent instance, and
/// indistinguishable from a crash.
fn silent_for_a_lifetime(h: &History, machine: &str, from: Duration, to: Duration) -> bool {
    // Its last beat may be up to an interval before the stretch began (or before the task
    // started): the key may expire an interval sooner than the stretch is a lifetime long.
    let lifetime =
        Duration::from_millis(crate::fleet::HEARTBEAT_TTL_MS - crate::fleet::HEARTBEAT_INTERVAL_MS);
    without_redis(h, machine, (from, to), None)
        .into_iter()
        .any(|(x, y)| y - x >= lifetime)
}

mod report;
pub use report::{report, table, unknown};

#[cfg(test)]
mod tests;
