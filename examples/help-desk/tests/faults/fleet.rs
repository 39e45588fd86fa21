//! The fleet under test and the faults: distributed `help-desk` instances on one real
//! `redis-server`, each reaching Redis through its own [`FaultProxy`] and reached by the others
//! (relays: `FLEETMCP_ADVERTISE_ADDRESS`) through another, behind a real nginx (round robin,
//! `deploy/nginx/fleetmcp.conf`; nginx itself is never faulted). Faults are drawn from a seed.
//!
//! With `FAULTS_SENTINEL=1` Redis is a master, one replica (`FAULTS_SENTINEL_REPLICAS=2`: two,
//! the production shape) and three sentinels instead (`support_redis::SentinelSet`), the
//! instances find the master through the sentinels (`REDIS_SENTINELS`,
//! `REDIS_SENTINEL_MASTER`; `FLEETMCP_REDIS_WAIT_REPLICAS=auto`: a new session is confirmed by
//! the replicas), and the fault `SENTINEL FAILOVER` is drawn too. The
//! instances then reach Redis straight, not through their proxies: Redis link faults and Redis
//! restarts are off in that topology; a Redis pause stops the current master.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use crate::history::{FaultKind, Recorder};
use crate::proxy::{FaultProxy, Mode};
use crate::support::{Instance, Nginx, TempDir, free_port};
use crate::support_redis::{RedisServer, SentinelSet};

/// A small xorshift64* generator: the whole run follows from its seed.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// In `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

/// Which fault kinds are drawn. Named switches, so the ones that trigger known bugs can be
/// turned on once those are fixed.
#[derive(Clone, Debug)]
pub struct Switches {
    pub instance_kill: bool,
    pub instance_stop: bool,
    pub redis_stop: bool,
    pub redis_link: bool,
    pub relay_link: bool,
    /// Redis SIGKILLed and started again (`FAULTS_REDIS_RESTART`, on): its sessions are lost
    /// with it (no persistence), which the checker excuses only for sessions opened before.
    pub redis_restart: bool,
    /// 2024-11-05 clients through nginx round robin (`FAULTS_LEGACY_LB`, on).
    pub legacy_through_balancer: bool,
    /// The Sentinel topology and its failover fault (`FAULTS_SENTINEL`, off); turns
    /// `redis_link` and `redis_restart` off.
    pub sentinel: bool,
    /// The master's replicas in the Sentinel topology (`FAULTS_SENTINEL_REPLICAS`, 1).
    pub sentinel_replicas: usize,
    /// Authorization on: the clients' principal, and another one trying their sessions and
    /// tasks (`FAULTS_PRINCIPALS`, on).
    pub principals: bool,
}

fn flag(name: &str, default: bool) -> bool {
    match std::env::var(name) {
        Ok(v) => matches!(v.trim(), "1" | "true" | "yes" | "on"),
        Err(_) => default,
    }
}

impl Switches {
    /// The CI set, each switch overridable by its environment variable (`FAULTS_KILL=0` ...).
    pub fn from_env() -> Self {
        let sentinel = flag("FAULTS_SENTINEL", false);
        Self {
            instance_kill: flag("FAULTS_KILL", true),
            instance_stop: flag("FAULTS_STOP", true),
            redis_stop: flag("FAULTS_REDIS_STOP", true),
            // The instances reach the sentinels' master straight, not through their proxies,
            // and a master killed and started again would come back as a second master.
            redis_link: !sentinel && flag("FAULTS_REDIS_LINK", true),
            relay_link: flag("FAULTS_RELAY_LINK", true),
            redis_restart: !sentinel && flag("FAULTS_REDIS_RESTART", true),
            legacy_through_balancer: flag("FAULTS_LEGACY_LB", true),
            sentinel,
            sentinel_replicas: std::env::var("FAULTS_SENTINEL_REPLICAS")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(1),
            principals: flag("FAULTS_PRINCIPALS", true),
        }
    }

    /// Every fault off, the single Redis (the broken runs start from here).
    pub fn none() -> Self {
        Self {
            instance_kill: false,
            instance_stop: false,
            redis_stop: false,
            redis_link: false,
            relay_link: false,
            redis_restart: false,
            legacy_through_balancer: false,
            sentinel: false,
            sentinel_replicas: 1,
            principals: false,
        }
    }
}

pub struct Member {
    pub machine: String,
    pub port: u16,
    pub redis_link: FaultProxy,
    pub relay_link: FaultProxy,
    inst: Option<Instance>,
    stopped: bool,
    /// Logs of its earlier processes (a restart starts a new log).
    old_logs: Vec<String>,
    env: Vec<(String, String)>,
}

impl Member {
    fn start(&mut self) -> Result<(), String> {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let port = self.port;
        let started = std::panic::catch_unwind(|| {
            Instance::start_on(env!("CARGO_BIN_EXE_help-desk"), port, &env)
        });
        match started {
            Ok(i) => {
                self.inst = Some(i);
                self.stopped = false;
                Ok(())
            }
            Err(e) => Err(e
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "start panicked".into())),
        }
    }

    fn signal(&self, sig: &str) {
        if let Some(i) = &self.inst {
            i.signal(sig);
        }
    }

    fn kill(&mut self) {
        if let Some(mut i) = self.inst.take() {
            i.signal("KILL");
            let _ = i.wait_exit(Duration::from_secs(5));
            self.old_logs.push(i.log());
        }
        self.stopped = false;
    }

    /// Every log line of every process under this machine id so far.
    pub fn logs(&self) -> String {
        let mut all = self.old_logs.join("\n");
        if let Some(i) = &self.inst {
            all.push('\n');
            all.push_str(&i.log());
        }
        all
    }
}

pub struct Fleet {
    /// The one Redis (unless Sentinel).
    pub redis: Option<RedisServer>,
    /// The Sentinel topology: master, replicas, three sentinels.
    pub sentinel: Option<SentinelSet>,
    pub members: Vec<Member>,
    pub nginx: Nginx,
    pub effects: PathBuf,
    _dir: TempDir,
}

pub const HEARTBEAT_INTERVAL_MS: u64 = 1000;
pub const HEARTBEAT_TTL_MS: u64 = 3000;
/// `FRONTMCP_HA_TAKEOVER_GRACE_MS` of every instance.
pub const TAKEOVER_GRACE_MS: u64 = 1000;
/// `FLEETMCP_DRAIN_MS` and `FLEETMCP_SHUTDOWN_GRACE_MS` of every instance: together, how long
/// a stopping instance's streams outlive its withdrawal, and how long a holder's lease may be
/// out before it ends its 2024-11-05 streams.
pub const DRAIN_MS: u64 = 500;
pub const SHUTDOWN_GRACE_MS: u64 = 1000;
/// The master's name in the Sentinel topology.
pub const SENTINEL_MASTER: &str = "faults-master";

impl Fleet {
    /// `n` instances (3 fits nginx's configuration file), Redis persistent (AOF, fsync
    /// always) unless `persistent` is false.
    pub fn start(
        rt: &Runtime,
        n: usize,
        persistent: bool,
        sentinel: Option<usize>,
        issuer: Option<&str>,
    ) -> Self {
        let (redis, sentinel) = if let Some(replicas) = sentinel {
            (
                None,
                Some(SentinelSet::start_with(SENTINEL_MASTER, replicas)),
            )
        } else if persistent {
            (Some(RedisServer::start_persistent()), None)
        } else {
            (Some(RedisServer::start()), None)
        };
        let redis_port = match (&redis, &sentinel) {
            (Some(r), _) => r.port,
            (None, Some(set)) => set.master.port,
            (None, None) => unreachable!("one topology or the other"),
        };
        let dir = TempDir::new("faults");
        let effects = dir.path().join("effects");
        std::fs::write(&effects, "").expect("create the effects file");
        let mut members = Vec::new();
        for i in 1..=n {
            let machine = format!("desk-{i}");
            let port = free_port();
            let redis_link =
                rt.block_on(FaultProxy::start(&format!("{machine}->redis"), redis_port));
            let relay_link = rt.block_on(FaultProxy::start(&format!("->{machine}"), port));
            let (redis_url, sentinels) = match &sentinel {
                None => (
                    format!("redis://127.0.0.1:{}", redis_link.port),
                    String::new(),
                ),
                Some(set) => (String::new(), set.addresses()),
            };
            let env: Vec<(String, String)> = [
                ("FRONTMCP_DEPLOYMENT_MODE", "distributed".to_string()),
                ("FRONTMCP_BIND_ADDRESS", "loopback".to_string()),
                ("MACHINE_ID", machine.clone()),
                ("REDIS_URL", redis_url),
                ("REDIS_SENTINELS", sentinels.clone()),
                (
                    "REDIS_SENTINEL_MASTER",
                    if sentinels.is_empty() {
                        String::new()
                    } else {
                        SENTINEL_MASTER.to_string()
                    },
                ),
                ("FLEETMCP_REDIS_WAIT_REPLICAS", "auto".to_string()),
                ("REDIS_HOST", String::new()),
                ("REDIS_PORT", String::new()),
                (
                    "FLEETMCP_ADVERTISE_ADDRESS",
                    format!("127.0.0.1:{}", relay_link.port),
                ),
                ("LOG_FORMAT", "json".to_string()),
                (
                    "RUST_LOG",
                    "info,fleetmcp::served=debug,fleetmcp::redis_conn::durable=debug".to_string(),
                ),
                ("HELP_DESK_EFFECTS_FILE", effects.display().to_string()),
                ("HELP_DESK_TICKETS", "memory".to_string()),
                ("FLEETMCP_DRAIN_MS", DRAIN_MS.to_string()),
                ("FLEETMCP_SHUTDOWN_GRACE_MS", SHUTDOWN_GRACE_MS.to_string()),
                (
                    "FRONTMCP_HA_HEARTBEAT_INTERVAL_MS",
                    HEARTBEAT_INTERVAL_MS.to_string(),
                ),
                ("FRONTMCP_HA_HEARTBEAT_TTL_MS", HEARTBEAT_TTL_MS.to_string()),
                (
                    "FRONTMCP_HA_TAKEOVER_GRACE_MS",
                    TAKEOVER_GRACE_MS.to_string(),
                ),
                (
                    "VAULT_SECRET",
                    "fleetmcp-faults-vault-secret-0123456789".to_string(),
                ),
            ]
            .into_iter()
            .chain(issuer.into_iter().flat_map(crate::support_issuer::env))
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let mut m = Member {
                machine,
                port,
                redis_link,
                relay_link,
                inst: None,
                stopped: false,
                old_logs: Vec::new(),
                env,
            };
            if let Err(e) = m.start() {
                panic!("{} did not start: {e}", m.machine);
            }
            members.push(m);
        }
        for m in &mut members {
            m.inst
                .as_mut()
                .expect("started")
                .wait_ready(Duration::from_secs(15));
        }
        let ports: Vec<u16> = members.iter().map(|m| m.port).collect();
        let lb = free_port();
        let nginx = Nginx::start(&Nginx::fleet_conf(&ports, lb), lb);
        Self {
            redis,
            sentinel,
            members,
            nginx,
            effects,
            _dir: dir,
        }
    }

    /// The master now: the one Redis, or the server the sentinels name.
    fn master(&mut self) -> Option<&mut RedisServer> {
        if let Some(r) = self.redis.as_mut() {
            return Some(r);
        }
        let set = self.sentinel.as_mut()?;
        let port = set.sentinels[0].master_port(SENTINEL_MASTER)?;
        Self::by_port(set, port)
    }

    fn by_port(set: &mut SentinelSet, port: u16) -> Option<&mut RedisServer> {
        set.servers_mut().into_iter().find(|s| s.port == port)
    }

    /// The Redis server on `port` (either topology).
    fn redis_on(&mut self, port: u16) -> Option<&mut RedisServer> {
        match (&mut self.redis, &mut self.sentinel) {
            (Some(r), _) if r.port == port => Some(r),
            (_, Some(set)) => Self::by_port(set, port),
            _ => None,
        }
    }

    /// Problems of the harness itself (a proxy that could not re-bind its port).
    pub fn harness_failures(&self) -> Vec<String> {
        self.members
            .iter()
            .flat_map(|m| {
                let mut f = m.redis_link.failures();
                f.extend(m.relay_link.failures());
                f
            })
            .collect()
    }

    /// Panics an instance logged (tokio survives a panicking task).
    pub fn panics_logged(&self) -> Vec<String> {
        self.members
            .iter()
            .flat_map(|m| {
                m.logs()
                    .lines()
                    .filter(|l| l.contains("panicked at"))
                    .map(|l| format!("{}: {l}", m.machine))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// One fault in progress, healed at `heal_at`.
#[derive(Clone, Debug)]
enum Active {
    Dead(usize),
    Stopped(usize),
    /// The Redis server on this port is paused.
    RedisStopped(u16),
    /// A `SENTINEL FAILOVER` asked of the master on this port (the sentinels pick the replica).
    Failover(u16),
    RedisDown,
    RedisLink(usize),
    RelayLink(usize),
}

/// How the fault thread behaves beyond the switches.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    pub switches: Switches,
    /// Whether a Redis restart is declared as losing its data (true unless Redis is
    /// persistent). The deliberately broken run lies here: a Redis without persistence
    /// declared as keeping its data.
    pub redis_restart_loses_data: bool,
    /// At least one Redis restart, at this point of the run (the broken run).
    pub force_redis_restart_at: Option<Duration>,
}

/// Injects faults drawn from `rng` until `until`, then heals everything.
pub fn run_faults(
    fleet: &mut Fleet,
    rec: &Recorder,
    rng: &mut Rng,
    plan: &FaultPlan,
    until: Instant,
) {
    let began = Instant::now();
    let mut active: Vec<(Instant, Active)> = Vec::new();
    let mut forced = plan.force_redis_restart_at;
    while Instant::now() < until {
        std::thread::sleep(rng.ms(200, 1200));
        let now = Instant::now();
        let (due, keep): (Vec<_>, Vec<_>) = active.into_iter().partition(|(t, _)| *t <= now);
        active = keep;
        for (_, a) in due {
            heal(fleet, rec, a);
        }
        if let Some(at) = forced
            && began.elapsed() >= at
        {
            forced = None;
            if !active
                .iter()
                .any(|(_, a)| matches!(a, Active::RedisStopped(_) | Active::RedisDown))
            {
                redis_down(fleet, rec, plan);
                active.push((Instant::now() + rng.ms(300, 1000), Active::RedisDown));
            }
            continue;
        }
        if active.len() >= 3 || now >= until {
            continue;
        }
        if let Some(a) = inject(fleet, rec, rng, plan, &active) {
            active.push((Instant::now() + rng.ms(500, 3500), a));
        }
    }
    for (_, a) in active {
        heal(fleet, rec, a);
    }
}

fn busy(active: &[(Instant, Active)], i: usize) -> bool {
    active
        .iter()
        .any(|(_, a)| matches!(a, Active::Dead(j) | Active::Stopped(j) if *j == i))
}

fn redis_busy(active: &[(Instant, Active)]) -> bool {
    active.iter().any(|(_, a)| {
        matches!(
            a,
            Active::RedisStopped(_) | Active::RedisDown | Active::Failover(_)
        )
    })
}

fn inject(
    fleet: &mut Fleet,
    rec: &Recorder,
    rng: &mut Rng,
    plan: &FaultPlan,
    active: &[(Instant, Active)],
) -> Option<Active> {
    let s = &plan.switches;
    let n = fleet.members.len();
    let mut kinds: Vec<&str> = Vec::new();
    if s.instance_kill {
        kinds.push("kill");
    }
    if s.instance_stop {
        kinds.push("stop");
    }
    if s.redis_stop {
        kinds.push("redis-stop");
    }
    if s.redis_restart {
        kinds.push("redis-restart");
    }
    if s.redis_link {
        kinds.extend(["redis-link", "redis-link"]);
    }
    if s.relay_link {
        kinds.extend(["relay-link", "relay-link"]);
    }
    if s.sentinel {
        kinds.push("sentinel-failover");
    }
    if kinds.is_empty() {
        return None;
    }
    let kind = kinds[rng.range(0, kinds.len() as u64 - 1) as usize];
    let i = rng.range(0, n as u64 - 1) as usize;
    // Keep at least one instance running: process faults on at most n-1 at once.
    let process_faults = (0..n).filter(|j| busy(active, *j)).count();
    let mode = match rng.range(0, 2) {
        0 => Mode::Refuse,
        1 => Mode::Blackhole,
        _ => Mode::Delay(rng.range(50, 400)),
    };
    match kind {
        "kill" | "stop" if busy(active, i) || process_faults + 1 >= n => None,
        "kill" => {
            let m = &mut fleet.members[i];
            rec.fault(FaultKind::Kill(m.machine.clone()));
            m.kill();
            Some(Active::Dead(i))
        }
        "stop" => {
            let m = &mut fleet.members[i];
            rec.fault(FaultKind::Stop(m.machine.clone()));
            m.signal("STOP");
            m.stopped = true;
            Some(Active::Stopped(i))
        }
        "redis-stop" | "redis-restart" | "sentinel-failover" if redis_busy(active) => None,
        "redis-stop" => {
            let master = fleet.master()?;
            let port = master.port;
            rec.fault(FaultKind::RedisStop);
            master.pause();
            Some(Active::RedisStopped(port))
        }
        "sentinel-failover" => {
            let set = fleet.sentinel.as_ref()?;
            let from = set.sentinels[0].master_port(SENTINEL_MASTER)?;
            // Refused while the last one settles (`INPROG`, or `NOGOODSLAVE` until the old
            // master follows the new one): then it is not a fault of this run.
            let said = set.sentinels[0].cli(&["SENTINEL", "FAILOVER", SENTINEL_MASTER]);
            if said != "OK" {
                if std::env::var_os("FAULTS_VERBOSE").is_some() {
                    eprintln!("SENTINEL FAILOVER not taken: {said}");
                }
                return None;
            }
            rec.fault(FaultKind::SentinelFailover);
            Some(Active::Failover(from))
        }
        "redis-restart" => {
            redis_down(fleet, rec, plan);
            Some(Active::RedisDown)
        }
        "redis-link" => {
            let m = &fleet.members[i];
            if active
                .iter()
                .any(|(_, a)| matches!(a, Active::RedisLink(j) if *j == i))
            {
                return None;
            }
            rec.fault(FaultKind::Link {
                link: m.redis_link.name.clone(),
                mode: mode.to_string(),
            });
            m.redis_link.set(mode);
            Some(Active::RedisLink(i))
        }
        "relay-link" => {
            let m = &fleet.members[i];
            if active
                .iter()
                .any(|(_, a)| matches!(a, Active::RelayLink(j) if *j == i))
            {
                return None;
            }
            rec.fault(FaultKind::Link {
                link: m.relay_link.name.clone(),
                mode: mode.to_string(),
            });
            m.relay_link.set(mode);
            Some(Active::RelayLink(i))
        }
        _ => None,
    }
}

fn redis_down(fleet: &mut Fleet, rec: &Recorder, plan: &FaultPlan) {
    let Some(redis) = fleet.redis.as_mut() else {
        return;
    };
    rec.fault(FaultKind::RedisRestart);
    redis.kill();
    if plan.redis_restart_loses_data {
        rec.fault(FaultKind::RedisDataLoss);
    }
}

fn heal(fleet: &mut Fleet, rec: &Recorder, a: Active) {
    match a {
        Active::Dead(i) => {
            let m = &mut fleet.members[i];
            match m.start() {
                Ok(()) => rec.fault(FaultKind::Restart(m.machine.clone())),
                Err(e) => rec.fault(FaultKind::HarnessProblem(format!(
                    "{} did not restart: {}",
                    m.machine,
                    e.lines().next().unwrap_or_default()
                ))),
            }
        }
        Active::Stopped(i) => {
            let m = &mut fleet.members[i];
            m.signal("CONT");
            m.stopped = false;
            rec.fault(FaultKind::Cont(m.machine.clone()));
        }
        Active::RedisStopped(port) => {
            if let Some(r) = fleet.redis_on(port) {
                r.resume();
            }
            rec.fault(FaultKind::RedisCont);
        }
        Active::RedisDown => {
            if let Some(r) = fleet.redis.as_mut() {
                r.start_again();
            }
            rec.fault(FaultKind::RedisCont);
        }
        Active::Failover(from) => {
            // Done when every sentinel names one new master (a few seconds at most).
            let Some(set) = fleet.sentinel.as_ref() else {
                return;
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let named: Vec<Option<u16>> = set
                    .sentinels
                    .iter()
                    .map(|s| s.master_port(SENTINEL_MASTER))
                    .collect();
                if named[0].is_some_and(|p| p != from) && named.iter().all(|n| *n == named[0]) {
                    // Recorded by the run's master watch, with the switches pauses cause.
                    break;
                }
                if Instant::now() >= deadline {
                    rec.fault(FaultKind::HarnessProblem(format!(
                        "a SENTINEL FAILOVER from {from} did not complete within 5 s of its heal time"
                    )));
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Active::RedisLink(i) => {
            let m = &fleet.members[i];
            m.redis_link.set(Mode::Pass);
            rec.fault(FaultKind::Link {
                link: m.redis_link.name.clone(),
                mode: "pass".into(),
            });
        }
        Active::RelayLink(i) => {
            let m = &fleet.members[i];
            m.relay_link.set(Mode::Pass);
            rec.fault(FaultKind::Link {
                link: m.relay_link.name.clone(),
                mode: "pass".into(),
            });
        }
    }
}

/// Starts the harness's authorization server on loopback, in `rt`
/// (`support_issuer`: the opaque token `tok-<name>` is active for subject `<name>`), with
/// every scope help-desk's tools ask for. Never faulted. Its base URL, the issuer.
pub fn start_issuer(rt: &Runtime) -> String {
    rt.block_on(crate::support_issuer::start(Some(
        "tickets:read tickets:write",
    )))
}
