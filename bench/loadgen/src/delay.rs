//! `fleet-loadgen delay`: a TCP relay that delays each direction by a fixed one-way time, the
//! network delay `tc netem` would add where the kernel has no `sch_netem` (`bench/scale.sh`
//! `NETNS=1 DELAY_US=N`).
//!
//! ```text
//! fleet-loadgen delay --listen ADDR --to ADDR --one-way-us N [--buffer-bytes 1048576]
//! ```
//!
//! Every accepted connection gets its own connection to `--to` (TCP_NODELAY on both). Each
//! direction is a reader and a writer: the reader stamps every chunk it reads with the moment
//! it was read, and the writer writes the chunks in order, each no earlier than N µs after its
//! stamp; so a round trip through the relay takes at least 2N µs more, and a stream of chunks
//! keeps its throughput (the delay is latency, not a window). What a direction holds is bounded
//! in bytes (`--buffer-bytes`): a reader that is that far ahead waits, and TCP pushes back on the
//! sender. An end of stream is passed on (a half-close) once the chunks before it are written.
//!
//! The wait is a `timerfd` (microseconds; tokio's own timer counts whole milliseconds, so a
//! 0.25 ms delay would become one of about 1 ms).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fd::OwnedFd;
use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};

/// Largest chunk read at once (and so the smallest useful `--buffer-bytes`).
const CHUNK: usize = 64 * 1024;

/// What one relay does: where it forwards, the one-way delay, the bytes a direction may hold.
#[derive(Clone, Copy, Debug)]
pub struct Delay {
    pub to: SocketAddr,
    pub one_way: Duration,
    pub buffer_bytes: usize,
}

/// A one-shot monotonic timer with microsecond resolution, awaited through tokio's reactor.
struct Timer(AsyncFd<OwnedFd>);

impl Timer {
    fn new() -> std::io::Result<Self> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // SAFETY: the OwnedFd is moved into the AsyncFd, which owns it until dropped: it stays
        // open, the same timer, and `as_raw_fd` returns that one descriptor.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE)? };
        Ok(Self(fd))
    }

    /// Returns at `deadline` or later (at once if it passed).
    async fn sleep_until(&self, deadline: Instant) -> std::io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            },
        };
        timerfd_settime(self.0.get_ref(), TimerfdTimerFlags::empty(), &spec)?;
        loop {
            let mut guard = self.0.readable().await?;
            let mut expirations = [0u8; 8];
            match rustix::io::read(self.0.get_ref(), &mut expirations) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// One chunk on its way: its bytes and when it may be written.
struct Chunk {
    due: Instant,
    bytes: Vec<u8>,
}

/// Reads `from` into `tx`, stamping each chunk, holding at most the semaphore's bytes.
async fn read_side(
    mut from: OwnedReadHalf,
    tx: mpsc::UnboundedSender<Chunk>,
    room: Arc<Semaphore>,
    one_way: Duration,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return, // the end (or a reset): the writer passes it on
            Ok(n) => n,
        };
        let due = Instant::now() + one_way;
        // Room for these bytes first: a writer this far behind slows the sender down.
        let Ok(permit) = room.clone().acquire_many_owned(n as u32).await else {
            return;
        };
        permit.forget(); // given back by the writer once written
        if tx
            .send(Chunk {
                due,
                bytes: buf[..n].to_vec(),
            })
            .is_err()
        {
            return; // the writer stopped (its side failed)
        }
    }
}

/// Writes the chunks in order, each no earlier than its due time; then passes the end on.
async fn write_side(
    mut to: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Chunk>,
    room: Arc<Semaphore>,
) -> std::io::Result<()> {
    let timer = Timer::new()?;
    while let Some(c) = rx.recv().await {
        timer.sleep_until(c.due).await?;
        to.write_all(&c.bytes).await?;
        room.add_permits(c.bytes.len());
    }
    to.shutdown().await
}

/// One direction: a reader and a writer joined by a queue bounded in bytes.
async fn direction(from: OwnedReadHalf, to: OwnedWriteHalf, d: Delay) {
    let room = Arc::new(Semaphore::new(d.buffer_bytes.max(CHUNK)));
    let (tx, rx) = mpsc::unbounded_channel();
    let reader = read_side(from, tx, room.clone(), d.one_way);
    // A failed write drops the queue's receiver, which stops the reader at its next chunk.
    let writer = async { write_side(to, rx, room).await.ok() };
    tokio::join!(reader, writer);
}

/// Relays one accepted connection until both directions ended.
async fn relay(client: TcpStream, d: Delay) -> std::io::Result<()> {
    let upstream = TcpStream::connect(d.to).await?;
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    tokio::join!(direction(cr, uw, d), direction(ur, cw, d));
    Ok(())
}

/// Accepts on `listener` for ever, relaying each connection with `d`.
pub async fn serve(listener: TcpListener, d: Delay) -> std::io::Result<()> {
    loop {
        let (client, _) = listener.accept().await?;
        tokio::spawn(async move {
            if let Err(e) = relay(client, d).await {
                eprintln!("fleet-loadgen delay: to {}: {e}", d.to);
            }
        });
    }
}

fn parse(args: Vec<String>) -> Result<(String, Delay), String> {
    let (mut listen, mut to, mut us, mut buffer) = (None, None, None, 1 << 20);
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let val = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = Some(val),
            "--to" => to = Some(val.parse().map_err(|e| format!("--to {val}: {e}"))?),
            "--one-way-us" => {
                us = Some(
                    val.parse()
                        .map_err(|e| format!("--one-way-us {val}: {e}"))?,
                )
            }
            "--buffer-bytes" => {
                buffer = val
                    .parse()
                    .map_err(|e| format!("--buffer-bytes {val}: {e}"))?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let usage =
        "usage: fleet-loadgen delay --listen ADDR --to ADDR --one-way-us N [--buffer-bytes B]";
    match (listen, to, us) {
        (Some(l), Some(to), Some(us)) => Ok((
            l,
            Delay {
                to,
                one_way: Duration::from_micros(us),
                buffer_bytes: buffer,
            },
        )),
        _ => Err(usage.into()),
    }
}

/// `fleet-loadgen delay ...`: runs until killed.
pub async fn main(args: Vec<String>) -> std::process::ExitCode {
    let run = async {
        let (listen, d) = parse(args)?;
        let listener = TcpListener::bind(&listen)
            .await
            .map_err(|e| format!("--listen {listen}: {e}"))?;
        eprintln!(
            "fleet-loadgen delay: {listen} -> {} one way +{} µs",
            d.to,
            d.one_way.as_micros()
        );
        serve(listener, d).await.map_err(|e| e.to_string())
    };
    match run.await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet-loadgen delay: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback; its address.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        a
    }

    /// The shortest of `rounds` one-byte round trips to `to`, and the bytes echoed in order.
    async fn min_rtt(to: SocketAddr, rounds: usize) -> (Duration, bool) {
        let mut s = TcpStream::connect(to).await.unwrap();
        s.set_nodelay(true).unwrap();
        let (mut best, mut in_order) = (Duration::MAX, true);
        for i in 0..rounds {
            let b = [i as u8];
            let t = Instant::now();
            s.write_all(&b).await.unwrap();
            let mut got = [0u8; 1];
            s.read_exact(&mut got).await.unwrap();
            best = best.min(t.elapsed());
            in_order &= got == b;
        }
        (best, in_order)
    }

    /// Through the relay, a round trip takes at least twice the one-way delay (what it says it
    /// adds); bytes come back in order; a write four times the relay's buffer passes whole.
    #[tokio::test]
    async fn adds_twice_the_one_way_delay_to_a_round_trip() {
        let target = echo().await;
        let one_way = Duration::from_micros(300);
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_at = l.local_addr().unwrap();
        let d = Delay {
            to: target,
            one_way,
            buffer_bytes: CHUNK,
        };
        tokio::spawn(serve(l, d));
        let (direct, _) = min_rtt(target, 50).await;
        let (through, in_order) = min_rtt(relay_at, 50).await;
        assert!(in_order);
        assert!(
            through >= 2 * one_way,
            "round trip through the relay {through:?} < 2 x {one_way:?} (direct {direct:?})"
        );
        // Four times the buffer, echoed back whole.
        let mut s = TcpStream::connect(relay_at).await.unwrap();
        let sent: Vec<u8> = (0..4 * CHUNK).map(|i| (i % 251) as u8).collect();
        let (mut r, mut w) = s.split();
        let mut back = vec![0u8; sent.len()];
        let (wrote, read) = tokio::join!(w.write_all(&sent), r.read_exact(&mut back));
        wrote.unwrap();
        read.unwrap();
        assert_eq!(back, sent);
    }
}
