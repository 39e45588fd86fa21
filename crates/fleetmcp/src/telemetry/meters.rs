//! The server's metrics, in the Prometheus text format (`/metrics`).
//!
//! **One recorder per server**, not the `metrics` crate's process-global one: tests run several
//! servers in one process, and an embedding app may too, and each must count only its own
//! requests. So nothing here uses the `metrics!` macros: every handle is registered once on
//! this server's [`PrometheusRecorder`] and kept (a counter or histogram handle is an `Arc`
//! of atomics), and a request's labels are fixed strings ([`Method`], [`Era`]) plus its status,
//! looked up in a small map of handles already registered: recording allocates nothing once
//! a combination was seen. Histograms are drained into their buckets at every scrape and every
//! [`UPKEEP_EVERY`] (so samples never pile up between scrapes).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use foldhash::fast::FixedState;
use metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use parking_lot::RwLock;

use super::labels::{Era, Method};

/// How often histogram samples are folded into their buckets without a scrape.
pub const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Bucket bounds of every latency histogram, in seconds: 0.5 ms to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How a request handed to the relay seam ended: `fleetmcp_relays_total{outcome=...}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayOutcome {
    /// The holder's answer (any status) came back.
    Answered,
    /// The holder was gone: the session is taken over instead.
    HolderGone,
    /// The holder could not be reached or did not answer: the client got the `503` that says
    /// so.
    Failed,
}

impl RelayOutcome {
    const ALL: [RelayOutcome; 3] = [
        RelayOutcome::Answered,
        RelayOutcome::HolderGone,
        RelayOutcome::Failed,
    ];

    fn as_str(self) -> &'static str {
        match self {
            RelayOutcome::Answered => "answered",
            RelayOutcome::HolderGone => "holder_gone",
            RelayOutcome::Failed => "failed",
        }
    }
}

/// A limit that refused a request: `fleetmcp_limit_rejections_total{limit=...}`. Work that
/// adds a limit adds its variant here and calls [`Meters::limit_rejected`] where it refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `limits.max_inflight_per_session` (`429`).
    InflightPerSession,
    /// `sessions.max_sessions` (`503` on `initialize`).
    Sessions,
    /// `limits.rate` (`429`).
    Rate,
    /// `limits.tools.<name>` (`429`).
    ToolRate,
    /// `limits.max_inflight_per_key` (`429`).
    InflightPerKey,
    /// The shared counters did not answer and `limits.on_store_error` is `closed` (`503`).
    CountersUnavailable,
    /// `limits.max_sessions_per_key` (`429` on `initialize`).
    SessionsPerKey,
    /// `limits.max_listen_streams_per_key` (`429`).
    ListenStreamsPerKey,
    /// `stateless.max_listen_streams` (`503`).
    ListenStreams,
    /// `sessions.max_client_data_bytes` (`503` or `-32603`).
    ClientData,
    /// A `tasks.*` bound (`-32000` naming it).
    Tasks,
    /// `ha.relay_max_connections`, or no place left under `http.max_connections` for the
    /// relay's socket (`503`).
    RelayConnections,
}

impl Limit {
    const ALL: [Limit; 12] = [
        Limit::InflightPerSession,
        Limit::Sessions,
        Limit::Rate,
        Limit::ToolRate,
        Limit::InflightPerKey,
        Limit::CountersUnavailable,
        Limit::SessionsPerKey,
        Limit::ListenStreamsPerKey,
        Limit::ListenStreams,
        Limit::ClientData,
        Limit::Tasks,
        Limit::RelayConnections,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Limit::InflightPerSession => "inflight_per_session",
            Limit::Sessions => "sessions",
            Limit::Rate => "rate",
            Limit::ToolRate => "tool_rate",
            Limit::InflightPerKey => "inflight_per_key",
            Limit::CountersUnavailable => "limit_store_unavailable",
            Limit::SessionsPerKey => "sessions_per_key",
            Limit::ListenStreamsPerKey => "listen_streams_per_key",
            Limit::ListenStreams => "listen_streams",
            Limit::ClientData => "client_data_bytes",
            Limit::Tasks => "tasks",
            Limit::RelayConnections => "relay_connections",
        }
    }
}

/// A server's metrics. Cheap to clone; a disabled one (`http.metrics = false`) records
/// nothing and costs a branch per call.
#[derive(Clone)]
pub struct Meters(Option<Arc<Inner>>);

struct Inner {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Per (method, era, status): the request counter and its latency histogram. Looked up on
    /// every request, so hashed with foldhash's fixed-seed hasher, not SipHash, which cost ~260
    /// instructions a request here (issue 23). What SipHash buys, resistance to keys chosen to
    /// collide, is not needed: the keys are a few small values the server makes itself.
    requests: RwLock<HashMap<RequestLabels, (Counter, Histogram), FixedState>>,
    sessions_held: Gauge,
    ready: Gauge,
    sse_open: Gauge,
    upstreams_open: Gauge,
    relays: [Counter; RelayOutcome::ALL.len()],
    relay_seconds: Histogram,
    takeovers: Counter,
    takeover_seconds: Histogram,
    redis_seconds: Histogram,
    redis_timeouts: Counter,
    redis_errors: Counter,
    limit_rejections: [Counter; Limit::ALL.len()],
    outbox_dropped: Counter,
    untrusted_forwarded: Counter,
    invalidations: Counter,
}

/// Every metric: its name, unit and help text (a name ending `_total` is a counter, a unit of
/// seconds a histogram, anything else a gauge; see [`describe`]).
const METRICS: &[(&str, Unit, &str)] = &[
    (
        "fleetmcp_requests_total",
        Unit::Count,
        "HTTP requests to the MCP endpoints, by MCP method, protocol era and HTTP status",
    ),
    (
        "fleetmcp_request_duration_seconds",
        Unit::Seconds,
        "Time to the answer's head (an SSE answer's stream runs on), by MCP method, era and status",
    ),
    (
        "fleetmcp_sessions_held",
        Unit::Count,
        "Sessions this instance holds in memory",
    ),
    (
        "fleetmcp_ready",
        Unit::Count,
        "1 when this instance is ready (what /readyz answers at the scrape), else 0",
    ),
    (
        "fleetmcp_sse_streams_open",
        Unit::Count,
        "SSE responses open on this instance (relayed ones included)",
    ),
    (
        "fleetmcp_upstreams_open",
        Unit::Count,
        "Upstreams (a gateway's child processes or upstream sessions) serving the sessions this instance holds; 0 on a server without one",
    ),
    (
        "fleetmcp_relays_total",
        Unit::Count,
        "Requests handed to the instance holding their session, by outcome (answered, holder_gone, failed)",
    ),
    (
        "fleetmcp_relay_duration_seconds",
        Unit::Seconds,
        "Time from handing a request to the relay to the holder's answer head",
    ),
    (
        "fleetmcp_takeovers_total",
        Unit::Count,
        "Sessions taken over here from an instance found gone",
    ),
    (
        "fleetmcp_takeover_duration_seconds",
        Unit::Seconds,
        "Time to take one session over",
    ),
    (
        "fleetmcp_redis_command_duration_seconds",
        Unit::Seconds,
        "Redis commands, scripts and pipelines, until their answer or failure",
    ),
    (
        "fleetmcp_redis_timeouts_total",
        Unit::Count,
        "Redis commands that got no answer within the command timeout",
    ),
    (
        "fleetmcp_redis_errors_total",
        Unit::Count,
        "Redis commands that failed otherwise (connection lost, not connected, error reply)",
    ),
    (
        "fleetmcp_limit_rejections_total",
        Unit::Count,
        "Requests refused by a configured limit, by limit",
    ),
    (
        "fleetmcp_outbox_notifications_dropped_total",
        Unit::Count,
        "Progress and log notifications dropped because their request's stream did not take them (http.max_outbox_messages, http.max_outbox_bytes)",
    ),
    (
        "fleetmcp_session_invalidations_total",
        Unit::Count,
        "Session records Redis reported changed on this instance's tracking connection (client-side caching): the records of the sessions it minted, and of other instances' tags while it holds one of theirs",
    ),
    (
        "fleetmcp_untrusted_forwarded_headers_total",
        Unit::Count,
        "Requests counted by their peer's address that carried X-Forwarded-For or X-Real-IP the server does not believe (limits.client_address_header unset, or the peer not in limits.trusted_proxies): behind a load balancer, every client shares its key",
    ),
];

/// A request series' labels: MCP method, era, HTTP status.
type RequestLabels = (Method, Era, u16);

const META: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

impl Meters {
    /// A new set of metrics with its own recorder, every series of fixed labels registered
    /// (so a scrape shows them at zero before anything happened).
    pub fn new() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets(LATENCY_BUCKETS)
            .map(PrometheusBuilder::build_recorder)
            // `set_buckets` fails only on an empty list.
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        let r = &recorder;
        for &(name, unit, help) in METRICS {
            describe(r, name, unit, help);
        }
        let counter = |name: &'static str| r.register_counter(&Key::from_static_name(name), &META);
        let histogram =
            |name: &'static str| r.register_histogram(&Key::from_static_name(name), &META);
        let relay = |outcome: &'static str| {
            r.register_counter(
                &Key::from_parts(
                    "fleetmcp_relays_total",
                    vec![Label::from_static_parts("outcome", outcome)],
                ),
                &META,
            )
        };
        let inner = Inner {
            requests: RwLock::new(HashMap::default()),
            sessions_held: r
                .register_gauge(&Key::from_static_name("fleetmcp_sessions_held"), &META),
            ready: r.register_gauge(&Key::from_static_name("fleetmcp_ready"), &META),
            sse_open: r.register_gauge(&Key::from_static_name("fleetmcp_sse_streams_open"), &META),
            upstreams_open: r
                .register_gauge(&Key::from_static_name("fleetmcp_upstreams_open"), &META),
            relays: RelayOutcome::ALL.map(|o| relay(o.as_str())),
            relay_seconds: histogram("fleetmcp_relay_duration_seconds"),
            takeovers: counter("fleetmcp_takeovers_total"),
            takeover_seconds: histogram("fleetmcp_takeover_duration_seconds"),
            redis_seconds: histogram("fleetmcp_redis_command_duration_seconds"),
            redis_timeouts: counter("fleetmcp_redis_timeouts_total"),
            redis_errors: counter("fleetmcp_redis_errors_total"),
            limit_rejections: Limit::ALL.map(|l| {
                r.register_counter(
                    &Key::from_parts(
                        "fleetmcp_limit_rejections_total",
                        vec![Label::from_static_parts("limit", l.as_str())],
                    ),
                    &META,
                )
            }),
            outbox_dropped: counter("fleetmcp_outbox_notifications_dropped_total"),
            untrusted_forwarded: counter("fleetmcp_untrusted_forwarded_headers_total"),
            invalidations: counter("fleetmcp_session_invalidations_total"),
            handle,
            recorder,
        };
        Self(Some(Arc::new(inner)))
    }

    /// Metrics that record nothing (`http.metrics = false`).
    pub fn disabled() -> Self {
        Self(None)
    }

    /// Whether this records anything (and `/metrics` is served).
    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    /// One request answered (its head): counted, its latency observed.
    pub fn request(&self, method: Method, era: Era, status: u16, took: Duration) {
        let Some(m) = &self.0 else { return };
        let key = (method, era, status);
        if let Some((count, seconds)) = m.requests.read().get(&key) {
            count.increment(1);
            seconds.record(took.as_secs_f64());
            return;
        }
        let labels = || {
            vec![
                Label::from_static_parts("method", method.as_str()),
                Label::from_static_parts("era", era.as_str()),
                Label::new("status", status.to_string()),
            ]
        };
        let mut map = m.requests.write();
        let (count, seconds) = map.entry(key).or_insert_with(|| {
            (
                m.recorder
                    .register_counter(&Key::from_parts("fleetmcp_requests_total", labels()), &META),
                m.recorder.register_histogram(
                    &Key::from_parts("fleetmcp_request_duration_seconds", labels()),
                    &META,
                ),
            )
        });
        count.increment(1);
        seconds.record(took.as_secs_f64());
    }

    /// An SSE response opened; it counts as open until the returned guard is dropped.
    pub fn sse_opened(&self) -> Open {
        Open::new(self.0.as_ref().map(|m| m.sse_open.clone()))
    }

    /// A session's upstream started here; it counts as open until the returned guard is
    /// dropped (its link ended).
    pub fn upstream_opened(&self) -> Open {
        Open::new(self.0.as_ref().map(|m| m.upstreams_open.clone()))
    }

    /// A request handed to the relay seam, and how long until the holder's answer head.
    pub fn relayed(&self, outcome: RelayOutcome, took: Duration) {
        let Some(m) = &self.0 else { return };
        if let Some(i) = RelayOutcome::ALL.iter().position(|o| *o == outcome) {
            m.relays[i].increment(1);
        }
        m.relay_seconds.record(took.as_secs_f64());
    }

    /// A session taken over here, and how long it took.
    pub fn took_over(&self, took: Duration) {
        let Some(m) = &self.0 else { return };
        m.takeovers.increment(1);
        m.takeover_seconds.record(took.as_secs_f64());
    }

    /// One Redis command's outcome and duration.
    pub fn redis_command(&self, outcome: RedisOutcome, took: Duration) {
        let Some(m) = &self.0 else { return };
        m.redis_seconds.record(took.as_secs_f64());
        match outcome {
            RedisOutcome::Answered => {}
            RedisOutcome::Timeout => m.redis_timeouts.increment(1),
            RedisOutcome::Failed => m.redis_errors.increment(1),
        }
    }

    /// A request refused by `limit`.
    pub fn limit_rejected(&self, limit: Limit) {
        let Some(m) = &self.0 else { return };
        if let Some(i) = Limit::ALL.iter().position(|l| *l == limit) {
            m.limit_rejections[i].increment(1);
        }
    }

    /// `n` progress or log notifications dropped from a request's outbox.
    pub fn outbox_dropped(&self, n: u64) {
        let Some(m) = &self.0 else { return };
        m.outbox_dropped.increment(n);
    }

    /// Redis reported `n` session records changed on the tracking connection.
    pub fn invalidations(&self, n: u64) {
        let Some(m) = &self.0 else { return };
        m.invalidations.increment(n);
    }

    /// A request counted by its peer's address carried a client's address not believed.
    pub fn untrusted_forwarded(&self) {
        let Some(m) = &self.0 else { return };
        m.untrusted_forwarded.increment(1);
    }

    /// The scrape: gauges read at this moment (`sessions_held`, `ready`), histograms drained,
    /// every series rendered. `None` when disabled.
    pub fn render(&self, sessions_held: usize, ready: bool) -> Option<String> {
        let m = self.0.as_ref()?;
        m.sessions_held.set(sessions_held as f64);
        m.ready.set(if ready { 1.0 } else { 0.0 });
        m.handle.run_upkeep();
        Some(m.handle.render())
    }

    /// Folds histogram samples into their buckets until `stop` (see [`UPKEEP_EVERY`]).
    pub async fn upkeep(self, stop: tokio_util::sync::CancellationToken) {
        let Some(m) = self.0 else { return };
        let mut tick = tokio::time::interval(UPKEEP_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => m.handle.run_upkeep(),
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// How a Redis command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisOutcome {
    Answered,
    Timeout,
    Failed,
}

/// Something open (an SSE response, an upstream), counted by its gauge until this is dropped
/// (see [`Meters::sse_opened`], [`Meters::upstream_opened`]).
pub struct Open(Option<Gauge>);

impl Open {
    fn new(gauge: Option<Gauge>) -> Self {
        if let Some(g) = &gauge {
            g.increment(1.0);
        }
        Self(gauge)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(g) = &self.0 {
            g.decrement(1.0);
        }
    }
}

fn describe(r: &PrometheusRecorder, name: &'static str, unit: Unit, help: &'static str) {
    match unit {
        Unit::Seconds => r.describe_histogram(name.into(), Some(unit), help.into()),
        _ if name.ends_with("_total") => r.describe_counter(name.into(), Some(unit), help.into()),
        _ => r.describe_gauge(name.into(), Some(unit), help.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_servers_count_apart_and_labels_are_rendered() {
        let (a, b) = (Meters::new(), Meters::new());
        a.request(
            Method::of("tools/call"),
            Era::Session,
            200,
            Duration::from_millis(3),
        );
        a.request(
            Method::of("tools/call"),
            Era::Session,
            200,
            Duration::from_millis(4),
        );
        a.limit_rejected(Limit::InflightPerSession);
        a.relayed(RelayOutcome::Failed, Duration::from_millis(5));
        let text = a.render(7, true).unwrap_or_default();
        assert!(
            text.contains(
                r#"fleetmcp_requests_total{method="tools/call",era="session",status="200"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains("fleetmcp_sessions_held 7"), "{text}");
        assert!(text.contains("fleetmcp_ready 1"), "{text}");
        assert!(
            text.contains(r#"fleetmcp_relays_total{outcome="failed"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"fleetmcp_relays_total{outcome="answered"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"fleetmcp_limit_rejections_total{limit="inflight_per_session"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("fleetmcp_request_duration_seconds_bucket{"),
            "{text}"
        );
        let other = b.render(0, false).unwrap_or_default();
        assert!(other.contains("fleetmcp_ready 0"), "{other}");
        assert!(!other.contains(r#"method="tools/call""#), "{other}");
        {
            let _open = b.sse_opened();
            assert!(
                b.render(0, true)
                    .unwrap_or_default()
                    .contains("fleetmcp_sse_streams_open 1")
            );
        }
        assert!(
            b.render(0, true)
                .unwrap_or_default()
                .contains("fleetmcp_sse_streams_open 0")
        );
        assert_eq!(Meters::disabled().render(1, true), None);
    }
}
