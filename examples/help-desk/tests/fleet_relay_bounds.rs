//! Relayed requests are bounded and counted (issue 19, item 7): two `help-desk` processes in
//! distributed mode on one real `redis-server`. Every session is opened on `desk-a` (the
//! holder); the test then asks `desk-b` for each session's GET stream, which `desk-b` relays to
//! `desk-a`: each such stream holds, on `desk-b`, the client's connection and a socket to the
//! holder.
//!
//! - `ha.relay_max_connections` bounds the relayed requests one instance has in flight: past it
//!   a relay waits a moment for a place, then is answered `503` with `Retry-After: 1` naming the
//!   bound, never a hang; the places come back when the streams end.
//! - A relay's socket to the holder counts against `http.max_connections` with the client
//!   connections: under the figures (512 open files, 400 relayed streams) the relaying
//!   instance stays below its open-files limit, refuses the excess with `503` + `Retry-After`,
//!   and still answers `/healthz` and `/readyz` (before: `Too many open files`, health silent).
//!
//! Sockets and descriptors are read from `/proc/<pid>/fd` and `/proc/net/tcp` (Linux). Needs
//! `redis-server` and `redis-cli` on `PATH` (or `REDIS_SERVER` / `REDIS_CLI`). Every wait is
//! bounded.

#[path = "../../e2e_support.rs"]
mod support;

#[path = "../../../crates/fleetmcp/tests/support_redis/mod.rs"]
mod support_redis;

mod fleet_client;

use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use fleet_client::*;
use serde_json::{Value, json};
use support::raw_http;
use support::{Instance, TempDir};
use support_redis::RedisServer;

/// How long every relayed GET may take to be answered (a stream's head, or the refusal), all
/// of them counted from when they were sent: a relay waits about a second for a place, so
/// anything near this is a hang.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);
/// The listener's health reserve (`server/listener.rs` `HEALTH_RESERVE`).
const HEALTH_RESERVE: usize = 16;

// ---------------------------------------------------------------------------------------------
// Instances

/// `desk-b`, run with an open-files limit of `nofile` (soft and hard), through a `sh` wrapper
/// that `exec`s the binary (so the instance's pid is the server's).
fn desk_with_open_files(
    dir: &TempDir,
    machine: &str,
    redis: &str,
    nofile: u32,
    extra: &[(&str, &str)],
) -> Instance {
    let script = dir.path().join(format!("{machine}-nofile-{nofile}"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nulimit -n {nofile} || exit 97\nexec '{}'\n",
            env!("CARGO_BIN_EXE_help-desk")
        ),
    )
    .expect("write the wrapper");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("chmod the wrapper");
    }
    let mut env: Vec<(&str, &str)> = vec![
        ("FRONTMCP_DEPLOYMENT_MODE", "distributed"),
        ("FRONTMCP_BIND_ADDRESS", "loopback"),
        ("MACHINE_ID", machine),
        ("REDIS_URL", redis),
        ("REDIS_HOST", ""),
        ("REDIS_PORT", ""),
    ];
    env.extend_from_slice(extra);
    let desk = Instance::start(&script.to_string_lossy(), &env);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", desk.pid()))
        .expect("read the instance's limits");
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_default();
    assert!(
        open_files.split_whitespace().nth(3) == Some(&nofile.to_string()),
        "the wrapper did not set the limit: {open_files}"
    );
    desk
}

/// `n` sessions opened on (and so held by) `holder`.
fn sessions_on(holder: &Instance, name: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let (sid, machine) = open_session_held(holder.port());
            assert_eq!(
                machine.as_deref(),
                Some(name),
                "initialize answered elsewhere"
            );
            sid
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// What the relaying instance holds open (Linux /proc)

/// The socket inodes among the open descriptors of `pid`, and how many descriptors it has.
fn descriptors(pid: u32) -> (HashSet<u64>, usize) {
    let mut inodes = HashSet::new();
    let mut count = 0;
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (inodes, 0);
    };
    for entry in dir.flatten() {
        count += 1;
        if let Ok(target) = std::fs::read_link(entry.path()) {
            let target = target.to_string_lossy();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse().ok())
            {
                inodes.insert(inode);
            }
        }
    }
    (inodes, count)
}

/// What `pid` holds: its descriptors, the TCP connections it accepted on `own_port`, and those
/// it opened to `holder_port` (the relay's sockets), in any state but `LISTEN`.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    fds: usize,
    accepted: usize,
    to_holder: usize,
    /// Resident memory, in KiB (`VmRSS`).
    rss_kib: u64,
}

fn held(pid: u32, own_port: u16, holder_port: u16) -> Held {
    let (inodes, fds) = descriptors(pid);
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port_of = |addr: &str| {
        addr.split(':')
            .nth(1)
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut out = Held {
        fds,
        rss_kib,
        ..Held::default()
    };
    // The table is not read atomically: while sockets come and go, a row can be read twice.
    let mut seen = HashSet::new();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] == "0A" {
            continue;
        }
        let Ok(inode) = f[9].parse::<u64>() else {
            continue;
        };
        if !inodes.contains(&inode) || !seen.insert(inode) {
            continue;
        }
        if port_of(f[1]) == Some(own_port) {
            out.accepted += 1;
        } else if port_of(f[2]) == Some(holder_port) {
            out.to_holder += 1;
        }
    }
    out
}

/// Samples [`held`] every few milliseconds until stopped; the largest values seen.
struct Sampler {
    stop: Arc<AtomicBool>,
    worker: thread::JoinHandle<Held>,
}

impl Sampler {
    fn start(pid: u32, own_port: u16, holder_port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let worker = thread::spawn(move || {
            let mut most = Held::default();
            while !flag.load(Ordering::Relaxed) {
                let now = held(pid, own_port, holder_port);
                most.fds = most.fds.max(now.fds);
                most.accepted = most.accepted.max(now.accepted);
                most.to_holder = most.to_holder.max(now.to_holder);
                most.rss_kib = most.rss_kib.max(now.rss_kib);
                thread::sleep(Duration::from_millis(5));
            }
            most
        });
        Self { stop, worker }
    }

    fn stop(self) -> Held {
        self.stop.store(true, Ordering::Relaxed);
        self.worker.join().expect("the sampler")
    }
}

// ---------------------------------------------------------------------------------------------
// Relayed GET streams

/// What became of one relayed GET.
enum Outcome {
    /// The holder's stream (`200 text/event-stream`), left open.
    Stream(TcpStream),
    /// A `503` with its `Retry-After` and JSON body, its connection left open.
    Refused {
        retry_after: Option<String>,
        body: Value,
        after: Duration,
        _conn: TcpStream,
    },
    /// Anything else (another status, a closed connection, no answer in time).
    Other(String),
}

/// Connects `n` clients to `port` and waits until the instance (`pid`) has accepted them all,
/// so the connections are in place before any request is relayed.
fn connect_all(port: u16, pid: u32, holder_port: u16, n: usize) -> Vec<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let conns: Vec<TcpStream> = (0..n)
        .map(|i| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("connection {i} to {port}: {e}"))
        })
        .collect();
    let began = Instant::now();
    loop {
        let now = held(pid, port, holder_port);
        if now.accepted >= n {
            return conns;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the instance accepted {} of {n} connections within 10 s",
            now.accepted
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn get_request(port: u16, sid: &str) -> String {
    format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\
         mcp-session-id: {sid}\r\nmcp-protocol-version: {PROTOCOL_VERSION}\r\n\r\n"
    )
}

/// Reads an answer's head from `conn` by `deadline`: status and headers.
fn read_head(
    conn: &mut TcpStream,
    deadline: Instant,
) -> Result<(u16, Vec<(String, String)>), String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no answer within {ANSWER_LIMIT:?} (a hang); got {:?}",
                String::from_utf8_lossy(&head)
            ));
        }
        conn.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match conn.read(&mut byte) {
            Ok(0) => {
                return Err(format!(
                    "connection closed after {:?}",
                    String::from_utf8_lossy(&head)
                ));
            }
            Ok(_) => head.push(byte[0]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {text:?}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((status, headers))
}

/// Reads a body of `content-length` bytes by `deadline`.
fn read_body(conn: &mut TcpStream, len: usize, deadline: Instant) -> Result<Vec<u8>, String> {
    let mut body = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("the body did not arrive in time".into());
        }
        conn.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match conn.read(&mut body[got..]) {
            Ok(0) => return Err("connection closed in the body".into()),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
    Ok(body)
}

/// Sends each session's GET on its own connection (all at once), then reads every answer.
fn relay_streams(port: u16, conns: Vec<TcpStream>, sessions: &[String]) -> Vec<Outcome> {
    let mut conns = conns;
    for (conn, sid) in conns.iter_mut().zip(sessions) {
        conn.write_all(get_request(port, sid).as_bytes())
            .expect("send a GET");
    }
    let sent = Instant::now();
    let deadline = sent + ANSWER_LIMIT;
    conns
        .into_iter()
        .map(|mut conn| {
            let (status, headers) = match read_head(&mut conn, deadline) {
                Ok(head) => head,
                Err(why) => return Outcome::Other(why),
            };
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            };
            match status {
                200 if header("content-type")
                    .is_some_and(|t| t.starts_with("text/event-stream")) =>
                {
                    Outcome::Stream(conn)
                }
                503 => {
                    let after = sent.elapsed();
                    let len = header("content-length")
                        .and_then(|l| l.parse().ok())
                        .unwrap_or(0);
                    let body = match read_body(&mut conn, len, deadline) {
                        Ok(b) => serde_json::from_slice(&b).unwrap_or(Value::Null),
                        Err(why) => return Outcome::Other(format!("503 without its body: {why}")),
                    };
                    Outcome::Refused {
                        retry_after: header("retry-after"),
                        body,
                        after,
                        _conn: conn,
                    }
                }
                other => Outcome::Other(format!("HTTP {other} {headers:?}")),
            }
        })
        .collect()
}

/// The streams, the refusals, and a description of anything else.
fn tally(outcomes: Vec<Outcome>) -> (Vec<TcpStream>, Vec<Outcome>, Vec<String>) {
    let mut streams = Vec::new();
    let mut refused = Vec::new();
    let mut other = Vec::new();
    for o in outcomes {
        match o {
            Outcome::Stream(s) => streams.push(s),
            Outcome::Refused { .. } => refused.push(o),
            Outcome::Other(why) => other.push(why),
        }
    }
    (streams, refused, other)
}

/// Each refusal is a `503` with `Retry-After: 1` and a JSON-RPC error naming `bound`, answered
/// well within the limit (a relay waits about a second for a place); the slowest.
fn assert_refusals(refused: &[Outcome], bound: &str) -> Duration {
    let mut slowest = Duration::ZERO;
    for o in refused {
        let Outcome::Refused {
            retry_after,
            body,
            after,
            ..
        } = o
        else {
            continue;
        };
        assert_eq!(
            retry_after.as_deref(),
            Some("1"),
            "a refused relay's Retry-After: {body}"
        );
        assert_eq!(body["jsonrpc"], "2.0", "not JSON-RPC: {body}");
        assert_eq!(body["error"]["code"], -32000, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(bound),
            "the refusal does not name {bound}: {body}"
        );
        slowest = slowest.max(*after);
    }
    assert!(
        slowest < Duration::from_secs(5),
        "a refusal took {slowest:?}: relays must not wait long for a place"
    );
    slowest
}

/// Whether `/healthz` and `/readyz` on `port` answer 200 within 2 s, each on a new connection;
/// what went wrong otherwise.
fn health(port: u16) -> Result<(), String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let host = format!("127.0.0.1:{port}");
    for path in ["/healthz", "/readyz"] {
        let answer = raw_http::try_send(
            addr,
            "GET",
            path,
            &[("Host", host.as_str())],
            None,
            Duration::from_secs(2),
        );
        match answer {
            Ok(r) if r.status == 200 => {}
            Ok(r) => return Err(format!("{path}:\n{}", r.describe())),
            Err(e) => return Err(format!("{path} did not answer within 2 s: {e}")),
        }
    }
    Ok(())
}

/// A relayed `tools/call` through `via` in session `sid` is served by `holder` again: the places
/// the streams held came back. Bounded: the relaying instance notices the clients went away
/// within a moment.
fn assert_relays_again(via: u16, sid: &str, holder: &str) {
    let began = Instant::now();
    loop {
        let resp = post_with(
            via,
            Some(sid),
            &[],
            &tool_call("find_tickets", json!({})),
            HTTP_LIMIT,
        );
        if resp.status == 200 {
            assert_served_by(&resp, holder, "a relayed call after the streams ended");
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "relays still refused 10 s after the streams ended:\n{}",
            resp.describe()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// `fleetmcp_limit_rejections_total{limit="<limit>"}` on `port`.
fn rejections(port: u16, limit: &str) -> u64 {
    metric(
        port,
        &format!("fleetmcp_limit_rejections_total{{limit=\"{limit}\"}}"),
    )
    .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// 1. ha.relay_max_connections

#[test]
fn relays_beyond_ha_relay_max_connections_get_503_with_retry_after_and_health_answers() {
    const CAP: usize = 8;
    const STREAMS: usize = 40;
    let redis = RedisServer::start();
    let a = distributed_desk("desk-a", &redis.url(), &[]);
    let b = distributed_desk(
        "desk-b",
        &redis.url(),
        &[("FLEETMCP_RELAY_MAX_CONNECTIONS", &CAP.to_string())],
    );
    let sessions = sessions_on(&a, "desk-a", STREAMS);
    let conns = connect_all(b.port(), b.pid(), a.port(), STREAMS);

    let sampler = Sampler::start(b.pid(), b.port(), a.port());
    let outcomes = relay_streams(b.port(), conns, &sessions);
    let (streams, refused, other) = tally(outcomes);
    // Checked while every stream and refused connection is still open.
    let healthy = health(b.port());
    let most = sampler.stop();
    eprintln!(
        "relay cap {CAP}, {STREAMS} relayed GETs: {} streams, {} refused, most held by desk-b: {most:?}",
        streams.len(),
        refused.len()
    );

    assert!(
        other.is_empty(),
        "answers that were neither a stream nor a 503:\n{other:#?}"
    );
    assert_eq!(
        healthy,
        Ok(()),
        "desk-b's health routes with the relays in flight"
    );
    assert_eq!(
        streams.len(),
        CAP,
        "relayed streams in flight on desk-b (ha.relay_max_connections = {CAP})"
    );
    assert_eq!(refused.len(), STREAMS - CAP);
    let slowest = assert_refusals(&refused, "ha.relay_max_connections");
    eprintln!("slowest refusal: {slowest:?}");
    assert!(
        most.to_holder <= CAP,
        "desk-b held {} sockets to the holder at once, over ha.relay_max_connections = {CAP}",
        most.to_holder
    );
    assert_eq!(
        rejections(b.port(), "relay_connections"),
        (STREAMS - CAP) as u64,
        "refusals counted in fleetmcp_limit_rejections_total"
    );

    drop(streams);
    drop(refused);
    assert_relays_again(b.port(), &sessions[0], "desk-a");
    b.assert_no_panic_logged();
    a.assert_no_panic_logged();
}

// ---------------------------------------------------------------------------------------------
// 2. The figures: 512 open files, 400 relayed streams

#[test]
fn relay_sockets_count_against_max_connections_so_400_streams_at_512_files_leave_health_answering()
{
    const NOFILE: u32 = 512;
    const STREAMS: usize = 400;
    let redis = RedisServer::start();
    let dir = TempDir::new("relay-bounds");
    let a = distributed_desk("desk-a", &redis.url(), &[]);
    // The relay cap out of the way: only the connection budget bounds the relays here.
    let b = desk_with_open_files(
        &dir,
        "desk-b",
        &redis.url(),
        NOFILE,
        &[("FLEETMCP_RELAY_MAX_CONNECTIONS", "100000")],
    );
    // The connection cap the instance fitted to its open-files limit, as it logged it.
    let log = b.log();
    let budget: usize = log
        .split("serving at most ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("desk-b did not log its fitted connection cap:\n{log}"));
    assert!(
        budget > STREAMS,
        "the cap ({budget}) must admit every client"
    );

    let sessions = sessions_on(&a, "desk-a", STREAMS);
    let before = held(b.pid(), b.port(), a.port());
    let conns = connect_all(b.port(), b.pid(), a.port(), STREAMS);

    let sampler = Sampler::start(b.pid(), b.port(), a.port());
    let outcomes = relay_streams(b.port(), conns, &sessions);
    let (streams, refused, other) = tally(outcomes);
    // Every client connection and relayed stream is still open: the connection budget is
    // spent, and the health reserve must still answer.
    let healthy: Vec<Result<(), String>> = (0..3).map(|_| health(b.port())).collect();
    let most = sampler.stop();
    eprintln!(
        "{NOFILE} open files (cap fitted to {budget}), {STREAMS} relayed GETs: {} streams, {} refused; \
         desk-b before: {before:?}, most held: {most:?}",
        streams.len(),
        refused.len()
    );

    assert!(
        other.is_empty(),
        "answers that were neither a stream nor a 503:\n{other:#?}"
    );
    for h in healthy {
        assert_eq!(
            h,
            Ok(()),
            "desk-b's health routes with its connections spent"
        );
    }
    assert!(!streams.is_empty(), "no relayed stream was served at all");
    assert_eq!(streams.len() + refused.len(), STREAMS);
    let slowest = assert_refusals(&refused, "http.max_connections");
    eprintln!("slowest refusal: {slowest:?}");
    // Client connections and the relay's sockets together stay within the cap (the health
    // probes within the reserve)...
    assert!(
        most.accepted + most.to_holder <= budget + HEALTH_RESERVE,
        "desk-b held {} client connections and {} sockets to the holder at once: over its cap {budget} (+ {HEALTH_RESERVE} for health)",
        most.accepted,
        most.to_holder
    );
    // ... and so its descriptors stay below the open-files limit, with what it held before
    // the flood (Redis, the listener) beside them.
    assert!(
        most.fds <= before.fds + budget + HEALTH_RESERVE,
        "desk-b had {} descriptors open (limit {NOFILE}; {} before the flood, cap {budget})",
        most.fds,
        before.fds
    );
    assert!(
        !b.log().contains("Too many open files"),
        "desk-b ran out of descriptors:\n{}",
        b.log()
    );

    drop(streams);
    drop(refused);
    assert_relays_again(b.port(), &sessions[0], "desk-a");
    b.assert_no_panic_logged();
    a.assert_no_panic_logged();
}
