//! The checker on histories written by hand, one per promise and per finding.

use super::*;
use crate::history::{Fault, Served};

fn s(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

fn op(index: usize, kind: Kind, start: f64, end: f64, outcome: Outcome) -> Op {
    let mut o = Op::new("c0", kind, Route::Balancer, s(start));
    o.index = index;
    o.end = s(end);
    o.outcome = outcome;
    o.session = Some("aaaaaaaaaaaaaaaa".into());
    o.rpc_id = Some(100 + index as u64);
    o
}

fn served(machine: &str, epoch: u64, index: usize) -> Served {
    Served {
        machine: machine.into(),
        session: "aaaaaaaaaaaaaaaa".into(),
        epoch,
        rpc_id: 100 + index as u64,
    }
}

fn hist(ops: Vec<Op>) -> History {
    History {
        ops,
        duration: s(30.0),
        ..History::default()
    }
}

fn broken(h: &History) -> BTreeSet<Promise> {
    check(h, Bounds::default()).broken()
}

fn stamp(index: usize, key: &str, acked: bool) -> Op {
    let mut o = op(
        index,
        Kind::Stamp { sse: false },
        1.0,
        1.1,
        if acked {
            Outcome::Ok
        } else {
            Outcome::Refused { status: 503 }
        },
    );
    o.stamp = Some(key.into());
    o.acked = acked;
    o
}

#[test]
fn a_sound_history_breaks_nothing() {
    let mut h = hist(vec![stamp(0, "k0", true), stamp(1, "k1", false)]);
    h.ops[1].start = s(2.0);
    h.ops[1].end = s(2.1);
    h.served = vec![served("desk-1", 1, 0), served("desk-2", 2, 1)];
    h.effects = [("k0".to_string(), 1)].into();
    let verdict = check(&h, Bounds::default());
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    assert_eq!(verdict.checked.per_promise[&Promise::Effects], 2);
    assert_eq!(verdict.checked.per_promise[&Promise::OneHolder], 2);
}

#[test]
fn two_instances_serving_one_epoch_is_two_holders() {
    let mut h = hist(vec![stamp(0, "k0", true), stamp(1, "k1", true)]);
    h.served = vec![served("desk-1", 3, 0), served("desk-2", 3, 1)];
    h.effects = [("k0".to_string(), 1), ("k1".to_string(), 1)].into();
    assert_eq!(broken(&h), [Promise::OneHolder].into());
}

#[test]
fn an_older_epoch_after_a_newer_one_is_a_stale_holder() {
    let mut h = hist(vec![stamp(0, "k0", true), stamp(1, "k1", true)]);
    h.ops[1].start = s(2.0);
    h.ops[1].end = s(2.1);
    h.served = vec![served("desk-2", 5, 0), served("desk-1", 4, 1)];
    h.effects = [("k0".to_string(), 1), ("k1".to_string(), 1)].into();
    let verdict = check(&h, Bounds::default());
    assert_eq!(verdict.broken(), [Promise::OneHolder].into());
    assert!(verdict.violations[0].detail.contains("stale holder"));
    // Overlapping requests may be served in either order.
    h.ops[1].start = s(1.05);
    assert!(broken(&h).is_empty());
}

#[test]
fn an_acknowledged_call_lost_or_doubled_is_caught() {
    let mut h = hist(vec![stamp(0, "k0", true), stamp(1, "k1", true)]);
    h.effects = [("k1".to_string(), 2)].into();
    let verdict = check(&h, Bounds::default());
    assert_eq!(verdict.broken(), [Promise::Effects].into());
    assert_eq!(verdict.violations.len(), 2, "{:?}", verdict.violations);
    // Unacknowledged: once is fine, twice is not, and a key no one asked for is caught.
    let mut h = hist(vec![stamp(0, "k0", false)]);
    h.effects = [("k0".to_string(), 1)].into();
    assert!(broken(&h).is_empty());
    h.effects = [("k0".to_string(), 2), ("zz".to_string(), 1)].into();
    assert_eq!(check(&h, Bounds::default()).violations.len(), 2);
}

#[test]
fn a_hang_a_slow_answer_or_an_undocumented_error_is_caught() {
    let h = hist(vec![op(0, Kind::Initialize, 1.0, 30.0, Outcome::Hung)]);
    assert_eq!(broken(&h), [Promise::Answered].into());
    let h = hist(vec![op(0, Kind::Initialize, 1.0, 20.0, Outcome::Ok)]);
    assert_eq!(broken(&h), [Promise::Answered].into());
    let e = Outcome::Error {
        status: 500,
        detail: "boom".into(),
    };
    let h = hist(vec![op(0, Kind::Initialize, 1.0, 1.1, e)]);
    assert_eq!(broken(&h), [Promise::Answered].into());
    let h = hist(vec![op(
        0,
        Kind::Initialize,
        1.0,
        1.1,
        Outcome::Refused { status: 429 },
    )]);
    assert!(broken(&h).is_empty());
}

#[test]
fn requests_in_flight_on_a_killed_instance_are_excused_and_pauses_extend_the_bound() {
    let t = Outcome::Transport("reset".into());
    let mut h = hist(vec![op(0, Kind::Initialize, 1.0, 1.5, t.clone())]);
    h.faults = vec![Fault {
        at: s(1.2),
        kind: FaultKind::Kill("desk-1".into()),
    }];
    let verdict = check(&h, Bounds::default());
    assert!(verdict.violations.is_empty());
    assert_eq!(verdict.checked.excused, 1);
    // Recorded just before it started: in flight (the process dies after the record).
    h.faults[0].at = s(0.9);
    assert!(broken(&h).is_empty());
    // Long before: not in flight, not excused.
    h.faults[0].at = s(0.5);
    assert_eq!(broken(&h), [Promise::Answered].into());
    // 18 s, of which 4 s on a paused instance: within 15 + 4.
    let mut h = hist(vec![op(0, Kind::Initialize, 1.0, 19.0, Outcome::Ok)]);
    h.faults = vec![
        Fault {
            at: s(2.0),
            kind: FaultKind::Stop("desk-1".into()),
        },
        Fault {
            at: s(6.0),
            kind: FaultKind::Cont("desk-1".into()),
        },
    ];
    assert!(broken(&h).is_empty());
}

#[test]
fn a_session_lost_is_caught_unless_redis_lost_it() {
    let mut h = hist(vec![op(
        0,
        Kind::Stamp { sse: false },
        5.0,
        5.1,
        Outcome::SessionGone,
    )]);
    let verdict = check(&h, Bounds::default());
    assert_eq!(verdict.broken(), [Promise::SessionKept].into());
    let r = report(&h, &verdict, 7);
    assert!(r.contains("no session lost") && r.contains("seed 7"), "{r}");
    h.faults = vec![Fault {
        at: s(4.0),
        kind: FaultKind::RedisDataLoss,
    }];
    assert!(broken(&h).is_empty());
}

/// A streamed answer that never came is caught, unless Redis lost its data between the
/// call and its last resume (the soak's case: a restart lost the stored events).
#[test]
fn a_streamed_answer_that_never_came_is_caught_unless_redis_lost_its_events() {
    let never = Outcome::Transport("the answer never came".into());
    let call = op(0, Kind::Stamp { sse: true }, 1.0, 1.3, never);
    let resume = op(1, Kind::Resume { of: 0 }, 2.0, 2.5, Outcome::Ok);
    let mut h = hist(vec![call, resume]);
    assert_eq!(broken(&h), [Promise::Answered].into());
    h.faults = vec![Fault {
        at: s(2.2),
        kind: FaultKind::RedisDataLoss,
    }];
    assert!(broken(&h).is_empty(), "lost during the resume");
    h.faults[0].at = s(0.5);
    assert_eq!(
        broken(&h),
        [Promise::Answered].into(),
        "a loss before the call does not excuse it"
    );
    h.faults[0].at = s(1.1);
    h.ops[0].kind = Kind::Stamp { sse: false };
    h.ops.truncate(1);
    assert_eq!(
        broken(&h),
        [Promise::Answered].into(),
        "nor a plain answer's transport error"
    );
}

#[test]
fn sse_events_twice_out_of_order_or_an_answer_twice_are_caught() {
    let mut call = op(0, Kind::Stamp { sse: true }, 1.0, 1.5, Outcome::Ok);
    call.acked = true;
    call.events = vec!["3-1".into()];
    let mut resume = op(1, Kind::Resume { of: 0 }, 1.6, 1.8, Outcome::Ok);
    resume.events = vec!["3-2".into()];
    resume.results = 1;
    let mut h = hist(vec![call, resume]);
    assert!(broken(&h).is_empty());
    h.ops[1].events = vec!["3-1".into(), "3-2".into()];
    assert_eq!(broken(&h), [Promise::StreamOnce].into());
    h.ops[1].events = vec!["3-0".into()];
    assert_eq!(broken(&h), [Promise::StreamOnce].into());
    h.ops[1].events = vec!["3-2".into()];
    h.ops[0].results = 1;
    assert_eq!(broken(&h), [Promise::StreamOnce].into());
    h.ops[0].results = 0;
    h.ops[1].results = 0;
    assert_eq!(broken(&h), [Promise::StreamOnce].into());
}

/// Findings that were fixed are violations again: a 2024-11-05 POST answered 404 by the
/// instance with its stream (F1), or by another one (F2), and a stale holder serving an
/// older epoch during a Redis outage (F3), are reported whatever the faults around them.
#[test]
fn fixed_findings_are_no_longer_excused() {
    let mut post = op(0, Kind::LegacyPost, 5.0, 5.5, Outcome::SessionGone);
    post.route = Route::Direct("desk-1".into());
    let mut h = hist(vec![post]);
    h.faults = vec![Fault {
        at: s(3.0),
        kind: FaultKind::RedisStop,
    }];
    assert_eq!(unknown(&h, &check(&h, Bounds::default())).len(), 1, "F1");
    h.ops[0].machine = Some("desk-3".into());
    assert_eq!(unknown(&h, &check(&h, Bounds::default())).len(), 1, "F2");

    let mut a = stamp(0, "k0", true);
    a.machine = Some("desk-2".into());
    let mut b = stamp(1, "k1", true);
    b.machine = Some("desk-1".into());
    b.start = s(2.0);
    b.end = s(2.1);
    let mut h = hist(vec![a, b]);
    h.served = vec![served("desk-2", 5, 0), served("desk-1", 4, 1)];
    h.effects = [("k0".to_string(), 1), ("k1".to_string(), 1)].into();
    h.faults = vec![Fault {
        at: s(1.5),
        kind: FaultKind::RedisStop,
    }];
    let verdict = check(&h, Bounds::default());
    assert_eq!(verdict.broken(), [Promise::OneHolder].into());
    assert_eq!(unknown(&h, &verdict).len(), 1, "F3");
}

/// A 2024-11-05 session is gone with the instance that had its stream, wherever the POST
/// that finds it gone lands: excused after a kill of that instance, not otherwise.
#[test]
fn a_2024_11_05_session_gone_with_its_streams_instance_is_excused() {
    let mut stream = op(0, Kind::LegacyStream, 1.0, 4.0, Outcome::Ok);
    stream.machine = Some("desk-1".into());
    let post = op(1, Kind::LegacyPost, 5.0, 5.1, Outcome::SessionGone);
    let mut h = hist(vec![stream, post]);
    assert_eq!(unknown(&h, &check(&h, Bounds::default())).len(), 1);
    h.faults = vec![Fault {
        at: s(3.0),
        kind: FaultKind::Kill("desk-2".into()),
    }];
    assert_eq!(
        unknown(&h, &check(&h, Bounds::default())).len(),
        1,
        "another instance"
    );
    h.faults = vec![Fault {
        at: s(3.0),
        kind: FaultKind::Kill("desk-1".into()),
    }];
    assert!(unknown(&h, &check(&h, Bounds::default())).is_empty());
}

/// F16: a 2024-11-05 session is gone with its holder too when the holder's lease was out for
/// its drain and grace (1.5 s) while it held the stream: from a refusal of its own link to
/// Redis (the lease goes out with the subscription), from a blackhole a lease (2.7 s) less an
/// interval later (likewise from a delay its beats time out on); never before that, never for
/// a blip the lease outlives, a shorter delay, or another instance's link.
#[test]
fn a_2024_11_05_session_ended_by_its_holder_cut_off_from_redis_is_excused() {
    let legacy = |stream_at: f64, gone_at: f64, faults: Vec<Fault>| {
        let mut stream = op(0, Kind::LegacyStream, stream_at, 9.0, Outcome::Ok);
        stream.machine = Some("desk-1".into());
        let post = op(
            1,
            Kind::LegacyPost,
            gone_at - 0.1,
            gone_at,
            Outcome::SessionGone,
        );
        let mut h = hist(vec![stream, post]);
        h.faults = faults;
        unknown(&h, &check(&h, Bounds::default())).len()
    };
    // `m`'s link to Redis in `mode` from 2.0 s to `heal`.
    let cut = |m: &str, mode: &str, heal: f64| {
        vec![redis_link(m, mode, 2.0), redis_link(m, "pass", heal)]
    };
    // (stream opened, session found gone, faults, violations, what it shows)
    let cases = [
        // Seed 3's: refused for 5.6 s, the session gone 2 s on.
        (
            1.0,
            4.0,
            cut("desk-1", "refuse", 7.6),
            0,
            "refused past the drain and grace",
        ),
        (
            1.0,
            3.4,
            cut("desk-1", "refuse", 7.6),
            1,
            "gone before the holder could end it",
        ),
        (
            5.0,
            5.3,
            cut("desk-1", "refuse", 7.6),
            0,
            "a stream opened past it ends at once",
        ),
        (
            1.0,
            4.0,
            cut("desk-1", "refuse", 2.4),
            1,
            "a blip the lease outlives",
        ),
        (
            1.0,
            4.0,
            cut("desk-2", "refuse", 7.6),
            1,
            "another instance's link",
        ),
        (
            1.0,
            6.0,
            cut("desk-1", "delay 100 ms", 7.6),
            1,
            "a slow link its beats pass",
        ),
        // Delayed past half the command timeout, its beats fail: as blackholed.
        (
            1.0,
            6.0,
            cut("desk-1", "delay 300 ms", 7.6),
            0,
            "a link its beats time out on",
        ),
        (
            1.0,
            4.0,
            cut("desk-1", "delay 300 ms", 7.6),
            1,
            "gone before it could end it",
        ),
        // Blackholed: absent 1.7 s after the cut at the soonest, the streams 1.5 s later.
        (
            1.0,
            6.0,
            cut("desk-1", "blackhole", 5.0),
            0,
            "blackholed for 3 s",
        ),
        (
            1.0,
            6.0,
            cut("desk-1", "blackhole", 4.0),
            1,
            "blackholed for 2 s: back in time",
        ),
        (
            1.0,
            5.0,
            cut("desk-1", "blackhole", 7.0),
            1,
            "gone before a blackholed one could",
        ),
    ];
    for (stream_at, gone_at, faults, violations, what) in cases {
        assert_eq!(legacy(stream_at, gone_at, faults), violations, "{what}");
    }
    // Redis restarted (every connection closed): like a refusal.
    let restart = vec![
        Fault {
            at: s(2.0),
            kind: FaultKind::RedisRestart,
        },
        Fault {
            at: s(4.0),
            kind: FaultKind::RedisCont,
        },
    ];
    assert_eq!(legacy(1.0, 4.5, restart), 0, "Redis restarted for 2 s");
}

/// A 2024-11-05 POST whose answer never came because its holder, cut off from Redis past its
/// drain and grace, ended the stream (F16) is excused, as with a killed holder (seed 3: Redis
/// paused for 3 s, the stream ended a moment after it came back); the same end with Redis
/// there all along is a violation.
#[test]
fn a_2024_11_05_post_lost_with_a_stream_its_holder_ended_is_excused() {
    let lost_post = |faults: Vec<Fault>| {
        let mut stream = op(0, Kind::LegacyStream, 1.0, 9.0, Outcome::Ok);
        stream.machine = Some("desk-1".into());
        let post = op(
            1,
            Kind::LegacyPost,
            5.2,
            5.2,
            Outcome::Transport("the stream ended before the answer".into()),
        );
        let mut h = hist(vec![stream, post]);
        h.faults = faults;
        broken(&h)
    };
    let paused = vec![
        Fault {
            at: s(2.0),
            kind: FaultKind::RedisStop,
        },
        Fault {
            at: s(5.0),
            kind: FaultKind::RedisCont,
        },
    ];
    assert_eq!(lost_post(paused), [].into(), "Redis paused for 3 s");
    assert_eq!(
        lost_post(Vec::new()),
        [Promise::Answered].into(),
        "a stream ended for nothing"
    );
}

/// A `502` from the balancer while each instance had been down just before is excused
/// (nginx had nowhere to send it); with one instance never down, it is not.
#[test]
fn a_502_with_no_live_upstream_is_excused() {
    let err = Outcome::Error {
        status: 502,
        detail: "no live upstreams".into(),
    };
    let mut h = hist(vec![op(0, Kind::StatelessStamp, 14.2, 14.2, err)]);
    let down = |m: &str, from: f64, to: f64| {
        [
            Fault {
                at: s(from),
                kind: FaultKind::Kill(m.into()),
            },
            Fault {
                at: s(to),
                kind: FaultKind::Restart(m.into()),
            },
        ]
    };
    h.faults = [down("desk-3", 11.2, 13.3), down("desk-1", 13.4, 15.1)].concat();
    h.faults.sort_by_key(|f| f.at);
    h.ops[0].machine = None;
    let mut with_two = h.clone();
    with_two
        .ops
        .push(op(1, Kind::StatelessStamp, 1.0, 1.1, Outcome::Ok));
    with_two.ops[1].machine = Some("desk-2".into());
    assert_eq!(
        unknown(&with_two, &check(&with_two, Bounds::default())).len(),
        1,
        "desk-2 was never down"
    );
    h.faults = [
        down("desk-3", 11.2, 13.3),
        down("desk-1", 13.4, 15.1),
        down("desk-2", 14.0, 15.2),
    ]
    .concat();
    h.faults.sort_by_key(|f| f.at);
    assert!(unknown(&h, &check(&h, Bounds::default())).is_empty());
}

/// Where Redis lost data (here, the sentinels switched away from a master the instances had
/// written to alone), a session's epoch may start again lower: served at a lower epoch after
/// the loss is not a stale holder; the same without the loss is.
#[test]
fn epochs_are_compared_only_between_redis_data_losses() {
    let mut a = op(0, Kind::Stamp { sse: false }, 1.0, 1.1, Outcome::Ok);
    let mut b = op(1, Kind::Stamp { sse: false }, 3.0, 3.1, Outcome::Ok);
    a.rpc_id = Some(1);
    b.rpc_id = Some(2);
    let mut h = hist(vec![a, b]);
    h.served = vec![
        Served {
            machine: "desk-3".into(),
            session: "0011223344556677".into(),
            epoch: 3,
            rpc_id: 1,
        },
        Served {
            machine: "desk-1".into(),
            session: "0011223344556677".into(),
            epoch: 2,
            rpc_id: 2,
        },
    ];
    assert_eq!(
        check(&h, Bounds::default()).broken(),
        [Promise::OneHolder].into(),
        "a lower epoch later, Redis intact"
    );
    h.faults = vec![Fault {
        at: s(2.0),
        kind: FaultKind::RedisLostAloneWrites {
            port: 7001,
            followed_within: Duration::ZERO,
        },
    }];
    assert!(check(&h, Bounds::default()).violations.is_empty());
    // A request begun before the loss and served after it, at the lower epoch: excused.
    h.ops[1].start = s(1.5);
    assert!(check(&h, Bounds::default()).violations.is_empty());
    // Two machines at one epoch within one stretch: still two holders.
    h.served[1].epoch = 3;
    h.faults[0].at = s(5.0);
    assert_eq!(
        check(&h, Bounds::default()).broken(),
        [Promise::OneHolder].into()
    );
    // Both after a switch that lost a claim, while an instance had not followed it yet (one
    // may still hold the lost claim; the other claimed its epoch anew): excused...
    h.ops[0].start = s(0.2);
    h.ops[0].end = s(0.25);
    h.ops[1].start = s(0.6);
    h.ops[1].end = s(0.65);
    h.faults[0] = Fault {
        at: s(0.1),
        kind: FaultKind::RedisLostAloneWrites {
            port: 7001,
            followed_within: Duration::from_millis(300),
        },
    };
    assert!(check(&h, Bounds::default()).violations.is_empty());
    // ...but not once every instance followed it before the first of the two.
    h.faults[0].kind = FaultKind::RedisLostAloneWrites {
        port: 7001,
        followed_within: Duration::from_millis(50),
    };
    assert_eq!(
        check(&h, Bounds::default()).broken(),
        [Promise::OneHolder].into()
    );
}

/// A resume refused `400` (no such event) is excused only when Redis lost data between
/// the call and the resume.
#[test]
fn a_resume_refused_for_a_stream_redis_lost_is_excused() {
    let mut call = op(0, Kind::Stamp { sse: true }, 1.0, 1.3, Outcome::Ok);
    call.events = vec!["1-1".into()];
    let resume = op(
        1,
        Kind::Resume { of: 0 },
        2.0,
        2.1,
        Outcome::Error {
            status: 400,
            detail: "Last-Event-ID does not name an event of this session".into(),
        },
    );
    let mut h = hist(vec![call, resume]);
    assert_eq!(
        check(&h, Bounds::default()).broken(),
        [Promise::Answered].into()
    );
    h.faults = vec![Fault {
        at: s(1.5),
        kind: FaultKind::RedisLostAloneWrites {
            port: 7001,
            followed_within: Duration::ZERO,
        },
    }];
    assert!(
        !check(&h, Bounds::default())
            .broken()
            .contains(&Promise::Answered)
    );
    // A loss while the resume was in flight (2.0 to 2.1 s): the server may have read after it.
    h.faults[0].at = s(2.05);
    assert!(
        !check(&h, Bounds::default())
            .broken()
            .contains(&Promise::Answered)
    );
    h.faults[0].at = s(2.5);
    assert!(
        check(&h, Bounds::default())
            .broken()
            .contains(&Promise::Answered),
        "a loss after the resume does not excuse it"
    );
}

/// F4, fixed: the resumed answer of a call in flight when its instance was killed ends with
/// the documented abandoned-call error; the same error without a kill under the call is a
/// violation, and a resume that hangs is one either way.
#[test]
fn an_abandoned_answer_is_documented_only_for_a_call_killed_in_flight() {
    let mut call = op(0, Kind::Stamp { sse: true }, 1.0, 1.3, Outcome::Abandoned);
    call.events = vec!["1-1".into()];
    let resume = op(1, Kind::Resume { of: 0 }, 2.0, 3.1, Outcome::Abandoned);
    let mut h = hist(vec![call, resume]);
    let kill = Fault {
        at: s(1.2),
        kind: FaultKind::Kill("desk-2".into()),
    };
    h.faults = vec![kill.clone()];
    assert!(check(&h, Bounds::default()).violations.is_empty());
    h.faults.clear();
    let verdict = check(&h, Bounds::default());
    assert_eq!(verdict.broken(), [Promise::Answered].into());
    assert_eq!(verdict.violations.len(), 2, "{:?}", verdict.violations);
    // Killed after the call's stream broke, while the call still ran (before its resume):
    // abandoned under it all the same (a stream never stored is refused `410` on resume,
    // which the client reads as abandoned).
    h.faults = vec![Fault {
        at: s(1.7),
        kind: FaultKind::Kill("desk-2".into()),
    }];
    assert!(check(&h, Bounds::default()).violations.is_empty());
    h.faults = vec![Fault {
        at: s(3.5),
        kind: FaultKind::Kill("desk-2".into()),
    }];
    assert_eq!(
        check(&h, Bounds::default()).violations.len(),
        2,
        "killed after the resume that reported it"
    );
    h.faults = vec![kill];
    h.ops[1].outcome = Outcome::Hung;
    h.ops[1].end = s(27.0);
    assert_eq!(unknown(&h, &check(&h, Bounds::default())).len(), 1);
}

/// A 2026-07-28 task `stamp` (key `k`) started at 1 s, and its polls: one per view, 0.3 s
/// apart from 1.5 s.
fn task(key: &str, views: &[Option<TaskView>]) -> Vec<Op> {
    let mut start = op(0, Kind::TaskStart, 1.0, 1.1, Outcome::Ok);
    start.session = None;
    start.stamp = Some(key.into());
    start.task = Some(TaskView::Working);
    let mut ops = vec![start];
    for (i, view) in views.iter().enumerate() {
        let at = 1.5 + 0.3 * i as f64;
        let mut p = op(i + 1, Kind::TaskPoll { of: 0 }, at, at + 0.05, Outcome::Ok);
        p.session = None;
        p.task = view.clone();
        if view.is_none() {
            p.outcome = Outcome::TaskUnknown;
        }
        ops.push(p);
    }
    ops[0].acked = views
        .last()
        .is_some_and(|v| *v == Some(TaskView::Completed));
    ops
}

/// `m`'s link to Redis switched to `mode` at `at` s.
fn redis_link(m: &str, mode: &str, at: f64) -> Fault {
    Fault {
        at: s(at),
        kind: FaultKind::Link {
            link: format!("{m}->redis"),
            mode: mode.into(),
        },
    }
}

fn kill(m: &str, at: f64) -> Fault {
    Fault {
        at: s(at),
        kind: FaultKind::Kill(m.into()),
    }
}

/// A task completed with a result is an acknowledged call: exactly one effect. A doubled
/// (or lost) effect is caught.
#[test]
fn a_completed_task_has_one_effect_and_a_doubled_one_is_caught() {
    let mut h = hist(task(
        "t0-1",
        &[Some(TaskView::Working), Some(TaskView::Completed)],
    ));
    h.effects = [("t0-1".to_string(), 1)].into();
    let verdict = check(&h, Bounds::default());
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    assert_eq!(verdict.checked.per_promise[&Promise::TaskEnds], 1);
    h.effects = [("t0-1".to_string(), 2)].into();
    let verdict = check(&h, Bounds::default());
    assert_eq!(verdict.broken(), [Promise::Effects].into());
    let r = report(&h, &verdict, 3);
    assert!(r.contains("key t0-1") && r.contains("(doubled)"), "{r}");
    h.effects.clear();
    assert_eq!(broken(&h), [Promise::Effects].into(), "lost");
}

/// `failed` with the executor-gone message is documented for a task whose executor was
/// SIGKILLed while it ran (its effect: at most once), and a violation otherwise: no kill,
/// or a kill of another instance.
#[test]
fn a_task_failed_as_its_instance_stopped_is_documented_only_after_a_kill() {
    let failed = TaskView::Failed {
        gone: true,
        executor: Some("desk-2".into()),
    };
    let mut h = hist(task(
        "t0-1",
        &[Some(TaskView::Working), Some(failed.clone())],
    ));
    h.effects = [("t0-1".to_string(), 1)].into();
    h.faults = vec![kill("desk-2", 1.3)];
    let verdict = check(&h, Bounds::default());
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    // Twice is too many even so.
    h.effects = [("t0-1".to_string(), 2)].into();
    assert_eq!(broken(&h), [Promise::Effects].into());
    h.effects = [("t0-1".to_string(), 1)].into();
    h.faults = vec![kill("desk-1", 1.3)];
    let verdict = check(&h, Bounds::default());
    assert_eq!(verdict.broken(), [Promise::TaskEnds].into());
    assert!(
        verdict.violations[0]
            .detail
            .contains("desk-2 was neither killed"),
        "{:?}",
        verdict.violations
    );
    h.faults.clear();
    assert_eq!(broken(&h), [Promise::TaskEnds].into());
    // A kill long before the task started is not one under it.
    h.faults = vec![kill("desk-2", 0.2)];
    assert_eq!(broken(&h), [Promise::TaskEnds].into());
    // Failed for another reason, or cancelled: a violation whatever the kills.
    let other = TaskView::Failed {
        gone: false,
        executor: None,
    };
    for end in [other, TaskView::Cancelled] {
        let mut h = hist(task("t0-1", &[Some(end)]));
        h.faults = vec![kill("desk-2", 1.3)];
        assert_eq!(broken(&h), [Promise::TaskEnds].into());
    }
}

/// A task answered "unknown" while Redis kept its data, or never seen to end, is caught; an
/// unknown one after Redis lost its data is not.
#[test]
fn a_task_lost_or_never_ended_is_caught() {
    let mut h = hist(task(
        "t0-1",
        &[Some(TaskView::Working), None, Some(TaskView::Completed)],
    ));
    h.effects = [("t0-1".to_string(), 1)].into();
    let verdict = check(&h, Bounds::default());
    assert_eq!(verdict.broken(), [Promise::TaskEnds].into(), "unknown");
    assert!(verdict.violations[0].detail.contains("unknown task"));
    h.faults = vec![Fault {
        at: s(1.0),
        kind: FaultKind::RedisDataLoss,
    }];
    assert!(broken(&h).is_empty(), "Redis lost it");
    let h = hist(task(
        "t0-1",
        &[Some(TaskView::Working), Some(TaskView::Working)],
    ));
    let verdict = check(&h, Bounds::default());
    assert_eq!(verdict.broken(), [Promise::TaskEnds].into());
    assert!(verdict.violations[0].detail.contains("not seen to end"));
    // Never seen to end, but Redis lost its data after the task was created (the soak's
    // case: its polls were refused while Redis restarted again and again): documented.
    let mut h = h;
    h.faults = vec![Fault {
        at: s(1.05),
        kind: FaultKind::RedisDataLoss,
    }];
    assert!(broken(&h).is_empty(), "Redis lost it after the start");
    h.faults[0].at = s(0.5);
    assert_eq!(
        broken(&h),
        [Promise::TaskEnds].into(),
        "a loss before the task does not excuse it"
    );
    // Never seen to end because the last poll was refused (Redis failing to the end of
    // the window): unknown, not broken.
    h.faults.clear();
    let last = h.ops.len() - 1;
    h.ops[last].outcome = Outcome::Refused { status: 503 };
    h.ops[last].task = None;
    assert!(broken(&h).is_empty(), "the last poll refused");
}

/// A multi-round call answered with a result has exactly one effect; one whose answering
/// round was refused or cut off, at most one.
#[test]
fn a_multi_round_call_has_its_effect_once() {
    let mut first = op(0, Kind::Confirm, 1.0, 1.1, Outcome::Ok);
    first.session = None;
    first.stamp = Some("r0-1".into());
    first.acked = true;
    let mut answer = op(1, Kind::ConfirmAnswer { of: 0 }, 1.2, 1.3, Outcome::Ok);
    answer.session = None;
    let mut h = hist(vec![first, answer]);
    h.effects = [("r0-1".to_string(), 1)].into();
    assert!(broken(&h).is_empty());
    h.effects.clear();
    assert_eq!(broken(&h), [Promise::Effects].into(), "lost");
    h.ops[0].acked = false;
    h.ops[1].outcome = Outcome::Refused { status: 503 };
    assert!(broken(&h).is_empty());
    h.effects = [("r0-1".to_string(), 2)].into();
    assert_eq!(broken(&h), [Promise::Effects].into(), "doubled");
}

/// The task findings F5 to F7 are fixed, so their shapes are violations again, whatever
/// Redis did around them; a task failed as gone is documented only when its executor was
/// killed, or without Redis for a heartbeat's lifetime at a stretch while it ran.
#[test]
fn task_findings_are_no_longer_excused_and_a_silent_executor_is_presumed_dead() {
    // F5: an unknown task answered by desk-3 while its own link was cut.
    let mut h = hist(task(
        "t0-1",
        &[Some(TaskView::Working), None, Some(TaskView::Completed)],
    ));
    h.ops[2].machine = Some("desk-3".into());
    h.effects = [("t0-1".to_string(), 1)].into();
    h.faults = vec![
        redis_link("desk-3", "blackhole", 1.0),
        redis_link("desk-3", "pass", 3.0),
    ];
    assert_eq!(unknown(&h, &check(&h, Bounds::default())).len(), 1, "F5");
    // F7: a creation refused with -32603 on 200 by desk-1 while its link was refused.
    let mut start = op(
        0,
        Kind::TaskStart,
        5.0,
        5.5,
        Outcome::Error {
            status: 200,
            detail: "The task store is unavailable; retry later".into(),
        },
    );
    start.machine = Some("desk-1".into());
    let mut h = hist(vec![start]);
    h.faults = vec![redis_link("desk-1", "refuse", 4.0)];
    assert_eq!(unknown(&h, &check(&h, Bounds::default())).len(), 1, "F7");
    // F6: failed as gone (executor desk-2, the task from 1.0 s to the poll at 2.0 s).
    let failed = TaskView::Failed {
        gone: true,
        executor: Some("desk-2".into()),
    };
    let mut h = hist(task("t0-1", &[Some(TaskView::Working), Some(failed)]));
    let pause = |from: f64, to: f64| {
        vec![
            Fault {
                at: s(from),
                kind: FaultKind::RedisStop,
            },
            Fault {
                at: s(to),
                kind: FaultKind::RedisCont,
            },
        ]
    };
    h.faults = pause(1.2, 1.4);
    assert_eq!(broken(&h), [Promise::TaskEnds].into(), "a short pause");
    // Its own link cut, then Redis stopped, back to back, for the lifetime (3 s) in all.
    let mut views = vec![Some(TaskView::Working); 11];
    views.push(Some(TaskView::Failed {
        gone: true,
        executor: Some("desk-2".into()),
    }));
    let mut h_long = hist(task("t0-1", &views));
    let poll_end = h_long.ops.iter().map(|o| o.end).max().unwrap_or_default();
    assert!(
        poll_end >= s(4.5),
        "the task lives long enough: {poll_end:?}"
    );
    h_long.faults = vec![
        redis_link("desk-2", "refuse", 1.0),
        redis_link("desk-2", "pass", 2.5),
    ];
    h_long.faults.extend(pause(2.4, 4.1));
    assert!(broken(&h_long).is_empty(), "presumed dead");
    // The same cut of another instance's link, or a slow link, excuses nothing.
    h_long.faults = vec![
        redis_link("desk-1", "refuse", 1.0),
        redis_link("desk-1", "pass", 2.5),
    ];
    h_long.faults.extend(pause(2.4, 4.1));
    assert_eq!(
        broken(&h_long),
        [Promise::TaskEnds].into(),
        "another's link"
    );
    h_long.faults = vec![
        redis_link("desk-2", "delay", 1.0),
        redis_link("desk-2", "pass", 4.5),
    ];
    assert_eq!(broken(&h_long), [Promise::TaskEnds].into(), "a slow link");
    // Redis restarted a microsecond after it came back from a restart: one stretch.
    let at = |t: f64, kind: FaultKind| Fault { at: s(t), kind };
    h_long.faults = vec![
        at(1.2, FaultKind::RedisRestart),
        at(2.9, FaultKind::RedisCont),
        at(2.900_001, FaultKind::RedisRestart),
        at(4.3, FaultKind::RedisCont),
    ];
    assert!(broken(&h_long).is_empty(), "back-to-back restarts");
    // Up for more than a beat's interval between them: two stretches, each too short.
    h_long.faults[2].at = s(4.0);
    h_long.faults[3].at = s(4.6);
    assert_eq!(
        broken(&h_long),
        [Promise::TaskEnds].into(),
        "Redis back between them"
    );
    // Its own link refused for the grace (1 s): presumed dead; for less, not.
    h_long.faults = vec![
        redis_link("desk-2", "refuse", 2.0),
        redis_link("desk-2", "pass", 3.1),
    ];
    assert!(broken(&h_long).is_empty(), "refused past the grace");
    h_long.faults = vec![
        redis_link("desk-2", "refuse", 2.0),
        redis_link("desk-2", "pass", 2.8),
    ];
    assert_eq!(
        broken(&h_long),
        [Promise::TaskEnds].into(),
        "refused within it"
    );
    h_long.faults = vec![
        redis_link("desk-1", "refuse", 2.0),
        redis_link("desk-1", "pass", 3.1),
    ];
    assert_eq!(
        broken(&h_long),
        [Promise::TaskEnds].into(),
        "another's link refused"
    );
}

#[test]
fn the_report_names_the_promise_the_seed_and_the_faults_around_it() {
    let mut h = hist(vec![stamp(0, "k0", true)]);
    h.faults = vec![
        Fault {
            at: s(0.5),
            kind: FaultKind::RedisStop,
        },
        Fault {
            at: s(20.0),
            kind: FaultKind::RedisCont,
        },
    ];
    let verdict = check(&h, Bounds::default());
    let r = report(&h, &verdict, 42);
    assert!(
        r.contains("BROKEN: no acknowledged call lost or doubled"),
        "{r}"
    );
    assert!(r.contains("FAULTS_SEED=42"), "{r}");
    assert!(r.contains("FAULT RedisStop"), "{r}");
    assert!(!r.contains("RedisCont"), "far from the violation: {r}");
    assert!(r.contains("key k0"), "{r}");
}
