//! A fault proxy: one TCP link (an instance to Redis, an instance to another instance's relay
//! address) that the harness can switch between four modes at any time:
//!
//! - [`Mode::Pass`]: forwards both ways.
//! - [`Mode::Refuse`]: the listener is closed (dropped: a connect gets `ECONNREFUSED`) and every
//!   open connection is shut down (`shutdown(SHUT_RDWR)` on both sockets) before it is dropped.
//!   Leaving it re-binds the same port.
//! - [`Mode::Blackhole`]: connections are accepted and kept, nothing is forwarded (the bytes
//!   wait in the proxy and the socket buffers: peers see silence); leaving it lets them through,
//!   as a healed partition does.
//! - [`Mode::Delay`]: every chunk waits that many milliseconds before it is forwarded.
//!
//! The accept loop is a tokio task that selects on the mode channel, so a switch to `Refuse`
//! really closes the listener at once: no thread stays blocked in `accept()` on a "closed"
//! listener to let one more connection through.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Refuse,
    Blackhole,
    /// Milliseconds added to every chunk.
    Delay(u64),
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Pass => write!(f, "pass"),
            Mode::Refuse => write!(f, "refuse"),
            Mode::Blackhole => write!(f, "blackhole"),
            Mode::Delay(ms) => write!(f, "delay {ms} ms"),
        }
    }
}

/// One proxied link; dropping it closes the listener and every connection through it.
pub struct FaultProxy {
    pub name: String,
    pub port: u16,
    mode: watch::Sender<Mode>,
    /// What went wrong inside the proxy itself (a port it could not bind again): a harness
    /// failure, asserted empty by the runs.
    failures: Arc<Mutex<Vec<String>>>,
}

impl FaultProxy {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:target`. Must be called inside
    /// a tokio runtime.
    pub async fn start(name: &str, target: u16) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind the fault proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (tx, rx) = watch::channel(Mode::Pass);
        let failures = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(accept_loop(
            Some(listener),
            port,
            target,
            rx,
            failures.clone(),
        ));
        Self {
            name: name.to_string(),
            port,
            mode: tx,
            failures,
        }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    pub fn failures(&self) -> Vec<String> {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

async fn bind_again(port: u16) -> std::io::Result<TcpListener> {
    let began = Instant::now();
    loop {
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await {
            Ok(l) => return Ok(l),
            Err(e) if began.elapsed() > Duration::from_secs(5) => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn accept_loop(
    mut listener: Option<TcpListener>,
    port: u16,
    target: u16,
    mut rx: watch::Receiver<Mode>,
    failures: Arc<Mutex<Vec<String>>>,
) {
    loop {
        let mode = *rx.borrow_and_update();
        if mode == Mode::Refuse {
            // Closed: the kernel refuses connections to the port from now on.
            drop(listener.take());
            if rx.changed().await.is_err() {
                return;
            }
            continue;
        }
        let l = match listener.take() {
            Some(l) => l,
            None => match bind_again(port).await {
                Ok(l) => l,
                Err(e) => {
                    failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("proxy could not bind 127.0.0.1:{port} again: {e}"));
                    // Stays closed; the run fails on the recorded failure.
                    if rx.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
            },
        };
        tokio::select! {
            changed = rx.changed() => {
                listener = Some(l);
                if changed.is_err() {
                    return;
                }
            }
            accepted = l.accept() => {
                listener = Some(l);
                if let Ok((client, _)) = accepted {
                    tokio::spawn(connection(client, target, rx.clone()));
                }
            }
        }
    }
}

fn cut(fds: [RawFd; 2]) {
    for fd in fds {
        // SAFETY: both sockets are owned by the connection task calling this and still open.
        unsafe {
            libc::shutdown(fd, libc::SHUT_RDWR);
        }
    }
}

/// Waits while the mode is `Blackhole`; false when the connection must be cut (refuse, or the
/// proxy is gone).
async fn wait_open(rx: &mut watch::Receiver<Mode>) -> bool {
    loop {
        let mode = *rx.borrow_and_update();
        match mode {
            Mode::Refuse => return false,
            Mode::Blackhole => {
                if rx.changed().await.is_err() {
                    return false;
                }
            }
            Mode::Pass | Mode::Delay(_) => return true,
        }
    }
}

async fn connection(client: TcpStream, target: u16, mut rx: watch::Receiver<Mode>) {
    let client_fd = client.as_raw_fd();
    if !wait_open(&mut rx).await {
        cut([client_fd, client_fd]);
        return;
    }
    let Ok(server) = TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, target))).await
    else {
        cut([client_fd, client_fd]);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let fds = [client_fd, server.as_raw_fd()];
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    tokio::join!(pump(cr, sw, rx.clone(), fds), pump(sr, cw, rx, fds));
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut rx: watch::Receiver<Mode>,
    fds: [RawFd; 2],
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !wait_open(&mut rx).await {
            cut(fds);
            return;
        }
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return;
                }
                Ok(n) => n,
            },
            changed = rx.changed() => {
                if changed.is_err() {
                    cut(fds);
                    return;
                }
                continue;
            }
        };
        // Read while open; forwarded only once open again (a blackhole holds it), late by the
        // delay.
        if !wait_open(&mut rx).await {
            cut(fds);
            return;
        }
        let mode = *rx.borrow();
        if let Mode::Delay(ms) = mode {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            cut(fds);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    async fn echo_server() -> u16 {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        port
    }

    async fn round_trip(s: &mut TcpStream, msg: &[u8], limit: Duration) -> std::io::Result<()> {
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        tokio::time::timeout(limit, s.read_exact(&mut got))
            .await
            .map_err(|_| std::io::Error::new(ErrorKind::TimedOut, "no echo"))??;
        assert_eq!(got, msg);
        Ok(())
    }

    async fn connect(port: u16) -> std::io::Result<TcpStream> {
        TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await
    }

    /// The harness's own check: a cut proxy refuses (every connect, at once, for as long as it
    /// is cut), an open connection through it is shut down, a restored one forwards again on
    /// the same port, a blackhole is silent and loses nothing, a delay delays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn proxy_modes_do_what_they_say() {
        let target = echo_server().await;
        let proxy = FaultProxy::start("test", target).await;
        let limit = Duration::from_secs(2);

        let mut held = connect(proxy.port).await.expect("pass: connects");
        round_trip(&mut held, b"ping", limit).await.expect("pass");

        proxy.set(Mode::Refuse);
        assert_eq!(proxy.mode(), Mode::Refuse);
        // The open connection is shut down: EOF or an error, within the limit.
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(limit, held.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "a refused proxy left a connection open: {read:?}"
        );
        // Every new connection is refused by the kernel: the listener is really closed. Many
        // attempts, spread over time, so a leftover accept could not hide.
        tokio::time::sleep(Duration::from_millis(50)).await;
        for attempt in 0..50 {
            match connect(proxy.port).await {
                Err(e) => assert_eq!(
                    e.kind(),
                    ErrorKind::ConnectionRefused,
                    "attempt {attempt}: {e}"
                ),
                Ok(_) => panic!("attempt {attempt}: a cut proxy accepted a connection"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        proxy.set(Mode::Pass);
        let began = Instant::now();
        let mut s = loop {
            match connect(proxy.port).await {
                Ok(s) => break s,
                Err(e) => {
                    assert!(
                        began.elapsed() < limit,
                        "restored proxy does not listen: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        round_trip(&mut s, b"again", limit).await.expect("restored");

        proxy.set(Mode::Blackhole);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let err = round_trip(&mut s, b"silence", Duration::from_millis(300))
            .await
            .expect_err("a blackhole forwarded");
        assert_eq!(err.kind(), ErrorKind::TimedOut);
        let mut fresh = connect(proxy.port).await.expect("blackhole accepts");
        fresh.write_all(b"held").await.unwrap();
        proxy.set(Mode::Pass);
        // What the blackhole held arrives once it is healed.
        let mut got = [0u8; 7];
        tokio::time::timeout(limit, s.read_exact(&mut got))
            .await
            .expect("held bytes arrive")
            .unwrap();
        assert_eq!(&got, b"silence");
        let mut got = [0u8; 4];
        tokio::time::timeout(limit, fresh.read_exact(&mut got))
            .await
            .expect("held bytes arrive on the new connection")
            .unwrap();
        assert_eq!(&got, b"held");

        proxy.set(Mode::Delay(150));
        let began = Instant::now();
        round_trip(&mut s, b"slow", limit).await.expect("delayed");
        // Both directions wait.
        assert!(
            began.elapsed() >= Duration::from_millis(300),
            "not delayed: {:?}",
            began.elapsed()
        );
        assert!(proxy.failures().is_empty(), "{:?}", proxy.failures());
    }
}
