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
