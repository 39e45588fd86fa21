//! A test kit for real `redis-server` processes: start one on a free loopback port, pause it
//! (SIGSTOP), resume it (SIGCONT), kill it, restart it empty on the same port, and run
//! `redis-cli` against it. Dropping a [`RedisServer`] resumes and kills the process.
//!
//! The binaries are taken from `REDIS_SERVER` / `REDIS_CLI`, else `redis-server` /
//! `redis-cli` on `PATH`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn server_bin() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

fn cli_bin() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("local addr")
        .port()
}

/// Starts `command` (a server that listens on `port`) and waits until it answers there: `None`
/// when the one answering is another process (it exits on `EADDRINUSE` or is killed here).
fn start_answering(mut command: Command, port: u16) -> Option<Child> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts (is it installed?)");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return None;
        }
        if let Some(answering) = pid_on(port) {
            if answering == child.id() {
                return Some(child);
            }
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("redis-server on port {port} did not answer");
}

/// The `process_id` of the server answering on `port` (`INFO server` over a fresh TCP
/// connection); `None` while nothing answers.
fn pid_on(port: u16) -> Option<u32> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
    s.write_all(b"INFO server\r\n").ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(pid) = String::from_utf8_lossy(&got)
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|v| v.trim().parse().ok())
        {
            return Some(pid);
        }
    }
    None
}

/// One `redis-server` process, with no persistence (a restart starts empty) unless asked.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    paused: bool,
    /// Every write is appended to a file (fsync'd) and read back on a restart.
    persistent: bool,
    /// More command-line arguments (`--replicaof`, ...).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers `PING`.
    pub fn start() -> Self {
        Self::start_at(free_port(), true)
    }

    /// Starts a server on `port` and waits until it answers `PING`.
    pub fn start_on(port: u16) -> Self {
        Self::start_at(port, false)
    }

    fn start_at(port: u16, may_move: bool) -> Self {
        let mut s = Self {
            port,
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            paused: false,
            persistent: false,
            extra: Vec::new(),
        };
        s.spawn(may_move);
        s
    }

    /// Starts a server replicating the one on `master` (`--replicaof`).
    pub fn start_replica_of(master: u16) -> Self {
        let mut s = Self {
            port: free_port(),
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            paused: false,
            persistent: false,
            extra: vec!["--replicaof".into(), "127.0.0.1".into(), master.to_string()],
        };
        s.spawn(true);
        s
    }

    /// Starts a server whose data survives [`kill`](Self::kill) and
    /// [`start_again`](Self::start_again) (append-only file, fsync'd on every write).
    pub fn start_persistent() -> Self {
        let mut s = Self {
            port: free_port(),
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            paused: false,
            persistent: true,
            extra: Vec::new(),
        };
        s.spawn(true);
        s
    }

    /// Starts the process on `self.port`, moving to another free port while a server that
    /// is not ours already answers there: two tests may be handed the same free port, and the
    /// second `redis-server` then exits on `EADDRINUSE` while the first one answers its `PING`
    /// (two tests sharing one Redis saw each other's instances). A restart, or a port the caller chose, stays
    /// where it is.
    fn spawn(&mut self, may_move: bool) {
        for _ in 0..20 {
            if self.spawn_here() {
                return;
            }
            assert!(may_move, "port {} is taken by another server", self.port);
            self.port = if self.extra.iter().any(|a| a == "--cluster-enabled") {
                free_cluster_port()
            } else {
                free_port()
            };
        }
        panic!("no free port for redis-server after 20 tries");
    }

    /// One start on `self.port`: whether the server answering there is the one started.
    fn spawn_here(&mut self) -> bool {
        let mut command = Command::new(server_bin());
        command
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                if self.persistent { "yes" } else { "no" },
                "--appendfsync",
                "always",
                "--dir",
            ])
            .arg(self.dir.path())
            .args(&self.extra);
        self.child = start_answering(command, self.port);
        self.paused = false;
        self.child.is_some()
    }

    /// `PING` over a fresh TCP connection, without any client library.
    pub fn raw_ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 16];
        matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
    }

    /// `redis://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {sig} failed");
    }

    /// SIGSTOP: the connection stays open and nothing answers.
    pub fn pause(&mut self) {
        self.signal("-STOP");
        self.paused = true;
    }

    /// SIGCONT.
    pub fn resume(&mut self) {
        self.signal("-CONT");
        self.paused = false;
    }

    /// SIGKILL, and waits for the process to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.paused {
                let _ = Command::new("kill")
                    .args(["-CONT", &child.id().to_string()])
                    .status();
                self.paused = false;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL while paused: the commands it had not read yet are lost with it.
    pub fn kill_paused(&mut self) {
        assert!(self.paused, "the server is paused");
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Kills the server and starts a new, empty one on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn(false);
    }

    /// Starts the server again after [`kill`](Self::kill) on the same port: empty, unless it was
    /// started with [`start_persistent`](Self::start_persistent).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "server is still running");
        self.spawn(false);
    }

    /// Runs `redis-cli -p <port> <args>` and returns its trimmed output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(cli_bin())
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        assert!(out.status.success(), "redis-cli {args:?} failed");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port free for a cluster node: it and its cluster bus port (`port + 10000`) are
/// both unused.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port <= 55535 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// A Redis Cluster on loopback: `masters` `redis-server --cluster-enabled yes` processes, each
/// with `replicas_each` replicas, joined by `redis-cli --cluster create`, ready once every
/// node reports `cluster_state:ok`. A node is presumed failed after 1 s of silence.
pub struct RedisCluster {
    /// Every node, masters first (in slot order), then the replicas.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(masters: usize, replicas_each: usize) -> Self {
        let total = masters * (1 + replicas_each);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                let port = free_cluster_port();
                let mut s = RedisServer {
                    port,
                    child: None,
                    dir: tempfile::tempdir().expect("temp dir"),
                    paused: false,
                    persistent: false,
                    extra: vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-node-timeout".into(),
                        "1000".into(),
                        "--cluster-config-file".into(),
                        format!("nodes-{port}.conf"),
                    ],
                };
                s.spawn(true);
                s
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new(cli_bin())
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args([
                "--cluster-replicas",
                &replicas_each.to_string(),
                "--cluster-yes",
            ])
            .output()
            .expect("redis-cli --cluster create runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster
            .nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "the cluster never reached cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // Every replica has synced with its master (a failover needs one that has).
        while !cluster.nodes.iter().all(|n| {
            let info = n.cli(&["INFO", "replication"]);
            info.contains("role:master") || info.contains("master_link_status:up")
        }) {
            assert!(Instant::now() < deadline, "the replicas never synced");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// Kills (SIGKILL) the master that serves `key`'s slot; its port.
    pub fn kill_master_of(&mut self, key: &str) -> u16 {
        let port = self.master_of(key).port;
        if let Some(n) = self.nodes.iter_mut().find(|n| n.port == port) {
            n.kill();
        }
        port
    }

    /// `REDIS_CLUSTER_NODES`: every node's `host:port`, comma-separated.
    pub fn nodes_env(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Runs `redis-cli -c` (following the cluster's redirections) through the first node that
    /// is running; its trimmed output.
    pub fn cli(&self, args: &[&str]) -> String {
        let node = self
            .nodes
            .iter()
            .find(|n| n.child.is_some() && !n.paused)
            .expect("a running node");
        let out = Command::new(cli_bin())
            .args(["-c", "-p", &node.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        assert!(out.status.success(), "redis-cli -c {args:?} failed");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The master that serves `key`'s slot now (`CLUSTER KEYSLOT`, then `CLUSTER SLOTS`).
    pub fn master_of(&self, key: &str) -> &RedisServer {
        let slot: u16 = self
            .cli(&["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot number");
        // redis-cli prints `CLUSTER SLOTS` one value a line: start, end, then the master's ip,
        // port and id, then each replica's.
        let out = self.cli(&["CLUSTER", "SLOTS"]);
        let lines: Vec<&str> = out.lines().map(str::trim).collect();
        let port = lines
            .windows(4)
            .find_map(|w| {
                let (start, end) = (w[0].parse::<u16>().ok()?, w[1].parse::<u16>().ok()?);
                (start <= slot && slot <= end && w[2] == "127.0.0.1")
                    .then(|| w[3].parse::<u16>().ok())
                    .flatten()
            })
            .expect("a master serves the slot");
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("the master is one of ours")
    }
}

/// The Redis a fleet test runs on: one server, or a three-master cluster. Tests written
/// against it run unchanged on both (`env` for the processes, `cli` to look inside).
pub enum SharedRedis {
    Single(RedisServer),
    Cluster(RedisCluster),
    Sentinel(SentinelSet),
}

impl SharedRedis {
    /// One `redis-server`.
    pub fn single() -> Self {
        Self::Single(RedisServer::start())
    }

    /// A Redis Cluster of three masters, no replicas.
    pub fn cluster() -> Self {
        Self::Cluster(RedisCluster::start(3, 0))
    }

    /// A master and its replica watched by three sentinels.
    pub fn sentinel() -> Self {
        Self::Sentinel(SentinelSet::start("shared-master"))
    }

    /// What points an instance at it: `REDIS_URL`, `REDIS_CLUSTER_NODES`, or the sentinels.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Single(r) => vec![("REDIS_URL", r.url())],
            Self::Cluster(c) => vec![("REDIS_CLUSTER_NODES", c.nodes_env())],
            Self::Sentinel(s) => vec![
                ("REDIS_SENTINELS", s.addresses()),
                ("REDIS_SENTINEL_MASTER", s.name.clone()),
            ],
        }
    }

    /// `redis-cli` (`-c` on a cluster, following redirections; on the master with Sentinel);
    /// its trimmed output.
    pub fn cli(&self, args: &[&str]) -> String {
        match self {
            Self::Single(r) => r.cli(args),
            Self::Cluster(c) => c.cli(args),
            Self::Sentinel(s) => s.master.cli(args),
        }
    }

    /// Runs the commands `lines` (one a line, quoted as `redis-cli` reads them) through one
    /// `redis-cli` (`-c` on a cluster): many writes without a process each.
    pub fn cli_script(&self, lines: &str) {
        let (port, follow) = match self {
            Self::Single(r) => (r.port, None),
            Self::Cluster(c) => (c.nodes[0].port, Some("-c")),
            Self::Sentinel(s) => (s.master.port, None),
        };
        let mut child = Command::new(cli_bin())
            .args(follow)
            .args(["-p", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("redis-cli runs");
        // Written from a thread while the answers are read here: both pipes would fill.
        let writer = child.stdin.take().map(|mut stdin| {
            let lines = lines.to_string();
            std::thread::spawn(move || stdin.write_all(lines.as_bytes()))
        });
        let out = child.wait_with_output().expect("redis-cli ends");
        if let Some(writer) = writer {
            assert!(
                matches!(writer.join(), Ok(Ok(()))),
                "redis-cli read every line"
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && !text.contains("ERR"),
            "redis-cli failed: {text}"
        );
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// The keys matching `pattern` on every node, sorted, one a line (`KEYS`: tests only; the
    /// product never lists the keyspace).
    pub fn keys(&self, pattern: &str) -> String {
        let mut keys: Vec<String> = self
            .running()
            .iter()
            .flat_map(|n| {
                n.cli(&["KEYS", pattern])
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect();
        keys.sort();
        keys.join("\n")
    }

    /// Resets every node's command statistics (`CONFIG RESETSTAT`).
    pub fn reset_stats(&self) {
        for n in self.running() {
            n.cli(&["CONFIG", "RESETSTAT"]);
        }
    }

    /// Commands on keys every node has run since [`reset_stats`](Self::reset_stats)
    /// (`INFO commandstats`), leaving out the test's own `CONFIG` and `INFO` and the `CLUSTER`
    /// commands with which clients follow the slot map.
    pub fn commands_run(&self) -> u64 {
        self.running()
            .iter()
            .flat_map(|n| {
                n.cli(&["INFO", "commandstats"])
                    .lines()
                    .filter_map(|l| l.strip_prefix("cmdstat_").map(String::from))
                    .collect::<Vec<_>>()
            })
            .filter(|l| {
                !l.starts_with("config|") && !l.starts_with("info:") && !l.starts_with("cluster|")
            })
            .filter_map(|l| {
                let calls = l.split("calls=").nth(1)?;
                calls.split(',').next()?.parse::<u64>().ok()
            })
            .sum()
    }

    fn running(&self) -> Vec<&RedisServer> {
        match self {
            Self::Single(r) => vec![r],
            Self::Cluster(c) => c.nodes.iter().filter(|n| n.child.is_some()).collect(),
            Self::Sentinel(s) => vec![&s.master],
        }
    }

    /// The configuration the library takes for it.
    pub fn config(&self) -> fleetmcp::config::RedisConfig {
        match self {
            Self::Single(r) => fleetmcp::config::RedisConfig::from_url(r.url()),
            Self::Cluster(c) => fleetmcp::config::RedisConfig {
                cluster_nodes: c
                    .nodes
                    .iter()
                    .map(|n| format!("127.0.0.1:{}", n.port))
                    .collect(),
                ..Default::default()
            },
            Self::Sentinel(s) => fleetmcp::config::RedisConfig {
                sentinels: s.sentinels.iter().map(Sentinel::address).collect(),
                sentinel_master: Some(s.name.clone()),
                ..Default::default()
            },
        }
    }
}

/// A master and its replica (synced) watched by three sentinels with a quorum of two, each
/// knowing the replica: ready for `SENTINEL FAILOVER`. [`SentinelSet::start_with`] adds more
/// replicas (`more`), the shape production runs (a master and two replicas).
pub struct SentinelSet {
    pub name: String,
    pub master: RedisServer,
    pub replica: RedisServer,
    /// The replicas after the first (none from [`SentinelSet::start`]).
    pub more: Vec<RedisServer>,
    pub sentinels: Vec<Sentinel>,
}

impl SentinelSet {
    pub fn start(name: &str) -> Self {
        Self::start_with(name, 1)
    }

    /// A master and `replicas` replicas (at least one), all synced and known to every sentinel.
    pub fn start_with(name: &str, replicas: usize) -> Self {
        let master = RedisServer::start();
        let mut all: Vec<RedisServer> = (0..replicas.max(1))
            .map(|_| RedisServer::start_replica_of(master.port))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all.iter().all(|r| {
            r.cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        }) {
            assert!(Instant::now() < deadline, "a replica never synced");
            std::thread::sleep(Duration::from_millis(50));
        }
        let sentinels: Vec<Sentinel> = (0..3)
            .map(|_| Sentinel::start(name, master.port, 2))
            .collect();
        // Every sentinel knows every replica (a failover needs one to promote, and a sentinel
        // that has not found one yet would not count it).
        let deadline = Instant::now() + Duration::from_secs(15);
        while !sentinels.iter().all(|s| {
            let known = s.cli(&["SENTINEL", "replicas", name]);
            all.iter().all(|r| known.contains(&r.port.to_string()))
        }) {
            assert!(
                Instant::now() < deadline,
                "the sentinels never found the replicas"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let replica = all.remove(0);
        Self {
            name: name.to_string(),
            master,
            replica,
            more: all,
            sentinels,
        }
    }

    /// Every server of the set: the master, then the replicas, as started (a failover changes
    /// their roles, not this order).
    pub fn servers_mut(&mut self) -> Vec<&mut RedisServer> {
        let mut out = vec![&mut self.master, &mut self.replica];
        out.extend(self.more.iter_mut());
        out
    }

    /// `REDIS_SENTINELS`: the sentinels' `host:port`, comma-separated.
    pub fn addresses(&self) -> String {
        self.sentinels
            .iter()
            .map(Sentinel::address)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// One Redis Sentinel (`redis-server <conf> --sentinel`) watching the master on `master_port`
/// under `name`, with a quorum of `quorum`; a master is presumed down after 1 s of silence.
pub struct Sentinel {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    pub fn start(name: &str, master_port: u16, quorum: u32) -> Self {
        // Another test may be handed the same free port: then another one (see
        // `RedisServer::spawn`).
        for _ in 0..20 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("temp dir");
            // Sentinel rewrites its configuration file as the fleet changes: it must be writable.
            let conf = dir.path().join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                     sentinel down-after-milliseconds {name} 1000\n\
                     sentinel failover-timeout {name} 4000\n\
                     sentinel parallel-syncs {name} 1\n",
                    dir = dir.path().display()
                ),
            )
            .expect("write sentinel.conf");
            let mut command = Command::new(server_bin());
            command.arg(&conf).arg("--sentinel");
            if let Some(child) = start_answering(command, port) {
                return Self {
                    port,
                    child,
                    _dir: dir,
                };
            }
        }
        panic!("no free port for a sentinel after 20 tries");
    }

    /// `host:port`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli -p <port> <args>`; its trimmed output (empty when it failed).
    pub fn cli(&self, args: &[&str]) -> String {
        Command::new(cli_bin())
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }

    /// The port of the master this sentinel names now.
    pub fn master_port(&self, name: &str) -> Option<u16> {
        Self::master_port_of(self.port, name)
    }

    /// The port of the master the sentinel on `port` names now (for a thread that has no
    /// `Sentinel` of its own).
    pub fn master_port_of(port: u16, name: &str) -> Option<u16> {
        Command::new(cli_bin())
            .args([
                "-p",
                &port.to_string(),
                "SENTINEL",
                "get-master-addr-by-name",
                name,
            ])
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .nth(1)
                    .and_then(|p| p.trim().parse().ok())
            })
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy in front of a Redis server that a test can cut and restore: cut, it closes every
/// connection through it and every new one at once, so a process behind it loses Redis while
/// the rest of a fleet keeps it (a network partition of one instance).
pub struct CuttableProxy {
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    held: std::sync::Arc<std::sync::atomic::AtomicBool>,
    after_head: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
}

impl CuttableProxy {
    /// Starts forwarding a free loopback port to `target` (a port on 127.0.0.1).
    pub fn start(target: u16) -> Self {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::<TcpStream>::new()));
        let held = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let after_head = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (cut2, open2, held2, after_head2) =
            (cut.clone(), open.clone(), held.clone(), after_head.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if cut2.load(Ordering::SeqCst) {
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                    let mut list = open2.lock().expect("proxy list");
                    list.push(c);
                    list.push(s);
                }
                for (mut from, mut to, answers) in [
                    (client.try_clone(), server.try_clone(), false),
                    (server.try_clone(), client.try_clone(), true),
                ]
                .into_iter()
                .filter_map(|(a, b, answers)| Some((a.ok()?, b.ok()?, answers)))
                {
                    let held = held2.clone();
                    let after_head = answers.then(|| after_head2.clone());
                    std::thread::spawn(move || {
                        pump(&mut from, &mut to, &held, after_head.as_deref());
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Self {
            port,
            cut,
            held,
            after_head,
            open,
        }
    }

    /// Holds every byte through the proxy, both ways, until [`CuttableProxy::restore`]: the
    /// link goes silent (nothing refused, nothing answered), and what was sent meanwhile
    /// arrives afterwards, as over a path that came back.
    pub fn hold(&self) {
        self.held.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lets the next HTTP answer's head through from the target (the first `\r\n\r\n` it
    /// sends on any connection), then holds every byte after it, as [`CuttableProxy::hold`]
    /// does: a link that breaks, or goes silent, between an answer's head and its body.
    pub fn hold_after_head(&self) {
        self.after_head
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the proxy holds what it reads (after [`CuttableProxy::hold`], or once an
    /// answer's head went through after [`CuttableProxy::hold_after_head`]).
    pub fn holding(&self) -> bool {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `redis://127.0.0.1:<proxy port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Closes every connection through the proxy, and every new one from now on.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self.open.lock().expect("proxy list").drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Forwards new connections again, and what was held.
    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
        self.held.store(false, std::sync::atomic::Ordering::SeqCst);
        self.after_head
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes; while `held`, what was read waits. `after_head`
/// (the answers' direction only): once set, the first HTTP head through passes and `held` is
/// set for what follows it.
fn pump(
    from: &mut TcpStream,
    to: &mut TcpStream,
    held: &std::sync::atomic::AtomicBool,
    after_head: Option<&std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut rest = &buf[..n];
        if let Some(flag) = after_head
            && flag.load(Ordering::SeqCst)
            && let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n")
        {
            flag.store(false, Ordering::SeqCst);
            held.store(true, Ordering::SeqCst);
            if to.write_all(&rest[..end + 4]).is_err() {
                return;
            }
            rest = &rest[end + 4..];
        }
        while held.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if to.write_all(rest).is_err() {
            return;
        }
    }
}

/// `redis-cli MONITOR` on a server, recording every command it runs until dropped.
pub struct Monitor {
    child: Child,
    out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Monitor {
    pub fn start(redis: &RedisServer) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("monitor.log");
        let file = std::fs::File::create(&out).expect("monitor log");
        let child = Command::new(cli_bin())
            .args(["-p", &redis.port.to_string(), "MONITOR"])
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli MONITOR runs");
        let began = Instant::now();
        // MONITOR answers "OK" once it is recording.
        while !std::fs::read_to_string(&out).is_ok_and(|s| s.starts_with("OK")) {
            assert!(
                began.elapsed() < Duration::from_secs(5),
                "MONITOR did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            out,
            _dir: dir,
        }
    }

    /// Every command recorded so far, one per line.
    pub fn commands(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
