//! The upstream as child processes: one per session this instance holds, started with the
//! configured command, spoken to over its stdin and stdout (newline-delimited JSON-RPC, the MCP
//! stdio transport), its stderr in our logs line by line, stopped with its process group and
//! reaped when its session no longer needs it.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fleetmcp::{MessageReceiver, MessageSender, Upstream, UpstreamLink};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::GatewayConfig;

/// Messages queued each way per upstream, and at most `gateway.max_line_bytes` bytes of them
/// (one longest message): past either, the side that sends waits (a session whose client or
/// upstream does not read slows down instead of growing a buffer; see `fleetmcp`'s
/// `UpstreamLink::channel`).
pub const QUEUE: usize = 64;

/// Starts and stops the upstream processes of this instance. Cheap to clone.
#[derive(Clone)]
pub struct Children {
    inner: Arc<Inner>,
}

struct Inner {
    config: GatewayConfig,
    /// One permit per running process (held until it is reaped).
    slots: Arc<Semaphore>,
    /// Processes running per client key (`gateway.max_processes_per_key`); a key leaves the
    /// table when its last process is reaped.
    per_key: Arc<parking_lot::Mutex<HashMap<String, usize>>>,
    /// Whether the command serves: `Ok` only once the probe's process answered `initialize`
    /// (issue 38: a process merely started, the probe's own included, said nothing yet); why
    /// not otherwise, or that it was not probed yet.
    health: parking_lot::Mutex<Result<(), String>>,
    /// Told when a start fails: the probe then runs again until one succeeds, so `/readyz`
    /// comes back by itself (issue 36: with the descriptors spent, it stayed `503` after
    /// they were free again, no new session coming to reset it).
    failed: Arc<tokio::sync::Notify>,
    /// Fires when the gateway stops: every process is stopped.
    stop: tokio_util::sync::CancellationToken,
}

impl Children {
    pub fn new(config: GatewayConfig) -> Self {
        let slots = Arc::new(Semaphore::new(config.max_processes));
        Self {
            inner: Arc::new(Inner {
                config,
                slots,
                per_key: Arc::default(),
                health: parking_lot::Mutex::new(Err(crate::probe::NOT_YET.to_string())),
                failed: Arc::default(),
                stop: tokio_util::sync::CancellationToken::new(),
            }),
        }
    }

    /// The command as an operator wrote it, for messages.
    pub fn command_line(&self) -> String {
        shlex::try_join(self.inner.config.command.iter().map(String::as_str))
            .unwrap_or_else(|_| self.inner.config.command.join(" "))
    }

    /// Notes whether the command can serve (the startup probe's finding).
    pub fn set_health(&self, health: Result<(), String>) {
        *self.inner.health.lock() = health;
    }

    /// Notified when a process could not be started (see `probe::watch`).
    pub fn failures(&self) -> Arc<tokio::sync::Notify> {
        self.inner.failed.clone()
    }

    /// How many upstream processes run now.
    pub fn running(&self) -> usize {
        self.inner.config.max_processes - self.inner.slots.available_permits()
    }

    /// Stops every process (the gateway is stopping) and waits until they are reaped, at most
    /// twice the stop grace and a second.
    pub async fn stop_all(&self) {
        self.inner.stop.cancel();
        let deadline =
            tokio::time::Instant::now() + self.inner.config.stop_grace * 2 + Duration::from_secs(1);
        while self.running() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn spawn(&self) -> std::io::Result<Child> {
        let Some((program, args)) = self.inner.config.command.split_first() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no command",
            ));
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own, so that stopping it stops what it started too (`npx` runs
            // `node`, a shell script its commands), and a Ctrl-C in our terminal is ours alone.
            .process_group(0)
            // Should this process end without reaping it, the child does not outlive it.
            .kill_on_drop(true);
        for name in own_variables() {
            command.env_remove(name);
        }
        command.spawn()
    }
}

/// The variables of the gateway's own configuration, which its upstream does not inherit: the
/// session secret, Redis, the port, the deployment mode are the gateway's, and a server someone
/// else wrote has no business reading them (or taking `PORT` as its own). The rest of the
/// environment (an API key the upstream needs, `PATH`, `HOME`) is inherited, and so are the
/// generic `HOSTNAME`, `NODE_ENV` and the log and trace settings.
fn own_variables() -> impl Iterator<Item = &'static str> {
    const KEPT: [&str; 4] = ["HOSTNAME", "NODE_ENV", "RUST_LOG", "LOG_FORMAT"];
    fleetmcp::Config::environment_variables()
        .filter(|name| !KEPT.contains(name) && !name.starts_with("OTEL_"))
        .chain(crate::config::VARIABLES)
}

#[async_trait]
impl Upstream for Children {
    async fn connect(&self, session: &str, key: &str) -> Result<UpstreamLink, String> {
        let permit = self.inner.slots.clone().try_acquire_owned().map_err(|_| {
            format!(
                "this instance runs its most upstream processes (FLEETMCP_UPSTREAM_MAX_PROCESSES = {})",
                self.inner.config.max_processes
            )
        })?;
        // One client cannot take every process of the instance.
        let place = KeyPlace::take(&self.inner, key)?;
        let child = self.spawn().map_err(|e| {
            let why = format!("cannot start `{}`: {e}", self.command_line());
            tracing::error!("[gateway] {why}");
            self.set_health(Err(why.clone()));
            self.inner.failed.notify_one();
            why
        })?;
        // Started is not ready: the probe, told of the last failure, says when it serves.
        Ok(run(child, (permit, place), session, &self.inner))
    }

    fn ready(&self) -> Result<(), String> {
        self.inner.health.lock().clone()
    }
}

/// A process's place under `gateway.max_processes_per_key`, given back when it is reaped.
struct KeyPlace {
    key: String,
    table: Arc<parking_lot::Mutex<HashMap<String, usize>>>,
}

impl KeyPlace {
    fn take(inner: &Inner, key: &str) -> Result<Self, String> {
        let max = inner.config.max_processes_per_key;
        let mut table = inner.per_key.lock();
        let n = table.entry(key.to_string()).or_insert(0);
        if *n >= max {
            return Err(format!(
                "this client runs its most upstream processes on this instance (FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY = {max})"
            ));
        }
        *n += 1;
        Ok(Self {
            key: key.to_string(),
            table: inner.per_key.clone(),
        })
    }
}

impl Drop for KeyPlace {
    fn drop(&mut self) {
        let mut table = self.table.lock();
        if let Some(n) = table.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                table.remove(&self.key);
            }
        }
    }
}

/// Wires a started process to a link, and stops and reaps it when the link is dropped, the
/// gateway stops, or it exits by itself; its places (`places`) are held until it is reaped.
fn run(
    mut child: Child,
    places: (OwnedSemaphorePermit, KeyPlace),
    session: &str,
    inner: &Inner,
) -> UpstreamLink {
    let max = inner.config.max_line_bytes;
    let (to_upstream, to_rx) = UpstreamLink::channel(QUEUE, max);
    let (from_tx, from_upstream) = UpstreamLink::channel(QUEUE, max);
    let pid = child.id();
    let session: Arc<str> = session.into();
    tracing::info!(session = %session, pid, "[gateway] started an upstream process");
    let writer = child
        .stdin
        .take()
        .map(|stdin| tokio::spawn(write(stdin, to_rx)));
    let link_closed = from_tx.clone();
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(read_messages(
            BufReader::new(stdout),
            from_tx,
            max,
            session.clone(),
        ));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(log_stderr(BufReader::new(stderr), max, session.clone()));
    }
    let (grace, stop) = (inner.config.stop_grace, inner.stop.clone());
    tokio::spawn(async move {
        // The session no longer needs it once the link's sender is dropped (the writer then
        // closes stdin and returns) or its receiver is (the writer may be stuck writing to a
        // process that stopped reading). This clone keeps the link open a moment longer when
        // the process exits: until it is reaped, just below.
        let no_longer_needed = async {
            let writer_done = async {
                match writer {
                    Some(w) => drop(w.await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = writer_done => {}
                _ = link_closed.closed() => {}
            }
        };
        tokio::select! {
            status = child.wait() => {
                tracing::warn!(session = %session, pid, status = ?status, "[gateway] an upstream process exited by itself");
            }
            _ = no_longer_needed => stop_child(&mut child, pid, grace, &session).await,
            _ = stop.cancelled() => stop_child(&mut child, pid, grace, &session).await,
        }
        // Whatever it started in its group goes with it.
        kill_group(pid, rustix::process::Signal::KILL);
        drop(places);
    });
    UpstreamLink {
        to_upstream,
        from_upstream,
    }
}

/// Stops a process the way an MCP client stops a stdio server: its stdin is closed already;
/// it gets `grace` to exit, then `SIGTERM` (its group) and `grace` again, then `SIGKILL`.
/// Reaped in every case.
async fn stop_child(child: &mut Child, pid: Option<u32>, grace: Duration, session: &str) {
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(status)) if status.success() => {
            tracing::info!(session, pid, status = ?status, "[gateway] an upstream process ended with its session");
            return;
        }
        // It may have died just before its link ended (a crash closes stdout first).
        Ok(status) => {
            tracing::warn!(session, pid, status = ?status, "[gateway] an upstream process ended with an error");
            return;
        }
        Err(_) => {}
    }
    kill_group(pid, rustix::process::Signal::TERM);
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        tracing::info!(session, pid, status = ?status, "[gateway] an upstream process stopped on SIGTERM");
        return;
    }
    kill_group(pid, rustix::process::Signal::KILL);
    let status = child.wait().await;
    tracing::warn!(session, pid, status = ?status, "[gateway] an upstream process was killed: it ignored the end of its input and SIGTERM");
}

/// Sends `signal` to the process group led by `pid` (none when it already ended).
fn kill_group(pid: Option<u32>, signal: rustix::process::Signal) {
    let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    let _ = rustix::process::kill_process_group(pid, signal);
}

/// Writes each message on its own line; returns (closing stdin) when the link's sender is
/// dropped or the process stops reading.
async fn write(mut stdin: ChildStdin, mut messages: MessageReceiver) {
    while let Some(message) = messages.recv().await {
        // A message is one JSON value; a raw newline inside would split it (serde_json never
        // writes one, but a message we pass on came from elsewhere).
        let line: Vec<u8> = message
            .iter()
            .copied()
            .filter(|b| *b != b'\n' && *b != b'\r')
            .collect();
        if stdin.write_all(&line).await.is_err()
            || stdin.write_all(b"\n").await.is_err()
            || stdin.flush().await.is_err()
        {
            break;
        }
    }
}

/// Passes each line of stdout on as one message, until the process closes it or nobody reads.
async fn read_messages(
    mut out: impl AsyncBufRead + Unpin,
    to: MessageSender,
    max: usize,
    session: Arc<str>,
) {
    loop {
        match next_line(&mut out, max).await {
            Line::End => return,
            Line::TooLong(n) => {
                tracing::warn!(session = %session, bytes = n, max, "[gateway] an upstream wrote a line longer than FLEETMCP_UPSTREAM_MAX_LINE_BYTES on stdout; dropped");
            }
            Line::Text(line) if line.iter().all(u8::is_ascii_whitespace) => {}
            Line::Text(line) => {
                if to.send(Bytes::from(line)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Logs each line of stderr (what an MCP server writes there is its log).
async fn log_stderr(mut err: impl AsyncBufRead + Unpin, max: usize, session: Arc<str>) {
    loop {
        match next_line(&mut err, max).await {
            Line::End => return,
            Line::TooLong(n) => {
                tracing::info!(target: "upstream", session = %session, "<a line of {n} bytes, not shown>")
            }
            Line::Text(line) => {
                tracing::info!(target: "upstream", session = %session, "{}", String::from_utf8_lossy(&line));
            }
        }
    }
}

enum Line {
    Text(Vec<u8>),
    /// A line over the bound: its length, none of it kept.
    TooLong(usize),
    End,
}

/// The next line without its end, never holding more than `max` bytes of it.
async fn next_line(input: &mut (impl AsyncBufRead + Unpin), max: usize) -> Line {
    let mut line = Vec::new();
    let mut skipped = 0usize;
    loop {
        let buf = match input.fill_buf().await {
            Ok(b) if !b.is_empty() => b,
            _ if line.is_empty() && skipped == 0 => return Line::End,
            _ => break,
        };
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if skipped > 0 || line.len() + chunk.len() > max {
            skipped += line.len() + chunk.len();
            line.clear();
        } else {
            line.extend_from_slice(chunk);
        }
        let used = done.unwrap_or(buf.len());
        input.consume(used);
        if done.is_some() {
            break;
        }
    }
    if skipped > 0 {
        return Line::TooLong(skipped);
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Line::Text(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_cut_at_newlines_and_bounded() {
        let long = "x".repeat(50);
        let text = format!("{{\"a\":1}}\r\n\n{long}\nshort\npartial");
        let mut input = BufReader::with_capacity(8, text.as_bytes());
        let mut seen = Vec::new();
        loop {
            match next_line(&mut input, 20).await {
                Line::End => break,
                Line::TooLong(n) => seen.push(format!("too long {n}")),
                Line::Text(t) => seen.push(String::from_utf8(t).unwrap()),
            }
        }
        assert_eq!(seen, ["{\"a\":1}", "", "too long 50", "short", "partial"]);
    }
}
