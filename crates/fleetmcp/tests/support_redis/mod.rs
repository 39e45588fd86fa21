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
        Self::start_on(free_port())
    }

    /// Starts a server on `port` and waits until it answers `PING`.
    pub fn start_on(port: u16) -> Self {
        let mut s = Self {
            port,
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            paused: false,
            persistent: false,
            extra: Vec::new(),
        };
        s.spawn();
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
        s.spawn();
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
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new(server_bin())
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
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (is it installed?)");
        self.child = Some(child);
        self.paused = false;
        self.wait_ready(Duration::from_secs(5));
    }

    fn wait_ready(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.raw_ping() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not answer PING", self.port);
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
        self.spawn();
    }

    /// Starts the server again after [`kill`](Self::kill) on the same port: empty, unless it was
    /// started with [`start_persistent`](Self::start_persistent).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "server is still running");
        self.spawn();
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

/// One Redis Sentinel (`redis-server <conf> --sentinel`) watching the master on `master_port`
/// under `name`, with a quorum of `quorum`; a master is presumed down after 1 s of silence.
pub struct Sentinel {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    pub fn start(name: &str, master_port: u16, quorum: u32) -> Self {
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
        let child = Command::new(server_bin())
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel starts");
        let s = Self {
            port,
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.cli(&["PING"]) != "PONG" {
            assert!(
                Instant::now() < deadline,
                "sentinel on {port} did not answer"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
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
        self.cli(&["SENTINEL", "get-master-addr-by-name", name])
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
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
        let (cut2, open2) = (cut.clone(), open.clone());
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
                for (mut from, mut to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ]
                .into_iter()
                .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Self { port, cut, open }
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

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
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
