//! The history of a run: every request the clients made (start, end, outcome, the instance
//! that answered), every fault the harness injected, what the instances logged they served
//! (`fleetmcp::served`: session hash, epoch, JSON-RPC id), and the effects file. The checker
//! reads only this.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a request ended, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx with the expected answer (a result, or 202 for a notification).
    Ok,
    /// A JSON-RPC result with `isError: true` (the tool ran and said it failed).
    ToolError(String),
    /// A documented refusal: 503 with `Retry-After`, or 429.
    Refused { status: u16 },
    /// The session is unknown (404, or the JSON-RPC "Session not found" error).
    SessionGone,
    /// The documented answer of a call whose instance died while running it: a JSON-RPC
    /// error saying it stopped before it answered, the call's effect unknown
    /// (`fleetmcp::WRITER_GONE_MESSAGE`).
    Abandoned,
    /// `tasks/get` answered "Unknown task" (`-32602`) for a task the client was given.
    TaskUnknown,
    /// Any other HTTP status or JSON-RPC error.
    Error { status: u16, detail: String },
    /// No HTTP answer: connection refused, reset, closed early.
    Transport(String),
    /// No answer within the client's own deadline: a hang.
    Hung,
}

impl Outcome {
    pub fn short(&self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::ToolError(d) => format!("tool error ({d})"),
            Outcome::Refused { status } => format!("refused {status}"),
            Outcome::SessionGone => "session gone".into(),
            Outcome::Abandoned => "abandoned (its instance died)".into(),
            Outcome::TaskUnknown => "unknown task".into(),
            Outcome::Error { status, detail } => {
                format!("error {status}: {}", truncate(detail, 160))
            }
            Outcome::Transport(e) => format!("transport: {}", truncate(e, 120)),
            Outcome::Hung => "hung".into(),
        }
    }
}

pub fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Where a request was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Through nginx round robin.
    Balancer,
    /// Straight to this instance.
    Direct(String),
}

/// What a request was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Initialize,
    Initialized,
    /// A `stamp` call (session era; `sse` when it asked for progress, so its answer streams).
    Stamp {
        sse: bool,
    },
    /// `GET /mcp` with `Last-Event-ID`: resuming the answer stream of op `of`.
    Resume {
        of: usize,
    },
    Discover,
    /// A 2026-07-28 `stamp` (no session).
    StatelessStamp,
    /// 2024-11-05: `GET /sse`.
    LegacyStream,
    /// 2024-11-05: `POST /message` (the answer comes on the stream).
    LegacyPost,
    /// 2026-07-28, tasks extension: `tools/call` of `stamp` answered with a task (its `stamp`
    /// key; `acked` once the task completed with a result).
    TaskStart,
    /// `tasks/get` of the task op `of` started (through nginx: any instance).
    TaskPoll {
        of: usize,
    },
    /// 2026-07-28 multi-round: the first round of `stamp_confirmed` (its `stamp` key; `acked`
    /// once the answering round got a result), answered with an `InputRequiredResult`.
    Confirm,
    /// The round answering op `of`'s question, with its `requestState`.
    ConfirmAnswer {
        of: usize,
    },
    /// Another principal's request on a session or task of the clients' (`clients::intruder`).
    Intrude,
}

/// A task as a `tools/call` or `tasks/get` showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskView {
    Working,
    InputRequired,
    Completed,
    /// Failed: `gone` when with `fleetmcp::EXECUTOR_GONE_MESSAGE` (its instance stopped), and
    /// the executor the error names.
    Failed {
        gone: bool,
        executor: Option<String>,
    },
    Cancelled,
}

impl TaskView {
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            TaskView::Completed | TaskView::Failed { .. } | TaskView::Cancelled
        )
    }
}

#[derive(Clone, Debug)]
pub struct Op {
    /// Its index in the history.
    pub index: usize,
    pub client: String,
    pub kind: Kind,
    pub route: Route,
    pub start: Duration,
    pub end: Duration,
    pub outcome: Outcome,
    /// The instance that answered (`X-FrontMCP-Machine-Id`).
    pub machine: Option<String>,
    /// The session, as the short hash the instances log.
    pub session: Option<String>,
    /// The JSON-RPC id (unique over the run).
    pub rpc_id: Option<u64>,
    /// The `stamp` key, and whether the call was acknowledged (a result without `isError`).
    pub stamp: Option<String>,
    pub acked: bool,
    /// SSE event ids received for this request's answer, in order (including resumes, which
    /// also list their own).
    pub events: Vec<String>,
    /// Results received on that stream (must end at exactly one).
    pub results: usize,
    /// The task this request started or read, as it showed it.
    pub task: Option<TaskView>,
    /// An intruder's request served as its principal's would be: what it did.
    pub reached: Option<String>,
}

impl Op {
    pub fn new(client: &str, kind: Kind, route: Route, start: Duration) -> Self {
        Self {
            index: 0,
            client: client.to_string(),
            kind,
            route,
            start,
            end: start,
            outcome: Outcome::Hung,
            machine: None,
            session: None,
            rpc_id: None,
            stamp: None,
            acked: false,
            events: Vec::new(),
            results: 0,
            task: None,
            reached: None,
        }
    }

    pub fn describe(&self) -> String {
        let route = match &self.route {
            Route::Balancer => "lb".to_string(),
            Route::Direct(m) => format!("->{m}"),
        };
        format!(
            "#{} {} {:?} {} [{:.2}-{:.2} s] {}{}{}{}{}",
            self.index,
            self.client,
            self.kind,
            route,
            self.start.as_secs_f64(),
            self.end.as_secs_f64(),
            self.outcome.short(),
            self.machine
                .as_ref()
                .map(|m| format!(" by {m}"))
                .unwrap_or_default(),
            self.stamp
                .as_ref()
                .map(|k| format!(" key {k}"))
                .unwrap_or_default(),
            self.session
                .as_ref()
                .map(|s| format!(" session {}", &s[..8.min(s.len())]))
                .unwrap_or_default(),
            self.task
                .as_ref()
                .map(|t| format!(" task {t:?}"))
                .unwrap_or_default(),
        )
    }
}

/// A fault, as injected or healed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Kill(String),
    Restart(String),
    Stop(String),
    Cont(String),
    RedisStop,
    RedisCont,
    /// Redis lost its data (killed without persistence, or restarted empty): sessions may be
    /// lost from here on.
    RedisDataLoss,
    RedisRestart,
    /// A proxied link switched mode (`link` names it: `desk-1->redis`, `->desk-2`).
    Link {
        link: String,
        mode: String,
    },
    /// `SENTINEL FAILOVER <master>` asked of a sentinel (Sentinel topology).
    SentinelFailover,
    /// The sentinels name a new master (`port`), after a `SENTINEL FAILOVER` or a pause of
    /// the master past `down-after` (seen by the run's master watch).
    SentinelSwitched(u16),
    /// The sentinels switched away from the master on this port after the instances had
    /// confirmed writes to it alone (no replica connected, every replica down: `wait_replicas
    /// = "auto"`'s documented limit, RELIABILITY.md): what it took alone may be lost, like
    /// [`FaultKind::RedisDataLoss`]. Found after the run ([`crate::alone`]), not injected.
    /// `followed_within`: how long after the switch the last instance then connected logged
    /// that it follows the new master; until it does, an instance still holds what it
    /// confirmed on the old one, whatever of it was lost (a claim: another instance may claim
    /// the same epoch anew on the new master).
    RedisLostAloneWrites {
        port: u16,
        followed_within: Duration,
    },
    /// The harness could not do what it meant to (an instance that did not restart).
    HarnessProblem(String),
}

impl FaultKind {
    /// How long after it the loss can still show: until every instance has followed the
    /// switch that lost the data ([`FaultKind::RedisLostAloneWrites`]); at once otherwise.
    pub fn loss_lasts(&self) -> Duration {
        match self {
            Self::RedisLostAloneWrites {
                followed_within, ..
            } => *followed_within,
            _ => Duration::ZERO,
        }
    }

    /// Whether Redis may have lost data here: sessions, tasks and events may be gone after it.
    pub fn loses_data(&self) -> bool {
        matches!(
            self,
            Self::RedisDataLoss | Self::RedisLostAloneWrites { .. }
        )
    }
}

#[derive(Clone, Debug)]
pub struct Fault {
    pub at: Duration,
    pub kind: FaultKind,
}

/// One line an instance logged on the target `fleetmcp::served`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    pub machine: String,
    pub session: String,
    pub epoch: u64,
    pub rpc_id: u64,
}

#[derive(Clone, Debug, Default)]
pub struct History {
    pub ops: Vec<Op>,
    pub faults: Vec<Fault>,
    pub served: Vec<Served>,
    /// Each key of the effects file and how many times it is there.
    pub effects: BTreeMap<String, usize>,
    /// How long the run lasted.
    pub duration: Duration,
}

/// The shared recorder clients and the fault thread write to.
#[derive(Clone)]
pub struct Recorder {
    began: Instant,
    /// `began` on the wall clock (time since the Unix epoch), to place the instances' log
    /// lines on the run's time line.
    began_wall: Duration,
    inner: Arc<Mutex<History>>,
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            began: Instant::now(),
            began_wall: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default(),
            inner: Arc::new(Mutex::new(History::default())),
        }
    }

    /// When in the run a log line stamped `timestamp` (`2026-12-04T15:13:51.991305Z`, UTC)
    /// was written: by its time of day, for a run shorter than half a day.
    pub fn at_log_time(&self, timestamp: &str) -> Option<Duration> {
        let clock = timestamp.split_once('T')?.1.trim_end_matches('Z');
        let mut parts = clock.splitn(3, ':');
        let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
        let of_day = h.parse::<f64>().ok()? * 3600.0
            + m.parse::<f64>().ok()? * 60.0
            + s.parse::<f64>().ok()?;
        let began = self.began_wall.as_secs_f64() % 86_400.0;
        Some(Duration::from_secs_f64(
            (of_day - began).rem_euclid(86_400.0),
        ))
    }

    /// Adds a fault found after the run, at `at`.
    pub fn fault_at(&self, at: Duration, kind: FaultKind) {
        let mut h = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        h.faults.push(Fault { at, kind });
        h.faults.sort_by_key(|f| f.at);
    }

    pub fn now(&self) -> Duration {
        self.began.elapsed()
    }

    pub fn op(&self, mut op: Op) -> usize {
        let mut h = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        op.index = h.ops.len();
        h.ops.push(op);
        h.ops.len() - 1
    }

    /// Changes op `index` (recorded earlier, finished later: a call whose stream was resumed).
    pub fn update(&self, index: usize, f: impl FnOnce(&mut Op)) {
        let mut h = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut h.ops[index]);
    }

    pub fn fault(&self, kind: FaultKind) {
        let at = self.now();
        if std::env::var_os("FAULTS_VERBOSE").is_some() {
            eprintln!("[{:>7.2} s] {kind:?}", at.as_secs_f64());
        }
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .faults
            .push(Fault { at, kind });
    }

    /// The history so far, with what the instances served and the effects added.
    pub fn finish(&self, served: Vec<Served>, effects: &str) -> History {
        let mut h = self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone();
        h.served = served;
        h.effects = count_effects(effects);
        h.duration = self.now();
        h
    }
}

pub fn count_effects(text: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        *m.entry(line.to_string()).or_insert(0) += 1;
    }
    m
}

/// The `served` lines of one instance's JSON log.
pub fn parse_served(machine: &str, log: &str) -> Vec<Served> {
    log.lines()
        .filter(|l| l.contains("\"served\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["message"] == "served")
        .filter_map(|v| {
            Some(Served {
                machine: machine.to_string(),
                session: v["session"].as_str()?.to_string(),
                epoch: v["epoch"].as_u64()?,
                // The raw JSON-RPC id: the harness's ids are numbers.
                rpc_id: v["request_id"].as_str()?.parse().ok()?,
            })
        })
        .collect()
}

/// How the instances name a session in their logs (`fleetmcp::served`, like every log line):
/// the first 6 bytes of the SHA-256 of its id, in hex.
pub fn session_hash(id: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(id.as_bytes())[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_lines_are_parsed_from_json_logs() {
        let log = r#"{"timestamp":"x","level":"INFO","message":"listening"}
{"timestamp":"x","level":"DEBUG","message":"served","session":"00ff00ff00ff00ff","epoch":3,"request_id":"42"}
not json "served"
{"timestamp":"x","level":"DEBUG","message":"served","session":"ab","epoch":1,"request_id":"\"str\""}
"#;
        let s = parse_served("desk-1", log);
        assert_eq!(
            s,
            vec![Served {
                machine: "desk-1".into(),
                session: "00ff00ff00ff00ff".into(),
                epoch: 3,
                rpc_id: 42
            }]
        );
    }

    #[test]
    fn effects_are_counted_per_key() {
        let m = count_effects("a\nb\na\n\n");
        assert_eq!(m.get("a"), Some(&2));
        assert_eq!(m.get("b"), Some(&1));
        assert_eq!(m.len(), 2);
    }
}
